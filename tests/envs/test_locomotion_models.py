"""The legged-robot envs' physics pools hold one model per env without textures: the physics is the same as
with them, the rendering model keeps them, and a model copied per env is small."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import envs
from envs.locomotion.go1_joystick import Go1JoystickFlat
from envs.locomotion.go2_joystick import Go2JoystickFlat


@pytest.mark.parametrize("task", [Go1JoystickFlat, Go2JoystickFlat])
def test_a_model_without_textures_steps_exactly_as_the_full_one(task):
    full, bare = task().build_model(), task().build_model(textures=False)
    assert full.ntex > 0 and bare.ntex == 0 and bare.nbuffer < full.nbuffer // 10
    rng = np.random.default_rng(0)
    datas = [mujoco.MjData(m) for m in (full, bare)]
    for d, m in zip(datas, (full, bare), strict=True):
        mujoco.mj_resetDataKeyframe(m, d, 0)
        d.qvel[:] = np.random.default_rng(1).uniform(-0.5, 0.5, m.nv)
    for _ in range(200):
        ctrl = full.key_qpos[0, 7:] + rng.uniform(-0.5, 0.5, full.nu)
        for d, m in zip(datas, (full, bare), strict=True):
            d.ctrl[:] = ctrl
            mujoco.mj_step(m, d)
    np.testing.assert_array_equal(datas[0].qpos, datas[1].qpos)
    np.testing.assert_array_equal(datas[0].qvel, datas[1].qvel)
    assert datas[0].ncon > 0  # the feet touched the floor: contacts were part of what matched


@pytest.mark.parametrize("name", ["go1_joystick_flat", "go2_joystick_flat"])
def test_the_pools_models_carry_no_textures_and_rendering_keeps_them(name):
    with envs.make(name, 3, nthread=1) as env:
        assert env.model.ntex > 0  # the video's model
        for pool in (env.pool, env.reset_pool):
            models = pool.get_model([0, 1, 2])
            assert all(m.ntex == 0 and m.nbuffer < 1_000_000 for m in models)
