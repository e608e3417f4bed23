"""What the CLIs leave on the console and on disk: the Ctrl-C message, MuJoCo's warning log, the eval CLI's
output with a reference re-score or a video (its own lines only)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_eval import task_checkpoint

REPO = Path(__file__).resolve().parents[2]
RUNTIME_TESTS = REPO / "tests" / "runtime"
if str(RUNTIME_TESTS) not in sys.path:  # the stand-in algorithm and the CLI helpers
    sys.path.insert(0, str(RUNTIME_TESTS))

from runtime_helpers import STANDIN_CLI, cli_env, train_cli  # noqa: E402


def test_ctrl_c_is_one_message_not_an_error(tmp_path):
    """Was: the headline logged at ERROR level and then the same report printed again."""
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "offpolicy.train", "env=hopper", "env.num_envs=4", *STANDIN_CLI, "logger=none",
           "train.total_env_steps=1000000000", f"hydra.run.dir={run_dir}"]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=cli_env(PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # Python's Ctrl-C, however we were started
    )
    deadline = time.monotonic() + 120
    while not (run_dir / "collector.pid").exists():  # written once the run is ticking
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    said = [line for line in (out + err).splitlines() if "interrupted" in line]
    assert said == [line for line in err.splitlines() if line.startswith("[offpolicy] runner interrupted by SIGINT")]
    assert len(said) == 1, out + err
    assert "ERROR" not in out + err


def test_mujoco_warnings_go_to_the_run_dir_not_the_working_dir(tmp_path):
    """MuJoCo appends its warnings to MUJOCO_LOG.TXT in the working directory: the collector works in the run dir."""
    run_dir = tmp_path / "run"
    proc = train_cli(
        run_dir,
        "env=hopper",
        "env.num_envs=4",
        "+env.options.reset_noise_scale=1000",  # unstable from the first step: MuJoCo warns
        *STANDIN_CLI,
        "logger=none",
        "train.total_env_steps=40",
        "train.learning_starts=0",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nan, Inf or huge value" in (run_dir / "MUJOCO_LOG.TXT").read_text()
    assert not (Path(tmp_path) / "MUJOCO_LOG.TXT").exists()  # train_cli runs in run_dir's parent


# --------------------------------------------------------------------------- the eval CLI


def eval_cli(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    """`python -m offpolicy.eval <overrides>` as on a machine without a display and with no `MUJOCO_GL` chosen."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "offpolicy.eval", *overrides, f"hydra.run.dir={cwd / 'out'}"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_eval_with_a_dm_control_reference_prints_only_its_own_lines(tmp_path):
    """Was: absl INFO lines (dm_control choosing a renderer, MuJoCo's version) and, at exit,
    `GLFWError: (65550) b'X11: The DISPLAY environment variable is missing'`."""
    path = task_checkpoint(tmp_path / "cheetah.pt", "dmc_cheetah_run")
    proc = eval_cli(tmp_path, f"checkpoint={path}", "reference=dm_control", "episodes=1", "max_episode_steps=20")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == [
        "[offpolicy] eval fastsac on dmc_cheetah_run (checkpoint at 400 env steps)",
        "[offpolicy] dm_control (cheetah-run)",
    ], proc.stdout
    assert json.loads((tmp_path / "out" / "eval.json").read_text())["reference"]["dm_control"]["lengths"] == [20]


def test_eval_with_a_video_prints_only_its_own_line(tmp_path):
    """Was: PyOpenGL's INFO line `No OpenGL_accelerate module loaded` before the result."""
    from offpolicy.eval import gl_backend_problem

    if all(gl_backend_problem(backend) for backend in ("osmesa", "egl")):  # probed in subprocesses
        pytest.skip("no offscreen GL backend: install libosmesa6 or use EGL")
    path = task_checkpoint(tmp_path / "hopper.pt")
    overrides = ["video=true", "episodes=1", "max_episode_steps=5", "video_width=32", "video_height=32"]
    proc = eval_cli(tmp_path, f"checkpoint={path}", *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("[offpolicy] eval fastsac on hopper"), proc.stdout
    assert lines[0].endswith(f"{tmp_path / 'out' / 'eval.mp4'}")


def test_quieted_libraries_still_print_their_warnings_and_errors(caplog):
    from offpolicy.eval import QUIET_LOGGERS, quiet_library_logs

    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    try:
        quiet_library_logs()
        with caplog.at_level(logging.DEBUG):
            logging.getLogger("absl").info("MUJOCO_GL is not set")
            logging.getLogger("absl").warning("absl warns")
            logging.getLogger("OpenGL.acceleratesupport").info("No OpenGL_accelerate module loaded")
            logging.getLogger("OpenGL.GL").error("a GL call failed")
            logging.getLogger("offpolicy.eval").info("ours")
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    assert [r.getMessage() for r in caplog.records] == ["absl warns", "a GL call failed", "ours"]


def test_the_dm_control_re_score_disables_dm_controls_renderer_only_while_it_runs(monkeypatch):
    from offpolicy.eval import no_dm_control_renderer

    monkeypatch.delenv("MUJOCO_GL", raising=False)
    with no_dm_control_renderer():
        assert os.environ["MUJOCO_GL"] == "disable"
    assert "MUJOCO_GL" not in os.environ  # a later render in this process picks its own backend
    monkeypatch.setenv("MUJOCO_GL", "egl")
    with no_dm_control_renderer():
        assert os.environ["MUJOCO_GL"] == "egl"  # the user's choice is kept
    assert os.environ["MUJOCO_GL"] == "egl"
