"""Config validation: every key of the train and eval configs checked before anything starts, one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from test_eval import task_checkpoint

import envs
from offpolicy.config import (
    ConfigError,
    EvaluateConfig,
    RunConfig,
    coerce,
    describe,
    hydra_error_line,
    hydra_errors_in_one_line,
    validate_eval_config,
    validate_train_config,
)

REPO = Path(__file__).resolve().parents[2]
ENVS = ["ant", "halfcheetah", "hopper", "humanoid", "walker2d"]


def train_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def eval_cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="eval", overrides=list(overrides))


def refusal(cfg, validate=validate_train_config) -> str:
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("algo", ["fastsac", "flashsac"])
@pytest.mark.parametrize("env", ENVS)
def test_every_shipped_config_is_valid(algo, env):
    run = validate_train_config(train_cfg(f"algo={algo}", f"env={env}"))
    assert isinstance(run, RunConfig) and run.env.name == env and run.train.total_env_steps == 1_000_000
    timed = validate_train_config(train_cfg(f"algo={algo}", f"env={env}", "budget=8min", "logger=none"))
    assert timed.train.total_env_steps is None and timed.train.max_seconds == 480


def test_a_task_file_sets_the_main_files_keys_and_a_budget_preset_still_wins():
    cfg = train_cfg("algo=flashsac", "env=go2_joystick_flat")
    assert (cfg.train.total_env_steps, cfg.train.learning_starts) == (4_096_000, 51_200)  # algo_env over config.yaml
    cfg = train_cfg("algo=flashsac", "env=go2_joystick_flat", "budget=5min")
    assert (cfg.train.total_env_steps, cfg.train.max_seconds, cfg.train.learning_starts) == (None, 300, 51_200)
    assert train_cfg("algo=flashsac", "env=hopper").train.learning_starts == 10_000  # no task file: the main file


def test_fastsac_aims_at_a_lower_entropy_on_go1_only():
    # conf/algo_env/fastsac_go1_joystick_flat.yaml: -0.5 nats per joint on Go1; Go2 keeps FastSAC's default 0
    assert train_cfg("algo=fastsac", "env=go1_joystick_flat").algo.target_entropy_ratio == 0.5
    assert train_cfg("algo=fastsac", "env=go2_joystick_flat").algo.target_entropy_ratio == 0.0


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["seed=-1"], "seed=-1: must be an integer >= 0"),
        (["seed=1.5"], "seed=1.5: must be an integer >= 0"),
        (["device=gpu"], "device=gpu: must be auto, cpu, cuda or cuda:N"),
        (
            ["+foo=1"],
            "foo=1: unknown key; valid top-level keys: seed, device, experiment, env, algo, train, eval, "
            "checkpoint, logger, affinity, replay, runtime",
        ),  # fmt: skip
        (["env.num_envs=0"], "env.num_envs=0: must be an integer > 0"),
        (["env.name=cartpole"], f"env.name=cartpole: must be one of {', '.join(envs.registry_names())}"),
        (
            ["env=dmc_dog_run", "+env.options.healthy_reward=1"],
            "env.options.healthy_reward=1: unknown option of task dmc_dog_run; valid: max_episode_steps",
        ),
        (["train.total_env_steps=-5"], "train.total_env_steps=-5: must be an integer > 0 or null"),
        (
            ["train.total_env_steps=null"],
            "train.total_env_steps=null: needs a wall-clock budget: "
            "set train.max_seconds (seconds > 0) or a step budget > 0",
        ),  # fmt: skip
        (["train.max_seconds=0"], "train.max_seconds=0: must be a number > 0 or null"),
        (["train.learning_starts=-1"], "train.learning_starts=-1: must be an integer >= 0"),
        (["train.updates_per_step=-2"], "train.updates_per_step=-2: must be an integer >= 0 or null"),
        (["train.max_nonfinite_updates=0"], "train.max_nonfinite_updates=0: must be an integer > 0"),
        (
            ["+train.total_env_step=5"],
            "train.total_env_step=5: unknown key; valid keys of train: total_env_steps, "
            "max_seconds, updates_per_step, learning_starts, resume, max_nonfinite_updates",
        ),  # fmt: skip
        (["eval.num_envs=-1"], "eval.num_envs=-1: must be an integer >= 0"),
        (["eval.episodes=0"], "eval.episodes=0: must be an integer > 0"),
        (["eval.interval_s=0"], "eval.interval_s=0: must be a number > 0 or null"),
        (["eval.interval_env_steps=0"], "eval.interval_env_steps=0: must be an integer > 0 or null"),
        (["eval.at_seconds=[120,-1]"], "eval.at_seconds[1]=-1: must be a number >= 0"),
        (["eval.final=maybe"], "eval.final=maybe: must be true or false"),
        (["checkpoint.keep_last=-1"], "checkpoint.keep_last=-1: must be an integer >= 0"),
        (["logger.mode=sometimes"], "logger.mode=sometimes: must be one of auto, online, offline, disabled"),
        (["logger.console=fancy"], "logger.console=fancy: must be one of auto, bar, lines, off"),
        (
            ["logger=none", "logger.interval_s=null"],
            "logger.interval_s=null: set logger.interval_s or logger.interval_env_steps (both are null)",
        ),  # fmt: skip
        (["logger.interval_env_steps=0"], "logger.interval_env_steps=0: must be an integer > 0 or null"),
        (["affinity.mode=fast"], "affinity.mode=fast: must be one of auto, manual"),
        (["affinity.learner_count=0"], "affinity.learner_count=0: must be an integer > 0 or null"),
        (["replay.capacity=0"], "replay.capacity=0: must be an integer > 0"),
        (["runtime.ingress_slots=1"], "runtime.ingress_slots=1: must be an integer >= 2"),
        (["runtime.poll_s=0"], "runtime.poll_s=0: must be a number > 0"),
        (["+runtime.fault.learner_raise_at_tick=soon"], "runtime.fault.learner_raise_at_tick=soon: must be an integer"),
        (["+runtime.env_factory=envs.make"], "runtime.env_factory=envs.make: must be module:function"),
        (
            ["+runtime.algorithm_factory=no_such_module:make"],
            "runtime.algorithm_factory=no_such_module:make: cannot be imported (No module named 'no_such_module')",
        ),  # fmt: skip
        (["algo.amp=fp8"], "algo.amp=fp8: must be one of bf16, fp16, none"),
        (["algo.policy_ema_tau=2"], "algo.policy_ema_tau=2.0: must be in (0, 1]"),
        (["algo.lr_decay_updates=-5"], "algo.lr_decay_updates=-5: must be an integer >= 0"),
        (["algo.lr_end_ratio=0"], "algo.lr_end_ratio=0.0: must be in (0, 1]"),
        (["algo.batch_size=big"], "algo.batch_size=big: must be an integer"),
        (["algo.betas=[0.9]"], "algo.betas=[0.9]: must be a list of 2 numbers"),
        (["algo.name=ddpg"], "algo.name=ddpg: must be one of fastsac, flashsac"),
    ],
)
def test_bad_values_are_refused_in_one_line_naming_key_value_and_choices(overrides, message):
    assert refusal(train_cfg(*overrides)) == message


def test_unknown_algo_keys_list_the_schema():
    message = refusal(train_cfg("algo=flashsac", "+algo.polcy_frequency=2"))
    assert message.startswith("algo.polcy_frequency=2: unknown key; valid keys of algo: name, updates_per_step, ")
    assert "actor_update_period" in message


def test_task_options_are_checked_by_the_task_before_anything_starts():
    message = refusal(train_cfg("env=hopper", "+env.options.healthy_rewrd=0.5"))
    assert message == (
        "env.options.healthy_rewrd=0.5: unknown option of task hopper; valid: forward_reward_weight, "
        "ctrl_cost_weight, healthy_reward, terminate_when_unhealthy, healthy_state_range, healthy_z_range, "
        "healthy_angle_range, reset_noise_scale, max_episode_steps"
    )
    assert validate_train_config(train_cfg("env=hopper", "+env.options.healthy_reward=0.5")).env.options == {
        "healthy_reward": 0.5
    }


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["env=hopper", "+env.options.healthy_reward=abc"], "env.options.healthy_reward=abc: must be a finite number"),
        (
            ["env=hopper", "+env.options.healthy_z_range=[1.2,0.7]"],
            "env.options.healthy_z_range=[1.2, 0.7]: must be two numbers [low, high] with low < high "
            "(either may be inf or -inf)",
        ),  # fmt: skip
        (
            ["env=ant", "+env.options.ctrl_cost_weight=-1"],
            "env.options.ctrl_cost_weight=-1: must be a finite number >= 0",
        ),
        (
            ["env=walker2d", "+env.options.terminate_when_unhealthy=sometimes"],
            "env.options.terminate_when_unhealthy=sometimes: must be true or false",
        ),  # fmt: skip
        (
            ["env=dmc_dog_run", "+env.options.max_episode_steps=0"],
            "env.options.max_episode_steps=0: must be an integer > 0",
        ),
    ],
)
def test_task_option_values_are_typed_and_bounded(overrides, message):
    assert refusal(train_cfg(*overrides)) == message


def test_good_task_options_pass_as_written():
    """The run keeps the options as the user wrote them; the task converts them (lists to ranges) itself."""
    run = validate_train_config(
        train_cfg("env=hopper", "+env.options.healthy_z_range=[0.5,inf]", "+env.options.max_episode_steps=1")
    )
    assert run.env.options == {"healthy_z_range": [0.5, float("inf")], "max_episode_steps": 1}


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: device=cuda is valid")
def test_cuda_on_a_machine_without_it_is_refused():
    assert refusal(train_cfg("device=cuda")) == (
        "device=cuda: CUDA is not available on this machine: use device=auto or device=cpu"
    )


def test_a_custom_factory_owns_its_group():
    """The tests' stand-in algorithm and fake env are not in the schemas; their factories check them."""
    cfg = train_cfg("+runtime.env_factory=fake_env:make", "env.name=fake", "+algo.hidden=16")
    cfg.algo.name = "standin"
    with pytest.raises(ConfigError, match=r"algo.name=standin: must be one of fastsac, flashsac"):
        validate_train_config(cfg)
    run = validate_train_config(cfg, custom_algorithm=True)
    assert run.runtime.env_factory == "fake_env:make" and run.env.name == "fake"


def test_the_runner_validates_too(tmp_path):
    """Programmatic users get the same check: Runner.__init__ refuses before starting anything."""
    from offpolicy.runtime.runner import Runner

    with pytest.raises(ConfigError, match=r"^seed=-1: must be an integer >= 0$"):
        Runner(train_cfg("seed=-1"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_type_descriptions():
    hints = __import__("typing").get_type_hints(RunConfig, include_extras=True)
    assert describe(hints["seed"]) == "an integer >= 0"
    assert coerce(hints["seed"], 3.0, "seed") == 3  # an integral float from the command line (3e0) is fine
    with pytest.raises(ConfigError, match=r"^seed=9223372036854775808: must be an integer <= 9223372036854775807$"):
        coerce(hints["seed"], 2**63, "seed")


def test_eval_config():
    assert isinstance(validate_eval_config(eval_cfg("checkpoint=x.pt")), EvaluateConfig)
    assert refusal(eval_cfg(), validate_eval_config) == (
        "checkpoint=???: required: checkpoint=<run dir>/checkpoints/latest.pt"
    )
    assert refusal(eval_cfg("checkpoint=x.pt", "episodes=0"), validate_eval_config) == (
        "episodes=0: must be an integer > 0"
    )
    assert refusal(eval_cfg("checkpoint=x.pt", "video_width=-16"), validate_eval_config) == (
        "video_width=-16: must be an integer > 0"
    )
    assert refusal(eval_cfg("checkpoint=x.pt", "+episode=3"), validate_eval_config).startswith(
        "episode=3: unknown key; valid top-level keys: checkpoint, episodes, "
    )


# --------------------------------------------------------------------------- Hydra's own errors


def hydra_error(*overrides: str, config_name: str = "config") -> Exception:
    """The exception Hydra raises composing the repository's config with `overrides`."""
    with pytest.raises(HydraException) as err:
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            compose(config_name=config_name, overrides=list(overrides))
    return err.value


@pytest.mark.parametrize(
    "overrides,line",
    [
        (["algo=nope"], "algo=nope: no such algo config; valid: fastsac, flashsac"),
        (["budget=1h"], "budget=1h: no such budget config; valid: 15min, 5min, 8min, none"),
        (
            ["train.total_env_step=5"],
            "train.total_env_step=5: unknown key (did you mean train.total_env_steps?); "
            "to add a new key write +train.total_env_step=5",
        ),  # fmt: skip
        (
            ["replay.size=5"],
            "replay.size=5: unknown key (valid keys of replay: capacity); to add a new key write +replay.size=5",
        ),
        (
            ["env.options.healthy_reward=2"],
            "env.options.healthy_reward=2: unknown key (env.options has no keys); "
            "to add a new key write +env.options.healthy_reward=2",
        ),  # fmt: skip
        (["sed=1"], "sed=1: unknown key (did you mean seed?); to add a new key write +sed=1"),
        (
            ["zzzz=1"],
            "zzzz=1: unknown key (valid top-level keys: hydra, env, algo, affinity, replay, logger, runtime, seed, "
            "device, experiment, train, eval, checkpoint); to add a new key write +zzzz=1",
        ),  # fmt: skip
        (["+env.options.x=[1"], "+env.options.x=[1: cannot parse this override (no viable alternative at input '[1')"),
        (["~nothing"], "Could not delete from config. 'nothing' does not exist."),
    ],
)
def test_hydra_errors_read_as_one_line_naming_the_key_or_choice_and_the_valid_ones(overrides, line):
    assert hydra_error_line(hydra_error(*overrides)) == line


def test_the_entry_wrapper_exits_2_on_hydras_errors_only_and_restores_hydra(capsys):
    from hydra._internal import utils

    original = utils.run_and_report
    with hydra_errors_in_one_line():
        assert utils.run_and_report(lambda: 7) == 7
        with pytest.raises(SystemExit) as stop:
            utils.run_and_report(lambda: (_ for _ in ()).throw(hydra_error("algo=nope")))
        assert stop.value.code == 2
        assert capsys.readouterr().err.splitlines() == [
            "[offpolicy] invalid config: algo=nope: no such algo config; valid: fastsac, flashsac"
        ]
        with pytest.raises(SystemExit) as stop:  # anything else is Hydra's to report, as before
            utils.run_and_report(lambda: 1 / 0)
        assert stop.value.code == 1 and "ZeroDivisionError" in capsys.readouterr().err
    assert utils.run_and_report is original


# --------------------------------------------------------------------------- the CLIs


def run_cli(module: str, *args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize(
    "override,message",
    [
        ("seed=-1", "seed=-1: must be an integer >= 0"),
        ("train.total_env_steps=-5", "train.total_env_steps=-5: must be an integer > 0 or null"),
        ("env.num_envs=0", "env.num_envs=0: must be an integer > 0"),
    ],
)
def test_train_cli_refuses_bad_input_before_the_collector_starts(tmp_path, override, message):
    """Was: a 23-line collector traceback (exit 3), a run of -160% that exited 0, a message blaming eval.num_envs."""
    run_dir = tmp_path / "run"
    proc = run_cli("offpolicy.train", "env=hopper", "logger=none", override, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"[offpolicy] invalid config: {message}"]
    assert proc.stdout == ""
    left = {p.name for p in run_dir.iterdir()} if run_dir.exists() else set()
    assert left <= {".hydra", "train.log"}  # Hydra's own files; no collector, metrics, checkpoint or W&B run


ALL_ENVS = ", ".join(envs.registry_names())


@pytest.mark.parametrize(
    "args,message",
    [
        (["env=hopper", "+env.options.healthy_reward=abc"], "env.options.healthy_reward=abc: must be a finite number"),
        (
            ["env=hopper", "+env.options.healthy_z_range=5"],
            "env.options.healthy_z_range=5: must be two numbers [low, high] with low < high (either may be inf or -inf)",
        ),
        (["env=hopper", "+env.options.max_episode_steps=0"], "env.options.max_episode_steps=0: must be an integer > 0"),
        (
            ["env=dmc_cheetah_run", "+env.options.max_episode_steps=-3"],
            "env.options.max_episode_steps=-3: must be an integer > 0",
        ),
        (
            ["train.total_env_step=5"],
            "train.total_env_step=5: unknown key (did you mean train.total_env_steps?); "
            "to add a new key write +train.total_env_step=5",
        ),  # fmt: skip
        (["env=doesnotexist"], f"env=doesnotexist: no such env config; valid: {ALL_ENVS}"),
        (["algo=nope"], "algo=nope: no such algo config; valid: fastsac, flashsac"),
    ],
)
def test_train_cli_reported_inputs_are_one_line_with_status_2(tmp_path, args, message):
    """Were: a 26-line collector traceback (exit 3) for the first two, 1-step and 0-step episodes that exited 0
    for the next two, and Hydra's multi-line messages with exit status 1 for the last three."""
    run_dir = tmp_path / "run"
    proc = run_cli("offpolicy.train", *args, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.stderr.splitlines() == [f"[offpolicy] invalid config: {message}"]
    assert proc.returncode == 2 and proc.stdout == ""
    left = {p.name for p in run_dir.iterdir()} if run_dir.exists() else set()
    assert left <= {".hydra", "train.log"}  # no collector, metrics or checkpoint


@pytest.mark.parametrize(
    "args,message",
    [
        (["env=doesnotexist"], f"env=doesnotexist: no such env config; valid: {ALL_ENVS}"),
        (["episods=3"], "episods=3: unknown key (did you mean episodes?); to add a new key write +episods=3"),
        (["logger=nope"], "logger=nope: no such logger config; valid: none, wandb"),
    ],
)
def test_eval_cli_hydra_errors_are_one_line_with_status_2(tmp_path, args, message):
    proc = run_cli("offpolicy.eval", "checkpoint=x.pt", *args, f"hydra.run.dir={tmp_path / 'o'}", cwd=tmp_path)
    assert proc.stderr.splitlines() == [f"[offpolicy] invalid config: {message}"]
    assert proc.returncode == 2


def test_multirun_hydra_errors_are_one_line_too_and_hydra_full_error_keeps_hydras_report(tmp_path):
    sweep = f"hydra.sweep.dir={tmp_path / 'sweep'}"
    proc = run_cli("offpolicy.train", "-m", "seed=0,1", "algo=nope", sweep, cwd=tmp_path)
    assert proc.stderr.splitlines() == [
        "[offpolicy] invalid config: algo=nope: no such algo config; valid: fastsac, flashsac"
    ]
    assert proc.returncode == 2 and not (tmp_path / "sweep" / "0").exists()
    full = run_cli("offpolicy.train", "algo=nope", cwd=tmp_path, env={**os.environ, "HYDRA_FULL_ERROR": "1"})
    assert full.returncode == 1 and "Traceback" in full.stderr and "MissingConfigException" in full.stderr


def test_help_and_cfg_still_work_smoke(tmp_path):
    """Smoke test: Hydra's --help and --cfg job print and exit 0 through the wrapped entry point."""
    helped = run_cli("offpolicy.train", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "== Configuration groups ==" in helped.stdout
    shown = run_cli("offpolicy.eval", "--cfg", "job", "checkpoint=x.pt", cwd=tmp_path)
    assert shown.returncode == 0 and "checkpoint: x.pt" in shown.stdout


def test_eval_cli_checks_option_values_in_one_line(tmp_path):
    path = task_checkpoint(tmp_path / "hopper.pt")
    args = [f"checkpoint={path}", "+env_options.healthy_z_range=5", f"hydra.run.dir={tmp_path / 'o'}"]
    proc = run_cli("offpolicy.eval", *args, cwd=tmp_path)
    assert proc.stderr.splitlines() == [
        "[offpolicy] invalid config: env_options.healthy_z_range=5: "
        "must be two numbers [low, high] with low < high (either may be inf or -inf)"
    ]
    assert proc.returncode == 2 and not (tmp_path / "o" / "eval.json").exists()


def test_eval_cli_refuses_zero_episodes(tmp_path):
    """Was: a 10-line traceback."""
    path = task_checkpoint(tmp_path / "hopper.pt")
    proc = run_cli(
        "offpolicy.eval", f"checkpoint={path}", "episodes=0", f"hydra.run.dir={tmp_path / 'o'}", cwd=tmp_path
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["[offpolicy] invalid config: episodes=0: must be an integer > 0"]


def test_eval_cli_checks_task_options_in_one_line(tmp_path):
    path = task_checkpoint(tmp_path / "hopper.pt")
    proc = run_cli(
        "offpolicy.eval", f"checkpoint={path}", "+env_options.speed=2", f"hydra.run.dir={tmp_path / 'o'}", cwd=tmp_path
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("[offpolicy] invalid config: env_options.speed=2: unknown option of task hopper; valid: ")
    assert line.endswith(", reset_noise_scale, max_episode_steps")


@pytest.mark.parametrize("backend", ["osmesa", "egl", "glx"])
def test_video_without_a_gl_backend_says_what_to_install(tmp_path, monkeypatch, backend):
    """Was: a 50-line traceback ending in `'NoneType' object has no attribute 'glGetError'`.

    Each backend the user may name runs where it cannot render here (GLX never can without a display).
    """
    from offpolicy.eval import gl_backend_problem

    monkeypatch.delenv("DISPLAY", raising=False)
    if gl_backend_problem(backend) is None:
        pytest.skip(f"MUJOCO_GL={backend} renders on this machine")
    path = task_checkpoint(tmp_path / "hopper.pt")
    out = tmp_path / "out"
    args = [f"checkpoint={path}", "episodes=2", "max_episode_steps=10", "video=true", f"hydra.run.dir={out}"]
    proc = run_cli("offpolicy.eval", *args, cwd=tmp_path, env={**os.environ, "MUJOCO_GL": backend})
    assert proc.returncode == 6
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"[offpolicy] video failed: no offscreen OpenGL with MUJOCO_GL={backend} (")
    assert "apt-get install libosmesa6" in line and "MUJOCO_GL=egl" in line
    assert line.endswith(f"the returns are in {out / 'eval.json'}")
    result = json.loads((out / "eval.json").read_text())
    assert result["episodes"] == 2 and len(result["returns"]) == 2 and result["video"] is None
    assert not (out / "eval.mp4").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["{tmp}/missing"], "dir={tmp}/missing: does not exist"),
        (["{tmp}/runs", "--at-seconds", "120", "-5"], "--at-seconds=-5: must be a number of seconds >= 0"),
        (["{tmp}/runs", "--at-seconds", "soon"], "--at-seconds=soon: must be a number of seconds >= 0"),
        (["{tmp}/runs", "--spread", "iqr"], "argument --spread: invalid choice: 'iqr' (choose from 'std', 'minmax')"),
        (
            ["{tmp}/runs", "--metric", "eval/retrun"],
            "--metric=eval/retrun: no run logged it; logged: eval/return, train/updates",
        ),  # fmt: skip
    ],
)
def test_plot_cli_refuses_bad_arguments_in_one_line(tmp_path, args, message):
    from test_plot import write_run

    write_run(tmp_path / "runs" / "0", "fastsac", 0, [0, 100], [1.0, 2.0])
    proc = run_cli("offpolicy.plot", *(a.format(tmp=tmp_path) for a in args), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"[offpolicy.plot] invalid arguments: {message.format(tmp=tmp_path)}"]
