"""An episode's reward split into blocks, the gait's onset and the summary over episodes, against hand values."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.offpolicy.episode_phases import (
    block_sums,
    episode_phases,
    initial_by_start,
    initial_motion,
    onset,
    start_group,
    summarise,
)


def test_block_sums_add_consecutive_steps():
    rewards = np.array([0.1, 0.2, 0.3, 1.0, 1.0, 0.5])
    np.testing.assert_allclose(block_sums(rewards, 3), [0.6, 2.5])
    np.testing.assert_allclose(block_sums(rewards, 2), [0.3, 1.3, 1.5])


def test_an_episode_that_does_not_split_into_whole_blocks_is_refused():
    with pytest.raises(ValueError, match="--block 4 does not split an episode of 6 steps"):
        block_sums(np.zeros(6), 4)


def test_onset_is_the_first_block_reaching_the_threshold_not_the_best():
    assert onset(np.array([10.0, 80.0, 95.0, 79.9]), 80.0) == 1  # 80 reaches 80; 95 is later
    assert onset(np.array([10.0, 79.99, 20.0]), 80.0) is None


def test_one_episode_hand_computed():
    # blocks of 2 steps: sums 0.4, 1.8, 1.7, 2.0 with level 0.85 (threshold 1.7): onset at block 1;
    # least block from there on 1.7 (a mean would give 1.833, the least of all blocks 0.4)
    rewards = np.array([0.1, 0.3, 0.9, 0.9, 0.8, 0.9, 1.0, 1.0])
    heights = np.array([0.2, 0.4, 0.5, 0.5, 0.6, 0.4, 0.5, 0.5])
    got = episode_phases(rewards, heights, block=2, level=0.85)
    assert got["return"] == pytest.approx(5.9)
    assert got["blocks"] == pytest.approx([0.4, 1.8, 1.7, 2.0])
    assert got["onset_block"] == 1
    assert got["least_block_from_onset"] == pytest.approx(1.7)
    assert got["height_by_block"] == pytest.approx([0.3, 0.5, 0.5, 0.5])


def test_an_episode_that_never_gets_going_has_no_onset():
    got = episode_phases(np.full(4, 0.2), np.zeros(4), block=2, level=0.8)
    assert got["onset_block"] is None and got["least_block_from_onset"] is None


def test_summary_counts_onsets_and_keeps_the_least_block_over_started_episodes():
    episodes = [
        {"return": 9.0, "onset_block": 0, "least_block_from_onset": 2.5},
        {"return": 3.0, "onset_block": 2, "least_block_from_onset": 1.5},
        {"return": 1.0, "onset_block": None, "least_block_from_onset": None},
        {"return": 15.0, "onset_block": 0, "least_block_from_onset": 2.0},
    ]
    got = summarise(episodes, num_blocks=4)
    assert got["episodes"] == 4
    assert got["return_median"] == pytest.approx(6.0)  # (3 + 9) / 2
    assert got["return_mean"] == pytest.approx(7.0) and got["return_min"] == 1.0
    assert got["reached_gait"] == 3 and got["never_reached_gait"] == 1
    assert got["onset_block_counts"] == [2, 0, 1, 0]
    assert got["least_block_from_onset"] == 1.5  # the least over started episodes, the unstarted one left out
    assert got["returns_reached_gait"] == [3.0, 9.0, 15.0]
    assert got["returns_never_reached_gait"] == [1.0]
    assert got["initial_by_start"] is None  # these episodes kept no initial motion (no free root)


def test_initial_motion_in_the_bodys_own_frame():
    # the body turned 90 degrees to the left: its x axis is world +y, its y axis world -x (MuJoCo's row-major xmat)
    turned = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]).ravel()
    # moving along world +x at 2 m/s, +y at 0.5 m/s, spinning at -1.5 rad/s: 0.5 forward and 2 to its right (-y)
    got = initial_motion(np.array([2.0, 0.5, 0.3, 0.0, 0.0, -1.5]), turned, np.array([0.2, -0.6, 0.1]))
    assert got == pytest.approx(
        {"forward_velocity": 0.5, "sideways_velocity": -2.0, "yaw_rate": -1.5, "act_abs_mean": 0.3}
    )
    assert initial_motion(np.zeros(6), np.eye(3).ravel(), np.zeros(0))["act_abs_mean"] == 0.0


def test_start_groups_and_their_medians():
    assert [start_group(b) for b in (0, 1, 2, 9, None)] == ["early", "early", "late", "late", "never"]

    def episode(onset_block, forward, sideways, yaw):
        initial = {"forward_velocity": forward, "sideways_velocity": sideways, "yaw_rate": yaw, "act_abs_mean": 0.5}
        return {"onset_block": onset_block, "initial": initial}

    episodes = [episode(0, 1.0, -0.5, 0.1), episode(1, -3.0, 0.5, -0.3), episode(0, 2.0, 0.2, 0.2),
                episode(None, 0.5, -4.0, 3.0), episode(5, 0.0, 2.0, -1.0)]  # fmt: skip
    got = initial_by_start(episodes)
    # early: forward 1, -3, 2 -> median 1 (signed: the |.| median would be 2), one of three backward;
    # |sideways| 0.5, 0.5, 0.2 -> 0.5; |yaw| 0.1, 0.3, 0.2 -> 0.2
    assert got["early"] == pytest.approx(
        {
            "episodes": 3,
            "median_forward_velocity": 1.0,
            "backward_fraction": 1 / 3,
            "median_abs_sideways_velocity": 0.5,
            "median_abs_yaw_rate": 0.2,
            "median_act_abs_mean": 0.5,
        },
        abs=1e-4,
    )
    assert got["never"]["episodes"] == 1 and got["never"]["median_abs_sideways_velocity"] == 4.0
    assert got["late"]["episodes"] == 1 and got["late"]["median_abs_yaw_rate"] == 1.0
    assert got["late"]["backward_fraction"] == 0.0  # standing still is not moving backward
