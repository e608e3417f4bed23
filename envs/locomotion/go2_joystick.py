"""UniLab's `Go2JoystickFlat` (velocity tracking on flat ground) as its FlashSAC example configures it, on the CPU pool.

Where each part comes from in UniLab (its `conf/flashsac/task/go2_joystick_flat/base.yaml`, with the
`mujoco.yaml` beside it overriding; the functions are UniLab's unless named):

- Scene and physics: `assets/robots/go2/scene_flat.xml` over `go2.xml` (`assets/go2/`, see its NOTICE;
  visual meshes left out, dynamics unchanged). `sim_dt` 0.01 (the MuJoCo backend's `_configure_model`
  sets the timestep), `ctrl_dt` 0.02: 2 substeps per control step; `max_episode_seconds` 20: 1000-step
  episodes. Position actuators Kp = 35, joint damping 0.5 (the XML), no actuator damping.
- Action (`mdp.JointPositionAction`, scale 0.4 from `mujoco.yaml`, `use_default_offset`): in joint order
  (FL, FR, RL, RR; `find_joints_by_actuator_names` keeps the entity's joint order), targets = home pose +
  0.4 x action, each sent to the actuator of its joint.
- Timing of what a step reads: named sensors (gyro, velocimeter, up vector, foot contacts and positions)
  come from the last substep's forward pass, joint and base states from after it (the MuJoCo backend's
  batch is built with `forward=False`; root-body reads are refreshed).
- Actor observation (49, the `policy` group): `builtin_sensor` gyro; `projected_gravity_from_sensor`
  (minus the `upvector` sensor: the IMU z axis in the world frame, negated, as UniLab reads it);
  `joint_pos_rel` (+ uniform noise of half-width 0.01 x `noise_level`); `joint_vel_rel` (+ 0.1 x
  `noise_level`); `last_action` (the action applied this step; zero at an episode's start);
  `generated_commands`; `manager_terms.quadruped_gait_phase` (frequency 2 Hz, offsets (0, 0.5, 0.5, 0)
  for FL, FR, RL, RR: a diagonal trot).
- Critic observation (52, the `critic` group): the same terms with noise drawn on their own, then the
  base linear velocity (`builtin_sensor` local_linvel).
- Gait phase (`manager_terms._GaitTerm`): one float32 phase for all rows, advanced by 0.02 x 2 and
  wrapped (`fmod`) every control step from `reset` on (UniLab's `common_step_counter`); it does not
  restart with an episode.
- Reward (`managers.RewardManager.compute`): each term times its weight, summed, times dt (no clipping).
  Terms and weights from `mujoco.yaml`: `sensor_reward_terms.track_lin_vel` 1.0 (exp(-|cmd_xy - v_xy|^2 /
  0.5), velocimeter), `track_ang_vel` 0.2 (exp(-(cmd_yaw - gyro_z)^2 / 0.5)), `lin_vel_z` -5 (velocimeter
  z^2), `ang_vel_xy` -0.1 (gyro x^2 + y^2), `manager_terms.base_height_l2` -20 ((base z - 0.3)^2),
  `mdp.action_rate_l2` -0.02, `manager_terms.joint_deviation_l1` -0.4 (sum |q - home|),
  `manager_terms.feet_phase_contact` 1.5 (mean over the feet of [contact == phase < 0.6], contact: the
  foot's `found` sensor > 0.1), `manager_terms.feet_phase_swing_height` 4.0 (mean over the feet of
  exp(-(z - 0.1)^2 / 0.01) where phase >= 0.6). `info["reward_terms"]` holds each term times its weight.
- Commands (`mdp.UniformVelocityCommand`, `twist`): uniform in vx [-0.6, 1.0], vy [-0.4, 0.4], yaw rate
  [-0.8, 0.8], redrawn every 20 s (so once per full episode); no standing or heading rows. Each row draws
  from a generator of its own, seeded by (env seed, row, episodes started on the row since `reset` or
  `reset_rows`), so an evaluation's commands are fixed by its seed.
- Reset (`events.reset_scene_to_default`, `events.reset_root_state_uniform`): home keyframe, x and y
  +-0.5 m, yaw +-pi, base linear and angular velocity +-0.5 per axis in the world frame.
- Termination (`terminations.bad_orientation`): the base tilted more than 60 degrees (after the step).
- Randomisation at every episode start, each behind its option (`events.PdGains`: per actuator Kp U(31.5,
  38.5) and actuator damping Kd U(0.45, 0.55), both absolute, the Kd on top of the joint damping as UniLab's
  backend writes it; `events.RandomizeRigidBodyMass`: base mass + U(-1.5, 1.5) kg; `events.
  RandomizeRigidBodyCom`: base centre of mass x + U(-0.05, 0.05) m). The example's gravity
  "randomisation" draws from [-9.81, -9.81]: the gravity stays as it is.
- Pushes (`events.PushBySettingVelocity`, interval 15 s of global time): every 750 control steps from
  `reset` on, every row that goes on adds U(+-1, +-1, +-0.5) m/s to its base's world linear velocity;
  the step's observation is read before it.

Tracking (`EnvSpec.tracking_terms`, `envs.tracking`): as the Go1 task, `lin_vel_error`, `yaw_rate_error`,
`command_speed` from the velocimeter and gyro, after each episode's first second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import mujoco
import numpy as np

from envs.core import ACTOR_OBS_KEY, NpEnv, NpEnvState
from envs.locomotion.common import (
    CRITIC_OBS_KEY,
    JoystickEnv,
    float32_columns,
    sensor_columns,
    turned_by_yaw,
    without_textures,
)
from envs.mujoco.task import MujocoTask
from envs.options import Flag, Option, Real

ASSETS = Path(__file__).resolve().parent / "assets" / "go2"
SCENE_XML = ASSETS / "scene_flat.xml"
FEET = ("FL", "FR", "RL", "RR")
"""feet in the order of UniLab's gait terms (`sensor_names`), which the phase offsets follow"""
SIM_DT = 0.01
FRAME_SKIP = 2
ACTION_SCALE = 0.4
TRACKING_SIGMA = 0.5
BASE_HEIGHT_TARGET = 0.3
GAIT_FREQUENCY = 2.0
GAIT_OFFSETS = np.array([0.0, 0.5, 0.5, 0.0], dtype=np.float32)
CONTACT_THRESHOLD = 0.1
STANCE_THRESHOLD = np.float32(0.6)
SWING_START = np.float32(0.6)
SWING_HEIGHT = 0.1
SWING_KERNEL = 0.01
CMD_LOW = np.array([-0.6, -0.4, -0.8])
CMD_HIGH = np.array([1.0, 0.4, 0.8])
CMD_SECONDS = 20.0
LIMIT_ANGLE = math.pi / 3
NOISE_SCALES = {"joint_pos": 0.01, "joint_vel": 0.1}
KP_RANGE = (31.5, 38.5)
KD_RANGE = (0.45, 0.55)
BASE_MASS_ADD = (-1.5, 1.5)
BASE_COM_X = (-0.05, 0.05)
PUSH_SECONDS = 15.0
PUSH_LINVEL = np.array([1.0, 1.0, 0.5])
RESET_XY, RESET_YAW, RESET_VEL = 0.5, math.pi, 0.5
REWARD_SCALES = {
    "tracking_lin_vel": 1.0,
    "tracking_ang_vel": 0.2,
    "lin_vel_z": -5.0,
    "ang_vel_xy": -0.1,
    "base_height": -20.0,
    "action_rate": -0.02,
    "similar_to_default": -0.4,
    "contact": 1.5,
    "swing_feet_z": 4.0,
}
RANDOMIZATIONS = ("randomize_pd_gains", "randomize_base_mass", "randomize_base_com")


class Go2JoystickFlat(MujocoTask):
    """UniLab's Go2JoystickFlat (FlashSAC example): track (vx, vy, yaw rate) commands with a trot on flat ground."""

    name: ClassVar[str] = "go2_joystick_flat"
    frame_skip: ClassVar[int] = FRAME_SKIP
    max_episode_steps: ClassVar[int] = 1000
    options: ClassVar[dict[str, Option]] = {
        "noise_level": Real(1.0, ge=0.0),
        **{flag: Flag(True) for flag in RANDOMIZATIONS},
        "push_robots": Flag(True),
    }

    def build_spec(self) -> mujoco.MjSpec:
        """The vendored scene (collision geometry only)."""
        return mujoco.MjSpec.from_file(str(SCENE_XML))

    def build_model(self, textures: bool = True) -> mujoco.MjModel:
        """Compile at UniLab's `sim_dt` (everything else as the XML sets it); `textures=False` leaves the
        textures out (`without_textures`: the physics pools' models)."""
        spec = self.build_spec()
        model = (spec if textures else without_textures(spec)).compile()
        model.opt.timestep = SIM_DT
        return model

    def make_env(self, num_envs: int, seed: int, nthread: int | None, cpu_ids: Sequence[int] | None) -> NpEnv:
        """The batched env of this task (`envs.registry.make`)."""
        return Go2JoystickEnv(self, num_envs=num_envs, seed=seed, nthread=nthread, cpu_ids=cpu_ids)


class Layout:
    """Column indices and constants of what the task reads from the model and the sensors (cold path)."""

    def __init__(self, m: mujoco.MjModel) -> None:
        self.gyro, self.local_linvel = sensor_columns(m, "gyro"), sensor_columns(m, "local_linvel")
        self.upvector = sensor_columns(m, "upvector")
        self.contact = np.array([sensor_columns(m, f"{f}_foot_contact").start for f in FEET])
        self.feet_z = np.array([sensor_columns(m, f"{f}_pos").start + 2 for f in FEET])
        self.home_qpos = m.keyframe("home").qpos.copy()
        self.default_pose = self.home_qpos[7:].copy()
        """home joint angles in joint (= action) order"""
        self.joint_of_actuator = m.jnt_qposadr[m.actuator_trnid[:, 0]] - 7
        """the action entry each actuator takes"""
        self.joint_names = [m.joint(j).name for j in range(1, m.njnt)]
        self.base_body = m.body("base").id


def physics(layout: Layout, state: np.ndarray, sensordata: np.ndarray, nq: int, nv: int) -> dict[str, np.ndarray]:
    """Named quantities a step reads, rows = envs (sensors from the last forward pass, states after the step)."""
    s = sensordata
    return {
        "qj": state[:, 8 : 1 + nq],
        "vj": state[:, 1 + nq + 6 : 1 + nq + nv],
        "base_z": state[:, 3],
        "quat": state[:, 4:8],
        "gyro": s[:, layout.gyro],
        "local_linvel": s[:, layout.local_linvel],
        "upvector": s[:, layout.upvector],
        "contact": s[:, layout.contact] > CONTACT_THRESHOLD,
        "feet_z": s[:, layout.feet_z],
    }


def feet_phase(phase: np.float32) -> np.ndarray:
    """(4,) float32 phase of each foot: `quadruped_gait_phase`'s remainder of phase + offset."""
    return np.remainder(np.float32(phase) + GAIT_OFFSETS, np.float32(1.0))


def next_phase(phase: np.float32, dt: float) -> np.float32:
    """One control step of `_GaitTerm._advance_to` in float32: fmod(phase + dt x frequency, 1)."""
    return np.fmod(np.float32(phase) + np.float32(dt * GAIT_FREQUENCY), np.float32(1.0))


def reward_terms(layout: Layout, p: dict[str, np.ndarray], c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """UniLab's 9 unweighted terms from the step's physics `p` and carry `c` (command, action, last_act, phase)."""
    cmd, lin, gyro = c["command"], p["local_linvel"], p["gyro"]
    phase = c["phase"]
    stance = phase < STANCE_THRESHOLD
    swing = phase >= SWING_START
    height = np.exp(-((p["feet_z"] - SWING_HEIGHT) ** 2) / SWING_KERNEL) * swing
    return {
        "tracking_lin_vel": np.exp(-np.sum((cmd[:, :2] - lin[:, :2]) ** 2, axis=1) / TRACKING_SIGMA),
        "tracking_ang_vel": np.exp(-((cmd[:, 2] - gyro[:, 2]) ** 2) / TRACKING_SIGMA),
        "lin_vel_z": lin[:, 2] ** 2,
        "ang_vel_xy": np.sum(gyro[:, :2] ** 2, axis=1),
        "base_height": (p["base_z"] - BASE_HEIGHT_TARGET) ** 2,
        "action_rate": np.sum((c["action"] - c["last_act"]) ** 2, axis=1),
        "similar_to_default": np.sum(np.abs(p["qj"] - layout.default_pose), axis=1),
        "contact": np.mean(p["contact"] == stance, axis=1),
        "swing_feet_z": np.mean(height, axis=1),
    }


def combine(terms: dict[str, np.ndarray], dt: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(reward, weighted terms): each term times its weight, summed, times dt."""
    weighted = {k: v * REWARD_SCALES[k] for k, v in terms.items()}
    return sum(weighted.values()) * dt, weighted


def tilted_too_far(quat: np.ndarray) -> np.ndarray:
    """`bad_orientation`: the angle between the base's z axis and the world's exceeds 60 degrees."""
    x, y = quat[:, 1], quat[:, 2]
    cos_tilt = 1.0 - 2.0 * (x * x + y * y)
    return np.arccos(np.clip(cos_tilt, -1.0, 1.0)) > LIMIT_ANGLE


class Go2JoystickEnv(JoystickEnv):
    """`Go2JoystickFlat` over a `BatchEnvPool` with one model per env (domain randomisation) and auto-reset."""

    obs_dims: ClassVar[dict[str, int]] = {ACTOR_OBS_KEY: 49, CRITIC_OBS_KEY: 52}
    nominal_fields: ClassVar[tuple[str, ...]] = ("body_mass", "body_ipos", "actuator_gainprm")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.gait_phase = np.float32(0.0)
        self.global_steps = 0
        """control steps since `reset` (the clock of the pushes)"""
        super().__init__(*args, **kwargs)
        self.push_steps = int(round(PUSH_SECONDS / self.dt))
        self.command_steps = int(round(CMD_SECONDS / self.dt))

    def make_layout(self, m: mujoco.MjModel) -> Layout:
        return Layout(m)

    def carry_shapes(self) -> dict[str, tuple[int, type]]:
        return {"last_act": (self.model.nu, np.float64)}

    def reset(self) -> NpEnvState:
        """All rows anew, and the clocks common to them (gait phase, pushes) back to zero."""
        self.gait_phase, self.global_steps = np.float32(0.0), 0
        return super().reset()

    # --- episodes ----------------------------------------------------------------
    def initial_states(self, n: int) -> np.ndarray:
        """`reset_root_state_uniform`: home pose moved +-0.5 m in x, y, turned +-pi in yaw, base linear and
        angular velocity +-0.5 per world axis (the angular one stored in the base's frame, as MuJoCo's)."""
        rng, layout = self.rng, self.layout
        qpos = np.tile(layout.home_qpos, (n, 1))
        qpos[:, :2] += rng.uniform(-RESET_XY, RESET_XY, size=(n, 2))
        qpos[:, 3:7] = turned_by_yaw(qpos[:, 3:7], rng.uniform(-RESET_YAW, RESET_YAW, size=n))
        linvel = rng.uniform(-RESET_VEL, RESET_VEL, size=(n, 3))
        angvel_world = rng.uniform(-RESET_VEL, RESET_VEL, size=(n, 3))
        states = np.zeros((n, self.nstate))
        states[:, 1 : 1 + self.nq] = qpos
        qvel = states[:, 1 + self.nq : 1 + self.nq + self.nv]
        qvel[:, :3] = linvel
        inverse = np.empty(4)
        for i in range(n):  # cold path: one rotation per new episode
            mujoco.mju_negQuat(inverse, qpos[i, 3:7])
            mujoco.mju_rotVecQuat(qvel[i, 3:6], angvel_world[i], inverse)
        return states

    def randomization(self, n: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Per-env model fields drawn as UniLab's reset events, each where its option is on (all through the
        pool's reset patches)."""
        cfg, rng, nom, base = self.task.cfg, self.rng, self.nominal, self.layout.base_body
        patched: dict[str, np.ndarray] = {}
        if cfg["randomize_pd_gains"]:
            patched["kp"] = rng.uniform(*KP_RANGE, size=(n, self.nu))
            patched["kd"] = rng.uniform(*KD_RANGE, size=(n, self.nu))
        if cfg["randomize_base_mass"]:
            mass = np.tile(nom["body_mass"], (n, 1))
            mass[:, base] += rng.uniform(*BASE_MASS_ADD, size=n)
            patched["body_mass"] = mass
        if cfg["randomize_base_com"]:
            ipos = np.tile(nom["body_ipos"], (n, 1, 1))
            ipos[:, base, 0] += rng.uniform(*BASE_COM_X, size=n)
            patched["body_ipos"] = ipos
        return patched, {}

    def first_command(self, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """Uniform in UniLab's ranges, kept for 20 s."""
        return rng.uniform(CMD_LOW, CMD_HIGH), self.command_steps

    def next_command(self, rng: np.random.Generator, current: np.ndarray) -> tuple[np.ndarray, int]:
        """A new uniform draw (UniLab's resampling ignores the current command)."""
        return self.first_command(rng)

    # --- steps ---------------------------------------------------------------------
    def begin_step(self) -> None:
        self.gait_phase = next_phase(self.gait_phase, self.dt)
        self.global_steps += 1

    def physics(self, rows: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        p = physics(self.layout, self._state[rows], self._sensordata[rows], self.nq, self.nv)
        p["phase"] = np.broadcast_to(feet_phase(self.gait_phase), (len(p["qj"]), 4))
        return p

    def _noisy(self, x: np.ndarray, key: str) -> np.ndarray:
        return x + self.rng.uniform(-1.0, 1.0, size=x.shape) * (self.noise_level * NOISE_SCALES[key])

    def _group(self, p: dict[str, np.ndarray], rows: np.ndarray | slice) -> list[np.ndarray]:
        """The `policy` group's terms in UniLab's order, joint noise drawn anew."""
        return [
            p["gyro"],
            -p["upvector"],
            self._noisy(p["qj"] - self.layout.default_pose, "joint_pos"),
            self._noisy(p["vj"], "joint_vel"),
            self.last_act[rows],
            self.command[rows],
            p["phase"],
        ]

    def observe(self, p: dict[str, np.ndarray], rows: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        """Actor (49) and critic (52: the actor's terms with their own noise, then the base linear velocity)."""
        actor = float32_columns(self._group(p, rows))
        critic = float32_columns([*self._group(p, rows), p["local_linvel"]])
        return {ACTOR_OBS_KEY: actor, CRITIC_OBS_KEY: critic}

    def controls(self, actions: np.ndarray) -> np.ndarray:
        """Joint targets = home + 0.4 x action, in actuator order."""
        targets = self.layout.default_pose + ACTION_SCALE * actions
        return targets[:, self.layout.joint_of_actuator]

    def _pool_steps(
        self, state: np.ndarray, warm: np.ndarray, actions: np.ndarray, forces: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Both substeps in one pool call, so MuJoCo carries the solver's warm start between them itself; the
        next control step starts from the last substep's velocity change over h (zero at an episode's start).
        MuJoCo's Euler step applies the joint damping implicitly, so that is not exactly the solver's qacc:
        the first substep of a step can differ from plain `mj_step` within the solver's tolerance. Go2 applies
        no forces (its pushes change the base velocity between steps): `forces` must be None."""
        if forces is not None:
            raise ValueError("go2_joystick_flat applies no body forces")
        targets = np.ascontiguousarray(self.controls(actions))
        qv = slice(1 + self.nq, 1 + self.nq + self.nv)
        before_last: list[np.ndarray] = []

        def control(step_index: int, state: np.ndarray, _sensordata: None) -> np.ndarray:
            if step_index == self.frame_skip - 1:
                before_last.append(state[:, qv].copy())
            return targets

        state, sensordata = self.pool.step(
            state,
            nstep=self.frame_skip,
            initial_warmstart=warm,
            return_sensor=True,
            post_step_forward_sensor=False,
            control_callback=control,
            callback_sensordata=False,
        )
        return state, sensordata, (state[:, qv] - before_last[0]) / float(self.model.opt.timestep)

    def step_inputs(self, p: dict[str, np.ndarray], actions: np.ndarray) -> dict[str, np.ndarray]:
        """The reward's carry; then this step's action becomes the one the observation shows."""
        carry = {"command": self.command, "action": actions, "last_act": self.last_act, "phase": p["phase"]}
        self.last_act = actions
        return carry

    def fell(self, p: dict[str, np.ndarray]) -> np.ndarray:
        return tilted_too_far(p["quat"])

    def reward(self, p: dict[str, np.ndarray], carry: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
        return combine(reward_terms(self.layout, p, carry), self.dt)

    def after_step(self, done_ids: np.ndarray) -> None:
        """UniLab's interval push, on every row that goes on (new episodes start from their reset state)."""
        if not self.task.cfg["push_robots"] or self.global_steps % self.push_steps:
            return
        rows = np.setdiff1d(np.arange(self.num_envs), done_ids)
        self._state = self._state.copy()  # the deferred reward holds views of the old one
        lin = slice(1 + self.nq, 1 + self.nq + 3)
        self._state[rows, lin] += self.rng.uniform(-PUSH_LINVEL, PUSH_LINVEL, size=(len(rows), 3))
        self.log_state_write(rows)

    def _snapshot_extra(self) -> dict[str, np.ndarray]:
        """The clocks common to all rows: gait phase and control steps since `reset` (pushes)."""
        return {"gait_phase": np.array(self.gait_phase, dtype=np.float32), "global_steps": np.array(self.global_steps)}

    def _restore_extra(self, snapshot: dict[str, Any]) -> None:
        self.gait_phase = np.float32(snapshot["gait_phase"])
        self.global_steps = int(snapshot["global_steps"])

    def deploy_description(self) -> dict[str, Any]:
        """What a robot-side loop needs beyond the spec: observation layout, gait clock, joint targets, gains."""
        nu = self.nu
        layout = [
            ("gyro", 3),
            ("minus_imu_z_axis_in_world", 3),
            ("joint_pos_minus_default", nu),
            ("joint_vel", nu),
            ("last_action", nu),
            ("command", 3),
            ("gait_phase", 4),
        ]
        return {
            "observation_layout": [{"name": name, "size": size} for name, size in layout],
            "joint_names": list(self.layout.joint_names),
            "default_joint_positions": self.layout.default_pose.astype(float).tolist(),
            "action_scale": float(ACTION_SCALE),
            "kp": float(self.nominal["actuator_gainprm"][0, 0]),
            "kd": float(self.model.dof_damping[6]),
            "sim_dt": float(self.model.opt.timestep),
            "gait": {
                "frequency_hz": GAIT_FREQUENCY,
                "phase_offsets": GAIT_OFFSETS.astype(float).tolist(),
                "feet": list(FEET),
            },  # fmt: skip
        }
