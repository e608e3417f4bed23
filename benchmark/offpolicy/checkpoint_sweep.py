"""Score every checkpoint of a run with the raw and the averaged actor: the stability of frozen policies along training.

A run with periodic checkpoints (`checkpoint.interval_env_steps`, `checkpoint.keep_last=0`) and `algo.policy_ema`
on keeps both weights in each checkpoint. Each is scored here through `offpolicy.eval` (the mean action, the same
episodes and seed for both weights), so the two series are paired: same training run, same states, same starts.

    python -m benchmark.offpolicy.checkpoint_sweep <run dir> --episodes 16 --out sweep.json [--target 870] [--jobs 4]

Writes one JSON object: per checkpoint its env steps and, for each actor, the episodes' median, mean, worst and
returns; with `--target`, per actor the stability figures of docs/results (`benchmark.offpolicy.stability`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
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


def score(path: Path, episodes: int, seed: int, device: str, actors=ACTORS) -> dict:
    """One checkpoint's row: its env steps and each actor's return statistics over `episodes` episodes."""
    from offpolicy.eval import evaluate

    row: dict = {"checkpoint": path.name}
    for actor in actors:
        with tempfile.TemporaryDirectory() as out:
            result = evaluate(eval_config(path.resolve(), actor, episodes, seed, device), out)
        row["env_steps"] = result["checkpoint_env_steps"]
        row[actor] = {k: result[f"return_{k}"] for k in ("median", "mean", "min")} | {"returns": result["returns"]}
    return row


def sweep(
    run_dir: Path, episodes: int, seed: int, device: str, actors=ACTORS, jobs: int = 1, on_row=None
) -> list[dict]:
    """One row per checkpoint, oldest first, scored by `jobs` processes at once; `on_row(rows so far)` after each
    (so a sweep cut short keeps what it finished)."""
    paths = checkpoints(run_dir)
    rows: list[dict] = []

    def done(row: dict) -> None:
        rows.append(row)
        rows.sort(key=lambda r: r["env_steps"])
        print(
            json.dumps({k: v if k in ("checkpoint", "env_steps") else v["median"] for k, v in row.items()}), flush=True
        )
        if on_row is not None:
            on_row(rows)

    if jobs <= 1:
        for path in paths:
            done(score(path, episodes, seed, device, actors))
        return rows
    ctx = multiprocessing.get_context("spawn")  # each worker its own CUDA context and MuJoCo pools
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [pool.submit(score, path, episodes, seed, device, actors) for path in paths]
        for future in concurrent.futures.as_completed(futures):
            done(future.result())
    return rows


def report(run_dir: Path, episodes: int, seed: int, rows: list[dict], target: float | None) -> dict:
    """The JSON the sweep writes: its settings, the rows and, with a target, each actor's stability figures."""
    out: dict = {"run_dir": run_dir.name, "episodes": episodes, "seed": seed, "checkpoints": rows}
    if target is not None:
        out["stability"] = {
            actor: stability([r["env_steps"] for r in rows], [r[actor]["median"] for r in rows], target)
            for actor in ACTORS
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--seed", type=int, default=7, help="evaluation seed (the same for both actors)")
    p.add_argument("--device", default="auto")
    p.add_argument("--target", type=float, default=None, help="target return for the stability figures")
    p.add_argument("--jobs", type=int, default=1, help="checkpoints scored at once, each in its own process")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs {args.jobs}: must be >= 1")
    if not checkpoints(args.run_dir):
        print(f"no checkpoints/step_*.pt under {args.run_dir}", file=sys.stderr)
        return 1

    def write(rows: list[dict]) -> None:  # after every checkpoint: a sweep cut short keeps what it has
        text = json.dumps(report(args.run_dir, args.episodes, args.seed, rows, args.target), indent=1) + "\n"
        args.out.with_name(args.out.name + ".tmp").write_text(text)
        args.out.with_name(args.out.name + ".tmp").replace(args.out)

    sweep(args.run_dir, args.episodes, args.seed, args.device, jobs=args.jobs, on_row=write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
