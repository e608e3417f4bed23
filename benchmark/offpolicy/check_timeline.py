"""Check a recorded timeline: inference and update never overlap, and alternate tick by tick.

Reads a Chrome trace written by `offpolicy.runtime.timeline.Timeline` (or trimmed by
`benchmark_end_to_end.py`), checks the device track (CUDA events) where it exists
and the host track always, prints a report and writes it next to the trace as
`<trace>.check.json`. Exit status 0 when every check passes. Where the trace has
the collector's track, the report also gives the collector's per-tick serial time
outside physics: from the action it waited for to the next observations it
published, minus the pool step (median, and as a share of the tick).

    python -m benchmark.offpolicy.check_timeline benchmark/outputs/end_to_end/timeline_ant_fastsac.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from offpolicy.runtime.timeline import load_intervals  # noqa: E402


def check_track(intervals: list[dict]) -> dict:
    """Overlap and alternation checks on one track's intervals (sorted by start)."""
    device = [iv for iv in intervals if iv["phase"] in ("inference", "update")]
    overlaps = [
        (a["phase"], a["tick"], b["phase"], b["tick"])
        for a, b in zip(device, device[1:])
        if b["start"] < a["end"] and a["phase"] != b["phase"]
    ]
    # Alternation: after the first update, the sequence is I U I U ... with update t right after inference t.
    first_update = next((i for i, iv in enumerate(device) if iv["phase"] == "update"), None)
    broken = []
    if first_update is not None:
        seq = device[first_update - 1 :] if first_update > 0 else device[first_update:]
        for a, b in zip(seq, seq[1:]):
            ok = (a["phase"], b["phase"]) in {("inference", "update"), ("update", "inference")}
            if ok and a["phase"] == "inference":
                ok = a["tick"] == b["tick"]
            if ok and a["phase"] == "update":
                ok = b["tick"] == a["tick"] + 1
            if not ok:
                broken.append((a["phase"], a["tick"], b["phase"], b["tick"]))
    inference = [iv for iv in device if iv["phase"] == "inference"]
    update = [iv for iv in device if iv["phase"] == "update"]
    return {
        "inference_intervals": len(inference),
        "update_intervals": len(update),
        "first_tick": min((iv["tick"] for iv in device), default=None),
        "last_tick": max((iv["tick"] for iv in device), default=None),
        "overlaps": len(overlaps),
        "alternation_breaks": len(broken),
        "first_problems": (overlaps + broken)[:5],
        "passed": not overlaps and not broken and bool(update),
    }


def collector_serial(intervals: list[dict]) -> dict | None:
    """Per tick: the collector's critical path (action seen -> next obs published) outside the pool step."""
    by_tick: dict[int, dict[str, dict]] = {}
    for iv in intervals:
        by_tick.setdefault(iv["tick"], {})[iv["phase"]] = iv
    outside, cycles, physics = [], [], []
    publishes = sorted((iv["end"], iv["tick"]) for iv in intervals if iv["phase"] == "publish")
    ends = {tick: end for end, tick in publishes}
    for tick, phases in sorted(by_tick.items()):
        if not {"task", "publish", "physics"} <= set(phases) or tick - 1 not in ends:
            continue
        critical = phases["publish"]["end"] - phases["task"]["start"]
        pool = phases["physics"]["end"] - phases["physics"]["start"]
        outside.append(critical - pool)
        physics.append(pool)
        cycles.append(ends[tick] - ends[tick - 1])
    if not cycles:
        return None
    med = statistics.median
    return {
        "ticks": len(cycles),
        "outside_physics_us_median": med(outside),
        "physics_us_median": med(physics),
        "tick_us_median": med(cycles),
        "outside_physics_fraction": sum(outside) / sum(cycles),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    args = p.parse_args(argv)
    report = {"trace": args.trace.name}
    for track in ("device", "host"):
        intervals = load_intervals(args.trace, track)
        if intervals:
            report[track] = check_track(intervals)
    passed = all(r["passed"] for k, r in report.items() if k != "trace") and len(report) > 1
    report["passed"] = passed
    collector = collector_serial(load_intervals(args.trace, "collector"))
    if collector is not None:
        report["collector"] = collector
    out = args.trace.with_suffix(".check.json")
    out.write_text(json.dumps(report, indent=2) + "\n")
    for track in ("device", "host"):
        if track in report:
            r = report[track]
            print(
                f"{track:6s}: {r['inference_intervals']} inference, {r['update_intervals']} update intervals, "
                f"{r['overlaps']} overlaps, {r['alternation_breaks']} alternation breaks -> {'PASS' if r['passed'] else 'FAIL'}"
            )
    if collector is not None:
        print(
            f"collector: {collector['outside_physics_us_median']:.0f} us outside physics per tick (median), "
            f"{100 * collector['outside_physics_fraction']:.2f}% of the tick ({collector['ticks']} ticks)"
        )
    print(f"report: {out}")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
