"""Using a result: loading a saved policy and its score (:mod:`.saved`), acting with it from
Python (:mod:`.agent`) and exporting it (:mod:`.graph`, :mod:`.exporting`). The episodes
themselves are played by :mod:`a3c.scoring`, which the run's evaluator shares."""
