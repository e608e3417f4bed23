"""Helpers of the compile warm-up benchmark: the side summary and each child's fresh caches."""

from __future__ import annotations

import csv
import json
import os
import subprocess

import pytest

from benchmark.offpolicy.benchmark_compile_warmup import child_env, summarize


def test_summary_is_the_ratio_of_median_warmups_per_algorithm():
    rows = [
        {"algo": "fastsac", "side": "lazy", "pool_start_s": 0.0, "warmup_total_s": 40.0},
        {"algo": "fastsac", "side": "wide", "pool_start_s": 5.0, "warmup_total_s": 30.0},
        {"algo": "fastsac", "side": "wide", "pool_start_s": 3.0, "warmup_total_s": 20.0},
        {"algo": "fastsac", "side": "lazy", "pool_start_s": 0.0, "warmup_total_s": 60.0},
        {"algo": "flashsac", "side": "lazy", "warmup_total_s": 60.0},
        {"algo": "flashsac", "side": "wide", "error": ["RuntimeError: no pool"]},
    ]
    fast, flash = summarize(rows)
    # medians 50 s (lazy) and 25 s (wide): the wide pool halves the warm-up; with the pool's
    # start counted the wide side takes 35 and 23 s, median 29 s, 0.58 of the lazy side's 50 s
    assert fast == {
        "algo": "fastsac",
        "lazy_s": 50.0,
        "wide_s": 25.0,
        "wide_over_lazy": pytest.approx(0.5),
        "lazy_with_pool_start_s": 50.0,
        "wide_with_pool_start_s": 29.0,
        "wide_over_lazy_with_pool_start": pytest.approx(0.58),
    }
    # a failed side gives no ratio rather than a made-up one
    assert flash["lazy_s"] == 60.0 and flash["wide_s"] is None and flash["wide_over_lazy"] is None
    assert flash["wide_over_lazy_with_pool_start"] is None


def test_each_child_compiles_into_empty_caches_with_inductors_own_worker_count(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    env = child_env(str(tmp_path))
    assert env["TORCHINDUCTOR_CACHE_DIR"] == os.path.join(str(tmp_path), "inductor")
    assert env["TRITON_CACHE_DIR"] == os.path.join(str(tmp_path), "triton")
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in env  # a count from the caller would make both sides equal
    assert os.path.isfile(os.path.join(env["PYTHONPATH"].split(os.pathsep)[0], "offpolicy", "runtime", "runner.py"))


def test_a_run_cut_short_keeps_the_measurements_it_finished(monkeypatch, tmp_path):
    from benchmark.offpolicy import benchmark_compile_warmup as bench

    calls = []

    def fake_child(cmd, **kwargs):
        calls.append(cmd)
        if len(calls) == 2:  # the second child never returns: the caller's timeout kills the run here
            raise KeyboardInterrupt
        side = cmd[cmd.index("--child") + 1]
        row = {"algo": "fastsac", "side": side, "warmup_total_s": 12.5}
        return subprocess.CompletedProcess(cmd, 0, stdout="compiling...\n" + json.dumps(row) + "\n", stderr="")

    monkeypatch.setattr(bench.subprocess, "run", fake_child)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--algos", "fastsac", "flashsac", "--repeats", "2", "--out-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "compile_warmup.json").read_text())
    assert saved["measurements"] == "1 of 8"  # 2 algorithms x 2 repeats x 2 sides planned
    assert saved["rows"] == [{"algo": "fastsac", "side": "lazy", "warmup_total_s": 12.5, "repeat": 0}]
    assert saved["summary"][0]["lazy_s"] == 12.5 and saved["summary"][0]["wide_over_lazy"] is None
    with open(tmp_path / "compile_warmup.csv", newline="") as f:
        assert [r["side"] for r in csv.DictReader(f)] == ["lazy"]
