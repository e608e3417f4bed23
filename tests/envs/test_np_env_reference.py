"""`MujocoNpEnv.step` is bit for bit a straightforward computation of Gymnasium's rules.

The env's step is written for speed (shared read-only helper arrays, matrix-vector
row tests, the new rows' observation taken from the states it writes). Here a
plain reference, written from the Gymnasium v5 rules and the NpEnv contract and
sharing none of that code, drives its own copy of the same task (same seed, hence
the same pool and reset draws: the env draws new episodes' states ahead, a batch of
one per env whenever fewer than that are left after a step, and resets take them
in order) through ~300 random steps with many auto-resets and
a physics blow-up; every array the env returns must equal the reference's exactly
(same dtype, same bytes), and must still be unchanged after later steps (the env
never writes into arrays it returned).
"""

from __future__ import annotations

import numpy as np
import pytest

import envs
from envs.core import ACTOR_OBS_KEY


def _clipped(qpos, qvel, first):
    return np.concatenate([qpos[:, first:], np.clip(qvel, -10.0, 10.0)], axis=1).astype(np.float32)


def _plain(qpos, qvel, first):
    return np.concatenate([qpos[:, first:], qvel], axis=1).astype(np.float32)


def _hopper_healthy(cfg, qpos, qvel):
    (s_lo, s_hi), (z_lo, z_hi), (a_lo, a_hi) = (
        cfg["healthy_state_range"],
        cfg["healthy_z_range"],
        cfg["healthy_angle_range"],
    )
    rest = np.concatenate([qpos, qvel], axis=1)[:, 2:]  # Gymnasium's state_vector()[2:]
    z, angle = qpos[:, 1], qpos[:, 2]
    in_range = np.all((s_lo < rest) & (rest < s_hi), axis=1)
    return in_range & (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)


def _walker_healthy(cfg, qpos, qvel):
    (z_lo, z_hi), (a_lo, a_hi) = cfg["healthy_z_range"], cfg["healthy_angle_range"]
    z, angle = qpos[:, 1], qpos[:, 2]
    return (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)


def _ant_healthy(cfg, qpos, qvel):
    lo, hi = cfg["healthy_z_range"]
    finite = np.all(np.isfinite(np.concatenate([qpos, qvel], axis=1)), axis=1)
    return finite & (lo <= qpos[:, 2]) & (qpos[:, 2] <= hi)


def _humanoid_healthy(cfg, qpos, qvel):
    lo, hi = cfg["healthy_z_range"]
    return (lo < qpos[:, 2]) & (qpos[:, 2] < hi)


# observation from (qpos, qvel), healthy rule (None: always healthy), forward position: qpos column or mass centre
RULES = {
    "hopper": (lambda q, v: _clipped(q, v, 1), _hopper_healthy, "qpos"),
    "walker2d": (lambda q, v: _clipped(q, v, 1), _walker_healthy, "qpos"),
    "halfcheetah": (lambda q, v: _plain(q, v, 1), None, "qpos"),
    "ant": (lambda q, v: _plain(q, v, 2), _ant_healthy, "qpos"),
    "humanoid": (lambda q, v: _plain(q, v, 2), _humanoid_healthy, "mass_centre"),
}


class ReferenceEnv:
    """Gymnasium's rules over a pool, step by step as written, on its own copy of the task's env.

    Only the copy's model, pools, RNG and reset distribution are used; all the step's
    bookkeeping is here.
    """

    def __init__(self, name: str, n: int, seed: int, **overrides):
        self.inner = envs.make(name, n, seed=seed, nthread=1, **overrides)
        self.observe_rule, self.healthy_rule, self.forward = RULES[name]
        inner = self.inner
        self.nq, self.nv, self.n = inner.model.nq, inner.model.nv, n
        self.dt = inner.model.opt.timestep * inner.task.frame_skip
        self.state = np.zeros((n, inner.pool.nstate))
        self.sensors = np.zeros((n, inner.model.nsensordata))
        self.length = np.zeros(n, dtype=np.int64)
        self.returns = np.zeros(n)
        self.ahead: list[np.ndarray] = []  # new episodes' states drawn ahead, one row each, in draw order
        self.start(np.arange(n))
        self.obs = self.observe(self.state, self.sensors)

    def qpos_qvel(self, state):
        return state[:, 1 : 1 + self.nq], state[:, 1 + self.nq : 1 + self.nq + self.nv]

    def observe(self, state, sensors):
        return self.observe_rule(*self.qpos_qvel(state))

    def forward_position(self, state, sensors):
        return sensors[:, 0] if self.forward == "mass_centre" else state[:, 1]

    def start(self, rows, states=None):
        """New episodes on `rows`: Gymnasium's reset noise (or the given states), sensors of the new state."""
        task, inner = self.inner.task, self.inner
        if states is None and len(self.ahead) >= len(rows):
            states, self.ahead = np.array(self.ahead[: len(rows)]), self.ahead[len(rows) :]
        elif states is None:
            states = self.draw(len(rows))
        if task.fresh_sensors:
            states, self.sensors[rows] = inner.pool.reset(rows.astype(np.int32), states)
        self.state[rows] = states
        self.length[rows] = 0
        self.returns[rows] = 0.0

    def states(self, qpos, qvel):
        """Full physics state rows at time 0 from (qpos, qvel) rows."""
        states = np.zeros((qpos.shape[0], self.inner.pool.nstate))
        states[:, 1 : 1 + self.nq], states[:, 1 + self.nq : 1 + self.nq + self.nv] = qpos, qvel
        return states

    def draw(self, count):
        """`count` new episodes' states: Gymnasium's reset noise, drawn with the env copy's RNG."""
        inner = self.inner
        return self.states(*inner.task.reset_qpos_qvel(inner.rng, count, inner.model.qpos0, self.nv))

    def set_physics_state(self, qpos, qvel):
        self.start(np.arange(self.n), self.states(qpos, qvel))
        self.obs = self.observe(self.state, self.sensors)

    def step(self, actions):
        cfg, task = self.inner.task.cfg, self.inner.task
        actions = np.asarray(actions, dtype=np.float64)
        before = self.state
        state, sensors = self.inner.pool.step(
            before,
            nstep=task.frame_skip,
            control=actions,
            return_sensor=True,
            post_step_forward_sensor=task.fresh_sensors,
        )
        stopped_early = np.abs((state[:, 0] - before[:, 0]) - self.dt) > 0.5 * self.inner.model.opt.timestep
        failed = stopped_early | ~np.all(np.isfinite(state), axis=1)
        velocity = (self.forward_position(state, sensors) - self.forward_position(before, self.sensors)) / self.dt
        qpos, qvel = self.qpos_qvel(state)
        healthy = np.ones(self.n, bool) if self.healthy_rule is None else self.healthy_rule(cfg, qpos, qvel)
        terms = {
            "reward_forward": cfg["forward_reward_weight"] * velocity,
            "reward_ctrl": -cfg["ctrl_cost_weight"] * np.einsum("ij,ij->i", actions, actions),
        }
        if "healthy_reward" in cfg:
            terms["reward_survive"] = cfg["healthy_reward"] * healthy
        terms = {k: np.where(failed, 0.0, v) for k, v in terms.items()}
        reward = sum(terms.values())
        terminated = cfg.get("terminate_when_unhealthy", False) & ~healthy & ~failed
        self.length += 1
        truncated = ((self.length >= task.max_episode_steps) & ~terminated) | failed
        obs = np.where(failed[:, None], self.obs, self.observe(state, sensors))
        self.returns += reward
        self.state, self.sensors = state, sensors
        out = {
            "reward": reward.astype(np.float32),
            "terminated": terminated,
            "truncated": truncated,
            "final_obs": obs.copy(),
            "episode_return": self.returns.copy(),
            "episode_length": self.length.copy(),
            "physics_failed": failed,
            **{"term/" + k: v for k, v in terms.items()},
        }
        done = np.flatnonzero(terminated | truncated)
        if done.size:
            self.start(done)
            obs[done] = self.observe(self.state[done], self.sensors[done])
        self.obs = out["obs"] = obs
        if len(self.ahead) < self.n:  # after the step: draw the next episodes' states ahead
            self.ahead += list(self.draw(self.n))
        return out


def _flat(state) -> dict[str, np.ndarray]:
    info = state.info
    return {
        "obs": state.obs[ACTOR_OBS_KEY],
        "reward": state.reward,
        "terminated": state.terminated,
        "truncated": state.truncated,
        "final_obs": info["final_obs"][ACTOR_OBS_KEY],
        "episode_return": info["episode_return"],
        "episode_length": info["episode_length"],
        "physics_failed": info["physics_failed"],
        **{"term/" + k: v for k, v in info["reward_terms"].items()},
    }


def _assert_identical(got: dict, want: dict, where: str) -> None:
    assert sorted(got) == sorted(want), where
    for key, value in want.items():
        assert got[key].dtype == value.dtype and got[key].shape == value.shape, f"{where}: {key}"
        assert got[key].tobytes() == value.tobytes(), f"{where}: {key} differs"


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("hopper", {}),
        ("walker2d", {}),
        ("halfcheetah", {"max_episode_steps": 37}),
        ("ant", {"healthy_z_range": (0.3, 0.9)}),
        ("humanoid", {}),
        ("hopper", {"terminate_when_unhealthy": False, "max_episode_steps": 50}),
    ],
)
def test_step_equals_the_reference_bit_for_bit(name, overrides):
    n, steps, seed = 12, 300, 4
    env = envs.make(name, n, seed=seed, nthread=1, **overrides)
    ref = ReferenceEnv(name, n, seed, **overrides)
    rng = np.random.default_rng(9)
    first = env.reset().obs[ACTOR_OBS_KEY]
    assert first.tobytes() == ref.obs.tobytes()
    returned, resets = [], 0
    for t in range(steps):
        if t == 40:  # a blow-up on one row: physics failure, truncated, reset
            qpos, qvel = env.physics_qpos_qvel()
            qvel[3] = 1e12
            env.set_physics_state(qpos, qvel)
            ref.set_physics_state(qpos, qvel)
        # beyond the control range (MuJoCo clamps; the control cost does not), float32 and float64
        actions = rng.uniform(1.2 * env.spec.action_low, 1.2 * env.spec.action_high, size=(n, env.spec.action_dim))
        got = _flat(env.step(actions.astype(np.float32) if t % 2 else actions))
        want = ref.step(actions.astype(np.float32) if t % 2 else actions)
        _assert_identical(got, want, f"{name} step {t}")
        returned.append((got, {k: v.copy() for k, v in got.items()}))
        resets += int((want["terminated"] | want["truncated"]).sum())
    assert resets > 20 and returned[40][0]["physics_failed"].sum() == 1
    for t, (arrays, copies) in enumerate(returned):  # later steps wrote into no array an earlier one returned
        _assert_identical(arrays, copies, f"{name} step {t} after the rollout")
    env.close()
    ref.inner.close()
