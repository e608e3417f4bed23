"""Categorical (C51) value distributions on a fixed, evenly spaced support."""

from __future__ import annotations

import torch
from torch import Tensor


def categorical_projection(probs: Tensor, reward: Tensor, discount: Tensor, atoms: Tensor) -> Tensor:
    """Project `probs` on atoms moved to `reward + discount * z` back onto the fixed support `atoms`.

    probs: (..., B, K) next-state distribution(s) on `atoms` (K evenly spaced values);
    reward, discount: (B,). Moved atoms are clipped to the support and each one's mass is
    split linearly between its two neighbouring atoms (Bellemare et al. 2017, Alg. 1),
    so the result is a distribution on `atoms` with the same total mass. A row whose reward
    or discount is NaN comes out NaN.
    """
    num_atoms = atoms.shape[0]
    v_min, v_max = atoms[0], atoms[-1]
    delta = (v_max - v_min) / (num_atoms - 1)
    moved = (reward.unsqueeze(-1) + discount.unsqueeze(-1) * atoms).clamp(v_min, v_max)  # (B, K)
    position = (moved - v_min) / delta
    lower = position.floor().clamp(0, num_atoms - 1)
    upper_weight = position - lower  # 0 when the moved atom sits exactly on an atom
    # a NaN reward or log-prob must give a NaN row (the update is then skipped), never an index
    # out of range: NaN.long() is INT64_MIN, a device-side assert on CUDA
    lower_idx = torch.nan_to_num(lower, nan=0.0).long()
    upper_idx = (lower_idx + 1).clamp(max=num_atoms - 1)
    probs = probs.float()
    shape = probs.shape
    lower_idx, upper_idx = lower_idx.expand(shape), upper_idx.expand(shape)
    upper_weight = upper_weight.expand(shape)
    projected = torch.zeros_like(probs)
    projected.scatter_add_(-1, lower_idx, probs * (1.0 - upper_weight))
    projected.scatter_add_(-1, upper_idx, probs * upper_weight)
    return projected


def expected_value(probs: Tensor, atoms: Tensor) -> Tensor:
    """Mean of distribution(s) `probs` (..., K) on `atoms`."""
    return (probs.float() * atoms).sum(-1)
