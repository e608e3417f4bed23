"""Runtime-efficiency table of the learning-results runs, built from their committed files.

For every run folder under the runs dir (`<task>_<algo>_seed<k>/`, as `learning_run` keeps it) one row:

- from `replay.json`: the run's own rate over the recorded window, bare physics replaying exactly that
  window (and NpEnv replaying it), `ratio_to_replayed_bare`, and whether the replay reproduced the run
  exactly (observations bit for bit and the same final physics state); and, for runs whose collector kept
  its per-tick phase rows in the record, the means of those phases over the window's own ticks
  (`window_<phase>_ms_mean`, with `window_cycle_ms_median`): the window's mean tick split by phase, which
  the metric rows' medians below cannot show when a few ticks are slow; and, for runs whose collector read
  its CPUs at the window's ends, where those CPUs' time went over the window and the replay's over the bare
  replay (`window_cpu_<share>`, `replay_cpu_<share>`: this process, other processes, interrupts, steal,
  idle, as fractions of the CPUs' capacity), which says whether something else held the collector's cores,
  and the CPU time the collector's process spent a tick against the bare replay's (`collector_cpu_ms_per_tick`,
  `replay_cpu_ms_per_tick`, `cpu_time_over_replay`: the own share x the CPUs x the window's mean cycle, and x
  one replayed tick), which says whether the same work took more CPU time in the run (the run's figure also
  holds the collector's work outside the pool, a few percent of its cycle);
- from `metrics.csv`: the medians, over the metric rows that cover the window, of the learner's busy
  fraction, updates/s, the inference tick and the collector's per-tick phases. A row is logged at tick
  `env_steps / num_envs` and covers the ticks since the previous row: the rows whose tick range overlaps
  `[window_start_tick, window_start_tick + window_ticks)` (always at least the row ending at or after
  the window's end);
- from `config_resolved.yaml`: task, algo, seed, `updates_per_step` (`train.updates_per_step`, else the
  algo's default, as the runner resolves it) and `num_envs`.

`physics_over_replay`: the in-run pool step (median `perf/collector_physics_ms` over the window's rows)
over the replay's, `replayed_bare_tick_ms` (one tick of bare physics replaying the window: num_envs /
`replayed_bare_env_steps_per_s`). Above 1 the physics itself ran slower in the run than replayed alone on
the same cores, with the same states and actions; the rest of the gap to the replay is the runtime's own
time outside the pool (the wait for the action, the task numpy, publishing).

`target` (the 0.95 efficiency target on `ratio_to_replayed_bare`): "met" at ratio >= 0.95; below it,
"learner-bound" when the learner is saturated (median busy >= 0.9: the collector waits for the learner,
so the ratio does not measure the runtime) and "not met" otherwise. A run without `replay.json` (its
replay stage was cut) still gets a row, with the replay fields null and target "no replay"; its medians
then come from the window its config asked to record (`runtime.record`; a `start_s` window's first tick
is estimated from the metric rows' clock, `window_source` says so).

Writes `efficiency.json` ({"rows": [...], "runs_dir": ...}), `efficiency.csv` and `efficiency_table.md`
(the Markdown table, also printed) into `--out` (default: the runs dir).

    python -m benchmark.offpolicy.learning_efficiency                       # benchmark/outputs/learning
    python -m benchmark.offpolicy.learning_efficiency <runs dir> --out /tmp/eff
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.machine import OUTPUTS  # noqa: E402
from offpolicy.plot import STEP_KEY, TIME_KEY, RunRecord, find_runs  # noqa: E402
from offpolicy.runtime.cpu_accounting import SHARE_NAMES  # noqa: E402
from offpolicy.runtime.learner import INFERENCE_STAGES  # noqa: E402

TARGET_RATIO = 0.95
"""the efficiency target: in-run env-steps/s over the recorded window >= 0.95 x bare physics replaying it"""
SATURATED_BUSY = 0.9
"""a learner busy this share of the wall clock (or more) is the run's limit, not the runtime"""
PERF_ROW_KEY = "perf/learner_busy_fraction"
"""present in every row the learner logged (eval-only rows and the final eval row lack it)"""
MEDIANS = {
    "learner_busy": "perf/learner_busy_fraction",
    "updates_per_s": "perf/updates_per_s",
    "inference_tick_ms": "perf/inference_tick_ms",
    "collector_cycle_ms": "perf/collector_cycle_ms",
    "collector_wait_ms": "perf/collector_wait_ms",
    "collector_physics_ms": "perf/collector_physics_ms",
    "collector_outside_pool_fraction": "perf/collector_outside_pool_fraction",
    "collector_task_ms": "perf/collector_task_ms",
    "ingest_ms": "perf/ingest_ms",
    "ingest_wait_ms": "perf/ingest_wait_ms",
    "ingest_sync_ms": "perf/ingest_sync_ms",
    **{f"inference_{stage}_ms": f"perf/inference_{stage}_ms" for stage in INFERENCE_STAGES},
}
"""row field -> metrics.csv column whose median over the window's rows it holds (the inference stages
and `perf/ingest_*ms` exist in runs made after they were added; older runs get None)"""
LAUNCH_STAGES = ("h2d", "policy", "eval", "post")
"""the inference stages that only issue device work on CUDA; `action_copy` then waits for the device"""
REPLAY_FIELDS = (
    "env_steps_per_s",
    "replayed_bare_env_steps_per_s",
    "replayed_np_env_env_steps_per_s",
    "ratio_to_replayed_bare",
)
WINDOW_PHASES = ("cycle", "wait", "physics", "task", "publish", "ingress_wait", "ingress_write")
"""collector phases whose mean over the window's own ticks a row holds (`window_<phase>_ms_mean`), from replay.json's
`in_run_phase_ms` (runs whose collector kept its phase rows in the record; older runs get None): the window's mean
tick split by phase, beside the metric rows' medians"""
CPU_SHARES = SHARE_NAMES
"""where the collector's CPUs' time went over the window (`window_cpu_<share>`) and the replay's CPUs' over the bare
replay (`replay_cpu_<share>`), from replay.json's `in_run_cpu_share` and `replayed_bare_cpu_share` (runs recorded
before the collector read its CPUs get None)"""
COLUMNS = (
    "task",
    "algo",
    "seed",
    "run",
    *REPLAY_FIELDS,
    "replay_exact",
    "updates_per_step",
    *MEDIANS,
    "inference_launch_ms",
    "replayed_bare_tick_ms",
    "physics_over_replay",
    "inference_tick_mode",
    "learner_saturated",
    "target",
    "num_envs",
    "window_start_tick",
    "window_ticks",
    "window_source",
    "window_rows",
    *(f"window_{phase}_ms_mean" for phase in WINDOW_PHASES),
    "window_cycle_ms_median",
    *(f"window_cpu_{share}" for share in CPU_SHARES),
    *(f"replay_cpu_{share}" for share in CPU_SHARES),
    "collector_cpu_ms_per_tick",
    "replay_cpu_ms_per_tick",
    "cpu_time_over_replay",
)
"""the fields of a row, in the order of the CSV"""


def window_row_indices(row_ticks: np.ndarray, start: float, ticks: float) -> np.ndarray:
    """Indices of the metric rows (logged at the non-decreasing `row_ticks`) whose tick range, from the
    previous row's tick to their own, overlaps [start, start + ticks); the first row's range starts at the
    beginning of the run. When none does (a window past the last row), the last row."""
    row_ticks = np.asarray(row_ticks, dtype=np.float64)
    if row_ticks.size == 0:
        return np.zeros(0, dtype=np.int64)
    previous = np.concatenate([[-math.inf], row_ticks[:-1]])
    hit = np.flatnonzero((previous < start + ticks) & (row_ticks > start))
    return hit if hit.size else np.array([row_ticks.size - 1])


def window_medians(run: RunRecord, num_envs: int, start: float, ticks: float) -> tuple[dict[str, float | None], int]:
    """Medians of MEDIANS' columns over the perf rows covering the window (NaN cells skipped), and the row count."""
    cols = run.columns
    steps = cols.get(STEP_KEY, np.zeros(0))
    perf = np.flatnonzero(np.isfinite(cols.get(PERF_ROW_KEY, np.full(steps.shape, np.nan))) & np.isfinite(steps))
    rows = perf[window_row_indices(steps[perf] / num_envs, start, ticks)]
    out: dict[str, float | None] = {}
    for name, column in MEDIANS.items():
        values = cols[column][rows] if column in cols else np.zeros(0)
        values = values[np.isfinite(values)]
        out[name] = float(np.median(values)) if values.size else None
    return out, int(rows.size)


def classify(ratio: float | None, busy: float | None) -> tuple[bool | None, str]:
    """(learner_saturated, target): saturated at busy >= 0.9; "met" at ratio >= 0.95, else "learner-bound"
    when saturated, else "not met"; "no replay" without a ratio."""
    saturated = None if busy is None else bool(busy >= SATURATED_BUSY)
    if ratio is None:
        return saturated, "no replay"
    if ratio >= TARGET_RATIO:
        return saturated, "met"
    return saturated, "learner-bound" if saturated else "not met"


def _config_window(cfg: Any, run: RunRecord, num_envs: int) -> tuple[float | None, float | None, str | None]:
    """The window the run's config asked to record (no replay.json): (start tick, ticks, source) or Nones."""
    from omegaconf import OmegaConf

    ticks = OmegaConf.select(cfg, "runtime.record.ticks", default=None)
    start_tick = OmegaConf.select(cfg, "runtime.record.start_tick", default=None)
    start_s = OmegaConf.select(cfg, "runtime.record.start_s", default=None)
    if ticks is None:
        return None, None, None
    if start_tick is not None:
        return float(start_tick), float(ticks), "config runtime.record.start_tick (not replayed)"
    if start_s is None or TIME_KEY not in run.columns:
        return None, None, None
    times, steps = run.columns[TIME_KEY], run.columns[STEP_KEY]
    keep = np.isfinite(times) & np.isfinite(steps)
    if not keep.any():
        return None, None, None
    start = float(np.interp(float(start_s), times[keep], steps[keep] / num_envs))
    return start, float(ticks), "config runtime.record.start_s, tick estimated from metrics.csv (not replayed)"


TICK_MODES = {"captured": "graph", "eager": "eager, graph capture failed", "off": "eager"}
"""summary.json `tick_graph` (runtime.tick_graph's state at the end) -> the table's word for the tick"""


def tick_mode(summary: dict[str, Any]) -> str:
    """How the run's inference ticks ran: `graph` (one CUDA graph a tick) or `eager`; runs made before
    `runtime.tick_graph` existed have no `tick_graph` key and ran the eager tick."""
    return TICK_MODES.get(summary.get("tick_graph"), "eager")


def efficiency_row(run: RunRecord) -> dict[str, Any]:
    """One run's row (COLUMNS)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(run.path / "config_resolved.yaml")
    summary_path = run.path / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    num_envs = int(summary.get("num_envs") or OmegaConf.select(cfg, "env.num_envs"))
    updates_per_step = OmegaConf.select(cfg, "train.updates_per_step", default=None)
    if updates_per_step is None:  # as the runner resolves it: the algo's own default
        updates_per_step = OmegaConf.select(cfg, "algo.updates_per_step", default=None)
    row: dict[str, Any] = {
        "task": run.env,
        "algo": run.algo,
        "seed": run.seed,
        "run": run.path.name,
        "updates_per_step": None if updates_per_step is None else int(updates_per_step),
        "num_envs": num_envs,
    }
    replay_path = run.path / "replay.json"
    if replay_path.is_file():
        replay = json.loads(replay_path.read_text())
        row.update({k: replay.get(k) for k in REPLAY_FIELDS})
        if row["ratio_to_replayed_bare"] is None and replay.get("replayed_bare_env_steps_per_s"):
            row["ratio_to_replayed_bare"] = replay["env_steps_per_s"] / replay["replayed_bare_env_steps_per_s"]
        row["replay_exact"] = bool(replay.get("replay_obs_max_abs_diff") == 0 and replay.get("replay_states_agree"))
        start, ticks, source = float(replay["window_start_tick"]), float(replay["window_ticks"]), "replay.json"
        phases = replay.get("in_run_phase_ms") or {}
        for phase in WINDOW_PHASES:
            row[f"window_{phase}_ms_mean"] = phases.get(phase, {}).get("mean")
        row["window_cycle_ms_median"] = phases.get("cycle", {}).get("median")
        for prefix, key in (("window_cpu", "in_run_cpu_share"), ("replay_cpu", "replayed_bare_cpu_share")):
            shares = replay.get(key) or {}
            row.update({f"{prefix}_{share}": shares.get(share) for share in CPU_SHARES})
        ncpus = len(replay.get("replay_cpus") or ())
    else:
        ncpus = 0
        row.update({k: None for k in REPLAY_FIELDS}, replay_exact=None)
        start, ticks, source = _config_window(cfg, run, num_envs)
    if start is not None:
        medians, count = window_medians(run, num_envs, start, ticks)
    else:
        medians, count = {name: None for name in MEDIANS}, 0
    row.update(medians)
    launch = [row[f"inference_{stage}_ms"] for stage in LAUNCH_STAGES]
    row["inference_launch_ms"] = None if None in launch else sum(launch)
    bare = row["replayed_bare_env_steps_per_s"]
    row["replayed_bare_tick_ms"] = 1000.0 * num_envs / bare if bare else None
    physics = row["collector_physics_ms"]
    row["physics_over_replay"] = (
        None if physics is None or row["replayed_bare_tick_ms"] is None else physics / row["replayed_bare_tick_ms"]
    )
    cycle, own, replay_own = row.get("window_cycle_ms_mean"), row.get("window_cpu_own"), row.get("replay_cpu_own")
    row["collector_cpu_ms_per_tick"] = None if None in (cycle, own) or not ncpus else own * ncpus * cycle
    row["replay_cpu_ms_per_tick"] = (
        None if None in (replay_own, row["replayed_bare_tick_ms"]) or not ncpus
        else replay_own * ncpus * row["replayed_bare_tick_ms"]
    )  # fmt: skip
    run_cpu, replay_cpu = row["collector_cpu_ms_per_tick"], row["replay_cpu_ms_per_tick"]
    row["cpu_time_over_replay"] = run_cpu / replay_cpu if run_cpu and replay_cpu else None
    row["inference_tick_mode"] = tick_mode(summary)
    row["learner_saturated"], row["target"] = classify(row["ratio_to_replayed_bare"], row["learner_busy"])
    row.update(
        window_start_tick=None if start is None else round(start),
        window_ticks=None if ticks is None else round(ticks),
        window_source=source,
        window_rows=count,
    )
    return {k: row.get(k) for k in COLUMNS}


def efficiency_rows(runs_dir: str | Path) -> list[dict[str, Any]]:
    """A row for every run under `runs_dir`, sorted by algo, task, seed."""
    rows = [efficiency_row(run) for run in find_runs(runs_dir)]
    return sorted(rows, key=lambda r: (r["algo"], r["task"], r["seed"], r["run"]))


def _number(value: float | None, fmt: str, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{suffix}"


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


NAMES = {"fastsac": "FastSAC", "flashsac": "FlashSAC"}


def _stages(row: dict[str, Any]) -> str:
    """`launch / action copy` medians of the inference tick's stages, or n/a (runs made before they existed)."""
    launch, copy = row["inference_launch_ms"], row["inference_action_copy_ms"]
    return "n/a" if launch is None or copy is None else f"{launch:.2f} / {copy:.2f} ms"


def _physics(row: dict[str, Any]) -> str:
    """`in run / replayed ms (ratio)` of the pool step per tick, or n/a (no replay or no collector phases)."""
    if row["physics_over_replay"] is None:
        return "n/a"
    return (
        f"{row['collector_physics_ms']:.1f} / {row['replayed_bare_tick_ms']:.1f} ms ({row['physics_over_replay']:.2f})"
    )


def _cpus(row: dict[str, Any]) -> str:
    """`other processes / steal` as percentages of the collector's CPUs over the window, then the collector's CPU
    time a tick over the bare replay's; n/a (runs recorded before the collector read its CPUs)."""
    other, steal = row["window_cpu_other"], row["window_cpu_steal"]
    if other is None or steal is None:
        return "n/a"
    return f"{100 * other:.1f}% / {100 * steal:.1f}% / {_number(row['cpu_time_over_replay'], '.2f')}"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The efficiency table as Markdown (medians over the metric rows around the recorded window)."""
    head = ["algo", "task", "seed", "in-run env-steps/s (window)", "replayed bare env-steps/s",
            "ratio_to_replayed_bare", "learner busy", "updates/s", "inference tick", "of which: launch / action copy", "collector wait for action",
            "outside pool (share of cycle)", "physics per tick, in run / replayed",
            "collector's CPUs: other processes / steal / CPU time a tick over the replay's", "target 0.95"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "| --- | --- | ---: |" + " ---: |" * (len(head) - 4) + " --- |"]
    for r in rows:
        ratio = _number(r["ratio_to_replayed_bare"], ".3f")
        if r["replay_exact"] is False:
            ratio += " (replay not exact)"
        target = r["target"]
        if target == "no replay":
            target = "no replay (replay stage cut)"
        elif target == "learner-bound":
            target = f"learner-bound (busy {r['learner_busy']:.2f})"
        cells = [
            NAMES.get(r["algo"], r["algo"]),
            r["task"],
            str(r["seed"]),
            _number(r["env_steps_per_s"], ",.0f"),
            _number(r["replayed_bare_env_steps_per_s"], ",.0f"),
            ratio,
            _number(r["learner_busy"], ".2f"),
            _number(r["updates_per_s"], ",.0f"),
            _number(r["inference_tick_ms"], ".2f", f" ms ({r['inference_tick_mode']})"),
            _stages(r),
            _number(r["collector_wait_ms"], ".2f", " ms"),
            _number(_percent(r["collector_outside_pool_fraction"]), ".1f", "%"),
            _physics(r),
            _cpus(r),
            f"**{target}**" if target == "met" else target,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _shown(path: Path) -> str:
    """`path` relative to the repository when inside it (no machine's absolute path in the committed files)."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def write_outputs(rows: list[dict[str, Any]], runs_dir: Path, out: Path) -> str:
    """efficiency.json, efficiency.csv and efficiency_table.md into `out`; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "efficiency.json").write_text(json.dumps({"rows": rows, "runs_dir": _shown(runs_dir)}, indent=1) + "\n")
    with (out / "efficiency.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
    markdown = markdown_table(rows)
    (out / "efficiency_table.md").write_text(markdown)
    return markdown


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs_dir", nargs="?", type=Path, default=OUTPUTS / "learning")
    p.add_argument("--out", type=Path, default=None, help="folder of the outputs (default: runs_dir)")
    args = p.parse_args(argv)
    if not args.runs_dir.is_dir():
        print(f"[learning_efficiency] {args.runs_dir}: not a directory", file=sys.stderr)
        return 2
    rows = efficiency_rows(args.runs_dir)
    if not rows:
        print(f"[learning_efficiency] no runs under {args.runs_dir}", file=sys.stderr)
        return 1
    out = args.out or args.runs_dir
    print(write_outputs(rows, args.runs_dir, out), end="")
    print(f"[learning_efficiency] wrote {out / 'efficiency.json'}, efficiency.csv, efficiency_table.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
