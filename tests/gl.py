"""The offscreen GL backend for tests that render (importable as `gl`: pytest's pythonpath has tests/)."""

from __future__ import annotations

import os

import pytest


def gl_backend_or_skip(cuda: bool = False) -> str:
    """The backend the eval CLI would choose (for a subprocess: mujoco is imported here already), or skip.

    The probe sets MUJOCO_GL; it is unset again afterwards unless the caller had set it, so other tests'
    subprocesses make the CLI's own choice."""
    from offpolicy.eval import choose_gl_backend

    saved = os.environ.get("MUJOCO_GL")
    try:
        backend, problem = choose_gl_backend(cuda)
    finally:
        if saved is None:
            os.environ.pop("MUJOCO_GL", None)
    if problem:
        pytest.skip(f"no offscreen GL backend (MUJOCO_GL={backend}: {problem}): install libosmesa6 or use EGL")
    return backend
