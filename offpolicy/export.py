"""Export a checkpoint's policy for deployment: `python -m offpolicy.export checkpoint=<path> format=onnx [out=<path>]`.

Writes the actor as a standalone ONNX file and, beside it (`<out>.json`), what a robot-side control loop needs.

The ONNX graph takes the raw actor observation (`obs`, float32, [batch, obs_dim], any batch) and gives
`action`: the deterministic action (tanh of the Gaussian mean) mapped from [-1, 1] to the env's action bounds,
the action `offpolicy.eval` sends to the env. Observation normalisation is inside: FastSAC's running
mean/std normaliser, FlashSAC's BatchNorm on its running statistics. Where the task maps actions to joint
position targets (its env's `deploy_description()`: e.g. `go1_joystick_flat`, home pose + 0.5 x action), a
second output `joint_targets` holds them.
The weights are those evaluation acts with (`eval_actor`): the averaged actor when the run had
`algo.policy_ema` on. It is traced on the CPU in float32 with the TorchScript exporter.

The JSON holds the observation size and layout, the action size and bounds, the control and simulation
steps, the algorithm, env, the checkpoint's env steps and policy version and which actor was exported;
for a joint-target task also the joint names, default joint positions, action scale and PD gains.

Exit statuses: 0 written; 2 invalid config (one line naming the key and what is allowed); 5 the checkpoint
is missing, unreadable, corrupt, unsafe or does not fit its networks.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from offpolicy.exit_status import ExitStatus

FORMATS = ("onnx",)
"""the export formats `format=` accepts"""
OPSET = 17
"""the ONNX opset written: every op the actors use, and runnable by onnxruntime releases of several years"""


def deploy_layout(env: Any) -> dict[str, Any]:
    """What a task declares beyond its spec for a robot-side loop (observation layout, joint targets, gains).

    The env's own `deploy_description()` where it has one (the joystick tasks); empty for tasks whose
    actions go to the simulator as they are.
    """
    describe = getattr(env, "deploy_description", None)
    return describe() if callable(describe) else {}


def deployed_policy(actor: Any, low: np.ndarray, high: np.ndarray, layout: dict[str, Any]) -> Any:
    """A float32 CPU module: raw observation -> (env action[, joint targets]), around a copy of `actor`."""
    import torch
    from torch import nn

    class DeployedPolicy(nn.Module):
        """tanh(mean) of the actor (normalisation inside it), scaled to the action bounds, then to joint targets."""

        def __init__(self) -> None:
            super().__init__()
            self.actor = copy.deepcopy(actor).float().cpu().eval()
            as_buffer = {"low": low, "high": high}
            if layout:
                as_buffer["default_pose"] = layout["default_joint_positions"]
            for name, value in as_buffer.items():
                self.register_buffer(name, torch.as_tensor(np.asarray(value, np.float32)))
            self.action_scale = float(layout["action_scale"]) if layout else None

        def forward(self, obs: torch.Tensor) -> Any:
            unit = self.actor(obs)
            action = torch.clamp(unit * (self.high - self.low) / 2 + (self.high + self.low) / 2, self.low, self.high)
            if self.action_scale is None:
                return action
            return action, self.default_pose + self.action_scale * action

    return DeployedPolicy()


def export_onnx(algorithm: Any, spec: Any, path: str | Path, layout: dict[str, Any] | None = None) -> Path:
    """Write `algorithm.eval_actor` (normalisation, deterministic action, action scaling) to an ONNX file."""
    import torch

    layout = layout or {}
    policy = deployed_policy(algorithm.eval_actor, spec.action_low, spec.action_high, layout)
    obs_dim = int(spec.obs_dims[algorithm.actor_key])
    outputs = ["action", "joint_targets"] if layout else ["action"]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            policy,
            (torch.zeros(2, obs_dim),),
            str(path),
            input_names=["obs"],
            output_names=outputs,
            dynamic_axes={name: {0: "batch"} for name in ["obs", *outputs]},
            opset_version=OPSET,
            dynamo=False,
        )
    return path


def deploy_info(algorithm: Any, spec: Any, ckpt: dict[str, Any], layout: dict[str, Any]) -> dict[str, Any]:
    """The JSON written beside the ONNX file."""
    obs_dim = int(spec.obs_dims[algorithm.actor_key])
    info: dict[str, Any] = {
        "format": "onnx",
        "inputs": {"obs": [None, obs_dim]},
        "outputs": {"action": [None, int(spec.action_dim)]},
        "obs_dim": obs_dim,
        "observation_layout": layout.get("observation_layout", [{"name": "obs", "size": obs_dim}]),
        "action_dim": int(spec.action_dim),
        "action_low": np.asarray(spec.action_low, float).tolist(),
        "action_high": np.asarray(spec.action_high, float).tolist(),
        "control_dt": float(spec.dt),
        "algo": str(ckpt["algo"]),
        "env": str(ckpt["env"]),
        "checkpoint_env_steps": int(ckpt["counters"]["env_steps"]),
        "checkpoint_policy_version": int(ckpt["counters"]["policy_version"]),
        "actor": "averaged" if algorithm.policy_ema else "raw",
    }
    if layout:
        info["outputs"]["joint_targets"] = [None, int(spec.action_dim)]
        info.update({k: v for k, v in layout.items() if k != "observation_layout"})
    return info


def load_for_export(path: Path, options: dict[str, Any]) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """(algorithm on the CPU, env spec, checkpoint, deploy layout) of a checkpoint or policy file."""
    import envs
    from offpolicy.checkpoint import CheckpointError, check_compatible, load_algorithm_state, load_checkpoint
    from offpolicy.config import check_task
    from offpolicy.eval import eval_algo_config
    from offpolicy.runtime.runner import default_algorithm_factory

    ckpt = load_checkpoint(path, map_location="cpu")
    saved = ckpt.get("config") or {}
    if not saved.get("algo"):
        raise CheckpointError(f"checkpoint {path} has no algo config, so its networks cannot be rebuilt")
    options = {**((saved.get("env") or {}).get("options") or {}), **options}
    check_task(str(ckpt["env"]), options, "checkpoint", "env_options")
    env = envs.make(str(ckpt["env"]), num_envs=1, **options)
    try:
        spec, layout = env.spec, deploy_layout(env)
    finally:
        env.close()
    check_compatible(ckpt, path, obs_dims=dict(spec.obs_dims), action_dim=spec.action_dim)
    algo_cfg = OmegaConf.create(eval_algo_config(saved["algo"], compile_policy=False))
    algorithm = default_algorithm_factory(algo_cfg, replace(spec, num_envs=int(ckpt["num_envs"])), _cpu())
    load_algorithm_state(algorithm, ckpt, path, allow_policy_only=True)
    return algorithm, spec, ckpt, layout


def _cpu() -> Any:
    import torch

    return torch.device("cpu")


def export(cfg: DictConfig) -> dict[str, Any]:
    """Check the config, load the checkpoint, write the ONNX file and its JSON; returns the JSON's contents."""
    from offpolicy.config import invalid

    fmt = str(cfg.format)
    if fmt not in FORMATS:
        raise invalid("format", cfg.format, f"one of {', '.join(FORMATS)}")
    path = Path(str(cfg.checkpoint)).expanduser()
    out = Path(str(cfg.out)).expanduser() if cfg.get("out") else path.with_suffix(f".{fmt}")
    options = OmegaConf.to_container(cfg.env_options, resolve=True) if cfg.get("env_options") else {}
    algorithm, spec, ckpt, layout = load_for_export(path, dict(options))
    export_onnx(algorithm, spec, out, layout)
    info = {**deploy_info(algorithm, spec, ckpt, layout), "checkpoint": str(path), "onnx": str(out)}
    json_path = out.with_suffix(".json")
    json_path.write_text(json.dumps(info, indent=2))
    return {**info, "json": str(json_path)}


@hydra.main(version_base="1.3", config_path="../conf", config_name="export")
def main(cfg: DictConfig) -> None:
    """Compose, export, report on one line."""
    from offpolicy.checkpoint import CheckpointError
    from offpolicy.config import ConfigError

    try:
        info = export(cfg)
    except ConfigError as exc:
        print(f"[offpolicy] invalid config: {exc}", file=sys.stderr, flush=True)
        sys.exit(ExitStatus.INVALID_CONFIG)
    except CheckpointError as exc:
        print(f"[offpolicy] {exc}", file=sys.stderr, flush=True)
        sys.exit(ExitStatus.BAD_CHECKPOINT)
    print(
        f"[offpolicy] exported the {info['actor']} {info['algo']} actor of {info['env']} "
        f"(checkpoint at {info['checkpoint_env_steps']} env steps): {info['onnx']}, {info['json']}",
        flush=True,
    )


if __name__ == "__main__":
    from offpolicy.config import hydra_errors_in_one_line

    with hydra_errors_in_one_line():  # Hydra's own config errors: one line, exit status 2
        main()
