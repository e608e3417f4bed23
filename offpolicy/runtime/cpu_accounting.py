"""Where a set of CPUs' time went over a stretch of wall clock: this process, other processes, interrupts,
the hypervisor (steal), idle.

A recorded window (`offpolicy.runtime.recording`) samples its collector's CPUs at its first and last tick,
and the same-trajectory replay (benchmark/offpolicy/trajectory_replay.py) samples the replay's CPUs around
its bare replay, so a run whose physics stepped slower than its replay can say whether something else held
its cores: another process, interrupts, or the host taking the virtual CPUs away (steal).

The counters are the kernel's per-CPU times in `/proc/stat` (cumulative, in clock ticks) and this process's
CPU time (`os.times`, every thread). Reading them is a file read and a parse of a few lines, so it stays here
rather than adding a dependency to the collector, which imports numpy only. Where `/proc/stat` cannot be
read (not Linux), a sample holds no CPU times and the shares are not computed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

CPU_TIME_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
"""the `/proc/stat` per-CPU columns read, in the kernel's order"""
SHARE_NAMES = ("own", "other", "irq", "steal", "idle")
"""`cpu_shares` keys: this process, every other process and kernel thread, hard and soft interrupts, time the
hypervisor ran something else on the virtual CPU, idle (iowait included)"""


def read_cpu_times(cpus: list[int], stat_path: str = "/proc/stat") -> np.ndarray | None:
    """Cumulative seconds per CPU of `cpus` (rows, in that order) and per `CPU_TIME_FIELDS` (columns).

    None where the file cannot be read or lacks one of `cpus`.
    """
    try:
        with open(stat_path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    ticks: dict[int, list[int]] = {}
    for line in lines:
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit():
            values = [int(v) for v in rest.split()]
            ticks[int(name[3:])] = (values + [0] * len(CPU_TIME_FIELDS))[: len(CPU_TIME_FIELDS)]
    if any(c not in ticks for c in cpus):
        return None
    return np.array([ticks[c] for c in cpus], dtype=np.float64) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds() -> float:
    """This process's CPU time so far, user and system, over all its threads."""
    t = os.times()
    return t.user + t.system


@dataclass(frozen=True)
class CpuSample:
    """One reading of `cpus`: their cumulative times (None where unreadable), this process's CPU time, the
    monotonic clock."""

    cpus: tuple[int, ...]
    times: np.ndarray | None
    own_s: float
    wall_s: float


def sample(cpus: list[int] | tuple[int, ...] | None = None) -> CpuSample:
    """Read `cpus` now (default: the CPUs this process may run on)."""
    ids = tuple(sorted(os.sched_getaffinity(0) if cpus is None else cpus))
    return CpuSample(ids, read_cpu_times(list(ids)), process_cpu_seconds(), time.monotonic())


def cpu_shares(before: np.ndarray, after: np.ndarray, own_s: float, wall_s: float) -> dict[str, float]:
    """Each `SHARE_NAMES` entry as a fraction of the CPUs' capacity over the stretch (`wall_s` x CPUs).

    `before` and `after` are `read_cpu_times` rows of the same CPUs; `own_s` is this process's CPU time over
    the stretch, all of it on these CPUs (its affinity). `other` is the user and system time left once this
    process's is taken out (never below 0: the two clocks tick apart). The shares sum to about 1, the rest
    being the counters' resolution (one clock tick, usually 10 ms, per CPU and field).
    """
    delta = (np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)).sum(axis=0)
    f = {name: float(delta[i]) for i, name in enumerate(CPU_TIME_FIELDS)}
    capacity = wall_s * np.asarray(before).shape[0]
    return {
        "own": own_s / capacity,
        "other": max(f["user"] + f["nice"] + f["system"] - own_s, 0.0) / capacity,
        "irq": (f["irq"] + f["softirq"]) / capacity,
        "steal": f["steal"] / capacity,
        "idle": (f["idle"] + f["iowait"]) / capacity,
    }


def shares_between(first: CpuSample, last: CpuSample) -> dict[str, float] | None:
    """`cpu_shares` from two samples of the same CPUs, or None where either could not read them."""
    if first.times is None or last.times is None or first.cpus != last.cpus or last.wall_s <= first.wall_s:
        return None
    return cpu_shares(first.times, last.times, last.own_s - first.own_s, last.wall_s - first.wall_s)
