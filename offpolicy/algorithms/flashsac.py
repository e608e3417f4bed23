"""FlashSAC: fast and stable SAC with normalised networks and a categorical critic."""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from envs.core import EnvSpec
from offpolicy.algorithms.contract import OffPolicyAlgorithm
from offpolicy.algorithms.distributional import categorical_projection, expected_value
from offpolicy.algorithms.exploration import ZetaNoiseHold
from offpolicy.algorithms.networks import (
    FlashSACActor,
    FlashSACCritic,
    keep_stats_if_,
    renormalize_modules,
    running_stats,
)
from offpolicy.algorithms.normalizers import RewardScaler
from offpolicy.algorithms.optim import (
    LossScaler,
    LRSchedule,
    PhaseMetrics,
    finite_step,
    frozen,
    load_optimizer_state_dict,
    make_adam,
    optimizer_state_dict,
    set_requires_grad,
)
from offpolicy.algorithms.sac import bootstrap_discount, finite_rows, soft_update_, tanh_gaussian_sample


def unified_target_entropy(action_dim: int, sigma: float) -> float:
    """FlashSAC's target entropy 1/2 |A| log(2 pi e sigma^2): a Gaussian of std sigma per action dim."""
    return 0.5 * action_dim * math.log(2.0 * math.pi * math.e * sigma**2)


class FlashSAC(OffPolicyAlgorithm):
    """FlashSAC (Kim, Lee et al., "FlashSAC: Fast and Stable Off-Policy Reinforcement Learning for
    High-Dimensional Robot Control", arXiv 2604.04539).

    Facts taken from the official code (Holiday-Robot/FlashSAC, `flash_rl/agents/flashSAC`):
    BatchNorm on the raw input instead of observation normalisation, a bias-free
    unit-norm linear embedder, inverted-residual blocks (expand x4, BatchNorm, ReLU)
    and a final RMSNorm; every linear row and norm scale renormalised after each
    optimizer step; twin categorical critics (101 bins on [-G_max, G_max], G_max 5)
    with adaptive reward scaling and the target taken from the critic with the lower
    mean (min-Q selection); cross-batch value prediction ((s, a) and (s', a') in one
    forward pass so BatchNorm statistics are shared); a tanh-Gaussian actor with
    log-std in [-10, 2] updated on every 2nd update from cross-batch (s, s') BatchNorm
    statistics against min-Q of the critics on running statistics; the unified target
    entropy 1/2 |A| log(2 pi e 0.15^2); exploration noise held for k ~ Zeta(2) steps
    (k <= 16); initial temperature 0.01; tau 0.01; Adam at 3e-4 decaying to 1.5e-4;
    fp16 autocast with loss scaling; GPU recipe batch 2048 with 2 updates per vector
    step of 1024 envs, critic 256 wide x 2 blocks, actor 128 wide x 2 blocks.

    Where it departs from the reference, and why:

    - Exploration noise is held per env: each env draws its own hold length and redraws
      when its hold runs out or its episode restarts. The reference holds one noise draw
      for one length across all envs, so every env switches on the same step. Held per
      env here because exploration state is reset per env from the collector's done flags
      (design property 3: a new episode never inherits the last one's noise), which a
      single shared hold cannot do without also cutting every other env's hold.
    - The replay holds 1M transitions (conf/replay/default.yaml, shared with FastSAC) where the
      reference's recipe keeps 10M: 1M fits a CPU-only machine's memory. The humanoids keep the
      reference's 10M (conf/algo_env/flashsac_humanoid.yaml): 1M holds too short a span of their
      experience, and the training population fell whenever its last falls left the replay
      (docs/decisions.md, "FlashSAC Humanoid: 10M replay").
    - An update whose batch, loss or gradients are not finite is skipped on the device
      (`_phase`); the reference would apply it.
    - Optional, off by default and on for Humanoid: `reward_scale_horizon_bound=true` also
      bounds the reward scale by max|r| / ((1 - gamma) G_max) (`RewardScaler`), so values fit
      the support while the returns grow faster than the running scale follows. With the
      reference's rule and temperature alone a large share of the target mass sat on the top
      atom early in the Humanoid runs; the bound with an initial (and maximum) temperature of
      1e-3 nearly removed it (docs/decisions.md, "FlashSAC Humanoid: horizon-bound reward scale
      and temperature 1e-3").
    """

    exploration_state_rows = True  # the held noise is per training row

    def __init__(self, cfg: DictConfig, spec: EnvSpec, device: torch.device) -> None:
        super().__init__(cfg, spec, device)
        dev = self.device
        self.actor_update_period = int(cfg.actor_update_period)
        self.target_entropy = unified_target_entropy(self.action_dim, float(cfg.target_sigma))
        momentum, expansion = float(cfg.bn_momentum), int(cfg.expansion)
        self.actor = FlashSACActor(
            self.actor_obs_dim,
            self.action_dim,
            int(cfg.actor_hidden_dim),
            int(cfg.actor_num_blocks),
            expansion,
            momentum,
            float(cfg.log_std_min),
            float(cfg.log_std_max),
        ).to(dev)
        self.critic = FlashSACCritic(
            self.critic_obs_dim,
            self.action_dim,
            int(cfg.critic_hidden_dim),
            int(cfg.critic_num_blocks),
            expansion,
            momentum,
            int(cfg.num_bins),
            int(cfg.num_critics),
        ).to(dev)
        self.target_critic = copy.deepcopy(self.critic)
        set_requires_grad(self.target_critic, False)
        self.log_temp = nn.Parameter(torch.full((1,), math.log(float(cfg.temp_init)), device=dev))
        self.log_temp_max = None if cfg.temp_max is None else math.log(float(cfg.temp_max))
        """upper bound of the temperature (None: unbounded, as the reference)"""
        g_max = float(cfg.normalized_g_max)
        self.atoms = torch.linspace(-g_max, g_max, int(cfg.num_bins), device=dev)
        self.reward_scaler = (
            RewardScaler(self.num_envs, self.gamma, g_max, horizon_bound=bool(cfg.reward_scale_horizon_bound)).to(dev)
            if cfg.reward_scaling
            else None
        )
        self.noise_hold = ZetaNoiseHold(
            self.num_envs, self.action_dim, float(cfg.noise_zeta_mu), int(cfg.noise_zeta_max)
        ).to(dev)

        self.lr_schedule = LRSchedule(
            float(cfg.lr_init),
            float(cfg.lr_peak),
            float(cfg.lr_end),
            int(cfg.lr_warmup_updates),
            int(cfg.lr_decay_updates),
        )
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        self.target_params = list(self.target_critic.parameters())
        self.lrs = {name: torch.tensor(float(cfg.lr_init), device=dev) for name in ("actor", "critic", "temp")}
        self.opt_steps = {name: torch.zeros((), device=dev) for name in self.lrs}
        self.actor_opt = make_adam(self.actor_params, self.lrs["actor"], (0.9, 0.999), 0.0, decoupled=False)
        self.critic_opt = make_adam(self.critic_params, self.lrs["critic"], (0.9, 0.999), 0.0, decoupled=False)
        self.temp_opt = make_adam([self.log_temp], self.lrs["temp"], (0.9, 0.999), 0.0, decoupled=False)
        self.scaler = LossScaler(dev, enabled=self.amp_dtype == torch.float16)

        self.actor_stats = running_stats(self.actor)
        self.critic_stats = running_stats(self.critic)

        self._critic_loss = self.maybe_compile(self._critic_loss_fn)
        self._actor_loss = self.maybe_compile(self._actor_loss_fn)
        self._renormalize_actor = self.maybe_compile(lambda ok: renormalize_modules(self.actor, ok))
        self._renormalize_critic = self.maybe_compile(lambda ok: renormalize_modules(self.critic, ok))
        self._snapshot_actor_stats = self.maybe_compile(lambda: [t.clone() for t in self.actor_stats])
        self._snapshot_critic_stats = self.maybe_compile(lambda: [t.clone() for t in self.critic_stats])
        self._keep_actor_stats = self.maybe_compile(lambda saved, ok: keep_stats_if_(self.actor_stats, saved, ok))
        self._keep_critic_stats = self.maybe_compile(lambda saved, ok: keep_stats_if_(self.critic_stats, saved, ok))

    # ------------------------------------------------------------------ schedule

    def _schedule(self, num_updates: int) -> tuple[bool, ...]:
        start, period = self.total_updates, self.actor_update_period
        return tuple((start + i) % period == 0 for i in range(num_updates))

    def _changes_policy(self, schedule: tuple[bool, ...]) -> bool:
        return any(schedule)  # actor weights and its BatchNorm statistics change only in actor updates

    def observe(self, reward: Tensor, terminated: Tensor, truncated: Tensor) -> None:
        """Fold one ingested vector step into the running return statistics of the reward scaler.

        With CUDA graphs the ~30 small kernels of the update are one captured graph: launched one by one
        they cost the learner's host more than the device takes to run them, every tick, in its ingest.
        """
        if self.reward_scaler is None:
            return
        reward, terminated, truncated = (
            torch.as_tensor(x, device=self.device) for x in (reward, terminated, truncated)
        )
        if self.use_cuda_graphs:
            self._captured_call(("observe", tuple(reward.shape)), self._observe_flat)(reward, terminated, truncated)
        else:
            self._observe_flat(reward, terminated, truncated)

    @torch.no_grad()
    def _observe_flat(self, reward: Tensor, terminated: Tensor, truncated: Tensor) -> None:
        f32 = torch.float32
        self.reward_scaler.update(reward.to(f32), terminated.to(f32), truncated.to(f32))

    # ------------------------------------------------------------------ losses (compiled when on)

    def _actor_loss_fn(self, obs_a: Tensor, next_obs_a: Tensor, obs_c: Tensor) -> tuple[Tensor, Tensor]:
        batch_size = obs_a.shape[0]
        with self.autocast():
            # cross-batch: s and s' share the actor's BatchNorm statistics
            mean, log_std = self.actor.dist(torch.cat([obs_a, next_obs_a]), training=True)
            action, log_prob = tanh_gaussian_sample(mean[:batch_size], log_std[:batch_size])
            q = expected_value(F.softmax(self.critic(obs_c, action, training=False).float(), dim=-1), self.atoms)
            loss = (self.log_temp.exp().detach() * log_prob - q.min(0).values).mean()
        return loss, -log_prob.detach().mean()

    @torch.no_grad()
    def _td_target(
        self, obs_c: Tensor, action: Tensor, reward: Tensor, next_obs_a: Tensor, next_obs_c: Tensor, terminated: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Projected soft TD target (B, K) from the lower-mean target critic, the cross-batch inputs, log pi(a'|s')."""
        batch_size = obs_c.shape[0]
        mean, log_std = self.actor.dist(next_obs_a, training=False)
        next_action, next_log_prob = tanh_gaussian_sample(mean, log_std)
        obs_all = torch.cat([obs_c, next_obs_c])
        action_all = torch.cat([action, next_action])
        # cross-batch: the target critic normalises (s, a) and (s', a') together
        target_logits = self.target_critic(obs_all, action_all, training=True, update_stats=False)
        next_probs = F.softmax(target_logits[:, batch_size:].float(), dim=-1)  # (E, B, K)
        lowest = expected_value(next_probs, self.atoms).argmin(0)  # min-Q selection per row
        index = lowest.view(1, -1, 1).expand(1, -1, next_probs.shape[-1])
        selected = next_probs.gather(0, index).squeeze(0)  # (B, K)
        discount = bootstrap_discount(self.gamma, terminated)  # truncated rows keep the bootstrap
        soft_reward = reward - discount * self.log_temp.exp() * next_log_prob
        return categorical_projection(selected, soft_reward, discount, self.atoms), obs_all, action_all, next_log_prob

    def _critic_loss_fn(
        self, obs_c: Tensor, action: Tensor, reward: Tensor, next_obs_a: Tensor, next_obs_c: Tensor, terminated: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        batch_size = obs_c.shape[0]
        with self.autocast():
            target, obs_all, action_all, _ = self._td_target(obs_c, action, reward, next_obs_a, next_obs_c, terminated)
            # cross-batch: the online critic also sees (s, a) and (s', a') in one pass; loss on the (s, a) half
            logits = self.critic(obs_all, action_all, training=True)
            log_probs = F.log_softmax(logits[:, :batch_size].float(), dim=-1)
            loss = -(target.unsqueeze(0) * log_probs).sum(-1).mean()
        return loss, {
            "q_mean": expected_value(log_probs.detach().exp(), self.atoms).mean(),
            # target mass on the ends of [-G_max, G_max]: reward scaling should keep it near 0
            "support_top": target[..., -1].mean(),
            "support_bottom": target[..., 0].mean(),
        }

    # ------------------------------------------------------------------ one phase

    def _phase(self, replay, schedule: tuple[bool, ...]) -> dict[str, Tensor]:
        """One replay sample split across the updates; each update is gated by its own validity.

        An update is valid while its rows, its losses and (without fp16 loss scaling) its
        gradients are finite. Each step of the update, actor (with its BatchNorm statistics,
        renormalisation and lr-schedule step), temperature, critic (likewise), then the
        Polyak step, is taken only if everything before it in the update was valid: a
        non-finite batch, the case that occurs (NaN from the physics), moves nothing.
        Skipped updates count in `train/nonfinite_updates` and `nonfinite_streak`.
        """
        batch_size = self.batch_size
        batch = replay.sample(batch_size * len(schedule))
        obs_a, next_obs_a = batch.obs[self.actor_key], batch.next_obs[self.actor_key]
        obs_c, next_obs_c = batch.obs[self.critic_key], batch.next_obs[self.critic_key]
        reward = batch.reward if self.reward_scaler is None else self.reward_scaler(batch.reward)
        rows_ok = finite_rows(*batch.obs.values(), *batch.next_obs.values(), batch.action, reward, batch.terminated)
        metrics = PhaseMetrics()
        nonfinite = torch.zeros((), device=self.device)

        for i, update_actor in enumerate(schedule):
            rows = slice(i * batch_size, (i + 1) * batch_size)
            ok = rows_ok[rows].all().float()
            if update_actor:
                saved = self._snapshot_actor_stats()
                with frozen(self.critic):
                    actor_loss, entropy = self._actor_loss(obs_a[rows], next_obs_a[rows], obs_c[rows])
                    self.lr_schedule.set_lr(self.lrs["actor"], self.opt_steps["actor"])
                    self.actor_opt.zero_grad(set_to_none=True)
                    ok = self.scaler.step(actor_loss, self.actor_opt, self.actor_params, allowed=ok)
                self.opt_steps["actor"].add_(ok)
                self._keep_actor_stats(saved, ok)
                self._renormalize_actor(ok)
                temp = self.log_temp.exp()
                temp_loss = (temp * (entropy - self.target_entropy)).sum()
                self.lr_schedule.set_lr(self.lrs["temp"], self.opt_steps["temp"])
                self.temp_opt.zero_grad(set_to_none=True)
                ok = finite_step(temp_loss, self.temp_opt, [self.log_temp], allowed=ok)
                if self.log_temp_max is not None:  # on the device, in place: graph-safe
                    with torch.no_grad():
                        self.log_temp.clamp_(max=self.log_temp_max)
                self.opt_steps["temp"].add_(ok)
                metrics.add("loss/actor", actor_loss, ok)
                metrics.add("loss/alpha", temp_loss, ok)
                metrics.add("train/entropy", entropy, ok)
            saved = self._snapshot_critic_stats()
            critic_loss, info = self._critic_loss(
                obs_c[rows],
                batch.action[rows],
                reward[rows],
                next_obs_a[rows],
                next_obs_c[rows],
                batch.terminated[rows],
            )
            self.lr_schedule.set_lr(self.lrs["critic"], self.opt_steps["critic"])
            self.critic_opt.zero_grad(set_to_none=True)
            ok = self.scaler.step(critic_loss, self.critic_opt, self.critic_params, allowed=ok)
            self.opt_steps["critic"].add_(ok)
            self._keep_critic_stats(saved, ok)
            self._renormalize_critic(ok)
            soft_update_(self.target_params, self.critic_params, self.tau, allowed=ok)
            metrics.add("loss/critic", critic_loss, ok)
            metrics.add("train/q_mean", info["q_mean"], ok)
            metrics.add("train/q_support_saturation", info["support_top"], ok)
            metrics.add("train/q_support_saturation_low", info["support_bottom"], ok)
            nonfinite = nonfinite + self._end_update(ok)
        out = metrics.means()
        out["train/alpha"] = self.log_temp.detach().exp().squeeze(0)
        out["train/lr"] = self.lrs["critic"].detach().clone()
        out["train/nonfinite_updates"] = nonfinite
        if self.reward_scaler is not None:
            out["train/reward_scale"] = self.reward_scaler.denominator().detach()
        return out

    # ------------------------------------------------------------------ inference

    def _project_averaged(self, averaged: nn.Module) -> None:
        # every optimizer step puts the actor's rows and norm scales back on their spheres; an average of
        # points on a sphere lies inside it, so the averaged actor is projected the same way
        renormalize_modules(averaged)

    def _explore(self, obs_actor: Tensor, reset_mask: Tensor) -> Tensor:
        mean, log_std = self.actor.dist(obs_actor, training=False)
        noise = self.noise_hold(reset_mask)
        return torch.tanh(mean + log_std.exp() * noise)

    def _act(self, obs_actor: Tensor) -> Tensor:
        return torch.tanh(self.actor.dist(obs_actor, training=False)[0])

    # ------------------------------------------------------------------ checkpoints

    def _state(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "log_temp": self.log_temp.detach().clone(),
            "reward_scaler": None if self.reward_scaler is None else self.reward_scaler.state_dict(),
            "actor_opt": optimizer_state_dict(self.actor_opt),
            "critic_opt": optimizer_state_dict(self.critic_opt),
            "temp_opt": optimizer_state_dict(self.temp_opt),
            "opt_steps": {k: v.detach().clone() for k, v in self.opt_steps.items()},
            "scaler": self.scaler.state_dict(),
        }

    def _load_state(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        with torch.no_grad():
            self.log_temp.copy_(state["log_temp"])
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])
        load_optimizer_state_dict(self.actor_opt, state["actor_opt"])
        load_optimizer_state_dict(self.critic_opt, state["critic_opt"])
        load_optimizer_state_dict(self.temp_opt, state["temp_opt"])
        for name, step in self.opt_steps.items():
            step.copy_(state["opt_steps"][name])
        self.scaler.load_state_dict(state["scaler"])
        self.noise_hold.reset_all()
