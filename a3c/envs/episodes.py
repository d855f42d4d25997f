"""Ended episodes' real scores from the ``info`` of a (vector) env.

Envs wrapped in ``gymnasium.wrappers.RecordEpisodeStatistics`` put
``info["episode"] = {"r": return, "l": length, "t": seconds}`` into the info of the step
that ends an episode. Where that shows up in a ``SyncVectorEnv`` (gymnasium 1.4,
``sync_vector_env.py``):

* ``AutoresetMode.SAME_STEP`` (:func:`a3c.envs.make_vector_env`): the ended step's info
  goes under ``info["final_info"]`` and the top level holds the *reset's* info, so it is
  ``info["final_info"]["episode"]["r"|"l"|"t"]`` (arrays, one entry per sub-env) with
  the mask ``info["final_info"]["_episode"]`` (and ``info["_final_info"]``);
* ``AutoresetMode.NEXT_STEP`` (Gymnasium's default): ``info["episode"][...]`` with the
  mask ``info["_episode"]``, at the step that ended the episode.

A SAME_STEP top-level ``info["episode"]`` can still appear: the Atari wrappers that
step inside ``reset()`` (:class:`~a3c.envs.atari.EpisodicLife`,
:class:`~a3c.envs.atari.FireOnReset`) pass a game that ended there on in the reset's
info. :func:`episode_scores` reads both places, and a single env's info too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["episode_scores"]


def episode_scores(info: dict[str, Any], key: str = "episode") -> list[tuple[int, float, int]]:
    """``(sub-env index, return, length)`` of each episode that ended in this step.

    ``info`` is a vector env's info (either autoreset mode) or a single env's (index 0).
    Sorted by sub-env index; empty if no episode ended.
    """
    scores: list[tuple[int, float, int]] = []
    final_info = info.get("final_info")
    for source in (final_info, info):
        if not isinstance(source, dict) or key not in source:
            continue
        stats = source[key]
        mask = source.get("_" + key)
        if mask is None:  # a single env's info: scalars
            scores.append((0, float(stats["r"]), int(stats["l"])))
            continue
        for i in np.flatnonzero(mask):
            scores.append((int(i), float(stats["r"][i]), int(stats["l"][i])))
    return sorted(scores)
