"""Off-policy algorithms: one factory, `make_algorithm`, dispatching on `algo.name`."""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from envs.core import EnvSpec
from offpolicy.algorithms.base import OffPolicyAlgorithm
from offpolicy.algorithms.config import SCHEMAS, FastSACConfig, FlashSACConfig, register_configs, validate

__all__ = [
    "SCHEMAS",
    "FastSACConfig",
    "FlashSACConfig",
    "OffPolicyAlgorithm",
    "make_algorithm",
    "register_configs",
]


def make_algorithm(cfg: DictConfig, spec: EnvSpec, device: torch.device | str) -> OffPolicyAlgorithm:
    """Build the algorithm named by `cfg.name` (`fastsac` | `flashsac`); `cfg` is the `algo` node."""
    cfg = validate(cfg)
    device = torch.device(device)
    if cfg.name == "fastsac":
        from offpolicy.algorithms.fastsac import FastSAC

        return FastSAC(cfg, spec, device)
    from offpolicy.algorithms.flashsac import FlashSAC

    return FlashSAC(cfg, spec, device)
