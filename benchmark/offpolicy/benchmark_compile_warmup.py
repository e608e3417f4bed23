"""Compile warm-up with Inductor's kernel-compile workers on the learner's CPUs only vs on all of the run's CPUs.

A training run compiles its hot paths on the first calls: the first inference tick, the
first with the policy's actions and the first update phase (`summary.json` -> `warmup_s`).
Inductor compiles the kernels in a worker pool that inherits the affinity of the thread
creating it. Two sides, each in a fresh process with empty Inductor and Triton caches:

* `lazy`: the learner is pinned to `--learner-cpus` first and Inductor creates its pool
  on first use (one worker per learner CPU): the behaviour before
  `offpolicy.algorithms.capture.start_compile_workers`;
* `wide`: `start_compile_workers(--cpus)` runs before the pinning, as the runner does.

The sides alternate `--repeats` times; the ratio wide/lazy of the summed warm-up is the
result. JSON and CSV go to `benchmark/outputs/compile_warmup/`, rewritten after every
measurement (`"measurements": "k of n"`), so a run cut short keeps what it measured.
Compilation is CUDA-only in this framework (forced off on CPU), so on a CPU box `--quick`
only exercises the plumbing.

    python -m benchmark.offpolicy.benchmark_compile_warmup --learner-cpus 0,1 --cpus 0-15
    python -m benchmark.offpolicy.benchmark_compile_warmup --quick       # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIDES = ("lazy", "wide")
PHASES = ("first_inference", "first_policy_inference", "first_update_phase")


def child_env(cache_root: str) -> dict[str, str]:
    """The child's environment: empty Inductor/Triton caches under `cache_root`, Inductor's own worker count."""
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"}
    env.update(
        TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_root, "inductor"),
        TRITON_CACHE_DIR=os.path.join(cache_root, "triton"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
    )
    return env


def summarize(rows: list[dict]) -> list[dict]:
    """Per algorithm and side: the median warm-up, alone and with the pool's start; ratios wide / lazy.

    The `wide` side starts the pool before the learner runs (outside the training loop in a
    run; a part of it, importing Inductor, the lazy side pays inside its first compile), so
    the ratio with the start included is the end-to-end one."""
    out = []
    for algo in dict.fromkeys(r["algo"] for r in rows):
        entry: dict = {"algo": algo}
        for key, with_pool in (("", False), ("_with_pool_start", True)):
            med = {}
            for side in SIDES:
                ok = [r for r in rows if r["algo"] == algo and r["side"] == side and "error" not in r]
                totals = [r["warmup_total_s"] + (r.get("pool_start_s", 0.0) if with_pool else 0.0) for r in ok]
                med[side] = statistics.median(totals) if totals else None
            entry[f"lazy{key}_s"], entry[f"wide{key}_s"] = med["lazy"], med["wide"]
            ratio = med["wide"] / med["lazy"] if med["wide"] is not None and med["lazy"] else None
            entry[f"wide_over_lazy{key}"] = ratio
        out.append(entry)
    return out


def run_child(args: argparse.Namespace) -> dict:
    """One side in this (fresh) process: pool, pinning, algorithm, then the three warm-up calls timed."""
    import numpy as np
    import torch
    from omegaconf import OmegaConf

    from benchmark.machine import parse_cpus
    from benchmark.offpolicy.benchmark_update_speed import (
        QUICK_SIZES,
        TASK_DIMS,
        random_replay,
        synchronize,
        task_reward_range,
    )
    from envs.core import EnvSpec
    from offpolicy.affinity import pin_process
    from offpolicy.algorithms import make_algorithm
    from offpolicy.algorithms.capture import start_compile_workers

    cpus, learner = parse_cpus(args.cpus), parse_cpus(args.learner_cpus)
    t0 = time.perf_counter()
    workers = start_compile_workers(cpus) if args.side == "wide" else 0
    pool_s = time.perf_counter() - t0
    pin_process(learner)
    torch.set_num_threads(len(learner))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    n = 64 if args.quick else args.num_envs
    obs_dim, action_dim = TASK_DIMS[args.env]
    ones = np.ones(action_dim, np.float32)
    spec = EnvSpec(
        args.env, n, {"actor": obs_dim}, action_dim, -ones, ones, 0.01, 1000, reward_range=task_reward_range(args.env)
    )
    torch.manual_seed(0)
    cfg = OmegaConf.merge(
        OmegaConf.load(REPO / "conf" / "algo" / f"{args.algo}.yaml"), QUICK_SIZES[args.algo] if args.quick else {}
    )
    algo = make_algorithm(cfg, spec, device)
    replay = random_replay(spec, n * (8 if args.quick else 64), device)
    obs = {"actor": torch.randn(n, obs_dim, device=device)}
    reset = torch.ones(n, dtype=torch.bool, device=device)

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        synchronize(device)
        return time.perf_counter() - start

    row = {"algo": args.algo, "side": args.side, "env": args.env, "device": str(device), "workers": workers}
    row["pool_start_s"] = pool_s
    row["first_inference"] = timed(lambda: algo.act(obs))  # the evaluation rows' path, compiled at tick 0
    row["first_policy_inference"] = timed(lambda: algo.explore(obs, reset))
    row["first_update_phase"] = timed(lambda: algo.update_phase(replay, algo.updates_per_step))
    row["next_update_phases"] = timed(lambda: [algo.update_phase(replay, algo.updates_per_step) for _ in range(4)])
    row["warmup_total_s"] = sum(row[p] for p in PHASES)
    return row


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algos", nargs="+", default=["fastsac", "flashsac"])
    parser.add_argument("--env", default="ant", help="observation/action widths (benchmark_update_speed.TASK_DIMS)")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--learner-cpus", default="0,1", help="the learner's CPUs (both sides)")
    parser.add_argument("--cpus", default=None, help="the run's CPUs for the wide pool (default: all available)")
    parser.add_argument("--repeats", type=int, default=2, help="lazy/wide pairs per algorithm")
    parser.add_argument("--quick", action="store_true", help="small networks, one pair (CPU smoke run)")
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument("--child", choices=SIDES, dest="side", help=argparse.SUPPRESS)
    parser.add_argument("--child-algo", dest="algo", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.side:  # inside a fresh child process
        print(json.dumps(run_child(args)), flush=True)
        return Path()

    from benchmark.machine import parse_cpus, write_results

    parse_cpus(args.learner_cpus), parse_cpus(args.cpus)  # a malformed list fails here, before any child
    settings = {k: getattr(args, k) for k in ("env", "num_envs", "learner_cpus", "cpus", "quick")}
    name = "compile_warmup_quick" if args.quick else "compile_warmup"
    out_dir = args.out_dir or REPO / "benchmark" / "outputs" / "compile_warmup"
    rows: list[dict] = []
    folder = out_dir
    repeats = 1 if args.quick else args.repeats
    planned = len(args.algos) * repeats * len(SIDES)

    def save() -> Path:  # after every measurement, so a run cut short keeps what it measured
        meta = {"settings": settings, "measurements": f"{len(rows)} of {planned}", "summary": summarize(rows)}
        return write_results(name, rows, meta, out_dir)

    for algo in args.algos:
        for i in range(repeats):
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:  # alternate which side goes first
                cmd = [sys.executable, "-m", "benchmark.offpolicy.benchmark_compile_warmup", "--child", side]
                cmd += ["--child-algo", algo, "--env", args.env, "--num-envs", str(args.num_envs)]
                cmd += ["--learner-cpus", args.learner_cpus] + (["--cpus", args.cpus] if args.cpus else [])
                cmd += ["--quick"] if args.quick else []
                with tempfile.TemporaryDirectory(prefix="compile_warmup_") as cache_root:
                    done = subprocess.run(cmd, cwd=REPO, env=child_env(cache_root), capture_output=True, text=True)
                if done.returncode == 0:
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                else:
                    row = {"algo": algo, "side": side, "error": done.stderr.strip().splitlines()[-1:]}
                row["repeat"] = i
                print(json.dumps(row), flush=True)
                rows.append(row)
                folder = save()
    for s in summarize(rows):
        print(json.dumps(s), flush=True)
    return folder


if __name__ == "__main__":
    main()
