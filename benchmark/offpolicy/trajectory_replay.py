"""Same-trajectory reference: replay a recorded window of a real run on bare physics and on NpEnv.

A run started with `+runtime.record.start_tick=S +runtime.record.ticks=T` leaves
`<run dir>/record.npz`: the collector env's full state before tick S (physics
state, sensors, episode counters, RNG), every action it applied, every reset it
applied (rows and new states, automatic or requested by a snapshot evaluation)
and every observation it published. Physics is deterministic given states and
actions, so this module can

- replay the window on the bare `BatchEnvPool` (the pool step of every tick plus
  the resets' state writes, nothing else): the physics-only time of exactly the
  work the run did;
- replay it on `NpEnv` (restored from the snapshot, stepped with the same actions,
  the same requested resets): the env's whole time, and a check that the replay
  reproduces the run's observations bit for bit;

both in this process, pinned to the CPUs the run's collector had. The run's own
rate over the same window comes from the collector's clock in the record. Both
sides also say where their CPUs' time went (`in_run_cpu_share`, from the
collector's reads at the window's first and last tick; `replayed_bare_cpu_share`,
around the bare replay): this process, other processes, interrupts, the host
taking the virtual CPUs (steal), idle (`offpolicy.runtime.cpu_accounting`). A bare
replay whose CPUs lost more than `STEAL_LIMIT` of their time to steal understates the
bare pool, so it is run again, up to `BARE_REPLAY_ATTEMPTS` times in all, and the one
with the least steal counts (every attempt is listed in `replayed_bare_attempts`).

    python -m benchmark.offpolicy.trajectory_replay <run dir> [--cpus 2-15]   # prints and returns the figures
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.machine import parse_cpus  # noqa: E402
from offpolicy.runtime import cpu_accounting  # noqa: E402

STEAL_LIMIT = 0.02
"""the share of the replay's CPU time the hypervisor may take (steal) before the bare replay is run again"""
BARE_REPLAY_ATTEMPTS = 3
"""bare replays at most, the first included"""


def load_record(path: str | Path) -> dict[str, Any]:
    """The arrays of a record.npz, with the env snapshot gathered under `snapshot` (RNG state decoded)."""
    with np.load(path) as data:
        raw = {k: data[k] for k in data.files}
    snapshot = {k.split("/", 1)[1]: v for k, v in raw.items() if k.startswith("snapshot/")}
    snapshot["rng"] = ast.literal_eval(raw.pop("snapshot_rng").tobytes().decode())
    out = {k: v for k, v in raw.items() if not k.startswith("snapshot/")}
    out["snapshot"] = snapshot
    return out


def window_phases(rec: dict[str, Any]) -> dict[str, Any]:
    """The run's own ticks inside the window, phase by phase (`offpolicy.runtime.slots.PHASE_NAMES`, ms).

    The window's clock spans the cycles of its ticks 1..n-1 (each from the previous publish to this one), so
    the mean `cycle` here is the window's mean tick, while the metric rows around it report medians: a few
    slow ticks (a long wait for the action, a slow pool step) move the one and not the other. `slowest` lists
    the ten ticks with the longest cycles, each with the phase (of those a cycle is made of: not `cycle` or
    `critical`) that grew the most over its own median. Empty for a record made before the collector kept its phase rows.
    """
    if "phases_ns" not in rec or len(rec["phases_ns"]) < 2:
        return {}
    names = [str(n) for n in rec["phase_names"]]
    ms = rec["phases_ns"][1:].astype(np.float64) / 1e6
    median = np.median(ms, axis=0)
    c = names.index("cycle")
    cycle = ms[:, c]
    excess = ms - median
    composite = np.isin(names, ("cycle", "critical"))  # sums of the others: never the phase that grew
    order = np.argsort(cycle)[::-1][:10]
    slowest = [
        {
            "tick": int(rec["start_tick"]) + 1 + int(i),
            "cycle_ms": float(cycle[i]),
            "grew_most": names[int(np.argmax(np.where(composite, -np.inf, excess[i])))],
        }
        for i in order
    ]
    return {
        "in_run_phase_ms": {
            name: {
                "mean": float(ms[:, j].mean()),
                "median": float(median[j]),
                "p99": float(np.percentile(ms[:, j], 99)),
                "max": float(ms[:, j].max()),
            }
            for j, name in enumerate(names)
        },
        "in_run_cycle_mean_over_median": float(cycle.mean() / median[c]),
        "in_run_slowest_ticks": slowest,
    }


def window_cpu(rec: dict[str, Any]) -> dict[str, Any]:
    """Where the collector's CPUs' time went over the window (`cpu_accounting.cpu_shares`: this process, other
    processes, interrupts, steal, idle, as fractions of the CPUs' capacity). Empty for a record made before the
    collector read its CPUs, or where it could not read `/proc/stat`."""
    if "cpu_times" not in rec:
        return {}
    own, wall = rec["cpu_own_seconds"], rec["cpu_wall_seconds"]
    ids = tuple(int(c) for c in rec["cpu_ids"])
    first = cpu_accounting.CpuSample(ids, rec["cpu_times"][0], float(own[0]), float(wall[0]))
    last = cpu_accounting.CpuSample(ids, rec["cpu_times"][1], float(own[1]), float(wall[1]))
    shares = cpu_accounting.shares_between(first, last)
    return {} if shares is None else {"in_run_cpu_share": shares}


def _resets_by_tick(rec: dict[str, Any]) -> dict[int, list[tuple[np.ndarray, np.ndarray, dict | None]]]:
    """Tick (window-relative) -> [(rows, states, model fields)] in the order the collector applied them: the
    new episodes' model fields (empty where the record has none), None for a state write inside the rows'
    episodes (a push)."""
    out: dict[int, list[tuple[np.ndarray, np.ndarray, dict | None]]] = {}
    start = int(rec["start_tick"])
    kinds = rec.get("reset_kinds", np.zeros(len(rec["reset_ticks"]), dtype=np.int64)).tolist()
    fields = {k.split("/", 1)[1]: v for k, v in rec.items() if k.startswith("reset_fields/")}
    offset = field_offset = 0
    for tick, count, kind in zip(rec["reset_ticks"].tolist(), rec["reset_counts"].tolist(), kinds, strict=True):
        rows = rec["reset_rows"][offset : offset + count]
        states = rec["reset_states"][offset : offset + count]
        models = None
        if kind == 0:
            models = {k: v[field_offset : field_offset + count] for k, v in fields.items()}
            field_offset += count if fields else 0
        out.setdefault(tick - start, []).append((rows, states, models))
        offset += count
    return out


def replay_bare(env: Any, rec: dict[str, Any]) -> tuple[float, np.ndarray]:
    """Seconds the bare pools take for the window's physics, and the final state.

    The pool calls NpEnv makes for these steps and resets, nothing else: the step (with the
    task's sensor refresh: a forward pass on the final state, or dm_control's sensor timing
    through the env's sensor pool) and the new states' writes (through the reset pool's
    forward pass where the task reads sensors). An env with its own `bare_step` (the joystick
    tasks: substeps carrying the solver's warm start, one model per env) is replayed through it.
    """
    if hasattr(env, "bare_step"):
        return _replay_bare_steps(env, rec)
    pool, task = env.pool, env.task
    reset_pool = env.reset_pool if env.reset_pool is not None else pool
    split_sensors = env.sensor_pool is not None
    state = np.array(rec["snapshot"]["state"], dtype=np.float64, copy=True)
    actions = rec["actions"].astype(np.float64)
    resets = _resets_by_tick(rec)
    t0 = time.perf_counter()
    for t in range(actions.shape[0]):
        state, _ = pool.step(
            state,
            nstep=env.frame_skip,
            control=actions[t],
            return_sensor=True,
            post_step_forward_sensor=task.fresh_sensors and not split_sensors,
        )
        if split_sensors:
            env.sensor_pool.forward(state)
        for rows, states, _ in resets.get(t, ()):
            if task.fresh_sensors:  # as NpEnv does: sensors at the new state come from one forward pass
                states, _ = reset_pool.reset(rows.astype(np.int32), states)
            state[rows] = states
    return time.perf_counter() - t0, state


def _replay_bare_steps(env: Any, rec: dict[str, Any]) -> tuple[float, np.ndarray]:
    """`replay_bare` through the env's `bare_step` (from the snapshot's states and warm starts) and `bare_reset`
    (the new episodes' models and states); pushes are writes of their recorded states, warm starts kept."""
    env.restore(rec["snapshot"])  # the models in effect at the window's start (not timed)
    state = np.array(rec["snapshot"]["state"], dtype=np.float64, copy=True)
    warm = np.array(rec["snapshot"]["warmstart"], dtype=np.float64, copy=True)
    actions = rec["actions"].astype(np.float64)
    resets = _resets_by_tick(rec)
    t0 = time.perf_counter()
    for t in range(actions.shape[0]):
        state, warm = env.bare_step(state, warm, actions[t])
        for rows, states, models in resets.get(t, ()):
            if models is not None:  # new episodes: their models, states and sensors; a cold solver
                states, _ = env.bare_reset(rows, states, models)
                warm[rows] = 0.0
            state[rows] = states
    return time.perf_counter() - t0, state


def replay_bare_least_steal(
    env: Any,
    rec: dict[str, Any],
    cpus: list[int],
    attempts: int = BARE_REPLAY_ATTEMPTS,
    steal_limit: float = STEAL_LIMIT,
) -> tuple[float, np.ndarray, dict[str, float] | None, list[dict[str, float | None]]]:
    """`replay_bare`, run again while its CPUs lost more than `steal_limit` of their time to steal, `attempts`
    times at most: the seconds, final state and CPU shares of the attempt with the least steal, and every
    attempt's seconds and steal share. One attempt where the CPUs' counters cannot be read."""
    tried: list[dict[str, float | None]] = []
    best: tuple[float, np.ndarray, dict[str, float] | None] | None = None
    for _ in range(max(attempts, 1)):
        before = cpu_accounting.sample(cpus)
        seconds, state = replay_bare(env, rec)
        shares = cpu_accounting.shares_between(before, cpu_accounting.sample(cpus))
        steal = None if shares is None else shares["steal"]
        tried.append({"seconds": seconds, "steal": steal})
        if best is None or (steal is not None and best[2] is not None and steal < best[2]["steal"]):
            best = (seconds, state, shares)
        if steal is None or steal <= steal_limit:
            break
    assert best is not None
    return (*best, tried)


def replay_np_env(env: Any, rec: dict[str, Any]) -> tuple[float, float, np.ndarray]:
    """Seconds NpEnv takes for the window, the largest observation difference to the run's, and the final state."""
    env.restore(rec["snapshot"])
    actions = rec["actions"]
    forced = {int(t) - int(rec["start_tick"]): rows for t, rows in zip(rec["forced_ticks"], rec["forced_rows"])}
    worst = 0.0
    obs_seen = []
    t0 = time.perf_counter()
    for t in range(actions.shape[0]):
        state = env.step(actions[t])
        obs = state.obs["actor"]
        if t in forced:
            first = env.reset_rows(forced[t])["actor"]
            obs = obs.copy()
            obs[forced[t]] = first
        obs_seen.append(obs.copy())
    seconds = time.perf_counter() - t0
    for t, obs in enumerate(obs_seen[: rec["obs"].shape[0]]):
        worst = max(worst, float(np.abs(obs - rec["obs"][t]).max()))
    return seconds, worst, env._state.copy()


def _spin(cpu: int, stop) -> None:
    os.sched_setaffinity(0, [cpu])
    while not stop.is_set():
        for _ in range(10_000):
            pass


@contextlib.contextmanager
def cpus_kept_busy(cpus: list[int] | None):
    """One spinning process per CPU in `cpus` for the body (as the learner's keep-awake wait spins in a run)."""
    if not cpus:
        yield []
        return
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    procs = [ctx.Process(target=_spin, args=(cpu, stop), daemon=True) for cpu in cpus]
    for proc in procs:
        proc.start()
    try:
        time.sleep(0.5)  # the spinners are running
        yield procs
    finally:
        stop.set()
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()


def replay_run(
    run_dir: str | Path, cpus: list[int] | None = None, busy_cpus: list[int] | None = None
) -> dict[str, Any]:
    """Both replays of `<run_dir>/record.npz` on `cpus` (default: the run's collector CPUs); figures as a dict.

    With `busy_cpus` the bare replay runs a second time while those CPUs spin (the learner's CPUs: in a run its
    keep-awake wait spins while the collector steps physics), as `replayed_bare_busy_cpus_env_steps_per_s`: a
    physics slowdown from the whole host being busy (shared power and frequency budget) shows as the gap between
    the two."""
    import envs

    run_dir = Path(run_dir)
    rec = load_record(run_dir / "record.npz")
    summary = json.loads((run_dir / "summary.json").read_text())
    kwargs = json.loads((run_dir / "collector_env.json").read_text())
    cpus = list(cpus or summary["collector_cpus"])
    rows = rec["actions"].shape[1]
    ticks = rec["actions"].shape[0]
    train_rows = int(summary["num_envs"])
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        env = envs.make(**{**kwargs, "num_envs": rows}, cpu_ids=cpus, nthread=len(cpus))
        try:
            replay_np_env(env, rec)  # warm-up: page in the pool's data and numpy's paths
            bare_s, bare_state, replay_shares, bare_attempts = replay_bare_least_steal(env, rec, cpus)
            np_env_s, worst, np_state = replay_np_env(env, rec)
            if busy_cpus:
                with cpus_kept_busy(busy_cpus):
                    busy_s, _ = replay_bare(env, rec)
        finally:
            env.close()
    finally:
        os.sched_setaffinity(0, saved)
    in_run_ticks = ticks - 1  # the record's clock spans from the first tick's publish to the last one's
    return {
        "window_ticks": ticks,
        "window_start_tick": int(rec["start_tick"]),
        "rows_stepped": rows,
        "env_steps_per_s": train_rows * in_run_ticks / float(rec["in_run_seconds"]),
        "replayed_bare_env_steps_per_s": train_rows * ticks / bare_s,
        "replayed_np_env_env_steps_per_s": train_rows * ticks / np_env_s,
        "replay_obs_max_abs_diff": worst,
        "replay_states_agree": bool(np.array_equal(bare_state, np_state)),
        "replay_cpus": cpus,
        **window_phases(rec),
        **window_cpu(rec),
        **({"replayed_bare_cpu_share": replay_shares} if replay_shares is not None else {}),
        "replayed_bare_attempts": bare_attempts,
        **(
            {"replayed_bare_busy_cpus_env_steps_per_s": train_rows * ticks / busy_s, "busy_cpus": list(busy_cpus)}
            if busy_cpus
            else {}
        ),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--cpus", default=None, help="CPU list for the replay (default: the run's collector CPUs)")
    p.add_argument("--busy-cpus", default=None, help="also replay bare physics while these CPUs spin (e.g. 0-1)")
    args = p.parse_args(argv)
    busy = parse_cpus(args.busy_cpus) if args.busy_cpus else None
    result = replay_run(args.run_dir, parse_cpus(args.cpus) if args.cpus else None, busy)
    result["ratio_to_replayed_bare"] = result["env_steps_per_s"] / result["replayed_bare_env_steps_per_s"]
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
