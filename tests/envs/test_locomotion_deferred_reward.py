"""A joystick env's step resets its ended rows before its deferred reward runs: the reward of those rows is
still the one of the step that ended them, and a float32 observation built column by column equals the
stacked one."""

from __future__ import annotations

import numpy as np
import pytest

import envs
from envs.locomotion.common import float32_columns


@pytest.mark.parametrize("name", ["go1_joystick_flat", "go2_joystick_flat"])
def test_rows_a_step_resets_keep_that_steps_deferred_reward(name):
    ending, going_on = (envs.make(name, 4, seed=3, nthread=1) for _ in range(2))
    try:
        actions = np.random.default_rng(1).uniform(-0.3, 0.3, size=(3, 4, ending.nu))
        for env in (ending, going_on):
            env.reset()
            for t in range(2):
                _ = env.step(actions[t]).reward
        ending._episode_length[[1, 3]] = ending.task.max_episode_steps - 1  # rows 1 and 3 truncate on the next step
        ended, went_on = ending.step(actions[2]), going_on.step(actions[2])
        np.testing.assert_array_equal(ended.truncated, [False, True, False, True])
        assert not went_on.truncated.any()
        # the ended rows start new episodes before the reward is read, which leaves it unchanged
        for row in (1, 3):
            assert not np.array_equal(ended.obs["critic"][row], went_on.obs["critic"][row])
        np.testing.assert_array_equal(ended.obs["critic"][[0, 2]], went_on.obs["critic"][[0, 2]])
        np.testing.assert_array_equal(ended.info["final_obs"]["critic"], went_on.obs["critic"])
        np.testing.assert_array_equal(ended.reward, went_on.reward)
        for term, values in went_on.info["reward_terms"].items():
            np.testing.assert_array_equal(ended.info["reward_terms"][term], values, err_msg=term)
        np.testing.assert_array_equal(ended.info["step_tracking"], went_on.info["step_tracking"])
    finally:
        ending.close()
        going_on.close()


def test_float32_columns_equal_the_stacked_and_cast_columns():
    rng = np.random.default_rng(0)
    pieces = [rng.normal(size=(5, 3)) * 1e3, rng.random((5, 1)) < 0.5, rng.normal(size=(5, 4)).astype(np.float32)]
    out = float32_columns(pieces)
    assert out.dtype == np.float32 and out.shape == (5, 8)
    np.testing.assert_array_equal(out, np.hstack(pieces).astype(np.float32))
