"""The DMC tasks behind the NpEnv contract: truncation only, options, imports, resets of some rows, failures."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import envs
from envs.dmc.task import advance_rows


def test_episodes_are_truncated_never_terminated():
    env = envs.make("dmc_hopper_hop", 3, nthread=1, max_episode_steps=4)
    env.reset()
    for t in range(1, 9):
        state = env.step(np.zeros((3, 4)))
        assert not state.terminated.any()
        assert state.truncated.all() == (t % 4 == 0)
        assert ((state.reward >= 0) & (state.reward <= 1)).all()
    assert env.spec.reward_range == (0.0, 1.0)
    env.close()


def test_bad_names_and_options_are_one_line_errors():
    with pytest.raises(ValueError) as err:
        envs.make("dmc_dog_runn", 2)
    assert "'dmc_dog_runn'" in str(err.value) and "dmc_dog_run" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(
        ValueError, match=r"^healthy_reward=1.0: unknown option of task dmc_walker_run; valid: max_episode_steps$"
    ):
        envs.make("dmc_walker_run", 2, healthy_reward=1.0)
    with pytest.raises(ValueError, match="unknown DeepMind Control Suite task 'walker'; valid names: dmc_cheetah_run"):
        envs.dmc.reference_env("walker", 0)


def test_stepping_imports_neither_torch_nor_dm_control():
    code = (
        "import sys, numpy, envs; e = envs.make('dmc_dog_run', 2, nthread=1); e.reset(); e.step(numpy.zeros((2, 38)));"
        "print('torch' in sys.modules, 'dm_control' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_settling_a_few_rows_on_mjdata_equals_the_pool():
    env = envs.make("dmc_cheetah_run", 16, nthread=2)
    env.reset()
    states = env._state[:4].copy()
    states[:, 1 + env.nq :] += 0.5  # moving, so the steps do something
    few = advance_rows(env, np.arange(4), states, 30)  # 4 rows x 2 threads <= 16: one MjData, row by row
    many = advance_rows(env, np.arange(16), np.repeat(states, 4, axis=0), 30)[::4]  # the whole pool
    np.testing.assert_array_equal(few, many)
    assert not np.allclose(few, states)
    env.close()


def test_physics_failure_is_truncated_and_reset():
    env = envs.make("dmc_quadruped_run", 3, nthread=1)
    env.reset()
    qpos, qvel = env.physics_qpos_qvel()
    qvel[1] = 1e12
    env.set_physics_state(qpos, qvel, env._state[:, env._act_slice])
    state = env.step(np.zeros((3, 12)))
    np.testing.assert_array_equal(state.info["physics_failed"], [False, True, False])
    assert state.truncated[1] and not state.terminated.any() and state.reward[1] == 0.0
    assert np.isfinite(state.obs["actor"]).all()
    env.close()
