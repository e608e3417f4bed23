"""One learning-results run, start to finish: train, re-score the final snapshot, replay a window, keep the files.

This is how every run under `benchmark/outputs/learning/` (8 minutes), `learning_dmc/` (the DMC tasks, 15
minutes) and `learning_locomotion/` (the legged-robot tasks of `envs/locomotion`, 5 minutes) is made
(benchmark/README.md, "Learning"):

1. `python -m offpolicy.train algo=<algo> env=<task> seed=<k> budget=<budget>` in a subprocess, learner and
   collector pinned (`affinity=manual`), W&B off, recording a steady-state window of `--record-ticks` ticks
   from `--record-start-s` seconds into the loop (or tick `--record-start-tick`) for the same-trajectory
   reference, where the task's env can snapshot its state (`records_window`; every shipped task can) (console
   to `train_console.log`);
2. `python -m offpolicy.eval checkpoint=<final checkpoint> episodes=<n> reference=<ref>`: the final snapshot's
   statistics in our env and in the implementation the task reproduces (Gymnasium's, or dm_control's for the
   DMC tasks; a locomotion task has none to re-score in, so no `reference=`, and its eval.json carries the
   tracking statistics instead: `lin_vel_error`, `yaw_rate_error`, `fall_fraction` over `episodes`), kept as
   `eval_final.json`;
3. `benchmark/offpolicy/trajectory_replay.py` on the recorded window, pinned to the collector's CPUs: the run's rate over
   the window against bare physics replaying exactly its states, actions and resets (`replay.json`, with
   `ratio_to_replayed_bare`), and that bare replay once more while the learner's CPUs spin
   (`replayed_bare_busy_cpus_env_steps_per_s`): whether a busy learner side of the host alone slows the physics.

The kept folder, `<out>/<task>_<algo>_seed<k>/`, holds `metrics.csv`, `summary.json` (`snapshot_eval`: the final
snapshot's episodes, mean, median, min), `config_resolved.yaml`, `train_console.log`, `eval_final.json`,
`replay.json`, `learning_run.json` (the commands, the compile cache, the stages' exit statuses and seconds) and
`policy.pt`, the final checkpoint's policy (`offpolicy.checkpoint.export_policy`: the actor and counters, ~1 MB),
so `python -m offpolicy.eval checkpoint=<kept folder>/policy.pt` re-scores the row from its own folder (model
files are gitignored: the policy stays on the machine that made the run or goes where it is copied); the full
checkpoint and the timeline stay in the work dir (`--work`). Runs stop on wall clock, so two runs of one seed
are not bit-identical.

The wall-clock budget includes the torch.compile warm-up, which takes ~20-55 s with an empty Inductor/Triton cache
and ~5-10 s with one another run on the same machine filled (FlashSAC Humanoid: first update phase 51-56 s cold,
5-7 s warm). So every run compiles from an empty cache of its own (`--compile-cache cold`, the default: fresh
`TORCHINDUCTOR_CACHE_DIR` and `TRITON_CACHE_DIR` under the work dir), as a first run on a fresh machine does, and
runs of one table are comparable whatever ran on the host before them. `--compile-cache shared` keeps the
process's own cache settings (what a researcher's repeated runs see).

    python -m benchmark.offpolicy.learning_run --algo flashsac --task humanoid --seed 1     # CUDA machine, 8 min
    python -m benchmark.offpolicy.learning_run --algo fastsac --task dmc_dog_run --seed 0   # 15 min, learning_dmc/
    python -m benchmark.offpolicy.learning_run --algo flashsac --task go1_joystick_flat --seed 0  # 5 min
    python -m benchmark.offpolicy.learning_run ... -- algo.temp_max=0.01   # extra overrides after --
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.machine import OUTPUTS, parse_cpus  # noqa: E402


class Suite(NamedTuple):
    """Where a task family's runs go and how long they last."""

    budget: str
    """the conf/budget preset"""
    out: Path
    """the parent of the kept run folders"""
    record_start_s: float
    """default start of the replayed window, seconds into the training loop"""


KEPT = (
    "metrics.csv",
    "summary.json",
    "config_resolved.yaml",
    "train_console.log",
    "eval_final.json",
    "replay.json",
    "learning_run.json",
    "policy.pt",
)
"""the files of a kept run folder"""
COMPILE_CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
"""where torch.compile keeps compiled kernels between processes (Inductor's FX/AOT graphs, Triton's binaries)"""


def compile_cache_env(mode: str, work: Path) -> dict[str, str]:
    """The training subprocess's environment: `cold` points the compile caches at empty dirs under `work`."""
    env = dict(os.environ)
    if mode == "cold":
        for var in COMPILE_CACHE_VARS:
            path = work / "compile_cache" / var.split("_")[0].lower()
            path.mkdir(parents=True, exist_ok=True)
            if any(path.iterdir()):
                raise SystemExit(f"{path} is not empty: a cold compile cache must start empty")
            env[var] = str(path)
    elif mode != "shared":
        raise SystemExit(f"--compile-cache {mode!r}: expected one of cold, shared")
    return env


SUITES = {
    "gymnasium": Suite("8min", OUTPUTS / "learning", 300.0),
    "dm_control": Suite("15min", OUTPUTS / "learning_dmc", 300.0),
    # the window starts 2 minutes into a 5-minute run: past the compile warm-up, well before the end
    "locomotion": Suite("5min", OUTPUTS / "learning_locomotion", 120.0),
}
"""each task family's table: budget preset, kept-folder parent, default start of the replayed window"""
TRACKING_FINAL_KEYS = ("lin_vel_error", "yaw_rate_error", "fall_fraction", "episodes")
"""what a locomotion run's eval_final.json must hold: the final snapshot's tracking statistics"""


def task_family(task: str) -> str:
    """`gymnasium`, `dm_control` or `locomotion`: the package under `envs/` the task is registered from."""
    from envs.registry import registry_names, task_class

    try:
        module = task_class(task).__module__
    except ValueError:
        raise SystemExit(f"--task {task!r}: unknown task; valid: {', '.join(registry_names())}") from None
    family = module.split(".")[1]
    return {"gymnasium": "gymnasium", "dmc": "dm_control", "locomotion": "locomotion"}[family]


def reference_for(task: str) -> str | None:
    """The implementation `offpolicy.eval reference=` re-scores a task in (None: a locomotion task, which
    reproduces no other implementation's env)."""
    family = task_family(task)
    return None if family == "locomotion" else family


def suite_defaults(task: str) -> Suite:
    """The budget preset, kept-folder parent and window start of a task's table: the Gymnasium tasks' 8 minutes
    in `outputs/learning/`, the DeepMind Control Suite's 15 minutes in `outputs/learning_dmc/`, the locomotion
    tasks' 5 minutes in `outputs/learning_locomotion/`."""
    return SUITES[task_family(task)]


def records_window(task: str) -> bool:
    """Whether the task's env can snapshot and restore its state, which the recorded window and its replay need
    (an env registered from outside may not)."""
    import envs

    with envs.make(task, num_envs=1, nthread=1) as env:
        return callable(getattr(env, "snapshot", None)) and callable(getattr(env, "restore", None))


def train_command(args: argparse.Namespace, run_dir: Path) -> list[str]:
    """The training CLI call: the README's command plus pinning, W&B off and the recorded window."""
    learner, collector = parse_cpus(args.learner_cpus), parse_cpus(args.collector_cpus)
    return [
        sys.executable,
        "-m",
        "offpolicy.train",
        f"algo={args.algo}",
        f"env={args.task}",
        f"seed={args.seed}",
        f"budget={args.budget}",
        "affinity=manual",
        f"affinity.learner_cpus=[{','.join(map(str, learner))}]",
        f"affinity.collector_cpus=[{','.join(map(str, collector))}]",
        "logger=none",
        f"hydra.run.dir={run_dir}",
        *(record_overrides(args) if getattr(args, "record", True) else []),
        *args.overrides,
    ]


def record_overrides(args: argparse.Namespace) -> list[str]:
    """The recorded window: `--record-ticks` ticks from tick `--record-start-tick` or `--record-start-s` in."""
    if args.record_start_tick is not None:
        start = f"+runtime.record.start_tick={args.record_start_tick}"
    else:
        start = f"+runtime.record.start_s={args.record_start_s}"
    return [start, f"+runtime.record.ticks={args.record_ticks}"]


def eval_command(args: argparse.Namespace, checkpoint: Path, out_dir: Path) -> list[str]:
    """The offline re-score of the final snapshot (on the learner's CPUs: it runs after training)."""
    return [
        sys.executable,
        "-m",
        "offpolicy.eval",
        f"checkpoint={checkpoint}",
        f"episodes={args.episodes}",
        *([f"reference={reference}"] if (reference := reference_for(args.task)) else []),
        f"seed={args.seed}",
        f"hydra.run.dir={out_dir}",
    ]


def run_logged(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> int:
    """Run `cmd` from the repo root, its stdout and stderr into `log` and echoed; returns the exit status."""
    print("+", " ".join(cmd), flush=True)
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            if not line.startswith("[progress]") or "eval return" in line:
                print(line, end="", flush=True)
        return proc.wait()


def learning_run(args: argparse.Namespace) -> dict:
    """Train, re-score, replay; copy the kept files into `<out>/<task>_<algo>_seed<k>/`; returns a short summary."""
    from benchmark.offpolicy.trajectory_replay import replay_run

    name = f"{args.task}_{args.algo}_seed{args.seed}"
    keep = Path(args.out) / name
    if keep.exists() and not args.force:
        raise SystemExit(f"{keep} exists (pass --force to replace it)")
    work = Path(args.work or tempfile.mkdtemp(prefix="learning_run_")) / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    train_cmd = train_command(args, work)
    out: dict = {
        "run": name,
        "work_dir": str(work),
        "compile_cache": args.compile_cache,
        "train_command": train_cmd,
        "date": time.strftime("%Y-%m-%d"),
    }

    def keep_files() -> None:  # after every stage: a run cut short keeps what it has
        (work / "learning_run.json").write_text(json.dumps(out, indent=1) + "\n")
        keep.mkdir(parents=True, exist_ok=True)
        for f in KEPT:
            if (work / f).exists():
                shutil.copy(work / f, keep / f)

    if keep.exists():
        shutil.rmtree(keep)

    t0 = time.monotonic()
    env = compile_cache_env(args.compile_cache, work)
    out["train_exit"] = run_logged(train_cmd, work / "train_console.log", env)
    out["train_s"] = time.monotonic() - t0
    keep_files()
    checkpoint = work / "checkpoints" / "latest.pt"
    if checkpoint.exists():
        from offpolicy.checkpoint import export_policy

        export_policy(checkpoint, work / "policy.pt")
        keep_files()
        t0 = time.monotonic()
        eval_dir = work / "eval_final"
        out["eval_command"] = eval_command(args, checkpoint, eval_dir)
        out["eval_exit"] = run_logged(out["eval_command"], work / "eval_console.log")
        out["eval_s"] = time.monotonic() - t0
        if (eval_dir / "eval.json").exists():  # kept without this machine's paths (benchmark/outputs holds none)
            text = (eval_dir / "eval.json").read_text()
            (work / "eval_final.json").write_text(text.replace(json.dumps(str(work))[1:-1], "<run dir>"))
        keep_files()
    if not getattr(args, "record", True):
        out["replay"] = f"none: {args.task}'s env cannot snapshot its state, so no window was recorded"
    if (work / "record.npz").exists():
        replay = replay_run(work, busy_cpus=parse_cpus(args.learner_cpus))
        replay["ratio_to_replayed_bare"] = replay["env_steps_per_s"] / replay["replayed_bare_env_steps_per_s"]
        (work / "replay.json").write_text(json.dumps(replay, indent=1) + "\n")
        out["ratio_to_replayed_bare"] = replay["ratio_to_replayed_bare"]

    keep_files()
    summary = json.loads((work / "summary.json").read_text()) if (work / "summary.json").exists() else {}
    out["snapshot_eval"] = {
        k: (summary.get("snapshot_eval") or {}).get(k) for k in ("episodes", "mean", "median", "min")
    }
    out["env_steps"] = summary.get("env_steps")
    if (work / "eval_final.json").exists():
        ev = json.loads((work / "eval_final.json").read_text())
        out["eval_final"] = {"own": ev.get("return_median")} | {
            ref: block.get("median") for ref, block in (ev.get("reference") or {}).items()
        }
        if task_family(args.task) == "locomotion":
            out["eval_final"] |= {k: ev.get(k) for k in TRACKING_FINAL_KEYS}
            missing = [k for k in TRACKING_FINAL_KEYS if k not in ev]
            if missing:  # the table's columns would be empty: fail the run, not the page
                out["eval_final_missing"] = missing
                print(f"[learning_run] eval_final.json lacks {', '.join(missing)}", file=sys.stderr, flush=True)
    keep_files()
    print(json.dumps(out), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", required=True, choices=("fastsac", "flashsac"))
    p.add_argument("--task", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument(
        "--budget", default=None, help="conf/budget preset (default: 8min; 15min for dmc_, 5min for locomotion)"
    )
    p.add_argument("--learner-cpus", default="0-1")
    p.add_argument("--collector-cpus", default="2-15")
    p.add_argument("--episodes", type=int, default=16, help="episodes of the offline re-score (default 16)")
    p.add_argument(
        "--record-start-s",
        type=float,
        default=None,
        help="the replayed window starts this far in (default: 300 s; 120 s for the 5-minute locomotion runs)",
    )
    p.add_argument("--record-start-tick", type=int, default=None, help="or at this tick")
    p.add_argument("--record-ticks", type=int, default=200)
    p.add_argument(
        "--out",
        default=None,
        help="parent of the kept run folder (default: outputs/learning; learning_dmc, learning_locomotion)",
    )
    p.add_argument("--work", default=None, help="parent of the full run dir (default: a temporary dir)")
    p.add_argument("--force", action="store_true", help="replace an existing kept folder")
    p.add_argument(
        "--compile-cache",
        default="cold",
        choices=("cold", "shared"),
        help="cold (default): compile from empty Inductor/Triton caches; shared: the process's own caches",
    )
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for the training run (after --)")
    args = p.parse_args(argv)
    suite = suite_defaults(args.task)
    args.budget = args.budget or suite.budget
    args.out = args.out or str(suite.out)
    if args.record_start_s is None:
        args.record_start_s = suite.record_start_s
    args.record = records_window(args.task)
    result = learning_run(args)
    return int(result["train_exit"] != 0 or result.get("eval_exit", 1) != 0 or bool(result.get("eval_final_missing")))


if __name__ == "__main__":
    raise SystemExit(main())
