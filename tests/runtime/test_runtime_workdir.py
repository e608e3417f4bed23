"""Nothing after a run started depends on the directory it was launched from.

A scratch checkout replaced under a running job removes its working directory: the
run must still finish, evaluate its final snapshot and write `summary.json`, with
MuJoCo's warnings still landing in the run dir.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

from runtime_helpers import STANDIN_CLI, cli_env

from offpolicy.runtime.collector import MUJOCO_LOG


def test_a_run_whose_launch_directory_is_removed_while_it_trains_still_finishes(tmp_path):
    launch, run_dir = tmp_path / "launch", tmp_path / "run"
    launch.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "offpolicy.train",
            "env=hopper",
            "env.num_envs=4",
            *STANDIN_CLI,
            "logger=none",
            "train.total_env_steps=null",
            "train.max_seconds=4",
            "train.learning_starts=0",
            "eval.num_envs=0",
            "eval.episodes=2",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=launch,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (run_dir / "collector.pid").exists():  # written once the run is ticking
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    shutil.rmtree(launch)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["completed"] is True and summary["stop_reason"] == "max_seconds"
    final = summary["snapshot_eval"]
    assert final["final"] is True and final["episodes"] == 2 and len(final["returns"]) == 2
    assert final["env_steps"] == summary["env_steps"] > 0
    assert (run_dir / "checkpoints" / f"step_{summary['env_steps']}.pt").exists()


def _provoke_a_mujoco_warning() -> None:
    import mujoco

    model = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><body><freejoint/><geom size='1'/></body></worldbody></mujoco>"
    )
    data = mujoco.MjData(model)
    data.qpos[:] = float("nan")
    mujoco.mj_step(model, data)  # warns: "Nan, Inf or huge value in QPOS"


def test_mujoco_warnings_go_to_the_named_directory_not_the_working_directory(tmp_path):
    # In a fresh interpreter: importing dm_control (the DMC tests do) installs a warning callback of its own,
    # after which MuJoCo writes no log file at all in that process.
    cwd, run_dir = tmp_path / "cwd", tmp_path / "run"
    cwd.mkdir()
    run_dir.mkdir()
    script = f"""
import mujoco
from offpolicy.runtime.collector import point_mujoco_log_at, restore_mujoco_log
from test_runtime_workdir import _provoke_a_mujoco_warning
before = mujoco.MjLogConfig.get().logfile
previous = point_mujoco_log_at({str(run_dir)!r})
assert previous == before, (previous, before)
try:
    _provoke_a_mujoco_warning()
finally:
    restore_mujoco_log(previous)
assert mujoco.MjLogConfig.get().logfile == before  # restored: the next warning goes where it went before
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=cli_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Nan, Inf or huge value in QPOS" in (run_dir / MUJOCO_LOG).read_text()
    assert not (cwd / MUJOCO_LOG).exists()
