"""Where the inference tick's time goes: shared-memory slots vs pinned staging, with and without eval rows.

Builds the real slots (`SharedSegment`, page-locked with cudaHostRegister as the
runner does) and the real algorithm, then times one inference tick (host obs slot
-> device -> explore -> env-unit actions -> host action slot) several ways, and a
per-stage breakdown (synchronising after each stage, so the stages add up to more
than the tick). JSON/CSV to benchmark/outputs/inference_tick/.

    python -m benchmark.offpolicy.benchmark_inference_tick --algo fastsac --env ant
    python -m benchmark.offpolicy.benchmark_inference_tick --env humanoid --idle-gaps-ms 0 \
        --learner-cpus 0-1 --physics-load-cpus 2-15    # the same tick with and without a collector's load
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.machine import OUTPUTS, parse_cpus, write_results  # noqa: E402
from offpolicy.algorithms import make_algorithm  # noqa: E402
from offpolicy.runtime.slots import Layout, SharedSegment  # noqa: E402


def _spec(env: str, num_envs: int):
    import dataclasses

    import envs

    probe = envs.make(env, 1, nthread=1)
    spec = dataclasses.replace(probe.spec, num_envs=num_envs)
    probe.close()
    return spec


def timed(fn, ticks: int, warmup: int, gap_s: float = 0.0) -> dict:
    """Latency of `fn` (host wall clock, it ends synchronised); `gap_s` of idle time before each call,
    as between in-run ticks while the collector steps physics."""
    for _ in range(warmup):
        fn()
    lat = []
    for _ in range(ticks):
        if gap_s:
            time.sleep(gap_s)
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)
    lat_us = sorted(1e6 * x for x in lat)
    return {"median_us": statistics.median(lat_us), "p90_us": lat_us[int(0.9 * len(lat_us))]}


def timed_after(gap, fn, calls: int, warmup: int = 5) -> dict:
    """Latency of `fn` (host wall clock) right after each `gap()`; the first `warmup` calls are not counted."""
    lat = []
    for i in range(calls + warmup):
        gap()
        t0 = time.perf_counter()
        fn()
        if i >= warmup:
            lat.append(1e6 * (time.perf_counter() - t0))
    lat.sort()
    return {"median_us": statistics.median(lat), "p90_us": lat[int(0.9 * len(lat))]}


def physics_load(env_name: str, num_envs: int, cpus: list[int], stop, ready) -> None:
    """Step a bare pool with uniform random actions on `cpus` until `stop` is set (a collector's load on the
    host's caches and memory, without the runtime); `ready` is set after the first steps."""
    import envs

    os.sched_setaffinity(0, cpus)
    env = envs.make(env_name, num_envs, seed=0, cpu_ids=list(cpus), nthread=len(cpus))
    try:
        spec = env.spec
        rng = np.random.default_rng(0)
        actions = [
            rng.uniform(spec.action_low, spec.action_high, (num_envs, spec.action_dim)).astype(np.float32)
            for _ in range(16)
        ]
        env.reset()
        i = 0
        while not stop.is_set():
            env.step(actions[i % 16])
            i += 1
            if i == 3:
                ready.set()
    finally:
        env.close()


@contextlib.contextmanager
def under_physics_load(env_name: str, num_envs: int, cpus: list[int] | None):
    """Run the body while a spawned process steps physics on `cpus` (no load when `cpus` is None)."""
    if not cpus:
        yield
        return
    ctx = multiprocessing.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=physics_load, args=(env_name, num_envs, cpus, stop, ready), daemon=True)
    proc.start()
    try:
        if not ready.wait(120):
            raise RuntimeError("the physics-load process did not start stepping within 120 s")
        yield
    finally:
        stop.set()
        proc.join(30)
        if proc.is_alive():
            proc.kill()


def graph_tick_split(args, algo, spec, n: int, obs_shm, reset_shm, act_shm, scaling, tiny, awake_gap) -> list[dict]:
    """The runtime's one-graph tick (`runtime.tick_graph`, `offpolicy.runtime.learner.TickGraph`, on the same page-locked
    slots): the host's launch, the tick (launch to the actions in the slot) and the device's time (CUDA events)
    per call, back to back, after `awake_gap` (the keep-awake 25-ms wait), and under a collector's physics load; and for scale
    the launch of a one-kernel graph. In a run the learner's stages read `policy` (launch) and `action_copy`."""
    from offpolicy.runtime.learner import TickGraph

    low, mid, half = scaling
    high = low + 2 * half
    algo.snapshot_actor()
    kept = torch.zeros(2, act_shm.shape[0], spec.action_dim, device=algo.device)

    def finish(action, parity):
        kept[parity].copy_(action)
        return torch.clamp(action * half + mid, low, high)

    graph = TickGraph(algo, {"actor": obs_shm}, reset_shm, act_shm, finish, n, warmup=2)
    for tick in range(8):  # the eager warm-up calls and the capture of both parities
        graph(tick % 2)
    if graph.error:
        raise RuntimeError(f"the tick graph fell back to eager: {graph.error}")
    one_kernel = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        tiny.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(one_kernel):
        tiny.add_(1.0)
    stream = torch.cuda.current_stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def split(launch, gap, calls: int) -> dict:
        launch_us, tick_us, device_us = [], [], []
        for i in range(calls + 5):
            gap()
            t0 = time.perf_counter()
            start.record(stream)
            launch(i % 2)
            end.record(stream)
            t1 = time.perf_counter()
            stream.synchronize()
            t2 = time.perf_counter()
            if i >= 5:
                launch_us.append(1e6 * (t1 - t0))
                tick_us.append(1e6 * (t2 - t0))
                device_us.append(1e3 * start.elapsed_time(end))
        return {
            "median_us": statistics.median(tick_us),
            "p90_us": sorted(tick_us)[int(0.9 * len(tick_us))],
            "launch_median_us": statistics.median(launch_us),
            "device_median_us": statistics.median(device_us),  # events around the launch: includes its latency
        }

    def no_gap():
        pass

    rows = []
    loads = [("no load", None)]
    if args.physics_load_cpus:
        loads += [("physics load", parse_cpus(args.physics_load_cpus)), ("no load again", None)]
    for phase, cpus in loads:
        with under_physics_load(args.env, args.num_envs, cpus):
            for what, launch in (
                ("tick graph", lambda p: graph.calls[p]()),
                ("one-kernel graph", lambda p: one_kernel.replay()),
            ):
                for gap_name, gap in (("back to back", no_gap), ("after the keep-awake 25-ms wait", awake_gap)):
                    r = split(launch, gap, args.ticks // 2)
                    rows.append({"variant": f"{what}, {gap_name}, {phase}", "physics_load_cpus": cpus, **r})
                    print(
                        f"{what:16s} {gap_name:32s} {phase:13s} tick {r['median_us']:7.1f} us  launch "
                        f"{r['launch_median_us']:6.1f} us  device {r['device_median_us']:6.1f} us",
                        flush=True,
                    )
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="fastsac")
    p.add_argument("--env", default="ant")
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--idle-gaps-ms", type=float, nargs="*", default=[0.0, 2.0, 10.0, 25.0])
    p.add_argument("--eval-envs", type=int, default=16)
    p.add_argument("--ticks", type=int, default=500)
    p.add_argument(
        "--physics-load-cpus",
        default=None,
        help="e.g. 2-15: also time the tick while a bare pool of --num-envs steps physics on these CPUs "
        "(off, on, off again), as the collector loads the host's caches and memory in a run",
    )
    p.add_argument("--learner-cpus", default=None, help="pin this process (e.g. 0-1, as the runtime's learner)")
    p.add_argument("--out", default=str(OUTPUTS / "inference_tick"))
    args = p.parse_args(argv)
    if args.learner_cpus:
        os.sched_setaffinity(0, parse_cpus(args.learner_cpus))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    n_all = args.num_envs + args.eval_envs
    spec = _spec(args.env, n_all)
    cfg = OmegaConf.load(REPO / "conf" / "algo" / f"{args.algo}.yaml")
    algo = make_algorithm(cfg, _spec(args.env, args.num_envs), device)
    layout = Layout.for_spec(n_all, dict(spec.obs_dims), spec.action_dim, 2)
    seg = SharedSegment.create(layout)
    rows = []
    complete = False
    signal.signal(signal.SIGTERM, _stop_on_sigterm)  # a time limit's SIGTERM still unlinks and keeps the rows
    try:
        if device.type == "cuda":
            ptr = seg.arrays["control"].ctypes.data
            print("cudaHostRegister:", torch.cuda.cudart().cudaHostRegister(ptr, layout.size, 0))
        obs_np, reset_np, act_np = seg["obs/actor"], seg["obs/reset_mask"], seg["action/value"]
        obs_np[:] = np.random.default_rng(0).standard_normal(obs_np.shape)
        reset_np[:] = False
        obs_shm, reset_shm, act_shm = torch.from_numpy(obs_np), torch.from_numpy(reset_np), torch.from_numpy(act_np)
        print("shm is_pinned:", obs_shm.is_pinned() if device.type == "cuda" else None)
        n = args.num_envs
        low = torch.as_tensor(spec.action_low, device=device)
        high = torch.as_tensor(spec.action_high, device=device)
        mid, half = (high + low) / 2, (high - low) / 2
        pin = device.type == "cuda"
        obs_pin = torch.empty(obs_shm.shape, pin_memory=pin)
        reset_pin = torch.empty(reset_shm.shape, dtype=torch.bool, pin_memory=pin)
        act_pin = torch.empty(act_shm.shape, pin_memory=pin)

        def sync():
            if device.type == "cuda":
                torch.cuda.synchronize()

        @torch.no_grad()
        def learner_like(eval_rows: bool):
            obs = obs_shm.to(device, non_blocking=True)
            reset = reset_shm.to(device, non_blocking=True)
            action = algo.explore({"actor": obs[:n]}, reset[:n])
            if eval_rows:
                action = torch.cat([action, algo.act({"actor": obs[n:]})])
            else:
                action = torch.cat([action, action[: n_all - n]])
            env_action = torch.clamp(action * half + mid, low, high)
            act_shm.copy_(env_action)

        @torch.no_grad()
        def staged(eval_rows: bool):
            np.copyto(obs_pin.numpy(), obs_np)
            np.copyto(reset_pin.numpy(), reset_np)
            obs = obs_pin.to(device, non_blocking=True)
            reset = reset_pin.to(device, non_blocking=True)
            action = algo.explore({"actor": obs[:n]}, reset[:n])
            if eval_rows:
                action = torch.cat([action, algo.act({"actor": obs[n:]})])
            else:
                action = torch.cat([action, action[: n_all - n]])
            act_pin.copy_(torch.clamp(action * half + mid, low, high), non_blocking=True)
            sync()
            np.copyto(act_np, act_pin.numpy())

        for name, fn in [
            ("shm_slots+eval", lambda: learner_like(True)),
            ("shm_slots", lambda: learner_like(False)),
            ("pinned_staging+eval", lambda: staged(True)),
            ("pinned_staging", lambda: staged(False)),
        ]:
            r = timed(fn, args.ticks, warmup=20)
            rows.append({"variant": name, **r})
            print(f"{name:22s} median {r['median_us']:8.1f} us  p90 {r['p90_us']:8.1f} us", flush=True)
        # The in-run tick follows ~10-40 ms in which the device may idle (physics on the CPU): same tick after a
        # host sleep of that length, alone and right after an update-sized burst of device work.
        burst = torch.randn(4096, 4096, device=device)
        for gap_ms in args.idle_gaps_ms:
            r = timed(lambda: learner_like(True), args.ticks, warmup=5, gap_s=gap_ms / 1e3)
            rows.append({"variant": f"shm_slots+eval after {gap_ms:g} ms idle", "gap_ms": gap_ms, **r})
            print(
                f"after {gap_ms:5.1f} ms idle     median {r['median_us']:8.1f} us  p90 {r['p90_us']:8.1f} us",
                flush=True,
            )

        # Which side wakes up slowly, and leads for keeping it awake through the gap (measured, not yet in the
        # runtime): the host busy-spinning while the device idles (separates CPU from GPU idle), a tiny kernel
        # every `every_ms`, or one spin kernel (torch.cuda._sleep) covering most of the gap while the host sleeps.
        if device.type == "cuda":
            tiny = torch.zeros(1, device=device)
            cycles_per_ms = 1.98e6  # at the H200's 1980-MHz boost clock; a lower clock only shortens the cover

            def gap_with_tiny_kernels(gap_ms: float, every_ms: float):
                end = time.perf_counter() + gap_ms / 1e3
                while time.perf_counter() < end:
                    tiny.add_(1.0)
                    time.sleep(every_ms / 1e3)

            def gap_with_spin_kernel(gap_ms: float, cover: float):
                torch.cuda._sleep(int(cover * gap_ms * cycles_per_ms))
                time.sleep(gap_ms / 1e3)

            def gap_with_host_spin(gap_ms: float):  # the CPU stays busy, the device idles
                end = time.perf_counter() + gap_ms / 1e3
                while time.perf_counter() < end:
                    pass

            def gap_with_host_spin_and_tiny_kernels(gap_ms: float, every_ms: float):  # both stay awake
                end = time.perf_counter() + gap_ms / 1e3
                next_kernel = 0.0
                while (now := time.perf_counter()) < end:
                    if now >= next_kernel:
                        tiny.add_(1.0)
                        next_kernel = now + every_ms / 1e3

            for label, gap in (
                ("host spins, device idle", lambda: gap_with_host_spin(25.0)),
                ("host spins + tiny kernel every 1 ms", lambda: gap_with_host_spin_and_tiny_kernels(25.0, 1.0)),
                ("host spins + tiny kernel every 0.2 ms", lambda: gap_with_host_spin_and_tiny_kernels(25.0, 0.2)),
                ("tiny kernel every 0.5 ms", lambda: gap_with_tiny_kernels(25.0, 0.5)),
                ("tiny kernel every 2 ms", lambda: gap_with_tiny_kernels(25.0, 2.0)),
                ("spin kernel over 90% of it", lambda: gap_with_spin_kernel(25.0, 0.9)),
            ):
                r = timed_after(gap, lambda: learner_like(True), args.ticks // 2)
                rows.append({"variant": f"shm_slots+eval after 25 ms idle, {label}", "gap_ms": 25.0, **r})
                print(f"25 ms gap, {label:28s} median {r['median_us']:8.1f} us  p90 {r['p90_us']:8.1f} us", flush=True)

        if args.physics_load_cpus:
            # The isolated figures above run on a quiet host; in a run the collector steps physics on the other
            # cores at the same time. Same tick (and, on CUDA, the runtime's keep-awake 25-ms wait before it)
            # without load, under load, and without again.
            load_cpus = parse_cpus(args.physics_load_cpus)

            def awake_gap():
                if device.type == "cuda":
                    gap_with_host_spin_and_tiny_kernels(25.0, 0.2)

            for phase, cpus in (("no load", None), ("physics load", load_cpus), ("no load again", None)):
                with under_physics_load(args.env, args.num_envs, cpus):
                    r = timed(lambda: learner_like(True), args.ticks, warmup=5)
                    rows.append({"variant": f"shm_slots+eval, {phase}", "physics_load_cpus": cpus, **r})
                    print(f"{phase:14s} back to back  median {r['median_us']:8.1f} us  p90 {r['p90_us']:8.1f} us")
                    r = timed_after(awake_gap, lambda: learner_like(True), args.ticks // 2)
                    label = "after the keep-awake 25-ms wait" if device.type == "cuda" else "(CPU: no gap)"
                    rows.append({"variant": f"shm_slots+eval {label}, {phase}", "physics_load_cpus": cpus, **r})
                    print(f"{phase:14s} {label}  median {r['median_us']:8.1f} us  p90 {r['p90_us']:8.1f} us")

        if device.type == "cuda" and hasattr(algo, "explore_in_graph"):
            try:

                def awake():  # the runtime's keep-awake wait
                    gap_with_host_spin_and_tiny_kernels(25.0, 0.2)

                scaling = (low, mid, half)
                rows.extend(graph_tick_split(args, algo, spec, n, obs_shm, reset_shm, act_shm, scaling, tiny, awake))
            except Exception as exc:  # keep the rows measured so far
                rows.append({"variant": "tick_graph", "error": f"{type(exc).__name__}: {exc}"})
                print(f"tick_graph: {type(exc).__name__}: {exc}", flush=True)

        def queued_behind_work():
            for _ in range(8):  # ~ an update phase's worth of queued kernels still running
                burst.mul_(1.0000001)
            learner_like(True)

        r = timed(queued_behind_work, args.ticks, warmup=5)
        rows.append({"variant": "shm_slots+eval queued behind device work", **r})
        print(f"queued behind work   median {r['median_us']:8.1f} us  p90 {r['p90_us']:8.1f} us", flush=True)

        # per-stage breakdown, synchronising after each stage
        obs_d = obs_shm.to(device)
        reset_d = reset_shm.to(device)
        stages = {
            "h2d_obs_from_shm": lambda: (obs_shm.to(device, non_blocking=True), sync()),
            "h2d_obs_from_pinned": lambda: (obs_pin.to(device, non_blocking=True), sync()),
            "explore": lambda: (algo.explore({"actor": obs_d[:n]}, reset_d[:n]), sync()),
            "act_eval_rows": lambda: (algo.act({"actor": obs_d[n:]}), sync()),
            "scale_clamp": lambda: (torch.clamp(obs_d[:, : spec.action_dim] * half + mid, low, high), sync()),
            "d2h_actions_to_shm": lambda: (act_shm.copy_(obs_d[:, : spec.action_dim]), sync()),
            "empty_sync": lambda: sync(),
        }
        for name, fn in stages.items():
            r = timed(fn, args.ticks, warmup=20)
            rows.append({"variant": f"stage:{name}", **r})
            print(f"stage {name:20s} median {r['median_us']:8.1f} us", flush=True)
        print("graph_errors:", algo.graph_errors)
        complete = True
    finally:
        seg.unlink()
        seg.close()
        meta = {"args": vars(args), "device": str(device), "complete": complete}
        print("results:", write_results(f"inference_tick_{args.algo}", rows, meta, args.out), flush=True)
    return 0


def _stop_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    raise SystemExit(main())
