"""Run outputs: metrics.jsonl always, W&B optionally (lazy import, offline without credentials)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


def git_commit(cwd: str | Path | None = None) -> str:
    """The repository's HEAD commit, or 'unknown'."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=False
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _wandb_has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


class MetricsLogger:
    """Writes one JSON object per log point to `metrics.jsonl` and forwards it to W&B when enabled."""

    def __init__(self, run_dir: str | Path, cfg: DictConfig) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._file = self.path.open("a", buffering=1)
        logger_cfg = cfg.get("logger") or {}
        self.kind = str(logger_cfg.get("name", "none"))
        self._wandb_run = None
        if self.kind == "wandb":
            self._wandb_run = self._start_wandb(cfg, logger_cfg)
        elif self.kind != "none":
            raise ValueError(f"logger.name must be 'none' or 'wandb', got {self.kind!r}")

    def _start_wandb(self, cfg: DictConfig, logger_cfg: Any) -> Any:
        try:
            import wandb
        except ImportError as exc:
            raise RuntimeError("logger=wandb needs the wandb package (pip install wandb), or use logger=none") from exc
        mode = str(logger_cfg.get("mode", "auto"))
        if mode == "auto":
            mode = "online" if _wandb_has_credentials() else "offline"
        algo = OmegaConf.select(cfg, "algo.name", default="algo")
        env = OmegaConf.select(cfg, "env.name", default="env")
        experiment = logger_cfg.get("experiment") or "default"
        return wandb.init(
            project=logger_cfg.get("project", "offpolicy"),
            entity=logger_cfg.get("entity"),
            group=logger_cfg.get("group") or f"{env}-{algo}-{experiment}",
            name=f"{env}-{algo}-seed{cfg.get('seed', 0)}",
            tags=list(logger_cfg.get("tags") or []),
            config=OmegaConf.to_container(cfg, resolve=True),
            dir=str(self.run_dir),
            mode=mode,
        )

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Record `metrics` at env step `step`."""
        row = {"env_steps": int(step), **{k: float(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        if self._wandb_run is not None:
            self._wandb_run.log(metrics, step=int(step))

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
        if self._wandb_run is not None:
            self._wandb_run.finish()
            self._wandb_run = None
