"""The run: its settings (:mod:`.config`, :mod:`.presets`, :mod:`.cli`), the main process's
parts (:mod:`.trainer` and what it is made of), the worker process (:mod:`.worker`), what it
reports (:mod:`.telemetry`) and the hooks into it (:mod:`.callbacks`)."""
