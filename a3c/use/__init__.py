"""Using a result: scoring a policy (:mod:`.evaluation`), loading a saved one
(:mod:`.saved`) and acting with it from Python (:mod:`.agent`)."""
