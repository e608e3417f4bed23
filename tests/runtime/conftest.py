"""Fixtures of the runtime tests; the helpers live in runtime_helpers.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the spawned collector inherits sys.path and imports fake_env from here
    sys.path.insert(0, str(HERE))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    return d
