"""The collector process: one `NpEnv` stepping physics on its own CPUs, talking only through shared memory.

Started with the `spawn` context by `offpolicy.lifecycle.CollectorProcess`. It pins
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

One tick (see docs/design.md): write obs_t and the reset mask into the obs slot,
publish OBS_TICK=t; wait for ACTION_TICK=t; step physics; write transition t into
the next free ingress slot (block while the ring is full); loop.
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
from offpolicy.ingress import (
    HEADER_NUM_DONE,
    HEADER_PHYSICS_FAILURES,
    HEADER_POLICY_VERSION,
    HEADER_TICK,
    IngressRing,
)
from offpolicy.slots import (
    ACTION_POLICY_VERSION,
    ACTION_TICK,
    COLLECTOR_HEARTBEAT_NS,
    COLLECTOR_STATE,
    CONSUMED,
    OBS_TICK,
    PHYSICS_FAILURES,
    STOP,
    CollectorState,
    SharedSegment,
    Waiter,
)

THREAD_CAP_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
"""environment variables capped to 1 in the collector (set before its interpreter starts)"""


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
    work_dir: str | None = None
    """working directory once the env is built (the run dir): MuJoCo's MUJOCO_LOG.TXT lands there"""


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
            os.chdir(cfg.work_dir)
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
        conn.send(("bye", {"ticks": ticks, **isolation_report(env)}))
    except _Stop:
        try:
            conn.send(("bye", {"ticks": _CURRENT_TICK[0], "stopped": True, **isolation_report(env)}))
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


def _run(env: Any, segment: SharedSegment, ring_slots: int, cfg: CollectorConfig) -> int:
    """The tick loop; returns the number of ticks stepped."""
    spec = env.spec
    obs_keys = list(spec.obs_dims)
    obs_slot = {k: segment[f"obs/{k}"] for k in obs_keys}
    reset_slot = segment["obs/reset_mask"]
    action_slot = segment["action/value"]
    control = segment.control
    ring = IngressRing(segment, obs_keys, ring_slots)
    waiter = Waiter(segment, cfg.spin_us, cfg.poll_s)
    parent_pid = cfg.parent_pid
    rng = np.random.default_rng(os.getpid())

    def check() -> None:
        if control[STOP]:
            raise _Stop
        if os.getppid() != parent_pid:  # re-parented: the learner process is gone
            raise _Stop

    control[COLLECTOR_STATE] = CollectorState.RUNNING
    state = env.reset()
    for k in obs_keys:
        obs_slot[k][:] = state.obs[k]
    reset_slot[:] = True
    segment.publish(OBS_TICK, 0)

    failures_total = 0
    for tick in range(cfg.num_ticks):
        _CURRENT_TICK[0] = tick
        waiter.wait_at_least(ACTION_TICK, tick, check)
        policy_version = int(control[ACTION_POLICY_VERSION])
        if cfg.step_delay_s > 0:
            time.sleep(rng.uniform(0.0, cfg.step_delay_s))
        state = env.step(action_slot)
        failures = int(state.info.get("physics_failures", 0))
        failures_total += failures

        slot = ring.acquire_for_write(waiter, check)
        for k in obs_keys:
            slot.obs[k][:] = obs_slot[k]  # obs_t still sits in the obs slot: the learner is done with it
            slot.next_obs[k][:] = state.info["final_obs"][k]
        slot.action[:] = action_slot
        slot.reward[:] = state.reward
        slot.terminated[:] = state.terminated
        slot.truncated[:] = state.truncated
        done = state.terminated | state.truncated
        if "episode_return" in state.info:
            slot.episode_return[:] = state.info["episode_return"]
            slot.episode_length[:] = state.info["episode_length"]
        header = slot.header
        header[HEADER_TICK] = tick
        header[HEADER_POLICY_VERSION] = policy_version
        header[HEADER_PHYSICS_FAILURES] = failures
        header[HEADER_NUM_DONE] = int(done.sum())
        ring.commit(wake=tick + 1 == cfg.num_ticks)  # only the last one has a waiter
        control[PHYSICS_FAILURES] = failures_total
        control[COLLECTOR_HEARTBEAT_NS] = time.monotonic_ns()

        if tick + 1 < cfg.num_ticks:
            for k in obs_keys:
                obs_slot[k][:] = state.obs[k]
            reset_slot[:] = done
            segment.publish(OBS_TICK, tick + 1)
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
