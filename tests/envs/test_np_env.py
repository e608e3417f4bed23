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
    with pytest.raises(ValueError, match="unknown option.*'healthy_reward_typo'"):
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
