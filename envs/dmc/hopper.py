"""Hopper hop: dm_control's `hopper-hop`, complete (touch sensors and body heights come from sensors).

Physics timestep 0.005 s, 4 substeps per step (control timestep 0.02 s), 1000
steps. Observation (15), in the suite's order: position qpos[1:] (6), velocity
qvel (7), touch log1p(toe, heel) (2; acceleration-stage sensors, from the last
substep as in dm_control). Reward: standing (torso minus foot height of their
inertial frames within [0.6, 2], no margin: 0 or 1) times tolerance(centre-of-
mass velocity x, (2, inf), margin 1, linear, 0.5). Initial state:
`randomize_limited_and_rotational_joints`, at rest, no rejection.
"""

from __future__ import annotations

import mujoco
import numpy as np

from envs.dmc.rewards import tolerance
from envs.dmc.task import (
    DmcTask,
    add_frame_sensor,
    as_index,
    sensor_columns,
)
from envs.mujoco.task import PhysicsView

STAND_HEIGHT = 0.6
HOP_SPEED = 2.0


class HopperHop(DmcTask):
    """Planar one-legged hopping forward (dm_control `hopper-hop`)."""

    name = "dmc_hopper_hop"
    dm_control_id = "hopper-hop"
    xml_file = "hopper.xml"
    observation_keys = ("position", "velocity", "touch")
    frame_skip = 4

    def edit_spec(self, spec: mujoco.MjSpec) -> None:
        add_frame_sensor(spec, "pos", "torso", inertial=True)
        add_frame_sensor(spec, "pos", "foot", inertial=True)

    def bind(self, model: mujoco.MjModel) -> None:
        super().bind(model)
        self._touch_cols = as_index(sensor_columns(model, "touch_toe", "touch_heel"))
        self._torso_z = int(sensor_columns(model, "dmc_pos_torso_inertial")[2])
        self._foot_z = int(sensor_columns(model, "dmc_pos_foot_inertial")[2])
        self._speed_col = int(sensor_columns(model, "torso_subtreelinvel")[0])

    def initial_states(self, env, env_ids):
        return self.randomized_joint_states(env, env_ids)

    def observe(self, p: PhysicsView) -> np.ndarray:
        touch = np.log1p(p.sensordata[:, self._touch_cols])
        return np.concatenate([p.qpos[:, 1:], p.qvel, touch], axis=1, dtype=np.float32)

    def reward_factors(self, p, action):
        sd = p.sensordata
        height = sd[:, self._torso_z] - sd[:, self._foot_z]
        return {
            "standing": tolerance(height, (STAND_HEIGHT, 2.0)),
            "hopping": tolerance(sd[:, self._speed_col], (HOP_SPEED, float("inf")), HOP_SPEED / 2, "linear", 0.5),
        }

    def reward(self, terms):
        return terms["standing"] * terms["hopping"]
