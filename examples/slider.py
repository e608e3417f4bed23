"""A new task: push a block along a rail to a target and hold it there (README, "Add a task")."""

import mujoco
import numpy as np

from envs.mujoco import MujocoNpEnv, MujocoTask, PhysicsView
from envs.options import Real

XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <body name="block">
      <joint name="x" type="slide" axis="1 0 0" limited="true" range="-2 2" damping="1"/>
      <geom type="box" size="0.1 0.1 0.1" mass="1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" gear="5" ctrllimited="true" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


class Slider(MujocoTask):
    """A block on a 4-m rail; reward: minus its distance to `target`, minus a control cost."""

    name = "slider"
    frame_skip = 5
    max_episode_steps = 200
    options = dict(target=Real(1.0), ctrl_cost_weight=Real(0.1, ge=0), reset_noise_scale=Real(0.1, ge=0))

    def build_spec(self) -> mujoco.MjSpec:
        return mujoco.MjSpec.from_string(XML)

    @property
    def reward_range(self) -> tuple[float, float]:
        """Per-step reward bounds (value supports are sized from them): the rail ends at +-2 m."""
        return -(2.0 + abs(self.cfg["target"])) - self.cfg["ctrl_cost_weight"], 0.0

    def observe(self, p: PhysicsView) -> np.ndarray:
        return np.stack([p.qpos[:, 0] - self.cfg["target"], p.qvel[:, 0]], axis=1).astype(np.float32)

    def reward_terms(self, p, velocity, action, healthy):
        distance = np.abs(p.qpos[:, 0] - self.cfg["target"])
        return {"reward_distance": -distance, "reward_ctrl": -self.control_cost(action)}


def make_env(name, num_envs, seed=0, nthread=None, cpu_ids=None, **options):
    """What the collector calls (`runtime.env_factory`) to build its batched env."""
    return MujocoNpEnv(Slider(**options), num_envs=num_envs, seed=seed, nthread=nthread, cpu_ids=cpu_ids)
