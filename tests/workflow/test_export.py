"""`offpolicy.export`: the ONNX actor acts as the live actor does in env units (normalisation, averaged weights,
action scaling and joint targets baked in); its JSON; the CLI end to end and its exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from omegaconf import OmegaConf
from sizes import SMALL

import envs
from envs.core import EnvSpec
from offpolicy import checkpoint as ck
from offpolicy.algorithms import make_algorithm
from offpolicy.export import deploy_info, export_onnx
from offpolicy.replay_buffer import ReplayBuffer
from offpolicy.runtime.snapshot_eval import MeanPolicy

REPO = Path(__file__).resolve().parents[2]
OBS_SHIFT, OBS_SCALE = 3.0, 2.0
"""observations far from N(0, 1), so a policy without its normaliser acts visibly differently"""


def bounded_spec(num_envs: int = 4) -> EnvSpec:
    """A synthetic spec whose action bounds are not [-1, 1], so a missing scaling shows."""
    return EnvSpec(
        name="synthetic",
        num_envs=num_envs,
        obs_dims={"actor": 7},
        action_dim=3,
        action_low=np.array([-2.0, -0.5, 0.0], np.float32),
        action_high=np.array([2.0, 1.5, 1.0], np.float32),
        dt=0.01,
        max_episode_steps=1000,
        reward_range=(-3.0, 3.0),
    )


def random_obs(spec: EnvSpec, rows: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    return {k: torch.randn(rows, d, generator=gen) * OBS_SCALE + OBS_SHIFT for k, d in spec.obs_dims.items()}


def trained(name: str, spec: EnvSpec, policy_ema: bool, phases: int = 3, updates: int = 4, **overrides):
    """A small CPU algorithm after `phases` update phases on a replay of random transitions; and its config."""
    cfg = {"name": name, **SMALL[name], "policy_ema": policy_ema, "policy_ema_tau": 0.2, **overrides}
    torch.manual_seed(0)
    algorithm = make_algorithm(OmegaConf.create(cfg), spec, "cpu")
    gen = torch.Generator().manual_seed(1)
    replay = ReplayBuffer(10_000, spec.obs_dims, spec.action_dim, "cpu", num_envs=spec.num_envs)
    n = spec.num_envs
    for _ in range(40):
        action = torch.rand(n, spec.action_dim, generator=gen) * 2 - 1
        zeros = torch.zeros(n)
        replay.add(
            random_obs(spec, n, gen), action, torch.randn(n, generator=gen), random_obs(spec, n, gen), zeros, zeros
        )
    for _ in range(phases):
        algorithm.update_phase(replay, updates)
    return algorithm, cfg


def run_onnx(path: Path, obs: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {"obs": obs.astype(np.float32)})))


def live_actions(algorithm, spec: EnvSpec, obs: np.ndarray) -> np.ndarray:
    """What `offpolicy.eval` sends to the env: `algorithm.act` scaled to the action bounds."""
    return MeanPolicy(algorithm, spec, torch.device("cpu"))({"actor": obs})


@pytest.mark.parametrize("policy_ema", [False, True], ids=["raw", "averaged"])
@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_onnx_actions_match_the_live_actor_in_env_units(name, policy_ema, tmp_path):
    spec = bounded_spec()
    algorithm, _ = trained(name, spec, policy_ema)
    path = export_onnx(algorithm, spec, tmp_path / "policy.onnx")
    obs = random_obs(spec, 64, torch.Generator().manual_seed(2))["actor"].numpy()
    want = live_actions(algorithm, spec, obs)
    got = run_onnx(path, obs)
    assert set(got) == {"action"}
    np.testing.assert_allclose(got["action"], want, rtol=0, atol=1e-5)
    # the rows reach both bounds' insides and the second batch size runs on the same graph
    np.testing.assert_allclose(run_onnx(path, obs[:5])["action"], want[:5], rtol=0, atol=1e-5)
    spread = want.max(0) - want.min(0)
    assert (spread > 1e-3).all(), "the actions must vary with the observation, or the match shows little"
    if policy_ema:  # the averaged actor acts visibly unlike the raw one, so exporting the wrong one fails above
        raw = MeanPolicy(algorithm, spec, torch.device("cpu"))
        algorithm.policy_ema = False
        try:
            assert np.abs(raw({"actor": obs}) - want).max() > 1e-3
        finally:
            algorithm.policy_ema = True


def test_deploy_info_of_a_synthetic_task_gives_sizes_and_bounds():
    spec = bounded_spec()
    algorithm, _ = trained("fastsac", spec, policy_ema=True, phases=1, updates=1)
    ckpt = {"algo": "fastsac", "env": "synthetic", "counters": {"env_steps": 1234, "policy_version": 7}}
    info = deploy_info(algorithm, spec, ckpt, {})
    assert info["obs_dim"] == 7 and info["observation_layout"] == [{"name": "obs", "size": 7}]
    assert info["action_dim"] == 3 and info["outputs"] == {"action": [None, 3]}
    assert info["action_low"] == [-2.0, -0.5, 0.0] and info["action_high"] == [2.0, 1.5, 1.0]
    assert info["control_dt"] == 0.01 and info["actor"] == "averaged"
    assert (info["checkpoint_env_steps"], info["checkpoint_policy_version"]) == (1234, 7)
    assert "joint_targets" not in info["outputs"] and "kp" not in info


# --------------------------------------------------------------------------- the CLI on real checkpoints


def write_checkpoint(env_name: str, algo: str, policy_ema: bool, path: Path, **overrides) -> tuple[Path, EnvSpec]:
    """A checkpoint of a small algorithm trained on random transitions of task `env_name`'s sizes."""
    env = envs.make(env_name, num_envs=1)
    spec = replace(env.spec, num_envs=2)
    env.close()
    algorithm, cfg = trained(algo, spec, policy_ema, phases=2, updates=3, **overrides)
    identity = ck.RunIdentity(algo, env_name, dict(spec.obs_dims), spec.action_dim, spec.num_envs)
    counters = {"env_steps": 300, "ticks": 150, "updates": 6, "policy_version": 2}
    config = {"algo": cfg, "env": {"name": env_name, "options": {}}}
    return ck.save_checkpoint(
        path, ck.build_checkpoint(identity, algorithm.state_dict(), counters, config=config)
    ), spec


def export_cli(*overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "offpolicy.export", *overrides],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def reloaded(path: Path, spec: EnvSpec):
    """The checkpoint's algorithm as `offpolicy.eval` loads it (with its policy_ema as trained)."""
    ckpt = ck.load_checkpoint(path)
    algorithm = make_algorithm(OmegaConf.create(ckpt["config"]["algo"]), spec, "cpu")
    ck.load_algorithm_state(algorithm, ckpt, path, allow_policy_only=True)
    return algorithm


def test_cli_exports_a_hopper_policy_file_that_acts_as_the_checkpoint(tmp_path):
    path, spec = write_checkpoint("hopper", "flashsac", True, tmp_path / "step_300.pt")
    policy = ck.export_policy(path, tmp_path / "policy.pt")  # the CLI takes policy files as eval does
    proc = export_cli(f"checkpoint={policy}", "format=onnx", f"out={tmp_path / 'out' / 'hopper.onnx'}")
    assert proc.returncode == 0, proc.stderr
    assert "exported the averaged flashsac actor of hopper" in proc.stdout
    info = json.loads((tmp_path / "out" / "hopper.json").read_text())
    assert (info["obs_dim"], info["action_dim"], info["env"], info["algo"]) == (11, 3, "hopper", "flashsac")
    assert (info["checkpoint_env_steps"], info["checkpoint_policy_version"], info["actor"]) == (300, 2, "averaged")
    assert info["control_dt"] == pytest.approx(0.008) and info["action_low"] == [-1.0] * 3
    obs = np.random.default_rng(0).normal(size=(16, 11)).astype(np.float32)
    got = run_onnx(tmp_path / "out" / "hopper.onnx", obs)
    np.testing.assert_allclose(got["action"], live_actions(reloaded(path, spec), spec, obs), rtol=0, atol=1e-5)


def test_cli_exports_go1_joint_targets_and_its_gains_and_the_example_loop_runs(tmp_path):
    path, spec = write_checkpoint("go1_joystick_flat", "fastsac", False, tmp_path / "go1.pt", v_min=-10.0, v_max=10.0)
    proc = export_cli(f"checkpoint={path}", "format=onnx")  # out: beside the checkpoint
    assert proc.returncode == 0, proc.stderr
    info = json.loads((tmp_path / "go1.json").read_text())
    env = envs.make("go1_joystick_flat", num_envs=1)
    home, names = env.layout.default_pose, [env.model.joint(i).name for i in range(1, env.model.njnt)]
    env.close()
    assert info["default_joint_positions"] == pytest.approx(home.tolist()) and info["joint_names"] == names
    assert (info["kp"], info["kd"], info["action_scale"]) == (35.0, 0.5, 0.5)
    assert info["control_dt"] == pytest.approx(0.02) and info["sim_dt"] == pytest.approx(0.004)
    assert sum(part["size"] for part in info["observation_layout"]) == info["obs_dim"] == 48
    assert [p["name"] for p in info["observation_layout"]][-1] == "command" and info["actor"] == "raw"
    obs = np.random.default_rng(1).normal(size=(8, 48)).astype(np.float32)
    got = run_onnx(tmp_path / "go1.onnx", obs)
    want = live_actions(reloaded(path, spec), spec, obs)
    np.testing.assert_allclose(got["action"], want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["joint_targets"], home + 0.5 * want, rtol=0, atol=1e-5)
    example = subprocess.run(
        [sys.executable, str(REPO / "examples" / "deploy_onnx.py"), str(tmp_path / "go1.onnx"), "5"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert example.returncode == 0, example.stderr
    assert "go1_joystick_flat: 5 steps of 0.02 s, summed reward" in example.stdout


def test_cli_refuses_an_unknown_format_in_one_line(tmp_path):
    proc = export_cli(f"checkpoint={tmp_path / 'absent.pt'}", "format=tflite")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == ["[offpolicy] invalid config: format=tflite: one of onnx"], proc.stderr


def test_cli_refuses_a_bad_checkpoint_in_one_line(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    proc = export_cli(f"checkpoint={bad}", "format=onnx")
    assert proc.returncode == 5
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"[offpolicy] checkpoint {bad} is unreadable"), proc.stderr
    assert not (tmp_path / "bad.onnx").exists()
