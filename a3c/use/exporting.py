"""A policy's acting graph (:mod:`.graph`) written for another runtime, chosen by suffix.

- ``.onnx``: ONNX, for onnxruntime (or any ONNX runtime), without torch or this package.
  Made by ``torch.onnx.export``, whose default exporter goes through ``torch.export`` and
  onnxscript: the ``[onnx]`` extra.
- ``.pt2``: ``torch.export``, loaded with ``torch.export.load``; the torch format.
- ``.pt``: TorchScript, for loaders that only read it (LibTorch's ``torch::jit::load``).
  torch 2.13 deprecates TorchScript, so ``.pt`` stays only as long as torch keeps it.

Every file takes a batch of any size and carries ``policy.json`` (the env, the spaces, the
inputs' and outputs' names, shapes and dtypes): in an ONNX file's metadata, in a ``.pt2``
or ``.pt`` file's extra files.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from a3c.use.graph import ActingGraph
from hogwild.errors import UsageError
from hogwild.files import check_file_writable, os_reason, write_atomic

#: Formats by name, and the suffix that picks each.
SUFFIXES = {"onnx": ".onnx", "pt2": ".pt2", "torchscript": ".pt"}
ONNX_INSTALL = 'pip install "hogwild-a3c[onnx]" (or, from a checkout, pip install -e ".[onnx]")'
#: The example batch the graph is exported with: 2, as a batch of 1 would be taken as fixed.
_EXAMPLE_BATCH = 2


def export_format(path: str | Path, format: str | None = None) -> str:
    """The format ``format`` names, else the one ``path``'s suffix picks (one-line UsageError)."""
    if format is not None:
        if format not in SUFFIXES:
            raise UsageError(f"export format must be one of {', '.join(SUFFIXES)}, got {format!r}")
        return format
    by_suffix = {suffix: name for name, suffix in SUFFIXES.items()}
    suffix = Path(path).suffix.lower()
    if suffix not in by_suffix:
        raise UsageError(
            f"cannot tell the export format of {path}: name it .onnx (ONNX), .pt2 "
            "(torch.export) or .pt (TorchScript), or pass format="
        )
    return by_suffix[suffix]


def write_policy(graph: ActingGraph, path: str | Path, format: str, about: dict[str, Any]) -> Path:
    """Write ``graph`` to ``path`` as ``format``, ``about`` (and the signature) as policy.json."""
    if format == "onnx":
        missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
        if missing:
            raise UsageError(f"export to ONNX needs {' and '.join(missing)}: {ONNX_INSTALL}")
    path = Path(path)
    check_file_writable(path, "export file")
    meta = json.dumps({**about, **signature(graph)})
    writer = {"onnx": _onnx, "pt2": _pt2, "torchscript": _torchscript}[format]
    graph = graph.eval().requires_grad_(False)
    try:
        with _quiet(), torch.no_grad(), torch.random.fork_rng(devices=[]):  # tracing may draw
            data = writer(graph, meta)
    except UsageError:
        raise
    except Exception as e:  # the exporters raise many kinds; the first line says which
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise UsageError(f"export to {format} failed: {type(e).__name__}: {first}") from None
    try:
        return write_atomic(path, lambda f: f.write(data))
    except OSError as e:
        raise UsageError(f"cannot write {path}: {os_reason(e)}") from None


def signature(graph: ActingGraph) -> dict[str, Any]:
    """The inputs' and outputs' names, shapes (``"batch"`` first) and dtypes, for policy.json."""
    inputs = graph.example_inputs(_EXAMPLE_BATCH)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        outputs = graph(**inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    leaves = _tensors(inputs)
    return {
        "inputs": [_tensor_info(n, t) for n, t in zip(graph.input_names, leaves, strict=True)],
        "outputs": [_tensor_info(n, t) for n, t in zip(graph.output_names, outputs, strict=True)],
    }


def _tensors(x: Any) -> list[Tensor]:
    if isinstance(x, dict | tuple):
        return [t for v in (x.values() if isinstance(x, dict) else x) for t in _tensors(v)]
    return [x]


def _tensor_info(name: str, t: Tensor) -> dict[str, Any]:
    shape = ["batch", *t.shape[1:]]
    return {"name": name, "shape": shape, "dtype": str(t.dtype).removeprefix("torch.")}


def _onnx(graph: ActingGraph, meta: str) -> bytes:
    inputs = graph.example_inputs(_EXAMPLE_BATCH)
    batch = torch.export.Dim("batch")
    program = torch.onnx.export(
        graph,
        (),
        kwargs=inputs,  # keywords: a dict as the last positional is taken for keywords
        input_names=graph.input_names,
        output_names=graph.output_names,
        dynamic_shapes=graph.batch_dims(batch),
        dynamo=True,
        verbose=False,
    )
    assert program is not None  # dynamo=True always returns one
    program.model.metadata_props["policy.json"] = meta
    return program.model_proto.SerializeToString()


def _pt2(graph: ActingGraph, meta: str) -> bytes:
    inputs = graph.example_inputs(_EXAMPLE_BATCH)
    batch = torch.export.Dim("batch")
    args = tuple(inputs.values())  # positional, so that the loaded module takes (obs, h, c)
    shapes = tuple(graph.batch_dims(batch).values())
    program = torch.export.export(graph, args, dynamic_shapes=shapes)
    buffer = io.BytesIO()
    torch.export.save(program, buffer, extra_files={"policy.json": meta})
    return buffer.getvalue()


def _torchscript(graph: ActingGraph, meta: str) -> bytes:
    space = graph.observation_space
    parts = getattr(space, "spaces", {})
    if any(hasattr(s, "spaces") for s in (parts.values() if isinstance(parts, dict) else parts)):
        raise UsageError(
            f"TorchScript cannot take nested observations ({space}): export .onnx or .pt2"
        )
    args = tuple(graph.example_inputs(_EXAMPLE_BATCH).values())
    traced = torch.jit.trace(graph, args, check_trace=False, strict=False)
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer, _extra_files={"policy.json": meta})
    return buffer.getvalue()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporters' chatter off: deprecation notices, "torchvision is not installed" and
    the like, which say nothing about the policy."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)
