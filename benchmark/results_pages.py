"""Write the generated tables and curves of docs/results/ from the committed learning-run folders (`make tables`).

Each suite's page holds, between marker comments, the results table that `offpolicy.plot --at-seconds` writes,
a table of every seed's final snapshot and re-score (from each run's `summary.json` and `eval_final.json`) and
the efficiency table that `benchmark.offpolicy.learning_efficiency` writes, all built from the suite's run
folders under benchmark/outputs/; the curves go next to the page as `<suite>_curves.png`. Everything outside
the markers is written by hand and left as it is. `--check` writes nothing and exits 1 when a page's tables
differ from what the run folders give (the curves are not compared: a PNG's bytes vary with the plotting
library's version).

    python -m benchmark.results_pages            # what `make tables` runs
    python -m benchmark.results_pages --check
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

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
)  # fmt: skip

BLOCKS = ("results", "seeds", "efficiency")
"""the generated blocks of a page, each between `begin(name)` and `end(name)`"""


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
    with (run / "metrics.csv").open() as f:
        snaps = [(float(r["time/elapsed_s"]), float(r["eval/return_median"])) for r in csv.DictReader(f)
                 if r.get("eval/return_median")]  # fmt: skip
    got = stability([t for t, _ in snaps], [m for _, m in snaps], target)
    if got["first_reached"] is None:
        return f"{target:,.0f} not reached"
    if not got["snapshots_after"]:
        return f"{target:,.0f} first reached by the final snapshot"
    n = got["snapshots_after"]
    return (f"{target:,.0f} from {got['first_reached'] / 60:.1f} min: {round(got['held_fraction'] * n)}/{n} "
            f"(>= 0.95 x: {round(got['held_fraction_95'] * n)}/{n}), worst {got['worst_after']:,.0f}")  # fmt: skip


def seeds_table(runs: Path, episode_steps: int, targets: dict[str, float] | None = None) -> str:
    """One row per run folder: its final snapshot's episodes, the offline re-scores of its final checkpoint and
    how its snapshots held the task's target once first reached (`stability_cell`)."""
    targets = targets or {}
    head = ("| algo | task | seed | env steps | final snapshot: mean, median [worst episode] | offline re-score of "
            "the final checkpoint: mean, median [worst episode] | snapshots at the target after first reaching it "
            "(at 0.95 x target), worst snapshot median after |")  # fmt: skip
    rows = []
    for summary_path in sorted(runs.glob("*/summary.json")):
        summary = json.loads(summary_path.read_text())
        final = json.loads((summary_path.parent / "eval_final.json").read_text())
        seed = summary_path.parent.name.rpartition("_seed")[2]
        rescores = [
            f"{ref}: {_episodes(stats, episode_steps)}" for ref, stats in (final.get("reference") or {}).items()
        ]
        cells = [final["algo"], final["env"], seed, f"{summary['env_steps'] / 1e6:.1f} M",
                 _episodes(summary["snapshot_eval"], episode_steps), "; ".join(rescores) or "n/a",
                 stability_cell(summary_path.parent, targets.get(final["env"]))]  # fmt: skip
        rows.append((final["algo"], final["env"], int(seed), "| " + " | ".join(cells) + " |"))
    lines = [head, "| --- | --- | ---: | ---: | --- | --- | --- |"] + [row[-1] for row in sorted(rows)]
    return "\n".join(lines) + "\n"


def generate(suite: Suite, out: Path) -> dict[str, str]:
    """Write the suite's curves and tables into `out`; returns the tables by block."""
    png = out / "curves.png"
    _run(["offpolicy.plot", suite.runs, "--out", str(png), "--at-seconds", *suite.at_seconds,
          "--targets", *suite.targets])  # fmt: skip
    _run(["benchmark.offpolicy.learning_efficiency", suite.runs, "--out", str(out)])
    return {
        "results": (out / "curves_table.md").read_text(),
        "seeds": seeds_table(REPO / suite.runs, suite.episode_steps, dict(suite.stability_targets)),
        "efficiency": (out / "efficiency_table.md").read_text(),
    }


def refresh(suite: Suite, check: bool) -> bool:
    """Bring one page's tables (and, unless `check`, its curves) up to date; True when they already were."""
    page, shown = PAGES / f"{suite.page}.md", f"docs/results/{suite.page}.md"
    if not page.is_file():
        raise PageError(f"{shown}: no such page")
    text = page.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        tables = generate(suite, Path(tmp))
        new = text
        for name in BLOCKS:
            new = splice(new, name, tables[name], shown)
        if not check:
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
