"""A new algorithm: DDPG (Lillicrap et al. 2016) behind the learner's contract (README, "Add an algorithm")."""

import copy

import torch
from torch import nn


def mlp(inp: int, out: int, hidden: int, *tail: nn.Module) -> nn.Sequential:
    layers = [nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out)]
    return nn.Sequential(*layers, *tail)


class Actor(nn.Module):
    """Actor observation -> action in [-1, 1] (the learner scales actions to the task's bounds)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int) -> None:
        super().__init__()
        self.net = mlp(obs_dim, action_dim, hidden, nn.Tanh())

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(obs["actor"])


class DDPG:
    """Deterministic actor, one critic, Gaussian exploration noise, soft target updates."""

    PARTS = ("actor", "critic", "actor_target", "critic_target", "actor_opt", "critic_opt")
    """what a checkpoint holds"""

    def __init__(self, cfg, spec, device) -> None:
        self.device = torch.device(device)
        self.updates_per_step, self.batch_size = cfg.updates_per_step, cfg.batch_size
        self.gamma, self.tau, self.noise_std = cfg.gamma, cfg.tau, cfg.noise_std
        obs_dim, action_dim = spec.obs_dims["actor"], spec.action_dim
        self.actor = Actor(obs_dim, action_dim, cfg.hidden).to(self.device)
        self.critic = mlp(obs_dim + action_dim, 1, cfg.hidden).to(self.device)
        self.actor_target, self.critic_target = copy.deepcopy(self.actor), copy.deepcopy(self.critic)
        self.snapshot = copy.deepcopy(self.actor)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.lr)

    @torch.no_grad()
    def explore(self, obs, reset_mask):
        """Training rows' actions; `reset_mask` marks rows starting an episode (for per-env noise state)."""
        action = self.actor(obs)
        return (action + self.noise_std * torch.randn_like(action)).clamp(-1.0, 1.0)

    @torch.no_grad()
    def act(self, obs):
        return self.actor(obs)

    def snapshot_actor(self) -> None:
        """Freeze the actor for a snapshot evaluation; `act_snapshot` acts with the frozen copy."""
        self.snapshot.load_state_dict(self.actor.state_dict())

    @torch.no_grad()
    def act_snapshot(self, obs):
        return self.snapshot(obs)

    def update_phase(self, replay, num_updates: int) -> dict[str, torch.Tensor]:
        """`num_updates` gradient updates on replay samples; metrics stay on the device (no host sync)."""
        for _ in range(num_updates):
            b = replay.sample(self.batch_size)
            with torch.no_grad():
                next_q = self.q(self.critic_target, b.next_obs, self.actor_target(b.next_obs))
                target = b.reward + self.gamma * (1.0 - b.terminated) * next_q  # a truncation bootstraps
            critic_loss = (self.q(self.critic, b.obs, b.action) - target).pow(2).mean()
            self.step(self.critic_opt, critic_loss)
            actor_loss = -self.q(self.critic, b.obs, self.actor(b.obs)).mean()
            self.step(self.actor_opt, actor_loss)
            with torch.no_grad():
                for net, target_net in ((self.actor, self.actor_target), (self.critic, self.critic_target)):
                    torch._foreach_lerp_(list(target_net.parameters()), list(net.parameters()), self.tau)
        return {"loss/critic": critic_loss.detach(), "loss/actor": actor_loss.detach()}

    def q(self, critic: nn.Module, obs: dict[str, torch.Tensor], action: torch.Tensor) -> torch.Tensor:
        return critic(torch.cat([obs["actor"], action], dim=-1)).squeeze(-1)

    def step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def state_dict(self) -> dict:
        return {name: getattr(self, name).state_dict() for name in self.PARTS}

    def load_state_dict(self, state: dict) -> None:
        for name in self.PARTS:
            getattr(self, name).load_state_dict(state[name])


def make_ddpg(cfg, spec, device) -> DDPG:
    """What the runner calls (`runtime.algorithm_factory`): the `algo` group, the env spec, the device."""
    return DDPG(cfg, spec, device)
