"""Atari 2600 games (ale-py) with the standard DeepMind preprocessing, for A3C.

ale-py is imported only when an Atari id is asked for (:func:`register_atari_envs`); a
missing ale-py (or OpenCV, which Gymnasium's ``AtariPreprocessing`` resizes with) is a
one-line :class:`~hogwild.errors.UsageError` naming the ``atari`` extra.

:func:`wrap_atari` builds this stack, innermost first::

    gym.make(id, frameskip=1,        ALE/...-v5: sticky actions (p=0.25) are kept;
             obs_type="ram")         the env's own frames are dropped: RAM is cheapest
    RecordEpisodeStatistics          info["episode"] = {r, l, t}: the REAL game
    CroppedPreprocessing             AtariPreprocessing: no-op starts, skip 4 + max of
                                     the last 2 frames, grayscale; rows cropped (none
                                     by default), resized to 84x84 (uint8)
    GameStepLimit                    max_episode_steps: truncate the game (optional)
    EpisodicLife                     terminated=True on a life loss, game NOT reset
    FireOnReset                      press FIRE after every reset (games that need it)
    FireOnLifeLoss                   scoring env only: FIRE after a lost life too
    TransformReward(sign)            rewards clipped to -1, 0, +1 for learning
    CountAgentSteps                  the steps GameStepLimit counts (with it only)
    FrameStackObservation(4)         uint8 (4, 84, 84), channel-first

``info["episode"]`` comes from the innermost wrapper, so it appears only when a real
game ends (game over, or ALE's own 108 000-frame cap), never at a life loss, and holds
the unclipped score ``r``, the length ``l`` in *emulator frames* (agent steps x 4 plus
the no-ops and the resets' FIRE steps) and the wall time ``t``.
:func:`a3c.envs.episodes.episode_scores` reads it out of a vector env's ``info``.

``max_episode_steps`` counts agent steps, as for any other env: ``gym.make`` would put
its ``TimeLimit`` under the frame skip (counting emulator frames, and the no-ops), so
:func:`wrap_atari` takes it instead. :class:`CountAgentSteps`, outside every wrapper that
steps on its own, counts the agent's steps; :class:`GameStepLimit`, just above the frame
skip, truncates the *game* at the limit, so every wrapper above sees the truncation
(``EpisodicLife`` then resets the game) and the real score still reaches
``info["episode"]``. The wrappers' own FIRE and no-op steps are not counted.

Frame skip: ``ALE/...-v5`` (and ``...-v0``/``...-v4``) ids skip frames inside the
emulator, which cannot max-pool the last two frames (needed for games whose sprites
flicker), so they are made with ``frameskip=1`` and ``AtariPreprocessing`` does the skip,
as SB3 and CleanRL do. ``...NoFrameskip-v4`` ids already have ``frameskip=1``.
Sticky actions: v5 ids repeat the previous action with probability 0.25 at every
emulator frame (Machado et al., 2018), ``NoFrameskip-v4`` ids never do (the setting of
the A3C and DQN papers). This module keeps each id's default; pass
``repeat_action_probability=`` to :func:`a3c.envs.make.make_atari_env` to choose.
"""

from __future__ import annotations

import inspect
import re
import time
from typing import TYPE_CHECKING, Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import (
    AtariPreprocessing,
    FrameStackObservation,
    RecordEpisodeStatistics,
    TransformReward,
)

from hogwild.errors import UsageError

if TYPE_CHECKING:
    from ale_py.env import AtariEnv

__all__ = [
    "CountAgentSteps",
    "EpisodicLife",
    "FireOnLifeLoss",
    "FireOnReset",
    "GameStepLimit",
    "atari_make_kwargs",
    "is_atari_id",
    "register_atari_envs",
    "wrap_atari",
]

INSTALL_HINT = 'pip install "hogwild-a3c[atari]" (or, from a checkout, pip install -e ".[atari]")'

# ale-py's ids: ALE/Pong-v5, PongNoFrameskip-v4, and (registered by ale-py too) the older
# Pong-v0, Pong-v4, PongNoFrameskip-v0.
_ALE_V5 = re.compile(r"^ALE/[A-Za-z0-9]+-v\d+$")
_NO_FRAMESKIP = re.compile(r"^[A-Z][A-Za-z0-9]*NoFrameskip-v[04]$")
_OLD_STYLE = re.compile(r"^[A-Z][A-Za-z0-9]*-v[04]$")

FIRE = 1  # action 1 of every game whose start button is FIRE (checked in FireOnReset)
NOOP = 0


def _bare(env_id: str) -> str:
    """The id without a ``module:`` prefix."""
    return env_id.rpartition(":")[2]


def is_atari_id(env_id: str) -> bool:
    """Whether ``env_id`` names an ale-py game (``ALE/Pong-v5``, ``PongNoFrameskip-v4`` ...).

    Registered ids are judged by their entry point; unregistered ones by their shape.
    ``Pong-v4`` (no ``NoFrameskip``) shares its shape with other families' ids, so it
    counts as Atari only if ale-py, when installed, registers it.
    """
    if not isinstance(env_id, str):
        return False
    name = _bare(env_id)
    if name in gym.registry:
        return str(gym.registry[name].entry_point).startswith("ale_py")
    if _ALE_V5.match(name) or _NO_FRAMESKIP.match(name):
        return True
    if _OLD_STYLE.match(name):
        try:
            register_atari_envs()
        except UsageError:
            return False
        return name in gym.registry and is_atari_id(name)
    return False


def register_atari_envs(env_id: str | None = None) -> None:
    """Import ale-py, which registers its games with Gymnasium (idempotent, ~20 ms).

    ``env_id`` only goes into the error message if ale-py is missing.
    """
    try:
        import ale_py
    except ImportError as e:
        what = "Atari games need" if env_id is None else f"environment {env_id!r} needs"
        raise UsageError(f"{what} the atari extra: {INSTALL_HINT} ({e})") from e
    gym.register_envs(ale_py)
    # No "A.L.E: Arcade Learning Environment ... [Powered by Stella]" banner per process.
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


def atari_make_kwargs(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Register ale-py's games; ``kwargs`` for ``gym.make`` with ``frameskip=1`` and
    ``obs_type="ram"`` added (unless the caller set them).

    The emulator's own frame skip is turned off so that :func:`wrap_atari` can skip and
    max-pool. The env's own observation is dropped at every frame (``AtariPreprocessing``
    reads the screen from the emulator itself): as the 128 bytes of RAM rather than an
    RGB screen, an agent step of Pong costs ~20% less.
    """
    register_atari_envs(env_id)
    return {"frameskip": 1, "obs_type": "ram", **kwargs}


class EpisodicLife(gym.Wrapper):
    """A life loss ends the *training* episode (``terminated=True``) but not the game.

    After a life loss, ``reset()`` does not reset the emulator: it takes one no-op step
    and returns its observation (``seed``/``options`` are then ignored). Only after a real
    game over (or truncation) does ``reset()`` reset the game. As SB3's
    ``EpisodicLifeEnv``; games without lives (Pong: ``lives() == 0``) are unaffected.
    If the game ends during that no-op step, the emulator is reset and the ended game's
    ``info["episode"]`` is passed on in the reset's ``info``.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = _game(self.env).ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self.game_over:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(NOOP)
            if terminated or truncated:
                obs, info = _reset_keeping_episode(self.env, info)
        self.game_over = False
        self.lives = _game(self.env).ale.lives()
        return obs, info


class FireOnReset(gym.Wrapper):
    """After every ``reset()``, press FIRE (action 1) then action 2, as SB3's ``FireResetEnv``.

    For games that wait for FIRE to start (Breakout: also after each lost life, which is
    why this sits outside :class:`EpisodicLife`). If a step ends the episode, the env is
    reset again (and a real game's ``info["episode"]`` is passed on in the reset's info).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = _game(env).get_action_meanings()
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise ValueError(f"FireOnReset needs action 1 to be FIRE, got {meanings}")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for action in (FIRE, 2):
            obs, _, terminated, truncated, step_info = self.env.step(action)
            if terminated or truncated:
                obs, info = _reset_keeping_episode(self.env, step_info, seed, options)
        return obs, info


class FireOnLifeLoss(gym.Wrapper):
    """Whole-game scoring: after a lost life, press FIRE and flag ``info["life_lost"]``.

    Without :class:`EpisodicLife` no reset follows a life loss, so :class:`FireOnReset`
    cannot serve: a policy that never picks FIRE would stand still in Breakout until
    ALE's 108 000-frame cap. With ``fire``, the FIRE step (action 1) is taken within the
    step that lost the life: its reward is added, its observation, flags and info are
    returned. ``info["life_lost"] = True`` marks that step, so an evaluator can reset a
    recurrent policy's state there, as training does at each (per-life) episode start.
    Steps that end the episode are passed on untouched.
    """

    def __init__(self, env: gym.Env, *, fire: bool = True) -> None:
        super().__init__(env)
        self.fire = fire
        self.lives = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.lives = _game(self.env).ale.lives()
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = _game(self.env).ale.lives()
        lost = 0 < lives < self.lives and not (terminated or truncated)
        if lost and self.fire:
            obs, fire_reward, terminated, truncated, info = self.env.step(FIRE)
            reward = float(reward) + float(fire_reward)
            lives = _game(self.env).ale.lives()
        self.lives = lives
        if lost:
            info = {**info, "life_lost": True}
        return obs, reward, terminated, truncated, info


class GameStepLimit(gym.Wrapper):
    """Truncate the game once :class:`CountAgentSteps` has counted ``max_steps`` steps.

    Sits just above the frame skip, so that every wrapper above sees the truncation, and
    counts only the agent's own steps (counted outside them all), so the limit reads as
    for any env. ``RecordEpisodeStatistics`` (innermost) cannot see a truncation made
    above it, so the game's real score is copied from ``stats`` into ``info["episode"]``.
    """

    def __init__(self, env: gym.Env, max_steps: int, stats: RecordEpisodeStatistics) -> None:
        super().__init__(env)
        self.max_steps = max_steps
        self.stats = stats
        self.steps = 0  # raised by CountAgentSteps, zeroed at each new game

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.steps = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.steps >= self.max_steps:
            truncated = True
            if "episode" not in info:
                stats = self.stats
                elapsed = round(time.perf_counter() - stats.episode_start_time, 6)
                info = {
                    **info,
                    "episode": {
                        "r": stats.episode_returns,
                        "l": stats.episode_lengths,
                        "t": elapsed,
                    },
                }
        return obs, reward, terminated, truncated, info


class CountAgentSteps(gym.Wrapper):
    """Count the agent's steps for ``limit``; outside the wrappers that step on their own."""

    def __init__(self, env: gym.Env, limit: GameStepLimit) -> None:
        super().__init__(env)
        self.limit = limit

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        self.limit.steps += 1
        return self.env.step(action)


class CroppedPreprocessing(AtariPreprocessing):
    """Gymnasium's ``AtariPreprocessing`` (grayscale, uint8) that drops rows before resizing.

    A small screen spends its pixels where the game is: Pong's field is rows 34-193 of
    210, and a 42x42 resize of the whole frame leaves the ball under half a pixel
    (the crop the best-known 42x42 A3C port makes, docs/tuning.md).
    """

    def __init__(self, env: gym.Env, *, crop_top: int = 0, crop_bottom: int = 0, **kwargs):
        super().__init__(env, grayscale_obs=True, scale_obs=False, **kwargs)
        # Sized by the screen, not by the env's observation (RAM: atari_make_kwargs).
        height, width = self.ale.getScreenDims()
        self.obs_buffer = [np.empty((height, width), np.uint8) for _ in range(2)]
        if crop_top < 0 or crop_bottom < 0 or crop_top + crop_bottom >= height:
            raise UsageError(
                f"crop_top and crop_bottom must be >= 0 and leave rows of the {height}-row "
                f"screen, got {crop_top} and {crop_bottom}"
            )
        self.rows = slice(crop_top, height - crop_bottom)

    def _get_obs(self) -> np.ndarray:
        import cv2

        if self.frame_skip > 1:  # max of the last two frames, in place as the parent does
            np.maximum(self.obs_buffer[0], self.obs_buffer[1], out=self.obs_buffer[0])
        frame = self.obs_buffer[0][self.rows]
        return cv2.resize(frame, self.screen_size, interpolation=cv2.INTER_AREA)


def _reset_keeping_episode(
    env: gym.Env,
    step_info: dict[str, Any],
    seed: int | None = None,
    options: dict[str, Any] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """``env.reset()`` after an episode ended inside a wrapper's own ``reset()``.

    The ended game's statistics (``step_info["episode"]``) would be lost with the step's
    info, so they go into the reset's info, where a vector env puts them in its
    top-level ``info`` (which :func:`~a3c.envs.episodes.episode_scores` reads too).
    """
    obs, info = env.reset(seed=seed, options=options)
    if "episode" in step_info:
        info = {**info, "episode": step_info["episode"]}
    return obs, info


def _sign(reward: SupportsFloat) -> float:
    return float(np.sign(float(reward)))


def _game(env: gym.Env) -> AtariEnv:
    """``env``'s innermost env: ALE's, with its ``ale`` and ``get_action_meanings``."""
    return cast("AtariEnv", env.unwrapped)


def wrap_atari(
    env: gym.Env,
    *,
    frame_stack: int = 4,
    screen_size: int = 84,
    crop_top: int = 0,
    crop_bottom: int = 0,
    terminal_on_life_loss: bool = True,
    clip_rewards: bool = True,
    noop_max: int = 30,
    frame_skip: int = 4,
    fire_on_reset: bool | None = None,
    fire_on_life_loss: bool = False,
    max_episode_steps: int | None = None,
) -> gym.Env:
    """The DeepMind preprocessing (see the module docstring) around a fresh ale-py env.

    ``env`` must come straight from ``gym.make`` with ``frameskip=1`` (see
    :func:`atari_make_kwargs`). ``fire_on_reset=None`` presses FIRE on reset exactly when
    the game's action 1 is FIRE. ``fire_on_life_loss`` (with ``terminal_on_life_loss``
    off: the scoring env) adds :class:`FireOnLifeLoss`, which presses FIRE after a lost
    life too when ``fire_on_reset`` does. ``max_episode_steps`` truncates the game after
    that many agent steps (:class:`GameStepLimit`). ``crop_top``/``crop_bottom`` drop
    that many screen rows before the resize (:class:`CroppedPreprocessing`). Observations are uint8
    ``(frame_stack, screen_size, screen_size)``, channel-first (``frame_stack=1`` gives
    ``(1, 84, 84)``).
    """
    if getattr(env.unwrapped, "_frameskip", None) != 1:
        raise UsageError(
            "the Atari wrappers skip frames themselves; make the env with frameskip=1 "
            f"(got frameskip={getattr(env.unwrapped, '_frameskip', None)!r})"
        )
    if frame_stack < 1:
        raise UsageError(f"frame_stack must be at least 1, got {frame_stack}")
    if max_episode_steps is not None and max_episode_steps < 1:
        raise UsageError(f"max_episode_steps must be at least 1, got {max_episode_steps}")
    try:
        import cv2  # noqa: F401  (AtariPreprocessing resizes with OpenCV)
    except ImportError as e:
        raise UsageError(
            f"the Atari preprocessing needs OpenCV (in the atari extra): {INSTALL_HINT}"
        ) from e

    env = stats = RecordEpisodeStatistics(env)
    env = CroppedPreprocessing(
        env,
        crop_top=crop_top,
        crop_bottom=crop_bottom,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=False,  # Gymnasium's would reset the game at a life loss
    )
    limit = None
    if max_episode_steps is not None:
        env = limit = GameStepLimit(env, max_episode_steps, stats)
    if terminal_on_life_loss:
        env = EpisodicLife(env)
    meanings = _game(env).get_action_meanings()
    if fire_on_reset is None:
        fire_on_reset = len(meanings) >= 3 and meanings[1] == "FIRE"
    if fire_on_reset:
        env = FireOnReset(env)
    if fire_on_life_loss and not terminal_on_life_loss:
        env = FireOnLifeLoss(env, fire=fire_on_reset)
    if clip_rewards:
        env = TransformReward(env, _sign)
    if limit is not None:
        env = CountAgentSteps(env, limit)
    return FrameStackObservation(env, frame_stack)


#: The types of :func:`wrap_atari`'s keywords whose default is None (None: auto / none).
_OPTIONAL_TYPES = {"fire_on_reset": bool, "max_episode_steps": int}


def split_wrap_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kwargs`` split into :func:`wrap_atari`'s keywords and the rest (``gym.make``'s).

    A wrapper keyword must have its default's type (``terminal_on_life_loss="no"`` would
    otherwise count as true): a one-line :class:`UsageError` if not. Those whose default
    is ``None`` (:data:`_OPTIONAL_TYPES`) also take ``None``.
    ``max_episode_steps`` is one of them: for Atari ids it counts agent steps.
    """
    defaults = {
        name: p.default
        for name, p in inspect.signature(wrap_atari).parameters.items()
        if name != "env"
    }
    wrap = {k: v for k, v in kwargs.items() if k in defaults}
    for k, v in wrap.items():
        kind = _OPTIONAL_TYPES[k] if defaults[k] is None else type(defaults[k])
        if type(v) is not kind and not (v is None and defaults[k] is None):
            raise UsageError(f"Atari option {k} must be {kind.__name__}, got {v!r}")
    return wrap, {k: v for k, v in kwargs.items() if k not in defaults}
