"""Per-step Python cost of the joystick locomotion envs (`go1_joystick_flat`, `go2_joystick_flat`) around their physics.

Each task is built with `--envs` rows over `--cpus` (one pinned pool worker per CPU) and stepped as the
collector steps it: `env.step`, then the reward read that finishes the step's deferred work. The actions are
a fixed, seeded, mild sequence (uniform in +-`--action-scale`, close to the home pose), so few robots fall,
as under a trained policy. The episode clocks are staggered after `reset` (each row starts at a random
step of its 1000-step episode), so about `envs / 1000` rows truncate and reset per step, as in a long run,
instead of every row at once. Per step, from `env.last_step_timing` and clocks around the calls:

- `pool_ms`: the pool calls of the control step (the physics);
- `task_ms`: after the physics, before the resets: physics view, carry, observation, termination, commands;
- `reset_ms`: the auto-reset of the rows that ended (new episodes and their first observations) and the
  task's changes after it (pushes);
- `reward_ms`: the deferred part, timed on the read of `state.reward`;
- `overhead_ms`: everything but the physics, step plus reward read less `pool_ms`.

Each is the median over the measured steps (the mean beside it). `results_sha256` hashes every result the
steps and one-row resets handed out (observations, rewards, done flags, returns, tracking, reward terms), so two
versions of the code that should agree bit for bit can be checked to. `reset_one_row_ms` is `_reset_rows` on one
random row plus that row's observation, timed apart `--row-resets` times (each after a step whose reward was
read), and `resets_per_step` the mean number of rows reset per step.

`--trees A B ...` measures the same protocol on other source trees (each a checkout of the repository, e.g.
an older commit), each task in a fresh interpreter importing that tree, alternating trees `--rounds` times,
and reports each tree's medians and their ratios to the first tree: absolute figures are the machine's, the
ratios compare the code.

    python -m benchmark.env.joystick_step_overhead --envs 1024 --cpus 2-15 --out joystick_overhead.json
    python -m benchmark.env.joystick_step_overhead --trees <old checkout> . --rounds 2 --out compare.json
    python -m benchmark.env.joystick_step_overhead --tasks go1_joystick_flat --profile 30
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TASKS = ("go1_joystick_flat", "go2_joystick_flat")
PHASES = ("pool_ms", "task_ms", "reset_ms", "reward_ms", "overhead_ms", "step_ms")


def parse_cpus(text: str | None) -> list[int]:
    """'2-15' or '1,3,5-7' -> ids; None or '' -> every CPU available to the process."""
    if not text:
        return sorted(os.sched_getaffinity(0))
    ids: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


def mild_actions(seed: int, steps: int, envs: int, nu: int, scale: float) -> np.ndarray:
    """(steps, envs, nu) float32 uniform in +-scale: small moves around the home pose."""
    return (scale * np.random.default_rng(seed).uniform(-1.0, 1.0, size=(steps, envs, nu))).astype(np.float32)


def stagger_episodes(env, seed: int) -> None:
    """Spread the rows' episode clocks over the episode, so truncations come a few rows per step."""
    rng = np.random.default_rng(seed + 1)
    env._episode_length[:] = rng.integers(0, env.task.max_episode_steps, size=env.num_envs)


def timed_step(env, actions: np.ndarray, digest) -> dict[str, float]:
    """One collector step (step, then the reward read), split by phase, in ms; its results go into `digest`."""
    t0 = time.perf_counter_ns()
    state = env.step(actions)
    t1 = time.perf_counter_ns()
    _ = state.reward
    t2 = time.perf_counter_ns()
    pool_start, pool_end, reset_start, end = env.last_step_timing
    pool = pool_end - pool_start
    add_results(digest, state)
    return {
        "pool_ms": pool / 1e6,
        "task_ms": (reset_start - pool_end) / 1e6,
        "reset_ms": (end - reset_start) / 1e6,
        "reward_ms": (t2 - t1) / 1e6,
        "overhead_ms": (t2 - t0 - pool) / 1e6,
        "step_ms": (t1 - t0) / 1e6,
        "resets": float(np.count_nonzero(state.terminated | state.truncated)),
    }


def add_results(digest, state) -> None:
    """Feed a step's observation, reward, done flags and deferred `info` into `digest` (a hashlib object)."""
    info = state.info
    arrays = [*state.obs.values(), state.reward, state.terminated, state.truncated, info["episode_return"]]
    arrays += [info["episode_tracking"], *info["reward_terms"].values(), *info["final_obs"].values()]
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())


def measure(task: str, args: argparse.Namespace, cpus: list[int]) -> dict:
    """The per-step phases of `task` along the mild action sequence, and the one-row reset cost."""
    import envs

    env = envs.make(task, args.envs, seed=args.seed, nthread=len(cpus), cpu_ids=cpus)
    try:
        total = args.warmup + args.steps + args.row_resets
        actions = mild_actions(args.seed, total, args.envs, env.spec.action_dim, args.action_scale)
        digest = hashlib.sha256()
        env.reset()
        stagger_episodes(env, args.seed)
        for t in range(args.warmup):
            timed_step(env, actions[t], digest)
        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        steps = [timed_step(env, actions[t], digest) for t in range(args.warmup, args.warmup + args.steps)]
        if profiler:
            profiler.disable()
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(args.profile)
        rows = np.random.default_rng(args.seed + 2).integers(0, args.envs, size=args.row_resets)
        row_resets = []
        for k, row in enumerate(rows):
            timed_step(env, actions[args.warmup + args.steps + k], digest)
            ids = np.array([row], dtype=np.int32)
            t0 = time.perf_counter_ns()
            env._reset_rows(ids)
            first = env.observe(env.physics(ids), ids)
            row_resets.append((time.perf_counter_ns() - t0) / 1e6)
            for key, value in first.items():
                env._obs[key][ids] = value  # as `reset_rows`, so the next step sees them
                digest.update(value.tobytes())
    finally:
        env.close()
    result = {"task": task, "envs": args.envs, "nthread": len(cpus), "steps": args.steps}
    for phase in PHASES:
        values = [s[phase] for s in steps]
        result[phase] = float(np.median(values))
        result[f"{phase}_mean"] = float(np.mean(values))
    result["resets_per_step"] = float(np.mean([s["resets"] for s in steps]))
    result["reset_one_row_ms"] = float(np.median(row_resets)) if row_resets else None
    result["results_sha256"] = digest.hexdigest()
    return result


def run_tree(tree: str, task: str, argv: list[str]) -> dict:
    """`measure` of `task` in a fresh interpreter importing the repository checkout `tree`."""
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--tasks", task, "--worker"]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(args: argparse.Namespace, argv: list[str]) -> dict:
    """Each tree's medians over `--rounds` alternating runs, and their ratios to the first tree's."""
    runs: dict[str, dict[str, list[dict]]] = {tree: {task: [] for task in args.tasks} for tree in args.trees}
    for _ in range(args.rounds):
        for task in args.tasks:
            for tree in args.trees:
                runs[tree][task].append(run_tree(tree, task, argv))
    keys = (*PHASES, "reset_one_row_ms", "resets_per_step")
    digests = {
        tree: {task: sorted({r["results_sha256"] for r in runs[tree][task]}) for task in args.tasks}
        for tree in args.trees
    }
    summary: dict[str, dict] = {}
    for task in args.tasks:
        per_tree = {tree: {k: float(np.median([r[k] for r in runs[tree][task]])) for k in keys} for tree in args.trees}
        base = per_tree[args.trees[0]]
        summary[task] = {
            "same_results": len({d for tree in args.trees for d in digests[tree][task]}) == 1,
            "trees": per_tree,
            "ratio_to_first": {
                tree: {k: (v[k] / base[k] if base[k] else None) for k in keys} for tree, v in per_tree.items()
            },
        }
    return {"runs": runs, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--cpus", default=None, help="CPU ids of the pool workers, e.g. 2-15 (default: all)")
    parser.add_argument("--steps", type=int, default=200, help="measured steps")
    parser.add_argument("--warmup", type=int, default=60, help="steps before the measured ones")
    parser.add_argument("--row-resets", type=int, default=50, help="one-row resets timed after the steps")
    parser.add_argument("--action-scale", type=float, default=0.05, help="actions uniform in +- this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions of the measured steps")
    parser.add_argument("--trees", nargs="+", default=None, help="repository checkouts to measure and compare")
    parser.add_argument("--rounds", type=int, default=1, help="alternating runs per tree (with --trees)")
    parser.add_argument("--out", default=None, help="JSON file to write")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.envs < 1 or args.steps < 1:
        raise SystemExit(f"--envs and --steps must be >= 1, got {args.envs} and {args.steps}")
    cpus = parse_cpus(args.cpus)
    if args.worker:
        print(json.dumps(measure(args.tasks[0], args, cpus)))
        return
    if args.trees:
        argv = [a for a in sys.argv[1:]]
        argv = _without_options(argv, ("--trees", "--rounds", "--out", "--tasks"))
        result = {"protocol": vars(args), **compare(args, argv)}
        print(json.dumps(result["summary"], indent=1))
    else:
        rows = [measure(task, args, cpus) for task in args.tasks]
        result = {"protocol": vars(args), "rows": rows}
        print(json.dumps(rows, indent=1))
    if args.out:
        from benchmark.machine import machine_info

        Path(args.out).write_text(json.dumps({"machine": machine_info(), **result}, indent=1) + "\n")


def _without_options(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """`argv` less the named options and their values (those the worker gets otherwise or does not take)."""
    kept, skipping = [], False
    for arg in argv:
        if arg.startswith("--"):
            skipping = arg.split("=", 1)[0] in names
            if skipping or "=" in arg and arg.split("=", 1)[0] in names:
                continue
        if not skipping:
            kept.append(arg)
    return kept


if __name__ == "__main__":
    main()
