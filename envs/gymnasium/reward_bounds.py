"""Per-step reward bounds of the locomotion tasks, from their reward terms (`EnvSpec.reward_range`).

Each reward is forward_reward_weight * v - ctrl_cost_weight * |a|^2 (+ healthy_reward while
healthy). The control cost and the healthy bonus are bounded exactly: actions are clipped to
the actuator ranges before they reach the physics, so |a|^2 is at most the sum of the squared
range ends. The velocity v has no hard bound; each task states the speed that bounds it in
practice (the best runs' average speed with a wide margin for faster strides), and no task
rewards moving backward, which only near-random early policies and falls do, slower than
`MAX_BACKWARD_SPEED`. Value supports are sized from these bounds (FastSAC's C51 support).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_BACKWARD_SPEED = 3.0
"""m/s: no task rewards moving backward; early random behaviour and falls stay below this"""


def locomotion_reward_range(
    cfg: Mapping[str, Any], max_forward_speed: float, max_action_sq: float
) -> tuple[float, float]:
    """(low, high) of forward_reward_weight * v - ctrl_cost_weight * |a|^2 + healthy_reward * healthy.

    v lies in [-MAX_BACKWARD_SPEED, max_forward_speed], |a|^2 in [0, max_action_sq] and
    healthy in {0, 1}; each term takes its own extremes (the weights are the task's options).
    """
    forward = [cfg["forward_reward_weight"] * v for v in (-MAX_BACKWARD_SPEED, max_forward_speed)]
    ctrl = [-cfg["ctrl_cost_weight"] * q for q in (0.0, max_action_sq)]
    healthy = [cfg.get("healthy_reward", 0.0) * h for h in (0.0, 1.0)]
    low = min(forward) + min(ctrl) + min(healthy)
    high = max(forward) + max(ctrl) + max(healthy)
    return float(low), float(high)
