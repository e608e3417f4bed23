"""FlashSAC weight renormalisation: unit rows, norm-sqrt(D) norm scales, after every update."""

import math

import torch

from offpolicy.algorithms.networks import UnitBatchNorm, UnitLinear, UnitRMSNorm


def test_renormalize_by_hand():
    linear = UnitLinear(1, 2, 1)
    bn = UnitBatchNorm(1, 1, momentum=0.01)
    rms = UnitRMSNorm(1, 2)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[[3.0, 4.0]]]))
        bn.weight.fill_(3.0)
        bn.bias.fill_(4.0)
        rms.weight.copy_(torch.tensor([[3.0, 4.0]]))
    linear.renormalize_()
    bn.renormalize_()
    rms.renormalize_()
    torch.testing.assert_close(linear.weight, torch.tensor([[[0.6, 0.8]]]))
    torch.testing.assert_close(torch.cat([bn.weight, bn.bias], -1), torch.tensor([[0.6, 0.8]]))  # norm sqrt(1)
    torch.testing.assert_close(rms.weight, torch.tensor([[3.0, 4.0]]) * math.sqrt(2) / 5)


def _check_normalised(module):
    checked = 0
    for m in module.modules():
        if isinstance(m, UnitLinear):
            torch.testing.assert_close(m.weight.norm(dim=-1), torch.ones(m.weight.shape[:-1]))
        elif isinstance(m, UnitBatchNorm):
            norm = torch.cat([m.weight, m.bias], -1).norm(dim=-1)
            torch.testing.assert_close(norm, torch.full_like(norm, math.sqrt(m.weight.shape[-1])))
        elif isinstance(m, UnitRMSNorm):
            norm = m.weight.norm(dim=-1)
            torch.testing.assert_close(norm, torch.full_like(norm, math.sqrt(m.weight.shape[-1])))
        else:
            continue
        checked += 1
    return checked


def test_update_leaves_unit_rows(small, replay):
    algo = small("flashsac")
    before = [p.detach().clone() for p in algo.actor.parameters()]
    algo.update_phase(replay, 2)
    assert any(not torch.equal(b, p) for b, p in zip(before, algo.actor.parameters()))
    assert _check_normalised(algo.actor) > 0
    assert _check_normalised(algo.critic) > 0
