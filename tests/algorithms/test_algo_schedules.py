"""Which updates train the actor, and FlashSAC's learning-rate schedule, worked out by hand."""

import math

import pytest
import torch
from omegaconf import OmegaConf

from offpolicy.algorithms.flashsac import LRSchedule


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
    cfg = OmegaConf.create(
        {"lr_init": 0.0, "lr_peak": 1e-3, "lr_end": 1e-4, "lr_warmup_updates": 10, "lr_decay_updates": 110}
    )
    schedule = LRSchedule(cfg, torch.device("cpu"))
    assert float(schedule.value(torch.tensor(float(step)))) == pytest.approx(lr, rel=1e-5, abs=1e-9)
