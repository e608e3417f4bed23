"""Subprocess smoke runs of the real CLI on a DeepMind Control Suite task (the dog: activations, sensors) for both algorithms."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("algo", ["fastsac", "flashsac"])
def test_train_cli_smoke_dmc_dog_run(tmp_path, algo):
    num_envs, ticks = 4, 24
    cmd = [
        sys.executable, "-m", "offpolicy.train",
        f"algo={algo}", "env=dmc_dog_run", f"env.num_envs={num_envs}", "eval.num_envs=2",
        f"train.total_env_steps={num_envs * ticks}", f"train.learning_starts={num_envs * 8}",
        "train.updates_per_step=2", "algo.batch_size=32", "algo.actor_hidden_dim=16", "algo.critic_hidden_dim=16",
        "logger=none", f"logger.interval_env_steps={num_envs * 8}", "checkpoint.interval_env_steps=0",
        f"hydra.run.dir={tmp_path}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_steps"] == num_envs * ticks and summary["completed"]
    assert summary["updates"] > 0 and summary["policy_version"] > 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss/critic"] for r in rows if "loss/critic" in r]
    assert losses and all(math.isfinite(v) for v in losses)
    config = (tmp_path / "config_resolved.yaml").read_text()
    assert "name: dmc_dog_run" in config
