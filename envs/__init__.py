"""Numpy-only batched environments (the `NpEnv` contract); never imports torch."""

from envs.core import ACTOR_OBS_KEY, EnvSpec, NpEnv, NpEnvState
from envs.registry import make, registry_names

__all__ = ["ACTOR_OBS_KEY", "EnvSpec", "NpEnv", "NpEnvState", "make", "registry_names"]
