"""go2_joystick_flat: reward terms, observations, gait phase, termination, commands, randomisation and pushes
checked against plain MuJoCo and UniLab's formulas written out by hand; the CLI's train, eval and export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from sizes import SMALL

import envs
from envs.locomotion.common import TRACKING_TERMS
from envs.locomotion.go2_joystick import RANDOMIZATIONS, REWARD_SCALES, Go2JoystickFlat, combine
from offpolicy import checkpoint as ck
from offpolicy.algorithms import make_algorithm
from offpolicy.runtime.snapshot_eval import MeanPolicy, rollout, tracking_statistics

ROOT = Path(__file__).resolve().parents[2]
FEET = ("FL", "FR", "RL", "RR")
OFF = {"noise_level": 0.0, "push_robots": False, **{flag: False for flag in RANDOMIZATIONS}}
CMD_LOW, CMD_HIGH = np.array([-0.6, -0.4, -0.8]), np.array([1.0, 0.4, 0.8])


def make(n: int, seed: int = 0, **options):
    return envs.make("go2_joystick_flat", n, seed=seed, nthread=1, **{**OFF, **options})


def actuator_controls(model: mujoco.MjModel, action: np.ndarray) -> np.ndarray:
    """UniLab's joint-order action -> each actuator's target: home + 0.4 x the action of its joint."""
    home = model.keyframe("home").qpos[7:]
    joint = model.jnt_qposadr[model.actuator_trnid[:, 0]] - 7
    return (home + 0.4 * action)[joint]


def plain_step(model, qpos, qvel, action) -> mujoco.MjData:
    """Two mj_steps of 0.01 s at the targets on one plain MjData, left as after them."""
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:], data.ctrl[:] = qpos, qvel, actuator_controls(model, action)
    for _ in range(2):
        mujoco.mj_step(model, data)
    return data


def sensor(model, data, name):
    sid = model.sensor(name).id
    adr, dim = model.sensor_adr[sid], model.sensor_dim[sid]
    return data.sensordata[adr : adr + dim].copy()


def start_state(model, rng):
    """Home pose raised and rolled by 0.2 rad (one foot up), joints and velocities moved at random."""
    qpos = model.keyframe("home").qpos.copy()
    qpos[2] = 0.32
    qpos[3:7] = [np.cos(0.1), np.sin(0.1), 0.0, 0.0]
    qpos[7:] += rng.uniform(-0.2, 0.2, 12)
    qvel = rng.uniform(-0.5, 0.5, model.nv)
    return qpos, qvel


WEIGHTS = {"tracking_lin_vel": 1.0, "tracking_ang_vel": 0.2, "lin_vel_z": -5.0, "ang_vel_xy": -0.1,
           "base_height": -20.0, "action_rate": -0.02, "similar_to_default": -0.4, "contact": 1.5,
           "swing_feet_z": 4.0}  # fmt: skip
"""UniLab's FlashSAC example's reward weights (task/go2_joystick_flat/mujoco.yaml)"""


def unilab_terms(model, d, cmd, action, last_act, phase) -> dict[str, float]:
    """UniLab's nine reward terms written out on a plain MjData after the step, feet phases `phase`."""
    home = model.keyframe("home").qpos[7:]
    lin, gyro = sensor(model, d, "local_linvel"), sensor(model, d, "gyro")
    contact = [sensor(model, d, f"{f}_foot_contact")[0] > 0.1 for f in FEET]
    feet_z = [sensor(model, d, f"{f}_pos")[2] for f in FEET]
    return {
        "tracking_lin_vel": np.exp(-((cmd[0] - lin[0]) ** 2 + (cmd[1] - lin[1]) ** 2) / 0.5),
        "tracking_ang_vel": np.exp(-((cmd[2] - gyro[2]) ** 2) / 0.5),
        "lin_vel_z": lin[2] ** 2,
        "ang_vel_xy": gyro[0] ** 2 + gyro[1] ** 2,
        "base_height": (d.qpos[2] - 0.3) ** 2,
        "action_rate": np.sum((action - last_act) ** 2),
        "similar_to_default": np.sum(np.abs(d.qpos[7:] - home)),
        "contact": np.mean([contact[i] == (phase[i] < 0.6) for i in range(4)]),
        "swing_feet_z": np.mean([np.exp(-((feet_z[i] - 0.1) ** 2) / 0.01) * (phase[i] >= 0.6) for i in range(4)]),
    }


@pytest.mark.parametrize("phase_before", [0.60, 0.52], ids=["two_feet_swinging", "all_in_stance"])
def test_each_reward_term_matches_unilabs_formula_on_a_constructed_state(phase_before):
    rng = np.random.default_rng(3)
    with make(2) as env:
        model = env.model
        qpos, qvel = start_state(model, rng)
        env.set_physics_state(np.tile(qpos, (2, 1)), np.tile(qvel, (2, 1)))
        command = np.array([[0.7, -0.3, 0.4], [-0.2, 0.1, -0.6]])
        last_act = rng.uniform(-1, 1, (2, 12))
        env.command, env.last_act, env.gait_phase = command, last_act, np.float32(phase_before)
        action = np.tile(rng.uniform(-1, 1, 12), (2, 1))  # both rows reach the same physics
        state = env.step(action)
        terms = {k: v / REWARD_SCALES[k] for k, v in state.info["reward_terms"].items()}
        reward = state.reward
    d = plain_step(model, qpos, qvel, action[0])
    phase = (phase_before + 0.02 * 2.0 + np.array([0.0, 0.5, 0.5, 0.0])) % 1.0  # after this step's advance
    assert REWARD_SCALES == WEIGHTS
    for row in range(2):
        want = unilab_terms(model, d, command[row], action[row], last_act[row], phase)
        assert set(terms) == set(want)
        for k, v in want.items():
            np.testing.assert_allclose(terms[k][row], v, rtol=1e-9, atol=1e-12, err_msg=k)
        total = sum(v * WEIGHTS[k] for k, v in want.items()) * 0.02
        np.testing.assert_allclose(reward[row], total, rtol=1e-5, atol=1e-7)
    # the state exercises the gait terms: three feet down, the contact match away from 1/2
    contact = [sensor(model, d, f"{f}_foot_contact")[0] > 0.1 for f in FEET]
    assert sum(contact) == 3 and want["contact"] in (0.25, 0.75)
    assert (want["swing_feet_z"] > 1e-3) == (phase_before == 0.60)
    # the sum: weighted, times dt, never clipped (a sum below zero stays below zero)
    total, weighted = combine({k: np.ones(1) for k in WEIGHTS}, 0.02)
    np.testing.assert_allclose(total, [sum(WEIGHTS.values()) * 0.02])
    assert total[0] < 0 and weighted["base_height"][0] == -20.0


def test_trajectory_equals_plain_mujoco_with_joint_order_actions_and_the_warm_start():
    """Within the solver's tolerance: MuJoCo's Euler step applies the joint damping implicitly, so the warm start
    handed on (the velocity change over h) is not exactly the solver's qacc, and its Newton iterations stop
    within their tolerance from either start (a 1e-5 spread that does not grow); a wrong joint-to-actuator
    mapping or a lost substep moves the state by orders of magnitude more."""
    rng = np.random.default_rng(5)
    actions = rng.uniform(-0.5, 0.5, (40, 12))
    with make(1) as env:
        model, home = env.model, env.model.keyframe("home").qpos
        assert model.opt.timestep == 0.01 and env.frame_skip == 2 and env.dt == pytest.approx(0.02)
        env.set_physics_state(home[None], np.zeros((1, env.nv)))
        data = mujoco.MjData(model)
        data.qpos[:] = home
        worst = 0.0
        for action in actions:
            state = env.step(action[None])
            assert not state.done.any()
            data.ctrl[:] = actuator_controls(model, action)
            for _ in range(2):
                mujoco.mj_step(model, data)
            qpos, qvel = env.physics_qpos_qvel()
            worst = max(worst, np.abs(qpos[0] - data.qpos).max(), np.abs(qvel[0] - data.qvel).max())
    assert worst < 1e-3


def test_observations_layout_current_action_and_the_privileged_linear_velocity():
    rng = np.random.default_rng(5)
    with make(2, seed=1) as env:
        model = env.model
        home = model.keyframe("home").qpos[7:]
        qpos, qvel = start_state(model, rng)
        first = env.set_physics_state(np.tile(qpos, (2, 1)), np.tile(qvel, (2, 1)))
        assert first.obs["actor"].shape == (2, 49) and first.obs["critic"].shape == (2, 52)
        assert env.spec.obs_dims == {"actor": 49, "critic": 52} and env.spec.tracking_terms == TRACKING_TERMS
        np.testing.assert_array_equal(first.obs["actor"][:, 30:42], 0.0)  # no action yet
        command = env.command.copy()
        a1, a2 = rng.uniform(-1, 1, (2, 12)), rng.uniform(-1, 1, (2, 12))
        s1 = env.step(a1)
        actor, critic = s1.obs["actor"][0], s1.obs["critic"][0]
        q1, v1 = env.physics_qpos_qvel(0)  # joints after the step (plain MuJoCo's within the solver's tolerance)
        np.testing.assert_allclose(s1.obs["actor"][:, 30:42], a1, rtol=1e-6)  # the action this step applied
        s2 = env.step(a2)
        np.testing.assert_allclose(s2.obs["actor"][:, 30:42], a2, rtol=1e-6)
    d = plain_step(model, qpos, qvel, a1[0])
    phase = (0.04 + np.array([0.0, 0.5, 0.5, 0.0])) % 1.0
    # the named sensors come from the last substep's forward pass, the same state in both
    want_actor = np.concatenate(
        [sensor(model, d, "gyro"), -sensor(model, d, "upvector"), q1[7:] - home, v1[6:], a1[0], command[0], phase]
    )  # fmt: skip
    np.testing.assert_allclose(actor, want_actor, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(q1, d.qpos, atol=1e-5)
    np.testing.assert_array_equal(critic[:49], actor)
    np.testing.assert_allclose(critic[49:], sensor(model, d, "local_linvel"), rtol=1e-5, atol=1e-6)


def test_noise_only_on_joint_terms_within_unilabs_half_widths_and_drawn_apart_for_the_critic():
    runs = []
    for level in (0.0, 0.0, 1.0):
        with make(16, seed=7, noise_level=level) as env:
            env.reset()
            runs.append(env.step(np.full((16, 12), 0.2)).obs)
    np.testing.assert_array_equal(runs[0]["actor"], runs[1]["actor"])
    for key in ("actor", "critic"):
        noise = runs[2][key] - runs[0][key]
        bound = np.repeat([0.01, 0.1], 12)
        assert np.all(np.abs(noise[:, 6:30]) <= bound + 1e-6), key
        assert np.all(np.abs(noise[:, 6:30]).max(axis=0) > 0.5 * bound), key
        np.testing.assert_array_equal(noise[:, :6], 0.0)
        np.testing.assert_array_equal(noise[:, 30:], 0.0)  # action, command, phase (and linear velocity) clean
    assert np.abs(runs[2]["critic"][:, 6:30] - runs[2]["actor"][:, 6:30]).min(axis=0).max() > 0  # own draws


def float32_phase(steps: int) -> np.ndarray:
    """UniLab's `_GaitTerm`: fmod(phase + 0.02 x 2, 1) in float32 per step, then remainder(phase + offsets, 1)."""
    phase = np.float32(0.0)
    for _ in range(steps):
        phase = np.fmod(np.float32(phase + np.float32(0.04)), np.float32(1.0))
    return np.remainder(phase + np.array([0, 0.5, 0.5, 0], np.float32), np.float32(1.0))


def test_gait_phase_is_a_float32_clock_common_to_all_rows_that_episodes_do_not_restart():
    with make(2, max_episode_steps=10) as env:
        obs = env.reset().obs["actor"]
        np.testing.assert_array_equal(obs[:, 45:49], [[0, 0.5, 0.5, 0]] * 2)
        for k in range(1, 31):
            state = env.step(np.zeros((2, 12)))
            # exactly UniLab's float32 running sum (k x 0.04 mod 1 differs, e.g. at k = 15: 0.6 against 0.59999996)
            np.testing.assert_array_equal(state.obs["actor"][:, 45:49], np.tile(float32_phase(k), (2, 1)))
        assert env._episode_length[0] == 0  # three 10-step episodes passed, the clock ran on
        env.reset()  # a full reset starts the clock again
        np.testing.assert_array_equal(
            env.step(np.zeros((2, 12))).obs["actor"][:, 45:49], np.tile(float32_phase(1), (2, 1))
        )


def tilted(angle: float) -> np.ndarray:
    qpos = Go2JoystickFlat(**OFF).build_model().keyframe("home").qpos.copy()
    qpos[2] = 0.45
    qpos[3:7] = [np.cos(angle / 2), np.sin(angle / 2), 0.0, 0.0]
    return qpos


def test_a_base_tilted_beyond_60_degrees_terminates_and_starts_anew():
    with make(3) as env:
        qpos = np.stack([tilted(0.0), tilted(np.radians(50)), tilted(np.radians(72))])
        env.set_physics_state(qpos, np.zeros((3, env.nv)))
        state = env.step(np.zeros((3, 12)))
        np.testing.assert_array_equal(state.terminated, [False, False, True])
        assert not state.truncated.any()
        assert state.info["final_obs"]["actor"][2, 5] > -np.cos(np.radians(65))  # the IMU z axis far from up
        assert state.obs["actor"][2, 5] < -0.99 and env._episode_length[2] == 0  # new episode: upright again
    with make(1, max_episode_steps=3) as env:  # the time limit truncates
        env.reset()
        done = [env.step(np.zeros((1, 12))) for _ in range(3)]
        assert [s.truncated[0] for s in done] == [False, False, True] and not done[-1].terminated[0]


def test_commands_are_drawn_in_unilabs_ranges_and_redrawn_when_their_20_s_run_out():
    with make(256) as env:
        env.reset()
        c = env.command
        assert np.all((CMD_LOW <= c) & (c <= CMD_HIGH))
        np.testing.assert_array_less(c.min(axis=0), CMD_LOW + 0.1)
        np.testing.assert_array_less(CMD_HIGH - 0.1, c.max(axis=0))
        np.testing.assert_array_equal(env.steps_until_next_cmd, 1000)
    with make(4) as env:
        env.reset()
        env.steps_until_next_cmd = np.array([1, 1, 5, 5])
        env.command = np.full((4, 3), 9.0)  # outside the ranges: a redrawn command cannot keep it
        env.step(np.zeros((4, 12)))
        assert np.all((CMD_LOW <= env.command[:2]) & (env.command[:2] <= CMD_HIGH))
        np.testing.assert_array_equal(env.steps_until_next_cmd[:2], 1000)
        np.testing.assert_array_equal(env.command[2:], 9.0)
        np.testing.assert_array_equal(env.steps_until_next_cmd[2:], 4)


def test_eval_rows_see_the_same_commands_after_each_forced_reset():
    with make(3, seed=4) as env:
        env.reset()
        first = env.command.copy()
        for _ in range(3):
            env.step(np.zeros((3, 12)))
        env.reset_rows(np.array([1, 2]))
        np.testing.assert_array_equal(env.command[1:], first[1:])
    with make(3, seed=5) as other:
        other.reset()
        assert not np.array_equal(other.command, first)


def model_fields(env, i):
    m, base = env.pool.get_model(i), env.layout.base_body
    return {
        "kp": m.actuator_gainprm[:, 0].copy(),
        "kp_bias": -m.actuator_biasprm[:, 1].copy(),
        "kd": -m.actuator_biasprm[:, 2].copy(),
        "mass": m.body_mass.copy(),
        "ipos": m.body_ipos.copy(),
        "base": base,
    }


def test_randomisation_draws_each_envs_gains_mass_and_com_within_unilabs_ranges():
    n = 64
    with envs.make("go2_joystick_flat", n, seed=0, nthread=1, noise_level=0.0) as env:
        env.reset()
        nominal = Go2JoystickFlat().build_model()
        f = [model_fields(env, i) for i in range(n)]
        base = f[0]["base"]
        kp, kd = np.array([x["kp"] for x in f]), np.array([x["kd"] for x in f])
        np.testing.assert_array_equal(kp, np.array([x["kp_bias"] for x in f]))
        assert np.all((31.5 <= kp) & (kp <= 38.5)) and kp.std(axis=0).min() > 1.0
        assert kp.std(axis=1).min() > 0.5 and kd.std(axis=1).min() > 0.005  # drawn per actuator
        assert np.all((0.45 <= kd) & (kd <= 0.55)) and kd.std(axis=0).min() > 0.015
        np.testing.assert_array_equal(env.pool.get_model(0).dof_damping, nominal.dof_damping)  # joint damping stays
        mass = np.array([x["mass"] for x in f])
        dm = mass[:, base] - nominal.body_mass[base]
        assert np.all(np.abs(dm) <= 1.5) and np.abs(dm).max() > 1.0
        np.testing.assert_array_equal(
            np.delete(mass, base, axis=1), np.tile(np.delete(nominal.body_mass, base), (n, 1))
        )
        ipos = np.array([x["ipos"] for x in f])
        dx = ipos[:, base] - nominal.body_ipos[base]
        assert np.all(np.abs(dx[:, 0]) <= 0.05) and dx[:, 0].std() > 0.02
        np.testing.assert_array_equal(dx[:, 1:], 0.0)
        np.testing.assert_array_equal(
            np.delete(ipos, base, axis=1), np.tile(np.delete(nominal.body_ipos, base, 0), (n, 1, 1))
        )
        reset_model = env.reset_pool.get_model(3)  # the pool that evaluates a new episode's sensors
        np.testing.assert_array_equal(reset_model.body_mass, mass[3])
        np.testing.assert_array_equal(reset_model.actuator_gainprm[:, 0], kp[3])
        env.reset_rows(np.array([3]))  # a new episode draws anew
        assert not np.array_equal(model_fields(env, 3)["kp"], kp[3])


@pytest.mark.parametrize("flag", RANDOMIZATIONS)
def test_each_randomisation_switches_off_alone(flag):
    with envs.make("go2_joystick_flat", 4, seed=0, nthread=1, **{flag: False}) as env:
        env.reset()
        nominal = Go2JoystickFlat().build_model()
        base = env.layout.base_body
        for i in range(4):
            x = model_fields(env, i)
            kp_nominal = np.array_equal(x["kp"], nominal.actuator_gainprm[:, 0]) and not x["kd"].any()
            mass_nominal = np.array_equal(x["mass"], nominal.body_mass)
            com_nominal = np.array_equal(x["ipos"][base], nominal.body_ipos[base])
            off = {
                "randomize_pd_gains": kp_nominal,
                "randomize_base_mass": mass_nominal,
                "randomize_base_com": com_nominal,
            }
            assert off == {k: k == flag for k in RANDOMIZATIONS}, (flag, off)  # fmt: skip


def one_step_after(global_steps: int, **options):
    """qvel after one step from the home pose, with the push clock at `global_steps` before it."""
    with make(3, **options) as env:
        home = env.model.keyframe("home").qpos
        env.set_physics_state(np.tile(home, (3, 1)), np.zeros((3, env.nv)))
        env.global_steps = global_steps
        env.step(np.zeros((3, 12)))
        return env.physics_qpos_qvel()[1]


def test_pushes_add_a_world_velocity_every_15_s_and_switch_off():
    calm = one_step_after(749)
    pushed = one_step_after(749, push_robots=True)
    delta = pushed - calm
    assert np.all(np.abs(delta[:, 0:2]) <= 1.0) and np.all(np.abs(delta[:, 2]) <= 0.5)
    assert np.all(np.abs(delta[:, :3]).max(axis=1) > 0.05) and len({round(v, 9) for v in delta[:, 0]}) == 3
    np.testing.assert_array_equal(delta[:, 3:], 0.0)  # linear only, joints untouched
    np.testing.assert_array_equal(one_step_after(748, push_robots=True), calm)  # not yet 750 steps
    with make(2, push_robots=True, max_episode_steps=750) as env:  # a row that ends on that step is not pushed
        home = env.model.keyframe("home").qpos
        env.set_physics_state(np.tile(home, (2, 1)), np.zeros((2, env.nv)))
        env.global_steps, env._episode_length[0] = 749, 749
        start = env.initial_states  # the new episode's state as drawn
        drawn = []
        env.initial_states = lambda n: drawn.append(start(n)) or drawn[-1]
        state = env.step(np.zeros((2, 12)))
        assert state.truncated[0] and not state.truncated[1]
        np.testing.assert_allclose(env.physics_qpos_qvel()[1][0, :3], drawn[0][0, 1 + env.nq : 4 + env.nq])


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("algo", ["fastsac", "flashsac"])
def test_smoke_trains_a_few_hundred_steps_from_the_cli(algo, tmp_path):
    run = tmp_path / "run"
    small = [f"algo.{k}={v}" for k, v in SMALL[algo].items()]
    proc = cli("offpolicy.train", f"algo={algo}", "env=go2_joystick_flat", "env.num_envs=8",
               "train.total_env_steps=400", "train.learning_starts=0", "logger=none", "eval.num_envs=0",
               "eval.episodes=1", "algo.updates_per_step=1", *small, f"hydra.run.dir={run}", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["completed"] is True and summary["env_steps"] >= 400


def go2_checkpoint(path: Path):
    """A small FastSAC checkpoint of go2_joystick_flat's sizes (untrained weights); and its spec."""
    with envs.make("go2_joystick_flat", num_envs=1) as env:
        spec = replace(env.spec, num_envs=2)
    cfg = {"name": "fastsac", **SMALL["fastsac"], "v_min": -5.0, "v_max": 5.0}
    torch.manual_seed(0)
    algorithm = make_algorithm(OmegaConf.create(cfg), spec, "cpu")
    identity = ck.RunIdentity("fastsac", spec.name, dict(spec.obs_dims), spec.action_dim, spec.num_envs)
    counters = {"env_steps": 300, "ticks": 150, "updates": 6, "policy_version": 2}
    config = {"algo": cfg, "env": {"name": spec.name, "options": {}}}
    ck.save_checkpoint(path, ck.build_checkpoint(identity, algorithm.state_dict(), counters, config=config))
    return algorithm, spec


def test_eval_cli_writes_the_tracking_metrics_of_a_go2_checkpoint(tmp_path):
    algorithm, _ = go2_checkpoint(tmp_path / "go2.pt")
    out = tmp_path / "out"
    proc = cli("offpolicy.eval", f"checkpoint={tmp_path / 'go2.pt'}", "episodes=4", "seed=3", "device=cpu",
               "max_episode_steps=80", f"hydra.run.dir={out}", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "eval.json").read_text())
    assert result["episodes"] == 4
    tracking: dict = {}
    with envs.make("go2_joystick_flat", 4, seed=3, max_episode_steps=80) as local:
        rollout(local, MeanPolicy(algorithm, local.spec, torch.device("cpu")), tracking=tracking)
    expected = tracking_statistics(TRACKING_TERMS, **tracking)
    assert set(expected) == {"lin_vel_error", "yaw_rate_error", "fall_fraction", "command_speed"}
    for key, value in expected.items():
        np.testing.assert_allclose(result[key], value, rtol=1e-5, equal_nan=True)
    assert 0 < result["command_speed"] < np.hypot(1.0, 0.4)


def test_export_writes_go2_joint_targets_gains_and_gait_clock(tmp_path):
    algorithm, spec = go2_checkpoint(tmp_path / "go2.pt")
    proc = cli("offpolicy.export", f"checkpoint={tmp_path / 'go2.pt'}", "format=onnx", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads((tmp_path / "go2.json").read_text())
    model = Go2JoystickFlat().build_model()
    home = model.keyframe("home").qpos[7:]
    assert info["joint_names"] == [model.joint(j).name for j in range(1, 13)]  # the action's (joint) order
    assert info["default_joint_positions"] == pytest.approx(home.tolist())
    assert (info["kp"], info["kd"], info["action_scale"]) == (35.0, 0.5, 0.4)
    assert info["control_dt"] == pytest.approx(0.02) and info["sim_dt"] == pytest.approx(0.01)
    assert sum(part["size"] for part in info["observation_layout"]) == info["obs_dim"] == 49
    assert info["observation_layout"][-1] == {"name": "gait_phase", "size": 4}
    assert info["gait"] == {"frequency_hz": 2.0, "phase_offsets": [0.0, 0.5, 0.5, 0.0], "feet": list(FEET)}
    import onnxruntime as ort

    obs = np.random.default_rng(1).normal(size=(8, 49)).astype(np.float32)
    session = ort.InferenceSession(str(tmp_path / "go2.onnx"), providers=["CPUExecutionProvider"])
    action, targets = session.run(["action", "joint_targets"], {"obs": obs})
    want = MeanPolicy(algorithm, spec, torch.device("cpu"))({"actor": obs})
    np.testing.assert_allclose(action, want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(targets, home + 0.4 * want, rtol=0, atol=1e-5)
