"""Per-episode sums of a task's tracking terms (velocity-command tasks), reported like episode returns.

A task that tracks commands declares `EnvSpec.tracking_terms` (e.g. `lin_vel_error`) and hands each step's
values to an `EpisodeTracking`; its step `info["episode_tracking"]` then holds, per row, the running sums
of each term over the episode's steps after its first `TRACKING_WARMUP_S` seconds and, in the last column,
how many steps were counted. On a row that ended this step they are the ended episode's totals (as
`info["episode_return"]`). The first second is left out because every episode starts from a reset
pose and a fresh command the policy has not had time to reach.
"""

from __future__ import annotations

import numpy as np

TRACKING_WARMUP_S = 1.0
"""seconds at the start of an episode whose steps no tracking statistic counts"""
MAX_TRACKING_COLUMNS = 8
"""the transport's fixed width (terms + the step count): a task declares at most 7 terms"""


def warmup_steps(dt: float) -> int:
    """Steps of `dt` seconds in the warm-up: step k (1-based) is counted when k > this."""
    return int(round(TRACKING_WARMUP_S / dt))


class EpisodeTracking:
    """Running sums of `len(terms)` tracking terms per row over each episode's steps after the warm-up."""

    def __init__(self, num_envs: int, terms: tuple[str, ...], dt: float) -> None:
        if len(terms) + 1 > MAX_TRACKING_COLUMNS:
            raise ValueError(f"{len(terms)} tracking terms {terms}; at most {MAX_TRACKING_COLUMNS - 1}")
        self.terms = terms
        self.skip = warmup_steps(dt)
        self.sums = np.zeros((num_envs, len(terms) + 1))

    def ended(self, rows: np.ndarray) -> np.ndarray:
        """The sums of `rows` so far (taken before an auto-reset zeroes them)."""
        return self.sums[rows].copy()

    def reset(self, rows: np.ndarray) -> None:
        """New episodes on `rows`."""
        self.sums[rows] = 0.0

    def add(
        self,
        values: np.ndarray,
        episode_length: np.ndarray,
        counted: np.ndarray,
        done_ids: np.ndarray,
        ended: np.ndarray,
    ) -> np.ndarray:
        """Add one step's `values` (rows x terms) where `episode_length` (this step's, 1-based) is past the
        warm-up and `counted`; returns every row's sums, the ended episodes' totals on `done_ids`."""
        keep = (episode_length > self.skip) & counted
        step = np.concatenate([values * keep[:, None], keep[:, None].astype(np.float64)], axis=1)
        self.sums = self.sums + step
        out = self.sums.copy()
        if done_ids.size:
            out[done_ids] = ended + step[done_ids]
            self.sums[done_ids] = 0.0
        return out
