"""benchmark/offpolicy/learning_run.py on the CPU: a tiny hopper run kept with its re-score and its replayed window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark.machine import OUTPUTS
from benchmark.offpolicy import learning_run as learning_run_module
from benchmark.offpolicy.learning_run import (
    KEPT,
    compile_cache_env,
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
    assert suite_defaults("humanoid") == ("8min", OUTPUTS / "learning")
    assert suite_defaults("dmc_dog_run") == ("15min", OUTPUTS / "learning_dmc")


@pytest.mark.parametrize(
    "task,flags,budget,out",
    [
        ("dmc_dog_run", [], "15min", str(OUTPUTS / "learning_dmc")),
        ("halfcheetah", [], "8min", str(OUTPUTS / "learning")),
        ("dmc_dog_run", ["--budget", "8min", "--out", "elsewhere"], "8min", "elsewhere"),  # explicit flags win
    ],
)
def test_main_gives_the_training_run_its_suites_budget_and_folder(monkeypatch, tmp_path, task, flags, budget, out):
    seen = {}

    def fake_learning_run(args):  # stands in for training, re-score and replay
        seen["args"] = args
        return {"train_exit": 0, "eval_exit": 0}

    monkeypatch.setattr(learning_run_module, "learning_run", fake_learning_run)
    assert main(["--algo", "flashsac", "--task", task, "--seed", "0", *flags]) == 0
    args = seen["args"]
    assert (args.budget, args.out) == (budget, out)
    assert f"budget={budget}" in train_command(args, tmp_path)
