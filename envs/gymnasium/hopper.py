"""Hopper: Gymnasium `Hopper-v5`, complete (every term is in the state).

Frame skip 4, forward weight 1, healthy reward 1, ctrl cost 1e-3; healthy when
every qpos[2:]/qvel entry is in (-100, 100), z in (0.7, inf) and the torso
angle in (-0.2, 0.2); reset noise 5e-3 uniform; observation qpos[1:] and qvel
clipped to [-10, 10] (11 entries).
"""

from __future__ import annotations

import numpy as np

from envs.gymnasium.reward_bounds import locomotion_reward_range
from envs.mujoco.task import MujocoTask, PhysicsView, clip, rows_within
from envs.options import Flag, Interval, Real


class Hopper(MujocoTask):
    """Planar one-legged hopping (Hopper-v5)."""

    name = "hopper"
    gymnasium_id = "Hopper-v5"
    xml_file = "hopper.xml"
    frame_skip = 4
    options = dict(  # types and bounds: envs/gymnasium/__init__.py
        forward_reward_weight=Real(1.0, ge=0),
        ctrl_cost_weight=Real(1e-3, ge=0),
        healthy_reward=Real(1.0),
        terminate_when_unhealthy=Flag(True),
        healthy_state_range=Interval(-100.0, 100.0),
        healthy_z_range=Interval(0.7, float("inf")),
        healthy_angle_range=Interval(-0.2, 0.2),
        reset_noise_scale=Real(5e-3, ge=0),
    )

    @property
    def reward_range(self) -> tuple[float, float]:
        """Per-step reward bounds (envs/gymnasium/reward_bounds.py): (-3.003, 7) with the default options."""
        # forward velocity: 6 m/s, well above strong policies' speed; control cost 1e-3 |a|^2 <= 1e-3 x 3
        # (three actions in [-1, 1]), healthy bonus 1.
        # docs/decisions.md, "Per-step reward bounds of the Gymnasium tasks"
        return locomotion_reward_range(self.cfg, max_forward_speed=6.0, max_action_sq=3.0)

    def observe(self, p: PhysicsView) -> np.ndarray:
        return np.concatenate([p.qpos[:, 1:], clip(p.qvel, -10.0, 10.0)], axis=1, dtype=np.float32)

    def is_healthy(self, p: PhysicsView) -> np.ndarray:
        s_lo, s_hi = self.cfg["healthy_state_range"]
        z_lo, z_hi = self.cfg["healthy_z_range"]
        a_lo, a_hi = self.cfg["healthy_angle_range"]
        healthy_state = rows_within(p.qpos_qvel[:, 2:], s_lo, s_hi)  # Gymnasium's state_vector()[2:]
        z, angle = p.qpos[:, 1], p.qpos[:, 2]
        return healthy_state & (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)

    def reward_terms(self, p, velocity, action, healthy):
        return {
            "reward_forward": self.cfg["forward_reward_weight"] * velocity[:, 0],
            "reward_ctrl": -self.control_cost(action),
            "reward_survive": self.cfg["healthy_reward"] * healthy,
        }
