"""Run outputs: metrics.jsonl and metrics.csv always, W&B optionally, and the console progress.

Every run, whatever `logger.name`, writes into its Hydra output dir:

    metrics.jsonl   one JSON object per log point (append-only, survives a kill)
    metrics.csv     the same rows as a table: env_steps, time/elapsed_s, then every metric key
                    (a cell is empty where a row lacks a key); `python -m offpolicy.plot` reads it
    run_info.json   git commit, host, start time, and where W&B (if on) keeps the run

`logger=wandb` (the default) adds one W&B run per job: `OmegaConf.to_container(cfg,
resolve=True)` as config, group `<env>-<algo>-<experiment>` (plus the sweep under
`-m`), name `<env>-<algo>-seed<seed>` (plus the job number under `-m`), the output
dir as its dir and the git commit. Mode: `WANDB_MODE` when set, else `logger.mode`
when not `auto`, else online where credentials exist (WANDB_API_KEY or a .netrc
entry for the W&B host) and offline otherwise, with one line saying how to upload
the run later. A fresh machine therefore needs no account and no network.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import json
import logging
import math
import netrc
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from omegaconf import OmegaConf

from offpolicy.schemas import LoggerConfig, RunConfig, WandbLoggerConfig

log = logging.getLogger(__name__)

STEP_KEY = "env_steps"
TIME_KEY = "time/elapsed_s"
RATE_SMOOTHING = 0.5
"""weight of the newest refresh window in the progress line's recent rate (its ETA)"""
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"
"""tqdm's bar without its own time left, which counts the warm-up: the ETA is `LearningRate`'s, in the postfix"""


GIT_COMMIT_ENV = "OFFPOLICY_GIT_COMMIT"
"""names the commit of a copy of the tree made without its git metadata (a job's staged copy on a cluster)"""


def git_commit(cwd: str | Path | None = None) -> str:
    """The repository's HEAD commit; else `$OFFPOLICY_GIT_COMMIT` where set; else 'unknown'."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
        commit = out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return commit or os.environ.get(GIT_COMMIT_ENV, "").strip() or "unknown"


def _git_root(cwd: str | Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


@dataclass(frozen=True)
class RunContext:
    """What Hydra told this job about its launch; built in `offpolicy.train.main`, plain values from there on."""

    output_dir: str
    """the job's Hydra output dir (the run dir)"""
    sweep_dir: str | None = None
    """the sweep's dir under `-m` (multirun), else None"""
    job_num: int | None = None
    """the job's number within its sweep under `-m`, else None"""
    launcher: str = "basic"
    """short launcher name (offpolicy.affinity.launcher_kind)"""
    cpu_block: tuple[int, ...] | None = None
    """the CPUs this job was confined to when sweep jobs share a machine (offpolicy.affinity.confine_job)"""

    @staticmethod
    def from_hydra(hydra_cfg: Any) -> RunContext:
        """From `HydraConfig.get()` (called in `offpolicy.train.main` only)."""
        from hydra.types import RunMode

        from offpolicy.affinity import launcher_kind

        multirun = hydra_cfg.mode == RunMode.MULTIRUN
        return RunContext(
            output_dir=str(hydra_cfg.runtime.output_dir),
            sweep_dir=str(hydra_cfg.sweep.dir) if multirun else None,
            job_num=int(hydra_cfg.job.num) if multirun else None,
            launcher=launcher_kind(OmegaConf.select(hydra_cfg, "launcher._target_", default=None)),
        )

    @property
    def sweep_id(self) -> str | None:
        """A readable sweep name: the sweep dir's name, with its parent for Hydra's default date/time dirs."""
        if self.sweep_dir is None:
            return None
        parts = Path(self.sweep_dir).parts
        name = parts[-1] if parts else "sweep"
        if len(parts) >= 2 and _looks_like_time(name):
            return f"{parts[-2]}_{name}"
        return name


def _looks_like_time(name: str) -> bool:
    pieces = name.split("-")
    return len(pieces) == 3 and all(p.isdigit() and len(p) == 2 for p in pieces)


def wandb_has_credentials() -> bool:
    """An API key in the environment, an identity token file, or a .netrc entry for the W&B host."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").netloc or "api.wandb.ai"
    paths = [os.environ["NETRC"]] if os.environ.get("NETRC") else [Path.home() / ".netrc", Path.home() / "_netrc"]
    for path in paths:
        try:
            if netrc.netrc(path).authenticators(host):
                return True
        except (OSError, netrc.NetrcParseError):
            continue
    return False


def wandb_mode(configured: str = "auto") -> tuple[str, str]:
    """(mode, why): WANDB_MODE, else `logger.mode` (`configured`) unless auto, else online with credentials,
    else offline."""
    env_mode = os.environ.get("WANDB_MODE")
    if env_mode:
        return env_mode, "WANDB_MODE"
    mode = str(configured or "auto")
    if mode != "auto":
        return mode, "logger.mode"
    if wandb_has_credentials():
        return "online", "credentials found"
    return "offline", "no W&B credentials (WANDB_API_KEY or ~/.netrc)"


def wandb_init_kwargs(config: RunConfig, run_dir: Path, context: RunContext | None) -> dict[str, Any]:
    """Everything `wandb.init` gets except mode and settings (pure: tests check it without wandb)."""
    logger: WandbLoggerConfig = config.logger
    algo = (config.algo.get("name") if config.algo is not None else None) or "algo"
    env = config.env.name
    experiment = logger.experiment or config.experiment or "default"
    group = logger.group or f"{env}-{algo}-{experiment}"
    name = f"{env}-{algo}-seed{config.seed}"
    tags = [*list(logger.tags or []), str(env), str(algo)]
    sweep_id = context.sweep_id if context is not None else None
    if sweep_id is not None:
        if not logger.group:
            group = f"{group}-{sweep_id}"  # one group per (env, algo, experiment) within each sweep
        name = f"{name}-job{context.job_num}"
        tags.append(f"sweep-{sweep_id}")
    return {
        "project": logger.project or "offpolicy",
        "entity": logger.entity,
        "group": group,
        "name": name,
        "tags": [t[:64] for t in dict.fromkeys(tags)],
        "job_type": "train",
        "config": _resolved(config),
        "dir": str(run_dir),
    }


def _resolved(config: RunConfig) -> dict[str, Any]:
    """The run's composed config with its interpolations resolved (the typed one where none was composed)."""
    if config.source is not None:
        return OmegaConf.to_container(config.source, resolve=True)
    return dataclasses.asdict(config)


def _reinit_value(wandb: Any) -> Any:
    """Finish any run a previous job in this process left open (basic launcher: all jobs share a process)."""
    try:
        version = tuple(int(p) for p in str(getattr(wandb, "__version__", "0")).split(".")[:3])
    except ValueError:
        version = (0, 0, 0)
    return "finish_previous" if version >= (0, 19, 10) else True


class MetricsLogger:
    """Writes each log point to metrics.jsonl and metrics.csv and forwards it to W&B when enabled."""

    def __init__(self, run_dir: str | Path, config: RunConfig, context: RunContext | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self.csv_path = self.run_dir / "metrics.csv"
        self._file = self.path.open("a", buffering=1)
        self._columns, self._rows = _read_csv(self.csv_path)  # a resumed run keeps its earlier rows
        logger = config.logger if config.logger is not None else LoggerConfig()
        self.kind = logger.name
        total = config.train.total_env_steps
        self.console = Progress(
            total_env_steps=int(total) if total is not None else None,
            mode=logger.console,
            interval_s=float(logger.console_interval_s),
        )
        self.commit = git_commit(Path(__file__).parent)
        self.info: dict[str, Any] = {
            "git_commit": self.commit,
            "host": platform.node(),
            "started_at": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "output_dir": str(self.run_dir),
            "sweep_dir": context.sweep_dir if context is not None else None,
            "job_num": context.job_num if context is not None else None,
            "launcher": context.launcher if context is not None else None,
            "cpu_block": list(context.cpu_block) if context is not None and context.cpu_block else None,
            "logger": self.kind,
        }
        self._wandb_run = None
        self.sync_dir: str | None = None
        """an offline W&B run's folder, for the `wandb sync` reminder at the end"""
        if self.kind == "wandb":
            self._wandb_run = self._start_wandb(config, context)
        (self.run_dir / "run_info.json").write_text(json.dumps(self.info, indent=1))

    def _start_wandb(self, config: RunConfig, context: RunContext | None) -> Any:
        try:
            import wandb
        except ImportError as exc:
            raise RuntimeError("logger=wandb needs the wandb package (pip install wandb), or use logger=none") from exc
        mode, why = wandb_mode(config.logger.mode)
        kwargs = wandb_init_kwargs(config, self.run_dir, context)
        settings: dict[str, Any] = {"quiet": True}
        if self.commit != "unknown":
            settings["git_commit"] = self.commit
            root = _git_root(Path(__file__).parent)
            if root is not None:
                settings["git_root"] = root
        run = wandb.init(**kwargs, mode=mode, reinit=_reinit_value(wandb), settings=settings)
        sync_dir = getattr(getattr(run, "settings", None), "sync_dir", None)
        self.info["wandb"] = {
            "mode": mode,
            "mode_from": why,
            "project": kwargs["project"],
            "group": kwargs["group"],
            "name": kwargs["name"],
            "tags": kwargs["tags"],
            "id": getattr(run, "id", None),
            "dir": str(sync_dir) if sync_dir else None,
        }
        if mode in ("offline", "dryrun") and sync_dir:
            self.sync_dir = str(sync_dir)
            log.info("W&B offline (%s): upload this run later with `wandb sync %s`", why, sync_dir)
        return run

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record `metrics` at env step `step` (host floats only: the caller already paid any device sync)."""
        row = {STEP_KEY: int(step), **{k: float(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._write_csv_row(row)
        if "eval/return" in row:
            self.console.last_return = ("eval return", row["eval/return"])
        elif "train/episode_return" in row and (self.console.last_return or ("",))[0] != "eval return":
            self.console.last_return = ("train return", row["train/episode_return"])
        if self._wandb_run is not None:
            self._wandb_run.log(metrics, step=int(step))

    def _write_csv_row(self, row: dict[str, float]) -> None:
        self._rows.append(row)
        new = [k for k in row if k not in self._columns]
        if new or not self.csv_path.exists():
            self._columns = _ordered_columns([*self._columns, *new])
            tmp = self.csv_path.with_suffix(".csv.tmp")
            with tmp.open("w", newline="") as f:  # a new column: rewrite the table (rows are few)
                writer = csv.DictWriter(f, fieldnames=self._columns, restval="")
                writer.writeheader()
                writer.writerows(_csv_cells(r) for r in self._rows)
            os.replace(tmp, self.csv_path)
        else:
            with self.csv_path.open("a", newline="") as f:
                csv.DictWriter(f, fieldnames=self._columns, restval="").writerow(_csv_cells(row))

    def close(self, failed: bool | None = None) -> None:
        """Close the files, end the console and finish the W&B run (exit code 1 when `failed`).

        `failed=None` reads it from the exception in flight (close runs in the runner's `finally`).
        """
        if failed is None:
            failed = sys.exc_info()[1] is not None
        self.console.close()
        if not self._file.closed:
            self._file.close()
        if self._wandb_run is not None:
            run, self._wandb_run = self._wandb_run, None
            run.finish(exit_code=1 if failed else 0)
            if self.sync_dir is not None:  # the start line has long scrolled away
                log.info("W&B run saved offline: upload it with `wandb sync %s`", self.sync_dir)


def _ordered_columns(keys: list[str]) -> list[str]:
    head = [k for k in (STEP_KEY, TIME_KEY) if k in keys]
    return head + [k for k in keys if k not in head]


def _csv_cells(row: dict[str, float]) -> dict[str, Any]:
    return {k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, float]]]:
    if not path.is_file():
        return [], []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = [{k: float(v) for k, v in r.items() if k is not None and v not in ("", None)} for r in reader]
        return list(reader.fieldnames or []), rows


class LearningRate:
    """Env steps per second of the learning phase, the ETA's rate.

    The random warm-up before the first update steps far faster than training: a rate that counts it makes
    the ETA grow for minutes once learning starts. `observe` takes every tick's counters and marks where the
    updates first advanced; `close_window`, at each refresh, folds the window's learning part into an
    exponential moving average over windows, so slow first update phases (a compile warm-up) fade as well.
    """

    def __init__(self, smoothing: float = RATE_SMOOTHING) -> None:
        self.smoothing = smoothing
        self.per_s: float | None = None
        """None until a window of the learning phase closed"""
        self._prev: tuple[float, int, int] | None = None  # the last tick before learning: time, env steps, updates
        self._mark: tuple[float, int] | None = None  # time and env steps where the open window's learning began

    def observe(self, now: float, env_steps: int, updates: int) -> None:
        """A tick's counters; learning began after the last tick whose update count had not advanced."""
        if self._mark is not None:
            return
        if self._prev is not None and updates > self._prev[2]:
            self._mark = self._prev[:2]
        else:
            self._prev = (now, env_steps, updates)

    def close_window(self, now: float, env_steps: int) -> None:
        """At a refresh: the env steps since the window's learning began join the average (none: it goes on)."""
        if self._mark is None or env_steps <= self._mark[1] or now <= self._mark[0]:
            return
        t0, steps0 = self._mark
        rate = (env_steps - steps0) / (now - t0)
        a = self.smoothing
        self.per_s = rate if self.per_s is None else a * rate + (1 - a) * self.per_s
        self._mark = (now, env_steps)

    def eta_s(self, total: int | None, env_steps: int) -> float | None:
        """Seconds until `total` env steps at the learning phase's rate; None without a total or a rate yet."""
        if not total or env_steps >= total or not self.per_s:
            return None
        return (total - env_steps) / self.per_s


class Progress:
    """Console progress: a tqdm bar on a terminal, plain periodic lines otherwise (CI, Slurm logs).

    `update` runs after every tick with host-side counters only (no device sync); it
    returns at once unless a refresh is due. `mode`: auto | bar | lines | off.
    """

    def __init__(
        self,
        total_env_steps: int | None,
        mode: str = "auto",
        interval_s: float = 30.0,
        stream: TextIO | None = None,
    ) -> None:
        if mode not in ("auto", "bar", "lines", "off"):
            raise ValueError(f"logger.console must be auto, bar, lines or off, got {mode!r}")
        self.stream = stream if stream is not None else sys.stdout
        if mode == "auto":
            mode = "bar" if _isatty(self.stream) else "lines"
        self.mode = mode
        self.total = total_env_steps
        self.interval_s = float(interval_s) if mode == "lines" else 0.5
        self.last_return: tuple[str, float] | None = None
        self._bar: Any = None
        self._redirect: Any = None
        self._t0: float | None = None
        self._last = (0.0, 0, 0)  # time, env steps, updates at the last refresh
        self.rate = LearningRate()
        """the ETA's rate: env steps per second of the learning phase"""
        self._latest = (0, 0)  # env steps, updates at the last update()
        self._next_refresh = 0.0
        self._closed = False

    def update(self, env_steps: int, updates: int, now: float | None = None) -> None:
        """Refresh the bar or print a line when due."""
        if self.mode == "off":
            return
        self._latest = (env_steps, updates)
        now = time.perf_counter() if now is None else now
        self.rate.observe(now, env_steps, updates)
        if self._t0 is None:
            self._start(now, env_steps, updates)
            return
        if now < self._next_refresh:
            return
        self._refresh(env_steps, updates, now)

    def _start(self, now: float, env_steps: int, updates: int) -> None:
        self._t0, self._last, self._next_refresh = now, (now, env_steps, updates), now + self.interval_s
        if self.mode == "bar":
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            # log lines (Hydra's console handler) go above the bar instead of through it
            self._redirect = logging_redirect_tqdm()
            self._redirect.__enter__()
            self._bar = tqdm(
                total=self.total,
                initial=env_steps,
                unit="step",
                unit_scale=True,
                dynamic_ncols=True,
                file=self.stream,
                desc="env steps",
                smoothing=0.1,
                mininterval=0,  # `interval_s` paces the refreshes: each shows
                miniters=1,
                **({"bar_format": BAR_FORMAT} if self.total else {}),
            )

    def _refresh(self, env_steps: int, updates: int, now: float) -> None:
        t_prev, steps_prev, updates_prev = self._last
        dt = max(now - t_prev, 1e-9)
        steps_per_s = (env_steps - steps_prev) / dt
        updates_per_s = (updates - updates_prev) / dt
        self.rate.close_window(now, env_steps)
        self._last, self._next_refresh = (now, env_steps, updates), now + self.interval_s
        if self._bar is not None:
            postfix = {"upd/s": _rate(updates_per_s)}
            if self.last_return is not None:
                postfix[self.last_return[0].replace(" ", "_")] = f"{self.last_return[1]:.1f}"
            eta = self.rate.eta_s(self.total, env_steps)
            if eta is not None:
                postfix["ETA"] = _hms(eta)
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(env_steps - self._bar.n)
            return
        self.stream.write(self.line(env_steps, steps_per_s, updates_per_s, now) + "\n")
        self.stream.flush()

    def line(self, env_steps: int, steps_per_s: float, updates_per_s: float, now: float) -> str:
        """`[progress] 12.0k/1.00M env steps (1.2%) | 3,456 env-steps/s | 432 updates/s | eval return 12.3 | ...`."""
        elapsed = now - (self._t0 if self._t0 is not None else now)
        parts = []
        if self.total:
            parts.append(f"{env_steps:,}/{self.total:,} env steps ({100.0 * env_steps / self.total:.1f}%)")
        else:
            parts.append(f"{env_steps:,} env steps")
        parts += [f"{steps_per_s:,.0f} env-steps/s", f"{_rate(updates_per_s)} updates/s"]
        if self.last_return is not None:
            parts.append(f"{self.last_return[0]} {self.last_return[1]:.2f}")
        parts.append(f"elapsed {_hms(elapsed)}")
        eta = self.rate.eta_s(self.total, env_steps)
        if eta is not None:
            parts.append(f"ETA {_hms(eta)}")
        return "[progress] " + " | ".join(parts)

    def close(self) -> None:
        """A final refresh at the last counts (a last line in lines mode) and release of the bar."""
        if self._closed or self.mode == "off" or self._t0 is None:
            self._closed = True
            return
        self._closed = True
        if self._bar is not None or self._latest[0] != self._last[1]:  # a line that adds nothing is not printed
            self._refresh(*self._latest, time.perf_counter())
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._redirect is not None:
            self._redirect.__exit__(None, None, None)
            self._redirect = None


def _rate(per_s: float) -> str:
    """`432` at 10 and above, `2.5` below (a slow learner's rate would read 0 or 3)."""
    return f"{per_s:,.0f}" if per_s >= 10 else f"{per_s:.1f}"


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _hms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
