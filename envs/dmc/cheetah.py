"""Cheetah run: dm_control's `cheetah-run`, complete (every term comes from the state and a suite sensor).

Physics timestep 0.01 s, one substep per step (control timestep 0.01 s),
1000 steps. Observation (17): position qpos[1:] (8), velocity qvel (9).
Reward: tolerance(torso subtree linear velocity x, bounds (10, inf), margin 10,
linear, value 0 at the margin).

Initial state: limited joints uniform in their ranges, then 200 physics steps
with zero control to settle, time reset to 0. dm_control takes those steps
with `Physics.step`, whose first substep is `mj_step2` on kinematics left by
`physics.reset()` at qpos0 (the randomised qpos is not yet forwarded). That
first substep therefore adds the same velocity to every episode, computed once
here from qpos0; the other 199 run batched in the pool (or, for a few
resetting rows, on one `MjData`, far cheaper than a pool call, which steps
every env). The settling adds a fifth to each episode's physics, as in
dm_control.
"""

from __future__ import annotations

import mujoco
import numpy as np

from envs.dmc.rewards import tolerance
from envs.dmc.task import HINGE, SLIDE, DmcTask, advance_rows, sensor_columns
from envs.mujoco.task import PhysicsView

RUN_SPEED = 10.0
SETTLE_STEPS = 200


class CheetahRun(DmcTask):
    """Planar cheetah running forward (dm_control `cheetah-run`)."""

    name = "dmc_cheetah_run"
    dm_control_id = "cheetah-run"
    xml_file = "cheetah.xml"
    observation_keys = ("position", "velocity")
    frame_skip = 1

    def bind(self, model: mujoco.MjModel) -> None:
        super().bind(model)
        self._speed_col = int(sensor_columns(model, "torso_subtreelinvel")[0])
        limited = np.flatnonzero(model.jnt_limited)
        if not np.isin(model.jnt_type, [HINGE, SLIDE]).all() or model.nq != model.njnt:
            raise ValueError("cheetah's reset expects one-dof joints only")
        self._limited_adr = model.jnt_qposadr[limited]
        self._limited_range = model.jnt_range[limited].T
        # physics.reset(): mj_resetData and mj_forward without actuation; the settle's first mj_step2 then
        # integrates accelerations of that qpos0 state (independent of the randomised qpos)
        data = mujoco.MjData(model)
        model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
        try:
            mujoco.mj_forward(model, data)
        finally:
            model.opt.disableflags &= ~int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
        mujoco.mj_step2(model, data)
        self._first_substep_qvel = data.qvel.copy()
        self._timestep = float(model.opt.timestep)

    def initial_states(self, env, env_ids):
        n = len(env_ids)
        qpos, qvel = self.default_states(env, n)
        lo, hi = self._limited_range
        qpos[:, self._limited_adr] = env.rng.uniform(lo, hi, size=(n, len(lo)))
        qvel[:] = self._first_substep_qvel
        qpos += self._timestep * qvel  # mj_integratePos of hinge and slide joints
        states = advance_rows(env, env_ids, env.states_from(qpos, qvel), SETTLE_STEPS - 1)
        states[:, 0] = 0.0
        return states

    def observe(self, p: PhysicsView) -> np.ndarray:
        return np.concatenate([p.qpos[:, 1:], p.qvel], axis=1, dtype=np.float32)

    def reward_factors(self, p, action):
        speed = p.sensordata[:, self._speed_col]
        return {"run": tolerance(speed, (RUN_SPEED, float("inf")), RUN_SPEED, "linear", 0.0)}

    def reward(self, terms):
        return terms["run"]
