"""Ant: Gymnasium `Ant-v5` with `include_cfrc_ext_in_observation=False, contact_cost_weight=0`.

The pool returns physics state and sensordata only, so `cfrc_ext` (external
contact wrenches, 78 observation entries and the contact cost) is not
available; these are the Gymnasium keywords that drop it. Everything else is
Ant-v5's: frame skip 5, forward reward from the torso position, healthy
reward 1, ctrl cost 0.5, healthy z in [0.2, 1.0], reset noise 0.1 (uniform
qpos, normal qvel).

Forward velocity: Gymnasium differences `data.body("torso").xpos` across the
step. Ant integrates with RK4, and after `mj_step` MuJoCo leaves `xpos` at the
last RK4 stage's kinematics, an O(dt^2) approximation of the final position.
The torso is the free joint's body, so its exact final position is qpos[0:3]:
this task differences that (the parity test states the resulting tolerance).
"""

from __future__ import annotations

import numpy as np

from envs.gymnasium.reward_bounds import locomotion_reward_range
from envs.mujoco.task import MujocoTask, PhysicsView, rows_finite
from envs.options import Flag, Interval, Real


class Ant(MujocoTask):
    """Quadruped locomotion (Ant-v5)."""

    name = "ant"
    gymnasium_id = "Ant-v5"
    xml_file = "ant.xml"
    frame_skip = 5
    options = dict(  # types and bounds: envs/gymnasium/__init__.py
        forward_reward_weight=Real(1.0, ge=0),
        ctrl_cost_weight=Real(0.5, ge=0),
        healthy_reward=Real(1.0),
        terminate_when_unhealthy=Flag(True),
        healthy_z_range=Interval(0.2, 1.0),
        reset_noise_scale=Real(0.1, ge=0),
    )
    gymnasium_fixed_kwargs = dict(include_cfrc_ext_in_observation=False, contact_cost_weight=0.0)

    @property
    def reward_range(self) -> tuple[float, float]:
        """Per-step reward bounds (envs/gymnasium/reward_bounds.py): (-7, 16) with the default options."""
        # forward velocity: 15 m/s, well above the best runs' speed; control cost 0.5 |a|^2 <= 0.5 x 8
        # (eight actions in [-1, 1]), healthy bonus 1, no contact cost.
        # docs/decisions.md, "Per-step reward bounds of the Gymnasium tasks"
        return locomotion_reward_range(self.cfg, max_forward_speed=15.0, max_action_sq=8.0)

    def reset_qpos_qvel(self, rng, n, qpos0, nv):
        s = self.cfg["reset_noise_scale"]
        qpos = qpos0 + rng.uniform(-s, s, size=(n, qpos0.shape[0]))
        qvel = s * rng.standard_normal(size=(n, nv))
        return qpos, qvel

    def observe(self, p: PhysicsView) -> np.ndarray:
        return p.qpos_qvel[:, 2:].astype(np.float32)  # qpos[2:], qvel

    def progress(self, p: PhysicsView) -> np.ndarray:
        return p.qpos[:, 0:2]

    def is_healthy(self, p: PhysicsView) -> np.ndarray:
        lo, hi = self.cfg["healthy_z_range"]
        z = p.qpos[:, 2]
        finite = rows_finite(p.qpos_qvel)
        return finite & (lo <= z) & (z <= hi)

    def reward_terms(self, p, velocity, action, healthy):
        return {
            "reward_forward": self.cfg["forward_reward_weight"] * velocity[:, 0],
            "reward_ctrl": -self.control_cost(action),
            "reward_survive": self.cfg["healthy_reward"] * healthy,
        }
