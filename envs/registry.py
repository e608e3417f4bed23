"""Task registry and the public factory `make`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envs.core import NpEnv


def _tasks() -> dict:
    """Every task by registry name: Gymnasium's MuJoCo tasks, the DeepMind Control Suite's, locomotion."""
    from envs.dmc import TASKS as DMC_TASKS
    from envs.gymnasium import TASKS
    from envs.locomotion import TASKS as LOCOMOTION_TASKS

    return {**TASKS, **DMC_TASKS, **LOCOMOTION_TASKS}


def registry_names() -> list[str]:
    """Names `make` accepts."""
    return sorted(_tasks())


def task_class(name: str) -> type:
    """The task class registered as `name` (its constructor takes the task's options)."""
    tasks = _tasks()
    if name not in tasks:
        raise ValueError(f"unknown env {name!r}; valid names: {', '.join(sorted(tasks))}")
    return tasks[name]


def make(
    name: str,
    num_envs: int,
    seed: int = 0,
    nthread: int | None = None,
    cpu_ids: Sequence[int] | None = None,
    **task_overrides: Any,
) -> NpEnv:
    """Build the batched env `name` with `num_envs` rows; CPU affinity is fixed here (cold path)."""
    from envs.mujoco.np_env import MujocoNpEnv

    tasks = _tasks()
    if name not in tasks:
        raise ValueError(f"unknown env {name!r}; valid names: {', '.join(sorted(tasks))}")
    task = tasks[name](**task_overrides)
    if hasattr(task, "make_env"):  # a task that carries state between steps builds its own env
        return task.make_env(num_envs, seed, nthread, cpu_ids)
    return MujocoNpEnv(task, num_envs=num_envs, seed=seed, nthread=nthread, cpu_ids=cpu_ids)
