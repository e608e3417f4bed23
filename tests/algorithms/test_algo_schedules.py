"""Which updates train the actor, and FlashSAC's learning-rate schedule, worked out by hand."""

import math

import pytest
import torch

from offpolicy.algorithms.optim import LRSchedule


def test_fastsac_trains_the_actor_on_updates_1_and_5_of_every_8(small, replay):
    algo = small("fastsac", policy_frequency=4)
    assert [i for i, actor in enumerate(algo._schedule(16)) if actor] == [1, 5, 9, 13]
    for _ in range(3):  # the count carries over from phase to phase: two actor updates in every phase of 8
        assert sum(algo._schedule(8)) == 2 and algo._schedule(8)[1] and algo._schedule(8)[5]
        algo.update_phase(replay, 8)
    assert algo.total_updates == 24
    algo.total_updates = 3  # a phase that starts mid-cycle: updates 3..10 -> actor on 5 and 9
    assert [i for i, actor in enumerate(algo._schedule(8)) if actor] == [2, 6]


@pytest.mark.parametrize(
    "step,lr",
    [
        (0, 0.0),  # warm-up from lr_init ...
        (5, 5e-4),
        (10, 1e-3),  # ... to lr_peak, where the cosine starts
        (35, 1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi / 4))),
        (60, 5.5e-4),  # half way: the mean of peak and end
        (110, 1e-4),  # lr_end at lr_decay_updates ...
        (200, 1e-4),  # ... and after
    ],
)
def test_flashsac_lr_warms_up_linearly_then_decays_on_a_cosine(step, lr):
    schedule = LRSchedule(init=0.0, peak=1e-3, end=1e-4, warmup=10, decay=110)
    assert float(schedule.value(torch.tensor(float(step)))) == pytest.approx(lr, rel=1e-5, abs=1e-9)


def _fastsac_rate(step: int, base: float, ratio: float, decay: int) -> float:
    """FastSAC's decayed rate by hand: a cosine from base to ratio x base over `decay` updates, held after."""
    progress = min(step / decay, 1.0)
    return ratio * base + (base - ratio * base) * 0.5 * (1.0 + math.cos(math.pi * progress))


def test_fastsac_decays_its_actor_and_critic_rates_over_the_updates_taken(small, replay):
    algo = small("fastsac", actor_lr=2e-4, critic_lr=6e-4, lr_decay_updates=8, lr_end_ratio=0.25)
    # the optimizers step with these very tensors (a captured graph reads them at replay)
    assert algo.actor_opt.param_groups[0]["lr"] is algo.actor_lr
    assert algo.critic_opt.param_groups[0]["lr"] is algo.critic_lr
    for taken in (3, 6, 9, 12):  # phases of 3: the last update of each ran at step taken - 1
        metrics = algo.update_phase(replay, 3)
        assert float(algo.lr_step) == taken
        for lr, base in ((algo.actor_lr, 2e-4), (algo.critic_lr, 6e-4)):
            assert float(lr) == pytest.approx(_fastsac_rate(taken - 1, base, 0.25, 8), rel=1e-6)
        assert float(metrics["train/lr"]) == pytest.approx(_fastsac_rate(taken - 1, 6e-4, 0.25, 8), rel=1e-6)
    assert float(algo.critic_lr) == pytest.approx(1.5e-4)  # held at the end once the decay is over
    assert float(algo.alpha_lr) == pytest.approx(3e-4)  # the temperature's rate is not decayed


def test_fastsac_rates_stay_flat_without_decay(small, replay):
    algo = small("fastsac", actor_lr=2e-4, critic_lr=6e-4)
    for _ in range(3):
        algo.update_phase(replay, 4)
    assert float(algo.actor_lr) == pytest.approx(2e-4) and float(algo.critic_lr) == pytest.approx(6e-4)


def test_fastsac_decay_resumes_from_a_checkpoint_at_the_rate_it_stopped(small, replay):
    algo = small("fastsac", lr_decay_updates=10, lr_end_ratio=0.5)
    algo.update_phase(replay, 4)
    state = algo.state_dict()
    again = small("fastsac", lr_decay_updates=10, lr_end_ratio=0.5)
    again.load_state_dict(state)
    assert float(again.lr_step) == 4.0
    assert float(again.critic_lr) == pytest.approx(_fastsac_rate(4, 3e-4, 0.5, 10), rel=1e-6)
    # a checkpoint written before the option existed resumes at its count of updates
    del state["lr_step"]
    older = small("fastsac", lr_decay_updates=10, lr_end_ratio=0.5)
    older.load_state_dict(state)
    assert float(older.lr_step) == 4.0


@pytest.mark.parametrize("overrides", [{"lr_decay_updates": -1}, {"lr_decay_updates": 5, "lr_end_ratio": 0.0}])
def test_fastsac_refuses_a_bad_decay(small, overrides):
    with pytest.raises(ValueError, match="lr_decay_updates"):
        small("fastsac", **overrides)
