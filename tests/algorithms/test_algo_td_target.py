"""The TD target cuts the bootstrap on termination and keeps it on truncation (next_obs = pre-reset obs)."""

import pytest
import torch
from torch import nn

from offpolicy.replay_buffer import ReplayBuffer

ATOM_LOGITS = {+1: [-50.0, -50.0, 50.0], -1: [50.0, -50.0, -50.0]}


class SignCritic(nn.Module):
    """Stub target critic: member 0 puts all mass on +1 if obs[:, 0] > 0 else on -1; member 1 the opposite."""

    def forward(self, obs, action, *args, **kwargs):
        plus, minus = torch.tensor(ATOM_LOGITS[+1]), torch.tensor(ATOM_LOGITS[-1])
        positive = obs[:, :1] > 0
        member0 = torch.where(positive, plus, minus)
        member1 = torch.where(positive, minus, plus)
        return torch.stack([member0, member1])


# three transitions: ongoing, terminated, truncated; the truncated row's next_obs is the
# pre-reset observation (positive first feature), so its bootstrap must come from it
REWARD = torch.tensor([0.0, 0.0, 0.2])
TERMINATED = torch.tensor([0.0, 1.0, 0.0])
NEXT_OBS = torch.tensor([[1.0] + [0.0] * 6] * 3)
OBS = -NEXT_OBS  # the current observations point the other way


def _tiny(small, name):
    if name == "fastsac":
        algo = small(name, num_atoms=3, v_min=-1.0, v_max=1.0, gamma=0.5, alpha_init=1e-9)
    else:
        algo = small(name, num_bins=3, normalized_g_max=1.0, gamma=0.5, temp_init=1e-9)
    algo.target_critic = SignCritic()
    return algo


def test_fastsac_each_critic_projects_its_own_target(small):
    algo = _tiny(small, "fastsac")
    target, _ = algo._td_target(REWARD, NEXT_OBS, NEXT_OBS, TERMINATED)
    # member 0 bootstraps from z = +1: moved atoms 0 + 0.5 = 0.5, terminated -> 0, truncated 0.2 + 0.5 = 0.7
    expected0 = torch.tensor([[0.0, 0.5, 0.5], [0.0, 1.0, 0.0], [0.0, 0.3, 0.7]])
    # member 1 bootstraps from z = -1: -0.5, terminated -> 0, truncated 0.2 - 0.5 = -0.3
    expected1 = torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.3, 0.7, 0.0]])
    torch.testing.assert_close(target, torch.stack([expected0, expected1]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("terminated,expected_row", [(0.0, [0.0, 0.3, 0.7]), (1.0, [0.0, 0.8, 0.2])])
def test_termination_flag_alone_decides_the_bootstrap(small, terminated, expected_row):
    algo = _tiny(small, "fastsac")
    target, _ = algo._td_target(torch.tensor([0.2]), NEXT_OBS[:1], NEXT_OBS[:1], torch.tensor([terminated]))
    torch.testing.assert_close(target[0, 0], torch.tensor(expected_row), atol=1e-5, rtol=0)


def test_flashsac_takes_the_lower_critic_and_cuts_on_termination(small):
    algo = _tiny(small, "flashsac")
    action = torch.zeros(3, 3)
    target, obs_all, _, _ = algo._td_target(OBS, action, REWARD, NEXT_OBS, NEXT_OBS, TERMINATED)
    # min-Q: member 1 (mass on -1 for the positive next_obs) has the lower mean on every row
    expected = torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.3, 0.7, 0.0]])
    torch.testing.assert_close(target, expected, atol=1e-5, rtol=0)
    # cross-batch: (s, a) rows first, then (s', a') rows, in one critic pass
    torch.testing.assert_close(obs_all, torch.cat([OBS, NEXT_OBS]))


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
@pytest.mark.parametrize("flag", ["terminated", "truncated"])
def test_update_phase_passes_the_replays_terminated_flag_alone(small, spec, name, flag):
    """A replay of only truncated (or only terminated) transitions: the TD target gets 0 (or 1) for every row."""
    n = spec.num_envs
    gen = torch.Generator().manual_seed(0)
    replay = ReplayBuffer(1000, spec.obs_dims, spec.action_dim, "cpu", num_envs=n)
    on, off = torch.ones(n), torch.zeros(n)
    for _ in range(20):
        obs = {k: torch.randn(n, d, generator=gen) for k, d in spec.obs_dims.items()}
        next_obs = {k: torch.randn(n, d, generator=gen) for k, d in spec.obs_dims.items()}
        action = torch.rand(n, spec.action_dim, generator=gen) * 2 - 1
        terminated, truncated = (on, off) if flag == "terminated" else (off, on)
        replay.add(obs, action, torch.randn(n, generator=gen), next_obs, terminated, truncated)
    algo = small(name)
    seen, td_target = [], algo._td_target

    def spy(*args):
        seen.append(args[-1].detach().clone())  # `terminated` is the last argument of both algorithms'
        return td_target(*args)

    algo._td_target = spy
    algo.update_phase(replay, 2)
    assert len(seen) == 2
    expected = 1.0 if flag == "terminated" else 0.0
    assert all(torch.equal(t, torch.full_like(t, expected)) for t in seen)


def test_flashsac_phase_scales_the_reward_once(small, spec):
    """The TD target of a FlashSAC phase sees r / D, D the reward scaler's denominator (not r, not r / D^2)."""
    n = spec.num_envs
    algo = small("flashsac")
    for reward in (3.0, -1.0, 4.0):  # running returns away from the initial statistics: D != 1
        algo.observe(torch.full((n,), reward), torch.zeros(n), torch.zeros(n))
    denominator = float(algo.reward_scaler.denominator())
    assert abs(denominator - 1.0) > 0.1
    gen = torch.Generator().manual_seed(0)
    replay = ReplayBuffer(1000, spec.obs_dims, spec.action_dim, "cpu", num_envs=n)
    for _ in range(10):
        obs = {k: torch.randn(n, d, generator=gen) for k, d in spec.obs_dims.items()}
        next_obs = {k: torch.randn(n, d, generator=gen) for k, d in spec.obs_dims.items()}
        action = torch.rand(n, spec.action_dim, generator=gen) * 2 - 1
        replay.add(obs, action, torch.full((n,), 2.0), next_obs, torch.zeros(n), torch.zeros(n))
    seen, td_target = [], algo._td_target

    def spy(*args):
        seen.append(args[2].detach().clone())  # FlashSAC's `_td_target(obs_c, action, reward, ...)`
        return td_target(*args)

    algo._td_target = spy
    algo.update_phase(replay, 1)
    (reward,) = seen
    torch.testing.assert_close(reward, torch.full_like(reward, 2.0 / denominator))
