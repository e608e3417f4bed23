"""Evaluation along a schedule of commands: parsing, the joystick envs holding each command for its steps from
every episode's start, and `python -m offpolicy.eval commands=...` recording the segments in eval.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gl import gl_backend_or_skip
from test_tracking_metrics import go1_checkpoint

import envs
from offpolicy.command_schedule import Segment, SegmentTracking, apply_schedule, parse_schedule, segment_steps
from offpolicy.config import ConfigError

REPO = Path(__file__).resolve().parents[2]
FORM = "[vx, vy, yaw_rate, seconds]"


@pytest.mark.parametrize(
    "value,message",
    [
        ([[0.5, 0, 0]], f"commands=[0.5, 0, 0]: entry 0 must be {FORM} (4 numbers)"),
        ([[0.5, 0, 0, 1], [1, 0, 0, 1, 2]], f"commands=[1, 0, 0, 1, 2]: entry 1 must be {FORM} (4 numbers)"),
        ([[0.5, 0, 0, -1]], "commands=[0.5, 0, 0, -1]: entry 0: seconds must be > 0"),
        ([[0.5, 0, 0, 0]], "commands=[0.5, 0, 0, 0]: entry 0: seconds must be > 0"),
        ([[0.5, "a", 0, 1]], f"commands=[0.5, a, 0, 1]: entry 0 must be 4 finite numbers {FORM}"),
        ([[float("nan"), 0, 0, 1]], f"commands=[nan, 0, 0, 1]: entry 0 must be 4 finite numbers {FORM}"),
        ([[True, 0, 0, 1]], f"commands=[true, 0, 0, 1]: entry 0 must be 4 finite numbers {FORM}"),
        ([], f"commands=[]: must be a list of {FORM} entries"),
        (5, f"commands=5: must be a list of {FORM} entries"),
        ([0.5, 0, 0, 1], f"commands=0.5: entry 0 must be {FORM} (4 numbers)"),
    ],
)
def test_a_bad_schedule_is_one_line_naming_the_entry(value, message):
    with pytest.raises(ConfigError) as err:
        parse_schedule(value)
    assert str(err.value) == message


def test_seconds_round_to_control_steps_and_a_segment_of_no_step_is_refused():
    segments = parse_schedule([[0.5, 0, 0, 0.1], [1, 0, 0, 0.05], [0, 0, 1, 0.03]])
    assert segments[0] == Segment((0.5, 0.0, 0.0), 0.1)
    np.testing.assert_array_equal(segment_steps(segments, 0.02), [5, 2, 2])  # 2.5 and 1.5 rounded half to even
    with pytest.raises(
        ConfigError,
        match=r"commands=\[0.0, 0.0, 1.0, 0.009\]: seconds must be at least half a control step \(0.01 s\)$",
    ):
        segment_steps(parse_schedule([[0, 0, 1, 0.009]]), 0.02)
    assert parse_schedule(None) is None


def test_a_task_without_commands_is_refused():
    with envs.make("hopper", 1) as env, pytest.raises(ConfigError) as err:
        apply_schedule(env, "hopper", parse_schedule([[0.5, 0, 0, 1]]))
    assert str(err.value) == (
        "commands=[[0.5, 0.0, 0.0, 1.0]]: task hopper takes no commands; valid: a joystick task "
        "(go1_joystick_flat, go2_joystick_flat)"
    )


@pytest.mark.parametrize("name", ["go1_joystick_flat", "go2_joystick_flat"])
def test_the_command_follows_the_schedule_step_by_step_and_starts_over_with_each_episode(name):
    """0.1 s, 0.06 s, 0.1 s at dt 0.02: steps 0-4, 5-7, 8-12; the last one held until the 16-step limit."""
    segments = parse_schedule([[0.5, 0, 0, 0.1], [1.0, -0.2, 0, 0.06], [0, 0, 1.0, 0.1]])
    commands = np.array([s.command for s in segments])
    want = [0] * 5 + [1] * 3 + [2] * 5 + [2] * 3
    options = {"noise_level": 0.0, "max_episode_steps": 16}
    with envs.make(name, 3, seed=0, nthread=1, **options) as env:
        assert env.spec.dt == 0.02
        apply_schedule(env, name, segments)
        state = env.reset()
        for _ in range(2):  # the schedule starts over after the time limit's reset
            for step in range(16):
                np.testing.assert_array_equal(env.command, np.tile(commands[want[step]], (3, 1)))
                # the observation shows the command of the step it came from (as in the references: it is
                # taken before the next step's command is set), so a switch shows one step later
                shown = commands[want[max(step - 1, 0)]]
                np.testing.assert_array_equal(
                    state.obs["actor"][:, commands_columns(name)], np.tile(shown, (3, 1)).astype(np.float32)
                )
                state = env.step(np.zeros((3, 12)))
                state.reward  # noqa: B018 - the deferred part, as a rollout reads it
            assert state.truncated.all()
        env.reset_rows(np.array([1]))  # an evaluation's forced reset starts the schedule over too
        np.testing.assert_array_equal(env.command[1], commands[0])
        env.set_commands(None)  # drawn again from the next episode on
        env.reset()
        assert not np.array_equal(env.command, np.tile(commands[0], (3, 1)))


def commands_columns(name: str) -> slice:
    """Where the actor's observation shows the command (go1: the last 3 of 48; go2: before the 4 gait phases)."""
    return slice(45, 48) if name == "go1_joystick_flat" else slice(42, 45)


def test_segment_tracking_averages_each_segments_row_steps():
    segments = parse_schedule([[0.5, 0, 0, 0.04], [1, 0, 0, 0.02]])
    tracking = SegmentTracking(segments, np.array([2, 1]), ("lin_vel_error",))
    alive = np.array([True, True])
    tracking.add(0, np.array([[1.0], [3.0]]), alive)
    tracking.add(1, np.array([[2.0], [100.0]]), np.array([True, False]))  # row 1 ended: not counted
    tracking.add(2, np.array([[4.0], [6.0]]), alive)
    tracking.add(3, np.array([[8.0], [8.0]]), alive)  # past the end: the last segment's command still holds
    first, second = tracking.summary()
    assert first == {"command": [0.5, 0.0, 0.0], "seconds": 0.04, "start_step": 0, "end_step": 2, "row_steps": 3,
                     "lin_vel_error": 2.0}  # fmt: skip
    assert second["start_step"] == 2 and second["end_step"] == 3 and second["row_steps"] == 4
    assert second["lin_vel_error"] == (4 + 6 + 8 + 8) / 4


def test_eval_cli_records_the_segments_of_a_go1_checkpoint(tmp_path):
    """The real CLI: episodes last the schedule (0.2 + 0.4 s: 30 steps), eval.json holds each segment's command,
    steps and errors, and each equals the errors recomputed from an in-process run of the same policy."""
    path = go1_checkpoint(tmp_path / "go1.pt")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "offpolicy.eval", f"checkpoint={path}", "episodes=2", "seed=3", "device=cpu",
           "commands=[[0.5,0,0,0.2],[0,0,1.0,0.4]]", f"hydra.run.dir={out}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "eval.json").read_text())
    first, second = result["command_segments"]
    assert first["command"] == [0.5, 0.0, 0.0] and (first["start_step"], first["end_step"]) == (0, 10)
    assert second["command"] == [0.0, 0.0, 1.0] and (second["start_step"], second["end_step"]) == (10, 30)
    assert result["env_options"]["max_episode_steps"] == 30
    assert first["row_steps"] == sum(min(length, 10) for length in result["lengths"])
    assert second["row_steps"] == sum(max(length - 10, 0) for length in result["lengths"])
    for segment in (first, second):
        assert np.isfinite(segment["lin_vel_error"]) and np.isfinite(segment["yaw_rate_error"])
    # a bad entry: exit status 2, one line naming it
    cmd[cmd.index("commands=[[0.5,0,0,0.2],[0,0,1.0,0.4]]")] = "commands=[[0.5,0,0,-4]]"
    bad = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        "[offpolicy] invalid config: commands=[0.5, 0, 0, -4]: entry 0: seconds must be > 0"
    )


RENDER_BOTH = """
import sys, envs, imageio.v2 as imageio, numpy as np
from offpolicy.eval import CAMERAS, render_video
name, out = sys.argv[1], sys.argv[2]
with envs.make(name, 1, seed=0, nthread=1) as env:
    env.reset()
    qpos, qvel = env.physics_qpos_qvel(0)
    model, frames = env.model, []
    for i, alpha in enumerate((1.0, 0.0)):
        model.geom_rgba[model.geom_bodyid > 0, 3] = alpha
        render_video(model, [(qpos, qvel)], f"{out}/{i}.mp4", 50, 64, 64, CAMERAS[name])
        frames.append(imageio.get_reader(f"{out}/{i}.mp4").get_data(0).astype(float))
print(np.abs(frames[0] - frames[1]).mean())
"""
"""renders one state of the task twice, the robot's geoms shown and made transparent: the mean change"""


@pytest.mark.parametrize("name", ["go1_joystick_flat", "go2_joystick_flat"])
def test_the_video_shows_the_robot_whose_visual_meshes_are_left_out(name, tmp_path):
    """The quadrupeds' bodies carry collision geoms alone (group 3, hidden by default): the video shows them, so
    making them transparent changes the frame."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MUJOCO_GL": gl_backend_or_skip()}
    cmd = [sys.executable, "-c", RENDER_BOTH, name, str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.split()[-1]) > 3  # grey levels: the robot fills part of the frame
