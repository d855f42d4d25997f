"""Groups of agents with policies of their own, one model to the engine:
:class:`GroupedActorCritic`, which lives beside the :class:`ActorCritic` it builds on and
the :class:`ModelSpec` that builds it, in :mod:`a3c.policy.actor_critic`."""

from a3c.policy.actor_critic import GroupedActorCritic

__all__ = ["GroupedActorCritic"]
