"""Learning curves from local run files: `python -m offpolicy.plot <run or multirun dir>`.

Finds every run under the directory (a folder holding `metrics.csv` or
`metrics.jsonl` next to `config_resolved.yaml` or `.hydra/config.yaml`), groups
runs by env and algo, aligns the seeds of a group on a common grid (linear
interpolation over the range every seed covers) and draws the median (or mean)
and the min-max (or std) band over seeds against env steps and against
wall-clock seconds, one row per env, to one PNG. No W&B needed. A folder with
metrics that is left off (no config, or no row of the metric) is named on
stderr with the reason.

Snapshot evaluations (`eval/*` rows, `offpolicy.runtime.snapshot_eval`) are placed where
their snapshot was taken (`eval/env_steps`, `eval/snapshot_s`), not where their
episodes finished: the curve shows the frozen policies of those moments.

    python -m offpolicy.plot multirun/2026-01-02/10-11-12
    python -m offpolicy.plot runs/ --metric train/episode_return --center mean --spread std --out curves.png
    python -m offpolicy.plot runs/ --at-seconds 120 240 480 --targets ant=6000 halfcheetah=10000
        # + per (env, algo): median/min/max over seeds at those times, time to the target (CSV, Markdown)
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
import typing
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from offpolicy.exit_status import ExitStatus

DEFAULT_METRICS = ("eval/return", "train/episode_return")
"""tried in this order when --metric is not given: evaluation return first, training return as fallback"""
STEP_KEY = "env_steps"
TIME_KEY = "time/elapsed_s"
SNAPSHOT_X = {STEP_KEY: "eval/env_steps", TIME_KEY: "eval/snapshot_s"}
"""where an `eval/*` value's snapshot was taken, for each x axis"""
MEDIAN_KEY = "eval/return_median"
"""a snapshot's median episode return: what `time to target` compares"""
FINAL_EVAL = "eval_final.json"
"""written next to a run by `offpolicy.eval ... reference=gymnasium|dm_control` on its final checkpoint"""
CONFIG_NAMES = ("config_resolved.yaml", ".hydra/config.yaml")
GRID_POINTS = 200
RUN_END_SLACK_S = 1.0
"""a run whose last row is this close to t counts as having run until t (a budget of t ends a hair early)"""


class PlotError(RuntimeError):
    """Nothing to plot (no runs, or no run has the metric): a one-line message."""


class PlotArgumentError(PlotError):
    """A bad command-line argument (missing dir, unknown metric, bad time): one line naming it and what is allowed."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit status 2 (no usage block)."""

    def error(self, message: str) -> typing.NoReturn:
        message = re.sub(r"^argument [^:]+: (?=--)", "", message)  # our own checks already name the option
        print(f"[offpolicy.plot] invalid arguments: {message}", file=sys.stderr)
        sys.exit(ExitStatus.INVALID_CONFIG)


@dataclass
class RunRecord:
    """One run's identity and its metric columns (NaN where a row lacks a key)."""

    path: Path
    env: str
    algo: str
    seed: int
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def x_key(self, metric: str, x_key: str) -> str:
        """The column `metric` is placed on: its snapshot's coordinates for `eval/*` metrics that have them."""
        snapshot = SNAPSHOT_X.get(x_key)
        if metric.startswith("eval/") and snapshot in self.columns and np.isfinite(self.columns[snapshot]).any():
            return snapshot
        return x_key

    def curve(self, metric: str, x_key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(x, y) over the rows that have both, sorted by x; None when the run never logged `metric`."""
        x_key = self.x_key(metric, x_key)
        if metric not in self.columns or x_key not in self.columns:
            return None
        x, y = self.columns[x_key], self.columns[metric]
        keep = np.isfinite(x) & np.isfinite(y)
        if not keep.any():
            return None
        order = np.argsort(x[keep], kind="stable")
        return x[keep][order], y[keep][order]


def read_rows(run_dir: Path) -> list[dict[str, float]]:
    """Metric rows of a run: metrics.csv when present, else metrics.jsonl."""
    csv_path, jsonl_path = run_dir / "metrics.csv", run_dir / "metrics.jsonl"
    rows: list[dict[str, float]] = []
    if csv_path.is_file():
        with csv_path.open(newline="") as f:
            for raw in csv.DictReader(f):
                rows.append({k: _to_float(v) for k, v in raw.items() if k is not None})
    elif jsonl_path.is_file():
        for line in jsonl_path.read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                continue  # a row cut short by a killed run
            rows.append({k: _to_float(v) for k, v in raw.items()})
    return rows


def _to_float(value: object) -> float:
    if value is None or value == "":
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _read_config(run_dir: Path) -> dict | None:
    from omegaconf import OmegaConf

    for name in CONFIG_NAMES:
        path = run_dir / name
        if path.is_file():
            try:
                return OmegaConf.to_container(OmegaConf.load(path), resolve=False)  # type: ignore[return-value]
            except Exception:  # noqa: BLE001 - an unreadable config only hides this run's labels
                return {}
    return None


def find_runs(root: str | Path) -> list[RunRecord]:
    """Every run under `root` (root itself may be one run), sorted by path."""
    root = Path(root)
    if not root.is_dir():
        raise PlotArgumentError(f"dir={root}: {'is not a directory' if root.exists() else 'does not exist'}")
    return [run for run in map(_read_run, _run_dirs(root)) if isinstance(run, RunRecord)]


def _run_dirs(root: Path) -> list[Path]:
    """Folders under `root` holding a metrics file, W&B's own files left out."""
    candidates = {p.parent for name in ("metrics.csv", "metrics.jsonl") for p in root.rglob(name)}
    return [d for d in sorted(candidates) if "wandb" not in d.relative_to(root).parts]


def _read_run(run_dir: Path) -> RunRecord | str:
    """The run in `run_dir`, or why it is none."""
    cfg = _read_config(run_dir)
    if cfg is None:
        return f"no {' or '.join(CONFIG_NAMES)} next to its metrics"
    rows = read_rows(run_dir)
    if not rows:
        return "its metrics file has no rows"
    keys = sorted({k for row in rows for k in row})
    columns = {k: np.array([row.get(k, math.nan) for row in rows], dtype=np.float64) for k in keys}
    env = (cfg.get("env") or {}).get("name", "env") if isinstance(cfg.get("env"), dict) else "env"
    algo = (cfg.get("algo") or {}).get("name", "algo") if isinstance(cfg.get("algo"), dict) else "algo"
    seed = cfg.get("seed", 0)
    return RunRecord(run_dir, str(env), str(algo), int(seed) if isinstance(seed, int) else 0, columns)


def skipped_runs(root: str | Path, metric: str) -> list[str]:
    """One line per folder under `root` whose metrics are not on the plot of `metric`: the folder and why."""
    lines = []
    for run_dir in _run_dirs(Path(root)):
        run = _read_run(run_dir)
        if isinstance(run, RunRecord):
            if run.curve(metric, STEP_KEY) is not None:
                continue
            reason = f"no {metric} rows"
            if metric.startswith("eval/"):
                reason += " (no snapshot evaluation finished in it)"
            fallback = next((m for m in DEFAULT_METRICS if m != metric and run.curve(m, STEP_KEY) is not None), None)
            if fallback is not None:
                reason += f"; --metric {fallback} plots it"
            run = reason
        lines.append(f"skipped {run_dir}: {run}")
    return lines


def choose_metric(runs: list[RunRecord], requested: str | None) -> str:
    """The requested metric, or the first of DEFAULT_METRICS any run logged."""
    logged = {k for run in runs for k, v in run.columns.items() if np.isfinite(v).any()}
    if requested is not None:
        if requested not in logged:
            valid = sorted(k for k in logged if k not in (STEP_KEY, TIME_KEY))
            raise PlotArgumentError(f"--metric={requested}: no run logged it; logged: {', '.join(valid) or 'none'}")
        return requested
    for metric in DEFAULT_METRICS:
        if metric in logged:
            return metric
    raise PlotError(f"no run logged any of {list(DEFAULT_METRICS)}; logged: {sorted(logged)}")


@dataclass
class Band:
    """Centre (median or mean) and spread of one group over its seeds on a common grid."""

    x: np.ndarray
    mean: np.ndarray
    """the centre line: the median over seeds, or their mean (`center`)"""
    low: np.ndarray
    high: np.ndarray
    seeds: int


def aggregate(
    curves: list[tuple[np.ndarray, np.ndarray]], spread: str = "std", points: int = GRID_POINTS, center: str = "mean"
) -> Band:
    """Interpolate every seed onto the x range all of them cover, then the centre (mean or median) and the spread
    (std around the mean, or min/max) per point."""
    if not curves:
        raise ValueError("no curves to aggregate")
    lo = max(float(x[0]) for x, _ in curves)
    hi = min(float(x[-1]) for x, _ in curves)
    if hi > lo:
        grid = np.linspace(lo, hi, points)
    else:  # the seeds share no range (e.g. one row each): every logged x, each seed held flat past its ends
        grid = np.unique(np.concatenate([x for x, _ in curves]))
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])
    if center not in ("mean", "median"):
        raise ValueError(f"center must be 'mean' or 'median', got {center!r}")
    mean = ys.mean(axis=0) if center == "mean" else np.median(ys, axis=0)
    if spread == "minmax":
        low, high = ys.min(axis=0), ys.max(axis=0)
    elif spread == "std":
        std = ys.std(axis=0)
        low, high = mean - std, mean + std
    else:
        raise ValueError(f"spread must be 'std' or 'minmax', got {spread!r}")
    return Band(grid, mean, low, high, len(curves))


def bands(
    runs: list[RunRecord], metric: str, x_key: str, spread: str, center: str = "mean"
) -> dict[tuple[str, str], Band]:
    """(env, algo) -> Band over the seeds that logged `metric` against `x_key`."""
    grouped: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for run in runs:
        curve = run.curve(metric, x_key)
        if curve is not None:
            grouped[(run.env, run.algo)].append(curve)
    return {key: aggregate(curves, spread, center=center) for key, curves in sorted(grouped.items())}


def draw_band(ax, band: Band, color: str, label: str) -> None:
    """The centre line and the spread over seeds; a band of one point (a single logged row) as a marker with
    the spread as an error bar, since a line through one point draws nothing."""
    if band.x.size == 1:
        yerr = np.stack([band.mean - band.low, band.high - band.mean])
        ax.errorbar(band.x, band.mean, yerr=yerr, fmt="o", color=color, capsize=4, label=label)
        return
    ax.plot(band.x, band.mean, color=color, label=label)
    if band.seeds > 1:
        ax.fill_between(band.x, band.low, band.high, color=color, alpha=0.2, linewidth=0)


def plot(
    root: str | Path,
    out: str | Path | None = None,
    metric: str | None = None,
    spread: str = "minmax",
    center: str = "median",
) -> tuple[Path, str]:
    """Draw `metric` vs env steps and vs wall-clock for every (env, algo) under `root`; returns (png, metric)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = find_runs(root)
    if not runs:
        raise PlotError(f"no runs under {root} (a run is a folder with metrics.csv or metrics.jsonl and its config)")
    metric = choose_metric(runs, metric)
    by_steps = bands(runs, metric, STEP_KEY, spread, center)
    by_time = bands(runs, metric, TIME_KEY, spread, center)
    envs = sorted({env for env, _ in by_steps})
    algos = sorted({algo for _, algo in by_steps})
    colors = {algo: f"C{i % 10}" for i, algo in enumerate(algos)}
    fig, axes = plt.subplots(len(envs), 2, figsize=(12, 4 * len(envs)), squeeze=False)
    for row, env in enumerate(envs):
        for col, (curves, xlabel) in enumerate(((by_steps, "env steps"), (by_time, "wall-clock (s)"))):
            ax = axes[row][col]
            for (band_env, algo), band in curves.items():
                if band_env == env:
                    draw_band(ax, band, colors[algo], f"{algo} ({band.seeds} seed{'s' if band.seeds != 1 else ''})")
            ax.set_title(f"{env}: {metric} vs {xlabel}")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(metric)
            ax.grid(alpha=0.3)
            ax.legend(loc="best", fontsize="small")
    spread_text = f"{center}, " + ("± std" if spread == "std" else "min–max")
    fig.suptitle(f"{metric} ({spread_text} over seeds)")
    fig.tight_layout()
    out_path = Path(out) if out is not None else Path(root) / f"{metric.replace('/', '_')}.png"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path, metric


@dataclass
class Milestone:
    """`metric` of one (env, algo) group as it stood at `seconds` of wall-clock, over the seeds that ran that long."""

    env: str
    algo: str
    seconds: float
    seeds: int
    median: float
    low: float
    high: float
    env_steps: float
    """median over those seeds of the env steps at the row that gave the value"""


def milestones(runs: list[RunRecord], metric: str, seconds: list[float]) -> list[Milestone]:
    """Per (env, algo) and time t: each seed's last logged `metric` at or before t (what was known by then),
    then median and min/max over the seeds whose run lasted until t (a run that stopped earlier is left out,
    never held flat; `seeds` 0 gives NaNs)."""
    grouped: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for run in runs:
        if metric in run.columns and TIME_KEY in run.columns:
            grouped[(run.env, run.algo)].append(run)
    out = []
    for (env, algo), group in sorted(grouped.items()):
        for t in seconds:
            values, steps = [], []
            for run in group:
                run_times = run.columns[TIME_KEY]
                if not np.isfinite(run_times).any() or np.nanmax(run_times) < t - RUN_END_SLACK_S:
                    continue  # this seed never ran until t
                time_key, step_key = run.x_key(metric, TIME_KEY), run.x_key(metric, STEP_KEY)
                times, ys = run.columns[time_key], run.columns[metric]
                step_col = run.columns.get(step_key, np.full_like(times, np.nan))
                # a snapshot taken by t (the final one lands a hair after a budget of t: allowed the slack)
                limit = t + RUN_END_SLACK_S if time_key != TIME_KEY else t
                known = np.flatnonzero(np.isfinite(ys) & np.isfinite(times) & (times <= limit))
                if known.size:
                    last = known[np.argmax(times[known])]
                    values.append(float(ys[last]))
                    steps.append(float(step_col[last]))
            if values:
                out.append(Milestone(env, algo, t, len(values), float(np.median(values)), min(values), max(values),
                                     float(np.median(steps))))  # fmt: skip
            else:
                out.append(Milestone(env, algo, t, 0, math.nan, math.nan, math.nan, math.nan))
    return out


def write_milestones(path: Path, metric: str, rows: list[Milestone]) -> None:
    """CSV: env, algo, seconds, seeds, median/min/max of `metric`, env steps."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env", "algo", "seconds", "seeds", f"{metric} median", f"{metric} min", f"{metric} max",
                         "env_steps"])  # fmt: skip
        for m in rows:
            writer.writerow([m.env, m.algo, m.seconds, m.seeds, m.median, m.low, m.high, m.env_steps])


def time_to_target(run: RunRecord, target: float, key: str = MEDIAN_KEY) -> float:
    """Seconds at which the first snapshot whose median episode return reached `target` was taken (inf: never)."""
    if key not in run.columns:
        return math.inf
    times, values = run.columns[run.x_key(key, TIME_KEY)], run.columns[key]
    hit = np.flatnonzero(np.isfinite(values) & np.isfinite(times) & (values >= target))
    return float(times[hit].min()) if hit.size else math.inf


def final_rescore(run: RunRecord) -> dict[str, float]:
    """From the run's eval_final.json (if any): the final snapshot's mean return in its own env and in the
    reference implementation (with this task's options and with the reference's default reward options)."""
    path = run.path / FINAL_EVAL
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    out = {"own": float(data["return_mean"])}
    for name, ref in (data.get("reference") or {}).items():
        out[name] = float(ref["mean"])
    return out


@dataclass
class TableRow:
    """One (env, algo) line of the results table."""

    env: str
    algo: str
    seeds: int
    at: list[Milestone]
    targets: tuple[float, ...]
    """the returns asked for (--targets), in the order given"""
    time_to_target_s: tuple[float, ...]
    """per target: median over seeds of the time to the first snapshot whose median reached it (inf: not reached)"""
    seeds_reaching: tuple[int, ...]
    """per target: how many seeds reached it"""
    final_median_min: tuple[float, float]
    """min over seeds of each final snapshot's median episode return, and its median over seeds"""
    rescore: dict[str, float]
    """median over seeds of eval_final.json's mean returns, per implementation"""


def results_table(
    runs: list[RunRecord], metric: str, seconds: list[float], targets: dict[str, tuple[float, ...]]
) -> list[TableRow]:
    """Per (env, algo): the milestones, time to target, the final snapshot's median and the re-scores."""
    grouped: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for run in runs:
        grouped[(run.env, run.algo)].append(run)
    at = {(m.env, m.algo, m.seconds): m for m in milestones(runs, metric, seconds)}
    table = []
    for (env, algo), group in sorted(grouped.items()):
        wanted = tuple(targets.get(env, ()))
        times = [[time_to_target(run, target) for run in group] for target in wanted]
        finals = []
        for run in group:
            values = run.columns.get(MEDIAN_KEY)
            if values is not None and np.isfinite(values).any():
                finals.append(float(values[np.flatnonzero(np.isfinite(values))[-1]]))
        rescores: dict[str, list[float]] = defaultdict(list)
        for run in group:
            for name, value in final_rescore(run).items():
                rescores[name].append(value)
        table.append(
            TableRow(
                env=env,
                algo=algo,
                seeds=len(group),
                # one per time, also for a group that never logged `metric` (its cells say n/a)
                at=[at.get((env, algo, t), Milestone(env, algo, t, 0, *[math.nan] * 4)) for t in seconds],
                targets=wanted,
                time_to_target_s=tuple(float(np.median(t)) for t in times),
                seeds_reaching=tuple(sum(math.isfinite(x) for x in t) for t in times),
                final_median_min=(min(finals), float(np.median(finals))) if finals else (math.nan, math.nan),
                rescore={k: float(np.median(v)) for k, v in rescores.items()},
            )
        )
    return table


def markdown_table(rows: list[TableRow], metric: str) -> str:
    """The results table as Markdown: median [min] over seeds at each time, env steps, time to target, re-scores."""
    if not rows:
        return ""
    seconds = [m.seconds for m in rows[0].at]
    label = "snapshot mean" if metric == DEFAULT_METRICS[0] else metric
    head = ["algo", "task", "seeds", *[f"{label} at {t / 60:g} min, median [min] over seeds" for t in seconds]]
    head += [
        "env steps",
        "target",
        "time to target (snapshot median)",
        "final snapshot median, median (min) over seeds",
    ]
    head += ["re-score of the final snapshot (mean, median over seeds)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [r.algo, r.env, str(r.seeds)]
        for m in r.at:
            cells.append(f"{m.median:,.0f} [{m.low:,.0f}]" if m.seeds else "n/a")
        last = r.at[-1] if r.at else None
        cells.append(f"{last.env_steps / 1e6:.1f} M" if last and last.seeds else "n/a")
        whens = []
        for when_s, reaching in zip(r.time_to_target_s, r.seeds_reaching, strict=True):
            when = f"{when_s / 60:.1f} min" if math.isfinite(when_s) else "not reached"
            whens.append(f"{when} ({reaching}/{r.seeds} seeds)")
        cells += [" / ".join(f"{t:,.0f}" for t in r.targets), " / ".join(whens)]
        low, median = r.final_median_min
        cells.append(f"{median:,.0f} ({low:,.0f})" if math.isfinite(median) else "n/a")
        cells.append(", ".join(f"{k}: {v:,.0f}" for k, v in r.rescore.items()) or "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary_lines(root: str | Path, metric: str, spread: str = "std", center: str = "mean") -> list[str]:
    """One line per (env, algo): seeds and the final value of the mean curve with its spread."""
    lines = []
    for (env, algo), band in bands(find_runs(root), metric, STEP_KEY, spread, center).items():
        lines.append(
            f"{env:>12} {algo:>10}  seeds {band.seeds}  at {band.x[-1]:,.0f} env steps: "
            f"{band.mean[-1]:.2f} [{band.low[-1]:.2f}, {band.high[-1]:.2f}]"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    """CLI entry; one line on stderr and exit status 2 for a bad argument, 1 when there is nothing to plot."""
    parser = _Parser(prog="python -m offpolicy.plot", description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="a run dir, a multirun (sweep) dir, or any folder holding runs")
    parser.add_argument("--out", default=None, help="PNG path (default: <dir>/<metric>.png)")
    parser.add_argument("--metric", default=None, help=f"metric to plot (default: first of {list(DEFAULT_METRICS)})")
    parser.add_argument("--spread", choices=("std", "minmax"), default="minmax", help="band over seeds")
    parser.add_argument("--center", choices=("median", "mean"), default="median", help="line over seeds")
    parser.add_argument(
        "--targets",
        type=_target,
        nargs="+",
        default=[],
        metavar="ENV=RETURN[,RETURN...]",
        help="with --at-seconds: time to the first snapshot whose median return reached each target, per env",
    )
    parser.add_argument(
        "--at-seconds",
        type=_seconds,
        nargs="+",
        default=None,
        metavar="T",
        help="also tabulate the metric at these wall-clock seconds (median over seeds) to <png stem>_at_seconds.csv",
    )
    args = parser.parse_args(argv)
    try:
        targets: dict[str, tuple[float, ...]] = {}
        for env, returns in args.targets:  # an env named twice keeps both lists, in order
            targets[env] = targets.get(env, ()) + returns
        out, metric = plot(args.dir, args.out, args.metric, args.spread, args.center)
    except PlotArgumentError as exc:
        print(f"[offpolicy.plot] invalid arguments: {exc}", file=sys.stderr)
        return ExitStatus.INVALID_CONFIG
    except PlotError as exc:
        print(f"[offpolicy.plot] {exc}", file=sys.stderr)
        return ExitStatus.NOTHING_TO_PLOT
    for line in skipped_runs(args.dir, metric):
        print(f"[offpolicy.plot] {line}", file=sys.stderr)
    for line in summary_lines(args.dir, metric, args.spread, args.center):
        print(line)
    print(f"[offpolicy.plot] wrote {out}")
    if args.at_seconds:
        rows = milestones(find_runs(args.dir), metric, args.at_seconds)
        for m in rows:
            value = f"{m.median:.2f} [{m.low:.2f}, {m.high:.2f}] at {m.env_steps:,.0f} env steps" if m.seeds else "n/a"
            print(f"{m.env:>12} {m.algo:>10}  at {m.seconds:g} s  seeds {m.seeds}: {value}")
        table = out.with_name(f"{out.stem}_at_seconds.csv")
        write_milestones(table, metric, rows)
        print(f"[offpolicy.plot] wrote {table}")
        markdown = markdown_table(results_table(find_runs(args.dir), metric, args.at_seconds, targets), metric)
        md_path = out.with_name(f"{out.stem}_table.md")
        md_path.write_text(markdown)
        print(markdown, end="")
        print(f"[offpolicy.plot] wrote {md_path}")
    return ExitStatus.OK


def _target(text: str) -> tuple[str, tuple[float, ...]]:
    """A --targets value: ENV=RETURN[,RETURN...] with finite returns."""
    env, _, value = text.partition("=")
    try:
        numbers = tuple(float(v) for v in value.split(","))
    except ValueError:
        numbers = (math.nan,)
    if not env or not all(math.isfinite(n) for n in numbers):
        raise argparse.ArgumentTypeError(
            f"--targets {text}: must be ENV=RETURN[,RETURN...], e.g. ant=6000 or dmc_dog_run=600,850"
        )
    return env, numbers


def _seconds(text: str) -> float:
    """An --at-seconds value: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"--at-seconds={text}: must be a number of seconds >= 0")
    return value


if __name__ == "__main__":
    sys.exit(main())
