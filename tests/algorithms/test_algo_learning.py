"""Both algorithms learn a task whose optimum is known: a point mass steered to a goal, on the CPU.

The environment is a few lines of numpy; everything else is the real code: the learner's
replay, `explore`, `act`, `observe` and `update_phase` of each algorithm at small sizes.
A flipped actor or temperature sign, a wrong critic combination or a broken TD target
leaves the point mass far from its goal.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from envs.core import EnvSpec
from offpolicy.algorithms import make_algorithm
from offpolicy.replay_buffer import ReplayBuffer


class PointMassGoal:
    """Batched point mass in [-1, 1]^2: each step moves it by SPEED * action (per axis), toward a random goal.

    Observation (goal - position, position); reward -|position' - goal|; episodes are
    truncated after HORIZON steps (no termination). The optimum is known: move each axis
    toward the goal at full speed, then stop on it. Every goal is at most 2 sqrt(2) away,
    so 15 of the 20 steps reach it: the optimal final distance is 0.
    """

    SPEED, HORIZON = 0.2, 20
    REWARD_RANGE = (-2.0 * np.sqrt(2.0), 0.0)

    def __init__(self, num_envs: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.num_envs = num_envs
        self.pos = self.rng.uniform(-1, 1, (num_envs, 2))
        self.goal = self.rng.uniform(-1, 1, (num_envs, 2))
        self.t = np.zeros(num_envs, dtype=np.int64)

    def obs(self) -> np.ndarray:
        return np.concatenate([self.goal - self.pos, self.pos], axis=1).astype(np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(next_obs before any reset, reward, truncated, obs to act on next); finished envs restart."""
        self.pos = np.clip(self.pos + self.SPEED * np.clip(action, -1, 1), -1, 1)
        self.t += 1
        reward = -np.linalg.norm(self.pos - self.goal, axis=1).astype(np.float32)
        next_obs = self.obs()
        truncated = self.t >= self.HORIZON
        n = int(truncated.sum())
        self.pos[truncated] = self.rng.uniform(-1, 1, (n, 2))
        self.goal[truncated] = self.rng.uniform(-1, 1, (n, 2))
        self.t[truncated] = 0
        return next_obs, reward, truncated.astype(np.float32), self.obs()

    def spec(self) -> EnvSpec:
        ones = np.ones(2, np.float32)
        return EnvSpec("point_mass_goal", self.num_envs, {"actor": 4}, 2, -ones, ones, 0.1, self.HORIZON,
                       reward_range=self.REWARD_RANGE)  # fmt: skip


def final_distance(algo, episodes: int = 64, seed: int = 123) -> float:
    """Mean distance to the goal after HORIZON steps of the deterministic (mean) action."""
    env = PointMassGoal(episodes, seed)
    for _ in range(PointMassGoal.HORIZON - 1):
        action = algo.act({"actor": torch.from_numpy(env.obs())}).numpy()
        env.step(action)
    action = algo.act({"actor": torch.from_numpy(env.obs())}).numpy()
    env.pos = np.clip(env.pos + env.SPEED * action, -1, 1)
    return float(np.linalg.norm(env.pos - env.goal, axis=1).mean())


NUM_ENVS, RANDOM_STEPS = 16, 25
# Small networks and learning rates above the references' 3e-4 (the point mass needs ~2,000 updates,
# not millions). Each temperature starts above where its entropy target puts it, so the temperature
# step has work to do: alpha must come down (FastSAC: target -2 |A|, alpha_lr raised so alpha moves
# within the run; FlashSAC: target of a 0.02-std Gaussian per axis). With that sign flipped, alpha
# grows instead and the entropy term drowns the value: the point mass ends ~0.3-1 from its goal.
CONFIGS = {
    "fastsac": dict(
        batch_size=128, critic_hidden_dim=64, actor_hidden_dim=64, num_atoms=51, gamma=0.9, tau=0.05,
        actor_lr=1e-3, critic_lr=1e-3, alpha_lr=3e-3, updates_per_step=2, policy_frequency=2,
        alpha_init=0.1, target_entropy_ratio=2.0,
    ),
    "flashsac": dict(
        batch_size=128, critic_hidden_dim=32, actor_hidden_dim=32, critic_num_blocks=1, actor_num_blocks=1,
        gamma=0.9, tau=0.05, lr_init=1e-3, lr_peak=1e-3, lr_end=1e-3, updates_per_step=2,
        temp_init=0.2, target_sigma=0.02,
    ),
}  # fmt: skip


def train(name: str, vector_steps: int, seed: int = 0) -> tuple[float, float]:
    """Train `name` on the point mass; returns (final distance of the mean action, seconds)."""
    torch.manual_seed(seed)
    env = PointMassGoal(NUM_ENVS, seed)
    spec = env.spec()
    algo = make_algorithm(OmegaConf.create({"name": name, **CONFIGS[name]}), spec, "cpu")
    replay = ReplayBuffer(100_000, spec.obs_dims, spec.action_dim, "cpu", num_envs=NUM_ENVS)
    rng = np.random.default_rng(seed + 1)
    obs, reset = env.obs(), np.ones(NUM_ENVS, dtype=bool)
    start = time.perf_counter()
    for step in range(vector_steps):
        if step < RANDOM_STEPS:  # the learner's uniform-random phase before learning starts
            action = rng.uniform(-1, 1, (NUM_ENVS, 2)).astype(np.float32)
        else:
            action = algo.explore({"actor": torch.from_numpy(obs)}, torch.from_numpy(reset)).numpy()
        next_obs, reward, truncated, obs_after = env.step(action)
        zeros = np.zeros(NUM_ENVS, np.float32)
        replay.add({"actor": obs}, action, reward, {"actor": next_obs}, zeros, truncated)
        algo.observe(torch.from_numpy(reward), torch.from_numpy(zeros), torch.from_numpy(truncated))
        if step >= RANDOM_STEPS:
            algo.update_phase(replay, algo.updates_per_step)
        obs, reset = obs_after, truncated.astype(bool)
    return final_distance(algo), time.perf_counter() - start


# Zero actions leave the point mass ~1.04 from its goal on average (two uniform points in the
# square). Trained as here, the mean action ends 0.03-0.05 (FastSAC, 800 vector steps, ~10-15 s on
# one core) and 0.06-0.10 (FlashSAC, 1000 vector steps, ~25-30 s) from it over seeds 0-2; with the
# actor's sign flipped ~2.1, with the temperature's flipped 0.97 (FastSAC) and 0.63 (FlashSAC).
THRESHOLD = 0.15
VECTOR_STEPS = {"fastsac": 800, "flashsac": 1000}


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_learns_to_reach_the_goal(name):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the budget above is one core's
    try:
        distance, seconds = train(name, VECTOR_STEPS[name])
    finally:
        torch.set_num_threads(threads)
    assert distance < THRESHOLD, f"{name} ends {distance:.3f} from the goal after {seconds:.0f} s (needs < {THRESHOLD})"
