"""Metering of the collector's ticks: each tick's phase durations into the shared phase ring (the learner
reports their medians as `perf/collector_*_ms`), and with `runtime.trace` their intervals for the
timeline's collector track.

The tick loop stamps a `TickTimes` at its named points and hands it to `PhaseRecorder.record` once the
tick's transition is written. Numpy-only, like everything the collector imports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offpolicy.runtime.slots import COLLECTOR_PHASE_TICKS, PHASE_NAMES, PHASE_RING, SharedSegment


@dataclass
class TickTimes:
    """`time.perf_counter_ns` stamps of one tick, taken by the tick loop."""

    action: int = 0
    """the action slot of the tick was seen"""
    stepped: int = 0
    """the env's step returned"""
    published: int = 0
    """the next observations were published (or, on the last tick, would have been)"""
    acquired: int = 0
    """an ingress slot was free for the transition"""
    written: int = 0
    """the transition was committed"""
    eval_span: tuple[int, int] | None = None
    """(start, end) of the resets a snapshot evaluation asked for, if any"""
    env_timing: tuple[int, int, int, int] | None = None
    """the env's own (pool start, pool end, resets start, resets end), where it times itself"""


class PhaseRecorder:
    """Per-tick phase durations into the shared phase ring (the learner reads medians at log time), and
    the intervals themselves for the timeline's collector track while `trace_max_ticks` lasts.

    Phases (`offpolicy.runtime.slots.PHASE_NAMES`): `cycle` from one obs publish to the next; `wait` for the
    action (the learner's inference and the exchange); `physics`, the pool step; `task`, the task's
    numpy (observation, reward, termination) around it; `resets`, auto-resets; `eval_resets`, resets a
    snapshot evaluation asked for; `publish`, writing the next observations; `critical`, from the
    action to the next publish (what the learner waits for); `ingress_wait` and `ingress_write`, the
    transition's slot, written after the publish while the learner runs its inference.
    """

    def __init__(self, segment: SharedSegment, trace_max_ticks: int, trace: list[tuple[str, int, int, int]]) -> None:
        self.ring = segment["collector/phases"]
        self.control = segment.control
        self.trace_max_ticks = int(trace_max_ticks)
        self.trace = trace
        """(phase, tick, start_ns, end_ns) of the traced ticks, appended to"""
        self.index = {name: i for i, name in enumerate(PHASE_NAMES)}
        self.published = self.written = 0

    def start(self, published: int) -> None:
        """The first observations were published at `published`: tick 0's cycle and wait start there."""
        self.published = self.written = published

    def record(self, tick: int, t: TickTimes) -> np.ndarray:
        """Write tick `tick`'s phase durations into the ring (and the trace); returns the ring's row."""
        env_timing = t.env_timing
        if env_timing is None:  # an env that does not time itself: the whole step counts as physics
            env_timing = (t.action, t.stepped, t.stepped, t.stepped)
        pool_start, pool_end, reset_start, reset_end = env_timing
        physics, resets = pool_end - pool_start, reset_end - reset_start
        evals = 0 if t.eval_span is None else t.eval_span[1] - t.eval_span[0]
        row = self.ring[tick % PHASE_RING]
        i = self.index
        row[i["cycle"]] = t.published - self.published
        row[i["wait"]] = t.action - self.written
        row[i["physics"]] = physics
        row[i["task"]] = (t.stepped - t.action) - physics - resets
        row[i["resets"]] = resets
        row[i["eval_resets"]] = evals
        row[i["publish"]] = (t.published - t.stepped) - evals
        row[i["critical"]] = t.published - t.action
        row[i["ingress_wait"]] = t.acquired - t.published
        row[i["ingress_write"]] = t.written - t.acquired
        self.control[COLLECTOR_PHASE_TICKS] = tick + 1
        if tick < self.trace_max_ticks:
            self._trace(tick, t, env_timing)
        self.published, self.written = t.published, t.written
        return row

    def _trace(self, tick: int, t: TickTimes, env_timing: tuple[int, int, int, int]) -> None:
        pool_start, pool_end, reset_start, reset_end = env_timing
        self.trace.extend(
            [
                ("wait", tick, self.written, t.action),
                ("physics", tick, pool_start, pool_end),
                ("task", tick, t.action, t.stepped),
                ("publish", tick, t.stepped, t.published),
                ("ingress", tick, t.published, t.written),
            ]
        )
        if reset_end - reset_start:
            self.trace.append(("resets", tick, reset_start, reset_end))
        if t.eval_span is not None:
            self.trace.append(("eval_resets", tick, *t.eval_span))
