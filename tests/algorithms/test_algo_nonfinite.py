"""Non-finite updates are skipped on the device: nothing moves, and they are counted (per phase and in a streak)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from offpolicy.algorithms.normalizers import EmpiricalNormalizer, RewardScaler
from offpolicy.algorithms.optim import finite_step, make_adam
from offpolicy.algorithms.sac import soft_update_

NAMES = ["fastsac", "flashsac"]
NAN = float("nan")


def _flat(state, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a nested state dict (networks, optimizers, scalers, normalisers), by path."""
    out: dict[str, torch.Tensor] = {}
    if isinstance(state, torch.Tensor):
        out[prefix] = state.detach().clone()
    elif isinstance(state, dict):
        for k, v in state.items():
            out.update(_flat(v, f"{prefix}/{k}"))
    elif isinstance(state, list | tuple):
        for i, v in enumerate(state):
            out.update(_flat(v, f"{prefix}/{i}"))
    elif isinstance(state, float | int):
        out[prefix] = torch.tensor(state)
    return out


def _state(algo) -> dict[str, torch.Tensor]:
    state = algo.state_dict()
    state.pop("counters")  # host counters of phases run (policy_version, total_updates), not learnt state
    return _flat(state)


def _assert_unchanged(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> None:
    assert before.keys() == after.keys()
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert not moved, f"moved: {moved}"


# --------------------------------------------------------------------------- the building blocks


def test_finite_step_skips_a_non_finite_gradient_of_a_finite_loss():
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    opt = make_adam([p], torch.tensor(0.1), (0.9, 0.999), 0.0, decoupled=False)
    assert float(finite_step((3.0 * p).sum(), opt, [p])) == 1.0
    torch.testing.assert_close(p.detach(), torch.tensor([0.9, 1.9]))  # Adam's first step: lr against the sign
    state = copy.deepcopy(opt.state[p])
    opt.zero_grad(set_to_none=True)
    # sqrt at 0: the loss is 0 but its gradient is infinite
    ok = finite_step(torch.sqrt(p - torch.tensor([0.9, 0.0])).sum(), opt, [p])
    assert float(ok) == 0.0
    torch.testing.assert_close(p.detach(), torch.tensor([0.9, 1.9]))
    for key in ("step", "exp_avg", "exp_avg_sq"):
        assert torch.equal(opt.state[p][key], state[key]), key
    opt.zero_grad(set_to_none=True)
    assert float(finite_step((3.0 * p).sum(), opt, [p], allowed=torch.tensor(0.0))) == 0.0  # vetoed by the caller
    torch.testing.assert_close(p.detach(), torch.tensor([0.9, 1.9]))


def test_gated_soft_update_moves_by_tau_or_not_at_all():
    target, online = [torch.tensor([0.0, 10.0])], [torch.tensor([1.0, 20.0])]
    soft_update_(target, online, 0.125, allowed=torch.tensor(0.0))
    assert torch.equal(target[0], torch.tensor([0.0, 10.0]))
    soft_update_(target, online, 0.125, allowed=torch.tensor(1.0))
    torch.testing.assert_close(target[0], torch.tensor([0.125, 11.25]))


def test_normalizers_skip_non_finite_input():
    norm = EmpiricalNormalizer(1, eps=0.0)
    norm.update(torch.tensor([[1.0], [3.0]]))
    norm.update(torch.tensor([[NAN], [5.0]]), allowed=torch.tensor(0.0))
    torch.testing.assert_close(
        (norm.mean, norm.var, norm.count),
        (torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor(2.0, dtype=torch.float64)),
    )
    scaler = RewardScaler(num_envs=2, gamma=0.5, g_max=5.0)
    scaler.update(torch.tensor([1.0, 2.0]), torch.zeros(2), torch.zeros(2))
    scaler.update(torch.tensor([NAN, 4.0]), torch.zeros(2), torch.zeros(2))  # the whole vector step is left out
    torch.testing.assert_close(scaler.discounted_return, torch.tensor([1.0, 2.0]))
    assert float(scaler.return_abs_max) == 2.0 and float(scaler.count) == 2.0
    # returns {1, 2}: mean 1.5, population variance 0.25
    assert math.isclose(float(scaler.return_mean), 1.5) and math.isclose(float(scaler.return_var), 0.25)


# --------------------------------------------------------------------------- whole update phases

BATCH = 32  # tests/sizes.py SMALL batch size


def _poison(replay, field: str, rows: list[int]) -> None:
    b = replay.batch
    for row in rows:
        if field == "reward":
            b.reward[row] = NAN
        elif field == "action":
            b.action[row, 0] = NAN
        else:
            getattr(b, field)["actor"][row, 2] = float("inf") if field == "obs" else NAN


@pytest.mark.parametrize("field", ["reward", "obs", "next_obs", "action"])
@pytest.mark.parametrize("name", NAMES)
def test_a_non_finite_phase_changes_nothing_and_is_counted(small, spec, fixed_replay, name, field):
    torch.manual_seed(0)
    algo = small(name)
    algo.observe(torch.ones(spec.num_envs), torch.zeros(spec.num_envs), torch.zeros(spec.num_envs))
    algo.update_phase(fixed_replay(spec, 8 * BATCH, seed=1), 4)  # optimizer moments exist from here on
    assert int(algo.nonfinite_streak) == 0
    before = _state(algo)
    replay = fixed_replay(spec, 4 * BATCH)
    _poison(replay, field, [3, BATCH + 5, 2 * BATCH, 4 * BATCH - 1])  # one bad row in each update's batch
    metrics = algo.update_phase(replay, 4)  # 4 updates: critic, temperature, actor and target steps
    _assert_unchanged(before, _state(algo))
    assert float(metrics["train/nonfinite_updates"]) == 4.0
    assert int(algo.nonfinite_streak) == 4
    assert math.isnan(float(metrics["loss/critic"]))  # no valid update to average
    algo.update_phase(replay, 2)
    assert int(algo.nonfinite_streak) == 6  # the streak runs across phases
    metrics = algo.update_phase(fixed_replay(spec, 4 * BATCH, seed=2), 1)
    assert int(algo.nonfinite_streak) == 0 and float(metrics["train/nonfinite_updates"]) == 0.0


@pytest.mark.parametrize("bad_update,streak", [(0, 0), (1, 1)])
@pytest.mark.parametrize("name", NAMES)
def test_only_the_update_with_the_bad_row_is_skipped(small, spec, fixed_replay, name, bad_update, streak):
    torch.manual_seed(0)
    algo = small(name)
    replay = fixed_replay(spec, 2 * BATCH)
    _poison(replay, "reward", [bad_update * BATCH + 7])
    metrics = algo.update_phase(replay, 2)
    assert float(metrics["train/nonfinite_updates"]) == 1.0
    assert int(algo.nonfinite_streak) == streak  # a valid update resets it; a skipped last one leaves 1
    # the critic's means are over the valid update only (the actor's are NaN when its one update was skipped)
    for key in ("loss/critic", "train/q_mean", "train/q_support_saturation"):
        assert torch.isfinite(metrics[key]), key


def test_flashsac_batchnorm_statistics_and_schedule_stay_on_a_skipped_update(small, spec, fixed_replay):
    torch.manual_seed(0)
    algo = small("flashsac")
    replay = fixed_replay(spec, BATCH)
    _poison(replay, "next_obs", [0])
    stats = [t.clone() for t in algo.actor_stats + algo.critic_stats]
    algo.update_phase(replay, 1)  # actor, temperature and critic update, all skipped
    assert all(torch.equal(a, b) for a, b in zip(stats, algo.actor_stats + algo.critic_stats))
    assert all(float(step) == 0.0 for step in algo.opt_steps.values())


def test_fastsac_learning_rate_decay_does_not_count_a_skipped_update(small, spec, fixed_replay):
    torch.manual_seed(0)
    algo = small("fastsac", lr_decay_updates=10)
    replay = fixed_replay(spec, 2 * BATCH)
    _poison(replay, "reward", [BATCH + 3])  # the second of two updates is skipped
    algo.update_phase(replay, 2)
    assert float(algo.lr_step) == 1.0
