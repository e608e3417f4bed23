"""`JoystickEnv.snapshot` / `restore` (Go1 and Go2, randomisation and noise on): an env restored into a fresh
one built with the same arguments continues bit for bit, across episode resets, command resamples and pushes."""

from __future__ import annotations

import numpy as np
import pytest

import envs
from envs.core import ACTOR_OBS_KEY
from envs.locomotion.common import CRITIC_OBS_KEY

N, K, M = 6, 55, 20
"""rows; steps before the snapshot; steps compared after it"""
EPISODE = 60
"""every row's episode ends at step 60 (inside the compared steps), after 10 steps of tracking sums"""
RESAMPLED = np.arange(N)
"""rows whose command is redrawn at step 5 (before the snapshot) and again at step K + 2 (after it), unless
their episode ended before"""


PUSHES = {
    "push_robots": True,
    "push_wait_time": [1.0, 1.2],
    "push_kick_duration": [0.2, 0.2],
    "push_velocity_kick": [0.5, 1.0],
}
"""Go1's pushes start 50-60 steps into an episode and last 10: under way when the snapshot is taken at step K"""


def make(name: str, pushes: bool = False):
    return envs.make(name, N, seed=3, nthread=1, max_episode_steps=EPISODE, **(PUSHES if pushes else {}))


def run(env, actions: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Step through `actions`, keeping everything each step hands out."""
    out = []
    for a in actions:
        s = env.step(a)
        out.append(
            {
                "actor": s.obs[ACTOR_OBS_KEY].copy(),
                "critic": s.obs[CRITIC_OBS_KEY].copy(),
                "final_actor": s.info["final_obs"][ACTOR_OBS_KEY].copy(),
                "final_critic": s.info["final_obs"][CRITIC_OBS_KEY].copy(),
                "reward": s.reward.copy(),
                "terminated": s.terminated.copy(),
                "truncated": s.truncated.copy(),
                "episode_return": s.info["episode_return"].copy(),
                "episode_tracking": s.info["episode_tracking"].copy(),
                "command": env.command.copy(),
                "steps_until_next_cmd": env.steps_until_next_cmd.copy(),
                **{f"term/{k}": v.copy() for k, v in s.info["reward_terms"].items()},
            }
        )
    return out


def snapshot_and_continue(name: str, pushes: bool = False):
    """(steps after the snapshot in the original env, the same steps in a fresh env restored from it, the rows
    whose episode ended before step K + 2)."""
    actions = np.random.default_rng(7).uniform(-0.3, 0.3, size=(K + M, N, 12))  # mild: no row falls before step K + 2
    env = make(name, pushes)
    env.reset()
    env.steps_until_next_cmd[RESAMPLED] = 5
    if name == "go2_joystick_flat":  # the interval push falls at step K + 3
        env.global_steps = env.push_steps - (K + 3)
    before = run(env, actions[:10])
    env.steps_until_next_cmd[RESAMPLED] = K + 2 - 10
    before += run(env, actions[10 : K - 1])
    last = env.step(actions[K - 1])  # its reward, deferred, is not read before the snapshot
    snap = env.snapshot()
    before += [{"terminated": last.terminated, "truncated": last.truncated}]
    original = run(env, actions[K:])
    ended = np.any([b["terminated"] | b["truncated"] for b in before + original[:1]], axis=0)
    assert np.count_nonzero(~ended[RESAMPLED]) >= 3
    env.close()
    fresh = make(name, pushes)
    try:
        fresh.restore(snap)
        restored = run(fresh, actions[K:])
    finally:
        fresh.close()
    return original, restored, ended


@pytest.mark.parametrize(
    ("name", "pushes"), [("go1_joystick_flat", False), ("go1_joystick_flat", True), ("go2_joystick_flat", False)]
)
def test_a_restored_env_continues_bit_for_bit(name, pushes):
    original, restored, ended = snapshot_and_continue(name, pushes)
    if pushes:  # a push under way at the snapshot on some row (critic columns 119:122: the force on the torso)
        force = np.stack([np.abs(o["critic"][:, 119:122]).sum(axis=1) for o in original])
        assert (force[0] > 0).any() and (force == 0).any()
    # the compared steps hold what makes a continuation hard: resamples, new episodes
    timer = np.stack([o["steps_until_next_cmd"] for o in original])
    rows = RESAMPLED[~ended[RESAMPLED]]
    assert (timer[0, rows] == 1).all() and (timer[1, rows] > 0).all()  # redrawn at step K + 2
    command = np.stack([o["command"] for o in original])
    assert (command[1, rows] != command[0, rows]).any()  # (Go1 keeps each component with probability 1/2)
    done = np.stack([o["terminated"] | o["truncated"] for o in original])
    assert done.sum() >= N // 2  # the time limit at step 60 (a row that fell earlier has a later one)
    assert (original[0]["episode_tracking"][:, -1] > 0).any()  # tracking sums running
    for t, (a, b) in enumerate(zip(original, restored, strict=True)):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name} step {K + t + 1}: {key}")


def test_the_snapshot_holds_the_randomised_models_and_the_go2_clocks():
    """What the continuation relies on beyond the step state: each row's drawn model fields, the gait clock."""
    env = make("go2_joystick_flat")
    try:
        env.reset()
        env.step(np.zeros((N, 12)))
        snap = env.snapshot()
        kp = snap["model/patched/kp"]
        assert kp.shape == (N, 12) and (31.5 <= kp).all() and (kp <= 38.5).all() and len(np.unique(kp)) == kp.size
        masses = snap["model/patched/body_mass"][:, env.layout.base_body]
        for row, model in enumerate(env.pool.get_model(list(range(N)))):
            assert model.body_mass[env.layout.base_body] == masses[row]
        assert int(snap["global_steps"]) == 1 and snap["gait_phase"] == np.float32(0.04)
        assert snap["warmstart"].any()
    finally:
        env.close()
