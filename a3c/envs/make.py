"""Gymnasium environments for A3C: construction, validation, seeding, vectorisation.

Every environment goes through :func:`make_env`, which turns whatever Gymnasium raises
for a bad id into a one-line :class:`~hogwild.errors.UsageError`, and adapts its spaces
to what the policy takes (:mod:`a3c.envs.spaces`: flat ``float32`` vectors or ``uint8``
images, 0-based 1-D actions) or refuses them in one line, so a worker can feed
``torch.from_numpy(obs)`` straight to the model.

Autoreset: :func:`make_vector_env` uses ``AutoresetMode.SAME_STEP``. When a sub-env's
episode ends at a step, that same ``step()`` call resets it and returns the *next*
episode's first observation in ``obs``, and puts the ended episode's last observation
in ``info["final_obs"]`` (object array, one entry per sub-env, ``None`` where nothing
ended) with the mask ``info["_final_obs"]``; :func:`final_observations` stacks them.
Every row of a rollout is then a real transition, and a truncated episode can be
bootstrapped from ``V(final_obs)``. Gymnasium 1.x's default, ``NEXT_STEP``, instead
returns the final observation in ``obs`` and spends the *following* ``step()`` on the
reset (the action is ignored, reward 0, both flags False): a dead transition in every
rollout that crosses an episode end, which the learner would have to mask out of the
loss. (Behaviour checked in ``gymnasium/vector/sync_vector_env.py``, gymnasium 1.4.)
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial, wraps
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import TimeLimit

from a3c.envs import atari, minatar, minigrid
from a3c.envs.families import family_of, is_multiagent_id
from a3c.envs.multiagent import AgentRows, AgentViews, agent_spaces, is_multiagent
from a3c.envs.refs import apply_wrapper, resolve
from a3c.envs.spaces import EnvSpaces, adapt_spaces, describe_spaces, policy_takes
from hogwild.errors import UsageError

__all__ = [
    "agent_names",
    "agent_view",
    "env_spaces",
    "final_observations",
    "is_multiagent_id",
    "make_atari_env",
    "make_env",
    "make_vector_env",
]


def make_env(
    env_id: str,
    seed: int | None = None,
    *,
    scoring: bool = False,
    wrappers: Sequence[str] = (),
    preset_wrappers: Sequence[str] = (),
    **kwargs: Any,
) -> gym.Env:
    """Build one validated environment (see the module docstring for what is accepted).

    ``env_id`` is anything ``gymnasium.make`` accepts, including ``"module:EnvName-v0"``,
    which imports ``module`` first so that it can register ``EnvName-v0`` (this also
    works in freshly spawned worker processes), or ``"module:factory"``, a callable of
    that module that returns the env (called with ``kwargs``; ``max_episode_steps`` is
    applied as a ``TimeLimit``). ``wrappers``: ``"module:callable"`` references, each
    called as ``wrapper(env)`` in order, after the Atari/MinAtar preprocessing
    (:mod:`a3c.envs.refs`); then ``preset_wrappers`` likewise, except that each stands
    aside where the policy already takes the env's spaces (MiniGrid's ``ImgObsWrapper``
    after a user's own); then the adapter to the policy's spaces. A wrapper that fails
    is one line naming it and what it was put on. ``kwargs`` go to ``gymnasium.make``
    (e.g. ``max_episode_steps``), except, for Atari ids, the keywords of
    :func:`~a3c.envs.atari.wrap_atari` (``screen_size``, ``frame_stack``, ...), which
    takes ``max_episode_steps`` too, so that it counts agent steps, not frames. With a
    ``seed`` the env is reset once with it and its spaces are seeded, so later unseeded
    ``reset()`` calls are reproducible too.
    ``scoring``: an env to score a policy on, whole games with the real rewards (Atari:
    no episode per life, no reward clipping, FIRE pressed after a lost life too, which
    is flagged in ``info["life_lost"]``), not the one learned from.
    Raises :class:`UsageError` for unknown ids and unsupported spaces.
    """
    if "agent_groups" in kwargs and not is_multiagent_id(env_id):
        raise UsageError(f"--agent-groups is for PettingZoo envs; {env_id!r} is not one")
    family = family_of(env_id)
    is_atari = family == "atari"
    if is_atari:
        options, kwargs = atari.split_wrap_kwargs(kwargs)
        if scoring:
            options.update(terminal_on_life_loss=False, clip_rewards=False, fire_on_life_loss=True)
    env = _gym_make(env_id, kwargs)
    if is_multiagent(env):
        env.close()
        if is_multiagent_id(env_id):
            raise UsageError(
                f"{env_id!r} is a PettingZoo env: it runs as one row per agent "
                "(a3c.envs.make_vector_env), not as one Gymnasium env"
            )
        raise UsageError(
            f"env factory {env_id!r} returns a PettingZoo env only when given arguments: "
            "give its parameters defaults (a3c tells the two kinds of env apart by calling "
            "a factory with none)"
        )

    def wrap(env: gym.Env) -> gym.Env:
        beneath: list[str] = []
        if is_atari:
            env = _checked(atari.wrap_atari, env_id, env, options)
            beneath.append("the Atari preprocessing")
        elif family == "minatar":
            env = minatar.wrap_minatar(env)
            beneath.append("the MinAtar preprocessing")
        return adapt_spaces(_wrapped(env, env_id, beneath, wrappers, preset_wrappers), env_id)

    return wrap_and_seed(env, wrap, seed)


def _wrapped(
    env: gym.Env,
    env_id: str,
    beneath: list[str],
    wrappers: Sequence[str],
    preset_wrappers: Sequence[str],
) -> gym.Env:
    """The user's wrappers on the env (after the family's preprocessing, named in
    ``beneath``), then the preset's, each skipped where the policy already takes the env:
    the user's wrappers see the env as its own docs describe it (MiniGrid's dict), and one
    that already made the preset's image is not wrapped twice."""
    later = ", ".join(preset_wrappers)
    hint = f"the preset's wrappers ({later}) come after yours" if later else ""
    for kind, refs in (("wrapper", wrappers), ("preset wrapper", preset_wrappers)):
        for ref in refs:
            if kind == "preset wrapper" and policy_takes(env):
                continue
            on = f"{env_id} after {', '.join(beneath)}" if beneath else f"{env_id} as made"
            env = apply_wrapper(env, ref, on, kind, hint if kind == "wrapper" else "")
            beneath.append(f"{kind} {ref!r}")
    return env


def make_atari_env(env_id: str, seed: int | None = None, **kwargs: Any) -> gym.Env:
    """``gym.make`` + :func:`~a3c.envs.atari.wrap_atari`, without the policy's space adapter.

    Keywords that :func:`~a3c.envs.atari.wrap_atari` takes go to it, the rest to ``gym.make``
    (``repeat_action_probability``, ``full_action_space``, ``mode``, ``difficulty`` ...).
    Errors are one-line :class:`UsageError`\\ s, as from :func:`a3c.envs.make_env`. With a
    ``seed`` the env is reset once with it and its action space seeded.
    """
    if family_of(env_id) != "atari":
        raise UsageError(f"{env_id!r} is not an Atari (ale-py) environment id")
    wrap, kwargs = atari.split_wrap_kwargs(kwargs)
    env = _gym_make(env_id, atari.atari_make_kwargs(env_id, kwargs))
    return wrap_and_seed(env, lambda e: atari.wrap_atari(e, **wrap), seed)


def _checked(wrapper: Callable[..., gym.Env], env_id: str, env: gym.Env, options: dict) -> gym.Env:
    """``wrapper(env, **options)`` with a bad option's ``TypeError`` as a one-line UsageError."""
    try:
        return wrapper(env, **options)
    except (TypeError, ValueError) as e:
        raise UsageError(f"bad arguments for environment {env_id!r}: {_one_line(e)}") from e


def wrap_and_seed(env: gym.Env, wrap: Callable[[gym.Env], gym.Env], seed: int | None) -> gym.Env:
    """``wrap(env)``, closing ``env`` if that fails; then, with a ``seed``, one reset with
    it and its spaces seeded (so later unseeded resets are reproducible too)."""
    try:
        env = wrap(env)
    except BaseException:
        env.close()
        raise
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
        env.observation_space.seed(seed)
    return env


def make_vector_env(
    env_id: str, num_envs: int, seed: int, **kwargs: Any
) -> SyncVectorEnv | AgentRows:
    """``num_envs`` copies of :func:`make_env` in one process, sub-env i seeded ``seed + i``;
    for a PettingZoo env, ``num_envs`` games, one row per agent of each
    (:class:`~a3c.envs.multiagent.AgentRows`).

    Uses ``SAME_STEP`` autoreset (see the module docstring): ``obs`` after a step is
    always the observation to act on next; the ended episodes' last observations are in
    ``info["final_obs"]``/``info["_final_obs"]`` (use :func:`final_observations`).
    Both ``envs.reset()`` and ``envs.reset(seed=seed)`` are reproducible (they differ:
    the first continues the RNG that :func:`make_env` seeded, the second restarts it).
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise UsageError(f"the number of environments must be a positive integer, got {num_envs!r}")
    if is_multiagent_id(env_id):
        return _agent_rows(env_id, num_envs, seed, kwargs)
    envs = SyncVectorEnv(
        [partial(make_env, env_id, seed + i, **kwargs) for i in range(num_envs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    envs.action_space.seed(seed)
    return envs


Found = TypeVar("Found")


def once_per_env(
    probe: Callable[[str, Mapping[str, Any] | None], Found],
) -> Callable[[str, Mapping[str, Any] | None], Found]:
    """``probe(env_id, env_kwargs)`` run once per env and options: it makes the env (a
    PettingZoo game's probe plays it), and what it finds does not change within a process."""
    found: dict[str, Found] = {}

    @wraps(probe)
    def once(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> Found:
        key = f"{env_id} {sorted((env_kwargs or {}).items())!r}"
        if key not in found:
            found[key] = probe(env_id, env_kwargs)
        return found[key]

    return once


def env_spaces(env_id: str, **kwargs: Any) -> EnvSpaces:
    """The adapted spaces of an environment (:class:`EnvSpaces`), for building the model.

    Raises :class:`UsageError` exactly where :func:`make_env` would.
    """
    if is_multiagent_id(env_id):
        return agent_view(env_id, **kwargs).spaces()
    env = make_env(env_id, **kwargs)
    try:
        return describe_spaces(env)
    finally:
        env.close()


def agent_view(env_id: str, **kwargs: Any) -> AgentViews:
    """How the policy sees every agent of the PettingZoo env ``env_id`` (its adapters)."""
    game = _pettingzoo_env(env_id, kwargs)
    try:
        return agent_spaces(game, env_id, kwargs.get("agent_groups", "all"))
    finally:
        game.close()


def agent_names(env_id: str, kwargs: dict[str, Any]) -> tuple[str, ...]:
    """A PettingZoo env's agents, in the order of a game's rows; none for a Gymnasium env."""
    return tuple(agent_view(env_id, **kwargs).agents) if is_multiagent_id(env_id) else ()


def final_observations(
    info: dict[str, Any], where: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The last observations of episodes that ended in this vector step: ``(idx, obs)``.

    ``idx`` (int64 ``[k]``) are the sub-env indices whose episode ended at this step
    (restricted to the boolean mask ``where`` if given, e.g. ``truncated & ~terminated``
    to get just the ones to bootstrap), and ``obs`` (``[k, *obs_shape]``) their final
    observations (in the observation space's dtype). When nothing ended, ``idx`` is empty
    and ``obs`` has shape ``(0, 0)``.
    """
    ended = info.get("_final_obs")
    if ended is None:
        return np.empty(0, dtype=np.int64), np.empty((0, 0), dtype=np.float32)
    if where is not None:
        ended = ended & where
    idx = np.flatnonzero(ended)
    if idx.size == 0:
        return idx, np.empty((0, 0), dtype=np.float32)
    return idx, np.stack(info["final_obs"][idx])


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def _close_ids(name: str) -> list[str]:
    """Registered ids that look like ``name`` (case-insensitively)."""
    by_lower = {k.lower(): k for k in gym.registry}
    return [by_lower[m] for m in difflib.get_close_matches(name.lower(), by_lower, n=3)]


def _gym_make(env_id: str, kwargs: dict[str, Any]) -> gym.Env:
    """``gymnasium.make`` with its many failure modes turned into one-line UsageErrors."""
    if not isinstance(env_id, str) or not env_id.strip():
        raise UsageError(f"environment id must be a non-empty string, got {env_id!r}")
    module, _, name = env_id.rpartition(":")
    if env_id.count(":") > 1 or (":" in env_id and not (module and name)):
        raise UsageError(
            f"malformed environment id {env_id!r}; expected 'Name-vN', 'module:Name-vN' "
            "or 'module:factory'"
        )
    if module:
        # gymnasium.make would import it too; doing it first tells "your module does not
        # import" apart from "the env's own dependencies are missing".
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise UsageError(
                f"cannot import module {module!r} of environment id {env_id!r}: {_one_line(e)}"
            ) from e

        if name not in gym.registry and callable(getattr(sys.modules[module], name, None)):
            return _from_factory(env_id, kwargs)
    family = family_of(env_id)
    if family == "atari":
        kwargs = atari.atari_make_kwargs(env_id, kwargs)  # registers; frameskip=1
    elif family == "minatar":
        minatar.register_minatar_envs(env_id)
    elif family == "minigrid":
        minigrid.register_minigrid_envs(env_id)
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as e:
        raise UsageError(_missing_package_message(env_id, e)) from e
    except (gym.error.UnregisteredEnv, gym.error.DeprecatedEnv) as e:
        raise UsageError(_unknown_id_message(env_id, name, e)) from e
    except gym.error.Error as e:
        if "No registered env" in str(e):
            raise UsageError(_unknown_id_message(env_id, name, e)) from e
        raise UsageError(f"cannot make environment {env_id!r}: {_one_line(e)}") from e
    except ImportError as e:
        raise UsageError(_missing_package_message(env_id, e)) from e
    except (TypeError, ValueError) as e:
        # gym.make itself type-checks some keywords (max_episode_steps="x": TypeError);
        # with none given, an error not from the env's creator is a bug, not bad input.
        if not kwargs and "raised from the environment creator" not in str(e):
            raise
        raise UsageError(
            f"bad arguments for environment {env_id!r}: {_one_line(e.__cause__ or e)}"
        ) from e


def _from_factory(ref: str, kwargs: dict[str, Any]) -> gym.Env:
    """The env that the factory ``ref`` returns for ``kwargs``, with ``max_episode_steps``
    as a ``TimeLimit`` (as ``gymnasium.make`` applies it for a registered id)."""
    kwargs = dict(kwargs)
    limit = kwargs.pop("max_episode_steps", None)
    try:
        env = resolve(ref, "env factory")(**kwargs)
    except (TypeError, ValueError) as e:  # as gymnasium.make's creator errors: bad keywords
        raise UsageError(f"bad arguments for env factory {ref!r}: {_one_line(e)}") from e
    if is_multiagent(env):
        return env  # AgentRows applies max_episode_steps
    if not isinstance(env, gym.Env):
        kind = type(env).__name__
        raise UsageError(
            f"env factory {ref!r} returned a {kind}, not a gymnasium.Env or a PettingZoo env"
        )
    return env if limit is None else TimeLimit(env, int(limit))


def _pettingzoo_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    """The PettingZoo env ``env_id`` builds with ``kwargs``, the user's ``wrappers`` (each
    ``wrapper(env)``, PettingZoo's own or SuperSuit's) applied in order."""
    kwargs = dict(kwargs)
    wrappers = kwargs.pop("wrappers", ())
    kwargs.pop("preset_wrappers", None)
    kwargs.pop("max_episode_steps", None)
    kwargs.pop("agent_groups", None)
    env = _from_factory(env_id, kwargs)
    for ref in wrappers:
        wrapper = resolve(ref, "wrapper")
        try:
            wrapped = wrapper(env)
        except Exception as e:
            env.close()
            raise UsageError(
                f"wrapper {ref!r} failed on PettingZoo env {env_id!r}: "
                f"{type(e).__name__}: {_one_line(e)}"
            ) from e
        if not is_multiagent(wrapped):
            env.close()
            raise UsageError(f"wrapper {ref!r} on PettingZoo env {env_id!r} did not return one")
        env = wrapped
    return env


def _agent_rows(env_id: str, games: int, seed: int, kwargs: dict[str, Any]) -> AgentRows:
    limit = kwargs.get("max_episode_steps")
    makers = [partial(_pettingzoo_env, env_id, kwargs) for _ in range(games)]
    grouping = kwargs.get("agent_groups", "all")
    return AgentRows(makers, env_id, seed, None if limit is None else int(limit), grouping)


#: Words in Gymnasium's "not installed" messages -> this project's extra that installs it.
EXTRAS = {
    "box2d": "box2d",
    "mujoco": "mujoco",
    "ale": "atari",
    "atari": "atari",
    "minatar": "minatar",
}


def _missing_package_message(env_id: str, e: BaseException) -> str:
    text = _one_line(e)
    for word, extra in EXTRAS.items():
        if word in text.lower():
            return (
                f"environment {env_id!r} needs the {extra} extra: "
                f'pip install "hogwild-a3c[{extra}]" (or, from a checkout, '
                f'pip install -e ".[{extra}]"); gymnasium says: {text}'
            )
    return f"environment {env_id!r} needs a missing package: {text}"


def _unknown_id_message(env_id: str, name: str, e: BaseException) -> str:
    msg = f"unknown environment id {env_id!r}"
    if isinstance(e, gym.error.DeprecatedEnv):
        return f"{msg}: {_one_line(e)}"
    if ":" in env_id:
        msg += f"; module {env_id.rpartition(':')[0]!r} imported but did not register {name!r}"
    close = _close_ids(name)
    if close:
        return f"{msg}; did you mean {' or '.join(repr(c) for c in close)}?"
    if ":" not in env_id:
        return f"{msg}; for an env registered by your own module use 'module:{name}'"
    return msg
