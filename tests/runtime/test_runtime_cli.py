"""The CLI end to end, and the runtime's config groups composed with the main config."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from runtime_helpers import REPO

from offpolicy.runner import Runner, RuntimeSettings


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["affinity=manual", "affinity.learner_cpus=[0]", "affinity.collector_cpus=[1]", "logger=none"],
        ["logger=none", "replay.capacity=4096", "runtime.trace=true"],
    ],
)
def test_runtime_groups_compose_into_a_runner(tmp_path, overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["env=ant", "env.num_envs=8", *overrides])
    assert cfg.affinity.mode in ("auto", "manual") and cfg.replay.capacity > 0 and cfg.logger.name in ("none", "wandb")
    runner = Runner(cfg, tmp_path)  # builds nothing heavy until run()
    assert runner.env_factory.target == "envs:make"
    assert runner.env_factory.kwargs["name"] == "ant" and runner.num_envs == 8
    assert runner.env_factory.kwargs["num_envs"] == 8 + cfg.eval.num_envs  # evaluation rows ride along
    assert runner.num_ticks == -(-cfg.train.total_env_steps // 8)
    assert set(runner.affinity.learner_cpus).isdisjoint(runner.affinity.collector_cpus) or runner.affinity.shared
    settings = RuntimeSettings.from_cfg(cfg)
    assert settings.collector_raise_at_tick == -1 and settings.ingress_slots >= 2
    assert settings.trace == bool(OmegaConf.select(cfg, "runtime.trace"))


def test_done_command_runs_end_to_end_on_cpu(tmp_path):
    """`python -m offpolicy.train env=ant env.num_envs=8 train.total_env_steps=2000 logger=none`."""
    cmd = [
        sys.executable,
        "-m",
        "offpolicy.train",
        "env=ant",
        "env.num_envs=8",
        "train.total_env_steps=2000",
        "logger=none",
        f"hydra.run.dir={tmp_path}",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_steps"] == 2000 and summary["completed"]
    assert summary["replay_size"] == 2000
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 2000
    assert rows[-1]["perf/ingress_produced"] == rows[-1]["perf/ingress_consumed"] == 250
    resolved = OmegaConf.load(tmp_path / "config_resolved.yaml")
    assert resolved.env.num_envs == 8 and resolved.train.total_env_steps == 2000
    assert isinstance(resolved.train.updates_per_step, int)  # interpolations resolved
