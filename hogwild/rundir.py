"""One folder per run under ``runs/``: TensorBoard events, the config, checkpoints.

Folder names start with the date and time, so ``ls runs`` sorts them by age, and carry
the application and its main setting, so they are recognisable in TensorBoard's list.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter


def config_dict(config: Any) -> dict[str, Any]:
    """A JSON-able dict from a dataclass config (paths and tuples become strings/lists)."""
    d = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
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
        if resume_dir is not None:
            self.path = Path(resume_dir)
        else:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name or name).strip("-")
            self.path = _unique(Path(logdir) / f"{stamp}_{slug}")
        self.path.mkdir(parents=True, exist_ok=True)
        self.config = config_dict(config)
        (self.path / "config.json").write_text(json.dumps(self.config, indent=2) + "\n")
        self.writer = SummaryWriter(str(self.path))
        table = "\n".join(f"| {k} | `{v}` |" for k, v in self.config.items())
        self.writer.add_text("config", "| key | value |\n|---|---|\n" + table, 0)

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, value, step)

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def close(self, final_metrics: dict[str, float] | None = None) -> None:
        """Write the hparams summary (config against final metrics) and close the writer."""
        if final_metrics:
            hparams = {
                k: v for k, v in self.config.items() if isinstance(v, (int, float, str, bool))
            }
            self.writer.add_hparams(
                hparams, {f"hparam/{k}": v for k, v in final_metrics.items()}, run_name="."
            )
        self.writer.close()


def _unique(path: Path) -> Path:
    candidate, i = path, 1
    while candidate.exists():
        i += 1
        candidate = path.with_name(f"{path.name}-{i}")
    return candidate


class Progress:
    """A one-line console status, redrawn in place on a terminal and silent elsewhere."""

    def __init__(self, interval: float = 0.5, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.interval = interval
        self._last = 0.0
        self._shown = False

    def update(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last < self.interval):
            return
        self._last = now
        self.stream.write("\r\033[K" + text)
        self.stream.flush()
        self._shown = True

    def print(self, text: str) -> None:
        """A permanent line (always shown, terminal or not)."""
        if self._shown:
            self.stream.write("\r\033[K")
            self._shown = False
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
