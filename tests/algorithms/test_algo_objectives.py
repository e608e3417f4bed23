"""Which way each objective pushes: actor, entropy, temperature, critic combination and the soft TD target.

The critics here are stubs with a value known by hand, so a flipped sign, a wrong
reduction over the ensemble or a bonus added instead of subtracted changes a number
these tests compare exactly (or a direction they check after one real optimizer step).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from algo_stubs import PointMassCritic
from torch import nn

from offpolicy.algorithms.sac import tanh_gaussian_log_prob

NAMES = ["fastsac", "flashsac"]


class ActionCritic(nn.Module):
    """Stub critic ensemble whose value depends on the action only.

    Member e puts probability sigmoid(w_e . a + b_e) on the top atom and the rest on the
    bottom one, so Q_e(a) = v_min + (v_max - v_min) sigmoid(w_e . a + b_e). `anchor` only
    gives the critic loss something to differentiate (the stub itself never changes).
    """

    def __init__(self, weights: torch.Tensor, biases: torch.Tensor, num_atoms: int) -> None:
        super().__init__()
        self.register_buffer("w", weights.float())
        self.register_buffer("b", biases.float())
        self.num_atoms = num_atoms
        self.anchor = nn.Parameter(torch.zeros(()))

    def forward(self, obs: torch.Tensor, action: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        top = (action.float() @ self.w.T + self.b).T  # (E, B)
        logits = torch.full((*top.shape, self.num_atoms), -30.0)
        logits[..., 0] = 0.0
        logits[..., -1] = top
        return logits + 0.0 * self.anchor

    def q(self, action: torch.Tensor, v_min: float, v_max: float) -> torch.Tensor:
        """Q_e(a) by hand, (E, B)."""
        return v_min + (v_max - v_min) * torch.sigmoid((action @ self.w.T + self.b).T)


def _build(small, name: str, **overrides):
    """A small algorithm with a 3-atom support on [-1, 1] (unless overridden)."""
    if name == "fastsac":
        base = dict(num_atoms=3, v_min=-1.0, v_max=1.0, obs_normalization=False)
    else:
        base = dict(num_bins=3, normalized_g_max=1.0)
    return small(name, **{**base, **overrides})


def _dist(algo, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and log-std the actor loss sees (FlashSAC: batch statistics, on a copy so no statistic moves)."""
    if algo.cfg.name == "fastsac":
        return algo.actor.dist(obs)
    return copy.deepcopy(algo.actor).dist(obs, training=True)


# --------------------------------------------------------------------------- the actor loss, by hand

# three critics valued 1, 1 and -1 whatever the action: mean 1/3, min -1, max 1
CONSTANT_Q = torch.tensor([1.0, 1.0, -1.0])
COMBINED = {"fastsac": 1.0 / 3.0, "flashsac": -1.0}  # mean for FastSAC, min for FlashSAC


@pytest.mark.parametrize("name", NAMES)
def test_actor_loss_is_alpha_log_prob_minus_the_combined_critic(small, name):
    torch.manual_seed(0)
    alpha = 0.5
    temperature = {"alpha_init": alpha} if name == "fastsac" else {"temp_init": alpha}
    algo = _build(small, name, num_critics=3, **temperature)
    algo.critic = ActionCritic(torch.zeros(3, 3), 30.0 * CONSTANT_Q, num_atoms=3)
    obs = torch.randn(16, 7)
    if name == "fastsac":
        loss, info = algo._actor_loss(obs, obs)
        entropy = info["entropy"]
    else:
        loss, entropy = algo._actor_loss(obs, torch.randn(16, 7), obs)
    # loss = mean(alpha log pi - Q) = -alpha H - Q; H is the entropy estimate of the same samples
    expected = -alpha * entropy - COMBINED[name]
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=0)
    assert abs(float(entropy)) > 0.1  # the entropy term is really in play


# --------------------------------------------------------------------------- one actor step, directions


def _one_actor_step(algo, replay) -> None:
    # FastSAC updates the actor on update index 1 of a phase, FlashSAC on index 0
    algo.update_phase(replay, 2 if algo.cfg.name == "fastsac" else 1)


def _fast_actor(name: str) -> dict:
    if name == "fastsac":
        return dict(actor_lr=1e-2, autotune_alpha=False)
    return dict(lr_init=1e-2, lr_peak=1e-2, lr_end=1e-2)


@pytest.mark.parametrize("name", NAMES)
def test_one_actor_step_raises_the_critic_value_of_the_actor_action(small, spec, fixed_replay, name):
    torch.manual_seed(0)
    if name == "fastsac":  # 101 atoms on [-10, 10], alpha 1e-3: the Q term dominates the loss
        support = dict(num_atoms=101, v_min=-10.0, v_max=10.0, alpha_init=1e-3)
    else:
        support = dict(num_bins=101, normalized_g_max=10.0, temp_init=1e-3)
    algo = _build(small, name, **support, **_fast_actor(name))
    w = torch.tensor([[1.0, -1.0, 0.5]] * 2)  # both critics agree: Q grows along (1, -1, 0.5)
    stub = ActionCritic(w, torch.zeros(2), num_atoms=101)
    algo.critic = stub
    obs = torch.randn(64, 7)

    def value() -> float:
        with torch.no_grad():
            mean, _ = _dist(algo, obs)
            return float(stub.q(torch.tanh(mean), -10.0, 10.0).mean())

    before = value()
    _one_actor_step(algo, fixed_replay(spec, 64))
    after = value()
    # Adam's first step moves every weight by ~lr = 1e-2 against its gradient, which here moves
    # the mean action along w: Q rises by 0.2-0.45 over seeds; a reversed objective lowers it
    assert after > before + 0.05, (before, after)


@pytest.mark.parametrize("name", NAMES)
def test_one_actor_step_on_a_flat_critic_raises_the_entropy(small, spec, fixed_replay, name):
    torch.manual_seed(0)
    temperature = {"alpha_init": 0.5} if name == "fastsac" else {"temp_init": 0.5}
    algo = _build(small, name, **_fast_actor(name), **temperature)
    algo.critic = ActionCritic(torch.zeros(2, 3), torch.zeros(2), num_atoms=3)  # Q = 0 for every action
    obs, noise = torch.randn(64, 7), torch.randn(64, 3)

    def entropy() -> float:
        with torch.no_grad():
            mean, log_std = _dist(algo, obs)
            pre_tanh = mean + log_std.exp() * noise
            return float(-tanh_gaussian_log_prob(pre_tanh, mean, log_std).mean())

    before = entropy()
    _one_actor_step(algo, fixed_replay(spec, 64))
    # the loss is alpha E[log pi]: one step lowers log pi, i.e. raises the entropy (by 0.14-0.72 over seeds)
    assert entropy() > before + 0.05


# --------------------------------------------------------------------------- one temperature step, by hand


@pytest.mark.parametrize("below_target", [True, False])
def test_fastsac_alpha_step_follows_the_entropy_gap(small, replay, below_target):
    # target entropy -ratio |A| = +300 (far above any policy's) or -300 (far below)
    algo = small(
        "fastsac", target_entropy_ratio=-100.0 if below_target else 100.0, alpha_lr=0.1, alpha_weight_decay=0.0
    )
    alpha0 = float(algo.log_alpha.detach().exp())
    metrics = algo.update_phase(replay, 1)  # update index 0: critic and alpha, no actor
    entropy, target = float(metrics["train/next_entropy"]), algo.target_entropy
    assert (entropy < target) == below_target
    # alpha loss -alpha (log pi + target) = alpha (H - target); its gradient in log alpha has that sign,
    # and Adam's first step moves log alpha by lr = 0.1 against it
    torch.testing.assert_close(float(metrics["loss/alpha"]), alpha0 * (entropy - target), rtol=1e-5, atol=0)
    expected = alpha0 * math.exp(0.1 if below_target else -0.1)
    assert math.isclose(float(metrics["train/alpha"]), expected, rel_tol=1e-5)


@pytest.mark.parametrize("below_target", [True, False])
def test_flashsac_temperature_step_follows_the_entropy_gap(small, replay, below_target):
    # target 1/2 |A| log(2 pi e sigma^2): +18.1 for sigma 100, -23.4 for sigma 1e-4
    lr = dict(lr_init=0.1, lr_peak=0.1, lr_end=0.1)
    algo = small("flashsac", target_sigma=100.0 if below_target else 1e-4, **lr)
    temp0 = float(algo.log_temp.detach().exp())
    metrics = algo.update_phase(replay, 1)  # update index 0: actor, temperature, critic
    entropy, target = float(metrics["train/entropy"]), algo.target_entropy
    assert (entropy < target) == below_target
    torch.testing.assert_close(float(metrics["loss/alpha"]), temp0 * (entropy - target), rtol=1e-5, atol=0)
    expected = temp0 * math.exp(0.1 if below_target else -0.1)
    assert math.isclose(float(metrics["train/alpha"]), expected, rel_tol=1e-5)


# --------------------------------------------------------------------------- the soft TD target, by hand


def _point_mass(x: float) -> list[float]:
    """A point mass at x in [-1, 1] projected on atoms (-1, 0, 1): split linearly between neighbours."""
    assert -1.0 <= x <= 1.0
    return [0.0, 1.0 - x, x] if x >= 0 else [-x, 1.0 + x, 0.0]


# ongoing, terminated and truncated rows (a truncated row keeps its bootstrap)
REWARD = torch.tensor([0.0, 0.3, 0.2])
TERMINATED = torch.tensor([0.0, 1.0, 0.0])
GAMMA, ALPHA = 0.5, 0.05


def _soft_target_rows(log_prob: torch.Tensor, bootstrap_atom: float) -> torch.Tensor:
    """r + d (z - alpha log pi(a'|s')) with d = gamma (1 - terminated), projected; by hand, row by row."""
    rows = []
    for r, term, lp in zip(REWARD.tolist(), TERMINATED.tolist(), log_prob.tolist()):
        d = GAMMA * (1.0 - term)
        rows.append(_point_mass(r + d * (bootstrap_atom - ALPHA * lp)))
    return torch.tensor(rows)


def _next_policy_pinned(name: str) -> dict:
    # log-std pinned at -5: log pi of a 3-dim action is ~12 - chi2/2, far from 0, so the bonus
    # alpha gamma log pi ~ 0.3 moves every target by a visible amount
    return dict(log_std_min=-5.0, log_std_max=-5.0, gamma=GAMMA)


def test_fastsac_soft_td_target_by_hand(small):
    torch.manual_seed(0)
    algo = small("fastsac", num_atoms=3, v_min=-1.0, v_max=1.0, alpha_init=ALPHA, **_next_policy_pinned("fastsac"))
    algo.target_critic = PointMassCritic([2, 0], num_atoms=3)  # member 0 on +1, member 1 on -1
    next_obs = torch.randn(3, 7)
    target, log_prob = algo._td_target(REWARD, next_obs, next_obs, TERMINATED)
    assert bool((log_prob > 5.0).all())
    # each critic bootstraps from its own target member: +1 for member 0, -1 for member 1
    expected = torch.stack([_soft_target_rows(log_prob, +1.0), _soft_target_rows(log_prob, -1.0)])
    torch.testing.assert_close(target, expected, atol=1e-5, rtol=0)


def test_flashsac_soft_td_target_by_hand(small):
    torch.manual_seed(0)
    algo = small("flashsac", num_bins=3, normalized_g_max=1.0, temp_init=ALPHA, **_next_policy_pinned("flashsac"))
    algo.target_critic = PointMassCritic([2, 0], num_atoms=3)  # member 0 on +1, member 1 on -1
    obs, next_obs = torch.randn(3, 7), torch.randn(3, 7)
    target, _, _, log_prob = algo._td_target(obs, torch.zeros(3, 3), REWARD, next_obs, next_obs, TERMINATED)
    assert bool((log_prob > 5.0).all())
    # min-Q: member 1 (all mass on -1) has the lower mean on every row
    torch.testing.assert_close(target, _soft_target_rows(log_prob, -1.0), atol=1e-5, rtol=0)


def test_flashsac_temperature_bound_holds_when_the_entropy_stays_below_target(small, filled, spec):
    """`temp_max` caps the temperature the entropy gap keeps raising (a step of Adam moves log-temp by ~lr)."""
    capped = small("flashsac", temp_init=0.01, temp_max=0.0105, lr_init=0.05, lr_peak=0.05, lr_end=0.05,
                   target_sigma=5.0)  # fmt: skip
    free = small("flashsac", temp_init=0.01, lr_init=0.05, lr_peak=0.05, lr_end=0.05, target_sigma=5.0)
    replay = filled(spec)
    for algo in (capped, free):
        for _ in range(3):
            algo.update_phase(replay, 4)
    assert float(free.log_temp.detach().exp()) > 0.0105 * 1.05  # the target entropy is far above: alpha keeps growing
    assert float(capped.log_temp.detach().exp()) == pytest.approx(0.0105, rel=1e-6)
