"""benchmark/env/python_beside_physics.py: its medians and ratio, the overlap runs both sides at once, the
transition copy holds what the step handed out, bad CPUs refused; a smoke run on go1_joystick_flat."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from envs.core import NpEnvState

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.env.python_beside_physics import TransitionCopy, main, overlapped, summarise  # noqa: E402


def test_summarise_takes_medians_and_the_extra_per_deferred_ms():
    out = summarise(
        {
            "physics": [10.0, 11.0, 30.0],  # median 11, mean 17
            "deferred": [1.0, 2.0, 9.0],  # median 2, mean 4
            "shared_extra": [3.0, 5.0, 40.0],  # median 5
            "spare": [],
        }
    )
    assert out["physics_ms"] == 11.0
    assert out["deferred_ms"] == 2.0
    assert out["shared_extra_ms"] == 5.0
    assert out["shared_extra_per_deferred_ms"] == 2.5
    assert "spare_ms" not in out  # a mode with no samples (one CPU: no spare pool) has no figure


def test_overlapped_runs_the_python_while_the_physics_runs_and_returns_after_both():
    python_ran = threading.Event()
    physics_saw_python = []

    def physics():  # finishes only if the python side runs meanwhile
        physics_saw_python.append(python_ran.wait(timeout=5.0))

    overlapped(physics, python_ran.set)
    assert physics_saw_python == [True]


def _state(rng: np.random.Generator, n: int = 4) -> tuple[NpEnvState, list[int]]:
    calls = []
    obs = {"state": rng.standard_normal((n, 3)).astype(np.float32)}
    final = {"state": rng.standard_normal((n, 3)).astype(np.float32)}
    reward = rng.standard_normal(n).astype(np.float32)
    extra = {
        "episode_return": rng.standard_normal(n),
        "episode_length": rng.integers(0, 1000, n),
        "episode_tracking": rng.standard_normal((n, 2)),
    }

    def finish():
        calls.append(1)
        return reward, extra

    terminated, truncated = rng.random(n) < 0.5, rng.random(n) < 0.5
    info = {"final_obs": final}
    return NpEnvState(obs=obs, reward=None, terminated=terminated, truncated=truncated, info=info, finish=finish), calls


def test_transition_copy_finishes_the_step_and_holds_its_transition():
    rng = np.random.default_rng(0)
    sizing, _ = _state(rng)
    copy = TransitionCopy(sizing)
    state, calls = _state(rng)
    prev = {"state": rng.standard_normal((4, 3)).astype(np.float32)}
    copy.write(prev, state)
    assert calls == [1]
    np.testing.assert_array_equal(copy.obs["state"], prev["state"])
    np.testing.assert_array_equal(copy.next_obs["state"], state.info["final_obs"]["state"])
    np.testing.assert_array_equal(copy.flags, np.stack([state.reward, state.terminated, state.truncated]))
    for key in ("episode_return", "episode_length", "episode_tracking"):
        np.testing.assert_array_equal(copy.rest[key], state.info[key])


def test_cpus_the_process_cannot_use_are_refused(capsys):
    bad = max(os.sched_getaffinity(0)) + 64
    with pytest.raises(SystemExit):
        main(["--tasks", "go1_joystick_flat", "--cpus", str(bad)])
    err = capsys.readouterr().err
    assert f"CPU ids [{bad}] are not available" in err


def test_smoke_go1_reports_every_mode(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    out = tmp_path / "beside.json"
    args = ["--tasks", "go1_joystick_flat", "--envs", "16", "--steps", "2", "--warmup", "1"]
    result = main([*args, "--cpus", ",".join(map(str, cpus)), "--out", str(out)])
    row = json.loads(out.read_text())["rows"][0]
    assert row == result["rows"][0]
    assert row["nthread"] == len(cpus)
    names = ["physics", "deferred", "sequential", "shared", "shared_extra"]
    if len(cpus) > 1:
        names += ["physics_spare", "spare", "spare_extra"]
    for name in names:
        assert np.isfinite(row[f"{name}_ms"])
    for name in ("physics", "deferred", "sequential", "shared"):
        assert row[f"{name}_ms"] > 0
