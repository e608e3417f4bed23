"""Score every checkpoint of a run with the raw and the averaged actor: the stability of frozen policies along training.

A run with periodic checkpoints (`checkpoint.interval_env_steps`, `checkpoint.keep_last=0`) and `algo.policy_ema`
on keeps both weights in each checkpoint. Each is scored here through `offpolicy.eval` (the mean action, the same
episodes and seed for both weights), so the two series are paired: same training run, same states, same starts.

    python -m benchmark.offpolicy.checkpoint_sweep <run dir> --episodes 16 --out sweep.json [--target 870]

Writes one JSON object: per checkpoint its env steps and, for each actor, the episodes' median, mean, worst and
returns; with `--target`, per actor the stability figures of docs/results (`benchmark.offpolicy.stability`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmark.offpolicy.stability import stability  # noqa: E402

ACTORS = ("raw", "averaged")


def checkpoints(run_dir: Path) -> list[Path]:
    """`<run dir>/checkpoints/step_<env steps>.pt`, oldest first."""
    found = [
        (int(m.group(1)), p) for p in run_dir.glob("checkpoints/step_*.pt") if (m := re.match(r"step_(\d+)", p.stem))
    ]
    return [p for _, p in sorted(found)]


def eval_config(checkpoint: Path, actor: str, episodes: int, seed: int, device: str):
    """`conf/eval.yaml` composed with this checkpoint, actor, episode count and seed."""
    from hydra import compose, initialize_config_dir

    overrides = [
        f"checkpoint={checkpoint}",
        f"actor={actor}",
        f"episodes={episodes}",
        f"seed={seed}",
        f"device={device}",
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="eval", overrides=overrides)


def sweep(run_dir: Path, episodes: int, seed: int, device: str, actors=ACTORS) -> list[dict]:
    """One row per checkpoint: env steps and each actor's return statistics over `episodes` episodes."""
    from offpolicy.eval import evaluate

    rows = []
    for path in checkpoints(run_dir):
        row: dict = {"checkpoint": path.name}
        for actor in actors:
            with tempfile.TemporaryDirectory() as out:
                result = evaluate(eval_config(path.resolve(), actor, episodes, seed, device), out)
            row["env_steps"] = result["checkpoint_env_steps"]
            row[actor] = {k: result[f"return_{k}"] for k in ("median", "mean", "min")} | {"returns": result["returns"]}
        rows.append(row)
        print(
            json.dumps({k: v if k in ("checkpoint", "env_steps") else v["median"] for k, v in row.items()}), flush=True
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--seed", type=int, default=7, help="evaluation seed (the same for both actors)")
    p.add_argument("--device", default="auto")
    p.add_argument("--target", type=float, default=None, help="target return for the stability figures")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    rows = sweep(args.run_dir, args.episodes, args.seed, args.device)
    if not rows:
        print(f"no checkpoints/step_*.pt under {args.run_dir}", file=sys.stderr)
        return 1
    out: dict = {"run_dir": args.run_dir.name, "episodes": args.episodes, "seed": args.seed, "checkpoints": rows}
    if args.target is not None:
        out["stability"] = {
            actor: stability([r["env_steps"] for r in rows], [r[actor]["median"] for r in rows], args.target)
            for actor in ACTORS
        }
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
