"""MuJoCo Playground's `Go1JoystickFlatTerrain` (velocity tracking on flat ground) on the CPU pool.

Where each part comes from (Playground's `locomotion/go1/joystick.py` unless named):

- Scene and physics: Playground's `scene_mjx_feetonly_flat_terrain.xml` over MuJoCo
  Menagerie's Unitree Go1 (`assets/go1/`, see its NOTICE; visual meshes left out,
  dynamics unchanged). As Playground's `Go1Env.__init__` (`base.py`): timestep
  0.004 s, `ccd_iterations` 20, joint damping Kd = 0.5, position actuators with
  Kp = 35 (`gainprm[0] = Kp`, `biasprm[1] = -Kp`): the motor targets are the
  actuators' controls, the torques are MuJoCo's. 5 substeps per 0.02-s control
  step, 1000-step episodes.
- Action: targets = home pose + 0.5 x action (`step`).
- Timing of what a step reads: as `mjx_env.step` followed by reading `data`,
  sensors, foot positions and actuator forces come from the last substep's forward
  pass (the state before its integration), joint positions and velocities from
  after it.
- Actor observation (48, `_get_obs` "state"): local linear velocity, gyro,
  gravity in the IMU frame, joint angles - home, joint velocities, the previous
  action (the one before this step's), the command; the first five with uniform
  noise of half-width `noise_level` x (0.1, 0.2, 0.05, 0.03, 1.5).
- Critic observation (123, "privileged_state"): the actor's, then the same
  quantities without noise, the accelerometer, the global angular velocity,
  actuator forces, the last step's foot contacts, foot velocities (world frame),
  foot air times, the push force on the torso during the step (world frame) and
  Playground's push flag (both zero with pushes off).
- Reward (`_get_reward`): 16 terms, each times its weight (`REWARD_SCALES`),
  summed, times dt, clipped at 0 below. `info["reward_terms"]` holds each term
  times its weight (Playground's `reward/<term>` metrics).
- Commands (`reset`, `sample_command`): uniform in +-(1.5, 0.8, 1.2) at reset;
  after an exponential time (mean 5 s) each component is, with probability 1/2,
  redrawn (zero with probability 1 - (0.9, 0.25, 0.5)), else kept. Each row draws
  its commands and their times from a generator of its own, seeded by (env seed,
  row, episodes started on the row since `reset` or `reset_rows`): an evaluation's
  command sequences are fixed by its seed, whatever the policy does on other rows.
- Reset (`reset`): home keyframe, x and y +- 0.5 m, yaw +- 3.14, base linear
  and angular velocity +- 0.5, actuator controls at the home pose.
- Pushes (`pert_config`, `_maybe_apply_perturbation`), off by default as in Playground
  (`push_robots`): at an episode's start a wait W ~ U(`push_wait_time`) s, a duration
  T ~ U(`push_kick_duration`) s and a kick v ~ U(`push_velocity_kick`) m/s are drawn,
  kept for the whole episode. Each control step before its physics: while waiting,
  the counter of steps since the last push goes up; on the step it reaches
  round(W / dt) a new horizontal direction d is drawn uniformly on the circle. From
  the next step on the torso is pushed: at the push's k-th step (k = 0, 1, ...,
  round(T / dt)) the force 0.5 sin(pi k dt / T) M v / T d acts on the torso
  (`xfrc_applied`, M the nominal robot mass: the torso's subtree) during every
  substep of that control step; after the step k = round(T / dt) the wait starts
  again. The push flag is "steps since the last push >= round(W / dt)" after that
  update. Playground carries this clock across its auto-resets; here each new
  episode starts its own.
- Termination (`_get_termination`): the IMU z axis points down.
- Domain randomisation (`randomize.py`), each behind its option: floor friction
  U(0.4, 1.0); joint friction loss x U(0.9, 1.1); joint armature x U(1.0, 1.05);
  torso centre of mass + U(-0.05, 0.05) m; every link mass x U(0.9, 1.1), then
  the torso's + U(-1, 1) kg; joint `qpos0` + U(-0.05, 0.05) rad. Playground
  draws them once per env for a whole run; here each env draws them anew at
  every episode start, into its own model in the pool (mass, centre of mass,
  armature and friction through the pool's `reset` patches, which also refresh
  MuJoCo's derived constants; friction loss and `qpos0` written into the
  env's model directly). As in Playground, `qpos0` is read by nothing in this
  task's dynamics (no joint springs; episodes start at the home keyframe).

Tracking (`EnvSpec.tracking_terms`, `envs.tracking`): per step, `lin_vel_error`
|v_xy - cmd_xy| (m/s, body-frame linear velocity), `yaw_rate_error` |omega_z -
cmd_yaw| (rad/s, gyro) and `command_speed` |cmd_xy|, with the command in force
during the step (the one the reward tracks); `info["episode_tracking"]` sums them
over each episode's steps after its first second.

Rewards and `info` are computed on first read (`NpEnvState`), after the
observation is handed out, as for the other MuJoCo tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import mujoco
import numpy as np

from envs.core import ACTOR_OBS_KEY, NpEnv
from envs.locomotion.common import (
    CRITIC_OBS_KEY,
    JoystickEnv,
    float32_columns,
    gravity_in_frame,
    sensor_columns,
    turned_by_yaw,
    without_textures,
)
from envs.locomotion.common import TRACKING_TERMS as TRACKING_TERMS  # re-exported: the tracking tests read them
from envs.locomotion.common import tracking_values as tracking_values
from envs.mujoco.task import MujocoTask
from envs.options import Flag, Interval, Option, Real

ASSETS = Path(__file__).resolve().parent / "assets" / "go1"
SCENE_XML = ASSETS / "scene_mjx_feetonly_flat_terrain.xml"
FEET = ("FR", "FL", "RR", "RL")
"""foot sites and geoms in Playground's order (`go1_constants.FEET_SITES`)"""
KP, KD = 35.0, 0.5
ACTION_SCALE = 0.5
SOFT_LIMIT_FACTOR = 0.95
TRACKING_SIGMA = 0.25
MAX_FOOT_HEIGHT = 0.1
CMD_AMPLITUDE = np.array([1.5, 0.8, 1.2])
CMD_KEEP_NONZERO = np.array([0.9, 0.25, 0.5])
CMD_MEAN_SECONDS = 5.0
NOISE_SCALES = {"linvel": 0.1, "gyro": 0.2, "gravity": 0.05, "joint_pos": 0.03, "joint_vel": 1.5}
POSE_WEIGHTS = np.array([1.0, 1.0, 0.1] * 4)
REWARD_SCALES = {
    "tracking_lin_vel": 1.0,
    "tracking_ang_vel": 0.5,
    "lin_vel_z": -0.5,
    "ang_vel_xy": -0.05,
    "orientation": -5.0,
    "dof_pos_limits": -1.0,
    "pose": 0.5,
    "termination": -1.0,
    "stand_still": -1.0,
    "torques": -0.0002,
    "action_rate": -0.01,
    "energy": -0.001,
    "feet_clearance": -2.0,
    "feet_height": -0.2,
    "feet_slip": -0.1,
    "feet_air_time": 0.1,
}
CTRL_DT = 0.02
"""the control step (0.004-s timestep x 5 substeps)"""
PUSH_OPTIONS = {
    "push_robots": Flag(False),
    "push_velocity_kick": Interval(0.0, 3.0, finite=True, ge=0.0, closed=True),
    "push_kick_duration": Interval(0.05, 0.2, finite=True, gt=0.0, closed=True),
    # at least one control step: the first push's direction is drawn when the wait ends
    "push_wait_time": Interval(1.0, 3.0, finite=True, ge=CTRL_DT, closed=True),
}
"""Playground's `pert_config` (seconds, m/s), off by default as there"""
RANDOMIZATIONS = (
    "randomize_floor_friction",
    "randomize_joint_friction",
    "randomize_armature",
    "randomize_torso_com",
    "randomize_link_masses",
    "randomize_torso_mass",
    "randomize_qpos0",
)


class Go1JoystickFlat(MujocoTask):
    """Playground's Go1JoystickFlatTerrain: track (vx, vy, yaw rate) commands on flat ground."""

    name: ClassVar[str] = "go1_joystick_flat"
    frame_skip: ClassVar[int] = 5
    max_episode_steps: ClassVar[int] = 1000
    options: ClassVar[dict[str, Option]] = {
        "noise_level": Real(1.0, ge=0.0),
        **{flag: Flag(True) for flag in RANDOMIZATIONS},
        **PUSH_OPTIONS,
    }

    def build_spec(self) -> mujoco.MjSpec:
        """The scene without its visual meshes, plus world-frame foot positions and actuator-force sensors."""
        spec = mujoco.MjSpec.from_file(str(SCENE_XML))
        for geom in list(spec.geoms):
            if geom.type == mujoco.mjtGeom.mjGEOM_MESH:
                spec.delete(geom)
        for mesh in list(spec.meshes):
            spec.delete(mesh)
        for foot in FEET:
            spec.add_sensor(
                name=f"{foot}_world_pos",
                type=mujoco.mjtSensor.mjSENS_FRAMEPOS,
                objtype=mujoco.mjtObj.mjOBJ_SITE,
                objname=foot,
            )
        for actuator in spec.actuators:
            spec.add_sensor(
                name=f"{actuator.name}_force",
                type=mujoco.mjtSensor.mjSENS_ACTUATORFRC,
                objtype=mujoco.mjtObj.mjOBJ_ACTUATOR,
                objname=actuator.name,
            )
        return spec

    def build_model(self, textures: bool = True) -> mujoco.MjModel:
        """Compile and apply Playground's `Go1Env.__init__` settings (timestep, CCD iterations, PD gains);
        `textures=False` leaves the textures out (`without_textures`: the physics pools' models)."""
        spec = self.build_spec()
        model = (spec if textures else without_textures(spec)).compile()
        model.opt.timestep = 0.004
        model.opt.ccd_iterations = 20
        model.dof_damping[6:] = KD
        model.actuator_gainprm[:, 0] = KP
        model.actuator_biasprm[:, 1] = -KP
        return model

    def make_env(self, num_envs: int, seed: int, nthread: int | None, cpu_ids: Sequence[int] | None) -> NpEnv:
        """The batched env of this task (`envs.registry.make`)."""
        return Go1JoystickEnv(self, num_envs=num_envs, seed=seed, nthread=nthread, cpu_ids=cpu_ids)


class Layout:
    """Column indices of what the task reads from the model and the sensors (cold path)."""

    def __init__(self, m: mujoco.MjModel) -> None:
        def cols(name: str) -> slice:
            return sensor_columns(m, name)

        self.gyro, self.local_linvel, self.accelerometer = cols("gyro"), cols("local_linvel"), cols("accelerometer")
        self.upvector, self.orientation = cols("upvector"), cols("orientation")
        self.global_linvel, self.global_angvel = cols("global_linvel"), cols("global_angvel")
        self.feet_vel = np.concatenate([np.arange(m.nsensordata)[cols(f"{f}_global_linvel")] for f in FEET])
        self.feet_pos = np.concatenate([np.arange(m.nsensordata)[cols(f"{f}_world_pos")] for f in FEET])
        self.contact = np.array([m.sensor_adr[m.sensor(f"{f}_floor_found").id] for f in FEET])
        first_force = cols(f"{m.actuator(0).name}_force").start
        self.actuator_force = slice(first_force, first_force + m.nu)
        self.home_qpos = m.keyframe("home").qpos.copy()
        self.default_pose = self.home_qpos[7:].copy()
        lowers, uppers = m.jnt_range[1:].T
        self.soft_lowers, self.soft_uppers = lowers * SOFT_LIMIT_FACTOR, uppers * SOFT_LIMIT_FACTOR
        self.floor_geom = m.geom("floor").id
        self.torso_body = m.body("trunk").id


def physics(layout: Layout, state: np.ndarray, sensordata: np.ndarray, nq: int, nv: int) -> dict[str, np.ndarray]:
    """Named quantities a step reads, rows = envs (sensors from the last forward pass, joints after the step)."""
    s = sensordata
    return {
        "qj": state[:, 8 : 1 + nq],
        "vj": state[:, 1 + nq + 6 : 1 + nq + nv],
        "gyro": s[:, layout.gyro],
        "local_linvel": s[:, layout.local_linvel],
        "accelerometer": s[:, layout.accelerometer],
        "upvector": s[:, layout.upvector],
        "gravity": gravity_in_frame(s[:, layout.orientation]),
        "global_linvel": s[:, layout.global_linvel],
        "global_angvel": s[:, layout.global_angvel],
        "feet_vel": s[:, layout.feet_vel].reshape(-1, 4, 3),
        "feet_z": s[:, layout.feet_pos].reshape(-1, 4, 3)[:, :, 2],
        "contact": s[:, layout.contact] > 0,
        "actuator_force": s[:, layout.actuator_force],
    }


def reward_terms(layout: Layout, p: dict[str, np.ndarray], c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Playground's 16 unweighted terms (`_get_reward`) from the step's physics `p` and the task's carry `c`
    (command, action, last_act, feet_air_time, swing_peak, first_contact, terminated)."""
    cmd = c["command"]
    moving = np.linalg.norm(cmd, axis=1) > 0.01
    q_err = p["qj"] - layout.default_pose
    tau = p["actuator_force"]
    vel_xy = p["feet_vel"][:, :, :2]
    speed_sq = np.sum(vel_xy**2, axis=2)
    first = c["first_contact"]
    over = np.maximum(layout.soft_lowers - p["qj"], 0.0) + np.maximum(p["qj"] - layout.soft_uppers, 0.0)
    return {
        "tracking_lin_vel": np.exp(-np.sum((cmd[:, :2] - p["local_linvel"][:, :2]) ** 2, axis=1) / TRACKING_SIGMA),
        "tracking_ang_vel": np.exp(-((cmd[:, 2] - p["gyro"][:, 2]) ** 2) / TRACKING_SIGMA),
        "lin_vel_z": p["global_linvel"][:, 2] ** 2,
        "ang_vel_xy": np.sum(p["global_angvel"][:, :2] ** 2, axis=1),
        "orientation": np.sum(p["upvector"][:, :2] ** 2, axis=1),
        "stand_still": np.sum(np.abs(q_err), axis=1) * ~moving,
        "termination": c["terminated"].astype(np.float64),
        "pose": np.exp(-np.sum(q_err**2 * POSE_WEIGHTS, axis=1)),
        "torques": np.sqrt(np.sum(tau**2, axis=1)) + np.sum(np.abs(tau), axis=1),
        "action_rate": np.sum((c["action"] - c["last_act"]) ** 2, axis=1),
        "energy": np.sum(np.abs(p["vj"]) * np.abs(tau), axis=1),
        "feet_slip": np.sum(speed_sq * p["contact"], axis=1) * moving,
        "feet_clearance": np.sum(np.abs(p["feet_z"] - MAX_FOOT_HEIGHT) * np.sqrt(np.sqrt(speed_sq)), axis=1),
        "feet_height": np.sum((c["swing_peak"] / MAX_FOOT_HEIGHT - 1.0) ** 2 * first, axis=1) * moving,
        "feet_air_time": np.sum((c["feet_air_time"] - 0.1) * first, axis=1) * moving,
        "dof_pos_limits": np.sum(over, axis=1),
    }


def combine(terms: dict[str, np.ndarray], dt: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(reward, weighted terms): each term times its weight, summed, times dt, clipped to [0, 1e4]."""
    weighted = {k: v * REWARD_SCALES[k] for k, v in terms.items()}
    return np.clip(sum(weighted.values()) * dt, 0.0, 10000.0), weighted


def sample_command(rng: np.random.Generator, current: np.ndarray) -> np.ndarray:
    """Playground's `sample_command`: each component redrawn with probability 1/2 (zero w.p. 1 - keep), else kept."""
    n = current.shape[0]
    drawn = rng.uniform(-CMD_AMPLITUDE, CMD_AMPLITUDE, size=(n, 3)) * (rng.random((n, 3)) < CMD_KEEP_NONZERO)
    return np.where(rng.random((n, 3)) < 0.5, drawn, current)


def steps_until_command(rng: np.random.Generator, n: int, dt: float) -> np.ndarray:
    """Control steps until the next command: an exponential time with mean 5 s, rounded to steps."""
    return np.round(rng.exponential(CMD_MEAN_SECONDS, size=n) / dt).astype(np.int64)


class Go1JoystickEnv(JoystickEnv):
    """`Go1JoystickFlat` over a `BatchEnvPool` with one model per env (domain randomisation) and auto-reset."""

    obs_dims: ClassVar[dict[str, int]] = {ACTOR_OBS_KEY: 48, CRITIC_OBS_KEY: 123}
    nominal_fields: ClassVar[tuple[str, ...]] = (
        "geom_friction",
        "dof_frictionloss",
        "dof_armature",
        "body_ipos",
        "body_mass",
        "qpos0",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        n = self.num_envs
        self.pushes = bool(self.task.cfg["push_robots"])
        self.robot_mass = float(self.model.body_subtreemass[self.layout.torso_body])
        """M of the push force: the nominal robot's mass (Playground's torso subtree mass of the unrandomised model)"""
        self.push_force = np.zeros((n, 3))
        """the force on the torso during the last step (world frame)"""
        self.pushing = np.zeros(n, dtype=bool)
        """Playground's push flag: the steps since the last push reached the wait"""
        self.push_wait = np.zeros(n, dtype=np.int64)
        """control steps between pushes, round(W / dt)"""
        self.push_duration = np.zeros(n, dtype=np.int64)
        """round(T / dt): a push's last step"""
        self.push_seconds = np.ones(n)
        """T"""
        self.push_kick = np.zeros(n)
        """v"""
        self.push_since = np.zeros(n, dtype=np.int64)
        """control steps since the last push ended"""
        self.push_step = np.zeros(n, dtype=np.int64)
        """the step of the push under way (k)"""
        self.push_dir = np.zeros((n, 3))
        """the horizontal direction of the next or current push"""

    def make_layout(self, m: mujoco.MjModel) -> Layout:
        return Layout(m)

    def carry_shapes(self) -> dict[str, tuple[int, type]]:
        nu = self.model.nu
        return {
            "last_act": (nu, np.float64),
            "last_last_act": (nu, np.float64),
            "feet_air_time": (4, np.float64),
            "swing_peak": (4, np.float64),
            "last_contact": (4, bool),
        }

    # --- episodes ----------------------------------------------------------------
    def initial_states(self, n: int) -> np.ndarray:
        """Playground's reset distribution: home pose moved +-0.5 m in x, y, turned +-3.14 in yaw, base velocity
        +-0.5."""
        layout = self.layout
        qpos = np.tile(layout.home_qpos, (n, 1))
        qpos[:, :2] += self.rng.uniform(-0.5, 0.5, size=(n, 2))
        yaw = self.rng.uniform(-3.14, 3.14, size=n)
        qpos[:, 3:7] = turned_by_yaw(qpos[:, 3:7], yaw)
        states = np.zeros((n, self.nstate))
        states[:, 1 : 1 + self.nq] = qpos
        states[:, 1 + self.nq : 1 + self.nq + 6] = self.rng.uniform(-0.5, 0.5, size=(n, 6))
        return states

    def randomization(self, n: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Per-env model fields drawn as Playground's `domain_randomize`, each where its option is on:
        (fields the pool's reset patches, fields written into the env's model)."""
        cfg, rng, nom, lay = self.task.cfg, self.rng, self.nominal, self.layout
        patched: dict[str, np.ndarray] = {}
        written: dict[str, np.ndarray] = {}
        if cfg["randomize_floor_friction"]:
            friction = np.tile(nom["geom_friction"], (n, 1, 1))
            friction[:, lay.floor_geom, 0] = rng.uniform(0.4, 1.0, size=n)
            patched["geom_friction"] = friction
        if cfg["randomize_joint_friction"]:
            loss = np.tile(nom["dof_frictionloss"], (n, 1))
            loss[:, 6:] *= rng.uniform(0.9, 1.1, size=(n, 12))
            written["dof_frictionloss"] = loss
        if cfg["randomize_armature"]:
            armature = np.tile(nom["dof_armature"], (n, 1))
            armature[:, 6:] *= rng.uniform(1.0, 1.05, size=(n, 12))
            patched["dof_armature"] = armature
        if cfg["randomize_torso_com"]:
            ipos = np.tile(nom["body_ipos"], (n, 1, 1))
            ipos[:, lay.torso_body] += rng.uniform(-0.05, 0.05, size=(n, 3))
            patched["body_ipos"] = ipos
        if cfg["randomize_link_masses"] or cfg["randomize_torso_mass"]:
            mass = np.tile(nom["body_mass"], (n, 1))
            if cfg["randomize_link_masses"]:
                mass *= rng.uniform(0.9, 1.1, size=mass.shape)
            if cfg["randomize_torso_mass"]:
                mass[:, lay.torso_body] += rng.uniform(-1.0, 1.0, size=n)
            patched["body_mass"] = mass
        if cfg["randomize_qpos0"]:
            qpos0 = np.tile(nom["qpos0"], (n, 1))
            qpos0[:, 7:] += rng.uniform(-0.05, 0.05, size=(n, 12))
            written["qpos0"] = qpos0
        return patched, written

    def _reset_rows(self, env_ids: np.ndarray, states: np.ndarray | None = None) -> None:
        """New episodes, then their push clocks (drawn only with pushes on: off, nothing else changes)."""
        super()._reset_rows(env_ids, states)
        n, cfg, dt = len(env_ids), self.task.cfg, self.dt
        for name in ("push_force", "pushing", "push_since", "push_step", "push_dir"):
            self._set_rows(name, env_ids, 0)
        if not self.pushes:
            return
        wait = self.rng.uniform(*cfg["push_wait_time"], size=n)
        seconds = self.rng.uniform(*cfg["push_kick_duration"], size=n)
        kick = self.rng.uniform(*cfg["push_velocity_kick"], size=n)
        self.push_wait[env_ids] = np.round(wait / dt).astype(np.int64)
        self.push_seconds[env_ids] = seconds
        self.push_duration[env_ids] = np.round(seconds / dt).astype(np.int64)
        self.push_kick[env_ids] = kick

    def begin_step(self) -> None:
        """With pushes on: Playground's `_maybe_apply_perturbation`, the force of this step (`push_force`)."""
        if self.pushes:
            self._advance_pushes()

    def _advance_pushes(self) -> None:
        """Rows under a push get this step's half-sine force and count its steps; the others wait, and draw a
        direction on the step their wait ends."""
        on = self.push_since >= self.push_wait
        seconds = self.push_seconds
        t = self.push_step * self.dt
        size = 0.5 * np.sin(np.pi * t / seconds) * self.robot_mass * self.push_kick / seconds
        self.push_force = np.where(on[:, None], size[:, None] * self.push_dir, 0.0)
        ended = on & (self.push_step >= self.push_duration)
        since = np.where(on, np.where(ended, 0, self.push_since), self.push_since + 1)
        due = ~on & (since >= self.push_wait)
        self.push_step = np.where(on, self.push_step + 1, np.where(due, 0, self.push_step))
        self.push_since = since
        if due.any():
            angle = self.rng.uniform(0.0, 2 * np.pi, size=int(np.count_nonzero(due)))
            self.push_dir = self.push_dir.copy()
            self.push_dir[due] = np.stack([np.cos(angle), np.sin(angle), np.zeros_like(angle)], axis=1)
        self.pushing = self.push_since >= self.push_wait

    def applied_forces(self) -> np.ndarray | None:
        """With pushes on: this step's push force on the torso during each of its substeps."""
        if not self.pushes:
            return None
        forces = np.zeros((self.num_envs, self.frame_skip, self.model.nbody, 6))
        forces[:, :, self.layout.torso_body, :3] = self.push_force[:, None, :]
        return forces.reshape(self.num_envs, self.frame_skip, -1)

    def _noisy(self, x: np.ndarray, key: str) -> np.ndarray:
        return x + (2 * self.rng.random(x.shape) - 1) * (self.noise_level * NOISE_SCALES[key])

    def observe(self, p: dict[str, np.ndarray], rows: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        """Actor (48) and critic (123) observations of `rows` from their physics `p` (Playground's `_get_obs`)."""
        q_err = p["qj"] - self.layout.default_pose
        actor = float32_columns(
            [
                self._noisy(p["local_linvel"], "linvel"),
                self._noisy(p["gyro"], "gyro"),
                self._noisy(p["gravity"], "gravity"),
                self._noisy(p["qj"], "joint_pos") - self.layout.default_pose,
                self._noisy(p["vj"], "joint_vel"),
                self.last_act[rows],
                self.command[rows],
            ]
        )
        n = actor.shape[0]
        critic = float32_columns(
            [
                actor,
                p["gyro"],
                p["accelerometer"],
                p["gravity"],
                p["local_linvel"],
                p["global_angvel"],
                q_err,
                p["vj"],
                p["actuator_force"],
                self.last_contact[rows],
                p["feet_vel"].reshape(n, 12),
                self.feet_air_time[rows],
                self.push_force[rows],
                self.pushing[rows, None],
            ]
        )
        return {ACTOR_OBS_KEY: actor, CRITIC_OBS_KEY: critic}

    def first_command(self, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """Uniform in +-CMD_AMPLITUDE; the next after an exponential time."""
        return rng.uniform(-CMD_AMPLITUDE, CMD_AMPLITUDE), int(steps_until_command(rng, 1, self.dt)[0])

    def next_command(self, rng: np.random.Generator, current: np.ndarray) -> tuple[np.ndarray, int]:
        """Playground's `sample_command`, then a new exponential time."""
        return sample_command(rng, current[None])[0], int(steps_until_command(rng, 1, self.dt)[0])

    def physics(self, rows: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        return physics(self.layout, self._state[rows], self._sensordata[rows], self.nq, self.nv)

    def controls(self, actions: np.ndarray) -> np.ndarray:
        """Targets = home pose + 0.5 x action (the actuators are in joint order)."""
        return self.layout.default_pose + ACTION_SCALE * actions

    def step_inputs(self, p: dict[str, np.ndarray], actions: np.ndarray) -> dict[str, np.ndarray]:
        """First contacts, then the air time and swing peak the observation and the reward read."""
        contact = p["contact"]
        first_contact = (self.feet_air_time > 0) & (contact | self.last_contact)
        self.feet_air_time = self.feet_air_time + self.dt
        self.swing_peak = np.maximum(self.swing_peak, p["feet_z"])
        return {
            "command": self.command,
            "action": actions,
            "last_act": self.last_act,
            "feet_air_time": self.feet_air_time,
            "swing_peak": self.swing_peak,
            "first_contact": first_contact,
        }

    def fell(self, p: dict[str, np.ndarray]) -> np.ndarray:
        """Playground's `_get_termination`: the IMU z axis points down."""
        return p["upvector"][:, 2] < 0.0

    def advance_carry(self, actions: np.ndarray, p: dict[str, np.ndarray]) -> None:
        """The action history, air time and swing peak (new arrays, so the deferred reward keeps the ones it
        was given)."""
        contact = p["contact"]
        self.last_last_act, self.last_act = self.last_act, actions
        self.feet_air_time = self.feet_air_time * ~contact
        self.last_contact = contact
        self.swing_peak = self.swing_peak * ~contact

    def reward(self, p: dict[str, np.ndarray], carry: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
        return combine(reward_terms(self.layout, p, carry), self.dt)

    PUSH_STATE: ClassVar[tuple[str, ...]] = (
        "push_force", "pushing", "push_wait", "push_duration", "push_seconds", "push_kick", "push_since",
        "push_step", "push_dir",
    )  # fmt: skip
    """the per-row push clocks and draws, all a snapshot needs of the pushes (their randomness is the env's RNG)"""

    def _snapshot_extra(self) -> dict[str, np.ndarray]:
        """The push state (all zeros while pushes are off)."""
        return {f"push/{k}": getattr(self, k).copy() for k in self.PUSH_STATE}

    def _restore_extra(self, snapshot: dict[str, Any]) -> None:
        for k in self.PUSH_STATE:
            setattr(self, k, np.array(snapshot[f"push/{k}"], dtype=getattr(self, k).dtype, copy=True))

    def deploy_description(self) -> dict[str, Any]:
        """What a robot-side loop needs beyond the spec: observation layout, joint targets and PD gains."""
        m, nu = self.model, self.model.nu
        layout = [
            ("local_linvel", 3),
            ("gyro", 3),
            ("gravity", 3),
            ("joint_pos_minus_default", nu),
            ("joint_vel", nu),
            ("last_action", nu),
            ("command", 3),
        ]
        return {
            "observation_layout": [{"name": name, "size": size} for name, size in layout],
            "joint_names": [m.joint(int(m.actuator_trnid[i, 0])).name for i in range(nu)],
            "default_joint_positions": self.layout.default_pose.astype(float).tolist(),
            "action_scale": float(ACTION_SCALE),
            "kp": float(KP),
            "kd": float(KD),
            "sim_dt": float(m.opt.timestep),
        }
