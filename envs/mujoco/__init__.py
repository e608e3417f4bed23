"""MuJoCo backend of the NpEnv contract (BatchEnvPool worker threads)."""

from envs.mujoco.np_env import MujocoNpEnv, resolve_cpu_ids
from envs.mujoco.task import MujocoTask, PhysicsView, gymnasium_asset

__all__ = ["MujocoNpEnv", "MujocoTask", "PhysicsView", "gymnasium_asset", "resolve_cpu_ids"]
