"""Property 2, no torn state, and property 3, exploration state reset per env from the collector's done flags."""

from __future__ import annotations

import time

import numpy as np
import torch
from runtime_helpers import make_cfg, run_in_process
from torch import nn

from offpolicy.runtime.timeline import load_intervals


def code(version: int) -> float:
    """The value every action entry takes under `version` (inside (0, 1))."""
    return ((version % 97) + 1) / 100.0


class VersionActor(nn.Module):
    """Output is (first + second) / 2 per entry: a read of half-written parameters shows up as a mixed value."""

    def __init__(self, num_envs: int, action_dim: int) -> None:
        super().__init__()
        self.first = nn.Parameter(torch.full((num_envs, action_dim), code(0)))
        self.second = nn.Parameter(torch.full((num_envs, action_dim), code(0)))

    def forward(self, obs):
        return (self.first + self.second) / 2


class VersionAlgorithm:
    """Writes a new parameter state slowly, row by row, in each update phase; records reset masks."""

    updates_per_step = 1
    batch_size = 1

    def __init__(self, spec, device) -> None:
        self.actor = VersionActor(spec.num_envs, spec.action_dim).to(device)
        self.phases = 0
        self.reset_masks: list[np.ndarray] = []

    @torch.no_grad()
    def explore(self, obs, reset_mask):
        self.reset_masks.append(reset_mask.cpu().numpy().copy())
        return self.actor(obs).clone()

    @torch.no_grad()
    def act(self, obs):
        return self.actor(obs).clone()

    @torch.no_grad()
    def update_phase(self, replay, num_updates):
        self.phases += 1
        c = code(self.phases)
        for row in range(self.actor.first.shape[0]):
            self.actor.first[row].fill_(c)
            time.sleep(0.0003)  # widen the window in which a concurrent reader would see a torn state
        self.actor.second.fill_(c)
        return {"loss/none": torch.zeros(())}

    def state_dict(self):
        return self.actor.state_dict()

    def load_state_dict(self, state):
        self.actor.load_state_dict(state)


def _run(run_dir, ticks=60, num_envs=5, **options):
    record = run_dir / "record.npz"
    cfg = make_cfg(
        env={"num_envs": num_envs, "options": {"record_path": str(record), "step_delay_s": 0.001, **options}},
        train={"total_env_steps": ticks * num_envs, "learning_starts": 0},
        runtime={"trace": True},
    )
    holder = {}

    def factory(algo_cfg, spec, device):
        holder["algo"] = VersionAlgorithm(spec, device)
        return holder["algo"]

    runner = run_in_process(cfg, run_dir, algorithm_factory=factory)
    return runner, holder["algo"], dict(np.load(record))


def test_each_tick_uses_one_complete_policy_version(run_dir):
    ticks = 60
    runner, algo, rec = _run(run_dir, ticks=ticks)
    versions = runner.learner.tick_versions
    assert (versions >= 0).all()
    # versions only move forward, by at most one complete update phase per tick
    steps = np.diff(versions)
    assert ((steps == 0) | (steps == 1)).all()
    assert versions[-1] == algo.phases - 1  # the last phase ran after the last inference

    # What the collector actually stepped, back in [-1, 1]: one value per tick, the code of its version.
    spec_low = np.linspace(-2.0, -0.5, rec["action"].shape[-1]).astype(np.float32)
    spec_high = np.linspace(0.5, 3.0, rec["action"].shape[-1]).astype(np.float32)
    normalised = (rec["action"] - (spec_high + spec_low) / 2) / ((spec_high - spec_low) / 2)
    assert normalised.shape[0] == ticks
    for t in range(ticks):
        expected = code(int(versions[t]))
        np.testing.assert_allclose(normalised[t], expected, atol=1e-5, err_msg=f"tick {t} mixes parameter states")

    # Versions change only between ticks: each tick's version counts the update phases that
    # ended before its inference started.
    intervals = load_intervals(run_dir / "timeline.json")
    update_ends = sorted(iv["end"] for iv in intervals if iv["phase"] == "update")
    for iv in intervals:
        if iv["phase"] == "inference":
            done_before = sum(end <= iv["start"] for end in update_ends)
            assert versions[iv["tick"]] == done_before
            assert iv["policy_version"] == versions[iv["tick"]]


def test_exploration_state_resets_from_collector_done_flags(run_dir):
    ticks = 50
    runner, algo, rec = _run(run_dir, ticks=ticks, terminate_prob=0.2, max_episode_steps=5)
    masks = np.stack(algo.reset_masks)
    assert masks.shape == (ticks, 5)
    assert masks[0].all(), "every env starts an episode at tick 0"
    done = rec["terminated"] | rec["truncated"]
    assert done[:-1].any() and not done[:-1].all()
    np.testing.assert_array_equal(masks[1:], done[:-1])
