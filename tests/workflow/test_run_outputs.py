"""Run outputs: metrics.jsonl always; W&B imported lazily, offline without credentials."""

from __future__ import annotations

import json
import sys
import types

import pytest
from omegaconf import OmegaConf

from offpolicy.config import validate_train_config
from offpolicy.logger import MetricsLogger


def _cfg(**logger):
    raw = OmegaConf.create({"seed": 3, "env": {"name": "ant"}, "algo": {"name": "fastsac"}, "logger": logger})
    return validate_train_config(raw, custom_algorithm=True, custom_env=True)


def test_metrics_jsonl_rows(tmp_path):
    log = MetricsLogger(tmp_path, _cfg(name="none"))
    log.log(100, {"train/episode_return": 1.5})
    log.log(200, {"perf/env_steps_per_s": 10})
    log.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"env_steps": 100, "train/episode_return": 1.5}, {"env_steps": 200, "perf/env_steps_per_s": 10.0}]


def test_wandb_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(RuntimeError, match="logger=wandb needs the wandb package"):
        MetricsLogger(tmp_path, _cfg(name="wandb"))


def test_wandb_goes_offline_without_credentials(tmp_path, monkeypatch):
    calls = {}
    fake = types.ModuleType("wandb")

    class Run:
        def log(self, metrics, step):
            calls.setdefault("log", []).append((metrics, step))

        def finish(self, exit_code=0):
            calls["finished"] = exit_code == 0

    def init(**kwargs):
        calls["init"] = kwargs
        return Run()

    fake.init = init
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    log = MetricsLogger(tmp_path, _cfg(name="wandb", mode="auto", project="p", experiment="e"))
    log.log(5, {"loss/critic": 0.5})
    log.close()
    init_kwargs = calls["init"]
    assert init_kwargs["mode"] == "offline"
    assert init_kwargs["group"] == "ant-fastsac-e" and init_kwargs["name"] == "ant-fastsac-seed3"
    assert init_kwargs["dir"] == str(tmp_path) and init_kwargs["config"]["seed"] == 3
    assert calls["log"] == [({"loss/critic": 0.5}, 5)] and calls["finished"]
