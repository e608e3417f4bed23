"""Tiny sizes shared by tests in several folders (importable as `sizes`: pytest's pythonpath has tests/)."""

from __future__ import annotations

SMALL = {
    "fastsac": {"batch_size": 32, "critic_hidden_dim": 32, "actor_hidden_dim": 16},
    "flashsac": {
        "batch_size": 32,
        "critic_hidden_dim": 16,
        "actor_hidden_dim": 8,
        "actor_num_blocks": 1,
        "critic_num_blocks": 1,
    },
}
"""algo config overrides that make either algorithm build and update in milliseconds on a CPU"""

TINY_HOPPER_CLI = [
    "env=hopper",
    "env.num_envs=4",
    "train.total_env_steps=200",
    "train.learning_starts=100",
    "algo.batch_size=64",
    "algo.critic_hidden_dim=32",
    "algo.actor_hidden_dim=32",
    "logger.interval_env_steps=100",
]
"""CLI overrides for a 200-step FastSAC Hopper run that learns (a few seconds on a CPU)"""
