"""`env.stagger_starts` through the runtime: read from the resets the collector's env recorded (`runtime.record`,
ticks 0-44 of a real DMC env with a 20-step limit). Off, every row starts its episodes on one tick; on, each
training row's first episode ends after the length the run's seed draws for it (1..20), its later episodes run
the full 20 steps, and the evaluation rows are left alone. An env that cannot shorten its episodes is refused
before the first tick, in one line."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from runtime_helpers import make_cfg, refused_fake_run, run_in_process

from offpolicy.runtime.collector import staggered_lengths

LIMIT, TRAIN_ROWS, EVAL_ROWS, TICKS, SEED = 20, 8, 2, 45, 3


def reset_ticks(tmp_path, stagger: bool) -> tuple[dict[int, list[int]], np.ndarray]:
    """Per row, the ticks after whose step the row started a new episode (tick t ends an episode of t + 1 steps
    when the row started at tick 0); and the rows' time limits in the env snapshot the window starts from."""
    cfg = make_cfg(
        seed=SEED,
        env={
            "name": "dmc_cheetah_run",
            "num_envs": TRAIN_ROWS,
            "options": {"max_episode_steps": LIMIT},
            "stagger_starts": stagger,
        },
        train={"total_env_steps": TRAIN_ROWS * TICKS},
        # idle evaluation rows: no snapshot is ever asked for, so they run the task's own episodes
        eval={"num_envs": EVAL_ROWS, "interval_s": None, "final": False},
        runtime={"env_factory": None, "record": {"start_tick": 0, "ticks": TICKS}},
    )
    run_dir = tmp_path / ("on" if stagger else "off")
    run_in_process(cfg, run_dir)
    rec = np.load(run_dir / "record.npz")
    out: dict[int, list[int]] = defaultdict(list)
    rows = iter(rec["reset_rows"])
    for tick, count in zip(rec["reset_ticks"], rec["reset_counts"], strict=True):
        for _ in range(count):
            out[int(next(rows))].append(int(tick))
    return dict(out), rec["snapshot/time_limit"]


def test_staggered_starts_spread_the_first_episodes_and_leave_the_rest_alone(tmp_path):
    off, limits = reset_ticks(tmp_path, stagger=False)
    assert limits.tolist() == [LIMIT] * (TRAIN_ROWS + EVAL_ROWS)
    assert off == {row: [LIMIT - 1, 2 * LIMIT - 1] for row in range(TRAIN_ROWS + EVAL_ROWS)}

    on, limits = reset_ticks(tmp_path, stagger=True)
    lengths = staggered_lengths(TRAIN_ROWS, LIMIT, SEED)
    # the window starts from the env as tick 0 stepped it: the shortened limits are in its snapshot (a replay
    # of the window restores them)
    assert limits.tolist() == [*lengths.tolist(), *[LIMIT] * EVAL_ROWS]
    assert lengths.min() >= 1 and lengths.max() <= LIMIT and len(set(lengths.tolist())) > 1
    for row in range(TRAIN_ROWS):
        first = int(lengths[row]) - 1
        assert on[row] == [t for t in (first, first + LIMIT, first + 2 * LIMIT) if t < TICKS], row
    for row in range(TRAIN_ROWS, TRAIN_ROWS + EVAL_ROWS):
        assert on[row] == [LIMIT - 1, 2 * LIMIT - 1], row


def test_staggered_lengths_are_uniform_over_the_limit_and_fixed_by_the_seed():
    many = staggered_lengths(100_000, LIMIT, SEED)
    counts = np.bincount(many, minlength=LIMIT + 1)
    assert counts[0] == 0 and many.max() == LIMIT
    assert np.abs(counts[1:] / len(many) - 1 / LIMIT).max() < 0.005  # each length's share: 1/20 within 0.5 points
    assert np.array_equal(staggered_lengths(50, LIMIT, SEED), many[:50])
    assert not np.array_equal(staggered_lengths(50, LIMIT, SEED + 1), many[:50])


def test_an_env_that_cannot_shorten_its_episodes_is_refused_before_the_first_tick(tmp_path):
    run_dir = tmp_path / "run"
    done, line = refused_fake_run(run_dir, "env.stagger_starts=true")
    assert "env.stagger_starts: env 'fake' (FakeEnv) cannot shorten its first episodes" in line
    assert "truncate_after" in line and "leave env.stagger_starts false" in line
    assert "AttributeError" not in done.stderr and "NotImplementedError" not in done.stderr
    assert not (run_dir / "checkpoints").exists()  # refused as the env is built: the learner never started
