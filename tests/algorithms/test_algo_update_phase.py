"""A few real update phases of each algorithm on CPU with a real replay of random data."""

import copy
import math

import pytest
import torch

from offpolicy.algorithms.contract import OffPolicyAlgorithm

NAMES = ["fastsac", "flashsac"]


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _changed(before: dict, module: torch.nn.Module) -> bool:
    return any(not torch.equal(before[k], v) for k, v in module.state_dict().items())


@pytest.mark.parametrize("name", NAMES)
def test_update_phases_train_and_advance_policy_version(name, small, spec, replay):
    torch.manual_seed(0)
    algo = small(name)
    assert isinstance(algo, OffPolicyAlgorithm)
    actor, critic, target = _snapshot(algo.actor), _snapshot(algo.critic), _snapshot(algo.target_critic)
    obs = {"actor": torch.randn(spec.num_envs, 7)}

    action = algo.explore(obs, torch.ones(spec.num_envs, dtype=torch.bool))
    assert action.shape == (spec.num_envs, spec.action_dim) and action.abs().max() <= 1.0
    torch.testing.assert_close(algo.act(obs), algo.act(obs))
    assert algo.update_phase(replay, 0) == {}
    assert algo.policy_version == 0  # inference and empty phases never advance it

    for phase in range(3):
        metrics = algo.update_phase(replay, algo.updates_per_step)
        assert algo.policy_version == phase + 1
    for key in ("loss/critic", "loss/actor", "loss/alpha", "train/alpha", "train/entropy"):
        assert key in metrics
    for key, value in metrics.items():
        assert isinstance(value, torch.Tensor) and value.dim() == 0, key
        assert torch.isfinite(value), key
    assert algo.total_updates == 3 * algo.updates_per_step
    assert _changed(actor, algo.actor) and _changed(critic, algo.critic) and _changed(target, algo.target_critic)


@pytest.mark.parametrize(
    "name,overrides,first,second",
    [
        # FastSAC updates the actor on update index 1 mod 4 (updates 1 and 5 of 8, as the reference)
        ("fastsac", {"obs_normalization": False}, False, True),
        # FlashSAC updates the actor (and its BatchNorm statistics) on every 2nd update, from update 0
        ("flashsac", {}, True, False),
    ],
)
def test_policy_version_advances_only_with_actor_updates(name, overrides, first, second, small, replay):
    algo = small(name, **overrides)
    for expect_actor_update in (first, second):
        before, version = _snapshot(algo.actor), algo.policy_version
        algo.update_phase(replay, 1)
        assert _changed(before, algo.actor) == expect_actor_update
        assert algo.policy_version == version + int(expect_actor_update)


def test_fastsac_observation_normaliser_changes_the_policy_every_phase(small, replay):
    algo = small("fastsac")
    before = algo.actor.normalizer.mean.clone()
    algo.update_phase(replay, 1)  # no actor update at index 0, but new statistics
    assert not torch.equal(before, algo.actor.normalizer.mean)
    assert algo.policy_version == 1


def test_fastsac_target_moves_by_tau_after_one_update(small, replay):
    algo = small("fastsac", obs_normalization=False)
    old_target = [p.detach().clone() for p in algo.target_critic.parameters()]
    algo.update_phase(replay, 1)
    for old, new, online in zip(old_target, algo.target_critic.parameters(), algo.critic.parameters()):
        torch.testing.assert_close(new, old + algo.tau * (online - old))


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip_continues_identically(name, small, replay):
    torch.manual_seed(1)
    a = small(name)
    a.update_phase(replay, 3)
    a.observe(torch.ones(6), torch.zeros(6), torch.zeros(6))
    torch.manual_seed(2)
    b = small(name)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert (b.policy_version, b.total_updates) == (a.policy_version, a.total_updates)
    torch.manual_seed(3)
    metrics_a = a.update_phase(replay, 3)
    torch.manual_seed(3)
    metrics_b = b.update_phase(replay, 3)
    for key in metrics_a:
        torch.testing.assert_close(metrics_a[key], metrics_b[key])
    for module in ("actor", "critic", "target_critic"):
        torch.testing.assert_close(getattr(a, module).state_dict(), getattr(b, module).state_dict())


def test_flashsac_observe_feeds_the_reward_scale(small, replay):
    algo = small("flashsac")
    for _ in range(4):
        algo.observe(10.0 * torch.ones(6), torch.zeros(6), torch.zeros(6))
    metrics = algo.update_phase(replay, 1)
    torch.testing.assert_close(metrics["train/reward_scale"], algo.reward_scaler.denominator())
    assert float(metrics["train/reward_scale"]) > 1.0


def test_flashsac_horizon_bound_option_reaches_the_scale(small, replay):
    """`reward_scale_horizon_bound=true`: a constant reward of 10 at gamma 0.99, G_max 5 gives a scale of at least
    10 / (0.01 * 5) = 200; the reference rule gives the std of the returns seen, G = 10, 19.9, 29.7, 39.4."""
    scales = {}
    for bound in (False, True):
        algo = small("flashsac", gamma=0.99, normalized_g_max=5.0, reward_scale_horizon_bound=bound)
        for _ in range(4):
            algo.observe(10.0 * torch.ones(6), torch.zeros(6), torch.zeros(6))
        scales[bound] = float(algo.update_phase(replay, 1)["train/reward_scale"])
    returns = torch.tensor([10.0, 19.9, 29.701, 39.40399])
    assert math.isclose(scales[False], float(returns.std(correction=0)), rel_tol=1e-4)
    assert math.isclose(scales[True], 200.0, rel_tol=1e-5)


def test_separate_critic_observations(small, filled, spec_factory):
    spec = spec_factory(obs_dims={"actor": 7, "critic": 9})
    replay = filled(spec, steps=10)
    for name in NAMES:
        algo = small(name, spec=spec)
        metrics = algo.update_phase(replay, 2)
        assert torch.isfinite(metrics["loss/critic"])
        assert algo.explore({"actor": torch.randn(6, 7)}, torch.zeros(6, dtype=torch.bool)).shape == (6, 3)


def test_fastsac_snapshot_keeps_its_own_observation_normaliser(small, replay, spec):
    """The frozen snapshot acts with the statistics it was frozen with while the live normaliser moves on."""
    algo = small("fastsac")
    algo.update_phase(replay, 1)  # statistics away from their initial (0, 1)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in algo.actor.parameters():  # the heads start at zero: give every action a dependence on obs
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    obs = {"actor": 3.0 * torch.randn(5, spec.obs_dims["actor"], generator=gen)}
    algo.snapshot_actor()
    frozen = algo.act_snapshot(obs)
    torch.testing.assert_close(algo.act(obs), frozen)
    algo.update_phase(replay, 1)  # update index 1: the actor and the normaliser both move
    torch.testing.assert_close(algo.act_snapshot(obs), frozen, rtol=0, atol=0)
    assert not torch.allclose(algo.act(obs), frozen)
    live = algo.act(obs)
    with torch.no_grad():  # the normaliser alone changes the live policy; the snapshot still does not move
        algo.actor.normalizer.mean.add_(1.0)
    assert not torch.allclose(algo.act(obs), live)
    torch.testing.assert_close(algo.act_snapshot(obs), frozen, rtol=0, atol=0)
