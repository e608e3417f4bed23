"""A schedule of velocity commands for evaluating a joystick task: `commands=[[vx, vy, yaw_rate, seconds], ...]`.

`parse_schedule` checks the config value (one line naming the bad entry); `apply_schedule` rounds each
segment's seconds to control steps and hands the schedule to the env (`JoystickEnv.set_commands`), which
holds each command for its steps from every episode's start, on every row, and draws none while it is set.
`SegmentTracking` sums the per-step tracking errors (`info["step_tracking"]`) over each segment's steps, and
`scheduled_rollout` runs the episodes as `offpolicy.runtime.snapshot_eval.rollout` does while it sums them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from offpolicy.schemas import ConfigError, format_value

KEY = "commands"


@dataclass(frozen=True)
class Segment:
    """One command of a schedule and how long it is held."""

    command: tuple[float, float, float]
    """(vx m/s, vy m/s, yaw rate rad/s) in the body frame"""
    seconds: float


def _bad(value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{KEY}={format_value(value)}: {allowed}")


def parse_schedule(value: Any) -> tuple[Segment, ...] | None:
    """The schedule of the config value (None: no schedule), or a one-line `ConfigError` naming the bad entry."""
    if value is None:
        return None
    form = "must be a list of [vx, vy, yaw_rate, seconds] entries"
    if not isinstance(value, list | tuple) or not value:
        raise _bad(value, form)
    segments = []
    for i, entry in enumerate(value):
        if not isinstance(entry, list | tuple) or len(entry) != 4:
            raise _bad(entry, f"entry {i} must be [vx, vy, yaw_rate, seconds] (4 numbers)")
        numbers = [_finite(x) for x in entry]
        if any(x is None for x in numbers):
            raise _bad(entry, f"entry {i} must be 4 finite numbers [vx, vy, yaw_rate, seconds]")
        if numbers[3] <= 0:
            raise _bad(entry, f"entry {i}: seconds must be > 0")
        segments.append(Segment((numbers[0], numbers[1], numbers[2]), numbers[3]))
    return tuple(segments)


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(float(x)):
        return None
    return float(x)


def segment_steps(segments: tuple[Segment, ...], dt: float) -> np.ndarray:
    """Control steps of each segment, its seconds rounded to steps of `dt`; a segment shorter than half a step
    is refused (one line)."""
    steps = np.array([round(s.seconds / dt) for s in segments], dtype=np.int64)
    for s, n in zip(segments, steps, strict=True):
        if n < 1:
            raise _bad([*s.command, s.seconds], f"seconds must be at least half a control step ({dt / 2:g} s)")
    return steps


def schedule_steps_total(env_name: str, options: dict[str, Any], segments: tuple[Segment, ...]) -> int:
    """Control steps of the whole schedule on task `env_name` (its control step from its model)."""
    from envs.registry import task_class

    task = task_class(env_name)(**options)
    dt = float(task.build_model().opt.timestep) * task.frame_skip
    return int(segment_steps(segments, dt).sum())


def apply_schedule(env: Any, env_name: str, segments: tuple[Segment, ...]) -> np.ndarray:
    """Set the schedule on `env`; returns each segment's steps. A task without commands is refused (one line)."""
    if not hasattr(env, "set_commands"):
        import envs

        joystick = [n for n in envs.registry_names() if "joystick" in n]
        value = [[*s.command, s.seconds] for s in segments]
        raise _bad(value, f"task {env_name} takes no commands; valid: a joystick task ({', '.join(joystick)})")
    steps = segment_steps(segments, env.spec.dt)
    env.set_commands(np.array([s.command for s in segments]), steps)
    return steps


class SegmentTracking:
    """Sums of the per-step tracking errors over each segment's steps (every row, while its episode lasts)."""

    def __init__(self, segments: tuple[Segment, ...], steps: np.ndarray, terms: tuple[str, ...]) -> None:
        self.segments, self.terms = segments, terms
        self.ends = np.cumsum(steps)
        self.starts = self.ends - steps
        self.sums = np.zeros((len(segments), len(terms)))
        self.counts = np.zeros(len(segments), dtype=np.int64)

    def add(self, episode_step: int, values: np.ndarray, rows: np.ndarray) -> None:
        """The errors (rows, terms) of episode step `episode_step` (0: the first) of the rows marked `rows`."""
        segment = min(int(np.searchsorted(self.ends, episode_step, side="right")), len(self.ends) - 1)
        self.sums[segment] += values[rows].sum(axis=0)
        self.counts[segment] += int(np.count_nonzero(rows))

    def on_step(self, episode_step: int, state: Any, rows: np.ndarray) -> None:
        """`snapshot_eval.rollout`'s step hook: the step's tracking errors (`info["step_tracking"]`) of the rows
        still in their first episode."""
        self.add(episode_step, state.info["step_tracking"], rows)

    def summary(self) -> list[dict[str, Any]]:
        """Per segment: its command, seconds, [start, end) steps, the row-steps counted and each term's mean."""
        out = []
        for i, s in enumerate(self.segments):
            n = int(self.counts[i])
            means = self.sums[i] / n if n else np.full(len(self.terms), math.nan)
            out.append(
                {
                    "command": list(s.command),
                    "seconds": s.seconds,
                    "start_step": int(self.starts[i]),
                    "end_step": int(self.ends[i]),
                    "row_steps": n,
                    **{t: float(m) for t, m in zip(self.terms, means, strict=True)},
                }
            )
        return out
