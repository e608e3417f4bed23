"""`runtime.record.*` on an env that cannot snapshot itself: refused before the first tick, in one line that names
the env and the option, instead of an AttributeError at the window's start."""

from __future__ import annotations

from runtime_helpers import refused_fake_run


def test_an_env_without_snapshots_is_refused_before_the_first_tick(tmp_path):
    run_dir = tmp_path / "run"
    done, line = refused_fake_run(
        run_dir,
        "+runtime.record.start_tick=30",  # a window the run reaches: before, it failed there
        "+runtime.record.ticks=5",
    )
    assert "runtime.record: env 'fake' (FakeEnv) cannot record" in line and "snapshot" in line
    assert "AttributeError" not in done.stderr
    assert "(0 env steps)" in done.stdout  # the learner's checkpoint: no tick was stepped
    assert not (run_dir / "record.npz").exists()
