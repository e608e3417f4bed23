"""Task options: every task's options are typed and bounded, and a bad one is refused in one line before any build."""

from __future__ import annotations

import math

import numpy as np
import pytest

import envs
from envs.options import Flag, Integer, Interval, OptionError, Real, parse_options
from envs.registry import task_class

INF = float("inf")
GYMNASIUM_DEFAULTS = {
    "ant": dict(
        forward_reward_weight=1.0,
        ctrl_cost_weight=0.5,
        healthy_reward=1.0,
        terminate_when_unhealthy=True,
        healthy_z_range=(0.2, 1.0),
        reset_noise_scale=0.1,
    ),
    "halfcheetah": dict(forward_reward_weight=1.0, ctrl_cost_weight=0.1, reset_noise_scale=0.1),
    "hopper": dict(
        forward_reward_weight=1.0,
        ctrl_cost_weight=1e-3,
        healthy_reward=1.0,
        terminate_when_unhealthy=True,
        healthy_state_range=(-100.0, 100.0),
        healthy_z_range=(0.7, INF),
        healthy_angle_range=(-0.2, 0.2),
        reset_noise_scale=5e-3,
    ),
    "humanoid": dict(
        forward_reward_weight=1.25,
        ctrl_cost_weight=0.1,
        healthy_reward=5.0,
        terminate_when_unhealthy=True,
        healthy_z_range=(1.0, 2.0),
        reset_noise_scale=1e-2,
    ),
    "walker2d": dict(
        forward_reward_weight=1.0,
        ctrl_cost_weight=1e-3,
        healthy_reward=1.0,
        terminate_when_unhealthy=True,
        healthy_z_range=(0.8, 2.0),
        healthy_angle_range=(-1.0, 1.0),
        reset_noise_scale=5e-3,
    ),
}
"""Gymnasium v5's defaults of the options each task exposes (its documented keyword arguments)"""


REFERENCE_SUITES = [n for n in envs.registry_names() if n in GYMNASIUM_DEFAULTS or n.startswith("dmc_")]
"""the tasks whose options are their reference's keyword arguments (Gymnasium's) or none (dm_control's); the
locomotion tasks' own options are tested beside them (tests/envs/test_go1_joystick.py)"""


@pytest.mark.parametrize("name", REFERENCE_SUITES)
def test_the_defaults_are_gymnasiums_and_every_task_takes_a_time_limit(name):
    task = task_class(name)()
    assert task.cfg == GYMNASIUM_DEFAULTS.get(name, {})  # dm_control tasks: no options but the time limit
    assert task.max_episode_steps == 1000
    specs = task_class(name).option_specs()
    assert list(specs)[-1] == "max_episode_steps" and set(specs) == {*task.cfg, "max_episode_steps"}


def refusal(name: str, **options) -> str:
    with pytest.raises(OptionError) as err:
        task_class(name)(**options)
    message = str(err.value)
    assert "\n" not in message
    return message


INTERVAL = "must be two numbers [low, high] with low < high (either may be inf or -inf)"


@pytest.mark.parametrize(
    "name,options,message",
    [
        ("hopper", dict(healthy_reward="abc"), "healthy_reward=abc: must be a finite number"),
        ("hopper", dict(healthy_reward=math.nan), "healthy_reward=nan: must be a finite number"),
        ("hopper", dict(healthy_reward=True), "healthy_reward=true: must be a finite number"),
        ("ant", dict(forward_reward_weight=-1), "forward_reward_weight=-1: must be a finite number >= 0"),
        ("ant", dict(ctrl_cost_weight=-0.5), "ctrl_cost_weight=-0.5: must be a finite number >= 0"),
        ("humanoid", dict(reset_noise_scale=-1e-3), "reset_noise_scale=-0.001: must be a finite number >= 0"),
        ("halfcheetah", dict(ctrl_cost_weight=INF), "ctrl_cost_weight=inf: must be a finite number >= 0"),
        ("hopper", dict(healthy_z_range=5), f"healthy_z_range=5: {INTERVAL}"),
        ("hopper", dict(healthy_z_range=[0.7]), f"healthy_z_range=[0.7]: {INTERVAL}"),
        ("hopper", dict(healthy_z_range=[0.5, 1, 2]), f"healthy_z_range=[0.5, 1, 2]: {INTERVAL}"),
        ("hopper", dict(healthy_z_range=["a", 1]), f"healthy_z_range=[a, 1]: {INTERVAL}"),
        ("walker2d", dict(healthy_angle_range=[1, 1]), f"healthy_angle_range=[1, 1]: {INTERVAL}"),
        ("walker2d", dict(healthy_z_range=[2.0, 0.8]), f"healthy_z_range=[2.0, 0.8]: {INTERVAL}"),
        ("ant", dict(healthy_z_range=[math.nan, 1.0]), f"healthy_z_range=[nan, 1.0]: {INTERVAL}"),
        ("ant", dict(terminate_when_unhealthy="no"), "terminate_when_unhealthy=no: must be true or false"),
        ("ant", dict(terminate_when_unhealthy=1), "terminate_when_unhealthy=1: must be true or false"),
        ("hopper", dict(max_episode_steps=0), "max_episode_steps=0: must be an integer > 0"),
        ("dmc_cheetah_run", dict(max_episode_steps=-3), "max_episode_steps=-3: must be an integer > 0"),
        ("dmc_dog_run", dict(max_episode_steps=2.5), "max_episode_steps=2.5: must be an integer > 0"),
        ("ant", dict(max_episode_steps="long"), "max_episode_steps=long: must be an integer > 0"),
        (
            "halfcheetah",
            dict(healthy_reward=1.0),
            "healthy_reward=1.0: unknown option of task halfcheetah; "
            "valid: forward_reward_weight, ctrl_cost_weight, reset_noise_scale, max_episode_steps",
        ),
        (
            "dmc_walker_run",
            dict(healthy_reward=1.0),
            "healthy_reward=1.0: unknown option of task dmc_walker_run; valid: max_episode_steps",
        ),
    ],
)
def test_a_bad_option_is_one_line_naming_option_value_and_what_is_allowed(name, options, message):
    assert refusal(name, **options) == message


def test_unknown_names_are_refused_before_bad_values_and_in_order():
    message = refusal("hopper", zeta=1, alpha=2, healthy_reward="abc")
    assert message.startswith("alpha=2: unknown option of task hopper; valid: forward_reward_weight, ")


def test_values_on_the_bounds_and_command_line_spellings_are_taken_as_the_declared_types():
    task = task_class("hopper")(
        ctrl_cost_weight=0,  # a bound itself (>= 0)
        healthy_reward=-2,  # a penalty: either sign
        healthy_z_range=[0.5, INF],  # a list from the command line, an infinite end
        terminate_when_unhealthy=False,
        max_episode_steps=1.0,  # an integral number: the shortest episode there is
    )
    assert task.cfg["ctrl_cost_weight"] == 0.0 and type(task.cfg["ctrl_cost_weight"]) is float
    assert task.cfg["healthy_reward"] == -2.0 and type(task.cfg["healthy_reward"]) is float
    assert task.cfg["healthy_z_range"] == (0.5, INF)
    assert task.cfg["terminate_when_unhealthy"] is False
    assert task.max_episode_steps == 1 and type(task.max_episode_steps) is int
    assert task_class("ant")(healthy_z_range=(-INF, 10**400)).cfg["healthy_z_range"] == (-INF, INF)


def test_an_integer_too_large_for_a_float_is_refused_not_raised():
    assert refusal("hopper", healthy_reward=10**400) == f"healthy_reward={10**400}: must be a finite number"


def test_parse_options_fills_defaults_and_checks_each_kind():
    specs = {"w": Real(1.0, ge=0), "n": Integer(3, gt=0), "f": Flag(True), "r": Interval(0.0, 1.0)}
    assert parse_options("t", specs, {}) == {"w": 1.0, "n": 3, "f": True, "r": (0.0, 1.0)}
    assert parse_options("t", specs, {"w": 0, "n": 1, "r": (-1, 0)}) == {"w": 0.0, "n": 1, "f": True, "r": (-1.0, 0.0)}
    with pytest.raises(OptionError) as err:
        parse_options("t", specs, {"n": 0})
    assert (err.value.option, err.value.value, err.value.allowed) == ("n", 0, "must be an integer > 0")
    assert isinstance(err.value, ValueError)  # callers that catch ValueError keep working


def test_the_checked_options_reach_the_physics():
    """A time limit of 2 truncates every episode at its second step; the healthy bonus is the option's."""
    env = envs.make("hopper", 2, nthread=1, max_episode_steps=2, healthy_reward=3)
    env.reset()
    first = env.step(np.zeros((2, 3)))
    second = env.step(np.zeros((2, 3)))
    env.close()
    assert not first.truncated.any() and second.truncated.all()
    np.testing.assert_allclose(first.info["reward_terms"]["reward_survive"], 3.0)
    assert env.spec.max_episode_steps == 2


def test_make_refuses_a_bad_option_before_building_the_env():
    with pytest.raises(OptionError, match=r"^healthy_z_range=5: must be two numbers"):
        envs.make("hopper", 2, healthy_z_range=5)
