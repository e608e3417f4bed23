"""FastSAC's C51 support from the task's reward range and gamma; the target mass clipped onto its ends."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from algo_stubs import FixedReplay, PointMassCritic
from omegaconf import OmegaConf

from envs.gymnasium import TASKS
from envs.gymnasium.reward_bounds import MAX_BACKWARD_SPEED
from offpolicy.algorithms import make_algorithm
from offpolicy.algorithms.fastsac import value_support
from offpolicy.replay_buffer import TransitionBatch


@pytest.mark.parametrize(
    "reward_range,gamma,expected",
    [
        ((0.0, 1.0), 0.97, (0.0, 1 / 0.03)),  # DMC: [0, 33.3]
        ((-7.0, 16.0), 0.97, (-7 / 0.03, 16 / 0.03)),  # Ant: [-233.3, 533.3]
        ((2.0, 5.0), 0.9, (0.0, 50.0)),  # all rewards positive: termination can still cut a return to 0
        ((-4.0, -1.0), 0.5, (-8.0, 0.0)),  # all negative: likewise the top is 0
    ],
)
def test_value_support_by_hand(reward_range, gamma, expected):
    low, high = value_support(reward_range, gamma)
    assert math.isclose(low, expected[0], abs_tol=1e-9) and math.isclose(high, expected[1], rel_tol=1e-12)


def test_value_support_rejects_an_inverted_range():
    with pytest.raises(ValueError, match="reward_range"):
        value_support((1.0, -1.0), 0.9)


def _fastsac(spec_factory, reward_range, **overrides):
    cfg = OmegaConf.create({"name": "fastsac", "batch_size": 32, "critic_hidden_dim": 32, "actor_hidden_dim": 16})
    return make_algorithm(OmegaConf.merge(cfg, overrides), spec_factory(reward_range=reward_range), "cpu")


def test_fastsac_derives_its_atoms_from_the_spec_unless_set(spec_factory):
    algo = _fastsac(spec_factory, (-1.0, 2.0), gamma=0.9, num_atoms=4)
    torch.testing.assert_close(algo.atoms, torch.tensor([-10.0, 0.0, 10.0, 20.0]))  # [-1, 2] / 0.1
    algo = _fastsac(spec_factory, (-1.0, 2.0), gamma=0.9, num_atoms=3, v_max=5.0)  # one side overridden
    torch.testing.assert_close(algo.atoms, torch.tensor([-10.0, -2.5, 5.0]))
    algo = _fastsac(spec_factory, None, num_atoms=3, v_min=-1.0, v_max=1.0)  # both set: no range needed
    torch.testing.assert_close(algo.atoms, torch.tensor([-1.0, 0.0, 1.0]))


def test_fastsac_without_a_range_or_a_support_is_a_one_line_error(spec_factory):
    with pytest.raises(ValueError) as err:
        _fastsac(spec_factory, None)
    assert "declares no reward_range" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="v_min < v_max"):
        _fastsac(spec_factory, (-1.0, 1.0), v_min=50.0)  # above the derived v_max, 33.3


# --------------------------------------------------------------------------- the tasks' reward ranges

# (forward weight, speed bound, ctrl weight, healthy bonus): each range is
# [-w * 3 - ctrl * max|a|^2, w * speed + healthy], max|a|^2 read from the model's actuator ranges
TERMS = {
    "ant": (1.0, 15.0, 0.5, 1.0),
    "halfcheetah": (1.0, 25.0, 0.1, 0.0),
    "hopper": (1.0, 6.0, 1e-3, 1.0),
    "humanoid": (1.25, 12.0, 0.1, 5.0),
    "walker2d": (1.0, 10.0, 1e-3, 1.0),
}
BY_HAND = {
    "ant": (-3 - 0.5 * 8, 15 + 1),
    "halfcheetah": (-3 - 0.1 * 6, 25),
    "hopper": (-3 - 1e-3 * 3, 6 + 1),
    "humanoid": (-1.25 * 3 - 0.1 * 17 * 0.16, 1.25 * 12 + 5),
    "walker2d": (-3 - 1e-3 * 6, 10 + 1),
}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_reward_range_from_its_terms_and_actuator_ranges(name):
    task = TASKS[name]()
    lo, hi = task.build_model().actuator_ctrlrange.T
    max_action_sq = float(np.maximum(lo**2, hi**2).sum())
    weight, speed, ctrl, healthy = TERMS[name]
    low, high = task.reward_range
    assert math.isclose(low, -weight * MAX_BACKWARD_SPEED - ctrl * max_action_sq, rel_tol=1e-6)
    assert math.isclose(high, weight * speed + healthy, rel_tol=1e-9)
    assert low == pytest.approx(BY_HAND[name][0]) and high == pytest.approx(BY_HAND[name][1])


def test_task_options_move_the_range():
    assert TASKS["ant"](healthy_reward=0.5, ctrl_cost_weight=0.25).reward_range == pytest.approx((-5.0, 15.5))


# The 8-minute runs of the previous protocol (benchmark/outputs/learning_previous_protocol/) averaged these rewards per step at
# their best; their values ~r/(1 - gamma) saturated the hand-set supports (HalfCheetah 499.9 of
# 500, Humanoid 1,290 of 1,300). The derived supports leave at least a quarter of headroom.
PUBLISHED = {"ant": (9.0, 0.97), "halfcheetah": (15.3, 0.97), "humanoid": (13.4, 0.99)}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_derived_support_holds_the_published_runs_values(name):
    mean_reward, gamma = PUBLISHED[name]
    _, v_max = value_support(TASKS[name]().reward_range, gamma)
    assert mean_reward / (1 - gamma) < 0.75 * v_max


# --------------------------------------------------------------------------- saturation metrics, by hand


def _saturation_batch() -> TransitionBatch:
    # 8 rows (r = 0.8, ongoing) and 8 rows (r = -0.6, terminated)
    rows = 16
    return TransitionBatch(
        obs={"actor": torch.randn(rows, 7)},
        action=torch.zeros(rows, 3),
        reward=torch.tensor([0.8] * 8 + [-0.6] * 8),
        next_obs={"actor": torch.randn(rows, 7)},
        terminated=torch.tensor([0.0] * 8 + [1.0] * 8),
        truncated=torch.zeros(rows),
    )


@pytest.mark.parametrize(
    "name,top,bottom",
    [
        # FastSAC, each critic its own target on atoms (-1, 0, 1), gamma 0.5:
        #   ongoing rows: member 0 (mass on +1) 0.8 + 0.5 = 1.3, clipped to the top atom: 1 there;
        #                 member 1 (mass on -1) 0.8 - 0.5 = 0.3: 0.3 on the top atom, 0.7 in the middle
        #   terminated rows: -0.6 for both: 0.6 on the bottom atom, 0.4 in the middle
        #   top = (1 + 0.3) / 2 / 2 = 0.325, bottom = 0.6 / 2 = 0.3 (the middle atom holds 0.375)
        ("fastsac", 0.325, 0.3),
        # FlashSAC bootstraps from the lower critic only (member 1): top = 0.3 / 2, bottom = 0.6 / 2
        # (the middle atom holds 0.55)
        ("flashsac", 0.15, 0.3),
    ],
)
def test_support_saturation_metrics(small, name, top, bottom):
    torch.manual_seed(0)
    if name == "fastsac":
        algo = small(name, batch_size=16, num_atoms=3, v_min=-1.0, v_max=1.0, gamma=0.5, alpha_init=1e-9)
    else:
        algo = small(name, batch_size=16, num_bins=3, normalized_g_max=1.0, gamma=0.5, temp_init=1e-9)
    algo.target_critic = PointMassCritic([2, 0], num_atoms=3)
    metrics = algo.update_phase(FixedReplay(_saturation_batch()), 1)
    assert float(metrics["train/q_support_saturation"]) == pytest.approx(top, abs=1e-5)
    assert float(metrics["train/q_support_saturation_low"]) == pytest.approx(bottom, abs=1e-5)
