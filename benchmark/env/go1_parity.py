"""Parity of `env=go1_joystick_flat` with envpool's C++ port of Playground's `Go1JoystickFlatTerrain`.

envpool is not a project dependency and needs its own Python environment, so the script has two sides:

- `--side envpool` (run with that environment's interpreter): steps envpool with observation noise off, one env
  along a seeded random action sequence, then a batch of envs under random actions, and writes an .npz of what it
  saw and the actions it was given. Only numpy and envpool are imported on this side.
- the default side (the project's interpreter): runs the envpool side as a subprocess, then replays the same
  actions in `go1_joystick_flat` (noise and every randomisation off) from the state envpool reset to, and
  writes per-step max abs differences and episode statistics of both sides to a JSON.

envpool exposes neither qpos nor qvel. Its first privileged observation holds, noise-free, the joint angles and
velocities, the IMU-frame linear and angular velocity and the world-frame angular velocity; Playground's reset
turns the home pose about z only, so yaw follows from the IMU and world angular velocities and the base linear
velocity from the IMU velocity. The base x, y are not observed: the floor is flat, so they are set to zero. The
base height is the home pose's, as Playground's reset leaves it. The reconstruction is checked by comparing the
first observations. envpool's command is copied into our env before every step, since the two sides draw
commands from different random streams.

    python -m benchmark.env.go1_parity --envpool-python <envpool env>/bin/python
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

TASK_ID = "Go1JoystickFlatTerrain-v1"
TERMS = (
    "tracking_lin_vel", "tracking_ang_vel", "lin_vel_z", "ang_vel_xy", "orientation", "dof_pos_limits", "pose",
    "termination", "stand_still", "torques", "action_rate", "energy", "feet_clearance", "feet_height", "feet_slip",
    "feet_air_time",
)  # fmt: skip
CRITIC_FIELDS = (
    ("actor", 48), ("gyro", 3), ("accelerometer", 3), ("gravity", 3), ("local_linvel", 3), ("global_angvel", 3),
    ("joint_pos", 12), ("joint_vel", 12), ("actuator_force", 12), ("last_contact", 4), ("feet_vel", 12),
    ("feet_air_time", 4), ("push", 4),
)  # fmt: skip
ACTOR_FIELDS = (
    ("local_linvel", 3), ("gyro", 3), ("gravity", 3), ("joint_pos", 12), ("joint_vel", 12), ("last_act", 12),
    ("command", 3),
)  # fmt: skip
DEFAULT_OUT = Path("benchmark/outputs/checks/parity.json")
KEY = "go1_envpool"
"""this check's entry in the parity file (each parity script writes its own key)"""


# --- comparison helpers (pure numpy, both sides) ----------------------------------------------------------
def per_step_max_abs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(T,) max over all but the first axis of |a - b|."""
    diff = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return diff.reshape(diff.shape[0], -1).max(axis=1) if diff.ndim > 1 else diff


def first_above(values: np.ndarray, tol: float) -> int | None:
    """Index of the first entry of `values` above `tol`, or None."""
    above = np.flatnonzero(np.asarray(values) > tol)
    return int(above[0]) if above.size else None


def field_of(column: int, fields: tuple[tuple[str, int], ...]) -> str:
    """`name[i]` of observation column `column` in a layout of (name, width) fields."""
    start = 0
    for name, width in fields:
        if column < start + width:
            return f"{name}[{column - start}]"
        start += width
    raise ValueError(f"column {column} is beyond the layout's {start} columns")


def episode_stats(rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, counted: np.ndarray) -> dict:
    """Statistics of the episodes that end within (T, N) step arrays; `counted` is False on steps that are not
    env steps (envpool's reset steps)."""
    ret, length = np.zeros(rewards.shape[1]), np.zeros(rewards.shape[1], dtype=np.int64)
    returns, lengths, falls = [], [], 0
    for t in range(rewards.shape[0]):
        ret += np.where(counted[t], rewards[t], 0.0)
        length += counted[t]
        for i in np.flatnonzero(counted[t] & (terminated[t] | truncated[t])):
            returns.append(ret[i])
            lengths.append(length[i])
            falls += bool(terminated[t, i])
            ret[i], length[i] = 0.0, 0
    steps = int(counted.sum())
    return {
        "env_steps": steps,
        "episodes": len(returns),
        "mean_return": float(np.mean(returns)) if returns else None,
        "mean_length": float(np.mean(lengths)) if lengths else None,
        "sem_return": float(np.std(returns) / np.sqrt(len(returns))) if returns else None,
        "sem_length": float(np.std(lengths) / np.sqrt(len(lengths))) if lengths else None,
        "fall_fraction": falls / len(returns) if returns else None,
        "falls": falls,
        "mean_step_reward": float(np.sum(np.where(counted, rewards, 0.0)) / steps),
    }


# --- envpool side -----------------------------------------------------------------------------------------
def envpool_side(args: argparse.Namespace) -> None:
    """Run envpool (noise off) and write what it saw to `args.npz`."""
    import envpool

    def make(n: int):
        return envpool.make(TASK_ID, env_type="gymnasium", num_envs=n, num_threads=1, seed=args.seed, noise_level=0.0)

    rng = np.random.default_rng(args.seed)
    env = make(1)
    obs, info = env.reset()
    rec = {k: [v] for k, v in (("state", obs["state"][0]), ("privileged", obs["privileged_state"][0]))}
    rec |= {"command": [info["command"][0]], "reward": [0.0], "terminated": [False], "truncated": [False]}
    rec |= {f"term_{k}": [0.0] for k in TERMS}
    amp = args.action_amplitude
    actions = rng.uniform(-amp, amp, size=(args.steps, 12)).astype(np.float32)
    for a in actions:
        obs, reward, term, trunc, info = env.step(a[None])
        rec["state"].append(obs["state"][0])
        rec["privileged"].append(obs["privileged_state"][0])
        rec["command"].append(info["command"][0])
        rec["reward"].append(reward[0])
        rec["terminated"].append(term[0])
        rec["truncated"].append(trunc[0])
        for k in TERMS:
            rec[f"term_{k}"].append(info[f"reward_{k}"][0])
    env.close()
    batch = make(args.stats_envs)
    batch.reset()
    stats = {k: [] for k in ("reward", "terminated", "truncated", "counted")}
    for _ in range(args.stats_steps):
        _, reward, term, trunc, info = batch.step(rng.uniform(-1, 1, size=(args.stats_envs, 12)).astype(np.float32))
        for k, v in zip(stats, (reward, term, trunc, info["elapsed_step"] > 0), strict=True):
            stats[k].append(v)
    batch.close()
    arrays = {k: np.asarray(v) for k, v in rec.items()} | {f"stats_{k}": np.asarray(v) for k, v in stats.items()}
    meta = {"envpool": envpool.__version__, "config": {k: v for k, v in make_config(envpool).items()}}
    np.savez(args.npz, actions=actions, meta=json.dumps(meta), **arrays)


def make_config(envpool) -> dict:
    """envpool's task config with the noise off, as plain JSON values."""
    config = envpool.make_spec(TASK_ID, noise_level=0.0).config._asdict()
    return {k: v for k, v in config.items() if isinstance(v, (int, float, str)) and k != "base_path"}


# --- our side ---------------------------------------------------------------------------------------------
def reset_state_from_obs(model, privileged: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(qpos, qvel) of a Playground reset from its noise-free privileged observation (x, y set to zero)."""
    import mujoco

    gyro, local_linvel, global_angvel = privileged[48:51], privileged[57:60], privileged[60:63]
    yaw = np.arctan2(gyro[0] * global_angvel[1] - gyro[1] * global_angvel[0], gyro @ global_angvel - gyro[2] ** 2)
    home = model.keyframe("home").qpos
    qpos, qvel = home.copy(), np.zeros(model.nv)
    qpos[:2] = 0.0
    turn = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
    mujoco.mju_mulQuat(qpos[3:7], home[3:7], turn)
    qpos[7:] = home[7:] + privileged[63:75]
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, qpos[3:7])
    site = model.site_pos[model.site("imu").id]  # the IMU site is axis-aligned with the trunk
    qvel[:3] = rot.reshape(3, 3) @ (local_linvel - np.cross(gyro, site))
    qvel[3:6] = gyro
    qvel[6:] = privileged[75:87]
    return qpos, qvel


def replay(ep: dict, seed: int) -> dict:
    """Our env along envpool's actions and commands from its reset state: observations, reward and terms
    per step, until the first step at which either side's episode ends."""
    from envs.locomotion.go1_joystick import RANDOMIZATIONS
    from envs.registry import make

    off = {"noise_level": 0.0, **{flag: False for flag in RANDOMIZATIONS}}
    rec = {"state": [], "privileged": [], "reward": [], "done": [], **{f"term_{k}": [] for k in TERMS}}
    with make("go1_joystick_flat", 1, seed=seed, nthread=1, **off) as env:
        qpos, qvel = reset_state_from_obs(env.model, ep["privileged"][0])
        env.set_physics_state(qpos[None], qvel[None])
        env.command = ep["command"][0][None].copy()
        first = env._first_state()  # the first observation again, now with envpool's command
        rec["state"].append(first.obs["actor"][0])
        rec["privileged"].append(first.obs["critic"][0])
        rec["reward"].append(0.0)
        rec["done"].append(False)
        for k in TERMS:
            rec[f"term_{k}"].append(0.0)
        for t, action in enumerate(ep["actions"]):
            env.command = ep["command"][t][None].copy()
            env.steps_until_next_cmd = np.full(1, 10**9)
            st = env.step(action[None].astype(np.float64))
            final = st.info["final_obs"]
            rec["state"].append(final["actor"][0])
            rec["privileged"].append(final["critic"][0])
            rec["reward"].append(float(st.reward[0]))
            rec["done"].append(bool(st.done[0]))
            for k in TERMS:
                rec[f"term_{k}"].append(float(st.info["reward_terms"][k][0]))
            if st.done[0] or ep["terminated"][t + 1] or ep["truncated"][t + 1]:
                break
    return {k: np.asarray(v) for k, v in rec.items()}


def our_stats(envs: int, steps: int, seed: int) -> dict:
    """Episode statistics of our env (noise and randomisation off) under uniform random actions."""
    from envs.locomotion.go1_joystick import RANDOMIZATIONS
    from envs.registry import make

    off = {"noise_level": 0.0, **{flag: False for flag in RANDOMIZATIONS}}
    rng = np.random.default_rng(seed + 1)
    rewards, term, trunc = [], [], []
    with make("go1_joystick_flat", envs, seed=seed, nthread=1, **off) as env:
        env.reset()
        for _ in range(steps):
            st = env.step(rng.uniform(-1, 1, size=(envs, 12)))
            rewards.append(st.reward.astype(np.float64))
            term.append(st.terminated)
            trunc.append(st.truncated)
    rewards, term, trunc = np.asarray(rewards), np.asarray(term), np.asarray(trunc)
    return episode_stats(rewards, term, trunc, np.ones_like(term))


def plain_joint_velocities(model, qpos: np.ndarray, qvel: np.ndarray, actions: np.ndarray, keep_warmstart: bool):
    """(T, 12) joint velocities after each control step of plain `mj_step` calls on one MjData, the solver's
    warm start kept from step to step or cleared at each control step (as a pool that restores only the state)."""
    import mujoco

    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = qpos, qvel
    home = model.keyframe("home").qpos[7:]
    out = []
    for action in actions:
        if not keep_warmstart:
            data.qacc_warmstart[:] = 0.0
        data.ctrl[:] = home + 0.5 * action
        for _ in range(5):
            mujoco.mj_step(model, data)
        out.append(data.qvel[6:].copy())
    return np.asarray(out)


def warmstart_diagnosis(ep: dict, ours: dict, seed: int) -> dict:
    """Per-step max abs joint-velocity differences: plain MuJoCo with the warm start kept vs envpool, and with it
    cleared at each control step vs our env."""
    from envs.registry import make

    with make("go1_joystick_flat", 1, seed=seed, nthread=1) as env:
        model = env.model
    qpos, qvel = reset_state_from_obs(model, ep["privileged"][0])
    n = len(ours["reward"]) - 1
    actions = ep["actions"][:n].astype(np.float64)
    kept = plain_joint_velocities(model, qpos, qvel, actions, keep_warmstart=True)
    cleared = plain_joint_velocities(model, qpos, qvel, actions, keep_warmstart=False)
    return {
        "kept_vs_envpool": [float(f"{d:.3e}") for d in per_step_max_abs(kept, ep["privileged"][1 : n + 1, 75:87])],
        "cleared_vs_ours": [float(f"{d:.3e}") for d in per_step_max_abs(cleared, ours["privileged"][1:, 75:87])],
    }


def compare(ep: dict, ours: dict, tol: float) -> dict:
    """Per-step max abs differences of the actor and critic observations, the reward and each weighted term."""
    n = len(ours["reward"])
    out: dict = {"steps_compared": n - 1, "tolerance": tol, "per_step_max_abs_diff": {}, "first_above_tol": {}}
    series = {"actor_obs": "state", "critic_obs": "privileged", "reward": "reward"} | {
        f"term/{k}": f"term_{k}" for k in TERMS
    }
    for name, key in series.items():
        diff = per_step_max_abs(ep[key][:n], ours[key])
        out["per_step_max_abs_diff"][name] = [float(f"{d:.3e}") for d in diff]
        out["first_above_tol"][name] = first_above(diff, tol)
    for name, key, fields in (("actor_obs", "state", ACTOR_FIELDS), ("critic_obs", "privileged", CRITIC_FIELDS)):
        t = out["first_above_tol"][name]
        if t is not None:
            col = int(np.argmax(np.abs(ep[key][t] - ours[key][t])))
            out["first_above_tol"][f"{name}_entry"] = {
                "step": t, "column": col, "field": field_of(col, fields),
                "envpool": float(ep[key][t, col]), "ours": float(ours[key][t, col]),
            }  # fmt: skip
    return out


def run_envpool(python: str, args: argparse.Namespace, npz: Path) -> None:
    """The envpool side in its own interpreter."""
    cmd = [python, str(Path(__file__).resolve()), "--side", "envpool", "--npz", str(npz), "--seed", str(args.seed)]
    cmd += ["--steps", str(args.steps), "--stats-envs", str(args.stats_envs), "--stats-steps", str(args.stats_steps)]
    cmd += ["--action-amplitude", str(args.action_amplitude)]
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> None:
    """Run both sides and write the JSON report."""
    import mujoco

    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        npz = Path(tmp) / "envpool.npz"
        run_envpool(args.envpool_python, args, npz)
        ep = dict(np.load(npz))
    meta = json.loads(str(ep.pop("meta")))
    ours = replay(ep, args.seed)
    report = {
        "task": TASK_ID,
        "envpool": {"version": meta["envpool"], "mujoco": args.envpool_mujoco, "config": meta["config"]},
        "ours": {"env": "go1_joystick_flat", "mujoco": mujoco.__version__, "python": platform.python_version()},
        "settings": {"noise_level": 0.0, "randomisation": "off (envpool has none to switch)", "seed": args.seed,
                     "action_amplitude": args.action_amplitude},
        "trajectory": compare(ep, ours, args.tol),
        "joint_velocity_by_plain_mujoco": warmstart_diagnosis(ep, ours, args.seed),
    }  # fmt: skip
    counted = ep["stats_counted"]
    report["random_action_stats"] = {
        "envs": args.stats_envs, "steps": args.stats_steps,
        "envpool": episode_stats(ep["stats_reward"].astype(np.float64), ep["stats_terminated"],
                                 ep["stats_truncated"], counted),
        "ours": our_stats(args.stats_envs, args.stats_steps, args.seed),
    }  # fmt: skip
    from benchmark.machine import write_json_entry

    write_json_entry(args.out, KEY, report)
    print(json.dumps({k: report["trajectory"][k] for k in ("steps_compared", "first_above_tol")}, indent=1))
    print(json.dumps(report["random_action_stats"], indent=1))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line of the default side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--envpool-python",
        required=True,
        help="interpreter of an environment with envpool (1.2.7 on Python 3.12; 1.2.5 on 3.11)",
    )
    parser.add_argument(
        "--envpool-mujoco",
        default="3.11.0",
        help="the MuJoCo version envpool's wheel bundles (1.2.7: 3.11.0; 1.2.5: 3.6.0)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--action-amplitude", type=float, default=0.3)
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--stats-envs", type=int, default=32)
    parser.add_argument("--stats-steps", type=int, default=1100)
    return parser.parse_args(argv)


if __name__ == "__main__" and "--side" in sys.argv and "envpool" in sys.argv:
    parser = argparse.ArgumentParser()
    parser.add_argument("--side")
    for name, default in (
        ("--npz", ""),
        ("--seed", 0),
        ("--steps", 300),
        ("--stats-envs", 32),
        ("--stats-steps", 0),
        ("--action-amplitude", 1.0),
    ):
        parser.add_argument(name, type=type(default), default=default)
    envpool_side(parser.parse_args())
    sys.exit(0)

if __name__ == "__main__":
    main()
