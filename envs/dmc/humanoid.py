"""Humanoid walk and run: dm_control's `humanoid-walk` / `humanoid-run`, complete (poses from frame sensors).

Physics timestep 0.005 s, 5 substeps per step (control timestep 0.025 s), 1000
steps. Observation (67), in the suite's order: joint angles qpos[7:] (21),
head height (1), extremities (12: left hand, left foot, right hand, right foot
relative to the torso in the torso frame, one framepos sensor each), torso
vertical orientation (3: the z row of its rotation matrix), centre-of-mass
velocity (3), velocity qvel (27). Reward: small_control * standing * upright * move with
standing = tolerance(head z, (1.4, inf), margin 0.35),
upright = tolerance(torso zz, (0.9, inf), margin 1.9, linear, 0),
small_control = (4 + mean tolerance(ctrl, margin 1, quadratic, 0)) / 5,
move = (5 tolerance(|com velocity xy|, (speed, inf), margin speed, linear, 0) + 1) / 6
with speed 1 (walk) or 10 (run).

Initial state: `randomize_limited_and_rotational_joints` (every joint is
limited except the free root, whose orientation comes from uniform [0, 1)
components), drawn again until the pose has no contact. dm_control reads
`data.ncon`; a contact sensor matching every contact gives the same count, and
all rows still penetrating are drawn again together (one pool `reset`, a
threaded mj_forward per row, per round). About a quarter of the draws
penetrate, so a batch of resets takes a few rounds.
"""

from __future__ import annotations

import mujoco
import numpy as np

from envs.dmc.rewards import tolerance
from envs.dmc.task import (
    DmcTask,
    add_contact_counter,
    add_frame_sensor,
    as_index,
    count_contacts,
    randomize_limited_and_rotational_joints,
    sensor_columns,
)
from envs.mujoco.task import PhysicsView

STAND_HEIGHT = 1.4
EXTREMITIES = ("left_hand", "left_foot", "right_hand", "right_foot")


class HumanoidWalk(DmcTask):
    """3D humanoid walking at 1 m/s (dm_control `humanoid-walk`)."""

    name = "dmc_humanoid_walk"
    dm_control_id = "humanoid-walk"
    xml_file = "humanoid.xml"
    observation_keys = ("joint_angles", "head_height", "extremities", "torso_vertical", "com_velocity", "velocity")
    frame_skip = 5
    move_speed = 1.0

    def edit_spec(self, spec: mujoco.MjSpec) -> None:
        add_frame_sensor(spec, "pos", "head")
        for limb in EXTREMITIES:
            add_frame_sensor(spec, "pos", limb, ref="torso")
        for axis in ("xaxis", "yaxis", "zaxis"):
            add_frame_sensor(spec, axis, "torso")
        add_contact_counter(spec)

    def bind(self, model: mujoco.MjModel) -> None:
        super().bind(model)
        self._head_z = sensor_columns(model, "dmc_pos_head")[2:3]
        self._extremity_cols = as_index(sensor_columns(model, *(f"dmc_pos_{limb}_in_torso" for limb in EXTREMITIES)))
        # xmat['torso', ['zx', 'zy', 'zz']]: z components of the torso's x, y and z axes
        self._vertical_cols = np.array(
            [sensor_columns(model, f"dmc_{axis}_torso")[2] for axis in ("xaxis", "yaxis", "zaxis")]
        )
        self._com_velocity_cols = as_index(sensor_columns(model, "torso_subtreelinvel"))

    def initial_states(self, env, env_ids):
        n = len(env_ids)
        qpos, qvel = self.default_states(env, n)
        states = env.states_from(qpos, qvel)
        pending = np.arange(n)
        while pending.size:
            redraw = states[pending, 1 : 1 + env.nq]
            randomize_limited_and_rotational_joints(env.model, env.rng, redraw)
            states[pending, 1 : 1 + env.nq] = redraw
            contacts, _ = count_contacts(env, env_ids[pending], states[pending])
            pending = pending[contacts > 0]
        return states

    def observe(self, p: PhysicsView) -> np.ndarray:
        sd = p.sensordata
        return np.concatenate(
            [
                p.qpos[:, 7:],
                sd[:, self._head_z],
                sd[:, self._extremity_cols],
                sd[:, self._vertical_cols],
                sd[:, self._com_velocity_cols],
                p.qvel,
            ],
            axis=1,
            dtype=np.float32,
        )

    def reward_factors(self, p, action):
        sd = p.sensordata
        small_control = tolerance(action, margin=1.0, sigmoid_kind="quadratic", value_at_margin=0.0).mean(axis=1)
        com_velocity = sd[:, self._com_velocity_cols]
        speed = np.sqrt(com_velocity[:, 0] ** 2 + com_velocity[:, 1] ** 2)
        move = tolerance(speed, (self.move_speed, float("inf")), self.move_speed, "linear", 0.0)
        return {
            "standing": tolerance(sd[:, self._head_z[0]], (STAND_HEIGHT, float("inf")), STAND_HEIGHT / 4),
            "upright": tolerance(sd[:, self._vertical_cols[2]], (0.9, float("inf")), 1.9, "linear", 0.0),
            "small_control": (4 + small_control) / 5,
            "move": (5 * move + 1) / 6,
        }

    def reward(self, terms):
        return terms["small_control"] * (terms["standing"] * terms["upright"]) * terms["move"]


class HumanoidRun(HumanoidWalk):
    """3D humanoid running at 10 m/s (dm_control `humanoid-run`)."""

    name = "dmc_humanoid_run"
    dm_control_id = "humanoid-run"
    move_speed = 10.0
