"""The A3C run configuration: every setting declared once, with its default, help and range.

Flags (``a3c.train --help``), preset and config-file keys, range checks and the
``config.json`` record all come from these fields (see :mod:`hogwild.config`).
Defaults were chosen by measurement across the whole suite (docs/tuning.md, "The
defaults"); per-environment presets (``a3c/run/presets.toml``) tune on top of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from a3c.envs.multiagent import GROUPINGS
from a3c.envs.refs import reference_to
from a3c.learning.algorithms import ALGORITHMS
from a3c.learning.opponents import SNAPSHOT_EVERY, SNAPSHOTS_KEPT
from a3c.scoring import DEFAULT_EVAL_MAX_STEPS
from hogwild.config import EngineConfig, check, setting
from hogwild.errors import UsageError
from hogwild.optim import OPTIMIZERS
from hogwild.precision import check_amp

RUN = "run"
ALGO = "algorithm"
PPO = "PPO (--algo appo, ppo)"
DECOUPLED = "decoupled PPO (--algo ppo)"
NET = "network"
LOG = "evaluation and logging"

# A step budget no run reaches: benchmarks and tuning stop runs by time instead.
NO_STEP_BUDGET = 10**12


def _algo_help() -> str:
    return "; ".join(f"{a.name}: {a.summary}" for a in ALGORITHMS.values())


def _own_default_help(name: str, what: str) -> str:
    """``what``, and the algorithms that take a default of their own for it."""
    own = [f"{a.name}: {a.defaults[name]}" for a in ALGORITHMS.values() if name in a.defaults]
    return f"{what} ({', '.join(own)}; a preset may set another)" if own else what


def _normalize_advantage_help() -> str:
    over = ", ".join(f"{a.name}: per {a.normalized_over}" for a in ALGORITHMS.values())
    default = ", ".join(
        f"{'on' if a.normalize_advantage else 'off'} for {a.name}" for a in ALGORITHMS.values()
    )
    return f"standardise advantages ({over}); none: {default}"


@dataclass
class A3CConfig(EngineConfig):
    env: str = setting(
        "CartPole-v1",
        "Gymnasium id; module:Env-vN imports module first (to register Env-vN); "
        "module:factory calls a function of module that returns the env",
        group=RUN,
    )
    env_kwargs: dict[str, Any] = setting(
        help="keywords for the env: gymnasium.make's (max_episode_steps=500, Atari's "
        "repeat_action_probability=0.0) and the Atari wrappers' (screen_size=42, "
        "frame_stack=4, noop_max=30, terminal_on_life_loss=false); max_episode_steps "
        "counts agent steps, also for Atari",
        factory=dict,
        group=RUN,
    )
    wrappers: tuple[str, ...] = setting(
        (),
        "a gymnasium wrapper as module:callable, called as callable(env) after the "
        "family's preprocessing (Atari, MinAtar) and before the preset's wrappers; repeat "
        "the flag for several, applied in order; also in evaluation, a3c.evaluate and on resume",
        group=RUN,
        aliases=("--wrapper",),
        metavar="MODULE:CALLABLE",
    )
    preset_wrappers: tuple[str, ...] = setting(
        (),
        "the preset's wrappers (MiniGrid's ImgObsWrapper), applied after --wrapper's, each "
        "skipped where the policy already takes the env's observation and actions",
        group=RUN,
        flag=False,
    )
    agent_groups: str = setting(
        "all",
        "PettingZoo envs: one policy for every agent (all), or one per name prefix (prefix: "
        "speaker_0 and listener_0 learn their own); a group's agents share their spaces",
        group=RUN,
        choices=GROUPINGS,
    )
    snapshot_games: float = setting(
        0.0,
        "PettingZoo games: the share of a worker's games in which one seat, drawn at random, "
        f"is played by an older snapshot of the policy (one of {SNAPSHOTS_KEPT} kept from all "
        f"it took, one every {SNAPSHOT_EVERY} rollouts) instead of by the policy itself; 0: "
        "pure self-play",
        group=RUN,
        min=0,
        max=1,
    )
    random_games: float = setting(
        0.0,
        "PettingZoo games: the share of a worker's games in which one seat, drawn at random, "
        "is played by a random player (among the legal moves, where the game masks them), "
        "the weak play self-play never meets; 0: none",
        group=RUN,
        min=0,
        max=1,
    )
    envs_per_worker: int = setting(
        8, "environments each worker steps with one batched forward pass", group=RUN, min=1
    )
    total_steps: int = setting(
        5_000_000, "stop after this many env steps (all workers together)", group=RUN, min=1
    )
    time_limit: float | None = setting(None, "stop after this many seconds", group=RUN, above=0)
    target_return: float | None = setting(
        None,
        "stop when --target-metric reaches it (none: the env's reward_threshold, "
        "e.g. 475 for CartPole-v1)",
        group=RUN,
    )
    target_metric: str = setting(
        "train",
        "train: mean return of the last 100 training episodes (the standard 'solved'); "
        "eval: the evaluator's mean greedy return; none: note when the training mean "
        "reaches the target, never stop for it (to see whether a run holds it)",
        group=RUN,
        choices=("train", "eval", "none"),
    )
    algo: str = setting("a3c", _algo_help(), group=ALGO, choices=tuple(ALGORITHMS))
    n_steps: int = setting(
        5, _own_default_help("n_steps", "rollout length per update"), group=ALGO, min=1
    )
    gamma: float = setting(0.99, "discount", group=ALGO, min=0, max=1)
    gae_lambda: float = setting(0.95, "GAE lambda (1: n-step returns)", group=ALGO, min=0, max=1)
    optimizer: str = setting(
        "rmsprop",
        "shared optimizer (state in shared memory)",
        group=ALGO,
        choices=tuple(sorted(OPTIMIZERS)),
    )
    optimizer_eps: float | None = setting(
        None,
        "the optimizer's epsilon, which bounds the step of a weight with tiny gradients "
        "(none: the optimizer's own, adam 1e-8 and rmsprop 1e-5; SB3's and CleanRL's PPO "
        "use 1e-5 with adam)",
        group=ALGO,
        above=0,
    )
    lr: float = setting(7e-4, "learning rate", group=ALGO, above=0)
    lr_workers: int | None = setting(
        None,
        "the worker count --lr was chosen at (none: any): with W more workers learning "
        "lock-free, each step lands on weights the others moved meanwhile, and the rate "
        "is scaled by sqrt(this / W); --algo ppo's one learner is not scaled",
        group=ALGO,
        min=1,
    )
    rollout_workers: int | None = setting(
        None,
        "the worker count --n-steps, --minibatches and --target-kl were chosen at (none: "
        "any): with W more workers learning lock-free, each collects n-steps x this / W "
        "steps a rollout in minibatches x this / W minibatches of the same size, so that as "
        "many updates land between a rollout's acting and its learning as at this count, and "
        "the KL cap, which those updates count towards, is x W / this; --algo ppo is not "
        "scaled",
        group=ALGO,
        min=1,
    )
    lr_schedule: str = setting(
        "constant",
        "linear: decay to 0 at --total-steps",
        group=ALGO,
        choices=("constant", "linear"),
    )
    lr_warmup_steps: int = setting(
        0,
        "raise the learning rate linearly from 0 over this many env steps (0: none); Adam's "
        "first steps move every weight by about the rate",
        group=ALGO,
        min=0,
    )
    entropy_coef: float = setting(0.0, "weight of the entropy bonus", group=ALGO, min=0)
    entropy_coef_final: float | None = setting(
        None,
        "decay --entropy-coef linearly to this at --total-steps (none: constant)",
        group=ALGO,
        min=0,
    )
    value_coef: float = setting(0.5, "weight of the value loss", group=ALGO, min=0)
    value_loss: str = setting(
        "mse", "value loss: squared error or Huber", group=ALGO, choices=("mse", "huber")
    )
    max_grad_norm: float = setting(
        0.5, "clip the global gradient norm to this", group=ALGO, above=0
    )
    amp: str = setting(
        "off",
        "bf16: the workers' learning passes (forward over the rollout, loss) run under CPU "
        "autocast, the conv encoder and trunk in bf16; acting, gradients and the shared "
        "optimizer stay fp32; auto: bf16 where the CPU has bf16 instructions (AVX512-BF16, "
        "AMX), else off; fp16: --algo ppo's learner on CUDA only, with a GradScaler",
        group=ALGO,
        choices=("off", "auto", "bf16", "fp16"),
    )
    normalize_reward: bool = setting(
        True,
        "scale rewards by the running std of the discounted return (as VecNormalize), so "
        "learning does not depend on the reward's scale",
        group=ALGO,
    )
    normalize_obs: bool = setting(
        True, "normalise observations by their running mean and std", group=ALGO
    )
    normalize_advantage: bool | None = setting(None, _normalize_advantage_help(), group=ALGO)
    epochs: int = setting(4, "appo, ppo: passes over each rollout", group=PPO, min=1)
    minibatches: int = setting(
        4,
        "appo, ppo: steps per pass; a recurrent policy keeps each env's sequence whole, so "
        "at most --envs-per-worker",
        group=PPO,
        min=1,
    )
    clip_range: float = setting(
        0.2, "appo, ppo: clip the probability ratio to 1 +- this", group=PPO, above=0
    )
    clip_range_final: float | None = setting(
        None,
        "appo, ppo: decay --clip-range linearly to this at --total-steps (none: constant)",
        group=PPO,
        above=0,
    )
    clip_range_vf: float | None = setting(
        None,
        "appo, ppo: clip the value's move from the acting policy's value to +- this (none: "
        "no clipping)",
        group=PPO,
        above=0,
    )
    target_kl: float | None = setting(
        None,
        "appo, ppo: a worker stops the epochs on a rollout once a minibatch's approximate KL "
        "exceeds 1.5 x this (none: never)",
        group=PPO,
        above=0,
    )
    recompute_advantages: bool = setting(
        False,
        "appo, ppo: recompute the advantages and returns with the current value function before "
        "every epoch after the first",
        group=PPO,
    )
    learner_device: str = setting(
        "auto",
        "where the learning worker learns; auto: cuda for a conv net where CUDA is present "
        "(Pong's learner took 110 us a sample on an H200, 309 on 16 CPU threads), else cpu "
        "(Hopper's MLP learner was 3x slower on CUDA than on one CPU thread)",
        group=DECOUPLED,
        choices=("auto", "cpu", "cuda"),
    )
    learner_threads: int = setting(
        1,
        "torch threads of a learner on the CPU, beside the actors' (Pong's learner: x3.0 at "
        "4 threads, x4.5 at 8 on 16 cores; an MLP's gained nothing)",
        group=DECOUPLED,
        min=1,
    )
    max_policy_lag: int = setting(
        1000,
        "drop a rollout whose weights are more than this many updates older than the "
        "learner's when it comes to learn from it (Sample Factory's default)",
        group=DECOUPLED,
        min=0,
    )
    hidden: tuple[int, ...] = setting(
        (128, 128), "MLP layer sizes (vector observations)", group=NET, min=1, metavar="SIZES"
    )
    activation: str = setting("tanh", "trunk nonlinearity", group=NET, choices=("tanh", "relu"))
    separate_networks: bool = setting(
        False, "policy and value nets with their own layers (else one shared trunk)", group=NET
    )
    policy: str = setting(
        "auto",
        "mlp: a feed-forward net on vectors; cnn: a conv net on images (see --conv); "
        "lstm: either, plus an LSTM core (memory across steps); auto: mlp or cnn by the "
        "observations",
        group=NET,
        choices=("auto", "mlp", "cnn", "lstm"),
    )
    conv: str = setting(
        "auto",
        "image encoder: a3c (the A3C paper's: 16 8x8/4, 32 4x4/2, FC 256), nature (DQN's: "
        "32-64-64, FC 512), small (MinAtar's: 16 3x3, FC 128); auto: small below 36 "
        "pixels, else a3c",
        group=NET,
        choices=("auto", "a3c", "nature", "small"),
    )
    center_frames: bool = setting(
        False,
        "images: subtract each channel's background, its most common pixel value, before "
        "the conv net, so a flat background is 0 (without it Pong's grey cost its first "
        "conv layer 88-94% of its units by 150k steps, and now and then all of them)",
        group=NET,
    )
    lstm_size: int = setting(128, "hidden size of the LSTM core (--policy lstm)", group=NET, min=1)
    log_std_init: float = setting(
        0.0, "initial log-std of a Gaussian policy (Box actions)", group=NET
    )
    squash_actions: bool = setting(
        False,
        "Box actions: tanh-squash the Gaussian into the bounds (with the log-det "
        "correction) instead of clipping its draws",
        group=NET,
    )
    max_nonfinite: int = setting(
        10,
        "a worker fails after this many rollouts in a row with a skipped update: a "
        "non-finite loss or gradient in A3C's one step or any of APPO's epochs x minibatches",
        group="engine",
        min=1,
    )
    eval_episodes: int = setting(10, "episodes per evaluation", group=LOG, min=1)
    eval_max_steps: int | None = setting(
        None,
        "cut an evaluation episode after this many agent steps, so an env without a time "
        "limit cannot stall the evaluator (none: the env's own max_episode_steps, else "
        f"{DEFAULT_EVAL_MAX_STEPS:_})",
        group=LOG,
        min=1,
    )
    checkpoint_interval: float = setting(
        60.0, "seconds between periodic checkpoints", group=LOG, above=0
    )
    log_interval: float = setting(1.0, "seconds between TensorBoard points", group=LOG, above=0)
    preset: str | None = setting(
        None,
        "the preset applied (recorded by a3c.train; set it with --preset)",
        group=RUN,
        flag=False,
    )
    decay_start_steps: int = setting(
        0,
        "the env steps at which the decays of this session start (recorded by a resume)",
        group=RUN,
        flag=False,
        min=0,
    )
    decay_start_done: float = setting(
        0.0,
        "the share of the decays done at decay_start_steps (recorded by a resume)",
        group=RUN,
        flag=False,
        min=0,
        max=1,
    )

    def __post_init__(self) -> None:
        # The Python API also takes an env factory and wrappers as callables: each process
        # imports them by name (a3c.envs.refs), and config.json records the names.
        if callable(self.env):
            self.env = reference_to(self.env, "env factory")
        if isinstance(self.wrappers, (list, tuple)):
            self.wrappers = tuple(reference_to(w, "wrapper") for w in self.wrappers)
        if isinstance(self.preset_wrappers, (list, tuple)):
            self.preset_wrappers = tuple(reference_to(w, "wrapper") for w in self.preset_wrappers)
        check(self)
        algo = ALGORITHMS[self.algo]
        if not algo.decoupled:
            check_amp(self.amp, "cpu", why_cpu="a3c's workers learn on the CPU")
        elif self.learner_device == "cpu":
            check_amp(self.amp, "cpu", why_cpu="the learner is on the CPU")
        # else checked once the learner's device is known (a3c.run.trainer.run_config)
        if self.optimizer_eps is not None and self.optimizer == "sgd":
            raise UsageError(
                "optimizer_eps (--optimizer-eps) needs an optimizer that has one, not sgd"
            )
        if self.snapshot_games + self.random_games > 1:
            raise UsageError(
                f"--snapshot-games {self.snapshot_games:g} and --random-games "
                f"{self.random_games:g} are shares of the same games: at most 1 together"
            )
        if algo.decoupled and self.workers < 2:
            raise UsageError(
                f"--algo {self.algo} needs --workers 2 or more: one learns, the others act"
            )
        if algo.decoupled and self.recompute_advantages:
            raise UsageError(
                f"--recompute-advantages: --algo {self.algo}'s learner gets its targets from "
                "the actors, with no final observations to recompute them from"
            )
        if not algo.minibatched:
            return
        samples = self.n_steps * self.envs_per_worker
        if self.policy == "lstm" and self.minibatches > self.envs_per_worker:
            raise UsageError(
                f"minibatches (--minibatches) {self.minibatches} is more than the "
                f"{self.envs_per_worker} envs per worker a recurrent policy splits by"
            )
        if self.minibatches > samples:
            raise UsageError(
                f"minibatches (--minibatches) {self.minibatches} is more than the "
                f"{samples} samples of a rollout (--n-steps x --envs-per-worker)"
            )

    def decays(self) -> bool:
        """Whether a setting decays over ``total_steps`` (a linear rate, a final entropy
        coefficient or clip range): the step budget is then the decay's horizon, which a
        run stopped by time (a benchmark, a tuning trial) keeps so that it runs the same
        schedule per step as a run to the budget."""
        finals = (self.entropy_coef_final, self.clip_range_final)
        return self.lr_schedule != "constant" or any(x is not None for x in finals)

    def env_options(self) -> dict[str, Any]:
        """The keywords of :func:`a3c.envs.make_env` beside the id: ``--env-kwargs``,
        ``--wrapper``s and the preset's; checkpoints keep them, so a policy is always
        played as trained."""
        lists = {"wrappers": self.wrappers, "preset_wrappers": self.preset_wrappers}
        groups = {} if self.agent_groups == "all" else {"agent_groups": self.agent_groups}
        return {**self.env_kwargs, **{k: list(v) for k, v in lists.items() if v}, **groups}
