"""Update throughput and inference-tick latency of the off-policy algorithms, per execution mode.

For each algorithm at its default sizes (FastSAC: batch 8192, 8 updates per phase;
FlashSAC: batch 2048, 2 updates per phase) and each mode (eager, torch.compile,
CUDA graphs, both) this measures

* updates/s of `update_phase` sampling from a device replay filled with random data;
* the latency of one inference tick for `--num-envs` envs: host numpy observations ->
  pinned staging -> device -> `explore` -> host numpy actions.

Results (plus the machine: GPU name, torch and CUDA versions) go to
`benchmark/outputs/update_speed/` as JSON and CSV. `--quick` uses small sizes so the
script runs on CPU; there compile and CUDA graphs are unavailable (the algorithms
force them off) and only the eager mode is measured.

    python benchmark/offpolicy/benchmark_update_speed.py              # GPU, full sizes
    python benchmark/offpolicy/benchmark_update_speed.py --quick      # CPU smoke run
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from envs.core import EnvSpec  # noqa: E402
from offpolicy.algorithms import make_algorithm  # noqa: E402
from offpolicy.replay_buffer import ReplayBuffer  # noqa: E402

OUT_DIR = REPO / "benchmark" / "outputs" / "update_speed"
# observation / action widths of this framework's tasks (envs.make(name).spec)
TASK_DIMS = {"ant": (27, 8), "halfcheetah": (17, 6), "hopper": (11, 3), "humanoid": (45, 17), "walker2d": (17, 6)}
MODES = {
    "eager": {"compile": False, "cuda_graphs": False},
    "compile": {"compile": True, "cuda_graphs": False},
    "cudagraphs": {"compile": False, "cuda_graphs": True},
    "compile+cudagraphs": {"compile": True, "cuda_graphs": True},
}
QUICK_SIZES = {
    "fastsac": {"batch_size": 256, "critic_hidden_dim": 64, "actor_hidden_dim": 32},
    "flashsac": {"batch_size": 256, "critic_hidden_dim": 32, "actor_hidden_dim": 16},
}


def machine_description(device: torch.device) -> dict:
    """GPU, library versions and host, for the record."""
    info = {
        "device": str(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": torch.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=torch.cuda.get_device_name(device), gpu_memory_gib=round(props.total_memory / 2**30, 1))
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["git_commit"] = "unknown"
    return info


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def task_reward_range(env: str) -> tuple[float, float]:
    """The task's per-step reward bounds: FastSAC sizes its C51 support from them, as in a run."""
    from envs.gymnasium import TASKS

    return TASKS[env]().reward_range


def random_replay(spec: EnvSpec, rows: int, device: torch.device) -> ReplayBuffer:
    """A device replay of `rows` random transitions, written a vector step at a time."""
    replay = ReplayBuffer(rows, spec.obs_dims, spec.action_dim, device, num_envs=spec.num_envs)
    n = spec.num_envs
    for _ in range(replay.capacity // n):
        obs = {k: torch.randn(n, d, device=device) for k, d in spec.obs_dims.items()}
        next_obs = {k: torch.randn(n, d, device=device) for k, d in spec.obs_dims.items()}
        terminated = (torch.rand(n, device=device) < 0.01).float()
        replay.add(
            obs,
            torch.rand(n, spec.action_dim, device=device) * 2 - 1,
            torch.randn(n, device=device),
            next_obs,
            terminated,
            torch.zeros(n, device=device),
        )
    return replay


def time_updates(algo, replay, phases: int, warmup: int, device: torch.device) -> dict:
    """Warm up (compile, capture), then time `phases` update phases of the default size."""
    k = algo.updates_per_step
    start = time.perf_counter()
    for _ in range(warmup):
        metrics = algo.update_phase(replay, k)
    synchronize(device)
    warmup_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(phases):
        metrics = algo.update_phase(replay, k)
    synchronize(device)
    elapsed = time.perf_counter() - start
    finite = all(bool(torch.isfinite(v)) for v in metrics.values())
    return {
        "updates_per_phase": k,
        "updates_per_s": phases * k / elapsed,
        "phase_ms": 1e3 * elapsed / phases,
        "warmup_s": warmup_s,
        "metrics_finite": finite,
    }


def time_inference(algo, spec: EnvSpec, ticks: int, warmup: int, device: torch.device) -> dict:
    """Latency of host obs -> device -> explore -> host actions, one tick at a time."""
    n, obs_dim = spec.num_envs, spec.obs_dims["actor"]
    host_obs = np.random.default_rng(0).standard_normal((n, obs_dim)).astype(np.float32)
    host_reset = np.zeros(n, dtype=bool)
    pin = device.type == "cuda"
    obs_stage = torch.empty(n, obs_dim, pin_memory=pin)
    reset_stage = torch.empty(n, dtype=torch.bool, pin_memory=pin)
    action_stage = torch.empty(n, spec.action_dim, pin_memory=pin)
    latencies = []
    for tick in range(warmup + ticks):
        start = time.perf_counter()
        obs_stage.numpy()[:] = host_obs
        reset_stage.numpy()[:] = host_reset
        obs = {"actor": obs_stage.to(device, non_blocking=True)}
        action = algo.explore(obs, reset_stage.to(device, non_blocking=True))
        action_stage.copy_(action, non_blocking=True)
        synchronize(device)
        host_action = action_stage.numpy().copy()
        if tick >= warmup:
            latencies.append(time.perf_counter() - start)
        host_reset = np.abs(host_action[:, 0]) > 0.999  # some envs "reset": exercises the per-env state path
    lat_ms = 1e3 * np.asarray(latencies)
    return {
        "num_envs": n,
        "infer_mean_ms": float(lat_ms.mean()),
        "infer_p50_ms": float(np.percentile(lat_ms, 50)),
        "infer_p90_ms": float(np.percentile(lat_ms, 90)),
        "infer_p99_ms": float(np.percentile(lat_ms, 99)),
    }


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="small sizes and few iterations (runs on CPU)")
    parser.add_argument("--algos", nargs="+", default=["fastsac", "flashsac"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--env", default="humanoid", choices=sorted(TASK_DIMS), help="observation/action widths")
    parser.add_argument("--num-envs", type=int, default=1024, help="envs per inference tick and per replay write")
    parser.add_argument("--replay-rows", type=int, default=None, help="random transitions in the replay")
    parser.add_argument("--phases", type=int, default=None, help="timed update phases")
    parser.add_argument("--warmup-phases", type=int, default=5, help="untimed phases (compile, capture)")
    parser.add_argument("--ticks", type=int, default=None, help="timed inference ticks")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    quick = args.quick
    num_envs = min(args.num_envs, 64) if quick else args.num_envs
    replay_rows = args.replay_rows or (num_envs * 40 if quick else 1_048_576)
    phases = args.phases or (3 if quick else 100)
    ticks = args.ticks or (20 if quick else 500)
    warmup = min(args.warmup_phases, 2) if quick else args.warmup_phases
    obs_dim, action_dim = TASK_DIMS[args.env]
    spec = EnvSpec(
        args.env,
        num_envs,
        {"actor": obs_dim},
        action_dim,
        -np.ones(action_dim, np.float32),
        np.ones(action_dim, np.float32),
        0.01,
        1000,
        reward_range=task_reward_range(args.env),
    )

    torch.manual_seed(0)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    print(f"filling a replay of {replay_rows} rows on {device} ...", flush=True)
    replay = random_replay(spec, replay_rows, device)
    results = []
    for algo_name in args.algos:
        for mode in args.modes:
            row = {"algo": algo_name, "mode": mode, "env": args.env, "device": str(device), "quick": quick}
            if device.type != "cuda" and mode != "eager":
                results.append({**row, "skipped": "compile and CUDA graphs are CUDA-only (forced off on CPU)"})
                continue
            cfg = OmegaConf.create({"name": algo_name, **MODES[mode], **(QUICK_SIZES[algo_name] if quick else {})})
            try:
                algo = make_algorithm(cfg, spec, device)
                row["batch_size"] = algo.batch_size
                row.update(time_updates(algo, replay, phases, warmup, device))
                row.update(time_inference(algo, spec, ticks, warmup, device))
                if algo.graph_errors:  # captures that fell back to eager: this row did not measure graphs
                    row["graph_errors"] = json.dumps(algo.graph_errors)
            except Exception as exc:  # keep measuring the other modes; the error is part of the record
                row["error"] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
            print(json.dumps(row), flush=True)
            results.append(row)
            del cfg
            if device.type == "cuda":
                torch.cuda.empty_cache()

    args.out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    stem = args.out_dir / f"update_speed_{device.type}{'_quick' if quick else ''}_{stamp}"
    record = {
        "machine": machine_description(device),
        "settings": {
            "env": args.env,
            "num_envs": num_envs,
            "replay_rows": replay_rows,
            "phases": phases,
            "warmup_phases": warmup,
            "ticks": ticks,
            "quick": quick,
        },
        "results": results,
    }
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2))
    columns = sorted({key for row in results for key in row}, key=lambda c: (c not in ("algo", "mode"), c))
    with stem.with_suffix(".csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(results)
    print(f"wrote {stem}.json and .csv")
    return stem


if __name__ == "__main__":
    main()
