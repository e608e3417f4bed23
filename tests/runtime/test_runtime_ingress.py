"""Property 4, nothing lost, nothing reused early: the bounded ingress ring, alone and inside whole runs."""

from __future__ import annotations

import json
import multiprocessing as mp
import time

import numpy as np
import pytest
from ipc_workers import ring_producer
from runtime_helpers import make_cfg, run_in_process

from offpolicy.runtime.ingress import IngressRing
from offpolicy.runtime.slots import STOP, Layout, SharedSegment


@pytest.mark.parametrize(
    "ring_slots,consumer_delay_s,producer_delay_s", [(2, 0.002, 0.0), (3, 0.0, 0.002), (2, 0.001, 0.001)]
)
def test_ring_between_processes_keeps_order_and_blocks_when_full(ring_slots, consumer_delay_s, producer_delay_s):
    count, n = 200, 3
    layout = Layout.for_spec(n, {"actor": 2}, 2, ring_slots)
    seg = SharedSegment.create(layout)
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=ring_producer, args=(seg.name, layout, ring_slots, count, producer_delay_s, 1, 50.0))
    proc.start()
    ring = slot = None
    try:
        ring = IngressRing(seg, ["actor"], ring_slots)
        rng = np.random.default_rng(0)
        seen = []
        max_in_flight = 0
        while len(seen) < count:
            assert proc.exitcode in (None, 0)
            slot = ring.peek()
            if slot is None:
                continue
            max_in_flight = max(max_in_flight, ring.produced - ring.consumed)
            if consumer_delay_s and rng.random() < 0.5:
                time.sleep(rng.uniform(0, consumer_delay_s))  # the producer must not touch this slot meanwhile
            i = slot.tick
            for arr in (slot.obs["actor"], slot.next_obs["actor"], slot.reward, slot.episode_return):
                assert (arr == i).all(), f"slot of transition {i} was overwritten before release"
            seen.append(i)
            ring.release()
        proc.join(10)
        assert proc.exitcode == 0
        assert seen == list(range(count)), "lost, duplicated or reordered transitions"
        assert max_in_flight <= ring_slots
        assert ring.produced == ring.consumed == count
        if consumer_delay_s:
            assert ring.full_waits > 0, "a slow consumer must make the producer block"
        with pytest.raises(RuntimeError):
            ring.release()  # nothing left to release
    finally:
        seg.control[STOP] = 1
        proc.join(5)
        if proc.is_alive():
            proc.kill()
        del ring, slot
        seg.unlink()
        seg.close()


def test_ring_needs_two_slots():
    layout = Layout.for_spec(1, {"actor": 1}, 1, 1)
    seg = SharedSegment.create(layout)
    try:
        with pytest.raises(ValueError, match="at least 2"):
            IngressRing(seg, ["actor"], 1)
    finally:
        seg.unlink()
        seg.close()


def _check_replay_equals_record(runner, rec, num_envs, ticks):
    replay = runner.replay
    assert runner.learner.ticks_done == ticks
    assert replay.total_added == len(replay) == ticks * num_envs
    rows = ticks * num_envs
    for key in [k for k in rec if k.startswith("obs/") or k.startswith("next_obs/")]:
        field, obs_key = key.split("/")
        stored = getattr(replay, field)[obs_key][:rows].numpy()
        np.testing.assert_array_equal(stored, rec[key].reshape(rows, -1), err_msg=key)
    np.testing.assert_array_equal(replay.reward[:rows].numpy(), rec["reward"].reshape(rows))
    np.testing.assert_array_equal(replay.terminated[:rows].numpy(), rec["terminated"].reshape(rows).astype(np.float32))
    np.testing.assert_array_equal(replay.truncated[:rows].numpy(), rec["truncated"].reshape(rows).astype(np.float32))
    # replay keeps the normalised action; the collector applied its env-unit image
    spec = runner.learner.spec
    mid = (spec.action_high + spec.action_low) / 2
    half = (spec.action_high - spec.action_low) / 2
    applied = replay.action[:rows].numpy() * half + mid
    np.testing.assert_allclose(applied, rec["action"].reshape(rows, -1), rtol=1e-6, atol=1e-6)
    assert (np.abs(replay.action[:rows].numpy()) <= 1).all()


def test_every_transition_reaches_replay_once_in_order_under_random_delays(run_dir):
    """Seeded property test: random shapes, ring sizes and delays on both sides; replay == what the env produced."""
    rng = np.random.default_rng(1234)
    for case in range(5):
        num_envs = int(rng.integers(1, 6))
        ticks = int(rng.integers(20, 50))
        ring_slots = int(rng.integers(2, 5))
        case_dir = run_dir / f"case{case}"
        record = case_dir / "record.npz"
        case_dir.mkdir()
        cfg = make_cfg(
            seed=case,
            env={
                "num_envs": num_envs,
                "options": {
                    "record_path": str(record),
                    "step_delay_s": float(rng.choice([0.0, 0.002])),
                    "critic_obs": bool(rng.integers(2)),
                    "terminate_prob": float(rng.uniform(0, 0.3)),
                    "max_episode_steps": int(rng.integers(2, 9)),
                },
            },
            algo={
                "batch_size": 8,
                "update_delay_s": float(rng.choice([0.0, 0.003])),
                "explore_delay_s": float(rng.choice([0.0, 0.002])),
            },
            train={"total_env_steps": ticks * num_envs, "learning_starts": int(rng.integers(0, 3 * num_envs))},
            runtime={"ingress_slots": ring_slots, "spin_us": float(rng.choice([0.0, 200.0]))},
        )
        runner = run_in_process(cfg, case_dir)
        rec = dict(np.load(record))
        assert rec["reward"].shape == (ticks, num_envs)
        _check_replay_equals_record(runner, rec, num_envs, ticks)
        # nothing in flight at the end: every produced transition was consumed
        last = [json.loads(line) for line in (case_dir / "metrics.jsonl").read_text().splitlines()][-1]
        assert last["perf/ingress_produced"] == last["perf/ingress_consumed"] == ticks
