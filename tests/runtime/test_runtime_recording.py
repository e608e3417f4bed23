"""`runtime.record.*` on an env that cannot snapshot itself: refused before the first tick, in one line that names
the env and the option, instead of an AttributeError at the window's start."""

from __future__ import annotations

from runtime_helpers import STANDIN_CLI, train_cli


def test_an_env_without_snapshots_is_refused_before_the_first_tick(tmp_path):
    run_dir = tmp_path / "run"
    done = train_cli(
        run_dir,
        *STANDIN_CLI,
        "+runtime.env_factory=fake_env:make",
        "train.total_env_steps=200",
        "logger=none",
        "eval.num_envs=0",
        "eval.final=false",
        "+runtime.record.start_tick=30",  # a window the run reaches: before, it failed there
        "+runtime.record.ticks=5",
    )
    assert done.returncode == 3, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("[offpolicy] run failed")]
    assert len(lines) == 1
    assert "runtime.record: env 'fake' (FakeEnv) cannot record" in lines[0] and "snapshot" in lines[0]
    assert "AttributeError" not in done.stderr
    assert "(0 env steps)" in done.stdout  # the learner's checkpoint: no tick was stepped
    assert not (run_dir / "record.npz").exists()
