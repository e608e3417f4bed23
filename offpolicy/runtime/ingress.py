"""Bounded ingress: a ring of transition slots from the collector to the learner.

Each slot holds one whole vector step: obs, reward, next obs (the pre-reset observation where an episode ended, so truncated
episodes can bootstrap), terminated, truncated, plus episode statistics and a
header (tick, policy_version, physics failures) with the rows whose physics failed.
The actions are not in it: the learner made them and keeps its own copy of each
tick's until the transition is ingested (the collector could only copy the action
slot back, racing the next tick's inference that overwrites it).

Two monotonic counters in the control block govern it: PRODUCED (slots written by
the collector) and CONSUMED (slots released by the learner). Slot `i` of the
ring holds transition number `i % ring_slots`. The producer writes slot
`produced % R` only while `produced - consumed < R`, otherwise it blocks: nothing
is ever dropped and no slot is reused before its reader released it. The reader
releases explicitly, after the data left the slot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from offpolicy.runtime.slots import CONSUMED, INGRESS_FULL_WAITS, PRODUCED, SharedSegment, Waiter

HEADER_TICK = 0
HEADER_POLICY_VERSION = 1
HEADER_PHYSICS_FAILURES = 2
HEADER_NUM_DONE = 3


@dataclass
class TransitionSlot:
    """Numpy views of one ingress slot (shared memory: copy out before releasing)."""

    header: np.ndarray
    obs: dict[str, np.ndarray]
    reward: np.ndarray
    next_obs: dict[str, np.ndarray]
    terminated: np.ndarray
    truncated: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray
    episode_tracking: np.ndarray
    """a tracking task's episode sums (`envs.tracking`) in its first columns"""
    physics_failed: np.ndarray
    """rows whose physics failed (valid only where the header counts failures)"""

    @property
    def tick(self) -> int:
        return int(self.header[HEADER_TICK])

    @property
    def policy_version(self) -> int:
        return int(self.header[HEADER_POLICY_VERSION])


class IngressRing:
    """Both ends of the ring over one shared segment; each process uses its own end."""

    def __init__(self, segment: SharedSegment, obs_keys: list[str], ring_slots: int) -> None:
        if ring_slots < 2:
            raise ValueError(f"the ingress ring needs at least 2 slots, got {ring_slots}")
        self.segment = segment
        self.ring_slots = ring_slots
        self.slots = [
            TransitionSlot(
                header=segment[f"ring{i}/header"],
                obs={k: segment[f"ring{i}/obs/{k}"] for k in obs_keys},
                reward=segment[f"ring{i}/reward"],
                next_obs={k: segment[f"ring{i}/next_obs/{k}"] for k in obs_keys},
                terminated=segment[f"ring{i}/terminated"],
                truncated=segment[f"ring{i}/truncated"],
                episode_return=segment[f"ring{i}/episode_return"],
                episode_length=segment[f"ring{i}/episode_length"],
                episode_tracking=segment[f"ring{i}/episode_tracking"],
                physics_failed=segment[f"ring{i}/physics_failed"],
            )
            for i in range(ring_slots)
        ]

    # --- counters (metrics) ---------------------------------------------------------
    @property
    def produced(self) -> int:
        """Transitions written by the collector so far."""
        return int(self.segment.control[PRODUCED])

    @property
    def consumed(self) -> int:
        """Transitions released by the learner so far."""
        return int(self.segment.control[CONSUMED])

    @property
    def full_waits(self) -> int:
        """Times the collector found every slot taken and blocked."""
        return int(self.segment.control[INGRESS_FULL_WAITS])

    # --- producer (collector) ---------------------------------------------------------
    def acquire_for_write(self, waiter: Waiter, check: Callable[[], None]) -> TransitionSlot:
        """The next free slot; blocks while all `ring_slots` are unreleased."""
        control = self.segment.control
        produced = int(control[PRODUCED])
        need = produced - self.ring_slots + 1  # CONSUMED must reach this before slot `produced % R` is free
        if int(control[CONSUMED]) < need:
            control[INGRESS_FULL_WAITS] += 1
            waiter.wait_at_least(CONSUMED, need, check)
        return self.slots[produced % self.ring_slots]

    def commit(self, wake: bool = True) -> None:
        """Publish the slot returned by the last `acquire_for_write`.

        Mid-run the learner never blocks on PRODUCED (it waits for the obs tick that
        follows), so the collector skips the wake syscall there (`wake=False`).
        """
        value = int(self.segment.control[PRODUCED]) + 1
        if wake:
            self.segment.publish(PRODUCED, value)
        else:
            self.segment.control[PRODUCED] = value

    # --- consumer (learner) ---------------------------------------------------------
    def peek(self) -> TransitionSlot | None:
        """The oldest unreleased transition, or None when the ring is empty."""
        control = self.segment.control
        consumed = int(control[CONSUMED])
        if int(control[PRODUCED]) <= consumed:
            return None
        return self.slots[consumed % self.ring_slots]

    def release(self) -> None:
        """Hand the oldest slot back to the producer (after its data was copied out)."""
        control = self.segment.control
        if int(control[PRODUCED]) <= int(control[CONSUMED]):
            raise RuntimeError("ingress release without an unreleased transition")
        self.segment.publish(CONSUMED, int(control[CONSUMED]) + 1)
