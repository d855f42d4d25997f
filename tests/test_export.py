"""Exported policies act as ``Policy.predict`` does: ONNX in onnxruntime (without torch or
this package), ``torch.export`` (``.pt2``) and TorchScript (``.pt``); ``python -m a3c.export``.

Policies are untrained, with decisive heads (large logits), so that equal actions test the
whole graph rather than ties between near-uniform logits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from policy_helpers import register_space_env

from a3c.api import Policy
from a3c.envs import env_spaces
from a3c.export import main as export_main
from a3c.policy import ModelSpec
from hogwild.errors import UsageError

SUFFIX = {"onnx": ".onnx", "pt2": ".pt2", "torchscript": ".pt"}
ONNX_EXTRA = 'needs the onnx extra: pip install -e ".[onnx]"'
# torch 2.13 calls TorchScript deprecated; a .pt file is still loaded with it.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")

#: name -> (env id, ModelSpec keywords)
POLICIES = {
    "cartpole": ("CartPole-v1", {}),
    "pendulum": ("Pendulum-v1", {"normalize_obs": True}),
    "minatar": ("MinAtar/Breakout-v1", {}),
    "minatar_centred": ("MinAtar/Breakout-v1", {"center_frames": "background"}),
    "lstm": ("CartPole-v1", {"lstm": 16}),
    "pendulum_lstm": ("Pendulum-v1", {"lstm": 16, "normalize_obs": True}),
    "copybits": ("policy_helpers:CopyBits-v0", {}),  # Dict observations, MultiBinary actions
}

# One-step envs with awkward spaces: every adapter between env and model has to come out
# the same from predict and from the exported file.
ODD_SPACES = {
    "Float64Grid_MultiDiscreteStart-v0": (
        spaces.Box(-5.0, 5.0, (2, 3), np.float64),
        spaces.MultiDiscrete([[2, 3], [4, 5]], start=[[1, 1], [0, -2]]),
        {"normalize_obs": True},
    ),
    "IntBox_SquashedMatrix-v0": (
        spaces.Box(0, 9, (5,), np.int32),
        spaces.Box(-1.0, 2.0, (2, 2), np.float64),
        {"squash": True},
    ),
    "DiscreteStart_LSTM-v0": (
        spaces.Discrete(5, start=3),
        spaces.Discrete(3, start=-1),
        {"lstm": 8},
    ),
    "BoolImage_MultiBinary-v0": (
        spaces.Box(0, 1, (10, 10), np.bool_),
        spaces.MultiBinary([2, 2]),
        {},
    ),
    "NestedDictTuple_Discrete-v0": (
        spaces.Dict(
            {
                "pos": spaces.Box(-1.0, 1.0, (2,), np.float64),
                "grid": spaces.MultiDiscrete([3, 4], start=[0, 2]),
                "inner": spaces.Tuple((spaces.Discrete(4, start=1), spaces.MultiBinary(3))),
            }
        ),
        spaces.Discrete(3),
        {},
    ),
}
for _id, (_obs, _act, _) in ODD_SPACES.items():
    register_space_env(_id, _obs, _act)


@pytest.fixture(scope="module", autouse=True)
def torchlib_built_once():
    """The ONNX exporter rebuilds its table of op translations on every call (~3-4 s here,
    parsing ~500 functions' source); the table depends only on the packages installed, so
    this file's ~20 exports share the first one's."""
    try:  # a private API: where it moved, every export builds its own table
        from torch.onnx._internal.exporter import _registration as registration

        build = registration.ONNXRegistry.from_torchlib.__func__
    except (ImportError, AttributeError):
        yield
        return
    built: dict[int, Any] = {}

    def from_torchlib(cls, opset_version=None):
        key = opset_version or -1
        if key not in built:
            built[key] = build(cls) if opset_version is None else build(cls, opset_version)
        copy = cls()
        copy._opset_version = built[key]._opset_version
        copy.functions = {op: list(fns) for op, fns in built[key].functions.items()}
        return copy

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registration.ONNXRegistry, "from_torchlib", classmethod(from_torchlib))
        yield


@pytest.fixture
def ort():
    """onnxruntime, or a skip saying which extra brings it (and the exporter's onnxscript)."""
    pytest.importorskip("onnxscript", reason=f"ONNX export {ONNX_EXTRA}")
    return pytest.importorskip("onnxruntime", reason=f"onnxruntime {ONNX_EXTRA}")


def make_policy(env_id: str, **spec: Any) -> Policy:
    """An untrained policy with decisive logits and, if normalised, odd statistics."""
    if env_id.startswith("MinAtar/"):
        pytest.importorskip(
            "minatar", reason='needs the minatar extra: pip install -e ".[minatar]"'
        )
    torch.manual_seed(0)
    spaces = env_spaces(env_id)
    model = ModelSpec(spaces.obs_shape, spaces.action, spaces.obs_dtype, **spec).build()
    with torch.no_grad():
        model.head.weight.normal_()
        if model.trunk and not model.spec.image:  # CartPole's observations are small numbers
            model.trunk[0].weight.mul_(10)
        for name, p in model.named_parameters():
            if name.endswith("bias"):  # else a ReLU net ignores the input's scale
                p.uniform_(-0.1, 0.1)
        if model.normalize_obs:
            model.set_obs_stats(torch.rand(model.spec.obs_dim), 1 + torch.rand(model.spec.obs_dim))
    policy = Policy(model, env_id, {})
    raw_frames = policy.observation_space.shape == model.spec.obs_shape
    if model.spec.image and raw_frames and not model.recurrent:  # frames differ little:
        with torch.no_grad():
            features = model.encoder(torch.as_tensor(observations(policy, 64, seed=9)))
            n = model.n_pi  # centre the logits on them
            model.head.bias[:n] -= model.head.weight[:n] @ features.mean(0)
    return policy


def make_named(name: str) -> Policy:
    env_id, spec = POLICIES[name]
    return make_policy(env_id, **spec)


def observations(policy: Policy, n: int, seed: int = 0) -> Any:
    """``n`` observations from the policy's env under random actions, as one batch."""
    env = policy.make_env()
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    rows = []
    for _ in range(n):
        rows.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset(seed=seed + len(rows))
    env.close()
    return stack(rows)


def stack(rows: list) -> Any:
    if isinstance(rows[0], dict):
        return {k: stack([r[k] for r in rows]) for k in rows[0]}
    if isinstance(rows[0], tuple):
        return tuple(stack([r[i] for r in rows]) for i in range(len(rows[0])))
    return np.stack([np.asarray(r) for r in rows])


def feeds(obs: Any, name: str = "obs") -> dict[str, np.ndarray]:
    """onnxruntime's inputs: ``obs``, or one ``obs.<key>`` / ``obs.<i>`` per part."""
    if isinstance(obs, dict):
        return {n: v for k, part in obs.items() for n, v in feeds(part, f"{name}.{k}").items()}
    if isinstance(obs, tuple):
        return {n: v for i, part in enumerate(obs) for n, v in feeds(part, f"{name}.{i}").items()}
    return {name: np.asarray(obs)}


def tensors(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: tensors(v) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(tensors(v) for v in obs)
    return torch.as_tensor(np.asarray(obs))


def runner(fmt: str, path: Path, ort: Any = None):
    """``run(obs, state) -> (actions, state)`` with the exported file in its own runtime."""
    if fmt == "onnx":
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

        def run_onnx(obs, state):
            state_feeds = {} if state is None else {"h": state[0], "c": state[1]}
            out = session.run(None, {**feeds(obs), **state_feeds})
            return out[0], (None if state is None else (out[-2], out[-1]))

        return run_onnx
    module = torch.export.load(str(path)).module() if fmt == "pt2" else torch.jit.load(str(path))

    def run_torch(obs, state):
        with torch.no_grad():
            args = [tensors(obs)] + ([] if state is None else [torch.as_tensor(s) for s in state])
            out = module(*args)
        if state is None:
            return out.numpy(), None
        return out[0].numpy(), (out[-2].numpy(), out[-1].numpy())

    return run_torch


def assert_same_actions(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, expected)
    assert len({a.tobytes() for a in expected}) > 1, "a constant policy tests little"


FORMATS = ["onnx", "pt2", "torchscript"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "name", ["cartpole", "pendulum", "minatar", "minatar_centred", "lstm", "copybits"]
)
def test_exported_actions_are_predicts_on_real_observations(name, fmt, tmp_path, request):
    ort = request.getfixturevalue("ort") if fmt == "onnx" else None
    policy = make_named(name)
    obs = observations(policy, 64)
    path = policy.export(tmp_path / f"policy{SUFFIX[fmt]}")
    state = policy.initial_state(64)
    expected, expected_state = policy.predict(obs, state)
    state_np = None if state is None else tuple(s.numpy() for s in state)
    actions, out_state = runner(fmt, path, ort)(obs, state_np)
    assert_same_actions(actions, expected)
    if state is not None:
        for got, want in zip(out_state, expected_state, strict=True):
            np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("env_id", sorted(ODD_SPACES))
def test_every_adapter_is_exported(env_id, fmt, tmp_path, request):
    ort = request.getfixturevalue("ort") if fmt == "onnx" else None
    obs_space, act_space, spec = ODD_SPACES[env_id]
    policy = make_policy(env_id, **spec)
    assert policy.observation_space == obs_space and policy.action_space == act_space
    obs = observations(policy, 64, seed=5)
    state = policy.initial_state(64)
    expected, _ = policy.predict(obs, state)
    state_np = None if state is None else tuple(s.numpy() for s in state)
    if fmt == "torchscript" and env_id.startswith("Nested"):
        with pytest.raises(UsageError, match="TorchScript cannot take nested observations"):
            policy.export(tmp_path / "policy.pt")
        return
    path = policy.export(tmp_path / f"policy{SUFFIX[fmt]}")
    actions, _ = runner(fmt, path, ort)(obs, state_np)
    assert_same_actions(actions, expected)
    assert all(act_space.contains(a) for a in actions)


@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_a_pettingzoo_policy_exports_one_agent_a_row_with_its_mask(fmt, tmp_path, request):
    """Connect four's ``{"observation", "action_mask"}`` from real games, both seats, the
    board read by a conv net: the file gives predict's actions, never a masked one."""
    pytest.importorskip(
        "pettingzoo", reason='needs the pettingzoo extra: pip install -e ".[pettingzoo]"'
    )
    from pettingzoo.classic import connect_four_v3

    ort = request.getfixturevalue("ort") if fmt == "onnx" else None
    policy = make_policy("pettingzoo.classic.connect_four_v3:env", action_mask=True, grid=(6, 7, 2))
    env, rng, rows = connect_four_v3.env(), np.random.default_rng(0), []
    env.reset(seed=0)
    while len(rows) < 64:
        obs, _, terminated, truncated, _ = env.last()
        if terminated or truncated:
            env.reset(seed=len(rows))
            continue
        rows.append(obs)
        env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
    seats = [f"player_{i % 2}" for i in range(len(rows))]  # whoever's: one policy for both
    expected = np.array([policy.predict({s: r})[0][s] for s, r in zip(seats, rows, strict=True)])
    batch = {key: np.stack([r[key] for r in rows]) for key in policy.observation_space.spaces}
    actions, _ = runner(fmt, policy.export(tmp_path / f"policy{SUFFIX[fmt]}"), ort)(batch, None)
    assert_same_actions(actions, expected)
    assert all(r["action_mask"][a] for r, a in zip(rows, actions, strict=True))


@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_a_policy_per_group_exports_one_group_at_a_time(fmt, tmp_path, request):
    """simple_speaker_listener with --agent-groups prefix: each group's file takes that
    group's own observations and gives predict's actions, within its own action space."""
    pytest.importorskip("mpe2", reason='needs the pettingzoo extra: pip install -e ".[pettingzoo]"')
    from mpe2 import simple_speaker_listener_v4

    ort = request.getfixturevalue("ort") if fmt == "onnx" else None
    env_id = "mpe2.simple_speaker_listener_v4:parallel_env"
    spaces = env_spaces(env_id, agent_groups="prefix")
    torch.manual_seed(0)
    model = ModelSpec(spaces.obs_shape, spaces.action, action_mask=True, groups=spaces.groups,
                      normalize_obs=True).build()  # fmt: skip
    with torch.no_grad():
        for net in model.policies:
            net.head.weight.normal_()
            net.set_obs_stats(torch.rand(net.spec.obs_dim), 1 + torch.rand(net.spec.obs_dim))
    policy = Policy(model, env_id, {"agent_groups": "prefix"})
    env = simple_speaker_listener_v4.parallel_env()
    rows: dict[str, list] = {"speaker_0": [], "listener_0": []}
    observations, _ = env.reset(seed=0)
    for t in range(64):
        for agent, obs in observations.items():
            rows[agent].append(obs)
        observations, *_ = env.step({a: env.action_space(a).sample() for a in env.agents})
        if not env.agents:
            observations, _ = env.reset(seed=t)
    for group, agent in [("speaker", "speaker_0"), ("listener", "listener_0")]:
        expected = np.array([policy.predict({agent: o})[0][agent] for o in rows[agent]])
        path = policy.export(tmp_path / f"{group}{SUFFIX[fmt]}", group=group)
        actions, _ = runner(fmt, path, ort)(np.stack(rows[agent]), None)
        assert_same_actions(actions, expected)
        assert all(env.action_space(agent).contains(int(a)) for a in actions)
    with pytest.raises(UsageError, match="a policy per group .speaker, listener."):
        policy.export(tmp_path / f"policy{SUFFIX[fmt]}")


@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_an_lstm_carries_its_state_through_a_50_step_episode(fmt, tmp_path, request):
    ort = request.getfixturevalue("ort") if fmt == "onnx" else None
    policy = make_named("pendulum_lstm")  # Pendulum: 200 steps, never ends early
    run = runner(fmt, policy.export(tmp_path / f"policy{SUFFIX[fmt]}"), ort)
    env = policy.make_env()
    obs, _ = env.reset(seed=3)
    state, exported_state = None, tuple(np.zeros((1, 16), np.float32) for _ in range(2))
    moved = set()
    for _ in range(50):
        action, state = policy.predict(obs, state)
        actions, exported_state = run(obs[None], exported_state)
        np.testing.assert_allclose(actions[0], action, rtol=1e-5, atol=1e-5)
        for got, want in zip(exported_state, state, strict=True):
            np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
        moved.add(float(action[0]))
        obs, _, terminated, truncated, _ = env.step(action)
        assert not (terminated or truncated)
    env.close()
    assert len(moved) > 10, "the actions hardly changed: a weak test"


def greedy_returns(policy: Policy, seeds: list[int]) -> list[float]:
    returns = []
    for seed in seeds:
        env = policy.make_env()
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            action, _ = policy.predict(obs)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return returns


def test_onnxruntime_alone_plays_cartpole_as_predict_does(ort, tmp_path):
    """The file, run by a Python that imports neither torch nor this package."""
    policy = make_policy("CartPole-v1")
    path = policy.export(tmp_path / "policy.onnx")
    code = f"""
import json, sys
import gymnasium as gym
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession({str(path)!r}, providers=["CPUExecutionProvider"])
returns = []
for seed in (0, 1, 2):
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        (actions,) = session.run(None, {{"obs": obs[None]}})
        obs, reward, terminated, truncated, _ = env.step(int(actions[0]))
        total, done = total + float(reward), terminated or truncated
    returns.append(total)
ours = [m for m in sys.modules if m.split(".")[0] in ("torch", "a3c", "hogwild")]
assert not ours, ours
print(json.dumps(returns))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    returns = json.loads(proc.stdout.strip().splitlines()[-1])
    assert returns == greedy_returns(policy, [0, 1, 2])
    assert len(set(returns)) > 1 or returns[0] > 20


@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_a_stochastic_export_draws_and_gives_the_logits(fmt, tmp_path, request):
    ort = request.getfixturevalue("ort") if fmt == "onnx" else None
    policy = make_policy("CartPole-v1")
    obs = observations(policy, 2)
    path = policy.export(tmp_path / f"policy{SUFFIX[fmt]}", deterministic=False)
    if fmt == "onnx":
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert [o.name for o in session.get_outputs()] == ["actions", "logits"]
    with torch.no_grad():
        logits = policy.model.pi(torch.as_tensor(obs))
    probs = torch.softmax(logits, -1)[0].numpy()
    assert 0.05 < probs[0] < 0.95, "a decisive policy: draws would not test sampling"
    many = np.repeat(obs[:1], 4000, axis=0)
    if fmt == "onnx":
        actions, got_logits = session.run(None, {"obs": many})
    else:
        with torch.no_grad():
            out = torch.export.load(str(path)).module()(torch.as_tensor(many))
        actions, got_logits = (t.numpy() for t in out)
    np.testing.assert_allclose(got_logits[0], logits[0].numpy(), rtol=1e-5, atol=1e-5)
    share = np.bincount(actions, minlength=2) / len(actions)
    assert abs(share[0] - probs[0]) < 0.04, (share, probs)


def test_a_stochastic_gaussian_gives_mean_and_log_std(ort, tmp_path):
    policy = make_policy("Pendulum-v1", normalize_obs=True)
    with torch.no_grad():
        policy.model.dist.log_std.fill_(-1.0)
        policy.model.head.weight.mul_(0.1)  # means within the bounds, seldom clipped draws
    obs = observations(policy, 256)
    path = policy.export(tmp_path / "policy.onnx", deterministic=False)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["actions", "mean", "log_std"]
    actions, mean, log_std = session.run(None, {"obs": obs})
    with torch.no_grad():
        expected_mean = policy.model.pi(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-5, atol=1e-5)
    assert log_std.shape == mean.shape and np.allclose(log_std, -1.0)
    assert actions.shape == (256, 1) and np.all(np.abs(actions) <= 2.0)
    inside = np.abs(mean) < 1.0  # draws from there are clipped at 2.7 std
    noise = (actions - mean)[inside]
    assert inside.sum() > 200 and 0.8 * np.exp(-1) < noise.std() < 1.2 * np.exp(-1)


def test_the_file_says_what_it_takes_and_gives(ort, tmp_path):
    policy = make_named("copybits")
    path = policy.export(tmp_path / "policy.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = json.loads(session.get_modelmeta().custom_metadata_map["policy.json"])
    assert meta["env_id"] == "policy_helpers:CopyBits-v0" and meta["state_size"] == 0
    assert meta["inputs"] == [
        {"name": "obs.bits", "shape": ["batch", 2], "dtype": "int8"},
        {"name": "obs.noise", "shape": ["batch", 2], "dtype": "float32"},
    ]
    assert meta["outputs"] == [{"name": "actions", "shape": ["batch", 2], "dtype": "int8"}]
    assert [i.name for i in session.get_inputs()] == ["obs.bits", "obs.noise"]
    assert session.get_inputs()[0].shape == ["batch", 2]
    extra = {"policy.json": ""}
    torch.export.load(str(policy.export(tmp_path / "policy.pt2")), extra_files=extra)
    assert json.loads(extra["policy.json"])["inputs"] == meta["inputs"]


def test_format_by_suffix_or_by_name(tmp_path):
    policy = make_policy("CartPole-v1")
    with pytest.raises(UsageError, match=r"\.onnx.*\.pt2.*\.pt"):
        policy.export(tmp_path / "policy.tflite")
    with pytest.raises(UsageError, match="one of onnx, pt2, torchscript"):
        policy.export(tmp_path / "policy.pt2", format="tflite")
    path = policy.export(tmp_path / "policy.bin", format="pt2")
    obs = observations(policy, 8)
    module = torch.export.load(str(path)).module()
    assert np.array_equal(module(torch.as_tensor(obs)).numpy(), policy.predict(obs)[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.bin"]


# ------------------------------------------------------------------- the command


def save_policy(policy: Policy, path: Path) -> Path:
    """A checkpoint as a3c.train writes it, for what the command reads of one."""
    spec = policy.model.spec.to_dict()
    torch.save(
        {"model": policy.model.state_dict(), "model_spec": spec, "env_id": policy.env_id}, path
    )
    return path


def test_the_command_writes_what_predict_does(ort, tmp_path, capsys):
    policy = make_policy("CartPole-v1")
    ckpt = save_policy(policy, tmp_path / "best.pt")
    out = tmp_path / "out" / "policy.onnx"
    assert export_main([str(ckpt), str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line == (
        f"{out}: ONNX, greedy, CartPole-v1: obs float32[batch, 4] -> actions int64[batch]"
    )
    obs = observations(policy, 64)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (actions,) = session.run(None, {"obs": obs})
    assert_same_actions(actions, Policy.load(ckpt).predict(obs)[0])
    assert export_main([str(ckpt), str(tmp_path / "s.onnx"), "--stochastic"]) == 0
    assert "stochastic" in capsys.readouterr().out
    assert export_main([str(ckpt), str(tmp_path / "p.pt"), "--format", "pt2"]) == 0
    assert "torch.export" in capsys.readouterr().out
    assert torch.export.load(str(tmp_path / "p.pt")) is not None


def one_line_error(argv: list[str], capsys) -> str:
    assert export_main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("a3c.export: error: ") and "\n" not in err, captured.err
    assert "Traceback" not in captured.err
    return err


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    ckpt = save_policy(make_policy("CartPole-v1"), tmp_path / "best.pt")
    assert ".onnx" in one_line_error([str(ckpt), str(tmp_path / "policy.tflite")], capsys)
    assert "not found" in one_line_error([str(tmp_path / "none.pt"), "policy.onnx"], capsys)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    one_line_error([str(tmp_path / "junk.pt"), str(tmp_path / "policy.onnx")], capsys)
    mnist = tmp_path / "mnist.pt"
    torch.save({"format": "hogwild-mnist", "model": {}}, mnist)
    assert "hogwild-mnist" in one_line_error([str(mnist), str(tmp_path / "policy.onnx")], capsys)
    (tmp_path / "folder.onnx").mkdir()
    assert "folder" in one_line_error([str(ckpt), str(tmp_path / "folder.onnx")], capsys)
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if the extra were missing
    err = one_line_error([str(ckpt), str(tmp_path / "policy.onnx")], capsys)
    assert 'pip install "hogwild-a3c[onnx]"' in err and "onnxscript" in err
    assert not (tmp_path / "policy.onnx").exists()
    assert export_main([str(ckpt), str(tmp_path / "policy.pt2")]) == 0  # torch alone: fine
