"""Snapshot evaluation: frozen policies, complete deterministic episodes, fresh resets.

A reported return is the evaluation of one frozen policy over complete episodes.
During training the learner takes a *snapshot* at each eval point: it freezes a
copy of the actor (`algorithm.snapshot_actor()`, its policy_version recorded),
asks the collector to reset the evaluation rows (the last `eval.num_envs` rows of
its env, never in replay) after that tick's physics step, and from the next tick
on those rows act with the frozen copy's mean action (`algorithm.act_snapshot`),
computed in the same inference phase as the training rows' actions, so it shares
the device with the update phases on the same strict schedule. Each eval row
counts its first `ceil(eval.episodes / eval.num_envs)` complete episodes; when
every row has them the snapshot's statistics are reported (a metric row with
`eval/return` = mean, `eval/return_median`, `eval/return_min`, `eval/return_max`,
`eval/return_std`, `eval/length`, `eval/episodes`, and where the snapshot was
taken: `eval/policy_version`, `eval/env_steps`, `eval/snapshot_s`). Rows run the
same number of episodes each, so short (falling) episodes are not over-counted.

A task that tracks commands (`EnvSpec.tracking_terms`, `envs.tracking`) adds, from
the episode sums its rows report when they end, each term averaged over every
counted step of every episode (steps after an episode's first second, so a
short episode weighs by its steps, and one that fell within its first second adds
only its fall) and `fall_fraction`, the fraction of episodes that terminated
rather than reaching their time limit (`eval/lin_vel_error`, ...). Other tasks
report nothing more.

The learner's side of it is `SnapshotEvals`: the schedule, the evaluation running, and the finished
results the runner logs. When to take one (`EvalSchedule`): every `eval.interval_s` seconds of the training
loop and/or every `eval.interval_env_steps` env steps, and always at the
`eval.at_seconds` marks. One evaluation runs at a time on the eval rows; a regular
point whose evaluation would not finish before the next mark (or the wall-clock
budget) is skipped, so the marks are honoured on time; a point that comes due
while an evaluation runs starts right after it.

The final snapshot (the policy the final checkpoint holds) is evaluated after the
training loop in the learner process by `rollout`, the same code `offpolicy.eval`
uses: `eval.episodes` fresh episodes, one per row of a small env of its own on
the collector's CPUs (the collector has stopped), so it never waits for the
training rows' physics.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from offpolicy.schemas import EvalConfig

TRACKING_KEYS = ("lin_vel_error", "yaw_rate_error", "command_speed", "fall_fraction")
"""tracking statistics an evaluation reports where its task has them (`tracking_statistics`)"""


def return_statistics(returns: np.ndarray, lengths: np.ndarray) -> dict[str, float]:
    """Mean, median, min, max, std of the returns, mean length and the episode count."""
    returns = np.asarray(returns, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.float64)
    return {
        "episodes": int(returns.size),
        "mean": float(returns.mean()),
        "median": float(np.median(returns)),
        "min": float(returns.min()),
        "max": float(returns.max()),
        "std": float(returns.std()),
        "length_mean": float(lengths.mean()),
    }


def tracking_statistics(terms: tuple[str, ...], sums: Any = (), fell: Any = ()) -> dict[str, float]:
    """Each tracking term's mean over the counted steps of all episodes, and the fraction of episodes that fell.

    `sums` (episodes, terms + 1) holds each episode's sums and, last, its counted steps (`envs.tracking`);
    `fell` marks the episodes that terminated. Empty for a task without tracking terms.
    """
    if not terms:
        return {}
    sums = np.asarray(sums, dtype=np.float64).reshape(-1, len(terms) + 1)
    steps = float(sums[:, -1].sum())
    means = sums[:, :-1].sum(axis=0) / steps if steps else np.full(len(terms), math.nan)
    return {**{t: float(m) for t, m in zip(terms, means, strict=True)}, "fall_fraction": float(np.mean(fell))}


@dataclass
class SnapshotEval:
    """One evaluation of a frozen snapshot on the eval rows, from the tick after their reset."""

    policy_version: int
    """the snapshot's policy_version"""
    env_steps: int
    """training env steps when the snapshot was taken"""
    snapshot_s: float
    """seconds of the training loop when the snapshot was taken"""
    reset_tick: int
    """the tick after whose step the eval rows were reset; their episodes count from the next one"""
    rows: int
    per_row: int
    started_at: float
    """host clock at the start (how long an evaluation takes, for the schedule)"""
    returns: list[list[float]] = field(default_factory=list)
    lengths: list[list[int]] = field(default_factory=list)
    tracking_terms: tuple[str, ...] = ()
    """the task's tracking terms (`envs.tracking`); none: no tracking statistics"""

    def __post_init__(self) -> None:
        self.returns = [[] for _ in range(self.rows)]
        self.lengths = [[] for _ in range(self.rows)]
        self.tracking: list[list[np.ndarray]] = [[] for _ in range(self.rows)]
        self.fell: list[list[bool]] = [[] for _ in range(self.rows)]
        self._remaining = self.rows * self.per_row

    @property
    def complete(self) -> bool:
        """Every row has finished its episodes."""
        return self._remaining == 0

    def observe(
        self,
        tick: int,
        done: np.ndarray,
        episode_return: np.ndarray,
        episode_length: np.ndarray,
        terminated: np.ndarray | None = None,
        episode_tracking: np.ndarray | None = None,
    ) -> None:
        """Count the eval rows' episodes that ended with transition `tick` (arrays over the eval rows;
        `terminated` and `episode_tracking`, the rows' tracking sums, for a task with tracking terms)."""
        if tick <= self.reset_tick or not done.any():
            return  # the episodes that ended at or before the reset belong to no snapshot
        width = len(self.tracking_terms) + 1
        for row in np.flatnonzero(done):
            if len(self.returns[row]) < self.per_row:
                self.returns[row].append(float(episode_return[row]))
                self.lengths[row].append(int(episode_length[row]))
                if self.tracking_terms:
                    self.tracking[row].append(np.array(episode_tracking[row, :width], dtype=np.float64))
                    self.fell[row].append(bool(terminated[row]))
                self._remaining -= 1

    def result(self) -> dict[str, Any]:
        """Statistics of the finished evaluation plus where its snapshot was taken."""
        returns = np.array([r for row in self.returns for r in row])
        lengths = np.array([n for row in self.lengths for n in row])
        sums = [t for row in self.tracking for t in row]
        fell = np.array([f for row in self.fell for f in row])
        return {
            **return_statistics(returns, lengths),
            **tracking_statistics(self.tracking_terms, np.array(sums), fell),
            "policy_version": self.policy_version,
            "env_steps": self.env_steps,
            "snapshot_s": self.snapshot_s,
            "tick": self.reset_tick,
            "returns": returns.tolist(),
            "lengths": lengths.astype(int).tolist(),
        }


def eval_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The `eval/*` metric row of a finished snapshot evaluation."""
    return {
        "eval/return": result["mean"],
        "eval/return_median": result["median"],
        "eval/return_min": result["min"],
        "eval/return_max": result["max"],
        "eval/return_std": result["std"],
        "eval/length": result["length_mean"],
        "eval/episodes": float(result["episodes"]),
        "eval/policy_version": float(result["policy_version"]),
        "eval/env_steps": float(result["env_steps"]),
        "eval/snapshot_s": float(result["snapshot_s"]),
        **{f"eval/{k}": float(result[k]) for k in TRACKING_KEYS if k in result},
    }


class EvalSchedule:
    """Decides, once per tick, whether a snapshot is due (host clocks and counters only)."""

    def __init__(self, settings: EvalConfig, budget_s: float | None) -> None:
        self.settings = settings
        self.budget_s = budget_s
        self.marks = sorted(float(t) for t in settings.at_seconds)
        """marks not yet taken, ascending"""
        self.next_time = settings.interval_s if settings.interval_s else math.inf
        self.next_steps = settings.interval_env_steps if settings.interval_env_steps else math.inf
        self.pending_mark = False
        """a mark came due (taken as soon as no evaluation runs)"""
        self.pending_regular: str | None = None
        """'time' or 'steps': a regular point came due while an evaluation was running"""
        self.last_duration_s: float | None = None

    def due(self, elapsed_s: float, env_steps: int, running: bool, estimate_s: float) -> bool:
        """Whether to start an evaluation now; `estimate_s` is how long one would take if none was timed yet."""
        if self.marks and elapsed_s >= self.marks[0]:
            while self.marks and elapsed_s >= self.marks[0]:
                self.marks.pop(0)
            self.pending_mark = True
        if elapsed_s >= self.next_time:
            every = self.settings.interval_s
            self.next_time = (math.floor(elapsed_s / every) + 1) * every
            self.pending_regular = self.pending_regular or "time"
        if env_steps >= self.next_steps:
            every = self.settings.interval_env_steps
            self.next_steps = (env_steps // every + 1) * every
            self.pending_regular = "steps"
        if running:
            return False
        if self.pending_mark:
            self.pending_mark, self.pending_regular = False, None
            return True
        if self.pending_regular is None:
            return False
        kind, self.pending_regular = self.pending_regular, None
        if kind == "steps":
            return True
        # a time point is taken only if it ends before the next mark and the budget: marks stay on time
        duration = self.last_duration_s if self.last_duration_s is not None else estimate_s
        limit = min([*self.marks[:1], *([self.budget_s] if self.budget_s else [])], default=math.inf)
        return elapsed_s + duration <= limit

    def finished(self, duration_s: float) -> None:
        """Record how long the last evaluation took."""
        self.last_duration_s = duration_s


class SnapshotEvals:
    """The snapshot evaluations of a run's eval rows: when one starts, what it counts, the finished results.

    The learner asks `due` once per tick (before its inference), freezes its actor and calls `start`
    when it is; `observe` counts the eval rows' episodes that ended with an ingested transition.
    """

    def __init__(self, settings: EvalConfig, rows: int, budget_s: float | None, spec: Any) -> None:
        self.rows = int(rows)
        """the eval rows (the last rows of the slots); 0: no snapshot evaluations during training"""
        self.settings = settings
        self.schedule = EvalSchedule(settings, budget_s)
        self.max_episode_steps = spec.max_episode_steps
        self.tracking_terms = tuple(getattr(spec, "tracking_terms", ()))
        self.current: SnapshotEval | None = None
        """the snapshot evaluation running on the eval rows, if any"""
        self.results: list[dict[str, Any]] = []
        """finished snapshot evaluations not yet logged (the runner takes them: `take_results`)"""
        self.history: list[dict[str, Any]] = []
        """every finished snapshot evaluation of this run (summary, tests)"""

    def due(self, elapsed_s: float, env_steps: int, tick_s: float) -> bool:
        """Whether a snapshot is due now (`tick_s`: recent seconds per tick, to size a first evaluation)."""
        if not self.rows:
            return False
        estimate = self.settings.episodes_per_row * (self.max_episode_steps + 1) * tick_s
        return self.schedule.due(elapsed_s, env_steps, self.current is not None, estimate)

    def start(self, policy_version: int, env_steps: int, elapsed_s: float, tick: int) -> None:
        """A snapshot of `policy_version` was frozen; its episodes count from the tick after `tick`."""
        self.current = SnapshotEval(
            policy_version=policy_version,
            env_steps=env_steps,
            snapshot_s=elapsed_s,
            reset_tick=tick,
            rows=self.rows,
            per_row=self.settings.episodes_per_row,
            started_at=time.monotonic(),
            tracking_terms=self.tracking_terms,
        )

    def observe(self, tick: int, *eval_rows: np.ndarray) -> None:
        """Count the episodes that ended with transition `tick` (`SnapshotEval.observe`'s arrays)."""
        if self.current is None:
            return
        self.current.observe(tick, *eval_rows)
        if self.current.complete:
            evaluation, self.current = self.current, None
            self.schedule.finished(time.monotonic() - evaluation.started_at)
            result = evaluation.result()
            self.results.append(result)
            self.history.append(result)

    def take_results(self) -> list[dict[str, Any]]:
        """The finished evaluations not yet logged; the list is empty afterwards."""
        results, self.results = self.results, []
        return results


# --------------------------------------------------------------------------- offline rollouts


class MeanPolicy:
    """An algorithm's deterministic (mean) action in env units for numpy observations, on its device."""

    def __init__(self, algorithm: Any, spec: Any, device: Any, snapshot: bool = False) -> None:
        import torch

        self.torch = torch
        self.act = algorithm.act_snapshot if snapshot else algorithm.act
        self.device = device
        low = torch.as_tensor(np.asarray(spec.action_low, np.float32), device=device)
        high = torch.as_tensor(np.asarray(spec.action_high, np.float32), device=device)
        self.low, self.high, self.mid, self.half = low, high, (high + low) / 2, (high - low) / 2

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        torch = self.torch
        with torch.no_grad():
            tensors = {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device) for k, v in obs.items()}
            action = self.act(tensors)
            action = torch.clamp(action * self.half + self.mid, self.low, self.high)
        return action.float().cpu().numpy()


class SampledPolicy(MeanPolicy):
    """Actions drawn as in training (the algorithm's `explore`: FastSAC's tanh-Gaussian, FlashSAC's held noise),
    in env units, for numpy observations, on its device.

    Reported returns use the mean action; this tells a brittle mean action apart from weights whose noisy
    behaviour has lost the task too. `explore` may keep per-row state sized for the rows it was built with
    (FlashSAC's held noise: the training rows), so the rows given are padded with zeros up to that count and
    the padding's actions dropped; every row's exploration state restarts on the first call (the rollout's
    fresh reset). Actions are random: repeat runs differ unless torch's generator is seeded alike.
    """

    def __init__(self, algorithm: Any, spec: Any, device: Any) -> None:
        super().__init__(algorithm, spec, device)
        self.rows = int(algorithm.num_envs)
        if int(spec.num_envs) > self.rows:
            raise ValueError(f"{spec.num_envs} rows to act for; sampling acts for at most {self.rows} (training rows)")
        self.algorithm = algorithm
        self.first = True
        self.act = self.sample

    def sample(self, obs: dict[str, Any]) -> Any:
        torch = self.torch
        n = next(iter(obs.values())).shape[0]
        padded = {k: torch.cat([v, v.new_zeros((self.rows - n, *v.shape[1:]))]) for k, v in obs.items()}
        reset = torch.full((self.rows,), self.first, dtype=torch.bool, device=self.device)
        self.first = False
        return self.algorithm.explore(padded, reset)[:n]


def rollout(
    env: Any,
    policy: Any,
    record_first: bool = False,
    tracking: dict[str, Any] | None = None,
    on_step: Any = None,
) -> tuple[np.ndarray, np.ndarray, list]:
    """One episode per env row from a fresh reset: (returns, lengths, [(qpos, qvel) of row 0 while it lasts]).

    Given a dict `tracking` and a task with tracking terms, puts each episode's tracking sums (`sums`) and
    whether it fell (`fell`) in it, the arguments of `tracking_statistics` after its `terms`. `on_step(step,
    state, live)`, where given, sees every step's state and the rows still in their first episode before it.
    """
    n = env.spec.num_envs
    terms = tuple(getattr(env.spec, "tracking_terms", ()))
    state = env.reset()
    returns = np.zeros(n, np.float64)
    lengths = np.zeros(n, np.int64)
    sums = np.zeros((n, len(terms) + 1))
    fell = np.zeros(n, bool)
    finished = np.zeros(n, bool)
    frames: list[tuple[np.ndarray, np.ndarray]] = []
    if record_first:
        frames.append(env.physics_qpos_qvel(0))
    for step in range(env.spec.max_episode_steps + 1):  # every row ends by its time limit
        state = env.step(policy(state.obs))
        if on_step is not None:
            on_step(step, state, ~finished)
        done = state.terminated | state.truncated
        new = done & ~finished
        returns[new] = state.info["episode_return"][new]
        lengths[new] = state.info["episode_length"][new]
        if terms:
            sums[new] = state.info["episode_tracking"][new]
            fell[new] = state.terminated[new]
        if record_first and not finished[0] and not done[0]:
            frames.append(env.physics_qpos_qvel(0))
        finished |= done
        if finished.all():
            break
    if tracking is not None and terms:
        tracking.update(sums=sums, fell=fell)
    return returns, lengths, frames


# --------------------------------------------------------------------------- the reference implementation


def observation_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword options that shape a Gymnasium task's observation (the policy needs them as trained)."""
    return {k: v for k, v in kwargs.items() if "observation" in k}


def gymnasium_rollout(
    gymnasium_id: str, kwargs: dict[str, Any], policy: Any, episodes: int, seed: int, max_episode_steps: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """`episodes` episodes of `policy` in Gymnasium's own `gymnasium.make(gymnasium_id, **kwargs)`, stepped in lockstep.

    Each env is reset with its own seed (`seed + i`) and runs until Gymnasium's own termination or time
    limit; the policy sees float32 observations under the `actor` key, as in training.
    """
    import gymnasium

    envs = [gymnasium.make(gymnasium_id, max_episode_steps=max_episode_steps, **kwargs) for _ in range(episodes)]
    try:
        obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]).astype(np.float32)
        returns = np.zeros(episodes)
        lengths = np.zeros(episodes, np.int64)
        active = np.ones(episodes, bool)
        while active.any():
            actions = policy({"actor": obs})
            for i in np.flatnonzero(active):
                next_obs, reward, terminated, truncated, _ = envs[i].step(actions[i])
                returns[i] += float(reward)
                lengths[i] += 1
                obs[i] = next_obs
                active[i] = not (terminated or truncated)
    finally:
        for env in envs:
            env.close()
    return returns, lengths


def dm_control_rollout(
    name: str, policy: Any, episodes: int, seed: int, max_episode_steps: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """`episodes` episodes of `policy` in dm_control's own suite environment for DMC task `name`, one after another.

    One environment, `envs.dmc.reference_env(name, seed)` (`suite.load(domain, task,
    task_kwargs={"random": seed})`), is reset for each episode, so its random state draws
    the episodes' initial states in turn. The policy sees the suite's observation dict
    flattened in this task's observation order (`envs.dmc.flatten_observation`), float32,
    one row under the `actor` key, and its action goes to `env.step` as given. An episode
    ends at the suite's time limit (1000 steps; the suite's tasks never terminate) or after
    `max_episode_steps` steps, whichever comes first.
    """
    import envs.dmc

    env = envs.dmc.reference_env(name, seed)
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, np.int64)
    try:
        for i in range(episodes):
            timestep = env.reset()
            while not timestep.last() and lengths[i] < max_episode_steps:
                obs = envs.dmc.flatten_observation(name, timestep.observation).astype(np.float32)
                timestep = env.step(policy({"actor": obs[None]})[0])
                returns[i] += float(timestep.reward)
                lengths[i] += 1
    finally:
        env.close()
    return returns, lengths
