"""benchmark/offpolicy/checkpoint_sweep.py on a real run's checkpoints: both actors scored per checkpoint, in order
of env steps, the same figures whether scored one at a time or by parallel processes, the file kept as it grows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.offpolicy import checkpoint_sweep as cs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny FastSAC hopper run with the averaged policy and a checkpoint every 400 env steps."""
    run = tmp_path_factory.mktemp("sweep") / "run"
    cmd = [sys.executable, "-m", "offpolicy.train", "algo=fastsac", "env=hopper", "device=cpu", "logger=none",
           "env.num_envs=8", "train.total_env_steps=1200", "train.learning_starts=160", "algo.updates_per_step=2",
           "algo.batch_size=32", "algo.critic_hidden_dim=32", "algo.actor_hidden_dim=16", "algo.policy_ema=true",
           "algo.policy_ema_tau=0.2", "eval.num_envs=0", "checkpoint.interval_env_steps=400", "checkpoint.keep_last=0",
           f"hydra.run.dir={run}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run


def test_every_checkpoint_is_scored_with_both_actors_in_order_of_env_steps(run_dir):
    seen: list[int] = []
    rows = cs.sweep(run_dir, episodes=2, seed=3, device="cpu", on_row=lambda r: seen.append(len(r)))
    steps = [r["env_steps"] for r in rows]
    assert steps == sorted(steps) and len(steps) == 3 and steps[0] >= 400
    assert [r["checkpoint"] for r in rows] == [f"step_{s}.pt" for s in steps]
    assert seen == [1, 2, 3]  # the caller hears of every row as it is finished
    for r in rows:
        for actor in cs.ACTORS:
            returns = r[actor]["returns"]
            assert len(returns) == 2 and r[actor]["min"] == min(returns)
    assert any(r["raw"]["returns"] != r["averaged"]["returns"] for r in rows)  # two different sets of weights


def test_parallel_scoring_gives_the_same_figures_and_writes_the_stability(run_dir, tmp_path):
    one = tmp_path / "one.json"
    two = tmp_path / "two.json"
    base = [str(run_dir), "--episodes", "2", "--seed", "3", "--device", "cpu", "--target", "100"]
    assert cs.main([*base, "--out", str(one)]) == 0
    assert cs.main([*base, "--jobs", "2", "--out", str(two)]) == 0
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    assert a == b
    assert set(a["stability"]) == set(cs.ACTORS) and a["stability"]["raw"]["target"] == 100
    assert not list(tmp_path.glob("*.tmp"))


def test_a_run_without_checkpoints_is_refused(tmp_path):
    assert cs.main([str(tmp_path), "--out", str(tmp_path / "s.json")]) == 1
    assert not (tmp_path / "s.json").exists()
