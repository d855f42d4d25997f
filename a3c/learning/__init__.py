"""Learning: what a worker does with its envs and the shared model, told by its own settings.

:mod:`.collect` steps the envs into a :mod:`.rollout` (its rewards scaled by the shared
return statistics of :mod:`.normalize`), :mod:`.returns` turns it into advantages and
targets, :mod:`.loss` (A3C) and :mod:`.ppo` (asynchronous PPO) are the update rules, each
reporting its :mod:`.figures` by name and declaring its :mod:`.algorithm` in the one list
of them, :mod:`.algorithms`, and :mod:`.learner` steps the shared optimizer with them,
summing its :mod:`.metrics`, its :mod:`.settings` moved along :mod:`.schedules`. The
worker process around them is :mod:`a3c.run.worker`; nothing here imports :mod:`a3c.run`.
"""
