"""`python -m offpolicy.plot`: finding runs, aligning seeds, the PNG, and the CLI on hand-made metrics files."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from offpolicy import plot

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(
    run_dir: Path,
    algo: str,
    seed: int,
    steps: list[int],
    returns: list[float | None],
    env: str = "hopper",
    fmt: str = "csv",
    key: str = "eval/return",
    seconds_per_step: float = 0.01,
) -> Path:
    """A run folder as the runner leaves it: metrics file plus resolved config."""
    run_dir.mkdir(parents=True)
    OmegaConf.save(
        OmegaConf.create({"seed": seed, "env": {"name": env}, "algo": {"name": algo}}), run_dir / "config_resolved.yaml"
    )
    rows = []
    for step, value in zip(steps, returns):
        row = {"env_steps": step, "time/elapsed_s": step * seconds_per_step, "train/updates": step / 2}
        if value is not None:
            row[key] = value
        rows.append(row)
    if fmt == "csv":
        columns = ["env_steps", "time/elapsed_s", "train/updates", key]
        with (run_dir / "metrics.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
    else:
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def sweep(root: Path) -> Path:
    """Two algos x two seeds, csv and jsonl mixed, seeds logged on different steps, a Hydra-style layout."""
    write_run(root / "0", "fastsac", 0, [0, 100, 200, 300], [0.0, 10.0, 20.0, 30.0])
    write_run(root / "1", "fastsac", 1, [0, 150, 300], [2.0, 17.0, 32.0], fmt="jsonl")
    write_run(root / "2", "flashsac", 0, [0, 100, 200, 300], [None, 5.0, 5.0, 5.0])
    write_run(root / "3", "flashsac", 1, [0, 100, 200, 300], [None, 7.0, 7.0, 7.0])
    return root


def test_finds_runs_and_their_labels(tmp_path):
    runs = plot.find_runs(sweep(tmp_path / "multirun"))
    assert [(r.env, r.algo, r.seed) for r in runs] == [
        ("hopper", "fastsac", 0),
        ("hopper", "fastsac", 1),
        ("hopper", "flashsac", 0),
        ("hopper", "flashsac", 1),
    ]
    assert np.isnan(runs[2].columns["eval/return"][0])  # missing cell -> NaN, not 0


def test_seeds_are_interpolated_onto_their_common_range(tmp_path):
    runs = plot.find_runs(sweep(tmp_path / "m"))
    band = plot.bands(runs, "eval/return", "env_steps", "std")[("hopper", "fastsac")]
    assert band.seeds == 2 and band.x[0] == 0 and band.x[-1] == 300
    # seed 0: y = x/10; seed 1: y = 2 + x/10 exactly (linear between its points) -> mean 1 + x/10, std 1
    np.testing.assert_allclose(band.mean, 1 + band.x / 10, atol=1e-9)
    np.testing.assert_allclose(band.high - band.mean, 1.0, atol=1e-9)
    flash = plot.bands(runs, "eval/return", "env_steps", "minmax")[("hopper", "flashsac")]
    assert flash.x[0] == 100  # rows without the metric do not drag the range to 0
    np.testing.assert_allclose(flash.mean, 6.0)
    np.testing.assert_allclose(flash.low, 5.0)
    np.testing.assert_allclose(flash.high, 7.0)


def test_range_is_what_every_seed_covers():
    band = plot.aggregate(
        [(np.array([0.0, 100.0]), np.array([0.0, 1.0])), (np.array([50.0, 300.0]), np.array([3.0, 3.0]))]
    )
    assert band.x[0] == 50 and band.x[-1] == 100


def test_metric_falls_back_to_training_return(tmp_path):
    write_run(tmp_path / "r0", "fastsac", 0, [0, 10], [1.0, 2.0], key="train/episode_return")
    runs = plot.find_runs(tmp_path)
    assert plot.choose_metric(runs, None) == "train/episode_return"
    with pytest.raises(plot.PlotError, match="train/episode_return"):
        plot.choose_metric(runs, "eval/return")


def test_png_has_both_axes_per_env(tmp_path):
    root = sweep(tmp_path / "m")
    write_run(root / "4", "fastsac", 0, [0, 100], [1.0, 3.0], env="ant")
    out, metric = plot.plot(root, tmp_path / "out" / "curves.png", spread="minmax")
    assert metric == "eval/return"
    assert out.read_bytes()[:8] == PNG_MAGIC
    import matplotlib.image

    height, width = matplotlib.image.imread(out).shape[:2]
    assert width > height  # two columns (env steps, wall-clock), two env rows at 4in each: 12in x 8in
    assert abs(width / height - 12 / 8) < 0.05


def test_cli_writes_png_and_summary(tmp_path):
    root = sweep(tmp_path / "m")
    proc = subprocess.run(
        [sys.executable, "-m", "offpolicy.plot", str(root)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert (root / "eval_return.png").read_bytes()[:8] == PNG_MAGIC
    assert "fastsac" in proc.stdout and "seeds 2" in proc.stdout and "31.00" in proc.stdout  # final mean of 30 and 32


def test_milestones_are_what_each_seed_knew_by_then(tmp_path):
    root = sweep(tmp_path / "m")  # times are env steps / 100: fastsac seed 0 logs at 0,1,2,3 s, seed 1 at 0,1.5,3 s
    write_run(root / "4", "fastsac", 2, [0, 100], [5.0, 6.0])  # stopped after 1 s
    rows = {(m.algo, m.seconds): m for m in plot.milestones(plot.find_runs(root), "eval/return", [0.5, 1.6, 2.5, 3.0])}
    early = rows[("fastsac", 0.5)]  # all three ran that long; each still shows its value at 0 s
    assert (early.seeds, early.median, early.low, early.high) == (3, 2.0, 0.0, 5.0)
    mid = rows[("fastsac", 1.6)]  # seed 0: 10 (at 1 s), seed 1: 17 (at 1.5 s); seed 2 ended 0.6 s before (within slack)
    assert (mid.seeds, mid.median, mid.low, mid.high) == (3, 10.0, 6.0, 17.0)
    assert mid.env_steps == 100.0  # median of 100, 150, 100
    late = rows[("fastsac", 2.5)]  # seed 2 is left out, never held flat at its last value
    assert (late.seeds, late.median) == (2, 18.5)  # 20 and 17
    assert rows[("fastsac", 3.0)].median == 31.0  # 30 and 32
    none_yet = rows[("flashsac", 0.5)]  # flashsac logged nothing before 1 s
    assert none_yet.seeds == 0 and np.isnan(none_yet.median)
    assert rows[("flashsac", 2.5)].median == 6.0  # 5 and 7


def test_cli_writes_the_milestone_table(tmp_path):
    root = sweep(tmp_path / "m")
    out = tmp_path / "curves.png"
    cmd = [sys.executable, "-m", "offpolicy.plot", str(root), "--out", str(out), "--at-seconds", "1.6", "3"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with (tmp_path / "curves_at_seconds.csv").open(newline="") as f:
        table = list(csv.DictReader(f))
    assert [(r["env"], r["algo"], float(r["seconds"]), int(r["seeds"])) for r in table] == [
        ("hopper", "fastsac", 1.6, 2),
        ("hopper", "fastsac", 3.0, 2),
        ("hopper", "flashsac", 1.6, 2),
        ("hopper", "flashsac", 3.0, 2),
    ]
    assert float(table[0]["eval/return median"]) == 13.5 and float(table[1]["eval/return max"]) == 32.0
    assert "at 3 s  seeds 2: 31.00 [30.00, 32.00]" in proc.stdout


def test_cli_says_what_is_missing(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "offpolicy.plot", str(tmp_path / "empty")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "no runs under" in proc.stderr and proc.stderr.count("\n") == 1


def test_plot_of_a_real_run(tmp_path):
    """One tiny CLI run (logger=none), then the plot command on its dir: local files are enough."""
    run_dir = tmp_path / "run"
    train = [
        sys.executable,
        "-m",
        "offpolicy.train",
        "env=hopper",
        "env.num_envs=4",
        "train.total_env_steps=400",
        "train.learning_starts=100",
        "algo.batch_size=64",
        "algo.critic_hidden_dim=32",
        "algo.actor_hidden_dim=32",
        "logger=none",
        "logger.interval_env_steps=40",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.run(train, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = tmp_path / "curves.png"
    proc = subprocess.run(
        [sys.executable, "-m", "offpolicy.plot", str(run_dir), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == PNG_MAGIC
    (run,) = plot.find_runs(run_dir)
    assert (run.env, run.algo, run.seed) == ("hopper", "fastsac", 0)
    metric = plot.choose_metric([run], None)
    assert metric in plot.DEFAULT_METRICS
    assert "hopper" in proc.stdout and "seeds 1" in proc.stdout


# --------------------------------------------------------------------------- snapshot evaluations


def write_snapshot_run(run_dir: Path, algo: str, seed: int, snapshots: list[tuple[float, int, float, float, float]],
                       env: str = "ant") -> Path:  # fmt: skip
    """A run whose eval rows are snapshot evaluations: (snapshot_s, snapshot env steps, mean, median, logged_s)."""
    run_dir.mkdir(parents=True)
    OmegaConf.save(
        OmegaConf.create({"seed": seed, "env": {"name": env}, "algo": {"name": algo}}), run_dir / "config_resolved.yaml"
    )
    rows = [{"env_steps": 0, "time/elapsed_s": 0.0, "train/updates": 0}]
    for snapshot_s, steps, mean, median, logged_s in snapshots:
        rows.append(
            {
                "env_steps": int(logged_s * 1000),
                "time/elapsed_s": logged_s,
                "eval/return": mean,
                "eval/return_median": median,
                "eval/snapshot_s": snapshot_s,
                "eval/env_steps": steps,
            }
        )
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def snapshot_sweep(root: Path) -> Path:
    # seed 0: snapshots at 100 s (reported at 130 s) and at 480.4 s (the final one, after an 8-minute loop)
    write_snapshot_run(root / "a", "fastsac", 0, [(100.0, 1000, 10.0, 12.0, 130.0), (480.4, 4000, 50.0, 60.0, 482.0)])
    write_snapshot_run(root / "b", "fastsac", 1, [(90.0, 900, 20.0, 5.0, 125.0), (480.2, 4100, 30.0, 33.0, 481.0)])
    write_snapshot_run(root / "c", "fastsac", 2, [(110.0, 1100, 30.0, 31.0, 140.0), (480.1, 3900, 70.0, 71.0, 481.5)])
    return root


def test_snapshot_values_sit_where_their_snapshot_was_taken(tmp_path):
    (run,) = plot.find_runs(write_snapshot_run(tmp_path / "r", "fastsac", 0, [(100.0, 1000, 10.0, 12.0, 130.0)]))
    x, y = run.curve("eval/return", plot.TIME_KEY)
    assert x.tolist() == [100.0] and y.tolist() == [10.0]  # not at 130 s, when its episodes had finished
    x, _ = run.curve("eval/return", plot.STEP_KEY)
    assert x.tolist() == [1000.0]
    x, _ = run.curve("train/updates", plot.TIME_KEY)  # other metrics keep the row's own coordinates
    assert x.tolist() == [0.0]


def test_milestones_take_the_snapshots_frozen_by_then_and_the_final_one_at_the_budget(tmp_path):
    runs = plot.find_runs(snapshot_sweep(tmp_path / "m"))
    at = {m.seconds: m for m in plot.milestones(runs, "eval/return", [120.0, 480.0])}
    # at 120 s every seed has a snapshot frozen before then, although seed 0's was reported at 130 s
    assert (at[120.0].seeds, at[120.0].median, at[120.0].low, at[120.0].high) == (3, 20.0, 10.0, 30.0)
    assert at[120.0].env_steps == 1000.0  # the snapshots' own env steps
    # at 480 s: the final snapshots, taken a hair after the 480-s loop ended
    assert (at[480.0].median, at[480.0].low, at[480.0].high) == (50.0, 30.0, 70.0)


def test_time_to_target_uses_each_seeds_first_snapshot_median_reaching_it(tmp_path):
    runs = {r.seed: r for r in plot.find_runs(snapshot_sweep(tmp_path / "m"))}
    assert plot.time_to_target(runs[0], 12.0) == 100.0
    assert plot.time_to_target(runs[1], 12.0) == 480.2  # its first snapshot's median was 5
    assert plot.time_to_target(runs[1], 100.0) == float("inf")
    # target 40: seed 0 at 480.4 s (median 60), seed 1 never (33), seed 2 at 480.1 s (71): median 480.4 s
    (row,) = plot.results_table(list(runs.values()), "eval/return", [120.0, 480.0], {"ant": (40.0,)})
    assert row.time_to_target_s == (480.4,) and row.seeds_reaching == (2,)
    # several targets at once (the DMC table's 600 / 850): each its own median time and count
    (row,) = plot.results_table(list(runs.values()), "eval/return", [480.0], {"ant": (12.0, 40.0, 100.0)})
    assert row.time_to_target_s[1:] == (480.4, float("inf")) and row.seeds_reaching == (3, 2, 0)
    assert row.final_median_min == (33.0, 60.0)  # the final snapshots' medians: 60, 33, 71


def test_cli_writes_the_results_table_in_markdown(tmp_path):
    root = snapshot_sweep(tmp_path / "m")
    (root / "a" / "eval_final.json").write_text(
        json.dumps({"return_mean": 51.0, "reference": {"gymnasium": {"mean": 49.0}}})
    )
    out = tmp_path / "curves.png"
    cmd = [sys.executable, "-m", "offpolicy.plot", str(root), "--out", str(out), "--at-seconds", "120", "480",
           "--targets", "ant=40"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    table = (tmp_path / "curves_table.md").read_text().splitlines()
    assert table[0].startswith(
        "| algo | task | seeds | snapshot mean at 2 min, median [min] over seeds "
        "| snapshot mean at 8 min, median [min] over seeds | env steps |"
    )
    assert table[2] == (
        "| fastsac | ant | 3 | 20 [10] | 50 [30] | 0.0 M | 40 | 8.0 min (2/3 seeds) | 60 (33) | own: 51, gymnasium: 49 |"
    )
    proc = subprocess.run([*cmd[:-1], "ant=40,100"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    row = (tmp_path / "curves_table.md").read_text().splitlines()[2]
    assert "| 40 / 100 | 8.0 min (2/3 seeds) / not reached (0/3 seeds) |" in row


# --------------------------------------------------------------------------- runs without the metric, single points


def run_plot_cli(root: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "offpolicy.plot", str(root), "--out", str(out), *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def mixed_sweep(root: Path) -> Path:
    """FastSAC without any snapshot evaluation (training returns only), FlashSAC with eval rows at 0, 10, 20 s."""
    write_run(root / "0", "fastsac", 0, [0, 1000, 2000], [1.0, 2.0, 3.0], key="train/episode_return")
    write_run(root / "1", "flashsac", 0, [0, 1000, 2000], [5.0, 50.0, 150.0])
    return root


def test_the_markdown_table_has_one_cell_per_column_when_a_group_lacks_the_metric(tmp_path):
    """Was: the header took its times from the first group's milestones; a first group without eval rows gave an
    8-column header over a 10-cell row."""
    proc = run_plot_cli(mixed_sweep(tmp_path / "m"), tmp_path / "c.png", "--at-seconds", "10", "20", "--targets",
                        "hopper=100")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    table = (tmp_path / "c_table.md").read_text().splitlines()
    assert [line.count("|") - 1 for line in table] == [10, 10, 10, 10]
    assert table[2] == "| fastsac | hopper | 1 | n/a | n/a | n/a | 100 | not reached (0/1 seeds) | n/a | n/a |"
    assert (
        table[3]
        == "| flashsac | hopper | 1 | 50 [50] | 150 [150] | 0.0 M | 100 | not reached (0/1 seeds) | n/a | n/a |"
    )


def test_runs_left_off_the_plot_are_named_with_the_reason(tmp_path):
    """Was: a run without eval rows (or without a config) was dropped without a word."""
    root = mixed_sweep(tmp_path / "m")
    (root / "2").mkdir()
    (root / "2" / "metrics.jsonl").write_text('{"env_steps": 0, "eval/return": 1.0}\n')  # no config next to it
    (root / "wandb" / "run-1").mkdir(parents=True)  # W&B's own files are no run: nothing said
    (root / "wandb" / "run-1" / "metrics.jsonl").write_text('{"env_steps": 0}\n')
    proc = run_plot_cli(root, tmp_path / "c.png")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"[offpolicy.plot] skipped {root / '0'}: no eval/return rows (no snapshot evaluation finished in it); "
        "--metric train/episode_return plots it",
        f"[offpolicy.plot] skipped {root / '2'}: no config_resolved.yaml or .hydra/config.yaml next to its metrics",
    ]
    assert "flashsac" in proc.stdout and "fastsac" not in proc.stdout
    proc = run_plot_cli(root, tmp_path / "c.png", "--metric", "train/episode_return")  # now FlashSAC lacks it
    assert f"skipped {root / '1'}: no train/episode_return rows; --metric eval/return plots it" in proc.stderr


def test_a_curve_of_one_point_is_drawn(tmp_path):
    """Was: a line through the single point of a run with one logged row, which draws nothing: empty axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    write_run(tmp_path / "r", "fastsac", 0, [0, 1000], [None, 5.0])
    (band,) = plot.bands(plot.find_runs(tmp_path), "eval/return", plot.STEP_KEY, "minmax").values()
    assert band.x.tolist() == [1000.0] and band.mean.tolist() == [5.0]
    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    plot.draw_band(ax, band, "C0", "one row")
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())[::-1, :, :3].astype(float)  # row 0 at the bottom, as display y
    blue = np.abs(pixels - 255 * np.array(matplotlib.colors.to_rgb("C0"))).max(axis=-1) < 40
    x, y = ax.transData.transform((1000.0, 5.0))
    near = blue[int(y) - 6 : int(y) + 7, int(x) - 6 : int(x) + 7]
    assert near.sum() >= 20, "nothing drawn at the point"
    plt.close(fig)
