"""DeepMind Control Suite tasks over the batched pool, and the reference environments they reproduce.

Importing this package does not import dm_control: the tasks read the suite's
MJCF files from the installed package; only `reference_env` (cold path: tests,
evaluation) imports dm_control itself.
"""

from __future__ import annotations

from typing import Any

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
    """dm_control's own environment for task `name`, seeded, with flat observations in the suite's order.

    `timestep.observation["observations"]` is laid out as this package's actor
    observation (float64 there, float32 here).
    """
    if name not in TASKS:
        raise ValueError(f"unknown DeepMind Control Suite task {name!r}; valid names: {', '.join(sorted(TASKS))}")
    from dm_control import suite

    domain, task = TASKS[name].dm_control_id.split("-")
    return suite.load(domain, task, task_kwargs={"random": seed}, environment_kwargs={"flat_observation": True})


__all__ = ["TASKS", "DmcTask", "reference_env"]
