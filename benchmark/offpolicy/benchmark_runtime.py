"""Runtime speed, as ratios measured in one run (write-up in the JSON it leaves in benchmark/outputs/runtime/).

(a) Slot exchange round trip between two pinned processes (learner CPU <-> collector
    CPU): the learner writes the obs slot and publishes a tick, the peer copies it out,
    writes the action slot and publishes the answer. Modes: `spin` (never blocks),
    `block` (futex wait at once) and `default` (the runtime's spin-then-block mix).
(b) Env-steps/s of the whole runtime with `train.updates_per_step=0` (physics + IPC +
    inference, learning off: the ceiling training runs compare against) against the
    bare physics of the same pool: `envs.make` + a step loop in this process, pinned to
    the same collector CPUs, with uniform random actions. Target: ratio >= 0.95.
    Bare and runtime runs alternate; each rate is the median over repeats of the
    steady-state part (the first logging interval, with warm-up, is dropped).

    python -m benchmark.offpolicy.benchmark_runtime              # defaults for a CUDA machine with 16 cores (ant, 1024 envs)
    python -m benchmark.offpolicy.benchmark_runtime --quick      # seconds on a small CPU box
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.machine import OUTPUTS, write_results  # noqa: E402
from offpolicy.affinity import resolve_affinity  # noqa: E402
from offpolicy.runtime.slots import (  # noqa: E402
    ACTION_TICK,
    DEFAULT_SPIN_US,
    OBS_TICK,
    STOP,
    Layout,
    SharedSegment,
    WaitAborted,
    Waiter,
)

SPIN_FOREVER_US = 1e9


# --------------------------------------------------------------------------- (a) round trip
def _echo_peer(name: str, layout: Layout, rounds: int, spin_us: float, cpus: list[int]) -> None:
    """Collector-side peer: for each tick, copy the obs slot out, write actions, publish."""
    os.sched_setaffinity(0, cpus)
    seg = SharedSegment.attach(name, layout)
    waiter = Waiter(seg, spin_us=spin_us, poll_s=0.05)
    obs, action = seg["obs/actor"], seg["action/value"]
    local = np.empty_like(obs)

    def check() -> None:
        if seg.control[STOP]:
            raise WaitAborted

    try:
        for t in range(rounds):
            waiter.wait_at_least(OBS_TICK, t, check)
            local[:] = obs
            action[:] = local[:, : action.shape[1]]
            seg.publish(ACTION_TICK, t)
    except WaitAborted:
        pass
    del obs, action
    seg.close()


def round_trip(spin_us: float, rounds: int, num_envs: int, obs_dim: int, action_dim: int, cpus) -> dict:
    """Round-trip latency statistics (microseconds) for one waiting mode."""
    import multiprocessing as mp

    learner_cpus, collector_cpus = cpus
    layout = Layout.for_spec(num_envs, {"actor": obs_dim}, action_dim, 2)
    seg = SharedSegment.create(layout)
    saved = os.sched_getaffinity(0)
    proc = mp.get_context("spawn").Process(
        target=_echo_peer, args=(seg.name, layout, rounds, spin_us, list(collector_cpus)), daemon=True
    )
    proc.start()
    samples = np.empty(rounds)
    try:
        os.sched_setaffinity(0, learner_cpus)
        waiter = Waiter(seg, spin_us=spin_us, poll_s=0.05)
        obs, action = seg["obs/actor"], seg["action/value"]
        payload = np.random.default_rng(0).standard_normal(obs.shape).astype(np.float32)
        out = np.empty_like(action)

        def check() -> None:
            if proc.exitcode is not None:
                raise RuntimeError(f"echo peer died with {proc.exitcode}")

        for t in range(rounds):
            t0 = time.perf_counter_ns()
            obs[:] = payload
            seg.publish(OBS_TICK, t)
            waiter.wait_at_least(ACTION_TICK, t, check)
            out[:] = action
            samples[t] = (time.perf_counter_ns() - t0) / 1e3
        proc.join(10)
    finally:
        os.sched_setaffinity(0, saved)
        seg.control[STOP] = 1
        seg.wake_all()
        proc.join(5)
        if proc.is_alive():
            proc.kill()
        seg.unlink()
        del obs, action
        seg.close()
    steady = samples[min(100, rounds // 10) :]
    return {
        "mean_us": float(steady.mean()),
        "median_us": float(np.median(steady)),
        "p99_us": float(np.percentile(steady, 99)),
        "blocked_waits": waiter.blocked_waits,
    }


# --------------------------------------------------------------------------- (b) throughput
def bare_physics(env_name: str, num_envs: int, ticks: int, warmup: int, collector_cpus, seed: int) -> float:
    """Env-steps/s of `envs.make` + step loop in this process, pinned to the collector CPUs."""
    import envs

    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, collector_cpus)
    try:
        env = envs.make(env_name, num_envs, seed=seed, cpu_ids=list(collector_cpus), nthread=len(collector_cpus))
        try:
            rng = np.random.default_rng(seed)
            spec = env.spec
            actions = [
                rng.uniform(spec.action_low, spec.action_high, (num_envs, spec.action_dim)).astype(np.float32)
                for _ in range(64)
            ]
            env.reset()
            for i in range(warmup):
                env.step(actions[i % 64])
            t0 = time.perf_counter()
            for i in range(ticks):
                env.step(actions[i % 64])
            return ticks * num_envs / (time.perf_counter() - t0)
        finally:
            env.close()
    finally:
        os.sched_setaffinity(0, saved)


def runtime_throughput(overrides: list[str], num_envs: int, ticks: int, warmup: int) -> tuple[float, dict]:
    """Steady-state env-steps/s of the whole runtime with learning off (metrics after the warm-up interval)."""
    from hydra import compose, initialize_config_dir

    from offpolicy.runtime.runner import Runner

    interval = max(1, (ticks - warmup) // 4) * num_envs
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                f"env.num_envs={num_envs}",
                f"train.total_env_steps={(warmup + 4 * (interval // num_envs)) * num_envs}",
                "train.updates_per_step=0",
                "logger=none",
                f"logger.interval_env_steps={interval}",
                *overrides,
            ],
        )
    with tempfile.TemporaryDirectory() as run_dir:
        runner = Runner(cfg, run_dir)
        summary = runner.run()
        rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    # the first interval includes the warm-up (first ticks, graph capture): dropped
    rates = [r["perf/env_steps_per_s"] for r in rows[1:]] or [rows[-1]["perf/env_steps_per_s"]]
    return statistics.median(rates), summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes that finish in seconds on a CPU box")
    p.add_argument("--env", default="ant")
    p.add_argument("--num-envs", type=int, default=None)
    p.add_argument("--ticks", type=int, default=None, help="vector steps per throughput measurement")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None, help="round trips per waiting mode")
    p.add_argument("--algo", default=None, help="algo config group for the inference tick (default: the config's)")
    p.add_argument("--device", default="auto")
    p.add_argument("--out", default=str(OUTPUTS / "runtime"))
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    num_envs = args.num_envs or (32 if args.quick else 1024)
    ticks = args.ticks or (120 if args.quick else 400)
    repeats = args.repeats or (2 if args.quick else 3)
    rounds = args.rounds or (2000 if args.quick else 20000)
    warmup = max(10, ticks // 5)

    from omegaconf import OmegaConf

    affinity = resolve_affinity(OmegaConf.create({"mode": "auto"}))
    cpus = (list(affinity.learner_cpus), list(affinity.collector_cpus))
    print(f"learner CPUs {cpus[0]}, collector CPUs {cpus[1]}", flush=True)

    # (a) round trip: the slots sized as for the throughput run
    import envs

    probe = envs.make(args.env, 1, nthread=1)
    obs_dim, action_dim = probe.spec.obs_dims["actor"], probe.spec.action_dim
    probe.close()
    modes = {"spin": SPIN_FOREVER_US, "block": 0.0, "default": DEFAULT_SPIN_US}
    rt = {m: round_trip(us, rounds, num_envs, obs_dim, action_dim, cpus) for m, us in modes.items()}
    for m, r in rt.items():
        print(f"round trip {m:8s} median {r['median_us']:8.1f} us  mean {r['mean_us']:8.1f}  p99 {r['p99_us']:8.1f}")

    # (b) throughput, alternating bare and runtime runs
    overrides = [f"env={args.env}", f"device={args.device}"]
    if args.algo:
        overrides.append(f"algo={args.algo}")
    if args.quick and not args.algo:
        overrides += ["algo.actor_hidden_dim=64", "algo.critic_hidden_dim=64"]
    # Physics cost depends on the actions (contacts, resets), so the runtime is measured twice:
    # with the policy's inference tick (the real ceiling) and with the learner's uniform-random
    # actions (train.learning_starts beyond the run: same action law as the bare loop, IPC only).
    bare, runtime, runtime_uniform, summaries = [], [], [], []
    for r in range(repeats):
        bare.append(bare_physics(args.env, num_envs, ticks, warmup, cpus[1], seed=r))
        rate, summary = runtime_throughput([*overrides, "train.learning_starts=0"], num_envs, ticks, warmup)
        runtime.append(rate)
        summaries.append(summary)
        rate_u, _ = runtime_throughput([*overrides, f"train.learning_starts={10**12}"], num_envs, ticks, warmup)
        runtime_uniform.append(rate_u)
        print(
            f"repeat {r}: bare {bare[-1]:9.0f} env-steps/s   runtime(updates=0) policy {rate:9.0f}"
            f"   uniform actions {rate_u:9.0f}",
            flush=True,
        )
    bare_med, rt_med, rtu_med = statistics.median(bare), statistics.median(runtime), statistics.median(runtime_uniform)
    ratio = rt_med / bare_med
    rows = [
        {"measure": f"round_trip_{m}", **r, "ratio_to_spin": r["median_us"] / rt["spin"]["median_us"]}
        for m, r in rt.items()
    ] + [
        {
            "measure": "env_steps_per_s",
            "env": args.env,
            "num_envs": num_envs,
            "bare_physics": bare_med,
            "runtime_updates0": rt_med,
            "ratio": ratio,
            "runtime_updates0_uniform_actions": rtu_med,
            "ratio_uniform_actions": rtu_med / bare_med,
            "target": 0.95,
            "bare_all": bare,
            "runtime_all": runtime,
            "runtime_uniform_all": runtime_uniform,
        }
    ]
    meta = {
        "benchmark": "runtime",
        "tag": args.tag,
        "quick": args.quick,
        "learner_cpus": cpus[0],
        "collector_cpus": cpus[1],
        "device": summaries[-1]["device"],
        "ticks": ticks,
        "warmup_ticks": warmup,
        "repeats": repeats,
        "rounds": rounds,
        "overrides": overrides,
    }
    name = "runtime" + (f"_{args.tag}" if args.tag else "")
    folder = write_results(name, rows, meta, args.out)
    print(f"\n{'measure':24s} {'value':>12s}")
    for m, r in rt.items():
        print(f"{'round trip ' + m + ' (us)':24s} {r['median_us']:12.1f}")
    print(f"{'block / spin':24s} {rt['block']['median_us'] / rt['spin']['median_us']:12.2f}")
    print(f"{'bare physics (steps/s)':24s} {bare_med:12.0f}")
    print(f"{'runtime u=0 (steps/s)':24s} {rt_med:12.0f}")
    print(f"{'ratio (target >= 0.95)':24s} {ratio:12.3f}")
    print(f"{'runtime u=0 uniform':24s} {rtu_med:12.0f}")
    print(f"{'ratio uniform actions':24s} {rtu_med / bare_med:12.3f}")
    print(f"results: {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
