"""benchmark/env/go1_throughput.py: both sides get the same actions; bad CPUs refused; our side runs (smoke)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmark.env import go1_throughput as gt

ROOT = Path(__file__).resolve().parents[2]


def test_the_action_sequence_is_seeded_uniform_and_shaped_per_batch_step():
    a = gt.action_sequence(3, steps=4, envs=5)
    assert a.shape == (4, 5, 12) and a.dtype == np.float32
    np.testing.assert_array_equal(a, gt.action_sequence(3, steps=4, envs=5))
    assert -1.0 <= a.min() and a.max() <= 1.0 and not np.array_equal(a, gt.action_sequence(4, steps=4, envs=5))


def test_rate_counts_every_env_of_every_step():
    assert gt.rate(envs=1024, steps=200, seconds=4.0) == 51_200.0


def test_cpus_the_process_cannot_use_are_refused_in_one_line():
    bad = max(os.sched_getaffinity(0)) + 64
    proc = subprocess.run(
        [sys.executable, "-m", "benchmark.env.go1_throughput", "--cpus", str(bad), "--skip-envpool"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == f"--cpus {bad}: CPUs [{bad}] are not available to this process"


def test_smoke_our_side_reports_both_rates(tmp_path):
    out = tmp_path / "t.json"
    cpu = min(os.sched_getaffinity(0))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmark.env.go1_throughput", "--envs", "8", "--steps", "5", "--warmup", "1",
         "--cpus", str(cpu), "--skip-envpool", "--repeats", "2", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["envs"] == 8 and report["threads"] == 1 and report["cpus"] == [cpu] and len(report["runs"]) == 2
    for run in report["runs"]:
        assert run["ours_env_steps_per_s"] > 0 and run["ours_bare_env_steps_per_s"] > 0
        assert run["ours_to_ours_bare"] == run["ours_env_steps_per_s"] / run["ours_bare_env_steps_per_s"]
        assert "envpool_env_steps_per_s" not in run
    ratios = sorted(r["ours_to_ours_bare"] for r in report["runs"])
    assert report["median_ours_to_ours_bare"] == pytest.approx(sum(ratios) / 2)  # the median of two


def test_envpool_side_when_envpool_is_installed(tmp_path):
    pytest.importorskip("envpool")
    cpu = min(os.sched_getaffinity(0))
    args = gt.parse_args(["--side", "envpool", "--envs", "4", "--steps", "3", "--warmup", "1", "--cpus", str(cpu)])
    result = gt.time_envpool(args, [cpu])
    assert result["envpool_env_steps_per_s"] > 0
