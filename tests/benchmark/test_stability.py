"""The stability figures of a snapshot series, against values worked out by hand."""

from __future__ import annotations

import pytest

from benchmark.offpolicy.stability import stability


def test_figures_count_only_the_snapshots_after_the_first_at_the_target():
    # snapshots at 60..600 s; the target 850 is first met at 180 s (860); after it: 900, 800, 807.5, 870, 700, 880, 855
    x = [60, 120, 180, 240, 300, 360, 420, 480, 540, 600]
    y = [100, 500, 860, 900, 800, 807.5, 870, 700, 880, 855]
    got = stability(x, y, 850)
    assert got["first_reached"] == 180
    assert got["snapshots_after"] == 7
    assert got["held_fraction"] == pytest.approx(4 / 7)  # 900, 870, 880, 855
    # >= 0.95 x 850 = 807.5 (807.5 included): all but 800 and 700
    assert got["held_fraction_95"] == pytest.approx(5 / 7)
    assert got["worst_after"] == 700


def test_the_series_is_ordered_by_position_not_by_list_order():
    got = stability([300, 100, 200], [900, 100, 950], 900)
    assert got["first_reached"] == 200
    assert got["held_fraction"] == 1.0 and got["worst_after"] == 900


def test_a_target_never_reached_or_reached_last_has_no_fractions():
    never = stability([1, 2, 3], [1.0, 2.0, 3.0], 10)
    assert never["first_reached"] is None and never["held_fraction"] is None and never["worst_after"] is None
    last = stability([1, 2, 3], [1.0, 2.0, 30.0], 10)
    assert last["first_reached"] == 3 and last["snapshots_after"] == 0 and last["held_fraction"] is None


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="3 snapshot positions but 2 medians"):
        stability([1, 2, 3], [1.0, 2.0], 1.0)
