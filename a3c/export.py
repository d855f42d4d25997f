"""A saved policy for another runtime: ``python -m a3c.export runs/<run>/best.pt policy.onnx``.

The suffix picks the format (``.onnx``: onnxruntime, without torch; ``.pt2``:
``torch.export.load``; ``.pt``: TorchScript), as :meth:`a3c.use.agent.Policy.export` does.
"""

from __future__ import annotations

import argparse
import sys

from a3c.use.agent import Policy
from a3c.use.exporting import SUFFIXES, export_format
from hogwild.cli import run_cli

_NAMES = {"onnx": "ONNX", "pt2": "torch.export", "torchscript": "TorchScript"}


def _main(args: argparse.Namespace) -> int:
    fmt = export_format(args.output, args.format)  # before the checkpoint: a typo costs nothing
    policy = Policy.load(args.checkpoint, args.env)
    path = policy.export(args.output, fmt, deterministic=not args.stochastic, group=args.group)
    signature = policy.export_signature(deterministic=not args.stochastic, group=args.group)
    inputs = ", ".join(_describe(t) for t in signature["inputs"])
    outputs = ", ".join(_describe(t) for t in signature["outputs"])
    mode = "stochastic" if args.stochastic else "greedy"
    print(f"{path}: {_NAMES[fmt]}, {mode}, {policy.env_id}: {inputs} -> {outputs}")
    if fmt == "torchscript":
        print("note: torch 2.13 deprecates TorchScript; .pt2 (torch.export) is the torch format")
    return 0


def _describe(tensor: dict) -> str:
    shape = ", ".join(str(d) for d in tensor["shape"])
    return f"{tensor['name']} {tensor['dtype']}[{shape}]"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="a3c.export",
        description="Write a saved A3C policy as ONNX (onnxruntime, no torch needed), "
        "torch.export or TorchScript: a batch of the env's observations in, actions out.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("checkpoint", help="a checkpoint written by a3c.train (best.pt, checkpoint.pt)")
    p.add_argument("output", help="the file to write: .onnx, .pt2 or .pt")
    p.add_argument(
        "--format",
        choices=sorted(SUFFIXES),
        default=None,
        help="the format, instead of the one the suffix picks",
    )
    p.add_argument(
        "--stochastic",
        action="store_true",
        help="draw actions, and also output the distribution's parameters "
        "(logits, or mean and log_std)",
    )
    p.add_argument("--env", default=None, help="override the checkpoint's environment id")
    p.add_argument(
        "--group",
        default=None,
        metavar="NAME",
        help="PettingZoo envs trained with --agent-groups prefix: the group whose policy to write",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(build_parser(), _main, argv)


if __name__ == "__main__":
    sys.exit(main())
