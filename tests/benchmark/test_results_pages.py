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
        "| fastsac | ant | 2 | 12.3 M | 900, 951 [120] (2 of 3 ended early) | gymnasium: 900, 951 [120] (3 of 3 ended early) | n/a |",
        "| fastsac | ant | 10 | 12.3 M | 900, 951 [120] (1 of 3 ended early) | gymnasium: 900, 951 [120] | n/a |",
    ]


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
    assert seeds_table(tmp_path, 1000, {"ant": 6080}).splitlines()[2].endswith("| 6,080 from 4.0 min: 0/3 (>= 0.95 x: 2/3), worst 5,000 |")


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
