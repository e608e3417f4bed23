"""NpEnv.step against bare BatchEnvPool.step on the same cores, model and inputs.

NpEnv.step = one pool call + observation, reward terms, termination, episode
counters and the batched sparse reset of finished envs. The bare side replays
exactly the states and controls that NpEnv passed to the pool (recorded while
it ran), so both do the same physics and the ratio isolates NpEnv's own work.
Blocks of the two alternate to cancel drift (thermal, other load).

    python -m benchmark.env.benchmark_np_env_overhead --tasks ant humanoid hopper --num-envs 1024 --cpus 2-15
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import envs
from benchmark.machine import parse_cpus, write_results


class RecordingPool:
    """Wraps the env's pool: forwards every call, keeps the inputs of `step`, times step and reset."""

    def __init__(self, pool):
        self.pool = pool
        self.calls: list[tuple[np.ndarray, np.ndarray, dict]] = []
        self.step_s = 0.0
        self.reset_s = 0.0

    def step(self, state, **kwargs):
        self.calls.append((np.array(state), np.array(kwargs["control"]), kwargs))
        t0 = time.perf_counter()
        out = self.pool.step(state, **kwargs)
        self.step_s += time.perf_counter() - t0
        return out

    def reset(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self.pool.reset(*args, **kwargs)
        self.reset_s += time.perf_counter() - t0
        return out

    def __getattr__(self, name):
        return getattr(self.pool, name)


def measure(task: str, num_envs: int, cpus: list[int], steps: int, blocks: int, seed: int = 0) -> dict:
    env = envs.make(task, num_envs, seed=seed, cpu_ids=cpus)
    rng = np.random.default_rng(seed)
    low, high = env.spec.action_low, env.spec.action_high
    actions = rng.uniform(low, high, size=(steps, num_envs, env.spec.action_dim)).astype(np.float32)
    env.reset()
    for t in range(min(steps, 20)):  # warm-up
        env.step(actions[t])
    bare_pool = env.pool
    np_env_s, bare_s, resets = 0.0, 0.0, 0
    inside_step_s, inside_reset_s, ratios = 0.0, 0.0, []
    for _ in range(blocks):
        recorder = RecordingPool(bare_pool)
        env.pool = recorder
        t0 = time.perf_counter()
        for t in range(steps):
            state = env.step(actions[t])
            resets += int(state.done.sum())
        block_np_env = time.perf_counter() - t0
        env.pool = bare_pool
        t0 = time.perf_counter()
        for state0, control, kwargs in recorder.calls:
            bare_pool.step(
                state0,
                nstep=kwargs["nstep"],
                control=control,
                return_sensor=True,
                post_step_forward_sensor=kwargs["post_step_forward_sensor"],
            )
        block_bare = time.perf_counter() - t0
        np_env_s += block_np_env
        bare_s += block_bare
        ratios.append(block_np_env / block_bare - 1.0)
        inside_step_s += recorder.step_s
        inside_reset_s += recorder.reset_s
    env.close()
    n = steps * blocks * num_envs
    return {
        "task": task,
        "num_envs": num_envs,
        "cpus": len(cpus),
        "np_env_steps_per_s": n / np_env_s,
        "bare_pool_steps_per_s": n / bare_s,
        "overhead": np_env_s / bare_s - 1.0,
        "overhead_block_median": float(np.median(ratios)),
        # where NpEnv's time goes: inside pool.step, inside pool.reset (batched sparse reset), numpy/Python
        "share_pool_step": inside_step_s / np_env_s,
        "share_pool_reset": inside_reset_s / np_env_s,
        "share_numpy_python": 1.0 - (inside_step_s + inside_reset_s) / np_env_s,
        "resets_per_1k_steps": 1000 * resets / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["ant", "humanoid", "hopper"])
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--cpus", default=None, help="CPU ids for the pool workers, e.g. 2-15 (default: all)")
    parser.add_argument("--steps", type=int, default=50, help="vector steps per block")
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    cpus = parse_cpus(args.cpus)
    # like the collector: the stepping thread lives on the pool's CPUs
    os.sched_setaffinity(0, cpus)
    rows = []
    for task in args.tasks:
        row = measure(task, args.num_envs, cpus, args.steps, args.blocks)
        rows.append(row)
        print(
            f"{task:12s} envs={row['num_envs']} cpus={row['cpus']} np_env={row['np_env_steps_per_s']:9.0f}/s "
            f"bare={row['bare_pool_steps_per_s']:9.0f}/s overhead={100 * row['overhead']:+.1f}% "
            f"(block median {100 * row['overhead_block_median']:+.1f}%; reset {100 * row['share_pool_reset']:.1f}%, "
            f"numpy {100 * row['share_numpy_python']:.1f}% of NpEnv time)"
        )
    folder = write_results("np_env_overhead", rows, {"args": vars(args), "target": "overhead <= 5%"}, args.out)
    print("wrote", folder)


if __name__ == "__main__":
    main()
