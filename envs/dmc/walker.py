"""Walker run: dm_control's `walker-run`, complete (body orientations and height from frame sensors).

Physics timestep 0.0025 s, 10 substeps per step (control timestep 0.025 s),
1000 steps. Observation (24), in the suite's order: orientations (14: the xx
and xz entries of every body's rotation matrix, i.e. the x components of its x
and z axes, bodies in id order), torso height (1), velocity qvel (9).
Reward: stand = (3 tolerance(torso z, (1.2, inf), margin 0.6) + (1 + torso zz) / 2) / 4,
times (5 tolerance(centre-of-mass velocity x, (8, inf), margin 4, linear, 0.5) + 1) / 6.
Initial state: `randomize_limited_and_rotational_joints` (limited joints in
range, the torso's unlimited hinge in [-pi, pi]), at rest, no rejection.
"""

from __future__ import annotations

import mujoco
import numpy as np

from envs.dmc.rewards import tolerance
from envs.dmc.task import DmcTask, add_frame_sensor, sensor_columns
from envs.mujoco.task import PhysicsView

STAND_HEIGHT = 1.2
RUN_SPEED = 8.0


class WalkerRun(DmcTask):
    """Planar biped running forward (dm_control `walker-run`)."""

    name = "dmc_walker_run"
    dm_control_id = "walker-run"
    xml_file = "walker.xml"
    observation_keys = ("orientations", "height", "velocity")
    frame_skip = 10
    move_speed = RUN_SPEED

    def edit_spec(self, spec: mujoco.MjSpec) -> None:
        for body in spec.bodies:
            if body.name != "world":
                add_frame_sensor(spec, "xaxis", body.name)
                add_frame_sensor(spec, "zaxis", body.name)
        add_frame_sensor(spec, "pos", "torso")

    def bind(self, model: mujoco.MjModel) -> None:
        super().bind(model)
        orientation = []
        for body in range(1, model.nbody):
            name = model.body(body).name
            # xmat[body, ['xx', 'xz']]: row x of the rotation matrix = x components of its x and z axes
            orientation += [
                sensor_columns(model, f"dmc_xaxis_{name}")[0],
                sensor_columns(model, f"dmc_zaxis_{name}")[0],
            ]
        self._orientation_cols = np.array(orientation)
        self._height_col = sensor_columns(model, "dmc_pos_torso")[2:3]
        self._upright_col = int(sensor_columns(model, "dmc_zaxis_torso")[2])
        self._speed_col = int(sensor_columns(model, "torso_subtreelinvel")[0])

    def initial_states(self, env, env_ids):
        return self.randomized_joint_states(env, env_ids)

    def observe(self, p: PhysicsView) -> np.ndarray:
        sd = p.sensordata
        return np.concatenate(
            [sd[:, self._orientation_cols], sd[:, self._height_col], p.qvel], axis=1, dtype=np.float32
        )

    def reward_factors(self, p, action):
        sd = p.sensordata
        height = sd[:, self._height_col[0]]
        return {
            "standing": tolerance(height, (STAND_HEIGHT, float("inf")), STAND_HEIGHT / 2),
            "upright": (1 + sd[:, self._upright_col]) / 2,
            "move": tolerance(
                sd[:, self._speed_col], (self.move_speed, float("inf")), self.move_speed / 2, "linear", 0.5
            ),
        }

    def reward(self, terms):
        stand = (3 * terms["standing"] + terms["upright"]) / 4
        return stand * (5 * terms["move"] + 1) / 6
