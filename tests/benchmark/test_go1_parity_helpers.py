"""The comparison helpers of benchmark/env/go1_parity.py on hand-computed arrays (envpool not needed)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.env.go1_parity import ACTOR_FIELDS, CRITIC_FIELDS, episode_stats, field_of, first_above, per_step_max_abs


def test_per_step_max_abs_takes_the_largest_entry_of_each_step():
    a = np.array([[0.0, 1.0], [2.0, -3.0]])
    b = np.array([[0.5, 1.0], [2.0, 1.0]])
    assert per_step_max_abs(a, b).tolist() == [0.5, 4.0]
    assert per_step_max_abs(np.array([1.0, 2.0]), np.array([1.5, 2.0])).tolist() == [0.5, 0.0]


def test_first_above_is_strict_and_none_when_nothing_exceeds():
    assert first_above(np.array([0.1, 0.2, 0.3]), 0.2) == 2
    assert first_above(np.array([0.1, 0.2]), 0.2) is None


def test_field_of_names_the_observation_entry():
    assert field_of(0, ACTOR_FIELDS) == "local_linvel[0]"
    assert field_of(47, ACTOR_FIELDS) == "command[2]"
    assert field_of(48, CRITIC_FIELDS) == "gyro[0]"
    assert field_of(122, CRITIC_FIELDS) == "push[3]"
    with pytest.raises(ValueError, match="beyond"):
        field_of(48, ACTOR_FIELDS)


def test_episode_stats_skips_uncounted_steps_and_counts_falls():
    # env 0: fall after 2 steps (1 + 2), a reset step (not counted, reward 9 ignored), then 1 step truncated (4)
    # env 1: one unfinished episode
    rewards = np.array([[1.0, 1.0], [2.0, 1.0], [9.0, 1.0], [4.0, 1.0]])
    terminated = np.array([[0, 0], [1, 0], [0, 0], [0, 0]], dtype=bool)
    truncated = np.array([[0, 0], [0, 0], [0, 0], [1, 0]], dtype=bool)
    counted = np.array([[1, 1], [1, 1], [0, 1], [1, 1]], dtype=bool)
    stats = episode_stats(rewards, terminated, truncated, counted)
    assert stats["episodes"] == 2 and stats["falls"] == 1 and stats["fall_fraction"] == 0.5
    assert stats["mean_return"] == pytest.approx(3.5) and stats["mean_length"] == pytest.approx(1.5)
    assert stats["env_steps"] == 7 and stats["mean_step_reward"] == pytest.approx(11.0 / 7)
