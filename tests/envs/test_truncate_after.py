"""`NpEnv.truncate_after` (what `env.stagger_starts` uses): a shortened episode ends truncated at exactly the step
asked for, keeps its last observation for bootstrapping, and the row's next episode runs the full time limit; a
snapshot carries the shortened limits; bad lengths are refused in one line. On a DMC task (the MuJoCo backend)
and on Go1 (the legged robots' env), the two implementations."""

from __future__ import annotations

import numpy as np
import pytest

import envs
from envs.core import ACTOR_OBS_KEY

LIMIT = 12
"""the time limit of these envs"""
ROWS, STEPS = np.array([0, 2]), np.array([3, 7])
"""rows 0 and 2 get first episodes of 3 and 7 steps; rows 1 and 3 keep the full limit"""
EXPECTED_ENDS = {0: [3, 15], 1: [12, 24], 2: [7, 19], 3: [12, 24]}
"""by hand: a shortened first episode, then LIMIT-step episodes"""
TASKS = ("dmc_cheetah_run", "go1_joystick_flat")


def make(name: str):
    return envs.make(name, 4, seed=5, nthread=1, max_episode_steps=LIMIT)


def ends(env, steps: int) -> tuple[dict[int, list[int]], list[np.ndarray]]:
    """The steps (1-based) at which each row's episode ended in `steps` zero-action steps; every step's state."""
    out: dict[int, list[int]] = {row: [] for row in range(env.num_envs)}
    states = []
    for t in range(1, steps + 1):
        s = env.step(np.zeros((env.num_envs, env.spec.action_dim), dtype=np.float32))
        assert not s.terminated.any(), "a standing start must not fall within these steps"
        for row in np.flatnonzero(s.truncated):
            out[int(row)].append(t)
        states.append(s)
    return out, states


@pytest.mark.parametrize("name", TASKS)
def test_shortened_first_episodes_end_where_asked_and_the_next_ones_run_the_limit(name):
    with make(name) as env:
        env.reset()
        env.truncate_after(ROWS, STEPS)
        got, states = ends(env, 2 * LIMIT)
        assert got == EXPECTED_ENDS
        # the step that ends row 0's first episode: its final observation is the stepped state's, not the reset's
        s = states[2]
        assert s.info["episode_length"][0] == 3
        assert not np.array_equal(s.info["final_obs"][ACTOR_OBS_KEY][0], s.obs[ACTOR_OBS_KEY][0])
        assert np.array_equal(s.info["final_obs"][ACTOR_OBS_KEY][1], s.obs[ACTOR_OBS_KEY][1])


@pytest.mark.parametrize("name", TASKS)
def test_truncate_after_counts_from_the_running_episodes_length(name):
    with make(name) as env:
        env.reset()
        ends(env, 4)
        env.truncate_after(np.array([1]), 2)  # 4 steps in: row 1's episode ends at step 6, not at step 2
        got, _ = ends(env, LIMIT)
        assert got[1] == [2] and got[0] == [LIMIT - 4]


@pytest.mark.parametrize("name", TASKS)
def test_a_snapshot_carries_the_shortened_limits(name):
    with make(name) as env, make(name) as fresh:
        env.reset()
        fresh.reset()
        env.truncate_after(ROWS, STEPS)
        ends(env, 2)
        fresh.restore(env.snapshot())
        assert ends(fresh, LIMIT)[0] == {0: [1], 1: [10], 2: [5], 3: [10]}


@pytest.mark.parametrize("name", TASKS)
def test_a_length_under_one_is_refused_in_one_line(name):
    with make(name) as env:
        env.reset()
        with pytest.raises(ValueError, match=r"^truncate_after: steps must be >= 1, got 0$"):
            env.truncate_after(ROWS, np.array([4, 0]))
