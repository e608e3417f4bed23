"""Subprocess smoke runs of the real CLI for every `algo x env` pair: tiny nets, tiny budget, learning on.

Each pair's `conf/algo_env/` tuning is composed and used as is, except its updates per tick (2 here).
"""

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


def smoke_run(tmp_path: Path, algo: str, env: str, ticks: int, *extra: str) -> tuple[dict, list[dict]]:
    """`python -m offpolicy.train` with 4 envs (+2 eval rows) for `ticks` ticks; summary, rows.

    Learning starts after 8 ticks, at 2 updates a tick.

    The final snapshot runs one episode per eval row (`eval.episodes=2`): on the tasks that rarely end early (ant,
    the DMC tasks' 1000 steps) the default 16 made most of a smoke run's time."""
    num_envs = 4
    cmd = [
        sys.executable, "-m", "offpolicy.train",
        f"algo={algo}", f"env={env}", f"env.num_envs={num_envs}", "eval.num_envs=2", "eval.episodes=2",
        f"train.total_env_steps={num_envs * ticks}", f"train.learning_starts={num_envs * 8}",
        "algo.batch_size=32", "algo.actor_hidden_dim=16", "algo.critic_hidden_dim=16",
        "train.updates_per_step=2", "logger=none", f"logger.interval_env_steps={num_envs * 8}", "checkpoint.interval_env_steps=0",
        *extra, f"hydra.run.dir={tmp_path}",
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
    return summary, rows


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("algo", ALGOS)
def test_train_cli_runs_and_learns(tmp_path, algo, env):
    smoke_run(tmp_path, algo, env, 40)
    assert (tmp_path / "checkpoints" / "latest.pt").exists()  # the final checkpoint


@pytest.mark.parametrize("algo", ALGOS)
def test_train_cli_smoke_dmc_dog_run(tmp_path, algo):
    """A DeepMind Control Suite task (the dog: activations, dm_control's sensor timing)."""
    smoke_run(tmp_path, algo, "dmc_dog_run", 24)
    assert "name: dmc_dog_run" in (tmp_path / "config_resolved.yaml").read_text()
