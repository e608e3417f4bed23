"""The collector process: one `NpEnv` stepping physics on its own CPUs, talking only through shared memory.

Started with the `spawn` context by `offpolicy.runtime.collector_process.CollectorProcess`. It pins
itself to the collector CPUs, caps OMP/MKL/OpenBLAS at one thread, builds the
`NpEnv` with the same CPUs for the pool workers, and never imports torch (so it
can never create a CUDA context): this module and everything it imports are
numpy-only. The handshake reports the modules it loaded and every thread's
affinity so tests can check both.

Handshake over a pipe (cold path), then the tick loop over shared memory:

    collector -> parent: ("spec", report)        env built, spec + isolation report
    parent -> collector: ("attach", name, layout) segment created by the parent
    collector -> parent: ("attached",)            parent may now unlink the name
    ... tick loop ...
    collector -> parent: ("error", failure)  or  ("bye", report)

One tick (see docs/design.md, `TickLoop`): wait for ACTION_TICK=t; step physics; write
obs_{t+1} and the reset mask into the obs slot (resetting first the rows the learner asked
to reset with tick t's actions: a snapshot evaluation starts) and publish OBS_TICK=t+1;
then, while the learner runs its inference, finish step t's deferred rewards and write
transition t into the next free ingress slot (block while the ring is full); loop.

The loop's collaborators live in their own modules and are called at a few named points:
metering (`offpolicy.runtime.collector_phases`: each tick's phase durations into a shared
ring, and with `runtime.trace` their intervals for the timeline's collector track),
recording (`offpolicy.runtime.recording`: a window of ticks for a same-trajectory replay)
and fault injection (`offpolicy.runtime.collector_faults`: `runtime.fault.collector_*`).
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envs.core import NpEnv
from offpolicy.affinity import thread_affinities
from offpolicy.runtime.collector_faults import CollectorFaults
from offpolicy.runtime.collector_phases import PhaseRecorder, TickTimes
from offpolicy.runtime.ingress import (
    HEADER_NUM_DONE,
    HEADER_PHYSICS_FAILURES,
    HEADER_POLICY_VERSION,
    HEADER_TICK,
    IngressRing,
)
from offpolicy.runtime.recording import NoRecording, RecordWindow, recorder_for
from offpolicy.runtime.slots import (
    ACTION_POLICY_VERSION,
    ACTION_TICK,
    COLLECTOR_HEARTBEAT_NS,
    COLLECTOR_STATE,
    CONSUMED,
    OBS_TICK,
    PHYSICS_FAILURES,
    RESET_REQUEST_TICK,
    STOP,
    CollectorState,
    SharedSegment,
    Waiter,
)

THREAD_CAP_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
"""environment variables capped to 1 in the collector (set before its interpreter starts)"""
MUJOCO_LOG = "MUJOCO_LOG.TXT"
"""MuJoCo's warning log (by default in the working directory)"""
_MUJOCO_LOG_PATH_MAX = 1023
"""longest log path MuJoCo keeps (it cuts longer ones)"""


def point_mujoco_log_at(directory: str) -> str | None:
    """Send MuJoCo's warning log to `<directory>/MUJOCO_LOG.TXT` without changing the working directory.

    Acts only where this process loaded MuJoCo (an env built on it; nothing is imported here). Returns
    the log file it replaced, for `restore_mujoco_log`, or None when it changed nothing.
    """
    mujoco = sys.modules.get("mujoco")
    path = os.path.join(os.path.abspath(directory), MUJOCO_LOG)
    if mujoco is None or len(path) > _MUJOCO_LOG_PATH_MAX:
        return None
    config = mujoco.MjLogConfig.get()
    previous = config.logfile
    config.logfile = path
    config.set()
    return previous


def restore_mujoco_log(previous: str | None) -> None:
    """Undo `point_mujoco_log_at` (its return value)."""
    mujoco = sys.modules.get("mujoco")
    if mujoco is not None and previous is not None:
        config = mujoco.MjLogConfig.get()
        config.logfile = previous
        config.set()


@dataclass(frozen=True)
class EnvFactory:
    """Picklable recipe for the collector's env: `module:function` plus keyword arguments.

    The collector calls it as `fn(**kwargs, cpu_ids=collector_cpus, nthread=len(collector_cpus))`.
    """

    target: str = "envs:make"
    """import path `module:function` of the factory"""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """keyword arguments (name, num_envs, seed, task overrides)"""

    def build(self, cpu_ids: tuple[int, ...]) -> Any:
        module, _, fn = self.target.partition(":")
        factory = getattr(importlib.import_module(module), fn)
        return factory(**self.kwargs, cpu_ids=list(cpu_ids), nthread=len(cpu_ids))


@dataclass(frozen=True)
class CollectorConfig:
    """Everything the collector needs, sent through spawn's pickle."""

    env_factory: EnvFactory
    collector_cpus: tuple[int, ...]
    num_ticks: int
    """ticks to run; the collector stops after publishing actions of the last one are consumed"""
    parent_pid: int
    spin_us: float
    poll_s: float
    raise_at_tick: int = -1
    """fault injection (`CollectorFaults`): raise inside env.step at this tick (-1: never)"""
    hang_at_tick: int = -1
    """fault injection (`CollectorFaults`): hang inside env.step at this tick (-1: never)"""
    step_delay_s: float = 0.0
    """test hook (`CollectorFaults`): random sleep up to this long before each step (property tests)"""
    trace_max_ticks: int = 0
    """keep this many ticks of phase intervals for the timeline's collector track (0: none)"""
    record: RecordWindow | None = None
    """record a window of ticks for a same-trajectory replay (benchmark/offpolicy/trajectory_replay.py)"""

    work_dir: str | None = None
    """the run dir (absolute): MuJoCo's MUJOCO_LOG.TXT lands there (the working directory stays as it is)"""
    stagger_rows: int = 0
    """`env.stagger_starts`: the first episodes of rows 0..stagger_rows-1 (the training rows) end after lengths
    drawn uniformly from 1 to the time limit (0: every row's first episode runs its full length)"""
    stagger_seed: int = 0
    """seeds those lengths (the run's seed)"""


def isolation_report(env: Any) -> dict[str, Any]:
    """What the tests check about this process: loaded modules, thread affinities, pool workers."""
    pool = getattr(env, "pool", None)
    worker_cpu_ids = list(pool.worker_cpu_ids()) if pool is not None and hasattr(pool, "worker_cpu_ids") else None
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        maps = ""
    return {
        "pid": os.getpid(),
        "modules": sorted(sys.modules),
        "process_cpus": sorted(os.sched_getaffinity(0)),
        "thread_cpus": thread_affinities(),
        "worker_cpu_ids": worker_cpu_ids,
        "libcuda_mapped": "libcuda" in maps,
        "thread_caps": {v: os.environ.get(v) for v in THREAD_CAP_VARS},
    }


class _Stop(Exception):
    """The parent asked us to stop, or went away."""


def collector_main(conn: Any, cfg: CollectorConfig) -> None:
    """Entry point of the spawned collector process."""
    _isolate(cfg)
    session = _Session()
    try:
        _serve(conn, cfg, session)
    except _Stop:
        try:
            report = {"ticks": session.tick, "stopped": True, **isolation_report(session.env), "trace": session.trace}
            conn.send(("bye", report))
        except (OSError, EOFError):
            pass
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        _report_failure(conn, session, exc)
        os._exit(1)
    finally:
        session.close()


def _isolate(cfg: CollectorConfig) -> None:
    """Signals, thread caps and CPU affinity of the collector process, before anything is built."""
    # The parent owns shutdown: a terminal's SIGINT goes to the whole process group,
    # and the collector must not die before the parent has stopped it in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Likewise SIGTERM, which Slurm and `timeout` send to every process of the job: the parent stops the
    # loop between ticks, checkpoints and then stops this process (SIGKILL still ends it at once).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # On a hang the parent sends SIGUSR1 before SIGKILL, so the stack is printed.
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    for var in THREAD_CAP_VARS:
        os.environ[var] = "1"
    os.sched_setaffinity(0, cfg.collector_cpus)


@dataclass
class _Session:
    """What the collector process holds: the env, the segment and the tick loop, once each exists."""

    env: Any = None
    segment: SharedSegment | None = None
    loop: TickLoop | None = None

    @property
    def tick(self) -> int:
        """The tick the loop is in (-1 before the first)."""
        return -1 if self.loop is None else self.loop.tick

    @property
    def trace(self) -> list[tuple[str, int, int, int]]:
        """The phase intervals of the traced ticks, sent with the goodbye."""
        return [] if self.loop is None else self.loop.trace

    def close(self) -> None:
        """Close the env and unmap the segment."""
        if self.env is not None:
            self.env.close()
        if self.segment is not None:
            self.segment.close()


def _serve(conn: Any, cfg: CollectorConfig, session: _Session) -> None:
    """Build the env, run the handshake and the tick loop, say goodbye."""
    session.env = cfg.env_factory.build(cfg.collector_cpus)
    if cfg.stagger_rows:
        check_can_stagger(session.env)
    if cfg.work_dir is not None:
        point_mujoco_log_at(cfg.work_dir)
    faults = CollectorFaults(cfg.raise_at_tick, cfg.hang_at_tick, cfg.step_delay_s)
    env = session.env = faults.wrap_env(session.env)
    conn.send(("spec", {"spec": env.spec, **isolation_report(env)}))
    msg = conn.recv()
    if msg[0] != "attach":
        return
    _, name, layout, ring_slots = msg
    session.segment = SharedSegment.attach(name, layout)
    conn.send(("attached",))
    session.loop = TickLoop(env, session.segment, ring_slots, cfg, faults)
    ticks = session.loop.run()
    conn.send(("bye", {"ticks": ticks, **isolation_report(env), "trace": session.trace}))


STAGGER_STREAM = 0x57A6
"""the staggered lengths' generator is seeded with (run seed, this): apart from every other draw of the run"""


def check_can_stagger(env: Any) -> None:
    """Refuse `env.stagger_starts` on an env that cannot shorten a running episode (no `truncate_after` of its
    own), and on one without a time limit to draw the lengths under, before the first tick."""
    own = getattr(type(env), "truncate_after", NpEnv.truncate_after) is not NpEnv.truncate_after
    if not own or not env.spec.max_episode_steps:
        name = getattr(env.spec, "name", "?")
        lacks = "truncate_after" if not own else "a time limit (spec.max_episode_steps)"
        raise ValueError(
            f"env.stagger_starts: env {name!r} ({type(env).__name__}) cannot shorten its first episodes: it lacks "
            f"{lacks}; leave env.stagger_starts false for this env"
        )


def staggered_lengths(rows: int, max_episode_steps: int, seed: int) -> np.ndarray:
    """The first episodes' lengths of `rows` staggered rows: uniform over 1..max_episode_steps, from the run's seed
    (a stream of its own: the env's resets draw exactly what they draw without staggering)."""
    return np.random.default_rng([seed, STAGGER_STREAM]).integers(1, max_episode_steps + 1, size=rows)


def _report_failure(conn: Any, session: _Session, exc: BaseException) -> None:
    """Mark the collector failed in shared memory (waking every waiter) and send the parent the traceback."""
    failure = {
        "tick": session.tick,
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": traceback.format_exc(),
    }
    if session.segment is not None:
        session.segment.control[COLLECTOR_STATE] = CollectorState.FAILED
        session.segment.wake_all()
    try:
        conn.send(("error", failure))  # the parent prints it with its report
    except (OSError, EOFError):  # no parent to tell: say it here
        sys.stderr.write(f"[collector pid={os.getpid()}] raised at tick {failure['tick']}:\n{failure['traceback']}")
        sys.stderr.flush()


class TickLoop:
    """The collector's side of the tick protocol (docs/design.md, "One tick") over the shared segment.

    Each tick: wait for the action slot of tick t; step physics with its actions; write obs_{t+1} (then
    the first observations of the rows the learner asked to reset) and publish OBS_TICK=t+1; finish step
    t's deferred rewards and write transition t into the next free ingress slot. Its collaborators are
    called at named points: `faults.before_step` and `recorder.before_step` before the step,
    `recorder.forced_reset` and `recorder.after_step` before the publish, `phases.record` and
    `recorder.tick_done` once the transition is written, `recorder.save` at the end.
    """

    def __init__(
        self, env: Any, segment: SharedSegment, ring_slots: int, cfg: CollectorConfig, faults: CollectorFaults
    ) -> None:
        self.env = env
        self.segment = segment
        self.control = segment.control
        self.obs_keys = list(env.spec.obs_dims)
        self.obs_slot = {k: segment[f"obs/{k}"] for k in self.obs_keys}
        self.reset_slot = segment["obs/reset_mask"]
        self.action_slot = segment["action/value"]
        self.reset_request = segment["action/reset_request"]
        self.ring = IngressRing(segment, self.obs_keys, ring_slots)
        self.waiter = Waiter(segment, cfg.spin_us, cfg.poll_s)
        self.num_ticks = cfg.num_ticks
        self.stagger_rows, self.stagger_seed = cfg.stagger_rows, cfg.stagger_seed
        self.parent_pid = cfg.parent_pid
        self.faults = faults
        self.trace: list[tuple[str, int, int, int]] = []
        """(phase, tick, start_ns, end_ns) of the traced ticks, sent with the collector's goodbye"""
        self.phases = PhaseRecorder(segment, cfg.trace_max_ticks, self.trace)
        self.recorder = recorder_for(env, cfg.record)
        self.tick = -1
        """the tick in progress (for the failure report)"""
        self.failures_total = 0
        self.prev_obs: dict[str, np.ndarray] = {}
        """obs_t of the transition being written (the obs slot already holds obs_{t+1} by then)"""

    def _check(self) -> None:
        """Raise `_Stop` when the parent asked to stop or went away (runs inside every blocking wait)."""
        if self.control[STOP]:
            raise _Stop
        if os.getppid() != self.parent_pid:  # re-parented: the learner process is gone
            raise _Stop

    def run(self) -> int:
        """The tick loop; returns the number of ticks stepped.

        After each physics step the next observations are published first: the learner's
        inference for tick t+1 starts while this process writes transition t into the
        ingress ring (the learner ingests it after that inference, waiting for it if needed).
        """
        self._publish_first_obs()
        for tick in range(self.num_ticks):
            self.tick = tick
            self._tick(tick)
        self.recorder.save()
        # Leave only once the learner released every transition: none is in flight at exit.
        self.waiter.wait_at_least(CONSUMED, self.num_ticks, self._check)
        self.control[COLLECTOR_STATE] = CollectorState.EXITED
        return self.num_ticks

    def _publish_first_obs(self) -> None:
        """Reset the env and publish its first observations as tick 0's, every row flagged as reset."""
        self.control[COLLECTOR_STATE] = CollectorState.RUNNING
        state = self.env.reset()
        if self.stagger_rows:  # before the first publish: tick 0's observations are the same either way
            rows = np.arange(self.stagger_rows, dtype=np.int32)
            lengths = staggered_lengths(self.stagger_rows, self.env.spec.max_episode_steps, self.stagger_seed)
            self.env.truncate_after(rows, lengths)
        self.prev_obs = {k: np.array(state.obs[k], dtype=np.float32, copy=True) for k in self.obs_keys}
        for k in self.obs_keys:
            self.obs_slot[k][:] = state.obs[k]
        self.reset_slot[:] = True
        self.phases.start(time.perf_counter_ns())
        self.segment.publish(OBS_TICK, 0)

    def _tick(self, tick: int) -> None:
        """One tick, as in docs/design.md; the last one publishes no observations (no tick follows)."""
        clock = time.perf_counter_ns
        times = TickTimes()
        # wait for the action slot of tick t
        self.waiter.wait_at_least(ACTION_TICK, tick, self._check)
        times.action = clock()
        policy_version = int(self.control[ACTION_POLICY_VERSION])
        # step physics with actions_t
        self.faults.before_step()
        self.recorder.before_step(tick, self.action_slot)
        state = self.env.step(self.action_slot)
        times.stepped = clock()
        done = state.terminated | state.truncated  # (`reward` and `info` may still be pending: read after the publish)
        last = tick + 1 == self.num_ticks
        # publish obs_{t+1}, with the rows the learner asked to reset already reset
        if not last:
            times.eval_span = self._publish_next_obs(tick, state, done)
        times.published = clock()
        # finish step t's deferred rewards and write transition t into the next free ingress slot
        slot = self.ring.acquire_for_write(self.waiter, self._check)
        times.acquired = clock()
        self._write_transition(slot, tick, state, done, policy_version)
        if not last:  # the observations just published are obs_t of the next transition
            for k in self.obs_keys:
                self.prev_obs[k][:] = self.obs_slot[k]
        times.written = clock()
        # metering and recording
        times.env_timing = getattr(self.env, "last_step_timing", None)
        row = self.phases.record(tick, times)
        if self.recorder.tick_done(tick, row):
            self.recorder = NoRecording()

    def _publish_next_obs(self, tick: int, state: Any, done: np.ndarray) -> tuple[int, int] | None:
        """Write obs_{t+1} and the reset mask, reset the requested rows, publish; returns those resets' span."""
        clock = time.perf_counter_ns
        for k in self.obs_keys:
            self.obs_slot[k][:] = state.obs[k]
        self.reset_slot[:] = done
        eval_span = None
        if self.control[RESET_REQUEST_TICK] == tick:  # rows the learner wants fresh (a snapshot evaluation starts)
            t_eval = clock()
            rows = np.flatnonzero(self.reset_request)
            first_obs = self.env.reset_rows(rows)
            for k in self.obs_keys:
                self.obs_slot[k][rows] = first_obs[k]
            self.reset_slot[rows] = True
            eval_span = (t_eval, clock())
            self.recorder.forced_reset(tick, rows)
        self.recorder.after_step(tick, self.obs_slot)
        self.segment.publish(OBS_TICK, tick + 1)
        return eval_span

    def _write_transition(self, slot: Any, tick: int, state: Any, done: np.ndarray, policy_version: int) -> None:
        """Finish the step's deferred rewards, fill the ingress slot with transition t and commit it."""
        failures = int(state.info.get("physics_failures", 0))  # finishes a step's deferred rewards
        self.failures_total += failures
        for k in self.obs_keys:
            slot.obs[k][:] = self.prev_obs[k]
            slot.next_obs[k][:] = state.info["final_obs"][k]
        slot.reward[:] = state.reward
        slot.terminated[:] = state.terminated
        slot.truncated[:] = state.truncated
        if failures:
            slot.physics_failed[:] = state.info["physics_failed"]
        if "episode_return" in state.info:
            slot.episode_return[:] = state.info["episode_return"]
            slot.episode_length[:] = state.info["episode_length"]
        if "episode_tracking" in state.info:
            tracking = state.info["episode_tracking"]
            slot.episode_tracking[:, : tracking.shape[1]] = tracking
        header = slot.header
        header[HEADER_TICK] = tick
        header[HEADER_POLICY_VERSION] = policy_version
        header[HEADER_PHYSICS_FAILURES] = failures
        header[HEADER_NUM_DONE] = int(done.sum())
        self.ring.commit(wake=True)  # the learner may be waiting for it (it ingests right after its inference)
        self.control[PHYSICS_FAILURES] = self.failures_total
        self.control[COLLECTOR_HEARTBEAT_NS] = time.monotonic_ns()
