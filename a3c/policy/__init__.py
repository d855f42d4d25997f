"""The policy: an actor-critic assembled from parts chosen by the env's spaces.

:mod:`.actor_critic` holds the network and its :class:`ModelSpec`; :mod:`.distributions`
one action distribution per action space (categorical, independent categoricals,
Bernoulli, diagonal Gaussian).
"""

from a3c.policy.actor_critic import ACTIVATIONS, OBS_CLIP, ActorCritic, ModelSpec
from a3c.policy.distributions import log_prob_entropy, sample_actions

__all__ = [
    "ACTIVATIONS",
    "OBS_CLIP",
    "ActorCritic",
    "ModelSpec",
    "log_prob_entropy",
    "sample_actions",
]
