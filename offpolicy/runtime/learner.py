"""The learner: the only actor, the replay, the exploration state and the device, in one thread.

Per tick t (docs/design.md, "One tick"):

    wait       until the collector published obs_t (spin, then block; health-checked)
    inference  obs slot -> device -> algorithm.explore (no grad) -> scale to env units
               -> action slot, stamped with policy_version v; record (t, v); publish
    ingest     transition t-1 from the ingress ring into replay, release its slot
    update     the update phase (k updates); policy_version += 1 at its end

`Learner.run` is that protocol and nothing more; what is not the protocol lives in collaborators it
calls at named points: `LearnerMeter` (`offpolicy.runtime.metering`: phase, stage and warm-up timings,
the `perf/*` metrics), `SnapshotEvals` (`offpolicy.runtime.snapshot_eval`: when a snapshot evaluation
starts, what it counts) and `LearnerFaults` (test hooks; `NoFaults` by default). `num_envs` counts the
training rows; `slot_rows` all rows of the slots (the training rows, then the evaluation rows).

Everything runs in this one thread on one stream, so inference never overlaps an
update phase and each tick's actions come from one complete parameter state (the
timeline proves the first, `tick_versions` and the ingress headers the second).
Exploration state lives in the algorithm, in this process, and is reset per env
from the reset mask the collector writes with each observation.

Evaluation rows (`EvalRows`, the last rows of the collector's env) run snapshot
evaluations (`offpolicy.runtime.snapshot_eval`): at an eval point the learner freezes a copy of
the actor (`algorithm.snapshot_actor()`, recording its policy_version), asks the
collector to reset those rows after this tick's step, and from the next tick on
they act with the frozen copy's mean action (`algorithm.act_snapshot`) in the same
inference phase as the training rows, until each row finished its episodes. Their
transitions are dropped at ingest (never in replay, never in `observe`). So every
inference still happens between complete update phases, every training action of
a tick comes from the tick's policy_version, and every eval episode from one
frozen snapshot.

Stopping: `request_stop(signum)` (the runner's SIGINT/SIGTERM handler) makes the
loop leave at the next tick boundary or inside its next wait, with the algorithm
between update phases (a consistent state to checkpoint). A failed collector seen
by the watchdog sets `safe_stop`: the learner raises the collector's failure at its
next safe point (a wait, a tick boundary, the end of an update phase, or between
two updates of an eager phase: `UpdatesStopped`), its state intact. Physics failures: the
rows the collector marks as failed never reach replay. Non-finite actions never
reach the collector (they become the action range's midpoint and are counted);
an algorithm exposing `nonfinite_streak` (consecutive skipped updates with
non-finite losses, a device tensor read without blocking) stops the run after
`max_nonfinite_updates` in a row.
"""

from __future__ import annotations

import threading
import time
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from offpolicy.algorithms.contract import UpdatesStopped
from offpolicy.replay_buffer import ReplayBuffer
from offpolicy.runtime.collector_process import CollectorProcess, RunFailure
from offpolicy.runtime.ingress import HEADER_NUM_DONE, HEADER_PHYSICS_FAILURES, HEADER_POLICY_VERSION, IngressRing
from offpolicy.runtime.metering import (
    ACTION_COPY,
    EVAL,
    H2D,
    INFERENCE_STAGES,
    POLICY,
    POST,
    LearnerMeter,
    StageMarks,
    ingress_counters,
    ring_counters,
)
from offpolicy.runtime.slots import (
    ACTION_POLICY_VERSION,
    ACTION_TICK,
    OBS_TICK,
    PRODUCED,
    RESET_REQUEST_TICK,
    SharedSegment,
    Waiter,
)
from offpolicy.runtime.snapshot_eval import SnapshotEvals
from offpolicy.runtime.timeline import Timeline
from offpolicy.schemas import EvalConfig

SAFE_POINT_GRACE_S = (0.5, 10.0)
"""bounds of how long the watchdog waits for the learner's next safe point: twice the last update phase's
time per update, so a slow CPU update still ends between two updates, within these bounds"""

# Where the learner is, as the failure message says it (`learner.activity`).
STARTING = "while the learner started its loop"
WAITING_FOR_OBS = "while the learner waited for its observations"
INFERRING = "while the learner ran inference"
WAITING_FOR_TRANSITION = "while the learner waited for its transition"
INGESTING = "while the learner ingested a transition"
UPDATING = "during the learner's update phase"
WARMING_UP = "during the learner's first update phase (compile and CUDA-graph warm-up)"
BETWEEN_TICKS = "while the learner logged metrics or wrote a checkpoint between ticks"

__all__ = ["INFERENCE_STAGES", "Learner", "LearnerFaults", "NoFaults", "TickGraph"]


class TickGraph:
    """The policy part of an inference tick as one CUDA graph (`runtime.tick_graph=true`).

    The graph copies the observation and reset slots (page-locked host memory, fixed addresses)
    to the device, runs the training rows' `explore` and the evaluation rows' snapshot `act`,
    `finish` (the learner's finite check, kept copy and scaling into env units) and copies the
    actions into the action slot; the host launches it and waits for it. One graph per parity
    of the tick, because `finish` keeps the normalised actions in `tick_actions[tick % 2]`.
    Capture goes through `CapturedCall` (warm-up calls on a side stream, then capture; eager
    for good if capture fails, the error in `error`).
    """

    def __init__(
        self, algorithm: Any, obs_host: dict[str, torch.Tensor], reset_host: torch.Tensor, action_host: torch.Tensor,
        finish: Any, num_train: int, warmup: int,
    ) -> None:  # fmt: skip
        from offpolicy.algorithms.capture import CapturedCall

        self.algorithm, self.finish, self.num_train = algorithm, finish, int(num_train)
        self.obs_host, self.reset_host, self.action_host = obs_host, reset_host, action_host
        device = algorithm.device
        self.obs_dev = {k: torch.empty(v.shape, dtype=v.dtype, device=device) for k, v in obs_host.items()}
        self.reset_dev = torch.empty(reset_host.shape, dtype=reset_host.dtype, device=device)
        self.calls = [CapturedCall(lambda p=parity: self._body(p), warmup) for parity in (0, 1)]

    def _body(self, parity: int) -> dict:
        for k, v in self.obs_host.items():
            self.obs_dev[k].copy_(v, non_blocking=True)
        self.reset_dev.copy_(self.reset_host, non_blocking=True)
        n = self.num_train
        action = self.algorithm.explore_in_graph({k: v[:n] for k, v in self.obs_dev.items()}, self.reset_dev[:n])
        if self.reset_dev.shape[0] > n:
            eval_obs = {k: v[n:] for k, v in self.obs_dev.items()}
            action = torch.cat([action, self.algorithm.act_snapshot_in_graph(eval_obs)])
        self.action_host.copy_(self.finish(action, parity), non_blocking=True)
        return {}

    def launch(self, parity: int) -> None:
        """Launch the tick's graph (or its eager warm-up / the capture); returns before the device is done."""
        self.calls[parity]()

    def __call__(self, parity: int) -> None:
        """Launch the tick's graph and wait until the actions are in the slot."""
        self.launch(parity)
        torch.cuda.current_stream().synchronize()

    @property
    def error(self) -> str | None:
        return next((c.error for c in self.calls if c.error), None)


class ProtocolError(RuntimeError):
    """The slots broke an invariant (a tick or policy_version that does not match): never expected."""


class InjectedLearnerFault(RuntimeError):
    """Raised by runtime.fault.learner_raise_at_tick."""


class StopRequested(Exception):
    """A SIGINT/SIGTERM asked the loop to stop; raised at a tick boundary or inside a wait."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stop requested by signal {signum}")


class NonFiniteUpdates(RuntimeError):
    """Too many consecutive updates had non-finite losses (each was skipped; the parameters are intact)."""


@dataclass(frozen=True)
class CollectorLink:
    """The learner's side of the collector: its env's spec (all rows), the slots, the ingress ring, the waiter."""

    spec: Any
    segment: SharedSegment
    ring: IngressRing
    waiter: Waiter
    collector: CollectorProcess


@dataclass(frozen=True)
class TrainPlan:
    """How long and how much the learner trains."""

    num_ticks: int
    updates_per_step: int
    learning_starts: int
    seed: int = 0
    max_seconds: float | None = None
    """wall-clock budget of the tick loop (None: none)"""
    start_env_steps: int = 0
    """training env steps before this run's first tick (a resumed run's)"""
    max_nonfinite_updates: int = 100


@dataclass(frozen=True)
class EvalRows:
    """The evaluation rows (the last `num_envs` rows of the slots) and the settings of their snapshot evaluations."""

    num_envs: int = 0
    settings: EvalConfig | None = None


@dataclass(frozen=True)
class TickOptions:
    """`runtime.keep_awake_us` (CUDA: keep the device awake through the observation wait) and `runtime.tick_graph`."""

    keep_awake_us: float = 0.0
    tick_graph: bool = False


class NoFaults:
    """The learner's fault hooks, called at three points of the loop; this default injects nothing."""

    def at_tick(self, tick: int) -> None:
        """After the wait for tick `tick`'s observations."""

    def before_update(self, tick: int) -> None:
        """Inside tick `tick`'s update phase, before the algorithm's updates."""

    def after_last(self, tick: int) -> None:
        """After the last transition was ingested (`tick` is the tick count)."""


@dataclass(frozen=True)
class LearnerFaults(NoFaults):
    """Test hooks (`runtime.fault.learner_*`): raise at a tick; sleep in one tick's update phase (or, for
    the tick count, after the last transition)."""

    raise_at_tick: int = -1
    sleep_at_tick: int = -1
    sleep_s: float = 0.0

    def at_tick(self, tick: int) -> None:
        """Raise `InjectedLearnerFault` at `raise_at_tick`."""
        if tick == self.raise_at_tick:
            raise InjectedLearnerFault(f"injected fault (runtime.fault.learner_raise_at_tick={tick})")

    def before_update(self, tick: int) -> None:
        """Sleep `sleep_s` in the update phase of `sleep_at_tick` (a deliberately long learner phase)."""
        if tick == self.sleep_at_tick:
            time.sleep(self.sleep_s)

    def after_last(self, tick: int) -> None:
        """Sleep `sleep_s` after the last transition when `sleep_at_tick` is the tick count."""
        if tick == self.sleep_at_tick:
            time.sleep(self.sleep_s)


class Learner:
    """Runs the tick loop against a collector through the shared segment.

    `run` is the protocol (docs/design.md, "One tick"); what is not the protocol lives in collaborators
    it calls at named points: `meter` (`LearnerMeter`: timings and the `perf/*` rows), `evals`
    (`SnapshotEvals`: the snapshot evaluations on the eval rows) and `faults` (`LearnerFaults`: test hooks).
    """

    def __init__(
        self,
        algorithm: Any,
        replay: ReplayBuffer,
        link: CollectorLink,
        plan: TrainPlan,
        device: torch.device,
        timeline: Timeline,
        evaluation: EvalRows,
        options: TickOptions,
        faults: NoFaults | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.replay = replay
        self.spec = link.spec
        self.segment = link.segment
        self.ring = link.ring
        self.waiter = link.waiter
        self.collector = link.collector
        self.timeline = timeline
        self.device = device
        self.num_ticks = int(plan.num_ticks)
        self.updates_per_step = int(plan.updates_per_step)
        self.learning_starts = int(plan.learning_starts)
        self.faults = faults if faults is not None else NoFaults()
        """test hooks at three points of the loop (`runtime.fault.learner_*`)"""
        self.meter = LearnerMeter(link.segment, device)
        """phase, stage and warm-up timings, and the `perf/*` metrics"""
        self.keep_awake_us = float(options.keep_awake_us) if device.type == "cuda" else 0.0
        """CUDA: spin through the observation wait, launching a tiny kernel this often once the device idles"""
        self._awake_scalar = torch.zeros(1, device=device) if self.keep_awake_us > 0 else None
        self._last_update_end: Any = None
        """CUDA event recorded after the latest update phase (the device is idle once it has passed)"""
        self._init_stopping()
        self._init_rows(link.spec, evaluation, plan)
        self._init_counters(plan)
        self._init_views(options)

    def _init_rows(self, spec: Any, evaluation: EvalRows, plan: TrainPlan) -> None:
        """Training and evaluation rows, and the snapshot evaluations on the latter."""
        self.slot_rows = spec.num_envs
        """rows of the obs/action slots: training rows, then evaluation rows"""
        self.num_eval_envs = int(evaluation.num_envs)
        self.num_envs = self.slot_rows - self.num_eval_envs
        """training rows: their transitions go to replay (the algorithm's per-env state has this many)"""
        if self.num_envs < 1 or self.num_eval_envs < 0:
            raise ValueError(
                f"eval_envs={evaluation.num_envs} must be in [0, {self.slot_rows - 1}] for {self.slot_rows} env rows"
            )
        self.obs_keys = list(spec.obs_dims)
        self.start_env_steps = int(plan.start_env_steps)
        """training env steps before this run's first tick (a resumed run's)"""
        settings = evaluation.settings or EvalConfig(num_envs=self.num_eval_envs, interval_s=None)
        self.evals = SnapshotEvals(settings, self.num_eval_envs, plan.max_seconds, spec)
        """the snapshot evaluations on the eval rows (the runner logs their results)"""

    def _init_stopping(self) -> None:
        """Where the learner is and how a stop reaches it."""
        self.in_update = False
        """inside an update phase (a stop landing here leaves part of its updates applied)"""
        self.activity = STARTING
        """where the learner is, for the message if the collector fails now (`while ...`)"""
        self.safe_stop = threading.Event()
        """set by the watchdog when the collector failed: stop at the next safe point, the state intact"""
        if hasattr(self.algorithm, "stop_between_updates"):  # an eager update phase stops between two updates
            self.algorithm.stop_between_updates = self.safe_stop
        self._update_s = 0.0
        """host seconds per update of the last update phase (sizes `safe_point_grace_s`)"""
        self.stop_signal: int | None = None
        """set by `request_stop`: the loop leaves at the next tick boundary or wait"""

    def _init_counters(self, plan: TrainPlan) -> None:
        """Budgets, RNG and the counters the summary and checkpoints read."""
        self.max_nonfinite_updates = int(plan.max_nonfinite_updates)
        self._streak_check: tuple[Any, torch.Tensor] | None = None
        """(event, pinned host copy) of the algorithm's non-finite streak after the last update phase"""
        self._nonfinite_actions = torch.zeros((), dtype=torch.int64, device=self.device)
        """rows whose action had a non-finite entry (device counter, read at log time)"""
        self._loop_start = time.monotonic()
        self._tick_start = self._loop_start
        self._tick_s = 0.0
        """recent seconds per tick (exponential average; sizes the first evaluation's duration)"""
        self.max_seconds = plan.max_seconds
        """wall-clock budget of the tick loop (None: none); the run then ends early, cleanly"""
        self.random_ticks = -(-self.learning_starts // self.num_envs)
        """ticks of uniform-random actions (train.learning_starts env steps), drawn here without the actor"""
        self._generator = torch.Generator(device=self.device).manual_seed(plan.seed)
        self._observe = getattr(self.algorithm, "observe", None)
        self.ticks_done = 0
        """ticks whose transition reached replay"""
        self.final_counters: dict[str, int] = {}
        """ingress counters read when the views were released (summary)"""
        self.policy_version = 0
        """advances by one at the end of every update phase, never elsewhere"""
        self._versions = array("q")
        """policy_version used by each tick's actions, appended per tick (8 bytes a tick: runs
        bounded only by wall-clock never allocate for ticks they will not reach)"""
        self.tick = -1
        """the tick in progress (messages)"""
        self.updates_done = 0
        self.last_update_metrics: dict[str, torch.Tensor] = {}
        self.episode_return_sum = 0.0
        self.episode_length_sum = 0
        self.episodes = 0
        self.physics_failures = 0
        self.dropped_transitions = 0
        """training transitions of failed physics steps kept out of replay"""

    def _init_views(self, options: TickOptions) -> None:
        """Views of the slots and the device tensors of the inference tick."""
        segment, spec, device, algorithm = self.segment, self.spec, self.device, self.algorithm
        # Views of the slots; on a CPU device the actor reads shared memory directly.
        self._obs_np = {k: segment[f"obs/{k}"] for k in self.obs_keys}
        self._reset_np = segment["obs/reset_mask"]
        self._action_np = segment["action/value"]
        reset_request = segment["action/reset_request"]
        reset_request[:] = False
        reset_request[self.num_envs :] = True  # only evaluation rows are ever reset on request
        self._obs_host = {k: torch.from_numpy(v) for k, v in self._obs_np.items()}
        self._reset_host = torch.from_numpy(self._reset_np)
        self._action_host = torch.from_numpy(self._action_np)
        low = torch.as_tensor(np.asarray(spec.action_low, dtype=np.float32), device=device)
        high = torch.as_tensor(np.asarray(spec.action_high, dtype=np.float32), device=device)
        self._action_low, self._action_high = low, high
        self._action_mid = (high + low) / 2
        self._action_half = (high - low) / 2
        # Normalised actions of the last two ticks stay on the device until their transition is ingested.
        self._tick_actions = torch.zeros(2, self.slot_rows, spec.action_dim, device=device)
        self._nonblocking = device.type == "cuda"
        self.tick_graph_wanted = (
            bool(options.tick_graph) and device.type == "cuda" and hasattr(algorithm, "explore_in_graph")
        )
        """`runtime.tick_graph`: CUDA, and an algorithm with in-graph entry points (built at its first use)"""
        self._tick_graph: TickGraph | None = None

    @property
    def actor(self) -> torch.nn.Module:
        """`learner.actor`: the only actor of the run (it lives in the algorithm)."""
        return self.algorithm.actor

    # --- loop --------------------------------------------------------------------------
    def run(self, on_tick: Any = None) -> bool:
        """All ticks, then the last transition; `on_tick(tick)` runs after each tick (logging).

        Returns False when `max_seconds` cut the run short: the transitions of the
        last tick or two are then accounted as in flight (the collector is stopped).
        """
        tl = self.timeline
        deadline = self._start_loop()
        for tick in range(self.num_ticks):
            self.tick = tick
            self._tick_boundary()  # a requested stop, or the collector's failure, leaves here
            with tl.phase("wait", tick):
                self.wait_for_obs(tick)  # obs_t is in the slot
            self.faults.at_tick(tick)
            self._maybe_start_eval(tick)
            self.activity = INFERRING
            with tl.phase("inference", tick, policy_version=self.policy_version):
                self.inference(tick)  # actions_t in the slot, stamped with policy_version, published
            if tick > 0:
                with tl.phase("ingest", tick, transition=tick - 1):
                    self.ingest(tick - 1)  # transition t-1 into replay, its ingress slot released
            if self.learning:
                with tl.phase("update", tick, policy_version=self.policy_version):
                    self.update()  # policy_version advances here, never elsewhere
                tl.annotate_last(new_policy_version=self.policy_version)
            if on_tick is not None:
                self.activity = BETWEEN_TICKS
                on_tick(tick)
            if self._end_tick(tick, deadline):
                return False
        self._ingest_last()
        return True

    def _start_loop(self) -> float | None:
        """Start the loop's clocks; the wall-clock deadline (None: none)."""
        if self.num_eval_envs:  # idle eval rows act with a snapshot too (their episodes count only in evaluations)
            self.algorithm.snapshot_actor()
        self._loop_start = time.monotonic()
        deadline = None if self.max_seconds is None else self._loop_start + float(self.max_seconds)
        self.meter.start_loop(self.updates_done)
        self._tick_start = time.monotonic()
        return deadline

    def _tick_boundary(self) -> None:
        """Between two ticks: a requested stop raises `StopRequested`; a failed collector its failure."""
        if self.stop_signal is not None:
            raise StopRequested(self.stop_signal)
        self.safe_point()

    def _end_tick(self, tick: int, deadline: float | None) -> bool:
        """Time the tick; whether the wall-clock budget ends the loop before the next one."""
        now = time.monotonic()
        elapsed, self._tick_start = now - self._tick_start, now
        self._tick_s = elapsed if tick < 2 else 0.95 * self._tick_s + 0.05 * elapsed
        return deadline is not None and now > deadline and tick + 1 < self.num_ticks

    def _ingest_last(self) -> None:
        """Wait for the last tick's transition and ingest it."""
        tl, last = self.timeline, self.num_ticks - 1
        self.tick = self.num_ticks
        with tl.phase("wait", self.num_ticks):
            self.activity = WAITING_FOR_TRANSITION
            self.collector.arm_deadline(last)
            self.waiter.wait_at_least(PRODUCED, self.num_ticks, self.check)
        with tl.phase("ingest", self.num_ticks, transition=last):
            self.ingest(last)
        self.faults.after_last(self.tick)

    # --- waits and stops -----------------------------------------------------------------
    def wait_for_obs(self, tick: int) -> None:
        """Block until the collector published obs of `tick` (collector health-checked)."""
        self.activity = WAITING_FOR_OBS
        self.collector.arm_deadline(tick)
        if self.keep_awake_us > 0:
            self.waiter.wait_at_least(OBS_TICK, tick, self.check, self._keep_awake, self.keep_awake_us)
        else:
            self.waiter.wait_at_least(OBS_TICK, tick, self.check)

    def _keep_awake(self) -> None:
        """One-element kernel, only once the update phase has finished (never queued behind or into it)."""
        if self._last_update_end is None or self._last_update_end.query():
            self._awake_scalar.add_(1.0)

    def check(self) -> None:
        """Run inside every blocking wait: a requested stop, then the collector's health."""
        if self.stop_signal is not None:
            raise StopRequested(self.stop_signal)
        self.safe_point()
        self.collector.check(self.activity)

    def safe_point(self) -> None:
        """The state is intact here: raise the collector's failure if the watchdog saw one (`safe_stop`)."""
        if self.safe_stop.is_set():
            self.safe_stop.clear()  # taken: the watchdog no longer interrupts
            self.collector.check_now(self.activity)

    def safe_point_grace_s(self) -> float:
        """How long the watchdog waits for the next safe point before it interrupts the learner."""
        low, high = SAFE_POINT_GRACE_S
        return min(high, max(low, 2.0 * self._update_s))

    def request_stop(self, signum: int) -> None:
        """Ask the loop to stop at the next tick boundary or wait (signal handlers call this)."""
        self.stop_signal = signum

    # --- inference -----------------------------------------------------------------------
    @torch.no_grad()
    def inference(self, tick: int) -> None:
        """obs slot -> device -> actor -> env-unit actions in the action slot, stamped and published."""
        marks = self.meter.start_inference()
        end = self._last_update_end
        marks.behind_update(end is not None and not end.query())
        if self.tick_graph_wanted and tick > self.random_ticks:
            self._graph_inference(tick, marks)
            return
        nb = self._nonblocking
        obs = {k: v.to(self.device, non_blocking=nb) for k, v in self._obs_host.items()}
        reset_mask = self._reset_host.to(self.device, non_blocking=nb)
        marks.mark(H2D)
        n = self.num_envs
        if self.num_eval_envs:  # views, no copies: training rows first, evaluation rows last
            eval_obs = {k: v[n:] for k, v in obs.items()}
            obs, reset_mask = {k: v[:n] for k, v in obs.items()}, reset_mask[:n]
        action = self._training_actions(tick, obs, reset_mask)
        marks.mark(POLICY)
        if self.num_eval_envs:
            action = torch.cat([action, self.algorithm.act_snapshot(eval_obs)])
        marks.mark(EVAL)
        env_action = self._finish(action, tick % 2)
        marks.mark(POST)
        self._action_host.copy_(env_action)  # device -> shared memory; completes before the publish below
        marks.mark(ACTION_COPY)
        self._publish(tick, marks)

    def _training_actions(self, tick: int, obs: dict[str, torch.Tensor], reset_mask: torch.Tensor) -> torch.Tensor:
        """Uniform-random actions for the first `random_ticks` ticks, then the algorithm's `explore`."""
        if tick < self.random_ticks:
            shape = (self.num_envs, self.spec.action_dim)
            return torch.rand(shape, device=self.device, generator=self._generator) * 2 - 1
        if tick == self.random_ticks and tick > 0:
            reset_mask = torch.ones_like(reset_mask)  # exploration state starts fresh after the random phase
        return self.algorithm.explore(obs, reset_mask)

    def _finish(self, action: torch.Tensor, parity: int) -> torch.Tensor:
        """Normalised actions -> env units; non-finite rows to the range's midpoint (counted); the
        normalised ones are kept in `_tick_actions[parity]` until their transition is ingested."""
        finite = torch.isfinite(action).all(-1, keepdim=True)
        action = torch.where(finite, action, 0.0)  # never send NaN/inf to physics: the range's midpoint
        self._nonfinite_actions += (~finite).sum()
        self._tick_actions[parity].copy_(action)
        return torch.clamp(action * self._action_half + self._action_mid, self._action_low, self._action_high)

    def _graph_inference(self, tick: int, marks: StageMarks) -> None:
        """The tick as one graph: `policy` is the launch, `action_copy` the wait for the device."""
        if self._tick_graph is None:
            self._tick_graph = TickGraph(
                self.algorithm, self._obs_host, self._reset_host, self._action_host, self._finish,
                self.num_envs, getattr(self.algorithm, "graph_warmup_calls", 2),
            )  # fmt: skip
        self._tick_graph.launch(tick % 2)
        marks.skip(H2D, EVAL, POST)
        marks.mark(POLICY)
        torch.cuda.current_stream().synchronize()
        marks.mark(ACTION_COPY)
        self._publish(tick, marks)

    @property
    def graph_errors(self) -> dict[str, str]:
        """The whole-tick graph's capture error, if it fell back to eager."""
        error = self._tick_graph.error if self._tick_graph is not None else None
        return {"tick_graph": error} if error else {}

    @property
    def tick_graph_state(self) -> str:
        """`off` (not asked for, or no CUDA), `not built` (no policy tick yet), `warming up`, `captured`, or
        `eager` (capture failed)."""
        if not self.tick_graph_wanted:
            return "off"
        if self._tick_graph is None:
            return "not built"
        if self._tick_graph.error:
            return "eager"
        return "captured" if all(c.graph is not None for c in self._tick_graph.calls) else "warming up"

    def _publish(self, tick: int, marks: StageMarks) -> None:
        """Stamp and publish the action slot (its actions are in it); account the tick's time and stages."""
        self.segment.control[ACTION_POLICY_VERSION] = self.policy_version
        if tick == len(self._versions):
            self._versions.append(self.policy_version)
        else:
            raise ProtocolError(f"inference for tick {tick} after {len(self._versions)} ticks")
        self.segment.publish(ACTION_TICK, tick)
        self.collector.actions_published(tick)
        self.meter.inference_done(marks, policy_tick=tick == self.random_ticks)

    # --- ingest --------------------------------------------------------------------------
    def ingest(self, tick: int) -> None:
        """Copy transition `tick` from the ingress ring into replay, then release its slot."""
        t0 = time.perf_counter()
        # the collector publishes obs_{t+1} before it writes transition t: it may still be writing it
        self.activity = WAITING_FOR_TRANSITION
        self.collector.arm_deadline(tick + 1)
        self.waiter.wait_at_least(PRODUCED, tick + 1, self.check)
        self.activity = INGESTING
        t_committed = time.perf_counter()
        slot = self._peek_transition(tick)
        n = self.num_envs  # evaluation rows (the last ones) never reach replay
        failures = int(slot.header[HEADER_PHYSICS_FAILURES])
        self._add_to_replay(slot, tick, slot.physics_failed[:n] if failures else None)
        if self._observe is not None:
            self._observe(
                *(torch.from_numpy(a[:n]).to(self.device) for a in (slot.reward, slot.terminated, slot.truncated))
            )
        t_sync = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()  # the copies have left the slot
        t_synced = time.perf_counter()
        if slot.header[HEADER_NUM_DONE]:
            self._count_episodes(slot, tick)
        self.physics_failures += failures
        self.ring.release()
        self.ticks_done += 1
        self.meter.ingest_done(t0, t_committed, t_sync, t_synced)

    def _peek_transition(self, tick: int) -> Any:
        """The ingress slot holding transition `tick`, checked against what the learner stamped."""
        slot = self.ring.peek()
        if slot is None:
            raise ProtocolError(f"transition {tick} is not in the ingress ring")
        if slot.tick != tick:
            raise ProtocolError(f"ingress slot holds tick {slot.tick}, expected {tick}")
        if int(slot.header[HEADER_POLICY_VERSION]) != self._versions[tick]:
            raise ProtocolError(
                f"tick {tick} was stepped with actions of policy_version {slot.policy_version}, "
                f"but the learner stamped version {self._versions[tick]}"
            )
        return slot

    def _add_to_replay(self, slot: Any, tick: int, failed: np.ndarray | None) -> None:
        """The training rows' transitions into replay, those of `failed` physics steps left out (counted)."""
        n = self.num_envs
        if failed is not None and failed.any():  # a failed step is no transition: it never reaches replay
            keep = np.flatnonzero(~failed)
            keep_t = torch.from_numpy(keep).to(self.device)
            self.replay.add(
                obs={k: v[keep] for k, v in slot.obs.items()},
                action=self._tick_actions[tick % 2, :n][keep_t],
                reward=slot.reward[keep],
                next_obs={k: v[keep] for k, v in slot.next_obs.items()},
                terminated=slot.terminated[keep],
                truncated=slot.truncated[keep],
            )
            self.dropped_transitions += int(failed.sum())
        else:
            self.replay.add(
                obs={k: v[:n] for k, v in slot.obs.items()},
                action=self._tick_actions[tick % 2, :n],
                reward=slot.reward[:n],
                next_obs={k: v[:n] for k, v in slot.next_obs.items()},
                terminated=slot.terminated[:n],
                truncated=slot.truncated[:n],
            )

    def _count_episodes(self, slot: Any, tick: int) -> None:
        """Episodes that ended with transition `tick`: training rows into the sums, eval rows to `evals`."""
        n = self.num_envs
        done = slot.terminated | slot.truncated
        train = done[:n]
        self.episodes += int(train.sum())
        self.episode_return_sum += float(slot.episode_return[:n][train].sum())
        self.episode_length_sum += int(slot.episode_length[:n][train].sum())
        self.evals.observe(
            tick, done[n:], slot.episode_return[n:], slot.episode_length[n:],
            slot.terminated[n:], slot.episode_tracking[n:],
        )  # fmt: skip

    # --- update phase --------------------------------------------------------------------
    def update(self) -> None:
        """One update phase; policy_version advances at its end."""
        t0 = time.perf_counter()
        events = self.meter.update_started()
        first = self.meter.first_update_pending
        compiles = getattr(self.algorithm, "use_compile", False) or getattr(self.algorithm, "use_cuda_graphs", False)
        self.activity = WARMING_UP if first and compiles else UPDATING
        self.in_update = True
        self.faults.before_update(self.tick)
        try:
            self.last_update_metrics = self.algorithm.update_phase(self.replay, self.updates_per_step)
        except UpdatesStopped as stop:  # the watchdog's request, between two whole updates
            self._stopped_between_updates(stop.done)
            return
        self.in_update = False
        elapsed = time.perf_counter() - t0
        self._update_s = elapsed / self.updates_per_step
        self.updates_done += self.updates_per_step
        end = self.meter.update_done(events, elapsed, first)
        if end is not None:
            self._last_update_end = end
        self._advance_policy_version()
        streak = getattr(self.algorithm, "nonfinite_streak", None)
        if streak is not None:
            self._watch_streak(streak)
        self.safe_point()  # after the phase (a captured one cannot stop inside)

    def _advance_policy_version(self) -> None:
        # An algorithm that tracks its own version (e.g. delayed actor updates) advances it
        # only when the phase changed the policy; otherwise every phase is a new version.
        version = getattr(self.algorithm, "policy_version", None)
        self.policy_version = self.policy_version + 1 if version is None else int(version)

    def _stopped_between_updates(self, done: int) -> None:
        """Count the `done` whole updates of a phase cut short at a safe point, then raise the collector's failure."""
        self.in_update = False
        self.updates_done += done
        self._advance_policy_version()
        try:
            self.safe_stop.clear()
            self.collector.check_now(self.activity)
        except RunFailure as failure:
            failure.stopped = (
                f"the learner stopped its update phase between two updates ({done} of {self.updates_per_step} "
                "applied), its state intact"
            )
            raise
        # the collector recovered meanwhile: the phase was only shorter, carry on

    def _watch_streak(self, streak: torch.Tensor) -> None:
        """Stop the run once the algorithm skipped `max_nonfinite_updates` updates in a row (never blocks)."""
        if self._streak_check is not None:
            event, host = self._streak_check
            if event is None or event.query():
                value = int(host)
                if value >= self.max_nonfinite_updates:
                    raise NonFiniteUpdates(
                        f"{value} updates in a row had non-finite losses and were skipped "
                        f"(train.max_nonfinite_updates={self.max_nonfinite_updates}); the parameters are those "
                        "before the first of them"
                    )
                self._streak_check = None
        if self._streak_check is None:
            if self.device.type == "cuda":
                host = torch.empty((), dtype=streak.dtype, pin_memory=True)
                host.copy_(streak, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                self._streak_check = (event, host)
            else:
                self._streak_check = (None, streak.detach().clone())

    # --- snapshot evaluation -------------------------------------------------------------
    def env_steps_done(self) -> int:
        """Training env steps whose transitions reached replay (a resumed run counts from its checkpoint's)."""
        return self.start_env_steps + self.ticks_done * self.num_envs

    def _maybe_start_eval(self, tick: int) -> None:
        """Freeze a snapshot and reset the eval rows after this tick's step when an eval point is due."""
        elapsed = time.monotonic() - self._loop_start
        if not self.evals.due(elapsed, self.env_steps_done(), self._tick_s):
            return
        self.algorithm.snapshot_actor()  # on the learner's stream, after the last update phase: one complete state
        self.evals.start(self.policy_version, self.env_steps_done(), elapsed, tick)
        self.segment.control[RESET_REQUEST_TICK] = tick  # read by the collector after it saw ACTION_TICK = tick

    @property
    def generators(self) -> dict[str, torch.Generator]:
        """The learner's own random generators (checkpointed with the run)."""
        return {"learner_actions": self._generator}

    def resume(self, policy_version: int, updates_done: int) -> None:
        """Carry a checkpointed run's counters on; no uniform-random phase (the restored actor acts from tick 0)."""
        self.policy_version = int(policy_version)
        self.updates_done = int(updates_done)
        self.random_ticks = 0

    @property
    def learning(self) -> bool:
        """Whether this tick runs an update phase."""
        return self.updates_per_step > 0 and self.replay.total_added >= self.learning_starts

    @property
    def tick_versions(self) -> np.ndarray:
        """policy_version used by each tick's actions so far (the record of property 2)."""
        return np.frombuffer(self._versions, dtype=np.int64).copy() if self._versions else np.empty(0, np.int64)

    # --- metrics and release -----------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Host-side counters plus the last update metrics (one device sync, at log time only)."""
        out: dict[str, float] = {
            "train/policy_version": float(self.policy_version),
            "train/updates": float(self.updates_done),
            "train/replay_size": float(len(self.replay)),
            **ring_counters(self.ring, self.final_counters),
            "perf/learner_blocked_waits": float(self.waiter.blocked_waits),
            "train/physics_failures": float(self.physics_failures),
            "train/dropped_transitions": float(self.dropped_transitions),
            "train/nonfinite_actions": float(self._nonfinite_actions),  # one small device read, at log time
        }
        out.update(self.meter.interval_metrics(self.updates_done))
        if self.episodes:
            out["train/episode_return"] = self.episode_return_sum / self.episodes
            out["train/episode_length"] = self.episode_length_sum / self.episodes
            out["train/episodes"] = float(self.episodes)
            self.episode_return_sum, self.episode_length_sum, self.episodes = 0.0, 0, 0
        if self.last_update_metrics:
            names = list(self.last_update_metrics)
            values = torch.stack([self.last_update_metrics[n].detach().float().reshape(()) for n in names]).cpu()
            out.update(zip(names, values.tolist(), strict=True))
        return out

    def release_views(self) -> None:
        """Drop every view of the shared segment so its mapping can be closed (counters are kept)."""
        if self.ring is not None:
            self.final_counters = ingress_counters(self.ring)
        self._obs_np = self._obs_host = {}
        self._reset_np = self._reset_host = None
        self._action_np = self._action_host = None
        self.ring = None
