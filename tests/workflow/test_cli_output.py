"""What the train CLI leaves on the console and on disk: the Ctrl-C message, MuJoCo's warning log."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

RUNTIME_TESTS = Path(__file__).resolve().parents[1] / "runtime"
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
