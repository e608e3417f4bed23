"""Env-steps per second of `go1_joystick_flat` beside envpool's port of the same Playground task.

Both sides step the same number of envs on the same CPUs with the same number of threads, along the same
seeded sequence of uniform actions in [-1, 1] (so both fall and reset about equally often). Three figures:

- `ours`: `go1_joystick_flat` as the collector steps it (`env.step`, then the reward read that finishes the
  step's deferred work), randomisation and observation noise at their defaults (on);
- `ours_bare`: the physics alone of the same steps: the pool calls of its control step (one substep per call,
  carrying the solver's warm start) along the same actions from where `ours` ended, no observation, reward,
  command or reset work (a robot that falls stays down, so this is a lead, not the same-trajectory reference
  of benchmark/offpolicy/trajectory_replay.py);
- `envpool`: envpool's `Go1JoystickFlatTerrain-v1`, synchronous `step` of the whole batch, its defaults.

envpool is not a project dependency; its side runs in the interpreter given by `--envpool-python` (default:
this one), so it can live in an environment of its own. Only numpy and envpool are imported there.

    python -m benchmark.env.go1_throughput --envs 1024 --cpus 2-15 --out go1_throughput.json
    python -m benchmark.env.go1_throughput --envs 256 --cpus 0-1 --envpool-python <env>/bin/python \
        --out benchmark/outputs/checks/parity.json --key go1_envpool_throughput
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TASK_ID = "Go1JoystickFlatTerrain-v1"
NU = 12


def action_sequence(seed: int, steps: int, envs: int) -> np.ndarray:
    """(steps, envs, 12) float32 uniform in [-1, 1]: the same on both sides."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(steps, envs, NU)).astype(np.float32)


def parse_cpus(text: str) -> list[int]:
    """'2-15' or '2,4,6-9' -> ids."""
    ids: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


def rate(envs: int, steps: int, seconds: float) -> float:
    """Env-steps per second of `steps` batch steps of `envs` envs."""
    return envs * steps / seconds


def time_ours(args: argparse.Namespace, cpus: list[int]) -> dict:
    """`go1_joystick_flat` stepped as the collector steps it, then its physics alone along the same actions."""
    import envs

    actions = action_sequence(args.seed, args.warmup + args.steps, args.envs)
    env = envs.make("go1_joystick_flat", args.envs, seed=args.seed, nthread=len(cpus), cpu_ids=cpus)
    try:
        env.reset()
        for t in range(args.warmup):
            _ = env.step(actions[t]).reward
        t0 = time.perf_counter()
        for t in range(args.warmup, args.warmup + args.steps):
            _ = env.step(actions[t]).reward  # the read finishes the step's deferred reward work
        stepped = time.perf_counter() - t0
        snap = env.snapshot()
        state, warm = snap["state"], snap["warmstart"]
        t0 = time.perf_counter()
        for t in range(args.warmup, args.warmup + args.steps):
            state, warm = env.bare_step(state, warm, actions[t].astype(np.float64))  # the pool calls of a step only
        bare = time.perf_counter() - t0
    finally:
        env.close()
    return {
        "ours_env_steps_per_s": rate(args.envs, args.steps, stepped),
        "ours_bare_env_steps_per_s": rate(args.envs, args.steps, bare),
    }


def time_envpool(args: argparse.Namespace, cpus: list[int]) -> dict:
    """envpool's Go1 task on the same CPUs and threads (run in the envpool interpreter)."""
    import envpool

    actions = action_sequence(args.seed, args.warmup + args.steps, args.envs)
    env = envpool.make(
        TASK_ID,
        env_type="gymnasium",
        num_envs=args.envs,
        num_threads=len(cpus),
        thread_affinity_offset=cpus[0],
        seed=args.seed,
    )
    try:
        env.reset()
        for t in range(args.warmup):
            env.step(actions[t])
        t0 = time.perf_counter()
        for t in range(args.warmup, args.warmup + args.steps):
            env.step(actions[t])
        seconds = time.perf_counter() - t0
    finally:
        env.close()
    return {"envpool_env_steps_per_s": rate(args.envs, args.steps, seconds), "envpool": envpool.__version__}


def run_envpool(args: argparse.Namespace) -> dict:
    """The envpool side in its own interpreter; its figures as a dict."""
    cmd = [args.envpool_python, str(Path(__file__).resolve()), "--side", "envpool", "--envs", str(args.envs)]
    cmd += ["--cpus", args.cpus, "--steps", str(args.steps), "--warmup", str(args.warmup), "--seed", str(args.seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:  # e.g. killed for memory: envpool copies the whole model, textures too, per env
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"the envpool side exited with status {proc.returncode}: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cpus = parse_cpus(args.cpus)
    unusable = sorted(set(cpus) - os.sched_getaffinity(0))
    if unusable:
        raise SystemExit(f"--cpus {args.cpus}: CPUs {unusable} are not available to this process")
    os.sched_setaffinity(0, cpus)
    if args.side == "envpool":
        print(json.dumps(time_envpool(args, cpus)))
        return 0
    import platform

    import mujoco

    report = {
        "task": TASK_ID,
        "envs": args.envs,
        "threads": len(cpus),
        "cpus": cpus,
        "steps_timed": args.steps,
        "warmup_steps": args.warmup,
        "repeats": args.repeats,
        "mujoco": mujoco.__version__,
        "python": platform.python_version(),
        "runs": [],
    }
    for _ in range(args.repeats):  # the sides alternate, so a drift of the machine touches both
        run = time_ours(args, cpus)
        if not args.skip_envpool:
            run |= run_envpool(args)
            run["ours_to_envpool"] = run["ours_env_steps_per_s"] / run["envpool_env_steps_per_s"]
        run["ours_to_ours_bare"] = run["ours_env_steps_per_s"] / run["ours_bare_env_steps_per_s"]
        report["runs"].append(run)
    for key in ("ours_to_envpool", "ours_to_ours_bare"):
        if key in report["runs"][0]:
            report[f"median_{key}"] = float(np.median([r[key] for r in report["runs"]]))
    text = json.dumps(report, indent=1)
    if args.out:
        if args.key:
            from benchmark.machine import write_json_entry

            write_json_entry(args.out, args.key, report)
        else:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", choices=("ours", "envpool"), default="ours", help="envpool: this process times envpool")
    p.add_argument("--envs", type=int, default=1024)
    p.add_argument("--cpus", default=",".join(map(str, sorted(os.sched_getaffinity(0)))))
    p.add_argument("--steps", type=int, default=200, help="timed batch steps per side")
    p.add_argument("--warmup", type=int, default=20, help="untimed batch steps first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--envpool-python", default=sys.executable, help="interpreter of an environment with envpool")
    p.add_argument("--skip-envpool", action="store_true", help="time our side only")
    p.add_argument("--repeats", type=int, default=3, help="times each side is timed, alternating")
    p.add_argument("--out", default=None, help="write the JSON here too")
    p.add_argument("--key", default=None, help="with --out: set this entry of the JSON object in that file")
    return p.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
