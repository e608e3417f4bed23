"""The averaged policy (`algo.policy_ema`): its value after a few update phases, computed by hand; evaluation,
snapshots, checkpoints and policy files act with it; exploration and training keep the raw actor."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from offpolicy.algorithms.networks import UnitLinear
from offpolicy.checkpoint import CheckpointError, policy_checkpoint
from offpolicy.eval import eval_actor_config

TAU = 0.1


def float_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached copies of a module's floating-point parameters and buffers."""
    return {k: v.detach().clone() for k, v in module.state_dict().items() if v.is_floating_point()}


@pytest.mark.parametrize("name", ["fastsac"])
def test_the_average_equals_its_hand_computed_value_after_each_phase(name, small, spec, replay):
    algo = small(name, spec, policy_ema=True, policy_ema_tau=TAU)
    expected = float_state(algo.actor)  # the average starts at the actor as it is before the first update
    for updates in (1, 3, 4):
        algo.update_phase(replay, updates)
        weight = 1.0 - (1.0 - TAU) ** updates  # `updates` EMA steps toward an actor that moved once
        live = float_state(algo.actor)
        expected = {k: expected[k] + weight * (live[k] - expected[k]) for k in expected}
    got = float_state(algo.averaged_actor())
    assert set(got) == set(expected)
    moved = 0
    for k in expected:
        torch.testing.assert_close(got[k], expected[k], rtol=1e-5, atol=1e-6, msg=k)
        moved += int(not torch.allclose(got[k], float_state(algo.actor)[k]))
    assert moved > 0, "the average must lag the actor, or the test shows nothing"


def test_flashsac_projects_the_average_back_onto_the_unit_sphere(small, spec, replay):
    algo = small("flashsac", spec, policy_ema=True, policy_ema_tau=TAU)
    before = {id(m): m.weight.detach().clone() for m in algo.actor.modules() if isinstance(m, UnitLinear)}
    averaged = algo.averaged_actor()
    with torch.no_grad():  # start the average far from the actor, so the average of the two is well inside the sphere
        for m in averaged.modules():
            if isinstance(m, UnitLinear):
                m.weight.copy_(F.normalize(torch.randn_like(m.weight), dim=-1))
    start = [m.weight.detach().clone() for m in averaged.modules() if isinstance(m, UnitLinear)]
    assert len(before) == len(start) > 0
    algo.update_phase(replay, 2)
    live = [m.weight.detach() for m in algo.actor.modules() if isinstance(m, UnitLinear)]
    weight = 1.0 - (1.0 - TAU) ** 2
    for w0, w1, got in zip(start, live, (m.weight for m in averaged.modules() if isinstance(m, UnitLinear))):
        want = F.normalize(w0 + weight * (w1 - w0), dim=-1, eps=1e-8)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got.norm(dim=-1), torch.ones(got.shape[:-1]), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_evaluation_acts_with_the_averaged_actor_and_exploration_with_the_raw_one(name, small, spec, replay):
    algo = small(name, spec, policy_ema=True, policy_ema_tau=TAU)
    for _ in range(3):
        algo.update_phase(replay, 4)
    obs = {"actor": torch.randn(spec.num_envs, spec.obs_dims["actor"])}
    by_hand = copy.deepcopy(algo)  # the same algorithm, acting with the averaged weights loaded into its actor
    by_hand.policy_ema = False
    by_hand.actor.load_state_dict(algo.averaged_actor().state_dict())
    raw = copy.deepcopy(algo)
    raw.policy_ema = False

    averaged_action = by_hand.act(obs)
    assert not torch.allclose(averaged_action, raw.act(obs), atol=1e-4), "average and actor must differ here"
    torch.testing.assert_close(algo.act(obs), averaged_action)
    algo.snapshot_actor()
    torch.testing.assert_close(algo.act_snapshot(obs), averaged_action)
    assert algo.eval_actor is algo.averaged_actor()
    # the update phase trains the raw actor: its parameters are the optimizer's, the average has none
    assert {id(p) for p in algo.actor_params} == {id(p) for p in algo.actor.parameters()}
    assert not any(p.requires_grad for p in algo.averaged_actor().parameters())


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_policy_ema_off_evaluates_the_raw_actor_and_keeps_no_average(name, small, spec, replay):
    algo = small(name, spec)
    algo.update_phase(replay, 4)
    assert algo.eval_actor is algo.actor
    assert "actor_ema" not in algo.state_dict()
    assert algo._averaged is None


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_checkpoints_and_policy_files_keep_the_average(name, small, spec, replay):
    algo = small(name, spec, policy_ema=True, policy_ema_tau=TAU)
    for _ in range(2):
        algo.update_phase(replay, 4)
    state = algo.state_dict()
    assert "actor_ema" in state
    obs = {"actor": torch.randn(spec.num_envs, spec.obs_dims["actor"])}

    resumed = small(name, spec, policy_ema=True, policy_ema_tau=TAU)
    resumed.load_state_dict(copy.deepcopy(state))
    torch.testing.assert_close(resumed.act(obs), algo.act(obs))

    ckpt = {"algorithm": state, "rng": {}, "env": "synthetic"}
    policy = policy_checkpoint(ckpt)["algorithm"]
    assert set(policy) == {"actor", "actor_ema", "counters"}
    evaluator = small(name, spec, policy_ema=True, policy_ema_tau=TAU)
    evaluator.load_policy_state_dict(copy.deepcopy(policy))
    torch.testing.assert_close(evaluator.act(obs), algo.act(obs))


def test_the_eval_cli_chooses_the_weights_and_refuses_an_average_the_run_did_not_keep(tmp_path):
    cfg = {"name": "fastsac", "policy_ema": True}
    with_average = {"algorithm": {"actor": {}, "actor_ema": {}, "counters": {}}}
    without = {"algorithm": {"actor": {}, "counters": {}}}
    assert eval_actor_config(cfg, "raw", with_average, tmp_path)["policy_ema"] is False
    assert eval_actor_config(cfg, "auto", with_average, tmp_path)["policy_ema"] is True
    assert eval_actor_config({**cfg, "policy_ema": False}, "averaged", with_average, tmp_path)["policy_ema"] is True
    with pytest.raises(CheckpointError, match="holds no averaged actor.*valid: actor=auto, actor=raw"):
        eval_actor_config({**cfg, "policy_ema": False}, "averaged", without, tmp_path)
