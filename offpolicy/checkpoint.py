"""Checkpoints: atomic writes, safe loads, one-line errors.

A checkpoint is one `torch.save` file holding only tensors and plain Python
values (dicts, lists, str, int, float, bool, None), so it loads with
`torch.load(..., weights_only=True)`: opening a checkpoint never runs code from
it, and a file someone else shared is as safe to open as one of ours.

The file is sealed: it holds `format`, `format_version`, `sha256` and `payload`,
the checkpoint itself serialized by `torch.save` as a byte tensor, and `sha256`
is the SHA-256 of those bytes. A file whose bytes changed after it was written
(a bad disk, a torn copy) is refused in one line instead of loading weights with
flipped bits. Files of format version 1, written before the seal, still load,
with a warning that their contents are not verified.

What the payload holds:

    format, format_version   "offpolicy-checkpoint", FORMAT_VERSION
    algo, env, num_envs      algorithm and env names, training rows (eval rows excluded)
    obs_dims, action_dim     the env spec's dimensions
    config                   the resolved run config (plain containers)
    counters                 env_steps, ticks, updates, policy_version
    algorithm                `algorithm.state_dict()`: actor, critics and targets,
                             optimizers and loss scalers, normalisers, temperature
    rng                      torch CPU and CUDA generator states, the learner's
                             random-action generator
    git_commit               the code that wrote it

A policy file (`export_policy`, `policy_only: True`) keeps everything but `rng` and cuts `algorithm` to the
actor (its observation normaliser included) and the counters: about a thirtieth of the size, enough for
`offpolicy.eval` to act exactly as the full checkpoint does, not enough to resume training (refused in one
line). `benchmark/offpolicy/learning_run.py` keeps one with each run it makes, so that row of a table can be
re-scored from its own folder.

Not in it: the replay buffer (1M transitions of two observations each are
gigabytes for Humanoid, and it refills within `train.learning_starts` env
steps of a resumed run) and the physics state of the collector's envs (a
resumed run starts fresh episodes).

Writes go to `<path>.tmp`, are fsynced, then renamed over `<path>` with
`os.replace`, and the directory is fsynced: a crash at any point leaves either
the previous file or the new one, never a torn file under the final name.
`latest.pt` is a hard link to the newest `step_<env_steps>.pt`, made the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from offpolicy.exit_status import ExitStatus
from offpolicy.schemas import CheckpointConfig

FORMAT = "offpolicy-checkpoint"
FORMAT_VERSION = 2
"""bumped whenever the layout changes in a way older readers cannot follow (2: the payload sealed with its SHA-256)"""
UNSEALED_VERSION = 1
"""the last format version written without a checksum: loaded unverified, with a warning"""
LATEST = "latest.pt"
COUNTER_KEYS = ("env_steps", "ticks", "updates", "policy_version")
POLICY_KEYS = ("actor", "counters")
"""what acting needs of `algorithm.state_dict()`: the actor with its normaliser, and the policy version"""
OPTIONAL_POLICY_KEYS = ("actor_ema",)
"""kept in a policy file when the run had them: the averaged actor of `algo.policy_ema`"""


log = logging.getLogger(__name__)


class CheckpointError(Exception):
    """A checkpoint that is missing, unreadable, unsafe or made for another run; the message is one line."""


@dataclass(frozen=True)
class RunIdentity:
    """What a checkpoint must agree with to be loaded into a run."""

    algo: str
    """`algo.name`"""
    env: str
    """`env.name`"""
    obs_dims: dict[str, int]
    """feature width per observation key"""
    action_dim: int
    """width of the action vector"""
    num_envs: int
    """training rows (the algorithm's per-env state has this many rows)"""

    @staticmethod
    def of(ckpt: dict[str, Any]) -> RunIdentity:
        """The identity recorded in a loaded checkpoint."""
        return RunIdentity(
            algo=str(ckpt["algo"]),
            env=str(ckpt["env"]),
            obs_dims={str(k): int(v) for k, v in dict(ckpt["obs_dims"]).items()},
            action_dim=int(ckpt["action_dim"]),
            num_envs=int(ckpt["num_envs"]),
        )

    def describe(self) -> str:
        return f"algo={self.algo} env={self.env} obs_dims={self.obs_dims} action_dim={self.action_dim}"


# --------------------------------------------------------------------------- RNG state


def capture_rng(generators: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    """Torch CPU and CUDA RNG states plus the named generators' states (all ByteTensors)."""
    state: dict[str, Any] = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch_cuda"] = [s.cpu() for s in torch.cuda.get_rng_state_all()]
    state["generators"] = {name: g.get_state().cpu() for name, g in (generators or {}).items()}
    return state


def restore_rng(state: dict[str, Any], generators: dict[str, torch.Generator] | None = None) -> None:
    """Inverse of `capture_rng`; CUDA states are restored only onto the same number of devices."""
    torch.set_rng_state(state["torch_cpu"])
    cuda = state.get("torch_cuda")
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)
    saved = state.get("generators", {})
    for name, g in (generators or {}).items():
        if name in saved:
            g.set_state(saved[name])


# --------------------------------------------------------------------------- write


def config_snapshot(cfg: DictConfig | dict | None) -> dict[str, Any]:
    """The run config as plain containers (resolved where it can be)."""
    if cfg is None:
        return {}
    if isinstance(cfg, dict):
        return cfg
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - an interpolation that only resolves inside Hydra: keep it unresolved
        return OmegaConf.to_container(cfg, resolve=False)


def build_checkpoint(
    identity: RunIdentity,
    algorithm_state: dict[str, Any],
    counters: dict[str, int],
    rng: dict[str, Any] | None = None,
    config: DictConfig | dict | None = None,
    git_commit: str = "unknown",
) -> dict[str, Any]:
    """The dict `save_checkpoint` writes."""
    missing = [k for k in COUNTER_KEYS if k not in counters]
    if missing:
        raise ValueError(f"checkpoint counters lack {missing}")
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "algo": identity.algo,
        "env": identity.env,
        "num_envs": int(identity.num_envs),
        "obs_dims": {str(k): int(v) for k, v in identity.obs_dims.items()},
        "action_dim": int(identity.action_dim),
        "config": config_snapshot(config),
        "counters": {k: int(v) for k, v in counters.items()},
        "algorithm": algorithm_state,
        "rng": rng or {},
        "git_commit": git_commit,
    }


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_save(obj: Any, path: str | Path) -> Path:
    """`torch.save` to `<path>.tmp`, fsync, rename over `path`; on any failure the temporary file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)
    return path


def link_latest(target: Path, latest: Path) -> None:
    """Point `latest` at `target` atomically (hard link; a copy where links are not supported)."""
    tmp = latest.with_name(latest.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.link(target, tmp)
    except OSError:
        import shutil

        shutil.copyfile(target, tmp)
    os.replace(tmp, latest)
    _fsync_dir(latest.parent)


def seal(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint file holds: `checkpoint` serialized by `torch.save` as a byte tensor, with its SHA-256."""
    buffer = io.BytesIO()
    torch.save({**checkpoint, "format_version": FORMAT_VERSION}, buffer)
    payload = buffer.getbuffer()
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "payload": torch.frombuffer(payload, dtype=torch.uint8),
    }


def save_checkpoint(path: str | Path, checkpoint: dict[str, Any]) -> Path:
    """Write a dict made by `build_checkpoint`, sealed with its checksum, atomically to `path`."""
    return atomic_save(seal(checkpoint), path)


# --------------------------------------------------------------------------- read


def _one_line(text: str, limit: int = 240) -> str:
    """`text` on one line, cut after its first sentence and at `limit` characters."""
    line = " ".join(str(text).split())
    line = re.split(r"(?<=\.)\s", line, maxsplit=1)[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _unreadable(path: str | Path, why: str) -> CheckpointError:
    return CheckpointError(f"checkpoint {path} is unreadable (truncated or not a checkpoint): {why}")


def _torch_load(source: Any, path: Path, map_location: str | torch.device) -> Any:
    """`torch.load(source, weights_only=True)` with every failure turned into a one-line `CheckpointError`."""
    try:
        return torch.load(source, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        found = re.search(r"unsupported GLOBAL\s+([\w.]+)|Unsupported global:\s*GLOBAL\s+([\w.]+)", text, re.I)
        if found:
            raise CheckpointError(
                f"checkpoint {path} was refused: it references the Python object {found.group(1) or found.group(2)}, "
                "and loading it could execute code (only tensors and plain values are accepted)"
            ) from None
        reason = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|$)", text, re.S)
        raise _unreadable(path, _one_line(reason.group(1) if reason else text)) from None
    except Exception as exc:  # noqa: BLE001 - zip/EOF/format errors of every kind mean the same thing here
        raise _unreadable(path, _one_line(f"{type(exc).__name__}: {exc}")) from None


def _check_format(data: Any, path: Path) -> int:
    """The format version of a loaded file (or payload); refuses anything else and newer versions."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _unreadable(path, f"it is not an {FORMAT} file")
    version = data.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {version}; this code reads versions up to {FORMAT_VERSION}"
        )
    return version


def _unseal(sealed: dict[str, Any], path: Path, map_location: str | torch.device) -> dict[str, Any]:
    """The checkpoint inside a sealed file, after its bytes matched the SHA-256 written with them."""
    payload, digest = sealed.get("payload"), sealed.get("sha256")
    if not isinstance(payload, torch.Tensor) or payload.dtype != torch.uint8 or not isinstance(digest, str):
        raise _unreadable(path, "it lacks its payload or its checksum")
    raw = payload.cpu().numpy()
    if hashlib.sha256(raw).hexdigest() != digest:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: its contents do not match the SHA-256 written with them "
            "(the file changed after it was written)"
        )
    data = _torch_load(io.BytesIO(raw.tobytes()), path, map_location)
    _check_format(data, path)
    return data


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load, verify (checksum) and check the structure of a checkpoint; never executes code from the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    data = _torch_load(path, path, map_location)
    if _check_format(data, path) > UNSEALED_VERSION:
        data = _unseal(data, path, map_location)
    else:
        log.warning(
            "checkpoint %s has format version %s, written without a checksum: loaded without verifying its contents",
            path,
            data["format_version"],
        )
    missing = [
        k for k in ("algo", "env", "num_envs", "obs_dims", "action_dim", "counters", "algorithm") if k not in data
    ]
    missing += [f"counters.{k}" for k in COUNTER_KEYS if k not in (data.get("counters") or {})]
    if missing:
        raise _unreadable(path, f"it lacks {missing}")
    return data


def task_dims(env: str, options: dict[str, Any] | DictConfig | None = None) -> tuple[dict[str, int], int] | None:
    """(obs_dims, action_dim) of task `env` built with `options` (one row), or None where it cannot be built."""
    import envs

    if isinstance(options, DictConfig):
        options = OmegaConf.to_container(options, resolve=True)
    try:
        built = envs.make(env, 1, **dict(options or {}))
    except Exception:  # noqa: BLE001 - only describes a run already refused: its sizes are then left out
        return None
    try:
        return {str(k): int(v) for k, v in built.spec.obs_dims.items()}, int(built.spec.action_dim)
    finally:
        built.close()


def check_compatible(
    ckpt: dict[str, Any],
    path: str | Path,
    algo: str | None = None,
    env: str | None = None,
    obs_dims: dict[str, int] | None = None,
    action_dim: int | None = None,
    env_options: dict[str, Any] | DictConfig | None = None,
) -> None:
    """Raise a one-line `CheckpointError` naming every field where the checkpoint and this run differ.

    Fields passed as None are not compared (e.g. the dimensions before the env is built). The message
    gives this run's own sizes: those passed, else those of its task built with `env_options` (None: the
    task's defaults), else none.
    """
    have = RunIdentity.of(ckpt)
    want = {"algo": algo, "env": env, "obs_dims": obs_dims, "action_dim": action_dim}
    mine = {"algo": have.algo, "env": have.env, "obs_dims": have.obs_dims, "action_dim": have.action_dim}
    if obs_dims is not None:
        want["obs_dims"] = {str(k): int(v) for k, v in dict(obs_dims).items()}
    differ = [k for k, v in want.items() if v is not None and v != mine[k]]
    if not differ:
        return
    run: dict[str, Any] = {k: mine[k] if want[k] is None else want[k] for k in ("algo", "env")}
    built = task_dims(run["env"], env_options) if obs_dims is None or action_dim is None else None
    sizes = {"obs_dims": built[0], "action_dim": built[1]} if built else {}
    sizes.update((k, want[k]) for k in ("obs_dims", "action_dim") if want[k] is not None)
    this = " ".join(f"{k}={v}" for k, v in {**run, **sizes}.items())
    raise CheckpointError(
        f"checkpoint {path} is for {have.describe()}; this run is {this} (mismatch: {', '.join(differ)})"
    )


def policy_checkpoint(ckpt: dict[str, Any], path: str | Path = "checkpoint") -> dict[str, Any]:
    """`ckpt` with its algorithm state cut to the policy (`POLICY_KEYS`) and no RNG state, marked `policy_only`."""
    state = ckpt["algorithm"]
    missing = [k for k in POLICY_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} has no policy to export: its algorithm state lacks {missing}")
    policy = {k: v for k, v in ckpt.items() if k not in ("algorithm", "rng")}
    keys = POLICY_KEYS + tuple(k for k in OPTIONAL_POLICY_KEYS if k in state)
    return {**policy, "algorithm": {k: state[k] for k in keys}, "policy_only": True}


def export_policy(src: str | Path, dst: str | Path) -> Path:
    """Write the policy of checkpoint `src` to `dst` (atomically): what `offpolicy.eval` needs, a fraction of the size."""
    return save_checkpoint(dst, policy_checkpoint(load_checkpoint(src), src))


def require_resumable(ckpt: dict[str, Any], path: str | Path) -> None:
    """Refuse a policy file as a training run's starting point, in one line."""
    if ckpt.get("policy_only"):
        raise CheckpointError(
            f"checkpoint {path} holds only a policy (offpolicy.eval can score it) and cannot resume training: "
            "resume from the run's checkpoints/latest.pt"
        )


def load_algorithm_state(
    algorithm: Any, ckpt: dict[str, Any], path: str | Path, allow_policy_only: bool = False
) -> None:
    """`algorithm.load_state_dict` with any shape or key error turned into a one-line `CheckpointError`.

    A policy file loads only where `allow_policy_only` (evaluation): it has no critics or optimizer state
    to train on from.
    """
    policy_only = bool(ckpt.get("policy_only"))
    if not allow_policy_only:
        require_resumable(ckpt, path)
    try:
        if policy_only:
            algorithm.load_policy_state_dict(ckpt["algorithm"])
        else:
            algorithm.load_state_dict(ckpt["algorithm"])
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:
        raise CheckpointError(
            f"checkpoint {path} does not fit this run's {ckpt.get('algo')} networks "
            f"(different algo.* sizes or env.num_envs?): {_one_line(f'{type(exc).__name__}: {exc}', 200)}"
        ) from None


# --------------------------------------------------------------------------- periodic + final checkpoints of a run


class Checkpointer:
    """Writes `<run_dir>/checkpoints/step_<env_steps>.pt` every `interval_env_steps` and at the end, plus `latest.pt`."""

    def __init__(
        self,
        run_dir: str | Path,
        settings: CheckpointConfig,
        identity: RunIdentity,
        config: DictConfig | dict | None = None,
        start_env_steps: int = 0,
        git_commit: str = "unknown",
    ) -> None:
        self.directory = Path(run_dir) / "checkpoints"
        self.settings = settings
        self.identity = identity
        self.config = config_snapshot(config)
        self.git_commit = git_commit
        self.last_saved_env_steps = int(start_env_steps)
        """env steps of the newest checkpoint (the resumed one at start)"""
        self.saved: list[Path] = []
        """checkpoints written by this run, oldest first"""

    def due(self, env_steps: int) -> bool:
        """Whether `env_steps` crossed a multiple of the interval since the last checkpoint."""
        every = self.settings.interval_env_steps
        return every > 0 and env_steps // every > self.last_saved_env_steps // every

    def save(
        self,
        algorithm: Any,
        counters: dict[str, int],
        generators: dict[str, torch.Generator] | None = None,
    ) -> Path:
        """Write one checkpoint (atomically), move `latest.pt` to it and prune old periodic ones."""
        ckpt = build_checkpoint(
            self.identity,
            algorithm.state_dict(),
            counters,
            rng=capture_rng(generators),
            config=self.config,
            git_commit=self.git_commit,
        )
        env_steps = int(counters["env_steps"])
        path = save_checkpoint(self.directory / f"step_{env_steps}.pt", ckpt)
        link_latest(path, self.directory / LATEST)
        self.last_saved_env_steps = env_steps
        if path not in self.saved:
            self.saved.append(path)
        self._prune()
        return path

    def _prune(self) -> None:
        keep = self.settings.keep_last
        if keep <= 0:
            return
        while len(self.saved) > keep:
            with contextlib.suppress(FileNotFoundError):
                self.saved.pop(0).unlink()


def main(argv: list[str] | None = None) -> int:
    """`python -m offpolicy.checkpoint export-policy <checkpoint> <policy file>`; exit 5 on a bad checkpoint."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m offpolicy.checkpoint", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export-policy", help="write a checkpoint's policy (actor and counters) to a file")
    export.add_argument(
        "checkpoint", help="a checkpoint written by offpolicy.train, e.g. <run dir>/checkpoints/latest.pt"
    )
    export.add_argument("out", help="the policy file to write (offpolicy.eval checkpoint=<out> scores it)")
    args = parser.parse_args(argv)
    try:
        path = export_policy(args.checkpoint, args.out)
    except CheckpointError as exc:
        print(f"[offpolicy] {exc}", file=sys.stderr)
        return ExitStatus.BAD_CHECKPOINT
    print(f"[offpolicy] wrote {path} ({path.stat().st_size / 1e6:.1f} MB): the policy of {args.checkpoint}")
    return ExitStatus.OK


__all__ = [
    "CheckpointError",
    "Checkpointer",
    "RunIdentity",
    "atomic_save",
    "build_checkpoint",
    "capture_rng",
    "check_compatible",
    "export_policy",
    "load_algorithm_state",
    "load_checkpoint",
    "policy_checkpoint",
    "require_resumable",
    "restore_rng",
    "save_checkpoint",
    "seal",
    "task_dims",
]


if __name__ == "__main__":
    raise SystemExit(main())
