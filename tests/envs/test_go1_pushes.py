"""go1_joystick_flat's pushes (Playground's `pert_config`): the force of every substep against the half-sine
profile written out by hand, the trajectory against plain MuJoCo given the same `xfrc_applied`, the critic's
push entries, off by default, and bad ranges refused in one line."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from envs.locomotion.go1_joystick import RANDOMIZATIONS, Go1JoystickFlat
from envs.options import OptionError
from envs.registry import make

OFF = {"noise_level": 0.0, **{flag: False for flag in RANDOMIZATIONS}}
DT, V, T = 0.02, 2.0, 0.1
"""control step; the kick and its duration (5 steps)"""
FIXED = {"push_robots": True, "push_wait_time": [0.1, 0.1], "push_kick_duration": [T, T], "push_velocity_kick": [V, V]}
"""a wait of 5 steps, a push of 5 steps, a 2 m/s kick: every draw but the direction fixed"""


def spy_on_pool(env):
    """Record the control spec and control array of each pool call (one substep each)."""
    calls = []
    step = env.pool.step

    def recording(state, **kw):
        calls.append((kw.get("control_spec"), kw["control"].copy()))
        return step(state, **kw)

    env.pool.step = recording
    return calls


def hand_profile(mass: float, directions: list[np.ndarray], steps: int) -> np.ndarray:
    """(steps, 3): waits of 5 steps (the direction drawn on the 5th), pushes of k = 0..5 at
    0.5 sin(pi k dt / T) M v / T along it, one after another."""
    out = np.zeros((steps, 3))
    i, n = 0, 0
    while i < steps:
        i += 5  # waiting steps: no force
        for k in range(6):
            if i >= steps:
                break
            out[i] = 0.5 * np.sin(np.pi * k * DT / T) * mass * V / T * directions[n]
            i += 1
        n += 1
    return out


def test_the_force_of_every_substep_is_the_half_sine_profile_on_the_torso_alone():
    with make("go1_joystick_flat", 1, seed=0, nthread=1, max_episode_steps=100, **OFF, **FIXED) as env:
        env.set_physics_state(env.model.keyframe("home").qpos[None], np.zeros((1, env.nv)))
        calls = spy_on_pool(env)
        directions = []
        for _ in range(24):
            before = env.push_dir[0].copy()
            env.step(np.zeros((1, 12)))
            if not np.array_equal(env.push_dir[0], before):
                directions.append(env.push_dir[0].copy())
        torso, nbody, mass = env.layout.torso_body, env.model.nbody, env.model.body_subtreemass[env.layout.torso_body]
    assert len(directions) == 2  # drawn on the steps the waits end: 5 and 16
    for d in directions:
        assert d[2] == 0.0 and abs(np.linalg.norm(d) - 1) < 1e-12
    want = hand_profile(mass, directions, 24)
    assert len(calls) == 24 * 5
    spec = int(mujoco.mjtState.mjSTATE_CTRL | mujoco.mjtState.mjSTATE_XFRC_APPLIED)
    for j, (call_spec, control) in enumerate(calls):
        assert call_spec == spec
        xfrc = control[0, 0, 12:].reshape(nbody, 6)
        np.testing.assert_allclose(xfrc[torso, :3], want[j // 5], rtol=1e-12, atol=1e-9, err_msg=f"substep {j}")
        assert not np.delete(xfrc, torso, axis=0).any() and not xfrc[torso, 3:].any()
    assert np.linalg.norm(want, axis=1).max() > 0.45 * mass * V / T  # the peak, 0.5 M v / T at k dt = T / 2 (sin 0.95)


def test_a_push_moves_the_torso_as_plain_mujoco_given_the_same_xfrc_applied():
    """Playground applies the force during all substeps of the step; the pool must do the same and keep its warm
    start: the trajectory equals plain `mj_step`s with `xfrc_applied` set to the env's force each step."""
    rng = np.random.default_rng(2)
    actions = rng.uniform(-0.2, 0.2, (24, 12))
    with make("go1_joystick_flat", 1, seed=1, nthread=1, max_episode_steps=100, **OFF, **FIXED) as env:
        model, home, torso = env.model, env.model.keyframe("home").qpos, env.layout.torso_body
        env.set_physics_state(home[None], np.zeros((1, env.nv)))
        data, still = mujoco.MjData(model), mujoco.MjData(model)
        for d in (data, still):
            d.qpos[:] = home
        worst = 0.0
        for i, action in enumerate(actions):
            env.step(action[None])
            for d, force in ((data, env.push_force[0]), (still, np.zeros(3))):
                d.ctrl[:] = home[7:] + 0.5 * action
                d.xfrc_applied[torso, :3] = force
                for _ in range(5):
                    mujoco.mj_step(model, d)
            qpos, qvel = env.physics_qpos_qvel()
            worst = max(worst, np.abs(qpos[0] - data.qpos).max(), np.abs(qvel[0] - data.qvel).max())
            if i == 10:  # the first push's last step: its velocity change against the same steps without it
                along = np.dot(qvel[0, :2] - still.qvel[:2], env.push_dir[0, :2])
    assert worst < 1e-6
    assert along > 0.1


def test_the_critic_carries_the_force_and_playgrounds_push_flag():
    with make("go1_joystick_flat", 2, seed=0, nthread=1, max_episode_steps=100, **OFF, **FIXED) as env:
        state = env.set_physics_state(np.tile(env.model.keyframe("home").qpos, (2, 1)), np.zeros((2, env.nv)))
        assert not state.obs["critic"][:, 119:].any()
        flags, forces = [], []
        for _ in range(12):
            state = env.step(np.zeros((2, 12)))
            critic = state.obs["critic"]
            np.testing.assert_allclose(critic[:, 119:122], env.push_force, rtol=1e-6)
            forces.append(np.linalg.norm(critic[0, 119:122]))
            flags.append(critic[0, 122])
    # Playground's flag after each step: the wait reached on steps 5..10, cleared by the push's last step (11)
    np.testing.assert_array_equal(flags, [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0])
    assert forces[5] == 0 and min(forces[6:10]) > 10 and forces[10] < 1e-9 * forces[7]


def test_pushes_are_off_by_default_and_switch_on():
    assert Go1JoystickFlat().cfg["push_robots"] is False
    assert Go1JoystickFlat().cfg["push_velocity_kick"] == (0.0, 3.0)
    assert Go1JoystickFlat().cfg["push_kick_duration"] == (0.05, 0.2)
    assert Go1JoystickFlat().cfg["push_wait_time"] == (1.0, 3.0)
    with make("go1_joystick_flat", 4, seed=0, nthread=1, **OFF) as env:
        env.reset()
        calls = spy_on_pool(env)
        for _ in range(200):
            state = env.step(np.zeros((4, 12)))
        assert env.applied_forces() is None and not state.obs["critic"][:, 119:].any()
        assert all(spec == int(mujoco.mjtState.mjSTATE_CTRL) and c.shape[2] == 12 for spec, c in calls)
    with make("go1_joystick_flat", 4, seed=0, nthread=1, **OFF, push_robots=True) as env:
        env.reset()
        assert np.all((50 <= env.push_wait) & (env.push_wait <= 150)) and len(set(env.push_wait)) > 1
        assert np.all((0.05 <= env.push_seconds) & (env.push_seconds <= 0.2))
        assert np.all((0.0 <= env.push_kick) & (env.push_kick <= 3.0))
        np.testing.assert_array_equal(env.push_duration, np.round(env.push_seconds / DT))
        pushed = np.zeros(4, dtype=bool)
        for _ in range(200):  # every row's first push starts within 3 s
            env.step(np.zeros((4, 12)))
            pushed |= np.linalg.norm(env.push_force, axis=1) > 0
        assert pushed.all()


RANGE = "must be two finite numbers [low, high] with {}low <= high"


@pytest.mark.parametrize(
    "options,message",
    [
        ({"push_robots": 1}, "push_robots=1: must be true or false"),
        ({"push_velocity_kick": [-1, 2]}, "push_velocity_kick=[-1, 2]: " + RANGE.format("0 <= ")),
        ({"push_velocity_kick": [3, 1]}, "push_velocity_kick=[3, 1]: " + RANGE.format("0 <= ")),
        ({"push_velocity_kick": [0, float("inf")]}, "push_velocity_kick=[0, inf]: " + RANGE.format("0 <= ")),
        ({"push_kick_duration": [0, 0.2]}, "push_kick_duration=[0, 0.2]: " + RANGE.format("0 < ")),
        ({"push_kick_duration": 0.1}, "push_kick_duration=0.1: " + RANGE.format("0 < ")),
        ({"push_wait_time": [0.01, 1]}, "push_wait_time=[0.01, 1]: " + RANGE.format("0.02 <= ")),
        ({"push_wait_time": [1, 2, 3]}, "push_wait_time=[1, 2, 3]: " + RANGE.format("0.02 <= ")),
    ],
)
def test_a_bad_push_option_is_one_line(options, message):
    with pytest.raises(OptionError) as err:
        Go1JoystickFlat(**options)
    assert str(err.value) == message and "\n" not in str(err.value)


def test_a_fixed_range_is_taken():
    task = Go1JoystickFlat(push_velocity_kick=[1, 1], push_wait_time=[0.02, 0.02])
    assert task.cfg["push_velocity_kick"] == (1.0, 1.0) and task.cfg["push_wait_time"] == (0.02, 0.02)
