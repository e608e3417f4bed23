"""Fixtures of the whole suite."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _run_outside_the_repository(tmp_path_factory):
    """Run the suite in a scratch directory: MuJoCo writes MUJOCO_LOG.TXT into the working
    directory on warnings (the physics-failure tests provoke them), never into the repository."""
    previous = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(previous)
