"""Legged-robot locomotion tasks over the batched pool (robot models vendored under `assets/`)."""

from __future__ import annotations

from envs.locomotion.go1_joystick import Go1JoystickFlat
from envs.locomotion.go2_joystick import Go2JoystickFlat

TASKS = {task.name: task for task in (Go1JoystickFlat, Go2JoystickFlat)}
