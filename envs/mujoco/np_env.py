"""`MujocoNpEnv`: the NpEnv contract over `mujoco_uni.batch_env.BatchEnvPool`.

Hot path per `step`: one pool call (all envs, `frame_skip` substeps, sensors
returned), vectorised numpy for observation/reward/termination, and one batched
reset of every env that finished, failed or hit the time limit (a write of the
new state rows; the pool's sparse `reset` where the task needs sensors at the
new state). No Python loop over envs anywhere. Tasks with dm_control's sensor
timing (`acc_sensors_from_last_substep`) add one `forward` of a second pool
whose models have constraints disabled: it refreshes position/velocity sensors
on the final state at a fraction of a substep's cost.

The numpy after the pool call runs with cold CPU caches (the workers shared the
cores meanwhile): a call there costs several times its warm time, whatever the
array size, and numpy's Python-level wrappers cost most (`np.ones`, `np.clip`,
`np.flatnonzero`, `ndarray.any`, and reading `MjModel` attributes, which builds
wrappers). So the step makes as few calls as it can, through C-level ones:
constants are read once at construction, helper vectors are made once
(`envs.mujoco.task.ones`), a new episode's observation comes from the states
just written rather than a gather of them, and its state comes from a batch drawn
ahead, in the deferred part of an earlier step (where the task allows it).

Physics failures are never silent. The pool stops stepping an env after a
MuJoCo warning (its time then advances by less than `frame_skip * timestep`)
and a state can go non-finite. Such rows are reported as truncated with zero
reward, their `final_obs` is the last finite observation (the one the action
was chosen on), they are reset, and `info["physics_failures"]` counts them
(`info["physics_failed"]` marks the rows).
"""

from __future__ import annotations

import copy
import functools
import os
import time
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
from mujoco_uni.batch_env import BatchEnvPool

from envs.core import ACTOR_OBS_KEY, EnvSpec, NpEnv, NpEnvState, checked_steps, restored_time_limit
from envs.mujoco.task import MujocoTask, PhysicsView, rows_finite


def column_runs(columns: np.ndarray) -> list[slice]:
    """Sorted column indices as slices over their runs of consecutive columns.

    Copying a few slices of every row costs a fraction of one fancy-indexed gather and scatter
    of the same columns (DMC humanoid's 59 of 92 sensor columns are 3 runs).
    """
    columns = np.asarray(columns, dtype=np.int64)
    if columns.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(columns) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [columns.size]])
    return [slice(int(columns[a]), int(columns[b - 1]) + 1) for a, b in zip(starts, ends, strict=True)]


def resolve_cpu_ids(cpu_ids: Sequence[int] | None, nthread: int | None) -> tuple[list[int] | None, int]:
    """Validate `cpu_ids` against the process affinity; return (ids, worker count)."""
    available = sorted(os.sched_getaffinity(0))
    if cpu_ids is None:
        return None, (len(available) if nthread is None else int(nthread))
    ids = [int(c) for c in cpu_ids]
    if not ids:
        raise ValueError(f"cpu_ids must be non-empty; CPUs available to this process: {available}")
    bad = [c for c in ids if c not in available]
    if bad:
        raise ValueError(f"cpu_ids {bad} are not available to this process; available: {available}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"cpu_ids {ids} contain duplicates; available: {available}")
    if nthread is not None and int(nthread) != len(ids):
        raise ValueError(f"nthread={nthread} must equal len(cpu_ids)={len(ids)} (one pinned worker per CPU)")
    return ids, len(ids)


class MujocoNpEnv(NpEnv):
    """Batched MuJoCo task with auto-reset, running in BatchEnvPool worker threads."""

    def __init__(
        self,
        task: MujocoTask,
        num_envs: int,
        seed: int = 0,
        nthread: int | None = None,
        cpu_ids: Sequence[int] | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        ids, nthread = resolve_cpu_ids(cpu_ids, nthread)
        self.task = task
        self.model = task.build_model()
        self.pool_model = task.build_pool_model(self.model)
        """what the pool clones per env: the same physics as `model`, perhaps without render-only assets"""
        self.pool = BatchEnvPool(self.pool_model, nbatch=num_envs, nthread=nthread, cpu_ids=ids)
        self.num_envs = num_envs
        self.rng = np.random.Generator(np.random.PCG64(seed))
        m = self.model
        self.nq, self.nv, self.nu, self.na = m.nq, m.nv, m.nu, m.na
        self.nstate = self.pool.nstate
        self.frame_skip = task.frame_skip
        self.dt = float(m.opt.timestep * task.frame_skip)
        self.qpos0 = m.qpos0.copy()
        """the model's reference configuration (a plain array: each `model.qpos0` read builds a new wrapper)"""
        max_time_error = 0.5 * float(m.opt.timestep)
        self._min_advance, self._max_advance = self.dt - max_time_error, self.dt + max_time_error
        """how far a step may advance a row's time without a failure: `dt` give or take half a substep"""
        # the pool's state rows are mj_getState(mjSTATE_FULLPHYSICS): time, qpos, qvel, act, ...
        self._qpos_slice = slice(1, 1 + self.nq)
        self._qvel_slice = slice(1 + self.nq, 1 + self.nq + self.nv)
        self._act_slice = slice(1 + self.nq + self.nv, 1 + self.nq + self.nv + self.na)
        # dm_control's sensor timing: a second pool over the same CPUs (idle workers block, so it costs
        # nothing between calls) refreshes position/velocity sensors with constraints disabled, and a
        # third evaluates a new episode's sensors with actuation disabled; the pools' models are never
        # switched in place
        self._stepped_sensor_cols: list[slice] | None = None
        """the acceleration-stage sensor columns as runs of consecutive columns (slice copies, not a gather)"""
        self.sensor_pool: BatchEnvPool | None = None
        self.reset_pool: BatchEnvPool | None = None
        if task.fresh_sensors and task.acc_sensors_from_last_substep:
            stage = np.repeat(m.sensor_needstage, m.sensor_dim)
            self._stepped_sensor_cols = column_runs(np.flatnonzero(stage == mujoco.mjtStage.mjSTAGE_ACC))
            self.sensor_pool = self._pool_without(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT, ids)
        if task.fresh_sensors and task.reset_without_actuation:
            self.reset_pool = self._pool_without(mujoco.mjtDisableBit.mjDSBL_ACTUATION, ids)
        self._state = np.zeros((num_envs, self.nstate))
        self._sensordata = np.zeros((num_envs, m.nsensordata))
        self._episode_length = np.zeros(num_envs, dtype=np.int64)
        self._time_limit = np.full(num_envs, task.max_episode_steps, dtype=np.int64)
        """each row's episode ends (truncated) when its length reaches this: the task's limit, unless
        `truncate_after` shortened the running episode"""
        self._episode_return = np.zeros(num_envs, dtype=np.float64)
        self._obs = np.zeros((num_envs, 0), dtype=np.float32)
        self.physics_failures_total = 0
        self._pending: NpEnvState | None = None
        """the last step's state while its rewards are deferred (`NpEnvState.finish`)"""
        self._ahead = np.zeros((0, self.nstate))
        self._ahead_pos = 0
        """new episodes' states drawn ahead (`task.initial_states_ahead`): rows `_ahead_pos:` are not used yet"""
        self.last_step_timing: tuple[int, int, int, int] | None = None
        """(pool start, pool end, resets start, resets end) of the last step, perf_counter_ns (phase timings)"""
        self.reset_log: list[tuple[np.ndarray, np.ndarray]] | None = None
        """when a list: every reset appends (rows, new states) (a recorded window for a same-trajectory replay)"""
        low, high = m.actuator_ctrlrange.T.astype(np.float32)
        probe = task.observe(self._view(np.tile(self._initial_state_row(), (1, 1)), np.zeros((1, m.nsensordata))))
        self.spec = EnvSpec(
            name=task.name,
            num_envs=num_envs,
            obs_dims={ACTOR_OBS_KEY: int(probe.shape[1])},
            action_dim=self.nu,
            action_low=low,
            action_high=high,
            dt=self.dt,
            max_episode_steps=task.max_episode_steps,
            gymnasium_id=task.gymnasium_id,
            gymnasium_kwargs=task.gymnasium_kwargs(),
            reward_range=task.reward_range,
            dm_control_id=task.dm_control_id,
        )

    # --- helpers ---------------------------------------------------------------
    def _initial_state_row(self) -> np.ndarray:
        row = np.zeros((1, self.nstate))
        row[0, self._qpos_slice] = self.model.qpos0
        return row

    def _view(self, state: np.ndarray, sensordata: np.ndarray) -> PhysicsView:
        return PhysicsView(
            qpos=state[:, self._qpos_slice],
            qvel=state[:, self._qvel_slice],
            qpos_qvel=state[:, 1 : 1 + self.nq + self.nv],
            sensordata=sensordata,
            act=state[:, self._act_slice],
        )

    def states_from(self, qpos: np.ndarray, qvel: np.ndarray, act: np.ndarray | None = None) -> np.ndarray:
        """Full physics state rows at time 0 from (qpos, qvel[, act]) rows (cold path: resets, tests)."""
        states = np.zeros((qpos.shape[0], self.nstate))
        states[:, self._qpos_slice] = qpos
        states[:, self._qvel_slice] = qvel
        if act is not None:
            states[:, self._act_slice] = act
        return states

    def _pool_without(self, feature: mujoco.mjtDisableBit, cpu_ids: list[int] | None) -> BatchEnvPool:
        """A pool like `self.pool` whose models have `feature` disabled (cold path)."""
        model = copy.copy(self.pool_model)
        model.opt.disableflags |= feature
        return BatchEnvPool(model, nbatch=self.num_envs, nthread=self.pool.nthread, cpu_ids=cpu_ids)

    def _reset_rows(self, env_ids: np.ndarray, states: np.ndarray | None = None) -> PhysicsView:
        """Batched reset of `env_ids` to `states` (sampled from the task's reset distribution unless given).

        `pool.step` loads every env's full physics state from the array it is given, so
        a reset is a write of the new rows. Tasks that read sensors (`fresh_sensors`)
        also need those sensors evaluated at the new state: they go through the pool's
        sparse `reset` (one threaded `mj_forward` per reset env), with actuation disabled
        where the task says so. For the others that forward pass would compute nothing
        anyone reads, so it is skipped.

        Returns the new rows' physics (what `self._state[env_ids]` and `self._sensordata[env_ids]`
        now hold, without gathering them back; for distinct `env_ids`).
        """
        self._finish_pending()
        if states is None:
            states = self._initial_states(env_ids)
        if self.task.fresh_sensors:
            pool = self.pool if self.reset_pool is None else self.reset_pool
            states, sensordata = pool.reset(env_ids, states)
            self._sensordata[env_ids] = sensordata
        elif self._sensordata.shape[1]:
            sensordata = self._sensordata[env_ids]
        else:  # no sensors: an empty slice, not a gather
            sensordata = self._sensordata[: len(env_ids)]
        self._state[env_ids] = states
        if self.reset_log is not None:
            self.reset_log.append((np.array(env_ids, dtype=np.int64), np.array(states, copy=True)))
        self._episode_length[env_ids] = 0
        self._time_limit[env_ids] = self.task.max_episode_steps
        self._episode_return[env_ids] = 0.0
        return self._view(states, sensordata)

    def _initial_states(self, env_ids: np.ndarray) -> np.ndarray:
        """New episodes' states for `env_ids`: the next rows drawn ahead where enough are left, else drawn now."""
        start, stop = self._ahead_pos, self._ahead_pos + len(env_ids)
        if stop <= self._ahead.shape[0]:
            self._ahead_pos = stop
            return self._ahead[start:stop]
        return self.task.initial_states(self, env_ids)

    def _draw_ahead(self) -> None:
        """Keep at least `num_envs` new episodes' states drawn ahead (run while the caller waits, after a step).

        A reset right after a pool step pays several times the draw's warm cost (the step's workers evicted
        the caches); drawn here, a reset only takes rows. Rows are used in the order drawn, and the draws
        follow the env's steps, so a seed still fixes every episode's start.
        """
        left = self._ahead.shape[0] - self._ahead_pos
        if left >= self.num_envs or not self.task.initial_states_ahead:
            return
        fresh = self.task.initial_states(self, np.arange(self.num_envs, dtype=np.int32))
        self._ahead = np.concatenate([self._ahead[self._ahead_pos :], fresh]) if left else fresh
        self._ahead_pos = 0

    def _observe(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        view = self._view(self._state[rows], self._sensordata[rows])
        return self.task.observe(view)

    # --- contract --------------------------------------------------------------
    def reset(self) -> NpEnvState:
        self._reset_rows(np.arange(self.num_envs, dtype=np.int32))
        return self._first_state()

    def reset_rows(self, env_ids: np.ndarray) -> dict[str, np.ndarray]:
        env_ids = np.asarray(env_ids, dtype=np.int32)
        self._reset_rows(env_ids)
        first = self._observe(env_ids)
        self._obs[env_ids] = first
        return {ACTOR_OBS_KEY: first}

    def truncate_after(self, env_ids: np.ndarray, steps: np.ndarray) -> None:
        self._time_limit[env_ids] = self._episode_length[env_ids] + checked_steps(steps, len(env_ids))

    def set_physics_state(self, qpos: np.ndarray, qvel: np.ndarray, act: np.ndarray | None = None) -> NpEnvState:
        """Place every env at the given (qpos, qvel[, act]) with time 0 (parity tests use this)."""
        self._reset_rows(np.arange(self.num_envs, dtype=np.int32), self.states_from(qpos, qvel, act))
        return self._first_state()

    def snapshot(self) -> dict[str, Any]:
        """Everything the next steps depend on (physics state, sensors, episode counters, observation, the
        states drawn ahead, RNG)."""
        self._finish_pending()
        return {
            "state": self._state.copy(),
            "sensordata": self._sensordata.copy(),
            "episode_length": self._episode_length.copy(),
            "time_limit": self._time_limit.copy(),
            "episode_return": self._episode_return.copy(),
            "obs": self._obs.copy(),
            "ahead": self._ahead[self._ahead_pos :].copy(),
            "rng": self.rng.bit_generator.state,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Inverse of `snapshot`: the env continues exactly as the one the snapshot was taken from."""
        self._finish_pending()
        self._state = np.array(snapshot["state"], dtype=np.float64, copy=True)
        self._sensordata = np.array(snapshot["sensordata"], dtype=np.float64, copy=True)
        self._episode_length = np.array(snapshot["episode_length"], dtype=np.int64, copy=True)
        self._time_limit = restored_time_limit(snapshot, self.task.max_episode_steps)
        self._episode_return = np.array(snapshot["episode_return"], dtype=np.float64, copy=True)
        self._obs = np.array(snapshot["obs"], dtype=np.float32, copy=True)
        self._ahead = np.array(snapshot.get("ahead", np.zeros((0, self.nstate))), dtype=np.float64, copy=True)
        self._ahead_pos = 0
        self.rng.bit_generator.state = snapshot["rng"]

    def physics_qpos_qvel(self, rows: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """Copies of (qpos, qvel) of `rows` as of the last `reset`/`step` (rendering; not the hot path)."""
        return self._state[rows, self._qpos_slice].copy(), self._state[rows, self._qvel_slice].copy()

    def _first_state(self) -> NpEnvState:
        self._obs = self._observe()
        n = self.num_envs
        return NpEnvState(
            obs={ACTOR_OBS_KEY: self._obs},
            reward=np.zeros(n, dtype=np.float32),
            terminated=np.zeros(n, dtype=bool),
            truncated=np.zeros(n, dtype=bool),
            info={"final_obs": {ACTOR_OBS_KEY: self._obs}, "physics_failures": 0},
        )

    def step(self, actions: np.ndarray) -> NpEnvState:
        """One env step; its reward is computed on first read (`NpEnvState`), after the observation is out."""
        self._finish_pending()
        actions = np.array(actions, dtype=np.float64)  # a copy: deferred rewards read it after the caller moved on
        if actions.shape != (self.num_envs, self.nu):
            raise ValueError(f"actions must have shape {(self.num_envs, self.nu)}, got {actions.shape}")
        task = self.task
        prev_obs = self._obs
        progress_before = task.progress(self._view(self._state, self._sensordata))
        prev_time = self._state[:, 0]
        pool_start = time.perf_counter_ns()
        if self._stepped_sensor_cols is None:
            state, sensordata = self.pool.step(
                self._state,
                nstep=self.frame_skip,
                control=actions,
                return_sensor=True,
                post_step_forward_sensor=task.fresh_sensors,
            )
        else:
            # the last substep's sensors (acceleration stage kept), then position/velocity ones on the
            # final state: a forward pass without constraints computes those exactly and costs far less
            state, stepped = self.pool.step(
                self._state, nstep=self.frame_skip, control=actions, return_sensor=True, post_step_forward_sensor=False
            )
            sensordata = self.sensor_pool.forward(state)
            for cols in self._stepped_sensor_cols:
                sensordata[:, cols] = stepped[:, cols]
        pool_end = time.perf_counter_ns()
        # A row that hit a MuJoCo warning stopped early (time short) or blew up (non-finite).
        advanced = state[:, 0] - prev_time
        failed = (advanced < self._min_advance) | (self._max_advance < advanced) | ~rows_finite(state)
        self._state = state
        self._sensordata = sensordata
        view = self._view(state, sensordata)

        velocity = (task.progress(view) - progress_before) / self.dt
        healthy = task.is_healthy(view)
        terminated = task.terminated(healthy) & ~failed
        self._episode_length += 1
        truncated = ((self._episode_length >= self._time_limit) & ~terminated) | failed
        obs = task.observe(view)

        # ndarray.nonzero is one C call (as for the finished rows below); ndarray.any goes through Python first
        n_failed = len(failed.nonzero()[0])
        if n_failed:
            self.physics_failures_total += n_failed
            obs[failed] = prev_obs[failed]
        done = terminated | truncated
        info: dict[str, Any] = {
            "physics_failures": n_failed,
            "physics_failed": failed,
            "episode_length": self._episode_length.copy(),
        }
        final_obs = obs
        ended = None
        reset_start = time.perf_counter_ns()
        done_ids = done.nonzero()[0]
        if done_ids.size:
            # the reset writes new states over these rows and zeroes their returns: the rewards, computed
            # later, get this step's rows and returns from here
            ended = (done_ids, state[done_ids], sensordata[done_ids], self._episode_return[done_ids])
            final_obs = obs.copy()
            obs[done_ids] = task.observe(self._reset_rows(done_ids))
        self.last_step_timing = (pool_start, pool_end, reset_start, time.perf_counter_ns())
        self._obs = obs
        info["final_obs"] = {ACTOR_OBS_KEY: final_obs}
        rewards = functools.partial(
            self._rewards, state, sensordata, velocity, actions, healthy, failed if n_failed else None, ended
        )
        result = NpEnvState(
            obs={ACTOR_OBS_KEY: obs}, reward=None, terminated=terminated, truncated=truncated, info=info, finish=rewards
        )
        self._pending = result
        return result

    def _rewards(
        self,
        state: np.ndarray,
        sensordata: np.ndarray,
        velocity: np.ndarray,
        actions: np.ndarray,
        healthy: np.ndarray,
        failed: np.ndarray | None,
        ended: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """The reward side of a step, run on the first read of its reward (`NpEnvState.finish`), at the latest
        before the env's next call: reward terms, reward, the running episode returns.

        `state` and `sensordata` are the step's arrays; rows reset since hold their new episode's state, so
        `ended` (rows, their physics state, sensors and episode return before the reset) puts this step's
        back in a copy. Nothing else writes into these arrays before the env's next call.
        """
        if ended is not None:
            rows, ended_state, ended_sensordata, ended_return = ended
            state = state.copy()
            state[rows] = ended_state
            if sensordata.shape[1]:
                sensordata = sensordata.copy()
                sensordata[rows] = ended_sensordata
        task = self.task
        terms = task.reward_terms(self._view(state, sensordata), velocity, actions, healthy)
        reward = task.reward(terms)
        if failed is not None:  # a failed step earns nothing
            reward = np.where(failed, 0.0, reward)
            for k in terms:
                terms[k] = np.where(failed, 0.0, terms[k])
        self._episode_return += reward
        episode_return = self._episode_return.copy()
        if ended is not None:  # the episodes that ended: their return; the new ones start at zero
            episode_return[rows] = ended_return + reward[rows]
            self._episode_return[rows] = 0.0
        self._draw_ahead()
        return reward.astype(np.float32), {"reward_terms": terms, "episode_return": episode_return}

    def _finish_pending(self) -> None:
        """Compute the last step's deferred rewards now, before anything changes the env's state or returns."""
        if self._pending is not None:
            self._pending.complete()
            self._pending = None

    def close(self) -> None:
        for name in ("pool", "sensor_pool", "reset_pool"):
            if getattr(self, name, None) is not None:
                getattr(self, name).close()
                setattr(self, name, None)
