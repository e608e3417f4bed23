"""Walker2d: Gymnasium `Walker2d-v5` (its `walker2d_v5.xml`), complete.

Frame skip 4, forward weight 1, healthy reward 1, ctrl cost 1e-3; healthy when
z in (0.8, 2) and the torso angle in (-1, 1); reset noise 5e-3 uniform;
observation qpos[1:] and qvel clipped to [-10, 10] (17 entries).
"""

from __future__ import annotations

import numpy as np

from envs.gymnasium.reward_bounds import locomotion_reward_range
from envs.mujoco.task import MujocoTask, PhysicsView, clip
from envs.options import Flag, Interval, Real


class Walker2d(MujocoTask):
    """Planar bipedal walking (Walker2d-v5)."""

    name = "walker2d"
    gymnasium_id = "Walker2d-v5"
    xml_file = "walker2d_v5.xml"
    frame_skip = 4
    options = dict(  # types and bounds: envs/gymnasium/__init__.py
        forward_reward_weight=Real(1.0, ge=0),
        ctrl_cost_weight=Real(1e-3, ge=0),
        healthy_reward=Real(1.0),
        terminate_when_unhealthy=Flag(True),
        healthy_z_range=Interval(0.8, 2.0),
        healthy_angle_range=Interval(-1.0, 1.0),
        reset_noise_scale=Real(5e-3, ge=0),
    )

    @property
    def reward_range(self) -> tuple[float, float]:
        """Per-step reward bounds (envs/gymnasium/reward_bounds.py): (-3.006, 11) with the default options."""
        # forward velocity: 10 m/s, well above strong policies' speed; control cost 1e-3 |a|^2 <= 1e-3 x 6
        # (six actions in [-1, 1]), healthy bonus 1.
        # docs/decisions.md, "Per-step reward bounds of the Gymnasium tasks"
        return locomotion_reward_range(self.cfg, max_forward_speed=10.0, max_action_sq=6.0)

    def observe(self, p: PhysicsView) -> np.ndarray:
        return np.concatenate([p.qpos[:, 1:], clip(p.qvel, -10.0, 10.0)], axis=1, dtype=np.float32)

    def is_healthy(self, p: PhysicsView) -> np.ndarray:
        z_lo, z_hi = self.cfg["healthy_z_range"]
        a_lo, a_hi = self.cfg["healthy_angle_range"]
        z, angle = p.qpos[:, 1], p.qpos[:, 2]
        return (z_lo < z) & (z < z_hi) & (a_lo < angle) & (angle < a_hi)

    def reward_terms(self, p, velocity, action, healthy):
        return {
            "reward_forward": self.cfg["forward_reward_weight"] * velocity[:, 0],
            "reward_ctrl": -self.control_cost(action),
            "reward_survive": self.cfg["healthy_reward"] * healthy,
        }
