"""Fixtures of the whole suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

RUNTIME_TESTS = Path(__file__).resolve().parent / "runtime"


@pytest.fixture(autouse=True, scope="session")
def _run_outside_the_repository(tmp_path_factory):
    """Run the suite in a scratch directory: MuJoCo writes MUJOCO_LOG.TXT into the working
    directory on warnings (the physics-failure tests provoke them), never into the repository."""
    previous = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(previous)


@pytest.fixture(autouse=True, scope="session")
def _cli_runs_find_the_test_algorithm_and_env():
    """CLI runs started by tests import the stand-in algorithm (`algo=standin`) and the fake env from tests/runtime."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(RUNTIME_TESTS), previous) if p)
    yield
    if previous is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = previous
