"""The typed sections of the CLIs' configs: one dataclass per group, the one place a default lives.

A field's type is its rule (`Literal[...]` lists the choices, `X | None` accepts null, `PositiveInt`
and friends carry a bound), its docstring says what it means, and a class's `check` holds the rules
that span fields. `offpolicy.config` builds these from the composed Hydra config and checks them; the
runner and its components receive their own section (`RunConfig.runtime`, `.eval`, `.checkpoint`, ...).
This module imports nothing of the project, so every layer may read its section's type.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal


class ConfigError(ValueError):
    """A config value the run cannot start with; the message is one line naming the key, the value and what is allowed."""


@dataclass(frozen=True)
class Bound:
    """A numeric bound carried by an `Annotated` field type."""

    gt: float | None = None
    """the value must be greater than this"""
    ge: float | None = None
    """the value must be at least this"""
    le: float | None = None
    """the value must be at most this"""

    def holds(self, value: float) -> bool:
        """Whether `value` is within the bound."""
        return (
            (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.le is None or value <= self.le)
        )

    def describe(self) -> str:
        """`> 0`, `>= 0`, `>= 0 and <= 9`."""
        parts = [f"{op} {_number(x)}" for op, x in ((">", self.gt), (">=", self.ge), ("<=", self.le)) if x is not None]
        return " and ".join(parts)


PositiveInt = Annotated[int, Bound(gt=0)]
NonNegativeInt = Annotated[int, Bound(ge=0)]
PositiveFloat = Annotated[float, Bound(gt=0)]
NonNegativeFloat = Annotated[float, Bound(ge=0)]
Seed = Annotated[int, Bound(ge=0), Bound(le=2**63 - 1)]
"""what torch and numpy both accept as a seed"""

DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")
FACTORY_PATTERN = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


# --------------------------------------------------------------------------- offpolicy.train


@dataclass
class EnvConfig:
    """The `env` group: which task, how many training envs, and the task's options."""

    name: str = "ant"
    """task name (envs.registry_names())"""
    num_envs: PositiveInt = 1024
    """training envs in the collector (rows of one vector step)"""
    options: dict[str, Any] = field(default_factory=dict)
    """the task's keyword options (Gymnasium's), checked against the task's typed option specs (`check_task`)"""
    stagger_starts: bool = False
    """end each training row's first episode after a length drawn uniformly from 1 to the time limit, so the rows'
    episodes start at ticks spread over the limit rather than all at once (evaluation rows are left alone)"""


@dataclass
class TrainConfig:
    """The `train` group: budgets and the learning schedule."""

    total_env_steps: PositiveInt | None = 1_000_000
    """stop after this many env steps summed over envs (null: no step budget)"""
    max_seconds: PositiveFloat | None = None
    """wall-clock budget of the training loop in seconds (null: none)"""
    updates_per_step: NonNegativeInt | None = None
    """gradient updates per vector step (0: learning off; null: the algorithm's)"""
    learning_starts: NonNegativeInt = 10_000
    """env steps of uniform-random actions before the first update"""
    resume: str | None = None
    """a checkpoint to continue from"""
    max_nonfinite_updates: PositiveInt = 100
    """non-finite updates in a row that stop the run"""

    def check(self) -> None:
        """A run needs a step budget, a wall-clock budget or both."""
        if self.total_env_steps is None and self.max_seconds is None:
            raise invalid(
                "train.total_env_steps",
                None,
                "needs a wall-clock budget: set train.max_seconds (seconds > 0) or a step budget > 0",
            )


@dataclass
class EvalConfig:
    """The `eval` group: snapshot evaluation on extra rows of the collector's env."""

    num_envs: NonNegativeInt = 16
    """env rows reserved for evaluation (0: no evaluation)"""
    episodes: PositiveInt = 16
    """complete episodes per snapshot"""
    interval_s: PositiveFloat | None = 30.0
    """wall-clock seconds between eval points (null: none by time)"""
    interval_env_steps: PositiveInt | None = None
    """env steps between eval points (null: none by steps)"""
    at_seconds: list[NonNegativeFloat] = field(default_factory=list)
    """wall-clock marks of the training loop that always get a snapshot"""
    final: bool = True
    """evaluate the final snapshot before the run ends"""

    @property
    def episodes_per_row(self) -> int:
        """Episodes each eval row runs per snapshot (all rows run the same number)."""
        return max(1, -(-self.episodes // max(self.num_envs, 1)))


@dataclass
class CheckpointConfig:
    """The `checkpoint` group: periodic and final checkpoints in `<run dir>/checkpoints`."""

    interval_env_steps: NonNegativeInt = 500_000
    """env steps between periodic checkpoints (0: only the final one)"""
    keep_last: NonNegativeInt = 3
    """step_*.pt files kept, newest first (0: all)"""


@dataclass
class LoggerConfig:
    """The `logger` group with `logger=none`: local files and console progress only."""

    name: Literal["none", "wandb"] = "none"
    """which logger"""
    interval_s: PositiveFloat | None = 30.0
    """wall-clock seconds between metric rows (null: rows by env steps only)"""
    interval_env_steps: PositiveInt | None = None
    """env steps between metric rows (null: rows by time only)"""
    console: Literal["auto", "bar", "lines", "off"] = "auto"
    """console progress: a bar on a terminal, plain lines otherwise, or none"""
    console_interval_s: PositiveFloat = 30.0
    """seconds between two plain progress lines"""

    def check(self) -> None:
        """Metric rows need a cadence."""
        if self.interval_s is None and self.interval_env_steps is None:
            raise invalid(
                "logger.interval_s", None, "set logger.interval_s or logger.interval_env_steps (both are null)"
            )


@dataclass
class WandbLoggerConfig(LoggerConfig):
    """The `logger` group with `logger=wandb`: the local files plus one W&B run per job."""

    name: Literal["none", "wandb"] = "wandb"
    project: str = "offpolicy"
    """W&B project"""
    entity: str | None = None
    """W&B entity (null: the account's default)"""
    group: str | None = None
    """W&B group (null: <env>-<algo>-<experiment>)"""
    experiment: str | None = None
    """line of experiments in the group name"""
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    """W&B mode; auto: online with credentials, else offline"""
    tags: list[str] = field(default_factory=list)
    """W&B tags"""


LOGGERS: dict[str, type[LoggerConfig]] = {"none": LoggerConfig, "wandb": WandbLoggerConfig}


@dataclass
class AffinityConfig:
    """The `affinity` group; the CPU ids themselves are checked by `offpolicy.affinity.resolve_affinity`."""

    mode: Literal["auto", "manual"] = "auto"
    """auto: the learner gets the first CPUs, the collector the rest; manual: explicit ids"""
    learner_count: PositiveInt | None = 1
    """auto: CPUs for the learner"""
    learner_cpus: list[int] | None = None
    """manual: the learner's CPU ids"""
    collector_cpus: list[int] | None = None
    """manual: the collector's CPU ids (one pool worker each)"""


@dataclass
class ReplayConfig:
    """The `replay` group."""

    capacity: PositiveInt = 1_000_000
    """transitions held in the learner-local replay"""


@dataclass
class FaultConfig:
    """Hidden `runtime.fault.*` keys: fault injection for tests (see offpolicy/runtime/runner.py)."""

    collector_raise_at_tick: int = -1
    """the collector raises inside env.step at this tick (-1: never)"""
    collector_hang_at_tick: int = -1
    """the collector hangs inside env.step at this tick (-1: never)"""
    learner_raise_at_tick: int = -1
    """the learner raises at this tick (-1: never)"""
    collector_step_delay_s: NonNegativeFloat = 0.0
    """random sleep up to this long before each step"""
    learner_sleep_at_tick: int = -1
    """the learner's update phase of this tick sleeps (a deliberately long learner phase; -1: never)"""
    learner_sleep_s: NonNegativeFloat = 0.0
    """how long that update phase sleeps"""


@dataclass
class RecordConfig:
    """Hidden `runtime.record.*` keys: a window of ticks recorded for a same-trajectory replay."""

    start_tick: NonNegativeInt = 0
    """first tick of the window"""
    ticks: NonNegativeInt = 0
    """ticks recorded into <run dir>/record.npz (0: none)"""
    start_s: NonNegativeFloat | None = None
    """start the window at the first tick this many seconds into the loop (start_tick is then ignored)"""


@dataclass
class RuntimeConfig:
    """The `runtime` group, with the hidden keys tests and debugging set through `+runtime....=`."""

    trace: bool = False
    """record every phase interval to <run dir>/timeline.json"""
    trace_max_ticks: PositiveInt = 20_000
    """ticks recorded at most"""
    collector_timeout_s: PositiveFloat = 60.0
    """a physics step taking longer than this is a hung collector"""
    startup_timeout_s: PositiveFloat = 120.0
    """time the collector may take to build its env"""
    shutdown_grace_s: NonNegativeFloat = 3.0
    """time the collector gets to leave on its own before SIGKILL"""
    ingress_slots: Annotated[int, Bound(ge=2)] = 2
    """transition slots in the ingress ring"""
    spin_us: NonNegativeFloat = 200.0
    """how long a waiter spins before it blocks"""
    keep_awake_us: NonNegativeFloat = 200.0
    """CUDA: the learner spins while waiting for observations, with a tiny kernel this often (0: off)"""
    tick_graph: bool = True
    """CUDA: the inference tick (copies, both actors, scaling) as one captured graph"""
    poll_s: PositiveFloat = 0.02
    """longest single blocking wait between health checks"""
    pin_host_memory: bool = True
    """page-lock the shared slots for CUDA copies"""
    env_factory: str | None = None
    """hidden: `module:function` building the collector's env instead of envs.make"""
    algorithm_factory: str | None = None
    """hidden: `module:function` building the algorithm instead of offpolicy.algorithms.make_algorithm"""
    fault: FaultConfig = field(default_factory=FaultConfig)
    """hidden: fault injection"""
    record: RecordConfig = field(default_factory=RecordConfig)
    """hidden: a recorded window for benchmark/offpolicy/trajectory_replay.py"""

    def check(self) -> None:
        """Factories are `module:function`; the algorithm's must import here."""
        for key in ("env_factory", "algorithm_factory"):
            value = getattr(self, key)
            if value is not None and not FACTORY_PATTERN.fullmatch(value):
                raise invalid(f"runtime.{key}", value, "must be module:function")
        if self.algorithm_factory is not None:
            import_target(self.algorithm_factory, "runtime.algorithm_factory")


@dataclass
class RunConfig:
    """The whole config of `python -m offpolicy.train` (conf/config.yaml and its groups)."""

    seed: Seed = 0
    """seeds torch, the exploration generators and the envs"""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N: where the learner runs"""
    experiment: str = "default"
    """name of this line of experiments"""
    env: EnvConfig = field(default_factory=EnvConfig)
    """the task"""
    algo: Any = None
    """the algorithm (checked by its own schema, offpolicy.algorithms.config)"""
    train: TrainConfig = field(default_factory=TrainConfig)
    """budgets and learning schedule"""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """snapshot evaluation during training"""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """checkpoints"""
    logger: Any = None
    """LoggerConfig or WandbLoggerConfig, by logger.name"""
    affinity: AffinityConfig = field(default_factory=AffinityConfig)
    """who runs on which CPUs"""
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    """the replay"""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    """the learner/collector runtime"""
    source: Any = field(default=None, init=False, repr=False, compare=False)
    """not a key: the composed DictConfig this was validated from (saved with the run and its checkpoints)"""

    def check(self) -> None:
        """The device must name an accelerator this machine has."""
        check_device("device", self.device)


# --------------------------------------------------------------------------- rules the schemas share


def check_device(key: str, device: str) -> None:
    """auto | cpu | cuda | cuda:N, and CUDA only where it exists."""
    if not DEVICE_PATTERN.fullmatch(device):
        raise invalid(key, device, "must be auto, cpu, cuda or cuda:N")
    if device.startswith("cuda"):
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise invalid(key, device, "CUDA is not available on this machine: use device=auto or device=cpu")
        index = int(device.partition(":")[2] or 0)
        if index >= count:
            raise invalid(key, device, f"this machine has {count} CUDA device(s): cuda:0 to cuda:{count - 1}")


def import_target(target: str, key: str) -> Any:
    """The callable named by `module:function`; a `ConfigError` naming `key` when it cannot be imported."""
    module, _, name = target.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise invalid(key, target, f"cannot be imported ({_one_line(exc)})") from None


# --------------------------------------------------------------------------- offpolicy.eval


@dataclass
class EvaluateConfig:
    """The whole config of `python -m offpolicy.eval` (conf/eval.yaml)."""

    checkpoint: str = "???"
    """a checkpoint written by offpolicy.train"""
    episodes: PositiveInt = 16
    """episodes to run, one per env row, in parallel"""
    reference: Literal["none", "gymnasium", "dm_control"] = "none"
    """also re-score the policy in the implementation the task reproduces (checked against the task by
    `check_reference`)"""
    action: Literal["mean", "sample"] = "mean"
    """mean: the actor's mean action (what reported returns use); sample: actions drawn as in training"""
    actor: Literal["auto", "raw", "averaged"] = "auto"
    """which weights act: auto (the averaged actor when the run had algo.policy_ema on), raw, or averaged"""
    max_episode_steps: PositiveInt | None = None
    """time limit of the evaluated episodes (null: the task's own, or the command schedule's length)"""
    env_options: dict[str, Any] = field(default_factory=dict)
    """task options on top of the checkpoint's"""
    commands: list[Any] | None = None
    """a joystick task's command schedule, [[vx, vy, yaw_rate, seconds], ...] held in turn from every episode's
    start (offpolicy.command_schedule); null: the task draws its commands"""
    seed: Seed = 0
    """seeds the env resets"""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N: where the actor runs"""
    compile: bool = False
    """the policy through torch.compile and CUDA graphs as in training (CUDA only); eager by default"""
    video: bool = False
    """render the first episode to an MP4"""
    video_path: str | None = None
    """null: <output dir>/eval.mp4"""
    video_width: PositiveInt = 480
    """frame width in pixels (rounded up to a multiple of 16)"""
    video_height: PositiveInt = 480
    """frame height in pixels (rounded up to a multiple of 16)"""
    video_camera_distance: PositiveFloat | None = None
    """tracking-camera distance in metres (null: the task's)"""
    experiment: str = "eval"
    """W&B group is <env>-<algo>-<experiment>"""
    env: EnvConfig | None = None
    """null: the checkpoint's env"""
    logger: Any = None
    """LoggerConfig or WandbLoggerConfig, by logger.name"""

    def check(self) -> None:
        """The checkpoint is required; the device must exist; a reference re-score takes the mean action."""
        if self.checkpoint in ("???", ""):
            raise invalid("checkpoint", self.checkpoint, "required: checkpoint=<run dir>/checkpoints/latest.pt")
        check_device("device", self.device)
        if self.action == "sample" and self.reference != "none":
            raise invalid(
                "action", self.action, f"reference={self.reference} re-scores the mean action only; valid with it: mean"
            )


def invalid(key: str, value: Any, allowed: str) -> ConfigError:
    """`ConfigError("<key>=<value>: <allowed>")`."""
    return ConfigError(f"{key}={format_value(value)}: {allowed}")


def format_value(value: Any) -> str:
    """A value as it would be written on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else "''"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


def _number(x: float | None) -> str:
    return str(int(x)) if x is not None and float(x).is_integer() else str(x)


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
