"""Same-trajectory reference for a joystick task: a window recorded by a real CLI run of go1_joystick_flat
(randomised models, noise, automatic and requested resets inside it) replays bit for bit on the env restored
from its snapshot, and its bare physics (`bare_step`: one substep per pool call carrying the solver's warm
start, per-env models; `bare_reset`) ends in the same state."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import envs

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.offpolicy.trajectory_replay import load_record, replay_bare, replay_np_env, replay_run  # noqa: E402

START, TICKS = 20, 30


def test_a_recorded_go1_window_replays_exactly_on_the_env_and_on_bare_physics(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "offpolicy.train",
        "algo=fastsac",
        "env=go1_joystick_flat",
        "env.num_envs=6",
        "+env.options.max_episode_steps=15",  # automatic resets (new models) inside the window
        "eval.num_envs=2",
        "eval.episodes=2",
        "eval.interval_s=null",
        "eval.interval_env_steps=60",  # snapshot evaluations: requested resets inside the window
        "eval.final=false",
        "train.total_env_steps=480",
        "train.learning_starts=0",
        "logger=none",
        "algo.updates_per_step=1",
        "algo.batch_size=32",
        "algo.critic_hidden_dim=32",
        "algo.actor_hidden_dim=32",
        "checkpoint.interval_env_steps=0",
        f"hydra.run.dir={tmp_path}",
        f"+runtime.record.start_tick={START}",
        f"+runtime.record.ticks={TICKS}",
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rec = load_record(tmp_path / "record.npz")
    assert rec["actions"].shape == (TICKS, 8, 12) and rec["obs"].shape[:2] == (TICKS, 8)
    assert len(rec["forced_ticks"]) > 0 and (rec["reset_kinds"] == 0).all()
    # every new episode's randomised model fields are in the record, one row per reset row
    assert rec["reset_fields/patched/body_mass"].shape[0] == rec["reset_counts"].sum() > 8
    assert rec["reset_fields/written/qpos0"].shape[0] == rec["reset_counts"].sum()
    assert rec["snapshot"]["warmstart"].any() and "model/patched/geom_friction" in rec["snapshot"]
    result = replay_run(tmp_path)
    assert result["replay_obs_max_abs_diff"] == 0.0  # the env from the snapshot: the run's observations exactly
    assert result["replay_states_agree"]  # and bare physics ends in the env's state
    assert result["replayed_bare_env_steps_per_s"] > 0 and np.isfinite(result["env_steps_per_s"])

    # every row starts a new episode inside this window, which erases its past from the final state: the
    # window's ticks before the first reset show that bare physics starts from the snapshot's models and warm
    # starts
    head = int(rec["reset_ticks"].min()) - START
    assert head >= 2
    head_rec = {**rec, "actions": rec["actions"][:head], "obs": rec["obs"][:head]}
    kwargs = json.loads((tmp_path / "collector_env.json").read_text())
    env = envs.make(**{**kwargs, "num_envs": 8}, nthread=1)
    try:
        _, bare_state = replay_bare(env, head_rec)
        _, worst, env_state = replay_np_env(env, head_rec)
    finally:
        env.close()
    assert worst == 0.0 and np.array_equal(bare_state, env_state)
