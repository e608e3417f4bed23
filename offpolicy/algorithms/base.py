"""The off-policy algorithm contract and the machinery that keeps its hot paths capturable.

Hot paths (the update phase, the inference tick) are written as device-only code:
static shapes, no `.item()`, no host branching on device values, optimizer steps
with tensor learning rates. On CUDA they can then be run three ways: eagerly,
with `torch.compile` on the loss functions, and captured as CUDA graphs (one graph
per update-phase shape, one per inference batch size). On CPU everything is eager.

Non-finite values are handled the same way, on the device: every optimizer step,
Polyak step, temperature step and statistics update of an update is gated by a
0/1 tensor (`finite_step`, `soft_update_(..., allowed=)`), so an update whose batch,
loss or gradients are not finite leaves everything as it was, without the host
looking at a single value.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from envs.core import ACTOR_OBS_KEY, EnvSpec

CRITIC_OBS_KEY = "critic"
"""Observation key of privileged critic inputs; the critic falls back to `actor` without it."""

_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- maths shared by both algorithms


def tanh_log_det_jacobian(pre_tanh: Tensor) -> Tensor:
    """log(1 - tanh(u)^2) per element, in the overflow-free form 2 (log 2 - u - softplus(-2u))."""
    return 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))


def tanh_gaussian_log_prob(pre_tanh: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log-density of a = tanh(u), u ~ N(mean, exp(log_std)^2), summed over the last dim."""
    z = (pre_tanh - mean) * torch.exp(-log_std)
    gauss = -0.5 * z.pow(2) - log_std - 0.5 * math.log(2.0 * math.pi)
    return (gauss - tanh_log_det_jacobian(pre_tanh)).sum(-1)


def tanh_gaussian_sample(mean: Tensor, log_std: Tensor, noise: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Reparameterised action tanh(mean + std * noise) and its log-probability."""
    if noise is None:
        noise = torch.randn_like(mean)
    pre_tanh = mean + torch.exp(log_std) * noise
    return torch.tanh(pre_tanh), tanh_gaussian_log_prob(pre_tanh, mean, log_std)


def squash_log_std(raw: Tensor, log_std_min: float, log_std_max: float) -> Tensor:
    """Map an unbounded head output into [log_std_min, log_std_max] through tanh."""
    return log_std_min + 0.5 * (log_std_max - log_std_min) * (torch.tanh(raw) + 1.0)


def bootstrap_discount(gamma: float, terminated: Tensor) -> Tensor:
    """Per-row discount of the next-state value: 0 on termination, gamma otherwise (truncation keeps it)."""
    return gamma * (1.0 - terminated)


@torch.no_grad()
def soft_update_(target: Sequence[Tensor], online: Sequence[Tensor], tau: float, allowed: Tensor | None = None) -> None:
    """Polyak step target <- target + tau * (online - target); with `allowed` (0/1 tensor) the step is tau * allowed.

    Without `allowed` it is one fused lerp kernel. The gated form stays on the device (a
    tensor weight passed to lerp would be read on the host) and leaves the target exactly
    as it was when `allowed` is 0, the online parameters being finite.
    """
    target, online = list(target), list(online)
    if allowed is None:
        torch._foreach_lerp_(target, online, tau)
        return
    delta = torch._foreach_sub(online, target)
    torch._foreach_mul_(delta, allowed * tau)
    torch._foreach_add_(target, delta)


def finite_rows(*tensors: Tensor) -> Tensor:
    """(B,) bool: row b of every tensor (B,) or (B, D) is finite."""
    ok = None
    for t in tensors:
        row = torch.isfinite(t) if t.dim() == 1 else torch.isfinite(t).all(-1)
        ok = row if ok is None else ok & row
    return ok


# --------------------------------------------------------------------------- optimisation helpers


def make_adam(
    params: Iterable[Tensor],
    lr: Tensor,
    betas: Sequence[float],
    weight_decay: float,
    decoupled: bool = True,
) -> torch.optim.Optimizer:
    """Fused Adam(W) with a tensor learning rate; capturable on CUDA (graph-safe, no host sync)."""
    params = list(params)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    return cls(
        params,
        lr=lr,
        betas=(float(betas[0]), float(betas[1])),
        weight_decay=weight_decay,
        fused=True,
        capturable=lr.device.type == "cuda",
    )


def finite_step(
    loss: Tensor,
    optimizer: torch.optim.Optimizer,
    params: Sequence[Tensor],
    allowed: Tensor | None = None,
    max_grad_norm: float = 0.0,
) -> Tensor:
    """backward, then a fused step that is skipped unless `allowed`, the loss and the gradients are finite.

    Returns the 0/1 float tensor of whether the step was taken. The skip is the fused
    optimizer's own `found_inf` (also what the fp16 loss scaler uses): parameters, moments
    and the step count stay exactly as they were.
    """
    ok = torch.isfinite(loss.detach()).float()
    if allowed is not None:
        ok = ok * allowed
    loss.backward()
    grads = [p.grad for p in params if p.grad is not None]
    found_inf = torch.zeros((), device=ok.device, dtype=torch.float32)
    if grads:
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, torch.ones_like(found_inf))
    ok = ok * (1.0 - found_inf)
    if max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
    optimizer.found_inf = 1.0 - ok  # the fused kernel skips the update when it is nonzero
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf
    return ok


def optimizer_state_dict(opt: torch.optim.Optimizer) -> dict:
    """Optimizer state with the learning-rate tensors detached into plain floats-as-tensors copies."""
    state = opt.state_dict()
    for group in state["param_groups"]:
        if isinstance(group["lr"], Tensor):
            group["lr"] = group["lr"].detach().clone()
    return state


def load_optimizer_state_dict(opt: torch.optim.Optimizer, state: dict) -> None:
    """Load `state` but keep this optimizer's own lr tensors and device flags (graphs point at them)."""
    own = [(g["lr"], g["fused"], g["capturable"]) for g in opt.param_groups]
    opt.load_state_dict(state)
    for group, (lr, fused, capturable) in zip(opt.param_groups, own):
        if isinstance(lr, Tensor):
            lr.copy_(torch.as_tensor(group["lr"]))
            group["lr"] = lr
        group["fused"], group["capturable"] = fused, capturable
        for p in group["params"]:
            st = opt.state.get(p)
            if st and "step" in st:
                device = p.device if (fused or capturable) else torch.device("cpu")
                st["step"] = st["step"].to(device=device, dtype=torch.float32)


class LossScaler:
    """Dynamic loss scaling for fp16 autocast, entirely on the device (no host sync, graph-safe).

    Gradients are unscaled in place and a non-finite check sets `found_inf`, which the
    fused optimizer reads to skip the step; the scale then grows or backs off on the
    device. Disabled it is a plain `backward(); step()`.
    """

    def __init__(
        self,
        device: torch.device,
        enabled: bool,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        self.enabled = enabled
        self.scale = torch.full((), init_scale if enabled else 1.0, device=device, dtype=torch.float32)
        self.growth_tracker = torch.zeros((), device=device, dtype=torch.int32)
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval

    def step(
        self,
        loss: Tensor,
        optimizer: torch.optim.Optimizer,
        params: Sequence[Tensor],
        max_grad_norm: float = 0.0,
        allowed: Tensor | None = None,
    ) -> Tensor:
        """backward(loss * scale), unscale, optional clip, fused step (skipped on inf/NaN), scale update.

        Returns the 0/1 float tensor of whether the update was valid: `allowed` and a finite
        loss (and, without loss scaling, finite gradients: `finite_step`). A finite loss whose
        scaled gradients overflow is the scaler's business, not a failure: that step is
        skipped and the scale backs off. An invalid update leaves the scale as it was, so a
        run of non-finite batches does not drive the scale to zero.
        """
        if not self.enabled:
            return finite_step(loss, optimizer, params, allowed, max_grad_norm)
        ok = torch.isfinite(loss.detach()).float()
        if allowed is not None:
            ok = ok * allowed
        (loss.float() * self.scale).backward()
        grads = [p.grad for p in params if p.grad is not None]
        found_inf = torch.zeros((), device=self.scale.device, dtype=torch.float32)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, self.scale.reciprocal())
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
        optimizer.found_inf = torch.maximum(found_inf, 1.0 - ok)  # the fused kernel skips the update when nonzero
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
        scale, tracker = self.scale.clone(), self.growth_tracker.clone()
        torch._amp_update_scale_(
            self.scale, self.growth_tracker, found_inf, self.growth_factor, self.backoff_factor, self.growth_interval
        )
        self.scale.copy_(torch.where(ok > 0, self.scale, scale))
        self.growth_tracker.copy_(torch.where(ok > 0, self.growth_tracker, tracker))
        return ok

    def state_dict(self) -> dict:
        """Scale and growth tracker."""
        return {"scale": self.scale.detach().clone(), "growth_tracker": self.growth_tracker.detach().clone()}

    def load_state_dict(self, state: dict) -> None:
        """In-place load (captured graphs keep pointing at the same tensors)."""
        self.scale.copy_(state["scale"])
        self.growth_tracker.copy_(state["growth_tracker"])


class PhaseMetrics:
    """Means over the updates of one phase, each value counted only where its update was valid (device tensors)."""

    def __init__(self) -> None:
        self.sums: dict[str, Tensor] = {}
        self.counts: dict[str, Tensor] = {}

    def add(self, name: str, value: Tensor, ok: Tensor) -> None:
        """Fold `value` in where `ok` (0/1) is 1; a non-finite value of a skipped update never reaches the mean."""
        value = torch.where(ok > 0, value.detach().float(), 0.0)
        if name in self.sums:
            self.sums[name] = self.sums[name] + value
            self.counts[name] = self.counts[name] + ok
        else:
            self.sums[name], self.counts[name] = value, ok

    def means(self) -> dict[str, Tensor]:
        """name -> mean over the valid updates (NaN where none was)."""
        return {name: total / self.counts[name] for name, total in self.sums.items()}


def set_requires_grad(module: nn.Module, flag: bool) -> None:
    """Freeze or unfreeze a module's parameters."""
    for p in module.parameters():
        p.requires_grad_(flag)


@contextlib.contextmanager
def frozen(module: nn.Module):
    """Parameters of `module` take no gradient inside the block (e.g. the critic inside the actor loss)."""
    set_requires_grad(module, False)
    try:
        yield
    finally:
        set_requires_grad(module, True)


# --------------------------------------------------------------------------- CUDA-graph capture


def start_compile_workers(cpus: Iterable[int]) -> int:
    """Start torch.compile's kernel-compile worker pool on `cpus`; call it before the learner is pinned.

    Inductor compiles the kernels it generates in a pool of worker processes, one per CPU the
    process may use when the pool is created, and the workers inherit the affinity of the
    thread that creates it. Created lazily inside a learner pinned to its one or two CPUs, the
    pool gets that many workers on those CPUs while the collector's cores idle through the
    warm-up (the collector waits for the actions of the tick being compiled). Started here, from
    a thread allowed on `cpus` for the moment (the run's learner and collector CPUs), it gets a
    worker per CPU; after the warm-up the workers sleep, and Inductor stops them after a minute
    idle. `TORCHINDUCTOR_COMPILE_THREADS` still sets the count. Returns the number of workers
    started, 0 when none were (then Inductor creates its pool lazily, as before).
    """
    cpus = sorted(set(cpus))
    try:
        import torch._inductor.config as inductor_config
        from torch._inductor.async_compile import AsyncCompile
    except ImportError:  # a torch without Inductor: nothing to start
        return 0
    if "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        inductor_config.compile_threads = min(32, len(cpus))
    threads = int(inductor_config.compile_threads or 1)
    if threads <= 1:
        return 0
    previous = os.sched_getaffinity(0)  # this thread's mask; the pool's processes inherit it
    try:
        os.sched_setaffinity(0, cpus)
        AsyncCompile.warm_pool()
        AsyncCompile.use_process_pool()  # submits a no-op: the workers start now, not at the first kernel
    except Exception as exc:  # noqa: BLE001 - Inductor internals; the lazy pool still works
        log.warning("could not start %d compile workers on CPUs %s (%s); Inductor starts its own", threads, cpus, exc)
        return 0
    finally:
        os.sched_setaffinity(0, previous)
    return threads


class CapturedCall:
    """Run `fn(*tensors)` eagerly for `warmup` calls on a side stream, then capture it once and replay.

    Every call does real work, the warm-up calls included: capture records without
    executing, so the capturing call replays right after. Inputs are copied into the
    static input tensors before each replay; outputs are cloned so callers may keep them.
    `fn` must return a tensor or a dict of tensors. If capture fails, the error is kept
    in `error`, a warning is issued and every later call runs `fn` eagerly.
    """

    def __init__(self, fn: Callable, warmup: int) -> None:
        self.fn = fn
        self.warmup = max(1, int(warmup))
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_in: list[Tensor] = []
        self.static_out = None
        self.error: str | None = None

    def __call__(self, *tensors: Tensor):
        if self.error is not None:
            return self.fn(*tensors)
        if self.graph is None and self.calls < self.warmup:
            self.calls += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self.fn(*tensors)
            main = torch.cuda.current_stream()
            main.wait_stream(side)
            for t in _flat_tensors(out):
                t.record_stream(main)
            return out
        if self.graph is None:
            self.static_in = [t.detach().clone() for t in tensors]
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    self.static_out = self.fn(*self.static_in)
            except Exception as exc:  # kernels are not run during capture: state is as before the call
                self.error = f"{type(exc).__name__}: {exc}"
                self.static_in, self.static_out = [], None
                warnings.warn(f"CUDA-graph capture failed, running eagerly instead: {self.error}", stacklevel=2)
                return self.fn(*tensors)
            self.graph = graph
        else:
            for dst, src in zip(self.static_in, tensors):
                dst.copy_(src)
        self.graph.replay()
        return _clone_out(self.static_out)


def _flat_tensors(out) -> list[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, dict):
        return [v for v in out.values() if isinstance(v, Tensor)]
    return []


def _clone_out(out):
    if isinstance(out, Tensor):
        return out.clone()
    if not out:
        return {}
    names = list(out)
    stacked = torch.stack([out[k].float() for k in names])  # one copy for all metrics
    return dict(zip(names, stacked.unbind(0)))


# --------------------------------------------------------------------------- the contract


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

    def __init__(self, cfg: DictConfig, spec: EnvSpec, device: torch.device) -> None:
        self.cfg = cfg
        self.spec = spec
        self.device = torch.device(device)
        on_cuda = self.device.type == "cuda"
        if cfg.amp not in _AMP_DTYPES:
            raise ValueError(f"algo.amp must be one of {sorted(_AMP_DTYPES)}, got {cfg.amp!r}")
        self.amp_dtype = _AMP_DTYPES[cfg.amp] if on_cuda else None
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

    # ------------------------------------------------------------------ public contract

    def explore(self, obs: dict[str, Tensor], reset_mask: Tensor) -> Tensor:
        """Stochastic actions in [-1, 1], (N, action_dim), no grad; resets per-env exploration state on `reset_mask`."""
        obs_actor = obs[self.actor_key].to(self.device, non_blocking=True)  # no-op for device tensors
        reset_mask = reset_mask.to(device=self.device, dtype=torch.bool, non_blocking=True)
        if self.use_cuda_graphs:
            key = ("explore", tuple(obs_actor.shape))
            return self._captured_call(key, self._explore_flat)(obs_actor, reset_mask)
        return self._explore_flat(obs_actor, reset_mask)

    def act(self, obs: dict[str, Tensor]) -> Tensor:
        """Deterministic (mean) actions in [-1, 1] for evaluation, no grad, by `eval_actor`."""
        obs_actor = obs[self.actor_key].to(self.device, non_blocking=True)
        if self.use_cuda_graphs:
            key = ("act", tuple(obs_actor.shape))
            return self._captured_call(key, self._act_flat)(obs_actor)
        return self._act_flat(obs_actor)

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

    def act_snapshot(self, obs: dict[str, Tensor]) -> Tensor:
        """Deterministic (mean) actions in [-1, 1] of the frozen snapshot (`snapshot_actor`), no grad."""
        if self._snapshot is None:
            self.snapshot_actor()
        obs_actor = obs[self.actor_key].to(self.device, non_blocking=True)
        if self.use_cuda_graphs:
            key = ("act_snapshot", tuple(obs_actor.shape))
            return self._captured_call(key, self._act_snapshot_flat)(obs_actor)
        return self._act_snapshot_flat(obs_actor)

    def explore_in_graph(self, obs: dict[str, Tensor], reset_mask: Tensor) -> Tensor:
        """`explore` on device tensors without its own graph: for a caller capturing a larger graph around it
        (the learner's whole-tick graph, `runtime.tick_graph`)."""
        return self._explore_flat(obs[self.actor_key], reset_mask.to(torch.bool))

    def act_snapshot_in_graph(self, obs: dict[str, Tensor]) -> Tensor:
        """`act_snapshot` without its own graph (as `explore_in_graph`); the snapshot must exist already."""
        if self._snapshot is None:
            raise RuntimeError("act_snapshot_in_graph before snapshot_actor(): a capture would miss the copy")
        return self._act_snapshot_flat(obs[self.actor_key])

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

    @torch.no_grad()
    def _explore_flat(self, obs_actor: Tensor, reset_mask: Tensor) -> Tensor:
        return self._explore(obs_actor, reset_mask)

    @torch.no_grad()
    def _act_flat(self, obs_actor: Tensor) -> Tensor:
        return self._act_with(self.eval_actor, obs_actor)

    @torch.no_grad()
    def _act_snapshot_flat(self, obs_actor: Tensor) -> Tensor:
        return self._act_with(self._snapshot, obs_actor)

    def _act_with(self, module: nn.Module, obs_actor: Tensor) -> Tensor:
        # `_act` reads `self.actor`: point it at `module` for this call. Only Python sees the swap;
        # a compiled `_act` specialises on the module (a second compiled entry), a captured graph
        # records that module's tensors.
        if module is self.actor:
            return self._act(obs_actor)
        live, self.actor = self.actor, module
        try:
            return self._act(obs_actor)
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
        raise NotImplementedError

    def _act(self, obs_actor: Tensor) -> Tensor:
        raise NotImplementedError

    def _state(self) -> dict:
        raise NotImplementedError

    def _load_state(self, state: dict) -> None:
        raise NotImplementedError
