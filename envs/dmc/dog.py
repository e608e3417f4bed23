"""Dog trot and run: dm_control's `dog-trot` / `dog-run`, complete (every term from the state and sensors).

The model is dm_control's `make_model(floor_size=15 * speed, remove_ball=True)`:
ball, target, their cameras and the walls removed. Physics timestep 0.005 s
(4 noslip iterations), 3 substeps per step (control timestep 0.015 s), 1000
steps; 38 actuators with first-order activation dynamics, so the state
carries 38 activations. Observation (223), in the suite's order: hinge joint
angles (73), hinge joint velocities (73), torso and pelvis height (2),
z projection (9: the z rows of the skull, torso and pelvis rotation matrices),
centre-of-mass velocity in the torso frame (3), inertial sensors (accelerometer,
velocimeter, gyro: 9), foot forces (12), touch sensors (4), actuator
activations (38). Accelerometer, force and touch are acceleration-stage
sensors, taken from the last substep as in dm_control.

Reward: the product of torso and pelvis height (gaussian tolerance above 0.9x
their heights in the default pose, margin the same), uprightness of skull,
torso and pelvis (tolerance(zz, (cos 30 deg, inf), linear, 0) each), foot
touch (tolerance(sum of touch, (body weight, inf), linear, 0.9)) and
(4 tolerance(forward com velocity, (speed, 2 speed), margin max(1, speed),
linear, 0) + 1) / 5, with speed 3 (trot) or 9 (run).

Initial state: the default pose (qpos0) turned to a uniform random heading,
root velocities x, y and yaw ~ N(0, 2^2), activations uniform in the control
range.
"""

from __future__ import annotations

import mujoco
import numpy as np

from envs.dmc.rewards import tolerance
from envs.dmc.task import HINGE, DmcTask, add_frame_sensor, as_index, sensor_columns
from envs.mujoco.task import PhysicsView

TIME_LIMIT_S = 15.0
STAND_HEIGHT_FRACTION = 0.9
MIN_UPRIGHT_COSINE = float(np.cos(np.deg2rad(30)))
FRAMES = ("skull", "torso", "pelvis")


class DogTrot(DmcTask):
    """Quadruped dog trotting at 3 m/s (dm_control `dog-trot`)."""

    name = "dmc_dog_trot"
    dm_control_id = "dog-trot"
    xml_file = "dog.xml"
    observation_keys = (
        "joint_angles",
        "joint_velocites",  # sic: the suite's spelling
        "torso_pelvis_height",
        "z_projection",
        "torso_com_velocity",
        "inertial_sensors",
        "foot_forces",
        "touch_sensors",
        "actuator_state",
    )
    frame_skip = 3
    move_speed = 3.0

    def edit_spec(self, spec: mujoco.MjSpec) -> None:
        floor = self.move_speed * TIME_LIMIT_S
        spec.geom("floor").size = [floor, floor, 0.1]
        spec.delete(spec.body("ball"))
        spec.delete(spec.geom("target"))
        spec.delete(spec.camera("ball"))
        spec.delete(spec.camera("head"))
        for wall in ("px", "nx", "py", "ny"):
            spec.delete(spec.geom(f"wall_{wall}"))
        for body in ("torso", "pelvis"):
            add_frame_sensor(spec, "pos", body)
        for body in FRAMES:
            for axis in ("xaxis", "yaxis", "zaxis"):
                add_frame_sensor(spec, axis, body)

    def bind(self, model: mujoco.MjModel) -> None:
        super().bind(model)
        hinges = model.jnt_type == HINGE
        self._hinge_qpos = as_index(model.jnt_qposadr[hinges])
        self._hinge_qvel = as_index(model.jnt_dofadr[hinges])
        self._height_cols = np.array([sensor_columns(model, f"dmc_pos_{b}")[2] for b in ("torso", "pelvis")])
        # xmat[body, ['zx', 'zy', 'zz']]: z components of the body's x, y and z axes
        self._z_projection_cols = np.array(
            [sensor_columns(model, f"dmc_{axis}_{b}")[2] for b in FRAMES for axis in ("xaxis", "yaxis", "zaxis")]
        )
        self._torso_axes_cols = [
            as_index(sensor_columns(model, f"dmc_{axis}_torso")) for axis in ("xaxis", "yaxis", "zaxis")
        ]
        self._com_velocity_cols = as_index(sensor_columns(model, "torso_linvel"))
        self._inertial_cols = as_index(sensor_columns(model, "accelerometer", "velocimeter", "gyro"))
        self._foot_force_cols = as_index(sensor_columns(model, "foot_L", "foot_R", "hand_L", "hand_R"))
        self._touch_cols = as_index(sensor_columns(model, "palm_L", "palm_R", "sole_L", "sole_R"))
        self._root_adr = int(model.joint("root").qposadr[0])
        self._ctrl_range = model.actuator_ctrlrange.T.copy()
        # Stand.initialize_episode measures these in the default pose after physics.reset()
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)
        self._stand_height = STAND_HEIGHT_FRACTION * data.xpos[[model.body("torso").id, model.body("pelvis").id], 2]
        self._body_weight = float(-model.opt.gravity[2] * model.body_subtreemass[model.body("torso").id])

    def initial_states(self, env, env_ids):
        n = len(env_ids)
        rng = env.rng
        qpos, qvel = self.default_states(env, n)
        azimuth = rng.uniform(0, 2 * np.pi, size=n)
        quat = np.zeros((n, 4))
        quat[:, 0], quat[:, 3] = np.cos(azimuth / 2), np.sin(azimuth / 2)
        qpos[:, self._root_adr + 3 : self._root_adr + 7] = quat
        qvel[:, [0, 1, 5]] = 2 * rng.standard_normal((n, 3))
        lo, hi = self._ctrl_range
        act = rng.uniform(lo, hi, size=(n, len(lo)))
        return env.states_from(qpos, qvel, act)

    def _torso_com_velocity(self, sd: np.ndarray) -> np.ndarray:
        velocity = sd[:, self._com_velocity_cols]
        return np.stack([np.einsum("ij,ij->i", velocity, sd[:, cols]) for cols in self._torso_axes_cols], axis=1)

    def observe(self, p: PhysicsView) -> np.ndarray:
        sd = p.sensordata
        return np.concatenate(
            [
                p.qpos[:, self._hinge_qpos],
                p.qvel[:, self._hinge_qvel],
                sd[:, self._height_cols],
                sd[:, self._z_projection_cols],
                self._torso_com_velocity(sd),
                sd[:, self._inertial_cols],
                sd[:, self._foot_force_cols],
                sd[:, self._touch_cols],
                p.act,
            ],
            axis=1,
            dtype=np.float32,
        )

    def reward_factors(self, p, action):
        sd = p.sensordata
        height = sd[:, self._height_cols]
        upright = sd[:, self._z_projection_cols[2::3]]
        (torso_h, pelvis_h), weight = self._stand_height, self._body_weight
        forward = tolerance(
            self._torso_com_velocity(sd)[:, 0],
            (self.move_speed, 2 * self.move_speed),
            max(1.0, self.move_speed),
            "linear",
            0.0,
        )
        uprights = tolerance(upright, (MIN_UPRIGHT_COSINE, float("inf")), MIN_UPRIGHT_COSINE + 1, "linear", 0.0)
        return {
            "torso_height": tolerance(height[:, 0], (torso_h, float("inf")), torso_h),
            "pelvis_height": tolerance(height[:, 1], (pelvis_h, float("inf")), pelvis_h),
            "upright_skull": uprights[:, 0],
            "upright_torso": uprights[:, 1],
            "upright_pelvis": uprights[:, 2],
            "touch": tolerance(sd[:, self._touch_cols].sum(axis=1), (weight, float("inf")), weight, "linear", 0.9),
            "forward": (4 * forward + 1) / 5,
        }

    def reward(self, terms):
        reward = terms["torso_height"]
        for key in ("pelvis_height", "upright_skull", "upright_torso", "upright_pelvis", "touch", "forward"):
            reward = reward * terms[key]
        return reward


class DogRun(DogTrot):
    """Quadruped dog running at 9 m/s (dm_control `dog-run`)."""

    name = "dmc_dog_run"
    dm_control_id = "dog-run"
    move_speed = 9.0
