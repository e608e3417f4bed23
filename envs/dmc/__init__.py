"""DeepMind Control Suite tasks over the batched pool, and the reference environments they reproduce.

Importing this package does not import dm_control: the tasks read the suite's
MJCF files from the installed package; only `reference_env` (cold path: tests,
evaluation) imports dm_control itself, and `flatten_observation` lays its
observations out as the tasks' own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from envs.dmc.cheetah import CheetahRun
from envs.dmc.dog import DogRun, DogTrot
from envs.dmc.hopper import HopperHop
from envs.dmc.humanoid import HumanoidRun, HumanoidWalk
from envs.dmc.quadruped import QuadrupedRun
from envs.dmc.task import DmcTask
from envs.dmc.walker import WalkerRun

TASKS: dict[str, type[DmcTask]] = {
    task.name: task
    for task in (CheetahRun, WalkerRun, HopperHop, QuadrupedRun, HumanoidWalk, HumanoidRun, DogTrot, DogRun)
}


def reference_env(name: str, seed: int | None = None) -> Any:
    """dm_control's own environment for task `name`: `suite.load(domain, task, task_kwargs={"random": seed})`.

    Its observations are the suite's dicts; `flatten_observation(name, ...)` lays
    them out as this package's actor observation.
    """
    if name not in TASKS:
        raise ValueError(f"unknown DeepMind Control Suite task {name!r}; valid names: {', '.join(sorted(TASKS))}")
    from dm_control import suite

    domain, task = TASKS[name].dm_control_id.split("-")
    return suite.load(domain, task, task_kwargs={"random": seed})


def flatten_observation(name: str, observation: Mapping[str, Any]) -> np.ndarray:
    """The suite's observation dict of task `name` as one float64 vector in this task's observation order.

    The entries are concatenated (each raveled) in the order of the task's
    `observation_keys`; a dict with other entries is refused.
    """
    keys = TASKS[name].observation_keys
    if set(observation) != set(keys):
        raise ValueError(f"{name}: the suite's observation has entries {sorted(observation)}, expected {sorted(keys)}")
    return np.concatenate([np.asarray(observation[key], np.float64).ravel() for key in keys])


__all__ = ["TASKS", "DmcTask", "flatten_observation", "reference_env"]
