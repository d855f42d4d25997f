"""The algorithm registry (a3c.learning.algorithms) is the one place an algorithm is named:
one registered beside A3C and APPO is a flag value, a preset sub-table, a tuning space and
its own logged figures, with nothing else changed."""

from __future__ import annotations

import json
import math

import pytest
from proc_helpers import run_python
from tb_helpers import scalar_values

from a3c.learning.algorithms import ALGORITHMS
from a3c.run.config import A3CConfig
from hogwild.errors import UsageError

#: A third algorithm, registered before the run's modules are imported (as a real one
#: is, by its line in the registry): A3C's loss with one more figure and a count of its own.
TOY = """
import json
import sys
from dataclasses import dataclass

import torch
from torch import Tensor

from a3c.learning.algorithm import Algorithm, Choice
from a3c.learning.algorithms import ALGORITHMS
from a3c.learning.loss import A3CFigures, a3c_loss
from a3c.learning.metrics import SUM, Metric


@dataclass(frozen=True)
class ToyFigures(A3CFigures):
    toy_figure: Tensor


class ToySteps:
    rollouts_per_step = 1

    def __init__(self, learner):
        self.learner = learner

    def __call__(self, rollout, update, lr):
        loss, f = a3c_loss(self.learner.model, rollout, update)
        figures = ToyFigures(**{n: getattr(f, n) for n in f.names()}, toy_figure=torch.tensor(2.0))
        self.learner.stats.add("toy_count")
        return self.learner.step(loss, lr, figures.stacked().tolist())


ALGORITHMS["toy"] = Algorithm(
    name="toy", summary="a toy", figures=ToyFigures, steps=ToySteps, normalize_advantage=True,
    tuning_space={"n_steps": Choice((3, 4))},
    metrics=(Metric("toy_count", "charts/toy_count", SUM),),
)

from a3c.run.config import A3CConfig
from a3c.run.presets import config_for, load_presets
from a3c.run.worker import learner_settings
from a3c.train import main
from a3c.tune import space

logdir = sys.argv[1]
code = main([
    "--env", "CartPole-v1", "--algo", "toy", "--workers", "1", "--total-steps", "600",
    "--eval-interval", "0", "--logdir", logdir, "--run-name", "toy",
])
presets = load_presets('[X]\\nlr = 0.01\\n[X.toy]\\nn_steps = 3\\n')
settings = learner_settings(config_for("CartPole-v1", algo="toy"))
print(json.dumps({
    "exit_code": code,
    "help": A3CConfig.__dataclass_fields__["algo"].metadata["rule"].help,
    "normalize_advantage": settings.update.normalize_advantage,
    "n_steps": list(space("toy")["n_steps"].values),
    "lr_in_space": "lr" in space("toy"),
    "preset": presets["X"],
}))
"""


def test_a_registered_algorithm_runs_logs_tunes_and_presets_with_nothing_else_changed(tmp_path):
    (tmp_path / "toy.py").write_text(TOY)
    # A fresh interpreter: the registration must come before the run's modules are imported.
    proc = run_python(["toy.py", str(tmp_path / "runs")], cwd=tmp_path, timeout=300, warm=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["exit_code"] == 0
    assert got["help"].endswith("; toy: a toy")
    assert got["normalize_advantage"] is True  # its own default, unset on the command line
    assert got["n_steps"] == [3, 4] and got["lr_in_space"]
    assert got["preset"] == {"lr": 0.01, "toy": {"n_steps": 3}}
    (run_dir,) = (tmp_path / "runs").glob("*toy*")
    logged = scalar_values(run_dir)
    assert logged["losses/toy_figure"] and set(logged["losses/toy_figure"]) == {2.0}
    assert math.fsum(logged["charts/toy_count"]) > 0
    assert "losses/policy_loss" in logged and "charts/skipped_updates" in logged
    assert "losses/approx_kl" not in logged and "charts/kl_stops" not in logged  # APPO's


def test_the_flag_takes_the_registered_algorithms_alone():
    assert tuple(ALGORITHMS) == ("a3c", "appo", "ppo")
    for name in ALGORITHMS:
        assert A3CConfig(algo=name, workers=2).algo == name
    with pytest.raises(UsageError, match="algo"):
        A3CConfig(algo="impala")
