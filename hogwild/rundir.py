"""One folder per run under ``runs/``: TensorBoard events, the config, checkpoints.

Folder names start with the date and time, so ``ls runs`` sorts them by age, and carry
the application and its main setting, so they are recognisable in TensorBoard's list.
A folder that cannot be created or written is a one-line :class:`UsageError`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from hogwild import tracking
from hogwild.errors import UsageError
from hogwild.files import make_dirs, os_reason, remove_created, write_atomic


def config_dict(config: Any) -> dict[str, Any]:
    """A JSON-able dict from a dataclass config (paths and tuples become strings/lists)."""
    is_instance = dataclasses.is_dataclass(config) and not isinstance(config, type)
    d = dataclasses.asdict(config) if is_instance else dict(config)
    return json.loads(json.dumps(d, default=str))


class RunDir:
    """The run's folder and its one ``SummaryWriter``; only the main process writes here."""

    def __init__(
        self,
        logdir: str | Path,
        name: str,
        config: Any,
        run_name: str | None = None,
        resume_dir: str | Path | None = None,
    ) -> None:
        """Create the folder, ``config.json`` and the writer, or raise a one-line UsageError.

        This runs before any worker starts; if any part fails, the folders it created are
        removed again, so a refused run leaves nothing half-written behind.
        """
        self.config = config_dict(config)
        self._failed = False
        self.tracked = None  # the W&B run under --track
        if self.config.get("track"):
            tracking.require()
        created: list[Path] = []
        if resume_dir is not None:
            self.path = Path(resume_dir)
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name or name).strip("-")
            self.path = _unique(Path(logdir) / f"{stamp}_{slug}")
            created = make_dirs(self.path, "run folder")
        text = json.dumps(self.config, indent=2) + "\n"
        try:
            write_atomic(self.path / "config.json", lambda f: f.write(text.encode()))
            if self.config.get("track"):
                self.tracked = tracking.start(self.config, self.path)
            self.writer = SummaryWriter(str(self.path))
            table = "\n".join(f"| {k} | `{v}` |" for k, v in self.config.items())
            self.writer.add_text("config", "| key | value |\n|---|---|\n" + table, 0)
        except UsageError:
            remove_created(created)
            raise
        except OSError as e:
            remove_created(created)
            reason = os_reason(e)
            raise UsageError(f"cannot write in the run folder {self.path}: {reason}") from None

    def scalar(self, tag: str, value: float, step: int) -> None:
        self._write(lambda: self.writer.add_scalar(tag, value, step))

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self.scalar(tag, value, step)

    def flush(self) -> None:
        """Get what was logged onto disk now (TensorBoard shows it without waiting)."""
        self._write(self.writer.flush)

    def close(self, final_metrics: dict[str, float] | None = None) -> None:
        """Write the hparams summary (config against final metrics) and close the writer."""
        if final_metrics:
            self._write(lambda: self._write_hparams(final_metrics))
        self._write(self.writer.close, closing=True)
        tracking.finish(self.tracked)
        self.tracked = None

    def _write_hparams(self, final_metrics: dict[str, float]) -> None:
        """Into the run's own event file, as PyTorch Lightning does, not the second file
        that ``add_hparams`` opens at the very end: with it, ``--track``'s W&B sync lacked
        the hparam/ scalars in 3 of 4 runs of its test on a loaded machine."""
        config = {k: v for k, v in self.config.items() if isinstance(v, (int, float, str, bool))}
        metrics = {f"hparam/{k}": v for k, v in final_metrics.items()}
        events = self.writer._get_file_writer()
        for summary in hparams(config, metrics):
            events.add_summary(summary)
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value)

    def _write(self, write: Callable[[], object], closing: bool = False) -> None:
        """Run one writer call; the first that fails (folder removed, disk full) is one
        warning line and TensorBoard logging stops there, while the run goes on."""
        if self._failed and not closing:
            return
        try:
            write()
        except OSError as e:
            if not self._failed:
                self._failed = True
                print(
                    f"warning: TensorBoard events in {self.path} not written from here on "
                    f"({os_reason(e)}); the run goes on",
                    file=sys.stderr,
                    flush=True,
                )


def _quiet_writer_thread(args: threading.ExceptHookArgs) -> None:
    """TensorBoard's writer thread re-raises a failed write, which would print a traceback;
    the same error reaches the main process's next write, where ``RunDir._write`` says it
    in one line. Everything else goes to the hook that was there before."""
    if isinstance(args.exc_value, OSError) and type(args.thread).__module__.startswith(
        "tensorboard."
    ):
        return
    _previous_hook(args)


_previous_hook = threading.excepthook
threading.excepthook = _quiet_writer_thread


def _unique(path: Path) -> Path:
    candidate, i = path, 1
    while candidate.exists():
        i += 1
        candidate = path.with_name(f"{path.name}-{i}")
    return candidate
