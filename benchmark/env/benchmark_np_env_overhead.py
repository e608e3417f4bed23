"""NpEnv.step against bare BatchEnvPool calls on the same cores, model and inputs.

NpEnv.step = one pool call (plus, for the DeepMind Control Suite tasks, one
constraint-free `forward` refreshing position/velocity sensors) + observation,
reward terms, termination, episode counters and the batched sparse reset of
finished envs. The bare side replays exactly the pool calls NpEnv made
(recorded while it ran: states and controls, on whichever of its pools),
timing only the pool calls, so both do the same physics and the ratio isolates
NpEnv's own work. Blocks of the two alternate to cancel drift (thermal, other
load). Each task row also gives the physics time of one vector step and of one
full reset of every env (what each episode boundary costs: DMC episodes all end
together, at step 1000) and of one-row resets, what the same episodes cost per
step when their starts are staggered (`env.stagger_starts`: about num_envs /
max_episode_steps rows start an episode on every step, each in a reset of its own).

    python -m benchmark.env.benchmark_np_env_overhead --tasks ant humanoid hopper --num-envs 1024 --cpus 2-15
    python -m benchmark.env.benchmark_np_env_overhead --suite dmc --num-envs 1024 --cpus 2-15

Without `--steps`, each block runs as many vector steps as fit in
`--block-seconds` (from the warm-up's step time), so slow tasks (the dog) and
fast ones (the cheetah) take about the same wall-clock time.

Every row also gives NpEnv's own work in absolute terms, `task_side_ms_per_vector_step`:
NpEnv's time less the time inside its pools' `step` and `forward` calls (the
sparse `pool.reset` of resetting rows counts as NpEnv's work, as in the
overhead). It is measured inside the NpEnv blocks themselves, so it does not
depend on the replay, and it is what carries over between machines (the
physics scales with the cores, this does not). `--task-side` reports only
that and skips the replay (half the time; on a machine with few cores the
physics dwarfs the difference the replay would measure):

    python -m benchmark.env.benchmark_np_env_overhead --tasks hopper halfcheetah ant humanoid --task-side

NpEnv hands every step's reward back pending (`NpEnvState`): the collector
publishes the observation first and finishes the reward while the learner
infers. Each block finishes every step's reward right after the step
returns and times it apart, so `deferred_ms_per_vector_step` is the part of the
task side that leaves the collector's critical path and
`critical_task_side_ms_per_vector_step` what stays on it (both inside the task
side above, which counts all of NpEnv's work as before).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import envs
from benchmark.machine import parse_cpus, write_results
from envs.dmc import TASKS as DMC_TASKS

SUITES = {
    "gymnasium": ["ant", "humanoid", "hopper"],
    "dmc": list(DMC_TASKS),
}
OUTPUT_NAMES = {"gymnasium": "np_env_overhead", "dmc": "np_env_overhead_dmc"}
BLOCKS = {"gymnasium": (50, 8), "dmc": (None, 4)}
"""default (steps per block, blocks) per suite; None: as many steps as fit in --block-seconds"""


ROW_RESETS = 20
"""one-row resets timed per task (their median is `reset_row_ms`)"""
POOLS = ("pool", "sensor_pool", "reset_pool")
"""the env's pools: physics, and for DMC tasks the sensor refresh and the reset sensors"""


class RecordingPool:
    """Wraps one of the env's pools: forwards every call, keeps the inputs of `step`/`forward`, times each kind.

    Copying the inputs is the benchmark's work, not NpEnv's: its time is kept under "record" and
    left out of NpEnv's. Without `calls` (None) nothing is recorded, only timed.
    """

    def __init__(self, pool, calls: list | None, times: dict):
        self.pool = pool
        self.calls = calls
        self.times = times

    def _add(self, kind: str, seconds: float) -> None:
        self.times[kind] = self.times.get(kind, 0.0) + seconds

    def _timed(self, kind: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        self._add(kind, time.perf_counter() - t0)
        return out

    def _record(self, kind: str, state, kwargs: dict) -> None:
        if self.calls is None:
            return
        t0 = time.perf_counter()
        if "control" in kwargs:
            kwargs = {**kwargs, "control": np.array(kwargs["control"])}
        self.calls.append((self.pool, kind, np.array(state), dict(kwargs)))
        self._add("record", time.perf_counter() - t0)

    def step(self, state, **kwargs):
        self._record("step", state, kwargs)
        return self._timed("step", self.pool.step, state, **kwargs)

    def forward(self, state, **kwargs):
        self._record("forward", state, kwargs)
        return self._timed("forward", self.pool.forward, state, **kwargs)

    def reset(self, *args, **kwargs):
        return self._timed("reset", self.pool.reset, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.pool, name)


def replay(calls) -> dict:
    """Run the recorded calls on the bare pools; seconds inside `step` and `forward` calls."""
    seconds = {"step": 0.0, "forward": 0.0}
    for pool, kind, state, kwargs in calls:
        t0 = time.perf_counter()
        getattr(pool, kind)(state, **kwargs)
        seconds[kind] += time.perf_counter() - t0
    return seconds


def steps_per_block(step_s: float, block_seconds: float, fixed: int | None) -> int:
    """Vector steps per block: `fixed` if given, else as many as fit in `block_seconds` (3 to 200)."""
    if fixed is not None:
        return fixed
    return int(np.clip(round(block_seconds / max(step_s, 1e-9)), 3, 200))


def measure(
    task: str,
    num_envs: int,
    cpus: list[int],
    steps: int | None,
    blocks: int,
    block_seconds: float = 1.0,
    seed: int = 0,
    replay_bare: bool = True,
) -> dict:
    """One task's row; `replay_bare=False` skips the bare replay (only NpEnv's own figures, task-side time)."""
    env = envs.make(task, num_envs, seed=seed, cpu_ids=cpus)
    rng = np.random.default_rng(seed)
    low, high = env.spec.action_low, env.spec.action_high
    env.reset()
    t0 = time.perf_counter()
    env.reset()  # every env at once, as at the end of the fixed-length episodes of the DMC tasks
    reset_all_s = time.perf_counter() - t0
    warmup = [rng.uniform(low, high, size=(num_envs, env.spec.action_dim)).astype(np.float32) for _ in range(5)]
    env.step(warmup[0])
    t0 = time.perf_counter()
    for a in warmup[1:]:
        env.step(a)
    steps = steps_per_block((time.perf_counter() - t0) / (len(warmup) - 1), block_seconds, steps)
    # staggered starts (`env.stagger_starts`): about num_envs / max_episode_steps rows start an episode on
    # every step, each in a reset of its own, instead of every row at once per max_episode_steps steps
    row_resets = []
    for row in range(min(ROW_RESETS, num_envs)):
        t0 = time.perf_counter()
        env.reset_rows(np.array([row], dtype=np.int32))
        row_resets.append(time.perf_counter() - t0)
    reset_row_s = float(np.median(row_resets))
    episode = env.spec.max_episode_steps
    actions = rng.uniform(low, high, size=(steps, num_envs, env.spec.action_dim)).astype(np.float32)
    bare = {name: getattr(env, name) for name in POOLS if getattr(env, name, None) is not None}
    np_env_s = bare_s = bare_forward_s = 0.0
    resets = 0
    inside = {"step": 0.0, "forward": 0.0, "reset": 0.0}
    ratios = []
    task_side_ms = []
    deferred_s, deferred_steps = 0.0, 0
    for _ in range(blocks):
        calls, times = ([] if replay_bare else None), {}
        for name, pool in bare.items():
            setattr(env, name, RecordingPool(pool, calls, times))
        block_np_env = 0.0
        for t in range(steps):
            t0 = time.perf_counter()
            state = env.step(actions[t])
            t1 = time.perf_counter()
            deferred_steps += state.pending
            state.complete()  # what the collector does after publishing the observation
            t2 = time.perf_counter()
            block_np_env += t2 - t0  # the count below is the benchmark's work, not NpEnv's
            deferred_s += t2 - t1
            resets += int(state.done.sum())
        block_np_env -= times.get("record", 0.0)
        for name, pool in bare.items():
            setattr(env, name, pool)
        np_env_s += block_np_env
        for kind in inside:
            inside[kind] += times.get(kind, 0.0)
        task_side_ms.append(1e3 * (block_np_env - times.get("step", 0.0) - times.get("forward", 0.0)) / steps)
        if replay_bare:
            seconds = replay(calls)
            block_bare = seconds["step"] + seconds["forward"]
            bare_s += block_bare
            bare_forward_s += seconds["forward"]
            ratios.append(block_np_env / block_bare - 1.0)
    spec = env.spec
    env.close()
    n = steps * blocks * num_envs
    physics_s = inside["step"] + inside["forward"]
    row = {
        "task": task,
        "num_envs": num_envs,
        "cpus": len(cpus),
        "obs_dim": spec.obs_dims["actor"],
        "action_dim": spec.action_dim,
        "substeps": env.frame_skip,
        "steps_per_block": steps,
        "blocks": blocks,
        # NpEnv's own work per vector step (numpy, Python, the sparse pool.reset of resetting rows), measured
        # inside the NpEnv blocks: what carries over between machines, unlike the physics
        "task_side_ms_per_vector_step": 1e3 * (np_env_s - physics_s) / (steps * blocks),
        "task_side_ms_block_median": float(np.median(task_side_ms)),
        "task_side_pool_reset_ms_per_vector_step": 1e3 * inside["reset"] / (steps * blocks),
        # of the task side: the rewards finished after the step returned (off the collector's critical path)
        "deferred_ms_per_vector_step": 1e3 * deferred_s / (steps * blocks),
        "critical_task_side_ms_per_vector_step": 1e3 * (np_env_s - physics_s - deferred_s) / (steps * blocks),
        "deferred_step_share": deferred_steps / (steps * blocks),
        # the same over the physics of those blocks (pool.step and pool.forward as NpEnv called them)
        "task_side_over_physics": (np_env_s - physics_s) / physics_s,
        "np_env_ms_per_vector_step": 1e3 * np_env_s / (steps * blocks),
        "np_env_steps_per_s": n / np_env_s,
        # a reset of every env
        "reset_all_ms": 1e3 * reset_all_s,
        # resets per vector step, spread over an episode: every row at once (`reset_all_ms` per episode) against
        # staggered rows (num_envs / max_episode_steps one-row resets a step, `reset_row_ms` each)
        "reset_row_ms": 1e3 * reset_row_s,
        "synchronised_reset_ms_per_vector_step": 1e3 * reset_all_s / episode,
        "staggered_reset_ms_per_vector_step": 1e3 * reset_row_s * num_envs / episode,
        # where NpEnv's time goes: inside pool.step, pool.forward, pool.reset (batched sparse reset), numpy/Python
        "share_pool_step": inside["step"] / np_env_s,
        "share_pool_forward": inside["forward"] / np_env_s,
        "share_pool_reset": inside["reset"] / np_env_s,
        "share_numpy_python": 1.0 - sum(inside.values()) / np_env_s,
        "resets_per_1k_steps": 1000 * resets / n,
    }
    if not replay_bare:
        return row
    bare_step_ms = 1e3 * bare_s / (steps * blocks)
    return {
        **row,
        "bare_pool_steps_per_s": n / bare_s,
        "overhead": np_env_s / bare_s - 1.0,
        # the same without the deferred rewards, which the collector computes after publishing the observation,
        # while the learner infers: NpEnv's overhead on the critical path between two physics steps
        "critical_overhead": (np_env_s - deferred_s) / bare_s - 1.0,
        "overhead_block_median": float(np.median(ratios)),
        # physics time of one vector step (what the learner can train through) and its sensor-refresh part
        "bare_ms_per_vector_step": bare_step_ms,
        "bare_share_forward": bare_forward_s / bare_s,
        # per 1000-step episode a reset of every env adds reset_all_ms / (1000 * step time)
        "reset_share_per_1000_steps": reset_all_s * 1e3 / (1000 * bare_step_ms),
        # the same with staggered starts: one-row resets spread over the episode, per physics step
        "staggered_reset_share": row["staggered_reset_ms_per_vector_step"] / bare_step_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="gymnasium", help="default task list and output")
    parser.add_argument("--tasks", nargs="+", default=None, help="registry names (default: the suite's tasks)")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--cpus", default=None, help="CPU ids for the pool workers, e.g. 2-15 (default: all)")
    parser.add_argument("--steps", type=int, default=None, help="vector steps per block (gymnasium: 50, dmc: timed)")
    parser.add_argument("--block-seconds", type=float, default=1.0, help="NpEnv time per timed block")
    parser.add_argument("--blocks", type=int, default=None, help="alternating blocks (gymnasium: 8, dmc: 4)")
    parser.add_argument("--out", default=None, help="output folder (default: benchmark/outputs/<suite's name>/)")
    parser.add_argument(
        "--task-side",
        action="store_true",
        help="skip the bare replay: only NpEnv's own work per step (ms) and its share of the physics it called",
    )
    args = parser.parse_args()
    tasks = args.tasks or SUITES[args.suite]
    default_steps, default_blocks = BLOCKS[args.suite]
    steps = args.steps if args.steps is not None else default_steps
    blocks = args.blocks if args.blocks is not None else default_blocks
    unknown = sorted(set(tasks) - set(envs.registry_names()))
    if unknown:
        parser.error(f"unknown task(s) {unknown}; valid: {', '.join(envs.registry_names())}")
    cpus = parse_cpus(args.cpus)
    # like the collector: the stepping thread lives on the pool's CPUs
    os.sched_setaffinity(0, cpus)
    rows = []
    for task in tasks:
        row = measure(task, args.num_envs, cpus, steps, blocks, args.block_seconds, replay_bare=not args.task_side)
        rows.append(row)
        task_side = (
            f"task side {row['task_side_ms_per_vector_step']:.3f} ms/step (block median "
            f"{row['task_side_ms_block_median']:.3f}, pool.reset {row['task_side_pool_reset_ms_per_vector_step']:.3f})"
            f" = {100 * row['task_side_over_physics']:.2f}% of its physics; on the critical path "
            f"{row['critical_task_side_ms_per_vector_step']:.3f}, deferred {row['deferred_ms_per_vector_step']:.3f}"
            f" on {100 * row['deferred_step_share']:.0f}% of steps); resets a step: synchronised "
            f"{row['synchronised_reset_ms_per_vector_step']:.3f} ms, staggered {row['staggered_reset_ms_per_vector_step']:.3f}"
            f" ms (one row {row['reset_row_ms']:.3f} ms)"
        )
        if args.task_side:
            print(f"{task:18s} envs={row['num_envs']} cpus={row['cpus']} {task_side}", flush=True)
            continue
        print(
            f"{task:18s} envs={row['num_envs']} cpus={row['cpus']} np_env={row['np_env_steps_per_s']:9.0f}/s "
            f"bare={row['bare_pool_steps_per_s']:9.0f}/s ({row['bare_ms_per_vector_step']:.1f} ms/step, "
            f"forward {100 * row['bare_share_forward']:.0f}%) overhead={100 * row['overhead']:+.1f}% "
            f"(on the critical path {100 * row['critical_overhead']:+.1f}%) "
            f"(block median {100 * row['overhead_block_median']:+.1f}%; numpy {100 * row['share_numpy_python']:.1f}% "
            f"of NpEnv time; {task_side}) reset all {row['reset_all_ms']:.0f} ms",
            flush=True,
        )
    meta = {"args": vars(args), "target": "overhead <= 5% (critical_overhead: the part between two physics steps)"}
    name = OUTPUT_NAMES[args.suite] + ("_task_side" if args.task_side else "")
    folder = write_results(name, rows, meta, args.out)
    print("wrote", folder)


if __name__ == "__main__":
    main()
