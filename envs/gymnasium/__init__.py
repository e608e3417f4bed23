"""Gymnasium MuJoCo v5 tasks reproduced over the batched pool.

Each task declares its options (Gymnasium's keyword arguments) with a type and bounds
(envs/options.py), checked before anything is built. Gymnasium takes any number for its
weights; the bounds here are this package's:
- `forward_reward_weight >= 0`: the reward bounds that size value supports
  (reward_bounds.py) rely on no task rewarding moving backward;
- `ctrl_cost_weight >= 0`: the weight of a cost (subtracted); a negative one would pay for
  large actions;
- `healthy_reward` takes either sign: a per-step penalty is a valid task, and the reward
  bounds follow its sign;
- `reset_noise_scale >= 0`: the half-width (or standard deviation) of the reset noise;
- the `healthy_*_range` options are two numbers low < high (Gymnasium compares strictly
  inside them; an end may be infinite), `terminate_when_unhealthy` is true or false.
"""

from envs.gymnasium.ant import Ant
from envs.gymnasium.half_cheetah import HalfCheetah
from envs.gymnasium.hopper import Hopper
from envs.gymnasium.humanoid import Humanoid
from envs.gymnasium.walker2d import Walker2d

TASKS = {task.name: task for task in (Ant, Humanoid, HalfCheetah, Hopper, Walker2d)}

__all__ = ["TASKS", "Ant", "HalfCheetah", "Hopper", "Humanoid", "Walker2d"]
