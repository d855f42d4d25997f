"""Learning: what a worker does with its envs and the shared model.

:mod:`.collect` steps the envs into a :mod:`.rollout`, :mod:`.returns` turns it into
advantages and targets, :mod:`.loss` (A3C) and :mod:`.ppo` (asynchronous PPO) are the
update rules, :mod:`.normalize` the shared running statistics, and :mod:`.worker` the loop
around them.
"""
