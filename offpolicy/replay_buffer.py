"""Learner-local replay: a fixed-capacity ring of transitions on the learner's device.

There is no CPU replay path: storage, the write pointer's fill size and sampling
all live on `device`. Sampling draws indices on the device against the fill size
kept as a device tensor, so `sample` has static shapes, never syncs the host and
can be captured in a CUDA graph.

Layout is step-major: row `t * num_envs + e` holds env `e` of the `t`-th stored
vector step (modulo capacity). Whole vector steps are written as one contiguous
block, so `add` is a handful of plain copies.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

ArrayLike = torch.Tensor | np.ndarray


@dataclass
class TransitionBatch:
    """A batch of transitions, all tensors on the replay's device with batch size rows."""

    obs: dict[str, torch.Tensor]
    """observation per key the action was chosen on, (B, obs_dims[key]) float32"""
    action: torch.Tensor
    """normalised action in [-1, 1], (B, action_dim) float32"""
    reward: torch.Tensor
    """reward, (B,) float32"""
    next_obs: dict[str, torch.Tensor]
    """next observation per key; the pre-reset observation where the episode ended"""
    terminated: torch.Tensor
    """1.0 where the episode terminated (cut the bootstrap), else 0.0; (B,) float32"""
    truncated: torch.Tensor
    """1.0 where the episode hit the time limit or a physics failure (keep the bootstrap); (B,) float32"""

    def to(self, device: torch.device | str) -> TransitionBatch:
        """Copy every tensor to `device`."""
        return TransitionBatch(
            obs={k: v.to(device) for k, v in self.obs.items()},
            action=self.action.to(device),
            reward=self.reward.to(device),
            next_obs={k: v.to(device) for k, v in self.next_obs.items()},
            terminated=self.terminated.to(device),
            truncated=self.truncated.to(device),
        )

    def __len__(self) -> int:
        return self.reward.shape[0]


def _as_tensor(x: ArrayLike, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
    return x.to(device=device, dtype=dtype, non_blocking=True)


class ReplayBuffer:
    """Fixed-capacity ring of transitions on `device`, filled a whole vector step at a time."""

    def __init__(
        self,
        capacity: int,
        obs_dims: dict[str, int],
        action_dim: int,
        device: torch.device | str,
        num_envs: int | None = None,
    ) -> None:
        """`capacity` in transitions; with `num_envs` it is rounded down to whole vector steps."""
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.device = torch.device(device)
        self.obs_dims = dict(obs_dims)
        self.action_dim = int(action_dim)
        self.num_envs = num_envs
        if num_envs is not None:
            if capacity < num_envs:
                raise ValueError(f"replay capacity {capacity} is smaller than one vector step ({num_envs} envs)")
            capacity = (capacity // num_envs) * num_envs
        self.capacity = int(capacity)
        dev, f32 = self.device, torch.float32
        self.obs = {k: torch.zeros(self.capacity, d, device=dev, dtype=f32) for k, d in self.obs_dims.items()}
        self.next_obs = {k: torch.zeros(self.capacity, d, device=dev, dtype=f32) for k, d in self.obs_dims.items()}
        self.action = torch.zeros(self.capacity, self.action_dim, device=dev, dtype=f32)
        self.reward = torch.zeros(self.capacity, device=dev, dtype=f32)
        self.terminated = torch.zeros(self.capacity, device=dev, dtype=f32)
        self.truncated = torch.zeros(self.capacity, device=dev, dtype=f32)
        self._ptr = 0
        """next row to write (host int: `add` runs outside any captured graph)"""
        self._size = 0
        """rows filled so far, host copy (never read back from the device)"""
        self._total_added = 0
        self.size_t = torch.zeros((), device=dev, dtype=torch.int64)
        """rows filled so far as a device tensor: what `sample` draws against"""

    def __len__(self) -> int:
        return self._size

    @property
    def total_added(self) -> int:
        """Transitions ever added (host counter, no device sync)."""
        return self._total_added

    def add(
        self,
        obs: dict[str, ArrayLike],
        action: ArrayLike,
        reward: ArrayLike,
        next_obs: dict[str, ArrayLike],
        terminated: ArrayLike,
        truncated: ArrayLike,
    ) -> None:
        """Append one vector step (n rows of each argument; numpy or tensors, any device)."""
        n = int(reward.shape[0])
        if n > self.capacity:
            raise ValueError(f"cannot add {n} rows to a replay of capacity {self.capacity}")
        start = self._ptr
        end = start + n
        if end <= self.capacity:
            self._write(slice(start, end), slice(0, n), obs, action, reward, next_obs, terminated, truncated)
        else:  # wrap: two contiguous blocks
            first = self.capacity - start
            self._write(
                slice(start, self.capacity), slice(0, first), obs, action, reward, next_obs, terminated, truncated
            )
            self._write(slice(0, n - first), slice(first, n), obs, action, reward, next_obs, terminated, truncated)
        self._ptr = end % self.capacity
        self._total_added += n
        new_size = min(self._size + n, self.capacity)
        if new_size != self._size:
            self._size = new_size
            self.size_t.fill_(new_size)

    def _write(self, dst: slice, src: slice, obs, action, reward, next_obs, terminated, truncated) -> None:
        dev, f32 = self.device, torch.float32
        for k in self.obs_dims:
            self.obs[k][dst].copy_(_as_tensor(obs[k][src], dev, f32))
            self.next_obs[k][dst].copy_(_as_tensor(next_obs[k][src], dev, f32))
        self.action[dst].copy_(_as_tensor(action[src], dev, f32))
        self.reward[dst].copy_(_as_tensor(reward[src], dev, f32))
        self.terminated[dst].copy_(_as_tensor(terminated[src], dev, f32))
        self.truncated[dst].copy_(_as_tensor(truncated[src], dev, f32))

    def sample_indices(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Uniform row indices over the filled part, drawn on the device (no host sync)."""
        raw = torch.randint(0, 2**62, (batch_size,), device=self.device, generator=generator)
        # clamp_min keeps an empty buffer from dividing by zero (callers wait for learning_starts anyway)
        return raw % self.size_t.clamp_min(1)

    def gather(self, idx: torch.Tensor) -> TransitionBatch:
        """The transitions at row indices `idx` (a device tensor)."""
        return TransitionBatch(
            obs={k: v[idx] for k, v in self.obs.items()},
            action=self.action[idx],
            reward=self.reward[idx],
            next_obs={k: v[idx] for k, v in self.next_obs.items()},
            terminated=self.terminated[idx],
            truncated=self.truncated[idx],
        )

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TransitionBatch:
        """`batch_size` transitions drawn uniformly with replacement, on the device."""
        return self.gather(self.sample_indices(batch_size, generator))

    def newest(self, n: int) -> TransitionBatch:
        """The last `n` rows written, oldest first (tests and diagnostics)."""
        n = min(n, self._size)
        idx = (torch.arange(self._ptr - n, self._ptr, device=self.device) % self.capacity).long()
        return self.gather(idx)

    def state_dict(self) -> dict:
        """Storage and pointers, for checkpoints."""
        state = {f.name: getattr(self, f.name) for f in fields(TransitionBatch) if f.name not in ("obs", "next_obs")}
        state.update({f"obs/{k}": v for k, v in self.obs.items()})
        state.update({f"next_obs/{k}": v for k, v in self.next_obs.items()})
        state.update(ptr=self._ptr, size=self._size, total_added=self._total_added)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict` (capacity and dims must match)."""
        for f in fields(TransitionBatch):
            if f.name not in ("obs", "next_obs"):
                getattr(self, f.name).copy_(state[f.name])
        for k in self.obs_dims:
            self.obs[k].copy_(state[f"obs/{k}"])
            self.next_obs[k].copy_(state[f"next_obs/{k}"])
        self._ptr, self._size, self._total_added = int(state["ptr"]), int(state["size"]), int(state["total_added"])
        self.size_t.fill_(self._size)
