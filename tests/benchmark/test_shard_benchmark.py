"""Helpers of the shard-throughput benchmark: CPU partition, shard counts, result schema of a tiny real run."""

from __future__ import annotations

import csv
import json
import os

import pytest

from benchmark.env.benchmark_np_env_shard_throughput import (
    NAME,
    ROW_KEYS,
    add_speedups,
    parse_cpus,
    partition_cpus,
    run,
    shard_counts,
    split_envs,
)


@pytest.mark.parametrize("n_cpus", [1, 2, 3, 5, 7, 8, 16])
def test_partition_disjoint_contiguous_covering(n_cpus):
    cpus = list(range(4, 4 + n_cpus))
    for shards in range(1, n_cpus + 1):
        blocks = partition_cpus(cpus, shards)
        assert len(blocks) == shards
        assert [c for b in blocks for c in b] == cpus  # cover all, in order, no overlap
        assert all(b == list(range(b[0], b[0] + len(b))) for b in blocks)  # contiguous
        sizes = [len(b) for b in blocks]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)  # the extra CPUs go to the first blocks


def test_partition_errors_are_clear():
    with pytest.raises(ValueError, match=r"cannot split 2 CPUs \[0, 1\] into 3 shards"):
        partition_cpus([0, 1], 3)
    with pytest.raises(ValueError, match="shards must be >= 1"):
        partition_cpus([0, 1], 0)
    with pytest.raises(ValueError, match="duplicates"):
        partition_cpus([0, 0, 1], 2)


def test_shard_counts_and_env_split():
    assert shard_counts(1) == [1]
    assert shard_counts(2) == [1, 2]
    assert shard_counts(6) == [1, 2, 4, 6]
    assert shard_counts(16) == [1, 2, 4, 8, 16]
    assert split_envs(10, 4) == [3, 3, 2, 2]
    assert split_envs(4096, 16) == [256] * 16
    with pytest.raises(ValueError, match="at least one env per shard"):
        split_envs(3, 4)
    assert parse_cpus("0-2,5") == [0, 1, 2, 5]
    assert parse_cpus(None) == sorted(os.sched_getaffinity(0))


def test_speedups_relative_to_one_shard():
    rows = [
        {"task": "ant", "total_envs": 8, "shards": 1, "env_steps_per_s": 100.0},
        {"task": "ant", "total_envs": 8, "shards": 2, "env_steps_per_s": 150.0},
        {"task": "ant", "total_envs": 16, "shards": 2, "env_steps_per_s": 150.0},
    ]
    add_speedups(rows)
    assert [r["speedup_vs_s1"] for r in rows] == [1.0, 1.5, None]


def test_tiny_real_run_writes_schema(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    shards = [1, 2] if len(cpus) == 2 else [1]
    rows, folder = run(["hopper"], [8], cpus, shards, steps=4, warmup=2, repeats=2, out=tmp_path, verbose=False)
    assert folder == tmp_path
    assert [r["shards"] for r in rows] == shards
    for r in rows:
        assert set(ROW_KEYS) <= set(r)
        assert r["task"] == "hopper" and r["total_envs"] == 8
        assert r["env_steps_per_s"] > 0 and r["wall_s"] > 0
    assert rows[0]["speedup_vs_s1"] == 1.0
    assert rows[0]["cpus_per_shard"] == len(cpus)
    if len(shards) == 2:
        assert rows[1]["cpus_per_shard"] == 1 and rows[1]["envs_per_shard"] == 4
        assert rows[1]["cpu_blocks"] == f"{cpus[0]} {cpus[1]}"

    data = json.loads((tmp_path / f"{NAME}.json").read_text())
    machine = data["machine"]
    for key in ["cpu_model", "cpu_count", "affinity", "versions"]:
        assert key in machine
    assert {"numpy", "mujoco", "mujoco-uni-runtime"} <= set(machine["versions"])
    assert data["shard_counts"] == shards and data["cpus"] == cpus
    assert [r["shards"] for r in data["rows"]] == shards
    with open(tmp_path / f"{NAME}.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == len(shards) and set(ROW_KEYS) <= set(csv_rows[0])
    assert float(csv_rows[0]["speedup_vs_s1"]) == 1.0


def test_bad_task_reports_shard_traceback(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[:1]
    with pytest.raises(RuntimeError, match="unknown env"):
        run(["nope"], [2], cpus, [1], steps=1, warmup=0, repeats=1, out=tmp_path, verbose=False)
