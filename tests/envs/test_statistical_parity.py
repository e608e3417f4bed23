"""Statistical parity with Gymnasium under uniform random actions.

For every task, episodes of our batched env and of Gymnasium's own env (both
driven by uniform random actions) must agree on:
- the episode-length distribution: two-sample Kolmogorov-Smirnov statistic
  below its critical value at alpha = 0.001 (c = 1.95, D_crit = c*sqrt((n+m)/(n*m)));
- the mean episode length and the mean per-step reward: difference within
  4 standard errors of the difference (episodes are independent samples).
Both sides use fixed seeds, so the test is deterministic; the bounds say how
far apart two correct implementations with different random streams may be.
Hopper, Walker2d and Humanoid terminate within tens of steps under random
actions, so their length distributions are a sharp check of the healthy rules.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envs
from envs.gymnasium import TASKS

# episodes per side; HalfCheetah never terminates (1000-step episodes), so fewer
EPISODES = {"ant": 60, "humanoid": 300, "halfcheetah": 8, "hopper": 600, "walker2d": 600}


def _gymnasium_episodes(name: str, count: int, seed: int):
    task = TASKS[name]()
    genv = gym.make(task.gymnasium_id, max_episode_steps=task.max_episode_steps, **task.gymnasium_kwargs())
    genv.action_space.seed(seed)
    lengths, mean_rewards = [], []
    genv.reset(seed=seed)
    length, total = 0, 0.0
    while len(lengths) < count:
        _, reward, terminated, truncated, _ = genv.step(genv.action_space.sample())
        length += 1
        total += reward
        if terminated or truncated:
            lengths.append(length)
            mean_rewards.append(total / length)
            length, total = 0, 0.0
            genv.reset()
    return np.array(lengths), np.array(mean_rewards)


def _our_episodes(name: str, count: int, seed: int):
    num_envs = min(count, 20)
    per_env = -(-count // num_envs)
    env = envs.make(name, num_envs, seed=seed, nthread=1)
    rng = np.random.default_rng(seed)
    env.reset()
    lengths = [[] for _ in range(num_envs)]
    mean_rewards = [[] for _ in range(num_envs)]
    low, high = env.spec.action_low, env.spec.action_high
    # each env contributes its first `per_env` episodes: taking the first episodes to
    # finish across envs would bias the sample towards short episodes
    while min(len(x) for x in lengths) < per_env:
        state = env.step(rng.uniform(low, high, size=(num_envs, env.spec.action_dim)).astype(np.float32))
        for i in np.flatnonzero(state.done):
            length = state.info["episode_length"][i]
            lengths[i].append(length)
            mean_rewards[i].append(state.info["episode_return"][i] / length)
    env.close()
    return (
        np.concatenate([x[:per_env] for x in lengths]),
        np.concatenate([x[:per_env] for x in mean_rewards]),
    )


def _ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    grid = np.union1d(a, b)
    cdf_a = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


def _assert_means_close(a: np.ndarray, b: np.ndarray, what: str, floor: float = 0.0):
    se = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)) if len(a) > 1 else 0.0
    assert abs(a.mean() - b.mean()) <= 4 * se + floor, (
        f"{what}: ours {a.mean():.4f} vs gymnasium {b.mean():.4f} (se {se:.4f})"
    )


@pytest.mark.parametrize("name", list(EPISODES))
def test_random_action_statistics_match_gymnasium(name):
    count = EPISODES[name]
    ours_len, ours_rew = _our_episodes(name, count, seed=11)
    ref_len, ref_rew = _gymnasium_episodes(name, count, seed=12)
    if name == "halfcheetah":
        assert (ours_len == 1000).all() and (ref_len == 1000).all()
    else:
        d = _ks_statistic(ours_len, ref_len)
        d_crit = 1.95 * np.sqrt((len(ours_len) + len(ref_len)) / (len(ours_len) * len(ref_len)))
        assert d < d_crit, f"episode lengths differ: KS D={d:.3f} >= {d_crit:.3f}"
        _assert_means_close(ours_len.astype(float), ref_len.astype(float), "mean episode length", floor=1e-9)
    _assert_means_close(ours_rew, ref_rew, "mean per-step reward", floor=1e-9)
