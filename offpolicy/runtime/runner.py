"""The runner: builds collector, slots, ingress, replay, algorithm and learner from the config and owns the lifecycle.

The config arrives validated (`offpolicy.config.RunConfig`, validated here once when a raw DictConfig
is passed); each component gets its typed section (`runtime`, `eval`, `checkpoint`, `train`, `env`),
the algorithm its `algo` DictConfig. The keys, their defaults and the hidden `+runtime....=` keys
(fault injection, a recorded window, factories) are documented in `offpolicy.config`.

Checkpoints: `<run dir>/checkpoints/step_<env_steps>.pt` every `checkpoint.interval_env_steps`
(at the end of the tick that crosses the multiple, after its update phase) and once at the end
of every run whose learner state is intact: it reached its budget (`train.total_env_steps` or
`train.max_seconds`), a SIGINT/SIGTERM stopped it between ticks, the collector failed (the learner
stops at its next safe point, between two updates of an eager phase: `offpolicy.runtime.collector_process.Watchdog`),
or the updates went non-finite; `latest.pt` points at the newest. Counters are those of the
transitions that reached replay. A run stopped inside an update phase (a second signal, a learner
error, a phase that reached no safe point in time) writes none: the last checkpoint is the
recovery point, and the message names it. `train.resume=<path>` restores the algorithm, the
counters (env steps, ticks, updates, policy_version) and the RNG states, and trains on to
`train.total_env_steps` (the overall budget). Replay is not checkpointed: the restored actor
refills `train.learning_starts` env steps before updates resume (no uniform-random phase).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import platform
import signal
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import field, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from offpolicy.affinity import Affinity, pin_process, resolve_affinity, restore
from offpolicy.algorithms.capture import start_compile_workers
from offpolicy.checkpoint import (
    LATEST,
    Checkpointer,
    CheckpointError,
    RunIdentity,
    check_compatible,
    load_algorithm_state,
    load_checkpoint,
    require_resumable,
    restore_rng,
)
from offpolicy.config import ConfigError, RunConfig, import_target, validate_train_config
from offpolicy.logger import MetricsLogger, RunContext, git_commit
from offpolicy.replay_buffer import ReplayBuffer
from offpolicy.runtime.collector import (
    CollectorConfig,
    EnvFactory,
    RecordWindow,
    point_mujoco_log_at,
    restore_mujoco_log,
)
from offpolicy.runtime.collector_process import (
    CollectorFailed,
    CollectorProcess,
    Interrupted,
    LearnerFailed,
    RunFailure,
    Watchdog,
)
from offpolicy.runtime.ingress import IngressRing
from offpolicy.runtime.learner import (
    CollectorLink,
    EvalRows,
    Learner,
    LearnerFaults,
    NonFiniteUpdates,
    StopRequested,
    TickOptions,
    TrainPlan,
)
from offpolicy.runtime.slots import Layout, SharedSegment, Waiter
from offpolicy.runtime.snapshot_eval import MeanPolicy, eval_metrics, return_statistics, rollout, tracking_statistics
from offpolicy.runtime.timeline import Timeline

log = logging.getLogger(__name__)


UNBOUNDED_TICKS = 2**62
"""tick count of a run with `train.total_env_steps=null`: never reached, `train.max_seconds` ends it"""
FINAL_EVAL_SEED = 1_000_003
"""added to `seed` for the final snapshot's episodes: initial states apart from the training envs'"""

AlgorithmFactory = Callable[[Any, Any, torch.device], Any]


def resolve_device(name: str) -> torch.device:
    """`auto`: CUDA when present, else CPU."""
    name = str(name or "auto")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={name} but CUDA is not available; use device=auto or device=cpu")
    return torch.device(name)


def default_algorithm_factory(algo_cfg: Any, spec: Any, device: torch.device) -> Any:
    """`offpolicy.algorithms.make_algorithm`, imported lazily."""
    from offpolicy.algorithms import make_algorithm

    return make_algorithm(algo_cfg, spec, device)


def algorithm_factory_from_cfg(run: RunConfig) -> AlgorithmFactory:
    """`runtime.algorithm_factory` (a hidden `module:function`, e.g. the tests' stand-in), else the registry's."""
    target = run.runtime.algorithm_factory
    return import_target(target, "runtime.algorithm_factory") if target else default_algorithm_factory


def env_factory_from_cfg(run: RunConfig) -> EnvFactory:
    """envs.make(name, env.num_envs + eval.num_envs, seed, **env.options), or `runtime.env_factory` with those.

    The one place the eval rows are added to the training rows: the env's rows are the slots' rows.
    """
    rows = run.env.num_envs + run.eval.num_envs
    kwargs = {"name": run.env.name, "num_envs": rows, "seed": run.seed}
    return EnvFactory(target=run.runtime.env_factory or "envs:make", kwargs={**kwargs, **run.env.options})


def _algo_name(config: RunConfig, default: str | None) -> str | None:
    """`algo.name` of the run's algorithm group."""
    return config.algo.get("name", default) if config.algo is not None else default


def _algo_compiles(config: RunConfig) -> bool:
    """Whether the algorithm group turns torch.compile on (its workers are then started on the learner's CPUs)."""
    return bool(config.algo.get("compile", False)) if config.algo is not None else False


class _Terminate(BaseException):
    """SIGTERM, turned into an exception in the main thread."""


@dataclasses.dataclass
class _Progress:
    """How far a run got: what the finish step reads."""

    t_start: float
    report: dict[str, Any] = field(default_factory=dict)
    """the collector's isolation report"""
    checkpointer: Checkpointer | None = None
    t_loop: float | None = None
    loop_s: float = 0.0
    log_hook: Callable[[int | None], None] | None = None
    """set while the loop may owe a metric row"""
    stop_reason: str = "not started"
    intact: bool = False
    """the algorithm is between update phases: a checkpoint of it is consistent"""
    failure: RunFailure | CheckpointError | None = None


class _CollectorSide(ExitStack):
    """The collector and what it shares with this process, released once and uninterrupted.

    A second Ctrl-C or a SIGTERM must not cut the cleanup short: both are ignored while it runs;
    then SIGINT gets back the handler it had and SIGTERM the one from before the run.
    """

    def __init__(self, stop_handlers: dict[int, Any]) -> None:
        super().__init__()
        self._stop_handlers = stop_handlers
        self._released = False

    def __exit__(self, *exc_details: Any) -> bool:
        if self._released:
            return False
        self._released = True
        old_sigint = signal.signal(signal.SIGINT, signal.SIG_IGN) if _in_main_thread() else None
        if self._stop_handlers:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            return super().__exit__(*exc_details)
        finally:
            if old_sigint is not None:
                signal.signal(signal.SIGINT, old_sigint)
            if self._stop_handlers:
                signal.signal(signal.SIGTERM, self._stop_handlers[signal.SIGTERM])


class Runner:
    """Builds every component from the config, runs the ticks, and ends every run through one path."""

    def __init__(
        self,
        cfg: RunConfig | DictConfig,
        run_dir: str | Path,
        algorithm_factory: AlgorithmFactory | None = None,
        env_factory: EnvFactory | None = None,
        context: RunContext | None = None,
    ) -> None:
        if not isinstance(cfg, RunConfig):  # a raw config (programmatic use): checked here, once
            cfg = validate_train_config(
                cfg, custom_algorithm=algorithm_factory is not None, custom_env=env_factory is not None
            )
        self.config = cfg
        """the validated run config; each component reads its typed section"""
        self.run_dir = Path(run_dir).absolute()
        """absolute: nothing after the start depends on the working directory (it may be removed meanwhile)"""
        self.context = context
        """what Hydra told the job (sweep dir, job number; W&B group and name); None outside the CLI"""
        self.algorithm_factory = algorithm_factory or algorithm_factory_from_cfg(cfg)
        self.env_factory = env_factory or env_factory_from_cfg(cfg)
        self._init_rows()
        self.total_env_steps: int | None = cfg.train.total_env_steps
        """None: no step budget, the run stops on train.max_seconds"""
        self._init_resume()
        self.num_ticks = self._plan_ticks()
        self.learning_starts = cfg.train.learning_starts
        self.device = resolve_device(cfg.device)
        self.affinity: Affinity = resolve_affinity(dataclasses.asdict(cfg.affinity))
        # Filled by run(); kept for tests and the benchmark.
        self.collector: CollectorProcess | None = None
        self.learner: Learner | None = None
        self.algorithm: Any = None
        self.replay: ReplayBuffer | None = None
        self.timeline: Timeline | None = None
        self.summary: dict[str, Any] = {}

    def _init_rows(self) -> None:
        """The collector env's rows: training rows first, then the eval rows."""
        self.num_eval_envs = self.config.eval.num_envs
        """the last rows of the collector's env: snapshot evaluations, never in replay"""
        self.slot_rows = int(self.env_factory.kwargs.get("num_envs", self.config.env.num_envs))
        """rows of the collector's env and of the shared slots (`env_factory_from_cfg` adds the eval rows)"""
        self.num_envs = self.slot_rows - self.num_eval_envs
        """training rows: env steps, replay and the algorithm's per-env state count these"""
        if self.num_envs < 1:
            raise ConfigError(f"eval.num_envs={self.num_eval_envs} leaves no training rows of {self.slot_rows}")

    def _init_resume(self) -> None:
        """`train.resume`: load and check the checkpoint before anything starts (never train from scratch by
        accident); the counters this run starts from."""
        resume = self.config.train.resume
        self.resume_path = None if resume in (None, "") else Path(resume).expanduser()
        self.resume_checkpoint: dict[str, Any] | None = None
        self.start_counters = {"env_steps": 0, "ticks": 0, "updates": 0, "policy_version": 0}
        """counters this run starts from (a resumed checkpoint's, else zeros)"""
        if self.resume_path is None:
            return
        cfg = self.config
        self.resume_checkpoint = load_checkpoint(self.resume_path, map_location="cpu")
        require_resumable(self.resume_checkpoint, self.resume_path)
        check_compatible(
            self.resume_checkpoint,
            self.resume_path,
            algo=_algo_name(cfg, None),
            env=cfg.env.name,
            env_options=cfg.env.options,  # this run's sizes in a refusal
        )
        self.start_counters = dict(self.resume_checkpoint["counters"])
        if self.total_env_steps is not None and self.start_counters["env_steps"] >= self.total_env_steps:
            raise CheckpointError(
                f"checkpoint {self.resume_path} is already at {self.start_counters['env_steps']} env steps, "
                f"train.total_env_steps={self.total_env_steps}: raise the budget to train on"
            )

    def _plan_ticks(self) -> int:
        """Ticks to run: the remaining step budget over the training rows (unbounded: the deadline ends it)."""
        if self.total_env_steps is None:
            return UNBOUNDED_TICKS
        remaining = self.total_env_steps - self.start_counters["env_steps"]
        return max(1, math.ceil(remaining / self.num_envs))

    def run(self) -> dict[str, Any]:
        """Run to the end; raises `RunFailure` (with side and cause) on any abnormal end.

        However the run ends, `summary.json` is written (`completed`, `stop_reason`) and the metric
        rows are flushed; when the learner state is intact (the budget was reached, a SIGINT/SIGTERM
        stopped the loop between ticks, the collector failed and the learner reached a safe point,
        updates went non-finite) a final
        checkpoint is written too, so the run can be resumed from where it stopped. A second
        SIGINT/SIGTERM stops at once, without a checkpoint.
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config.source, self.run_dir / "config_resolved.yaml", resolve=True)
        with ExitStack() as stack:  # released last to first: collector side, metrics logger, stop handlers
            metrics_logger = MetricsLogger(self.run_dir, self.config, self.context)
            handlers = self._install_stop_handlers()
            stack.callback(self._restore_stop_handlers, handlers)
            stack.callback(metrics_logger.close)
            collector_side = stack.enter_context(_CollectorSide(handlers))
            collector, watchdog, held = self._open_collector(collector_side)
            progress = _Progress(t_start=time.perf_counter())
            self._build_and_loop(held, collector, watchdog, metrics_logger, progress)
            # released here rather than with the stack: the final evaluation uses the collector's idle CPUs
            collector_side.close()
            if self.learner is None:  # never ticked: nothing to save or summarise
                if progress.failure is not None:
                    raise progress.failure
                return {}
            self._finish(progress, collector, metrics_logger)
        if progress.failure is not None:
            raise progress.failure
        log.info(
            "done: %d env steps in %.2f s (%.0f env-steps/s), %d updates, policy_version %d",
            self.summary["env_steps"],
            progress.loop_s,
            self.summary["env_steps_per_s"],
            self.summary["updates"],
            self.summary["policy_version"],
        )
        return self.summary

    # --- build -----------------------------------------------------------------------------------
    def _collector_config(self) -> CollectorConfig:
        """What the collector process is started with."""
        s = self.config.runtime
        record = s.record
        return CollectorConfig(
            env_factory=self.env_factory,
            collector_cpus=self.affinity.collector_cpus,
            num_ticks=self.num_ticks,
            parent_pid=os.getpid(),
            spin_us=s.spin_us,
            poll_s=s.poll_s,
            raise_at_tick=s.fault.collector_raise_at_tick,
            hang_at_tick=s.fault.collector_hang_at_tick,
            step_delay_s=s.fault.collector_step_delay_s,
            trace_max_ticks=s.trace_max_ticks if s.trace else 0,
            record=None
            if record.ticks <= 0
            else RecordWindow(str(self.run_dir / "record.npz"), record.start_tick, record.ticks, record.start_s),
            work_dir=str(self.run_dir.resolve()),
            stagger_rows=self.num_envs if self.config.env.stagger_starts else 0,
            stagger_seed=self.config.seed,
        )

    def _open_collector(self, collector_side: ExitStack) -> tuple[CollectorProcess, Watchdog | None, ExitStack]:
        """The timeline, the collector's handle and its watchdog, with their releases registered.

        Released last to first: the watchdog and the collector stop, `collector_exit.json` is written,
        then the returned stack releases what the collector maps or shares (learner views, pinned memory,
        the shared segment, the CPU affinity), then the timeline is written and `collector.pid` removed.
        """
        s = self.config.runtime
        self.timeline = Timeline(s.trace, self.device, s.trace_max_ticks)
        collector = self.collector = CollectorProcess(
            self._collector_config(), startup_timeout_s=s.startup_timeout_s, timeout_s=s.collector_timeout_s
        )
        watchdog = Watchdog(collector) if _in_main_thread() else None
        collector_side.callback((self.run_dir / "collector.pid").unlink, missing_ok=True)
        collector_side.callback(self._write_timeline, collector)
        held = collector_side.enter_context(ExitStack())
        collector_side.callback(self._write_collector_exit, collector)
        collector_side.callback(collector.stop, s.shutdown_grace_s)
        if watchdog is not None:
            collector_side.callback(watchdog.stop)
        return collector, watchdog, held

    def _write_collector_exit(self, collector: CollectorProcess) -> None:
        if collector.final_report is not None:
            (self.run_dir / "collector_exit.json").write_text(json.dumps(_jsonable(collector.final_report), indent=1))

    def _write_timeline(self, collector: CollectorProcess) -> None:
        if collector.final_report is not None:
            self.timeline.add_collector_track(collector.final_report.pop("trace", None) or [])
        self.timeline.write(self.run_dir)

    def _build_and_loop(
        self,
        held: ExitStack,
        collector: CollectorProcess,
        watchdog: Watchdog | None,
        metrics_logger: MetricsLogger,
        progress: _Progress,
    ) -> None:
        """Start the collector, build the learner side and tick; an exception becomes `progress.failure`."""
        try:
            progress.report = report = self._start_collector(collector)
            self._pin_learner(held)
            spec = report["spec"]
            self._check_spec(spec)
            segment = self._open_segment(held, collector, spec)
            self._build_algorithm(spec)
            self._build_learner(held, collector, segment, spec)
            progress.checkpointer = self._build_checkpointer(spec)
            # Written once everything is built: from here on the run is ticking (tests wait for it).
            (self.run_dir / "collector.pid").write_text(str(collector.pid))
            (self.run_dir / "collector.json").write_text(json.dumps(_jsonable(report), indent=1))
            (self.run_dir / "collector_env.json").write_text(json.dumps(self.env_factory.kwargs, default=str))
            self._loop(watchdog, metrics_logger, progress)
        except (Exception, KeyboardInterrupt, _Terminate) as exc:
            progress.failure, keeps_state = self._classify(exc)
            progress.intact = progress.intact and keeps_state
        if progress.failure is not None and progress.t_loop is not None and not progress.loop_s:
            progress.loop_s = time.perf_counter() - progress.t_loop
        if self.learner is not None and self.learner.in_update:
            progress.intact = False  # stopped inside an update phase: part of its updates applied

    def _start_collector(self, collector: CollectorProcess) -> dict[str, Any]:
        """Start the collector process (and torch.compile's workers); its isolation report."""
        report = collector.start()
        log.info(
            "collector pid %d on CPUs %s (pool workers on %s); learner on CPUs %s, device %s",
            collector.pid,
            report["process_cpus"],
            report["worker_cpu_ids"],
            list(self.affinity.learner_cpus),
            self.device,
        )
        if self.device.type == "cuda" and _algo_compiles(self.config):
            # compile warm-up: kernels compile on the learner's and the (still idle) collector's CPUs
            workers = start_compile_workers(self.affinity.learner_cpus + self.affinity.collector_cpus)
            log.info("torch.compile workers: %d", workers)
        return report

    def _pin_learner(self, held: ExitStack) -> None:
        """This process on the learner's CPUs (undone on the way out), torch's CPU threads with it."""
        held.callback(restore, pin_process(self.affinity.learner_cpus))
        # torch's CPU threads on the learner's CPUs only (default: one per machine core)
        torch.set_num_threads(len(self.affinity.learner_cpus))

    def _check_spec(self, spec: Any) -> None:
        """The collector's env has the training and eval rows; `self.spec` is its training part."""
        if spec.num_envs != self.slot_rows:
            raise ValueError(
                f"the collector's env has {spec.num_envs} rows, expected env.num_envs + eval.num_envs = "
                f"{self.num_envs} + {self.num_eval_envs}"
            )
        self.spec = replace(spec, num_envs=self.num_envs)  # what the algorithm and replay see

    def _open_segment(self, held: ExitStack, collector: CollectorProcess, spec: Any) -> SharedSegment:
        """The shared slots, attached to the collector and (CUDA) page-locked; unlinked on the way out."""
        s = self.config.runtime
        layout = Layout.for_spec(spec.num_envs, dict(spec.obs_dims), spec.action_dim, s.ingress_slots)
        segment = SharedSegment.create(layout)
        held.callback(segment.close)
        held.callback(segment.unlink)
        collector.attach(segment, layout, s.ingress_slots)
        if self.device.type == "cuda" and s.pin_host_memory:
            registered_ptr = _pin_host_memory(segment)
            if registered_ptr is not None:
                held.callback(torch.cuda.cudart().cudaHostUnregister, registered_ptr)
        return segment

    def _build_algorithm(self, spec: Any) -> None:
        """The algorithm for the training rows, restored from `train.resume` when given."""
        torch.manual_seed(self.config.seed)
        self.algorithm = self.algorithm_factory(self.config.algo, self.spec, self.device)
        if self.resume_checkpoint is not None:
            check_compatible(
                self.resume_checkpoint, self.resume_path, obs_dims=dict(spec.obs_dims), action_dim=spec.action_dim
            )
            load_algorithm_state(self.algorithm, self.resume_checkpoint, self.resume_path)

    def _build_learner(self, held: ExitStack, collector: CollectorProcess, segment: SharedSegment, spec: Any) -> None:
        """Replay and the learner over the shared slots; its views of them are released on the way out."""
        config, s = self.config, self.config.runtime
        # never allocate what cannot fill
        capacity = min(config.replay.capacity, self.num_ticks * self.num_envs)
        self.replay = ReplayBuffer(capacity, dict(spec.obs_dims), spec.action_dim, self.device, self.num_envs)
        ring = IngressRing(segment, list(spec.obs_dims), s.ingress_slots)
        self.learner = Learner(
            algorithm=self.algorithm,
            replay=self.replay,
            link=CollectorLink(spec, segment, ring, Waiter(segment, s.spin_us, s.poll_s), collector),
            plan=self._train_plan(),
            device=self.device,
            timeline=self.timeline,
            evaluation=EvalRows(self.num_eval_envs, config.eval),
            options=TickOptions(keep_awake_us=s.keep_awake_us, tick_graph=s.tick_graph),
            faults=LearnerFaults(
                raise_at_tick=s.fault.learner_raise_at_tick,
                sleep_at_tick=s.fault.learner_sleep_at_tick,
                sleep_s=s.fault.learner_sleep_s,
            ),
        )
        held.callback(self.learner.release_views)
        if self.resume_checkpoint is not None:
            self._resume_learner()

    def _train_plan(self) -> TrainPlan:
        """The learner's budgets and schedule (`train.updates_per_step` null: the algorithm's)."""
        train = self.config.train
        updates_per_step = train.updates_per_step
        if updates_per_step is None:
            updates_per_step = self.algorithm.updates_per_step
        return TrainPlan(
            num_ticks=self.num_ticks,
            updates_per_step=int(updates_per_step),
            learning_starts=self.learning_starts,
            seed=self.config.seed,
            max_seconds=train.max_seconds,
            start_env_steps=self.start_counters["env_steps"],
            max_nonfinite_updates=train.max_nonfinite_updates,
        )

    def _resume_learner(self) -> None:
        """The checkpoint's counters and RNG states into the learner."""
        counters = self.resume_checkpoint["counters"]
        self.learner.resume(counters["policy_version"], counters["updates"])
        restore_rng(self.resume_checkpoint.get("rng") or {}, self.learner.generators)
        self.resume_checkpoint = None  # the tensors are in the algorithm now
        log.info(
            "resumed from %s at %d env steps (%d updates, policy_version %d)",
            self.resume_path,
            counters["env_steps"],
            counters["updates"],
            counters["policy_version"],
        )

    def _build_checkpointer(self, spec: Any) -> Checkpointer:
        """The run's checkpointer, naming what a checkpoint may be resumed into."""
        config = self.config
        identity = RunIdentity(
            algo=str(_algo_name(config, "unknown")),
            env=config.env.name,
            obs_dims=dict(spec.obs_dims),
            action_dim=int(spec.action_dim),
            num_envs=self.num_envs,
        )
        return Checkpointer(
            self.run_dir,
            config.checkpoint,
            identity,
            config=config.source,
            start_env_steps=self.start_counters["env_steps"],
            git_commit=git_commit(Path(__file__).parent),
        )

    # --- loop and finish -------------------------------------------------------------------------
    def _loop(self, watchdog: Watchdog | None, metrics_logger: MetricsLogger, progress: _Progress) -> None:
        """Tick to the budget, logging rows and writing the periodic checkpoints."""
        checkpointer = progress.checkpointer
        progress.t_loop = time.perf_counter()
        log_hook = progress.log_hook = self._logging_hook(metrics_logger, progress.t_loop)

        def on_tick(tick: int) -> None:
            log_hook(tick)
            if checkpointer.due(self.env_steps(self.learner.ticks_done)):
                self._save_checkpoint(checkpointer)

        if watchdog is not None:
            watchdog.start(self.learner)
        progress.intact = True
        finished = self.learner.run(on_tick=on_tick)
        progress.stop_reason = "total_env_steps" if finished else "max_seconds"
        progress.loop_s = time.perf_counter() - progress.t_loop
        log_hook(None)  # the last training row, before the final evaluation
        progress.log_hook = None

    def _classify(self, exc: BaseException) -> tuple[RunFailure | CheckpointError, bool]:
        """The failure an exception ends the run with, and whether the learner state may still be checkpointed.

        Called inside the `except` block (the traceback of an unexpected error is the current one).
        """
        if isinstance(exc, (RunFailure, CheckpointError)):
            return exc, True
        if isinstance(exc, StopRequested):  # the first SIGINT/SIGTERM: the loop left between ticks
            return self._interrupted(exc.signum), True
        if isinstance(exc, KeyboardInterrupt):  # a second SIGINT, or one before the loop: wherever it landed
            return self._interrupted(signal.SIGINT, at_once=True), False
        if isinstance(exc, _Terminate):
            return self._interrupted(signal.SIGTERM, at_once=True), False
        if isinstance(exc, NonFiniteUpdates):  # every non-finite update was skipped: the parameters are intact
            failure = LearnerFailed(str(exc), tick=self._tick())
            failure.detail = ""
            return failure, True
        # every other learner-side error ends the run the same way
        return LearnerFailed(f"raised {type(exc).__name__}: {exc}", traceback.format_exc(), self._tick()), False

    def _finish(self, progress: _Progress, collector: CollectorProcess, metrics_logger: MetricsLogger) -> None:
        """Final checkpoint (learner state intact), last metric row, final snapshot (completed runs), summary.json."""
        failure, checkpointer = progress.failure, progress.checkpointer
        if isinstance(failure, (CollectorFailed, LearnerFailed)):
            progress.stop_reason = failure.headline()
        elif isinstance(failure, Interrupted):
            progress.stop_reason = signal.Signals(failure.signum).name
        if progress.intact and checkpointer is not None:
            try:
                path = self._save_checkpoint(checkpointer)
                if failure is not None:
                    failure.checkpoint = str(path)
            except Exception as exc:  # noqa: BLE001 - keep the original failure; say why nothing was saved
                log.error("the final checkpoint could not be written: %s", exc)
                if failure is None:
                    failure = progress.failure = LearnerFailed(
                        f"could not write the final checkpoint: {exc}", tick=self._tick()
                    )
        elif isinstance(failure, RunFailure) and checkpointer is not None:
            failure.no_checkpoint = self._why_no_checkpoint(checkpointer)
        if progress.log_hook is not None:  # stopped early: flush what the loop counted
            progress.log_hook(None)
        snapshot = None
        if failure is None and self.config.eval.final:
            snapshot = self._final_snapshot_eval(progress.loop_s)
            row = {"time/elapsed_s": time.perf_counter() - progress.t_loop, **eval_metrics(snapshot)}
            metrics_logger.log(self.env_steps(self.learner.ticks_done), row)
        total_s = time.perf_counter() - progress.t_start
        self.summary = self._summary(progress.report, collector, progress.loop_s, total_s)
        self.summary.update(completed=failure is None, stop_reason=progress.stop_reason, snapshot_eval=snapshot)
        (self.run_dir / "summary.json").write_text(json.dumps(self.summary, indent=2))

    # --- stopping ------------------------------------------------------------------------------
    def _install_stop_handlers(self) -> dict[int, Any]:
        """SIGINT and SIGTERM (e.g. from Slurm) ask the loop to stop between ticks; a second one stops at once."""
        if not _in_main_thread():
            return {}
        previous = {signal.SIGTERM: signal.getsignal(signal.SIGTERM), signal.SIGINT: signal.getsignal(signal.SIGINT)}

        def on_signal(signum: int, frame: Any) -> None:
            learner = self.learner
            if learner is None or learner.stop_signal is not None:
                raise KeyboardInterrupt if signum == signal.SIGINT else _Terminate
            learner.request_stop(signum)
            log.warning(
                "%s: stopping after this tick and writing a checkpoint (send it again to stop at once)",
                signal.Signals(signum).name,
            )

        signal.signal(signal.SIGTERM, on_signal)
        if previous[signal.SIGINT] is not signal.SIG_IGN:  # a background job keeps Ctrl-C ignored (Unix convention)
            signal.signal(signal.SIGINT, on_signal)
        return previous

    @staticmethod
    def _restore_stop_handlers(previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    # --- the final snapshot ----------------------------------------------------------------------
    def _final_snapshot_eval(self, loop_s: float) -> dict[str, Any]:
        """Evaluate the final policy: `eval.episodes` fresh deterministic episodes on the collector's CPUs.

        Runs in this process after the collector stopped (its CPUs are idle), with an env of its own,
        one row per episode, seeded apart from training; the actor acts through `act_snapshot` on a
        snapshot taken now, i.e. the parameters the final checkpoint holds.
        """
        algorithm, learner = self.algorithm, self.learner
        rows = self.config.eval.episodes
        kwargs = {**self.env_factory.kwargs, "num_envs": rows, "seed": self.config.seed + FINAL_EVAL_SEED}
        available = os.sched_getaffinity(0)
        cpus = tuple(c for c in self.affinity.collector_cpus if c in available) or tuple(sorted(available))[:1]
        t0 = time.perf_counter()
        env = replace(self.env_factory, kwargs=kwargs).build(cpus)
        # MuJoCo's warnings (MUJOCO_LOG.TXT) land in the run dir; the working directory is never used (it may be gone)
        previous_log = point_mujoco_log_at(str(self.run_dir))
        try:
            algorithm.snapshot_actor()
            tracking: dict[str, Any] = {}
            returns, lengths, _ = rollout(
                env, MeanPolicy(algorithm, env.spec, self.device, snapshot=True), tracking=tracking
            )
        finally:
            env.close()
            restore_mujoco_log(previous_log)
        result = {
            **return_statistics(returns, lengths),
            **tracking_statistics(env.spec.tracking_terms, **tracking),
            "policy_version": learner.policy_version,
            "env_steps": learner.env_steps_done(),
            "snapshot_s": loop_s,
            "returns": returns.tolist(),
            "lengths": lengths.astype(int).tolist(),
            "seconds": time.perf_counter() - t0,
            "final": True,
        }
        learner.evals.history.append(result)
        log.info(
            "final snapshot (policy_version %d, %d env steps): return mean %.1f, median %.1f, min %.1f over %d "
            "episodes",
            result["policy_version"],
            result["env_steps"],
            result["mean"],
            result["median"],
            result["min"],
            result["episodes"],
        )
        return result

    def _tick(self) -> int | None:
        return None if self.learner is None else self.learner.tick

    def _interrupted(self, signum: int, at_once: bool = False) -> Interrupted:
        """The stop on request, counted as summary.json counts it (completed ticks)."""
        counters = self._counters()
        return Interrupted(signum, counters["ticks"], counters["env_steps"], at_once=at_once)

    def _why_no_checkpoint(self, checkpointer: Checkpointer) -> str:
        """Why the learner state was not saved on the way out, and the newest checkpoint there is."""
        if self.learner is not None and self.learner.in_update:
            why = "the learner was stopped inside an update phase, part of its updates applied"
        else:
            why = "the learner raised, its state is not trusted"
        latest = checkpointer.directory / LATEST
        return f"{why}; the newest checkpoint is {latest.resolve()}" if latest.exists() else f"{why}; none was written"

    def _counters(self) -> dict[str, int]:
        """Counters of the transitions that reached replay: the checkpoint's, summary.json's and the stop message's."""
        learner = self.learner
        if learner is None:
            return dict(self.start_counters)
        return {
            "env_steps": self.env_steps(learner.ticks_done),
            "ticks": self.start_counters["ticks"] + learner.ticks_done,
            "updates": learner.updates_done,
            "policy_version": learner.policy_version,
        }

    def env_steps(self, ticks: int) -> int:
        """Training env steps after `ticks` ticks of this run (a resumed run starts at its checkpoint's)."""
        return self.start_counters["env_steps"] + ticks * self.num_envs

    def _save_checkpoint(self, checkpointer: Checkpointer) -> Path:
        """Checkpoint the algorithm with the counters of the transitions that reached replay."""
        counters = self._counters()
        path = checkpointer.save(self.algorithm, counters, self.learner.generators)
        log.info("checkpoint %s (%d env steps)", path, counters["env_steps"])
        return path

    def _logging_hook(self, metrics_logger: MetricsLogger, t_loop: float) -> Callable[[int | None], None]:
        """`hook(tick)` logs a row every `logger.interval_s` seconds and/or `logger.interval_env_steps` env
        steps, and whenever a snapshot evaluation finished; `hook(None)` logs a final row if one is due."""
        every_s = self.config.logger.interval_s
        every_steps = self.config.logger.interval_env_steps
        every_s = math.inf if every_s is None else float(every_s)
        every_ticks = UNBOUNDED_TICKS if every_steps is None else max(1, int(every_steps) // self.num_envs)
        learner = self.learner
        last = {"time": t_loop, "ticks": 0}
        console = metrics_logger.console

        def hook(tick: int | None) -> None:
            # env steps whose transitions reached replay, as the checkpoint and summary.json count them (tick t's
            # transition is ingested during tick t+1): the rows' env steps never go back, also when a stop
            # request ends the loop between ticks
            done = learner.ticks_done
            console.update(self.env_steps(done), learner.updates_done)  # host counters; refreshes when due
            now = time.perf_counter()
            if tick is not None and not learner.evals.results:
                if done == last["ticks"] or (done % every_ticks and now - last["time"] < every_s):
                    return
            elif done == last["ticks"] and not learner.evals.results:
                return
            metrics = learner.metrics()
            if done > last["ticks"]:
                metrics["perf/env_steps_per_s"] = (done - last["ticks"]) * self.num_envs / max(now - last["time"], 1e-9)
            metrics["time/elapsed_s"] = now - t_loop
            last["time"], last["ticks"] = now, done
            results = learner.evals.take_results()
            for result in results[:-1]:  # two finished within one row (rare): each gets its own row
                metrics_logger.log(self.env_steps(done), {"time/elapsed_s": now - t_loop, **eval_metrics(result)})
            if results:
                metrics.update(eval_metrics(results[-1]))
            metrics_logger.log(self.env_steps(done), metrics)

        return hook

    def _summary(self, report: dict, collector: CollectorProcess, loop_s: float, total_s: float) -> dict[str, Any]:
        learner = self.learner
        steps_here = learner.ticks_done * self.num_envs
        counters = self._counters()
        return {
            "env_steps": counters["env_steps"],
            "ticks": counters["ticks"],
            "num_envs": self.num_envs,
            "eval_envs": self.num_eval_envs,
            "resumed_from_env_steps": self.start_counters["env_steps"],
            "loop_s": loop_s,
            "total_s": total_s,
            "env_steps_per_s": steps_here / max(loop_s, 1e-9),
            "updates": counters["updates"],
            "policy_version": counters["policy_version"],
            # CUDA-graph captures that failed and fell back to eager (empty when all captured)
            "graph_errors": {**(getattr(self.algorithm, "graph_errors", {}) or {}), **learner.graph_errors},
            # runtime.tick_graph: whether the inference tick ran as one captured graph
            "tick_graph": learner.tick_graph_state,
            # host seconds of the first calls, which carry torch.compile and CUDA-graph warm-up
            "warmup_s": dict(learner.meter.warmup_s),
            # snapshot evaluations that finished during the loop (the final one is `snapshot_eval`)
            "snapshot_evaluations": len([r for r in learner.evals.history if not r.get("final")]),
            "replay_size": len(self.replay),
            **learner.final_counters,
            "device": str(self.device),
            "learner_cpus": list(self.affinity.learner_cpus),
            "collector_cpus": list(self.affinity.collector_cpus),
            "collector_pid": collector.pid,
            "collector_worker_cpu_ids": report.get("worker_cpu_ids"),
            "git_commit": git_commit(Path(__file__).parent),
            "machine": platform.node(),
        }


def _jsonable(report: dict[str, Any]) -> dict[str, Any]:
    """The collector's isolation report without the env spec object."""
    return {k: v for k, v in report.items() if k != "spec"}


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _pin_host_memory(segment: SharedSegment) -> int | None:
    """Page-lock the slots for CUDA copies; a failure only costs speed."""
    try:
        ptr = segment.arrays["control"].ctypes.data
        err = torch.cuda.cudart().cudaHostRegister(ptr, segment.layout.size, 0)
        return ptr if int(err) == 0 else None
    except (RuntimeError, AttributeError, TypeError) as exc:
        log.warning("could not pin the shared slots for CUDA copies: %s", exc)
        return None


__all__ = ["ConfigError", "Runner", "resolve_device", "default_algorithm_factory", "CollectorFailed"]
