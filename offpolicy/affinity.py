"""CPU affinity: which cores the learner gets and which the collector (and its pool workers) get.

`mode: auto` gives the learner the first `learner_count` CPUs available to this
process and the collector the rest (on a 2-core machine: learner [0], collector
[1]). `mode: manual` takes explicit lists, validated to be non-empty, disjoint and
available to the process; a bad list fails with one line naming the bad ids.
Affinity is applied on the cold path only (process start, pool construction).
One exception to "the collector's CPUs are the collector's": on CUDA with
`algo.compile`, the runner starts torch.compile's kernel-compile workers on the
learner's and the collector's CPUs before pinning the learner
(`offpolicy.algorithms.capture.start_compile_workers`); they compile while the
collector waits for the first compiled tick and sleep afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


class AffinityError(ValueError):
    """A one-line explanation of an invalid affinity configuration."""


@dataclass(frozen=True)
class Affinity:
    """Resolved CPU ids for each side."""

    learner_cpus: tuple[int, ...]
    """CPUs the learner process (and torch's CPU threads) runs on"""
    collector_cpus: tuple[int, ...]
    """CPUs the collector process and its BatchEnvPool workers run on (one worker per CPU)"""
    shared: bool = False
    """True only when auto found a single CPU and both sides had to share it"""


def available_cpus() -> list[int]:
    """CPUs this process may run on (cgroup/taskset aware)."""
    return sorted(os.sched_getaffinity(0))


def _fmt(ids: Iterable[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def _as_ids(name: str, value: Any, available: list[int]) -> tuple[int, ...]:
    if value is None or isinstance(value, (str, bytes)) or not isinstance(value, Sequence | Iterable):
        raise AffinityError(f"affinity.{name} must be a list of CPU ids, got {value!r}; available: {_fmt(available)}")
    ids = list(value)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise AffinityError(f"affinity.{name} must hold integer CPU ids, got {ids!r}; available: {_fmt(available)}")
    if not ids:
        raise AffinityError(f"affinity.{name} is empty; available: {_fmt(available)}")
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise AffinityError(f"affinity.{name} repeats CPU ids {_fmt(dupes)}")
    bad = [i for i in ids if i not in available]
    if bad:
        raise AffinityError(
            f"affinity.{name} CPU ids {_fmt(bad)} are not available to this process; available: {_fmt(available)}"
        )
    return tuple(ids)


def resolve_affinity(cfg: Any, available: list[int] | None = None) -> Affinity:
    """Turn the `affinity` config group (`mode`, `learner_cpus`, `collector_cpus`, `learner_count`) into CPU ids."""
    available = available_cpus() if available is None else sorted(available)
    mode = str(cfg.get("mode", "auto"))
    if mode == "auto":
        count = int(cfg.get("learner_count", 1) or 1)
        if count < 1:
            raise AffinityError(f"affinity.learner_count must be >= 1, got {count}")
        if len(available) == 1:
            return Affinity((available[0],), (available[0],), shared=True)
        if count >= len(available):
            raise AffinityError(
                f"affinity.learner_count={count} leaves no CPU for the collector; available: {_fmt(available)}"
            )
        return Affinity(tuple(available[:count]), tuple(available[count:]))
    if mode == "manual":
        learner = _as_ids("learner_cpus", cfg.get("learner_cpus"), available)
        collector = _as_ids("collector_cpus", cfg.get("collector_cpus"), available)
        overlap = sorted(set(learner) & set(collector))
        if overlap:
            raise AffinityError(f"affinity.learner_cpus and affinity.collector_cpus overlap on CPU ids {_fmt(overlap)}")
        return Affinity(learner, collector)
    raise AffinityError(f"affinity.mode must be 'auto' or 'manual', got {mode!r}")


def pin_process(cpus: Iterable[int]) -> dict[int, set[int]]:
    """Pin every thread of this process to `cpus`; return the previous masks (for `restore`)."""
    cpus = set(cpus)
    previous: dict[int, set[int]] = {}
    for tid in _thread_ids():
        try:
            previous[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):
            pass  # the thread ended meanwhile
    return previous


def restore(previous: dict[int, set[int]]) -> None:
    """Undo `pin_process` for threads that still exist (in-process runs, tests)."""
    for tid, mask in previous.items():
        try:
            os.sched_setaffinity(tid, mask)
        except (ProcessLookupError, PermissionError, OSError):
            pass


def _thread_ids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except FileNotFoundError:
        return [0]


def thread_affinities() -> dict[int, list[int]]:
    """Affinity mask of every thread of this process (the isolation test reads the collector's)."""
    out = {}
    for tid in _thread_ids():
        try:
            out[tid] = sorted(os.sched_getaffinity(tid))
        except (ProcessLookupError, OSError):
            pass
    return out


# --- sweeps: disjoint CPU blocks for jobs that share one machine -------------------------

MIN_CPUS_PER_JOB = 2
"""one learner CPU and at least one collector CPU"""


def launcher_kind(target: str | None) -> str:
    """Short name of a Hydra launcher from its `_target_`: basic, joblib, submitit_local, submitit_slurm or the target."""
    target = str(target or "")
    if target.endswith("BasicLauncher") or not target:
        return "basic"
    if "joblib" in target.lower():
        return "joblib"
    if "submitit" in target.lower():
        return "submitit_slurm" if target.endswith("SlurmLauncher") else "submitit_local"
    return target


def plan_job_blocks(kind: str, launcher_cfg: Any, available: list[int]) -> list[tuple[int, ...]] | None:
    """The disjoint CPU blocks that concurrent jobs of a sweep lease, or None when a job may use every CPU.

    joblib runs up to `hydra.launcher.n_jobs` jobs at once in worker processes of this
    machine (-1: one per CPU, joblib's convention): the available CPUs are split into
    that many blocks, each of at least MIN_CPUS_PER_JOB, or the plan fails with one line.
    submitit_local starts every job at once: blocks of `hydra.launcher.cpus_per_task`
    CPUs (all CPUs when unset); jobs beyond the blocks wait for one to free up.
    The basic launcher runs jobs one after another and Slurm gives each job its own
    cgroup, so neither needs a plan.
    """
    n_cpus = len(available)
    if kind == "joblib":
        raw = int(launcher_cfg.get("n_jobs", -1) if launcher_cfg is not None else -1)
        parallel = raw if raw > 0 else n_cpus + 1 + raw
        if parallel < 1:
            raise AffinityError(f"hydra.launcher.n_jobs={raw} leaves no job slot on {n_cpus} CPUs")
        if parallel == 1:
            return None
        if n_cpus // parallel < MIN_CPUS_PER_JOB:
            fits = max(1, n_cpus // MIN_CPUS_PER_JOB)
            raise AffinityError(
                f"hydra/launcher=joblib runs {parallel} jobs at once (hydra.launcher.n_jobs={raw}) and each needs "
                f"{MIN_CPUS_PER_JOB} CPUs (learner + collector), but only {n_cpus} are available {_fmt(available)}: "
                f"set hydra.launcher.n_jobs={fits}"
            )
        return split_blocks(available, parallel)
    if kind == "submitit_local":
        per = launcher_cfg.get("cpus_per_task") if launcher_cfg is not None else None
        per = n_cpus if per is None else int(per)
        if per < MIN_CPUS_PER_JOB and n_cpus >= MIN_CPUS_PER_JOB:
            raise AffinityError(
                f"hydra.launcher.cpus_per_task={per} is fewer than the {MIN_CPUS_PER_JOB} CPUs a job needs "
                f"(learner + collector)"
            )
        if per > n_cpus:
            raise AffinityError(
                f"hydra.launcher.cpus_per_task={per} but only {n_cpus} CPUs are available {_fmt(available)}"
            )
        return split_blocks(available, max(1, n_cpus // max(per, 1)))
    return None


def split_blocks(available: list[int], count: int) -> list[tuple[int, ...]]:
    """`available` cut into `count` contiguous blocks whose sizes differ by at most one."""
    size, extra = divmod(len(available), count)
    blocks, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        blocks.append(tuple(available[start:end]))
        start = end
    return blocks


class CpuBlockLease:
    """Holds one block of a plan for the life of a job: an exclusive `flock` on `<lock_dir>/block<i>.lock`.

    Locks are released when the lease closes or the process dies, so a crashed job
    never strands its block; jobs of the same sweep (same lock dir) never share one.
    """

    def __init__(self, blocks: list[tuple[int, ...]], lock_dir: str | os.PathLike, first: int = 0) -> None:
        self.blocks = blocks
        self.lock_dir = os.fspath(lock_dir)
        self.first = first
        self.index: int | None = None
        self.cpus: tuple[int, ...] = ()
        self._fd: int | None = None

    def acquire(self, poll_s: float = 0.2, on_wait: Any = None) -> tuple[int, ...]:
        """Block until a CPU block is free; `on_wait()` is called once if that takes a while."""
        import fcntl
        import time

        os.makedirs(self.lock_dir, exist_ok=True)
        waited = False
        while True:
            for k in range(len(self.blocks)):
                i = (self.first + k) % len(self.blocks)
                fd = os.open(os.path.join(self.lock_dir, f"block{i}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self._fd, self.index, self.cpus = fd, i, self.blocks[i]
                return self.cpus
            if not waited and on_wait is not None:
                on_wait()
            waited = True
            time.sleep(poll_s)

    def release(self) -> None:
        """Give the block back (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


class JobCpus:
    """A sweep job confined to its leased CPU block: every thread pinned there until `release`."""

    def __init__(self, lease: CpuBlockLease, previous: dict[int, set[int]]) -> None:
        self.lease = lease
        self.cpus = lease.cpus
        self._previous = previous

    def release(self) -> None:
        """Restore the process's CPUs (a joblib worker runs the next job) and free the block."""
        restore(self._previous)
        self._previous = {}
        self.lease.release()


def confine_job(
    kind: str, launcher_cfg: Any, sweep_dir: str | os.PathLike, job_num: int, affinity_cfg: Any, log: Any = None
) -> JobCpus | None:
    """Lease this job's CPU block (waiting for one if all are taken) and pin the process to it.

    Returns None when the launcher needs no plan or `affinity.mode` is manual (the user
    chose CPU ids). Within the block, `affinity.mode=auto` then splits learner and
    collector CPUs as usual, because `available_cpus()` now returns the block.
    """
    if str(affinity_cfg.get("mode", "auto")) != "auto":
        return None
    blocks = plan_job_blocks(kind, launcher_cfg, available_cpus())
    if blocks is None:
        return None
    lease = CpuBlockLease(blocks, os.path.join(os.fspath(sweep_dir), ".cpu_blocks"), first=job_num % len(blocks))

    def waiting() -> None:
        if log is not None:
            log.info("job %d waits for a free CPU block (%d blocks: %s)", job_num, len(blocks), blocks)

    cpus = lease.acquire(on_wait=waiting)
    if log is not None:
        log.info("job %d runs on CPU block %d of %d: %s", job_num, lease.index, len(blocks), _fmt(cpus))
    return JobCpus(lease, pin_process(cpus))
