"""Write the generated tables and curves of docs/results/ from the committed learning-run folders (`make tables`).

Each suite's page holds, between marker comments, the results table that `offpolicy.plot --at-seconds` writes,
a table of every seed's final snapshot and re-score (from each run's `summary.json` and `eval_final.json`) and
the efficiency table that `benchmark.offpolicy.learning_efficiency` writes, all built from the suite's run
folders under benchmark/outputs/; the curves go next to the page as `<suite>_curves.png`. Everything outside
the markers is written by hand and left as it is. `--check` writes nothing and exits 1 when a page's tables
differ from what the run folders give (the curves are not compared: a PNG's bytes vary with the plotting
library's version). The locomotion page (`TrackingSuite`) holds one generated block instead, its tracking table
(`tracking_table`): velocity-command tasks are judged by how closely they follow their commands and how often
they fall, not by a return target.

    python -m benchmark.results_pages            # what `make tables` runs
    python -m benchmark.results_pages --check
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from statistics import median
from typing import ClassVar

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "docs" / "results"


@dataclass(frozen=True)
class Suite:
    """One results page and the run folders and plot arguments its tables come from."""

    page: str
    runs: str
    at_seconds: tuple[str, ...]
    targets: tuple[str, ...]
    episode_steps: int = 1000
    """the tasks' time limit: an evaluation episode shorter than this ended early"""
    stability_targets: tuple[tuple[str, float], ...] = ()
    """(task, target return) of the seeds table's stability column (`benchmark.offpolicy.stability`)"""


@dataclass(frozen=True)
class TrackingSuite:
    """A results page of velocity-command tasks: one table of tracking errors and falls (`tracking_table`)."""

    page: str
    runs: str
    lin_vel_target: float = 0.15
    """m/s: the planar velocity error a snapshot must be under to meet the tracking target"""
    yaw_rate_target: float = 0.2
    """rad/s: the yaw-rate error a snapshot must be under to meet the tracking target"""
    blocks: ClassVar[tuple[str, ...]] = ("locomotion",)


SUITES = (
    Suite("gymnasium", "benchmark/outputs/learning", ("120", "240", "480"), ("ant=6000", "humanoid=6000", "halfcheetah=10000"),
          stability_targets=(("ant", 6000), ("humanoid", 6000), ("halfcheetah", 10000))),
    Suite(
        "dmc",
        "benchmark/outputs/learning_dmc",
        ("300", "600", "900"),
        ("dmc_humanoid_run=600,850", "dmc_dog_run=600,870", "dmc_quadruped_run=600,930",
         "dmc_humanoid_walk=600,930", "dmc_dog_trot=600,930"),
        stability_targets=(("dmc_humanoid_run", 850), ("dmc_dog_run", 870), ("dmc_quadruped_run", 930),
                           ("dmc_humanoid_walk", 930), ("dmc_dog_trot", 930)),
    ),
    TrackingSuite("locomotion", "benchmark/outputs/learning_locomotion"),
)  # fmt: skip

BLOCKS = ("results", "seeds", "efficiency")
"""the generated blocks of a return-target page (`Suite`), each between `begin(name)` and `end(name)`"""
TRACKING_COMMAND = "python -m benchmark.offpolicy.learning_run --algo flashsac --task go1_joystick_flat --seed 0"
"""what makes a row of the tracking table (shown while it has none)"""


class PageError(Exception):
    """A page or its markers are missing, or a generator failed."""


def begin(name: str) -> str:
    """The comment that opens the generated block `name`."""
    return f"<!-- begin {name} table: written by `make tables`, do not edit -->"


def end(name: str) -> str:
    """The comment that closes the generated block `name`."""
    return f"<!-- end {name} table -->"


def splice(text: str, name: str, table: str, where: str = "page") -> str:
    """`text` with the lines between block `name`'s markers replaced by `table`."""
    head, found, rest = text.partition(begin(name) + "\n")
    if not found:
        raise PageError(f"{where}: no line {begin(name)!r}")
    _, found, tail = rest.partition(end(name))
    if not found:
        raise PageError(f"{where}: no {end(name)!r} after {begin(name)!r}")
    return head + begin(name) + "\n" + table.rstrip("\n") + "\n" + end(name) + tail


def _run(args: list[str]) -> None:
    """Run `python -m <args>` from the repository root (this checkout's code first on the path)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise PageError(f"python -m {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")


def _episodes(stats: dict, episode_steps: int) -> str:
    """`mean, median [worst]` of an evaluation's episodes, and how many ended before the time limit."""
    text = f"{stats['mean']:,.0f}, {stats['median']:,.0f} [{stats['min']:,.0f}]"
    lengths = stats.get("lengths") or []
    short = sum(1 for n in lengths if n < episode_steps)
    return text + (f" ({short} of {len(lengths)} ended early)" if short else "")


def stability_cell(run: Path, target: float | None) -> str:
    """`held / after (>= 0.95 x: n), worst <median>` of the run's snapshot medians after it first reached `target`."""
    from benchmark.offpolicy.stability import stability

    if target is None:
        return "n/a"
    # a snapshot's time is when it was frozen (`eval/snapshot_s`, as in the time-to-target column), not when
    # its episodes finished and the row was logged (`time/elapsed_s`, the fallback for older runs)
    with (run / "metrics.csv").open() as f:
        snaps = [(float(r.get("eval/snapshot_s") or r["time/elapsed_s"]), float(r["eval/return_median"]))
                 for r in csv.DictReader(f) if r.get("eval/return_median")]  # fmt: skip
    got = stability([t for t, _ in snaps], [m for _, m in snaps], target)
    if got["first_reached"] is None:
        return f"{target:,.0f} not reached"
    if not got["snapshots_after"]:
        return f"{target:,.0f} first reached by the final snapshot"
    n = got["snapshots_after"]
    return (f"{target:,.0f} from {got['first_reached'] / 60:.1f} min: {round(got['held_fraction'] * n)}/{n} "
            f"(>= 0.95 x: {round(got['held_fraction_95'] * n)}/{n}), worst {got['worst_after']:,.0f}")  # fmt: skip


@cache
def default_actor(algo: str, env: str) -> str:
    """The weights a run of `algo` on `env` evaluates with at the current defaults (`conf/`, its `algo_env`
    file included): `averaged` where `algo.policy_ema` is on, else `raw`."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"algo={algo}", f"env={env}"])
    return "averaged" if cfg.algo.policy_ema else "raw"


def actor_cell(run: Path, final: dict) -> str:
    """Which weights the run's snapshots and final checkpoint were scored with, and today's default where it
    differs: the row was made before the default changed. A run from before `algo.policy_ema` existed (its
    eval file names no actor and its config has no such key) acted with the raw actor."""
    actor = final.get("actor")
    if actor is None:
        from omegaconf import OmegaConf

        config = run / "config_resolved.yaml"
        algo = OmegaConf.load(config).get("algo", {}) if config.exists() else {}
        actor = "averaged" if algo.get("policy_ema", False) else "raw"
    now = default_actor(final["algo"], final["env"])
    return actor if actor == now else f"{actor} (default now {now})"


def seeds_table(runs: Path, episode_steps: int, targets: dict[str, float] | None = None) -> str:
    """One row per run folder: the weights it was scored with (`actor_cell`), its final snapshot's episodes, the
    offline re-scores of its final checkpoint and how its snapshots held the task's target once first reached
    (`stability_cell`)."""
    targets = targets or {}
    head = ("| algo | task | seed | actor | env steps | final snapshot: mean, median [worst episode] | offline "
            "re-score of the final checkpoint: mean, median [worst episode] | snapshots at the target after first "
            "reaching it (at 0.95 x target), worst snapshot median after |")  # fmt: skip
    rows = []
    for summary_path in sorted(runs.glob("*/summary.json")):
        summary = json.loads(summary_path.read_text())
        final = json.loads((summary_path.parent / "eval_final.json").read_text())
        seed = summary_path.parent.name.rpartition("_seed")[2]
        rescores = [
            f"{ref}: {_episodes(stats, episode_steps)}" for ref, stats in (final.get("reference") or {}).items()
        ]
        cells = [final["algo"], final["env"], seed, actor_cell(summary_path.parent, final),
                 f"{summary['env_steps'] / 1e6:.1f} M",
                 _episodes(summary["snapshot_eval"], episode_steps), "; ".join(rescores) or "n/a",
                 stability_cell(summary_path.parent, targets.get(final["env"]))]  # fmt: skip
        rows.append((final["algo"], final["env"], int(seed), "| " + " | ".join(cells) + " |"))
    lines = [head, "| --- | --- | ---: | --- | ---: | --- | --- | --- |"] + [row[-1] for row in sorted(rows)]
    return "\n".join(lines) + "\n"


def time_to_tracking_target(metrics: Path, lin_vel_target: float, yaw_rate_target: float) -> float:
    """Seconds into the loop at which the first snapshot with both tracking errors under their targets was frozen
    (`eval/snapshot_s` of metrics.csv's snapshot rows; inf: none was)."""
    with metrics.open() as f:
        for row in csv.DictReader(f):
            if not row.get("eval/lin_vel_error") or not row.get("eval/yaw_rate_error"):
                continue  # a training row, or a snapshot of a task without tracking terms
            lin, yaw = float(row["eval/lin_vel_error"]), float(row["eval/yaw_rate_error"])
            if lin < lin_vel_target and yaw < yaw_rate_target:  # NaN (no step counted) meets nothing
                return float(row["eval/snapshot_s"])
    return math.inf


def _median_worst(values: list[float], worst, fmt: str) -> str:
    """`median [worst]` over seeds; an error of NaN (no step counted: every episode fell within its first
    second) counts as infinite, the worst, and shows as -."""
    values = [math.inf if math.isnan(v) else v for v in values]
    show = lambda v: format(v, fmt) if math.isfinite(v) else "-"  # noqa: E731
    return f"{show(median(values))} [{show(worst(values))}]"


def tracking_table(suite: TrackingSuite, runs: Path) -> str:
    """Per (task, algo): the final snapshot's median return, tracking errors and falls (median [worst] over
    seeds), env steps, time to first meet the tracking target and the throughput against bare physics (median
    [worst] over the seeds with a replayed window: the ratio moves with the machine's physics speed)."""
    groups: dict[tuple[str, str], list[Path]] = {}
    for summary_path in sorted(runs.glob("*/summary.json")):
        task, _, rest = summary_path.parent.name.rpartition("_seed")[0].rpartition("_")
        groups.setdefault((task, rest), []).append(summary_path.parent)
    if not groups:
        return f"No runs yet. `{TRACKING_COMMAND}` makes a row (on the machine of the protocol above).\n"
    target = f"lin-vel < {suite.lin_vel_target:g} m/s and yaw-rate < {suite.yaw_rate_target:g} rad/s"
    head = ("| task | algo | seeds | final snapshot median return, median [worst] over seeds | lin-vel error (m/s) "
            "| yaw-rate error (rad/s) | falls / episodes | env steps | time to first meet the target "
            f"({target}) | throughput / bare physics (replayed window), median [worst] over seeds |")  # fmt: skip
    rows = []
    for (task, algo), folders in sorted(groups.items()):
        snaps = [json.loads((f / "summary.json").read_text())["snapshot_eval"] for f in folders]
        steps = [json.loads((f / "summary.json").read_text())["env_steps"] for f in folders]
        falls = [round(s["fall_fraction"] * s["episodes"]) for s in snaps]
        episodes = {s["episodes"] for s in snaps}
        per = f"/{episodes.pop()}" if len(episodes) == 1 else " episodes"
        times = [time_to_tracking_target(f / "metrics.csv", suite.lin_vel_target, suite.yaw_rate_target)
                 for f in folders]  # fmt: skip
        met = sorted(t for t in times if math.isfinite(t))
        when = median(times)  # inf while fewer than half the seeds met it
        when_text = f"{when:.0f} s" if math.isfinite(when) else "not met"
        ratios = [json.loads((f / "replay.json").read_text())["ratio_to_replayed_bare"]
                  for f in folders if (f / "replay.json").is_file()]  # fmt: skip
        cells = [
            task, algo, str(len(folders)),
            _median_worst([float(s["median"]) for s in snaps], min, ",.1f"),
            _median_worst([float(s["lin_vel_error"]) for s in snaps], max, ".3f"),
            _median_worst([float(s["yaw_rate_error"]) for s in snaps], max, ".3f"),
            f"{median(falls):g}{per} [{max(falls)}{per}]",
            f"{median(steps) / 1e6:.1f} M",
            f"{when_text} ({len(met)}/{len(folders)} seeds)",
            f"{_median_worst(ratios, min, '.2f')} ({len(ratios)}/{len(folders)} seeds)"
            if ratios else "n/a (no replayed window)",
        ]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, "| --- | --- | ---: | --- | --- | --- | --- | ---: | --- | --- |", *rows]) + "\n"


def generate(suite: Suite | TrackingSuite, out: Path) -> dict[str, str]:
    """Write the suite's curves and tables into `out`; returns the tables by block."""
    if isinstance(suite, TrackingSuite):
        return {"locomotion": tracking_table(suite, REPO / suite.runs)}
    png = out / "curves.png"
    _run(["offpolicy.plot", suite.runs, "--out", str(png), "--at-seconds", *suite.at_seconds,
          "--targets", *suite.targets])  # fmt: skip
    _run(["benchmark.offpolicy.learning_efficiency", suite.runs, "--out", str(out)])
    return {
        "results": (out / "curves_table.md").read_text(),
        "seeds": seeds_table(REPO / suite.runs, suite.episode_steps, dict(suite.stability_targets)),
        "efficiency": (out / "efficiency_table.md").read_text(),
    }


def refresh(suite: Suite | TrackingSuite, check: bool) -> bool:
    """Bring one page's tables (and, unless `check`, its curves) up to date; True when they already were."""
    page, shown = PAGES / f"{suite.page}.md", f"docs/results/{suite.page}.md"
    if not page.is_file():
        raise PageError(f"{shown}: no such page")
    text = page.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        tables = generate(suite, Path(tmp))
        new = text
        for name in getattr(suite, "blocks", BLOCKS):
            new = splice(new, name, tables[name], shown)
        if not check:
            if (Path(tmp) / "curves.png").is_file():
                shutil.copyfile(Path(tmp) / "curves.png", PAGES / f"{suite.page}_curves.png")
            page.write_text(new)
    return new == text


def main(argv: list[str] | None = None) -> int:
    """CLI entry: 0 done (or, with --check, up to date), 1 stale with --check, 2 a page or a generator failed."""
    parser = argparse.ArgumentParser(prog="python -m benchmark.results_pages", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page's tables are stale")
    args = parser.parse_args(argv)
    stale = []
    try:
        for suite in SUITES:
            if not refresh(suite, args.check):
                stale.append(f"docs/results/{suite.page}.md")
    except PageError as exc:
        print(f"[results_pages] {exc}", file=sys.stderr)
        return 2
    if args.check and stale:
        print(f"[results_pages] stale tables in {', '.join(stale)}: run `make tables`", file=sys.stderr)
        return 1
    pages = ", ".join(f"docs/results/{s.page}.md" for s in SUITES)
    print(f"[results_pages] {'checked' if args.check else 'wrote'} {pages}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
