"""Typed task options: each task declares its options' types, bounds and defaults; its constructor checks overrides.

A task lists its options next to each other, one typed spec each (`Real`, `Integer`,
`Flag`, `Interval`) holding the default and what values are allowed. `parse_options`
checks a task's overrides against them before anything is built, so a bad option is
one line (`OptionError`: `<option>=<value>: <what is allowed>`) instead of a
traceback from inside the physics loop, and the task only ever sees values of the
declared type (floats as floats, ranges as tuples).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class OptionError(ValueError):
    """A task option its task cannot take; `option`, `value` and `allowed` say which and what is allowed."""

    def __init__(self, option: str, value: Any, allowed: str) -> None:
        self.option = option
        self.value = value
        self.allowed = allowed
        super().__init__(f"{option}={show(value)}: {allowed}")


def show(value: Any) -> str:
    """A value as it is written on the command line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, str) and not value:
        return "''"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_float(value: Any) -> float:
    """`value` as a float; NaN for anything but a number, inf for an integer too large for a float."""
    if not _is_number(value):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class Real:
    """A finite number (an integer is taken as one), at least `ge` where given."""

    default: float
    ge: float | None = None
    """the value must be at least this"""

    def allowed(self) -> str:
        """What the option takes, in words."""
        return "must be a finite number" + (f" >= {_number(self.ge)}" if self.ge is not None else "")

    def parse(self, name: str, value: Any) -> float:
        """`value` as a float, or an `OptionError`."""
        x = _as_float(value)
        if not math.isfinite(x) or (self.ge is not None and x < self.ge):
            raise OptionError(name, value, self.allowed())
        return x


@dataclass(frozen=True)
class Integer:
    """A whole number (an integral float such as 5.0 is taken as one), greater than `gt` where given."""

    default: int
    gt: int | None = None
    """the value must be greater than this"""

    def allowed(self) -> str:
        """What the option takes, in words."""
        return "must be an integer" + (f" > {self.gt}" if self.gt is not None else "")

    def parse(self, name: str, value: Any) -> int:
        """`value` as an int, or an `OptionError`."""
        integral = _is_number(value) and (isinstance(value, int) or (math.isfinite(value) and value.is_integer()))
        if not integral or (self.gt is not None and value <= self.gt):
            raise OptionError(name, value, self.allowed())
        return int(value)


@dataclass(frozen=True)
class Flag:
    """true or false (no other value stands in for one)."""

    default: bool

    def allowed(self) -> str:
        """What the option takes, in words."""
        return "must be true or false"

    def parse(self, name: str, value: Any) -> bool:
        """`value` itself, or an `OptionError`."""
        if not isinstance(value, bool):
            raise OptionError(name, value, self.allowed())
        return value


@dataclass(frozen=True)
class Interval:
    """A range (low, high) of two numbers with low < high; either end may be infinite, neither NaN.

    Stricter ranges say so: `finite` (both ends finite), `ge` or `gt` (a bound on both ends), `closed`
    (low == high allowed: a range that always draws the same value).
    """

    low: float
    high: float
    finite: bool = False
    """both ends must be finite"""
    ge: float | None = None
    """both ends must be at least this"""
    gt: float | None = None
    """both ends must be greater than this"""
    closed: bool = False
    """low may equal high"""

    @property
    def default(self) -> tuple[float, float]:
        """The declared range as the task reads it."""
        return (self.low, self.high)

    def allowed(self) -> str:
        """What the option takes, in words."""
        order = "<=" if self.closed else "<"
        if not (self.finite or self.closed or self.ge is not None or self.gt is not None):
            return "must be two numbers [low, high] with low < high (either may be inf or -inf)"
        bound = f"{_number(self.ge)} <= " if self.ge is not None else ""
        bound = f"{_number(self.gt)} < " if self.gt is not None else bound
        kind = "finite numbers" if self.finite else "numbers"
        return f"must be two {kind} [low, high] with {bound}low {order} high"

    def parse(self, name: str, value: Any) -> tuple[float, float]:
        """`value` as a (low, high) tuple of floats, or an `OptionError`."""
        low, high = (_as_float(v) for v in value) if isinstance(value, list | tuple) and len(value) == 2 else (0, 0)
        ordered = low <= high if self.closed else low < high  # also false where either end is NaN (not a number)
        finite = not self.finite or (math.isfinite(low) and math.isfinite(high))
        above = (self.ge is None or low >= self.ge) and (self.gt is None or low > self.gt)
        if not (ordered and finite and above) or not isinstance(value, list | tuple) or len(value) != 2:
            raise OptionError(name, value, self.allowed())
        return (low, high)


Option = Real | Integer | Flag | Interval
"""the spec of one task option"""


def parse_options(task: str, specs: Mapping[str, Option], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of `specs` at its default or override, each checked; `OptionError` at the first bad one.

    Unknown names are refused first (in sorted order), with the valid names listed.
    """
    for name in sorted(set(overrides) - set(specs)):
        raise OptionError(name, overrides[name], f"unknown option of task {task}; valid: {', '.join(specs)}")
    return {
        name: spec.parse(name, overrides[name]) if name in overrides else spec.default for name, spec in specs.items()
    }


__all__ = ["Flag", "Integer", "Interval", "Option", "OptionError", "Real", "parse_options"]
