"""Does splitting the env pool across several processes raise throughput?

S shards (S in 1, 2, 4, ... up to the cores, plus the core count itself) split
the CPUs into disjoint contiguous blocks and the envs evenly. Each shard is a
`spawn`ed process that pins itself to its block (`os.sched_setaffinity`),
builds its own `NpEnv` with one pool worker per CPU of the block (`cpu_ids`),
resets, warms up, and then steps pre-sampled uniform actions. Every timed
repeat starts on a shared barrier so the shards run together; a shard reports
its rows x steps and its start/end on `time.monotonic()` (CLOCK_MONOTONIC,
one clock for every process). Throughput = global rows x steps / paired wall
time (last end - first start over the shards); the median over repeats is
reported, with its speed-up over S=1 for the same task and env count.

Evidence for a later decision; there is no production multi-shard path.

    python -m benchmark.env.benchmark_np_env_shard_throughput --tasks ant humanoid --num-envs 1024 4096 --cpus 0-15
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as queue_mod
import statistics
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmark.machine import OUTPUTS, parse_cpus, write_results

NAME = "np_env_shard_throughput"
ROW_KEYS = (
    "task",
    "total_envs",
    "shards",
    "cpus_per_shard",
    "envs_per_shard",
    "cpu_blocks",
    "steps",
    "repeats",
    "env_steps_per_s",
    "speedup_vs_s1",
    "wall_s",
    "env_steps_per_s_all",
    "start_skew_s",
)
ACTION_BATCHES = 32
"""Distinct pre-sampled action batches per shard, cycled (bounds memory at large env counts)."""


def partition_cpus(cpus: Sequence[int], shards: int) -> list[list[int]]:
    """Split `cpus` (in the given order) into `shards` contiguous disjoint blocks; sizes differ by at most 1.

    The first `len(cpus) % shards` blocks get the extra CPU.
    """
    cpus = [int(c) for c in cpus]
    if len(set(cpus)) != len(cpus):
        raise ValueError(f"cpus {cpus} contain duplicates")
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    if shards > len(cpus):
        raise ValueError(f"cannot split {len(cpus)} CPUs {cpus} into {shards} shards: need at least one CPU per shard")
    base, extra = divmod(len(cpus), shards)
    blocks, start = [], 0
    for i in range(shards):
        size = base + (1 if i < extra else 0)
        blocks.append(cpus[start : start + size])
        start += size
    return blocks


def split_envs(total: int, shards: int) -> list[int]:
    """`total` envs over `shards` shards, the remainder going to the first shards."""
    if total < shards:
        raise ValueError(f"{total} envs cannot be split over {shards} shards (need at least one env per shard)")
    base, extra = divmod(total, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]


def shard_counts(num_cpus: int) -> list[int]:
    """1, 2, 4, ... up to `num_cpus`, plus `num_cpus` itself when it is not a power of two."""
    if num_cpus < 1:
        raise ValueError(f"need at least one CPU, got {num_cpus}")
    counts, s = [], 1
    while s <= num_cpus:
        counts.append(s)
        s *= 2
    if counts[-1] != num_cpus:
        counts.append(num_cpus)
    return counts


def _block_text(block: Sequence[int]) -> str:
    return f"{block[0]}-{block[-1]}" if len(block) > 1 else str(block[0])


def _shard_main(index, task, num_envs, cpus, steps, warmup, repeats, seed, barrier, results, barrier_timeout):
    """One shard process: pin, build, warm up, then `repeats` barrier-aligned timed runs."""
    env = None
    try:
        os.sched_setaffinity(0, cpus)
        import envs  # after pinning, so nothing native starts threads elsewhere

        env = envs.make(task, num_envs, seed=seed + index, cpu_ids=cpus)
        spec = env.spec
        rng = np.random.default_rng(seed + 1000 + index)
        n_batches = max(1, min(ACTION_BATCHES, steps))
        actions = rng.uniform(spec.action_low, spec.action_high, size=(n_batches, num_envs, spec.action_dim))
        actions = actions.astype(np.float32)
        env.reset()
        for t in range(warmup):
            env.step(actions[t % n_batches])
        spans = []
        for _ in range(repeats):
            barrier.wait(barrier_timeout)
            t_start = time.monotonic()
            for t in range(steps):
                env.step(actions[t % n_batches])
            spans.append((t_start, time.monotonic()))
        results.put(
            {
                "index": index,
                "rows": num_envs,
                "steps": steps,
                "spans": spans,
                "affinity": sorted(os.sched_getaffinity(0)),
                "workers": list(env.pool.worker_cpu_ids()),
            }
        )
    except BaseException:
        barrier.abort()
        results.put({"index": index, "error": traceback.format_exc()})
    finally:
        if env is not None:
            env.close()


def run_shards(
    task: str,
    total_envs: int,
    cpus: Sequence[int],
    shards: int,
    steps: int,
    warmup: int = 10,
    repeats: int = 3,
    seed: int = 0,
    timeout: float = 900.0,
) -> dict:
    """Run `shards` pinned shard processes together; return a result row (speedup_vs_s1 left to the caller)."""
    if steps < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1, repeats >= 1, warmup >= 0; got {steps}, {repeats}, {warmup}")
    blocks = partition_cpus(cpus, shards)
    env_counts = split_envs(total_envs, shards)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(shards)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_shard_main,
            args=(i, task, env_counts[i], blocks[i], steps, warmup, repeats, seed, barrier, results, timeout),
            daemon=True,
        )
        for i in range(shards)
    ]
    for p in procs:
        p.start()
    reports, deadline = [], time.monotonic() + timeout
    try:
        while len(reports) < shards:
            try:
                reports.append(results.get(timeout=max(0.1, min(1.0, deadline - time.monotonic()))))
            except queue_mod.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{task} x{total_envs} S={shards}: shards did not report in {timeout:.0f}s"
                    ) from None
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and results.empty():
                    raise RuntimeError(
                        f"{task} x{total_envs} S={shards}: shard exited with code {dead[0].exitcode}"
                    ) from None
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join()
    errors = [r for r in reports if "error" in r]
    if errors:
        raise RuntimeError(f"{task} x{total_envs} S={shards}: shard {errors[0]['index']} failed:\n{errors[0]['error']}")
    reports.sort(key=lambda r: r["index"])
    for r, block in zip(reports, blocks):
        if r["affinity"] != sorted(block) or r["workers"] != list(block):
            raise RuntimeError(
                f"shard {r['index']} not pinned to {block}: affinity {r['affinity']}, pool workers {r['workers']}"
            )
    work = sum(r["rows"] * r["steps"] for r in reports)
    per_repeat, walls, skews = [], [], []
    for k in range(repeats):
        starts = [r["spans"][k][0] for r in reports]
        ends = [r["spans"][k][1] for r in reports]
        wall = max(ends) - min(starts)
        walls.append(wall)
        skews.append(max(starts) - min(starts))
        per_repeat.append(work / wall)
    median = statistics.median(per_repeat)
    k_med = min(range(repeats), key=lambda k: abs(per_repeat[k] - median))
    return {
        "task": task,
        "total_envs": total_envs,
        "shards": shards,
        "cpus_per_shard": len(blocks[0])
        if len({len(b) for b in blocks}) == 1
        else "|".join(str(len(b)) for b in blocks),
        "envs_per_shard": env_counts[0] if len(set(env_counts)) == 1 else "|".join(map(str, env_counts)),
        "cpu_blocks": " ".join(_block_text(b) for b in blocks),
        "steps": steps,
        "repeats": repeats,
        "env_steps_per_s": median,
        "speedup_vs_s1": None,
        "wall_s": walls[k_med],
        "env_steps_per_s_all": " ".join(f"{x:.0f}" for x in per_repeat),
        "start_skew_s": max(skews),
    }


def add_speedups(rows: list[dict]) -> list[dict]:
    """Fill `speedup_vs_s1` = throughput / throughput at S=1 of the same task and env count (None without S=1)."""
    base = {(r["task"], r["total_envs"]): r["env_steps_per_s"] for r in rows if r["shards"] == 1}
    for r in rows:
        ref = base.get((r["task"], r["total_envs"]))
        r["speedup_vs_s1"] = 1.0 if r["shards"] == 1 else (r["env_steps_per_s"] / ref if ref else None)
    return rows


def run(
    tasks: Sequence[str],
    num_envs: Sequence[int],
    cpus: Sequence[int],
    shards: Sequence[int] | None = None,
    steps: int = 200,
    warmup: int = 20,
    repeats: int = 3,
    seed: int = 0,
    out: str | os.PathLike | None = None,
    args: dict | None = None,
    verbose: bool = True,
) -> tuple[list[dict], Path]:
    """Measure every task x env count x shard count; write JSON + CSV into `out`; return (rows, folder)."""
    cpus = list(cpus)
    counts = list(shards) if shards else shard_counts(len(cpus))
    for s in counts:
        partition_cpus(cpus, s)  # fail before any work on an impossible count
    loadavg_before = os.getloadavg()
    rows = []
    for task in tasks:
        for n in num_envs:
            for s in counts:
                row = run_shards(task, n, cpus, s, steps, warmup, repeats, seed)
                rows.append(row)
                if verbose:
                    print(
                        f"  {task:10s} envs={n:6d} S={s:3d} {row['env_steps_per_s']:10.0f} env-steps/s "
                        f"wall={row['wall_s']:.2f}s skew={1e3 * row['start_skew_s']:.1f}ms",
                        flush=True,
                    )
    add_speedups(rows)
    meta = {
        "args": args or {},
        "cpus": cpus,
        "shard_counts": counts,
        "loadavg_before": loadavg_before,
        "loadavg_after": os.getloadavg(),
        "definition": "env_steps_per_s = sum over shards of rows x steps / (max t_end - min t_start), "
        "median over repeats; shard i pinned to cpu block i, one pool worker per CPU; speedup_vs_s1 = "
        "env_steps_per_s / env_steps_per_s at S=1 for the same task and total_envs",
    }
    folder = write_results(NAME, rows, meta, out)
    return rows, folder


def format_table(rows: list[dict]) -> str:
    lines = [f"{'task':10s} {'envs':>6s} {'S':>3s} {'cpu/S':>5s} {'env-steps/s':>12s} {'speedup':>8s} {'wall_s':>7s}"]
    for r in rows:
        sp = "-" if r["speedup_vs_s1"] is None else f"{r['speedup_vs_s1']:.2f}x"
        lines.append(
            f"{r['task']:10s} {r['total_envs']:6d} {r['shards']:3d} {str(r['cpus_per_shard']):>5s} "
            f"{r['env_steps_per_s']:12.0f} {sp:>8s} {r['wall_s']:7.2f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["ant", "humanoid"])
    parser.add_argument("--num-envs", nargs="+", type=int, default=[1024, 4096], help="total envs over all shards")
    parser.add_argument("--cpus", default=None, help="CPU ids to split, e.g. 0-15 (default: all available)")
    parser.add_argument("--shards", nargs="+", type=int, default=None, help="shard counts (default: 1,2,4,.. cores)")
    parser.add_argument("--steps", type=int, default=200, help="timed vector steps per shard per repeat")
    parser.add_argument("--warmup", type=int, default=20, help="untimed vector steps per shard after reset")
    parser.add_argument("--repeats", type=int, default=3, help="barrier-aligned timed runs; the median is reported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tag", default=None, help="output subfolder (default: '<cpu_count>core')")
    parser.add_argument("--out", default=None, help="output folder (overrides --tag)")
    args = parser.parse_args(argv)
    cpus = parse_cpus(args.cpus)
    out = args.out or OUTPUTS / NAME / (args.tag or f"{os.cpu_count()}core")
    rows, folder = run(
        args.tasks, args.num_envs, cpus, args.shards, args.steps, args.warmup, args.repeats, args.seed, out, vars(args)
    )
    print("wrote", folder)
    print(format_table(rows))


if __name__ == "__main__":
    main()
