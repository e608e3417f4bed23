"""Quadruped run: dm_control's `quadruped-run`, complete (IMU, force/torque and velocimeter are suite sensors).

The model is dm_control's `make_model(floor_size=100)`: walls, ball, target,
terrain and rangefinders removed. Physics timestep 0.005 s, 4 substeps per
step (control timestep 0.02 s), 1000 steps. Observation (78), in the suite's
order: egocentric state (44: hinge qpos 16, hinge qvel 16, actuator
activations 12), torso velocity (velocimeter, 3), torso upright (torso zz, 1),
IMU (accelerometer and gyro in sensor order, 6), arcsinh of the toe force and
torque sensors in sensor order (24). Accelerometer, force and torque are
acceleration-stage sensors, taken from the last substep as in dm_control.
Reward: tolerance(torso zz, (1, inf), margin 2, linear, 0) times
tolerance(velocimeter x, (5, inf), margin 5, linear, 0.5).

Initial state: a uniformly random orientation (normalised Gaussian quaternion)
at x = y = 0, other joints at qpos0, at rest; the height is the first of 0,
0.01, 0.02, ... m (summed as dm_control sums it) at which the body has no
contact. dm_control reads `data.ncon` at every height in turn; here a contact
sensor that matches every contact reports the same count and the deepest
contact's distance, all pending rows are tried at once (one pool `reset`, a
threaded mj_forward per row), and heights at which the deepest contact must
still penetrate are skipped: the same first height in a few rounds instead of
one per centimetre.
"""

from __future__ import annotations

import mujoco
import numpy as np

from envs.dmc.rewards import tolerance
from envs.dmc.task import (
    HINGE,
    DmcTask,
    add_contact_counter,
    add_frame_sensor,
    as_index,
    count_contacts,
    sensor_columns,
    sensor_names_of_types,
)
from envs.mujoco.task import PhysicsView

RUN_SPEED = 5.0
TIME_LIMIT_S = 20.0
MAX_HEIGHT_ATTEMPTS = 10000
HEIGHTS = np.cumsum(np.r_[0.0, np.full(MAX_HEIGHT_ATTEMPTS - 1, 0.01)])
"""the heights dm_control tries, 0 then `+= 0.01` each attempt (cumsum adds in the same order)"""


class QuadrupedRun(DmcTask):
    """Four-legged running forward (dm_control `quadruped-run`)."""

    name = "dmc_quadruped_run"
    dm_control_id = "quadruped-run"
    xml_file = "quadruped.xml"
    observation_keys = ("egocentric_state", "torso_velocity", "torso_upright", "imu", "force_torque")
    frame_skip = 4
    desired_speed = RUN_SPEED

    def edit_spec(self, spec: mujoco.MjSpec) -> None:
        floor = TIME_LIMIT_S * self.desired_speed
        spec.geom("floor").size = [floor, floor, 0.5]
        for wall in ("wall_px", "wall_py", "wall_nx", "wall_ny"):
            spec.delete(spec.geom(wall))
        spec.delete(spec.body("ball"))
        spec.delete(spec.site("target"))
        spec.delete(spec.geom("terrain"))
        for sensor in list(spec.sensors):
            if sensor.type == mujoco.mjtSensor.mjSENS_RANGEFINDER:
                spec.delete(sensor)
        add_frame_sensor(spec, "zaxis", "torso")
        add_contact_counter(spec)

    def bind(self, model: mujoco.MjModel) -> None:
        super().bind(model)
        hinges = model.jnt_type == HINGE
        self._hinge_qpos = as_index(model.jnt_qposadr[hinges])
        self._hinge_qvel = as_index(model.jnt_dofadr[hinges])
        self._velocimeter_cols = as_index(sensor_columns(model, "velocimeter"))
        self._speed_col = int(sensor_columns(model, "velocimeter")[0])
        self._upright_cols = as_index(sensor_columns(model, "dmc_zaxis_torso")[2:3])
        self._upright_col = int(sensor_columns(model, "dmc_zaxis_torso")[2])
        S = mujoco.mjtSensor
        imu = sensor_names_of_types(model, S.mjSENS_GYRO, S.mjSENS_ACCELEROMETER)
        self._imu_cols = as_index(sensor_columns(model, *imu))
        force_torque = sensor_names_of_types(model, S.mjSENS_FORCE, S.mjSENS_TORQUE)
        self._force_torque_cols = as_index(sensor_columns(model, *force_torque))
        root = model.joint("root")
        self._root_adr = int(root.qposadr[0])

    def initial_states(self, env, env_ids):
        n = len(env_ids)
        qpos, qvel = self.default_states(env, n)
        orientation = env.rng.standard_normal((n, 4))
        qpos[:, self._root_adr + 3 : self._root_adr + 7] = orientation / np.linalg.norm(
            orientation, axis=1, keepdims=True
        )
        qpos[:, self._root_adr : self._root_adr + 3] = 0.0
        states = env.states_from(qpos, qvel)
        z_col = 1 + self._root_adr + 2
        attempt = np.zeros(n, dtype=np.int64)
        pending = np.arange(n)
        while pending.size:
            if attempt[pending].max() >= MAX_HEIGHT_ATTEMPTS:
                raise RuntimeError(f"no contact-free height for {pending.size} quadruped orientations")
            z = HEIGHTS[attempt[pending]]
            states[pending, z_col] = z
            contacts, deepest = count_contacts(env, env_ids[pending], states[pending])
            touching = contacts > 0
            # Raising the body by d raises every floor contact's distance by d (self-contacts never end), so
            # heights less than the deepest penetration above this one still touch: skip them, keeping
            # 1 mm to spare for the collision routines' tolerance; the scan goes on 1 cm at a time from there.
            skip_to = np.searchsorted(HEIGHTS, z[touching] - deepest[touching] - 1e-3)
            pending = pending[touching]
            attempt[pending] = np.maximum(attempt[pending] + 1, skip_to)
        return states

    def observe(self, p: PhysicsView) -> np.ndarray:
        sd = p.sensordata
        return np.concatenate(
            [
                p.qpos[:, self._hinge_qpos],
                p.qvel[:, self._hinge_qvel],
                p.act,
                sd[:, self._velocimeter_cols],
                sd[:, self._upright_cols],
                sd[:, self._imu_cols],
                np.arcsinh(sd[:, self._force_torque_cols]),
            ],
            axis=1,
            dtype=np.float32,
        )

    def reward_factors(self, p, action):
        sd = p.sensordata
        upright = sd[:, self._upright_col]
        speed = sd[:, self._speed_col]
        return {
            "upright": tolerance(upright, (1.0, float("inf")), 2.0, "linear", 0.0),
            "move": tolerance(speed, (self.desired_speed, float("inf")), self.desired_speed, "linear", 0.5),
        }

    def reward(self, terms):
        return terms["upright"] * terms["move"]
