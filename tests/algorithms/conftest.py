"""Small specs, configs and a real replay filled with random data for the algorithm tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from algo_stubs import FixedReplay, random_batch
from omegaconf import OmegaConf
from sizes import SMALL

from envs.core import EnvSpec
from offpolicy.algorithms import make_algorithm
from offpolicy.replay_buffer import ReplayBuffer

NUM_ENVS, OBS_DIM, ACTION_DIM = 6, 7, 3


def make_spec(
    num_envs: int = NUM_ENVS,
    obs_dims: dict[str, int] | None = None,
    action_dim: int = ACTION_DIM,
    reward_range: tuple[float, float] | None = (-3.0, 3.0),
) -> EnvSpec:
    """A synthetic spec: dimensions, and per-step reward bounds that cover `fill_replay`'s N(0, 1) rewards."""
    return EnvSpec(
        name="synthetic",
        num_envs=num_envs,
        obs_dims=obs_dims or {"actor": OBS_DIM},
        action_dim=action_dim,
        action_low=-np.ones(action_dim, np.float32),
        action_high=np.ones(action_dim, np.float32),
        dt=0.01,
        max_episode_steps=1000,
        reward_range=reward_range,
    )


def make_small(name: str, spec: EnvSpec | None = None, **overrides):
    """A small CPU instance of algorithm `name`."""
    cfg = OmegaConf.create({"name": name, **SMALL[name], **overrides})
    return make_algorithm(cfg, spec or make_spec(), "cpu")


def fill_replay(spec: EnvSpec, steps: int = 30, seed: int = 0) -> ReplayBuffer:
    """A real replay with `steps` vector steps of random transitions (some terminated, some truncated)."""
    gen = torch.Generator().manual_seed(seed)
    replay = ReplayBuffer(10_000, spec.obs_dims, spec.action_dim, "cpu", num_envs=spec.num_envs)
    n = spec.num_envs
    for _ in range(steps):
        obs = {k: torch.randn(n, d, generator=gen) for k, d in spec.obs_dims.items()}
        next_obs = {k: torch.randn(n, d, generator=gen) for k, d in spec.obs_dims.items()}
        action = torch.rand(n, spec.action_dim, generator=gen) * 2 - 1
        reward = torch.randn(n, generator=gen)
        terminated = (torch.rand(n, generator=gen) < 0.1).float()
        truncated = (torch.rand(n, generator=gen) < 0.1).float() * (1 - terminated)
        replay.add(obs, action, reward, next_obs, terminated, truncated)
    return replay


@pytest.fixture
def spec() -> EnvSpec:
    return make_spec()


@pytest.fixture
def replay(spec) -> ReplayBuffer:
    return fill_replay(spec)


@pytest.fixture
def small():
    """The `make_small` factory."""
    return make_small


@pytest.fixture
def filled():
    """The `fill_replay` factory."""
    return fill_replay


@pytest.fixture
def spec_factory():
    """The `make_spec` factory."""
    return make_spec


@pytest.fixture
def fixed_replay():
    """`fixed_replay(spec, rows, seed)`: a FixedReplay over `random_batch`."""
    return lambda spec, rows, seed=0: FixedReplay(random_batch(spec, rows, seed))
