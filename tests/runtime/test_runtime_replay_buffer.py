"""Learner-local replay: ring semantics, device-side sampling against a device fill size, static shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from offpolicy.replay_buffer import ReplayBuffer, TransitionBatch


def _step(t: int, n: int, obs_dim: int = 3, action_dim: int = 2):
    obs = {"actor": np.full((n, obs_dim), t, np.float32), "critic": np.full((n, obs_dim + 1), -t, np.float32)}
    nxt = {k: v + 0.5 for k, v in obs.items()}
    action = np.full((n, action_dim), t / 100, np.float32)
    reward = (np.arange(n) + 10 * t).astype(np.float32)
    return obs, action, reward, nxt, np.arange(n) % 2 == 0, np.arange(n) % 3 == 0


def _actor_step(t: int, n: int):
    obs, action, reward, nxt, term, trunc = _step(t, n)
    return {"actor": obs["actor"]}, action, reward, {"actor": nxt["actor"]}, term, trunc


def test_add_keeps_rows_in_order_and_wraps():
    n = 4
    rb = ReplayBuffer(10, {"actor": 3, "critic": 4}, 2, "cpu", num_envs=n)
    assert rb.capacity == 8  # whole vector steps
    for t in range(3):
        rb.add(*_step(t, n))
    assert len(rb) == 8 and rb.total_added == 12 and int(rb.size_t) == 8
    np.testing.assert_array_equal(rb.reward.numpy(), [20, 21, 22, 23, 10, 11, 12, 13])  # step 2 overwrote step 0
    newest = rb.newest(8)
    np.testing.assert_array_equal(newest.reward.numpy(), [10, 11, 12, 13, 20, 21, 22, 23])
    assert newest.terminated.dtype == torch.float32
    np.testing.assert_array_equal(newest.terminated.numpy()[:4], [1, 0, 1, 0])
    np.testing.assert_array_equal(newest.truncated.numpy()[:4], [1, 0, 0, 1])
    np.testing.assert_array_equal(newest.next_obs["critic"].numpy()[4], np.full(4, -1.5))


def test_add_splits_a_step_across_the_end_without_num_envs():
    rb = ReplayBuffer(5, {"actor": 3}, 2, "cpu")
    rb.add(*_actor_step(0, 3))
    rb.add(*_actor_step(1, 3))
    np.testing.assert_array_equal(rb.reward.numpy(), [12, 1, 2, 10, 11])  # step 1 wrapped onto row 0
    assert len(rb) == 5


def test_sample_stays_in_the_filled_part_with_static_shapes():
    rb = ReplayBuffer(1000, {"actor": 3}, 2, "cpu", num_envs=4)
    rb.add(*_actor_step(7, 4))
    batch = rb.sample(256)
    assert isinstance(batch, TransitionBatch) and len(batch) == 256
    assert batch.obs["actor"].shape == (256, 3) and batch.action.shape == (256, 2)
    assert set(batch.reward.tolist()) <= {70.0, 71.0, 72.0, 73.0}
    assert len(set(batch.reward.tolist())) == 4  # uniform over the filled rows
    assert rb.size_t.device == rb.reward.device and rb.size_t.dtype == torch.int64


def test_state_dict_round_trip():
    rb = ReplayBuffer(16, {"actor": 3}, 2, "cpu", num_envs=4)
    for t in range(5):
        rb.add(*_actor_step(t, 4))
    other = ReplayBuffer(16, {"actor": 3}, 2, "cpu", num_envs=4)
    other.load_state_dict(rb.state_dict())
    assert len(other) == len(rb) and other.total_added == rb.total_added
    torch.testing.assert_close(other.newest(16).reward, rb.newest(16).reward)


def test_rejects_a_capacity_below_one_vector_step():
    with pytest.raises(ValueError, match="smaller than one vector step"):
        ReplayBuffer(3, {"actor": 1}, 1, "cpu", num_envs=4)
