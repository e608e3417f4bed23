"""Collector isolation: no torch in the collector, and it and its pool workers run only on the collector CPUs."""

from __future__ import annotations

import json
import os

import pytest
from runtime_helpers import STANDIN_CLI, make_cfg, run_in_process, train_cli

from offpolicy.affinity import available_cpus


def _assert_isolated(report: dict, collector_cpus: list[int]) -> None:
    modules = report["modules"]
    assert "torch" not in modules
    assert not [m for m in modules if m.startswith("torch.")]
    assert not report["libcuda_mapped"], "the collector mapped libcuda"
    assert report["process_cpus"] == collector_cpus
    for tid, cpus in report["thread_cpus"].items():
        assert set(cpus) <= set(collector_cpus), f"collector thread {tid} may run on {cpus}"
    assert report["thread_caps"] == dict.fromkeys(report["thread_caps"], "1")


@pytest.mark.skipif(len(available_cpus()) < 2, reason="needs two CPUs to split learner and collector")
def test_cli_collector_never_imports_torch_and_stays_on_its_cpus(tmp_path):
    """Through the real CLI, whose main module (offpolicy.train) spawn would otherwise re-import in the collector."""
    proc = train_cli(
        tmp_path, "env=ant", "env.num_envs=8", *STANDIN_CLI, "logger=none", "train.total_env_steps=400", timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    cpus = available_cpus()
    learner_cpus, collector_cpus = cpus[:1], cpus[1:]
    handshake = json.loads((tmp_path / "collector.json").read_text())
    at_exit = json.loads((tmp_path / "collector_exit.json").read_text())
    # spawn did not re-import the entry module (and with it Hydra) into the collector
    assert "offpolicy.train" not in handshake["modules"] and "hydra" not in handshake["modules"]
    for report in (handshake, at_exit):
        _assert_isolated(report, collector_cpus)
        assert sorted(report["worker_cpu_ids"]) == collector_cpus  # pool.worker_cpu_ids(): one pinned worker per CPU
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["learner_cpus"] == learner_cpus and summary["collector_cpus"] == collector_cpus
    assert summary["collector_pid"] == handshake["pid"] != os.getpid()


@pytest.mark.skipif(len(available_cpus()) < 2, reason="needs two CPUs to split learner and collector")
def test_explicit_affinity_is_honoured_by_collector_and_pool(run_dir):
    cpus = available_cpus()
    collector_cpus, learner_cpus = cpus[:1], cpus[1:2]  # the reverse of auto
    cfg = make_cfg(
        env={"name": "ant", "num_envs": 4},
        affinity={"mode": "manual", "learner_cpus": learner_cpus, "collector_cpus": collector_cpus},
        train={"total_env_steps": 80},
        runtime={"env_factory": None},
    )
    runner = run_in_process(cfg, run_dir)
    report = runner.collector.spec_report
    _assert_isolated(report, collector_cpus)
    assert report["worker_cpu_ids"] == collector_cpus
    _assert_isolated(runner.collector.final_report, collector_cpus)
