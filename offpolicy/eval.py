"""Evaluate a checkpoint or a policy file: `python -m offpolicy.eval checkpoint=<path> [env=<task>] [video=true]`.

An offline, learner-side tool. It runs `episodes` episodes of the deterministic
policy (the actor's mean action; `action=sample` draws the actions as in training
instead, exploration noise and all, in even batches of at most the checkpoint's
training rows), one per env row, in parallel, from fresh resets, and writes `eval.json` (returns, lengths, their mean, median, min, max and
std, the checkpoint's counters) into the output dir. With `reference=gymnasium` it also
re-scores the same policy in Gymnasium's own environment
(`gymnasium.make(spec.gymnasium_id, **spec.gymnasium_kwargs)`, the options this
task matches) and, where this task sets reward options Gymnasium defaults
differently (Ant's and Humanoid's contact cost), once more with Gymnasium's
default reward options (observation options kept: the policy needs its inputs),
the number to compare with published v5 results. On a DeepMind Control Suite task,
`reference=dm_control` re-scores it in dm_control's own suite environment
(`score_in_dm_control`); each task takes only the reference it reproduces (exit status 2
otherwise). With `video=true` it renders the first episode offscreen
with MuJoCo's renderer and writes it to an MP4 (imageio + imageio-ffmpeg) next
to `eval.json`; with `logger=wandb` the numbers and the video go to a W&B run.
On a joystick task, `commands=[[vx, vy, yaw_rate, seconds], ...]` holds each command
in turn from every episode's start on every row (`offpolicy.command_schedule`), the
episodes last the schedule unless `max_episode_steps` is given, and eval.json's
`command_segments` holds each segment's command, [start, end) steps and tracking errors.

Why the env runs in this process: training keeps physics in a torch-free
collector so the learner's device only ever does inference between update
phases. Here there is no training, no replay and no second actor to keep in
sync: the actor runs on `device`, a small `NpEnv` steps in this process (its
pool threads on this process's CPUs), and no collector process is needed.

Rendering backend: `MUJOCO_GL` as set by the user; otherwise the first that
renders of `egl` and `osmesa` (`egl` first with CUDA; OSMesa on Debian/Ubuntu:
`apt-get install -y libosmesa6`; both need PyOpenGL, a dependency of mujoco).
Each is probed in a short subprocess (a 16x16 render), since a missing library
makes `import mujoco` itself fail, and it must be chosen before MuJoCo is
imported here. Without a working backend the episodes still run, eval.json is
written and one line says what to install. Software rendering on a CPU takes a
minute or two for a 1000-step episode; only the first episode is rendered.

Exit statuses: 0 done; 1 an unexpected error; 2 invalid config (one line naming the
key, its value and what is allowed: offpolicy.config; Hydra's composition errors too); 5
the checkpoint is missing, unreadable, corrupt, unsafe or made for another env; 6 the video
could not be rendered or written (eval.json is still written).
"""

from __future__ import annotations

import contextlib
import ctypes.util
import functools
import json
import logging
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from offpolicy.command_schedule import (
    SegmentTracking,
    apply_schedule,
    parse_schedule,
    schedule_steps_total,
)
from offpolicy.exit_status import ExitStatus
from offpolicy.logger import wandb_mode
from offpolicy.runtime.snapshot_eval import (
    MeanPolicy,
    SampledPolicy,
    dm_control_rollout,
    gymnasium_rollout,
    observation_kwargs,
    return_statistics,
    rollout,
    tracking_statistics,
)

CAMERAS: dict[str, dict[str, float]] = {
    "ant": {"distance": 4.0, "elevation": -20.0},
    "halfcheetah": {"distance": 4.0, "elevation": -20.0},
    "hopper": {"distance": 3.0, "elevation": -20.0},
    "walker2d": {"distance": 4.0, "elevation": -20.0},
    "humanoid": {"distance": 4.0, "elevation": -20.0},
    "go1_joystick_flat": {"distance": 1.5, "elevation": -20.0},
    "go2_joystick_flat": {"distance": 1.5, "elevation": -20.0},
}
"""tracking-camera placement per task (Gymnasium v5's default camera distances; the quadrupeds, about 0.3 m tall,
seen from close enough to show their gait)"""


class VideoError(RuntimeError):
    """The episode could not be rendered or encoded; the message is one line."""


def choose_gl_backend(cuda: bool) -> tuple[str, str | None]:
    """Set `MUJOCO_GL` for offscreen rendering and return (backend, None), or (backend, why it cannot render).

    The user's `MUJOCO_GL` is kept. Otherwise the first backend that renders: `egl` then
    `osmesa` with CUDA, `osmesa` then `egl` without. Call before anything imports mujoco.
    """
    if "MUJOCO_GL" in os.environ:
        backend = os.environ["MUJOCO_GL"]
        return backend, gl_backend_problem(backend)
    candidates = ("egl", "osmesa") if cuda else ("osmesa", "egl")
    problems = {}
    for backend in candidates:
        problems[backend] = gl_backend_problem(backend)
        if problems[backend] is None:
            os.environ["MUJOCO_GL"] = backend
            return backend, None
    return candidates[0], problems[candidates[0]]


GL_PROBE = (
    "import mujoco; m = mujoco.MjModel.from_xml_string('<mujoco><worldbody><geom size=\".1\"/></worldbody></mujoco>');"
    "r = mujoco.Renderer(m, 16, 16); r.update_scene(mujoco.MjData(m)); r.render(); r.close()"
)
"""a 16x16 offscreen render: what the video needs, in a process that may fail without harm"""

GL_LIBRARIES = {"osmesa": "OSMesa", "egl": "EGL"}
"""the library each offscreen backend loads"""


def gl_backend_problem(backend: str) -> str | None:
    """None when MuJoCo can render offscreen with `MUJOCO_GL=backend`, else why not (one line).

    Probed in a subprocess: a missing library makes `import mujoco` itself fail, which
    this process could not undo.
    """
    env = {**os.environ, "MUJOCO_GL": backend}
    try:
        proc = subprocess.run([sys.executable, "-c", GL_PROBE], env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "the offscreen render probe did not finish within 120 s"
    if proc.returncode == 0:
        return None
    library = GL_LIBRARIES.get(backend)
    if library is not None and ctypes.util.find_library(library) is None:
        return f"lib{library} not found"  # PyOpenGL's own error names a missing attribute, not the library
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"the render probe exited with status {proc.returncode}"


def no_gl_message(backend: str, problem: str) -> str:
    """One line: which backend failed, why, and what to install."""
    return (
        f"no offscreen OpenGL with MUJOCO_GL={backend} ({problem}): on a CPU machine install OSMesa "
        "(apt-get install libosmesa6) and use MUJOCO_GL=osmesa; with an NVIDIA driver use MUJOCO_GL=egl"
    )


QUIET_LOGGERS = ("absl", "OpenGL")
"""libraries whose INFO lines say nothing to act on: dm_control's renderer choice (absl), PyOpenGL's missing
optional accelerator (logged when `import mujoco` loads an offscreen backend)"""


def quiet_library_logs() -> None:
    """Set the `QUIET_LOGGERS` to WARNING (a higher level of their own is kept): their warnings and errors still
    print, whatever level the root logger has."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)


@contextlib.contextmanager
def no_dm_control_renderer() -> Iterator[None]:
    """`MUJOCO_GL=disable` while the block runs, where no `MUJOCO_GL` is chosen: dm_control, imported there,
    then loads no renderer for a re-score that renders nothing (its automatic choice tries GLFW, which warns
    about a missing X display)."""
    unset = "MUJOCO_GL" not in os.environ
    if unset:
        os.environ["MUJOCO_GL"] = "disable"
    try:
        yield
    finally:
        if unset:
            os.environ.pop("MUJOCO_GL", None)


# --------------------------------------------------------------------------- video


FLOOR_MARGIN_M = 50.0
"""how far the drawn floor reaches beyond the farthest point the camera follows (past the camera's view ahead)"""


def drawn_plane_sizes(model: Any, points: np.ndarray, margin: float = FLOOR_MARGIN_M) -> dict[int, tuple[float, float]]:
    """Half-sizes that draw each finite plane of the world body under every one of `points` (N x 3, world frame),
    `margin` beyond the farthest; geom id -> (x, y) for the planes that need widening.

    A plane's size only sets how far MuJoCo draws it (contact with a plane is unbounded), so a fast runner
    leaves a finite drawn floor behind while still running on it: dm_control's floor is drawn 100 m each way,
    and a humanoid-run policy covers that in about 13 s. Size 0 planes are drawn without bound already."""
    import mujoco

    sizes: dict[int, tuple[float, float]] = {}
    for g in range(model.ngeom):
        if model.geom_type[g] != mujoco.mjtGeom.mjGEOM_PLANE or model.geom_bodyid[g] != 0:
            continue
        half = model.geom_size[g, :2]
        if half[0] <= 0 or half[1] <= 0 or len(points) == 0:
            continue
        rot = np.empty(9)
        mujoco.mju_quat2Mat(rot, model.geom_quat[g])
        local = (np.asarray(points, dtype=float) - model.geom_pos[g]) @ rot.reshape(3, 3)  # world -> plane frame
        need = np.abs(local[:, :2]).max(axis=0) + margin
        if np.any(need > half):
            sizes[g] = (float(max(half[0], need[0])), float(max(half[1], need[1])))
    return sizes


@contextlib.contextmanager
def floors_drawn_under(model: Any, points: np.ndarray) -> Iterator[None]:
    """Inside the block the world's finite planes are drawn under every one of `points` (`drawn_plane_sizes`);
    their sizes are restored after it. Every scene update reads the sizes from the model: draw every frame inside."""
    widened = drawn_plane_sizes(model, points)
    saved = {g: model.geom_size[g, :2].copy() for g in widened}
    for g, half in widened.items():
        model.geom_size[g, :2] = half
    try:
        yield
    finally:
        for g, half in saved.items():
            model.geom_size[g, :2] = half


def render_video(
    model: Any,
    states: list[tuple[np.ndarray, np.ndarray]],
    path: str | Path,
    fps: float,
    width: int = 480,
    height: int = 480,
    camera: dict[str, float] | None = None,
) -> int:
    """Render (qpos, qvel) states with a camera tracking the root body and write an H.264 MP4; returns frames."""
    try:
        import imageio.v2 as imageio
    except ImportError as exc:
        raise VideoError(
            f"video=true needs imageio and imageio-ffmpeg (pip install imageio imageio-ffmpeg): {exc}"
        ) from None
    import mujoco

    width, height = (max(16, -(-int(x) // 16) * 16) for x in (width, height))
    model.vis.global_.offwidth = max(int(model.vis.global_.offwidth), width)
    model.vis.global_.offheight = max(int(model.vis.global_.offheight), height)
    data = mujoco.MjData(model)
    track = 1 if model.nbody > 1 else 0
    followed = np.empty((len(states), 3))
    for i, (qpos, _) in enumerate(states):
        data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        followed[i] = data.xpos[track]
    with floors_drawn_under(model, followed):
        backend = os.environ.get("MUJOCO_GL", "")
        try:
            renderer = mujoco.Renderer(model, height, width)
        except Exception as exc:  # noqa: BLE001 - GL failures surface as many exception types
            raise VideoError(
                f"no offscreen OpenGL context with MUJOCO_GL={backend or '(unset)'}: {type(exc).__name__}: {exc}; "
                "on CPU install OSMesa (apt-get install -y libosmesa6), on a GPU host use MUJOCO_GL=egl"
            ) from None
        cam = mujoco.MjvCamera()
        mujoco.mjv_defaultFreeCamera(model, cam)
        cam.type = mujoco.mjtCamera.mjCAMERA_TRACKING
        cam.trackbodyid = track
        cam.distance = float((camera or {}).get("distance", 4.0))
        cam.elevation = float((camera or {}).get("elevation", -20.0))
        shown = mujoco.MjvOption()
        if not np.any((model.geom_group < 3) & (model.geom_bodyid > 0)):
            shown.geomgroup[:] = 1  # the bodies carry collision geoms alone (visual meshes left out): show those
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with imageio.get_writer(
                path,
                format="FFMPEG",
                mode="I",
                fps=float(fps),
                codec="libx264",
                pixelformat="yuv420p",
                macro_block_size=16,
            ) as writer:
                for qpos, qvel in states:
                    data.qpos[:] = qpos
                    data.qvel[:] = qvel
                    mujoco.mj_forward(model, data)
                    renderer.update_scene(data, camera=cam, scene_option=shown)
                    writer.append_data(renderer.render())
        except VideoError:
            raise
        except Exception as exc:  # noqa: BLE001 - ffmpeg missing, disk full, GL errors mid-way
            raise VideoError(f"could not write {path}: {type(exc).__name__}: {exc}") from None
        finally:
            renderer.close()
    return len(states)


# --------------------------------------------------------------------------- W&B


def log_to_wandb(cfg: DictConfig, result: dict[str, Any], out_dir: Path) -> None:
    """One W&B run of job_type eval with the returns and, if rendered, the video (wandb imported lazily).

    Its mode follows the training run's rule (`offpolicy.logger.wandb_mode`).
    """
    import wandb

    logger_cfg = cfg.logger
    experiment = logger_cfg.get("experiment") or cfg.get("experiment") or "eval"
    run = wandb.init(
        project=logger_cfg.get("project", "offpolicy"),
        entity=logger_cfg.get("entity"),
        group=logger_cfg.get("group") or f"{result['env']}-{result['algo']}-{experiment}",
        name=f"eval-{result['env']}-{result['algo']}-step{result['checkpoint_env_steps']}",
        job_type="eval",
        tags=list(logger_cfg.get("tags") or []),
        config={k: v for k, v in result.items() if not isinstance(v, list)},
        dir=str(out_dir),
        mode=wandb_mode(logger_cfg.get("mode", "auto"))[0],
    )
    metrics: dict[str, Any] = {
        "eval/return": result["return_mean"],
        "eval/return_std": result["return_std"],
        "eval/length": result["length_mean"],
        "eval/episodes": result["episodes"],
    }
    if result.get("video"):
        metrics["eval/video"] = wandb.Video(result["video"], format="mp4")
    run.log(metrics, step=int(result["checkpoint_env_steps"]))
    run.finish()


# --------------------------------------------------------------------------- the reference implementation


def scores(returns: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    """`return_statistics` of the episodes, then their returns and lengths."""
    return {**return_statistics(returns, lengths), "returns": returns.tolist(), "lengths": lengths.tolist()}


def eval_algo_config(algo_cfg: dict[str, Any], compile_policy: bool) -> dict[str, Any]:
    """The checkpoint's algorithm config as evaluation builds it: eager (no torch.compile, no CUDA graphs) unless
    `compile=true`; everything else (networks, mixed precision) as trained."""
    if compile_policy:
        return dict(algo_cfg)
    return {**algo_cfg, "compile": False, "cuda_graphs": False}


def score_in_gymnasium(spec: Any, algorithm: Any, device: Any, episodes: int, seed: int) -> dict[str, Any]:
    """The policy's statistics in Gymnasium's own task: with this task's options, and with Gymnasium's default
    reward options where this task sets others (observation options kept)."""
    if not spec.gymnasium_id:
        raise ValueError(f"task {spec.name!r} names no Gymnasium environment to re-score in")
    policy = MeanPolicy(algorithm, spec, device)
    kwargs = dict(spec.gymnasium_kwargs)
    out: dict[str, Any] = {}
    variants = {"gymnasium": kwargs}
    default_reward = observation_kwargs(kwargs)
    if default_reward != kwargs:
        variants["gymnasium_default_reward"] = default_reward
    for name, options in variants.items():
        returns, lengths = gymnasium_rollout(spec.gymnasium_id, options, policy, episodes, seed, spec.max_episode_steps)
        out[name] = {"id": spec.gymnasium_id, "kwargs": options, **scores(returns, lengths)}
    return out


@no_dm_control_renderer()
def score_in_dm_control(spec: Any, algorithm: Any, device: Any, episodes: int, seed: int) -> dict[str, Any]:
    """The policy's statistics in dm_control's own suite task (`dm_control_rollout`: one environment seeded with
    `seed`, its episodes one after another, each to the suite's 1000-step limit or this task's, if shorter).

    Cost: sequential, one policy call on one row per step, on one core: a 1000-step episode takes well
    under a second on most tasks and longest on the dog, so the default 16 episodes add seconds.
    """
    if not spec.dm_control_id:
        raise ValueError(f"task {spec.name!r} names no DeepMind Control Suite task to re-score in")
    policy = MeanPolicy(algorithm, spec, device)
    returns, lengths = dm_control_rollout(spec.name, policy, episodes, seed, spec.max_episode_steps)
    domain, task = spec.dm_control_id.split("-")
    return {"dm_control": {"domain": domain, "task": task, **scores(returns, lengths)}}


# --------------------------------------------------------------------------- the episodes


def batch_rows(episodes: int, action: str, training_rows: int) -> int:
    """Env rows to run `episodes` on: all at once for the mean action; for sampled actions, as few even
    batches as keep each within the training rows (the algorithm's exploration state has that many)."""
    if action == "mean":
        return episodes
    return math.ceil(episodes / math.ceil(episodes / training_rows))


def run_episodes(
    env: Any,
    algorithm: Any,
    device: Any,
    episodes: int,
    action: str,
    record_first: bool = False,
    segments: SegmentTracking | None = None,
) -> tuple[np.ndarray, np.ndarray, list, dict[str, float]]:
    """`episodes` episodes from fresh resets, `env.spec.num_envs` at a time: (returns, lengths, row 0's states
    in the first batch, tracking statistics where the task has tracking terms). Each batch acts with a new
    policy, so every row's exploration noise restarts with its episode as in training; rows of a last batch
    beyond `episodes` are run and dropped. Under a command schedule (the env's `set_commands`) `segments` sums
    each step's tracking errors into its segment."""
    roll = rollout if segments is None else functools.partial(rollout, on_step=segments.on_step)
    spec = env.spec
    returns, lengths, states, sums, fell = [], [], [], [], []
    while sum(len(r) for r in returns) < episodes:
        policy = MeanPolicy(algorithm, spec, device) if action == "mean" else SampledPolicy(algorithm, spec, device)
        tracking: dict[str, Any] = {}
        batch_returns, batch_lengths, frames = roll(
            env, policy, record_first=record_first and not returns, tracking=tracking
        )
        returns.append(batch_returns)
        lengths.append(batch_lengths)
        if tracking:
            sums.append(tracking["sums"])
            fell.append(tracking["fell"])
        states = states or frames
    tracked = (
        tracking_statistics(spec.tracking_terms, np.concatenate(sums)[:episodes], np.concatenate(fell)[:episodes])
        if sums
        else {}
    )
    return np.concatenate(returns)[:episodes], np.concatenate(lengths)[:episodes], states, tracked


# --------------------------------------------------------------------------- the whole evaluation


def eval_actor_config(algo_cfg: dict[str, Any], actor: str, ckpt: dict[str, Any], path: Path) -> dict[str, Any]:
    """The algorithm config acting with the weights `actor` names: `raw` the actor itself, `averaged` the
    averaged actor of `algo.policy_ema` (refused when the checkpoint has none), `auto` as the run evaluated."""
    from offpolicy.checkpoint import CheckpointError

    if actor == "raw":
        return {**algo_cfg, "policy_ema": False}
    if actor == "averaged":
        if "actor_ema" not in ckpt["algorithm"]:
            raise CheckpointError(
                f"checkpoint {path} holds no averaged actor (its run had algo.policy_ema off); valid: actor=auto, actor=raw"
            )
        return {**algo_cfg, "policy_ema": True}
    return algo_cfg


@dataclass
class _Loaded:
    """The checkpoint and what the command line asks of it, checked before any env is built."""

    path: Path
    ckpt: dict[str, Any]
    env_name: str
    options: dict[str, Any]
    """the env options: the checkpoint's, then env_options, then max_episode_steps"""
    algo_cfg: dict[str, Any]
    """the algorithm config the evaluation acts with (eval_algo_config, eval_actor_config)"""
    compile_policy: bool
    gl_problem: str | None
    """why no video can be rendered (the one line to print), or None"""
    schedule: Any = None
    """the command schedule (`command_schedule.Segment`s), or None"""


@dataclass
class _Episodes:
    """What the episodes gave: their returns and lengths, and what the reference scores and the video need."""

    spec: Any
    algorithm: Any
    returns: np.ndarray
    lengths: np.ndarray
    states: list
    """row 0's states of the first episode (the video's frames)"""
    tracked: dict[str, float]
    model: Any
    command_segments: list | None = None
    """per segment of the command schedule: its command, steps and tracking errors"""


def evaluate(cfg: DictConfig, out_dir: str | Path) -> dict[str, Any]:
    """Load the checkpoint, run the episodes, write eval.json (and the MP4); returns what eval.json holds.

    Raises `ConfigError` for a bad key, `CheckpointError` for a bad checkpoint and
    `VideoError` (after writing eval.json) when the video fails or no GL backend works.
    """
    from offpolicy.config import validate_eval_config

    checked = validate_eval_config(cfg)  # ConfigError (one line) before anything runs
    quiet_library_logs()  # before anything imports mujoco or dm_control
    from offpolicy.runtime.runner import resolve_device

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_device(str(cfg.get("device", "auto")))
    episodes = int(cfg.episodes)
    reference = str(cfg.get("reference") or "none")
    action = str(cfg.get("action") or "mean")
    loaded = _load_checked(cfg, device, reference)
    physics_dir = contextlib.chdir(out_dir.resolve())  # MuJoCo's warnings (MUJOCO_LOG.TXT) land in the output dir
    ran = _run_checked_episodes(cfg, loaded, device, episodes, action, physics_dir)
    result = _eval_result(loaded, ran, device, episodes, action)
    if reference != "none":
        score = {"gymnasium": score_in_gymnasium, "dm_control": score_in_dm_control}[reference]
        with physics_dir:
            result["reference"] = score(ran.spec, ran.algorithm, device, episodes, int(cfg.seed))
    video_path = Path(cfg.video_path) if cfg.get("video_path") else out_dir / "eval.mp4"
    json_dir = video_path.parent if cfg.video else out_dir
    video_error = VideoError(loaded.gl_problem) if loaded.gl_problem is not None else None
    if cfg.video and loaded.gl_problem is None:
        video_error = _render_first_episode(cfg, loaded.env_name, ran, video_path, result)
    json_dir.mkdir(parents=True, exist_ok=True)
    (json_dir / "eval.json").write_text(json.dumps(result, indent=2))
    result["eval_json"] = str(json_dir / "eval.json")
    if checked.logger.name == "wandb":
        log_to_wandb(cfg, result, out_dir)
    if video_error is not None:
        raise VideoError(f"{video_error}; the returns are in {result['eval_json']}")
    return result


def _load_checked(cfg: DictConfig, device: Any, reference: str) -> _Loaded:
    """Load the checkpoint and check it, the task, its options and the reference against each other.

    Raises `CheckpointError` or `ConfigError` (one line); with `video=true` picks the GL backend first.
    """
    from offpolicy.checkpoint import CheckpointError, check_compatible, load_checkpoint
    from offpolicy.config import check_reference, check_task

    path = Path(str(cfg.checkpoint)).expanduser()
    ckpt = load_checkpoint(path, map_location="cpu")
    chosen_env = OmegaConf.select(cfg, "env.name", default=None)  # env=<task> on the command line, else none
    env_name = str(chosen_env or ckpt["env"])
    check_compatible(ckpt, path, env=env_name, env_options=cfg.env_options)  # another task: refused with its sizes
    saved = ckpt.get("config") or {}
    algo_cfg = saved.get("algo")
    if not algo_cfg:
        raise CheckpointError(f"checkpoint {path} has no algo config, so its networks cannot be rebuilt")
    compile_policy = bool(cfg.get("compile", False))
    algo_cfg = eval_algo_config(algo_cfg, compile_policy)
    algo_cfg = eval_actor_config(algo_cfg, str(cfg.get("actor") or "auto"), ckpt, path)
    gl_problem = None
    if cfg.video:
        backend, problem = choose_gl_backend(device.type == "cuda")  # before anything imports mujoco
        if problem is not None:  # run the episodes without GL, then say what to install
            gl_problem = no_gl_message(backend, problem)
            os.environ["MUJOCO_GL"] = "disable"
    options = {**((saved.get("env") or {}).get("options") or {}), **OmegaConf.to_container(cfg.env_options)}
    name_key = "env.name" if chosen_env else "checkpoint"
    check_task(env_name, options, name_key, "env_options")  # before the env is built: one line, not a traceback
    check_reference(reference, env_name)
    schedule = parse_schedule(OmegaConf.to_container(cfg.commands) if cfg.get("commands") is not None else None)
    if cfg.get("max_episode_steps") is not None:
        options["max_episode_steps"] = int(cfg.max_episode_steps)
    elif schedule is not None:  # the episodes last the schedule
        options["max_episode_steps"] = schedule_steps_total(env_name, options, schedule)
    return _Loaded(path, ckpt, env_name, options, algo_cfg, compile_policy, gl_problem, schedule)


def _run_checked_episodes(
    cfg: DictConfig, loaded: _Loaded, device: Any, episodes: int, action: str, physics_dir: Any
) -> _Episodes:
    """Build the env and the algorithm, check the env's sizes against the checkpoint, run the episodes."""
    import torch

    import envs
    from offpolicy.checkpoint import check_compatible, load_algorithm_state
    from offpolicy.runtime.runner import default_algorithm_factory

    ckpt, path = loaded.ckpt, loaded.path
    torch.manual_seed(int(cfg.seed))
    if device.type == "cpu":
        # the policy sees one row (a reference env) or a few: intra-op threads only contend with the
        # physics (a dm_control re-score ran 10x slower with 2 threads on a 2-core machine)
        torch.set_num_threads(1)
    rows = batch_rows(episodes, action, int(ckpt["num_envs"]))
    with physics_dir:
        env = envs.make(loaded.env_name, num_envs=rows, seed=int(cfg.seed), **loaded.options)
    try:
        spec = env.spec
        check_compatible(ckpt, path, env=loaded.env_name, obs_dims=dict(spec.obs_dims), action_dim=spec.action_dim)
        # Built with the training row count: per-env state (reward scaler, noise) must match to load.
        algorithm = default_algorithm_factory(
            OmegaConf.create(loaded.algo_cfg), replace(spec, num_envs=int(ckpt["num_envs"])), device
        )
        load_algorithm_state(algorithm, ckpt, path, allow_policy_only=True)  # a policy file acts the same
        record = bool(cfg.video) and loaded.gl_problem is None
        segments = None
        if loaded.schedule is not None:
            steps = apply_schedule(env, loaded.env_name, loaded.schedule)
            segments = SegmentTracking(loaded.schedule, steps, tuple(spec.tracking_terms))
        with physics_dir:
            returns, lengths, states, tracked = run_episodes(
                env, algorithm, device, episodes, action, record_first=record, segments=segments
            )
        model = env.model
    finally:
        env.close()
    summary = segments.summary() if segments is not None else None
    return _Episodes(spec, algorithm, returns, lengths, states, tracked, model, summary)


def _eval_result(loaded: _Loaded, ran: _Episodes, device: Any, episodes: int, action: str) -> dict[str, Any]:
    """What eval.json holds, before the reference scores and the video are added."""
    ckpt = loaded.ckpt
    stats = return_statistics(ran.returns, ran.lengths)
    return {
        "checkpoint": str(loaded.path),
        "policy_only": bool(ckpt.get("policy_only")),
        "algo": str(ckpt["algo"]),
        "env": loaded.env_name,
        "env_options": loaded.options,
        "checkpoint_env_steps": int(ckpt["counters"]["env_steps"]),
        "checkpoint_policy_version": int(ckpt["counters"]["policy_version"]),
        "episodes": episodes,
        "action": action,
        "actor": "averaged" if ran.algorithm.policy_ema and action == "mean" else "raw",  # sampling explores: raw
        "return_mean": stats["mean"],
        "return_median": stats["median"],
        "return_min": stats["min"],
        "return_max": stats["max"],
        "return_std": stats["std"],
        "length_mean": float(ran.lengths.mean()),
        "length_std": float(ran.lengths.std()),
        "returns": ran.returns.tolist(),
        "lengths": ran.lengths.tolist(),
        **ran.tracked,  # a tracking task's lin_vel_error, yaw_rate_error, command_speed, fall_fraction
        **({"command_segments": ran.command_segments} if ran.command_segments is not None else {}),
        "device": str(device),
        "compiled_policy": loaded.compile_policy and device.type == "cuda",
        "video": None,
    }


def _render_first_episode(
    cfg: DictConfig, env_name: str, ran: _Episodes, video_path: Path, result: dict[str, Any]
) -> VideoError | None:
    """Render the recorded first episode to `video_path` and note it in `result`; returns the failure, if any."""
    camera = dict(CAMERAS.get(env_name, {}))
    if cfg.get("video_camera_distance") is not None:
        camera["distance"] = float(cfg.video_camera_distance)
    try:
        fps = 1.0 / ran.spec.dt
        result["video_frames"] = render_video(
            ran.model, ran.states, video_path, fps, int(cfg.video_width), int(cfg.video_height), camera
        )
        result["video"] = str(video_path)
        result["video_fps"] = fps
        result["mujoco_gl"] = os.environ.get("MUJOCO_GL")
    except VideoError as exc:
        return exc
    return None


@hydra.main(version_base="1.3", config_path="../conf", config_name="eval")
def main(cfg: DictConfig) -> None:
    """Compose, evaluate, report on one line."""
    from hydra.core.hydra_config import HydraConfig

    from offpolicy.checkpoint import CheckpointError
    from offpolicy.config import ConfigError

    out_dir = HydraConfig.get().runtime.output_dir
    try:
        r = evaluate(cfg, out_dir)
    except ConfigError as exc:
        print(f"[offpolicy] invalid config: {exc}", file=sys.stderr, flush=True)
        sys.exit(ExitStatus.INVALID_CONFIG)
    except CheckpointError as exc:
        print(f"[offpolicy] {exc}", file=sys.stderr, flush=True)
        sys.exit(ExitStatus.BAD_CHECKPOINT)
    except VideoError as exc:
        print(f"[offpolicy] video failed: {exc}", file=sys.stderr, flush=True)
        sys.exit(ExitStatus.VIDEO_FAILED)
    std = "" if math.isnan(r["return_std"]) else f" +- {r['return_std']:.1f}"
    print(
        f"[offpolicy] eval {r['algo']} on {r['env']} (checkpoint at {r['checkpoint_env_steps']} env steps): "
        f"return {r['return_mean']:.1f}{std} (median {r['return_median']:.1f}, min {r['return_min']:.1f}), "
        f"length {r['length_mean']:.0f} over {r['episodes']} episodes; "
        f"{r['eval_json']}" + (f", {r['video']}" if r["video"] else ""),
        flush=True,
    )
    for name, ref in (r.get("reference") or {}).items():
        where = f"{ref['id']}, {ref['kwargs']}" if "id" in ref else f"{ref['domain']}-{ref['task']}"
        print(
            f"[offpolicy] {name} ({where}): return {ref['mean']:.1f} +- {ref['std']:.1f} "
            f"(median {ref['median']:.1f}, min {ref['min']:.1f}), length {ref['length_mean']:.0f} "
            f"over {ref['episodes']} episodes",
            flush=True,
        )


if __name__ == "__main__":
    from offpolicy.config import hydra_errors_in_one_line

    with hydra_errors_in_one_line():  # Hydra's own config errors: one line, exit status 2
        main()
