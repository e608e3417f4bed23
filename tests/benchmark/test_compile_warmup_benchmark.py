"""Helpers of the compile warm-up benchmark: the side summary and each child's fresh caches."""

from __future__ import annotations

import os

import pytest

from benchmark.offpolicy.benchmark_compile_warmup import child_env, summarize


def test_summary_is_the_ratio_of_median_warmups_per_algorithm():
    rows = [
        {"algo": "fastsac", "side": "lazy", "warmup_total_s": 40.0},
        {"algo": "fastsac", "side": "wide", "warmup_total_s": 30.0},
        {"algo": "fastsac", "side": "wide", "warmup_total_s": 20.0},
        {"algo": "fastsac", "side": "lazy", "warmup_total_s": 60.0},
        {"algo": "flashsac", "side": "lazy", "warmup_total_s": 60.0},
        {"algo": "flashsac", "side": "wide", "error": ["RuntimeError: no pool"]},
    ]
    fast, flash = summarize(rows)
    # medians 50 s (lazy) and 25 s (wide): the wide pool halves the warm-up
    assert fast == {"algo": "fastsac", "lazy_s": 50.0, "wide_s": 25.0, "wide_over_lazy": pytest.approx(0.5)}
    # a failed side gives no ratio rather than a made-up one
    assert flash == {"algo": "flashsac", "lazy_s": 60.0, "wide_s": None, "wide_over_lazy": None}


def test_each_child_compiles_into_empty_caches_with_inductors_own_worker_count(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    env = child_env(str(tmp_path))
    assert env["TORCHINDUCTOR_CACHE_DIR"] == os.path.join(str(tmp_path), "inductor")
    assert env["TRITON_CACHE_DIR"] == os.path.join(str(tmp_path), "triton")
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in env  # a count from the caller would make both sides equal
    assert os.path.isfile(os.path.join(env["PYTHONPATH"].split(os.pathsep)[0], "offpolicy", "runner.py"))
