"""Property 1, strict time-sharing: from a recorded timeline, inference and update never overlap and alternate."""

from __future__ import annotations

import json

import numpy as np
import pytest
from runtime_helpers import make_cfg, run_in_process

from offpolicy.runtime.timeline import load_intervals

# runs alone under `make test` (many short phases of two processes), though every assertion orders recorded
# events and holds on a loaded machine too
pytestmark = pytest.mark.serial


def test_inference_and_update_alternate_tick_by_tick(run_dir):
    ticks, learning_starts, num_envs = 40, 5 * 4, 4
    cfg = make_cfg(
        env={"num_envs": num_envs, "options": {"step_delay_s": 0.002}},
        algo={"updates_per_step": 2, "update_delay_s": 0.001},
        train={"total_env_steps": ticks * num_envs, "learning_starts": learning_starts},
        runtime={"trace": True},
    )
    runner = run_in_process(cfg, run_dir)
    trace = run_dir / "timeline.json"
    assert trace.exists()
    assert json.loads(trace.read_text())["traceEvents"], "empty Chrome trace"
    intervals = load_intervals(trace)

    inference = [iv for iv in intervals if iv["phase"] == "inference"]
    update = [iv for iv in intervals if iv["phase"] == "update"]
    assert [iv["tick"] for iv in inference] == list(range(ticks))
    first_learning_tick = learning_starts // num_envs  # tick t ingests transition t-1: t * num_envs rows by then
    assert [iv["tick"] for iv in update] == list(range(first_learning_tick, ticks))
    assert runner.summary["policy_version"] == len(update)

    # Never overlap: every inference interval is disjoint from every update interval.
    for inf in inference:
        for upd in update:
            assert inf["end"] <= upd["start"] or upd["end"] <= inf["start"], (inf, upd)

    # Alternate tick by tick: once learning starts the device sees I U I U ... and each
    # update sits between the inference of its tick and that of the next.
    device_phases = [iv for iv in intervals if iv["phase"] in ("inference", "update")]
    seq = [iv["phase"][0].upper() for iv in device_phases if iv["tick"] >= first_learning_tick]
    assert "".join(seq) == "IU" * (ticks - first_learning_tick)
    by_tick = {iv["tick"]: iv for iv in inference}
    for upd in update:
        t = upd["tick"]
        assert by_tick[t]["end"] <= upd["start"]
        if t + 1 in by_tick:
            assert upd["end"] <= by_tick[t + 1]["start"]

    # Every phase of the protocol was recorded, in order, within each tick.
    order = {"wait": 0, "inference": 1, "ingest": 2, "update": 3}
    for t in range(1, ticks):
        phases = [iv for iv in intervals if iv["tick"] == t]
        assert [order[iv["phase"]] for iv in phases] == sorted(order[iv["phase"]] for iv in phases)
        assert {"wait", "inference", "ingest"} <= {iv["phase"] for iv in phases}


def test_the_collector_publishes_the_observation_before_it_finishes_deferred_rewards(run_dir):
    """A step's pending reward (`NpEnvState.finish`, here 20 ms of CPU) is computed after the observation is
    published, in the ingress write that overlaps the learner's inference, never between step and publish;
    the learner's ingest, which waits for that write, shows it (`perf/ingest_ms`, its `perf/ingest_wait_ms`).

    Checked by ordering the recorded events (the timeline's and the env's reward work, on one monotonic
    clock), not by how long a phase took, so it holds on a loaded machine too; the only allowances for the
    scheduler are that most ticks (not all) overlap and 1 ms on the mean wait."""
    ticks, num_envs, busy_ms = 30, 4, 20.0
    record = run_dir / "record.npz"
    cfg = make_cfg(
        env={"num_envs": num_envs, "options": {"deferred_reward_busy_s": busy_ms / 1e3, "record_path": str(record)}},
        train={"total_env_steps": ticks * num_envs},
        runtime={"trace": True},
        logger={"interval_env_steps": 10 * ticks * num_envs},  # one row, after the loop: every tick's ingest
    )
    runner = run_in_process(cfg, run_dir)
    assert runner.summary["env_steps"] == ticks * num_envs
    finish = np.load(record)["reward_finish_ns"]  # (start, end) of each step's reward work
    assert finish.shape == (ticks, 2)
    collector = {(p, t): (s, e) for p, t, s, e in runner.timeline.collector}
    learner = {(p, t): (s, e) for p, t, s, e, _ in runner.timeline.host}
    for t in range(ticks):
        # the observation went out first; the reward work is part of the transition's ingress write
        assert collector["publish", t][1] <= finish[t, 0], t
        assert collector["ingress", t][0] <= finish[t, 0] < finish[t, 1] <= collector["ingress", t][1], t
    # the learner's inference of tick t+1 started while the collector still finished tick t's reward (with
    # the reward computed before the publish it never could); a loaded machine may delay the learner's
    # wake-up past the reward work on some ticks, not on most of them
    overlapped = [learner["inference", t + 1][0] < finish[t, 1] for t in range(ticks - 1)]
    assert sum(overlapped) > len(overlapped) // 2, overlapped
    # each ingest of transition t (in tick t+1) ends after its reward was finished: it waited for the commit
    ingest = {t: learner["ingest", t + 1] for t in range(ticks)}
    assert all(ingest[t][1] >= finish[t, 1] for t in range(ticks))
    (row,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # the row's figures are per tick over all 30: the ingest is inside its timeline phase, and its wait at
    # least the part of that phase before the reward work ended (less 1 ms on the mean: the wait's clock is
    # read a few instructions into the phase)
    wait_lower_ms = sum(max(0, finish[t, 1] - ingest[t][0]) for t in range(ticks)) / 1e6 / ticks
    phase_ms = sum(e - s for s, e in ingest.values()) / 1e6 / ticks
    assert wait_lower_ms > 0.0
    assert row["perf/ingest_wait_ms"] >= wait_lower_ms - 1.0, (row["perf/ingest_wait_ms"], wait_lower_ms)
    # and the wait and the device sync after the copies (no device here) are disjoint parts of the ingest
    assert row["perf/ingest_wait_ms"] + row["perf/ingest_sync_ms"] <= row["perf/ingest_ms"] <= phase_ms + 1e-6
