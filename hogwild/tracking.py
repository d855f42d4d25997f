"""``--track``: the run in Weights & Biases too (CleanRL's habit), beside TensorBoard.

W&B's own TensorBoard sync carries every scalar the run logs, so nothing logs twice; the
W&B run is named after the run folder, takes ``config.json`` as its config, and keeps its
files in the run folder (``wandb/``), so one folder still holds the whole run. A resumed
run continues the same W&B run (its id is the folder's name). ``WANDB_MODE=offline``
records without the network; ``wandb sync`` uploads later.
"""

from __future__ import annotations

import re
import sys
import threading
from pathlib import Path
from typing import Any

from hogwild.errors import UsageError

DEFAULT_PROJECT = "hogwild-a3c"
#: How long the end of a run waits for W&B to finish (0.02-0.05 s offline here).
FINISH_TIMEOUT_S = 60.0


def require() -> None:
    """Refuse ``--track`` in one line when wandb is not installed (before any folder exists)."""
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise UsageError(
            '--track needs wandb: pip install "hogwild-a3c[wandb]" '
            '(or, from a checkout, pip install -e ".[wandb]")'
        ) from None


def start(config: dict[str, Any], run_dir: Path) -> Any:
    """A W&B run synced from this run's TensorBoard events; call before the SummaryWriter
    is made (W&B hooks TensorBoard's writer). Its failures are one-line UsageErrors."""
    import wandb
    from wandb.integration import tensorboard as wandb_tensorboard  # wandb.tensorboard

    # The run's one writer is W&B's root folder: with one folder and no root named, W&B's
    # service waited 10 s at the end of every run to infer one ("no root directory").
    if wandb.patched["tensorboard"]:
        wandb_tensorboard.unpatch()
    wandb_tensorboard.patch(root_logdir=str(run_dir), save=False)
    try:
        return wandb.init(
            project=config.get("wandb_project") or DEFAULT_PROJECT,
            entity=config.get("wandb_entity"),
            name=run_dir.name,
            id=re.sub(r"[^A-Za-z0-9_-]", "-", run_dir.name)[-64:],
            resume="allow",
            config=config,
            dir=str(run_dir),
            # Workers are forked from this process: no console-capturing threads in it.
            settings=wandb.Settings(console="off"),
        )
    except Exception as e:  # wandb raises many kinds (no API key, no network, bad entity)
        wandb_tensorboard.unpatch()
        text = " ".join(str(e).split()) or type(e).__name__
        raise UsageError(f"--track: Weights & Biases refused the run: {text}") from e


def finish(run: Any, timeout: float = FINISH_TIMEOUT_S) -> None:
    """Finish the W&B run and wait until its file is whole: ``run.finish()`` returns before
    W&B's service has flushed it (the file lacked its last records in 4 of 45 offline runs),
    and W&B's ``atexit`` wait is unreliable in a process that forked workers. The service
    is shut down only when no other W&B run is live in this process (a Python API user's).
    A W&B that fails or does not finish within ``timeout`` seconds is one warning line,
    not a traceback or a hang: the run's own files (events, checkpoints) are whole by now."""
    if run is None:
        return
    import wandb
    from wandb.integration import tensorboard as wandb_tensorboard  # wandb.tensorboard

    failure: list[str] = []

    def close() -> None:
        try:
            run.finish()
            wandb_tensorboard.unpatch()
            if wandb.run is None:
                wandb.teardown()
        except Exception as e:  # wandb raises many kinds; reported below, in one line
            failure.append(" ".join(str(e).split()) or type(e).__name__)

    closer = threading.Thread(target=close, name="wandb-finish", daemon=True)
    closer.start()
    closer.join(timeout)
    if closer.is_alive():
        failure.append(f"did not finish within {timeout:g} s")
    if failure:
        print(
            f"warning: --track: W&B {failure[0]}; its run file may lack its last records "
            "(TensorBoard's are whole)",
            file=sys.stderr,
        )
