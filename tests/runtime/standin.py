"""A minimal actor/critic standing in for the real algorithms in runtime tests.

It implements exactly the interface of `offpolicy.algorithms.make_algorithm`'s
products (`actor`, `updates_per_step`, `batch_size`, `explore`, `act`,
`update_phase`, `state_dict`/`load_state_dict`) with a small deterministic
policy gradient (DDPG-style, Lillicrap et al. 2016) so the runtime can be
exercised end to end in milliseconds. Not for training runs.

Tests load it through `runtime.algorithm_factory=standin:make_standin` (set by
`algo=standin` from tests/runtime/conf, and by runtime_helpers.BASE_CFG), with
tests/runtime on the import path.

Exploration state lives here, in the learner: a per-env Gaussian noise scale
drawn from the algorithm's own generator and redrawn for every env whose
reset mask is set.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torch import nn

from offpolicy.algorithms.contract import UpdatesStopped
from offpolicy.replay_buffer import ReplayBuffer


def _squash(x: torch.Tensor) -> torch.Tensor:
    """Softsign: keeps raw, unnormalised observations from blowing up the tiny networks."""
    return x / (1.0 + x.abs())


def _mlp(inp: int, out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out)
    )


class StandinActor(nn.Module):
    """tanh-squashed MLP over the actor observation."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int) -> None:
        super().__init__()
        self.net = _mlp(obs_dim, action_dim, hidden)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.tanh(self.net(_squash(obs["actor"])))


class StandinAlgorithm:
    """Tiny DDPG behind the algorithm interface (tests only)."""

    def __init__(
        self,
        spec: Any,
        device: torch.device | str,
        updates_per_step: int = 1,
        batch_size: int = 64,
        hidden: int = 32,
        gamma: float = 0.99,
        tau: float = 0.05,
        noise_std_max: float = 0.3,
        lr: float = 1e-3,
        seed: int = 0,
        update_delay_s: float = 0.0,
        explore_delay_s: float = 0.0,
        update_step_s: float = 0.0,
    ) -> None:
        self.device = torch.device(device)
        self.updates_per_step = int(updates_per_step)
        self.batch_size = int(batch_size)
        self.gamma, self.tau = gamma, tau
        self.noise_std_max = noise_std_max
        self.update_delay_s = update_delay_s
        """test hook: random sleep up to this long inside each update phase"""
        self.explore_delay_s = explore_delay_s
        """test hook: random sleep up to this long inside each explore call"""
        self.update_step_s = update_step_s
        """test hook: every update sleeps this long between its critic and its actor step (a long phase)"""
        self.stop_between_updates: Any = None
        """set by the learner: once set, the phase stops after its current update, as the real algorithms'"""
        obs_dim = spec.obs_dims["actor"]
        act_dim = spec.action_dim
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        torch.manual_seed(seed)
        self.actor = StandinActor(obs_dim, act_dim, hidden).to(self.device)
        self.critic = _mlp(obs_dim + act_dim, 1, hidden).to(self.device)
        self.actor_target = copy.deepcopy(self.actor)
        self.critic_target = copy.deepcopy(self.critic)
        self.lr = lr
        self.noise_std = torch.zeros(spec.num_envs, 1, device=self.device)
        """per-env exploration noise scale: the learner-side exploration state"""
        self._host_rng = torch.Generator().manual_seed(seed + 1)

    def _sleep(self, max_s: float) -> None:
        if max_s > 0:
            time.sleep(float(torch.rand((), generator=self._host_rng)) * max_s)

    @torch.no_grad()
    def explore(self, obs: dict[str, torch.Tensor], reset_mask: torch.Tensor) -> torch.Tensor:
        """Noisy actions in [-1, 1]; envs whose reset mask is set draw a new noise scale."""
        self._sleep(self.explore_delay_s)
        fresh = torch.rand(self.noise_std.shape, device=self.device, generator=self.generator) * self.noise_std_max
        self.noise_std = torch.where(reset_mask.view(-1, 1), fresh, self.noise_std)
        mean = self.actor(obs)
        noise = torch.randn(mean.shape, device=self.device, generator=self.generator) * self.noise_std
        return (mean + noise).clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic actions in [-1, 1]."""
        return self.actor(obs)

    def snapshot_actor(self) -> None:
        """Freeze a copy of the actor for evaluation."""
        self.snapshot = copy.deepcopy(self.actor)

    @torch.no_grad()
    def act_snapshot(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic actions of the frozen copy."""
        if getattr(self, "snapshot", None) is None:
            self.snapshot_actor()
        return self.snapshot(obs)

    def update_phase(self, replay: ReplayBuffer, num_updates: int) -> dict[str, torch.Tensor]:
        """`num_updates` critic+actor steps on uniform replay samples; metrics stay on the device."""
        self._sleep(self.update_delay_s)
        critic_loss = actor_loss = torch.zeros((), device=self.device)
        for done in range(1, num_updates + 1):
            b = replay.sample(self.batch_size)
            with torch.no_grad():
                next_q = self.critic_target(
                    torch.cat([_squash(b.next_obs["actor"]), self.actor_target(b.next_obs)], -1)
                )
                target = b.reward.unsqueeze(-1) + self.gamma * (1.0 - b.terminated.unsqueeze(-1)) * next_q
            q = self.critic(torch.cat([_squash(b.obs["actor"]), b.action], -1))
            critic_loss = (q - target).pow(2).mean()
            self._sgd_step(critic_loss, self.critic)
            if self.update_step_s > 0:
                time.sleep(self.update_step_s)
            actor_loss = -self.critic(torch.cat([_squash(b.obs["actor"]), self.actor(b.obs)], -1)).mean()
            self._sgd_step(actor_loss, self.actor)
            with torch.no_grad():
                for net, tgt in ((self.actor, self.actor_target), (self.critic, self.critic_target)):
                    for p, tp in zip(net.parameters(), tgt.parameters(), strict=True):
                        tp.lerp_(p, self.tau)
            if self.stop_between_updates is not None and self.stop_between_updates.is_set():
                raise UpdatesStopped(done)
        return {"loss/critic": critic_loss.detach(), "loss/actor": actor_loss.detach()}

    def _sgd_step(self, loss: torch.Tensor, net: nn.Module) -> None:
        # Plain SGD by hand: torch.optim would import torch._dynamo, seconds of startup per test run.
        params = list(net.parameters())
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            scale = (1.0 / (norm + 1e-6)).clamp(max=1.0)  # clip the global gradient norm at 1
            torch._foreach_add_(params, torch._foreach_mul(grads, scale), alpha=-self.lr)

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic_target": self.critic_target.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key in ("actor", "critic", "actor_target", "critic_target"):
            getattr(self, key).load_state_dict(state[key])


def make_standin(cfg: Any, spec: Any, device: torch.device | str) -> StandinAlgorithm:
    """Factory with `make_algorithm`'s signature; reads optional keys from `cfg`."""
    keys = (
        "updates_per_step",
        "batch_size",
        "hidden",
        "gamma",
        "tau",
        "noise_std_max",
        "lr",
        "seed",
        "update_delay_s",
        "explore_delay_s",
        "update_step_s",
    )
    kwargs = {k: cfg[k] for k in keys if cfg is not None and k in cfg and cfg[k] is not None}
    return StandinAlgorithm(spec, device, **kwargs)
