"""FlashSAC on go1_joystick_flat through the real CLIs: the critic reads the privileged observation, the actor the
noisy one, and `offpolicy.eval` reports the tracking statistics of the checkpoint."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from sizes import SMALL

from offpolicy import checkpoint as ck

REPO = Path(__file__).resolve().parents[2]
ACTOR_OBS, CRITIC_OBS, ACTIONS = 48, 123, 12
"""Go1JoystickEnv's observation widths (`actor`, `critic`) and its 12 joint targets"""


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_smoke_go1_flashsac_trains_with_a_privileged_critic_and_evaluates_tracking(tmp_path):
    run = tmp_path / "run"
    tiny = [f"algo.{k}={v}" for k, v in SMALL["flashsac"].items()]
    train = _cli(
        ["offpolicy.train", "algo=flashsac", "env=go1_joystick_flat", "device=cpu", "logger=none", *tiny,
         "env.num_envs=16", "train.total_env_steps=960", "train.learning_starts=320", "algo.updates_per_step=1",
         "eval.num_envs=2", "eval.episodes=2", "eval.interval_s=null", "+env.options.max_episode_steps=60",
         f"hydra.run.dir={run}"],
        tmp_path,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-2000:]
    ckpt = ck.load_checkpoint(run / "checkpoints" / "latest.pt")
    assert ckpt["algo"] == "flashsac" and ckpt["counters"]["updates"] > 0
    # the task's FlashSAC settings (conf/algo_env/flashsac_go1_joystick_flat.yaml) reached the run
    assert ckpt["config"]["algo"]["gamma"] == 0.97 and ckpt["config"]["algo"]["tau"] == 0.05
    assert ckpt["obs_dims"] == {"actor": ACTOR_OBS, "critic": CRITIC_OBS}
    state = ckpt["algorithm"]
    # the actor's first layer reads the 48 actor inputs; both critics (and their targets) the 123 privileged
    # inputs and the 12 actions
    assert state["actor"]["trunk.embed.weight"].shape[-1] == ACTOR_OBS
    for critic in ("critic", "target_critic"):
        assert state[critic]["trunk.embed.weight"].shape[-1] == CRITIC_OBS + ACTIONS
    # and the critic's input statistics moved off their start on the privileged columns: it was fed them
    privileged = state["critic"]["trunk.input_norm.running_mean"][:, ACTOR_OBS:CRITIC_OBS]
    assert privileged.abs().amax() > 0

    out = tmp_path / "eval"
    ev = _cli(["offpolicy.eval", f"checkpoint={run / 'checkpoints' / 'latest.pt'}", "episodes=3", "seed=2",
               "device=cpu", "max_episode_steps=60", f"hydra.run.dir={out}"], tmp_path)  # fmt: skip
    assert ev.returncode == 0, ev.stderr[-2000:]
    result = json.loads((out / "eval.json").read_text())
    assert result["algo"] == "flashsac" and result["env"] == "go1_joystick_flat" and result["episodes"] == 3
    falls = result["fall_fraction"] * 3
    assert falls == round(falls)  # a count of episodes out of 3
    for key in ("lin_vel_error", "yaw_rate_error", "command_speed"):  # NaN only if every episode fell at once
        assert result[key] >= 0 or (math.isnan(result[key]) and falls == 3), key
