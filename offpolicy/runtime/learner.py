"""The learner: the only actor, the replay, the exploration state and the device, in one thread.

Per tick t (docs/design.md, "One tick"):

    wait       until the collector published obs_t (spin, then block; health-checked)
    inference  obs slot -> device -> algorithm.explore (no grad) -> scale to env units
               -> action slot, stamped with policy_version v; record (t, v); publish
    ingest     transition t-1 from the ingress ring into replay, release its slot
    update     the update phase (k updates); policy_version += 1 at its end

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
from offpolicy.config import EvalConfig
from offpolicy.replay_buffer import ReplayBuffer
from offpolicy.runtime.collector_process import CollectorProcess, RunFailure
from offpolicy.runtime.ingress import HEADER_NUM_DONE, HEADER_PHYSICS_FAILURES, HEADER_POLICY_VERSION, IngressRing
from offpolicy.runtime.slots import (
    ACTION_POLICY_VERSION,
    ACTION_TICK,
    COLLECTOR_PHASE_TICKS,
    OBS_TICK,
    PHASE_NAMES,
    PHASE_RING,
    PRODUCED,
    RESET_REQUEST_TICK,
    SharedSegment,
    Waiter,
)
from offpolicy.runtime.snapshot_eval import EvalSchedule, SnapshotEval
from offpolicy.runtime.timeline import Timeline

INFERENCE_STAGES = ("h2d", "policy", "eval", "post", "action_copy", "publish")
"""Host-side stages of one inference tick (`perf/inference_<stage>_ms`, medians per metric row): `h2d`
issuing the observation copies, `policy` the training rows' actions (`explore`, or the random warm-up
draw), `eval` the snapshot actor's for the evaluation rows, `post` the finite check, the kept copy and the
scaling, `action_copy` the device -> action-slot copy (on CUDA it waits until all the work before it ran,
an update phase still running included: `perf/inference_behind_update_fraction` counts those ticks), and
`publish` stamping and publishing the slot. On CUDA the first four only launch work, so a slow device
shows in `action_copy` and a slow host in the others."""
STAGE_RING = 1024
"""inference ticks whose stage durations are kept for the next metric row"""
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


@dataclass(frozen=True)
class LearnerFaults:
    """Test hooks (`runtime.fault.learner_*`): raise at a tick; sleep in one tick's update phase."""

    raise_at_tick: int = -1
    sleep_at_tick: int = -1
    sleep_s: float = 0.0


class Learner:
    """Runs the tick loop against a collector through the shared segment."""

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
        faults: LearnerFaults,
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
        self.raise_at_tick = int(faults.raise_at_tick)
        self.sleep_at_tick, self.sleep_s = int(faults.sleep_at_tick), float(faults.sleep_s)
        """test hook: the update phase of this tick sleeps this long (a deliberately long learner phase)"""
        self.keep_awake_us = float(options.keep_awake_us) if device.type == "cuda" else 0.0
        """CUDA: spin through the observation wait, launching a tiny kernel this often once the device idles"""
        self._awake_scalar = torch.zeros(1, device=device) if self.keep_awake_us > 0 else None
        self._last_update_end: Any = None
        """CUDA event recorded after the latest update phase (the device is idle once it has passed)"""
        self._init_stopping()
        self._init_rows(link.spec, evaluation, plan)
        self._init_counters(plan)
        self._init_metering()
        self._init_views(options)

    def _init_rows(self, spec: Any, evaluation: EvalRows, plan: TrainPlan) -> None:
        """Training and evaluation rows, and the snapshot evaluations' schedule."""
        self.num_envs = spec.num_envs
        """rows of the obs/action slots: training rows, then evaluation rows"""
        self.num_eval_envs = int(evaluation.num_envs)
        self.num_train_envs = self.num_envs - self.num_eval_envs
        """rows whose transitions go to replay (the algorithm's per-env state has this many)"""
        if self.num_train_envs < 1 or self.num_eval_envs < 0:
            raise ValueError(
                f"eval_envs={evaluation.num_envs} must be in [0, {self.num_envs - 1}] for {self.num_envs} env rows"
            )
        self.obs_keys = list(spec.obs_dims)
        self.start_env_steps = int(plan.start_env_steps)
        """training env steps before this run's first tick (a resumed run's)"""
        self.eval_settings = evaluation.settings or EvalConfig(num_envs=self.num_eval_envs, interval_s=None)
        self.eval_schedule = EvalSchedule(self.eval_settings, plan.max_seconds)
        self.current_eval: SnapshotEval | None = None
        """the snapshot evaluation running on the eval rows, if any"""
        self.eval_results: list[dict[str, Any]] = []
        """finished snapshot evaluations not yet logged (the runner logs and clears them)"""
        self.eval_history: list[dict[str, Any]] = []
        """every finished snapshot evaluation of this run (summary, tests)"""

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

    def _init_counters(self, plan: TrainPlan) -> None:
        """Budgets, RNG and the counters the summary and checkpoints read."""
        self.max_nonfinite_updates = int(plan.max_nonfinite_updates)
        self._streak_check: tuple[Any, torch.Tensor] | None = None
        """(event, pinned host copy) of the algorithm's non-finite streak after the last update phase"""
        self._nonfinite_actions = torch.zeros((), dtype=torch.int64, device=self.device)
        """rows whose action had a non-finite entry (device counter, read at log time)"""
        self.stop_signal: int | None = None
        """set by `request_stop`: the loop leaves at the next tick boundary or wait"""
        self._loop_start = time.monotonic()
        self._tick_s = 0.0
        """recent seconds per tick (exponential average; sizes the first evaluation's duration)"""
        self.max_seconds = plan.max_seconds
        """wall-clock budget of the tick loop (None: none); the run then ends early, cleanly"""
        self.random_ticks = -(-self.learning_starts // self.num_train_envs)
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

    def _init_metering(self) -> None:
        """Phase and stage timings for the metric rows."""
        self.busy_s = {"inference": 0.0, "ingest": 0.0, "update": 0.0}
        """seconds spent in each phase: host wall clock (perf_counter, never a device sync), except the
        update phase on CUDA, which is launched asynchronously and runs while the collector steps physics:
        its device time is read from CUDA events once they completed (`_collect_update_events`)"""
        self.ingest_split_s = {"wait": 0.0, "sync": 0.0}
        """host seconds of ingest's two waits: for the collector's commit of the transition (its ingress
        write, rewards included), and for the device after the copies into replay (CUDA only)"""
        self._update_events: list[tuple[Any, Any]] = []
        """(start, end) CUDA events of update phases whose device time is not yet counted"""
        self.inference_ticks = 0
        self._stage_ns = np.zeros((STAGE_RING, len(INFERENCE_STAGES) + 1), dtype=np.int64)
        """per tick: host nanoseconds of each inference stage, then 1 if an update phase was still
        running on the device when the tick began (ring of the last STAGE_RING ticks)"""
        self._stages_read = 0
        """inference ticks whose stages went into a metric row already"""
        self.warmup_s: dict[str, float] = {}
        """host seconds of the first inference tick, the first with the policy's own actions and the
        first update phase: these calls compile and capture (`first_*` keys)"""
        self._interval = (time.perf_counter(), 0, 0.0, dict(self.busy_s), 0)
        """metrics() rates since the last row: (t, updates, busy s, busy s per phase, inference ticks)"""
        self._ingest_split_prev = dict(self.ingest_split_s)
        self._phases_read = 0
        """collector ticks whose phase durations went into a metric row already"""

    def _init_views(self, options: TickOptions) -> None:
        """Views of the slots and the device tensors of the inference tick."""
        segment, spec, device, algorithm = self.segment, self.spec, self.device, self.algorithm
        # Views of the slots; on a CPU device the actor reads shared memory directly.
        self._obs_np = {k: segment[f"obs/{k}"] for k in self.obs_keys}
        self._reset_np = segment["obs/reset_mask"]
        self._action_np = segment["action/value"]
        reset_request = segment["action/reset_request"]
        reset_request[:] = False
        reset_request[self.num_train_envs :] = True  # only evaluation rows are ever reset on request
        self._obs_host = {k: torch.from_numpy(v) for k, v in self._obs_np.items()}
        self._reset_host = torch.from_numpy(self._reset_np)
        self._action_host = torch.from_numpy(self._action_np)
        low = torch.as_tensor(np.asarray(spec.action_low, dtype=np.float32), device=device)
        high = torch.as_tensor(np.asarray(spec.action_high, dtype=np.float32), device=device)
        self._action_low, self._action_high = low, high
        self._action_mid = (high + low) / 2
        self._action_half = (high - low) / 2
        # Normalised actions of the last two ticks stay on the device until their transition is ingested.
        self._tick_actions = torch.zeros(2, self.num_envs, spec.action_dim, device=device)
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

    # --- phases -----------------------------------------------------------------------
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

    @torch.no_grad()
    def inference(self, tick: int) -> None:
        """obs slot -> device -> actor -> env-unit actions in the action slot, stamped and published."""
        clock = time.perf_counter_ns
        marks = self._stage_ns[self.inference_ticks % STAGE_RING]
        t0 = time.perf_counter()
        last = clock()
        end = self._last_update_end
        marks[-1] = end is not None and not end.query()
        if self.tick_graph_wanted and tick > self.random_ticks:
            self._graph_inference(tick, t0, marks, last)
            return
        nb = self._nonblocking
        obs = {k: v.to(self.device, non_blocking=nb) for k, v in self._obs_host.items()}
        reset_mask = self._reset_host.to(self.device, non_blocking=nb)
        now = clock()
        marks[0], last = now - last, now
        n = self.num_train_envs
        if self.num_eval_envs:  # views, no copies: training rows first, evaluation rows last
            eval_obs = {k: v[n:] for k, v in obs.items()}
            obs, reset_mask = {k: v[:n] for k, v in obs.items()}, reset_mask[:n]
        if tick < self.random_ticks:
            shape = (n, self.spec.action_dim)
            action = torch.rand(shape, device=self.device, generator=self._generator) * 2 - 1
        else:
            if tick == self.random_ticks and tick > 0:
                reset_mask = torch.ones_like(reset_mask)  # exploration state starts fresh after the random phase
            action = self.algorithm.explore(obs, reset_mask)
        now = clock()
        marks[1], last = now - last, now
        if self.num_eval_envs:
            action = torch.cat([action, self.algorithm.act_snapshot(eval_obs)])
        now = clock()
        marks[2], last = now - last, now
        env_action = self._finish(action, tick % 2)
        now = clock()
        marks[3], last = now - last, now
        self._action_host.copy_(env_action)  # device -> shared memory; completes before the publish below
        now = clock()
        marks[4], last = now - last, now
        self._publish(tick, t0, marks, last)

    def _finish(self, action: torch.Tensor, parity: int) -> torch.Tensor:
        """Normalised actions -> env units; non-finite rows to the range's midpoint (counted); the
        normalised ones are kept in `_tick_actions[parity]` until their transition is ingested."""
        finite = torch.isfinite(action).all(-1, keepdim=True)
        action = torch.where(finite, action, 0.0)  # never send NaN/inf to physics: the range's midpoint
        self._nonfinite_actions += (~finite).sum()
        self._tick_actions[parity].copy_(action)
        return torch.clamp(action * self._action_half + self._action_mid, self._action_low, self._action_high)

    def _graph_inference(self, tick: int, t0: float, marks: np.ndarray, last: int) -> None:
        """The tick as one graph: `policy` is the launch, `action_copy` the wait for the device."""
        if self._tick_graph is None:
            self._tick_graph = TickGraph(
                self.algorithm, self._obs_host, self._reset_host, self._action_host, self._finish,
                self.num_train_envs, getattr(self.algorithm, "graph_warmup_calls", 2),
            )  # fmt: skip
        clock = time.perf_counter_ns
        self._tick_graph.launch(tick % 2)
        now = clock()
        marks[0] = marks[2] = marks[3] = 0
        marks[1], last = now - last, now
        torch.cuda.current_stream().synchronize()
        now = clock()
        marks[4], last = now - last, now
        self._publish(tick, t0, marks, last)

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

    def _publish(self, tick: int, t0: float, marks: np.ndarray, last: int) -> None:
        """Stamp and publish the action slot (its actions are in it); account the tick's time and stages."""
        self.segment.control[ACTION_POLICY_VERSION] = self.policy_version
        if tick == len(self._versions):
            self._versions.append(self.policy_version)
        else:
            raise ProtocolError(f"inference for tick {tick} after {len(self._versions)} ticks")
        self.segment.publish(ACTION_TICK, tick)
        self.collector.actions_published(tick)
        marks[5] = time.perf_counter_ns() - last
        elapsed = time.perf_counter() - t0
        self.busy_s["inference"] += elapsed
        if not self.inference_ticks:
            self.warmup_s["first_inference"] = elapsed
        if tick == self.random_ticks:
            self.warmup_s["first_policy_inference"] = elapsed
        self.inference_ticks += 1

    def ingest(self, tick: int) -> None:
        """Copy transition `tick` from the ingress ring into replay, then release its slot."""
        t0 = time.perf_counter()
        # the collector publishes obs_{t+1} before it writes transition t: it may still be writing it
        self.activity = WAITING_FOR_TRANSITION
        self.collector.arm_deadline(tick + 1)
        self.waiter.wait_at_least(PRODUCED, tick + 1, self.check)
        self.activity = INGESTING
        t_committed = time.perf_counter()
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
        n = self.num_train_envs  # evaluation rows (the last ones) never reach replay
        failures = int(slot.header[HEADER_PHYSICS_FAILURES])
        failed = slot.physics_failed[:n] if failures else None
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
        if self._observe is not None:
            self._observe(
                *(torch.from_numpy(a[:n]).to(self.device) for a in (slot.reward, slot.terminated, slot.truncated))
            )
        t_sync = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()  # the copies have left the slot
        self.ingest_split_s["wait"] += t_committed - t0
        self.ingest_split_s["sync"] += time.perf_counter() - t_sync
        if slot.header[HEADER_NUM_DONE]:
            done = slot.terminated | slot.truncated
            train = done[:n]
            self.episodes += int(train.sum())
            self.episode_return_sum += float(slot.episode_return[:n][train].sum())
            self.episode_length_sum += int(slot.episode_length[:n][train].sum())
            if self.current_eval is not None:
                self.current_eval.observe(
                    tick, done[n:], slot.episode_return[n:], slot.episode_length[n:],
                    slot.terminated[n:], slot.episode_tracking[n:],
                )  # fmt: skip
                if self.current_eval.complete:
                    self._finish_eval()
        self.physics_failures += failures
        self.ring.release()
        self.ticks_done += 1
        self.busy_s["ingest"] += time.perf_counter() - t0

    def update(self) -> None:
        """One update phase; policy_version advances at its end."""
        t0 = time.perf_counter()
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        first = "first_update_phase" not in self.warmup_s
        compiles = getattr(self.algorithm, "use_compile", False) or getattr(self.algorithm, "use_cuda_graphs", False)
        self.activity = WARMING_UP if first and compiles else UPDATING
        self.in_update = True
        if self.tick == self.sleep_at_tick:
            time.sleep(self.sleep_s)
        try:
            self.last_update_metrics = self.algorithm.update_phase(self.replay, self.updates_per_step)
        except UpdatesStopped as stop:  # the watchdog's request, between two whole updates
            self._stopped_between_updates(stop.done)
            return
        self.in_update = False
        elapsed = time.perf_counter() - t0
        if first:  # host time: compiling runs on the host
            self.warmup_s["first_update_phase"] = elapsed
        self._update_s = elapsed / self.updates_per_step
        self.updates_done += self.updates_per_step
        if self.device.type == "cuda":
            end.record()
            self._update_events.append((start, end))
            self._last_update_end = end
        else:
            self.busy_s["update"] += elapsed
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
        return self.start_env_steps + self.ticks_done * self.num_train_envs

    def _maybe_start_eval(self, tick: int) -> None:
        """Freeze a snapshot and reset the eval rows after this tick's step when an eval point is due."""
        if not self.num_eval_envs:
            return
        elapsed = time.monotonic() - self._loop_start
        per_row = self.eval_settings.episodes_per_row
        estimate = per_row * (self.spec.max_episode_steps + 1) * self._tick_s
        if not self.eval_schedule.due(elapsed, self.env_steps_done(), self.current_eval is not None, estimate):
            return
        self.algorithm.snapshot_actor()  # on the learner's stream, after the last update phase: one complete state
        self.current_eval = SnapshotEval(
            policy_version=self.policy_version,
            env_steps=self.env_steps_done(),
            snapshot_s=elapsed,
            reset_tick=tick,
            rows=self.num_eval_envs,
            per_row=per_row,
            started_at=time.monotonic(),
            tracking_terms=tuple(getattr(self.spec, "tracking_terms", ())),
        )
        self.segment.control[RESET_REQUEST_TICK] = tick  # read by the collector after it saw ACTION_TICK = tick

    def _finish_eval(self) -> None:
        evaluation, self.current_eval = self.current_eval, None
        self.eval_schedule.finished(time.monotonic() - evaluation.started_at)
        result = evaluation.result()
        self.eval_results.append(result)
        self.eval_history.append(result)

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

    # --- loop --------------------------------------------------------------------------
    def run(self, on_tick: Any = None) -> bool:
        """All ticks, then the last transition; `on_tick(tick)` runs after each tick (logging).

        Returns False when `max_seconds` cut the run short: the transitions of the
        last tick or two are then accounted as in flight (the collector is stopped).
        """
        tl = self.timeline
        if self.num_eval_envs:  # idle eval rows act with a snapshot too (their episodes count only in evaluations)
            self.algorithm.snapshot_actor()
        self._loop_start = time.monotonic()
        deadline = None if self.max_seconds is None else self._loop_start + float(self.max_seconds)
        busy = sum(self.busy_s.values())
        self._interval = (time.perf_counter(), self.updates_done, busy, dict(self.busy_s), self.inference_ticks)
        self._ingest_split_prev = dict(self.ingest_split_s)
        t_prev = time.monotonic()
        for tick in range(self.num_ticks):
            self.tick = tick
            if self.stop_signal is not None:
                raise StopRequested(self.stop_signal)
            self.safe_point()
            with tl.phase("wait", tick):
                self.wait_for_obs(tick)
            if tick == self.raise_at_tick:
                raise InjectedLearnerFault(f"injected fault (runtime.fault.learner_raise_at_tick={tick})")
            self._maybe_start_eval(tick)
            self.activity = INFERRING
            with tl.phase("inference", tick, policy_version=self.policy_version):
                self.inference(tick)
            if tick > 0:
                with tl.phase("ingest", tick, transition=tick - 1):
                    self.ingest(tick - 1)
            if self.learning:
                with tl.phase("update", tick, policy_version=self.policy_version):
                    self.update()
                tl.annotate_last(new_policy_version=self.policy_version)
            if on_tick is not None:
                self.activity = BETWEEN_TICKS
                on_tick(tick)
            now = time.monotonic()
            self._tick_s = now - t_prev if tick < 2 else 0.95 * self._tick_s + 0.05 * (now - t_prev)
            t_prev = now
            if deadline is not None and now > deadline and tick + 1 < self.num_ticks:
                return False
        last = self.num_ticks - 1
        self.tick = self.num_ticks
        with tl.phase("wait", self.num_ticks):
            self.activity = WAITING_FOR_TRANSITION
            self.collector.arm_deadline(last)
            self.waiter.wait_at_least(PRODUCED, self.num_ticks, self.check)
        with tl.phase("ingest", self.num_ticks, transition=last):
            self.ingest(last)
        if self.tick == self.sleep_at_tick:  # fault knob: the learner is slow after the last transition
            time.sleep(self.sleep_s)
        return True

    def metrics(self) -> dict[str, float]:
        """Host-side counters plus the last update metrics (one device sync, at log time only)."""
        out: dict[str, float] = {
            "train/policy_version": float(self.policy_version),
            "train/updates": float(self.updates_done),
            "train/replay_size": float(len(self.replay)),
            **self._ring_counters(),
            "perf/learner_blocked_waits": float(self.waiter.blocked_waits),
            "train/physics_failures": float(self.physics_failures),
            "train/dropped_transitions": float(self.dropped_transitions),
            "train/nonfinite_actions": float(self._nonfinite_actions),  # one small device read, at log time
        }
        # Rates over the interval since the previous call: host clocks, counters and completed events only.
        self._collect_update_events()
        now, busy = time.perf_counter(), sum(self.busy_s.values())
        t_prev, updates_prev, busy_prev, phases_prev, ticks_prev = self._interval
        wall = max(now - t_prev, 1e-9)
        out["perf/updates_per_s"] = (self.updates_done - updates_prev) / wall
        out["perf/learner_busy_fraction"] = min(1.0, (busy - busy_prev) / wall)
        if self.inference_ticks > ticks_prev:
            ticks = self.inference_ticks - ticks_prev
            out["perf/inference_tick_ms"] = 1e3 * (self.busy_s["inference"] - phases_prev["inference"]) / ticks
            # one ingest a tick, waiting for the collector's commit where its ingress write (with the step's
            # reward) outlasts the inference before it
            out["perf/ingest_ms"] = 1e3 * (self.busy_s["ingest"] - phases_prev["ingest"]) / ticks
            # its parts: the wait for that commit, and the device sync after the copies into replay
            for part, value in self.ingest_split_s.items():
                out[f"perf/ingest_{part}_ms"] = 1e3 * (value - self._ingest_split_prev[part]) / ticks
        self._interval = (now, self.updates_done, busy, dict(self.busy_s), self.inference_ticks)
        self._ingest_split_prev = dict(self.ingest_split_s)
        out.update(self._collector_phases())
        out.update(self._inference_stages())
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

    def _inference_stages(self) -> dict[str, float]:
        """Medians of the inference ticks' host stages since the last row (`perf/inference_<stage>_ms`)."""
        first = max(self._stages_read, self.inference_ticks - STAGE_RING)
        if self.inference_ticks <= first:
            return {}
        rows = self._stage_ns[np.arange(first, self.inference_ticks) % STAGE_RING]
        self._stages_read = self.inference_ticks
        medians = np.median(rows[:, :-1], axis=0) / 1e6
        out = {f"perf/inference_{name}_ms": float(v) for name, v in zip(INFERENCE_STAGES, medians, strict=True)}
        out["perf/inference_behind_update_fraction"] = float(rows[:, -1].mean())
        return out

    def _collector_phases(self) -> dict[str, float]:
        """Medians of the collector's per-tick phases since the last row (`perf/collector_*_ms`)."""
        if self.segment is None or self.segment.control is None or "collector/phases" not in self.segment.arrays:
            return {}
        written = int(self.segment.control[COLLECTOR_PHASE_TICKS]) - 1  # the newest row may be mid-write
        first = max(self._phases_read, written - PHASE_RING + 1, 0)
        if written <= first:
            return {}
        rows = self.segment["collector/phases"][np.arange(first, written) % PHASE_RING] / 1e6
        self._phases_read = written
        medians = np.median(rows, axis=0)
        out = {f"perf/collector_{name}_ms": float(v) for name, v in zip(PHASE_NAMES, medians, strict=True)}
        i = {name: k for k, name in enumerate(PHASE_NAMES)}
        cycle = rows[:, i["cycle"]].sum()
        if cycle > 0:  # the collector's serial work outside the pool, as a share of the tick
            outside = rows[:, i["critical"]] - rows[:, i["physics"]]
            out["perf/collector_outside_pool_fraction"] = float(outside.sum() / cycle)
        return out

    def _ring_counters(self) -> dict[str, float]:
        if self.ring is None:  # views released: the counters read at release
            counters = {k: float(v) for k, v in self.final_counters.items()}
        else:
            counters = {
                "ingress_produced": float(self.ring.produced),
                "ingress_consumed": float(self.ring.consumed),
                "ingress_full_waits": float(self.ring.full_waits),
            }
        return {f"perf/{k}": v for k, v in counters.items()}

    def _collect_update_events(self) -> None:
        """Add the device time of update phases whose end event has completed (`query()` never blocks)."""
        pending = []
        for start, end in self._update_events:
            if end.query():
                self.busy_s["update"] += start.elapsed_time(end) / 1e3
            else:
                pending.append((start, end))
        self._update_events = pending

    def release_views(self) -> None:
        """Drop every view of the shared segment so its mapping can be closed (counters are kept)."""
        if self.ring is not None:
            self.final_counters = {
                "ingress_produced": self.ring.produced,
                "ingress_consumed": self.ring.consumed,
                "ingress_full_waits": self.ring.full_waits,
            }
        self._obs_np = self._obs_host = {}
        self._reset_np = self._reset_host = None
        self._action_np = self._action_host = None
        self.ring = None
