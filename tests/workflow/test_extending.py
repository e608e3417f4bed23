"""The README's "Extending" section as written: its code is the files in examples/, and its commands train them."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from sizes import SMALL

import envs
from offpolicy.checkpoint import load_checkpoint
from offpolicy.config import ConfigError, validate_train_config

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
SEARCHPATH = "hydra.searchpath=[file://examples/conf]"
"""how the README's commands find the examples' config files (relative to the repository root)"""
SHOWN = {"examples/slider.py", "examples/ddpg.py", "examples/deploy_onnx.py"}

if str(REPO) not in sys.path:  # the README runs from the repository root, where `examples` imports
    sys.path.insert(0, str(REPO))

from examples.ddpg import make_ddpg  # noqa: E402
from examples.slider import Slider, make_env  # noqa: E402


def shown_blocks() -> dict[str, list[str]]:
    """README code blocks whose first line is `# examples/<file>`: the file -> those blocks' other lines."""
    shown: dict[str, list[str]] = {}
    for body in re.findall(r"```(?:python|yaml)\n(.*?)```", README, flags=re.S):
        first, _, rest = body.partition("\n")
        match = re.fullmatch(r"# (examples/\S+)", first.strip())
        if match:
            shown.setdefault(match.group(1), []).append(rest)
    return shown


def extending_commands() -> list[list[str]]:
    """The arguments of the README's `python -m offpolicy.train` commands that use the examples' configs."""
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines() if SEARCHPATH in line]
    commands = [shlex.split(line, comments=True) for line in lines]
    assert all(words[:3] == ["python", "-m", "offpolicy.train"] for words in commands)
    return [words[3:] for words in commands]


def command(*choices: str) -> list[str]:
    """The one README command that holds all of `choices` (e.g. `algo=ddpg`, `env=slider`)."""
    (found,) = [words for words in extending_commands() if set(choices) <= set(words)]
    return found


def absolute(words: list[str]) -> list[str]:
    """The command as run from anywhere: its searchpath made absolute."""
    return [w.replace("file://examples/conf", f"file://{REPO / 'examples' / 'conf'}") for w in words]


def train(words: list[str], run_dir: Path, cwd: Path) -> dict:
    """Run `python -m offpolicy.train <words>` with `examples` importable; the run's summary.json."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "offpolicy.train", *absolute(words), f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(
        cmd, cwd=cwd, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "summary.json").read_text())


def test_the_readme_shows_the_example_files_as_they_are():
    """Every line the README shows of an example is in that file, in order (`...` elides lines)."""
    shown = shown_blocks()
    assert set(shown) == SHOWN
    for name, blocks in shown.items():
        text = (REPO / name).read_text()
        for block in blocks:
            pieces = [p for p in re.split(r"^\s*\.\.\.\s*\n", block, flags=re.M) if p.strip()]
            position = 0
            for piece in pieces:
                found = text.find(piece, position)
                assert found >= 0, f"the README shows lines that {name} does not have (in this order):\n{piece}"
                position = found + len(piece)


def test_the_readme_extending_commands_compose_and_pass_validation():
    """Each command composes with the examples' configs, which plug in their factories."""
    commands = extending_commands()
    assert len(commands) == 3
    for words in commands:
        overrides = [w for w in absolute(words) if not w.startswith("hydra.run")]
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        run = validate_train_config(cfg)
        if "env=slider" in words:  # and the README says which factory the config file names
            assert run.runtime.env_factory == "examples.slider:make_env"
            assert f"`runtime.env_factory: {run.runtime.env_factory}`" in README
        if "algo=ddpg" in words:
            assert run.runtime.algorithm_factory == "examples.ddpg:make_ddpg"
            assert f"`runtime.algorithm_factory: {run.runtime.algorithm_factory}`" in README


def test_the_slider_rewards_minus_its_distance_to_the_target_and_the_control_cost():
    env = make_env("slider", num_envs=3, seed=0, nthread=1, target=0.5)
    try:
        assert env.spec.obs_dims == {"actor": 2} and env.spec.action_dim == 1
        assert env.spec.reward_range == pytest.approx((-2.6, 0.0))  # rail end 2 m from 0, 2.5 m from the target
        env.reset()
        actions = np.array([[1.0], [-1.0], [0.0]])
        state = env.step(actions)
        obs = state.obs["actor"]
        qpos, qvel = env.physics_qpos_qvel()
        np.testing.assert_allclose(obs[:, 0], qpos[:, 0] - 0.5, atol=1e-6)
        np.testing.assert_allclose(obs[:, 1], qvel[:, 0], atol=1e-6)
        expected = -np.abs(qpos[:, 0] - 0.5) - 0.1 * actions[:, 0] ** 2
        np.testing.assert_allclose(state.reward, expected, atol=1e-6)
        assert qvel[0, 0] > 0 > qvel[1, 0]  # the motor pushes the way the action says
        assert not state.terminated.any()
    finally:
        env.close()


def test_a_task_in_TASKS_is_built_in(monkeypatch):
    """The README's built-in route: once in `TASKS`, `envs.make` builds it and the config check reads its options."""
    from envs.gymnasium import TASKS

    monkeypatch.setitem(TASKS, "slider", Slider)
    assert "slider" in envs.registry_names()
    env = envs.make("slider", num_envs=2, nthread=1, target=-1.0)
    try:
        assert env.spec.name == "slider" and env.task.cfg["target"] == -1.0
    finally:
        env.close()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["env=hopper", "env.name=slider", "+env.options.target=0.5"])
    validate_train_config(cfg)
    cfg.env.options = {"targte": 0.5}
    with pytest.raises(ConfigError, match="targte"):
        validate_train_config(cfg)


def test_the_readme_algorithm_learns_the_readme_task(tmp_path):
    """The README's DDPG-on-slider command as written: its final snapshot beats the untrained actor by far."""
    run_dir = tmp_path / "run"
    summary = train(command("algo=ddpg", "env=slider"), run_dir, tmp_path)
    assert summary["completed"] and summary["env_steps"] == 4000 and summary["updates"] > 0
    # the untrained actor pushes the block to a rail end and scores about -470 over the 200 steps
    assert summary["snapshot_eval"]["mean"] > -150
    ckpt = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    fresh = make_ddpg(OmegaConf.create(ckpt["config"]["algo"]), _spec(obs_dim=2, action_dim=1), "cpu")
    fresh.load_state_dict(ckpt["algorithm"])
    for name, value in ckpt["algorithm"]["actor"].items():
        assert torch.equal(fresh.actor.state_dict()[name], value)


def test_smoke_the_readme_task_trains_with_fastsac(tmp_path):
    """The README's slider command with a built-in algorithm, cut to a few ticks of small networks."""
    small = [f"algo.{k}={v}" for k, v in SMALL["fastsac"].items()]
    budget = ["env.num_envs=4", "eval.num_envs=2", "train.total_env_steps=200", "train.learning_starts=100"]
    words = [*command("env=slider", "algo=fastsac"), *small, *budget, "algo.updates_per_step=1", "logger=none"]
    summary = train(words, tmp_path / "run", tmp_path)
    assert summary["completed"] and summary["env_steps"] == 200 and summary["updates"] == 25


def test_smoke_the_readme_algorithm_trains_on_hopper(tmp_path):
    """The README's DDPG-on-Hopper command, cut to a few ticks."""
    budget = ["env.num_envs=4", "eval.num_envs=2", "train.total_env_steps=200", "train.learning_starts=100"]
    words = [*command("algo=ddpg", "env=hopper"), *budget, "algo.hidden=16", "algo.batch_size=32", "logger=none"]
    run_dir = tmp_path / "run"
    summary = train(words, run_dir, tmp_path)
    assert summary["completed"] and summary["env_steps"] == 200 and summary["updates"] == 50
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss/critic"] for r in rows if "loss/critic" in r]
    assert losses and all(np.isfinite(losses))


def _spec(obs_dim: int, action_dim: int) -> envs.EnvSpec:
    ones = np.ones(action_dim, np.float32)
    return envs.EnvSpec("slider", 16, {"actor": obs_dim}, action_dim, -ones, ones, 0.05, 200)
