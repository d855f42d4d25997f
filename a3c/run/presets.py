"""Per-environment presets (``a3c/run/presets.toml``) and user config files, laid over the defaults.

Precedence, lowest first: :class:`~a3c.run.config.A3CConfig` defaults, the preset, a
``--config`` file, flags (or keyword arguments of :func:`config_for`). Every key goes
through the same declaration as a flag, so an unknown key or a wrong type is one line.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from a3c.envs import env_spaces
from a3c.envs.families import family_of
from a3c.envs.make import once_per_env
from a3c.envs.refs import reference_to
from a3c.learning.algorithms import ALGORITHMS
from a3c.run.config import DECOUPLED, A3CConfig
from a3c.run.shared_model import reads_with_conv
from a3c.scoring import self_play
from hogwild.checkpoint import load_checkpoint
from hogwild.config import overrides_from_mapping, read_toml
from hogwild.errors import UsageError

__all__ = [
    "AUTO",
    "config_for",
    "load_presets",
    "measured_workers",
    "preset_names",
    "read_config_file",
    "resolve_preset",
    "saved_config",
]

AUTO = "auto"
FALLBACK = "default"
#: The table laid over [pettingzoo]'s for a game one policy plays against itself, and
#: the one over it where the game's rows are vectors (no board for the conv net).
SELF_PLAY, SELF_PLAY_VECTORS = "self_play", "self_play_vectors"
MULTIAGENT = "pettingzoo"
#: Settings of a decoupled algorithm's learner (--algo ppo), which the others have not.
DECOUPLED_ONLY = tuple(
    f.name for f in dataclasses.fields(A3CConfig) if f.metadata["rule"].group == DECOUPLED
)


def load_presets(text: str | None = None) -> dict[str, dict[str, Any]]:
    """Every table of the packaged preset file (or of ``text``), validated."""
    if text is None:
        text = resources.files("a3c.run").joinpath("presets.toml").read_text()
    tables = tomllib.loads(text)
    return {
        name: _validated(table, f"preset {name!r}", per_algo=True) for name, table in tables.items()
    }


def _validated(table: Any, source: str, per_algo: bool = False) -> dict[str, Any]:
    """A table's settings; with ``per_algo``, its sub-tables named by an algorithm
    (``[Pendulum-v1.a3c]``) too, each under its algorithm's name."""
    if not isinstance(table, dict):
        raise UsageError(f"{source} must be a table of settings")
    subtables = {k: table.pop(k) for k in ALGORITHMS if per_algo and k in table}
    values = overrides_from_mapping(A3CConfig, table, source)
    for algo, sub in subtables.items():
        values[algo] = _validated(sub, f"{source}.{algo}")
        if "algo" in values[algo]:
            raise UsageError(f"{source}.{algo}: 'algo' cannot be set here")
    if "preset" in values:
        raise UsageError(f"{source}: 'preset' cannot be set here; use --preset")
    return values


def resolve_preset(
    env: str,
    name: str | None = AUTO,
    algo: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> tuple[str | None, dict[str, Any]]:
    """``(name applied, its settings)``: auto is the env's own table, else the fallback.

    The tables are laid over each other as :func:`preset_names` names them. A table
    names the algorithm it chose (``algo``) and may hold a sub-table per algorithm: the
    settings are the table's own plus those of ``algo`` (the one asked for) or else of
    the table's own choice, so ``--algo a3c`` on an env whose preset chose APPO still
    gets the A3C settings measured for it."""
    if name in (None, "none"):
        return None, {}
    presets = load_presets()
    name, tables = _chain(presets, env, name, env_kwargs)
    layers = [presets.get(table, {}) for table in tables]
    chosen = algo or next((t["algo"] for t in reversed(layers) if "algo" in t), A3CConfig.algo)
    settings: dict[str, Any] = {}
    for table in layers:
        settings.update({k: v for k, v in table.items() if k not in ALGORITHMS})
        settings.update(table.get(chosen, {}))
    return name, settings


def preset_names(cfg: A3CConfig) -> str:
    """The tables ``cfg``'s run was given, lowest first (``pettingzoo + self_play``): a
    game's table over its family's, and for a zero-sum turn-based PettingZoo game (one
    policy in every seat; ``env_kwargs`` can make one, as go's ``board_size``)
    ``self_play`` between them, with ``self_play_vectors`` after it where the game's rows
    are vectors (the MLP's, no board); ``none`` for none."""
    if cfg.preset in (None, "none"):
        return "none"
    try:
        return " + ".join(_chain(load_presets(), cfg.env, cfg.preset, cfg.env_options())[1])
    except UsageError:  # a resumed run's preset that presets.toml no longer has
        return cfg.preset


def _chain(
    presets: dict[str, dict[str, Any]], env: str, name: str, env_kwargs: dict[str, Any] | None
) -> tuple[str, list[str]]:
    if name == AUTO:  # a table of the id, a factory's ("module:env") included, or its name's
        key = env if env in presets else env.rpartition(":")[2]
        name = key if key in presets else _family(env)
    if name not in presets:
        known = ", ".join(sorted(presets))
        raise UsageError(f"unknown preset {name!r}; known: {known}, or none")
    if "env" in presets[name]:
        raise UsageError(f"preset {name!r} may not set env")
    family = MULTIAGENT if name in (SELF_PLAY, SELF_PLAY_VECTORS) else _family(name)
    tables = [family, name] if family not in (name, FALLBACK) else [name]
    if tables[0] == MULTIAGENT and _plays_itself(env, env_kwargs):
        if SELF_PLAY not in tables:
            tables.insert(1, SELF_PLAY)
        if SELF_PLAY_VECTORS not in tables and _vectors(env, env_kwargs):
            tables.insert(tables.index(SELF_PLAY) + 1, SELF_PLAY_VECTORS)
    return name, tables


def _plays_itself(env: str, env_kwargs: dict[str, Any] | None) -> bool:
    try:
        return self_play(env, env_kwargs)
    except UsageError:  # an env these options cannot make: making it for the run says why
        return False


@once_per_env
def _vectors(env: str, env_kwargs: Mapping[str, Any] | None) -> bool:
    """Whether a game's rows are vectors, not a board or an image."""
    return env_spaces(env, **(env_kwargs or {})).kind == "vectors"


def measured_workers(cfg: A3CConfig) -> int | None:
    """The worker count the run's preset sets, because its settings were measured there
    (Atari's APPO: 2); None where it sets none."""
    try:
        return resolve_preset(cfg.env, cfg.preset, cfg.algo, cfg.env_options())[1].get("workers")
    except UsageError:  # a resumed run's preset that presets.toml no longer has
        return None


def _family(env: str) -> str:
    """An env's family preset (Atari, MinAtar, MiniGrid, MuJoCo, else the default): its
    games' tables sit on it."""
    return family_of(env) or FALLBACK


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A user's TOML file of settings (same keys as the presets; it may set ``env``)."""
    return _validated(read_toml(path), f"config file {path}")


def config_for(
    env: str | None = None,
    preset: str | None = AUTO,
    config_file: str | Path | None = None,
    **overrides: Any,
) -> A3CConfig:
    """The config a run uses: defaults <- the algorithm's own (APPO's rollouts) <- preset
    for ``env`` <- config file <- ``overrides``.

    ``env`` is an id or a module-level function (or class) that returns the env;
    ``wrappers=[...]`` takes wrapper callables or ``"module:callable"`` texts.

    ``config_for("Acrobot-v1", workers=2)`` is what ``a3c.train --env Acrobot-v1
    --workers 2`` runs; ``preset=None`` applies none. With ``resume=CHECKPOINT`` (a
    keyword or in the file) the resumed run's own settings replace the defaults and the
    preset, so it continues as it was; the file and keywords still apply over them.
    """
    from_file = read_config_file(config_file) if config_file is not None else {}
    if callable(env):  # an env factory, imported by name in every process
        env = reference_to(env, "env factory")
    if isinstance(overrides.get("wrappers"), (list, tuple)):
        overrides["wrappers"] = [reference_to(w, "wrapper") for w in overrides["wrappers"]]
    overrides = overrides_from_mapping(A3CConfig, overrides, "config_for")
    resume = overrides.get("resume") or from_file.get("resume")
    if resume:
        base = saved_config(resume)
    else:
        env = env or overrides.get("env") or from_file.get("env") or A3CConfig.env
        algo = overrides.get("algo") or from_file.get("algo")
        groups = overrides.get("agent_groups") or from_file.get("agent_groups")
        env_kwargs = overrides.get("env_kwargs") or from_file.get("env_kwargs") or {}
        made_with = {**env_kwargs, **({"agent_groups": groups} if groups else {})}
        name, values = resolve_preset(env, preset, algo, made_with)
        chosen = ALGORITHMS.get(algo or values.get("algo") or A3CConfig.algo)
        own = dict(chosen.defaults) if chosen is not None else {}  # a bad --algo: refused below
        base = {**own, **values, "env": env, "preset": name}
    if env is not None:
        overrides["env"] = env
    settings = {**base, **from_file, **overrides}
    asked = {**from_file, **overrides}
    if settings.get("policy") == "lstm" and "separate_networks" not in asked:
        # The LSTM core sits on one shared trunk: a preset's separate nets (CartPole's)
        # give way to a policy the user asked for, rather than refuse it.
        settings.pop("separate_networks", None)
    cfg = A3CConfig(**settings)
    refuse_unused(cfg, asked)
    return cfg


def refuse_unused(cfg: A3CConfig, asked: dict[str, Any]) -> None:
    """Refuses what the user set (a flag, a config file, a keyword) that ``cfg``'s run
    would ignore, as ``--snapshot-games`` off a game is: a run that quietly goes without
    it misleads. A preset's own values are not the user's, so they stand aside (Atari's
    centred frames on a RAM id)."""
    defaults = {f.name: f.default for f in dataclasses.fields(A3CConfig)}
    algo = ALGORITHMS[cfg.algo]
    if not algo.decoupled:
        takers = " or ".join(f"--algo {a.name}" for a in ALGORITHMS.values() if a.decoupled)
        for name in DECOUPLED_ONLY:
            if name in asked and asked[name] != defaults[name]:
                raise UsageError(
                    f"--{name.replace('_', '-')} is for {takers}'s learner; "
                    f"--algo {cfg.algo} has none"
                )
    if not (asked.get("center_frames") or asked.get("separate_networks")):
        return
    spaces = env_spaces(cfg.env, **cfg.env_options())  # makes the env: only when asked
    if asked.get("center_frames") and spaces.kind != "images":
        raise UsageError(
            f"--center-frames is for image observations; {cfg.env}'s are {spaces.kind}"
        )
    if asked.get("separate_networks") and reads_with_conv(cfg, spaces):
        hint = " (--policy mlp reads its board as a vector)" if spaces.grid else ""
        raise UsageError(
            f"--separate-networks is for an MLP; {cfg.env} is read by one shared conv net{hint}"
        )


def saved_config(checkpoint: str | Path) -> dict[str, Any]:
    """The settings a checkpoint's run used (validated like a config file)."""
    ckpt = load_checkpoint(checkpoint, required=("config",))
    source = f"checkpoint {checkpoint}"
    if not isinstance(ckpt["config"], dict):
        raise UsageError(f"{source}: its config is not a table of settings")
    return overrides_from_mapping(A3CConfig, ckpt["config"], source)
