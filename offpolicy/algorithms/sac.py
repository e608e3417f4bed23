"""SAC maths shared by both algorithms: the tanh-Gaussian policy, the TD bootstrap, Polyak averaging."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def tanh_log_det_jacobian(pre_tanh: Tensor) -> Tensor:
    """log(1 - tanh(u)^2) per element, in the overflow-free form 2 (log 2 - u - softplus(-2u))."""
    return 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))


def tanh_gaussian_log_prob(pre_tanh: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log-density of a = tanh(u), u ~ N(mean, exp(log_std)^2), summed over the last dim."""
    z = (pre_tanh - mean) * torch.exp(-log_std)
    gauss = -0.5 * z.pow(2) - log_std - 0.5 * math.log(2.0 * math.pi)
    return (gauss - tanh_log_det_jacobian(pre_tanh)).sum(-1)


def tanh_gaussian_sample(mean: Tensor, log_std: Tensor, noise: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Reparameterised action tanh(mean + std * noise) and its log-probability."""
    if noise is None:
        noise = torch.randn_like(mean)
    pre_tanh = mean + torch.exp(log_std) * noise
    return torch.tanh(pre_tanh), tanh_gaussian_log_prob(pre_tanh, mean, log_std)


def squash_log_std(raw: Tensor, log_std_min: float, log_std_max: float) -> Tensor:
    """Map an unbounded head output into [log_std_min, log_std_max] through tanh."""
    return log_std_min + 0.5 * (log_std_max - log_std_min) * (torch.tanh(raw) + 1.0)


def bootstrap_discount(gamma: float, terminated: Tensor) -> Tensor:
    """Per-row discount of the next-state value: 0 on termination, gamma otherwise (truncation keeps it)."""
    return gamma * (1.0 - terminated)


@torch.no_grad()
def soft_update_(target: Sequence[Tensor], online: Sequence[Tensor], tau: float, allowed: Tensor | None = None) -> None:
    """Polyak step target <- target + tau * (online - target); with `allowed` (0/1 tensor) the step is tau * allowed.

    Without `allowed` it is one fused lerp kernel. The gated form stays on the device (a
    tensor weight passed to lerp would be read on the host) and leaves the target exactly
    as it was when `allowed` is 0, the online parameters being finite.
    """
    target, online = list(target), list(online)
    if allowed is None:
        torch._foreach_lerp_(target, online, tau)
        return
    delta = torch._foreach_sub(online, target)
    torch._foreach_mul_(delta, allowed * tau)
    torch._foreach_add_(target, delta)


def finite_rows(*tensors: Tensor) -> Tensor:
    """(B,) bool: row b of every tensor (B,) or (B, D) is finite."""
    ok = None
    for t in tensors:
        row = torch.isfinite(t) if t.dim() == 1 else torch.isfinite(t).all(-1)
        ok = row if ok is None else ok & row
    return ok
