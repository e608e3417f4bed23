"""What the joystick (velocity-command) locomotion tasks share on the CPU pool.

`JoystickEnv` is the batched env of such a task: one pool model per env (domain randomisation drawn
at every episode start), a second pool that evaluates a new episode's sensors without actuation,
control steps run one substep per pool call so MuJoCo's solver warm start carries across them,
commands drawn per row from a generator of its own (or held along a schedule, `set_commands`),
rewards and tracking sums deferred to first read (`NpEnvState`), and auto-reset. A task's env subclasses it and fills in the hooks: its layout,
reset distribution, randomisation, commands, forces on the bodies during the substeps, physics view,
observation, reward, termination and the state it carries from step to step.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import mujoco
import numpy as np
from mujoco_uni.batch_env import BatchEnvPool

from envs.core import EnvSpec, NpEnv, NpEnvState, checked_steps, restored_time_limit
from envs.mujoco.np_env import resolve_cpu_ids
from envs.mujoco.task import rows_finite
from envs.tracking import EpisodeTracking

CRITIC_OBS_KEY = "critic"
TRACKING_TERMS = ("lin_vel_error", "yaw_rate_error", "command_speed")
"""what `tracking_values` returns per step, in its column order"""


def gravity_in_frame(quat: np.ndarray) -> np.ndarray:
    """(n, 3) world gravity direction (0, 0, -1) in the frame of unit quaternions (w, x, y, z): -R^T e_z."""
    w, x, y, z = quat.T
    return -np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1)


def float32_columns(pieces: Sequence[np.ndarray]) -> np.ndarray:
    """(rows, total width) float32: the 2-D `pieces` side by side, each cast on its own, the same values as
    `np.hstack(pieces).astype(np.float32)` without the wide float64 array in between."""
    widths = [piece.shape[1] for piece in pieces]
    out = np.empty((pieces[0].shape[0], sum(widths)), dtype=np.float32)
    start = 0
    for piece, width in zip(pieces, widths, strict=True):
        out[:, start : start + width] = piece
        start += width
    return out


def sensor_columns(m: mujoco.MjModel, name: str) -> slice:
    """Columns of sensor `name` in `sensordata`."""
    sid = m.sensor(name).id
    adr = int(m.sensor_adr[sid])
    return slice(adr, adr + int(m.sensor_dim[sid]))


def turned_by_yaw(quat: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """(n, 4) each quaternion times a turn by `yaw` about z (the turn in the body's frame)."""
    n = len(yaw)
    turn = np.stack([np.cos(yaw / 2), np.zeros(n), np.zeros(n), np.sin(yaw / 2)], axis=1)
    out = np.empty((n, 4))
    for i in range(n):  # cold path: one quaternion product per new episode
        mujoco.mju_mulQuat(out[i], quat[i], turn[i])
    return out


def tracking_values(p: dict[str, np.ndarray], command: np.ndarray) -> np.ndarray:
    """(rows, 3) per-step `TRACKING_TERMS`: |v_xy - cmd_xy|, |omega_z - cmd_yaw|, |cmd_xy| (body frame)."""
    lin = np.linalg.norm(p["local_linvel"][:, :2] - command[:, :2], axis=1)
    yaw = np.abs(p["gyro"][:, 2] - command[:, 2])
    return np.stack([lin, yaw, np.linalg.norm(command[:, :2], axis=1)], axis=1)


def without_textures(spec: mujoco.MjSpec) -> mujoco.MjSpec:
    """`spec` with every texture deleted and the materials' texture references cleared (their colours stay):
    what the physics reads is unchanged, and a model copied per env no longer carries the skybox's pixels."""
    for material in spec.materials:
        material.textures = [""] * len(material.textures)
    for texture in list(spec.textures):
        spec.delete(texture)
    return spec


class JoystickEnv(NpEnv):
    """A joystick task over a `BatchEnvPool` with one model per env and auto-reset (subclasses fill the hooks)."""

    obs_dims: ClassVar[dict[str, int]]
    """observation width per key (the actor's and the critic's)"""
    nominal_fields: ClassVar[tuple[str, ...]]
    """model fields the randomisation draws around (copied once from the built model)"""

    def __init__(
        self,
        task: Any,
        num_envs: int,
        seed: int = 0,
        nthread: int | None = None,
        cpu_ids: Sequence[int] | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        ids, nthread = resolve_cpu_ids(cpu_ids, nthread)
        self.task, self.num_envs = task, num_envs
        self.model = task.build_model()
        m = self.model
        # the pools copy their model once per env (domain randomisation): without the textures, which physics
        # never reads and which are most of the scenes' model memory (the skybox)
        self.pool = BatchEnvPool(task.build_model(textures=False), nbatch=num_envs, nthread=nthread, cpu_ids=ids)
        # a new episode's sensors with the controls at the default pose, where the actuators exert no
        # force: the pool's reset keeps a worker's stale controls, so it runs without them
        reset_model = task.build_model(textures=False)
        reset_model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
        self.reset_pool = BatchEnvPool(reset_model, nbatch=num_envs, nthread=nthread, cpu_ids=ids)
        self.layout = self.make_layout(m)
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.nq, self.nv, self.nu = m.nq, m.nv, m.nu
        self.nstate = self.pool.nstate
        self.frame_skip = task.frame_skip
        self.dt = float(m.opt.timestep) * task.frame_skip
        self.noise_level = float(task.cfg["noise_level"])
        self.nominal = {name: getattr(m, name).copy() for name in self.nominal_fields}
        half = 0.5 * float(m.opt.timestep)
        self._min_advance, self._max_advance = self.dt - half, self.dt + half
        n = num_envs
        self._state = np.zeros((n, self.nstate))
        self._sensordata = np.zeros((n, m.nsensordata))
        self._warmstart = np.zeros((n, self.nv))
        self.command = np.zeros((n, 3))
        self.steps_until_next_cmd = np.zeros(n, dtype=np.int64)
        self.carry_names = tuple(self.carry_shapes())
        for name, (width, dtype) in self.carry_shapes().items():
            setattr(self, name, np.zeros((n, width), dtype=dtype))
        self._episode_length = np.zeros(n, dtype=np.int64)
        self._time_limit = np.full(n, task.max_episode_steps, dtype=np.int64)
        """each row's episode ends (truncated) when its length reaches this: the task's limit, unless
        `truncate_after` shortened the running episode"""
        self._episode_return = np.zeros(n)
        self.seed = int(seed)
        self.row_episodes = np.zeros(n, dtype=np.int64)
        """episodes started on each row since `reset` or `reset_rows` (keys its command generator)"""
        self.command_rngs: list[np.random.Generator] = [self.rng] * n
        self.schedule: tuple[np.ndarray, np.ndarray] | None = None
        """(commands (k, 3), the episode step each one ends at (k,)) set by `set_commands`, or None: drawn"""
        self.tracking = EpisodeTracking(n, TRACKING_TERMS, self.dt)
        self._obs: dict[str, np.ndarray] = {}
        self._pending: NpEnvState | None = None
        self._held_by_reward: set[int] = set()
        """the arrays (their buffers' owners, by id) that the step under way hands to its deferred reward"""
        self.physics_failures_total = 0
        self.last_step_timing: tuple[int, int, int, int] | None = None
        self.reset_log: list[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray] | None]] | None = None
        """when a list: every new episode appends (rows, states, model fields) and every other write of a state
        row (a push) (rows, states, None) (a recorded window for a same-trajectory replay)"""
        self.models_in_effect: dict[str, np.ndarray] = {}
        """each row's randomised model fields since its last episode start (`patched/<field>`, `written/<field>`)"""
        ones = np.ones(self.nu, dtype=np.float32)
        self.spec = EnvSpec(
            name=task.name,
            num_envs=n,
            obs_dims=dict(self.obs_dims),
            action_dim=self.nu,
            action_low=-ones,
            action_high=ones,
            dt=self.dt,
            max_episode_steps=task.max_episode_steps,
            tracking_terms=TRACKING_TERMS,
        )

    # --- hooks ---------------------------------------------------------------------
    def make_layout(self, m: mujoco.MjModel) -> Any:
        """Column indices and constants the task reads from the model (cold path)."""
        raise NotImplementedError

    def carry_shapes(self) -> dict[str, tuple[int, type]]:
        """Per-row arrays (name: (width, dtype)) the task carries between steps, zero at an episode's start."""
        raise NotImplementedError

    def initial_states(self, n: int) -> np.ndarray:
        """(n, nstate) physics states of new episodes, drawn with `self.rng`."""
        raise NotImplementedError

    def randomization(self, n: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(fields the pool's reset patches, fields written into the env's model) of `n` new episodes."""
        raise NotImplementedError

    def first_command(self, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """A new episode's command and the control steps until the next one."""
        raise NotImplementedError

    def next_command(self, rng: np.random.Generator, current: np.ndarray) -> tuple[np.ndarray, int]:
        """The command that follows `current` and the control steps until the next one."""
        raise NotImplementedError

    def begin_step(self) -> None:
        """A control step starts (its actions checked): clocks common to all rows advance here."""

    def applied_forces(self) -> np.ndarray | None:
        """(n, frame_skip, nbody * 6) Cartesian forces and torques on the bodies (MuJoCo's `xfrc_applied`, world
        frame) during each substep of this control step, or None: none (the pool then applies none)."""
        return None

    def physics(self, rows: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        """Named quantities a step reads from the last state and sensors of `rows`."""
        raise NotImplementedError

    def _physics(self, rows: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        """`physics` under the private name the tracking-metric tests read it by."""
        return self.physics(rows)

    def observe(self, p: dict[str, np.ndarray], rows: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        """Observations of `rows` from their physics `p`."""
        raise NotImplementedError

    def controls(self, actions: np.ndarray) -> np.ndarray:
        """(n, nu) actuator controls (motor targets, in actuator order) of the actions."""
        raise NotImplementedError

    def step_inputs(self, p: dict[str, np.ndarray], actions: np.ndarray) -> dict[str, np.ndarray]:
        """The reward's inputs besides `p` (updating what the observation reads first)."""
        raise NotImplementedError

    def fell(self, p: dict[str, np.ndarray]) -> np.ndarray:
        """(n,) bool: the episode terminates."""
        raise NotImplementedError

    def advance_carry(self, actions: np.ndarray, p: dict[str, np.ndarray]) -> None:
        """After the reward's inputs are taken: the task's carry for the next step (new arrays)."""

    def reward(self, p: dict[str, np.ndarray], carry: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
        """(reward, each term times its weight) of a step."""
        raise NotImplementedError

    def after_step(self, done_ids: np.ndarray) -> None:
        """After the step's resets: changes to the state the next step starts from (pushes)."""

    # --- episodes ----------------------------------------------------------------
    def _reset_rows(self, env_ids: np.ndarray, states: np.ndarray | None = None) -> None:
        """New episodes on `env_ids`: model fields, physics state, sensors, command and the task's carry."""
        self._finish_pending()
        n = len(env_ids)
        if states is None:
            states = self.initial_states(n)
        states, sensordata = self._start_episodes(env_ids, states, *self.randomization(n))
        self._set_rows("_warmstart", env_ids, 0.0)
        self._set_rows("_state", env_ids, states)
        self._set_rows("_sensordata", env_ids, sensordata)
        fresh = self._first_commands(env_ids)
        if self.schedule is not None:  # a new episode starts the schedule over
            fresh["command"] = np.tile(self.schedule[0][0], (len(env_ids), 1))
        for name in ("command", "steps_until_next_cmd", *self.carry_names):
            self._set_rows(name, env_ids, fresh.get(name, 0))
        self._episode_length[env_ids] = 0
        self._time_limit[env_ids] = self.task.max_episode_steps
        self._episode_return[env_ids] = 0.0
        self.tracking.reset(env_ids)

    def _set_rows(self, name: str, rows: np.ndarray, values: Any) -> None:
        """Write `values` into `rows` of the array attribute `name`: in place, unless the step's unfinished reward
        reads that array (a new array then, so the reward still sees the values before the write)."""
        array = getattr(self, name)
        if _buffer_owner(array) in self._held_by_reward:
            array = array.copy()
            setattr(self, name, array)
        array[rows] = values

    def _first_commands(self, env_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Each new episode's own command generator, its first command and the steps until the next one."""
        command = np.empty((len(env_ids), 3))
        steps = np.empty(len(env_ids), dtype=np.int64)
        for i, row in enumerate(env_ids):  # cold path: one generator per new episode
            rng = np.random.Generator(np.random.PCG64([self.seed, int(row), int(self.row_episodes[row])]))
            self.command_rngs[row] = rng
            command[i], steps[i] = self.first_command(rng)
        self.row_episodes[env_ids] += 1
        return {"command": command, "steps_until_next_cmd": steps}

    def set_commands(self, commands: np.ndarray | None, steps: np.ndarray | None = None) -> None:
        """Hold `commands[i]` (vx, vy, yaw rate) for `steps[i]` control steps, one after another, from every
        episode's start on every row, the last one kept past the schedule's end; None: commands drawn again.

        No command is drawn while a schedule is set; it applies at once to the running episodes (their
        observations show it from the next step on).
        """
        if commands is None:
            self.schedule = None
            return
        commands = np.array(commands, dtype=np.float64).reshape(-1, 3)
        steps = np.array(steps, dtype=np.int64).reshape(-1)
        if len(commands) == 0 or len(steps) != len(commands) or np.any(steps < 1):
            raise ValueError(f"set_commands needs one command per segment of at least 1 step, got steps {steps}")
        self.schedule = (commands, np.cumsum(steps))
        self.command = self.scheduled_command(self._episode_length)

    def scheduled_command(self, episode_step: np.ndarray) -> np.ndarray:
        """(rows, 3) the schedule's command at each row's episode step (0: an episode's first step)."""
        commands, ends = self.schedule
        segment = np.minimum(np.searchsorted(ends, episode_step, side="right"), len(ends) - 1)
        return commands[segment]

    def _resample_due_commands(self) -> None:
        """Count down each row's command time; redraw where it ran out (each row from its own generator). Under
        a schedule: the command of each row's next step."""
        if self.schedule is not None:
            self.command = self.scheduled_command(self._episode_length + 1)
            return
        self.steps_until_next_cmd = self.steps_until_next_cmd - 1
        due = np.flatnonzero(self.steps_until_next_cmd <= 0)
        if due.size:  # a terminated row gets a new episode's command anyway
            self.command, self.steps_until_next_cmd = self.command.copy(), self.steps_until_next_cmd.copy()
            for row in due:
                self.command[row], self.steps_until_next_cmd[row] = self.next_command(
                    self.command_rngs[row], self.command[row]
                )

    # --- contract ------------------------------------------------------------------
    def reset(self) -> NpEnvState:
        self.row_episodes[:] = 0
        self._reset_rows(np.arange(self.num_envs, dtype=np.int32))
        return self._first_state()

    def reset_rows(self, env_ids: np.ndarray) -> dict[str, np.ndarray]:
        env_ids = np.asarray(env_ids, dtype=np.int32)
        self.row_episodes[env_ids] = 0  # an evaluation starting on these rows sees the same commands every time
        self._reset_rows(env_ids)
        first = self.observe(self.physics(env_ids), env_ids)
        for key, value in first.items():
            self._obs[key][env_ids] = value
        return first

    def truncate_after(self, env_ids: np.ndarray, steps: np.ndarray) -> None:
        self._time_limit[env_ids] = self._episode_length[env_ids] + checked_steps(steps, len(env_ids))

    def set_physics_state(self, qpos: np.ndarray, qvel: np.ndarray) -> NpEnvState:
        """Start every env at the given (qpos, qvel) rows, time 0 (tests and parity checks)."""
        states = np.zeros((self.num_envs, self.nstate))
        states[:, 1 : 1 + self.nq] = qpos
        states[:, 1 + self.nq : 1 + self.nq + self.nv] = qvel
        self._reset_rows(np.arange(self.num_envs, dtype=np.int32), states)
        return self._first_state()

    def physics_qpos_qvel(self, rows: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """Copies of (qpos, qvel) of `rows` as of the last `reset`/`step` (rendering)."""
        return self._state[rows, 1 : 1 + self.nq].copy(), self._state[rows, 1 + self.nq : 1 + self.nq + self.nv].copy()

    def _first_state(self) -> NpEnvState:
        self._obs = self.observe(self.physics())
        n = self.num_envs
        return NpEnvState(
            obs=self._obs,
            reward=np.zeros(n, dtype=np.float32),
            terminated=np.zeros(n, dtype=bool),
            truncated=np.zeros(n, dtype=bool),
            info={"final_obs": self._obs, "physics_failures": 0},
        )

    def _advance(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run the pool one control step at the motor targets; (state, sensordata, failed rows)."""
        prev_time = self._state[:, 0]
        state, sensordata, self._warmstart = self._pool_steps(
            self._state, self._warmstart, actions, self.applied_forces()
        )
        return state, sensordata, self._failed_rows(prev_time, state)

    def _failed_rows(self, prev_time: np.ndarray, state: np.ndarray) -> np.ndarray:
        """(n,) bool: the step did not advance time by one control step, or left a non-finite state."""
        advanced = state[:, 0] - prev_time
        return (advanced < self._min_advance) | (self._max_advance < advanced) | ~rows_finite(state)

    def step(self, actions: np.ndarray) -> NpEnvState:
        """One control step; the reward is computed on first read."""
        self._finish_pending()
        actions = np.array(actions, dtype=np.float64)
        if actions.shape != (self.num_envs, self.nu):
            raise ValueError(f"actions must have shape {(self.num_envs, self.nu)}, got {actions.shape}")
        prev_obs = self._obs
        self.begin_step()
        pool_start = time.perf_counter_ns()
        state, sensordata, failed = self._advance(actions)
        pool_end = time.perf_counter_ns()
        self._state, self._sensordata = state, sensordata
        p = self.physics()
        carry = self.step_inputs(p, actions)
        obs = self.observe(p)
        terminated = self.fell(p) & ~failed
        carry["terminated"] = terminated
        self._resample_due_commands()
        self.advance_carry(actions, p)
        self._episode_length += 1
        truncated = ((self._episode_length >= self._time_limit) & ~terminated) | failed
        n_failed = int(np.count_nonzero(failed))
        if n_failed:
            self.physics_failures_total += n_failed
            for key in obs:
                obs[key][failed] = prev_obs[key][failed]
        info: dict[str, Any] = {
            "physics_failures": n_failed,
            "physics_failed": failed,
            "episode_length": self._episode_length.copy(),
        }
        reset_start = time.perf_counter_ns()
        done_ids = np.flatnonzero(terminated | truncated).astype(np.int32)
        final_obs = obs
        ended = (self._episode_return[done_ids].copy(), self.tracking.ended(done_ids), info["episode_length"])
        if done_ids.size:
            final_obs = {k: v.copy() for k, v in obs.items()}
            # the deferred reward reads `p` and `carry` as they are now: the resets leave their arrays unchanged
            self._held_by_reward = {_buffer_owner(a) for a in (*p.values(), *carry.values())}
            try:
                self._reset_rows(done_ids)
            finally:
                self._held_by_reward = set()
            for key, value in self.observe(self.physics(done_ids), done_ids).items():
                obs[key][done_ids] = value
        self.after_step(done_ids)
        self.last_step_timing = (pool_start, pool_end, reset_start, time.perf_counter_ns())
        self._obs = obs
        info["final_obs"] = final_obs
        finish = functools.partial(self._rewards, p, carry, failed if n_failed else None, done_ids, ended)
        result = NpEnvState(obs=obs, reward=None, terminated=terminated, truncated=truncated, info=info, finish=finish)
        self._pending = result
        return result

    def _rewards(
        self,
        p: dict[str, np.ndarray],
        carry: dict[str, np.ndarray],
        failed: np.ndarray | None,
        done_ids: np.ndarray,
        ended: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """The deferred part of a step: reward terms, reward, running and finished episodes' returns and
        tracking sums (`ended`: the ended rows' return and tracking sums before their reset, the step's
        episode lengths). `info["step_tracking"]` holds the step's own `tracking_values` (a command schedule's
        evaluation sums them per segment)."""
        ended_return, ended_tracking, episode_length = ended
        reward, weighted = self.reward(p, carry)
        if failed is not None:  # a failed step earns nothing
            reward = np.where(failed, 0.0, reward)
            weighted = {k: np.where(failed, 0.0, v) for k, v in weighted.items()}
        self._episode_return += reward
        episode_return = self._episode_return.copy()
        if done_ids.size:
            episode_return[done_ids] = ended_return + reward[done_ids]
            self._episode_return[done_ids] = 0.0
        counted = np.ones(self.num_envs, dtype=bool) if failed is None else ~failed
        values = tracking_values(p, carry["command"])
        tracking = self.tracking.add(values, episode_length, counted, done_ids, ended_tracking)
        info = {
            "reward_terms": weighted,
            "episode_return": episode_return,
            "episode_tracking": tracking,
            "step_tracking": values,
        }
        return reward.astype(np.float32), info

    def _finish_pending(self) -> None:
        if self._pending is not None:
            self._pending.complete()
            self._pending = None

    def close(self) -> None:
        for name in ("pool", "reset_pool"):
            if getattr(self, name, None) is not None:
                getattr(self, name).close()
                setattr(self, name, None)

    # --- snapshots and bare physics (a recorded window's same-trajectory replay) -------------------
    def _pool_steps(
        self, state: np.ndarray, warm: np.ndarray, actions: np.ndarray, forces: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pool calls of one control step from (state, warm start): (state, sensordata, next warm start).
        `forces` (n, frame_skip, nbody * 6), where given, is applied to the bodies (`xfrc_applied`) per substep."""
        targets = np.ascontiguousarray(self.controls(actions)[:, None, :])
        spec = int(mujoco.mjtState.mjSTATE_CTRL)
        control = None
        if forces is not None:  # the pool sets what its control spec names before each substep, zeros the rest
            control = np.broadcast_to(targets, (self.num_envs, self.frame_skip, self.nu))
            control = np.ascontiguousarray(np.concatenate([control, forces], axis=2))
            spec |= int(mujoco.mjtState.mjSTATE_XFRC_APPLIED)
        h = float(self.model.opt.timestep)
        qv = slice(1 + self.nq, 1 + self.nq + self.nv)
        # the pool restores only the state, so one substep at a time: the solver's warm start (its last qacc, as an
        # Euler step's velocity change over h) is carried across control steps as plain mj_step calls carry it
        for k in range(self.frame_skip):
            # without forces every substep takes the same controls: one array for all of them
            ctrl = targets if control is None else np.ascontiguousarray(control[:, k : k + 1])
            qvel_before = state[:, qv]
            state, sensordata = self.pool.step(
                state,
                nstep=1,
                control_spec=spec,
                control=ctrl,
                initial_warmstart=warm,
                return_sensor=True,
                post_step_forward_sensor=False,
            )
            warm = (state[:, qv] - qvel_before) / h
        return state, sensordata, warm

    def bare_step(self, state: np.ndarray, warm: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The physics of one control step and nothing else (no observation, reward or carry): the pool calls
        `step` makes, from (state, warm start) to the next (state, warm start). Go1's optional pushes (forces on
        the torso) are not in a recorded window, so its bare replay with pushes on steps without them."""
        state, _, warm = self._pool_steps(state, warm, actions)
        return state, warm

    def bare_reset(
        self, env_ids: np.ndarray, states: np.ndarray, models: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The physics of new episodes on `env_ids`: their model fields (`patched/<field>` through the pools'
        reset patches, `written/<field>` into the pools' models), states and sensors; (states, sensordata)."""
        env_ids = np.asarray(env_ids, dtype=np.int32)
        patched = {k.split("/", 1)[1]: v for k, v in models.items() if k.startswith("patched/")}
        written = {k.split("/", 1)[1]: v for k, v in models.items() if k.startswith("written/")}
        for pool in (self.pool, self.reset_pool):
            pool_models = pool.get_model(env_ids.tolist())
            for field, values in written.items():
                for model, row in zip(pool_models, values, strict=True):
                    getattr(model, field)[:] = row
        self.pool.reset(env_ids, states, randomization=dict(patched) or None, skipsensor=True)
        return self.reset_pool.reset(env_ids, states, randomization=dict(patched) or None)

    def _start_episodes(
        self, env_ids: np.ndarray, states: np.ndarray, patched: dict[str, np.ndarray], written: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """`bare_reset` with the drawn model fields, kept as the rows' fields in effect (and logged when recording)."""
        models = {**{f"patched/{k}": v for k, v in patched.items()}, **{f"written/{k}": v for k, v in written.items()}}
        for key, values in models.items():
            values = np.asarray(values, dtype=np.float64)
            if key not in self.models_in_effect:
                self.models_in_effect[key] = np.zeros((self.num_envs, *values.shape[1:]))
            self.models_in_effect[key][env_ids] = values
        if self.reset_log is not None:
            logged = {k: np.array(v, dtype=np.float64, copy=True) for k, v in models.items()}
            self.reset_log.append((np.array(env_ids, dtype=np.int64), np.array(states, copy=True), logged))
        return self.bare_reset(env_ids, states, models)

    def log_state_write(self, rows: np.ndarray) -> None:
        """Call after writing the state of `rows` outside a new episode (a push): a recorded window keeps it."""
        if self.reset_log is not None:
            rows = np.array(rows, dtype=np.int64)
            self.reset_log.append((rows, self._state[rows].copy(), None))

    def snapshot(self) -> dict[str, Any]:
        """Everything the next steps depend on, as arrays (plus `rng`, the generator's state): physics state,
        sensors, solver warm starts, episode counters and returns, observation, commands, their timers and
        generators, the task's carry, the randomised model fields in effect, tracking sums. The last step's
        deferred rewards are computed first."""
        self._finish_pending()
        snap: dict[str, Any] = {
            "state": self._state.copy(),
            "sensordata": self._sensordata.copy(),
            "warmstart": self._warmstart.copy(),
            "episode_length": self._episode_length.copy(),
            "time_limit": self._time_limit.copy(),
            "episode_return": self._episode_return.copy(),
            "command": self.command.copy(),
            "steps_until_next_cmd": self.steps_until_next_cmd.copy(),
            "row_episodes": self.row_episodes.copy(),
            "command_rngs": np.stack([_generator_words(rng, self.rng) for rng in self.command_rngs]),
            "tracking_sums": self.tracking.sums.copy(),
            "physics_failures_total": np.array(self.physics_failures_total, dtype=np.int64),
        }
        snap.update({f"obs/{key}": value.copy() for key, value in self._obs.items()})
        snap.update({f"carry/{name}": getattr(self, name).copy() for name in self.carry_names})
        snap.update({f"model/{key}": value.copy() for key, value in self.models_in_effect.items()})
        snap.update(self._snapshot_extra())
        snap["rng"] = self.rng.bit_generator.state
        return snap

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Inverse of `snapshot` on an env built with the same arguments: it continues exactly as the one the
        snapshot was taken from (its pools' models get the snapshot's randomised fields)."""
        self._finish_pending()

        def f64(key: str) -> np.ndarray:
            return np.array(snapshot[key], dtype=np.float64, copy=True)

        def i64(key: str) -> np.ndarray:
            return np.array(snapshot[key], dtype=np.int64, copy=True)

        self._state, self._sensordata, self._warmstart = f64("state"), f64("sensordata"), f64("warmstart")
        self._episode_length, self._episode_return = i64("episode_length"), f64("episode_return")
        self._time_limit = restored_time_limit(snapshot, self.task.max_episode_steps)
        self.command, self.steps_until_next_cmd = f64("command"), i64("steps_until_next_cmd")
        self.row_episodes = i64("row_episodes")
        self.rng.bit_generator.state = snapshot["rng"]
        self.command_rngs = [_generator_from_words(words, self.rng) for words in np.asarray(snapshot["command_rngs"])]
        self.tracking.sums = f64("tracking_sums")
        self.physics_failures_total = int(snapshot["physics_failures_total"])
        self._obs = {
            key.split("/", 1)[1]: np.array(value, dtype=np.float32, copy=True)
            for key, value in snapshot.items()
            if key.startswith("obs/")
        }
        for name, (_, dtype) in self.carry_shapes().items():
            setattr(self, name, np.array(snapshot[f"carry/{name}"], dtype=dtype, copy=True))
        models = {k.split("/", 1)[1]: f64(k) for k in snapshot if k.startswith("model/")}
        if models:  # every row's fields at once (the pools' reset refreshes the derived constants as at a reset)
            self.bare_reset(np.arange(self.num_envs, dtype=np.int32), self._state, models)
        self.models_in_effect = models
        self._restore_extra(snapshot)

    def _snapshot_extra(self) -> dict[str, np.ndarray]:
        """A task's own state beyond the common one (arrays), for `snapshot`."""
        return {}

    def _restore_extra(self, snapshot: dict[str, Any]) -> None:
        """Restore what `_snapshot_extra` added."""


def _buffer_owner(array: np.ndarray) -> int:
    """The id of the array that owns `array`'s memory (itself, or the one its view chain starts from)."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return id(array)


def _generator_words(rng: np.random.Generator, shared: np.random.Generator) -> np.ndarray:
    """(7,) uint64 of a PCG64 generator's state: state and increment (high, low words), the buffered 32 bits,
    and 1 (0 where it is `shared`, the env's own generator, as every row's is before the first reset)."""
    if rng is shared:
        return np.zeros(7, dtype=np.uint64)
    s = rng.bit_generator.state
    mask = (1 << 64) - 1
    words = [s["state"]["state"] >> 64, s["state"]["state"] & mask, s["state"]["inc"] >> 64, s["state"]["inc"] & mask]
    return np.array([*words, s["has_uint32"], s["uinteger"], 1], dtype=np.uint64)


def _generator_from_words(words: np.ndarray, shared: np.random.Generator) -> np.random.Generator:
    """Inverse of `_generator_words`."""
    w = [int(x) for x in words]
    if not w[6]:
        return shared
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (w[0] << 64) | w[1], "inc": (w[2] << 64) | w[3]},
        "has_uint32": w[4],
        "uinteger": w[5],
    }
    return rng
