"""Optimisation that stays on the device: fused Adam with tensor learning rates, steps skipped on non-finite
values without a host sync, fp16 loss scaling, per-phase metric means.

Every optimizer step, Polyak step, temperature step and statistics update of an update is gated by a 0/1
tensor (`finite_step`, `sac.soft_update_(..., allowed=)`), so an update whose batch, loss or gradients are not
finite leaves everything as it was, without the host looking at a single value.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn


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


class LRSchedule:
    """Linear warm-up from `init` to `peak` over `warmup` steps, then a cosine decay to `end` at step `decay`,
    held after; evaluated on the device from a step-count tensor, so a captured graph reads the current rate.

    The caller owns the step counter (a device tensor it advances by the 0/1 of a step taken, so a skipped
    non-finite step does not count) and writes `value(step)` into the optimizer's lr tensor before each step.
    """

    def __init__(self, init: float, peak: float, end: float, warmup: int, decay: int) -> None:
        self.init, self.peak, self.end = float(init), float(peak), float(end)
        self.warmup = int(warmup)
        self.decay = max(int(decay), self.warmup + 1)

    def value(self, step: Tensor) -> Tensor:
        """Learning rate at optimizer step `step` (float tensor)."""
        warm = self.init + (self.peak - self.init) * step / max(self.warmup, 1)
        progress = ((step - self.warmup) / (self.decay - self.warmup)).clamp(0.0, 1.0)
        cosine = self.end + (self.peak - self.end) * 0.5 * (1.0 + torch.cos(math.pi * progress))
        return torch.where(step < self.warmup, warm, cosine)

    def set_lr(self, lr: Tensor, step: Tensor) -> None:
        """Write the lr of optimizer step `step` into `lr`; the caller counts the step once it was taken."""
        lr.copy_(self.value(step))


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
