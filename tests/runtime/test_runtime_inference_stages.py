"""The inference tick's stage split (`perf/inference_<stage>_ms`) puts time where it was spent.

An algorithm that sleeps a fixed time in exactly one of `explore` (the training rows' actions) and
`act_snapshot` (the evaluation rows') must show that time in that stage's median and not in the others:
a split that swapped, merged or dropped stages would not.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from runtime_helpers import make_cfg, run_in_process

from offpolicy.runtime.metering import INFERENCE_STAGES

DELAY_S = 0.008


class SleepyAlgorithm:
    """Constant actions; `explore` or `act_snapshot` sleeps DELAY_S; update phases do nothing."""

    updates_per_step = 1
    batch_size = 1

    def __init__(self, spec, sleepy: str) -> None:
        self.actor = torch.nn.Linear(1, 1)
        self.action_dim = spec.action_dim
        self.sleepy = sleepy

    def _act(self, obs, name: str) -> torch.Tensor:
        if name == self.sleepy:
            time.sleep(DELAY_S)
        return torch.full((obs["actor"].shape[0], self.action_dim), 0.25)

    def explore(self, obs, reset_mask):
        return self._act(obs, "explore")

    def act(self, obs):
        return self._act(obs, "act")

    def snapshot_actor(self):
        pass

    def act_snapshot(self, obs):
        return self._act(obs, "act_snapshot")

    def update_phase(self, replay, num_updates):
        return {}

    def state_dict(self):
        return {}


@pytest.mark.parametrize(("sleepy", "stage"), [("explore", "policy"), ("act_snapshot", "eval")])
def test_a_slow_actor_call_lands_in_its_own_stage(tmp_path, sleepy, stage):
    train_rows, ticks = 4, 60
    cfg = make_cfg(
        env={"num_envs": train_rows},
        eval={"num_envs": 2, "episodes": 2, "interval_s": None, "interval_env_steps": 10_000, "final": False},
        train={"total_env_steps": train_rows * ticks, "learning_starts": 0},
        logger={"interval_env_steps": 80},
    )
    run_in_process(cfg, tmp_path, algorithm_factory=lambda c, spec, d: SleepyAlgorithm(spec, sleepy))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if f"perf/inference_{stage}_ms" in r]
    assert len(rows) >= 2
    for row in rows:
        ms = {name: row[f"perf/inference_{name}_ms"] for name in INFERENCE_STAGES}
        assert ms[stage] >= 0.9 * DELAY_S * 1e3, ms
        others = {k: v for k, v in ms.items() if k != stage}
        assert max(others.values()) < 0.5 * ms[stage], ms
        # the stages are the tick: their medians add up to about the mean tick (no long tails here)
        assert sum(ms.values()) == pytest.approx(row["perf/inference_tick_ms"], rel=0.3)
        assert row["perf/inference_behind_update_fraction"] == 0.0  # CPU: updates never run asynchronously


def test_the_tick_graph_option_is_off_without_cuda(tmp_path):
    """`runtime.tick_graph=true` asks for a CUDA graph; on the CPU the run takes the eager tick and says so."""
    cfg = make_cfg(train={"total_env_steps": 4 * 20, "learning_starts": 0}, runtime={"tick_graph": True})
    runner = run_in_process(cfg, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tick_graph"] == "off" and runner.learner.tick_graph_wanted is False
    assert summary["ticks"] == 20 and not summary["graph_errors"]
