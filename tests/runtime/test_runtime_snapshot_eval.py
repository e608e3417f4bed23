"""Snapshot evaluation: one frozen policy per evaluation, complete episodes from fresh resets, on schedule.

The in-process run uses an algorithm whose every action encodes the parameter
state that produced it (training rows: the live version; evaluation rows: the
frozen snapshot's), and the fake env records every action it stepped and every
reset the learner requested, so a mixed policy, a miscounted episode or a
snapshot taken at the wrong moment shows up in the record.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from runtime_helpers import make_cfg, run_in_process

from offpolicy.config import EvalConfig
from offpolicy.runtime.snapshot_eval import (
    EvalSchedule,
    MeanPolicy,
    SnapshotEval,
    SnapshotEvals,
    eval_metrics,
    rollout,
)
from offpolicy.runtime.timeline import load_intervals


def code(version: int) -> float:
    """The value every action entry takes under `version` (inside (0, 1))."""
    return ((version % 97) + 1) / 100.0


class SnapshotVersionAlgorithm:
    """Live actions carry the live version's code; `act_snapshot` the code of the version frozen last."""

    updates_per_step = 1
    batch_size = 1

    def __init__(self, spec, device) -> None:
        self.actor = torch.nn.Linear(1, 1)
        self.action_dim = spec.action_dim
        self.phases = 0
        self.snapshot_version: int | None = None
        self.live_act_calls = 0

    def _const(self, obs, version: int) -> torch.Tensor:
        return torch.full((obs["actor"].shape[0], self.action_dim), code(version))

    def explore(self, obs, reset_mask):
        return self._const(obs, self.phases)

    def act(self, obs):
        self.live_act_calls += 1
        return self._const(obs, self.phases)

    def snapshot_actor(self):
        self.snapshot_version = self.phases

    def act_snapshot(self, obs):
        assert self.snapshot_version is not None, "act_snapshot before any snapshot"
        return self._const(obs, self.snapshot_version)

    def update_phase(self, replay, num_updates):
        self.phases += 1
        return {}

    def state_dict(self):
        return {"phases": self.phases}

    def load_state_dict(self, state):
        self.phases = int(state["phases"])


def _normalised(actions: np.ndarray) -> np.ndarray:
    """The fake env's asymmetric action bounds, undone: back to [-1, 1]."""
    dim = actions.shape[-1]
    low = np.linspace(-2.0, -0.5, dim).astype(np.float32)
    high = np.linspace(0.5, 3.0, dim).astype(np.float32)
    return (actions - (high + low) / 2) / ((high - low) / 2)


def test_each_evaluation_runs_one_frozen_snapshot_over_complete_fresh_episodes(run_dir):
    train_rows, eval_rows, ticks = 4, 3, 90
    record = run_dir / "record.npz"
    cfg = make_cfg(
        env={
            "num_envs": train_rows,
            "options": {"record_path": str(record), "terminate_prob": 0.15, "max_episode_steps": 6},
        },
        eval={"num_envs": eval_rows, "episodes": 6, "interval_s": None, "interval_env_steps": 60, "final": False},
        train={"total_env_steps": train_rows * ticks, "learning_starts": 0},
        runtime={"trace": True},
    )
    holder = {}

    def factory(algo_cfg, spec, device):
        holder["algo"] = SnapshotVersionAlgorithm(spec, device)
        return holder["algo"]

    runner = run_in_process(cfg, run_dir, algorithm_factory=factory)
    algo, learner = holder["algo"], runner.learner
    rec = dict(np.load(record))
    history = learner.evals.history
    assert len(history) >= 4, "a snapshot every 15 ticks, each needing at most 1 + 2 x 6 ticks"
    assert algo.live_act_calls == 0, "evaluation rows never act with the live actor"
    versions = learner.tick_versions
    actions = _normalised(rec["action"])[:, :, 0]  # (ticks, rows): every entry of a row carries the same code
    done = rec["terminated"] | rec["truncated"]
    reset_steps = list(rec["forced_reset_step"])  # global step after which the eval rows were reset
    # one reset per evaluation (the last may still have been running when the run ended)
    assert reset_steps[: len(history)] == [r["tick"] + 1 for r in history] and len(reset_steps) <= len(history) + 1

    moved = False
    for result in history:
        tick, per_row = result["tick"], 2  # ceil(6 episodes / 3 rows)
        # the snapshot is the complete parameter state the training rows of that tick acted with
        assert result["policy_version"] == versions[tick]
        assert result["env_steps"] == train_rows * (tick - 1)  # transitions in replay when it was taken
        assert result["episodes"] == eval_rows * per_row == len(result["returns"])
        expected_returns = []
        for row in range(train_rows, train_rows + eval_rows):
            t, episodes = tick + 1, 0
            episode_return = 0.0
            while episodes < per_row:
                # every action of the evaluation's episodes: the frozen version's, whatever training did meanwhile
                assert actions[t, row] == pytest.approx(code(result["policy_version"]), abs=1e-5), (tick, row, t)
                episode_return += float(rec["reward"][t, row])
                if done[t, row]:
                    expected_returns.append(episode_return)
                    episode_return, episodes = 0.0, episodes + 1
                t += 1
            moved |= versions[min(t, len(versions) - 1)] > result["policy_version"]
        np.testing.assert_allclose(result["returns"], expected_returns, rtol=1e-5)
        assert result["mean"] == pytest.approx(np.mean(expected_returns), rel=1e-5)
        assert result["median"] == pytest.approx(np.median(expected_returns), rel=1e-5)
        assert result["min"] == pytest.approx(np.min(expected_returns), rel=1e-5)
    assert moved, "training advanced during evaluations: a policy mix-up would have been visible"

    # training rows always act with the tick's live version (the evaluation changes nothing there)
    for t in range(ticks):
        np.testing.assert_allclose(actions[t, :train_rows], code(int(versions[t])), atol=1e-5)
    # and no inference overlaps an update phase: the snapshot's actions are computed in the same phase
    intervals = load_intervals(run_dir / "timeline.json")
    updates = [(iv["start"], iv["end"]) for iv in intervals if iv["phase"] == "update"]
    for iv in intervals:
        if iv["phase"] == "inference":
            assert all(iv["end"] <= s or iv["start"] >= e for s, e in updates)
    # eval rows never reach replay
    assert runner.replay.total_added == train_rows * ticks


def test_physics_failures_and_non_finite_actions_never_reach_replay_or_physics(run_dir):
    train_rows, ticks = 5, 60
    record = run_dir / "record.npz"
    cfg = make_cfg(
        env={"num_envs": train_rows, "options": {"record_path": str(record), "fail_prob": 0.1}},
        train={"total_env_steps": train_rows * ticks, "learning_starts": 0},
    )

    class NaNRows(SnapshotVersionAlgorithm):
        def explore(self, obs, reset_mask):
            action = super().explore(obs, reset_mask)
            action[1, 0] = float("nan")  # row 1 always asks for a NaN, row 3 for +inf
            action[3, 1] = float("inf")
            return action

    runner = run_in_process(cfg, run_dir, algorithm_factory=lambda c, spec, d: NaNRows(spec, d))
    rec = dict(np.load(record))
    failed = rec["physics_failed"]
    assert failed.sum() > 10
    replay = runner.replay
    assert replay.total_added == train_rows * ticks - failed.sum() == len(replay)
    # what reached replay is exactly the non-failed rows, in order
    kept = rec["obs/actor"][~failed]
    np.testing.assert_array_equal(replay.obs["actor"][: len(replay)].numpy(), kept)
    assert runner.learner.dropped_transitions == failed.sum()
    # physics never saw a non-finite action: those rows got the range's midpoint instead
    assert np.isfinite(rec["action"]).all()
    np.testing.assert_allclose(_normalised(rec["action"])[:, 1, 0], 0.0, atol=1e-6)
    np.testing.assert_allclose(_normalised(rec["action"])[:, 3, 1], 0.0, atol=1e-6)
    assert runner.learner.metrics()["train/nonfinite_actions"] == 2 * ticks


def test_a_streak_of_non_finite_updates_stops_the_run_with_its_state_kept(run_dir):
    from offpolicy.runtime.collector_process import LearnerFailed

    cfg = make_cfg(
        train={"total_env_steps": 4 * 1000, "learning_starts": 0, "max_nonfinite_updates": 5},
        checkpoint={"interval_env_steps": 0},
    )

    class Skipping(SnapshotVersionAlgorithm):
        """Every update from the 10th on has a non-finite loss (and is skipped, as the real algorithms do)."""

        def __init__(self, spec, device) -> None:
            super().__init__(spec, device)
            self.nonfinite_streak = torch.zeros((), dtype=torch.int64)

        def update_phase(self, replay, num_updates):
            self.phases += 1
            if self.phases >= 10:
                self.nonfinite_streak += num_updates
            return {}

    with pytest.raises(LearnerFailed, match=r"5 updates in a row had non-finite losses and were skipped"):
        run_in_process(cfg, run_dir, algorithm_factory=lambda c, spec, d: Skipping(spec, d))
    import json

    summary = json.loads((run_dir / "summary.json").read_text())
    assert not summary["completed"] and "non-finite" in summary["stop_reason"]
    assert (run_dir / "checkpoints" / "latest.pt").exists()  # skipped updates left the parameters intact


# --------------------------------------------------------------------------- bookkeeping, by hand


def test_snapshot_eval_counts_each_rows_first_episodes_after_its_reset():
    ev = SnapshotEval(policy_version=7, env_steps=100, snapshot_s=3.0, reset_tick=10, rows=2, per_row=2, started_at=0)
    no, r0, r1, both = (np.array(x) for x in ([0, 0], [1, 0], [0, 1], [1, 1]))
    ev.observe(10, both, np.array([-50.0, -60.0]), np.array([3, 3]))  # ended with the reset tick: before it
    ev.observe(11, no, np.zeros(2), np.zeros(2))
    ev.observe(12, r0, np.array([5.0, 0.0]), np.array([2, 0]))
    ev.observe(13, both, np.array([1.0, 9.0]), np.array([1, 3]))
    assert not ev.complete
    ev.observe(15, both, np.array([100.0, 4.0]), np.array([2, 2]))  # row 0's third episode is not counted
    assert ev.complete
    result = ev.result()
    assert result["returns"] == [5.0, 1.0, 9.0, 4.0] and result["lengths"] == [2, 1, 3, 2]
    assert result["episodes"] == 4 and result["mean"] == 4.75 and result["median"] == 4.5
    assert result["min"] == 1.0 and result["max"] == 9.0 and result["policy_version"] == 7
    assert result["std"] == pytest.approx(math.sqrt(np.var([5.0, 1.0, 9.0, 4.0])))
    assert result["length_mean"] == 2.0  # lengths [2, 1, 3, 2]
    assert eval_metrics(result) == {
        "eval/return": 4.75,
        "eval/return_median": 4.5,
        "eval/return_min": 1.0,
        "eval/return_max": 9.0,
        "eval/return_std": pytest.approx(math.sqrt(np.var([5.0, 1.0, 9.0, 4.0]))),
        "eval/length": 2.0,
        "eval/episodes": 4.0,
        "eval/policy_version": 7.0,
        "eval/env_steps": 100.0,
        "eval/snapshot_s": 3.0,
    }


def test_every_eval_row_runs_enough_episodes_for_the_total():
    assert EvalConfig(num_envs=4, episodes=10).episodes_per_row == 3  # 12 >= 10, not 8
    assert EvalConfig(num_envs=16, episodes=16).episodes_per_row == 1
    assert EvalConfig(num_envs=16, episodes=17).episodes_per_row == 2
    assert EvalConfig(num_envs=8, episodes=2).episodes_per_row == 1


class ScriptedEnv:
    """Two rows that auto-reset: row 0's episodes end at steps 2 and 5, row 1's at step 8."""

    spec = SimpleNamespace(num_envs=2, max_episode_steps=10)
    ends = ({2, 5}, {8})

    def reset(self):
        self.t, self.last_end = 0, [0, 0]
        return SimpleNamespace(obs={"actor": np.zeros((2, 1), np.float32)})

    def step(self, actions):
        self.t += 1
        done = np.array([self.t in ends for ends in self.ends])
        ret, length = np.zeros(2), np.zeros(2, np.int64)
        for row in np.flatnonzero(done):
            ret[row], length[row] = 100.0 * row + self.t, self.t - self.last_end[row]
            self.last_end[row] = self.t
        info = {"episode_return": ret, "episode_length": length}
        obs = {"actor": np.zeros((2, 1), np.float32)}
        return SimpleNamespace(obs=obs, terminated=done, truncated=np.zeros(2, bool), info=info)


def test_offline_rollout_keeps_each_rows_first_episode():
    """A row that ends early and starts again (auto-reset) keeps its first episode's return and length."""
    returns, lengths, _ = rollout(ScriptedEnv(), lambda obs: np.zeros((2, 1), np.float32))
    assert returns.tolist() == [2.0, 108.0] and lengths.tolist() == [2, 8]


def test_the_rollouts_step_hook_sees_each_step_and_the_rows_still_in_their_first_episode():
    """Row 0's first episode ends at step 2 (the hook's step 1), row 1's at step 8 (step 7): each row is live
    up to and including the step its first episode ends on, and the rollout stops after step 7."""
    seen = []
    rollout(
        ScriptedEnv(),
        lambda obs: np.zeros((2, 1), np.float32),
        on_step=lambda s, st, live: seen.append((s, live.tolist())),
    )
    assert seen == [(0, [True, True]), (1, [True, True])] + [(s, [False, True]) for s in range(2, 8)]


def test_final_snapshot_policy_acts_with_the_frozen_copy_in_env_units():
    spec = SimpleNamespace(action_dim=2, action_low=[-2.0, -1.0], action_high=[2.0, 3.0])
    algo = SnapshotVersionAlgorithm(spec, "cpu")
    algo.snapshot_actor()  # version 0 frozen
    algo.update_phase(None, 1)
    algo.update_phase(None, 1)  # live version 2
    obs = {"actor": np.zeros((3, 1), np.float32)}
    frozen = MeanPolicy(algo, spec, torch.device("cpu"), snapshot=True)(obs)
    live = MeanPolicy(algo, spec, torch.device("cpu"))(obs)
    np.testing.assert_allclose(frozen, np.tile([2 * code(0), 1 + 2 * code(0)], (3, 1)), rtol=1e-6)
    np.testing.assert_allclose(live, np.tile([2 * code(2), 1 + 2 * code(2)], (3, 1)), rtol=1e-6)


def test_schedule_takes_marks_on_time_and_skips_regular_points_that_would_overlap_them():
    sched = EvalSchedule(EvalConfig(num_envs=2, interval_s=30.0, at_seconds=(120.0, 240.0)), budget_s=480.0)
    assert not sched.due(29.0, 0, False, 40.0)
    assert sched.due(30.0, 0, False, 40.0)  # 30 + 40 <= 120
    assert not sched.due(61.0, 0, True, 40.0)  # due, but one is running: pending
    sched.finished(45.0)
    assert sched.due(75.0, 0, False, 40.0)  # the pending point, taken when free: 75 + 45 <= 120
    assert not sched.due(91.0, 0, False, 40.0)  # 91 + 45 > 120: skipped so the 120-s mark stays on time
    assert not sched.due(100.0, 0, False, 40.0)  # and not retried
    assert sched.due(120.0, 0, False, 40.0)  # the mark
    assert not sched.due(150.0, 0, True, 40.0)  # regular point while the mark's evaluation runs
    assert not sched.due(200.0, 0, False, 40.0)  # pending, but 200 + 45 > 240
    assert not sched.due(230.0, 0, True, 40.0)
    assert sched.due(241.0, 0, True, 40.0) is False  # the 240-s mark while busy: pending ...
    assert sched.due(250.0, 0, False, 40.0)  # ... taken as soon as the running one ended
    assert not sched.due(460.0, 0, False, 40.0)  # 460 + 45 > the 480-s budget: the final evaluation covers it


def test_schedule_by_env_steps_never_skips():
    sched = EvalSchedule(EvalConfig(num_envs=2, interval_s=None, interval_env_steps=1000), budget_s=None)
    assert not sched.due(5.0, 999, False, 1e9)
    assert sched.due(5.0, 1000, False, 1e9)
    assert not sched.due(6.0, 1500, False, 1e9)
    assert not sched.due(7.0, 2100, True, 1e9)  # due while running: pending
    assert sched.due(8.0, 2200, False, 1e9)
    assert not sched.due(9.0, 2900, False, 1e9)


def test_snapshot_evals_report_once_every_eval_row_has_its_episodes():
    """The learner's collaborator: due on the step schedule, never with no eval rows, episodes counted
    from the tick after the reset, one result handed to the runner once and kept in the history."""
    settings = EvalConfig(num_envs=2, episodes=4, interval_s=None, interval_env_steps=100)
    spec = SimpleNamespace(max_episode_steps=10, tracking_terms=())
    assert not SnapshotEvals(settings, 0, None, spec).due(0.0, 100, 0.01)  # no eval rows: never due
    evals = SnapshotEvals(settings, 2, None, spec)
    assert not evals.due(0.0, 99, 0.01) and evals.due(0.0, 100, 0.01)
    evals.start(policy_version=7, env_steps=100, elapsed_s=1.5, tick=5)
    done, length, tracking = np.array([True, True]), np.array([10, 10]), np.zeros((2, 1))
    for tick, returns in ((5, [9.0, 9.0]), (6, [1.0, 3.0]), (7, [2.0, 4.0])):  # tick 5: before the reset
        assert evals.current is not None and not evals.results
        evals.observe(tick, done, np.array(returns), length, ~done, tracking)
    assert evals.current is None and evals.results == evals.history
    [result] = evals.take_results()
    assert result["episodes"] == 4 and result["mean"] == 2.5 and result["max"] == 4.0
    assert (result["policy_version"], result["env_steps"], result["snapshot_s"]) == (7, 100, 1.5)
    assert evals.take_results() == [] and len(evals.history) == 1
