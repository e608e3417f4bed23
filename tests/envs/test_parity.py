"""Parity of every task against Gymnasium's own MuJoCo v5 environment.

Step parity: from the same physics states and the same actions, ten
consecutive steps give the same observation, reward terms and terminated flag.
Tolerances, and why:
- Observations: 2e-6 absolute on float32 values. The physics is the same
  `mj_step`; the pool restarts MuJoCo's solver warm-start (qacc_warmstart) at
  zero on every call while Gymnasium carries it, which moves the solver's
  starting point only; its converged answer differs at the solver tolerance
  (~1e-8), far below float32 rounding of the observation (~1e-7 relative).
- Control, survive and termination: exact functions of the action and state,
  compared at 1e-6.
- Forward reward on RK4 tasks (Ant, Humanoid, Hopper, Walker2d use RK4): after
  `mj_step` MuJoCo leaves `xpos`/`xipos` at the kinematics of the last RK4
  stage, an O(dt^2) approximation of the final state. Hopper, Walker2d and
  HalfCheetah difference qpos[0] (exact, so 1e-6 holds); Ant differences the
  exact torso position and Humanoid the exact mass centre, so they are checked
  exactly against positions computed from Gymnasium's own final qpos/xipos
  after an `mj_forward`, and against Gymnasium's reported `reward_forward`
  within the stage error: 0.1 (Ant, hard ground impacts) / 0.01 (Humanoid).
"""

from __future__ import annotations

import gymnasium as gym
import mujoco
import numpy as np
import pytest

import envs
from envs.gymnasium import TASKS

NAMES = ["ant", "humanoid", "halfcheetah", "hopper", "walker2d"]
FORWARD_TOL = {"ant": 0.1, "humanoid": 1e-2, "halfcheetah": 1e-6, "hopper": 1e-6, "walker2d": 1e-6}
STEPS = 10


def _gym_env(name: str):
    task = TASKS[name]()
    return gym.make(task.gymnasium_id, **task.gymnasium_kwargs()).unwrapped


def _visited_states(genv, rng, count: int):
    """Physics states Gymnasium itself visits under random actions."""
    genv.reset(seed=3)
    qpos, qvel = [], []
    while len(qpos) < count:
        for _ in range(int(rng.integers(3, 25))):
            _, _, term, _, _ = genv.step(rng.uniform(genv.action_space.low, genv.action_space.high))
            if term:
                genv.reset()
        qpos.append(genv.data.qpos.copy())
        qvel.append(genv.data.qvel.copy())
    return np.stack(qpos), np.stack(qvel)


def _exact_progress(name, genv) -> np.ndarray:
    """The position whose difference the task uses, from Gymnasium's final state after mj_forward."""
    data = mujoco.MjData(genv.model)
    data.qpos[:], data.qvel[:] = genv.data.qpos, genv.data.qvel
    mujoco.mj_forward(genv.model, data)
    if name == "humanoid":
        return (genv.model.body_mass @ data.xipos / genv.model.body_mass.sum())[:2]
    if name == "ant":
        return data.qpos[:2].copy()
    return data.qpos[:1].copy()


@pytest.mark.parametrize("name", NAMES)
def test_spec_matches_gymnasium(name):
    genv = _gym_env(name)
    env = envs.make(name, 2, nthread=1)
    assert env.spec.obs_dims["actor"] == genv.observation_space.shape[0]
    assert env.spec.action_dim == genv.action_space.shape[0]
    np.testing.assert_array_equal(env.spec.action_low, genv.action_space.low)
    np.testing.assert_array_equal(env.spec.action_high, genv.action_space.high)
    assert env.spec.dt == pytest.approx(genv.dt)
    assert env.spec.max_episode_steps == gym.spec(TASKS[name].gymnasium_id).max_episode_steps == 1000
    env.close()


@pytest.mark.parametrize("name", NAMES)
def test_step_parity(name):
    rng = np.random.default_rng(7)
    genv = _gym_env(name)
    qpos, qvel = _visited_states(genv, rng, count=12)
    n = len(qpos)
    env = envs.make(name, n, nthread=1)
    env.set_physics_state(qpos, qvel)
    actions = rng.uniform(genv.action_space.low, genv.action_space.high, size=(STEPS, n, env.spec.action_dim))

    ref = []  # ref[k][t] = (obs, reward, terminated, info, exact_velocity)
    for k in range(n):
        genv.reset()
        genv.set_state(qpos[k], qvel[k])
        rows = []
        before = _exact_progress(name, genv)
        for t in range(STEPS):
            obs, reward, terminated, _, info = genv.step(actions[t, k])
            after = _exact_progress(name, genv)
            rows.append((obs, reward, terminated, info, (after - before) / genv.dt))
            before = after
            if terminated:
                break
        ref.append(rows)

    compared = 0
    for t in range(STEPS):
        state = env.step(actions[t])
        for k in range(n):
            if t >= len(ref[k]):
                continue  # the Gymnasium episode ended; our row auto-reset
            obs, reward, terminated, info, exact_velocity = ref[k][t]
            ours = state.info["final_obs"]["actor"][k]
            np.testing.assert_allclose(ours, obs, atol=2e-6, rtol=1e-6, err_msg=f"{name} obs t={t} k={k}")
            assert bool(state.terminated[k]) == terminated, f"{name} terminated t={t} k={k}"
            assert not state.truncated[k]
            terms = state.info["reward_terms"]
            np.testing.assert_allclose(terms["reward_ctrl"][k], info["reward_ctrl"], atol=1e-6)
            if "reward_survive" in info:
                np.testing.assert_allclose(terms["reward_survive"][k], info["reward_survive"], atol=1e-6)
            weight = env.task.cfg["forward_reward_weight"]
            np.testing.assert_allclose(terms["reward_forward"][k], weight * exact_velocity[0], atol=1e-5)
            np.testing.assert_allclose(terms["reward_forward"][k], info["reward_forward"], atol=FORWARD_TOL[name])
            others = sum(v for key, v in info.items() if key.startswith("reward_") and key != "reward_forward")
            np.testing.assert_allclose(
                state.reward[k], others + terms["reward_forward"][k], atol=1e-5, err_msg="reward is the sum of terms"
            )
            compared += 1
    assert compared >= n * 2
    env.close()


@pytest.mark.parametrize("name", NAMES)
def test_reset_distribution_matches_gymnasium(name):
    """Initial states: per coordinate, the offsets from the model's qpos0 (and the qvel) of 2000 fresh
    episodes have Gymnasium's spread and bounds (uniform noise stays inside +-s with std s/sqrt(3);
    Gymnasium's normal qvel noise on Ant and HalfCheetah has std s)."""
    n = 2000
    genv = _gym_env(name)
    qpos0 = genv.init_qpos.copy()
    ref_qpos, ref_qvel = [], []
    for i in range(n):
        genv.reset(seed=i)
        ref_qpos.append(genv.data.qpos - qpos0)
        ref_qvel.append(genv.data.qvel.copy())
    env = envs.make(name, n, seed=0, nthread=1)
    env.reset()
    qpos, qvel = env.physics_qpos_qvel()
    env.close()
    s = env.task.cfg["reset_noise_scale"]
    for what, ours, ref in (("qpos", qpos - qpos0, np.stack(ref_qpos)), ("qvel", qvel, np.stack(ref_qvel))):
        np.testing.assert_allclose(ours.mean(0), ref.mean(0), atol=0.15 * s, err_msg=f"{name} {what} mean")
        np.testing.assert_allclose(ours.std(0), ref.std(0), rtol=0.15, err_msg=f"{name} {what} std")
        inside = np.abs(ref).max(0) <= s * (1 + 1e-9)  # coordinates Gymnasium keeps inside +-s (uniform noise)
        assert (np.abs(ours).max(0)[inside] <= s * (1 + 1e-6)).all(), f"{name} {what} leaves +-{s}"
