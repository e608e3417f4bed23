"""Parity of `env=go2_joystick_flat`'s reward, termination and observation terms with UniLab's own term code.

UniLab's terms are torch classes and functions of a `ManagerBasedRlEnv`; UniLab is not a project dependency and
needs its own Python environment (torch, unisim-core, hydra-core, gymnasium, prettytable and the unilab wheel), so
the script has two sides:

- the default side (the project's interpreter) builds states in plain MuJoCo on our Go2 model: feet put down or
  lifted by hand (0 to 4 feet in contact), feet held at and around the swing target height, tilts on both sides
  of the termination angle, and random poses and velocities. Each state is evaluated at several gait clocks
  (control steps since reset, across the whole cycle and far along it), with commands (zero, tracked exactly,
  random) and actions (zero, unchanged, random). It writes what plain MuJoCo reads for each state (sensors by
  name, the base body's world pose, joint positions and velocities) to an .npz, runs the UniLab side on it,
  evaluates our env's own code path on the same states, and writes per-term max abs differences to a JSON.
- `--side unilab` (the UniLab environment's interpreter) reads the task's `base.yaml` and the `mujoco.yaml`
  that overrides it from the installed wheel, builds UniLab's `RewardManager` over its reward terms and
  UniLab's observation and termination terms with an env-like object that serves the .npz's quantities
  through the read-plan interfaces those terms use, and writes every term's value. Only numpy, torch,
  omegaconf and unilab are imported on this side.

    python -m benchmark.env.go2_parity --unilab-python <unilab env>/bin/python
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

FEET = ("FL", "FR", "RL", "RR")
TERMS = (
    "tracking_lin_vel", "tracking_ang_vel", "lin_vel_z", "ang_vel_xy", "base_height", "action_rate",
    "similar_to_default", "contact", "swing_feet_z",
)  # fmt: skip
SENSORS = ("gyro", "local_linvel", "upvector", *(f"{f}_foot_contact" for f in FEET), *(f"{f}_pos" for f in FEET))
OBS_TERMS = (
    ("base_ang_vel", 3), ("projected_gravity", 3), ("joint_pos", 12), ("joint_vel", 12), ("actions", 12),
    ("command", 3), ("gait_phase", 4),
)  # fmt: skip
"""the `policy` group's terms in UniLab's order; the critic adds `base_lin_vel` (3)"""
PHASE_STEPS = (*range(26), 37, 749, 750, 1000, 12345)
"""gait clocks (control steps since reset): one whole cycle of 25 steps, and far along where float32 drifts"""
CONTACT_PATTERNS = (
    (0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (1, 0, 0, 1),
    (0, 1, 1, 0), (1, 1, 0, 0), (0, 0, 1, 1), (0, 1, 1, 1), (1, 0, 1, 1), (1, 1, 0, 1), (1, 1, 1, 0),
)  # fmt: skip
"""feet down (1) or lifted (0), in FEET order"""
PENETRATION = 0.002
LIFTED_CALF = -2.6
DEFAULT_OUT = Path("benchmark/outputs/checks/parity.json")
KEY = "go2_unilab"
"""this check's entry in the parity file (each parity script writes its own key)"""
TASK_CONF = "conf/flashsac/task/go2_joystick_flat"
DT = 0.02


# --- states (plain MuJoCo) ------------------------------------------------------------------------------
def load_model():
    """Our Go2 model as the env compiles it."""
    from envs.locomotion.go2_joystick import Go2JoystickFlat

    return Go2JoystickFlat().build_model()


def quat_from_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """(w, x, y, z) of the rotation yaw about z, then pitch about y, then roll about x (intrinsic z-y-x)."""
    cr, sr, cp, sp = np.cos(roll / 2), np.sin(roll / 2), np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return np.array([
        cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy,
    ])  # fmt: skip


def foot_bottoms(model, qpos: np.ndarray) -> np.ndarray:
    """(4,) world z of each foot sphere's lowest point at `qpos` (kinematics only)."""
    import mujoco

    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    ids = [model.geom(f).id for f in FEET]
    return data.geom_xpos[ids, 2] - model.geom_size[ids, 0]


def contact_pose(model, down: tuple[int, ...], yaw: float = 0.0) -> np.ndarray:
    """qpos with the feet of `down` pressed `PENETRATION` into the floor and the others' calves folded up,
    base level (no foot down: base 0.6 m up)."""
    qpos = model.keyframe("home").qpos.copy()
    qpos[3:7] = quat_from_rpy(0.0, 0.0, yaw)
    for i, is_down in enumerate(down):
        if not is_down:
            qpos[7 + 3 * i + 2] = LIFTED_CALF
    if not any(down):
        qpos[2] = 0.6
        return qpos
    bottoms = foot_bottoms(model, qpos)
    qpos[2] -= max(bottoms[i] for i in range(4) if down[i]) + PENETRATION
    return qpos


def feet_at_height(model, height: float, roll: float = 0.0) -> np.ndarray:
    """Home pose raised so the feet's centres average `height` (the sensors' `framepos` is the geom centre)."""
    qpos = model.keyframe("home").qpos.copy()
    qpos[3:7] = quat_from_rpy(roll, 0.0, 0.0)
    radius = model.geom_size[model.geom("FL").id, 0]
    qpos[2] += height - float(np.mean(foot_bottoms(model, qpos) + radius))
    return qpos


def forward(model, qpos: np.ndarray, qvel: np.ndarray):
    """A fresh MjData at (qpos, qvel) after `mj_forward`."""
    import mujoco

    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = qpos, qvel
    mujoco.mj_forward(model, data)
    return data


def contact_flags(model, qpos: np.ndarray) -> np.ndarray:
    """(4,) bool: each foot's `found` contact sensor, as plain MuJoCo computes it at `qpos`."""
    data = forward(model, qpos, np.zeros(model.nv))
    return np.array([data.sensor(f"{f}_foot_contact").data[0] > 0 for f in FEET])


def build_states(model, seed: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(qpos, qvel, labels) of the hand-built and random states."""
    rng = np.random.default_rng(seed)
    qpos, labels = [], []
    for i, down in enumerate(CONTACT_PATTERNS):
        qpos.append(contact_pose(model, down, yaw=0.7 * i))
        labels.append("feet down " + ("".join(f for f, d in zip(FEET, down, strict=True) if d) or "none"))
    for h in (0.02, 0.07, 0.1, 0.13, 0.25):
        qpos.append(feet_at_height(model, h))
        labels.append(f"feet centres at {h} m")
    for roll, pitch in ((0.9, 0.0), (1.1, 0.0), (0.0, -1.0), (0.0, 1.1), (0.7, 0.7), (np.pi, 0.0)):
        q = model.keyframe("home").qpos.copy()
        q[2] = 0.45
        q[3:7] = quat_from_rpy(roll, pitch, 0.3)
        qpos.append(q)
        labels.append(f"tilted roll {roll:.2f} pitch {pitch:.2f}")
    low, high = model.jnt_range[1:, 0], model.jnt_range[1:, 1]
    for i in range(10):
        q = model.keyframe("home").qpos.copy()
        q[:3] = [rng.uniform(-2, 2), rng.uniform(-2, 2), rng.uniform(0.15, 0.45)]
        q[3:7] = quat_from_rpy(*rng.uniform([-0.6, -0.6, -np.pi], [0.6, 0.6, np.pi]))
        q[7:] = rng.uniform(low, high)
        qpos.append(q)
        labels.append(f"random pose {i}")
    qpos = np.asarray(qpos)
    qvel = np.zeros((len(qpos), model.nv))
    qvel[:, :3] = rng.uniform(-1.5, 1.5, size=(len(qpos), 3))
    qvel[:, 3:6] = rng.uniform(-2.0, 2.0, size=(len(qpos), 3))
    qvel[:, 6:] = rng.uniform(-10.0, 10.0, size=(len(qpos), model.nv - 6))
    qvel[0] = 0.0  # one state at rest
    return qpos, qvel, labels


def plain_reads(model, qpos: np.ndarray, qvel: np.ndarray) -> dict[str, np.ndarray]:
    """What UniLab's terms read, per state, from plain MuJoCo: named sensors, base body pose, joint state."""
    base = model.body("base").id
    out: dict[str, list] = {f"sensor/{s}": [] for s in SENSORS} | {"base_pos": [], "base_quat": []}
    out |= {"joint_pos": [], "joint_vel": []}
    for q, v in zip(qpos, qvel, strict=True):
        data = forward(model, q, v)
        for s in SENSORS:
            out[f"sensor/{s}"].append(data.sensor(s).data.copy())
        out["base_pos"].append(data.xpos[base].copy())
        out["base_quat"].append(data.xquat[base].copy())
        out["joint_pos"].append(data.qpos[7:].copy())
        out["joint_vel"].append(data.qvel[6:].copy())
    return {k: np.asarray(v) for k, v in out.items()}


def build_inputs(model, qpos: np.ndarray, qvel: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """(B, N, ...) commands, actions and previous actions for each gait clock of `PHASE_STEPS` (B) and state (N):
    every fourth row a zero command, every fourth an exactly tracked one, the rest uniform over a range a bit
    wider than UniLab's; every fifth row the action unchanged, every seventh both actions zero."""
    rng = np.random.default_rng(seed + 1)
    b, n = len(PHASE_STEPS), len(qpos)
    command = rng.uniform([-1.0, -0.6, -1.2], [1.4, 0.6, 1.2], size=(b, n, 3))
    reads = plain_reads(model, qpos, qvel)
    lin, gyro = reads["sensor/local_linvel"], reads["sensor/gyro"]
    rows = np.arange(n)
    command[:, rows % 4 == 0] = 0.0
    tracked = np.concatenate([lin[:, :2], gyro[:, 2:3]], axis=1)
    command[:, rows % 4 == 1] = tracked[rows % 4 == 1]
    action = rng.uniform(-1.0, 1.0, size=(b, n, 12))
    prev = rng.uniform(-1.0, 1.0, size=(b, n, 12))
    prev[:, rows % 5 == 0] = action[:, rows % 5 == 0]
    action[:, rows % 7 == 0] = prev[:, rows % 7 == 0] = 0.0
    return {"command": command, "action": action, "prev_action": prev, "steps": np.asarray(PHASE_STEPS)}


# --- our side ---------------------------------------------------------------------------------------------
def our_terms(qpos: np.ndarray, qvel: np.ndarray, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our env's own code path (noise, randomisation and pushes off) on each state, per gait clock: the phase
    advanced by `begin_step` as many times, then the step's physics read, carry, observation, reward terms
    (unweighted and weighted), reward and termination, as `step` computes them."""
    from envs.locomotion.go2_joystick import RANDOMIZATIONS, reward_terms
    from envs.registry import make

    off = {"noise_level": 0.0, "push_robots": False, **{flag: False for flag in RANDOMIZATIONS}}
    out: dict[str, list] = {}
    with make("go2_joystick_flat", len(qpos), seed=0, nthread=1, **off) as env:
        for b, steps in enumerate(inputs["steps"]):
            env.set_physics_state(qpos, qvel)
            env.command = inputs["command"][b].copy()
            env.last_act = inputs["prev_action"][b].copy()
            env.gait_phase = np.float32(0.0)
            for _ in range(int(steps)):
                env.begin_step()
            p = env.physics()
            carry = env.step_inputs(p, inputs["action"][b].copy())
            obs = env.observe(p)
            terms = reward_terms(env.layout, p, carry)
            reward, weighted = env.reward(p, carry)
            row = {"reward": reward, "terminated": env.fell(p), "actor": obs["actor"], "critic": obs["critic"]}
            row |= {f"term/{k}": v for k, v in terms.items()} | {f"weighted/{k}": v for k, v in weighted.items()}
            for k, v in row.items():
                out.setdefault(k, []).append(np.asarray(v, dtype=np.float64))
    return {k: np.asarray(v) for k, v in out.items()}


# --- UniLab side ------------------------------------------------------------------------------------------
def unilab_side(args: argparse.Namespace) -> None:
    """UniLab's terms on the .npz's reads; writes their values to `args.out_npz`."""
    import torch
    import unilab
    from omegaconf import OmegaConf
    from unilab.managers.manager_base import ManagerTermBaseCfg
    from unilab.managers.reward_manager import RewardManager, RewardTermCfg

    conf = Path(unilab.__file__).parent / TASK_CONF
    composed = OmegaConf.merge(OmegaConf.load(conf / "base.yaml"), OmegaConf.load(conf / "mujoco.yaml"))
    cfg = OmegaConf.to_container(composed, resolve=True)
    x = dict(np.load(args.npz))
    version = importlib.import_module("importlib.metadata").version
    meta = {"unilab": unilab.__version__, "unisim_core": version("unisim-core"), "torch": torch.__version__}
    meta |= {"omegaconf": version("omegaconf"), "python": platform.python_version()}

    def func_of(path: str):
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)

    f32 = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
    sensors = {s: f32(x[f"sensor/{s}"]) for s in SENSORS}
    n = len(x["joint_pos"])

    class SensorView:
        def __init__(self, names):
            self.names, self.dimensions, self.backend_type = names, tuple(sensors[s].shape[1] for s in names), "npz"

        def read(self):
            return torch.cat([sensors[s] for s in self.names], dim=1)

    read_plan = SimpleNamespace(
        ready=True,
        sensor_names={"robot": SENSORS},
        sensor_tensor_views=lambda entity, names: SimpleNamespace(values={s: sensors[s] for s in names}),
        body_tensor_view=lambda entity, names: SimpleNamespace(
            pos_w=f32(x["base_pos"])[:, None], quat_w=f32(x["base_quat"])[:, None]
        ),
        joint_tensor_view=lambda entity: SimpleNamespace(joint_pos=f32(x["joint_pos"]), joint_vel=f32(x["joint_vel"])),
    )
    robot_cfg = cfg["env"]["scene"]["entities"]["robot"]
    gravity = torch.tensor([[0.0, 0.0, -1.0]]).repeat(n, 1)
    robot = SimpleNamespace(
        name="robot",
        root_body_name=robot_cfg["root_body_name"],
        joint_names=tuple(robot_cfg["joint_names"]),
        data=SimpleNamespace(
            default_joint_pos=lambda device: f32(x["default_joint_pos"]).expand(n, -1),
            default_joint_vel=lambda device: torch.zeros(n, 12),
            gravity_vec_w=lambda device: gravity,
        ),
    )

    class Scene:
        """The read plan and sensor binding the terms ask the scene for; `scene["robot"]` is the robot."""

        def __init__(self):
            self.read_plan, self.bind_sensor_data = read_plan, SensorView

        def __getitem__(self, name):
            return robot

    env = SimpleNamespace(
        num_envs=n, device=torch.device("cpu"), step_dt=float(cfg["env"]["ctrl_dt"]), common_step_counter=0,
        cfg=SimpleNamespace(scene=SimpleNamespace(entities={"robot": SimpleNamespace(**robot_cfg)})),
        scene=Scene(),
    )  # fmt: skip

    reward_cfg = cfg["reward"]
    # the example as composed: its `std` entries reach UniLab's tracking classes, which accept only their own
    # parameters; record what UniLab answers, then build the terms without them
    composed_error = None
    try:
        RewardManager(
            {k: RewardTermCfg(func=func_of(v["func"]), weight=v["weight"], params=dict(v.get("params", {})))
             for k, v in reward_cfg.items()}, env,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the message is the record
        composed_error = f"{type(exc).__name__}: {exc}"
    dropped = {k: sorted(set(v.get("params", {})) & {"std"}) for k, v in reward_cfg.items()}
    meta["composed_reward_error"] = composed_error
    meta["params_dropped"] = {k: v for k, v in dropped.items() if v}
    meta["weights"] = {k: v["weight"] for k, v in reward_cfg.items()}
    std = float(reward_cfg["tracking_lin_vel"]["params"]["std"])
    meta["std_as_sigma"] = std**2

    def reward_terms_cfg(sigma: float | None = None) -> dict:
        out = {}
        for k, v in reward_cfg.items():
            params = {p: val for p, val in v.get("params", {}).items() if p != "std"}
            if sigma is not None and "tracking_sigma" in params:
                params["tracking_sigma"] = sigma
            out[k] = RewardTermCfg(func=func_of(v["func"]), weight=float(v["weight"]), params=params)
        return out

    def obs_terms(group: str):
        terms = []
        for name, v in cfg["env"]["observations"][group]["terms"].items():
            term = ManagerTermBaseCfg(func=func_of(v["func"]), params=dict(v.get("params", {})))
            if isinstance(term.func, type):
                term.func = term.func(cfg=term, env=env)
            terms.append((name, term))
        return terms

    termination = cfg["env"]["terminations"]["bad_orientation"]
    res: dict[str, list] = {}
    for b, steps in enumerate(x["steps"]):
        env.common_step_counter = 0  # terms built at reset, then the clock moves on to this step
        env.action_manager = SimpleNamespace(action=f32(x["action"][b]), prev_action=f32(x["prev_action"][b]))
        env.command_manager = SimpleNamespace(get_command=lambda name, b=b: f32(x["command"][b]))
        manager = RewardManager(reward_terms_cfg(), env)
        wide = RewardManager(reward_terms_cfg(sigma=std**2), env)
        groups = {g: obs_terms(g) for g in ("policy", "critic")}
        env.common_step_counter = int(steps)
        row = {"reward": manager.compute(dt=env.step_dt).clone()}
        for name, term_cfg in zip(manager._term_names, manager._term_cfgs, strict=True):
            row[f"term/{name}"] = term_cfg.func(env, **term_cfg.params)
            row[f"weighted/{name}"] = manager.step_rewards[:, manager._term_names.index(name)].clone()
        for name, term_cfg in zip(wide._term_names, wide._term_cfgs, strict=True):
            if name.startswith("tracking_"):
                row[f"std_as_sigma/{name}"] = term_cfg.func(env, **term_cfg.params)
        for g, terms in groups.items():
            parts = [term.func(env, **term.params) for _, term in terms]
            row["actor" if g == "policy" else "critic"] = torch.cat(parts, dim=1)
        row["terminated"] = func_of(termination["func"])(env, **termination["params"]).to(torch.float64)
        for k, v in row.items():
            res.setdefault(k, []).append(v.detach().numpy().astype(np.float64))
    np.savez(args.out_npz, meta=json.dumps(meta), **{k: np.asarray(v) for k, v in res.items()})


# --- comparison -------------------------------------------------------------------------------------------
def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over all entries."""
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def obs_columns(critic: bool) -> list[tuple[str, slice]]:
    """(term, columns) of the actor (49) or critic (52) observation."""
    terms = [*OBS_TERMS, ("base_lin_vel", 3)] if critic else list(OBS_TERMS)
    out, start = [], 0
    for name, width in terms:
        out.append((name, slice(start, start + width)))
        start += width
    return out


def compare(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> dict:
    """Per-term max abs differences (unweighted, weighted), the reward's, termination's and each observation
    term's, and the value ranges the states covered."""
    out: dict = {"terms": {}, "weighted": {}, "observation": {"actor": {}, "critic": {}}}
    for k in TERMS:
        out["terms"][k] = max_abs(ours[f"term/{k}"], ref[f"term/{k}"])
        out["weighted"][k] = max_abs(ours[f"weighted/{k}"], ref[f"weighted/{k}"])
    out["reward"] = max_abs(ours["reward"], ref["reward"])
    out["terminated_disagreements"] = int(np.sum(ours["terminated"].astype(bool) != ref["terminated"].astype(bool)))
    for key, critic in (("actor", False), ("critic", True)):
        for name, cols in obs_columns(critic):
            out["observation"][key][name] = max_abs(ours[key][..., cols], ref[key][..., cols])
    out["coverage"] = {
        k: {"min": float(np.min(ours[f"term/{k}"])), "max": float(np.max(ours[f"term/{k}"])),
            "distinct": int(np.unique(np.round(ours[f"term/{k}"], 6)).size)}
        for k in TERMS
    }  # fmt: skip
    out["coverage"]["terminated_rows"] = int(np.sum(ours["terminated"].astype(bool)))
    return out


def run_unilab(python: str, npz: Path, out_npz: Path) -> None:
    """The UniLab side in its own interpreter."""
    cmd = [python, str(Path(__file__).resolve()), "--side", "unilab", "--npz", str(npz), "--out-npz", str(out_npz)]
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> None:
    """Build the states, run both sides and write the JSON report."""
    import mujoco

    args = parse_args(argv)
    model = load_model()
    qpos, qvel, labels = build_states(model, args.seed)
    flags = np.array([contact_flags(model, q) for q in qpos])
    for i, down in enumerate(CONTACT_PATTERNS):
        if not np.array_equal(flags[i], np.asarray(down, dtype=bool)):
            raise RuntimeError(f"state {labels[i]!r}: MuJoCo's contact flags are {flags[i].tolist()}")
    inputs = build_inputs(model, qpos, qvel, args.seed)
    reads = plain_reads(model, qpos, qvel)
    with tempfile.TemporaryDirectory() as tmp:
        npz, out_npz = Path(tmp) / "reads.npz", Path(tmp) / "unilab.npz"
        np.savez(npz, default_joint_pos=model.keyframe("home").qpos[7:][None], **reads, **inputs)
        run_unilab(args.unilab_python, npz, out_npz)
        ref = dict(np.load(out_npz))
    meta = json.loads(str(ref.pop("meta")))
    ours = our_terms(qpos, qvel, inputs)
    diffs = compare(ours, ref)
    sigma_effect = {
        k: max_abs(ours[f"term/{k}"], ref[f"std_as_sigma/{k}"]) for k in ("tracking_lin_vel", "tracking_ang_vel")
    }
    worst = max([*diffs["terms"].values(), *diffs["weighted"].values(), diffs["reward"]])
    worst_obs = max(v for group in diffs["observation"].values() for v in group.values())
    report = {
        "task": "UniLab Go2JoystickFlat (FlashSAC example: base.yaml with mujoco.yaml over it)",
        "unilab": meta,
        "ours": {"env": "go2_joystick_flat", "mujoco": mujoco.__version__, "numpy": np.__version__,
                 "python": platform.python_version()},
        "settings": {"noise_level": 0.0, "randomisation": "off", "pushes": "off", "seed": args.seed, "dt": DT},
        "states": {
            "count": len(labels), "gait_clocks": list(PHASE_STEPS), "rows_compared": len(labels) * len(PHASE_STEPS),
            "labels": labels, "contact_flags": flags.astype(int).tolist(),
            "feet_down_counts": sorted({int(f.sum()) for f in flags}),
            "how": "qpos/qvel set in plain MuJoCo on our model, mj_forward; lifted feet by folding the calf to "
                   f"{LIFTED_CALF} rad, feet down pressed {PENETRATION} m into the floor; random velocities "
                   "(base +-1.5 m/s, +-2 rad/s, joints +-10 rad/s) except the first state at rest; per row a zero, "
                   "exactly tracked or random command and zero, unchanged or random actions",
        },  # fmt: skip
        "tolerance": args.tol,
        "max_abs_diff": diffs,
        "within_tolerance": bool(worst <= args.tol and worst_obs <= args.tol
                                 and diffs["terminated_disagreements"] == 0),
        "tracking_width_if_std_were_read_as_sigma": {
            "sigma": meta["std_as_sigma"], "max_abs_change_unweighted": sigma_effect,
        },
        "notes": NOTES,
    }  # fmt: skip
    from benchmark.machine import write_json_entry

    write_json_entry(args.out, KEY, report)
    print(json.dumps({k: report[k] for k in ("within_tolerance", "max_abs_diff")}, indent=1))


NOTES = [
    "UniLab's side is its own code: the reward terms through its RewardManager (weights and parameters read "
    "from the wheel's base.yaml merged with mujoco.yaml), its observation term classes and functions of the "
    "policy and critic groups in the YAML's order, and its bad_orientation termination. unisim-core 2.2.0 "
    "(the simulator contracts) is installed in that environment, so no module is stubbed; the simulator itself "
    "is replaced by an env-like object serving plain MuJoCo's reads (named sensors, the base body's xpos and "
    "xquat, joint qpos and qvel) as float32 tensors through the read-plan calls the terms make.",
    "The example as composed does not build: mujoco.yaml adds std: 0.632 to both tracking terms and UniLab's "
    "tracking classes refuse parameters they do not know (unilab.composed_reward_error). Both sides here use "
    "tracking_sigma 0.5, the value UniLab's classes read; 'tracking_width_if_std_were_read_as_sigma' gives how "
    "much the unweighted tracking terms would change if std^2 = 0.4 were meant as the width instead.",
    "The Go2 config's gait terms have no command_name, so UniLab applies no command gate to the phase, the "
    "contact or the swing term; zero-command rows exercise the tracking terms only. The mjlab-style terms of "
    "gait_terms.py (feet air time, clearance, slip) are not in this task's config and are not compared.",
    "What is compared is each term as a function of the step's reads. The timing of those reads within a step "
    "(sensors from the last substep's forward pass, joint and base state after it) and the physics are outside "
    "this check: both sides read the same mj_forward here.",
    "Our side's values are float64 from the env's own functions on its pool's reads of the same states; "
    "UniLab's are float32, so differences of order 1e-6 are rounding.",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line of the default side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unilab-python", required=True, help="interpreter of an environment with unilab 1.5.2")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tol", type=float, default=1e-5)
    return parser.parse_args(argv)


if __name__ == "__main__" and "--side" in sys.argv and "unilab" in sys.argv:
    parser = argparse.ArgumentParser()
    parser.add_argument("--side")
    parser.add_argument("--npz", required=True)
    parser.add_argument("--out-npz", required=True)
    unilab_side(parser.parse_args())
    sys.exit(0)

if __name__ == "__main__":
    main()
