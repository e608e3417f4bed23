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


def _constant_stream(horizon_bound: bool, reward: float) -> RewardScaler:
    """Three steps of one env earning `reward` each, gamma 0.9, support [-5, 5]."""
    scaler = RewardScaler(num_envs=1, gamma=0.9, g_max=5.0, horizon_bound=horizon_bound)
    for _ in range(3):
        scaler.update(torch.tensor([reward]), torch.zeros(1), torch.zeros(1))
    return scaler


def test_horizon_bound_keeps_a_constant_reward_stream_inside_the_support():
    # G = 1, 1.9, 2.71: population std sqrt(0.4878) = 0.6984 > max|G| / G_max = 0.542
    reference = _constant_stream(False, 1.0)
    std = math.sqrt(((1 - 1.87) ** 2 + (1.9 - 1.87) ** 2 + (2.71 - 1.87) ** 2) / 3)
    assert math.isclose(float(reference.denominator()), std, rel_tol=1e-5)
    # the stream is worth 1 / (1 - 0.9) = 10, scaled 14.3: above the support's top (5)
    assert 10.0 / float(reference.denominator()) > 5.0
    # with the bound: max|r| / ((1 - gamma) G_max) = 1 / (0.1 * 5) = 2, and 10 / 2 = 5 fits exactly
    bounded = _constant_stream(True, 1.0)
    assert math.isclose(float(bounded.denominator()), 2.0, rel_tol=1e-5)
    # the bound uses |r|: a constant -2 stream gives 2 / 0.5 = 4
    assert math.isclose(float(_constant_stream(True, -2.0).denominator()), 4.0, rel_tol=1e-5)


def test_reward_scaler_loads_a_state_without_the_reward_peak():
    scaler = _constant_stream(True, 3.0)
    old = {k: v for k, v in scaler.state_dict().items() if k != "reward_abs_max"}
    fresh = RewardScaler(num_envs=1, gamma=0.9, g_max=5.0, horizon_bound=True)
    fresh.load_state_dict(old)
    assert float(fresh.reward_abs_max) == 0.0 and float(fresh.return_abs_max) == float(scaler.return_abs_max)


def test_empirical_normalizer_eps_keeps_a_constant_feature_finite():
    norm = EmpiricalNormalizer(1, eps=0.01)
    norm.update(torch.full((4, 1), 3.0))  # variance 0
    torch.testing.assert_close(norm(torch.tensor([[3.1], [3.0]])), torch.tensor([[10.0], [0.0]]))  # 0.1 / 0.01
