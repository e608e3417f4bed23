"""Shared-memory slots between the learner and the collector, and how each side waits.

One POSIX shared-memory segment holds everything the two processes exchange,
allocated once at startup and never resized:

- a control block of int64 counters, one per 64-byte cache line (tick ids,
  ingress produced/consumed, stop flag, collector state, counters for metrics);
- the obs slot: every obs key of the current tick plus the reset mask (rows whose
  observation starts a new episode; the learner resets exploration state there);
- the action slot: actions in env units plus the policy_version that made them, and
  the rows to reset after this tick's step (snapshot evaluation);
- the ingress ring (see `offpolicy.runtime.ingress`).

Only the parent (learner) creates and unlinks the segment. It unlinks the name
as soon as the collector has mapped it, so from then on no crash of either
side, SIGKILL included, can leave a segment behind in /dev/shm.

Ordering: a writer fills the data, then stores the counter; a reader loads the
counter, then reads the data. x86-64 keeps stores in order and loads in order
(TSO), which is all this protocol needs; numpy stores of aligned int64 are single
instructions. A weakly ordered CPU (aarch64) would need explicit fences here.

Waiting is a short spin on the counter, then a blocking futex wait on the same
counter word (its low 32 bits), re-armed every `poll_s` so the waiter can check
the stop flag, the peer's liveness and its deadline. Every publish issues a
FUTEX_WAKE: skipping it when nobody sleeps would need a store-load fence that
Python cannot issue, and a missed wake would cost a whole `poll_s`.

A blocking wake-up costs many spin round trips (a virtual machine must interrupt
a halted vCPU), so the default spins for `DEFAULT_SPIN_US` before it blocks: long
enough to catch the answer of a short inference tick or a short step without a
syscall, short enough that a side waiting through a physics step of many
milliseconds hands its core back at once. The round trips that chose it:
docs/decisions.md, "Spin 200 us, then block" (`benchmark/offpolicy/benchmark_runtime.py`).
"""

from __future__ import annotations

import ctypes
import os
import platform
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from envs.tracking import MAX_TRACKING_COLUMNS

DEFAULT_SPIN_US = 200.0
"""how long a waiter spins before it blocks (see above)"""
DEFAULT_POLL_S = 0.02
"""longest single blocking wait before the waiter re-checks stop flag, peer and deadline"""
SEGMENT_PREFIX = "offpolicy_"
"""every segment this runtime creates is /dev/shm/offpolicy_<pid>_<random>"""

_ALIGN = 64

# --- control block: one int64 per cache line --------------------------------
OBS_TICK = 0
"""last tick whose observations are in the obs slot (-1: none yet)"""
ACTION_TICK = 1
"""last tick whose actions are in the action slot (-1: none yet)"""
PRODUCED = 2
"""transitions the collector has written into the ingress ring"""
CONSUMED = 3
"""transitions the learner has released from the ingress ring"""
STOP = 4
"""set to 1 by the parent: the collector leaves its loop at the next check"""
COLLECTOR_STATE = 5
"""see `CollectorState`"""
INGRESS_FULL_WAITS = 6
"""times the collector found the ingress ring full and had to wait"""
ACTION_POLICY_VERSION = 7
"""policy_version stamped on the actions in the action slot"""
COLLECTOR_HEARTBEAT_NS = 8
"""monotonic clock of the collector's last completed step (diagnostics)"""
PHYSICS_FAILURES = 9
"""physics failures the collector has seen so far (all envs, all ticks)"""
RESET_REQUEST_TICK = 10
"""tick whose action slot carries reset requests (`action/reset_request`); -1: none yet"""
COLLECTOR_PHASE_TICKS = 11
"""ticks whose phase durations the collector wrote into `collector/phases`"""

PHASE_NAMES = (
    "cycle",
    "wait",
    "physics",
    "task",
    "resets",
    "eval_resets",
    "publish",
    "critical",
    "ingress_wait",
    "ingress_write",
)
"""per-tick phases of the collector (offpolicy.runtime.collector_phases.PhaseRecorder), in nanoseconds"""
PHASE_RING = 1024
"""rows of the collector's phase ring (tick % PHASE_RING)"""
_NUM_COUNTERS = 16


class CollectorState:
    """Values of the COLLECTOR_STATE counter."""

    STARTING = 0
    RUNNING = 1
    FAILED = 2
    EXITED = 3


# --- futex --------------------------------------------------------------------
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1  # shared (non-private): the word lives in a MAP_SHARED segment
_INT_MAX = 2**31 - 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True) if _SYS_FUTEX is not None else None
if _libc is not None:
    _syscall = _libc.syscall
    _syscall.restype = ctypes.c_long


def futex_available() -> bool:
    """True on Linux x86-64/aarch64 where the blocking wait is a futex."""
    return _libc is not None and os.uname().sysname == "Linux"


def futex_wake(addr: int) -> None:
    """Wake every process blocked in `futex_wait` on the 32-bit word at `addr`."""
    if _libc is not None:
        _syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAKE, _INT_MAX, None, None, 0)


def futex_wait(addr: int, expected: int, timeout_s: float) -> None:
    """Block while the 32-bit word at `addr` equals `expected`, at most `timeout_s`.

    Returns on a wake, a timeout, a signal or a mismatch; callers re-check.
    """
    if _libc is None:
        time.sleep(min(timeout_s, 1e-4))
        return
    sec = int(timeout_s)
    ts = _Timespec(sec, int((timeout_s - sec) * 1e9))
    word = ctypes.c_int32(expected & 0xFFFFFFFF).value  # the low half of the little-endian int64 counter
    _syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAIT, word, ctypes.byref(ts), None, 0)


# --- layout -------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    """One array in the segment."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


class Layout:
    """Byte layout of the segment: named fields at 64-byte aligned offsets (picklable)."""

    def __init__(self) -> None:
        self.fields: dict[str, Field] = {}
        self.size = 0
        self.add("control", (_NUM_COUNTERS, _ALIGN // 8), "int64")

    def add(self, name: str, shape: tuple[int, ...], dtype: str) -> Field:
        if name in self.fields:
            raise ValueError(f"duplicate slot field {name!r}")
        f = Field(name, tuple(int(s) for s in shape), np.dtype(dtype).str, self.size)
        self.fields[name] = f
        self.size = -(-(f.offset + f.nbytes) // _ALIGN) * _ALIGN
        return f

    @staticmethod
    def for_spec(num_envs: int, obs_dims: dict[str, int], action_dim: int, ring_slots: int) -> Layout:
        """The layout every run uses: obs slot, action slot and `ring_slots` ingress slots."""
        lay = Layout()
        n = num_envs
        for k, d in obs_dims.items():
            lay.add(f"obs/{k}", (n, d), "float32")
        lay.add("obs/reset_mask", (n,), "bool")
        lay.add("collector/phases", (PHASE_RING, len(PHASE_NAMES)), "int64")
        lay.add("action/value", (n, action_dim), "float32")
        # rows the collector resets right after this tick's step (snapshot evaluation starts)
        lay.add("action/reset_request", (n,), "bool")
        for i in range(ring_slots):
            p = f"ring{i}/"
            lay.add(p + "header", (8,), "int64")
            for k, d in obs_dims.items():
                lay.add(f"{p}obs/{k}", (n, d), "float32")
                lay.add(f"{p}next_obs/{k}", (n, d), "float32")
            lay.add(p + "reward", (n,), "float32")
            lay.add(p + "terminated", (n,), "bool")
            lay.add(p + "truncated", (n,), "bool")
            lay.add(p + "episode_return", (n,), "float32")
            lay.add(p + "episode_length", (n,), "int32")
            # a tracking task's episode sums (`envs.tracking`; its first columns, valid where the row is done)
            lay.add(p + "episode_tracking", (n, MAX_TRACKING_COLUMNS), "float32")
            # rows whose physics failed this step (valid where the header counts failures)
            lay.add(p + "physics_failed", (n,), "bool")
        return lay


class SharedSegment:
    """The mapped segment with numpy views of every field; `create` only in the parent."""

    def __init__(self, shm: shared_memory.SharedMemory, layout: Layout, owner: bool) -> None:
        self.shm = shm
        self.layout = layout
        self.owner = owner
        self.name = shm.name
        self._unlinked = False
        self.arrays: dict[str, np.ndarray] = {
            f.name: np.ndarray(f.shape, dtype=np.dtype(f.dtype), buffer=shm.buf, offset=f.offset)
            for f in layout.fields.values()
        }
        self.control = self.arrays["control"][:, 0]
        """one int64 counter per cache line, indexed by the constants above"""
        self._base = self.arrays["control"].ctypes.data

    @classmethod
    def create(cls, layout: Layout) -> SharedSegment:
        """Allocate and zero a new segment (parent only)."""
        name = f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        shm = shared_memory.SharedMemory(name=name, create=True, size=max(layout.size, 1))
        seg = cls(shm, layout, owner=True)
        seg.arrays["control"][:] = 0
        seg.control[OBS_TICK] = -1
        seg.control[ACTION_TICK] = -1
        seg.control[RESET_REQUEST_TICK] = -1
        return seg

    @classmethod
    def attach(cls, name: str, layout: Layout) -> SharedSegment:
        """Map an existing segment (collector side; it never unlinks)."""
        return cls(shared_memory.SharedMemory(name=name, create=False), layout, owner=False)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def counter_addr(self, index: int) -> int:
        """Address of counter `index` (its low 32 bits are the futex word)."""
        return self._base + index * _ALIGN

    def publish(self, index: int, value: int) -> None:
        """Store counter `index` (after the data it guards) and wake its waiters."""
        self.control[index] = value
        futex_wake(self._base + index * _ALIGN)

    def wake_all(self) -> None:
        """Wake every waiter on every counter (stop and failure paths)."""
        for i in range(_NUM_COUNTERS):
            futex_wake(self._base + i * _ALIGN)

    def unlink(self) -> None:
        """Remove the name from /dev/shm (parent only; existing mappings stay valid)."""
        if not self.owner:
            raise RuntimeError("only the parent unlinks the shared segment")
        if not self._unlinked:
            self._unlinked = True
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Drop the mapping; views still held elsewhere keep it alive until they go."""
        self.arrays.clear()
        self.control = None
        try:
            self.shm.close()
        except BufferError:
            pass  # a numpy/torch view is still alive; the mapping goes with the process


class WaitAborted(Exception):
    """Raised by a `check` callback to abandon a wait (stop requested, peer gone, deadline)."""


class Waiter:
    """Spin-then-block wait for a counter to reach a target."""

    def __init__(self, segment: SharedSegment, spin_us: float = DEFAULT_SPIN_US, poll_s: float = DEFAULT_POLL_S):
        self.segment = segment
        self.spin_ns = int(spin_us * 1000)
        self.poll_s = float(poll_s)
        self.blocked_waits = 0
        """waits that ran past the spin and blocked (metrics)"""

    def wait_at_least(
        self,
        index: int,
        target: int,
        check: Callable[[], None],
        awake: Callable[[], None] | None = None,
        awake_every_us: float = 200.0,
    ) -> int:
        """Return the counter once it is >= `target`; `check()` runs before each blocking wait and may raise.

        With `awake`, the wait never blocks: it spins the whole time, calling `awake()` every
        `awake_every_us` and `check()` every `poll_s` (the learner keeps its CPU and its device
        from idling into low-power states before the next inference tick).
        """
        control = self.segment.control
        value = int(control[index])
        if value >= target:
            return value
        clock = time.perf_counter_ns
        if awake is not None:
            return self._spin_awake(index, target, check, awake, int(awake_every_us * 1000))
        spin_until = clock() + self.spin_ns
        while clock() < spin_until:
            for _ in range(32):
                value = int(control[index])
                if value >= target:
                    return value
        self.blocked_waits += 1
        addr = self.segment.counter_addr(index)
        while True:
            value = int(control[index])
            if value >= target:
                return value
            check()
            futex_wait(addr, value, self.poll_s)

    def _spin_awake(
        self, index: int, target: int, check: Callable[[], None], awake: Callable[[], None], every_ns: int
    ) -> int:
        control = self.segment.control
        clock = time.perf_counter_ns
        poll_ns = int(self.poll_s * 1e9)
        now = clock()
        next_awake, next_check = now, now + poll_ns
        while True:
            for _ in range(32):
                value = int(control[index])
                if value >= target:
                    return value
            now = clock()
            if now >= next_awake:
                awake()
                next_awake = now + every_ns
            if now >= next_check:
                check()
                next_check = now + poll_ns
