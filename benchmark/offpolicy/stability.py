"""How well a run holds its target once reached: the stability columns of the results tables.

Given the snapshot series of one run (x: seconds or env steps; y: each frozen snapshot's median return) and a
target, the figures are taken over the snapshots *after* the first one at or above the target:

- `first_reached`: x of the first snapshot at or above the target (None: never reached);
- `held_fraction`: the fraction of the later snapshots at or above the target;
- `held_fraction_95`: the fraction at or above 0.95 x target;
- `worst_after`: the lowest median among them;
- `snapshots_after`: how many there are (the fractions and the worst are None when there are none).
"""

from __future__ import annotations

from collections.abc import Sequence


def stability(x: Sequence[float], medians: Sequence[float], target: float) -> dict:
    """The stability figures of one run's snapshot series (see the module docstring)."""
    if len(x) != len(medians):
        raise ValueError(f"{len(x)} snapshot positions but {len(medians)} medians")
    order = sorted(range(len(x)), key=lambda i: x[i])
    xs, ys = [x[i] for i in order], [float(medians[i]) for i in order]
    first = next((i for i, y in enumerate(ys) if y >= target), None)
    out = {"target": target, "first_reached": None if first is None else xs[first], "snapshots_after": 0,
           "held_fraction": None, "held_fraction_95": None, "worst_after": None}  # fmt: skip
    if first is None:
        return out
    after = ys[first + 1 :]
    out["snapshots_after"] = len(after)
    if after:
        out["held_fraction"] = sum(y >= target for y in after) / len(after)
        out["held_fraction_95"] = sum(y >= 0.95 * target for y in after) / len(after)
        out["worst_after"] = min(after)
    return out
