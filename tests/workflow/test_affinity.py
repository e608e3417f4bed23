"""Affinity config: auto split, explicit lists validated with one-line errors naming the bad ids."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from offpolicy.affinity import Affinity, AffinityError, resolve_affinity


def cfg(**kw):
    return OmegaConf.create(kw)


def test_auto_gives_learner_the_first_cpu_and_collector_the_rest():
    assert resolve_affinity(cfg(mode="auto"), available=[0, 1]) == Affinity((0,), (1,))
    assert resolve_affinity(cfg(mode="auto", learner_count=2), available=[2, 3, 5, 7]) == Affinity((2, 3), (5, 7))


def test_auto_on_one_cpu_shares_it():
    assert resolve_affinity(cfg(mode="auto"), available=[3]) == Affinity((3,), (3,), shared=True)


def test_auto_rejects_a_learner_count_that_leaves_nothing():
    with pytest.raises(AffinityError, match="leaves no CPU for the collector"):
        resolve_affinity(cfg(mode="auto", learner_count=2), available=[0, 1])


def test_manual_lists_are_used_as_given():
    got = resolve_affinity(cfg(mode="manual", learner_cpus=[3], collector_cpus=[0, 1, 2]), available=[0, 1, 2, 3])
    assert got == Affinity((3,), (0, 1, 2))


@pytest.mark.parametrize(
    "learner,collector,message",
    [
        (
            [0],
            [1, 7, 9],
            r"affinity.collector_cpus CPU ids \[7, 9\] are not available to this process; available: \[0, 1\]",
        ),
        ([5], [1], r"affinity.learner_cpus CPU ids \[5\] are not available"),
        ([0, 1], [1], r"overlap on CPU ids \[1\]"),
        ([], [1], r"affinity.learner_cpus is empty"),
        ([0], [1, 1], r"affinity.collector_cpus repeats CPU ids \[1\]"),
        ([0], "1", r"affinity.collector_cpus must be a list of CPU ids"),
    ],
)
def test_manual_lists_are_validated_with_one_line(learner, collector, message):
    with pytest.raises(AffinityError, match=message) as info:
        resolve_affinity(cfg(mode="manual", learner_cpus=learner, collector_cpus=collector), available=[0, 1])
    assert "\n" not in str(info.value)


def test_unknown_mode():
    with pytest.raises(AffinityError, match="affinity.mode must be 'auto' or 'manual'"):
        resolve_affinity(cfg(mode="fancy"), available=[0, 1])
