"""One declaration per setting: a dataclass field states its type, default, help and range.

An app's config is a dataclass whose fields are made with :func:`setting`. From those
fields come the command-line flags (:func:`add_flags`), the keys a preset or config file
may set (:func:`overrides_from_mapping`), the range checks (:func:`check`, which a config
calls from ``__post_init__``, so flags, files and the Python API are checked alike) and
the ``config.json`` record (``dataclasses.asdict``). The engine's own settings, shared by
every app, are declared once in :class:`EngineConfig`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from typing import Any

from hogwild.errors import UsageError

__all__ = [
    "EngineConfig",
    "add_flags",
    "check",
    "overrides_from_args",
    "overrides_from_mapping",
    "read_toml",
    "redefault",
    "setting",
    "settings_from_file",
]


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a field's metadata says beyond its type and default."""

    help: str
    group: str = "settings"
    choices: tuple[Any, ...] | None = None
    min: float | None = None  # inclusive
    above: float | None = None  # exclusive lower bound
    max: float | None = None  # inclusive
    metavar: str | None = None
    flag: bool = True  # False: settable from files and the API only
    aliases: tuple[str, ...] = ()  # more option strings for the flag, e.g. ("--num-processes",)


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Any = dataclasses.MISSING,
    **rule: Any,
) -> Any:
    """A dataclass field with its help text and valid range (see :class:`Rule`)."""
    return dataclasses.field(
        default=default, default_factory=factory, metadata={"rule": Rule(help, **rule)}
    )


def redefault(cls: type, name: str, default: Any, **rule: Any) -> Any:
    """The field ``name`` of ``cls`` with an app's own default (same help and range);
    ``rule`` may add to its :class:`Rule`, e.g. ``aliases=("--num-processes",)``."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    return dataclasses.field(
        default=default, metadata={"rule": dataclasses.replace(f.metadata["rule"], **rule)}
    )


def _rule(f: dataclasses.Field) -> Rule | None:
    return f.metadata.get("rule")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _types(cls: type) -> dict[str, tuple[type, bool]]:
    """``name -> (base type, accepts None)`` for every field of ``cls``."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        optional = False
        if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
            args = [a for a in typing.get_args(t) if a is not type(None)]
            optional, t = True, args[0]
        out[f.name] = (t, optional)
    return out


def _parse_text(kind: type, text: str) -> Any:
    """A flag's text as ``kind``; raises ``ValueError`` with a short reason."""
    if typing.get_origin(kind) is dict:
        return _parse_pairs(text)
    if _is_text_list(kind):
        return text  # one item per use of a repeatable flag
    if typing.get_origin(kind) is tuple:
        try:
            return tuple(int(x) for x in text.split(","))
        except ValueError:
            raise ValueError(f"expected integers like 64,64, got {text!r}") from None
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
    return text


def _is_text_list(kind: type) -> bool:
    """``tuple[str, ...]``: a repeatable flag, one item per use."""
    return typing.get_origin(kind) is tuple and typing.get_args(kind)[:1] == (str,)


def _parse_pairs(text: str) -> dict[str, Any]:
    """``"a=1,b=x"`` -> ``{"a": 1, "b": "x"}``: each value read as a TOML value (a bare
    word is a string); ``""`` or ``"none"`` -> ``{}``."""
    out: dict[str, Any] = {}
    if text.strip().lower() in ("", "none"):
        return out
    for item in text.split(","):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key.isidentifier():
            raise ValueError(
                f"expected KEY=VALUE pairs like screen_size=42,noop_max=0, got {text!r}"
            )
        try:
            out[key] = tomllib.loads(f"x = {value}")["x"]
        except tomllib.TOMLDecodeError:
            out[key] = value
    return out


def _shown(default: Any) -> Any:
    if isinstance(default, tuple):
        return ",".join(map(str, default)) or "none"
    if isinstance(default, dict):
        return ",".join(f"{k}={v}" for k, v in default.items()) or "none"
    return default


_METAVARS = {int: "N", float: "X", str: "TEXT", dict: "KEY=VALUE,..."}


def _argtype(kind: type, optional: bool):
    def convert(text: str) -> Any:
        if optional and text.lower() == "none":
            return None
        try:
            return _parse_text(kind, text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = getattr(kind, "__name__", "value")
    return convert


def add_flags(
    parser: argparse.ArgumentParser, cls: type, groups_order: tuple[str, ...] = ()
) -> None:
    """One flag per field of ``cls``, in argument groups named by each field's ``group``.

    Flags default to "not given" (``argparse.SUPPRESS``), so that what a user typed can be
    laid over a preset or config file; the help shows the dataclass default. Groups
    named in ``groups_order`` come first, in that order.
    """
    groups = {name: parser.add_argument_group(name) for name in groups_order}
    kinds = _types(cls)
    for f in dataclasses.fields(cls):
        rule = _rule(f)
        if rule is None or not rule.flag:
            continue
        group = groups.get(rule.group) or groups.setdefault(
            rule.group, parser.add_argument_group(rule.group)
        )
        kind, optional = kinds[f.name]
        factory = f.default_factory
        default = f.default if factory is dataclasses.MISSING else factory()
        shown = _shown(default)
        text = f"{rule.help} (default: {shown})" if rule.help else f"(default: {shown})"
        text = text.replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": text}
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _argtype(kind, optional)
            if _is_text_list(kind):
                kwargs["action"] = "append"
            if rule.choices is not None:
                kwargs["choices"] = rule.choices
            metavar = _METAVARS.get(typing.get_origin(kind) or kind)
            kwargs["metavar"] = rule.metavar or (None if rule.choices else metavar)
        group.add_argument(_flag(f.name), *rule.aliases, **kwargs)


def overrides_from_args(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The settings a user gave on the command line (and only those)."""
    names = {f.name for f in dataclasses.fields(cls) if (r := _rule(f)) is not None and r.flag}
    return {k: v for k, v in vars(args).items() if k in names}


def overrides_from_mapping(cls: type, mapping: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Validated settings from a preset or config file; an unknown key or wrong type is one line."""
    kinds = _types(cls)
    out = {}
    for key, value in mapping.items():
        if key not in kinds:
            close = difflib.get_close_matches(key, kinds, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"{source}: unknown setting {key!r}{hint}")
        kind, optional = kinds[key]
        out[key] = _coerce(kind, optional, value, f"{source}: {key}")
    return out


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A user's TOML file of settings, as a table; unreadable or invalid is one line."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise UsageError(f"cannot read config file {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"config file {path} is not valid TOML: {e}") from None


def settings_from_file(cls: type, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings of a TOML file (keys as in ``config.json``), checked as a preset's."""
    return overrides_from_mapping(cls, read_toml(path), f"config file {path}")


def _coerce(kind: type, optional: bool, value: Any, where: str) -> Any:
    if value is None or (optional and value == "none"):
        if optional:
            return None
        raise UsageError(f"{where} may not be none")
    if typing.get_origin(kind) is dict:
        if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
            return dict(value)
        raise UsageError(f"{where} must be a table of KEY = VALUE, got {value!r}")
    if _is_text_list(kind):
        if isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
            return tuple(value)
        raise UsageError(f"{where} must be a list of strings, got {value!r}")
    if typing.get_origin(kind) is tuple:
        if isinstance(value, (list, tuple)) and all(
            isinstance(x, int) and not isinstance(x, bool) for x in value
        ):
            return tuple(value)
        raise UsageError(f"{where} must be a list of integers, got {value!r}")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is bool and not isinstance(value, bool):
        raise UsageError(f"{where} must be true or false, got {value!r}")
    if kind is not bool and isinstance(value, bool) or not isinstance(value, kind):
        raise UsageError(f"{where} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def check(cfg: Any) -> None:
    """Every field of ``cfg`` against its type and declared range; errors name the setting."""
    kinds = _types(type(cfg))
    for f in dataclasses.fields(cfg):
        rule = _rule(f)
        value = getattr(cfg, f.name)
        kind, optional = kinds[f.name]
        name = f"{f.name} ({_flag(f.name)})" if rule is not None and rule.flag else f.name
        setattr(cfg, f.name, _coerce(kind, optional, value, name))
        if rule is None or value is None:
            continue
        if rule.choices is not None and value not in rule.choices:
            choices = ", ".join(map(str, rule.choices))
            raise UsageError(f"{name} must be one of {choices}, got {value!r}")
        numbers = value if isinstance(value, tuple) else (value,)
        for x in numbers:
            if not isinstance(x, (int, float)) or isinstance(x, bool):
                continue
            if isinstance(x, float) and not math.isfinite(x):
                raise UsageError(f"{name} must be a finite number, got {value!r}")
            if rule.min is not None and x < rule.min:
                raise UsageError(f"{name} must be at least {rule.min:g}, got {value!r}")
            if rule.above is not None and not x > rule.above:
                raise UsageError(f"{name} must be above {rule.above:g}, got {value!r}")
            if rule.max is not None and x > rule.max:
                raise UsageError(f"{name} must be at most {rule.max:g}, got {value!r}")


ENGINE = "engine"
EVAL = "evaluation and logging"
DIST = "several machines (under torchrun; see the README, Scaling out)"


@dataclasses.dataclass
class EngineConfig:
    """The settings every app on the engine shares: processes, evaluator, run folder, nodes."""

    workers: int = setting(
        max(os.cpu_count() or 1, 1),
        "worker processes (per node under torchrun)",
        group=ENGINE,
        min=1,
    )
    threads_per_worker: int = setting(
        1, "torch threads in each worker; keep workers x threads <= cores", group=ENGINE, min=1
    )
    start_method: str = setting(
        "fork",
        "how workers are started (fork turns to spawn where forked workers could not run "
        "backward: after a backward pass in this process with a GPU present)",
        group=ENGINE,
        choices=("fork", "spawn"),
    )
    on_worker_failure: str = setting(
        "restart",
        "a dead worker is restarted, or the run stops",
        group=ENGINE,
        choices=("restart", "abort"),
    )
    max_restarts: int = setting(20, "worker restarts allowed in the whole run", group=ENGINE, min=0)
    seed: int = setting(1, "random seed", group=ENGINE)
    eval_interval: float = setting(
        5.0,
        "seconds between evaluations in a separate evaluator process (0: no evaluator)",
        group=EVAL,
        min=0,
        metavar="SECONDS",
    )
    eval_device: str = setting(
        "auto",
        "the evaluator's device; auto: CUDA if present and the model is large enough to gain",
        group=EVAL,
        choices=("auto", "cpu", "cuda"),
    )
    logdir: str = setting("runs", "parent folder of run folders", group=EVAL, metavar="DIR")
    run_name: str | None = setting(None, "run folder suffix", group=EVAL, metavar="NAME")
    track: bool = setting(
        False,
        "also send the run to Weights & Biases (config and every TensorBoard scalar; extra "
        "[wandb]; WANDB_MODE=offline records without the network)",
        group=EVAL,
    )
    wandb_project: str | None = setting(
        None, "--track: the W&B project (none: hogwild-a3c)", group=EVAL, metavar="NAME"
    )
    wandb_entity: str | None = setting(
        None, "--track: the W&B team or user (none: your default)", group=EVAL, metavar="NAME"
    )
    resume: str | None = setting(
        None,
        "continue a run from its checkpoint.pt (any other file, such as best.pt, starts a"
        " new run folder from it)",
        group=EVAL,
        metavar="CHECKPOINT",
    )
    sync_every: float = setting(
        2.0, "seconds between parameter averages across nodes", group=DIST, above=0
    )
    dist_timeout: float = setting(
        30.0,
        "seconds a silent node (stopped, hung, unreachable) is waited for, past its next "
        "--sync-every round, before the others stop with an error (rank 0 with a "
        "checkpoint); keep it above the longest pause of a slow but live node",
        group=DIST,
        above=0,
    )
