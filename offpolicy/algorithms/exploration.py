"""Per-env exploration state that lives in the learner (design property 3)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def truncated_zeta_cdf(mu: float, max_len: int) -> Tensor:
    """CDF of P(k) proportional to k^-mu on k = 1..max_len."""
    k = torch.arange(1, max_len + 1, dtype=torch.float64)
    pmf = k.pow(-mu)
    return torch.cumsum(pmf / pmf.sum(), 0).float()


class ZetaNoiseHold(nn.Module):
    """FlashSAC noise repetition: each env holds its Gaussian noise for k steps, k ~ truncated Zeta(mu).

    An env draws fresh noise and a fresh hold length when its hold runs out or when its
    episode (re)starts (`reset_mask`), so no noise leaks across episodes.
    """

    def __init__(self, num_envs: int, action_dim: int, mu: float, max_len: int) -> None:
        super().__init__()
        self.max_len = int(max_len)
        self.register_buffer("cdf", truncated_zeta_cdf(mu, max_len))
        self.register_buffer("noise", torch.zeros(num_envs, action_dim))
        self.register_buffer("hold", torch.zeros(num_envs, dtype=torch.int64))
        """steps the current noise is held for"""
        self.register_buffer("count", torch.zeros(num_envs, dtype=torch.int64))
        """steps the current noise has been used (0 forces a draw)"""

    def lengths_from_uniform(self, u: Tensor) -> Tensor:
        """Inverse-CDF map of uniforms u in [0, 1) to hold lengths in 1..max_len."""
        return ((u.unsqueeze(-1) >= self.cdf).sum(-1) + 1).clamp(max=self.max_len)

    @torch.no_grad()
    def forward(self, reset_mask: Tensor) -> Tensor:
        """The noise (num_envs, action_dim) to use this step; advances the per-env hold counters."""
        renew = reset_mask.bool() | (self.count >= self.hold)
        fresh = torch.randn_like(self.noise)
        lengths = self.lengths_from_uniform(torch.rand(self.hold.shape, device=self.hold.device))
        self.noise.copy_(torch.where(renew.unsqueeze(-1), fresh, self.noise))
        self.hold.copy_(torch.where(renew, lengths, self.hold))
        self.count.copy_(torch.where(renew, torch.zeros_like(self.count), self.count) + 1)
        return self.noise

    def reset_all(self) -> None:
        """Force a fresh draw for every env on the next step."""
        self.count.zero_()
        self.hold.zero_()
