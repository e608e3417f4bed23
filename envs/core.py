"""The `NpEnv` contract: numpy-only batched environments with auto-reset.

Everything the collector touches goes through this contract. It never imports
torch: the collector process must stay free of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ACTOR_OBS_KEY = "actor"
"""The observation key the actor reads (design: `obs` holds the actor observation)."""


@dataclass(frozen=True)
class EnvSpec:
    """Static description of a batched environment; dimensions come from here, never from YAML."""

    name: str
    """registry name, e.g. `ant`"""
    num_envs: int
    """number of parallel environments (rows of every array)"""
    obs_dims: dict[str, int]
    """feature width per observation key (`actor`, optionally `critic`)"""
    action_dim: int
    """width of the action vector"""
    action_low: np.ndarray
    """lower action bound per dimension (float32)"""
    action_high: np.ndarray
    """upper action bound per dimension (float32)"""
    dt: float
    """seconds of simulated time per env step (timestep x frame skip)"""
    max_episode_steps: int
    """time limit after which an episode is truncated"""
    gymnasium_id: str = ""
    """the Gymnasium environment whose semantics this task reproduces"""
    gymnasium_kwargs: dict[str, Any] = field(default_factory=dict)
    """keyword options passed to Gymnasium that this task matches"""
    reward_range: tuple[float, float] | None = None
    """bounds (low, high) of one step's reward where the task has them (value supports are sized from it)"""
    dm_control_id: str = ""
    """the DeepMind Control Suite `domain-task` whose semantics this task reproduces (`envs.dmc.reference_env`)"""
    tracking_terms: tuple[str, ...] = ()
    """per-step tracking quantities whose episode sums `info["episode_tracking"]` reports (`envs.tracking`)"""


class NpEnvState:
    """What one `reset()` or `step()` returns; all arrays have `num_envs` rows.

    `obs` is the observation to act on next: for envs that finished this step it
    is already the first observation of the new episode. The observation that
    ended the episode (needed to bootstrap truncated episodes) is in
    `info["final_obs"]`, a dict of full arrays equal to `obs` on rows that did
    not finish.

    An env may hand back `obs` and the done flags before it has computed the rest:
    given `finish`, the state calls it on the first read of `reward` or `info`
    (it returns the reward and the entries to add to `info`). The collector
    publishes the observation before it reads them, so that work runs while the
    learner infers the next action instead of before it. The env finishes a
    pending state itself before its next `step`, `reset` or `reset_rows`.

    Every `step` returns new arrays and never writes into arrays an earlier call
    returned, so callers may keep them (tests/envs/test_np_env_reference.py);
    only `reset_rows` writes the new first observations into the latest `obs`.
    """

    __slots__ = ("obs", "terminated", "truncated", "_reward", "_info", "_finish")

    def __init__(
        self,
        obs: dict[str, np.ndarray],
        reward: np.ndarray | None,
        terminated: np.ndarray,
        truncated: np.ndarray,
        info: dict[str, Any],
        finish: Callable[[], tuple[np.ndarray, dict[str, Any]]] | None = None,
    ) -> None:
        if reward is None and finish is None:
            raise ValueError("a state without a reward needs `finish` to compute it")
        self.obs = obs
        self.terminated = terminated
        self.truncated = truncated
        self._reward = reward
        self._info = info
        self._finish = finish

    @property
    def pending(self) -> bool:
        """True until the deferred part (`reward`, the `info` entries `finish` adds) has been computed."""
        return self._finish is not None

    def complete(self) -> None:
        """Compute the deferred part now (once; a no-op when there is none or it is done)."""
        finish, self._finish = self._finish, None
        if finish is not None:
            self._reward, extra = finish()
            self._info.update(extra)

    @property
    def reward(self) -> np.ndarray:
        """(num_envs,) float32 reward of the step."""
        self.complete()
        return self._reward

    @property
    def info(self) -> dict[str, Any]:
        """Everything else the env reports (`final_obs`, episode returns and lengths, physics failures, ...)."""
        self.complete()
        return self._info

    @property
    def done(self) -> np.ndarray:
        """Rows whose episode ended this step (terminated or truncated)."""
        return self.terminated | self.truncated


def checked_steps(steps: Any, rows: int) -> np.ndarray:
    """`truncate_after`'s `steps` as (rows,) int64, every entry at least 1 (ValueError naming the bad value)."""
    out = np.broadcast_to(np.asarray(steps, dtype=np.int64), (rows,))
    if rows and out.min() < 1:
        raise ValueError(f"truncate_after: steps must be >= 1, got {int(out.min())}")
    return out


def restored_time_limit(snapshot: dict[str, Any], max_episode_steps: int) -> np.ndarray:
    """The rows' time limits of an env snapshot (one taken before `truncate_after` existed: the task's limit)."""
    if "time_limit" in snapshot:
        return np.array(snapshot["time_limit"], dtype=np.int64, copy=True)
    return np.full(len(snapshot["episode_length"]), max_episode_steps, dtype=np.int64)


class NpEnv:
    """Batched environment over numpy arrays with auto-reset of finished rows."""

    spec: EnvSpec

    def reset(self) -> NpEnvState:
        """Reset every env and return the first observations."""
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> NpEnvState:
        """Apply `actions` (num_envs, action_dim) in env units, auto-reset finished envs."""
        raise NotImplementedError

    def reset_rows(self, env_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Start new episodes on rows `env_ids` now (between steps); returns their first observations per key."""
        raise NotImplementedError

    def truncate_after(self, env_ids: np.ndarray, steps: np.ndarray) -> None:
        """End the episodes now running on rows `env_ids` after `steps` more steps each (>= 1), truncated as at
        the time limit; the rows' next episodes get the full limit again (`env.stagger_starts`)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release native resources (worker threads)."""

    def __enter__(self) -> NpEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
