"""Fault injection in the collector (`runtime.fault.collector_*`): an env step that raises or hangs at a
given tick, and a random delay before every step for the property tests.

Numpy-only, like everything the collector imports.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np


class InjectedFault(RuntimeError):
    """Raised by fault injection (runtime.fault.*)."""


class CollectorFaults:
    """The collector's fault knobs, applied at two points: around the env (`wrap_env`) and before each step."""

    def __init__(self, raise_at_tick: int = -1, hang_at_tick: int = -1, step_delay_s: float = 0.0) -> None:
        self.raise_at_tick = raise_at_tick
        """raise inside env.step at this tick (-1: never)"""
        self.hang_at_tick = hang_at_tick
        """hang inside env.step at this tick (-1: never)"""
        self.step_delay_s = step_delay_s
        """random sleep up to this long before each step (0: none)"""
        self._rng = np.random.default_rng(os.getpid())

    def wrap_env(self, env: Any) -> Any:
        """The env itself, or wrapped so that its step raises or hangs at the configured tick."""
        if self.raise_at_tick >= 0 or self.hang_at_tick >= 0:
            return FaultInjectingEnv(env, self.raise_at_tick, self.hang_at_tick)
        return env

    def before_step(self) -> None:
        """Sleep a random while before a step, where a step delay is configured."""
        if self.step_delay_s > 0:
            time.sleep(self._rng.uniform(0.0, self.step_delay_s))


class FaultInjectingEnv:
    """Wraps the env so that its `step` raises or hangs at a given tick (runtime.fault.*)."""

    def __init__(self, env: Any, raise_at_tick: int, hang_at_tick: int) -> None:
        self.env = env
        self.spec = env.spec
        self.pool = getattr(env, "pool", None)
        self.raise_at_tick = raise_at_tick
        self.hang_at_tick = hang_at_tick
        self.steps = 0

    def reset(self) -> Any:
        return self.env.reset()

    def reset_rows(self, rows: Any) -> Any:
        return self.env.reset_rows(rows)

    def truncate_after(self, rows: Any, steps: Any) -> None:
        self.env.truncate_after(rows, steps)

    def step(self, actions: Any) -> Any:
        tick, self.steps = self.steps, self.steps + 1
        if tick == self.raise_at_tick:
            raise InjectedFault(f"injected fault in env.step (runtime.fault.collector_raise_at_tick={tick})")
        if tick == self.hang_at_tick:
            while True:  # a physics step that never returns
                time.sleep(3600)
        return self.env.step(actions)

    def close(self) -> None:
        self.env.close()
