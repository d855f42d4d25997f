"""A3C (Mnih et al. 2016), asynchronous and decoupled PPO on Gymnasium environments, built on the
``hogwild`` engine.

- Commands: ``python -m a3c.train``, ``a3c.evaluate``, ``a3c.plot``, ``a3c.tune``.
- Python: :mod:`a3c.api` (``from a3c.api import config_for, train, evaluate, Policy``).
- Rooms: :mod:`a3c.envs` (environments), :mod:`a3c.policy` (the network),
  :mod:`a3c.learning` (what a worker does), :mod:`a3c.run` (settings and the main
  process), :mod:`a3c.use` (using a saved policy); :mod:`a3c.scoring`, greedy play that
  training's evaluator and ``a3c.evaluate`` share; :mod:`a3c.actions`, the action spec
  that the envs give the policy and checkpoints keep.

``import a3c`` imports nothing else (no torch, no gymnasium).
"""
