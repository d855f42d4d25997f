"""The ``a3c.train`` command line: every A3CConfig field as a flag, with its default."""

from __future__ import annotations

import argparse
import dataclasses

from a3c.config import A3CConfig
from hogwild.cli import nonnegative_int, positive_float, positive_int, unit_float
from hogwild.errors import UsageError
from hogwild.optim import OPTIMIZERS


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 128,128, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    d = A3CConfig()
    p = argparse.ArgumentParser(
        prog="a3c.train",
        description="Train an actor-critic on a Gymnasium environment with "
        "A3C: N worker processes update one shared model lock-free.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("run")
    g.add_argument("--env", default=d.env, help="Gymnasium id, or module:Env-vN to import module")
    g.add_argument("--workers", type=positive_int, default=d.workers, help="worker processes")
    g.add_argument(
        "--envs-per-worker",
        type=positive_int,
        default=d.envs_per_worker,
        help="environments each worker steps with one batched forward pass",
    )
    g.add_argument(
        "--total-steps",
        type=positive_int,
        default=d.total_steps,
        help="stop after this many env steps (all workers together)",
    )
    g.add_argument("--time-limit", type=positive_float, default=None, help="stop after seconds")
    g.add_argument(
        "--target-return",
        type=float,
        default=None,
        help="stop when --target-metric reaches it "
        "(default: the env's reward_threshold, e.g. 475 for CartPole-v1)",
    )
    g.add_argument(
        "--target-metric",
        choices=("train", "eval"),
        default=d.target_metric,
        help="train: mean return of the last 100 training episodes (the standard 'solved'); "
        "eval: the evaluator's mean greedy return",
    )
    g.add_argument("--seed", type=int, default=d.seed)
    g = p.add_argument_group("algorithm")
    g.add_argument("--n-steps", type=positive_int, default=d.n_steps, help="rollout length")
    g.add_argument("--gamma", type=unit_float, default=d.gamma, help="discount")
    g.add_argument(
        "--gae-lambda",
        type=unit_float,
        default=d.gae_lambda,
        help="GAE lambda (1 = n-step returns)",
    )
    g.add_argument(
        "--optimizer",
        choices=sorted(OPTIMIZERS),
        default=d.optimizer,
        help="shared optimizer (state in shared memory)",
    )
    g.add_argument("--lr", type=positive_float, default=d.lr, help="learning rate")
    g.add_argument(
        "--lr-schedule",
        choices=("constant", "linear"),
        default=d.lr_schedule,
        help="linear: decay to 0 at --total-steps",
    )
    g.add_argument("--entropy-coef", type=float, default=d.entropy_coef)
    g.add_argument("--value-coef", type=float, default=d.value_coef)
    g.add_argument("--max-grad-norm", type=positive_float, default=d.max_grad_norm)
    g.add_argument("--hidden", type=_hidden, default=d.hidden, help="MLP sizes, e.g. 128,128")
    g.add_argument("--activation", choices=("tanh", "relu"), default=d.activation)
    g.add_argument(
        "--normalize-obs",
        action="store_true",
        help="normalise observations by running mean and std (shared by all workers); "
        "helps envs with large or unscaled observations, e.g. Acrobot-v1",
    )
    g.add_argument(
        "--normalize-reward",
        action=argparse.BooleanOptionalAction,
        default=d.normalize_reward,
        help="scale rewards by the running std of the discounted return (VecNormalize)",
    )
    g.add_argument(
        "--normalize-advantage",
        action=argparse.BooleanOptionalAction,
        default=d.normalize_advantage,
    )
    g.add_argument("--value-loss", choices=("mse", "huber"), default=d.value_loss)
    g.add_argument(
        "--separate-networks",
        action=argparse.BooleanOptionalAction,
        default=d.separate_networks,
        help="policy and value nets with their own layers (else one shared trunk)",
    )
    g = p.add_argument_group("engine")
    g.add_argument("--threads-per-worker", type=positive_int, default=d.threads_per_worker)
    g.add_argument(
        "--start-method",
        choices=("fork", "spawn"),
        default=d.start_method,
        help="how workers are started",
    )
    g.add_argument("--on-worker-failure", choices=("restart", "abort"), default=d.on_worker_failure)
    g.add_argument("--max-restarts", type=nonnegative_int, default=d.max_restarts)
    g.add_argument(
        "--max-nonfinite",
        type=positive_int,
        default=d.max_nonfinite,
        help="a worker fails after this many non-finite updates in a row",
    )
    g = p.add_argument_group("evaluation and logging")
    g.add_argument(
        "--eval-interval",
        type=float,
        default=d.eval_interval,
        help="seconds between evaluations (0: no evaluator)",
    )
    g.add_argument("--eval-episodes", type=positive_int, default=d.eval_episodes)
    g.add_argument("--eval-device", choices=("auto", "cpu", "cuda"), default=d.eval_device)
    g.add_argument(
        "--checkpoint-interval",
        type=positive_float,
        default=d.checkpoint_interval,
        help="seconds between periodic checkpoints",
    )
    g.add_argument(
        "--log-interval",
        type=positive_float,
        default=d.log_interval,
        help="seconds between TensorBoard points",
    )
    g.add_argument("--logdir", default=d.logdir, help="parent folder of run folders")
    g.add_argument("--run-name", default=None, help="run folder suffix (default: a3c_ENV_sSEED)")
    g.add_argument(
        "--resume", default=None, metavar="CHECKPOINT", help="continue a run from its checkpoint.pt"
    )
    g = p.add_argument_group("several machines (under torchrun; see the README, Scaling out)")
    g.add_argument(
        "--sync-every",
        type=positive_float,
        default=d.sync_every,
        help="seconds between parameter averages across nodes",
    )
    g.add_argument(
        "--dist-timeout",
        type=positive_float,
        default=d.dist_timeout,
        help="seconds before a silent node counts as dead",
    )
    return p


def config_from_args(args: argparse.Namespace) -> A3CConfig:
    if args.eval_interval < 0:
        raise UsageError("--eval-interval must be 0 (off) or positive")
    return A3CConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(A3CConfig)})
