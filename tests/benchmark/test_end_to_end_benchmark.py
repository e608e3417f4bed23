"""Smoke test of `benchmark_end_to_end --quick`: two tasks in one invocation, every planned row written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_smoke_end_to_end_benchmark_runs_two_tasks_in_one_invocation(tmp_path):
    # Two tasks, because state carried from one task to the next (CPU lists, kept traces) is
    # what a one-task run cannot exercise; the rows' figures on a 2-core CI machine mean nothing.
    cmd = [sys.executable, "-m", "benchmark.offpolicy.benchmark_end_to_end", "--quick", "--tasks", "hopper", "ant"]
    cmd += ["--algos", "fastsac", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "end_to_end.json").read_text())
    assert result["measurements"] == "6 of 6"
    runs = [(r["task"], r["run"]) for r in result["rows"]]
    assert runs == [(t, r) for t in ("hopper", "ant") for r in ("bare_physics_uniform_actions", "ceiling", "fastsac")]
    for row in result["rows"]:
        if row["run"] == "bare_physics_uniform_actions":
            continue
        assert row["replay_states_agree"] and row["ratio_to_replayed_bare"] > 0
        assert 0.0 < row["collector_outside_physics_fraction"] < 1.0
    assert (tmp_path / "timeline_hopper_fastsac.json").exists()
