"""Shared-memory slots: parent-only create/unlink, spin-then-block waits across processes, aborting a wait."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time

import pytest
from ipc_workers import echo_peer

from offpolicy.runtime.slots import (
    ACTION_TICK,
    OBS_TICK,
    SEGMENT_PREFIX,
    STOP,
    Layout,
    SharedSegment,
    WaitAborted,
    Waiter,
    futex_available,
)


def _segment():
    return SharedSegment.create(Layout.for_spec(4, {"actor": 3, "critic": 5}, 2, 2))


def test_layout_holds_every_obs_key_flags_actions_and_ring():
    seg = _segment()
    try:
        assert seg["obs/actor"].shape == (4, 3) and seg["obs/critic"].shape == (4, 5)
        assert seg["obs/reset_mask"].dtype == bool and seg["action/value"].shape == (4, 2)
        assert seg["ring1/next_obs/critic"].shape == (4, 5)
        assert all(f.offset % 64 == 0 for f in seg.layout.fields.values())
        assert seg.control[OBS_TICK] == -1 and seg.control[ACTION_TICK] == -1
        assert seg.name.startswith(f"{SEGMENT_PREFIX}{os.getpid()}_")
    finally:
        seg.unlink()
        seg.close()


def test_unlink_removes_the_name_but_keeps_the_mapping():
    seg = _segment()
    name = seg.name
    assert os.path.exists(f"/dev/shm/{name}")
    seg.unlink()
    assert not os.path.exists(f"/dev/shm/{name}")
    seg["obs/actor"][:] = 3.0  # the mapping is still usable
    assert (seg["obs/actor"] == 3.0).all()
    with pytest.raises(FileNotFoundError):
        SharedSegment.attach(name, seg.layout)
    seg.close()


def test_only_the_parent_unlinks():
    seg = _segment()
    try:
        peer = SharedSegment.attach(seg.name, seg.layout)
        with pytest.raises(RuntimeError, match="only the parent"):
            peer.unlink()
        peer.close()
    finally:
        seg.unlink()
        seg.close()


def test_a_wait_is_abandoned_when_check_raises():
    seg = _segment()
    try:
        waiter = Waiter(seg, spin_us=10, poll_s=0.005)
        calls = []

        def check():
            calls.append(1)
            if len(calls) > 3:
                raise WaitAborted

        t0 = time.monotonic()
        with pytest.raises(WaitAborted):
            waiter.wait_at_least(OBS_TICK, 5, check)
        assert time.monotonic() - t0 < 1.0
        assert waiter.blocked_waits == 1
    finally:
        seg.unlink()
        seg.close()


@pytest.mark.parametrize("spin_us", [200.0, 0.0])  # spinning, and blocking on the futex at once
def test_round_trips_between_processes(spin_us):
    rounds = 300
    seg = _segment()
    proc = mp.get_context("spawn").Process(target=echo_peer, args=(seg.name, seg.layout, rounds, spin_us))
    proc.start()
    try:
        waiter = Waiter(seg, spin_us=spin_us, poll_s=0.01)

        def check():
            assert proc.exitcode is None, "peer died"

        for t in range(rounds):
            seg.publish(OBS_TICK, t)
            assert waiter.wait_at_least(ACTION_TICK, t, check) == t
        proc.join(10)
        assert proc.exitcode == 0
        if spin_us == 0.0 and futex_available():
            assert waiter.blocked_waits > 0  # waits that found no answer went through the futex
    finally:
        seg.control[STOP] = 1
        seg.wake_all()
        proc.join(5)
        seg.unlink()
        seg.close()


def test_a_keep_awake_wait_spins_calling_awake_on_its_cadence_and_still_checks():
    """The learner's keep-awake wait (runtime.keep_awake_us) never blocks, calls `awake` every
    `awake_every_us` while the counter is short of its target, runs `check` every poll_s, and returns
    as soon as the counter arrives."""
    seg = _segment()
    try:
        waiter = Waiter(seg, spin_us=10, poll_s=0.02)
        awake, checks = [], []
        publisher = threading.Timer(0.2, lambda: seg.publish(OBS_TICK, 3))
        publisher.start()
        t0, cpu0 = time.monotonic(), time.thread_time()
        assert waiter.wait_at_least(OBS_TICK, 3, lambda: checks.append(1), awake=lambda: awake.append(1),
                                    awake_every_us=2000.0) == 3  # fmt: skip
        waited, ran = time.monotonic() - t0, time.thread_time() - cpu0
        publisher.join()
        assert waiter.blocked_waits == 0  # it never went to the futex
        # ~100 awake calls at 2 ms over 0.2 s (not one per spin iteration, not none); ~10 checks at 20 ms. The
        # spin is all CPU, so its own CPU time is the time it had to make its calls: on a loaded machine the
        # scheduler takes some of the 0.2 s away, and a cadence missed while descheduled is not made up.
        assert ran > 0.25 * waited  # it spun (a blocked wait uses ~no CPU)
        assert 0.5 * ran / 0.002 <= len(awake) <= waited / 0.002 + 2
        assert 0.5 * ran / 0.02 <= len(checks) <= waited / 0.02 + 2

        def abort():
            raise WaitAborted

        with pytest.raises(WaitAborted):  # a raising check abandons the spin like a blocking wait
            waiter.wait_at_least(OBS_TICK, 9, abort, awake=lambda: None)
    finally:
        seg.unlink()
        seg.close()
