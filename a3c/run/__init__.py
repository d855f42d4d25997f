"""The run: its settings (:mod:`.config`, :mod:`.presets`, :mod:`.cli`), the main process's
parts (:mod:`.trainer` and what it is made of), the worker process (:mod:`.worker`), what it
reports (:mod:`.telemetry`, :mod:`.logger`), its warnings of a run that stopped learning
(:mod:`.health`) and the hooks into it (:mod:`.callbacks`)."""
