"""Running statistics: the FlashSAC reward scaler and the FastSAC observation normaliser."""

import math

import torch

from offpolicy.algorithms.normalizers import EmpiricalNormalizer, RewardScaler


def _two_steps(g_max: float) -> RewardScaler:
    scaler = RewardScaler(num_envs=2, gamma=0.5, g_max=g_max)
    scaler.update(torch.tensor([1.0, 2.0]), torch.zeros(2), torch.zeros(2))  # G = (1, 2)
    # env 1 terminates: its return restarts from the reward; env 0 continues: 0.5 * 1 + 2
    scaler.update(torch.tensor([2.0, 4.0]), torch.tensor([0.0, 1.0]), torch.zeros(2))  # G = (2.5, 4)
    return scaler


def test_reward_scaler_tracks_discounted_returns():
    scaler = _two_steps(g_max=5.0)
    torch.testing.assert_close(scaler.discounted_return, torch.tensor([2.5, 4.0]))
    assert float(scaler.return_abs_max) == 4.0
    # pooled returns {1, 2, 2.5, 4}: mean 2.375, population variance 4.6875 / 4
    assert math.isclose(float(scaler.return_mean), 2.375, rel_tol=1e-6)
    assert math.isclose(float(scaler.return_var), 1.171875, rel_tol=1e-6)
    # denominator max(sqrt(1.171875), 4 / 5) = 1.0825318
    torch.testing.assert_close(scaler(torch.tensor([1.0825318])), torch.tensor([1.0]))


def test_reward_scaler_peak_bound_keeps_returns_in_support():
    scaler = _two_steps(g_max=1.0)  # now max|G| / G_max = 4 dominates sqrt(var) = 1.08
    torch.testing.assert_close(scaler(torch.tensor([2.0, -1.0])), torch.tensor([0.5, -0.25]))


def test_truncation_also_restarts_the_return():
    scaler = RewardScaler(num_envs=1, gamma=0.9, g_max=5.0)
    scaler.update(torch.tensor([3.0]), torch.zeros(1), torch.zeros(1))
    scaler.update(torch.tensor([1.0]), torch.zeros(1), torch.ones(1))
    torch.testing.assert_close(scaler.discounted_return, torch.tensor([1.0]))


def test_empirical_normalizer_merges_batches_exactly():
    norm = EmpiricalNormalizer(1, eps=0.0)
    norm.update(torch.tensor([[1.0], [3.0]]))
    norm.update(torch.tensor([[5.0], [7.0], [9.0]]))
    # all five values: mean 5, population variance (16 + 4 + 0 + 4 + 16) / 5 = 8
    torch.testing.assert_close(norm.mean, torch.tensor([5.0]))
    torch.testing.assert_close(norm.var, torch.tensor([8.0]))
    torch.testing.assert_close(norm(torch.tensor([[5.0 + math.sqrt(8.0)]])), torch.tensor([[1.0]]))
