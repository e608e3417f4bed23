"""Does the learner's side of the host slow the collector's physics? The same ticks, alone and beside a learner.

Several 15-minute runs stepped their recorded window's physics slower than the bare replay of exactly the same
states and actions on the same cores after the run, with no other process and no steal on those cores
(docs/results/dmc.md, "What binds the speed"). This benchmark separates the learner from the rest of the host:
it steps one fixed stretch of a task's physics (`--ticks` vector steps of `--num-envs` envs from one snapshot,
with one fixed sequence of actions, so every repetition does bit-for-bit the same work, checked by the final
state) on the collector's CPUs, under three conditions, in turn, for `--rounds` rounds:

- `alone`: nothing else runs on purpose;
- `spin`: one busy-looping process per learner CPU (the learner's keep-awake wait spins; shared power and clocks);
- `learner`: a learner process pinned to the learner CPUs runs the algorithm's gradient update phases on the
  device, with the task's defaults (batch, network sizes, updates per vector step, compile and CUDA graphs as in a
  run) from a device replay of random transitions, nonstop while the condition lasts.

Per condition: the median seconds of the stretch over the rounds, its env-steps/s, the ratio to `alone`, and where
the collector's CPUs' time went (`offpolicy.runtime.cpu_accounting`: this process, other processes, steal, idle)
with the CPU time this process spent per tick; for `learner`, the updates/s the learner made meanwhile. Writes
`physics_interference.json` into `--out`.

    python -m benchmark.offpolicy.physics_interference --task dmc_humanoid_walk --algo flashsac   # 16-core GPU host
    python -m benchmark.offpolicy.physics_interference --quick --task hopper --collector-cpus 1 --learner-cpus 0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.machine import machine_info, parse_cpus  # noqa: E402
from benchmark.offpolicy.trajectory_replay import cpus_kept_busy  # noqa: E402
from offpolicy.runtime import cpu_accounting  # noqa: E402

CONDITIONS = ("alone", "spin", "learner")


def stretch(env: Any, snapshot: dict[str, Any], actions: np.ndarray, cpus: list[int]) -> dict[str, Any]:
    """Step `actions` from `snapshot`: seconds, the CPUs' shares over the stretch, and the final physics state."""
    env.restore(snapshot)
    before = cpu_accounting.sample(cpus)
    t0 = time.perf_counter()
    for a in actions:
        env.step(a)
    seconds = time.perf_counter() - t0
    shares = cpu_accounting.shares_between(before, cpu_accounting.sample(cpus))
    return {"seconds": seconds, "cpu_share": shares, "state": env.snapshot()["state"]}


def learner_command(args: argparse.Namespace, control: Path) -> list[str]:
    cmd = [sys.executable, "-m", "benchmark.offpolicy.physics_interference", "--learner-worker", str(control),
           "--task", args.task, "--algo", args.algo, "--learner-cpus", args.learner_cpus, "--device", args.device]  # fmt: skip
    return cmd + (["--quick"] if args.quick else [])


def learner_worker(args: argparse.Namespace) -> int:
    """The `learner` condition's process: pinned to the learner CPUs, builds the algorithm as a run does, fills a
    random device replay, warms up (compile, capture), writes `ready`, then runs update phases while `go` exists
    and idles (5-ms sleeps) otherwise, until `stop`; writes `learner.json` (updates and seconds while going)."""
    control = Path(args.learner_worker)
    cpus = parse_cpus(args.learner_cpus)
    os.sched_setaffinity(0, cpus)
    import torch
    from hydra import compose, initialize_config_dir

    import envs
    from benchmark.offpolicy.benchmark_update_speed import QUICK_SIZES, random_replay
    from offpolicy.algorithms import make_algorithm

    torch.set_num_threads(len(cpus))
    device = torch.device(args.device)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", [f"algo={args.algo}", f"env={args.task}"])
    algo_cfg = cfg.algo
    if args.quick:
        algo_cfg.update({**QUICK_SIZES[args.algo], "compile": False, "cuda_graphs": False})
    num_envs = 16 if args.quick else int(cfg.env.num_envs)
    probe = envs.make(args.task, num_envs=1)  # the task's dimensions and reward range; the run's row count
    spec = dataclasses.replace(probe.spec, num_envs=num_envs)
    probe.close()
    algo = make_algorithm(algo_cfg, spec, device)
    updates = int(cfg.train.get("updates_per_step") or algo.updates_per_step)
    replay = random_replay(spec, num_envs * (8 if args.quick else 1024), device)
    for _ in range(3):  # compile and capture, as a run's first phases do
        algo.update_phase(replay, updates)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    (control / "ready").write_text("1")
    going_s, phases = 0.0, 0
    parent = os.getppid()
    while not (control / "stop").exists():
        if os.getppid() != parent:  # the measuring process is gone: no orphan left training
            return 1
        if not (control / "go").exists():
            time.sleep(0.005)
            continue
        t0 = time.perf_counter()
        while (control / "go").exists() and os.getppid() == parent:
            algo.update_phase(replay, updates)
            phases += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        going_s += time.perf_counter() - t0
    result = {"updates_per_phase": updates, "phases": phases, "going_s": going_s, "batch_size": algo.batch_size}
    (control / "learner.json").write_text(json.dumps(result))
    return 0


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the learner process exited with status {proc.returncode} before {path.name}")
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"the learner process did not write {path.name} within {timeout_s:.0f} s")
        time.sleep(0.05)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Build the env on the collector CPUs, start the learner process, run the rounds; the figures as a dict."""
    import envs

    collector, learner = parse_cpus(args.collector_cpus), parse_cpus(args.learner_cpus)
    if set(collector) & set(learner):
        raise SystemExit(f"--collector-cpus {collector} and --learner-cpus {learner} overlap; give disjoint sets")
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, collector)
    control = Path(tempfile.mkdtemp(prefix="physics_interference_"))
    proc = subprocess.Popen(learner_command(args, control), cwd=REPO)
    env = envs.make(args.task, num_envs=args.num_envs, seed=0, nthread=len(collector), cpu_ids=collector)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CONDITIONS}
    try:
        rng = np.random.default_rng(0)
        spec = env.spec
        low, high = np.asarray(spec.action_low), np.asarray(spec.action_high)
        env.reset()
        for _ in range(args.lead_ticks):  # off the initial states: resets and varied contacts in the stretch
            env.step(rng.uniform(low, high, (args.num_envs, spec.action_dim)).astype(np.float32))
        snapshot = env.snapshot()
        actions = rng.uniform(low, high, (args.ticks, args.num_envs, spec.action_dim)).astype(np.float32)
        stretch(env, snapshot, actions, collector)  # warm-up: page in the pool's data
        _wait_for(control / "ready", proc, args.learner_timeout_s)
        for _ in range(args.rounds):
            for condition in CONDITIONS:
                if condition == "spin":
                    with cpus_kept_busy(learner):
                        runs[condition].append(stretch(env, snapshot, actions, collector))
                elif condition == "learner":
                    (control / "go").write_text("1")
                    time.sleep(args.settle_s)  # the update loop in its steady state
                    runs[condition].append(stretch(env, snapshot, actions, collector))
                    (control / "go").unlink()
                else:
                    runs[condition].append(stretch(env, snapshot, actions, collector))
        (control / "stop").write_text("1")
        proc.wait(timeout=120)
        learner_stats = json.loads((control / "learner.json").read_text())
    finally:
        env.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(control, ignore_errors=True)  # the control files, once the learner is gone
        os.sched_setaffinity(0, saved)
    reference = runs["alone"][0]["state"]
    steps = args.ticks * args.num_envs
    alone_s = statistics.median(r["seconds"] for r in runs["alone"])
    out: dict[str, Any] = {
        "task": args.task,
        "algo": args.algo,
        "num_envs": args.num_envs,
        "ticks": args.ticks,
        "rounds": args.rounds,
        "collector_cpus": collector,
        "learner_cpus": learner,
        "device": args.device,
        "same_work": all(np.array_equal(r["state"], reference) for rs in runs.values() for r in rs),
        "conditions": {},
    }
    for condition, rs in runs.items():
        seconds = statistics.median(r["seconds"] for r in rs)
        own_ms = [
            r["cpu_share"]["own"] * len(collector) * 1e3 * r["seconds"] / args.ticks for r in rs if r["cpu_share"]
        ]
        out["conditions"][condition] = {
            "seconds": [r["seconds"] for r in rs],
            "median_seconds": seconds,
            "env_steps_per_s": steps / seconds,
            "seconds_over_alone": seconds / alone_s,
            "cpu_ms_per_tick": statistics.median(own_ms) if own_ms else None,
            "cpu_share": [r["cpu_share"] for r in rs],
        }
    going = learner_stats["going_s"]
    learner_stats["updates_per_s"] = (
        learner_stats["phases"] * learner_stats["updates_per_phase"] / going if going else 0.0
    )
    out["conditions"]["learner"]["learner"] = learner_stats
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="dmc_humanoid_walk")
    p.add_argument("--algo", default="flashsac", choices=("fastsac", "flashsac"))
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--ticks", type=int, default=200, help="vector steps in the stretch (default 200, as a window)")
    p.add_argument("--lead-ticks", type=int, default=100, help="random steps before the snapshot (default 100)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--collector-cpus", default="2-15")
    p.add_argument("--learner-cpus", default="0-1")
    p.add_argument("--device", default=None, help="the learner's device (default: cuda when present, else cpu)")
    p.add_argument("--settle-s", type=float, default=1.0, help="the learner's head start in its condition")
    p.add_argument("--learner-timeout-s", type=float, default=300.0, help="for its compile and replay fill")
    p.add_argument("--quick", action="store_true", help="small learner, eager (a CPU machine)")
    p.add_argument("--out", default=None, help="folder for physics_interference.json (default: print only)")
    p.add_argument("--learner-worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.learner_worker:
        return learner_worker(args)
    result = measure(args) | {"machine": machine_info()}
    for condition, row in result["conditions"].items():
        print(f"[physics_interference] {condition:8s} {row['env_steps_per_s']:>12,.0f} env-steps/s  "
              f"seconds x{row['seconds_over_alone']:.3f} of alone's  cpu-ms/tick {row['cpu_ms_per_tick']:.1f}", flush=True)  # fmt: skip
    print(f"[physics_interference] same work in every stretch: {result['same_work']}; learner: "
          f"{result['conditions']['learner']['learner']}", flush=True)  # fmt: skip
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "physics_interference.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["same_work"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
