"""Run outputs: metrics files, W&B init arguments and modes, console progress, and real offline W&B runs."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from sizes import TINY_HOPPER_CLI

from offpolicy.config import validate_train_config
from offpolicy.logger import LearningRate, MetricsLogger, Progress, RunContext, wandb_init_kwargs, wandb_mode

REPO = Path(__file__).resolve().parents[2]


def cfg(**logger):
    """A validated run config with these logger keys (the run's own algorithm and env: their checks skipped)."""
    logger = {"name": "none", **logger}
    if logger["name"] == "wandb":  # the W&B keys exist only in that logger's schema
        logger = {"experiment": "${experiment}", "group": None, "tags": ["t1"], **logger}
    raw = OmegaConf.create(
        {
            "seed": 3,
            "experiment": "ablation",
            "env": {"name": "hopper", "num_envs": 4},
            "algo": {"name": "fastsac", "batch_size": 64},
            "train": {"total_env_steps": 1000, "updates_per_step": "${algo.batch_size}"},
            "logger": logger,
        }
    )
    return validate_train_config(raw, custom_algorithm=True, custom_env=True)


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


# --- metrics files --------------------------------------------------------------------------


def test_every_row_lands_in_jsonl_and_csv_with_growing_columns(tmp_path):
    logger = MetricsLogger(tmp_path, cfg())
    logger.log(100, {"time/elapsed_s": 1.0, "train/updates": 10})
    logger.log(200, {"train/updates": 20, "time/elapsed_s": 2.0, "train/episode_return": 5.5})
    logger.log(300, {"time/elapsed_s": 3.0, "train/updates": 30})
    logger.close()
    columns, rows = read_csv(tmp_path / "metrics.csv")
    assert columns == ["env_steps", "time/elapsed_s", "train/updates", "train/episode_return"]
    assert [r["env_steps"] for r in rows] == ["100", "200", "300"]
    assert rows[0]["train/episode_return"] == "" and float(rows[1]["train/episode_return"]) == 5.5
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[1] == {"env_steps": 200, "train/updates": 20.0, "time/elapsed_s": 2.0, "train/episode_return": 5.5}
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert len(info["git_commit"]) == 40 and info["logger"] == "none" and "wandb" not in info


def test_a_resumed_run_keeps_its_earlier_rows(tmp_path):
    first = MetricsLogger(tmp_path, cfg())
    first.log(100, {"time/elapsed_s": 1.0, "a": 1})
    first.close()
    second = MetricsLogger(tmp_path, cfg())
    second.log(200, {"time/elapsed_s": 2.0, "b": 2})
    second.close()
    columns, rows = read_csv(tmp_path / "metrics.csv")
    assert columns == ["env_steps", "time/elapsed_s", "a", "b"] and len(rows) == 2
    assert rows[0]["a"] == "1.0" and rows[1]["b"] == "2.0"
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_logger_none_never_imports_wandb(tmp_path):
    code = (
        "import sys; from offpolicy.config import RunConfig; from offpolicy.logger import MetricsLogger;"
        "m = MetricsLogger(sys.argv[1], RunConfig());"
        "m.log(1, {'x': 1.0}); m.close(); assert 'wandb' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env, timeout=60)
    assert not (tmp_path / "wandb").exists()


# --- W&B arguments and mode ------------------------------------------------------------------


def test_wandb_init_gets_resolved_config_group_name_tags_and_dir(tmp_path):
    c = cfg(name="wandb")
    kwargs = wandb_init_kwargs(c, tmp_path, RunContext(output_dir=str(tmp_path)))
    assert kwargs["config"] == OmegaConf.to_container(c.source, resolve=True)
    assert kwargs["config"]["train"]["updates_per_step"] == 64  # interpolations resolved
    assert kwargs["group"] == "hopper-fastsac-ablation"
    assert kwargs["name"] == "hopper-fastsac-seed3"
    assert kwargs["tags"] == ["t1", "hopper", "fastsac"]
    assert kwargs["dir"] == str(tmp_path) and kwargs["project"] == "offpolicy"


def test_multirun_groups_by_sweep_and_names_by_job(tmp_path):
    context = RunContext(
        output_dir="multirun/2026-01-02/10-11-12/4", sweep_dir="multirun/2026-01-02/10-11-12", job_num=4
    )
    kwargs = wandb_init_kwargs(cfg(name="wandb"), tmp_path, context)
    assert kwargs["group"] == "hopper-fastsac-ablation-2026-01-02_10-11-12"
    assert kwargs["name"] == "hopper-fastsac-seed3-job4"
    assert "sweep-2026-01-02_10-11-12" in kwargs["tags"]
    named = wandb_init_kwargs(
        cfg(name="wandb", group="mine"), tmp_path, RunContext(".", sweep_dir="/s/lr-sweep", job_num=0)
    )
    assert named["group"] == "mine" and "sweep-lr-sweep" in named["tags"]


def test_mode_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("WANDB_API_KEY", "WANDB_MODE", "NETRC", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    assert wandb_mode("auto")[0] == "offline"  # fresh machine: no account, no network
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    assert wandb_mode("auto") == ("online", "credentials found")
    assert wandb_mode("disabled") == ("disabled", "logger.mode")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_mode("online") == ("offline", "WANDB_MODE")
    monkeypatch.delenv("WANDB_MODE")
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode("auto")[0] == "online"


class RecordingWandb(types.ModuleType):
    """A stand-in `wandb` module that records what `init` was given."""

    def __init__(self) -> None:
        super().__init__("wandb")
        self.modes: list[str] = []

    def init(self, **kwargs):
        self.modes.append(kwargs["mode"])
        return types.SimpleNamespace(log=lambda *a, **k: None, finish=lambda: None)


@pytest.mark.parametrize(
    "environ,netrc_text,mode,expected",
    [
        ({"WANDB_MODE": "disabled"}, "machine api.wandb.ai login user password abc123\n", "auto", "disabled"),
        ({"WANDB_MODE": "offline"}, "", "online", "offline"),
        ({}, "# api.wandb.ai: no entry for it yet\n", "auto", "offline"),
        ({"WANDB_IDENTITY_TOKEN_FILE": "/run/token"}, "", "auto", "online"),
        (
            {"WANDB_BASE_URL": "https://wandb.example.org"},
            "machine wandb.example.org login u password p\n",
            "auto",
            "online",
        ),
        ({}, "machine api.wandb.ai login user password abc123\n", "auto", "online"),
        ({}, "", "auto", "offline"),
    ],
)
def test_eval_picks_the_wandb_mode_by_the_training_runs_rule(
    monkeypatch, tmp_path, environ, netrc_text, mode, expected
):
    from offpolicy.eval import log_to_wandb

    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("WANDB_API_KEY", "WANDB_MODE", "NETRC", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    for var, value in environ.items():
        monkeypatch.setenv(var, value)
    if netrc_text:
        (tmp_path / ".netrc").write_text(netrc_text)
        (tmp_path / ".netrc").chmod(0o600)
    fake = RecordingWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    logger_cfg = OmegaConf.create({"name": "wandb", "mode": mode, "project": "p"})
    result = {
        "env": "hopper", "algo": "fastsac", "checkpoint_env_steps": 100, "return_mean": 1.0,
        "return_std": 0.0, "length_mean": 10.0, "episodes": 2,
    }  # fmt: skip
    log_to_wandb(OmegaConf.create({"logger": logger_cfg}), result, tmp_path)
    assert fake.modes == [expected] == [wandb_mode(mode)[0]]


def test_jobs_sharing_a_process_get_one_finished_run_each(tmp_path, monkeypatch):
    """The basic launcher runs every job of a sweep in one process: each job must finish its own run."""
    pytest.importorskip("wandb")
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    ids = []
    for job in range(2):
        run_dir = tmp_path / str(job)
        context = RunContext(str(run_dir), sweep_dir=str(tmp_path), job_num=job)
        logger = MetricsLogger(run_dir, cfg(name="wandb"), context)
        logger.log(4, {"train/updates": 1.0})
        assert wandb.run is not None and wandb.run.id == logger.info["wandb"]["id"]
        ids.append(logger.info["wandb"]["id"])
        logger.close()
        assert wandb.run is None  # finished, nothing left open for the next job
        info = json.loads((run_dir / "run_info.json").read_text())["wandb"]
        assert info["mode"] == "offline" and info["name"] == f"hopper-fastsac-seed3-job{job}"
        assert Path(info["dir"]).parent == run_dir / "wandb" and Path(info["dir"]).is_dir()
    assert ids[0] != ids[1]


# --- console --------------------------------------------------------------------------------


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_periodic_lines_when_not_a_terminal():
    out = io.StringIO()
    progress = Progress(total_env_steps=1000, interval_s=10.0, stream=out)
    assert progress.mode == "lines"
    progress.update(0, 0, now=0.0)
    progress.update(100, 10, now=5.0)  # not due yet
    assert out.getvalue() == ""
    progress.last_return = ("eval return", 12.345)
    progress.update(250, 40, now=10.0)
    line = out.getvalue().strip()
    assert line.startswith("[progress] 250/1,000 env steps (25.0%)")
    assert "25 env-steps/s" in line and "4.0 updates/s" in line and "eval return 12.35" in line
    assert "ETA 0:00:30" in line  # 750 steps left at 25 steps/s
    progress.update(400, 50, now=12.0)
    progress.close()
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("[progress] 400/1,000")


def test_closing_right_after_a_line_prints_no_second_line_at_zero_rate():
    """A run stopped by a signal refreshes the console at its last counts, then closes it: no `0 env-steps/s`."""
    out = io.StringIO()
    progress = Progress(total_env_steps=1000, interval_s=10.0, stream=out)
    progress.update(0, 0, now=0.0)
    progress.update(250, 40, now=10.0)
    progress.close()
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 1 and "25 env-steps/s" in lines[0]


def test_eta_comes_from_the_recent_rate_and_slow_updates_keep_a_decimal():
    """A slow first window (compile warm-up) no longer holds the ETA down for the rest of the run."""
    out = io.StringIO()
    progress = Progress(total_env_steps=10_000, interval_s=10.0, stream=out)
    progress.update(0, 0, now=0.0)
    progress.update(10, 2, now=10.0)  # warm-up: 1 env-step/s, 0.2 updates/s
    for k in range(1, 5):
        progress.update(10 + 1000 * k, 2 + 150 * k, now=10.0 + 10 * k)  # then 100 env-steps/s, 15 updates/s
    first, *_, last = out.getvalue().strip().splitlines()
    assert "0.2 updates/s" in first
    assert last.startswith("[progress] 4,010/10,000 env steps") and "100 env-steps/s | 15 updates/s" in last
    # recent rate (moving average 1 -> 50.5 -> 75.2 -> 87.6 -> 93.8/s): 5,990 steps in 63 s; the whole run's
    # average (80/s) said 74 s and the true rate 60 s
    assert last.endswith("ETA 0:01:03")


def warm_up_then_learning(progress: Progress, until_s: int) -> None:
    """A tick a second: 40 s of random warm-up at 250 env-steps/s (10,000 steps, no update), then learning at
    50 env-steps/s and 2 updates a step."""
    for t in range(until_s + 1):
        steps = 250 * t if t <= 40 else 10_000 + 50 * (t - 40)
        progress.update(steps, 2 * max(0, steps - 10_000), now=float(t))


def test_the_eta_counts_the_learning_phase_only():
    """Was: the fast random warm-up counted in the rate, so the ETA grew for minutes once learning began
    (Ant: 1:30:52, 2:33:43, 3:28:14 within two minutes)."""
    out = io.StringIO()
    progress = Progress(total_env_steps=100_000, interval_s=30.0, stream=out)
    warm_up_then_learning(progress, until_s=150)
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 5  # at 30, 60, 90, 120, 150 s
    assert "ETA" not in lines[0]  # warm-up only: no learning rate yet
    # from 40 s on, 50 env-steps/s: at 60 s 89,000 steps are left (1,780 s), then 30 s less at each line
    etas = [line.rsplit("ETA ", 1)[1] for line in lines[1:]]
    assert etas == ["0:29:40", "0:29:10", "0:28:40", "0:28:10"]


def test_the_learning_rate_starts_after_the_last_tick_without_an_update():
    rate = LearningRate(smoothing=0.5)
    rate.observe(0.0, 0, 0)
    rate.observe(4.0, 4_000, 0)  # random warm-up: 1,000 env-steps/s
    rate.close_window(5.0, 5_000)
    assert rate.per_s is None and rate.eta_s(10_000, 5_000) is None  # no update yet, no rate
    rate.observe(5.0, 5_000, 0)
    rate.observe(6.0, 5_200, 3)  # the first update: learning began after the tick at 5 s
    rate.observe(9.0, 5_400, 12)
    rate.close_window(10.0, 5_500)
    assert rate.per_s == 100.0  # 500 steps in 5 s
    rate.close_window(10.0, 5_500)  # a window without progress changes nothing
    rate.close_window(15.0, 5_800)  # 60/s
    assert rate.per_s == 0.5 * 60.0 + 0.5 * 100.0
    assert rate.eta_s(10_000, 5_800) == 4_200 / 80.0
    assert rate.eta_s(10_000, 10_000) is None and rate.eta_s(None, 5_800) is None


def test_the_bar_shows_the_learning_phase_eta():
    out = Tty()
    progress = Progress(total_env_steps=100_000, stream=out)
    warm_up_then_learning(progress, until_s=60)
    shown = [line for line in out.getvalue().split("\r") if "upd/s" in line]  # one a tick
    assert len(shown) == 60
    assert not [line for line in shown[:40] if "ETA" in line]  # none during the warm-up
    # then tqdm's own time left (which counts the warm-up) is replaced by the learning phase's: 50 env-steps/s
    etas = [line.rsplit(" ETA=", 1)[1].strip() for line in shown[40:]]
    assert etas[0] == "0:29:59]" and etas[-1] == "0:29:40]"  # 89,950 then 89,000 steps left
    assert "<" not in out.getvalue()  # tqdm writes its time left as `elapsed<left`
    progress.close()


def test_a_bar_on_a_terminal():
    out = Tty()
    progress = Progress(total_env_steps=1000, stream=out)
    assert progress.mode == "bar"
    progress.update(0, 0, now=0.0)
    progress.update(500, 100, now=1.0)
    progress.close()
    text = out.getvalue()
    assert "env steps" in text and "500/1" in text and "upd/s" in text


def test_console_off_and_bad_mode():
    out = io.StringIO()
    progress = Progress(total_env_steps=10, mode="off", stream=out)
    progress.update(5, 1, now=100.0)
    progress.close()
    assert out.getvalue() == ""
    with pytest.raises(ValueError, match="logger.console"):
        Progress(10, mode="fancy")


# --- the real CLI ---------------------------------------------------------------------------

TINY = TINY_HOPPER_CLI


def fresh_machine_env(home: Path) -> dict[str, str]:
    """No W&B account, no WANDB_MODE: what a new user (or CI) has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    return {**env, "HOME": str(home), "PYTHONPATH": str(REPO)}


def offline_run_dirs(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "wandb").glob("offline-run-*"))


def test_default_logger_on_a_fresh_machine_goes_offline_into_the_output_dir(tmp_path):
    """`logger=wandb` is the default: no credentials -> offline run inside the Hydra output dir, one sync line."""
    home, run_dir = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    cmd = [sys.executable, "-m", "offpolicy.train", *TINY, "seed=7", "experiment=smoke", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, env=fresh_machine_env(home), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    info = json.loads((run_dir / "run_info.json").read_text())
    wb = info["wandb"]
    assert wb["mode"] == "offline" and wb["mode_from"].startswith("no W&B credentials")
    assert wb["group"] == "hopper-fastsac-smoke" and wb["name"] == "hopper-fastsac-seed7"
    (offline,) = offline_run_dirs(run_dir)
    assert Path(wb["dir"]) == offline
    record = next(offline.glob("run-*.wandb")).read_bytes()  # what wandb itself stored for the sync
    assert (
        b"hopper-fastsac-smoke" in record
        and b"hopper-fastsac-seed7" in record
        and info["git_commit"].encode() in record
    )
    lines = proc.stdout.splitlines()
    sync_lines = [i for i, line in enumerate(lines) if "wandb sync" in line and "offpolicy.logger" in line]
    assert len(sync_lines) == 2 and all(f"`wandb sync {offline}`" in lines[i] for i in sync_lines)
    last_progress = max(i for i, line in enumerate(lines) if line.startswith("[progress]"))
    assert sync_lines[0] < last_progress < sync_lines[1]  # a reminder once the run is over, not only at its start
    assert "W&B run saved offline: upload it with" in lines[sync_lines[1]]
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[progress]")]
    assert progress and progress[-1].startswith("[progress] 200/200 env steps (100.0%)")  # not a tty: plain lines
    columns, rows = read_csv(run_dir / "metrics.csv")
    assert columns[:2] == ["env_steps", "time/elapsed_s"] and rows[-1]["env_steps"] == "200"
    for key in (
        "perf/env_steps_per_s",
        "perf/updates_per_s",
        "perf/inference_tick_ms",
        "perf/learner_busy_fraction",
        "perf/ingress_produced",
        "perf/ingress_consumed",
        "train/replay_size",
    ):
        assert key in columns, key
    last_train = [r for r in rows if r["perf/updates_per_s"]][-1]
    busy = float(last_train["perf/learner_busy_fraction"])
    assert 0.0 < busy <= 1.0 and float(last_train["perf/updates_per_s"]) > 0
    assert rows[-1]["eval/episodes"] == "16.0"  # the final snapshot's row comes last
    assert any(c.startswith("loss/") for c in columns)
    assert OmegaConf.load(run_dir / "config_resolved.yaml").seed == 7


def test_basic_multirun_gives_each_job_its_own_finished_run_grouped_by_sweep(tmp_path):
    """Hydra's basic launcher runs both jobs in one process: two offline runs, one group per algo in the sweep."""
    home, sweep_dir = tmp_path / "home", tmp_path / "lr-sweep"
    home.mkdir()
    cmd = [sys.executable, "-m", "offpolicy.train", "-m", *TINY, "seed=0,1", f"hydra.sweep.dir={sweep_dir}"]
    env = {**fresh_machine_env(home), "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ids = set()
    for job in (0, 1):
        info = json.loads((sweep_dir / str(job) / "run_info.json").read_text())
        wb = info["wandb"]
        assert wb["mode"] == "offline" and wb["mode_from"] == "WANDB_MODE"
        assert wb["group"] == "hopper-fastsac-default-lr-sweep" and wb["name"] == f"hopper-fastsac-seed{job}-job{job}"
        (offline,) = offline_run_dirs(sweep_dir / str(job))
        ids.add(wb["id"])
        debug = (offline / "logs" / "debug.log").read_text()
        assert "finishing run" in debug  # each job finished its own run before the next began
        assert json.loads((sweep_dir / str(job) / "summary.json").read_text())["env_steps"] == 200
    assert len(ids) == 2


def test_a_copy_without_git_metadata_names_the_commit_it_is_given(tmp_path, monkeypatch):
    from offpolicy.logger import git_commit

    monkeypatch.delenv("OFFPOLICY_GIT_COMMIT", raising=False)
    assert git_commit(tmp_path) == "unknown"  # not a repository, nothing given
    monkeypatch.setenv("OFFPOLICY_GIT_COMMIT", "7543e1a")
    assert git_commit(tmp_path) == "7543e1a"
    here = git_commit(Path(__file__).parent)  # inside the repository its own HEAD wins
    assert len(here) == 40 and here != "7543e1a"
