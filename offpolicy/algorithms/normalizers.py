"""Running statistics kept on the device: observation normaliser and adaptive reward scaler."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def merge_moments(
    mean: Tensor, var: Tensor, count: Tensor, batch_mean: Tensor, batch_var: Tensor, batch_count: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Chan et al. parallel merge of (mean, population var, count) with a batch's moments."""
    new_count = count + batch_count
    ratio = (batch_count / new_count).to(mean.dtype)
    delta = batch_mean - mean
    new_mean = mean + delta * ratio
    m2 = (
        var * (count / new_count).to(var.dtype)
        + batch_var * ratio
        + delta.pow(2) * ratio * (count / new_count).to(var.dtype)
    )
    return new_mean, m2, new_count


class EmpiricalNormalizer(nn.Module):
    """Per-feature running mean/std of observations; `forward` normalises, `update` folds in a batch.

    Updated from replay batches only (FastSAC), never from the inference tick, so every
    action of a tick sees one set of statistics.
    """

    def __init__(self, dim: int, eps: float = 1e-2) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor, allowed: Tensor | None = None) -> None:
        """Fold the rows of `x` (B, dim) into the statistics; with `allowed` (0/1 tensor) only where it is 1."""
        x = x.float()
        batch_var, batch_mean = torch.var_mean(x, dim=0, correction=0)
        mean, var, count = merge_moments(self.mean, self.var, self.count, batch_mean, batch_var, float(x.shape[0]))
        if allowed is not None:  # select, not blend: a skipped batch may hold NaN
            keep = allowed > 0
            mean, var = torch.where(keep, mean, self.mean), torch.where(keep, var, self.var)
            count = torch.where(keep, count, self.count)
        self.mean.copy_(mean)
        self.var.copy_(var)
        self.count.copy_(count)

    def forward(self, x: Tensor) -> Tensor:
        """(x - mean) / (std + eps)."""
        return (x - self.mean) / (self.var.sqrt() + self.eps)


class RewardScaler(nn.Module):
    """FlashSAC adaptive reward scaling: r / max(sqrt(Var[G] + eps), max|G| / G_max).

    G is the running discounted return per env (G <- gamma (1 - done) G + r, reset on
    done); its variance is pooled over envs and steps, and the peak |G| keeps scaled
    returns inside the critic support [-G_max, G_max].

    The peak |G| lags the values the critic has to represent while episodes are still
    short (early in training a discounted return seen so far is a fraction of the one the
    improving policy earns), so targets can pile up on the support's top atom for a while.
    `horizon_bound=True` (not the reference) adds a third term, max|r| / ((1 - gamma) G_max):
    no discounted return of rewards seen so far can exceed max|r| / (1 - gamma), so scaled
    values then stay inside the support from the first step.
    """

    def __init__(
        self, num_envs: int, gamma: float, g_max: float, eps: float = 1e-8, horizon_bound: bool = False
    ) -> None:
        super().__init__()
        self.gamma, self.g_max, self.eps, self.horizon_bound = gamma, g_max, eps, horizon_bound
        self.register_buffer("discounted_return", torch.zeros(num_envs))
        self.register_buffer("return_abs_max", torch.zeros(()))
        self.register_buffer("reward_abs_max", torch.zeros(()))
        self.register_buffer("return_mean", torch.zeros(()))
        self.register_buffer("return_var", torch.ones(()))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, reward: Tensor, terminated: Tensor, truncated: Tensor) -> None:
        """Advance every env's discounted return by one step and fold it into the statistics.

        A vector step with a non-finite reward is left out entirely (returns and statistics
        stay as they were): one NaN would otherwise poison the scale of every later reward.
        """
        reward = reward.float()
        keep = torch.isfinite(reward).all()
        done = torch.maximum(terminated.float(), truncated.float())
        g = self.gamma * (1.0 - done) * self.discounted_return + reward
        batch_var, batch_mean = torch.var_mean(g, correction=0)
        mean, var, count = merge_moments(
            self.return_mean, self.return_var, self.count, batch_mean, batch_var, float(g.shape[0])
        )
        self.discounted_return.copy_(torch.where(keep, g, self.discounted_return))
        self.return_abs_max.copy_(
            torch.where(keep, torch.maximum(self.return_abs_max, g.abs().max()), self.return_abs_max)
        )
        self.reward_abs_max.copy_(
            torch.where(keep, torch.maximum(self.reward_abs_max, reward.abs().max()), self.reward_abs_max)
        )
        self.return_mean.copy_(torch.where(keep, mean, self.return_mean))
        self.return_var.copy_(torch.where(keep, var, self.return_var))
        self.count.copy_(torch.where(keep, count, self.count))

    def denominator(self) -> Tensor:
        """The divisor applied to rewards."""
        out = torch.maximum(torch.sqrt(self.return_var + self.eps), self.return_abs_max / self.g_max)
        if self.horizon_bound:
            out = torch.maximum(out, self.reward_abs_max / ((1.0 - self.gamma) * self.g_max))
        return out

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # checkpoints written before `reward_abs_max` existed: start its running max afresh
        state_dict.setdefault(prefix + "reward_abs_max", torch.zeros(()))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, reward: Tensor) -> Tensor:
        """Scaled rewards."""
        return reward / self.denominator()
