"""Humanoid: Gymnasium `Humanoid-v5` without the terms the pool cannot provide.

Matches `Humanoid-v5` with `include_cinert_in_observation=False,
include_cvel_in_observation=False, include_qfrc_actuator_in_observation=False,
include_cfrc_ext_in_observation=False, contact_cost_weight=0`: the observation
is qpos[2:] and qvel (45 entries). The forward reward uses Gymnasium's mass
centre (body-mass-weighted `xipos`), read through a `subtreecom` sensor on the
torso (every body descends from it; the world body has no mass), evaluated
on the final state (`fresh_sensors`: one extra `mj_forward` per step, about 5%
of an RK4 step of 5 substeps). Gymnasium reads `data.xipos` after `mj_step`,
which MuJoCo leaves at the last RK4 stage's kinematics, an O(dt^2)
approximation of the final state; the parity test states that tolerance.
Frame skip 5,
forward weight 1.25, healthy reward 5, ctrl cost 0.1, healthy z in (1, 2),
reset noise 0.01 uniform.
"""

from __future__ import annotations

import mujoco
import numpy as np

from envs.gymnasium.reward_bounds import locomotion_reward_range
from envs.mujoco.task import MujocoTask, PhysicsView
from envs.options import Flag, Interval, Real


class Humanoid(MujocoTask):
    """3D bipedal locomotion (Humanoid-v5)."""

    name = "humanoid"
    gymnasium_id = "Humanoid-v5"
    xml_file = "humanoid.xml"
    frame_skip = 5
    fresh_sensors = True
    options = dict(  # types and bounds: envs/gymnasium/__init__.py
        forward_reward_weight=Real(1.25, ge=0),
        ctrl_cost_weight=Real(0.1, ge=0),
        healthy_reward=Real(5.0),
        terminate_when_unhealthy=Flag(True),
        healthy_z_range=Interval(1.0, 2.0),
        reset_noise_scale=Real(1e-2, ge=0),
    )
    gymnasium_fixed_kwargs = dict(
        include_cinert_in_observation=False,
        include_cvel_in_observation=False,
        include_qfrc_actuator_in_observation=False,
        include_cfrc_ext_in_observation=False,
        contact_cost_weight=0.0,
    )

    @property
    def reward_range(self) -> tuple[float, float]:
        """Per-step reward bounds (envs/gymnasium/reward_bounds.py): (-4.022, 20) with the default options."""
        # forward velocity (weight 1.25, of the mass centre): 12 m/s, well above the best runs' speed;
        # control cost 0.1 |a|^2 <= 0.1 x 17 x 0.4^2 = 0.272 (17 actions in [-0.4, 0.4]), healthy bonus 5,
        # no contact cost (contact_cost_weight=0).
        # docs/decisions.md, "Per-step reward bounds of the Gymnasium tasks"
        return locomotion_reward_range(self.cfg, max_forward_speed=12.0, max_action_sq=17 * 0.4**2)

    def build_spec(self) -> mujoco.MjSpec:
        spec = super().build_spec()
        spec.add_sensor(
            name="mass_center",
            type=mujoco.mjtSensor.mjSENS_SUBTREECOM,
            objtype=mujoco.mjtObj.mjOBJ_BODY,
            objname="torso",
        )
        return spec

    def observe(self, p: PhysicsView) -> np.ndarray:
        return p.qpos_qvel[:, 2:].astype(np.float32)  # qpos[2:], qvel

    def progress(self, p: PhysicsView) -> np.ndarray:
        return p.sensordata[:, 0:2]

    def is_healthy(self, p: PhysicsView) -> np.ndarray:
        lo, hi = self.cfg["healthy_z_range"]
        z = p.qpos[:, 2]
        return (lo < z) & (z < hi)

    def reward_terms(self, p, velocity, action, healthy):
        return {
            "reward_forward": self.cfg["forward_reward_weight"] * velocity[:, 0],
            "reward_ctrl": -self.control_cost(action),
            "reward_survive": self.cfg["healthy_reward"] * healthy,
        }
