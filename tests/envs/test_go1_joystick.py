"""go1_joystick_flat: reward terms, observations, termination, commands and domain randomisation checked against
plain MuJoCo and Playground's formulas written out by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

from envs.locomotion.go1_joystick import (
    CMD_AMPLITUDE,
    FEET,
    RANDOMIZATIONS,
    REWARD_SCALES,
    Go1JoystickFlat,
    combine,
    sample_command,
)
from envs.registry import make

ROOT = Path(__file__).resolve().parents[2]
OFF = {"noise_level": 0.0, **{flag: False for flag in RANDOMIZATIONS}}


def plain_step(model: mujoco.MjModel, qpos: np.ndarray, qvel: np.ndarray, targets: np.ndarray) -> mujoco.MjData:
    """Playground's `mjx_env.step` on one plain MjData: 5 mj_steps at the targets, data left as after them."""
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:], data.ctrl[:] = qpos, qvel, targets
    for _ in range(5):
        mujoco.mj_step(model, data)
    return data


def sensor(model, data, name):
    sid = model.sensor(name).id
    adr, dim = model.sensor_adr[sid], model.sensor_dim[sid]
    return data.sensordata[adr : adr + dim].copy()


def start_state(model, rng):
    qpos = model.keyframe("home").qpos.copy()
    qpos[2] = 0.30
    qpos[7:] += rng.uniform(-0.3, 0.3, 12)
    qvel = rng.uniform(-0.5, 0.5, model.nv)
    qpos[[7, 9, 12]] = 0.85, -2.78, 2.80  # beyond the soft limits (0.95 x the range), moving further out
    qvel[[6, 8, 11]] = 2.0, -2.0, -2.0
    return qpos, qvel


def test_each_reward_term_matches_playgrounds_formula_on_a_constructed_state():
    rng = np.random.default_rng(3)
    with make("go1_joystick_flat", 2, seed=0, nthread=1, **OFF) as env:
        model = env.model
        home = model.keyframe("home").qpos[7:]
        qpos, qvel = start_state(model, rng)
        env.set_physics_state(np.tile(qpos, (2, 1)), np.tile(qvel, (2, 1)))
        command = np.array([[0.7, -0.3, 0.4], [0.0, 0.0, 0.005]])  # row 1: below the 0.01 "moving" threshold
        last_act = rng.uniform(-1, 1, (2, 12))
        air = np.array([[0.3, 0.0, 0.25, 0.0]] * 2)
        peak = np.array([[0.07, 0.0, 0.12, 0.0]] * 2)
        last_contact = np.array([[True, False, False, True]] * 2)
        env.command, env.last_act, env.feet_air_time = command, last_act, air
        env.swing_peak, env.last_contact = peak, last_contact
        action = np.tile(rng.uniform(-1, 1, 12), (2, 1))  # both rows reach the same physics
        state = env.step(action)
        terms = {k: v / REWARD_SCALES[k] for k, v in state.info["reward_terms"].items()}
        reward = state.reward
    d = plain_step(model, qpos, qvel, home + 0.5 * action[0])
    qj, vj, tau = d.qpos[7:], d.qvel[6:], d.actuator_force.copy()
    feet_vel = np.array([sensor(model, d, f"{f}_global_linvel") for f in FEET])
    feet_z = np.array([d.site_xpos[model.site(f).id][2] for f in FEET])
    contact = np.array([sensor(model, d, f"{f}_floor_found")[0] > 0 for f in FEET])
    first = (air[0] > 0) & (contact | last_contact[0])
    air_after, peak_after = air[0] + 0.02, np.maximum(peak[0], feet_z)
    soft_lo, soft_hi = 0.95 * model.jnt_range[1:, 0], 0.95 * model.jnt_range[1:, 1]
    lin, gyro = sensor(model, d, "local_linvel"), sensor(model, d, "gyro")
    want = {
        "tracking_lin_vel": np.exp(-((0.7 - lin[0]) ** 2 + (-0.3 - lin[1]) ** 2) / 0.25),
        "tracking_ang_vel": np.exp(-((0.4 - gyro[2]) ** 2) / 0.25),
        "lin_vel_z": sensor(model, d, "global_linvel")[2] ** 2,
        "ang_vel_xy": np.sum(sensor(model, d, "global_angvel")[:2] ** 2),
        "orientation": np.sum(sensor(model, d, "upvector")[:2] ** 2),
        "stand_still": 0.0,
        "termination": 0.0,
        "pose": np.exp(-np.sum((qj - home) ** 2 * np.array([1, 1, 0.1] * 4))),
        "torques": np.linalg.norm(tau) + np.abs(tau).sum(),
        "action_rate": np.sum((action[0] - last_act[0]) ** 2),
        "energy": np.sum(np.abs(vj) * np.abs(tau)),
        "feet_slip": sum(np.sum(feet_vel[i, :2] ** 2) for i in range(4) if contact[i]),
        "feet_clearance": sum(abs(feet_z[i] - 0.1) * np.linalg.norm(feet_vel[i, :2]) ** 0.5 for i in range(4)),
        "feet_height": sum((peak_after[i] / 0.1 - 1) ** 2 for i in range(4) if first[i]),
        "feet_air_time": sum(air_after[i] - 0.1 for i in range(4) if first[i]),
        "dof_pos_limits": np.sum(np.maximum(soft_lo - qj, 0) + np.maximum(qj - soft_hi, 0)),
    }
    assert set(terms) == set(want) and len(want) == 16
    assert first.any() and want["dof_pos_limits"] > 0 and want["feet_slip"] > 0  # the state exercises the terms
    for k, v in want.items():
        np.testing.assert_allclose(terms[k][0], v, rtol=1e-9, atol=1e-12, err_msg=k)
    # row 1 (a command below 0.01): the stand-still cost is on, the moving-only feet terms are off
    np.testing.assert_allclose(terms["stand_still"][1], np.abs(qj - home).sum(), rtol=1e-9)
    for k in ("feet_slip", "feet_height", "feet_air_time"):
        assert terms[k][1] == 0.0, k
    total = sum(v * REWARD_SCALES[k] for k, v in want.items()) * 0.02
    np.testing.assert_allclose(reward[0], max(total, 0.0), rtol=1e-5)
    # the sum: weighted, times dt, clipped at 0 below
    ones = {k: np.array([1.0 if REWARD_SCALES[k] > 0 else 0.0, 1.0]) for k in REWARD_SCALES}
    reward, weighted = combine(ones, 0.02)
    np.testing.assert_allclose(reward, [(1.0 + 0.5 + 0.5 + 0.1) * 0.02, 0.0])
    assert weighted["orientation"][1] == -5.0


def test_trajectory_equals_plain_mujoco_that_keeps_the_solvers_warm_start():
    """One solver iteration starts from the last substep's qacc: the pool must carry it across control steps."""
    rng = np.random.default_rng(5)
    actions = rng.uniform(-0.3, 0.3, (50, 12))
    with make("go1_joystick_flat", 1, seed=0, nthread=1, **OFF) as env:
        model, home = env.model, env.model.keyframe("home").qpos
        env.set_physics_state(home[None], np.zeros((1, env.nv)))
        data = mujoco.MjData(model)
        data.qpos[:] = home
        worst = 0.0
        for action in actions:
            state = env.step(action[None])
            assert not (state.terminated | state.truncated).any()
            data.ctrl[:] = home[7:] + 0.5 * action
            for _ in range(5):
                mujoco.mj_step(model, data)
            qpos, qvel = env.physics_qpos_qvel()
            worst = max(worst, np.abs(qpos[0] - data.qpos).max(), np.abs(qvel[0] - data.qvel).max())
    assert worst < 1e-6


def test_observations_layout_previous_action_and_determinism_with_noise_off():
    rng = np.random.default_rng(5)
    with make("go1_joystick_flat", 2, seed=1, nthread=1, **OFF) as env:
        model = env.model
        home = model.keyframe("home").qpos[7:]
        qpos, qvel = start_state(model, rng)
        first = env.set_physics_state(np.tile(qpos, (2, 1)), np.tile(qvel, (2, 1)))
        assert first.obs["actor"].shape == (2, 48) and first.obs["critic"].shape == (2, 123)
        np.testing.assert_array_equal(first.obs["actor"][:, 33:45], 0.0)  # no previous action at an episode's start
        command = env.command.copy()
        a1, a2 = rng.uniform(-1, 1, (2, 12)), rng.uniform(-1, 1, (2, 12))
        s1 = env.step(a1)
        actor, critic = s1.obs["actor"][0], s1.obs["critic"][0]
        np.testing.assert_array_equal(s1.obs["actor"][:, 33:45], 0.0)  # the action before this step's
        s2 = env.step(a2)
        np.testing.assert_allclose(s2.obs["actor"][:, 33:45], a1, rtol=1e-6)
    d = plain_step(model, qpos, qvel, home + 0.5 * a1[0])
    gravity = d.site_xmat[model.site("imu").id].reshape(3, 3).T @ np.array([0, 0, -1.0])
    want_actor = np.concatenate(
        [
            sensor(model, d, "local_linvel"),
            sensor(model, d, "gyro"),
            gravity,
            d.qpos[7:] - home,
            d.qvel[6:],
            np.zeros(12),
            command[0],
        ]
    )
    np.testing.assert_allclose(actor, want_actor, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(critic[:48], actor)
    contact_before = np.zeros(4)
    feet_vel = np.concatenate([sensor(model, d, f"{f}_global_linvel") for f in FEET])
    want_rest = np.concatenate(
        [
            sensor(model, d, "gyro"),
            sensor(model, d, "accelerometer"),
            gravity,
            sensor(model, d, "local_linvel"),
            sensor(model, d, "global_angvel"),
            d.qpos[7:] - home,
            d.qvel[6:],
            d.actuator_force,
            contact_before,
            feet_vel,
            np.full(4, 0.02),
            np.zeros(4),
        ]
    )
    np.testing.assert_allclose(critic[48:], want_rest, rtol=1e-5, atol=1e-4)
    # same seed, noise off: identical observations; noise on: within Playground's noise half-widths
    runs = []
    for level in (0.0, 0.0, 1.0):
        with make("go1_joystick_flat", 4, seed=7, nthread=1, **{**OFF, "noise_level": level}) as env:
            env.reset()
            runs.append(env.step(np.full((4, 12), 0.2)).obs)
    np.testing.assert_array_equal(runs[0]["actor"], runs[1]["actor"])
    bound = np.repeat([0.1, 0.2, 0.05, 0.03, 1.5], [3, 3, 3, 12, 12])
    noise = runs[2]["actor"][:, :33] - runs[0]["actor"][:, :33]
    assert np.all(np.abs(noise) <= bound + 1e-5) and np.all(np.abs(noise).max(axis=0) > 0.2 * bound)
    np.testing.assert_array_equal(runs[2]["critic"][:, 48:], runs[0]["critic"][:, 48:])  # privileged: no noise


def test_an_upside_down_body_terminates_with_the_termination_cost_and_starts_anew():
    with make("go1_joystick_flat", 2, seed=0, nthread=1, **OFF) as env:
        qpos = np.tile(env.model.keyframe("home").qpos, (2, 1))
        qpos[:, 2] = 0.4
        qpos[1, 3:7] = [0.0, 1.0, 0.0, 0.0]  # row 1 rolled by pi: IMU z axis down
        env.set_physics_state(qpos, np.zeros((2, env.nv)))
        state = env.step(np.zeros((2, 12)))
        np.testing.assert_array_equal(state.terminated, [False, True])
        np.testing.assert_array_equal(state.info["reward_terms"]["termination"], [0.0, -1.0])
        assert state.info["final_obs"]["critic"][1, 56] > 0  # gravity z in the IMU frame: the robot is upside down
        assert state.obs["critic"][1, 56] < 0 and env._episode_length[1] == 0  # new episode: upright again


def test_commands_are_kept_until_their_time_then_resampled():
    with make("go1_joystick_flat", 4, seed=0, nthread=1, **OFF) as env:
        env.reset()
        assert np.all(np.abs(env.command) <= CMD_AMPLITUDE)
        env.steps_until_next_cmd = np.array([1, 1, 5, 5])
        env.command = np.full((4, 3), 9.0)  # outside the range: a resampled component cannot keep this value
        env.step(np.zeros((4, 12)))
        assert np.all(env.steps_until_next_cmd[:2] > 0)  # redrawn on the step whose countdown reached zero
        np.testing.assert_array_equal(env.steps_until_next_cmd[2:], 4)
        env.steps_until_next_cmd = np.array([1, 1, 5, 5])
        for _ in range(200):  # the due rows are redrawn until at least one component changed
            before = env.command.copy()
            env.step(np.zeros((4, 12)))
            if np.any(env.command[:2] != before[:2]):
                break
            env.steps_until_next_cmd = np.array([1, 1, 5, 5])
        np.testing.assert_array_equal(env.command[2:], 9.0)
        np.testing.assert_array_equal(env.steps_until_next_cmd[2:], 4)
        changed = env.command[:2] != 9.0
        assert changed.any() and np.all(np.abs(env.command[:2][changed]) <= np.tile(CMD_AMPLITUDE, (2, 1))[changed])
        assert np.all(env.steps_until_next_cmd[:2] >= 0)
    rng = np.random.default_rng(0)
    current = np.full((200_000, 3), 9.0)
    new = sample_command(rng, current)
    kept = new == 9.0
    np.testing.assert_allclose(kept.mean(axis=0), 0.5, atol=0.01)
    np.testing.assert_allclose((new == 0).mean(axis=0), 0.5 * (1 - np.array([0.9, 0.25, 0.5])), atol=0.01)
    assert np.all(np.abs(new[~kept]) <= np.broadcast_to(CMD_AMPLITUDE, new.shape)[~kept])


def model_fields(env, i):
    m = env.pool.get_model(i)
    return {
        "friction": m.geom_friction[env.layout.floor_geom, 0],
        "frictionloss": m.dof_frictionloss[6:].copy(),
        "armature": m.dof_armature[6:].copy(),
        "ipos": m.body_ipos[env.layout.torso_body].copy(),
        "mass": m.body_mass.copy(),
        "qpos0": m.qpos0[7:].copy(),
    }


def test_domain_randomisation_draws_each_envs_model_within_playgrounds_ranges():
    n = 64
    with make("go1_joystick_flat", n, seed=0, nthread=1, noise_level=0.0) as env:
        env.reset()
        nom, torso = env.nominal, env.layout.torso_body
        f = [model_fields(env, i) for i in range(n)]
        friction = np.array([x["friction"] for x in f])
        assert np.all((0.4 <= friction) & (friction <= 1.0)) and friction.std() > 0.1
        loss = np.array([x["frictionloss"] for x in f]) / nom["dof_frictionloss"][6:]
        assert np.all((0.9 <= loss) & (loss <= 1.1)) and loss.std() > 0.03
        arm = np.array([x["armature"] for x in f]) / nom["dof_armature"][6:]
        assert np.all((1.0 <= arm) & (arm <= 1.05)) and arm.std() > 0.01
        dpos = np.array([x["ipos"] for x in f]) - nom["body_ipos"][torso]
        assert np.all(np.abs(dpos) <= 0.05) and dpos.std() > 0.02
        mass = np.array([x["mass"] for x in f])
        links = np.delete(np.arange(1, env.model.nbody), torso - 1)
        ratio = mass[:, links] / nom["body_mass"][links]
        assert np.all((0.9 <= ratio) & (ratio <= 1.1)) and ratio.std() > 0.03
        torso_mass = mass[:, torso]
        assert np.all(
            (0.9 * nom["body_mass"][torso] - 1 <= torso_mass) & (torso_mass <= 1.1 * nom["body_mass"][torso] + 1)
        )
        assert np.abs(torso_mass - nom["body_mass"][torso]).max() > 0.6  # beyond what the 10 % scaling reaches
        dq = np.array([x["qpos0"] for x in f]) - nom["qpos0"][7:]
        assert np.all(np.abs(dq) <= 0.05) and dq.std() > 0.02
        # the pool that evaluates a new episode's sensors carries the same model
        reset_model = env.reset_pool.get_model(3)
        np.testing.assert_array_equal(reset_model.body_mass, mass[3])
        np.testing.assert_array_equal(reset_model.dof_frictionloss[6:], f[3]["frictionloss"])
        # a new episode draws anew
        env.reset_rows(np.array([3]))
        assert model_fields(env, 3)["friction"] != f[3]["friction"]


@pytest.mark.parametrize("flag", RANDOMIZATIONS)
def test_each_randomisation_switches_off_alone(flag):
    field = {
        "randomize_floor_friction": "friction",
        "randomize_joint_friction": "frictionloss",
        "randomize_armature": "armature",
        "randomize_torso_com": "ipos",
        "randomize_link_masses": "mass",
        "randomize_torso_mass": "mass",
        "randomize_qpos0": "qpos0",
    }[flag]
    with make("go1_joystick_flat", 4, seed=0, nthread=1, **{flag: False}) as env:
        env.reset()
        nominal = Go1JoystickFlat(**OFF).build_model()
        off = [model_fields(env, i)[field] for i in range(4)]
        torso = env.layout.torso_body
        if flag == "randomize_link_masses":  # only the torso's mass moves (by its added mass)
            links = np.delete(np.arange(env.model.nbody), torso)
            for x in off:
                np.testing.assert_array_equal(x[links], nominal.body_mass[links])
        elif flag == "randomize_torso_mass":  # the torso's mass is scaled only: within 10 %
            for x in off:
                assert abs(x[torso] / nominal.body_mass[torso] - 1) <= 0.1
        else:
            want = {
                "friction": nominal.geom_friction[0, 0],
                "frictionloss": nominal.dof_frictionloss[6:],
                "armature": nominal.dof_armature[6:],
                "ipos": nominal.body_ipos[torso],
                "qpos0": nominal.qpos0[7:],
            }[field]
            for x in off:
                np.testing.assert_array_equal(x, want)


def test_smoke_fastsac_trains_a_few_hundred_steps_from_the_cli(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "offpolicy.train",
            "algo=fastsac",
            "env=go1_joystick_flat",
            "env.num_envs=8",
            "train.total_env_steps=400",
            "train.learning_starts=0",
            "logger=none",
            "eval.num_envs=0",
            "eval.episodes=1",
            "algo.updates_per_step=1",
            "algo.batch_size=32",
            "algo.critic_hidden_dim=32",
            "algo.actor_hidden_dim=32",
            f"hydra.run.dir={run}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] is True and summary["env_steps"] >= 400
