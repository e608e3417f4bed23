"""benchmark/offpolicy/physics_interference.py: the same physics under three conditions, on this machine's CPUs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.offpolicy.physics_interference import CONDITIONS, main, stretch  # noqa: E402


def test_a_stretch_repeats_the_same_work_from_its_snapshot():
    import envs

    cpus = sorted(os.sched_getaffinity(0))[:1]
    env = envs.make("hopper", num_envs=8, seed=0, nthread=1, cpu_ids=cpus)
    try:
        env.reset()
        rng = np.random.default_rng(1)
        actions = rng.uniform(-1, 1, (30, 8, 3)).astype(np.float32)
        snapshot = env.snapshot()
        first = stretch(env, snapshot, actions, cpus)
        again = stretch(env, snapshot, actions, cpus)  # restored: bit for bit the same end state
        np.testing.assert_array_equal(first["state"], again["state"])
        assert not np.array_equal(first["state"], snapshot["state"])  # the stretch did step the physics
        other = stretch(env, snapshot, actions[::-1].copy(), cpus)  # other actions: another end state
        assert not np.array_equal(first["state"], other["state"])
        assert first["seconds"] > 0 and first["cpu_share"]["own"] > 0
    finally:
        env.close()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs: one collector, one learner")
def test_smoke_three_conditions_with_a_real_learner_process(tmp_path):
    collector, learner = sorted(os.sched_getaffinity(0))[:2]
    status = main(
        ["--quick", "--task", "hopper", "--algo", "flashsac", "--num-envs", "16", "--ticks", "20",
         "--lead-ticks", "10", "--rounds", "2", "--settle-s", "0.2", "--collector-cpus", str(collector),
         "--learner-cpus", str(learner), "--device", "cpu", "--out", str(tmp_path)]
    )  # fmt: skip
    assert status == 0
    result = json.loads((tmp_path / "physics_interference.json").read_text())
    assert result["same_work"] is True and result["collector_cpus"] == [collector]
    assert list(result["conditions"]) == list(CONDITIONS)
    for row in result["conditions"].values():
        assert len(row["seconds"]) == 2 and row["env_steps_per_s"] == pytest.approx(16 * 20 / row["median_seconds"])
    assert result["conditions"]["alone"]["seconds_over_alone"] == 1.0
    learner_stats = result["conditions"]["learner"]["learner"]  # it trained while its condition lasted
    assert learner_stats["phases"] > 0 and learner_stats["updates_per_s"] > 0


def test_overlapping_cpu_sets_are_refused():
    with pytest.raises(SystemExit, match=r"--collector-cpus \[0\] and --learner-cpus \[0\] overlap"):
        main(["--quick", "--task", "hopper", "--collector-cpus", "0", "--learner-cpus", "0", "--device", "cpu"])


def test_the_learner_process_exits_when_the_measuring_process_dies(tmp_path):
    """A measuring process killed outright (SIGKILL, no cleanup) leaves no learner training on its CPUs."""
    import signal
    import subprocess
    import time

    cpu = sorted(os.sched_getaffinity(0))[0]
    parent_code = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-m', 'benchmark.offpolicy.physics_interference', '--learner-worker', "
        f"{str(tmp_path)!r}, '--quick', '--task', 'hopper', '--learner-cpus', '{cpu}', '--device', 'cpu']); "
        "print(p.pid, flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    worker = int(parent.stdout.readline())
    deadline = time.monotonic() + 120
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline, "the learner process never got ready"
        time.sleep(0.1)
    (tmp_path / "go").write_text("1")
    time.sleep(1.0)  # in its update loop (it looks for `go` every 5 ms), training as in its condition
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{worker}").exists() and _state(worker) != "Z":
        assert time.monotonic() < deadline, "the learner process outlived its measuring process"
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
