"""The NpEnv contract over BatchEnvPool: auto-reset, dtypes, seeding, CPU pinning, failures."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import envs
from envs.core import ACTOR_OBS_KEY


def _random_actions(env, rng):
    return rng.uniform(env.spec.action_low, env.spec.action_high, size=(env.spec.num_envs, env.spec.action_dim))


def _rollout(name, seed, steps=60, n=6):
    env = envs.make(name, n, seed=seed, nthread=1)
    rng = np.random.default_rng(0)
    out = [env.reset().obs[ACTOR_OBS_KEY]]
    for _ in range(steps):
        state = env.step(_random_actions(env, rng))
        out.append(np.concatenate([state.obs[ACTOR_OBS_KEY], state.reward[:, None], state.done[:, None]], axis=1))
    env.close()
    return out


def test_unknown_env_names_valid_choices():
    with pytest.raises(ValueError) as err:
        envs.make("antt", 4)
    message = str(err.value)
    assert "'antt'" in message and "\n" not in message
    for name in ["ant", "halfcheetah", "hopper", "humanoid", "walker2d"]:
        assert name in message


def test_unknown_task_option_is_one_line_error():
    with pytest.raises(ValueError, match="^healthy_reward_typo=1.0: unknown option of task hopper; valid: "):
        envs.make("hopper", 2, healthy_reward_typo=1.0)


def test_task_override_changes_semantics():
    env = envs.make("hopper", 3, nthread=1, healthy_reward=7.0, ctrl_cost_weight=0.0)
    env.reset()
    state = env.step(np.zeros((3, 3)))
    np.testing.assert_allclose(state.info["reward_terms"]["reward_survive"], 7.0)
    np.testing.assert_allclose(state.info["reward_terms"]["reward_ctrl"], 0.0)


@pytest.mark.parametrize("name", ["ant", "hopper"])
def test_same_seed_same_rollout_different_seed_differs(name):
    a, b, c = _rollout(name, 5), _rollout(name, 5), _rollout(name, 6)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, z) for x, z in zip(a, c))


def test_observations_float32_and_shapes():
    env = envs.make("walker2d", 5, nthread=1)
    state = env.reset()
    assert state.obs[ACTOR_OBS_KEY].dtype == np.float32
    assert state.obs[ACTOR_OBS_KEY].shape == (5, env.spec.obs_dims[ACTOR_OBS_KEY])
    state = env.step(np.zeros((5, 6), dtype=np.float32))
    assert state.reward.dtype == np.float32 and state.terminated.dtype == bool and state.truncated.dtype == bool
    with pytest.raises(ValueError, match="actions must have shape"):
        env.step(np.zeros((4, 6)))


def test_auto_reset_keeps_pre_reset_observation():
    env = envs.make("hopper", 8, seed=1, nthread=1)
    rng = np.random.default_rng(1)
    env.reset()
    seen_done = 0
    for _ in range(200):
        state = env.step(_random_actions(env, rng))
        final = state.info["final_obs"][ACTOR_OBS_KEY]
        done = state.done
        np.testing.assert_array_equal(final[~done], state.obs[ACTOR_OBS_KEY][~done])
        if done.any():
            seen_done += int(done.sum())
            # a fresh Hopper episode starts near the initial pose: z ~ 1.25, tiny velocities
            fresh = state.obs[ACTOR_OBS_KEY][done]
            assert np.all(np.abs(fresh[:, 0] - 1.25) < 0.01) and np.all(np.abs(fresh[:, 5:]) < 0.01)
            assert not np.allclose(final[done], fresh)
            # terminated Hopper rows ended unhealthy: the final obs shows it
            term = state.terminated
            if term.any():
                z, angle = final[term, 0], final[term, 1]
                assert np.all((z <= 0.7) | (np.abs(angle) >= 0.2) | (np.abs(final[term, 1:]) >= 100).any(axis=1))
            assert np.all(state.info["episode_length"][done] >= 1)
    assert seen_done > 20


@pytest.mark.parametrize("name, overrides", [("hopper", {}), ("dmc_cheetah_run", {"max_episode_steps": 25})])
def test_deferred_rewards_equal_rewards_read_at_once(name, overrides):
    """A step hands back its reward pending; read later (after the next step, after a requested reset, on
    steps that reset rows) it equals the reward, reward terms and episode returns of a twin env read at once."""
    n, steps = 6, 90
    eager = envs.make(name, n, seed=3, nthread=1, **overrides)
    lazy = envs.make(name, n, seed=3, nthread=1, **overrides)
    eager.reset()
    lazy.reset()
    rng = np.random.default_rng(0)
    held, resets = [], 0
    for t in range(steps):
        actions = _random_actions(eager, rng)
        want = eager.step(actions)
        want = (want.reward, want.info["episode_return"], {k: v.copy() for k, v in want.info["reward_terms"].items()})
        got = lazy.step(actions)
        actions[:] = 1e3  # the caller reuses its buffer (the collector's action slot): a pending step kept a copy
        assert got.pending, f"step {t}: the reward is computed on first read"
        resets += int(got.done.sum())
        if t % 10 == 5:  # a requested reset between steps (a snapshot evaluation starting)
            eager.reset_rows(np.array([0, 2]))
            lazy.reset_rows(np.array([0, 2]))
        held.append((got, want))
    assert resets >= 10  # both tasks: hopper falls, the DMC episodes end together at the time limit
    for t, (got, (reward, episode_return, terms)) in enumerate(held):  # read only now
        assert not got.pending or t == steps - 1
        np.testing.assert_array_equal(got.reward, reward, err_msg=f"{name} step {t}")
        np.testing.assert_array_equal(got.info["episode_return"], episode_return, err_msg=f"{name} step {t}")
        for k, v in terms.items():
            np.testing.assert_array_equal(got.info["reward_terms"][k], v, err_msg=f"{name} step {t} {k}")
    eager.close()
    lazy.close()


def test_deferred_rewards_of_reset_rows_read_the_step_that_ended_them():
    """Rows reset in a step get their reward from that step's final physics, not the new episode's: a reward
    reading the state (a Hopper whose reward adds its height) and one reading sensors (DMC cheetah's speed,
    against a twin whose episodes do not end there)."""
    from envs.gymnasium.hopper import Hopper
    from envs.mujoco.np_env import MujocoNpEnv

    class HeightHopper(Hopper):
        def reward_terms(self, p, velocity, action, healthy):
            return {**super().reward_terms(p, velocity, action, healthy), "height": p.qpos[:, 1].copy()}

    env = MujocoNpEnv(HeightHopper(), num_envs=6, seed=3, nthread=1)
    env.reset()
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(60):
        state = env.step(_random_actions(env, rng))
        final_z = state.info["final_obs"][ACTOR_OBS_KEY][:, 0]  # Hopper's observation starts with qpos[1]
        np.testing.assert_allclose(state.info["reward_terms"]["height"], final_z, rtol=1e-6)
        ended += int(state.done.sum())
    assert ended >= 5
    env.close()

    short = envs.make("dmc_cheetah_run", 4, seed=3, nthread=1, max_episode_steps=10)
    long = envs.make("dmc_cheetah_run", 4, seed=3, nthread=1)
    short.reset()
    long.reset()
    for t in range(10):  # the short one's episodes all end at step 10, after the same physics as the long one's
        actions = _random_actions(short, rng)
        got, want = short.step(actions), long.step(actions)
        assert got.truncated.all() == (t == 9) and not want.done.any()
        np.testing.assert_array_equal(got.reward, want.reward, err_msg=f"step {t}")
    short.close()
    long.close()


def test_time_limit_truncates_and_counts():
    env = envs.make("halfcheetah", 3, nthread=1, max_episode_steps=7)
    env.reset()
    for t in range(1, 15):
        state = env.step(np.zeros((3, 6)))
        assert not state.terminated.any()
        assert state.truncated.all() == (t % 7 == 0)
        if t % 7 == 0:
            np.testing.assert_array_equal(state.info["episode_length"], 7)


def test_pool_workers_run_on_given_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    ids = cpus[-1:]
    env = envs.make("ant", 16, cpu_ids=ids)
    assert tuple(env.pool.worker_cpu_ids()) == tuple(ids)
    assert env.pool.nthread == len(ids)
    env.close()


def test_invalid_cpu_ids_clear_error():
    bad = max(os.sched_getaffinity(0)) + 64
    with pytest.raises(ValueError) as err:
        envs.make("ant", 4, cpu_ids=[bad])
    assert f"[{bad}]" in str(err.value) and "available" in str(err.value)
    with pytest.raises(ValueError, match="nthread=3 must equal len"):
        envs.make("ant", 4, cpu_ids=[0], nthread=3)


def test_physics_blow_up_is_detected_reset_and_counted():
    env = envs.make("hopper", 4, nthread=1)
    env.reset()
    qpos = np.tile(env.model.qpos0, (4, 1))
    qvel = np.zeros((4, env.nv))
    qvel[1] = 1e12  # MuJoCo warns (huge QVEL) and the pool stops stepping this env
    state = env.set_physics_state(qpos, qvel)
    before = state.obs[ACTOR_OBS_KEY].copy()
    state = env.step(np.zeros((4, 3)))
    assert state.info["physics_failures"] == 1
    np.testing.assert_array_equal(state.info["physics_failed"], [False, True, False, False])
    assert state.truncated[1] and not state.terminated[1] and state.reward[1] == 0.0
    np.testing.assert_array_equal(state.info["final_obs"][ACTOR_OBS_KEY][1], before[1])
    assert np.isfinite(state.obs[ACTOR_OBS_KEY]).all()
    assert env.physics_failures_total == 1
    # the failed env was reset and steps normally again
    state = env.step(np.zeros((4, 3)))
    assert state.info["physics_failures"] == 0
    np.testing.assert_allclose(env._state[:, 0], [2 * env.dt, env.dt, 2 * env.dt, 2 * env.dt])


def test_non_finite_state_is_detected():
    env = envs.make("hopper", 3, nthread=1)
    env.reset()
    qpos = np.tile(env.model.qpos0, (3, 1))
    qpos[2, 0] = np.inf
    env.set_physics_state(qpos, np.zeros((3, env.nv)))
    state = env.step(np.zeros((3, 3)))
    assert state.info["physics_failed"][2] and state.info["physics_failures"] >= 1
    assert np.isfinite(env._state).all()


def test_envs_never_imports_torch():
    code = "import sys, envs; e = envs.make('ant', 2, nthread=1); e.reset(); e.step(__import__('numpy').zeros((2, 8))); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_column_runs_cover_exactly_the_columns():
    from envs.mujoco.np_env import column_runs

    assert column_runs(np.array([3, 4, 5, 12, 13, 90, 91])) == [slice(3, 6), slice(12, 14), slice(90, 92)]
    assert column_runs(np.array([7])) == [slice(7, 8)]
    assert column_runs(np.array([], dtype=np.int64)) == []
    cols = np.flatnonzero(np.random.default_rng(0).random(200) < 0.4)
    covered = np.concatenate([np.arange(s.start, s.stop) for s in column_runs(cols)])
    np.testing.assert_array_equal(covered, cols)
