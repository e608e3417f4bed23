"""Tanh-Gaussian log-probabilities, entropy targets, Polyak updates and the loss scaler (hand-computed)."""

import math

import torch

from offpolicy.algorithms.flashsac import unified_target_entropy
from offpolicy.algorithms.optim import LossScaler, make_adam
from offpolicy.algorithms.sac import (
    soft_update_,
    squash_log_std,
    tanh_gaussian_log_prob,
    tanh_gaussian_sample,
)

HALF_LOG_2PI = 0.9189385332046727


def test_tanh_log_prob_at_zero_is_standard_normal_density():
    u = torch.zeros(1, 2)
    logp = tanh_gaussian_log_prob(u, torch.zeros(1, 2), torch.zeros(1, 2))
    torch.testing.assert_close(logp, torch.tensor([-2 * HALF_LOG_2PI]))


def test_tanh_log_prob_subtracts_log_one_minus_tanh_squared():
    # u = atanh(0.5): N(u; 0, 1) = -u^2/2 - log sqrt(2 pi); Jacobian of tanh is 1 - 0.5^2 = 0.75
    u = torch.tensor([[math.atanh(0.5)]])
    expected = -0.5 * math.atanh(0.5) ** 2 - HALF_LOG_2PI - math.log(0.75)
    logp = tanh_gaussian_log_prob(u, torch.zeros(1, 1), torch.zeros(1, 1))
    torch.testing.assert_close(logp, torch.tensor([expected]))
    # with mean 0.1 and std e^-1: z = (u - 0.1) e, log N = -z^2/2 + 1 - log sqrt(2 pi)
    z = (math.atanh(0.5) - 0.1) * math.e
    expected = -0.5 * z**2 + 1.0 - HALF_LOG_2PI - math.log(0.75)
    logp = tanh_gaussian_log_prob(u, torch.full((1, 1), 0.1), torch.full((1, 1), -1.0))
    torch.testing.assert_close(logp, torch.tensor([expected]))


def test_tanh_correction_stays_finite_where_tanh_saturates():
    u = torch.tensor([[20.0]])
    logp = tanh_gaussian_log_prob(u, torch.tensor([[20.0]]), torch.zeros(1, 1))
    # log(1 - tanh(20)^2) = log(4 e^-40 / (1 + e^-40)^2) ~ log 4 - 40
    torch.testing.assert_close(logp, torch.tensor([-HALF_LOG_2PI - (math.log(4.0) - 40.0)]))


def test_sample_is_tanh_of_reparameterised_gaussian():
    mean, log_std, noise = torch.tensor([[0.2, -0.3]]), torch.tensor([[-1.0, 0.5]]), torch.tensor([[1.5, -0.5]])
    action, logp = tanh_gaussian_sample(mean, log_std, noise)
    pre = mean + log_std.exp() * noise
    torch.testing.assert_close(action, torch.tanh(pre))
    torch.testing.assert_close(logp, tanh_gaussian_log_prob(pre, mean, log_std))


def test_log_std_squash_range():
    out = squash_log_std(torch.tensor([-100.0, 0.0, 100.0]), -5.0, 0.0)
    torch.testing.assert_close(out, torch.tensor([-5.0, -2.5, 0.0]))


def test_unified_target_entropy_is_entropy_of_sigma_gaussian():
    # 1/2 |A| log(2 pi e sigma^2) with |A| = 6, sigma = 0.15:
    # 2 pi e = 17.079468, x 0.0225 = 0.3842880, log = -0.9563629, x 3 = -2.869089
    assert math.isclose(unified_target_entropy(6, 0.15), -2.869089, abs_tol=1e-5)
    gaussian = torch.distributions.Normal(torch.zeros(6), torch.full((6,), 0.15)).entropy().sum()
    assert math.isclose(unified_target_entropy(6, 0.15), float(gaussian), rel_tol=1e-6)


def test_algorithms_use_their_entropy_targets(small, spec):
    assert small("fastsac").target_entropy == 0.0  # -0 * |A| in the reference
    assert small("fastsac", target_entropy_ratio=0.5).target_entropy == -1.5  # -0.5 * 3
    assert math.isclose(small("flashsac").target_entropy, 1.5 * math.log(2 * math.pi * math.e * 0.0225))


def test_soft_update_moves_by_exactly_tau():
    target, online = [torch.tensor([0.0, 10.0])], [torch.tensor([1.0, 20.0])]
    soft_update_(target, online, 0.125)
    torch.testing.assert_close(target[0], torch.tensor([0.125, 11.25]))


def test_loss_scaler_skips_non_finite_steps_and_backs_off():
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = make_adam([p], torch.tensor(0.1), (0.9, 0.999), 0.0, decoupled=False)
    scaler = LossScaler(torch.device("cpu"), enabled=True, init_scale=8.0, growth_interval=2)
    # a finite loss (3e38) whose gradients overflow once scaled by 8: the scaler's own business
    valid = scaler.step((p * 1e38).sum(), opt, [p])
    torch.testing.assert_close(p.detach(), torch.tensor([1.0, 2.0]))  # step skipped
    assert float(scaler.scale) == 4.0 and float(opt.state[p]["step"]) == 0.0
    assert float(valid) == 1.0  # not a non-finite update
    opt.zero_grad(set_to_none=True)
    # a non-finite loss: skipped and reported, and the scale stays (lowering it cannot help)
    valid = scaler.step((p * torch.tensor([float("nan"), 1.0])).sum(), opt, [p])
    torch.testing.assert_close(p.detach(), torch.tensor([1.0, 2.0]))
    assert float(valid) == 0.0 and float(scaler.scale) == 4.0 and float(opt.state[p]["step"]) == 0.0
    opt.zero_grad(set_to_none=True)
    scaler.step((3.0 * p).sum(), opt, [p])
    torch.testing.assert_close(p.grad, torch.tensor([3.0, 3.0]))  # unscaled in place
    # first Adam step moves each weight by lr against the gradient sign
    torch.testing.assert_close(p.detach(), torch.tensor([0.9, 1.9]))
    opt.zero_grad(set_to_none=True)
    scaler.step((3.0 * p).sum(), opt, [p])
    assert float(scaler.scale) == 8.0  # grew after growth_interval finite steps
