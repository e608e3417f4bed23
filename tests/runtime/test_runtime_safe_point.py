"""A stop request ends an eager update phase between two whole updates (the learner's safe point).

When the collector fails during an update phase, the learner stops the phase at its next
safe point so the final checkpoint holds an intact state: the updates before the stop
applied whole, none after it begun. Checked here on the real algorithms: a phase of n
updates stopped after k must leave exactly the state a phase of k updates leaves.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from algo_stubs import FixedReplay, random_batch
from omegaconf import OmegaConf
from sizes import SMALL

from envs.core import EnvSpec
from offpolicy.algorithms import make_algorithm
from offpolicy.algorithms.contract import UpdatesStopped

SPEC = EnvSpec(
    name="synthetic",
    num_envs=4,
    obs_dims={"actor": 5},
    action_dim=2,
    action_low=-np.ones(2, np.float32),
    action_high=np.ones(2, np.float32),
    dt=0.01,
    max_episode_steps=1000,
    reward_range=(-3.0, 3.0),
)
# FastSAC's observation statistics take the whole phase's sample at its start: off, so that a phase of k
# updates and the first k of a longer phase see the same inputs (FixedReplay returns rows 0..n-1 in order)
OVERRIDES = {"fastsac": {"obs_normalization": False}, "flashsac": {}}


class SetAtCall:
    """Stands in for the learner's `threading.Event`: reads as set from its `n`-th `is_set()` on."""

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def is_set(self) -> bool:
        self.calls += 1
        return self.calls >= self.n


def _algorithm(name: str):
    torch.manual_seed(0)
    cfg = OmegaConf.create({"name": name, **SMALL[name], **OVERRIDES[name]})
    return make_algorithm(cfg, SPEC, "cpu")


def _flat(state, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a (nested) state dict, by path."""
    out = {}
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, list | tuple) else []
    for key, value in items:
        path = f"{prefix}/{key}"
        if isinstance(value, torch.Tensor):
            out[path] = value.detach().clone()
        else:
            out.update(_flat(value, path))
    return out


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
@pytest.mark.parametrize("stop_after", [1, 3])
def test_a_phase_stopped_after_k_updates_leaves_the_state_of_a_k_update_phase(name, stop_after):
    replay = FixedReplay(random_batch(SPEC, 8 * SMALL[name]["batch_size"], seed=1))
    reference = _algorithm(name)
    torch.manual_seed(1)
    reference.update_phase(replay, stop_after)

    stopped = _algorithm(name)
    stopped.stop_between_updates = SetAtCall(stop_after)
    torch.manual_seed(1)
    with pytest.raises(UpdatesStopped) as info:
        stopped.update_phase(replay, 8)
    assert info.value.done == stop_after

    # the counters carry on from the updates that ran (the actor-update schedule and policy_version derive from them)
    assert stopped.state_dict()["counters"] == reference.state_dict()["counters"]
    assert stopped.total_updates == stop_after
    actor_updated = any(_algorithm(name)._schedule(stop_after))  # which of the first k updates move the actor
    assert stopped.policy_version == int(actor_updated)
    want, got = _flat(reference.state_dict()), _flat(stopped.state_dict())
    assert want.keys() == got.keys()
    different = [k for k in want if not torch.equal(want[k], got[k])]
    assert different == [], f"not the state of {stop_after} whole updates: {different[:5]}"
    # and the phase did stop: a full phase moves the parameters further
    full = _algorithm(name)
    torch.manual_seed(1)
    full.update_phase(replay, 8)
    assert any(not torch.equal(v, got[k]) for k, v in _flat(full.state_dict()).items())


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_an_unset_stop_request_changes_nothing(name):
    replay = FixedReplay(random_batch(SPEC, 8 * SMALL[name]["batch_size"], seed=1))
    plain, watched = _algorithm(name), _algorithm(name)
    watched.stop_between_updates = SetAtCall(10**9)
    for algo in (plain, watched):
        torch.manual_seed(1)
        algo.update_phase(replay, 8)
    want, got = _flat(plain.state_dict()), _flat(watched.state_dict())
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert watched.stop_between_updates.calls == 8  # looked once per update, between updates


def _on_cuda(replay: FixedReplay) -> FixedReplay:
    """The same fixed rows on the GPU."""

    def move(value):
        return {k: v.cuda() for k, v in value.items()} if isinstance(value, dict) else value.cuda()

    batch = replay.batch
    return FixedReplay(type(batch)(**{f.name: move(getattr(batch, f.name)) for f in dataclasses.fields(batch)}))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_on_cuda_a_captured_phase_runs_whole_and_an_eager_one_stops_between_updates(name):
    """A captured graph cannot stop inside: the request waits for the learner's safe point after the phase."""
    replay = _on_cuda(FixedReplay(random_batch(SPEC, 8 * SMALL[name]["batch_size"], seed=1)))
    cfg = {"name": name, **SMALL[name], **OVERRIDES[name], "compile": False}
    torch.manual_seed(0)
    captured = make_algorithm(OmegaConf.create({**cfg, "cuda_graphs": True}), SPEC, "cuda")
    captured.stop_between_updates = SetAtCall(1)
    for _ in range(captured.graph_warmup_calls + 2):  # eager warm-up calls, the capture, a replay
        captured.update_phase(replay, 8)
    assert captured.graph_errors == {}
    assert captured.total_updates == 8 * (captured.graph_warmup_calls + 2)
    torch.manual_seed(0)
    eager = make_algorithm(OmegaConf.create({**cfg, "cuda_graphs": False}), SPEC, "cuda")
    eager.stop_between_updates = SetAtCall(3)
    with pytest.raises(UpdatesStopped):
        eager.update_phase(replay, 8)
    assert eager.total_updates == 3
