"""A deterministic, numpy-only fake `NpEnv` for runtime tests; it records every transition it produces.

Observations encode (env id, global step, episode step, episode id), so any
shuffled, dropped, duplicated or torn transition is visible. Episodes end by a
seeded termination draw or by the time limit (truncation), with auto-reset and
the pre-reset observation in `info["final_obs"]`. With `record_path`, `close()`
saves everything the env produced (in the collector process) for the tests to
compare with what reached replay.
"""

from __future__ import annotations

import time

import numpy as np

from envs.core import ACTOR_OBS_KEY, EnvSpec, NpEnv, NpEnvState


class FakeEnv(NpEnv):
    """Deterministic fake env; optional random step delays and a `critic` obs key."""

    def __init__(
        self,
        num_envs: int,
        seed: int = 0,
        obs_dim: int = 6,
        action_dim: int = 3,
        max_episode_steps: int = 7,
        terminate_prob: float = 0.1,
        step_delay_s: float = 0.0,
        busy_step_s: float = 0.0,
        critic_obs: bool = False,
        record_path: str | None = None,
        asymmetric_bounds: bool = True,
        fail_prob: float = 0.0,
        deferred_reward_busy_s: float = 0.0,
        cpu_ids=None,
        nthread=None,
    ) -> None:
        self.num_envs = num_envs
        self.rng = np.random.default_rng(seed)
        self.obs_dim = obs_dim
        self.step_delay_s = step_delay_s
        self.busy_step_s = busy_step_s
        self.deferred_reward_busy_s = deferred_reward_busy_s
        """> 0: hand the reward back pending (`NpEnvState.finish`), and burn this much CPU finishing it (recorded
        as `reward_finish_ns`: its start and end)"""
        self.record_path = record_path
        obs_dims = {ACTOR_OBS_KEY: obs_dim}
        if critic_obs:
            obs_dims["critic"] = obs_dim + 2
        low = np.full(action_dim, -1.0, np.float32)
        high = np.full(action_dim, 1.0, np.float32)
        if asymmetric_bounds:
            low = np.linspace(-2.0, -0.5, action_dim).astype(np.float32)
            high = np.linspace(0.5, 3.0, action_dim).astype(np.float32)
        self.spec = EnvSpec(
            name="fake",
            num_envs=num_envs,
            obs_dims=obs_dims,
            action_dim=action_dim,
            action_low=low,
            action_high=high,
            dt=0.01,
            max_episode_steps=max_episode_steps,
        )
        self.terminate_prob = terminate_prob
        self.fail_prob = fail_prob
        """chance per row and step of a physics failure (reported like MujocoNpEnv: truncated, reward 0)"""
        self.global_step = 0
        self.episode_step = np.zeros(num_envs, np.int64)
        self.episode_id = np.arange(num_envs, dtype=np.int64) * 1000
        self.episode_return = np.zeros(num_envs)
        self.records: dict[str, list[np.ndarray]] = {}
        self.cpu_ids = cpu_ids

    def _obs(self) -> dict[str, np.ndarray]:
        n = self.num_envs
        base = np.zeros((n, self.obs_dim), np.float32)
        base[:, 0] = np.arange(n)
        base[:, 1] = self.global_step
        base[:, 2] = self.episode_step
        if self.obs_dim > 3:
            base[:, 3] = self.episode_id
        if self.obs_dim > 4:
            base[:, 4:] = self.rng.standard_normal((n, self.obs_dim - 4))
        out = {ACTOR_OBS_KEY: base}
        if "critic" in self.spec.obs_dims:
            out["critic"] = np.concatenate([base, -base[:, :2]], axis=1)
        return out

    def _record(self, **arrays: np.ndarray) -> None:
        if self.record_path is None:
            return
        for k, v in arrays.items():
            self.records.setdefault(k, []).append(np.array(v, copy=True))

    def reset(self) -> NpEnvState:
        self._last_obs = self._obs()
        n = self.num_envs
        return NpEnvState(
            obs=self._last_obs,
            reward=np.zeros(n, np.float32),
            terminated=np.zeros(n, bool),
            truncated=np.zeros(n, bool),
            info={"final_obs": self._last_obs, "physics_failures": 0},
        )

    def step(self, actions: np.ndarray) -> NpEnvState:
        actions = np.asarray(actions, dtype=np.float32)
        assert actions.shape == (self.num_envs, self.spec.action_dim), actions.shape
        if self.step_delay_s > 0:
            time.sleep(self.rng.uniform(0, self.step_delay_s))
        if self.busy_step_s > 0:  # stands in for physics: burns the collector's CPU
            _burn(self.busy_step_s)
        prev = self._last_obs
        self.global_step += 1
        self.episode_step += 1
        reward = (actions.sum(axis=1) + 0.01 * np.arange(self.num_envs) + self.global_step).astype(np.float32)
        terminated = self.rng.random(self.num_envs) < self.terminate_prob
        truncated = (self.episode_step >= self.spec.max_episode_steps) & ~terminated
        failed = np.zeros(self.num_envs, bool)
        if self.fail_prob > 0:  # like MujocoNpEnv: a failed row is truncated with zero reward, then reset
            failed = self.rng.random(self.num_envs) < self.fail_prob
            terminated, truncated = terminated & ~failed, truncated | failed
            reward = np.where(failed, 0.0, reward).astype(np.float32)
        self.episode_return += reward
        final_obs = self._obs()
        done = terminated | truncated
        info = {
            "episode_return": self.episode_return.copy(),
            "episode_length": self.episode_step.copy(),
            "physics_failures": int(failed.sum()),
            "physics_failed": failed,
        }
        obs = final_obs
        if done.any():
            self.episode_step[done] = 0
            self.episode_id[done] += 1
            self.episode_return[done] = 0.0
            fresh = self._obs()
            obs = {k: np.where(done[:, None], fresh[k], v) for k, v in final_obs.items()}
        self._record(
            **{f"obs/{k}": v for k, v in prev.items()},
            **{f"next_obs/{k}": v for k, v in final_obs.items()},
            action=actions,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            physics_failed=failed,
        )
        self._last_obs = obs
        info["final_obs"] = final_obs
        if self.deferred_reward_busy_s > 0:  # stands in for a task's reward numpy, run on first read
            extra = {"episode_return": info.pop("episode_return")}

            def finish(reward=reward, extra=extra, busy_s=self.deferred_reward_busy_s):
                start = time.perf_counter_ns()  # the runtime's timeline clock: the tests order the work by it
                _burn(busy_s)
                self._record(reward_finish_ns=np.array([start, time.perf_counter_ns()]))
                return reward, extra

            return NpEnvState(obs, None, terminated, truncated, info, finish=finish)
        return NpEnvState(obs=obs, reward=reward, terminated=terminated, truncated=truncated, info=info)

    def reset_rows(self, env_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Start new episodes on `env_ids` between steps (recorded as `forced_reset` with the step they follow)."""
        ids = np.asarray(env_ids, dtype=np.int64)
        self.episode_step[ids] = 0
        self.episode_id[ids] += 1
        self.episode_return[ids] = 0.0
        fresh = self._obs()
        for k, v in self._last_obs.items():
            v[ids] = fresh[k][ids]
        mask = np.zeros(self.num_envs, bool)
        mask[ids] = True
        self._record(forced_reset=mask, forced_reset_step=np.array(self.global_step))
        return {k: v[ids].copy() for k, v in self._last_obs.items()}

    def close(self) -> None:
        if self.record_path is not None and self.records:
            np.savez(self.record_path, **{k: np.stack(v) for k, v in self.records.items()})
            self.records = {}


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def make(name: str = "fake", num_envs: int = 4, seed: int = 0, **kwargs) -> FakeEnv:
    """`envs.make`-shaped factory (the collector passes cpu_ids and nthread)."""
    return FakeEnv(num_envs=num_envs, seed=seed, **kwargs)


def make_failing(name: str = "fake", num_envs: int = 4, seed: int = 0, **kwargs) -> FakeEnv:
    """A factory that fails while building the env (startup failure path)."""
    raise ValueError("fake env refuses to build")
