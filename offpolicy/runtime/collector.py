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

One tick (see docs/design.md): wait for ACTION_TICK=t; step physics; write obs_{t+1}
and the reset mask into the obs slot (resetting first the rows the learner asked to
reset with tick t's actions: a snapshot evaluation starts) and publish OBS_TICK=t+1;
then, while the learner runs its inference, write transition t into the next free
ingress slot (block while the ring is full); loop. Each tick's phase durations go
into a shared ring (`PhaseRecorder`), and with `runtime.trace` their intervals
join the timeline as the collector's track.
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

from offpolicy.affinity import thread_affinities
from offpolicy.runtime.ingress import (
    HEADER_NUM_DONE,
    HEADER_PHYSICS_FAILURES,
    HEADER_POLICY_VERSION,
    HEADER_TICK,
    IngressRing,
)
from offpolicy.runtime.slots import (
    ACTION_POLICY_VERSION,
    ACTION_TICK,
    COLLECTOR_HEARTBEAT_NS,
    COLLECTOR_PHASE_TICKS,
    COLLECTOR_STATE,
    CONSUMED,
    OBS_TICK,
    PHASE_NAMES,
    PHASE_RING,
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
    """fault injection: raise inside env.step at this tick (-1: never)"""
    hang_at_tick: int = -1
    """fault injection: hang inside env.step at this tick (-1: never)"""
    step_delay_s: float = 0.0
    """test hook: random sleep up to this long before each step (property tests)"""
    trace_max_ticks: int = 0
    """keep this many ticks of phase intervals for the timeline's collector track (0: none)"""
    record: RecordWindow | None = None
    """record a window of ticks for a same-trajectory replay (benchmark/offpolicy/trajectory_replay.py)"""

    work_dir: str | None = None
    """the run dir (absolute): MuJoCo's MUJOCO_LOG.TXT lands there (the working directory stays as it is)"""


@dataclass(frozen=True)
class RecordWindow:
    """Which ticks to record and where: the physics state before the first, then every action and reset."""

    path: str
    start_tick: int
    ticks: int
    start_s: float | None = None
    """when set: the window starts at the first tick this many seconds after tick 0 (start_tick is ignored)"""


class InjectedFault(RuntimeError):
    """Raised by fault injection (runtime.fault.*)."""


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
    env = None
    segment = None
    try:
        env = cfg.env_factory.build(cfg.collector_cpus)
        if cfg.work_dir is not None:
            point_mujoco_log_at(cfg.work_dir)
        if cfg.raise_at_tick >= 0 or cfg.hang_at_tick >= 0:
            env = FaultInjectingEnv(env, cfg.raise_at_tick, cfg.hang_at_tick)
        conn.send(("spec", {"spec": env.spec, **isolation_report(env)}))
        msg = conn.recv()
        if msg[0] != "attach":
            return
        _, name, layout, ring_slots = msg
        segment = SharedSegment.attach(name, layout)
        conn.send(("attached",))
        ticks = _run(env, segment, ring_slots, cfg)
        conn.send(("bye", {"ticks": ticks, **isolation_report(env), "trace": _TRACE}))
    except _Stop:
        try:
            conn.send(("bye", {"ticks": _CURRENT_TICK[0], "stopped": True, **isolation_report(env), "trace": _TRACE}))
        except (OSError, EOFError):
            pass
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        failure = {
            "tick": _CURRENT_TICK[0],
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": traceback.format_exc(),
        }
        if segment is not None:
            segment.control[COLLECTOR_STATE] = CollectorState.FAILED
            segment.wake_all()
        try:
            conn.send(("error", failure))  # the parent prints it with its report
        except (OSError, EOFError):  # no parent to tell: say it here
            sys.stderr.write(f"[collector pid={os.getpid()}] raised at tick {failure['tick']}:\n{failure['traceback']}")
            sys.stderr.flush()
        os._exit(1)
    finally:
        if env is not None:
            env.close()
        if segment is not None:
            segment.close()


_CURRENT_TICK = [-1]
_TRACE: list[tuple[str, int, int, int]] = []
"""(phase, tick, start_ns, end_ns) of the recorded ticks, sent with the collector's goodbye"""


class PhaseRecorder:
    """Per-tick phase durations into the shared phase ring (the learner reads medians at log time), and
    the intervals themselves for the timeline's collector track while `trace_max_ticks` lasts.

    Phases (`offpolicy.runtime.slots.PHASE_NAMES`): `cycle` from one obs publish to the next; `wait` for the
    action (the learner's inference and the exchange); `physics`, the pool step; `task`, the task's
    numpy (observation, reward, termination) around it; `resets`, auto-resets; `eval_resets`, resets a
    snapshot evaluation asked for; `publish`, writing the next observations; `critical`, from the
    action to the next publish (what the learner waits for); `ingress_wait` and `ingress_write`, the
    transition's slot, written after the publish while the learner runs its inference.
    """

    def __init__(self, segment: SharedSegment, trace_max_ticks: int) -> None:
        self.ring = segment["collector/phases"]
        self.control = segment.control
        self.trace_max_ticks = int(trace_max_ticks)
        self.index = {name: i for i, name in enumerate(PHASE_NAMES)}
        self.published = self.written = 0

    def start(self, published: int) -> None:
        self.published = self.written = published

    def record(
        self,
        tick: int,
        t_action: int,
        t_stepped: int,
        env_timing: tuple[int, int, int, int] | None,
        eval_span: tuple[int, int] | None,
        t_published: int,
        t_acquired: int,
        t_written: int,
    ) -> None:
        if env_timing is None:  # an env that does not time itself: the whole step counts as physics
            env_timing = (t_action, t_stepped, t_stepped, t_stepped)
        pool_start, pool_end, reset_start, reset_end = env_timing
        physics, resets = pool_end - pool_start, reset_end - reset_start
        evals = 0 if eval_span is None else eval_span[1] - eval_span[0]
        row = self.ring[tick % PHASE_RING]
        i = self.index
        row[i["cycle"]] = t_published - self.published
        row[i["wait"]] = t_action - self.written
        row[i["physics"]] = physics
        row[i["task"]] = (t_stepped - t_action) - physics - resets
        row[i["resets"]] = resets
        row[i["eval_resets"]] = evals
        row[i["publish"]] = (t_published - t_stepped) - evals
        row[i["critical"]] = t_published - t_action
        row[i["ingress_wait"]] = t_acquired - t_published
        row[i["ingress_write"]] = t_written - t_acquired
        self.control[COLLECTOR_PHASE_TICKS] = tick + 1
        if tick < self.trace_max_ticks:
            _TRACE.extend(
                [
                    ("wait", tick, self.written, t_action),
                    ("physics", tick, pool_start, pool_end),
                    ("task", tick, t_action, t_stepped),
                    ("publish", tick, t_stepped, t_published),
                    ("ingress", tick, t_published, t_written),
                ]
            )
            if resets:
                _TRACE.append(("resets", tick, reset_start, reset_end))
            if eval_span is not None:
                _TRACE.append(("eval_resets", tick, *eval_span))
        self.published, self.written = t_published, t_written


class WindowRecorder:
    """Records a window of ticks for a same-trajectory replay: the env's state before the first tick, then
    every action, every reset (rows and states, automatic or requested), every observation published and
    every tick's phase durations (the `collector/phases` row the metric rows take their medians of), so the
    window's mean tick can be split into its phases tick by tick.

    Needs an env with `snapshot()` and a `reset_log` (MujocoNpEnv). Saved as one .npz at the window's end.
    """

    def __init__(self, env: Any, window: RecordWindow) -> None:
        self.env = env
        self.window = window
        self.actions: list[np.ndarray] = []
        self.obs: list[np.ndarray] = []
        self.resets: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.forced: list[tuple[int, np.ndarray]] = []
        self.phases: list[np.ndarray] = []
        self.snapshot: dict[str, Any] | None = None
        self.t0 = self.t1 = 0
        self.start = window.start_tick if window.start_s is None else None
        """first tick of the window (None until a start_s window has begun)"""
        self._clock0: float | None = None

    def _in_window(self, tick: int) -> bool:
        return self.start is not None and self.start <= tick < self.start + self.window.ticks

    def before_step(self, tick: int, actions: np.ndarray) -> None:
        if self.start is None:  # a window by wall clock: starts at the first tick start_s after tick 0
            now = time.monotonic()
            if self._clock0 is None:
                self._clock0 = now
            if now - self._clock0 >= self.window.start_s:
                self.start = tick
        if tick == self.start:
            self.snapshot = self.env.snapshot()
            self.env.reset_log = []
        if self._in_window(tick):
            self.actions.append(np.array(actions, copy=True))

    def _drain(self, tick: int) -> None:
        for rows, states in self.env.reset_log or []:
            self.resets.append((tick, rows, states))
        if self.env.reset_log is not None:
            self.env.reset_log.clear()

    def forced_reset(self, tick: int, rows: np.ndarray) -> None:
        if self._in_window(tick):
            self.forced.append((tick, np.array(rows, copy=True)))

    def after_step(self, tick: int, obs_slot: dict[str, np.ndarray]) -> None:
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
        return self.start is not None and tick + 1 >= self.start + self.window.ticks

    def save(self) -> None:
        if self.snapshot is None or not self.actions:
            return
        self.env.reset_log = None
        n = len(self.obs)
        reset_ticks = np.array([t for t, _, _ in self.resets], dtype=np.int64)
        reset_counts = np.array([len(r) for _, r, _ in self.resets], dtype=np.int64)
        nstate = self.snapshot["state"].shape[1]
        np.savez(
            self.window.path,
            start_tick=self.start,
            actions=np.stack(self.actions[:n]),
            obs=np.stack(self.obs),
            reset_ticks=reset_ticks,
            reset_counts=reset_counts,
            reset_rows=np.concatenate([r for _, r, _ in self.resets]) if self.resets else np.zeros(0, np.int64),
            reset_states=np.concatenate([s for _, _, s in self.resets]) if self.resets else np.zeros((0, nstate)),
            forced_ticks=np.array([t for t, _ in self.forced], dtype=np.int64),
            forced_rows=np.stack([r for _, r in self.forced]) if self.forced else np.zeros((0, 0), np.int64),
            in_run_seconds=(self.t1 - self.t0) / 1e9,
            phases_ns=np.stack(self.phases[:n]) if self.phases else np.zeros((0, len(PHASE_NAMES)), np.int64),
            phase_names=np.array(PHASE_NAMES),
            **{f"snapshot/{k}": v for k, v in self.snapshot.items() if k != "rng"},
            snapshot_rng=np.frombuffer(repr(self.snapshot["rng"]).encode(), dtype=np.uint8),
        )


def _run(env: Any, segment: SharedSegment, ring_slots: int, cfg: CollectorConfig) -> int:
    """The tick loop; returns the number of ticks stepped.

    After each physics step the next observations are published first: the learner's
    inference for tick t+1 starts while this process writes transition t into the
    ingress ring (the learner ingests it after that inference, waiting for it if needed).
    """
    spec = env.spec
    obs_keys = list(spec.obs_dims)
    obs_slot = {k: segment[f"obs/{k}"] for k in obs_keys}
    reset_slot = segment["obs/reset_mask"]
    action_slot = segment["action/value"]
    reset_request = segment["action/reset_request"]
    control = segment.control
    ring = IngressRing(segment, obs_keys, ring_slots)
    waiter = Waiter(segment, cfg.spin_us, cfg.poll_s)
    parent_pid = cfg.parent_pid
    rng = np.random.default_rng(os.getpid())
    clock = time.perf_counter_ns
    phases = PhaseRecorder(segment, cfg.trace_max_ticks)
    recorder = WindowRecorder(env, cfg.record) if cfg.record is not None else None

    def check() -> None:
        if control[STOP]:
            raise _Stop
        if os.getppid() != parent_pid:  # re-parented: the learner process is gone
            raise _Stop

    control[COLLECTOR_STATE] = CollectorState.RUNNING
    state = env.reset()
    prev_obs = {k: np.array(state.obs[k], dtype=np.float32, copy=True) for k in obs_keys}
    """obs_t of the transition being written (the obs slot already holds obs_{t+1} by then)"""
    for k in obs_keys:
        obs_slot[k][:] = state.obs[k]
    reset_slot[:] = True
    phases.start(clock())
    segment.publish(OBS_TICK, 0)

    failures_total = 0
    for tick in range(cfg.num_ticks):
        _CURRENT_TICK[0] = tick
        waiter.wait_at_least(ACTION_TICK, tick, check)
        t_action = clock()
        policy_version = int(control[ACTION_POLICY_VERSION])
        if cfg.step_delay_s > 0:
            time.sleep(rng.uniform(0.0, cfg.step_delay_s))
        if recorder is not None:
            recorder.before_step(tick, action_slot)
        state = env.step(action_slot)
        t_stepped = clock()
        done = state.terminated | state.truncated  # (`reward` and `info` may still be pending: read after the publish)

        last = tick + 1 == cfg.num_ticks
        eval_span = None
        if not last:
            for k in obs_keys:
                obs_slot[k][:] = state.obs[k]
            reset_slot[:] = done
            if control[RESET_REQUEST_TICK] == tick:  # rows the learner wants fresh (a snapshot evaluation starts)
                t_eval = clock()
                rows = np.flatnonzero(reset_request)
                first_obs = env.reset_rows(rows)
                for k in obs_keys:
                    obs_slot[k][rows] = first_obs[k]
                reset_slot[rows] = True
                eval_span = (t_eval, clock())
                if recorder is not None:
                    recorder.forced_reset(tick, rows)
            if recorder is not None:
                recorder.after_step(tick, obs_slot)
            segment.publish(OBS_TICK, tick + 1)
        t_published = clock()

        slot = ring.acquire_for_write(waiter, check)
        t_acquired = clock()
        failures = int(state.info.get("physics_failures", 0))  # finishes a step's deferred rewards
        failures_total += failures
        for k in obs_keys:
            slot.obs[k][:] = prev_obs[k]
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
        ring.commit(wake=True)  # the learner may be waiting for it (it ingests right after its inference)
        control[PHYSICS_FAILURES] = failures_total
        control[COLLECTOR_HEARTBEAT_NS] = time.monotonic_ns()
        if not last:
            for k in obs_keys:
                prev_obs[k][:] = obs_slot[k]
        t_written = clock()
        phases.record(
            tick, t_action, t_stepped, getattr(env, "last_step_timing", None), eval_span, t_published, t_acquired,
            t_written,
        )  # fmt: skip
        if recorder is not None:
            recorder.phases_recorded(tick, phases.ring[tick % PHASE_RING])
            if recorder.done(tick):
                recorder.save()
                recorder = None
    if recorder is not None:
        recorder.save()
    # Leave only once the learner released every transition: none is in flight at exit.
    waiter.wait_at_least(CONSUMED, cfg.num_ticks, check)
    control[COLLECTOR_STATE] = CollectorState.EXITED
    return cfg.num_ticks


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
