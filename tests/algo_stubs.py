"""Deterministic stand-ins for the algorithm tests: a fixed replay and critics with values known by hand."""

from __future__ import annotations

import torch
from torch import nn

from envs.core import EnvSpec
from offpolicy.replay_buffer import TransitionBatch


class FixedReplay:
    """Stands in for the replay: `sample(n)` returns rows 0..n-1 of a fixed batch (cycled), in order."""

    def __init__(self, batch: TransitionBatch) -> None:
        self.batch = batch

    def sample(self, batch_size: int) -> TransitionBatch:
        idx = torch.arange(batch_size, device=self.batch.reward.device) % len(self.batch)  # graph-capturable
        b = self.batch
        return TransitionBatch(
            obs={k: v[idx] for k, v in b.obs.items()},
            action=b.action[idx],
            reward=b.reward[idx],
            next_obs={k: v[idx] for k, v in b.next_obs.items()},
            terminated=b.terminated[idx],
            truncated=b.truncated[idx],
        )


def random_batch(spec: EnvSpec, rows: int, seed: int = 0) -> TransitionBatch:
    """`rows` random transitions shaped by `spec` (actions in [-1, 1], N(0, 1) rewards, a few terminations)."""
    gen = torch.Generator().manual_seed(seed)
    return TransitionBatch(
        obs={k: torch.randn(rows, d, generator=gen) for k, d in spec.obs_dims.items()},
        action=torch.rand(rows, spec.action_dim, generator=gen) * 2 - 1,
        reward=torch.randn(rows, generator=gen),
        next_obs={k: torch.randn(rows, d, generator=gen) for k, d in spec.obs_dims.items()},
        terminated=(torch.rand(rows, generator=gen) < 0.1).float(),
        truncated=torch.zeros(rows),
    )


class PointMassCritic(nn.Module):
    """Stub critic ensemble: member e puts all its mass on atom `atom_index[e]`, whatever the input."""

    def __init__(self, atom_index: list[int], num_atoms: int) -> None:
        super().__init__()
        logits = torch.full((len(atom_index), 1, num_atoms), -50.0)
        for member, atom in enumerate(atom_index):
            logits[member, 0, atom] = 50.0
        self.register_buffer("logits", logits)

    def forward(self, obs: torch.Tensor, action: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return self.logits.expand(-1, obs.shape[0], -1)
