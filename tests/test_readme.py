"""Every command and Python example in the README runs, as typed, with a tiny budget.

Each ``python ...`` line of a ```bash block is run in a child process from a scratch
folder (so ``runs/`` is the README's ``runs/``), with flags appended that shrink it
(argparse takes the last value of a flag): a few thousand steps, an episode or two, one
short MNIST epoch. ``runs/<run>`` is a real run made first. A command this file does not
know how to shrink fails the test: add a rule for it here when the README gains one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from proc_helpers import run_python

from hogwild.checkpoint import load_checkpoint

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
#: Seconds a shrunk command may take (the limit every command here had before).
TIMEOUT = 180
#: Lines run elsewhere: the install-and-test command is CI itself; the rest are not ours.
NOT_HERE = ("pip ", "tensorboard ", "ruff ", "mypy", "torchrun ", "python -m pytest")
SMALL = ["--total-steps", "3000", "--eval-interval", "0", "--time-limit", "60"]


def bash_commands() -> list[str]:
    """The README's shell commands: ``python ...`` lines, comments and installs cut off."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            line = line.split(" && ")[-1]  # "pip install ... && python -m ..."
            if line and not line.startswith(NOT_HERE):
                commands.append(line)
    return commands


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, str]:
    """A folder holding ``runs/<run>`` (with ``best.pt``) and ``my.toml``; the run's name."""
    cwd = tmp_path_factory.mktemp("readme")
    (cwd / "my.toml").write_text('env = "Acrobot-v1"\nhidden = [32, 32]\n')
    (cwd / "best.toml").write_text('env = "CartPole-v1"\n')  # a3c.tune's, where it runs
    # Stops at its first evaluation (any CartPole return is >= 0), so best.pt exists.
    proc = run_python(
        ["-m", "a3c.train", "--workers", "1", "--eval-interval", "0.2", "--eval-episodes", "1",
         "--eval-device", "cpu", "--target-metric", "eval", "--target-return", "0",
         "--time-limit", "60"],
        cwd, TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (cwd / "runs").iterdir()
    assert (run_dir / "best.pt").exists()
    return cwd, run_dir.name


def shrunk(command: str, cwd: Path, run_name: str, request) -> tuple[list[str], dict[str, str]]:
    """``command``'s argv with the flags that make it small, and its environment."""
    argv = shlex.split(command.replace("<run>", run_name))
    assert argv[0] == "python", command
    argv, env = argv[1:], {}
    program = argv[1] if argv[0] == "-m" else argv[0]
    if program == "a3c.train" and "--help" in argv:
        pass
    elif program == "a3c.train" and "--resume" in argv:
        saved = load_checkpoint(cwd / argv[argv.index("--resume") + 1])
        argv += ["--total-steps", str(saved["env_steps"] + 1000), "--eval-interval", "0"]
    elif program == "a3c.train":
        argv += SMALL
    elif program == "a3c.evaluate":
        if "--record" in argv:
            pytest.importorskip("moviepy", reason="--record needs the video extra")
        argv += ["--episodes", "1"]
    elif program == "a3c.tune":
        pytest.importorskip("optuna", reason='a3c.tune needs the tune extra (".[tune]")')
        argv += ["--trials", "2", "--budget", "2", "--workers", "1", "--logdir", "study"]
    elif program == "a3c.export":
        for module in ("onnxscript", "onnxruntime"):
            pytest.importorskip(module, reason='an .onnx export needs the onnx extra (".[onnx]")')
    elif program == "a3c.plot":
        pytest.importorskip("matplotlib", reason="a3c.plot needs the plot extra")
    elif program == "hogwild.train":  # the tests' own module stands for the user's
        refs = {"mypkg.models:make_model": "user_models:make_mlp",
                "mypkg.data:make_data": "user_models:make_table_data"}  # fmt: skip
        argv = [refs.get(a, a) for a in argv] + ["--epochs", "1", "--workers", "2"]
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO)])
    elif program == "hogwild.mnist":
        env["HOGWILD_DATA"] = str(request.getfixturevalue("mnist_dir"))
        argv += ["--epochs", "1", "--max-batches-per-epoch", "20", "--no-download"]
    elif program in ("benchmarks/suite.py", "benchmarks/sb3_suite.py"):
        if program.endswith("sb3_suite.py"):
            pytest.importorskip("stable_baselines3", reason="a benchmark-only dependency")
        argv[0] = str(REPO / program)
        argv += ["--envs", "CartPole-v1", "--seeds", "1", "--budget", "2"]
    else:
        pytest.fail(f"the README runs {command!r}: teach tests/test_readme.py to shrink it")
    return argv, env


@pytest.mark.parametrize("command", bash_commands())
def test_readme_command_runs(command, workspace, request):
    cwd, run_name = workspace
    argv, env = shrunk(command, cwd, run_name, request)
    proc = run_python(argv, cwd, TIMEOUT, **env)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    if "a3c.evaluate" in argv:
        assert "greedy return" in proc.stdout, proc.stdout
    if "--help" in argv:
        assert "--workers" in proc.stdout
    if "a3c.export" in argv:
        run_onnx_example(cwd, argv[-1])


def test_readme_has_the_commands_a_user_needs():
    commands = " ".join(bash_commands())
    # a3c.export's test also runs the README's onnxruntime example on what it wrote.
    needed = ("a3c.train", "a3c.evaluate", "--record", "a3c.plot", "--resume", "--config")
    for command in (*needed, "a3c.export"):
        assert command in commands, command
    assert len(README.splitlines()) <= 200, "the README is for users: keep it short"


# --------------------------------------------------------------- the Python examples


def script(code: str, call: str, settings: str, folder: Path) -> Path:
    """The README's example as a file, with ``settings`` added to ``call`` to keep it short."""
    assert code.count(call) == 1, f"README example no longer contains {call!r}"
    assert 'if __name__ == "__main__":' in code
    path = folder / "example.py"
    path.write_text(code.replace(call, call[:-1] + ", " + settings + ")"))
    return path


def example(first_import: str) -> str:
    found = [code for code in python_blocks() if code.startswith(first_import)]
    assert len(found) == 1, f"one README example starting with {first_import!r}"
    return found[0]


def test_readme_a3c_example_runs_as_a_script(tmp_path):
    """Under spawn, which re-imports the script in each worker (the README says why its
    guard is needed); fork, the default, is what every other run of the suite uses."""
    start_method = "spawn"
    path = script(
        example("from a3c.api import config_for"),
        'config_for("Acrobot-v1", workers=2)',
        f'total_steps=20_000, eval_interval=0, start_method="{start_method}"',
        tmp_path,
    )
    proc = run_python([str(path)], tmp_path, TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = re.search(
        r"^exit 0: (\d+) env steps in ([\d.]+) s, mean return (\S+), solved at (.+)$",
        proc.stdout,
        re.M,
    )
    assert result is not None, proc.stdout
    steps, wall, mean, solved = result.groups()
    assert int(steps) >= 20_000 or solved != "None"
    # Acrobot pays -1 a step for up to 500 steps: a random policy scores about -500, the
    # preset solves it (-100) in 11-17k steps. -300 shows learning with room to spare.
    assert float(wall) > 0 and -300 < float(mean) <= 0
    returns = re.search(r"^greedy returns: \[(.*)\]$", proc.stdout, re.M)
    assert returns is not None, proc.stdout
    values = [float(v) for v in returns.group(1).split(",")]
    assert len(values) == 5 and all(-500 <= v <= 0 for v in values)
    # Greedy play of a solved policy scores about -90, but one episode in dozens gets
    # stuck (-500): the median must show learning, not each episode.
    assert sorted(values)[2] > -300, values
    (run_dir,) = (tmp_path / "runs").iterdir()  # the default logdir, relative to the cwd
    config = json.loads((run_dir / "config.json").read_text())
    assert config["start_method"] == start_method and config["preset"] == "Acrobot-v1"
    assert config["workers"] == 2 and config["total_steps"] == 20_000


def test_readme_policy_example_runs(workspace):
    cwd, run_name = workspace
    code = example("from a3c.api import Policy").replace("runs/<run>", f"runs/{run_name}")
    (cwd / "use_policy.py").write_text(code)
    proc = run_python(["use_policy.py"], cwd, TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert (cwd / "policy.pt2").stat().st_size > 0


def run_onnx_example(cwd: Path, onnx_file: str) -> None:
    """The README's onnxruntime lines on what its ``a3c.export`` command wrote, in a Python
    that imports neither torch nor this package."""
    code = example("import numpy as np")
    assert f'InferenceSession("{onnx_file}")' in code, "the example reads another file"
    check = (
        '\nimport sys\nassert not {"torch", "a3c"} & set(sys.modules)\n'
        "print(actions.shape, actions.dtype)\n"
    )
    (cwd / "use_onnx.py").write_text(code + check)
    proc = run_python(["use_onnx.py"], cwd, TIMEOUT, warm=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(8,) int64"


def test_readme_fit_example_runs_as_a_script(tmp_path):
    path = script(example("import torch"), 'metrics=["accuracy"], workers=2)', "epochs=3", tmp_path)
    proc = run_python([str(path)], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"^exit 0: accuracy ([\d.]+)%, (.+)$", proc.stdout, re.M)
    assert found is not None, proc.stdout
    assert float(found.group(1)) > 80.0  # chance: about a third
    best = load_checkpoint(tmp_path / found.group(2))
    assert best["format"] == "hogwild-fit" and best["epoch"] >= 1
