"""The supervised trainer: Hogwild! (or DDP) for any ``nn.Module`` and ``Dataset``.

Modules: ``api`` (:func:`fit`), ``config`` (every setting), ``task`` (model, data,
objective, metrics, and the first-batch check), ``data`` (shards and batches), ``steps``
(one step's passes), ``worker`` and ``trainer`` (the hogwild strategy), ``ddp`` and
``ddp_rank`` (the ddp strategy), ``optimizers``, ``report``, ``checkpoints``,
``callbacks``. The engine beneath: :mod:`hogwild.sharing`, :mod:`hogwild.sparse`,
:mod:`hogwild.run`.
"""
