"""How rollouts travel from a decoupled run's actors to its learner
(:mod:`a3c.run.decoupled`): the slot layout, filling a slot and reading one back, and the
tokens by which the learner paces the actors.

A slot holds a rollout, the actor's log-probabilities, values and GAE targets (computed
with the weights that acted, so the learner needs no final observations) and the version
of those weights. Frames are stored in their memory's order (channel-last), so that
filling a slot is a memcpy.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from typing import Any

import torch
from torch import Tensor

from a3c.learning.rollout import Rollout
from a3c.policy import ActorCritic
from a3c.run.config import A3CConfig
from hogwild.pool import BufferPool, Layout, PoolTimeout, Producer
from hogwild.procs import WorkerContext

__all__ = ["Handoff", "Pace", "hand_over", "rollout_layout", "slot_rollout", "stored", "turned"]

ROLLOUT_SLOTS = 2  # per actor
WAIT_S = 0.5  # between stop checks while waiting for a slot or a rollout
TARGETS = ("log_p", "values", "advantages", "returns")
STEPS = ("rewards", "terminated", "dones", "truncated")


def stored(t: Tensor) -> Tensor:
    """``t`` in its memory's order (channel-last frames as H, W, C), so that copying it is
    a memcpy; :func:`model_order` turns such a buffer back."""
    if not t.is_contiguous() and t.dim() >= 3 and t.movedim(-3, -1).is_contiguous():
        return t.movedim(-3, -1)
    return t


def turned(model: ActorCritic) -> bool:
    """Whether the model's frames are stored channel-last (:func:`stored` turns them)."""
    frames = model.empty_obs(1)
    return stored(frames) is not frames


def model_order(t: Tensor, turned: bool) -> Tensor:
    """A buffer of stored frames seen in the model's (C, H, W) order."""
    return t.movedim(-1, -3) if turned else t


def rollout_layout(model: ActorCritic, T: int, K: int) -> Layout:
    """One slot: a rollout of ``T`` steps of ``K`` envs, its targets and its version."""
    obs, next_obs = stored(model.empty_obs(T, K)), stored(model.empty_obs(K))
    dist = model.dist
    layout: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
        "obs": (tuple(obs.shape), obs.dtype),
        "next_obs": (tuple(next_obs.shape), obs.dtype),
        "actions": ((T, K, *dist.action_shape), dist.action_dtype),
        **{name: ((T, K), torch.float32) for name in ("rewards", *TARGETS)},
        **{name: ((T, K), torch.bool) for name in ("terminated", "dones", "truncated")},
        "version": ((), torch.int64),
    }
    if model.recurrent:
        for name in ("h", "c"):
            layout[name] = ((K, model.spec.lstm), torch.float32)
    return layout


@dataclass
class Handoff:
    """Rollouts from the actors to the learner: the pool's slots, and the tokens an actor
    takes before it collects one (a rollout collected or queued holds one). The learner
    returns a rollout's token when it takes the rollout, keeps it back while rollouts
    still wait behind it, and adds one while none are there: the lag stays near what
    keeps the learner busy, however many actors there are."""

    pool: BufferPool
    tokens: Any  # a multiprocessing Semaphore, started at one per actor
    actors: int

    @classmethod
    def open(cls, model: ActorCritic, cfg: A3CConfig, ctx: BaseContext | None = None) -> Handoff:
        ctx = ctx or mp.get_context()
        actors = cfg.workers - 1
        layout = rollout_layout(model, cfg.n_steps, cfg.envs_per_worker)
        pool = BufferPool(layout, producers=actors, slots=ROLLOUT_SLOTS, ctx=ctx)
        return cls(pool, ctx.Semaphore(actors), actors)

    def enter(self, ctx: WorkerContext) -> bool:
        """An actor's wait for a token; False if the run stopped first."""
        while not self.tokens.acquire(timeout=WAIT_S):
            if ctx.should_stop():
                return False
        return True

    def close(self) -> None:
        self.pool.close()


class Pace:
    """The learner's side of the tokens: how many are out (``limit``) and when to change it."""

    def __init__(self, handoff: Handoff) -> None:
        self.handoff, self.limit = handoff, handoff.actors

    def taken(self, was_waiting: bool) -> None:
        """A rollout was taken; ``was_waiting``: one was there before the learner asked.
        One rollout waiting keeps the learner busy; a second only ages."""
        tokens, pool = self.handoff.tokens, self.handoff.pool
        if pool.waiting() > 1 and self.limit > 1:  # the learner is the bound: one fewer
            self.limit -= 1
            return
        tokens.release()
        if not was_waiting and self.limit < self.handoff.actors:  # it waited: one more
            tokens.release()
            self.limit += 1


def hand_over(
    ctx: WorkerContext,
    producer: Producer,
    r: Rollout,
    targets: dict[str, Any],
    version: int,
    frames_turned: bool,
) -> bool:
    """Fill a free slot with the rollout and send it; False if the run stopped first."""
    while True:
        try:
            slot = producer.acquire(timeout=WAIT_S)
            break
        except PoolTimeout:
            if ctx.should_stop():
                return False
    try:
        buf = producer.view(slot)
        model_order(buf["obs"], frames_turned).copy_(r.obs)
        model_order(buf["next_obs"], frames_turned).copy_(r.next_obs)
        buf["actions"].copy_(r.actions)
        for name in (*STEPS, *TARGETS):
            value = targets[name] if name in TARGETS else getattr(r, name)
            buf[name].copy_(value)
        buf["version"].fill_(version)
        if r.state is not None:
            buf["h"].copy_(r.state[0])
            buf["c"].copy_(r.state[1])
    except BaseException:
        producer.give_back(slot)
        raise
    producer.submit(slot)
    return True


def slot_rollout(view: dict[str, Tensor], device: str, frames_turned: bool) -> Rollout:
    """A slot's rollout with its targets on ``device`` (on the CPU: views of the slot)."""
    buf = {k: v.to(device, non_blocking=True) for k, v in view.items()}
    obs = model_order(buf["obs"], frames_turned)
    next_obs = model_order(buf["next_obs"], frames_turned)
    return Rollout(
        obs=obs,
        actions=buf["actions"],
        **{name: buf[name] for name in (*STEPS, *TARGETS)},
        next_obs=next_obs,
        final_obs=next_obs[:0],
        state=(buf["h"], buf["c"]) if "h" in buf else None,
    )
