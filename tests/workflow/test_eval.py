"""Evaluation: eval rows inside training never reach replay; `python -m offpolicy.eval` on a checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from gl import gl_backend_or_skip
from omegaconf import OmegaConf
from sizes import SMALL

from envs.core import EnvSpec
from offpolicy import checkpoint as ck
from offpolicy.algorithms import make_algorithm
from offpolicy.runtime.snapshot_eval import MeanPolicy, SampledPolicy

REPO = Path(__file__).resolve().parents[2]
RUNTIME_TESTS = REPO / "tests" / "runtime"
if str(RUNTIME_TESTS) not in sys.path:  # fake_env; the spawned collector inherits sys.path
    sys.path.insert(0, str(RUNTIME_TESTS))

SMALL_FASTSAC = {"name": "fastsac", "batch_size": 32, "critic_hidden_dim": 32, "actor_hidden_dim": 16, "num_atoms": 11}


# --------------------------------------------------------------------------- eval rows during training


class CountingAlgorithm:
    """Wraps the test stand-in and records how many rows each inference call saw."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.actor = inner.actor
        self.updates_per_step = inner.updates_per_step
        self.batch_size = inner.batch_size
        self.explore_rows: list[int] = []
        self.act_rows: list[int] = []

    def explore(self, obs, reset_mask):
        self.explore_rows.append(int(obs["actor"].shape[0]))
        assert reset_mask.shape[0] == obs["actor"].shape[0]
        return self.inner.explore(obs, reset_mask)

    def act(self, obs):
        return self.inner.act(obs)

    def snapshot_actor(self):
        self.inner.snapshot_actor()

    def act_snapshot(self, obs):
        self.act_rows.append(int(obs["actor"].shape[0]))
        return self.inner.act_snapshot(obs)

    def update_phase(self, replay, num_updates):
        return self.inner.update_phase(replay, num_updates)

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state):
        self.inner.load_state_dict(state)


def test_eval_rows_get_the_snapshot_mean_action_and_never_reach_replay(tmp_path):
    from standin import make_standin

    from offpolicy.runtime.runner import Runner

    record = tmp_path / "env_record.npz"
    train_rows, eval_rows, ticks = 4, 2, 30
    cfg = OmegaConf.create(
        {
            "seed": 0,
            "device": "cpu",
            "experiment": "test",
            "env": {"name": "fake", "num_envs": train_rows, "options": {"record_path": str(record)}},
            "eval": {
                "num_envs": eval_rows,
                "episodes": 2,
                "interval_s": None,
                "interval_env_steps": 40,
                "final": False,
            },
            "checkpoint": {"interval_env_steps": 0},
            "algo": {"name": "standin", "updates_per_step": 1, "batch_size": 16, "hidden": 16},
            "train": {"total_env_steps": train_rows * ticks, "updates_per_step": None, "learning_starts": 8},
            "affinity": {"mode": "auto", "learner_count": 1},
            "replay": {"capacity": 1_000_000},
            "logger": {"name": "none", "interval_env_steps": 40},
            "runtime": {"trace": False, "collector_timeout_s": 30.0, "env_factory": "fake_env:make"},
        }
    )
    made = {}

    def factory(algo_cfg, spec, device):
        made["spec"] = spec
        made["algo"] = CountingAlgorithm(make_standin(algo_cfg, spec, device))
        return made["algo"]

    runner = Runner(cfg, tmp_path / "run", algorithm_factory=factory)
    summary = runner.run()
    algo = made["algo"]

    assert made["spec"].num_envs == train_rows  # per-env exploration state covers training rows only
    random_ticks = 8 // train_rows
    assert algo.explore_rows == [train_rows] * (ticks - random_ticks)
    assert algo.act_rows == [eval_rows] * ticks  # eval rows act with the frozen snapshot from the first tick on
    replay = runner.replay
    assert replay.total_added == len(replay) == train_rows * ticks == summary["replay_size"]
    assert summary["env_steps"] == train_rows * ticks and summary["eval_envs"] == eval_rows
    # fake env obs column 0 is the env row: no row >= train_rows ever reached replay
    rows_in_replay = replay.obs["actor"][: len(replay), 0]
    assert torch.equal(torch.unique(rows_in_replay), torch.arange(train_rows, dtype=torch.float32))
    # the collector stepped every row: eval rows are real envs
    produced = np.load(record)
    assert produced["action"].shape == (ticks, train_rows + eval_rows, 3)
    # replay holds exactly the training rows the collector produced, in order
    expected = produced["obs/actor"][:, :train_rows].reshape(-1, produced["obs/actor"].shape[-1])
    np.testing.assert_array_equal(replay.obs["actor"][: len(replay)].numpy(), expected)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    eval_points = [r for r in rows if "eval/return" in r]
    # a snapshot every 40 env steps (10 ticks); each takes at most 1 + 7 ticks (fake episodes last <= 7 steps)
    assert len(eval_points) >= 2 and all(r["eval/episodes"] == 2 and r["eval/length"] <= 7 for r in eval_points)


# --------------------------------------------------------------------------- offline evaluation of a checkpoint


def task_checkpoint(path: Path, task: str = "hopper", acting: bool = False, algo: str = "fastsac") -> Path:
    """A real <task>/<algo> checkpoint of 4 training rows with untrained tiny networks (no training needed to
    test evaluation).

    FastSAC's actor's mean head starts at zero, so its mean action is zero whatever it observes; with `acting`
    the head gets random weights, so the action depends on every observation entry.
    """
    import envs

    env = envs.make(task, 1)
    s = env.spec
    env.close()
    train_spec = EnvSpec(
        task, 4, dict(s.obs_dims), s.action_dim, s.action_low, s.action_high, s.dt, 1000,
        reward_range=s.reward_range,
    )  # fmt: skip
    algo_cfg = SMALL_FASTSAC if algo == "fastsac" else {"name": algo, **SMALL[algo]}
    torch.manual_seed(0)
    algorithm = make_algorithm(OmegaConf.create(algo_cfg), train_spec, "cpu")
    if acting:
        with torch.no_grad():
            algorithm.actor.mean_head.weight.normal_()
    ident = ck.RunIdentity(algo, task, dict(s.obs_dims), s.action_dim, 4)
    config = {"algo": algo_cfg, "env": {"name": task, "num_envs": 4, "options": {}}}
    counters = {"env_steps": 400, "ticks": 100, "updates": 50, "policy_version": 50}
    return ck.save_checkpoint(path, ck.build_checkpoint(ident, algorithm.state_dict(), counters, config=config))


def eval_cfg(checkpoint: Path, **over):
    from hydra import compose, initialize_config_dir

    overrides = [f"checkpoint={checkpoint}", *(f"{k}={v}" for k, v in over.items())]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="eval", overrides=overrides)


def test_evaluate_writes_eval_json_with_deterministic_returns(tmp_path):
    from offpolicy.eval import evaluate

    path = task_checkpoint(tmp_path / "hopper.pt")
    cfg = eval_cfg(path, episodes=3, max_episode_steps=25)
    first = evaluate(cfg, tmp_path / "a")
    second = evaluate(cfg, tmp_path / "b")
    saved = json.loads((tmp_path / "a" / "eval.json").read_text())
    assert saved["episodes"] == 3 and len(saved["returns"]) == 3 and saved["video"] is None
    assert saved["env"] == "hopper" and saved["algo"] == "fastsac" and saved["checkpoint_env_steps"] == 400
    assert all(1 <= n <= 25 for n in saved["lengths"])
    assert saved["return_mean"] == pytest.approx(np.mean(saved["returns"]))
    assert saved["return_median"] == pytest.approx(np.median(saved["returns"]))
    assert saved["return_min"] == min(saved["returns"]) and "reference" not in saved
    assert first["returns"] == second["returns"]  # mean actions, seeded resets: repeatable
    assert saved["compiled_policy"] is False


# --------------------------------------------------------------------------- action=sample


def small_algorithm(name: str, rows: int, low: list[float], high: list[float]):
    """(spec, algorithm): a tiny `name` built for `rows` env rows on a 5-dim observation, with actions in [low, high]."""
    spec = EnvSpec(
        "fake", rows, {"actor": 5}, len(low), np.asarray(low, np.float32), np.asarray(high, np.float32), 0.01, 1000,
        reward_range=(0.0, 1.0),
    )  # fmt: skip
    torch.manual_seed(0)
    return spec, make_algorithm(OmegaConf.create({"name": name, **SMALL[name]}), spec, "cpu")


def test_sampled_actions_are_the_training_tanh_gaussian_around_the_mean_action_in_env_units():
    """FastSAC samples tanh(mean + std * N(0, 1)): over 4000 rows seeing one observation, atanh of the actions
    (mapped back from env units) has the actor's mean and std per dimension; the mean policy gives tanh(mean)."""
    low, high = [-2.0, 0.0, -0.5], [2.0, 1.0, 1.5]
    spec, algo = small_algorithm("fastsac", 4096, low, high)
    with torch.no_grad():
        algo.actor.mean_head.weight.normal_(std=0.3)
        algo.actor.log_std_head.bias.fill_(0.5)  # std near 0.4-0.6: a spread well above the sampling error
    obs = np.tile(np.array([[0.3, -1.2, 0.8, 2.0, -0.4]], np.float32), (4000, 1))
    rows = replace(spec, num_envs=4000)  # fewer rows than built: padded and dropped again
    cpu = torch.device("cpu")
    with torch.no_grad():
        mean, log_std = algo.actor.dist(algo.actor.normalize(torch.from_numpy(obs[:1])))
    mean, std = mean[0].numpy(), log_std[0].exp().numpy()
    mid, half = (np.asarray(high) + np.asarray(low)) / 2, (np.asarray(high) - np.asarray(low)) / 2
    sampled = SampledPolicy(algo, rows, cpu)({"actor": obs})
    assert sampled.shape == (4000, 3) and (sampled >= low).all() and (sampled <= high).all()
    z = np.arctanh(np.clip((sampled - mid) / half, -1 + 1e-6, 1 - 1e-6))
    np.testing.assert_allclose(z.mean(0), mean, atol=float(5 * std.max() / np.sqrt(4000)))
    np.testing.assert_allclose(z.std(0), std, rtol=0.06)
    deterministic = MeanPolicy(algo, rows, cpu)({"actor": obs})
    np.testing.assert_allclose(deterministic, np.tile(mid + half * np.tanh(mean), (4000, 1)), rtol=1e-5, atol=1e-6)


def test_sampled_policy_pads_to_the_built_rows_restarts_the_noise_once_and_keeps_row_order():
    """FlashSAC's held noise is sized for the rows it was built with (its `explore` refuses any other count): the
    policy pads 3 rows to 8 with zeros, asks for a noise restart on the first call only and returns rows 0-2."""
    spec, algo = small_algorithm("flashsac", 8, [-1.0, -3.0], [1.0, 3.0])
    calls = []
    explore = algo.explore

    def spy(obs, reset_mask):
        out = explore(obs, reset_mask)
        calls.append((obs["actor"].clone(), reset_mask.clone(), out.clone()))
        return out

    algo.explore = spy
    obs = np.arange(15, dtype=np.float32).reshape(3, 5) / 10
    policy = SampledPolicy(algo, replace(spec, num_envs=3), torch.device("cpu"))
    first, second = policy({"actor": obs}), policy({"actor": obs})
    assert first.shape == second.shape == (3, 2)
    sent, reset, out = calls[0]
    assert sent.shape == (8, 5) and torch.equal(sent[:3], torch.from_numpy(obs)) and not sent[3:].any()
    assert reset.all() and not calls[1][1].any()  # a fresh episode for every row, then the noise is held
    np.testing.assert_allclose(first, out[:3].numpy() * np.array([1.0, 3.0]), rtol=1e-6)
    with pytest.raises(ValueError, match="9 rows to act for; sampling acts for at most 8"):
        SampledPolicy(algo, replace(spec, num_envs=9), torch.device("cpu"))


def test_evaluate_with_action_sample_draws_other_actions_than_the_mean_and_refuses_a_reference(tmp_path):
    from offpolicy.config import ConfigError
    from offpolicy.eval import evaluate

    path = task_checkpoint(tmp_path / "hopper.pt", acting=True)
    mean = evaluate(eval_cfg(path, episodes=4, max_episode_steps=40), tmp_path / "mean")
    sampled = evaluate(eval_cfg(path, episodes=4, max_episode_steps=40, action="sample"), tmp_path / "s1")
    again = evaluate(eval_cfg(path, episodes=4, max_episode_steps=40, action="sample"), tmp_path / "s2")
    saved = json.loads((tmp_path / "s1" / "eval.json").read_text())
    assert saved["action"] == "sample" and mean["action"] == "mean" and saved["returns"] == sampled["returns"]
    assert sampled["returns"] != mean["returns"]  # the same resets, other actions
    assert again["returns"] == sampled["returns"]  # torch seeded with `seed`: a sampled evaluation repeats
    # more episodes than training rows: two batches of 3 rows, the sixth episode run and dropped
    five = evaluate(eval_cfg(path, episodes=5, max_episode_steps=40, action="sample"), tmp_path / "s5")
    assert five["episodes"] == len(five["returns"]) == len(five["lengths"]) == 5
    with pytest.raises(ConfigError) as err:
        evaluate(eval_cfg(path, action="sample", reference="gymnasium"), tmp_path / "refused")
    assert str(err.value) == "action=sample: reference=gymnasium re-scores the mean action only; valid with it: mean"
    assert not (tmp_path / "refused" / "eval.json").exists()


def test_sampled_episodes_run_in_as_few_even_batches_as_the_training_rows_allow():
    from offpolicy.eval import batch_rows

    assert batch_rows(16, "mean", 4) == 16  # the mean action keeps no per-row state: all episodes at once
    # (episodes, training rows) -> rows per batch: ceil(episodes / ceil(episodes / training rows))
    cases = {(16, 4): 4, (16, 12): 8, (16, 16): 16, (5, 4): 3, (6, 4): 3, (3, 4): 3, (128, 1024): 128, (1, 1): 1}
    assert {(n, rows): batch_rows(n, "sample", rows) for n, rows in cases} == cases


def test_action_sample_runs_the_default_16_episodes_in_batches_of_the_training_rows(tmp_path, monkeypatch):
    """Was: `action=sample` with the default 16 episodes was refused for a run of fewer than 16 training rows.
    FlashSAC holds its noise per training row: 16 episodes of a 4-row run go in 4 batches of 4, each from fresh
    resets and with every row's noise restarted exactly once, at the batch's first step."""
    import offpolicy.runtime.runner
    from offpolicy.eval import evaluate

    path = task_checkpoint(tmp_path / "flashsac.pt", algo="flashsac")
    calls: list[tuple[int, torch.Tensor]] = []
    build = offpolicy.runtime.runner.default_algorithm_factory

    def spying_factory(algo_cfg, spec, device):
        algorithm = build(algo_cfg, spec, device)
        explore = algorithm.explore

        def spy(obs, reset_mask):
            calls.append((int(obs["actor"].shape[0]), reset_mask.clone()))
            return explore(obs, reset_mask)

        algorithm.explore = spy
        return algorithm

    monkeypatch.setattr(offpolicy.runtime.runner, "default_algorithm_factory", spying_factory)
    result = evaluate(eval_cfg(path, action="sample", max_episode_steps=30), tmp_path / "all")
    assert result["episodes"] == len(result["returns"]) == 16 and len(set(result["returns"])) == 16
    assert {rows for rows, _ in calls} == {4}  # the held noise always sees its 4 rows
    steps = [max(result["lengths"][i : i + 4]) for i in range(0, 16, 4)]  # a batch steps until its last row ends
    assert len(calls) == sum(steps)
    firsts = np.cumsum([0, *steps[:-1]]).tolist()
    assert [i for i, (_, reset) in enumerate(calls) if reset.any()] == firsts
    assert all(calls[i][1].all() for i in firsts)
    calls.clear()
    four = evaluate(eval_cfg(path, action="sample", max_episode_steps=30, episodes=4), tmp_path / "four")
    assert result["returns"][:4] == four["returns"]  # the first batch is the 4-episode evaluation


def test_eval_cli_with_action_sample_as_the_readme_writes_it(tmp_path):
    """`python -m offpolicy.eval checkpoint=<path> action=sample` on a run of 4 training rows: 16 episodes."""
    path = task_checkpoint(tmp_path / "hopper.pt", acting=True)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "offpolicy.eval", f"checkpoint={path}", "action=sample", f"hydra.run.dir={out}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "over 16 episodes" in proc.stdout
    saved = json.loads((out / "eval.json").read_text())
    assert saved["action"] == "sample" and saved["episodes"] == len(saved["returns"]) == 16


def test_evaluation_builds_the_policy_eagerly_unless_asked_to_compile():
    """A re-score makes a few thousand policy calls: compiling them (seconds to a minute on a cold cache)
    costs more than it saves, so evaluation turns torch.compile and CUDA graphs off; the rest is as trained."""
    from offpolicy.eval import eval_algo_config

    trained = {"compile": True, "cuda_graphs": True, "amp": "fp16", "actor_hidden_dim": 64}
    assert eval_algo_config(trained, False) == {**trained, "compile": False, "cuda_graphs": False}
    assert eval_algo_config(trained, True) == trained


def test_reference_gymnasium_rescores_in_gymnasiums_own_env_with_and_without_our_reward_options(tmp_path):
    from offpolicy.eval import evaluate

    path = task_checkpoint(tmp_path / "humanoid.pt", "humanoid")
    result = evaluate(eval_cfg(path, episodes=4, reference="gymnasium"), tmp_path / "out")
    ref = result["reference"]
    ours, default = ref["gymnasium"], ref["gymnasium_default_reward"]
    assert ours["id"] == "Humanoid-v5" and ours["kwargs"]["contact_cost_weight"] == 0.0
    assert "contact_cost_weight" not in default["kwargs"]  # Gymnasium's default contact cost applies
    assert default["kwargs"]["include_cinert_in_observation"] is False  # the policy still gets its inputs
    assert ours["episodes"] == default["episodes"] == 4
    # same seeds, same deterministic policy, same physics: the same episodes, minus the contact cost
    assert ours["lengths"] == default["lengths"]
    assert all(d < o for d, o in zip(default["returns"], ours["returns"], strict=True))
    assert ours["mean"] == pytest.approx(np.mean(ours["returns"])) and ours["min"] == min(ours["returns"])
    # Gymnasium's humanoid and ours: an untrained policy falls within a similar number of steps
    assert abs(np.mean(ours["lengths"]) - result["length_mean"]) < 0.5 * result["length_mean"]
    saved = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert saved["reference"]["gymnasium"]["returns"] == ours["returns"]


def replaying_reference_env(name: str, seed: int, qpos: np.ndarray, qvel: np.ndarray):
    """A stand-in for `envs.dmc.reference_env`: dm_control's own env for `name`, whose resets start episode k
    from (qpos[k], qvel[k]) instead of drawing a state, and whose steps restart the solver's warm start at zero
    as ours do (test_dmc_parity's exact mode): from the same state, the same actions give the same rewards."""
    import envs.dmc

    real = envs.dmc.reference_env

    def reference_env(asked_name, asked_seed=None):
        assert (asked_name, asked_seed) == (name, seed)
        env = real(asked_name, asked_seed)
        rows = iter(range(len(qpos)))

        def initialize_episode(physics):  # inside dm_control's reset_context: mj_forward follows
            k = next(rows)
            physics.data.qpos[:], physics.data.qvel[:] = qpos[k], qvel[k]

        step = env.step

        def step_from_a_cold_start(action):
            env.physics.data.qacc_warmstart[:] = 0.0
            return step(action)

        env.task.initialize_episode, env.step = initialize_episode, step_from_a_cold_start
        return env

    return reference_env


@pytest.fixture
def one_torch_thread():
    """Actor inference on one thread: torch's OpenMP threads and the env pool's would share this machine's
    cores (on 2 cores a 1000-step evaluation takes 10x longer)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.mark.filterwarnings("ignore:.*DISPLAY environment variable is missing")
def test_reference_dm_control_from_our_initial_states_gives_our_returns_to_the_bit(
    tmp_path, monkeypatch, one_torch_thread
):
    import envs
    import envs.dmc
    from offpolicy.eval import evaluate

    task, seed = "dmc_cheetah_run", 3
    path = task_checkpoint(tmp_path / "cheetah.pt", task, acting=True)
    real = evaluate(eval_cfg(path, episodes=2, seed=seed, reference="dm_control", device="cpu"), tmp_path / "real")
    ref = real["reference"]["dm_control"]  # dm_control's own resets
    assert (ref["domain"], ref["task"], ref["episodes"], ref["lengths"]) == ("cheetah", "run", 2, [1000, 1000])
    assert ref["mean"] == pytest.approx(np.mean(ref["returns"])) and ref["min"] == min(ref["returns"])
    assert ref["std"] == pytest.approx(np.std(ref["returns"])) and ref["length_mean"] == 1000.0
    assert len(set(ref["returns"])) == 2 and set(ref["returns"]).isdisjoint(real["returns"])  # other initial states
    saved = json.loads((tmp_path / "real" / "eval.json").read_text())
    assert saved["reference"]["dm_control"] == ref

    # One episode: both sides then run the policy on one row (a batch of another size may round differently).
    env = envs.make(task, 1, seed=seed)  # the initial state evaluate's own episode starts from
    env.reset()
    qpos, qvel = env.physics_qpos_qvel()
    env.close()
    monkeypatch.setattr(envs.dmc, "reference_env", replaying_reference_env(task, seed, qpos, qvel))
    ours = evaluate(eval_cfg(path, episodes=1, seed=seed, reference="dm_control", device="cpu"), tmp_path / "replayed")
    replayed = ours["reference"]["dm_control"]
    # the same policy from the same state in dm_control's physics: the same 1000 actions and rewards, to the bit
    assert ours["lengths"] == replayed["lengths"] == [1000] and ours["return_mean"] > 0
    assert replayed["returns"] == ours["returns"] and replayed["mean"] == ours["return_mean"]


@pytest.mark.parametrize(
    ("task", "reference", "valid"),
    [("dmc_cheetah_run", "gymnasium", "none, dm_control"), ("hopper", "dm_control", "none, gymnasium")],
)
def test_a_reference_the_task_does_not_reproduce_is_refused_in_one_line(tmp_path, task, reference, valid):
    from offpolicy.config import ConfigError
    from offpolicy.eval import evaluate

    path = task_checkpoint(tmp_path / f"{task}.pt", task)
    suite = {"gymnasium": "Gymnasium", "dm_control": "DeepMind Control Suite"}[reference]
    line = f"reference={reference}: {task} is not a {suite} task; valid for this task: {valid}"
    with pytest.raises(ConfigError) as err:
        evaluate(eval_cfg(path, episodes=1, reference=reference), tmp_path / "out")
    assert str(err.value) == line
    assert not (tmp_path / "out" / "eval.json").exists()
    if reference == "gymnasium":  # the CLI: exit status 2 and that line (this worktree's code on PYTHONPATH)
        cmd = [sys.executable, "-m", "offpolicy.eval", f"checkpoint={path}", f"reference={reference}"]
        cmd.append(f"hydra.run.dir={tmp_path / 'cli'}")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert [x for x in proc.stderr.splitlines() if x.strip()] == [f"[offpolicy] invalid config: {line}"]


def test_evaluate_refuses_another_env_in_one_line(tmp_path):
    path = task_checkpoint(tmp_path / "hopper.pt")
    cmd = [sys.executable, "-m", "offpolicy.eval", f"checkpoint={path}", "env=ant", f"hydra.run.dir={tmp_path / 'o'}"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 5, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        f"[offpolicy] checkpoint {path} is for algo=fastsac env=hopper obs_dims={{'actor': 11}} action_dim=3; "
        f"this run is algo=fastsac env=ant obs_dims={{'actor': 27}} action_dim=8 (mismatch: env)"  # Ant's own sizes
    ], proc.stderr


def test_eval_cli_renders_an_mp4_of_the_first_episode(tmp_path):
    gl_backend_or_skip(torch.cuda.is_available())  # what the CLI will pick; it makes that choice itself
    import imageio.v2 as imageio

    path = task_checkpoint(tmp_path / "hopper.pt")
    out = tmp_path / "out"
    video = tmp_path / "videos" / "hop.mp4"
    cmd = [
        sys.executable,
        "-m",
        "offpolicy.eval",
        f"checkpoint={path}",
        "env=hopper",
        "episodes=2",
        "max_episode_steps=12",
        "video=true",
        f"video_path={video}",
        "video_width=64",
        "video_height=48",
        "logger=wandb",
        "logger.mode=offline",  # W&B without network: the video still lands in the run's media
        f"hydra.run.dir={out}",
    ]
    env = {**os.environ, "WANDB_SILENT": "true"}
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[offpolicy] eval fastsac on hopper" in proc.stdout
    result = json.loads((video.parent / "eval.json").read_text())  # next to the video
    assert result["video"] == str(video) and result["episodes"] == 2
    frames = [frame for frame in imageio.get_reader(video)]
    assert len(frames) == result["video_frames"] == result["lengths"][0]  # one frame per step of episode 0
    assert frames[0].shape == (48, 64, 3) and np.ptp(np.stack(frames)) > 0  # a picture, not a blank
    assert result["video_fps"] == pytest.approx(125.0)  # hopper: dt = 0.008 s, real time
    logged = list((out / "wandb").glob("offline-run-*/files/media/videos/eval/video_*.mp4"))
    assert len(logged) == 1 and logged[0].read_bytes() == video.read_bytes()


FLOORS = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="10 10 .1"/>
    <geom name="endless" type="plane" size="0 0 1" pos="0 0 -1"/>
    <geom name="turned" type="plane" size="10 20 .1" pos="5 0 0" euler="0 0 30"/>
    <body name="runner" pos="0 0 1"><freejoint/><geom type="sphere" size=".1"/></body>
  </worldbody>
</mujoco>
"""


def test_finite_floors_are_widened_under_every_followed_point_in_their_own_frame():
    """dm_control's floor is drawn 100 m each way and a humanoid-run policy runs past it: the video widens each
    finite world plane to reach `margin` beyond the farthest followed point, measured in the plane's frame."""
    import mujoco

    from offpolicy.eval import drawn_plane_sizes

    model = mujoco.MjModel.from_xml_string(FLOORS)
    before = model.geom_size.copy()
    points = np.array([[30.0, -8.0, 1.0], [-12.0, 4.0, 0.0]])
    sizes = drawn_plane_sizes(model, points, margin=5.0)
    # floor: |x| reaches 30 and |y| 8 (the negative point sets it), plus 5
    assert sizes[0] == pytest.approx((35.0, 13.0))
    # turned 30 degrees about z at (5, 0, 0): local x = dx cos30 + dy sin30, local y = -dx sin30 + dy cos30
    # point 1 (25, -8): (17.65, -19.43); point 2 (-17, 4): (-12.72, 11.96); 20 is already wider than needed
    c, s_ = np.cos(np.radians(30)), np.sin(np.radians(30))
    assert sizes[2] == pytest.approx((25 * c - 8 * s_ + 5.0, 25 * s_ + 8 * c + 5.0))
    assert sizes[2] == pytest.approx((22.65, 24.43), abs=0.01)
    assert 1 not in sizes  # size 0: drawn without bound already
    assert drawn_plane_sizes(model, np.array([[3.0, -2.0, 0.0]]), margin=5.0) == {}  # under the floor: as it is
    np.testing.assert_array_equal(model.geom_size, before)  # only reports; the renderer widens and restores


def test_the_video_draws_the_floor_under_a_runner_far_past_its_edge(tmp_path):
    """Rendering only: a state 150 m out on dm_control's humanoid floor (drawn to 100 m) shows floor under the
    runner, and the model's sizes are back as they were afterwards."""
    backend = gl_backend_or_skip()
    script = """
import sys, imageio.v2 as imageio, numpy as np
from dm_control import suite
from offpolicy.eval import render_video
model = suite.load("humanoid", "run").physics.model.ptr
before = model.geom_size.copy()
qpos = model.qpos0.copy()
rows = []
for x in (0.0, 150.0):
    qpos[0] = x
    render_video(model, [(qpos.copy(), np.zeros(model.nv))], f"{sys.argv[1]}/{int(x)}.mp4", 40, 64, 64)
    frame = imageio.get_reader(f"{sys.argv[1]}/{int(x)}.mp4").get_data(0).astype(float)
    rows.append(frame[-16:].mean())  # the bottom of the frame: floor, or the sky's dark blue
print(abs(rows[0] - rows[1]), bool((model.geom_size == before).all()))
"""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MUJOCO_GL": backend}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    change, restored = proc.stdout.split()[-2:]
    assert float(change) < 10 and restored == "True"  # the same floor at 150 m as at the start
