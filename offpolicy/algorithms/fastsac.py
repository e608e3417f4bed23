"""FastSAC: SAC with twin C51 critics, tuned for massively parallel simulation."""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from envs.core import EnvSpec
from offpolicy.algorithms.base import (
    LossScaler,
    OffPolicyAlgorithm,
    bootstrap_discount,
    frozen,
    load_optimizer_state_dict,
    make_adam,
    optimizer_state_dict,
    set_requires_grad,
    soft_update_,
    tanh_gaussian_sample,
)
from offpolicy.algorithms.distributional import categorical_projection, expected_value
from offpolicy.algorithms.networks import FastSACActor, FastSACCritic
from offpolicy.algorithms.normalizers import EmpiricalNormalizer


class FastSAC(OffPolicyAlgorithm):
    """FastSAC (Seo et al., "Learning Sim-to-Real Humanoid Locomotion in 15 Minutes", arXiv 2512.01996).

    Facts taken from the reference (amazon-far/holosoma, `agents/fast_sac`): a global
    batch of 8192, 8 updates per vector step with the actor updated on updates 1 and 5
    (index 1 mod `policy_frequency`), gamma 0.97, tau 0.125 applied after every update,
    1-step returns; AdamW (lr 3e-4, betas (0.9, 0.95), weight decay 1e-3) for actor and
    critics and AdamW (betas (0.9, 0.95), torch's default decay 0.01) for log-alpha;
    twin C51 critics (101 atoms on [-20, 20]) each trained on the projection of its own
    target distribution (no clipped double-Q), the actor maximising their mean; critic
    widths 768-384-192 and actor 512-256-128 with LayerNorm + SiLU; target entropy
    -0 * |A|, initial temperature 0.001 updated on every critic update from the
    next-state log-probabilities; log-std tanh-squashed into [-5, 0]; zero-initialised
    heads; bf16 autocast; observation normalisation updated from replay batches only;
    one large replay sample per phase split across its updates.
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
        self.atoms = torch.linspace(float(cfg.v_min), float(cfg.v_max), int(cfg.num_atoms), device=dev)

        self.actor_lr = torch.tensor(float(cfg.actor_lr), device=dev)
        self.critic_lr = torch.tensor(float(cfg.critic_lr), device=dev)
        self.alpha_lr = torch.tensor(float(cfg.alpha_lr), device=dev)
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        self.actor_opt = make_adam(self.actor_params, self.actor_lr, cfg.betas, float(cfg.weight_decay))
        self.critic_opt = make_adam(self.critic_params, self.critic_lr, cfg.betas, float(cfg.weight_decay))
        self.alpha_opt = make_adam([self.log_alpha], self.alpha_lr, cfg.betas, float(cfg.alpha_weight_decay))
        self.scaler = LossScaler(dev, enabled=self.amp_dtype == torch.float16)

        self._critic_loss = self.maybe_compile(self._critic_loss_fn)
        self._actor_loss = self.maybe_compile(self._actor_loss_fn)
        self._explore_fn = self.maybe_compile(self._explore_impl)
        self._act_fn = self.maybe_compile(self._act_impl)

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
        }

    def _actor_loss_fn(self, obs_a: Tensor, obs_c: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        with self.autocast():
            mean, log_std = self.actor.dist(obs_a)
            action, log_prob = tanh_gaussian_sample(mean.float(), log_std.float())
            q = expected_value(F.softmax(self.critic(obs_c, action).float(), dim=-1), self.atoms).mean(0)
            loss = (self.log_alpha.exp().detach() * log_prob - q).mean()
        return loss, {"entropy": -log_prob.detach().mean(), "action_std": log_std.detach().float().exp().mean()}

    # ------------------------------------------------------------------ one phase

    def _normalized(self, batch) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        obs_a, next_obs_a = batch.obs[self.actor_key], batch.next_obs[self.actor_key]
        obs_c, next_obs_c = batch.obs[self.critic_key], batch.next_obs[self.critic_key]
        if not self.obs_normalization:
            return obs_a, next_obs_a, obs_c, next_obs_c
        norm = self.actor.normalizer
        norm.update(torch.cat([obs_a, next_obs_a]))
        obs_a, next_obs_a = norm(obs_a), norm(next_obs_a)
        if self.critic_normalizer is None:
            return obs_a, next_obs_a, obs_a, next_obs_a
        self.critic_normalizer.update(torch.cat([obs_c, next_obs_c]))
        return obs_a, next_obs_a, self.critic_normalizer(obs_c), self.critic_normalizer(next_obs_c)

    def _phase(self, replay, schedule: tuple[bool, ...]) -> dict[str, Tensor]:
        batch_size = self.batch_size
        batch = replay.sample(batch_size * len(schedule))  # one large sample, split across the updates
        obs_a, next_obs_a, obs_c, next_obs_c = self._normalized(batch)
        sums: dict[str, Tensor] = {}
        counts: dict[str, int] = {}

        def add(name: str, value: Tensor) -> None:
            sums[name] = sums[name] + value.detach() if name in sums else value.detach().float()
            counts[name] = counts.get(name, 0) + 1

        for i, update_actor in enumerate(schedule):
            rows = slice(i * batch_size, (i + 1) * batch_size)
            loss, info = self._critic_loss(
                obs_c[rows],
                batch.action[rows],
                batch.reward[rows],
                next_obs_a[rows],
                next_obs_c[rows],
                batch.terminated[rows],
            )
            self.critic_opt.zero_grad(set_to_none=True)
            self.scaler.step(loss, self.critic_opt, self.critic_params, self.max_grad_norm)
            add("loss/critic", loss)
            add("train/q_mean", info["q_mean"])
            add("train/target_q_max", info["target_q_max"])
            add("train/next_entropy", -info["next_log_prob"].mean())
            if self.autotune_alpha:
                alpha_loss = (-self.log_alpha.exp() * (info["next_log_prob"].detach() + self.target_entropy)).mean()
                self.alpha_opt.zero_grad(set_to_none=True)
                alpha_loss.backward()
                self.alpha_opt.step()
                add("loss/alpha", alpha_loss)
            if update_actor:
                with frozen(self.critic):
                    actor_loss, actor_info = self._actor_loss(obs_a[rows], obs_c[rows])
                    self.actor_opt.zero_grad(set_to_none=True)
                    self.scaler.step(actor_loss, self.actor_opt, self.actor_params, self.max_grad_norm)
                add("loss/actor", actor_loss)
                add("train/entropy", actor_info["entropy"])
                add("train/action_std", actor_info["action_std"])
            soft_update_(list(self.target_critic.parameters()), self.critic_params, self.tau)
        metrics = {name: total / counts[name] for name, total in sums.items()}
        metrics["train/alpha"] = self.log_alpha.detach().exp().squeeze(0)
        return metrics

    # ------------------------------------------------------------------ inference

    def _explore_impl(self, obs_actor: Tensor) -> Tensor:
        with self.autocast():
            mean, log_std = self.actor.dist(self.actor.normalize(obs_actor))
        return tanh_gaussian_sample(mean.float(), log_std.float())[0]

    def _act_impl(self, obs_actor: Tensor) -> Tensor:
        with self.autocast():
            mean, _ = self.actor.dist(self.actor.normalize(obs_actor))
        return torch.tanh(mean.float())

    def _explore(self, obs_actor: Tensor, reset_mask: Tensor) -> Tensor:
        return self._explore_fn(obs_actor)  # no per-env exploration state: fresh noise every step

    def _act(self, obs_actor: Tensor) -> Tensor:
        return self._act_fn(obs_actor)

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
        self.scaler.load_state_dict(state["scaler"])
