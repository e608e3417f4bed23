"""Subprocess smoke runs of the real CLI for every `algo x env` pair: tiny nets, tiny budget, learning on."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ALGOS = ["fastsac", "flashsac"]
ENVS = ["ant", "humanoid", "halfcheetah", "hopper", "walker2d"]


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("algo", ALGOS)
def test_train_cli_runs_and_learns(tmp_path, algo, env):
    num_envs, ticks = 4, 40
    cmd = [
        sys.executable, "-m", "offpolicy.train",
        f"algo={algo}", f"env={env}", f"env.num_envs={num_envs}", "eval.num_envs=2",
        f"train.total_env_steps={num_envs * ticks}", f"train.learning_starts={num_envs * 8}",
        "algo.batch_size=32", "algo.actor_hidden_dim=16", "algo.critic_hidden_dim=16",
        "logger=none", f"logger.interval_env_steps={num_envs * 10}", "checkpoint.interval_env_steps=0",
        f"hydra.run.dir={tmp_path}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_steps"] == num_envs * ticks and summary["completed"]
    # tick t ingests transition t-1, learning starts once learning_starts rows are in replay
    assert summary["updates"] > 0 and summary["policy_version"] > 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss/critic"] for r in rows if "loss/critic" in r]
    assert losses and all(math.isfinite(v) for v in losses)
    assert (tmp_path / "checkpoints" / "latest.pt").exists()  # the final checkpoint
