"""Statistical parity of the DeepMind Control Suite tasks with dm_control under uniform random actions.

Step parity (test_dmc_parity.py) pins down the dynamics, observation and reward
from given states; what it cannot see is how episodes start. Here both sides
draw `EPISODES` fresh episodes (independent samples: our env's rows, dm_control
resets) and run `STEPS` uniform random actions in each, then compare
- the initial observation, entry by entry: mean within K standard errors of
  the difference, and standard deviation within K standard errors (delta
  method: Var(s) ~ (m4 - s^4) / (4 n s^2)); entries constant on both sides
  must be equal;
- the per-episode mean observation over the steps, entry by entry (mean);
- the per-episode mean reward per step (mean).
K = 4.5 (two-sided p ~ 7e-6 per comparison, a few hundred comparisons per
task). Both sides use fixed seeds, so the test is deterministic; the bounds
say how far apart two correct implementations with different random streams
may be. Episode counts are sized so that dm_control's side stays within a few
seconds per task (the dog steps at ~1.5 ms, the quadruped resets at ~14 ms).
"""

from __future__ import annotations

import numpy as np
import pytest

import envs
from envs.dmc import TASKS, flatten_observation, reference_env

# importing dm_control probes for a display (its viewer), which a headless machine lacks
pytestmark = pytest.mark.filterwarnings("ignore:.*DISPLAY environment variable is missing")

K = 4.5
STEPS = 30
FLOAT32 = 1e-6
"""slack for our float32 observations against dm_control's float64 (constant entries)"""
EPISODES = {
    "dmc_cheetah_run": 300,
    "dmc_walker_run": 200,
    "dmc_hopper_hop": 300,
    "dmc_quadruped_run": 150,
    "dmc_humanoid_walk": 150,
    "dmc_humanoid_run": 150,
    "dmc_dog_trot": 64,
    "dmc_dog_run": 64,
}
assert set(EPISODES) == set(TASKS)


def _ours(name: str, episodes: int, seed: int):
    env = envs.make(name, episodes, seed=seed, nthread=2)
    rng = np.random.default_rng(seed)
    low, high = env.spec.action_low, env.spec.action_high
    first = env.reset().obs["actor"].astype(np.float64)
    obs_sum, reward_sum = np.zeros_like(first), np.zeros(episodes)
    for _ in range(STEPS):
        state = env.step(rng.uniform(low, high, size=(episodes, env.spec.action_dim)))
        assert not state.done.any()
        obs_sum += state.obs["actor"]
        reward_sum += state.reward
    env.close()
    return first, obs_sum / STEPS, reward_sum / STEPS


def _reference(name: str, episodes: int, seed: int):
    ref = reference_env(name, seed=seed)
    rng = np.random.default_rng(seed)
    spec = ref.action_spec()
    first, mean_obs, mean_reward = [], [], []
    for _ in range(episodes):
        first.append(flatten_observation(name, ref.reset().observation))
        obs, rewards = [], []
        for _ in range(STEPS):
            ts = ref.step(rng.uniform(spec.minimum, spec.maximum))
            obs.append(flatten_observation(name, ts.observation))
            rewards.append(ts.reward)
        mean_obs.append(np.mean(obs, axis=0))
        mean_reward.append(np.mean(rewards))
    return np.array(first), np.array(mean_obs), np.array(mean_reward)


def _assert_means_close(a: np.ndarray, b: np.ndarray, what: str) -> None:
    """Column means of a and b within K standard errors of their difference (constant columns: equal)."""
    se = np.sqrt(a.var(axis=0, ddof=1) / len(a) + b.var(axis=0, ddof=1) / len(b))
    gap = np.abs(a.mean(axis=0) - b.mean(axis=0))
    bad = np.flatnonzero(gap > K * se + FLOAT32 * (1 + np.abs(b.mean(axis=0))))
    assert not bad.size, (
        f"{what}: entries {bad[:8].tolist()} ours {a.mean(0)[bad[:8]]} vs dm_control {b.mean(0)[bad[:8]]}"
    )


def _assert_stds_close(a: np.ndarray, b: np.ndarray, what: str) -> None:
    """Column standard deviations of a and b within K standard errors (delta method)."""

    def std_and_var(x):
        s = x.std(axis=0, ddof=1)
        m4 = ((x - x.mean(axis=0)) ** 4).mean(axis=0)
        return s, np.divide(m4 - s**4, 4 * len(x) * s**2, out=np.zeros_like(s), where=s > 0)

    (sa, va), (sb, vb) = std_and_var(a), std_and_var(b)
    gap = np.abs(sa - sb)
    bad = np.flatnonzero(gap > K * np.sqrt(np.maximum(va, 0) + np.maximum(vb, 0)) + FLOAT32 * (1 + sb))
    assert not bad.size, f"{what}: entries {bad[:8].tolist()} std ours {sa[bad[:8]]} vs dm_control {sb[bad[:8]]}"


@pytest.mark.parametrize("name", list(EPISODES))
def test_random_action_statistics_match_dm_control(name):
    episodes = EPISODES[name]
    ours_first, ours_obs, ours_reward = _ours(name, episodes, seed=11)
    ref_first, ref_obs, ref_reward = _reference(name, episodes, seed=12)
    _assert_means_close(ours_first, ref_first, f"{name} initial observation mean")
    _assert_stds_close(ours_first, ref_first, f"{name} initial observation std")
    _assert_means_close(ours_obs, ref_obs, f"{name} mean observation over {STEPS} steps")
    _assert_means_close(ours_reward[:, None], ref_reward[:, None], f"{name} mean reward per step")
