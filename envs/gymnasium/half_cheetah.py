"""HalfCheetah: Gymnasium `HalfCheetah-v5`, complete (every term is in the state).

Frame skip 5, forward weight 1, ctrl cost 0.1, no termination, reset noise
0.1 (uniform qpos, normal qvel); observation qpos[1:] and qvel (17 entries).
"""

from __future__ import annotations

import numpy as np

from envs.gymnasium.reward_bounds import locomotion_reward_range
from envs.mujoco.task import MujocoTask, PhysicsView
from envs.options import Real


class HalfCheetah(MujocoTask):
    """Planar running (HalfCheetah-v5)."""

    name = "halfcheetah"
    gymnasium_id = "HalfCheetah-v5"
    xml_file = "half_cheetah.xml"
    frame_skip = 5
    options = dict(  # types and bounds: envs/gymnasium/__init__.py
        forward_reward_weight=Real(1.0, ge=0),
        ctrl_cost_weight=Real(0.1, ge=0),
        reset_noise_scale=Real(0.1, ge=0),
    )

    @property
    def reward_range(self) -> tuple[float, float]:
        """Per-step reward bounds (envs/gymnasium/reward_bounds.py): (-3.6, 25) with the default options."""
        # forward velocity: 25 m/s, well above the best runs' speed; control cost 0.1 |a|^2 <= 0.1 x 6 (six
        # actions in [-1, 1]); no healthy bonus, no termination.
        # docs/decisions.md, "Per-step reward bounds of the Gymnasium tasks"
        return locomotion_reward_range(self.cfg, max_forward_speed=25.0, max_action_sq=6.0)

    def reset_qpos_qvel(self, rng, n, qpos0, nv):
        s = self.cfg["reset_noise_scale"]
        qpos = qpos0 + rng.uniform(-s, s, size=(n, qpos0.shape[0]))
        qvel = s * rng.standard_normal(size=(n, nv))
        return qpos, qvel

    def observe(self, p: PhysicsView) -> np.ndarray:
        return p.qpos_qvel[:, 1:].astype(np.float32)  # qpos[1:], qvel

    def reward_terms(self, p, velocity, action, healthy):
        return {
            "reward_forward": self.cfg["forward_reward_weight"] * velocity[:, 0],
            "reward_ctrl": -self.control_cost(action),
        }
