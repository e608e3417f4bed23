"""The learner's metering: where its time goes, for the `perf/*` metric rows and `summary.json`'s `warmup_s`.

The learner calls its `LearnerMeter` at a few named points of a tick (`start_inference` ->
`inference_done`, `ingest_done`, `update_started` -> `update_done`) and once per metric row
(`interval_metrics`). Everything here reads host clocks, host counters and CUDA events that have
completed: metering never makes the learner wait for the device.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from offpolicy.runtime.slots import COLLECTOR_PHASE_TICKS, PHASE_NAMES, PHASE_RING

INFERENCE_STAGES = ("h2d", "policy", "eval", "post", "action_copy", "publish")
"""Host-side stages of one inference tick (`perf/inference_<stage>_ms`, medians per metric row): `h2d`
issuing the observation copies, `policy` the training rows' actions (`explore`, or the random warm-up
draw), `eval` the snapshot actor's for the evaluation rows, `post` the finite check, the kept copy and the
scaling, `action_copy` the device -> action-slot copy (on CUDA it waits until all the work before it ran,
an update phase still running included: `perf/inference_behind_update_fraction` counts those ticks), and
`publish` stamping and publishing the slot. On CUDA the first four only launch work, so a slow device
shows in `action_copy` and a slow host in the others."""
STAGE_RING = 1024
"""inference ticks whose stage durations are kept for the next metric row"""
H2D, POLICY, EVAL, POST, ACTION_COPY, PUBLISH = range(len(INFERENCE_STAGES))


class StageMarks:
    """One inference tick's stage clock: `mark(stage)` stores the host time since the previous mark."""

    __slots__ = ("row", "t0", "last")

    def __init__(self, row: np.ndarray) -> None:
        self.row = row
        self.t0 = time.perf_counter()
        self.last = time.perf_counter_ns()

    def behind_update(self, running: bool) -> None:
        """Whether an update phase was still running on the device when the tick began."""
        self.row[-1] = running

    def mark(self, stage: int) -> None:
        """The stage that ends now took the time since the previous mark."""
        now = time.perf_counter_ns()
        self.row[stage], self.last = now - self.last, now

    def skip(self, *stages: int) -> None:
        """Stages this tick did not run separately (the tick graph runs them inside its launch)."""
        for stage in stages:
            self.row[stage] = 0


def ingress_counters(ring: Any) -> dict[str, int]:
    """The ingress ring's produced, consumed and full-wait counters."""
    return {
        "ingress_produced": ring.produced,
        "ingress_consumed": ring.consumed,
        "ingress_full_waits": ring.full_waits,
    }


def ring_counters(ring: Any, final_counters: dict[str, int]) -> dict[str, float]:
    """`perf/ingress_*`: from the ring, or the counters read when the views were released (`ring` None)."""
    counters = final_counters if ring is None else ingress_counters(ring)
    return {f"perf/{k}": float(v) for k, v in counters.items()}


class LearnerMeter:
    """Phase busy times, the ingest split, the inference stages and the warm-up timings of one learner."""

    def __init__(self, segment: Any, device: torch.device) -> None:
        self.segment = segment
        """the shared slots: the collector's phase ring is read from them"""
        self.cuda = device.type == "cuda"
        self.busy_s = {"inference": 0.0, "ingest": 0.0, "update": 0.0}
        """seconds spent in each phase: host wall clock (perf_counter, never a device sync), except the
        update phase on CUDA, which is launched asynchronously and runs while the collector steps physics:
        its device time is read from CUDA events once they completed (`collect_update_events`)"""
        self.ingest_split_s = {"wait": 0.0, "sync": 0.0}
        """host seconds of ingest's two waits: for the collector's commit of the transition (its ingress
        write, rewards included), and for the device after the copies into replay (CUDA only)"""
        self.update_events: list[tuple[Any, Any]] = []
        """(start, end) CUDA events of update phases whose device time is not yet counted"""
        self.inference_ticks = 0
        self._stage_ns = np.zeros((STAGE_RING, len(INFERENCE_STAGES) + 1), dtype=np.int64)
        """per tick: host nanoseconds of each inference stage, then 1 if an update phase was still
        running on the device when the tick began (ring of the last STAGE_RING ticks)"""
        self._stages_read = 0
        """inference ticks whose stages went into a metric row already"""
        self.warmup_s: dict[str, float] = {}
        """host seconds of the first inference tick, the first with the policy's own actions and the
        first update phase: these calls compile and capture (`first_*` keys)"""
        self._interval = (time.perf_counter(), 0, 0.0, dict(self.busy_s), 0)
        """interval_metrics() rates since the last row: (t, updates, busy s, busy s per phase, inference ticks)"""
        self._ingest_split_prev = dict(self.ingest_split_s)
        self._phases_read = 0
        """collector ticks whose phase durations went into a metric row already"""

    # --- per tick -----------------------------------------------------------------------
    def start_loop(self, updates_done: int) -> None:
        """The first metric row's rates count from the start of the tick loop."""
        busy = sum(self.busy_s.values())
        self._interval = (time.perf_counter(), updates_done, busy, dict(self.busy_s), self.inference_ticks)
        self._ingest_split_prev = dict(self.ingest_split_s)

    def start_inference(self) -> StageMarks:
        """The stage clock of the inference tick that starts now."""
        return StageMarks(self._stage_ns[self.inference_ticks % STAGE_RING])

    def inference_done(self, marks: StageMarks, policy_tick: bool) -> None:
        """The tick's action slot is published (`publish` ends now); `policy_tick`: its first policy tick."""
        marks.mark(PUBLISH)
        elapsed = time.perf_counter() - marks.t0
        self.busy_s["inference"] += elapsed
        if not self.inference_ticks:
            self.warmup_s["first_inference"] = elapsed
        if policy_tick:
            self.warmup_s["first_policy_inference"] = elapsed
        self.inference_ticks += 1

    def ingest_done(self, t0: float, t_committed: float, t_sync: float, t_synced: float) -> None:
        """An ingest that began at `t0`, found its transition committed at `t_committed`, and waited
        for the device from `t_sync` to `t_synced`, ends now."""
        self.ingest_split_s["wait"] += t_committed - t0
        self.ingest_split_s["sync"] += t_synced - t_sync
        self.busy_s["ingest"] += time.perf_counter() - t0

    @property
    def first_update_pending(self) -> bool:
        """No update phase ran yet (the next one compiles and captures)."""
        return "first_update_phase" not in self.warmup_s

    def update_started(self) -> tuple[Any, Any] | None:
        """CUDA: the (start, end) timing events of the update phase launched next, its start recorded."""
        if not self.cuda:
            return None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        return start, end

    def update_done(self, events: tuple[Any, Any] | None, elapsed: float, first: bool) -> Any:
        """The update phase was launched in `elapsed` host seconds; CUDA: its end event (recorded now)."""
        if first:  # host time: compiling runs on the host
            self.warmup_s["first_update_phase"] = elapsed
        if events is None:
            self.busy_s["update"] += elapsed
            return None
        events[1].record()
        self.update_events.append(events)
        return events[1]

    # --- per metric row -----------------------------------------------------------------
    def interval_metrics(self, updates_done: int) -> dict[str, float]:
        """Rates and medians since the previous row: host clocks, counters and completed events only."""
        out: dict[str, float] = {}
        self.collect_update_events()
        now, busy = time.perf_counter(), sum(self.busy_s.values())
        t_prev, updates_prev, busy_prev, phases_prev, ticks_prev = self._interval
        wall = max(now - t_prev, 1e-9)
        out["perf/updates_per_s"] = (updates_done - updates_prev) / wall
        out["perf/learner_busy_fraction"] = min(1.0, (busy - busy_prev) / wall)
        if self.inference_ticks > ticks_prev:
            ticks = self.inference_ticks - ticks_prev
            out["perf/inference_tick_ms"] = 1e3 * (self.busy_s["inference"] - phases_prev["inference"]) / ticks
            # one ingest a tick, waiting for the collector's commit where its ingress write (with the step's
            # reward) outlasts the inference before it
            out["perf/ingest_ms"] = 1e3 * (self.busy_s["ingest"] - phases_prev["ingest"]) / ticks
            # its parts: the wait for that commit, and the device sync after the copies into replay
            for part, value in self.ingest_split_s.items():
                out[f"perf/ingest_{part}_ms"] = 1e3 * (value - self._ingest_split_prev[part]) / ticks
        self._interval = (now, updates_done, busy, dict(self.busy_s), self.inference_ticks)
        self._ingest_split_prev = dict(self.ingest_split_s)
        out.update(self.collector_phases())
        out.update(self.inference_stages())
        return out

    def inference_stages(self) -> dict[str, float]:
        """Medians of the inference ticks' host stages since the last row (`perf/inference_<stage>_ms`)."""
        first = max(self._stages_read, self.inference_ticks - STAGE_RING)
        if self.inference_ticks <= first:
            return {}
        rows = self._stage_ns[np.arange(first, self.inference_ticks) % STAGE_RING]
        self._stages_read = self.inference_ticks
        medians = np.median(rows[:, :-1], axis=0) / 1e6
        out = {f"perf/inference_{name}_ms": float(v) for name, v in zip(INFERENCE_STAGES, medians, strict=True)}
        out["perf/inference_behind_update_fraction"] = float(rows[:, -1].mean())
        return out

    def collector_phases(self) -> dict[str, float]:
        """Medians of the collector's per-tick phases since the last row (`perf/collector_*_ms`)."""
        segment = self.segment
        if segment is None or segment.control is None or "collector/phases" not in segment.arrays:
            return {}
        written = int(segment.control[COLLECTOR_PHASE_TICKS]) - 1  # the newest row may be mid-write
        first = max(self._phases_read, written - PHASE_RING + 1, 0)
        if written <= first:
            return {}
        rows = segment["collector/phases"][np.arange(first, written) % PHASE_RING] / 1e6
        self._phases_read = written
        medians = np.median(rows, axis=0)
        out = {f"perf/collector_{name}_ms": float(v) for name, v in zip(PHASE_NAMES, medians, strict=True)}
        i = {name: k for k, name in enumerate(PHASE_NAMES)}
        cycle = rows[:, i["cycle"]].sum()
        if cycle > 0:  # the collector's serial work outside the pool, as a share of the tick
            outside = rows[:, i["critical"]] - rows[:, i["physics"]]
            out["perf/collector_outside_pool_fraction"] = float(outside.sum() / cycle)
        return out

    def collect_update_events(self) -> None:
        """Add the device time of update phases whose end event has completed (`query()` never blocks)."""
        pending = []
        for start, end in self.update_events:
            if end.query():
                self.busy_s["update"] += start.elapsed_time(end) / 1e3
            else:
                pending.append((start, end))
        self.update_events = pending
