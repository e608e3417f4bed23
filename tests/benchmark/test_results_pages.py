"""`make tables` (benchmark.results_pages): the generated blocks of the results pages, and the pages in the tree
being what the committed run folders give."""

from __future__ import annotations

import json

import pytest

from benchmark import results_pages
from benchmark.results_pages import PageError, begin, end, seeds_table, splice

PAGE = f"""# Page

Prose before.

{begin("results")}
| old | table |
{end("results")}

Prose after, kept.
"""


def test_splice_replaces_only_the_lines_between_the_markers():
    new = splice(PAGE, "results", "| a |\n| --- |\n| 1 |\n")
    assert new == PAGE.replace("| old | table |\n", "| a |\n| --- |\n| 1 |\n")
    assert splice(new, "results", "| old | table |") == PAGE  # and back: nothing else moved


def test_splice_refuses_a_page_without_its_markers():
    with pytest.raises(PageError, match="no line '<!-- begin seeds table"):
        splice(PAGE, "seeds", "| x |", "page x")
    with pytest.raises(PageError, match="no '<!-- end results table -->'"):
        splice(PAGE.replace(end("results"), ""), "results", "| x |")


def _run(folder, name, snapshot_lengths, rescore_lengths):
    """A run folder with the two files the per-seed table reads."""
    run = folder / name
    run.mkdir()
    stats = {"mean": 900.4, "median": 950.6, "min": 120.0}
    (run / "summary.json").write_text(
        json.dumps({"env_steps": 12_345_678, "snapshot_eval": dict(stats, lengths=snapshot_lengths)})
    )
    final = {"algo": "fastsac", "env": "ant", "reference": {"gymnasium": dict(stats, lengths=rescore_lengths)}}
    (run / "eval_final.json").write_text(json.dumps(final))


def test_seeds_table_counts_episodes_that_ended_before_the_time_limit(tmp_path):
    _run(tmp_path, "ant_fastsac_seed10", [1000, 1000, 999], [1000, 1000, 1000])
    _run(tmp_path, "ant_fastsac_seed2", [1000, 37, 914], [900, 800, 500])
    lines = seeds_table(tmp_path, episode_steps=1000).splitlines()
    # seeds sort as numbers (2 before 10); 999 steps of 1000 is an episode that ended early, and so is each of
    # a re-score whose episodes all ended early (the longest of them is no time limit)
    assert lines[2:] == [
        "| fastsac | ant | 2 | raw | 12.3 M | 900, 951 [120] (2 of 3 ended early) | gymnasium: 900, 951 [120] (3 of 3 ended early) | n/a |",
        "| fastsac | ant | 10 | raw | 12.3 M | 900, 951 [120] (1 of 3 ended early) | gymnasium: 900, 951 [120] | n/a |",
    ]


def test_the_actor_column_says_which_weights_a_row_acted_with_and_when_the_default_has_changed_since(tmp_path):
    """The weights come from the eval file, or for runs whose eval file names none from their config (none
    there: the run predates the averaged policy, so the raw actor). Today's default is read from `conf/` with
    the algo_env file: FastSAC dog-run averages (conf/algo_env/fastsac_dmc_dog_run.yaml) while conf/algo/fastsac.yaml
    does not, and FlashSAC humanoid-run does not."""

    def run(name, algo, env, actor=None, config=None):
        folder = tmp_path / name
        folder.mkdir()
        final = {"algo": algo, "env": env} | ({"actor": actor} if actor else {})
        if config is not None:
            (folder / "config_resolved.yaml").write_text(config)
        return results_pages.actor_cell(folder, final)

    assert run("a", "fastsac", "dmc_dog_run", actor="raw") == "raw (default now averaged)"
    assert run("b", "fastsac", "dmc_dog_run", actor="averaged") == "averaged"
    assert run("c", "fastsac", "dmc_dog_run", config="algo:\n  policy_ema: true\n") == "averaged"
    assert run("d", "fastsac", "dmc_dog_run", config="algo:\n  lr: 0.0003\n") == "raw (default now averaged)"
    assert run("e", "fastsac", "dmc_humanoid_run", config="algo:\n  lr: 0.0003\n") == "raw"
    assert run("f", "flashsac", "dmc_humanoid_run", actor="averaged") == "averaged (default now raw)"
    assert run("g", "flashsac", "dmc_dog_trot") == "raw (default now averaged)"


def _metrics(run, snapshots):
    """metrics.csv with a train row between snapshot rows (seconds, median): what `stability_cell` reads."""
    lines = ["env_steps,time/elapsed_s,eval/return_median"]
    for t, median in snapshots:
        lines += [f"{t * 10},{t - 1},", f"{t * 10},{t},{median}"]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_the_stability_column_counts_the_snapshots_after_the_target_was_first_reached(tmp_path):
    _run(tmp_path, "ant_fastsac_seed0", [1000], [1000])
    # 6000 first reached at 180 s (3.0 min); after it 6100, 5800 (>= 5700), 5000, 6050: 2 of 4 at it, 3 of 4 at 0.95 x
    _metrics(tmp_path / "ant_fastsac_seed0", [(60, 100), (120, 5900), (180, 6000), (240, 6100), (300, 5800),
                                              (360, 5000), (420, 6050)])  # fmt: skip
    row = seeds_table(tmp_path, 1000, {"ant": 6000}).splitlines()[2]
    assert row.endswith("| 6,000 from 3.0 min: 2/4 (>= 0.95 x: 3/4), worst 5,000 |")
    assert seeds_table(tmp_path, 1000, {"ant": 7000}).splitlines()[2].endswith("| 7,000 not reached |")
    assert (
        seeds_table(tmp_path, 1000, {"ant": 6080})
        .splitlines()[2]
        .endswith("| 6,080 from 4.0 min: 0/3 (>= 0.95 x: 2/3), worst 5,000 |")
    )


def test_the_stability_column_times_a_snapshot_by_when_it_was_frozen(tmp_path):
    """A snapshot row is logged when its episodes end (`time/elapsed_s`), after it was frozen
    (`eval/snapshot_s`, what the time-to-target column reads): the column says the frozen time."""
    _run(tmp_path, "ant_fastsac_seed0", [1000], [1000])
    lines = ["env_steps,time/elapsed_s,eval/snapshot_s,eval/return_median"]
    for frozen, logged, median in [(60, 95, 100), (180, 230, 6000), (300, 340, 6100), (420, 470, 5000)]:
        lines += [f"{frozen * 10},{frozen},,", f"{frozen * 10},{logged},{frozen},{median}"]
    (tmp_path / "ant_fastsac_seed0" / "metrics.csv").write_text("\n".join(lines) + "\n")
    row = seeds_table(tmp_path, 1000, {"ant": 6000}).splitlines()[2]
    assert row.endswith("| 6,000 from 3.0 min: 1/2 (>= 0.95 x: 1/2), worst 5,000 |")


def test_the_committed_pages_hold_what_the_run_folders_give(capsys):
    """What `make tables` would write: the tables of docs/results/ from the committed run folders."""
    assert results_pages.main(["--check"]) == 0, capsys.readouterr().err


def test_check_reports_a_stale_page_and_writes_nothing(tmp_path, monkeypatch, capsys):
    dmc = next(suite for suite in results_pages.SUITES if suite.page == "dmc")
    stale = tmp_path / "dmc.md"
    stale.write_text(
        (results_pages.PAGES / "dmc.md")
        .read_text()
        .replace("| flashsac | dmc_dog_run | 2 |", "| flashsac | dmc_dog_run | 3 |", 1)
    )
    before = stale.read_text()
    monkeypatch.setattr(results_pages, "PAGES", tmp_path)
    monkeypatch.setattr(results_pages, "SUITES", (dmc,))
    assert results_pages.main(["--check"]) == 1
    assert "stale tables in docs/results/dmc.md: run `make tables`" in capsys.readouterr().err
    assert stale.read_text() == before and not (tmp_path / "dmc_curves.png").exists()


# --------------------------------------------------------------------------- the locomotion page

TRACKING = results_pages.TrackingSuite("locomotion", "unused")


def _tracking_run(runs, name, snapshots, final, ratio=None):
    """A locomotion run folder: metrics.csv with a train row before each snapshot row (snapshot_s, lin-vel,
    yaw-rate errors; the row itself logged 17 s after its snapshot was frozen), summary.json's final snapshot
    and, given a ratio, replay.json."""
    run = runs / name
    run.mkdir(parents=True)
    lines = ["env_steps,time/elapsed_s,eval/snapshot_s,eval/lin_vel_error,eval/yaw_rate_error"]
    for t, lin, yaw in snapshots:
        lines += [f"{t * 100},{t - 1},,,", f"{t * 100},{t + 17},{t},{lin},{yaw}"]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    ret, lin, yaw, falls, steps = final
    snap = {"episodes": 16, "median": ret, "lin_vel_error": lin, "yaw_rate_error": yaw, "fall_fraction": falls / 16}
    (run / "summary.json").write_text(json.dumps({"env_steps": steps, "snapshot_eval": snap}))
    if ratio is not None:
        (run / "replay.json").write_text(json.dumps({"ratio_to_replayed_bare": ratio}))
    return run


def _three_go1_seeds(runs):
    # seed 0: yaw misses at 41 s; at 62 s lin-vel is exactly 0.15, not under it; first met at 83 s, lost, met again
    _tracking_run(runs, "go1_joystick_flat_flashsac_seed0",
                  [(20, 0.30, 0.50), (41, 0.14, 0.25), (62, 0.15, 0.10), (83, 0.10, 0.19), (104, 0.2, 0.1),
                   (125, 0.1, 0.1)], (10.0, 0.12, 0.18, 1, 10_000_000), ratio=0.9)  # fmt: skip
    # seed 1: met by its first snapshot at 40 s (just under both targets), lost at 60 s, met again at 80 s
    _tracking_run(runs, "go1_joystick_flat_flashsac_seed1", [(40, 0.149, 0.199), (60, 0.3, 0.1), (80, 0.1, 0.1)],
                  (12.0, 0.10, float("nan"), 0, 12_000_000), ratio=0.8)  # fmt: skip
    # seed 2: never under both (yaw-rate exactly 0.2 is not under 0.2)
    _tracking_run(runs, "go1_joystick_flat_flashsac_seed2", [(30, 0.1, 0.2), (60, 0.16, 0.1)],
                  (20.0, 0.40, 0.22, 2, 11_000_000))  # fmt: skip


def test_time_to_target_is_when_the_first_snapshot_under_both_targets_was_frozen(tmp_path):
    _three_go1_seeds(tmp_path)
    got = [results_pages.time_to_tracking_target(tmp_path / f"go1_joystick_flat_flashsac_seed{k}" / "metrics.csv",
                                                 0.15, 0.2) for k in range(3)]  # fmt: skip
    assert got == [83.0, 40.0, float("inf")]


def test_tracking_table_gives_median_and_worst_seed_per_task_and_algo(tmp_path):
    _three_go1_seeds(tmp_path)
    _tracking_run(tmp_path, "go2_joystick_flat_fastsac_seed0", [(20, 0.5, 0.5)], (3.5, 0.5, 0.6, 16, 2_000_000))
    lines = results_pages.tracking_table(TRACKING, tmp_path).splitlines()
    assert "lin-vel < 0.15 m/s and yaw-rate < 0.2 rad/s" in lines[0] and len(lines) == 4
    # returns 10, 12, 20: median 12 (the mean would be 14), worst 10; lin-vel 0.12, 0.10, 0.40; yaw-rate 0.18,
    # none counted (the worst), 0.22; falls 1, 0, 2 of 16; steps 10 M, 12 M, 11 M; time to target 83 s, 40 s,
    # never: median 83 s (2 of 3 seeds met it); replay ratios 0.9 and 0.8 on the two seeds that have one: median
    # 0.85, worst 0.80
    assert lines[2] == (
        "| go1_joystick_flat | flashsac | 3 | 12.0 [10.0] | 0.120 [0.400] | 0.220 [-] | 1/16 [2/16] | 11.0 M "
        "| 83 s (2/3 seeds) | 0.85 [0.80] (2/3 seeds) |"
    )
    assert lines[3] == (
        "| go2_joystick_flat | fastsac | 1 | 3.5 [3.5] | 0.500 [0.500] | 0.600 [0.600] | 16/16 [16/16] | 2.0 M "
        "| not met (0/1 seeds) | n/a (no replayed window) |"
    )


def test_time_to_target_is_not_met_while_fewer_than_half_the_seeds_met_it(tmp_path):
    _tracking_run(tmp_path, "go1_joystick_flat_fastsac_seed0", [(50, 0.1, 0.1)], (1.0, 0.1, 0.1, 0, 1_000_000))
    for k in (1, 2):
        _tracking_run(tmp_path, f"go1_joystick_flat_fastsac_seed{k}", [(50, 0.3, 0.1)], (1.0, 0.3, 0.1, 0, 1_000_000))
    assert "| not met (1/3 seeds) |" in results_pages.tracking_table(TRACKING, tmp_path)


def test_the_locomotion_page_says_plainly_when_it_has_no_runs_and_a_run_folder_gives_its_row(tmp_path, monkeypatch):
    table = results_pages.tracking_table(TRACKING, tmp_path / "absent")
    assert table.startswith("No runs yet. `python -m benchmark.offpolicy.learning_run --algo flashsac --task go1_")
    page = results_pages.PAGES / "locomotion.md"
    empty = results_pages.splice(page.read_text(), "locomotion", table)  # the page as it reads with no runs
    assert table in empty and "**Protocol.**" in empty
    # with run folders the page gets their row, and --check calls the page without it stale
    _three_go1_seeds(tmp_path / "runs")
    stale = tmp_path / "locomotion.md"
    stale.write_text(empty)
    monkeypatch.setattr(results_pages, "PAGES", tmp_path)
    monkeypatch.setattr(results_pages, "SUITES", (results_pages.TrackingSuite("locomotion", str(tmp_path / "runs")),))
    assert results_pages.main(["--check"]) == 1 and stale.read_text() == empty
    assert results_pages.main([]) == 0
    assert "| go1_joystick_flat | flashsac | 3 | 12.0 [10.0] |" in stale.read_text()
    assert "No runs yet" not in stale.read_text() and "**Protocol.**" in stale.read_text()
    assert results_pages.main(["--check"]) == 0
