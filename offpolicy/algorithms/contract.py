"""The off-policy algorithm contract: what the learner calls, and how each call runs (eager, compiled, captured).

An algorithm subclasses `OffPolicyAlgorithm` and writes its maths as plain update and policy functions
(`_phase`, `_explore`, `_act`); this class turns them into the public contract (`update_phase`, `explore`,
`act`, snapshots, the averaged policy, state dicts) and routes them through the speed layer
(`offpolicy/algorithms/capture.py`).
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from envs.core import ACTOR_OBS_KEY, EnvSpec
from offpolicy.algorithms.capture import CapturedCall

CRITIC_OBS_KEY = "critic"
"""Observation key of privileged critic inputs; the critic falls back to `actor` without it."""

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}
"""`algo.amp` choices and their autocast dtypes"""


class UpdatesStopped(Exception):
    """An eager update phase stopped on request between two updates: its first `done` updates were applied whole."""

    def __init__(self, done: int) -> None:
        self.done = int(done)
        super().__init__(f"update phase stopped on request after {self.done} updates")


class OffPolicyAlgorithm:
    """One learner-owned off-policy algorithm: the only actor, critics, optimizers and exploration state.

    Subclasses implement `_schedule`, `_phase`, `_explore`, `_act`, `_changes_policy`,
    `_state` and `_load_state`; this class turns them into the public contract and
    chooses eager, compiled or CUDA-graph execution.
    """

    actor: nn.Module
    """the only actor (`learner.actor` refers to it)"""
    updates_per_step: int
    """default gradient updates per vector env step"""
    batch_size: int
    """transitions per gradient update"""
    policy_version: int
    """advances by one at the end of each update phase that changed what `explore`/`act` compute"""
    exploration_state_rows: bool = False
    """whether exploration keeps per-env state (noise holds), so `explore` takes exactly the training rows"""

    def __init__(self, cfg: DictConfig, spec: EnvSpec, device: torch.device) -> None:
        self.cfg = cfg
        self.spec = spec
        self.device = torch.device(device)
        on_cuda = self.device.type == "cuda"
        if cfg.amp not in AMP_DTYPES:
            raise ValueError(f"algo.amp must be one of {sorted(AMP_DTYPES)}, got {cfg.amp!r}")
        self.amp_dtype = AMP_DTYPES[cfg.amp] if on_cuda else None
        self.use_compile = bool(cfg.compile) and on_cuda
        self.use_cuda_graphs = bool(cfg.cuda_graphs) and on_cuda
        self.compile_mode = str(cfg.compile_mode)
        self.graph_warmup_calls = int(cfg.graph_warmup_calls)
        if self.use_compile and self.use_cuda_graphs and self.compile_mode in ("reduce-overhead", "max-autotune"):
            raise ValueError(
                f"compile_mode={self.compile_mode!r} brings its own CUDA graphs; with algo.cuda_graphs=true use "
                "'default' or 'max-autotune-no-cudagraphs'"
            )
        self.updates_per_step = int(cfg.updates_per_step)
        self.batch_size = int(cfg.batch_size)
        self.gamma = float(cfg.gamma)
        self.tau = float(cfg.tau)
        self.action_dim = int(spec.action_dim)
        self.num_envs = int(spec.num_envs)
        self.actor_key = ACTOR_OBS_KEY
        self.critic_key = CRITIC_OBS_KEY if CRITIC_OBS_KEY in spec.obs_dims else ACTOR_OBS_KEY
        self.actor_obs_dim = int(spec.obs_dims[self.actor_key])
        self.critic_obs_dim = int(spec.obs_dims[self.critic_key])
        self.policy_version = 0
        self.total_updates = 0
        """gradient updates done so far (host counter: the actor-update schedule derives from it)"""
        self.nonfinite_streak = torch.zeros((), dtype=torch.int64, device=self.device)
        """non-finite updates in a row up to now (0 after any valid update): a device tensor the learner
        reads without blocking; such updates changed nothing (`train/nonfinite_updates` counts them per phase)"""
        self.policy_ema = bool(cfg.policy_ema)
        self.policy_ema_tau = float(cfg.policy_ema_tau)
        if not 0.0 < self.policy_ema_tau <= 1.0:
            raise ValueError(f"algo.policy_ema_tau must be in (0, 1], got {self.policy_ema_tau}")
        self._averaged: nn.Module | None = None
        """exponential moving average of the actor (`averaged_actor`), made on first use"""
        self._averaged_pairs: tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor]] = ([], [], [], [])
        self._captured: dict[tuple, CapturedCall] = {}
        self._snapshot: nn.Module | None = None
        """frozen copy of the actor for snapshot evaluation (`snapshot_actor`)"""
        self._snapshot_pairs: tuple[list[Tensor], list[Tensor]] = ([], [])
        self.stop_between_updates: threading.Event | None = None
        """set by the learner; once the event is set, an eager update phase ends after its current update
        (`UpdatesStopped`); a captured phase cannot stop inside and runs to its end"""
        self._phase_updates_done = 0
        # the subclass's policy functions through torch.compile when it is on (lazily: they compile at their first
        # call, once the subclass has built its networks); the public methods call them without gradients
        self._explore_fn = self.maybe_compile(self._explore)
        self._act_fn = self.maybe_compile(self._act)

    # ------------------------------------------------------------------ public contract

    @torch.no_grad()
    def explore(self, obs: dict[str, Tensor], reset_mask: Tensor) -> Tensor:
        """Stochastic actions in [-1, 1], (N, action_dim), no grad; resets per-env exploration state on `reset_mask`."""
        obs_actor = obs[self.actor_key].to(self.device, non_blocking=True)  # no-op for device tensors
        reset_mask = reset_mask.to(device=self.device, dtype=torch.bool, non_blocking=True)
        if self.exploration_state_rows and obs_actor.shape[0] != self.num_envs:
            raise ValueError(f"explore expects {self.num_envs} envs, got {obs_actor.shape[0]}")
        if self.use_cuda_graphs:
            key = ("explore", tuple(obs_actor.shape))
            return self._captured_call(key, self._explore_fn)(obs_actor, reset_mask)
        return self._explore_fn(obs_actor, reset_mask)

    @torch.no_grad()
    def act(self, obs: dict[str, Tensor]) -> Tensor:
        """Deterministic (mean) actions in [-1, 1] for evaluation, no grad, by `eval_actor`."""
        obs_actor = obs[self.actor_key].to(self.device, non_blocking=True)
        if self.use_cuda_graphs:
            key = ("act", tuple(obs_actor.shape))
            return self._captured_call(key, lambda o: self._act_with(self.eval_actor, o))(obs_actor)
        return self._act_with(self.eval_actor, obs_actor)

    @property
    def eval_actor(self) -> nn.Module:
        """The actor evaluation acts with: the averaged actor when `policy_ema` is on, else the actor itself.

        Exploration and training always use `actor`; `act`, `snapshot_actor` (snapshot and final
        evaluation), checkpoints' policy files and `offpolicy.eval` use this one.
        """
        return self.averaged_actor() if self.policy_ema else self.actor

    def averaged_actor(self) -> nn.Module:
        """The exponential moving average of the actor's parameters and float buffers (normaliser and
        BatchNorm statistics), advanced at the end of every update phase (`policy_ema_tau` per update).

        Made on first use as a copy of the actor; its tensors are updated in place, so captured graphs
        keep pointing at them.
        """
        if self._averaged is None:
            self._averaged = copy.deepcopy(self.actor)
            self._averaged.requires_grad_(False)
            live = self.actor.state_dict(keep_vars=True)
            avg = self._averaged.state_dict(keep_vars=True)
            floats = [k for k, t in live.items() if t.is_floating_point()]
            others = [k for k in live if k not in floats]
            self._averaged_pairs = (
                [avg[k].detach() for k in floats],
                [live[k].detach() for k in floats],
                [avg[k].detach() for k in others],
                [live[k].detach() for k in others],
            )
        return self._averaged

    def snapshot_actor(self) -> None:
        """Freeze a copy of `eval_actor` as it is now (parameters and buffers: normalisers, BatchNorm statistics).

        The copy is made once and refreshed in place (one device copy on the learner's stream, ordered
        after the last update phase), so a captured `act_snapshot` graph keeps pointing at it.
        """
        if self._snapshot is None:
            source = self.eval_actor
            self._snapshot = copy.deepcopy(source)
            self._snapshot.requires_grad_(False)
            live = list(source.state_dict(keep_vars=True).values())
            frozen_ = list(self._snapshot.state_dict(keep_vars=True).values())
            self._snapshot_pairs = ([t.detach() for t in frozen_], [t.detach() for t in live])
            return
        with torch.no_grad():
            torch._foreach_copy_(*self._snapshot_pairs)

    @torch.no_grad()
    def act_snapshot(self, obs: dict[str, Tensor]) -> Tensor:
        """Deterministic (mean) actions in [-1, 1] of the frozen snapshot (`snapshot_actor`), no grad."""
        if self._snapshot is None:
            self.snapshot_actor()
        obs_actor = obs[self.actor_key].to(self.device, non_blocking=True)
        if self.use_cuda_graphs:
            key = ("act_snapshot", tuple(obs_actor.shape))
            return self._captured_call(key, lambda o: self._act_with(self._snapshot, o))(obs_actor)
        return self._act_with(self._snapshot, obs_actor)

    @torch.no_grad()
    def explore_in_graph(self, obs: dict[str, Tensor], reset_mask: Tensor) -> Tensor:
        """`explore` on device tensors without its own graph: for a caller capturing a larger graph around it
        (the learner's whole-tick graph, `runtime.tick_graph`)."""
        return self._explore_fn(obs[self.actor_key], reset_mask.to(torch.bool))

    @torch.no_grad()
    def act_snapshot_in_graph(self, obs: dict[str, Tensor]) -> Tensor:
        """`act_snapshot` without its own graph (as `explore_in_graph`); the snapshot must exist already."""
        if self._snapshot is None:
            raise RuntimeError("act_snapshot_in_graph before snapshot_actor(): a capture would miss the copy")
        return self._act_with(self._snapshot, obs[self.actor_key])

    def update_phase(self, replay, num_updates: int) -> dict[str, Tensor]:
        """Run `num_updates` gradient updates sampling from `replay` on the device; metrics stay device scalars."""
        num_updates = int(num_updates)
        if num_updates <= 0:
            return {}
        schedule = self._schedule(num_updates)
        if self.policy_ema:
            self.averaged_actor()  # made before any capture, so the phase's graph records its tensors
        if self.use_cuda_graphs:
            key = ("phase", id(replay), schedule)
            metrics = self._captured_call(key, lambda: self._phase_and_average(replay, schedule))()
        else:
            self._phase_updates_done = 0
            try:
                metrics = self._phase_and_average(replay, schedule)
            except UpdatesStopped as stop:  # the updates applied so far count, the others never ran
                self._count_updates(schedule[: stop.done])
                raise
        self._count_updates(schedule)
        return metrics

    def _count_updates(self, schedule: tuple[bool, ...]) -> None:
        self.total_updates += len(schedule)
        if schedule and self._changes_policy(schedule):
            self.policy_version += 1

    def observe(self, reward: Tensor, terminated: Tensor, truncated: Tensor) -> None:
        """Called once per ingested vector step, in env order (running reward statistics); default no-op."""

    def state_dict(self) -> dict:
        """All networks, targets, optimizers, scalers, normalisers, temperature, the averaged actor when
        `policy_ema` is on (`actor_ema`) and counters (no RNG state)."""
        state = self._state()
        if self.policy_ema:
            state["actor_ema"] = self.averaged_actor().state_dict()
        state["counters"] = {"policy_version": self.policy_version, "total_updates": self.total_updates}
        return state

    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict`; drops captured graphs (optimizer state tensors are replaced)."""
        self._captured.clear()
        self._snapshot, self._snapshot_pairs = None, ([], [])
        self._load_state(state)
        self._load_averaged(state)
        self.policy_version = int(state["counters"]["policy_version"])
        self.total_updates = int(state["counters"]["total_updates"])

    def load_policy_state_dict(self, state: dict) -> None:
        """Load only what acting needs (`checkpoint.POLICY_KEYS`: the actor, the averaged actor if kept, and the
        counters), e.g. from a policy file; critics, targets and optimizers keep their fresh values, so this is
        for evaluation only."""
        self._captured.clear()
        self._snapshot, self._snapshot_pairs = None, ([], [])
        self.actor.load_state_dict(state["actor"])
        self._load_averaged(state)
        self.policy_version = int(state["counters"]["policy_version"])
        self.total_updates = int(state["counters"]["total_updates"])

    def _load_averaged(self, state: dict) -> None:
        """The averaged actor from `state["actor_ema"]`; a state without one (made with `policy_ema` off)
        starts the average at the loaded actor."""
        if "actor_ema" in state and state["actor_ema"] is not None:
            self.averaged_actor().load_state_dict(state["actor_ema"])
        elif self._averaged is not None or self.policy_ema:
            self.averaged_actor().load_state_dict(self.actor.state_dict())

    # ------------------------------------------------------------------ helpers for subclasses

    def autocast(self):
        """Autocast context of the configured AMP dtype (a no-op on CPU or with amp=none).

        The cast cache stays off: cached casts would be baked into a captured graph.
        """
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype, cache_enabled=False)

    def maybe_compile(self, fn: Callable) -> Callable:
        """`torch.compile(fn)` when compilation is on, else `fn`."""
        if not self.use_compile:
            return fn
        return torch.compile(fn, mode=self.compile_mode, dynamic=False)

    @property
    def graph_errors(self) -> dict[str, str]:
        """Captures that failed and fell back to eager execution (empty when all graphs work)."""
        return {
            str(tuple(k for k in key if not isinstance(k, int))): call.error
            for key, call in self._captured.items()
            if call.error
        }

    def _end_update(self, ok: Tensor) -> Tensor:
        """Count one update whose validity is `ok` (0/1) into `nonfinite_streak`; returns 1 - ok.

        Subclasses call it last in each update of `_phase`: it is the phase's safe point, where a
        stop request (`stop_between_updates`) ends an eager phase with every update before it whole.
        """
        bad = 1.0 - ok
        self.nonfinite_streak.copy_((self.nonfinite_streak + 1) * bad.long())
        self._phase_updates_done += 1
        stop = self.stop_between_updates
        if stop is not None and not self.use_cuda_graphs and stop.is_set():
            raise UpdatesStopped(self._phase_updates_done)
        return bad

    def _captured_call(self, key: tuple, fn: Callable) -> CapturedCall:
        call = self._captured.get(key)
        if call is None:
            call = self._captured[key] = CapturedCall(fn, self.graph_warmup_calls)
        return call

    def _act_with(self, module: nn.Module, obs_actor: Tensor) -> Tensor:
        # `_act` reads `self.actor`: point it at `module` for this call. Only Python sees the swap;
        # a compiled `_act` specialises on the module (a second compiled entry), a captured graph
        # records that module's tensors.
        if module is self.actor:
            return self._act_fn(obs_actor)
        live, self.actor = self.actor, module
        try:
            return self._act_fn(obs_actor)
        finally:
            self.actor = live

    def _phase_and_average(self, replay, schedule: tuple[bool, ...]) -> dict[str, Tensor]:
        """`_phase`, then the averaged actor's step for its updates (inside the same captured graph)."""
        metrics = self._phase(replay, schedule)
        if self.policy_ema:
            self._average_step(len(schedule))
        return metrics

    @torch.no_grad()
    def _average_step(self, num_updates: int) -> None:
        """avg <- avg + w (actor - avg) with w = 1 - (1 - tau)^n for n updates: n per-update EMA steps of an
        actor that changed only at the end; integer buffers (BatchNorm's batch count) are copied."""
        avg_f, live_f, avg_o, live_o = self._averaged_pairs
        weight = 1.0 - (1.0 - self.policy_ema_tau) ** num_updates
        torch._foreach_lerp_(avg_f, live_f, weight)
        if avg_o:
            torch._foreach_copy_(avg_o, live_o)
        self._project_averaged(self._averaged)

    # ------------------------------------------------------------------ subclass hooks

    def _project_averaged(self, averaged: nn.Module) -> None:
        """Bring the averaged actor back onto the constraints the actor's weights keep (default: none)."""

    def _schedule(self, num_updates: int) -> tuple[bool, ...]:
        """For each of the next `num_updates` updates: does the actor update too?"""
        raise NotImplementedError

    def _changes_policy(self, schedule: tuple[bool, ...]) -> bool:
        """Whether a phase with this schedule changes what explore/act compute."""
        raise NotImplementedError

    def _phase(self, replay, schedule: tuple[bool, ...]) -> dict[str, Tensor]:
        """Sample and run one phase of updates; device-only code."""
        raise NotImplementedError

    def _explore(self, obs_actor: Tensor, reset_mask: Tensor) -> Tensor:
        """Stochastic actions in [-1, 1] of `self.actor`; resets per-env exploration state on `reset_mask`."""
        raise NotImplementedError

    def _act(self, obs_actor: Tensor) -> Tensor:
        """Deterministic (mean) actions in [-1, 1] of `self.actor` (the contract points it at the acting copy)."""
        raise NotImplementedError

    def _state(self) -> dict:
        raise NotImplementedError

    def _load_state(self, state: dict) -> None:
        raise NotImplementedError
