"""Same-trajectory reference: a recorded window of a real run replays bit for bit on NpEnv and the bare pool."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from offpolicy.runtime.runner import Runner
from offpolicy.runtime.timeline import load_intervals

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.offpolicy.check_timeline import collector_serial  # noqa: E402
from benchmark.offpolicy.trajectory_replay import load_record, replay_run  # noqa: E402

SMALL_FASTSAC = [
    "train.learning_starts=0",
    "logger=none",
    "algo.batch_size=32",
    "algo.actor_hidden_dim=16",
    "algo.critic_hidden_dim=16",
    "checkpoint.interval_env_steps=0",
]
"""a tiny FastSAC that learns from the first tick, with no logger and no periodic checkpoints"""


def small_run(run_dir: Path, *overrides: str) -> None:
    """`SMALL_FASTSAC` plus `overrides`, run in this process (the collector is still its own process)."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*SMALL_FASTSAC, *overrides])
    Runner(cfg, run_dir).run()


def test_a_recorded_window_replays_exactly_with_its_resets_and_the_collector_is_on_the_timeline(tmp_path):
    small_run(
        tmp_path,
        "env=hopper",  # early terminations: automatic resets inside the window
        "env.num_envs=12",
        "+env.options.max_episode_steps=15",  # short episodes: several snapshot evaluations in the window
        "eval.num_envs=3",
        "eval.episodes=3",
        "eval.interval_s=null",
        "eval.interval_env_steps=60",  # snapshot evaluations: requested resets inside the window
        "eval.final=false",
        "train.total_env_steps=1200",
        "runtime.trace=true",
        "+runtime.record.start_tick=30",
        "+runtime.record.ticks=50",
    )
    rec = load_record(tmp_path / "record.npz")
    assert rec["actions"].shape == (50, 15, 3) and rec["obs"].shape[:2] == (50, 15)
    assert rec["reset_counts"].sum() > 0 and len(rec["forced_ticks"]) > 0, "the window holds both kinds of reset"
    result = replay_run(tmp_path, busy_cpus=[0])
    assert result["replayed_bare_busy_cpus_env_steps_per_s"] > 0 and result["busy_cpus"] == [0]
    assert result["replay_obs_max_abs_diff"] == 0.0  # NpEnv from the snapshot: the run's observations exactly
    assert result["replay_states_agree"]  # and the bare pool ends in the same physics state
    assert result["env_steps_per_s"] > 0 and result["replayed_bare_env_steps_per_s"] > 0
    tried = result["replayed_bare_attempts"]  # one more only while the hypervisor took over 2% of the CPUs
    assert 1 <= len(tried) <= 3 and all(t["steal"] > 0.02 for t in tried[:-1])

    # where the collector's CPUs' time went over the window, read by the collector at its first and last tick
    assert [int(c) for c in rec["cpu_ids"]] == json.loads((tmp_path / "summary.json").read_text())["collector_cpus"]
    assert rec["cpu_times"].shape == (2, len(rec["cpu_ids"]), 8) and (rec["cpu_times"][1] >= rec["cpu_times"][0]).all()
    assert rec["cpu_wall_seconds"][1] - rec["cpu_wall_seconds"][0] >= float(rec["in_run_seconds"])
    # the shares cover the stretch up to the counters' 10-ms ticks: ~1 s of window, a bare replay of ~0.1 s
    for key, tolerance in (("in_run_cpu_share", 0.15), ("replayed_bare_cpu_share", 0.3)):
        shares = result[key]
        assert sum(shares.values()) == pytest.approx(1.0, abs=tolerance), (key, shares)
        assert shares["own"] > 0.0, (key, shares)  # the collector's physics and numpy; the replay's physics

    # The collector's phase row of every window tick, aligned to its tick: a tick's cycle (publish to publish)
    # is the previous tick's ingress plus this tick's wait for the action and its critical path, to the ns.
    names = [str(n) for n in rec["phase_names"]]
    ph = {n: rec["phases_ns"][:, j] for j, n in enumerate(names)}
    assert rec["phases_ns"].shape == (50, len(names)) and (ph["physics"] > 0).all()
    ingress = ph["ingress_wait"] + ph["ingress_write"]
    np.testing.assert_array_equal(ph["cycle"][1:], ingress[:-1] + ph["wait"][1:] + ph["critical"][1:])
    # the window's clock spans the cycles of ticks 1..49 (each clock read a few us from its publish)
    assert abs(ph["cycle"][1:].sum() / 1e9 - float(rec["in_run_seconds"])) < 2e-3
    cycle_ms = ph["cycle"][1:] / 1e6
    phases = result["in_run_phase_ms"]
    assert phases["cycle"]["mean"] == pytest.approx(cycle_ms.mean())
    assert phases["cycle"]["median"] == pytest.approx(np.median(cycle_ms))
    assert phases["cycle"]["max"] == pytest.approx(cycle_ms.max())
    assert phases["wait"]["mean"] == pytest.approx(ph["wait"][1:].mean() / 1e6)
    slowest = result["in_run_slowest_ticks"]
    assert slowest[0]["cycle_ms"] == pytest.approx(cycle_ms.max())
    assert slowest[0]["tick"] == 30 + 1 + int(np.argmax(cycle_ms))
    i = int(np.argmax(cycle_ms)) + 1
    leaf = [n for n in names if n not in ("cycle", "critical")]
    grew = {n: ph[n][i] / 1e6 - phases[n]["median"] for n in leaf}
    assert slowest[0]["grew_most"] == max(grew, key=grew.get)
    assert [s["cycle_ms"] for s in slowest] == sorted((s["cycle_ms"] for s in slowest), reverse=True)

    serial = collector_serial(load_intervals(tmp_path / "timeline.json", "collector"))
    assert serial is not None and serial["ticks"] >= 90
    assert 0.0 < serial["outside_physics_fraction"] < 1.0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    phases = [r for r in rows if "perf/collector_physics_ms" in r]
    assert phases and all(r["perf/collector_cycle_ms"] >= r["perf/collector_critical_ms"] > 0 for r in phases)
    assert np.isfinite([r["perf/collector_outside_pool_fraction"] for r in phases]).all()


@pytest.mark.serial
def test_a_window_of_staggered_first_episodes_replays_exactly(tmp_path):
    """`env.stagger_starts` on a task that never terminates: the window starts at tick 0, so the shortened first
    episodes end inside it, at ticks only the snapshot's time limits tell NpEnv's replay."""
    small_run(
        tmp_path,
        "env=dmc_cheetah_run",
        "env.num_envs=8",
        "env.stagger_starts=true",
        "+env.options.max_episode_steps=20",
        "eval.num_envs=0",
        "eval.final=false",
        "train.total_env_steps=320",
        "+runtime.record.start_tick=0",
        "+runtime.record.ticks=30",
    )
    rec = load_record(tmp_path / "record.npz")
    first = rec["reset_ticks"][0]
    assert rec["reset_counts"].sum() > 8 and first < 19, "staggered: resets before the limit's tick, then more"
    result = replay_run(tmp_path, busy_cpus=[0])
    assert result["replay_obs_max_abs_diff"] == 0.0 and result["replay_states_agree"]


def test_kept_busy_cpus_really_spin():
    """The spinners behind `replay_run(busy_cpus=...)` never sleep or block: runnable at (nearly) every look for
    1 s, (nearly) no voluntary context switch, CPU time used. How much CPU they get depends on what else runs on
    their CPU, so that share is not asserted: the scheduler's view of them holds on a loaded machine too."""
    from benchmark.offpolicy.trajectory_replay import cpus_kept_busy

    with cpus_kept_busy([0]) as procs:
        (proc,) = procs
        start = _sched_counts(proc.pid)
        states = []
        for _ in range(100):
            states.append(_state(proc.pid))
            time.sleep(0.01)
        end = _sched_counts(proc.pid)
        assert os.sched_getaffinity(proc.pid) == {0}
    # running or waiting for its CPU; a busy machine may page a process out and in (a short wait on the disk)
    assert states.count("R") >= 0.9 * len(states), states
    # one that sleeps between rounds gives its CPU up hundreds of times a second
    assert end["voluntary_ctxt_switches"] - start["voluntary_ctxt_switches"] < 20, (start, end)
    assert end["cpu_s"] > start["cpu_s"]
    assert not proc.is_alive()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _sched_counts(pid: int) -> dict[str, float]:
    """The process's CPU seconds (user + system) and its context switches so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out = {"cpu_s": (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.endswith("ctxt_switches"):
            out[key] = int(value)
    return out


@pytest.mark.parametrize(
    ("steals", "chosen", "attempts"),
    [
        ([0.20, 0.05, 0.10], 1, 3),  # all over the limit: the least steal counts, not the fastest, first or last
        ([0.20, 0.01, 0.30], 1, 2),  # stops at the first under the limit
        ([0.02], 0, 1),  # at the limit: no second attempt
        ([None], 0, 1),  # counters unreadable: one attempt
    ],
)
def test_a_bare_replay_under_steal_is_run_again_and_the_least_stolen_counts(monkeypatch, steals, chosen, attempts):
    from benchmark.offpolicy import trajectory_replay as tr

    seconds = iter([1.0, 2.0, 1.5])
    states = iter([np.full(2, k) for k in range(3)])
    shares = iter([None if s is None else {"own": 0.9 - s, "steal": s} for s in steals])
    monkeypatch.setattr(tr, "replay_bare", lambda env, rec: (next(seconds), next(states)))
    monkeypatch.setattr(tr.cpu_accounting, "shares_between", lambda first, last: next(shares))
    bare_s, state, share, tried = tr.replay_bare_least_steal(None, {}, [0], attempts=3, steal_limit=0.02)
    assert [t["steal"] for t in tried] == steals[:attempts]
    assert [t["seconds"] for t in tried] == [1.0, 2.0, 1.5][:attempts]
    assert bare_s == [1.0, 2.0, 1.5][chosen] and state[0] == chosen
    assert share == (None if steals[chosen] is None else {"own": 0.9 - steals[chosen], "steal": steals[chosen]})
