"""S=1 end to end: bare physics, the runtime ceiling and training candidates, in one run.

For each task (default ant and hopper: light physics, frequent resets), 1024 envs,
collector and pool workers pinned to `--collector-cpus` (default 2-15, 14 cores),
learner on `--learner-cpus` (default 0-1), this measures steady-state env-steps/s of

1. bare physics with uniform random actions (`envs.make` + step loop in this
   process on the collector CPUs, no IPC), labelled as such: the physics rate
   depends on the actions, so it is only a rough reference;
2. ceiling: the full runner with `train.updates_per_step=0` (inference every tick);
3. candidates: the full runner training FastSAC and FlashSAC with their default
   updates per step.

The honest reference is the run's own trajectory: every runner run records a
window of `--record-ticks` steady-state ticks (state before it, every action and
reset), which `benchmark/offpolicy/trajectory_replay.py` then replays on the bare pool and on
NpEnv, pinned to the same collector CPUs, checking that the replay reproduces the
run's observations. `ratio_to_replayed_bare` = in-run env-steps/s over that window
/ replayed bare env-steps/s is the runtime's efficiency (target >= 0.95 while the
learner is not saturated).

Every runner run records its timeline (`runtime.trace=true`). Steady state is the
last `--steady-fraction` of the ticks (compile and graph capture happen in the
first ones). From the same window: the learner's busy fraction (inference +
ingest + update over wall time), the inference tick latency (host obs slot to
host action slot, wall clock) and the update phase time. Targets: ceiling >=
0.95 x bare physics, candidate >= 0.95 x ceiling. One candidate's trace, trimmed
to `--trace-seconds` of steady state, is kept for `check_timeline.py`.

    python -m benchmark.offpolicy.benchmark_end_to_end                     # a CUDA machine with 16 cores
    python -m benchmark.offpolicy.benchmark_end_to_end --quick             # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.machine import OUTPUTS, parse_cpus, write_results  # noqa: E402
from benchmark.offpolicy.benchmark_runtime import bare_physics  # noqa: E402
from benchmark.offpolicy.check_timeline import collector_serial  # noqa: E402
from benchmark.offpolicy.trajectory_replay import replay_run  # noqa: E402
from offpolicy.runtime.timeline import load_intervals  # noqa: E402


def steady_window(intervals: list[dict], fraction: float) -> tuple[list[dict], float, float, int]:
    """Intervals of the last `fraction` of ticks, with the window's start/end (us) and tick count."""
    ticks = sorted({iv["tick"] for iv in intervals})
    keep = set(ticks[int(len(ticks) * (1 - fraction)) :])
    window = [iv for iv in intervals if iv["tick"] in keep]
    first = min(keep)
    start = min(iv["start"] for iv in window if iv["tick"] == first)
    end = max(iv["end"] for iv in window)
    return window, start, end, len(keep)


def _phase_durations(window: list[dict]) -> dict[str, list[float]]:
    return {
        p: [iv["end"] - iv["start"] for iv in window if iv["phase"] == p]
        for p in ("wait", "inference", "ingest", "update")
    }


def analyse(trace: Path, num_envs: int, fraction: float) -> dict:
    """Steady-state rate, busy fraction and phase times from a run's timeline.

    Host intervals give the rate and the inference tick latency (obs slot to action
    slot, wall clock). The update phase is launched asynchronously on CUDA, so the
    learner's busy time comes from the device track (CUDA events) where it exists.
    """
    window, start, end, n_ticks = steady_window(load_intervals(trace, "host"), fraction)
    wall_s = (end - start) / 1e6
    host = _phase_durations(window)
    device_all = load_intervals(trace, "device")
    keep = {iv["tick"] for iv in window}
    device = _phase_durations([iv for iv in device_all if iv["tick"] in keep]) if device_all else host
    busy = sum(sum(device[p]) for p in ("inference", "ingest", "update")) / 1e6

    def med(xs: list[float]) -> float:
        return statistics.median(xs) / 1e3 if xs else 0.0

    return {
        "env_steps_per_s": n_ticks * num_envs / wall_s,
        "steady_ticks": n_ticks,
        "learner_busy_fraction": busy / wall_s,
        "busy_source": "device events" if device_all else "host wall clock",
        "inference_ms_median": med(host["inference"]),
        "inference_ms_p90": statistics.quantiles(host["inference"], n=10)[-1] / 1e3,
        "inference_device_ms_median": med(device["inference"]),
        "ingest_ms_median": med(device["ingest"]),
        "update_ms_median": med(device["update"]),
        "wait_ms_median": med(host["wait"]),
        "tick_ms": 1e3 * wall_s / n_ticks,
    }


def inference_stages(run_dir: Path, fraction: float) -> dict:
    """Medians of the learner's inference stages (`perf/inference_<stage>_ms`) over the last `fraction`
    of the run's metric rows, and `inference_launch_ms`, the stages that only launch device work."""
    from benchmark.offpolicy.learning_efficiency import LAUNCH_STAGES
    from offpolicy.runtime.learner import INFERENCE_STAGES

    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    rows = [r for r in map(json.loads, lines) if "perf/inference_h2d_ms" in r]
    rows = rows[int(len(rows) * (1 - fraction)) :]
    if not rows:
        return {}
    out = {f"inference_{k}_ms": statistics.median(r[f"perf/inference_{k}_ms"] for r in rows) for k in INFERENCE_STAGES}
    out["inference_launch_ms"] = sum(out[f"inference_{k}_ms"] for k in LAUNCH_STAGES)
    out["inference_behind_update_fraction"] = statistics.median(
        r["perf/inference_behind_update_fraction"] for r in rows
    )
    return out


def run_runner(overrides: list[str], run_dir: Path) -> dict:
    """Compose the main config with `overrides` and run it into `run_dir`."""
    from hydra import compose, initialize_config_dir

    from offpolicy.runtime.runner import Runner

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return Runner(cfg, run_dir).run()


def trim_trace(trace: Path, out: Path, seconds: float, fraction: float) -> None:
    """Keep `seconds` of the steady-state part of a Chrome trace (both tracks)."""
    data = json.loads(trace.read_text())
    host = [e for e in data["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "host"]
    ticks = sorted({e["args"]["tick"] for e in host})
    first = ticks[int(len(ticks) * (1 - fraction))]
    t0 = min(e["ts"] for e in host if e["args"]["tick"] == first)
    last_tick = max(e["args"]["tick"] for e in host if e["ts"] <= t0 + seconds * 1e6)
    keep = [
        e for e in data["traceEvents"] if e.get("ph") != "X" or first <= e.get("args", {}).get("tick", -1) <= last_tick
    ]
    out.write_text(json.dumps({"traceEvents": keep, "displayTimeUnit": "ms"}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes for a CPU smoke run")
    p.add_argument("--tasks", nargs="+", default=["ant", "hopper"])
    p.add_argument("--algos", nargs="+", default=["fastsac", "flashsac"])
    p.add_argument("--num-envs", type=int, default=None)
    p.add_argument("--ticks", type=int, default=None, help="vector steps per runner run")
    p.add_argument("--steady-fraction", type=float, default=0.5)
    p.add_argument("--learner-cpus", default=None, help="default 0-1 (quick: 0)")
    p.add_argument("--collector-cpus", default=None, help="default 2-15 (quick: 1)")
    p.add_argument("--trace-seconds", type=float, default=3.0)
    p.add_argument("--record-ticks", type=int, default=None, help="steady-state ticks recorded and replayed")
    p.add_argument("--device", default="auto")
    p.add_argument("--out", default=str(OUTPUTS / "end_to_end"))
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for every runner run (after --)")
    args = p.parse_args(argv)
    num_envs = args.num_envs or (16 if args.quick else 1024)
    ticks = args.ticks or (60 if args.quick else 600)
    learner = parse_cpus(args.learner_cpus or ("0" if args.quick else "0-1"))
    collector = parse_cpus(args.collector_cpus or ("1" if args.quick else "2-15"))
    common = [
        f"env.num_envs={num_envs}",
        f"train.total_env_steps={ticks * num_envs}",
        "logger=none",
        f"device={args.device}",
        "affinity=manual",
        f"affinity.learner_cpus=[{','.join(map(str, learner))}]",
        f"affinity.collector_cpus=[{','.join(map(str, collector))}]",
        "runtime.trace=true",
        f"runtime.trace_max_ticks={ticks + 1}",
        "replay.capacity=1000000",
        "eval.final=false",
        *args.overrides,
    ]
    record_ticks = args.record_ticks or max(10, ticks // 4)
    record = [f"+runtime.record.start_tick={ticks - record_ticks - 2}", f"+runtime.record.ticks={record_ticks}"]
    quick_nets = ["algo.batch_size=64", "algo.actor_hidden_dim=32", "algo.critic_hidden_dim=32"] if args.quick else []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    kept_trace = False
    meta = {
        "num_envs": num_envs,
        "ticks": ticks,
        "learner_cpus": learner,
        "collector_cpus": collector,
        "steady_fraction": args.steady_fraction,
        "quick": args.quick,
        "record_ticks": record_ticks,
        "overrides": list(args.overrides),
    }
    planned = len(args.tasks) * (2 + len(args.algos))

    def save() -> Path:  # after every row: a run cut short by its time limit keeps what it measured
        return write_results("end_to_end", rows, {**meta, "measurements": f"{len(rows)} of {planned}"}, out)

    for task in args.tasks:
        bare = bare_physics(task, num_envs, ticks=max(ticks // 3, 20), warmup=10, collector_cpus=collector, seed=0)
        rows.append({"task": task, "run": "bare_physics_uniform_actions", "env_steps_per_s": bare})
        save()
        print(f"{task:8s} bare, uniform actions {bare:9.0f} env-steps/s", flush=True)
        runs = [("ceiling", ["algo=fastsac", "train.updates_per_step=0", "train.learning_starts=0", *quick_nets])]
        runs += [(algo, [f"algo={algo}", f"train.learning_starts={4 * num_envs}", *quick_nets]) for algo in args.algos]
        ceiling = None
        for name, extra in runs:
            with tempfile.TemporaryDirectory() as tmp:
                summary = run_runner([f"env={task}", *common, *record, *extra], Path(tmp))
                trace = Path(tmp) / "timeline.json"
                stats = analyse(trace, num_envs, args.steady_fraction)
                if name != "ceiling" and not kept_trace:
                    trim_trace(trace, out / f"timeline_{task}_{name}.json", args.trace_seconds, args.steady_fraction)
                    kept_trace = True
                replayed = replay_run(Path(tmp), busy_cpus=learner)
                stages = inference_stages(Path(tmp), args.steady_fraction)
                # the steady window only: the run-wide sum also counts the compile-long first ticks
                collector_track = load_intervals(trace, "collector")
                serial = (
                    collector_track and collector_serial(steady_window(collector_track, args.steady_fraction)[0])
                ) or {}
            row = {
                "task": task,
                "run": name,
                **stats,
                **stages,
                "updates": summary["updates"],
                "policy_version": summary["policy_version"],
                "whole_run_env_steps_per_s": summary["env_steps_per_s"],
                "graph_errors": summary.get("graph_errors", {}),
                **replayed,
                "ratio_to_replayed_bare": replayed["env_steps_per_s"] / replayed["replayed_bare_env_steps_per_s"],
                "ratio_to_replayed_bare_busy_cpus": replayed["env_steps_per_s"]
                / replayed["replayed_bare_busy_cpus_env_steps_per_s"],
                "uniform_action_bare_env_steps_per_s": bare,
                "collector_outside_physics_fraction": serial.get("outside_physics_fraction"),
                "collector_outside_physics_us_median": serial.get("outside_physics_us_median"),
            }
            if replayed["replay_obs_max_abs_diff"] != 0.0 or not replayed["replay_states_agree"]:
                print(f"   WARNING: the replay did not reproduce the run: {replayed}", flush=True)
            if name == "ceiling":
                ceiling = stats["env_steps_per_s"]
                row["ratio_to_bare"] = ceiling / bare  # against uniform actions: a rough reference only
                row["target"] = "ratio_to_replayed_bare >= 0.95"
            else:
                row["ratio_to_ceiling"] = stats["env_steps_per_s"] / ceiling
                row["target"] = "ratio_to_replayed_bare >= 0.95 while learner_busy_fraction < 0.9"
            rows.append(row)
            save()
            ratio = row.get("ratio_to_bare", row.get("ratio_to_ceiling"))
            print(
                f"{task:8s} {name:18s} replay-ref {row['ratio_to_replayed_bare']:.3f} "
                f"({replayed['env_steps_per_s']:.0f} / {replayed['replayed_bare_env_steps_per_s']:.0f}; "
                f"learner CPUs busy: {row['ratio_to_replayed_bare_busy_cpus']:.3f})  "
                f"{stats['env_steps_per_s']:9.0f} env-steps/s  ratio {ratio:.3f}  "
                f"busy {stats['learner_busy_fraction']:.2f}  infer {stats['inference_ms_median']:.3f} ms "
                f"(launch {stages.get('inference_launch_ms', float('nan')):.3f}, "
                f"action copy {stages.get('inference_action_copy_ms', float('nan')):.3f})  "
                f"update {stats['update_ms_median']:.2f} ms  tick {stats['tick_ms']:.2f} ms",
                flush=True,
            )
            if row["graph_errors"]:
                print(f"   graph capture fell back to eager: {row['graph_errors']}", flush=True)
    folder = save()
    print(f"results: {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
