"""Functions run in spawned processes by the IPC tests (importable by name, numpy-only)."""

from __future__ import annotations

import time

import numpy as np

from offpolicy.runtime.ingress import HEADER_TICK, IngressRing
from offpolicy.runtime.slots import ACTION_TICK, OBS_TICK, STOP, SharedSegment, WaitAborted, Waiter


def ring_producer(name, layout, ring_slots, count, max_delay_s, seed, spin_us):
    """Write transitions 0..count-1 (every array filled with its number) with random delays."""
    seg = SharedSegment.attach(name, layout)
    ring = IngressRing(seg, ["actor"], ring_slots)
    waiter = Waiter(seg, spin_us=spin_us, poll_s=0.01)
    rng = np.random.default_rng(seed)

    def check():
        if seg.control[STOP]:
            raise WaitAborted

    for i in range(count):
        if max_delay_s > 0 and rng.random() < 0.5:
            time.sleep(rng.uniform(0, max_delay_s))
        slot = ring.acquire_for_write(waiter, check)
        for arr in (slot.obs["actor"], slot.next_obs["actor"], slot.reward, slot.episode_return):
            arr[...] = i
        slot.header[HEADER_TICK] = i
        ring.commit()
    del ring, slot
    seg.close()


def echo_peer(name, layout, rounds, spin_us):
    """Answer each OBS_TICK t with ACTION_TICK t (round-trip measurement)."""
    seg = SharedSegment.attach(name, layout)
    waiter = Waiter(seg, spin_us=spin_us, poll_s=0.01)

    def check():
        if seg.control[STOP]:
            raise WaitAborted

    try:
        for t in range(rounds):
            waiter.wait_at_least(OBS_TICK, t, check)
            seg.publish(ACTION_TICK, t)
    except WaitAborted:
        pass
    seg.close()
