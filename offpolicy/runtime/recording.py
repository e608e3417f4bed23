"""Recording a window of the collector's ticks for a same-trajectory replay
(`runtime.record.*`, read by benchmark/offpolicy/trajectory_replay.py).

The collector's tick loop calls its recorder at five points: before a step, after a reset the learner
asked for, before publishing the next observations, once the tick's phase durations are written, and at
the end of the run. `recorder_for` gives a `WindowRecorder` or, with no window configured, a
`NoRecording` whose calls do nothing. Numpy-only, like everything the collector imports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from offpolicy.runtime import cpu_accounting
from offpolicy.runtime.slots import PHASE_NAMES


@dataclass(frozen=True)
class RecordWindow:
    """Which ticks to record and where: the physics state before the first, then every action and reset."""

    path: str
    start_tick: int
    ticks: int
    start_s: float | None = None
    """when set: the window starts at the first tick this many seconds after tick 0 (start_tick is ignored)"""


class NoRecording:
    """The recorder of a run that records nothing."""

    def before_step(self, tick: int, actions: np.ndarray) -> None:
        """Nothing to record."""

    def forced_reset(self, tick: int, rows: np.ndarray) -> None:
        """Nothing to record."""

    def after_step(self, tick: int, obs_slot: dict[str, np.ndarray]) -> None:
        """Nothing to record."""

    def tick_done(self, tick: int, phase_row: np.ndarray) -> bool:
        """Never finishes a window."""
        return False

    def save(self) -> None:
        """Nothing to save."""


def recorder_for(env: Any, window: RecordWindow | None) -> WindowRecorder | NoRecording:
    """A `WindowRecorder` of `env` for `window`, or a `NoRecording` without one.

    An env that cannot record (no `snapshot`/`restore`, no `reset_log`) is refused here, before the first tick.
    """
    if window is None:
        return NoRecording()
    missing = [name for name in ("snapshot", "restore", "reset_log") if not hasattr(env, name)]
    if missing:
        name = getattr(getattr(env, "spec", None), "name", type(env).__name__)
        raise ValueError(
            f"runtime.record: env {name!r} ({type(env).__name__}) cannot record a window for a same-trajectory "
            f"replay: it lacks {', '.join(missing)}; leave runtime.record.ticks at 0 for this env"
        )
    return WindowRecorder(env, window)


class WindowRecorder:
    """Records a window of ticks for a same-trajectory replay: the env's state before the first tick, then
    every action, every reset (rows and states, automatic or requested), every observation published and
    every tick's phase durations (the `collector/phases` row the metric rows take their medians of), so the
    window's mean tick can be split into its phases tick by tick.

    Needs an env with `snapshot()`, `restore()` and a `reset_log` (MujocoNpEnv, the joystick tasks' env). A
    log entry is (rows, states) or (rows, states, model fields): the fields of the new episodes' models (each
    `(len(rows), ...)`), or None for a write of states inside the rows' episodes (a push). Saved as one .npz at
    the window's end: `reset_kinds` per entry (0 new episodes, 1 a state write) and `reset_fields/<name>` the
    fields of the entries that carry them, in order. The collector's CPUs are read at the window's first tick
    and at its end (`offpolicy.runtime.cpu_accounting`): `cpu_ids`, `cpu_own_seconds` and `cpu_wall_seconds`
    (first, last), and `cpu_times` (first, last; per CPU and field) where `/proc/stat` could be read.
    """

    def __init__(self, env: Any, window: RecordWindow) -> None:
        self.env = env
        self.window = window
        self.actions: list[np.ndarray] = []
        self.obs: list[np.ndarray] = []
        self.resets: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.reset_kinds: list[int] = []
        self.reset_fields: list[dict[str, np.ndarray]] = []
        self.forced: list[tuple[int, np.ndarray]] = []
        self.phases: list[np.ndarray] = []
        self.snapshot: dict[str, Any] | None = None
        self.t0 = self.t1 = 0
        self.start = window.start_tick if window.start_s is None else None
        """first tick of the window (None until a start_s window has begun)"""
        self._clock0: float | None = None
        self.cpu_first: cpu_accounting.CpuSample | None = None
        """the collector's CPUs read at the window's first tick"""

    def _in_window(self, tick: int) -> bool:
        return self.start is not None and self.start <= tick < self.start + self.window.ticks

    def before_step(self, tick: int, actions: np.ndarray) -> None:
        """Start the window at its first tick (the env's snapshot), then keep every tick's actions."""
        if self.start is None:  # a window by wall clock: starts at the first tick start_s after tick 0
            now = time.monotonic()
            if self._clock0 is None:
                self._clock0 = now
            if now - self._clock0 >= self.window.start_s:
                self.start = tick
        if tick == self.start:
            self.snapshot = self.env.snapshot()
            self.env.reset_log = []
            self.cpu_first = cpu_accounting.sample()
        if self._in_window(tick):
            self.actions.append(np.array(actions, copy=True))

    def _drain(self, tick: int) -> None:
        for rows, states, *fields in self.env.reset_log or []:
            self.resets.append((tick, rows, states))
            self.reset_kinds.append(int(bool(fields) and fields[0] is None))
            if fields and fields[0]:
                self.reset_fields.append(fields[0])
        if self.env.reset_log is not None:
            self.env.reset_log.clear()

    def forced_reset(self, tick: int, rows: np.ndarray) -> None:
        """Keep the rows the learner asked to reset at `tick`."""
        if self._in_window(tick):
            self.forced.append((tick, np.array(rows, copy=True)))

    def after_step(self, tick: int, obs_slot: dict[str, np.ndarray]) -> None:
        """Keep the tick's resets and the observations about to be published."""
        if self._in_window(tick):
            self._drain(tick)
            self.obs.append(np.array(obs_slot["actor"], copy=True))
            self.t1 = time.perf_counter_ns()  # the window's clock: from the first tick's end to the last one's
            if tick == self.start:
                self.t0 = self.t1

    def phases_recorded(self, tick: int, row: np.ndarray) -> None:
        """The tick's `collector/phases` row (ns, `PHASE_NAMES` order), once `PhaseRecorder.record` wrote it."""
        if self._in_window(tick):
            self.phases.append(np.array(row, copy=True))

    def done(self, tick: int) -> bool:
        """Whether `tick` is the window's last."""
        return self.start is not None and tick + 1 >= self.start + self.window.ticks

    def tick_done(self, tick: int, phase_row: np.ndarray) -> bool:
        """Keep the tick's phase row; at the window's last tick save it and return True (the window is over)."""
        self.phases_recorded(tick, phase_row)
        if self.done(tick):
            self.save()
            return True
        return False

    def save(self) -> None:
        """Write the window's .npz (nothing when the window never started)."""
        if self.snapshot is None or not self.actions:
            return
        self.env.reset_log = None
        n = len(self.obs)
        reset_ticks = np.array([t for t, _, _ in self.resets], dtype=np.int64)
        reset_counts = np.array([len(r) for _, r, _ in self.resets], dtype=np.int64)
        nstate = self.snapshot["state"].shape[1]
        cpu: dict[str, np.ndarray] = {}
        if self.cpu_first is not None:
            first, last = self.cpu_first, cpu_accounting.sample(self.cpu_first.cpus)
            cpu = {
                "cpu_ids": np.array(first.cpus, dtype=np.int64),
                "cpu_own_seconds": np.array([first.own_s, last.own_s]),
                "cpu_wall_seconds": np.array([first.wall_s, last.wall_s]),
            }
            if first.times is not None and last.times is not None:
                cpu["cpu_times"] = np.stack([first.times, last.times])
        np.savez(
            self.window.path,
            start_tick=self.start,
            actions=np.stack(self.actions[:n]),
            obs=np.stack(self.obs),
            reset_ticks=reset_ticks,
            reset_counts=reset_counts,
            reset_rows=np.concatenate([r for _, r, _ in self.resets]) if self.resets else np.zeros(0, np.int64),
            reset_states=np.concatenate([s for _, _, s in self.resets]) if self.resets else np.zeros((0, nstate)),
            reset_kinds=np.array(self.reset_kinds, dtype=np.int64),
            **{
                f"reset_fields/{key}": np.concatenate([f[key] for f in self.reset_fields])
                for key in (self.reset_fields[0] if self.reset_fields else ())
            },
            forced_ticks=np.array([t for t, _ in self.forced], dtype=np.int64),
            forced_rows=np.stack([r for _, r in self.forced]) if self.forced else np.zeros((0, 0), np.int64),
            in_run_seconds=(self.t1 - self.t0) / 1e9,
            phases_ns=np.stack(self.phases[:n]) if self.phases else np.zeros((0, len(PHASE_NAMES)), np.int64),
            phase_names=np.array(PHASE_NAMES),
            **{f"snapshot/{k}": v for k, v in self.snapshot.items() if k != "rng"},
            snapshot_rng=np.frombuffer(repr(self.snapshot["rng"]).encode(), dtype=np.uint8),
            **cpu,
        )
