"""Checks the CLIs' composed configs into their typed schemas (`offpolicy.schemas`) before anything starts.

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

Keys a schema does not know (typos) are refused with the valid keys listed. The validated
`RunConfig` is the run's config: the runner and its components read their typed sections, and no
other place holds a default.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import re
import sys
import types
import typing
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from hydra.errors import CompactHydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from offpolicy.exit_status import ExitStatus
from offpolicy.schemas import (  # noqa: F401  (re-exported: the CLIs and tests import them from here)
    DEVICE_PATTERN,
    FACTORY_PATTERN,
    LOGGERS,
    AffinityConfig,
    Bound,
    CheckpointConfig,
    ConfigError,
    EnvConfig,
    EvalConfig,
    EvaluateConfig,
    FaultConfig,
    LoggerConfig,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    RecordConfig,
    ReplayConfig,
    RunConfig,
    RuntimeConfig,
    Seed,
    TrainConfig,
    WandbLoggerConfig,
    _number,
    _one_line,
    check_device,
    format_value,
    import_target,
    invalid,
)


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
    if not 0.0 < schema.policy_ema_tau <= 1.0:
        raise invalid("algo.policy_ema_tau", schema.policy_ema_tau, "must be in (0, 1]")
    if getattr(schema, "lr_decay_updates", 0) < 0:
        raise invalid("algo.lr_decay_updates", schema.lr_decay_updates, "must be an integer >= 0")
    if hasattr(schema, "lr_end_ratio") and not 0.0 < schema.lr_end_ratio <= 1.0:
        raise invalid("algo.lr_end_ratio", schema.lr_end_ratio, "must be in (0, 1]")
    try:
        validate(algo)
    except Exception as exc:  # noqa: BLE001 - omegaconf's errors, reported on one line
        raise ConfigError(f"algo: {_one_line(exc)}") from None


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


def validate_eval_config(cfg: DictConfig | dict) -> EvaluateConfig:
    """Check the composed eval config; raise `ConfigError` (one line) at the first bad key."""
    data = _plain(cfg)
    logger = data.pop("logger", None)
    evaluate = build(EvaluateConfig, data, "")
    evaluate.logger = build_logger(logger)
    return evaluate  # the task is checked by offpolicy.eval once the GL backend is chosen (importing mujoco fixes it)


# --------------------------------------------------------------------------- the checker


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
