"""Does the collector's Python gain anything by running beside the next step's physics?

The pool's `step` releases the GIL, so the collector could finish step t's deferred work (its rewards and
the transition's write into the ingress slot) in its main thread while the pool's workers step t+1's
physics, instead of between the two. This measures what that would give on a joystick task
(`go1_joystick_flat`, `go2_joystick_flat`) with the task's real deferred work (`state.complete()`: reward
terms, returns, tracking sums) plus the copies the collector makes of transition t (observations before and
after, reward, done flags, returns and tracking sums, into preallocated arrays), and the real physics of the
next control step (`bare_step`: the pool calls `step` makes, on copies of the env's state).

Each measured step first times that physics alone (`physics_ms`, one pool worker pinned to each of
`--cpus`, the baseline of the step), then one mode, the modes in rotation:

- `sequential`: the deferred work, then the physics: the tick as the collector runs it now
  (`deferred_ms` is its first part);
- `shared`: the physics in a thread and the deferred work in the main thread at once, on the same CPUs (the
  main thread shares a core with a pool worker, as the collector's does);
- `spare`: the physics on a second pool of one worker fewer (`--cpus` but the first; its alone time is
  `physics_spare_ms`) in a thread, and the deferred work in the main thread pinned to the first CPU, which no
  worker uses.

Every figure is a median over its steps. The paired ones compare a mode with the same step's physics alone:
`shared_extra_ms` (how much longer the overlapped step took than its physics alone) and
`shared_extra_per_deferred_ms` (that over `deferred_ms`: 0, the Python was free; 1 or more, overlapping saved
nothing), and `spare_extra_ms` against the full pool's physics (the cost of giving the Python a core of its own
and running it beside the physics). The second pool is built with the same seed, so its per-environment models
start as the first's.

    python -m benchmark.env.python_beside_physics --cpus 2-15 --envs 1024 --out beside.json
    python -m benchmark.env.python_beside_physics --cpus 0-1 --envs 512 --steps 30
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmark.env.joystick_step_overhead import TASKS, mild_actions, stagger_episodes
from benchmark.machine import machine_info, parse_cpus

MODES = ("sequential", "shared", "spare")


def overlapped(physics: Callable[[], object], python: Callable[[], object]) -> None:
    """Run `physics` in a thread and `python` in this one; return when both are done."""
    worker = threading.Thread(target=physics)
    worker.start()
    try:
        python()
    finally:
        worker.join()


def summarise(samples: dict[str, list[float]]) -> dict[str, float]:
    """Median of each sample list as `<name>_ms`, and `shared_extra_per_deferred_ms` (module docstring)."""
    out = {f"{name}_ms": float(np.median(values)) for name, values in samples.items() if values}
    out["shared_extra_per_deferred_ms"] = out["shared_extra_ms"] / out["deferred_ms"]
    return out


class TransitionCopy:
    """What the collector writes of transition t into its ingress slot: preallocated arrays, filled by copies."""

    def __init__(self, state) -> None:
        info = state.info
        self.obs = {k: np.empty_like(v) for k, v in state.obs.items()}
        self.next_obs = {k: np.empty_like(v) for k, v in state.obs.items()}
        self.rest = {k: np.empty_like(info[k]) for k in ("episode_return", "episode_length", "episode_tracking")}
        self.flags = np.empty((3, state.terminated.shape[0]), dtype=np.float32)

    def write(self, prev_obs: dict[str, np.ndarray], state) -> None:
        info = state.info  # finishes the step's deferred work
        for k in self.obs:
            self.obs[k][:] = prev_obs[k]
            self.next_obs[k][:] = info["final_obs"][k]
        self.flags[0] = state.reward
        self.flags[1] = state.terminated
        self.flags[2] = state.truncated
        for k, array in self.rest.items():
            array[:] = info[k]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e6


def one_step(
    mode: str,
    physics: Callable[[], object],
    physics_spare: Callable[[], object] | None,
    deferred: Callable[[], object],
    spare_cpu: int,
    main_cpus: set[int],
) -> dict[str, float]:
    """One measured step: its physics alone, then `mode` (ms)."""
    alone = timed(physics)
    got: dict[str, float] = {"physics": alone}
    if mode == "sequential":
        got["deferred"] = timed(deferred)
        got["sequential"] = got["deferred"] + timed(physics)
    elif mode == "shared":
        got["shared"] = timed(lambda: overlapped(physics, deferred))
        got["shared_extra"] = got["shared"] - alone
    else:
        got["physics_spare"] = timed(physics_spare)
        os.sched_setaffinity(0, {spare_cpu})  # the main thread alone on the CPU the spare pool leaves free
        try:
            got["spare"] = timed(lambda: overlapped(physics_spare, deferred))
        finally:
            os.sched_setaffinity(0, main_cpus)
        got["spare_extra"] = got["spare"] - alone
    return got


def measure(task: str, args: argparse.Namespace, cpus: list[int]) -> dict:
    """The physics alone and the three modes on `task` along the mild action sequence."""
    import envs

    modes = MODES if len(cpus) > 1 else MODES[:2]
    env = envs.make(task, args.envs, seed=args.seed, nthread=len(cpus), cpu_ids=cpus)
    spare = (
        envs.make(task, args.envs, seed=args.seed, nthread=len(cpus) - 1, cpu_ids=cpus[1:]) if len(cpus) > 1 else None
    )
    main_cpus = set(cpus)
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, main_cpus)
    names = ("physics", "deferred", "sequential", "shared", "shared_extra", "physics_spare", "spare", "spare_extra")
    samples: dict[str, list[float]] = {name: [] for name in names}
    try:
        total = 1 + args.warmup + len(modes) * args.steps + 1
        actions = mild_actions(args.seed, total, args.envs, env.spec.action_dim, args.action_scale)
        env.reset()
        if spare is not None:
            spare.reset()
        stagger_episodes(env, args.seed)
        first = env.step(actions[0])  # sizes the transition's arrays
        copy = TransitionCopy(first)
        prev_obs = first.obs
        for t in range(1, total - 1):
            state = env.step(actions[t])
            s, w, a = env._state.copy(), env._warmstart.copy(), actions[t + 1].astype(np.float64)
            mode = modes[(t - 1 - args.warmup) % len(modes)]
            physics = functools.partial(env.bare_step, s, w, a)
            physics_spare = functools.partial(spare.bare_step, s, w, a) if spare is not None else None
            deferred = functools.partial(copy.write, prev_obs, state)
            got = one_step(mode, physics, physics_spare, deferred, cpus[0], main_cpus)
            state.complete()
            prev_obs = state.obs
            if t > args.warmup:
                for name, value in got.items():
                    samples[name].append(value)
    finally:
        os.sched_setaffinity(0, previous)
        env.close()
        if spare is not None:
            spare.close()
    return {"task": task, "envs": args.envs, "nthread": len(cpus), "steps_per_mode": args.steps, **summarise(samples)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    p.add_argument("--envs", type=int, default=1024)
    p.add_argument("--cpus", default=None, help="CPU ids for the pool's workers, e.g. 2-15 (default: all available)")
    p.add_argument("--steps", type=int, default=40, help="measured steps per mode")
    p.add_argument("--warmup", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--action-scale", type=float, default=0.3)
    p.add_argument("--out", default=None, help="JSON file to write (default: print only)")
    args = p.parse_args(argv)
    cpus = parse_cpus(args.cpus)
    unusable = sorted(set(cpus) - os.sched_getaffinity(0))
    if unusable:
        p.error(
            f"--cpus {args.cpus}: CPU ids {unusable} are not available to this process; available: {sorted(os.sched_getaffinity(0))}"
        )
    rows = [measure(task, args, cpus) for task in args.tasks]
    result = {"machine": machine_info(), "argv": vars(args), "rows": rows}
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    for row in rows:
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))
    return result


if __name__ == "__main__":
    main()
