"""The speed layer: CUDA-graph capture of device-only hot paths, and torch.compile's worker pool.

Hot paths (the update phase, the inference tick) are written as device-only code: static shapes, no
`.item()`, no host branching on device values, optimizer steps with tensor learning rates. On CUDA they can
then run eagerly, with `torch.compile` on the loss functions, or captured as CUDA graphs (one graph per
update-phase shape, one per inference batch size); `OffPolicyAlgorithm` chooses. On CPU everything is eager.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

log = logging.getLogger(__name__)


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
