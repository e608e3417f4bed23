"""Helpers for the runtime tests: plain configs, in-process runs with the fake env, /proc and /dev/shm probes.

Not named conftest: several test folders have a conftest.py, so `from conftest import` would be ambiguous.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(HERE) not in sys.path:  # the spawned collector inherits sys.path and imports fake_env from here
    sys.path.insert(0, str(HERE))

BASE_CFG: dict[str, Any] = {
    "seed": 0,
    "device": "cpu",
    "experiment": "test",
    "env": {"name": "fake", "num_envs": 4, "options": {}},
    "algo": {"name": "standin", "updates_per_step": 1, "batch_size": 16, "hidden": 16},
    "train": {"total_env_steps": 200, "updates_per_step": None, "learning_starts": 0, "max_seconds": None},
    "affinity": {"mode": "auto", "learner_count": 1},
    "replay": {"capacity": 1_000_000},
    "logger": {"name": "none", "interval_env_steps": 1_000},
    # no evaluation unless a test asks: the fake env records what the collector's env produced, and
    # the final snapshot's own env would record over it
    "eval": {"num_envs": 0, "final": False},
    "runtime": {
        "trace": False,
        "collector_timeout_s": 30.0,
        "env_factory": "fake_env:make",
        "algorithm_factory": "standin:make_standin",
    },
}


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def make_cfg(**overrides: Any):
    """The runner's config with nested overrides, e.g. make_cfg(train={"total_env_steps": 40})."""
    return OmegaConf.create(_merge(BASE_CFG, overrides))


STANDIN_CLI = ["algo=standin", f"hydra.searchpath=[file://{HERE / 'conf'}]"]
"""CLI overrides for the tiny stand-in algorithm of tests/runtime/conf (learns, but in milliseconds);
the run needs `cli_env()` to import it"""


def cli_env(**extra: str) -> dict[str, str]:
    """This environment with tests/runtime on PYTHONPATH: a CLI run can import the stand-in and the fake env."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def train_cli(run_dir: Path, *overrides: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """`python -m offpolicy.train <overrides> hydra.run.dir=<run_dir>`, output captured.

    It runs in `run_dir`'s parent, so files a library drops into the working directory
    (MuJoCo's MUJOCO_LOG.TXT) never land in the repository.
    """
    cmd = [sys.executable, "-m", "offpolicy.train", *overrides, f"hydra.run.dir={run_dir}"]
    return subprocess.run(cmd, cwd=run_dir.parent, env=cli_env(), capture_output=True, text=True, timeout=timeout)


def refused_fake_run(run_dir: Path, *overrides: str) -> tuple[subprocess.CompletedProcess, str]:
    """A short CLI run of the stand-in on the fake env (no evaluation, no logger) that `overrides` must make fail:
    the finished process and its one `[offpolicy] run failed` line (asserted: exit status 3, exactly one)."""
    done = train_cli(
        run_dir,
        *STANDIN_CLI,
        "+runtime.env_factory=fake_env:make",
        "train.total_env_steps=200",
        "logger=none",
        "eval.num_envs=0",
        "eval.final=false",
        *overrides,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("[offpolicy] run failed")]
    assert len(lines) == 1, done.stderr[-2000:]
    return done, lines[0]


def run_in_process(cfg, run_dir: Path, algorithm_factory=None):
    """Run the runner in this process (the collector is still a spawned process) and return it."""
    from offpolicy.runtime.runner import Runner

    before = os.sched_getaffinity(0)
    runner = Runner(cfg, run_dir, algorithm_factory=algorithm_factory)
    try:
        runner.run()
    finally:
        assert os.sched_getaffinity(0) == before, "the runner must restore the test process's affinity"
    return runner


def shm_entries(prefix: str = "offpolicy_") -> set[str]:
    """Names in /dev/shm that this runtime could have created."""
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith(prefix)}
    except FileNotFoundError:
        return set()


def processes_with_marker(marker: str) -> list[int]:
    """Live (non-zombie) processes whose environment contains `marker` (descendants of a CLI run)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in env and state != "Z":
            found.append(int(pid))
    return found
