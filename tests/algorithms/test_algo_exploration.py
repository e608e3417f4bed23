"""FlashSAC noise repetition: truncated Zeta hold lengths, per-env holds, reset on done."""

import torch

from offpolicy.algorithms.exploration import ZetaNoiseHold, truncated_zeta_cdf


def test_truncated_zeta_cdf():
    # P(k) proportional to 1, 1/4, 1/9 for k = 1, 2, 3; normaliser 49/36
    torch.testing.assert_close(truncated_zeta_cdf(2.0, 3), torch.tensor([36 / 49, 45 / 49, 1.0]))


def test_inverse_cdf_lengths():
    hold = ZetaNoiseHold(num_envs=1, action_dim=1, mu=2.0, max_len=3)
    u = torch.tensor([0.0, 0.7, 0.75, 0.95, 0.9999])  # cdf = (0.7347, 0.9184, 1)
    torch.testing.assert_close(hold.lengths_from_uniform(u), torch.tensor([1, 1, 2, 3, 3]))


def test_noise_is_held_per_env_and_reset_on_done():
    torch.manual_seed(0)
    hold = ZetaNoiseHold(num_envs=2, action_dim=2, mu=2.0, max_len=16)
    hold.noise.copy_(torch.tensor([[1.0, 1.0], [2.0, 2.0]]))
    hold.hold.fill_(3)
    hold.count.fill_(1)
    noise = hold(torch.tensor([False, True])).clone()
    torch.testing.assert_close(noise[0], torch.tensor([1.0, 1.0]))  # still held
    assert not torch.equal(noise[1], torch.tensor([2.0, 2.0]))  # done: fresh noise
    assert hold.count.tolist() == [2, 1]
    assert 1 <= int(hold.hold[1]) <= 16
    hold.hold[1] = 5
    torch.testing.assert_close(hold(torch.tensor([False, False])), noise)  # env 0 at count 3 of 3
    again = hold(torch.tensor([False, False]))  # env 0's hold ran out
    assert not torch.equal(again[0], noise[0])
    torch.testing.assert_close(again[1], noise[1])
    assert hold.count.tolist() == [1, 3]


def test_flashsac_explore_resets_only_done_envs(small, spec):
    algo = small("flashsac", noise_zeta_mu=-50.0)  # hold lengths ~ always the maximum, 16
    obs = {"actor": torch.randn(spec.num_envs, 7)}
    first = algo.explore(obs, torch.ones(spec.num_envs, dtype=torch.bool))
    reset = torch.zeros(spec.num_envs, dtype=torch.bool)
    reset[1] = True
    second = algo.explore(obs, reset)
    keep = torch.arange(spec.num_envs) != 1
    torch.testing.assert_close(second[keep], first[keep])
    assert not torch.allclose(second[1], first[1])
