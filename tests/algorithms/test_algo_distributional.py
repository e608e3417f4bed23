"""C51 projection on a 3-atom support, values worked out by hand."""

import torch

from offpolicy.algorithms.distributional import categorical_projection, expected_value

ATOMS = torch.tensor([-1.0, 0.0, 1.0])


def test_projection_splits_mass_between_neighbours():
    # moved atoms r + d z = 0.5 + 0.5 * (-1, 0, 1) = (0, 0.5, 1): the first and last land on
    # atoms 0 and 1, the middle one splits half-half between atoms 0 and 1.
    probs = torch.tensor([[0.2, 0.5, 0.3]])
    out = categorical_projection(probs, torch.tensor([0.5]), torch.tensor([0.5]), ATOMS)
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.2 + 0.25, 0.25 + 0.3]]))


def test_projection_clips_to_support_and_handles_zero_discount():
    probs = torch.tensor([[0.2, 0.5, 0.3], [0.2, 0.5, 0.3]])
    reward = torch.tensor([5.0, -0.25])
    discount = torch.tensor([0.9, 0.0])
    out = categorical_projection(probs, reward, discount, ATOMS)
    # row 0: everything beyond v_max lands on the top atom; row 1: all mass at -0.25,
    # i.e. 1/4 on atom -1 and 3/4 on atom 0
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0, 1.0], [0.25, 0.75, 0.0]]))


def test_projection_broadcasts_over_ensemble_and_keeps_mass():
    probs = torch.softmax(torch.randn(2, 4, 3), dim=-1)
    out = categorical_projection(
        probs, torch.tensor([0.3, -2.0, 0.0, 0.2]), torch.tensor([0.97, 0.97, 0.0, 0.5]), ATOMS
    )
    assert out.shape == (2, 4, 3)
    torch.testing.assert_close(out.sum(-1), torch.ones(2, 4))
    # rows with zero discount become the reward itself: 0 -> all on the middle atom
    torch.testing.assert_close(out[:, 2], torch.tensor([[0.0, 1.0, 0.0]] * 2))
    # where r + d z stays inside the support (row 3: 0.2 + 0.5 z in [-0.3, 0.7]) the mean is kept
    row = 3
    expected = 0.2 + 0.5 * expected_value(probs[:, row], ATOMS)
    torch.testing.assert_close(expected_value(out[:, row], ATOMS), expected)


def test_a_nan_reward_gives_a_nan_row_not_an_index_out_of_range():
    probs = torch.tensor([[0.2, 0.5, 0.3], [0.2, 0.5, 0.3]])
    out = categorical_projection(probs, torch.tensor([float("nan"), 0.5]), torch.tensor([0.5, 0.5]), ATOMS)
    assert bool(out[0].sum().isnan())  # so is any loss over it
    torch.testing.assert_close(out[1], torch.tensor([0.0, 0.45, 0.55]))  # the other row as by hand above


def test_projection_clips_below_the_support_and_never_makes_negative_mass():
    probs = torch.tensor([[0.2, 0.5, 0.3]])
    # moved atoms -5 + 0.9 * (-1, 0, 1) all lie below v_min = -1: everything on the bottom atom
    out = categorical_projection(probs, torch.tensor([-5.0]), torch.tensor([0.9]), ATOMS)
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0, 0.0]]))
    wide = categorical_projection(
        torch.softmax(torch.randn(64, 3), -1), torch.linspace(-4.0, 4.0, 64), torch.full((64,), 0.9), ATOMS
    )
    assert (wide >= 0).all()
    torch.testing.assert_close(wide.sum(-1), torch.ones(64))
