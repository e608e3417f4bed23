"""Typed schemas of the CLIs' configs, checked before anything starts.

`validate_train_config` checks the composed config of `python -m offpolicy.train`: every
group, the hidden `runtime.*` keys, the task name and its options (each option's name, type and
bounds as the task declares them, envs/options.py) and the `algo` group (by
`offpolicy.algorithms.config`'s schemas).
`validate_eval_config` checks `conf/eval.yaml` for `python -m offpolicy.eval` (which checks the
task itself once it knows it from the checkpoint). Both raise
`ConfigError` with one line, `<key>=<value>: <what is allowed>`; the CLIs print it as
`[offpolicy] invalid config: <line>` and exit with status 2. Errors Hydra itself raises while
composing (an unknown key or group choice, bad override syntax) read the same way
(`hydra_errors_in_one_line` around each CLI's entry).

The schemas are dataclasses with a one-line docstring per field (like the algorithm
schemas). A field's type is its rule: `Literal[...]` lists the choices, `X | None` accepts
null, `PositiveInt` and friends carry a bound; a class's `check` holds the rules that span
fields. Keys a schema does not know (typos) are refused with the valid keys listed. The
validated `RunConfig` is the run's config: the runner and its components read their typed
sections, and no other place holds a default.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import os
import re
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from offpolicy.exit_status import ExitStatus


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


def validate_train_config(
    cfg: DictConfig | dict, *, custom_algorithm: bool = False, custom_env: bool = False
) -> RunConfig:
    """Check the composed train config; raise `ConfigError` (one line) at the first bad key.

    `custom_algorithm` / `custom_env`: the caller builds the algorithm / the env itself (a
    factory passed to the Runner), so the `algo` group / the task are that factory's business.
    """
    source = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg)
    data = _plain(source)
    logger = data.pop("logger", None)
    run = build(RunConfig, data, "")
    run.logger = build_logger(logger)
    run.source = source
    run.algo = source.get("algo")  # the algorithm reads its group as a DictConfig, checked by its own schema
    custom_env = custom_env or run.runtime.env_factory is not None
    custom_algorithm = custom_algorithm or run.runtime.algorithm_factory is not None
    if not custom_env:
        check_task(run.env.name, run.env.options, "env.name", "env.options")
    check_algo(data.get("algo"), custom_algorithm)
    return run


def build_logger(data: Any) -> LoggerConfig:
    """The logger schema chosen by `logger.name` (none | wandb)."""
    if data is None:
        return LoggerConfig()
    if not isinstance(data, dict):
        raise invalid("logger", data, "must be a group of keys (logger=none or logger=wandb)")
    name = data.get("name", "none")
    if name not in LOGGERS:
        raise invalid("logger.name", name, f"must be one of {', '.join(LOGGERS)}")
    return build(LOGGERS[name], data, "logger")


def check_task(name: str, options: dict[str, Any], name_key: str, options_key: str) -> None:
    """The task exists and its constructor accepts `options`: each option's name, type and bounds
    (`option_specs` of the task, envs/options.py), before any collector starts."""
    import envs

    names = envs.registry_names()
    if name not in names:
        raise invalid(name_key, name, f"must be one of {', '.join(names)}")
    from envs.options import OptionError
    from envs.registry import task_class

    try:
        task_class(name)(**options)
    except OptionError as exc:
        raise invalid(f"{options_key}.{exc.option}", exc.value, exc.allowed) from None
    except (TypeError, ValueError) as exc:  # options that are not keyword arguments at all
        raise invalid(options_key, options, _one_line(exc)) from None


REFERENCES = {"gymnasium": ("gymnasium_id", "Gymnasium"), "dm_control": ("dm_control_id", "DeepMind Control Suite")}
"""`reference=` choices besides none: the task attribute naming the environment each re-scores in, and its suite"""


def check_reference(reference: str, task: str) -> None:
    """`reference=` is none or the implementation task `task` reproduces (the one whose id its class sets)."""
    if reference == "none":
        return
    from envs.registry import task_class

    cls = task_class(task)
    valid = ["none", *(name for name, (attr, _) in REFERENCES.items() if getattr(cls, attr, ""))]
    if reference not in valid:
        suite = REFERENCES[reference][1]
        raise invalid("reference", reference, f"{task} is not a {suite} task; valid for this task: {', '.join(valid)}")


def check_algo(algo: Any, custom: bool) -> None:
    """The `algo` group against its schema (offpolicy.algorithms.config); only a name for a custom factory."""
    from offpolicy.algorithms import ALGORITHMS, validate

    if not isinstance(algo, dict):
        raise invalid("algo", algo, f"must be a group of keys (algo={' or algo='.join(ALGORITHMS)})")
    name = algo.get("name")
    if custom:
        if not isinstance(name, str):
            raise invalid("algo.name", name, "must be a string")
        return
    if name not in ALGORITHMS:
        raise invalid("algo.name", name, f"must be one of {', '.join(ALGORITHMS)}")
    schema = build(ALGORITHMS[name].schema, algo, "algo")
    from offpolicy.algorithms.contract import AMP_DTYPES

    if schema.amp not in AMP_DTYPES:
        raise invalid("algo.amp", schema.amp, f"must be one of {', '.join(AMP_DTYPES)}")
    try:
        validate(algo)
    except Exception as exc:  # noqa: BLE001 - omegaconf's errors, reported on one line
        raise ConfigError(f"algo: {_one_line(exc)}") from None


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


class SweepCpuCheck(Callback):
    """Hydra callback: a local parallel sweep whose CPU plan cannot fit stops once, before any job starts."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Plan the sweep's CPU blocks as every job would, and exit with status 2 when they do not fit."""
        from offpolicy.affinity import AffinityError, available_cpus, launcher_kind, plan_job_blocks

        affinity = OmegaConf.select(config, "affinity.mode", default="auto")
        launcher = OmegaConf.select(config, "hydra.launcher", default=None)
        kind = launcher_kind(OmegaConf.select(config, "hydra.launcher._target_", default=None))
        if affinity != "auto":
            return  # manual ids are the user's plan
        try:
            plan_job_blocks(kind, launcher or {}, available_cpus())
        except AffinityError as exc:
            print(f"[offpolicy] invalid config: {exc}", file=sys.stderr, flush=True)
            sys.exit(ExitStatus.INVALID_CONFIG)


# --------------------------------------------------------------------------- Hydra's own errors


@contextlib.contextmanager
def hydra_errors_in_one_line() -> Iterator[None]:
    """Around a `hydra.main` call: Hydra's own config errors become one line and exit status 2.

    Hydra composes the config before the task function runs, so an override it cannot apply (a key the
    config lacks, a group choice without a file, unparsable syntax) never reaches `main`. Hydra reports
    those through `hydra._internal.utils.run_and_report`, in several lines with exit status 1; for the
    duration, this wraps that function so the same errors print as `[offpolicy] invalid config: <line>`
    (`hydra_error_line`) and exit 2, like every other bad key. `HYDRA_FULL_ERROR=1` keeps Hydra's report.
    """
    from hydra._internal import utils

    report = utils.run_and_report

    def run_and_report(func: Any) -> Any:
        def one_line_errors() -> Any:
            try:
                return func()
            except CompactHydraException as exc:  # what Hydra reports without a trace: the user's input
                if os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                print(f"[offpolicy] invalid config: {hydra_error_line(exc)}", file=sys.stderr, flush=True)
                sys.exit(ExitStatus.INVALID_CONFIG)

        return report(one_line_errors)

    utils.run_and_report = run_and_report
    try:
        yield
    finally:
        utils.run_and_report = report


def hydra_error_line(exc: BaseException) -> str:
    """One line for an error Hydra raised while composing a config: the key or choice, and what is valid."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options:
        group, _, choice = exc.missing_cfg_file.rpartition("/")
        if group:
            return f"{group}={choice}: no such {group} config; valid: {', '.join(exc.options)}"
    cause = exc.__cause__
    if isinstance(cause, ConfigAttributeError | ConfigKeyError) and getattr(cause, "full_key", None):
        return _unknown_key_line(exc, cause)
    if isinstance(exc, OverrideParseException):
        return f"{exc.override}: cannot parse this override ({_one_line(exc)})"
    lines = []
    for line in str(exc).splitlines():
        if line.startswith(("Config search path", "See https")):
            break
        if line.strip():
            lines.append(line.strip())
    if cause is not None:
        lines.append(_one_line(cause))
    return "; ".join(lines) or type(exc).__name__


def _unknown_key_line(exc: BaseException, cause: Any) -> str:
    """`<key>=<value>: unknown key (the close keys, or the keys there are); to add a new key write +<key>=<value>`."""
    full_key, key = str(cause.full_key), str(cause.key)
    written = re.search(r"use \+(.+)", str(exc))  # Hydra's hint names the override as written
    override = written.group(1) if written else full_key
    parent = full_key.rpartition(".")[0]
    node = getattr(cause, "parent_node", None)
    keys = [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []
    close = difflib.get_close_matches(key, keys, n=3)
    if close:
        hint = "did you mean " + " or ".join(_join(parent, k) for k in close) + "?"
    elif keys:
        hint = f"valid {'keys of ' + parent if parent else 'top-level keys'}: {', '.join(keys)}"
    else:
        hint = f"{parent or 'the config'} has no keys"
    return f"{override}: unknown key ({hint}); to add a new key write +{override}"


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
    """time limit of the evaluated episodes (null: the task's own)"""
    env_options: dict[str, Any] = field(default_factory=dict)
    """task options on top of the checkpoint's"""
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


def validate_eval_config(cfg: DictConfig | dict) -> EvaluateConfig:
    """Check the composed eval config; raise `ConfigError` (one line) at the first bad key."""
    data = _plain(cfg)
    logger = data.pop("logger", None)
    evaluate = build(EvaluateConfig, data, "")
    evaluate.logger = build_logger(logger)
    return evaluate  # the task is checked by offpolicy.eval once the GL backend is chosen (importing mujoco fixes it)


# --------------------------------------------------------------------------- the checker


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


def build(schema: type, data: Any, prefix: str) -> Any:
    """An instance of the dataclass `schema` from `data`, every key typed and bounded; `check()` run last."""
    names = [f.name for f in dataclasses.fields(schema) if f.init]
    if not isinstance(data, dict):
        raise invalid(prefix, data, f"must be a group of keys ({', '.join(names)})")
    for key, value in data.items():
        if key not in names:
            where = f"valid keys of {prefix}" if prefix else "valid top-level keys"
            raise invalid(_join(prefix, str(key)), value, f"unknown key; {where}: {', '.join(names)}")
    hints = typing.get_type_hints(schema, include_extras=True)
    values = {name: coerce(hints[name], data[name], _join(prefix, name)) for name in names if name in data}
    obj = schema(**values)
    if hasattr(obj, "check"):
        obj.check()
    return obj


def coerce(tp: Any, value: Any, key: str) -> Any:
    """`value` as type `tp` (the schema's annotation), or a `ConfigError` saying what `key` allows."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin is Annotated:
        try:
            out = coerce(args[0], value, key)
        except ConfigError:
            raise invalid(key, value, f"must be {describe(tp)}") from None
        for bound in args[1:]:
            if isinstance(bound, Bound) and not bound.holds(out):
                raise invalid(key, value, f"must be {describe(args[0])} {bound.describe()}")
        return out
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if value is None:
            if len(inner) < len(args):
                return None
            raise invalid(key, value, f"must be {describe(tp)}")
        if dataclasses.is_dataclass(inner[0]) or typing.get_origin(inner[0]) in (list, tuple, dict):
            return coerce(inner[0], value, key)  # its own error names the inner key
        try:
            return coerce(inner[0], value, key)
        except ConfigError:
            raise invalid(key, value, f"must be {describe(tp)}") from None
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise invalid(key, value, f"must be {describe(tp)}")
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise invalid(key, value, f"must be {describe(tp)}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise invalid(key, value, f"must be {describe(tp)}")
            return tuple(coerce(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        return type(value)(coerce(item, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise invalid(key, value, f"must be {describe(tp)}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
    else:
        raise TypeError(f"schema type {tp!r} of {key} is not supported")
    raise invalid(key, value, f"must be {describe(tp)}")


def describe(tp: Any) -> str:
    """What a type allows, in words: `an integer > 0 or null`, `one of auto, bar, lines, off`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:  # the first bound is the one worth saying; others are named when broken
        bounds = [b.describe() for b in args[1:] if isinstance(b, Bound)]
        return f"{describe(args[0])} {bounds[0]}" if bounds else describe(args[0])
    if origin in (typing.Union, types.UnionType):
        inner = [describe(a) for a in args if a is not type(None)]
        return " or ".join(inner) + (" or null" if len(inner) < len(args) else "")
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin is list or (origin is tuple and args and args[-1] is Ellipsis):
        return f"a list of {_plural(describe(args[0]))}" if args else "a list"
    if origin is tuple:
        return f"a list of {len(args)} {_plural(describe(args[0]))}"
    if origin is dict or tp is dict:
        return "a mapping of keys to values"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, str(tp))


def _plural(words: str) -> str:
    for single, plural in (("an integer", "integers"), ("a number", "numbers"), ("a string", "strings")):
        if words.startswith(single):
            return plural + words[len(single) :]
    return words


def _plain(cfg: DictConfig | dict) -> dict[str, Any]:
    """The config as plain containers with interpolations resolved (`???` stays a string)."""
    if isinstance(cfg, dict):
        cfg = OmegaConf.create(cfg)
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except Exception as exc:  # noqa: BLE001 - a bad interpolation, reported on one line
        raise ConfigError(_one_line(exc)) from None
    assert isinstance(data, dict)
    data.pop("hydra", None)
    return data


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _number(x: float | None) -> str:
    return str(int(x)) if x is not None and float(x).is_integer() else str(x)


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


__all__ = [
    "ConfigError",
    "EvaluateConfig",
    "RunConfig",
    "SweepCpuCheck",
    "hydra_error_line",
    "hydra_errors_in_one_line",
    "import_target",
    "validate_eval_config",
    "validate_train_config",
]
