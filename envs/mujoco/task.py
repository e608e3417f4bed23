"""Base class of a MuJoCo task: the model, the reset distribution, observation, reward, termination.

A task holds no per-env state; it maps batched physics arrays (rows = envs) to
observations, reward terms and termination flags. `MujocoNpEnv` owns the pool,
the state arrays and the auto-reset.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, ClassVar

import mujoco
import numpy as np

from envs.options import Integer, Option, parse_options


def gymnasium_asset(filename: str) -> str:
    """Path of an MJCF file shipped inside the installed gymnasium package (never copied)."""
    import gymnasium

    path = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets", filename)
    if not os.path.exists(path):
        raise FileNotFoundError(f"gymnasium asset {filename!r} not found at {path}")
    return path


@dataclass(slots=True)
class PhysicsView:
    """Batched physics quantities a task reads after a step (rows = envs)."""

    qpos: np.ndarray
    """(n, nq) generalized positions after the step"""
    qvel: np.ndarray
    """(n, nv) generalized velocities after the step"""
    qpos_qvel: np.ndarray
    """(n, nq + nv) both, adjacent (one block for range checks over the whole state)"""
    sensordata: np.ndarray
    """(n, nsensordata) sensors on the final state when the task asks for `fresh_sensors`"""
    act: np.ndarray | None = None
    """(n, na) actuator activations after the step (empty where the model has none)"""


@functools.cache
def ones(width: int) -> np.ndarray:
    """A read-only vector of `width` ones, made once: a matrix-vector product with it sums rows.

    Numpy's axis-1 reductions are several times slower on rows this narrow, and
    `np.ones` itself costs far more than the product right after a pool step
    (its Python code runs cold there).
    """
    vector = np.ones(width)
    vector.flags.writeable = False
    return vector


@functools.cache
def all_true(n: int) -> np.ndarray:
    """A read-only (n,) array of True, made once (`np.ones` is Python code, slow where it runs cold)."""
    flags = np.ones(n, dtype=bool)
    flags.flags.writeable = False
    return flags


def rows_finite(x: np.ndarray) -> np.ndarray:
    """(n,) bool: the row sum is finite: every entry is, and the row does not overflow (a blow-up either way)."""
    return np.isfinite(x @ ones(x.shape[1]))


def rows_within(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """(n,) bool: every entry of the row lies strictly inside (lo, hi) (counts the offending entries)."""
    outside = (x <= lo) | (x >= hi)
    return (outside @ ones(x.shape[1])) == 0


def clip(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """`np.clip(x, lo, hi)` (the same values, NaN kept) as two ufunc calls, without np.clip's Python layers."""
    return np.minimum(np.maximum(x, lo), hi)


class MujocoTask:
    """One MuJoCo task (Gymnasium-v5 semantics unless a suite overrides them), vectorised over envs with numpy."""

    name: ClassVar[str]
    gymnasium_id: ClassVar[str] = ""
    dm_control_id: ClassVar[str] = ""
    """`domain-task` of the DeepMind Control Suite task this one reproduces (empty for Gymnasium tasks)"""
    xml_file: ClassVar[str]
    frame_skip: ClassVar[int]
    max_episode_steps: ClassVar[int] = 1000
    reward_range: ClassVar[tuple[float, float] | None] = None
    """bounds (low, high) of one step's reward (EnvSpec.reward_range); None where the task declares none"""
    initial_states_ahead: ClassVar[bool] = True
    """New episodes' states may be drawn ahead of need (`initial_states` reads only `env.rng`, not the pools):
    the env draws a batch while its caller waits between steps, and a reset takes the next rows of it."""
    fresh_sensors: ClassVar[bool] = False
    """Recompute sensors on the final state of a step (one extra mj_forward per env)."""
    acc_sensors_from_last_substep: ClassVar[bool] = False
    """With `fresh_sensors`: only position/velocity sensors are recomputed on the final state (a forward pass
    with constraints disabled, in a second pool); acceleration-stage sensors (touch, force, accelerometer) keep
    the values of the last substep, as after dm_control's `Physics.step` (mj_step, then mj_step1)."""
    reset_without_actuation: ClassVar[bool] = False
    """With `fresh_sensors`: evaluate the sensors of a new episode's state with actuation disabled
    (dm_control's `after_reset`, in a third pool), so acceleration-stage sensors see no actuator forces."""
    options: ClassVar[dict[str, Option]] = {}
    """The task's Gymnasium keyword options: the default, type and bounds of each (all tunable through
    task overrides; `max_episode_steps` is every task's, see `option_specs`)."""
    gymnasium_fixed_kwargs: ClassVar[dict[str, Any]] = {}
    """Gymnasium keyword options this task always matches (terms the pool cannot provide)."""

    def __init__(self, **overrides: Any) -> None:
        """Check `overrides` against `option_specs()` (`OptionError`, one line, at the first bad one)."""
        cfg = parse_options(self.name, self.option_specs(), overrides)
        self.max_episode_steps = cfg.pop("max_episode_steps")
        self.cfg = cfg

    @classmethod
    def option_specs(cls) -> dict[str, Option]:
        """Every option the constructor takes: the task's own, then the time limit (episodes of at least one step)."""
        return {**cls.options, "max_episode_steps": Integer(cls.max_episode_steps, gt=0)}

    # --- model -----------------------------------------------------------------
    def build_spec(self) -> mujoco.MjSpec:
        """The MJCF file as an MjSpec; tasks add sensors here (the file stays untouched)."""
        return mujoco.MjSpec.from_file(gymnasium_asset(self.xml_file))

    def build_model(self) -> mujoco.MjModel:
        """Compile the task's model (the env's `model`: metadata and rendering)."""
        return self.build_spec().compile()

    def build_pool_model(self, model: mujoco.MjModel) -> mujoco.MjModel:
        """The model the pool clones per env: `model` itself unless a task leaves out render-only assets."""
        return model

    def gymnasium_kwargs(self) -> dict[str, Any]:
        """Keyword arguments that make `gymnasium.make(gymnasium_id, **kwargs)` match this task."""
        return {**self.cfg, **self.gymnasium_fixed_kwargs}

    # --- episode -----------------------------------------------------------------
    def initial_states(self, env: Any, env_ids: np.ndarray) -> np.ndarray:
        """Full physics state rows (the pool's layout) for new episodes of `env_ids`, drawn with `env.rng`."""
        qpos, qvel = self.reset_qpos_qvel(env.rng, len(env_ids), env.qpos0, env.nv)
        return env.states_from(qpos, qvel)

    def reset_qpos_qvel(
        self, rng: np.random.Generator, n: int, qpos0: np.ndarray, nv: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Initial (qpos, qvel) rows: Gymnasium's uniform noise on both (overridden where it differs)."""
        s = self.cfg["reset_noise_scale"]
        qpos = qpos0 + rng.uniform(-s, s, size=(n, qpos0.shape[0]))
        qvel = rng.uniform(-s, s, size=(n, nv))
        return qpos, qvel

    def observe(self, p: PhysicsView) -> np.ndarray:
        """Actor observation rows, float32."""
        raise NotImplementedError

    def progress(self, p: PhysicsView) -> np.ndarray:
        """(n, k) positions whose finite difference over dt gives the forward velocity terms."""
        return p.qpos[:, :1]

    def is_healthy(self, p: PhysicsView) -> np.ndarray:
        """(n,) bool: Gymnasium's healthy rule; tasks without one are always healthy (a shared read-only array)."""
        return all_true(p.qpos.shape[0])

    def reward_terms(
        self, p: PhysicsView, velocity: np.ndarray, action: np.ndarray, healthy: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Named reward terms with Gymnasium's `reward_*` info names; the reward is their sum."""
        raise NotImplementedError

    def reward(self, terms: dict[str, np.ndarray]) -> np.ndarray:
        """The step reward from the named terms: Gymnasium's sum."""
        return sum(terms.values())

    def terminated(self, healthy: np.ndarray) -> np.ndarray:
        """Gymnasium's termination: unhealthy while `terminate_when_unhealthy`."""
        if self.cfg.get("terminate_when_unhealthy", False):
            return ~healthy
        return np.zeros(healthy.shape, dtype=bool)

    def control_cost(self, action: np.ndarray) -> np.ndarray:
        """ctrl_cost_weight * |a|^2 on the action as given (Gymnasium does not clip it)."""
        return self.cfg["ctrl_cost_weight"] * np.einsum("ij,ij->i", action, action)
