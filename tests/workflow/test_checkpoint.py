"""Checkpoints: atomic writes, exact round trips, safe loading, one-line errors, and resume through the real CLI."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from sizes import SMALL

from envs.core import EnvSpec
from offpolicy import checkpoint as ck
from offpolicy.algorithms import make_algorithm
from offpolicy.checkpoint import Checkpointer, CheckpointError, RunIdentity
from offpolicy.config import CheckpointConfig
from offpolicy.replay_buffer import ReplayBuffer

REPO = Path(__file__).resolve().parents[2]
OBS_DIM, ACTION_DIM, NUM_ENVS = 7, 3, 4
TINY_TRAIN = [
    "algo=fastsac",
    "env=hopper",
    "env.num_envs=4",
    "eval.num_envs=2",
    "algo.batch_size=64",
    "algo.critic_hidden_dim=32",
    "algo.actor_hidden_dim=32",
    "algo.num_atoms=11",
    "algo.updates_per_step=1",
    "train.learning_starts=40",
    "logger=none",
]


def spec(num_envs: int = NUM_ENVS, obs_dim: int = OBS_DIM) -> EnvSpec:
    return EnvSpec(
        name="synthetic",
        num_envs=num_envs,
        obs_dims={"actor": obs_dim},
        action_dim=ACTION_DIM,
        action_low=-np.ones(ACTION_DIM, np.float32),
        action_high=np.ones(ACTION_DIM, np.float32),
        dt=0.01,
        max_episode_steps=1000,
        reward_range=(-1.0, 1.0),  # FastSAC sizes its value support from it
    )


def small(name: str, env_spec: EnvSpec | None = None, **over):
    return make_algorithm(OmegaConf.create({"name": name, **SMALL[name], **over}), env_spec or spec(), "cpu")


def trained(name: str, phases: int = 3):
    """A small algorithm after a few update phases on random data (optimizer moments, counters all non-trivial)."""
    algo = small(name)
    s = spec()
    gen = torch.Generator().manual_seed(1)
    replay = ReplayBuffer(1_000, s.obs_dims, s.action_dim, "cpu", num_envs=s.num_envs)
    for _ in range(20):
        n = s.num_envs
        replay.add(
            obs={"actor": torch.randn(n, OBS_DIM, generator=gen)},
            action=torch.rand(n, ACTION_DIM, generator=gen) * 2 - 1,
            reward=torch.randn(n, generator=gen),
            next_obs={"actor": torch.randn(n, OBS_DIM, generator=gen)},
            terminated=torch.zeros(n),
            truncated=torch.zeros(n),
        )
        algo.observe(torch.randn(n, generator=gen), torch.zeros(n), torch.zeros(n))
    for _ in range(phases):
        algo.update_phase(replay, 4)
    return algo


def identity(name: str = "fastsac", env: str = "synthetic") -> RunIdentity:
    return RunIdentity(name, env, {"actor": OBS_DIM}, ACTION_DIM, NUM_ENVS)


def counters(env_steps: int) -> dict[str, int]:
    return {"env_steps": env_steps, "ticks": env_steps // NUM_ENVS, "updates": env_steps, "policy_version": 7}


def write(path: Path, name: str = "fastsac", env_steps: int = 100, algo=None) -> Path:
    algo = algo or small(name)
    cfg = {"algo": {"name": name, **SMALL[name]}, "env": {"name": "synthetic", "options": {}}}
    return ck.save_checkpoint(
        path, ck.build_checkpoint(identity(name), algo.state_dict(), counters(env_steps), config=cfg)
    )


# --------------------------------------------------------------------------- atomic writes


def test_crash_mid_write_keeps_previous_checkpoint_and_leaves_no_tmp(tmp_path, monkeypatch):
    algo = trained("fastsac", phases=1)
    saver = Checkpointer(tmp_path, CheckpointConfig(interval_env_steps=100), identity())
    saver.save(algo, counters(100))
    latest = tmp_path / "checkpoints" / "latest.pt"
    before = latest.read_bytes()

    real_save = torch.save

    def torn_save(obj, f, *args, **kwargs):  # writes half a checkpoint file, then the disk "fills up"
        real_save(obj, f, *args, **kwargs)
        if isinstance(f, io.BytesIO):  # the payload serialized in memory before sealing: no disk involved
            return
        f.truncate(f.tell() // 2)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="No space"):
        saver.save(algo, counters(200))
    monkeypatch.setattr(torch, "save", real_save)

    files = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert files == ["latest.pt", "step_100.pt"], files  # no step_200.pt, no *.tmp garbage
    assert latest.read_bytes() == before
    assert ck.load_checkpoint(latest)["counters"]["env_steps"] == 100


def test_periodic_schedule_latest_link_and_pruning(tmp_path):
    algo = small("fastsac")
    saver = Checkpointer(
        tmp_path, CheckpointConfig(interval_env_steps=100, keep_last=2), identity(), start_env_steps=40
    )
    due = [s for s in range(44, 500, 4) if saver.due(s) and saver.save(algo, counters(s))]
    assert due == [100, 200, 300, 400]
    d = tmp_path / "checkpoints"
    assert sorted(p.name for p in d.iterdir()) == ["latest.pt", "step_300.pt", "step_400.pt"]
    assert os.path.samefile(d / "latest.pt", d / "step_400.pt")
    assert not saver.due(499) and not Checkpointer(tmp_path, CheckpointConfig(0), identity()).due(10**9)


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_round_trip_restores_actor_counters_and_rng(tmp_path, name):
    algo = trained(name)
    gen = torch.Generator().manual_seed(3)
    torch.rand(5, generator=gen)
    torch.manual_seed(11)
    saver = Checkpointer(tmp_path, CheckpointConfig(), identity(name), config={"algo": {"name": name}})
    path = saver.save(algo, counters(96), generators={"learner_actions": gen})
    expected_cpu, expected_gen = torch.rand(4), torch.rand(4, generator=gen)

    loaded = ck.load_checkpoint(path)
    fresh = small(name)
    ck.load_algorithm_state(fresh, loaded, path)
    other = torch.Generator().manual_seed(99)
    torch.manual_seed(0)
    ck.restore_rng(loaded["rng"], {"learner_actions": other})
    assert torch.equal(torch.rand(4), expected_cpu) and torch.equal(torch.rand(4, generator=other), expected_gen)

    obs = {"actor": torch.randn(9, OBS_DIM)}
    assert torch.equal(fresh.act(obs), algo.act(obs))
    assert loaded["counters"] == counters(96)
    assert (fresh.policy_version, fresh.total_updates) == (algo.policy_version, algo.total_updates) != (0, 0)
    for a, b in zip(fresh.critic_opt.state_dict()["state"].values(), algo.critic_opt.state_dict()["state"].values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"])
    # training on from the restored state is identical to training on from the original
    replay = ReplayBuffer(100, {"actor": OBS_DIM}, ACTION_DIM, "cpu")
    replay.add({"actor": obs["actor"]}, torch.zeros(9, ACTION_DIM), torch.ones(9), obs, torch.zeros(9), torch.zeros(9))
    torch.manual_seed(5)
    algo.update_phase(replay, 2)
    torch.manual_seed(5)
    fresh.update_phase(replay, 2)
    assert torch.equal(fresh.act(obs), algo.act(obs))
    assert loaded["config"]["algo"]["name"] == name and loaded["format_version"] == ck.FORMAT_VERSION


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_a_policy_file_acts_exactly_like_its_checkpoint_and_cannot_resume(tmp_path, name):
    algo = trained(name)
    saver = Checkpointer(tmp_path, CheckpointConfig(), identity(name), config={"algo": {"name": name}})
    full = saver.save(algo, counters(96))
    policy = ck.export_policy(full, tmp_path / "policy.pt")

    data = ck.load_checkpoint(policy)
    assert data["policy_only"] is True and "rng" not in data and set(data["algorithm"]) == set(ck.POLICY_KEYS)
    assert data["counters"] == counters(96) and data["config"]["algo"]["name"] == name
    assert policy.stat().st_size < full.stat().st_size / 3  # no critics, targets or optimizer moments
    fresh = small(name)
    ck.load_algorithm_state(fresh, data, policy, allow_policy_only=True)
    # observations far from the normaliser's initial statistics: acting needs the trained ones too
    obs = {"actor": 5 * torch.randn(9, OBS_DIM) + 3}
    assert torch.equal(fresh.act(obs), algo.act(obs)) and not torch.equal(small(name).act(obs), algo.act(obs))
    assert (fresh.policy_version, fresh.total_updates) == (algo.policy_version, algo.total_updates) != (0, 0)
    with pytest.raises(CheckpointError) as err:
        ck.load_algorithm_state(small(name), data, policy)  # a training run's starting point: refused
    assert str(err.value) == (
        f"checkpoint {policy} holds only a policy (offpolicy.eval can score it) and cannot resume training: "
        "resume from the run's checkpoints/latest.pt"
    )


# --------------------------------------------------------------------------- safe loading and errors


class _Payload:
    """Runs code when unpickled (what a malicious 'checkpoint' would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_executes_code_is_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"format": ck.FORMAT, "format_version": 1, "algorithm": _Payload(marker)}, path)
    with pytest.raises(CheckpointError, match=r"was refused: it references the Python object posix\.system") as err:
        ck.load_checkpoint(path)
    assert not marker.exists()
    assert "\n" not in str(err.value)


def test_missing_truncated_foreign_and_newer_files_give_one_line_errors(tmp_path):
    good = write(tmp_path / "good.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    foreign = tmp_path / "weights.pt"
    torch.save({"actor": torch.zeros(3)}, foreign)
    newer = tmp_path / "newer.pt"
    data = ck.load_checkpoint(good)
    torch.save({**data, "format_version": ck.FORMAT_VERSION + 1}, newer)
    unsealed = tmp_path / "unsealed.pt"  # a current format version without the sealed payload
    torch.save(data, unsealed)
    cases = {
        tmp_path / "nope.pt": f"checkpoint not found: {tmp_path / 'nope.pt'}",
        truncated: f"checkpoint {truncated} is unreadable (truncated or not a checkpoint)",
        foreign: f"checkpoint {foreign} is unreadable (truncated or not a checkpoint): it is not an",
        newer: f"checkpoint {newer} has format version {ck.FORMAT_VERSION + 1}",
        unsealed: f"checkpoint {unsealed} is unreadable (truncated or not a checkpoint): it lacks its payload or",
    }
    for path, message in cases.items():
        with pytest.raises(CheckpointError) as err:
            ck.load_checkpoint(path)
        assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def flip_bytes(path: Path, count: int = 200) -> int:
    """Invert `count` bytes in the middle of the file's second half (a bad disk or a torn copy); returns where."""
    data = bytearray(path.read_bytes())
    start = len(data) // 2 + (len(data) - len(data) // 2 - count) // 2
    data[start : start + count] = bytes(b ^ 0xFF for b in data[start : start + count])
    path.write_bytes(bytes(data))
    return start


def corrupt_line(path: Path) -> str:
    return (
        f"checkpoint {path} is corrupt: its contents do not match the SHA-256 written with them "
        "(the file changed after it was written)"
    )


def test_a_checkpoint_with_bytes_flipped_after_writing_is_refused_and_the_intact_one_loads(tmp_path):
    """Was: 200 bytes flipped in a checkpoint's second half loaded silently, weights and all."""
    algo = trained("fastsac", phases=1)
    good = write(tmp_path / "good.pt", algo=algo)
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(good.read_bytes())
    assert flip_bytes(corrupt) > good.stat().st_size // 2
    with pytest.raises(CheckpointError) as err:
        ck.load_checkpoint(corrupt)
    assert str(err.value) == corrupt_line(corrupt)
    # the file as written: its seal is the SHA-256 of the serialized checkpoint, and it loads exactly
    sealed = torch.load(good, weights_only=True)
    assert sealed["format_version"] == ck.FORMAT_VERSION == 2
    assert sealed["sha256"] == hashlib.sha256(sealed["payload"].numpy().tobytes()).hexdigest()
    fresh = small("fastsac")
    ck.load_algorithm_state(fresh, ck.load_checkpoint(good), good)
    obs = {"actor": torch.randn(9, OBS_DIM)}
    assert torch.equal(fresh.act(obs), algo.act(obs))


def test_a_checkpoint_written_before_checksums_loads_with_a_warning_and_exports_sealed(tmp_path, caplog):
    algo = trained("fastsac", phases=1)
    old = tmp_path / "old.pt"
    unsealed = {**ck.build_checkpoint(identity(), algo.state_dict(), counters(100)), "format_version": 1}
    ck.atomic_save(unsealed, old)  # what format version 1 wrote: the checkpoint itself, unsealed
    with caplog.at_level(logging.WARNING, logger="offpolicy.checkpoint"):
        data = ck.load_checkpoint(old)
    assert [r.getMessage() for r in caplog.records] == [
        f"checkpoint {old} has format version 1, written without a checksum: loaded without verifying its contents"
    ]
    fresh = small("fastsac")
    ck.load_algorithm_state(fresh, data, old)
    obs = {"actor": torch.randn(9, OBS_DIM)}
    assert torch.equal(fresh.act(obs), algo.act(obs))
    policy = ck.export_policy(old, tmp_path / "policy.pt")  # rewritten in the current, sealed format
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="offpolicy.checkpoint"):
        assert ck.load_checkpoint(policy)["format_version"] == ck.FORMAT_VERSION
    assert caplog.records == []
    sealed = torch.load(policy, weights_only=True)
    assert sealed["sha256"] == hashlib.sha256(sealed["payload"].numpy().tobytes()).hexdigest()


def test_a_mismatch_shows_this_runs_own_sizes(tmp_path):
    """Was: a checkpoint of another task was refused with the checkpoint's sizes given as this run's."""
    path = write(tmp_path / "c.pt")  # synthetic: 7 observation entries, 3 actions
    data = ck.load_checkpoint(path)
    checkpoint = f"checkpoint {path} is for algo=fastsac env=synthetic obs_dims={{'actor': 7}} action_dim=3"
    cases = [
        # Ant-v5 without contact forces: qpos[2:] (13) and qvel (14); 8 motors
        ({"env": "ant"}, "algo=fastsac env=ant obs_dims={'actor': 27} action_dim=8 (mismatch: env)"),
        # Hopper-v5: qpos[1:] (5) and qvel (6); 3 motors
        ({"env": "hopper", "env_options": {}}, "algo=fastsac env=hopper obs_dims={'actor': 11} action_dim=3 (mismatch: env)"),
        # this run's task cannot be built with these options: no sizes rather than wrong ones
        ({"env": "hopper", "env_options": {"nope": 1}}, "algo=fastsac env=hopper (mismatch: env)"),
        ({"algo": "flashsac"}, "algo=flashsac env=synthetic (mismatch: algo)"),
        ({"env": "hopper", "obs_dims": {"actor": 5}}, "algo=fastsac env=hopper obs_dims={'actor': 5} action_dim=3 (mismatch: env, obs_dims)"),
    ]  # fmt: skip
    for given, this in cases:
        with pytest.raises(CheckpointError) as err:
            ck.check_compatible(data, path, **given)
        assert str(err.value) == f"{checkpoint}; this run is {this}", given


def test_mismatch_names_every_differing_field(tmp_path):
    path = write(tmp_path / "c.pt", "fastsac")
    data = ck.load_checkpoint(path)
    ck.check_compatible(data, path, algo="fastsac", env="synthetic", obs_dims={"actor": OBS_DIM}, action_dim=3)
    with pytest.raises(CheckpointError) as err:
        ck.check_compatible(data, path, algo="flashsac", env="ant", obs_dims={"actor": 27}, action_dim=3)
    msg = str(err.value)
    assert msg == (
        f"checkpoint {path} is for algo=fastsac env=synthetic obs_dims={{'actor': 7}} action_dim=3; "
        "this run is algo=flashsac env=ant obs_dims={'actor': 27} action_dim=3 (mismatch: algo, env, obs_dims)"
    )
    # same names and dims but other network sizes: refused with one line, nothing half-loaded silently
    with pytest.raises(CheckpointError, match=r"does not fit this run's fastsac networks") as err:
        ck.load_algorithm_state(small("fastsac", critic_hidden_dim=64), data, path)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- the real CLI


def _train(tmp_path: Path, name: str, *overrides: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "offpolicy.train", *TINY_TRAIN, *overrides, f"hydra.run.dir={tmp_path / name}"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_resume_through_the_cli_carries_the_counters_on(tmp_path):
    first = _train(tmp_path, "first", "train.total_env_steps=96", "checkpoint.interval_env_steps=48")
    assert first.returncode == 0, first.stderr[-3000:]
    ckdir = tmp_path / "first" / "checkpoints"
    assert sorted(p.name for p in ckdir.iterdir()) == ["latest.pt", "step_48.pt", "step_96.pt"]
    saved = ck.load_checkpoint(ckdir / "latest.pt")
    first_summary = json.loads((tmp_path / "first" / "summary.json").read_text())
    assert saved["counters"]["env_steps"] == first_summary["env_steps"] == 96
    assert saved["counters"]["updates"] == first_summary["updates"] > 0
    assert saved["counters"]["policy_version"] == first_summary["policy_version"] > 0
    assert saved["num_envs"] == 4 and saved["env"] == "hopper" and saved["algo"] == "fastsac"

    second = _train(
        tmp_path,
        "second",
        "train.total_env_steps=160",
        f"train.resume={ckdir / 'latest.pt'}",
        "logger.interval_env_steps=16",
    )
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    rows = _rows(tmp_path / "second")
    assert rows[0]["env_steps"] == 96 + 16 and rows[-1]["env_steps"] == 160  # continues, does not restart at 0
    assert summary["env_steps"] == 160 and summary["resumed_from_env_steps"] == 96
    assert summary["replay_size"] == 160 - 96  # replay is not in the checkpoint: refilled by the restored actor
    assert summary["updates"] > first_summary["updates"]
    assert summary["policy_version"] > first_summary["policy_version"]
    final = ck.load_checkpoint(tmp_path / "second" / "checkpoints" / "latest.pt")
    assert final["counters"]["env_steps"] == 160 and final["counters"]["updates"] == summary["updates"]


def hopper_checkpoint(path: Path) -> Path:
    """A real hopper/fastsac checkpoint of 4 training rows, written without training (dimensions from the env)."""
    import envs

    env = envs.make("hopper", 1)
    obs_dim, act_dim = env.spec.obs_dims["actor"], env.spec.action_dim
    env.close()
    hopper = EnvSpec(
        "hopper", 4, {"actor": obs_dim}, act_dim, -np.ones(act_dim), np.ones(act_dim), 0.008, 1000,
        reward_range=env.spec.reward_range,
    )  # fmt: skip
    algo = make_algorithm(OmegaConf.create({"name": "fastsac", **SMALL["fastsac"]}), hopper, "cpu")
    ident = RunIdentity("fastsac", "hopper", {"actor": obs_dim}, act_dim, 4)
    config = {"algo": {"name": "fastsac", **SMALL["fastsac"]}, "env": {"name": "hopper", "options": {}}}
    checkpoint = ck.build_checkpoint(ident, algo.state_dict(), {**counters(8), "ticks": 2}, config=config)
    return ck.save_checkpoint(path, checkpoint)


def test_every_cli_refuses_a_checkpoint_with_flipped_bytes_in_one_line(tmp_path):
    """train.resume=, offpolicy.eval checkpoint= and export-policy: exit status 5, one line, nothing written."""
    corrupt = hopper_checkpoint(tmp_path / "corrupt.pt")
    flip_bytes(corrupt)
    policy, eval_dir = tmp_path / "policy.pt", tmp_path / "eval"
    runs = {
        "export-policy": [sys.executable, "-m", "offpolicy.checkpoint", "export-policy", str(corrupt), str(policy)],
        "eval": [sys.executable, "-m", "offpolicy.eval", f"checkpoint={corrupt}", f"hydra.run.dir={eval_dir}"],
    }
    procs = {
        name: subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120) for name, cmd in runs.items()
    }
    procs["train.resume"] = _train(
        tmp_path, "resume", "train.total_env_steps=64", f"train.resume={corrupt}", timeout=120
    )
    for name, proc in procs.items():
        assert proc.returncode == 5, (name, proc.returncode, proc.stderr[-2000:])
        assert [x for x in proc.stderr.splitlines() if x.strip()] == [f"[offpolicy] {corrupt_line(corrupt)}"], name
    assert not policy.exists() and not (eval_dir / "eval.json").exists()
    assert not (tmp_path / "resume" / "summary.json").exists()  # never started fresh


def test_cli_refuses_bad_resume_checkpoints_in_one_line(tmp_path):
    good = hopper_checkpoint(tmp_path / "good.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:1000])
    # the export CLI: a policy file from a real checkpoint, and one line (exit 5) for a broken one
    policy = tmp_path / "policy.pt"
    cli = [sys.executable, "-m", "offpolicy.checkpoint", "export-policy"]
    proc = subprocess.run([*cli, str(good), str(policy)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith(f"[offpolicy] wrote {policy} ("), proc.stderr
    assert ck.load_checkpoint(policy)["policy_only"] is True
    proc = subprocess.run([*cli, str(truncated), str(tmp_path / "x.pt")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 5 and not (tmp_path / "x.pt").exists()
    assert proc.stderr.startswith(f"[offpolicy] checkpoint {truncated} is unreadable (truncated or not a checkpoint)")
    assert len(proc.stderr.strip().splitlines()) == 1
    cases = [
        (tmp_path / "missing.pt", [], f"checkpoint not found: {tmp_path / 'missing.pt'}"),
        (truncated, [], f"checkpoint {truncated} is unreadable (truncated or not a checkpoint)"),
        (
            good,
            ["env=ant"],  # this run's sizes are the Ant's (27 observation entries, 8 actions), not the checkpoint's
            f"checkpoint {good} is for algo=fastsac env=hopper obs_dims={{'actor': 11}} action_dim=3; "
            "this run is algo=fastsac env=ant obs_dims={'actor': 27} action_dim=8 (mismatch: env)",
        ),
        (policy, [], f"checkpoint {policy} holds only a policy (offpolicy.eval can score it)"),
    ]
    for i, (path, extra, message) in enumerate(cases):
        proc = _train(tmp_path, f"bad{i}", "train.total_env_steps=64", f"train.resume={path}", *extra, timeout=120)
        assert proc.returncode == 5, (proc.returncode, proc.stderr[-2000:])
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"[offpolicy] {message}"), proc.stderr
        assert not (tmp_path / f"bad{i}" / "summary.json").exists()  # never started fresh
