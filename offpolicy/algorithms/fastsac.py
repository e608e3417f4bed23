"""FastSAC: SAC with twin C51 critics, tuned for massively parallel simulation."""

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
from offpolicy.algorithms.networks import FastSACActor, FastSACCritic
from offpolicy.algorithms.normalizers import EmpiricalNormalizer
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


def value_support(reward_range: tuple[float, float], gamma: float) -> tuple[float, float]:
    """C51 support [v_min, v_max] = [min(0, r_low), max(0, r_high)] / (1 - gamma) from per-step reward bounds.

    Every discounted return lies there: a sum of gamma^t r_t with r_t in [r_low, r_high],
    cut short or not by termination (hence the 0), is at most max(0, r_high) / (1 - gamma)
    and at least min(0, r_low) / (1 - gamma). Truncated episodes bootstrap, so the horizon
    is the infinite one.
    """
    low, high = float(reward_range[0]), float(reward_range[1])
    if not low <= high:
        raise ValueError(f"reward_range low must not exceed high, got {reward_range}")
    return min(0.0, low) / (1.0 - gamma), max(0.0, high) / (1.0 - gamma)


class FastSAC(OffPolicyAlgorithm):
    """FastSAC (Seo et al., "Learning Sim-to-Real Humanoid Locomotion in 15 Minutes", arXiv 2512.01996).

    Facts taken from the reference (amazon-far/holosoma, `agents/fast_sac`): a global
    batch of 8192, 8 updates per vector step with the actor updated on updates 1 and 5
    (index 1 mod `policy_frequency`), gamma 0.97, tau 0.125 applied after every update,
    1-step returns; AdamW (lr 3e-4, betas (0.9, 0.95), weight decay 1e-3) for actor and
    critics and AdamW (betas (0.9, 0.95), torch's default decay 0.01) for log-alpha;
    twin C51 critics (101 atoms) each trained on the projection of its own target
    distribution (no clipped double-Q), the actor maximising their mean; critic widths
    768-384-192 and actor 512-256-128 with LayerNorm + SiLU; target entropy -0 * |A|,
    initial temperature 0.001 updated on every critic update from the next-state
    log-probabilities; log-std tanh-squashed into [-5, 0]; zero-initialised heads; bf16
    autocast; observation normalisation updated from replay batches only; one large
    replay sample per phase split across its updates; a replay of about 1000 steps per
    env (1M transitions with 1024 envs; the reference keeps 1024 per env).

    Where it departs from the reference, and why:

    - C51 support: the reference fixes [-20, 20], sized for its own reward scale. Here it
      is derived from the task's per-step reward range and gamma (`value_support`) unless
      `v_min`/`v_max` are set: Gymnasium rewards of ~10-15 a step would otherwise pin the
      value at the top atom (`train/q_support_saturation` reports the target mass there).
    - Entropy is that of the normalised action in [-1, 1]. The reference rescales tanh's
      output to the action bounds and adds the log-Jacobian of that rescaling,
      sum(log half-range), to log pi: a constant, so it only shifts the entropy target.
      It is 0 for the tasks with actions in [-1, 1] and -15.6 nats for Humanoid's +-0.4;
      left out so that a target entropy means the same on every task (and the published
      Humanoid run was tuned without it).
    - 1024 training envs where the reference simulates 4096 on the GPU: on CPU physics a
      vector step of 1024 envs already takes tens of milliseconds (docs/decisions.md, "1024
      training envs and 10,000 random steps first"), and
      the batch and updates per vector step are kept, so each transition is sampled about
      four times as often as in the reference.
    - Learning starts after `train.learning_starts` env steps (10,000: ~10 vector steps of
      1024 envs, like the reference's 10 vector steps) of uniform random actions drawn by
      the learner; the reference acts with its initial policy from the start (mean 0,
      std e^-2.5: near-zero actions).
    - An update whose batch, loss or gradients are not finite is skipped on the device
      (`_phase`); the reference would apply it.
    """

    def __init__(self, cfg: DictConfig, spec: EnvSpec, device: torch.device) -> None:
        super().__init__(cfg, spec, device)
        dev = self.device
        self.policy_frequency = int(cfg.policy_frequency)
        self.actor_update_offset = min(1, self.policy_frequency - 1)
        self.max_grad_norm = float(cfg.max_grad_norm)
        self.autotune_alpha = bool(cfg.autotune_alpha)
        self.obs_normalization = bool(cfg.obs_normalization)
        self.target_entropy = -float(cfg.target_entropy_ratio) * self.action_dim

        self.actor = FastSACActor(
            self.actor_obs_dim,
            self.action_dim,
            int(cfg.actor_hidden_dim),
            bool(cfg.use_layer_norm),
            float(cfg.log_std_min),
            float(cfg.log_std_max),
            self.obs_normalization,
            float(cfg.obs_norm_eps),
        ).to(dev)
        self.critic = FastSACCritic(
            self.critic_obs_dim,
            self.action_dim,
            int(cfg.critic_hidden_dim),
            int(cfg.num_atoms),
            int(cfg.num_critics),
            bool(cfg.use_layer_norm),
        ).to(dev)
        self.target_critic = copy.deepcopy(self.critic)
        set_requires_grad(self.target_critic, False)
        separate_critic_obs = self.critic_key != self.actor_key
        self.critic_normalizer = (
            EmpiricalNormalizer(self.critic_obs_dim, float(cfg.obs_norm_eps)).to(dev)
            if self.obs_normalization and separate_critic_obs
            else None
        )
        self.log_alpha = nn.Parameter(torch.full((1,), math.log(float(cfg.alpha_init)), device=dev))
        self.v_min, self.v_max = self._support(cfg, spec)
        self.atoms = torch.linspace(self.v_min, self.v_max, int(cfg.num_atoms), device=dev)

        self.actor_lr = torch.tensor(float(cfg.actor_lr), device=dev)
        self.critic_lr = torch.tensor(float(cfg.critic_lr), device=dev)
        # optional cosine decay of the actor's and critics' rates over gradient updates (off: flat, as the
        # reference); both follow one count of the updates taken
        self.lr_decay_updates = int(cfg.lr_decay_updates)
        if self.lr_decay_updates < 0 or not 0.0 < float(cfg.lr_end_ratio) <= 1.0:
            raise ValueError(
                f"algo.lr_decay_updates={cfg.lr_decay_updates} must be >= 0 (0: no decay) and "
                f"algo.lr_end_ratio={cfg.lr_end_ratio} in (0, 1]"
            )
        self.lr_schedules = {
            name: LRSchedule(base, base, base * float(cfg.lr_end_ratio), 0, self.lr_decay_updates)
            for name, base in (("actor", float(cfg.actor_lr)), ("critic", float(cfg.critic_lr)))
        }
        self.lr_step = torch.zeros((), device=dev)
        self.alpha_lr = torch.tensor(float(cfg.alpha_lr), device=dev)
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        self.target_params = list(self.target_critic.parameters())
        self.actor_opt = make_adam(self.actor_params, self.actor_lr, cfg.betas, float(cfg.weight_decay))
        self.critic_opt = make_adam(self.critic_params, self.critic_lr, cfg.betas, float(cfg.weight_decay))
        self.alpha_opt = make_adam([self.log_alpha], self.alpha_lr, cfg.betas, float(cfg.alpha_weight_decay))
        self.scaler = LossScaler(dev, enabled=self.amp_dtype == torch.float16)

        self._critic_loss = self.maybe_compile(self._critic_loss_fn)
        self._actor_loss = self.maybe_compile(self._actor_loss_fn)

    def _support(self, cfg: DictConfig, spec: EnvSpec) -> tuple[float, float]:
        """(v_min, v_max): the configured values, else derived from the task's reward range and gamma."""
        if cfg.v_min is not None and cfg.v_max is not None:
            low, high = float(cfg.v_min), float(cfg.v_max)
        elif spec.reward_range is None:
            raise ValueError(
                f"algo.v_min/algo.v_max are null and task {spec.name!r} declares no reward_range to derive "
                "them from: set both (e.g. algo.v_min=-100 algo.v_max=500)"
            )
        else:
            derived = value_support(spec.reward_range, self.gamma)
            low = derived[0] if cfg.v_min is None else float(cfg.v_min)
            high = derived[1] if cfg.v_max is None else float(cfg.v_max)
        if not low < high:
            raise ValueError(f"the C51 support needs v_min < v_max, got [{low}, {high}]")
        return low, high

    # ------------------------------------------------------------------ schedule

    def _schedule(self, num_updates: int) -> tuple[bool, ...]:
        f, start = self.policy_frequency, self.total_updates
        return tuple((start + i) % f == self.actor_update_offset for i in range(num_updates))

    def _changes_policy(self, schedule: tuple[bool, ...]) -> bool:
        return self.obs_normalization or any(schedule)

    # ------------------------------------------------------------------ losses (compiled when on)

    @torch.no_grad()
    def _td_target(
        self, reward: Tensor, next_obs_a: Tensor, next_obs_c: Tensor, terminated: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Projected soft TD target (E, B, K), one per critic from its own target, and log pi(a'|s')."""
        mean, log_std = self.actor.dist(next_obs_a)
        next_action, next_log_prob = tanh_gaussian_sample(mean.float(), log_std.float())
        discount = bootstrap_discount(self.gamma, terminated)  # truncated rows keep the bootstrap
        target_probs = F.softmax(self.target_critic(next_obs_c, next_action).float(), dim=-1)
        # entropy bonus folded into the reward: r + d * (z - alpha * log pi)
        soft_reward = reward - discount * self.log_alpha.exp() * next_log_prob
        return categorical_projection(target_probs, soft_reward, discount, self.atoms), next_log_prob

    def _critic_loss_fn(
        self, obs_c: Tensor, action: Tensor, reward: Tensor, next_obs_a: Tensor, next_obs_c: Tensor, terminated: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        with self.autocast():
            target, next_log_prob = self._td_target(reward, next_obs_a, next_obs_c, terminated)
            log_probs = F.log_softmax(self.critic(obs_c, action).float(), dim=-1)
            # each critic learns from its own target distribution; losses summed over critics
            loss = -(target * log_probs).sum(-1).mean(-1).sum(0)
        with torch.no_grad():
            q = expected_value(log_probs.exp(), self.atoms)
        return loss, {
            "next_log_prob": next_log_prob,
            "q_mean": q.mean(),
            "target_q_max": expected_value(target, self.atoms).max(),
            # target mass clipped onto the ends of the support: near 0 unless the support is too narrow
            "support_top": target[..., -1].mean(),
            "support_bottom": target[..., 0].mean(),
        }

    def _actor_loss_fn(self, obs_a: Tensor, obs_c: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        with self.autocast():
            mean, log_std = self.actor.dist(obs_a)
            action, log_prob = tanh_gaussian_sample(mean.float(), log_std.float())
            q = expected_value(F.softmax(self.critic(obs_c, action).float(), dim=-1), self.atoms).mean(0)
            loss = (self.log_alpha.exp().detach() * log_prob - q).mean()
        return loss, {"entropy": -log_prob.detach().mean(), "action_std": log_std.detach().float().exp().mean()}

    # ------------------------------------------------------------------ one phase

    def _normalized(self, batch, allowed: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Observations through the normalisers, whose statistics take in the batch only where `allowed`."""
        obs_a, next_obs_a = batch.obs[self.actor_key], batch.next_obs[self.actor_key]
        obs_c, next_obs_c = batch.obs[self.critic_key], batch.next_obs[self.critic_key]
        if not self.obs_normalization:
            return obs_a, next_obs_a, obs_c, next_obs_c
        norm = self.actor.normalizer
        norm.update(torch.cat([obs_a, next_obs_a]), allowed)
        obs_a, next_obs_a = norm(obs_a), norm(next_obs_a)
        if self.critic_normalizer is None:
            return obs_a, next_obs_a, obs_a, next_obs_a
        self.critic_normalizer.update(torch.cat([obs_c, next_obs_c]), allowed)
        return obs_a, next_obs_a, self.critic_normalizer(obs_c), self.critic_normalizer(next_obs_c)

    def _phase(self, replay, schedule: tuple[bool, ...]) -> dict[str, Tensor]:
        """One replay sample split across the updates; each update is gated by its own validity.

        An update is valid while its rows (observations, action, reward, flags), its losses
        and (without fp16 loss scaling) its gradients are finite. Each step of the update,
        critic, temperature, actor, then the Polyak step, is taken only if everything before
        it in the update was valid: a non-finite batch, the case that occurs (NaN from the
        physics), moves nothing. The observation statistics skip the whole phase's sample if
        any of it is non-finite. Skipped updates count in `train/nonfinite_updates` and
        `nonfinite_streak`.
        """
        batch_size = self.batch_size
        batch = replay.sample(batch_size * len(schedule))  # one large sample, split across the updates
        rows_ok = finite_rows(
            *batch.obs.values(), *batch.next_obs.values(), batch.action, batch.reward, batch.terminated
        )
        obs_a, next_obs_a, obs_c, next_obs_c = self._normalized(batch, rows_ok.all())
        metrics = PhaseMetrics()
        nonfinite = torch.zeros((), device=self.device)

        for i, update_actor in enumerate(schedule):
            rows = slice(i * batch_size, (i + 1) * batch_size)
            ok = rows_ok[rows].all().float()
            if self.lr_decay_updates:
                self.lr_schedules["critic"].set_lr(self.critic_lr, self.lr_step)
                self.lr_schedules["actor"].set_lr(self.actor_lr, self.lr_step)
            loss, info = self._critic_loss(
                obs_c[rows],
                batch.action[rows],
                batch.reward[rows],
                next_obs_a[rows],
                next_obs_c[rows],
                batch.terminated[rows],
            )
            self.critic_opt.zero_grad(set_to_none=True)
            ok = self.scaler.step(loss, self.critic_opt, self.critic_params, self.max_grad_norm, allowed=ok)
            metrics.add("loss/critic", loss, ok)
            metrics.add("train/q_mean", info["q_mean"], ok)
            metrics.add("train/target_q_max", info["target_q_max"], ok)
            metrics.add("train/q_support_saturation", info["support_top"], ok)
            metrics.add("train/q_support_saturation_low", info["support_bottom"], ok)
            metrics.add("train/next_entropy", -info["next_log_prob"].mean(), ok)
            if self.autotune_alpha:
                alpha_loss = (-self.log_alpha.exp() * (info["next_log_prob"].detach() + self.target_entropy)).mean()
                self.alpha_opt.zero_grad(set_to_none=True)
                ok = finite_step(alpha_loss, self.alpha_opt, [self.log_alpha], allowed=ok)
                metrics.add("loss/alpha", alpha_loss, ok)
            if update_actor:
                with frozen(self.critic):
                    actor_loss, actor_info = self._actor_loss(obs_a[rows], obs_c[rows])
                    self.actor_opt.zero_grad(set_to_none=True)
                    ok = self.scaler.step(actor_loss, self.actor_opt, self.actor_params, self.max_grad_norm, allowed=ok)
                metrics.add("loss/actor", actor_loss, ok)
                metrics.add("train/entropy", actor_info["entropy"], ok)
                metrics.add("train/action_std", actor_info["action_std"], ok)
            soft_update_(self.target_params, self.critic_params, self.tau, allowed=ok)
            self.lr_step.add_(ok)
            nonfinite = nonfinite + self._end_update(ok)
        out = metrics.means()
        out["train/alpha"] = self.log_alpha.detach().exp().squeeze(0)
        out["train/lr"] = self.critic_lr.detach().clone()
        out["train/nonfinite_updates"] = nonfinite
        return out

    # ------------------------------------------------------------------ inference

    def _explore(self, obs_actor: Tensor, reset_mask: Tensor) -> Tensor:
        # no per-env exploration state (`reset_mask` unused): fresh noise every step
        with self.autocast():
            mean, log_std = self.actor.dist(self.actor.normalize(obs_actor))
        return tanh_gaussian_sample(mean.float(), log_std.float())[0]

    def _act(self, obs_actor: Tensor) -> Tensor:
        with self.autocast():
            mean, _ = self.actor.dist(self.actor.normalize(obs_actor))
        return torch.tanh(mean.float())

    # ------------------------------------------------------------------ checkpoints

    def _state(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "critic_normalizer": None if self.critic_normalizer is None else self.critic_normalizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_opt": optimizer_state_dict(self.actor_opt),
            "critic_opt": optimizer_state_dict(self.critic_opt),
            "alpha_opt": optimizer_state_dict(self.alpha_opt),
            "lr_step": self.lr_step.detach().clone(),
            "scaler": self.scaler.state_dict(),
        }

    def _load_state(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.target_critic.load_state_dict(state["target_critic"])
        if self.critic_normalizer is not None:
            self.critic_normalizer.load_state_dict(state["critic_normalizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        load_optimizer_state_dict(self.actor_opt, state["actor_opt"])
        load_optimizer_state_dict(self.critic_opt, state["critic_opt"])
        load_optimizer_state_dict(self.alpha_opt, state["alpha_opt"])
        # a checkpoint from before the decay option: every update it counted was taken
        self.lr_step.copy_(state.get("lr_step", torch.tensor(float(state["counters"]["total_updates"]))))
        if self.lr_decay_updates:  # the rates of the step it resumes at (the optimizers hold these tensors)
            for name, lr in (("actor", self.actor_lr), ("critic", self.critic_lr)):
                self.lr_schedules[name].set_lr(lr, self.lr_step)
        self.scaler.load_state_dict(state["scaler"])
