"""Gymnasium MuJoCo v5 tasks reproduced over the batched pool."""

from envs.tasks.ant import Ant
from envs.tasks.half_cheetah import HalfCheetah
from envs.tasks.hopper import Hopper
from envs.tasks.humanoid import Humanoid
from envs.tasks.walker2d import Walker2d

TASKS = {task.name: task for task in (Ant, Humanoid, HalfCheetah, Hopper, Walker2d)}

__all__ = ["TASKS", "Ant", "HalfCheetah", "Hopper", "Humanoid", "Walker2d"]
