"""benchmark/offpolicy/learning_efficiency.py on synthetic run folders: window rows, medians, target classes, CLI."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.offpolicy.learning_efficiency import (  # noqa: E402
    COLUMNS,
    classify,
    efficiency_rows,
    window_row_indices,
)

NUM_ENVS = 4
EVAL_ENVS = 2  # env_steps count the training envs only: a tick is env_steps / 4, never / 6
PERF = {  # metrics.csv column -> the row field holding its median
    "perf/learner_busy_fraction": "learner_busy",
    "perf/updates_per_s": "updates_per_s",
    "perf/inference_tick_ms": "inference_tick_ms",
    "perf/collector_cycle_ms": "collector_cycle_ms",
    "perf/collector_wait_ms": "collector_wait_ms",
    "perf/collector_physics_ms": "collector_physics_ms",
    "perf/collector_outside_pool_fraction": "collector_outside_pool_fraction",
}
HEADER = ["env_steps", "time/elapsed_s", *PERF, "perf/collector_task_ms", "perf/collector_resets_ms",
          "perf/env_steps_per_s", "eval/return"]  # fmt: skip

# The window [32, 57) (start 32, 25 ticks). Rows logged at ticks 40, 50 and 60 cover [30, 40), [40, 50) and
# [50, 60): they overlap it (the one at 60 is the row ending just after the window). The rows at 10, 20, 30
# ([20, 30) ends before 32) and 70 ([60, 70) starts after 57) do not, and carry far-off values.
WINDOW_START, WINDOW_TICKS = 32, 25
INSIDE = {40: 1.0, 50: 3.0, 60: 8.0}  # per-row scale: median 3 x base, mean 4 x base
OUTSIDE = (10, 20, 30, 70)
BASE = {
    "perf/learner_busy_fraction": 0.1,
    "perf/updates_per_s": 100.0,
    "perf/inference_tick_ms": 0.5,
    "perf/collector_cycle_ms": 10.0,
    "perf/collector_wait_ms": 0.25,
    "perf/collector_physics_ms": 9.0,
    "perf/collector_outside_pool_fraction": 0.01,
}
FAR = {k: 50 * v for k, v in BASE.items()} | {"perf/learner_busy_fraction": 0.999}


def metric_rows(busy_inside: list[float] | None = None) -> list[dict[str, object]]:
    rows = []
    for tick in sorted([*INSIDE, *OUTSIDE]):
        values = {k: v * INSIDE[tick] for k, v in BASE.items()} if tick in INSIDE else dict(FAR)
        if busy_inside is not None and tick in INSIDE:
            values["perf/learner_busy_fraction"] = busy_inside[sorted(INSIDE).index(tick)]
        rows.append({"env_steps": tick * NUM_ENVS, "time/elapsed_s": float(tick), **values,
                     "perf/collector_task_ms": 0.7, "perf/env_steps_per_s": 400.0})  # fmt: skip
        if tick == 50:  # an eval row inside the window: empty perf cells, skipped
            rows.append({"env_steps": tick * NUM_ENVS, "time/elapsed_s": 50.5, "eval/return": 123.0})
    return rows


def make_run(
    root: Path,
    name: str,
    *,
    ratio: float | None = 0.8,
    busy_inside: list[float] | None = None,
    obs_diff: float = 0.0,
    seed: int = 0,
) -> Path:
    """A run folder as `learning_run` keeps it; `ratio=None`: its replay stage was cut (no replay.json)."""
    run = root / name
    run.mkdir(parents=True)
    with (run / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HEADER)
        writer.writeheader()
        writer.writerows(metric_rows(busy_inside))
    (run / "summary.json").write_text(
        json.dumps({"num_envs": NUM_ENVS, "eval_envs": EVAL_ENVS, "env_steps": 70 * NUM_ENVS, "ticks": 70})
    )
    (run / "config_resolved.yaml").write_text(
        f"env:\n  name: hopper\n  num_envs: {NUM_ENVS}\nalgo:\n  name: flashsac\n  updates_per_step: 2\n"
        f"seed: {seed}\ntrain:\n  updates_per_step: 3\neval:\n  num_envs: {EVAL_ENVS}\n"
        f"runtime:\n  record:\n    start_tick: {WINDOW_START}\n    ticks: {WINDOW_TICKS}\n"
    )
    if ratio is not None:
        replay = {
            "window_ticks": WINDOW_TICKS,
            "window_start_tick": WINDOW_START,
            "env_steps_per_s": 1000.0 * ratio,
            "replayed_bare_env_steps_per_s": 1000.0,
            "replayed_np_env_env_steps_per_s": 990.0,
            "replay_obs_max_abs_diff": obs_diff,
            "replay_states_agree": True,
            "ratio_to_replayed_bare": ratio,
        }
        (run / "replay.json").write_text(json.dumps(replay))
    return run


def test_window_rows_overlap_the_window_and_always_include_the_row_ending_after_it():
    ticks = np.array([10, 20, 30, 40, 50, 60, 70])
    assert window_row_indices(ticks, 32, 25).tolist() == [3, 4, 5]
    assert window_row_indices(ticks, 40, 10).tolist() == [4]  # [40, 50): exactly the row logged at 50
    assert window_row_indices(ticks, 41, 2).tolist() == [4]  # inside one row's range: that row
    assert window_row_indices(ticks, 0, 5).tolist() == [0]  # the first row covers the run's start
    assert window_row_indices(ticks, 80, 5).tolist() == [6]  # past the last row: the last row


def test_medians_over_the_window_rows_only(tmp_path):
    make_run(tmp_path, "hopper_flashsac_seed0")
    (row,) = efficiency_rows(tmp_path)
    assert row["window_rows"] == 3 and row["window_source"] == "replay.json"
    for column, field in PERF.items():
        # median of 1, 3, 8 x base: 3 x base (the mean would be 4 x base; all rows would give the far value)
        assert row[field] == pytest.approx(3 * BASE[column]), field
    assert row["updates_per_step"] == 3  # train.updates_per_step overrides the algo's default
    assert row["num_envs"] == NUM_ENVS and (row["window_start_tick"], row["window_ticks"]) == (32, 25)
    assert (row["task"], row["algo"], row["seed"], row["run"]) == ("hopper", "flashsac", 0, "hopper_flashsac_seed0")
    assert row["replay_exact"] is True and row["ratio_to_replayed_bare"] == pytest.approx(0.8)
    assert row["learner_saturated"] is False and row["target"] == "not met"
    assert row["inference_tick_mode"] == "eager"  # a summary without `tick_graph` predates the graph tick


def test_window_phase_means_come_from_the_replay_and_are_none_for_older_records(tmp_path):
    from benchmark.offpolicy.learning_efficiency import WINDOW_PHASES

    new = make_run(tmp_path, "hopper_flashsac_seed0")
    make_run(tmp_path, "hopper_flashsac_seed1", seed=1)  # a replay.json made before the phase rows were kept
    replay = json.loads((new / "replay.json").read_text())
    means = {phase: 1.5 + i for i, phase in enumerate(WINDOW_PHASES)}
    replay["in_run_phase_ms"] = {p: {"mean": m, "median": m / 2, "p99": m * 2, "max": m * 3} for p, m in means.items()}
    (new / "replay.json").write_text(json.dumps(replay))
    new_row, old_row = efficiency_rows(tmp_path)
    for phase, mean in means.items():
        assert new_row[f"window_{phase}_ms_mean"] == mean and old_row[f"window_{phase}_ms_mean"] is None
    assert new_row["window_cycle_ms_median"] == means["cycle"] / 2 and old_row["window_cycle_ms_median"] is None


def test_cpu_shares_come_from_the_replay_and_the_table_shows_other_processes_and_steal(tmp_path):
    from benchmark.offpolicy.learning_efficiency import CPU_SHARES, markdown_table

    new = make_run(tmp_path, "hopper_flashsac_seed0")
    make_run(tmp_path, "hopper_flashsac_seed1", seed=1)  # recorded before the collector read its CPUs
    replay = json.loads((new / "replay.json").read_text())
    replay["in_run_cpu_share"] = {"own": 0.81, "other": 0.034, "irq": 0.002, "steal": 0.061, "idle": 0.093}
    replay["replayed_bare_cpu_share"] = {"own": 0.97, "other": 0.01, "irq": 0.0, "steal": 0.005, "idle": 0.015}
    (new / "replay.json").write_text(json.dumps(replay))
    new_row, old_row = efficiency_rows(tmp_path)
    for share in CPU_SHARES:
        assert new_row[f"window_cpu_{share}"] == replay["in_run_cpu_share"][share]
        assert new_row[f"replay_cpu_{share}"] == replay["replayed_bare_cpu_share"][share]
        assert old_row[f"window_cpu_{share}"] is None and old_row[f"replay_cpu_{share}"] is None
    new_line, old_line = markdown_table([new_row, old_row]).splitlines()[2:]
    # the window's other processes then steal, as percentages: 3.4% and 6.1%, not the replay's 1.0% / 0.5%
    # no CPU list or cycle means in these replays: the CPU time a tick is not computed
    assert new_line.endswith("| 3.4% / 6.1% / n/a | not met |") and old_line.endswith("| n/a | not met |")


def test_cpu_time_a_tick_is_the_own_share_over_the_cpus_and_the_mean_cycle_against_one_replayed_tick(tmp_path):
    from benchmark.offpolicy.learning_efficiency import markdown_table

    new = make_run(tmp_path, "hopper_flashsac_seed0")
    make_run(tmp_path, "hopper_flashsac_seed1", seed=1)  # recorded before the collector read its CPUs
    replay = json.loads((new / "replay.json").read_text())
    replay["replay_cpus"] = [2, 3]
    replay["in_run_phase_ms"] = {"cycle": {"mean": 10.0, "median": 7.0, "p99": 30.0, "max": 31.0}}
    replay["in_run_cpu_share"] = {"own": 0.81, "other": 0.0, "irq": 0.0, "steal": 0.0, "idle": 0.19}
    replay["replayed_bare_cpu_share"] = {"own": 0.97, "other": 0.0, "irq": 0.0, "steal": 0.0, "idle": 0.03}
    (new / "replay.json").write_text(json.dumps(replay))
    row, old = efficiency_rows(tmp_path)
    # 0.81 of 2 CPUs over the mean 10-ms cycle (not the 7-ms median): 16.2 CPU-ms; the replay's 0.97 of 2 CPUs
    # over one replayed tick of the 4 training rows at 1000 env-steps/s (4 ms, not 6 with the eval rows): 7.76
    assert row["collector_cpu_ms_per_tick"] == pytest.approx(16.2)
    assert row["replay_cpu_ms_per_tick"] == pytest.approx(7.76)
    assert row["cpu_time_over_replay"] == pytest.approx(16.2 / 7.76)
    assert old["collector_cpu_ms_per_tick"] is None and old["cpu_time_over_replay"] is None
    assert markdown_table([row]).splitlines()[2].endswith("| 0.0% / 0.0% / 2.09 | not met |")


def test_the_tick_mode_comes_from_the_summary(tmp_path):
    from benchmark.offpolicy.learning_efficiency import markdown_table

    for name, state in (("hopper_flashsac_seed0", "captured"), ("hopper_flashsac_seed1", "eager")):
        run = make_run(tmp_path, name, seed=int(name[-1]))
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "tick_graph": state}))
    rows = efficiency_rows(tmp_path)
    assert [r["inference_tick_mode"] for r in rows] == ["graph", "eager, graph capture failed"]
    lines = markdown_table(rows).splitlines()
    assert " ms (graph) |" in lines[2] and " ms (eager, graph capture failed) |" in lines[3]


def test_classification_at_the_boundaries():
    assert classify(0.95, 0.5) == (False, "met")
    assert classify(0.9499, 0.5) == (False, "not met")
    assert classify(0.5, 0.9) == (True, "learner-bound")
    assert classify(0.5, 0.8999) == (False, "not met")
    assert classify(0.95, 1.0) == (True, "met")
    assert classify(None, 0.95) == (True, "no replay")
    assert classify(None, None) == (None, "no replay")


def test_rows_at_the_boundaries_and_without_replay(tmp_path):
    # window busy 0.9 (median of 0.2, 0.9, 0.95), ratio exactly 0.95: saturated, and the target met
    make_run(tmp_path, "hopper_flashsac_seed1", seed=1, ratio=0.95, busy_inside=[0.2, 0.9, 0.95])
    # busy 0.9 and a ratio below the target: learner-bound; a replay with an observation mismatch is not exact
    make_run(tmp_path, "hopper_flashsac_seed2", seed=2, ratio=0.5, busy_inside=[0.9, 0.1, 0.95], obs_diff=1e-6)
    make_run(tmp_path, "hopper_flashsac_seed3", seed=3, ratio=None)  # replay stage cut
    rows = {r["seed"]: r for r in efficiency_rows(tmp_path)}
    assert rows[1]["learner_busy"] == pytest.approx(0.9)
    assert (rows[1]["learner_saturated"], rows[1]["target"]) == (True, "met")
    assert (rows[2]["learner_saturated"], rows[2]["target"]) == (True, "learner-bound")
    assert rows[2]["replay_exact"] is False
    no_replay = rows[3]
    assert no_replay["target"] == "no replay" and no_replay["replay_exact"] is None
    for field in ("env_steps_per_s", "replayed_bare_env_steps_per_s", "replayed_np_env_env_steps_per_s",
                  "ratio_to_replayed_bare"):  # fmt: skip
        assert no_replay[field] is None
    # its medians come from the window its config asked to record
    assert no_replay["window_source"].startswith("config runtime.record.start_tick")
    assert no_replay["updates_per_s"] == pytest.approx(300.0) and no_replay["window_rows"] == 3


def test_cli_writes_json_csv_and_the_markdown_table(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    make_run(runs, "hopper_flashsac_seed0", ratio=0.97)
    make_run(runs, "hopper_flashsac_seed1", seed=1, ratio=None)
    done = subprocess.run(
        [sys.executable, "-m", "benchmark.offpolicy.learning_efficiency", str(runs), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads((out / "efficiency.json").read_text())
    assert data["runs_dir"] == str(runs)
    assert [(r["run"], r["target"]) for r in data["rows"]] == [
        ("hopper_flashsac_seed0", "met"),
        ("hopper_flashsac_seed1", "no replay"),
    ]
    assert data["rows"][0]["updates_per_s"] == pytest.approx(300.0)
    with (out / "efficiency.csv").open(newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == list(COLUMNS)
    assert float(table[0]["collector_wait_ms"]) == pytest.approx(0.75) and table[1]["ratio_to_replayed_bare"] == ""
    markdown = (out / "efficiency_table.md").read_text()
    assert markdown in done.stdout
    lines = markdown.splitlines()
    assert lines[0].startswith("| algo | task | seed | in-run env-steps/s (window) |")
    assert lines[0].endswith(
        "| physics per tick, in run / replayed"
        " | collector's CPUs: other processes / steal / CPU time a tick over the replay's | target 0.95 |"
    )
    assert lines[2].startswith("| FlashSAC | hopper | 0 | 970 | 1,000 | 0.970 | 0.30 | 300 |")
    assert "**met**" in lines[2] and "no replay" in lines[3]


def test_physics_over_replay_is_the_in_run_pool_step_over_one_replayed_tick(tmp_path):
    from benchmark.offpolicy.learning_efficiency import markdown_table

    make_run(tmp_path, "hopper_flashsac_seed0", ratio=0.8)
    make_run(tmp_path, "hopper_flashsac_seed1", seed=1, ratio=None)
    row, no_replay = efficiency_rows(tmp_path)
    # one replayed tick steps the 4 training rows at 1000 env-steps/s: 4 ms (not the in-run 800/s: 5 ms, and
    # not the 6 rows with the eval rows); the in-run pool step is the window's median, 3 x 9 ms = 27 ms
    assert row["replayed_bare_tick_ms"] == pytest.approx(4.0)
    assert row["physics_over_replay"] == pytest.approx(27.0 / 4.0)
    assert no_replay["replayed_bare_tick_ms"] is None and no_replay["physics_over_replay"] is None
    table = markdown_table([row, no_replay]).splitlines()
    assert "| 27.0 / 4.0 ms (6.75) |" in table[2] and "| n/a | no replay" in table[3]


STAGES = {"h2d": 0.01, "policy": 0.1, "eval": 0.02, "post": 0.03, "action_copy": 0.5, "publish": 0.005}


def _add_stage_columns(run: Path) -> None:
    """Give every perf row the inference-stage columns (scaled like the other perf columns)."""
    with (run / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        if r["perf/learner_busy_fraction"]:
            tick = int(r["env_steps"]) // NUM_ENVS
            scale = INSIDE.get(tick, 50.0)
            r.update({f"perf/inference_{k}_ms": v * scale for k, v in STAGES.items()})
    with (run / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) + [f"perf/inference_{k}_ms" for k in STAGES])
        writer.writeheader()
        writer.writerows(rows)


def test_inference_launch_is_the_sum_of_the_launch_stage_medians(tmp_path):
    from benchmark.offpolicy.learning_efficiency import markdown_table

    _add_stage_columns(make_run(tmp_path, "hopper_flashsac_seed0"))
    make_run(tmp_path, "hopper_flashsac_seed1", seed=1)  # made before the stages existed
    new, old = efficiency_rows(tmp_path)
    assert new["inference_launch_ms"] == pytest.approx(3 * (0.01 + 0.1 + 0.02 + 0.03))  # publish is not launch
    assert new["inference_action_copy_ms"] == pytest.approx(3 * 0.5)
    assert old["inference_launch_ms"] is None and old["inference_action_copy_ms"] is None
    table = markdown_table([new, old])
    assert "| 0.48 / 1.50 ms |" in table and "| n/a |" in table
