"""Base class of a DeepMind Control Suite task over the batched pool, and the helpers its tasks share.

Semantics reproduced from dm_control (`control.Environment`, `mujoco.Physics`):
- one env step = `frame_skip` physics substeps (the suite's control timestep
  over its physics timestep) with the action as `ctrl`, as given (MuJoCo clamps
  it to the control range inside the physics; rewards read it unclamped);
- after a step dm_control runs `mj_step1`: position and velocity quantities
  (body poses, centre-of-mass velocity, velocimeter, gyro) are those of the
  final state, while acceleration-stage sensors (touch, force, torque,
  accelerometer) keep the values computed in the last substep. The env
  reproduces exactly this (`acc_sensors_from_last_substep`);
- a new episode's observation is taken after `mj_forward` with actuation
  disabled (`after_reset`; `reset_without_actuation`);
- rewards in [0, 1] from `rewards.tolerance`; discount 1 everywhere; episodes
  of 1000 steps that never terminate (time-limit truncation only).
Body poses and velocities the suite reads from `mjData` come from frame sensors
added to the model (framepos/framexaxis/... on the body frames); they change
nothing in the dynamics. The one state difference to dm_control is the
solver's warm start: the pool restarts `qacc_warmstart` at zero on every call,
dm_control carries it across steps; both converge to the same solution within
the solver tolerance (the parity tests state the resulting tolerances).
"""

from __future__ import annotations

from typing import Any, ClassVar

import mujoco
import numpy as np

from envs.dmc.model import lean_model, suite_spec
from envs.mujoco.task import MujocoTask, PhysicsView
from envs.options import Option

FREE, BALL, SLIDE, HINGE = (
    int(mujoco.mjtJoint.mjJNT_FREE),
    int(mujoco.mjtJoint.mjJNT_BALL),
    int(mujoco.mjtJoint.mjJNT_SLIDE),
    int(mujoco.mjtJoint.mjJNT_HINGE),
)
CONTACT_COUNT = "dmc_contact_count"
"""name of the sensor that counts the contacts of a state (dm_control's `data.ncon`) and gives the deepest one's
distance"""


def sensor_columns(model: mujoco.MjModel, *names: str) -> np.ndarray:
    """Columns of `sensordata` holding the named sensors, in the order given."""
    cols = []
    for name in names:
        sid = model.sensor(name).id
        adr, dim = int(model.sensor_adr[sid]), int(model.sensor_dim[sid])
        cols.append(np.arange(adr, adr + dim))
    return np.concatenate(cols)


def as_index(columns: np.ndarray) -> np.ndarray | slice:
    """`columns` as a slice where they are consecutive: a view instead of a gather on the hot path."""
    columns = np.asarray(columns)
    if columns.size and np.array_equal(columns, np.arange(columns[0], columns[0] + columns.size)):
        return slice(int(columns[0]), int(columns[0]) + columns.size)
    return columns


def sensor_names_of_types(model: mujoco.MjModel, *types: mujoco.mjtSensor) -> list[str]:
    """Names of the sensors of the given types in id order (dm_control's `_get_sensor_names`)."""
    ids = np.flatnonzero(np.isin(model.sensor_type, [int(t) for t in types]))
    return [model.sensor(int(i)).name for i in ids]


def add_frame_sensor(spec: mujoco.MjSpec, kind: str, body: str, ref: str | None = None, inertial: bool = False) -> str:
    """Add a frame sensor (`pos`, `xaxis`, `yaxis`, `zaxis`) of `body`'s frame; return its name.

    `inertial` reads the inertial frame (`xipos`) instead of the body frame
    (`xpos`, `xmat`); `ref` expresses the result in another body's frame.
    """
    types = {
        "pos": mujoco.mjtSensor.mjSENS_FRAMEPOS,
        "xaxis": mujoco.mjtSensor.mjSENS_FRAMEXAXIS,
        "yaxis": mujoco.mjtSensor.mjSENS_FRAMEYAXIS,
        "zaxis": mujoco.mjtSensor.mjSENS_FRAMEZAXIS,
    }
    name = f"dmc_{kind}_{body}" + (f"_in_{ref}" if ref else "") + ("_inertial" if inertial else "")
    kwargs: dict[str, Any] = {}
    if ref:
        kwargs = {"reftype": mujoco.mjtObj.mjOBJ_XBODY, "refname": ref}
    spec.add_sensor(
        name=name,
        type=types[kind],
        objtype=mujoco.mjtObj.mjOBJ_BODY if inertial else mujoco.mjtObj.mjOBJ_XBODY,
        objname=body,
        **kwargs,
    )
    return name


def add_contact_counter(spec: mujoco.MjSpec) -> str:
    """Add a contact sensor matching every contact: how many there are (`ncon`) and the smallest distance."""
    sensor = spec.add_sensor(name=CONTACT_COUNT, type=mujoco.mjtSensor.mjSENS_CONTACT)
    sensor.intprm[0] = 1 | 8  # data: "found" (the number of matching contacts) and "dist"
    sensor.intprm[1] = 1  # reduce: the contact of minimal distance
    sensor.intprm[2] = 1  # num: one slot
    return CONTACT_COUNT


def randomize_limited_and_rotational_joints(model: mujoco.MjModel, rng: np.random.Generator, qpos: np.ndarray) -> None:
    """dm_control's `randomizers.randomize_limited_and_rotational_joints` on every row of `qpos` (in place).

    Limited hinges/slides uniform in range, unlimited hinges uniform in [-pi, pi],
    ball joints uniform (within their limit), free joints' quaternions from
    uniform [0, 1) components normalised (the suite's own choice), their
    positions untouched.
    """
    n = qpos.shape[0]
    for j in range(model.njnt):
        adr, kind = int(model.jnt_qposadr[j]), int(model.jnt_type[j])
        lo, hi = model.jnt_range[j]
        if model.jnt_limited[j]:
            if kind in (HINGE, SLIDE):
                qpos[:, adr] = rng.uniform(lo, hi, size=n)
            elif kind == BALL:
                axis = rng.standard_normal((n, 3))
                axis /= np.linalg.norm(axis, axis=1, keepdims=True)
                angle = rng.random(n) * hi
                qpos[:, adr] = np.cos(angle / 2)
                qpos[:, adr + 1 : adr + 4] = axis * np.sin(angle / 2)[:, None]
        elif kind == HINGE:
            qpos[:, adr] = rng.uniform(-np.pi, np.pi, size=n)
        elif kind == BALL:
            quat = rng.standard_normal((n, 4))
            qpos[:, adr : adr + 4] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
        elif kind == FREE:
            quat = rng.random((n, 4))
            qpos[:, adr + 3 : adr + 7] = quat / np.linalg.norm(quat, axis=1, keepdims=True)


def count_contacts(env: Any, env_ids: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(number of contacts, smallest contact distance) of each state row.

    One threaded `mj_forward` per row, on the pool rows `env_ids`, which are resetting.
    """
    _, sensordata = env.pool.reset(env_ids, states)
    return sensordata[:, env.task.contact_col], sensordata[:, env.task.contact_col + 1]


def advance_rows(env: Any, env_ids: np.ndarray, states: np.ndarray, nstep: int) -> np.ndarray:
    """States after `nstep` physics steps with zero control from `states` (rows `env_ids`; cold path).

    The pool always steps every env, so a few rows go through a per-row
    `MjData` instead: serial cost (rows x steps) against a full-batch pool
    call (all envs x steps over its threads).
    """
    rows = len(env_ids)
    if rows * env.pool.nthread <= env.num_envs:
        data = mujoco.MjData(env.pool_model)
        out = np.empty_like(states)
        for k in range(rows):
            mujoco.mj_setState(env.pool_model, data, states[k], mujoco.mjtState.mjSTATE_FULLPHYSICS)
            data.ctrl[:] = 0.0
            data.qacc_warmstart[:] = 0.0
            mujoco.mj_step(env.pool_model, data, nstep)
            mujoco.mj_getState(env.pool_model, data, out[k], mujoco.mjtState.mjSTATE_FULLPHYSICS)
        return out
    full = np.repeat(states[:1], env.num_envs, axis=0)  # the other rows' results are dropped
    full[env_ids] = states
    stepped = env.pool.step(full, nstep=nstep, control=np.zeros((env.num_envs, env.nu)))
    return stepped[env_ids]


class DmcTask(MujocoTask):
    """One DeepMind Control Suite task: the suite's model, substeps, observation, reward and initial states."""

    frame_skip: ClassVar[int]
    """physics substeps per env step: the suite's control timestep over its physics timestep"""
    observation_keys: ClassVar[tuple[str, ...]]
    """the entries of the suite's observation dict in the order this task's observation lays them out
    (`envs.dmc.flatten_observation`)"""
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    initial_states_ahead = False  # some draws test contacts on the pool's rows of the resetting envs
    fresh_sensors = True
    acc_sensors_from_last_substep = True
    reset_without_actuation = True
    options: ClassVar[dict[str, Option]] = {}
    """none: the suite's semantics are fixed (only the time limit, `max_episode_steps`, is an option)"""
    contact_col: int = -1
    """sensordata column of the contact counter, for tasks that reject penetrating initial states"""

    # --- model -----------------------------------------------------------------
    def build_spec(self) -> mujoco.MjSpec:
        spec = suite_spec(self.xml_file)
        self.edit_spec(spec)
        return spec

    def edit_spec(self, spec: mujoco.MjSpec) -> None:
        """dm_control's edits of the XML for this task, then the sensors this task reads."""

    def build_model(self) -> mujoco.MjModel:
        model = self.build_spec().compile()
        self.bind(model)
        return model

    def build_pool_model(self, model: mujoco.MjModel) -> mujoco.MjModel:
        return lean_model(self.build_spec(), model)

    def bind(self, model: mujoco.MjModel) -> None:
        """Record the sensordata columns and model constants the task reads (after compiling)."""
        if CONTACT_COUNT in [model.sensor(i).name for i in range(model.nsensor)]:
            self.contact_col = int(sensor_columns(model, CONTACT_COUNT)[0])

    # --- episode ---------------------------------------------------------------
    def initial_states(self, env: Any, env_ids: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def default_states(self, env: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(qpos, qvel) rows of `physics.reset()`: the model's qpos0 at rest."""
        return np.tile(env.qpos0, (n, 1)), np.zeros((n, env.nv))

    def randomized_joint_states(self, env: Any, env_ids: np.ndarray) -> np.ndarray:
        """State rows at rest with limited and rotational joints drawn at random (the planar walkers' reset)."""
        qpos, qvel = self.default_states(env, len(env_ids))
        randomize_limited_and_rotational_joints(env.model, env.rng, qpos)
        return env.states_from(qpos, qvel)

    # --- step ------------------------------------------------------------------
    def progress(self, p: PhysicsView) -> np.ndarray:
        return p.qpos[:, :0]  # no finite-difference velocity: the suite's velocities come from sensors

    def reward_terms(self, p, velocity, action, healthy):
        return self.reward_factors(p, action)

    def reward_factors(self, p: PhysicsView, action: np.ndarray) -> dict[str, np.ndarray]:
        """Named factors of the suite's reward (info["reward_terms"])."""
        raise NotImplementedError

    def reward(self, terms: dict[str, np.ndarray]) -> np.ndarray:
        """The suite's reward from its factors, combined as dm_control does (in [0, 1])."""
        raise NotImplementedError
