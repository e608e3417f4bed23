"""Timeline of the learner's phases (wait, inference, ingest, update), written as a Chrome trace.

With `runtime.trace=true` every phase interval of every tick is recorded: host
wall clock always, and CUDA events on the current stream where the learner runs
on CUDA (resolved only when the trace is written, so recording never syncs the
host). The trace opens in chrome://tracing or Perfetto; the runtime tests read
it back to prove strict time-sharing.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

PHASES = ("wait", "inference", "ingest", "update")
HOST_TRACK = "learner host (wall clock)"
DEVICE_TRACK = "learner device (CUDA events)"
COLLECTOR_TRACK = "collector (wall clock)"


class Timeline:
    """Records phase intervals; a disabled timeline costs one attribute check per phase."""

    def __init__(self, enabled: bool, device: torch.device, max_ticks: int = 20_000) -> None:
        self.enabled = bool(enabled)
        self.use_cuda_events = self.enabled and device.type == "cuda"
        self.max_ticks = int(max_ticks)
        self.host: list[tuple[str, int, int, int, dict]] = []
        """(phase, tick, start_ns, end_ns, args)"""
        self.device_events: list[tuple[str, int, Any, Any]] = []
        self.collector: list[tuple[str, int, int, int]] = []
        """(phase, tick, start_ns, end_ns) the collector recorded (same monotonic clock as `host`)"""
        self._t0 = time.perf_counter_ns()
        self._origin_event = None
        if self.use_cuda_events:
            self._origin_event = torch.cuda.Event(enable_timing=True)
            self._origin_event.record()

    @contextmanager
    def phase(self, name: str, tick: int, **args: Any):
        """Record the enclosed block as phase `name` of `tick`."""
        if not self.enabled or tick >= self.max_ticks:
            yield
            return
        start_ev = end_ev = None
        if self.use_cuda_events:
            start_ev = torch.cuda.Event(enable_timing=True)
            start_ev.record()
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            end = time.perf_counter_ns()
            if self.use_cuda_events:
                end_ev = torch.cuda.Event(enable_timing=True)
                end_ev.record()
                self.device_events.append((name, tick, start_ev, end_ev))
            self.host.append((name, tick, start, end, args))

    def annotate_last(self, **args: Any) -> None:
        """Add arguments to the last recorded interval (e.g. the policy_version an update produced)."""
        if self.enabled and self.host:
            self.host[-1][4].update(args)

    def add_collector_track(self, events: list[tuple[str, int, int, int]]) -> None:
        """The collector's phase intervals (physics, task numpy, resets, publish, ingress, wait for the action)."""
        if self.enabled:
            self.collector = [e for e in events if e[1] < self.max_ticks]

    def intervals(self) -> list[dict[str, Any]]:
        """Host intervals as dicts with microsecond `start`/`end` from the timeline's start."""
        return [
            {"phase": n, "tick": t, "start_us": (s - self._t0) / 1e3, "end_us": (e - self._t0) / 1e3, **a}
            for n, t, s, e, a in self.host
        ]

    def chrome_trace(self) -> dict[str, Any]:
        """The whole timeline in Chrome's trace-event format."""
        pid = os.getpid()
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "offpolicy learner"}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": HOST_TRACK}},
        ]
        for n, t, s, e, a in self.host:
            events.append(
                {
                    "name": n,
                    "cat": "host",
                    "ph": "X",
                    "pid": pid,
                    "tid": 1,
                    "ts": (s - self._t0) / 1e3,
                    "dur": (e - s) / 1e3,
                    "args": {"tick": t, **a},
                }
            )
        if self.collector:
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 3, "args": {"name": COLLECTOR_TRACK}})
            for n, t, s, e in self.collector:
                events.append(
                    {
                        "name": n,
                        "cat": "collector",
                        "ph": "X",
                        "pid": pid,
                        "tid": 3,
                        "ts": (s - self._t0) / 1e3,
                        "dur": (e - s) / 1e3,
                        "args": {"tick": t},
                    }
                )
        if self.device_events:
            torch.cuda.synchronize()
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 2, "args": {"name": DEVICE_TRACK}})
            for n, t, s_ev, e_ev in self.device_events:
                start_ms = self._origin_event.elapsed_time(s_ev)
                events.append(
                    {
                        "name": n,
                        "cat": "device",
                        "ph": "X",
                        "pid": pid,
                        "tid": 2,
                        "ts": start_ms * 1e3,
                        "dur": s_ev.elapsed_time(e_ev) * 1e3,
                        "args": {"tick": t},
                    }
                )
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def write(self, run_dir: str | Path, name: str = "timeline.json") -> Path | None:
        """Write the Chrome trace into `run_dir`; returns its path (None when disabled)."""
        if not self.enabled:
            return None
        path = Path(run_dir) / name
        path.write_text(json.dumps(self.chrome_trace()))
        return path


def load_intervals(path: str | Path, category: str = "host") -> list[dict[str, Any]]:
    """Read a trace written by `Timeline.write` back as sorted intervals (tests, analysis)."""
    events = json.loads(Path(path).read_text())["traceEvents"]
    out = [
        {"phase": e["name"], "start": e["ts"], "end": e["ts"] + e["dur"], **e["args"]}
        for e in events
        if e.get("ph") == "X" and e.get("cat") == category
    ]
    return sorted(out, key=lambda iv: (iv["start"], iv["end"]))
