"""The sparse tables' optimizer and rate, side by side: what ``--table-optimizer`` and
``--table-lr`` default to and why.

The recommender (ratings of a rank-8 model plus noise of variance 0.01) and the bag of
words of ``tests/user_models.py``, 2 Hogwild! workers, 3 epochs, everything but the tables'
rule and rate at ``fit``'s defaults; the median over seeds of the last val MSE / accuracy.

    python benchmarks/table_rules.py --problem recommender
    python benchmarks/table_rules.py --problem bow
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import user_models as um  # noqa: E402

from hogwild import fit  # noqa: E402

RULES = ["adagrad:0.05", "adagrad:0.1", "adagrad:0.2", "adagrad:0.5", "adam:0.01",
         "adam:0.05", "sgd:1.0", "sgd:5.0"]  # fmt: skip


def score(problem: str, rule: str, rate: float, seed: int) -> float:
    tables = dict(table_optimizer=rule, table_lr=rate, workers=2, epochs=3, seed=seed)
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
        if problem == "recommender":
            train, val = um.make_ratings()
            r = fit(um.Recommender(), train, step=um.rating_step, val_data=val, logdir=d, **tables)
            return r.history[-1]["val_loss"]
        train, val = um.make_docs()
        r = fit(um.Bag(), train, val_data=val, metrics=["accuracy"], logdir=d, **tables)
        return r.history[-1]["val_accuracy"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problem", choices=("recommender", "bow"), default="recommender")
    p.add_argument("--rules", nargs="+", default=RULES, metavar="RULE:LR")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = p.parse_args()
    for entry in args.rules:
        rule, rate = entry.split(":")
        scores = [score(args.problem, rule, float(rate), s) for s in args.seeds]
        print(f"{args.problem} {rule} {rate}: median {statistics.median(scores):.4g} "
              f"{[round(s, 4) for s in scores]}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
