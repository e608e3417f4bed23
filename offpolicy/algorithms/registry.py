"""The one registry of algorithms: name -> (class, config schema). Adding an algorithm is one file and one line.

The class is named as `module:Class` and imported when first built, so reading a config never imports an
algorithm's networks.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from envs.core import EnvSpec
from offpolicy.algorithms.config import AlgoConfig, FastSACConfig, FlashSACConfig
from offpolicy.algorithms.contract import OffPolicyAlgorithm


@dataclass(frozen=True)
class AlgorithmEntry:
    """One registered algorithm."""

    target: str
    """`module:Class` of its `OffPolicyAlgorithm` subclass"""
    schema: type[AlgoConfig]
    """its config dataclass: defaults, types and docs of every `algo.*` key"""


ALGORITHMS: dict[str, AlgorithmEntry] = {
    "fastsac": AlgorithmEntry("offpolicy.algorithms.fastsac:FastSAC", FastSACConfig),
    "flashsac": AlgorithmEntry("offpolicy.algorithms.flashsac:FlashSAC", FlashSACConfig),
}


def register_algorithm(name: str, target: str, schema: type[AlgoConfig]) -> None:
    """Make `algo.name=<name>` build `target` (`module:Class`) with config `schema`; a name is registered once."""
    if name in ALGORITHMS and ALGORITHMS[name] != AlgorithmEntry(target, schema):
        raise ValueError(f"algorithm {name!r} is registered already ({ALGORITHMS[name].target})")
    ALGORITHMS[name] = AlgorithmEntry(target, schema)


def validate(cfg: DictConfig | dict) -> DictConfig:
    """Merge `cfg` (the `algo` node) into its schema: unknown keys and wrong types raise."""
    name = cfg["name"]
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algo {name!r}; valid: {sorted(ALGORITHMS)}")
    return OmegaConf.merge(OmegaConf.structured(ALGORITHMS[name].schema), cfg)


def make_algorithm(cfg: DictConfig, spec: EnvSpec, device: torch.device | str) -> OffPolicyAlgorithm:
    """Build the algorithm named by `cfg.name` (the `algo` node), validated against its schema."""
    cfg = validate(cfg)
    module, cls = ALGORITHMS[cfg.name].target.split(":")
    return getattr(importlib.import_module(module), cls)(cfg, spec, torch.device(device))
