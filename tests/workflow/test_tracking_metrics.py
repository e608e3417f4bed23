"""Tracking metrics of a velocity-command task (go1_joystick_flat): per-step errors, the first second left
out, means over steps, falls; snapshot evaluation's statistics and `python -m offpolicy.eval`'s eval.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from sizes import SMALL

import envs
from envs.locomotion.go1_joystick import RANDOMIZATIONS, TRACKING_TERMS, tracking_values
from envs.tracking import EpisodeTracking
from offpolicy import checkpoint as ck
from offpolicy.algorithms import make_algorithm
from offpolicy.runtime.snapshot_eval import SnapshotEval, eval_metrics, rollout, tracking_statistics

REPO = Path(__file__).resolve().parents[2]
OFF = {"noise_level": 0.0, **{flag: False for flag in RANDOMIZATIONS}}
DT = 0.02  # go1's control step: the first second is 50 steps


def test_step_errors_are_planar_speed_and_absolute_yaw_rate():
    p = {
        "local_linvel": np.array([[0.3, 0.4, 9.0], [1.0, 0.0, 0.0]]),
        "gyro": np.array([[5.0, 5.0, -0.5], [0, 0, 0.7]]),
    }
    command = np.array([[0.0, 0.0, 0.5], [0.0, 0.0, 0.2]])
    np.testing.assert_allclose(tracking_values(p, command), [[0.5, 1.0, 0.0], [1.0, 0.5, 0.0]])
    p0 = {"local_linvel": np.zeros((1, 3)), "gyro": np.zeros((1, 3))}  # standing still: errors = the command
    np.testing.assert_allclose(tracking_values(p0, np.array([[0.6, -0.8, -1.1]])), [[1.0, 1.1, 1.0]])


def constructed_episodes() -> tuple[np.ndarray, np.ndarray]:
    """Two rows: row 0 runs 100 steps (error 1.0 in its first second, 0.2 after); row 1 falls at step 60 (0.5).

    Counted: 50 steps of 0.2 and 10 of 0.5: the step mean is 0.25 (the mean of episode means 0.35; with the
    first second in, (50 + 10 + 30) / 160)."""
    tracker = EpisodeTracking(2, ("err",), DT)
    totals = np.zeros((2, 2))
    for k in range(1, 101):
        values = np.array([[1.0 if k <= 50 else 0.2], [0.5 if k > 50 else 0.0]])
        done = np.array([k == 100, k == 60])
        ids = np.flatnonzero(done)
        out = tracker.add(values, np.array([k, k if k <= 60 else k - 60]), np.ones(2, bool), ids, tracker.ended(ids))
        totals[ids] = out[ids]
        if k == 60:
            np.testing.assert_array_equal(tracker.sums[1], 0.0)  # the next episode on row 1 starts from zero
    return totals, np.array([False, True])


def test_tracking_means_count_steps_after_the_first_second_and_falls():
    sums, fell = constructed_episodes()
    np.testing.assert_allclose(sums, [[50 * 0.2, 50], [10 * 0.5, 10]])
    stats = tracking_statistics(("err",), sums, fell)
    assert stats.keys() == {"err", "fall_fraction"} and stats["fall_fraction"] == 0.5
    np.testing.assert_allclose(stats["err"], 0.25, rtol=1e-12)
    assert tracking_statistics((), sums, fell) == {}  # a task without tracking terms reports nothing


def test_snapshot_eval_reports_tracking_from_the_rows_sums():
    terms = ("lin_vel_error", "yaw_rate_error", "command_speed")
    ev = SnapshotEval(1, 10, 2.0, reset_tick=5, rows=2, per_row=1, started_at=0.0, tracking_terms=terms)
    track = np.zeros((2, 8), np.float32)
    track[0, :4] = [10.0, 20.0, 50.0, 50]
    track[1, :4] = [3.0, 1.0, 10.0, 10]
    ev.observe(6, np.array([True, True]), np.array([1.0, 2.0]), np.array([100, 60]), np.array([False, True]), track)
    result = ev.result()
    np.testing.assert_allclose([result["lin_vel_error"], result["yaw_rate_error"]], [13 / 60, 21 / 60], rtol=1e-6)
    assert result["command_speed"] == 1.0 and result["fall_fraction"] == 0.5
    metrics = eval_metrics(result)
    assert metrics["eval/lin_vel_error"] == result["lin_vel_error"] and metrics["eval/fall_fraction"] == 0.5
    plain = SnapshotEval(1, 10, 2.0, reset_tick=5, rows=1, per_row=1, started_at=0.0)
    plain.observe(6, np.array([True]), np.array([1.0]), np.array([5]))
    assert "lin_vel_error" not in plain.result() and "eval/fall_fraction" not in eval_metrics(plain.result())


def test_go1_standing_still_reports_its_command_after_the_first_second_and_counts_a_fall():
    """Row 0 stands with zero actions under a fixed command; row 1 starts upside down and falls on step 1."""
    with envs.make("go1_joystick_flat", 2, seed=0, nthread=1, max_episode_steps=120, **OFF) as env:
        assert env.spec.tracking_terms == TRACKING_TERMS
        qpos = np.tile(env.model.keyframe("home").qpos, (2, 1))
        qpos[1, 2], qpos[1, 3:7] = 0.4, [0.0, 1.0, 0.0, 0.0]
        env.reset()
        env.set_physics_state(qpos, np.zeros((2, env.nv)))
        command = np.array([0.6, -0.8, 0.5])
        env.command = np.tile(command, (2, 1))
        env.steps_until_next_cmd = np.full(2, 10_000)
        state = env.step(np.zeros((2, 12)))
        assert state.terminated[1] and state.info["episode_tracking"][1, 3] == 0  # fell in its first second
        lin, yaw = [], []
        for _ in range(118):  # to step 119: row 0 still runs, its physics readable
            env.command[0] = command
            env.steps_until_next_cmd[0] = 10_000
            state = env.step(np.zeros((2, 12)))
            p = env._physics(slice(0, 1))
            lin.append(np.linalg.norm(p["local_linvel"][0, :2] - command[:2]))
            yaw.append(abs(p["gyro"][0, 2] - command[2]))
        sums = state.info["episode_tracking"][0]
        assert sums[3] == 69  # steps 51..119
        np.testing.assert_allclose(sums[:3], [sum(lin[-69:]), sum(yaw[-69:]), 69 * 1.0], rtol=1e-9)
        np.testing.assert_allclose(sums[:2] / 69, [1.0, 0.5], atol=0.05)  # standing: errors are the command
        state = env.step(np.zeros((2, 12)))
        assert state.truncated[0] and state.info["episode_tracking"][0, 3] == 70  # the ended episode's totals
        assert env.tracking.sums[0, 3] == 0


def test_eval_rows_see_the_same_commands_after_each_forced_reset():
    with envs.make("go1_joystick_flat", 3, seed=4, nthread=1, **OFF) as env:
        env.reset()
        first = env.command.copy(), env.steps_until_next_cmd.copy()
        for _ in range(3):
            env.step(np.zeros((3, 12)))
        env.reset_rows(np.array([1, 2]))
        np.testing.assert_array_equal(env.command[1:], first[0][1:])
        np.testing.assert_array_equal(env.steps_until_next_cmd[1:], first[1][1:])
    with envs.make("go1_joystick_flat", 3, seed=5, nthread=1, **OFF) as other:
        other.reset()
        assert not np.array_equal(other.command, first[0])  # another seed, other commands


def go1_checkpoint(path: Path) -> Path:
    """A small FastSAC checkpoint of go1_joystick_flat's sizes (untrained weights)."""
    env = envs.make("go1_joystick_flat", num_envs=1)
    spec = replace(env.spec, num_envs=2)
    env.close()
    cfg = {"name": "fastsac", **SMALL["fastsac"], "v_min": -10.0, "v_max": 10.0}
    torch.manual_seed(0)
    algorithm = make_algorithm(OmegaConf.create(cfg), spec, "cpu")
    identity = ck.RunIdentity("fastsac", spec.name, dict(spec.obs_dims), spec.action_dim, spec.num_envs)
    counters = {"env_steps": 300, "ticks": 150, "updates": 6, "policy_version": 2}
    config = {"algo": cfg, "env": {"name": spec.name, "options": {}}}
    return ck.save_checkpoint(path, ck.build_checkpoint(identity, algorithm.state_dict(), counters, config=config))


def test_eval_cli_writes_the_tracking_metrics_of_a_go1_checkpoint(tmp_path):
    """The real CLI on a go1 checkpoint: eval.json holds the four keys, equal to an in-process rollout's."""
    path = go1_checkpoint(tmp_path / "go1.pt")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "offpolicy.eval", f"checkpoint={path}", "episodes=4", "seed=3", "device=cpu",
           "max_episode_steps=80", f"hydra.run.dir={out}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "eval.json").read_text())
    assert result["episodes"] == 4
    for key in ("lin_vel_error", "yaw_rate_error", "fall_fraction", "command_speed"):
        assert np.isfinite(result[key]) or (key != "fall_fraction" and result["fall_fraction"] == 1.0), key
    assert result["fall_fraction"] * 4 == round(result["fall_fraction"] * 4)
    ckpt = ck.load_checkpoint(path)
    spec = replace(envs.make("go1_joystick_flat", num_envs=1).spec, num_envs=2)
    algorithm = make_algorithm(OmegaConf.create(ckpt["config"]["algo"] | {"compile": False}), spec, "cpu")
    ck.load_algorithm_state(algorithm, ckpt, path, allow_policy_only=True)
    from offpolicy.runtime.snapshot_eval import MeanPolicy

    tracking: dict = {}
    with envs.make("go1_joystick_flat", 4, seed=3, max_episode_steps=80) as local:
        rollout(local, MeanPolicy(algorithm, local.spec, torch.device("cpu")), tracking=tracking)
    expected = tracking_statistics(TRACKING_TERMS, **tracking)
    for key, value in expected.items():
        np.testing.assert_allclose(result[key], value, rtol=1e-5, equal_nan=True)


class _ScriptedEnv:
    """Two rows with one tracking term: row 0 terminates (falls) at step 2, row 1 reaches its limit at step 3."""

    class spec:  # noqa: N801 - the attributes `rollout` reads of an EnvSpec
        num_envs, max_episode_steps, tracking_terms = 2, 3, ("lin_vel_error",)

    def __init__(self) -> None:
        self.t = 0

    def reset(self):
        self.t = 0
        return self._state(np.zeros(2, bool), np.zeros(2, bool))

    def step(self, action):
        self.t += 1
        return self._state(np.array([self.t == 2, False]), np.array([False, self.t == 3]))

    def _state(self, terminated, truncated):
        from types import SimpleNamespace

        info = {"episode_return": np.full(2, 10.0 * self.t), "episode_length": np.full(2, self.t),
                "episode_tracking": np.array([[0.5 * self.t, self.t], [0.25 * self.t, self.t]])}  # fmt: skip
        return SimpleNamespace(obs={"actor": np.zeros((2, 1))}, terminated=terminated, truncated=truncated, info=info)


def test_rollout_records_which_episodes_fell_and_their_tracking_sums():
    tracking: dict = {}
    returns, lengths, _ = rollout(_ScriptedEnv(), lambda obs: np.zeros((2, 1)), tracking=tracking)
    np.testing.assert_array_equal(lengths, [2, 3])
    np.testing.assert_array_equal(returns, [20.0, 30.0])
    np.testing.assert_array_equal(tracking["fell"], [True, False])  # a termination falls, a time limit does not
    np.testing.assert_array_equal(tracking["sums"], [[1.0, 2.0], [0.75, 3.0]])  # each row's sums as it ended
