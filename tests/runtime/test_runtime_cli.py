"""The CLI end to end, and the runtime's config groups composed with the main config."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from runtime_helpers import REPO, STANDIN_CLI, train_cli

from offpolicy.runtime.runner import UNBOUNDED_TICKS, ConfigError, Runner


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
    settings = runner.config.runtime
    assert settings.fault.collector_raise_at_tick == -1 and settings.ingress_slots >= 2
    assert settings.trace == bool(OmegaConf.select(cfg, "runtime.trace"))


def test_done_command_runs_end_to_end_on_cpu(tmp_path):
    """`python -m offpolicy.train env=ant env.num_envs=8 train.total_env_steps=2000 logger=none`."""
    proc = train_cli(tmp_path, "env=ant", "env.num_envs=8", "train.total_env_steps=2000", "logger=none")
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["env_steps"] == 2000 and summary["completed"]
    assert summary["replay_size"] == 2000
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert not (tmp_path / "collector.pid").exists()  # a clean exit leaves no stale pid file
    last = [r for r in rows if "perf/ingress_produced" in r][-1]  # the last training row
    assert last["env_steps"] == 2000
    assert last["perf/ingress_produced"] == last["perf/ingress_consumed"] == 250
    # then the final snapshot's evaluation: 16 deterministic episodes of the policy the checkpoint holds
    assert rows[-1]["eval/episodes"] == 16 == summary["snapshot_eval"]["episodes"]
    assert rows[-1]["eval/policy_version"] == summary["policy_version"] == summary["snapshot_eval"]["policy_version"]
    resolved = OmegaConf.load(tmp_path / "config_resolved.yaml")
    assert resolved.env.num_envs == 8 and resolved.train.total_env_steps == 2000
    assert isinstance(resolved.train.updates_per_step, int)  # interpolations resolved


def test_budget_preset_is_wall_clock_only(tmp_path):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["env=humanoid", "budget=8min"])
        plain = compose(config_name="config", overrides=["env=humanoid"])
    assert cfg.train.total_env_steps is None and cfg.train.max_seconds == 480
    assert cfg.checkpoint.interval_env_steps == 0
    assert plain.train.total_env_steps == 1_000_000 and plain.train.max_seconds is None  # budget=none changes nothing
    runner = Runner(cfg, tmp_path)
    assert runner.total_env_steps is None and runner.num_ticks == UNBOUNDED_TICKS


def test_no_budget_at_all_is_a_config_error(tmp_path):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["env=ant", "train.total_env_steps=null"])
    with pytest.raises(ConfigError, match=r"^train.total_env_steps=null: needs a wall-clock budget"):
        Runner(cfg, tmp_path)


@pytest.mark.serial
def test_wall_clock_run_from_the_cli_stops_on_time(tmp_path):
    """`budget=8min` shortened to 6 s: no step budget, the deadline ends the run with a final checkpoint."""
    proc = train_cli(
        tmp_path,
        "env=ant",
        "env.num_envs=8",
        *STANDIN_CLI,
        "logger=none",
        "budget=8min",
        "train.max_seconds=6",
        # a row and the first update after 10 ticks: the assertions hold at any tick rate a loaded machine gives
        "logger.interval_env_steps=80",
        "train.learning_starts=80",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["completed"] and summary["stop_reason"] == "max_seconds"  # the wall-clock budget ended it
    assert 6.0 <= summary["loop_s"] < 12.0  # the deadline is checked after every tick, and ticks take milliseconds
    assert summary["env_steps"] > 80 and summary["updates"] > 0
    # the calls that compile on CUDA are timed on every device (CPU: eager, so short)
    warmup = summary["warmup_s"]
    assert set(warmup) == {"first_inference", "first_policy_inference", "first_update_phase"}
    assert all(0.0 < v < summary["loop_s"] for v in warmup.values())
    assert (tmp_path / "checkpoints" / "latest.pt").is_file()
    assert len(list((tmp_path / "checkpoints").glob("step_*.pt"))) == 1  # only the final one
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) >= 2 and rows[-1]["env_steps"] == summary["env_steps"]


def test_no_budget_at_all_from_the_cli_is_one_line(tmp_path):
    proc = train_cli(tmp_path, "train.total_env_steps=null", "logger=none", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "[offpolicy] invalid config: train.total_env_steps=null: needs a wall-clock budget: "
        "set train.max_seconds (seconds > 0) or a step budget > 0"
    ]
