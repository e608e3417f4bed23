"""Where in its episodes a frozen policy earns its return: reward per block of steps, in dm_control's own suite.

A DeepMind Control episode lasts 1000 steps from a randomised initial pose, and its reward is at most 1 a step.
This splits each episode's rewards into blocks of `--block` steps (default 100) and finds the first block that
earns at least `--level` of its steps (default 0.8: 80 in a block of 100), the onset of the task's gait. That
tells a policy that fails to get going from one that falls out of its gait: per episode the block sums, the
onset, the least block from the onset on and the mean height of one body per block (`--body`, default torso).
For tasks whose body has a free root joint (dog, humanoid, quadruped) it also keeps how each episode started:
the root's horizontal velocity in the body's own frame (forward and sideways) and its yaw rate, which the
suite's reset randomises, and the mean magnitude of the actuators' initial activations where it randomises
those (dog). The summary compares them across the episodes that got going within the first two blocks (`early`),
later (`late`) and never (`never`), so a start the policy cannot handle shows as a difference.

    python -m benchmark.offpolicy.episode_phases <checkpoint or policy file> --episodes 64 --seed 11 --out phases.json

The episodes run one after another in one suite environment seeded with `--seed` (as `offpolicy.eval
reference=dm_control` does), acting with the mean action of the actor `--actor` names, on the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def block_sums(rewards: np.ndarray, block: int) -> np.ndarray:
    """The rewards summed over consecutive blocks of `block` steps; the episode must split into whole blocks."""
    rewards = np.asarray(rewards, np.float64)
    if block <= 0 or len(rewards) % block:
        raise ValueError(f"--block {block} does not split an episode of {len(rewards)} steps into whole blocks")
    return rewards.reshape(-1, block).sum(axis=1)


def onset(blocks: np.ndarray, threshold: float) -> int | None:
    """Index of the first block whose sum reaches `threshold`, or None if none does."""
    reached = np.flatnonzero(np.asarray(blocks) >= threshold)
    return int(reached[0]) if len(reached) else None


def episode_phases(rewards: np.ndarray, heights: np.ndarray, block: int, level: float) -> dict[str, Any]:
    """One episode's return, block sums, onset, least block from the onset on and body height per block."""
    blocks = block_sums(rewards, block)
    first = onset(blocks, level * block)
    return {
        "return": float(np.sum(rewards)),
        "blocks": [round(float(b), 2) for b in blocks],
        "onset_block": first,
        "least_block_from_onset": None if first is None else round(float(blocks[first:].min()), 2),
        "height_by_block": [round(float(h), 3) for h in np.asarray(heights, np.float64).reshape(-1, block).mean(1)],
    }


def initial_motion(root_qvel: np.ndarray, body_xmat: np.ndarray, act: np.ndarray) -> dict[str, float]:
    """How an episode started: the free root's world velocity (`root_qvel`, its 6 entries) as forward and
    sideways speed along the body's own x and y axes (`body_xmat`, row-major 3x3 as MuJoCo keeps it), the yaw
    rate, and the mean magnitude of the initial actuator activations (`act`; 0 where there are none)."""
    frame = np.asarray(body_xmat, np.float64).reshape(3, 3)
    velocity = np.asarray(root_qvel, np.float64)[:3]
    act = np.asarray(act, np.float64)
    return {
        "forward_velocity": round(float(frame[:, 0] @ velocity), 4),
        "sideways_velocity": round(float(frame[:, 1] @ velocity), 4),
        "yaw_rate": round(float(root_qvel[5]), 4),
        "act_abs_mean": round(float(np.abs(act).mean()), 4) if act.size else 0.0,
    }


START_GROUPS = ("early", "late", "never")


def start_group(onset_block: int | None) -> str:
    """`early`: the gait within the first two blocks; `late`: after them; `never`: not at all."""
    return "never" if onset_block is None else ("early" if onset_block < 2 else "late")


def initial_by_start(episodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per start group: its episode count, the median forward speed (signed: moving backward is not moving
    forward) and the share of episodes that started moving backward, the medians of |sideways speed| and |yaw
    rate| (the task is symmetric in both) and of the initial activations' magnitude. None where the episodes
    kept no initial motion."""
    if not episodes or episodes[0].get("initial") is None:
        return None
    out: dict[str, Any] = {}
    for group in START_GROUPS:
        members = [e["initial"] for e in episodes if start_group(e["onset_block"]) == group]
        out[group] = {"episodes": len(members)}
        if members:
            forward = np.array([m["forward_velocity"] for m in members])
            out[group].update(
                median_forward_velocity=round(float(np.median(forward)), 4),
                backward_fraction=round(float(np.mean(forward < 0)), 4),
                median_abs_sideways_velocity=round(float(np.median([abs(m["sideways_velocity"]) for m in members])), 4),
                median_abs_yaw_rate=round(float(np.median([abs(m["yaw_rate"]) for m in members])), 4),
                median_act_abs_mean=round(float(np.median([m["act_abs_mean"] for m in members])), 4),
            )
    return out


def summarise(episodes: list[dict[str, Any]], num_blocks: int) -> dict[str, Any]:
    """Over the episodes: returns, how many reached the gait and when, and the least block after reaching it."""
    returns = np.array([e["return"] for e in episodes])
    started = [e for e in episodes if e["onset_block"] is not None]
    return {
        "episodes": len(episodes),
        "return_median": float(np.median(returns)),
        "return_mean": float(returns.mean()),
        "return_min": float(returns.min()),
        "reached_gait": len(started),
        "never_reached_gait": len(episodes) - len(started),
        "onset_block_counts": np.bincount([e["onset_block"] for e in started], minlength=num_blocks).tolist(),
        "least_block_from_onset": min((e["least_block_from_onset"] for e in started), default=None),
        "returns_reached_gait": sorted(round(e["return"], 1) for e in started),
        "returns_never_reached_gait": sorted(round(e["return"], 1) for e in episodes if e["onset_block"] is None),
        "initial_by_start": initial_by_start(episodes),
    }


def load_mean_policy(path: Path, actor: str) -> tuple[str, Any]:
    """(task name, the mean-action policy of the checkpoint's `actor` weights) on the CPU."""
    import torch
    from omegaconf import OmegaConf

    import envs
    from offpolicy.checkpoint import load_algorithm_state, load_checkpoint
    from offpolicy.eval import eval_actor_config, eval_algo_config
    from offpolicy.runtime.runner import default_algorithm_factory
    from offpolicy.runtime.snapshot_eval import MeanPolicy

    ckpt = load_checkpoint(path, map_location="cpu")
    name = str(ckpt["env"])
    algo_cfg = eval_actor_config(eval_algo_config(ckpt["config"]["algo"], False), actor, ckpt, path)
    options = (ckpt["config"].get("env") or {}).get("options") or {}
    probe = envs.make(name, num_envs=1, seed=0, **options)
    spec = probe.spec
    probe.close()
    if not spec.dm_control_id:
        raise SystemExit(f"checkpoint {path} is for {name!r}, which names no DeepMind Control Suite task")
    cpu = torch.device("cpu")
    algorithm = default_algorithm_factory(
        OmegaConf.create(algo_cfg), replace(spec, num_envs=int(ckpt["num_envs"])), cpu
    )
    load_algorithm_state(algorithm, ckpt, path, allow_policy_only=True)
    return name, MeanPolicy(algorithm, spec, cpu)


def run(path: Path, episodes: int, seed: int, block: int, level: float, body: str, actor: str) -> dict[str, Any]:
    """Every episode's phases and their summary (the JSON this module writes)."""
    import torch

    import envs.dmc

    torch.set_num_threads(1)  # one row a step: more threads only contend with the physics
    name, policy = load_mean_policy(path, actor)
    env = envs.dmc.reference_env(name, seed)
    model = env.physics.model
    free_root = model.njnt > 0 and int(model.jnt_type[0]) == 0  # mjJNT_FREE: a body that moves on its own
    rows = []
    try:
        for _ in range(episodes):
            timestep = env.reset()
            data = env.physics.data
            start = initial_motion(data.qvel[:6], env.physics.named.data.xmat[body], data.act) if free_root else None
            rewards, heights = [], []
            while not timestep.last():
                obs = envs.dmc.flatten_observation(name, timestep.observation).astype(np.float32)
                timestep = env.step(policy({"actor": obs[None]})[0])
                rewards.append(float(timestep.reward))
                heights.append(float(env.physics.named.data.xpos[body, "z"]))
            rows.append({**episode_phases(np.array(rewards), np.array(heights), block, level), "initial": start})
    finally:
        env.close()
    from benchmark.machine import machine_info

    num_blocks = len(rows[0]["blocks"]) if rows else 0
    return {
        "machine": machine_info(),
        "checkpoint": str(path),
        "task": name,
        "actor": actor,
        "action": "mean",
        "seed": seed,
        "block": block,
        "level": level,
        "body": body,
        "summary": summarise(rows, num_blocks),
        "episodes": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--block", type=int, default=100, help="steps per block (default 100)")
    p.add_argument("--level", type=float, default=0.8, help="the gait's onset: a block earning this much a step")
    p.add_argument("--body", default="torso", help="the body whose height is reported (default torso)")
    p.add_argument("--actor", default="auto", choices=("auto", "raw", "averaged"))
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    result = run(args.checkpoint, args.episodes, args.seed, args.block, args.level, args.body, args.actor)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
