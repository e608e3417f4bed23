"""benchmark/offpolicy/learning_run.py on the CPU: a tiny hopper run kept with its re-score and its replayed window."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from benchmark.machine import OUTPUTS
from benchmark.offpolicy import learning_run as learning_run_module
from benchmark.offpolicy.learning_run import (
    KEPT,
    compile_cache_env,
    eval_command,
    main,
    reference_for,
    suite_defaults,
    train_command,
)

REPO = Path(__file__).resolve().parents[2]


# re-scored in Gymnasium's env / dm_control's; the window from a tick / from a time into the loop
@pytest.mark.parametrize(
    "task,window", [("hopper", ["--record-start-tick", "40"]), ("dmc_cheetah_run", ["--record-start-s", "0.5"])]
)
def test_learning_run_keeps_a_complete_run_folder(tmp_path, task, window):
    status = main(
        [
            "--algo", "fastsac", "--task", task, "--seed", "3", "--budget", "none",
            "--learner-cpus", "0", "--collector-cpus", "1", "--episodes", "2", *window, "--record-ticks", "10",
            "--out", str(tmp_path / "kept"), "--work", str(tmp_path / "work"),
            "--", "train.total_env_steps=3000", "env.num_envs=32", "train.learning_starts=1000",
            "eval.num_envs=2", "eval.episodes=2", "eval.interval_s=null", "algo.batch_size=64",
            "algo.updates_per_step=2", "algo.critic_hidden_dim=64", "algo.actor_hidden_dim=64",
            # a random sleep of up to 50 ms before each collector step: the ~94 ticks last seconds, so the window
            # starting 0.5 s into the loop has its 10 ticks before the run ends, however fast the machine
            "+runtime.fault.collector_step_delay_s=0.05",
        ]
    )  # fmt: skip
    assert status == 0
    kept = tmp_path / "kept" / f"{task}_fastsac_seed3"
    assert sorted(p.name for p in kept.iterdir()) == sorted(KEPT)
    summary = json.loads((kept / "summary.json").read_text())
    assert summary["snapshot_eval"]["episodes"] == 2 and summary["completed"] is True
    final = json.loads((kept / "eval_final.json").read_text())
    # the offline re-score loads the run's final checkpoint, in our env and in the reference implementation
    assert final["checkpoint_env_steps"] == summary["env_steps"]
    assert final["checkpoint"] == "<run dir>/checkpoints/latest.pt"  # no path of the machine that made it
    assert final["episodes"] == 2 and final["reference"][reference_for(task)]["episodes"] == 2
    replay = json.loads((kept / "replay.json").read_text())
    # the replayed window reproduces the run's observations exactly, from tick 40 on (or from 0.5 s in)
    rows = [r for r in (kept / "metrics.csv").read_text().splitlines()[1:]]
    assert replay["window_ticks"] == 10
    if "--record-start-tick" in window:
        assert replay["window_start_tick"] == 40
    else:  # the first tick 0.5 s into the loop: neither the first tick nor past the run's end
        assert 0 < replay["window_start_tick"] < summary["ticks"] - 10 and rows
    assert replay["replay_obs_max_abs_diff"] == 0.0 and replay["replay_states_agree"]
    assert replay["ratio_to_replayed_bare"] > 0
    # and once more with the learner's CPU spinning, as the learner's side of the host is in a run
    assert replay["busy_cpus"] == [0] and replay["replayed_bare_busy_cpus_env_steps_per_s"] > 0
    # the run compiled from empty caches of its own, and the kept record says so with its commands
    record = json.loads((kept / "learning_run.json").read_text())
    assert record["compile_cache"] == "cold" and record["train_exit"] == 0 and record["eval_exit"] == 0
    assert f"env={task}" in record["train_command"] and record["snapshot_eval"]["episodes"] == 2
    assert (tmp_path / "work" / f"{task}_fastsac_seed3" / "compile_cache" / "torchinductor").is_dir()
    # the kept policy file re-scores the row from its own folder: the same episodes as the full checkpoint
    from hydra import compose, initialize_config_dir

    from offpolicy.eval import evaluate

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("eval", [f"checkpoint={kept / 'policy.pt'}", "episodes=2", "seed=3", "device=cpu"])
    rescore = evaluate(cfg, tmp_path / "rescore")
    assert rescore["policy_only"] is True and final["policy_only"] is False
    assert rescore["returns"] == final["returns"] and rescore["lengths"] == final["lengths"]


def test_a_cold_compile_cache_points_torch_at_empty_dirs_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/shared")
    env = compile_cache_env("cold", tmp_path)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "compile_cache" / "torchinductor")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "compile_cache" / "triton")
    assert compile_cache_env("shared", tmp_path)["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/shared"
    (tmp_path / "compile_cache" / "triton" / "kernel.bin").write_bytes(b"\0")  # a cache left from before
    with pytest.raises(SystemExit, match="not empty"):
        compile_cache_env("cold", tmp_path)


def test_each_suite_runs_its_own_budget_into_its_own_table():
    assert suite_defaults("humanoid") == ("8min", OUTPUTS / "learning", 300.0)
    assert suite_defaults("dmc_dog_run") == ("15min", OUTPUTS / "learning_dmc", 300.0)
    # the legged-robot tasks of envs/locomotion: 5 minutes, so the replayed window starts inside the run
    for task in ("go1_joystick_flat", "go2_joystick_flat"):
        assert suite_defaults(task) == ("5min", OUTPUTS / "learning_locomotion", 120.0)
        assert reference_for(task) is None
    assert (reference_for("hopper"), reference_for("dmc_cheetah_run")) == ("gymnasium", "dm_control")


def test_an_unknown_task_is_refused_in_one_line_with_the_valid_names():
    with pytest.raises(SystemExit, match=r"--task 'go3_joystick': unknown task; valid: .*go1_joystick_flat"):
        main(["--algo", "flashsac", "--task", "go3_joystick", "--seed", "0"])


@pytest.mark.parametrize(
    "task,flags,budget,out,start_s",
    [
        ("dmc_dog_run", [], "15min", str(OUTPUTS / "learning_dmc"), 300.0),
        ("halfcheetah", [], "8min", str(OUTPUTS / "learning"), 300.0),
        ("go1_joystick_flat", [], "5min", str(OUTPUTS / "learning_locomotion"), 120.0),
        ("go2_joystick_flat", [], "5min", str(OUTPUTS / "learning_locomotion"), 120.0),
        # explicit flags win
        ("dmc_dog_run", ["--budget", "8min", "--out", "elsewhere"], "8min", "elsewhere", 300.0),
        ("go1_joystick_flat", ["--record-start-s", "200"], "5min", str(OUTPUTS / "learning_locomotion"), 200.0),
    ],
)
def test_main_gives_the_training_run_its_suites_budget_and_folder(
    monkeypatch, tmp_path, task, flags, budget, out, start_s
):
    seen = {}

    def fake_learning_run(args):  # stands in for training, re-score and replay
        seen["args"] = args
        return {"train_exit": 0, "eval_exit": 0}

    monkeypatch.setattr(learning_run_module, "learning_run", fake_learning_run)
    monkeypatch.setattr(learning_run_module, "records_window", lambda task: True)
    assert main(["--algo", "flashsac", "--task", task, "--seed", "0", *flags]) == 0
    args = seen["args"]
    assert (args.budget, args.out, args.record_start_s) == (budget, out, start_s)
    cmd = train_command(args, tmp_path)
    assert f"budget={budget}" in cmd and f"+runtime.record.start_s={start_s}" in cmd


def test_a_locomotion_run_trains_for_5_minutes_and_re_scores_without_a_reference(monkeypatch, tmp_path):
    seen = {}

    def fake_learning_run(args):  # stands in for training, re-score and replay
        seen["args"] = args
        return {"train_exit": 0, "eval_exit": 0}

    monkeypatch.setattr(learning_run_module, "learning_run", fake_learning_run)
    monkeypatch.setattr(learning_run_module, "records_window", lambda task: True)
    main(["--algo", "flashsac", "--task", "go1_joystick_flat", "--seed", "2", "--", "algo.gamma=0.95"])
    args = seen["args"]
    cmd = train_command(args, tmp_path / "run")
    assert cmd[1:] == [
        "-m", "offpolicy.train", "algo=flashsac", "env=go1_joystick_flat", "seed=2", "budget=5min",
        "affinity=manual", "affinity.learner_cpus=[0,1]",
        f"affinity.collector_cpus=[{','.join(map(str, range(2, 16)))}]", "logger=none",
        f"hydra.run.dir={tmp_path / 'run'}", "+runtime.record.start_s=120.0", "+runtime.record.ticks=200",
        "algo.gamma=0.95",
    ]  # fmt: skip
    # offpolicy.eval refuses a reference for a task that reproduces none (exit status 2): none is passed
    ev = eval_command(args, tmp_path / "latest.pt", tmp_path / "eval")
    assert ev[1:] == ["-m", "offpolicy.eval", f"checkpoint={tmp_path / 'latest.pt'}", "episodes=16", "seed=2",
                      f"hydra.run.dir={tmp_path / 'eval'}"]  # fmt: skip
    hopper = eval_command(argparse.Namespace(task="hopper", episodes=16, seed=2), tmp_path / "c.pt", tmp_path)
    assert "reference=gymnasium" in hopper
    # an env that cannot snapshot its state records no window (the collector would fail on reaching it)
    args.record = False
    assert not [a for a in train_command(args, tmp_path / "run") if "runtime.record" in a]


def test_a_window_is_recorded_where_the_env_can_snapshot_its_state():
    assert learning_run_module.records_window("hopper") is True
    assert learning_run_module.records_window("go1_joystick_flat") is True
    assert learning_run_module.records_window("go2_joystick_flat") is True


def test_a_locomotion_run_keeps_the_final_snapshots_tracking_statistics(tmp_path):
    """A tiny Go1 FlashSAC run through the real CLIs: eval_final.json carries what the locomotion table reads."""
    status = main(
        [
            "--algo", "flashsac", "--task", "go1_joystick_flat", "--seed", "1", "--budget", "none",
            "--learner-cpus", "0", "--collector-cpus", "1", "--episodes", "2",
            "--record-start-tick", "40", "--record-ticks", "10",
            "--out", str(tmp_path / "kept"), "--work", str(tmp_path / "work"),
            "--", "train.total_env_steps=3000", "env.num_envs=32", "train.learning_starts=1000",
            "eval.num_envs=2", "eval.episodes=2", "eval.interval_s=null", "algo.batch_size=64",
            "algo.updates_per_step=1", "algo.critic_hidden_dim=16", "algo.actor_hidden_dim=8",
            "algo.actor_num_blocks=1", "algo.critic_num_blocks=1", "+env.options.max_episode_steps=100",
        ]
    )  # fmt: skip
    assert status == 0
    kept = tmp_path / "kept" / "go1_joystick_flat_flashsac_seed1"
    record = json.loads((kept / "learning_run.json").read_text())
    assert "reference=" not in " ".join(record["eval_command"])
    final = json.loads((kept / "eval_final.json").read_text())
    assert final["episodes"] == 2 and "reference" not in final
    assert 0.0 <= final["fall_fraction"] <= 1.0 and final["fall_fraction"] * 2 == round(final["fall_fraction"] * 2)
    for key in ("lin_vel_error", "yaw_rate_error"):  # NaN only where every episode fell within its first second
        assert final[key] > 0 or (math.isnan(final[key]) and final["fall_fraction"] == 1.0), key
    keys = ("lin_vel_error", "yaw_rate_error", "fall_fraction", "episodes")
    assert json.dumps([record["eval_final"][k] for k in keys]) == json.dumps([final[k] for k in keys])
    summary = json.loads((kept / "summary.json").read_text())
    assert final["checkpoint_env_steps"] == summary["env_steps"]
    assert {p.name for p in kept.iterdir()} == set(KEPT)
    replay = json.loads((kept / "replay.json").read_text())  # the window replayed on bare physics, exactly
    assert replay["replay_states_agree"] is True and replay["replay_obs_max_abs_diff"] == 0.0
