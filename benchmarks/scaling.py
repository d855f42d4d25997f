"""What the parts of a run cost here, and the agent steps/s they predict at 2 to 32 cores.

    python benchmarks/scaling.py [--env PongNoFrameskip-v4] [--rounds 3]

Measured with the env's preset (``config_for``), one torch thread unless said: acting (a
worker's ``Collector.collect``: its envs, a batched forward under ``no_grad``, the
bookkeeping; the envs and the forward alone beside it), per agent step; learning
(``Learner.learn`` on one collected rollout: epochs x minibatches steps of gather, forward,
backward, clip, optimizer step; no KL stop), per sample, at 1, 2 and 4 threads (no more
than the cores here) and on CUDA where present (the rollout copied there first);
publishing the flat parameters into shared memory, per update; one rollout through a
``BufferPool`` slot, both ends in one process. Each figure is the median over rounds.

Predicted for N cores: today's Hogwild, N workers that each act and learn (N x one);
decoupled with a CPU learner on L cores (L a measured thread count, the best for N; and
again with L threads assumed L times as fast as one) and N - L actors; decoupled with a
GPU learner, N - 1 actors and one core to drive it. A decoupled run goes at the slower
of its actors and its learner. What is assumed is printed under the table.
"""

from __future__ import annotations

import argparse
import datetime
import math
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch
from costs import median_ms, vector_step_ms
from torch import Tensor

from a3c.envs import env_spaces, make_vector_env
from a3c.learning.algorithms import ALGORITHMS
from a3c.learning.collect import Collector
from a3c.learning.learner import Learner
from a3c.learning.metrics import Tally
from a3c.learning.normalize import RunningMeanStd
from a3c.learning.rollout import Rollout
from a3c.policy import ActorCritic, ModelSpec
from a3c.run.config import A3CConfig
from a3c.run.handoff import stored
from a3c.run.presets import config_for
from a3c.run.shared_model import make_optimizer, model_spec
from a3c.run.telemetry import STATS
from a3c.run.worker import learner_settings
from hogwild.errors import UsageError
from hogwild.flat import flatten_parameters
from hogwild.pool import BufferPool

CORES = (2, 4, 8, 16, 32)
THREADS = (1, 2, 4, 8, 16)
START_S = 120.0  # for a process to build its envs and model
ROUND_S = 0.2  # each round of a figure makes enough calls to take at least this long

ASSUMED = """\
Measured: the parts above, each alone, in one process on this machine. Assumed, not measured:
- N cores each as fast as the one measured: no shared memory bandwidth or caches, no
  hyperthreads (two on one physical core are slower than two cores), no clock changes;
- a CPU learner gains from threads only as far as measured (L is one of those counts),
  or, in the column that says so, L times from L threads;
- a decoupled learner steps on the preset's minibatches, every epoch (no KL stop), as a
  worker does now; the pool's handoff between two processes adds its wake-up (~50 µs a
  message: benchmarks/pool_vs_queue.py);
- each agent step teaches as much as at 2 workers. For Hogwild that is the ideal line,
  and it does not hold: more workers need a lower rate (docs/benchmarks.md); a decoupled
  learner's policy lag is not modelled either."""


@dataclass
class Costs:
    """Microseconds: acting per agent step, learning per sample of a rollout (all its
    epochs), publishing per update, the pool per rollout."""

    collect: float
    env: float
    act: float
    learn: dict[int, float]  # by torch threads
    learn_cuda: float | None
    learn_cuda_bf16: float | None
    publish: float
    publish_cuda: float | None
    handoff: float
    samples: int  # per rollout
    updates: int  # per rollout
    params: int
    no_cuda: str  # why there is no CUDA figure, if there is none


def timed_ms(fn: Callable[[], object], rounds: int) -> float:
    """``median_ms`` with enough calls a round to take ``ROUND_S``."""
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    return median_ms(fn, max(1, math.ceil(ROUND_S / once)), rounds)


def learner(cfg: A3CConfig, spec: ModelSpec, device: str) -> Learner:
    """A worker's learner on its own parameters (nothing shared to copy from)."""
    model = spec.build().to(device)
    flat = flatten_parameters(model)
    optimizer = make_optimizer(cfg, flat)
    settings = replace(learner_settings(cfg), target_kl=None)  # every epoch, every time
    return Learner(
        settings, model=model, local=flat, shared=flat, optimizer=optimizer, rank=0,
        stats=Tally(STATS),
    )  # fmt: skip


def moved(r: Rollout, device: str) -> Rollout:
    def to(v: object) -> object:
        if isinstance(v, tuple):
            return tuple(t.to(device) for t in v)
        return v.to(device) if isinstance(v, Tensor) else v

    return Rollout(**{f.name: to(getattr(r, f.name)) for f in fields(r)})


def learn_us(cfg: A3CConfig, spec: ModelSpec, r: Rollout, rounds: int, device: str) -> float:
    lrn, samples = learner(cfg, spec, device), r.rewards.numel()
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None

    def learn() -> None:
        lrn.learn(r if device == "cpu" else moved(r, device), cfg.lr_warmup_steps)
        sync()

    return timed_ms(learn, rounds) * 1e3 / samples


def publish_us(flat: Tensor, rounds: int) -> float:
    shared = torch.empty(flat.numel(), dtype=flat.dtype).share_memory_()
    return timed_ms(lambda: shared.copy_(flat), rounds) * 1e3


def handoff_us(r: Rollout, rounds: int) -> float:
    """One rollout through a pool slot: acquire, view, copy, submit, receive, release."""
    parts = {
        f.name: stored(v)
        for f in fields(r)
        if isinstance(v := getattr(r, f.name), Tensor) and f.name != "final_obs"
    }
    pool = BufferPool({k: (v.shape, v.dtype) for k, v in parts.items()}, producers=1, slots=2)
    producer = pool.producer(0)

    def once() -> None:
        slot = producer.acquire(timeout=10)
        for name, buffer in producer.view(slot).items():
            buffer.copy_(parts[name])
        producer.submit(slot)
        pool.release(pool.receive(timeout=10))

    try:
        return timed_ms(once, rounds) * 1e3
    finally:
        pool.close()


def act_us(model: ActorCritic, obs: Tensor, scored: bool, rounds: int) -> float:
    @torch.no_grad()
    def act() -> None:
        model.act_scored(obs) if scored else model.act(obs)

    return timed_ms(act, rounds) * 1e3 / obs.shape[0]


def measure(cfg: A3CConfig, rounds: int, threads: list[int]) -> Costs:
    spec = model_spec(cfg, env_spaces(cfg.env, **cfg.env_options()))
    K, algo = cfg.envs_per_worker, ALGORITHMS[cfg.algo]
    torch.manual_seed(0)
    model = spec.build()
    envs = make_vector_env(cfg.env, K, seed=0, **cfg.env_options())
    try:
        collector = Collector(
            envs, model, cfg.n_steps, seed=0, record=algo.records_behaviour, gamma=cfg.gamma,
            return_rms=RunningMeanStd(1, 1) if cfg.normalize_reward else None,
        )  # fmt: skip
        samples = cfg.n_steps * K
        collect = timed_ms(collector.collect, rounds) * 1e3 / samples
        r = collector.collect()
    finally:
        envs.close()
    envs = make_vector_env(cfg.env, K, seed=1, **cfg.env_options())
    try:
        env = vector_step_ms(envs, math.ceil(ROUND_S * 1e6 / (collect * K)), rounds) * 1e3 / K
    finally:
        envs.close()
    act = act_us(model, r.next_obs, collector.record, rounds)
    learn = {}
    for t in threads:
        torch.set_num_threads(t)
        learn[t] = learn_us(cfg, spec, r, rounds, "cpu")
    torch.set_num_threads(1)
    flat = flatten_parameters(model)
    learn_cuda = learn_cuda_bf16 = publish_cuda = None
    no_cuda = "torch.cuda.is_available() is False here"
    if torch.cuda.is_available():
        try:
            learn_cuda = learn_us(cfg, spec, r, rounds, "cuda")
            learn_cuda_bf16 = learn_us(replace(cfg, amp="bf16"), spec, r, rounds, "cuda")
            publish_cuda = publish_us(flat.cuda(), rounds)
        except RuntimeError as e:  # the learner was written for CPU: say where it fails
            no_cuda = f"the learner failed on CUDA: {str(e).splitlines()[0]}"
    updates = cfg.epochs * cfg.minibatches if algo.minibatched else 1
    return Costs(
        collect, env, act, learn, learn_cuda, learn_cuda_bf16, publish_us(flat, rounds),
        publish_cuda, handoff_us(r, rounds), samples, updates, flat.numel(), no_cuda,
    )  # fmt: skip


def hogwild(c: Costs, n: int) -> float:
    """N workers, each acting and learning (copying the shared weights before each step)."""
    return n * 1e6 / (c.collect + c.learn[1] + c.updates * c.publish / c.samples)


def actors(c: Costs, n: int) -> float:
    """N actors, each copying the published weights and handing off its rollout once a rollout."""
    return n * 1e6 / (c.collect + (c.publish + c.handoff) / c.samples)


def learner_rate(c: Costs, learn: float, publish: float) -> float:
    """Samples/s of one learner that publishes after each update."""
    return 1e6 / (learn + (c.updates * publish + c.handoff) / c.samples)


def decoupled_cpu(c: Costs, n: int, learn: dict[int, float]) -> tuple[float, int, str]:
    """The best split of N cores, given the learner's cost by threads: (agent steps/s,
    learner threads, what bounds it)."""
    splits = []
    for threads, us in learn.items():
        if threads < n:
            acting, learning = actors(c, n - threads), learner_rate(c, us, c.publish)
            splits.append((min(acting, learning), threads, bound(acting, learning)))
    return max(splits)


def decoupled_gpu(c: Costs, n: int) -> tuple[float, str] | None:
    if c.learn_cuda is None or c.publish_cuda is None:
        return None
    acting, learning = actors(c, n - 1), learner_rate(c, c.learn_cuda, c.publish_cuda)
    return min(acting, learning), bound(acting, learning)


def split(rate: float, threads: int, by: str) -> str:
    return f"{rate:,.0f} (learner on {threads}, {by}-bound)"


def bound(acting: float, learning: float) -> str:
    return "actors" if acting <= learning else "learner"


def report(cfg: A3CConfig, c: Costs) -> None:
    minibatched = ALGORITHMS[cfg.algo].minibatched
    algo = f"{cfg.epochs} epochs x {cfg.minibatches} minibatches" if minibatched else "one step"
    mb = c.params * 4 / 2**20
    learn = "; ".join(f"{t} thread{'s' * (t > 1)} {us:.1f} µs" for t, us in c.learn.items())
    speedups = ", ".join(f"x{c.learn[1] / us:.2f} at {t}" for t, us in c.learn.items() if t > 1)
    cuda = "not measured here"
    if c.learn_cuda is not None:
        cuda = f"{c.learn_cuda:.1f} µs, under bf16 autocast {c.learn_cuda_bf16:.1f} µs"
    print("\n| part | measured |\n|---|---|")
    print(
        f"| acting, one worker's loop per agent step ({cfg.envs_per_worker} envs) "
        f"| {c.collect:.1f} µs (envs {c.env:.1f}, forward {c.act:.1f}) |"
    )
    print(
        f"| learning per sample ({cfg.algo}: {algo} of a {c.samples}-sample rollout, "
        "no KL stop) "
        f"| {learn}{f' ({speedups})' if speedups else ''}; CUDA {cuda} |"
    )
    publish_cuda = f"; from CUDA {c.publish_cuda:.0f} µs" if c.publish_cuda is not None else ""
    print(
        f"| publishing the weights, per update ({c.params:,} parameters, {mb:.2f} MiB) "
        f"| {c.publish:.0f} µs{publish_cuda} |"
    )
    print(f"| a rollout through the pool, per rollout | {c.handoff:.0f} µs |")
    if c.learn_cuda is None:
        print(f"\nCUDA: {c.no_cuda}, so no GPU learner is measured.")
    print(f"\nPredicted agent steps/s ({cfg.env}):\n")
    print(
        "| cores | Hogwild today (ideal) | decoupled, CPU learner | same, learner threads "
        "ideal (assumed) | decoupled, GPU learner |"
    )
    print("|---|---|---|---|---|")
    for n in CORES:
        cpu = decoupled_cpu(c, n, c.learn)
        ideal = decoupled_cpu(c, n, {t: c.learn[1] / t for t in range(1, n)})
        gpu = decoupled_gpu(c, n)
        on_gpu = f"{gpu[0]:,.0f} ({gpu[1]}-bound)" if gpu else "not measured here"
        print(f"| {n} | {hogwild(c, n):,.0f} | {split(*cpu)} | {split(*ideal)} | {on_gpu} |")
    print(f"\n{ASSUMED}")


def _act_for(cfg: A3CConfig, seed: int, seconds: float, start: object, out: object) -> None:
    """One process's acting loop, as a worker's but learning nothing: agent steps/s."""
    torch.set_num_threads(1)
    spec = model_spec(cfg, env_spaces(cfg.env, **cfg.env_options()))
    model = spec.build()
    envs = make_vector_env(cfg.env, cfg.envs_per_worker, seed=seed, **cfg.env_options())
    try:
        algo = ALGORITHMS[cfg.algo]
        collector = Collector(envs, model, cfg.n_steps, seed=seed, record=algo.records_behaviour)
        collector.collect()
        start.wait(timeout=START_S)  # type: ignore[attr-defined]
        t0, steps = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            collector.collect()
            steps += cfg.n_steps * cfg.envs_per_worker
        out.put(steps / (time.perf_counter() - t0))  # type: ignore[attr-defined]
    finally:
        envs.close()


def acting_together(cfg: A3CConfig, n: int, seconds: float) -> float:
    """Agent steps/s of ``n`` processes acting at once (no learning): where shared caches,
    memory bandwidth and hyperthreads show, which N x one process assumes away."""
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(n + 1), ctx.Queue()
    procs = [ctx.Process(target=_act_for, args=(cfg, i, seconds, start, out)) for i in range(n)]
    for proc in procs:
        proc.start()
    try:
        start.wait(timeout=START_S)
        return sum(out.get(timeout=seconds + START_S) for _ in procs)
    except (queue.Empty, threading.BrokenBarrierError) as e:
        raise UsageError(f"acting in {n} processes did not finish: {type(e).__name__}") from e
    finally:
        for proc in procs:
            proc.join(timeout=START_S)
            if proc.is_alive():
                proc.kill()


def report_together(cfg: A3CConfig, c: Costs, cores: int, seconds: float) -> None:
    counts = sorted({n for n in (1, 2, cores // 2, cores - 1, cores) if n >= 1})
    print(f"\nActing in N processes at once ({seconds:.0f} s each, no learning):\n")
    print("| processes | agent steps/s | per process | of N x one alone (model) |")
    print("|---|---|---|---|")
    for n in counts:
        rate = acting_together(cfg, n, seconds)
        print(f"| {n} | {rate:,.0f} | {rate / n:,.0f} | {rate / actors(c, n):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="PongNoFrameskip-v4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--together", type=float, default=0.0, metavar="S",
        help="also act in 1 to all-cores processes at once for S seconds each (0: not)",
    )  # fmt: skip
    args = parser.parse_args()
    try:
        if args.rounds < 1:
            raise UsageError(f"--rounds must be at least 1, got {args.rounds}")
        cfg = config_for(args.env)
        cores = len(os.sched_getaffinity(0))
        threads = [t for t in THREADS if t <= cores]
        torch.set_num_threads(1)
        load = os.getloadavg()[0]
        print(f"# python benchmarks/scaling.py --env {args.env} --rounds {args.rounds}")
        print(
            f"# {datetime.date.today()}, {cores} cores, torch {torch.__version__}, load {load:.1f}"
        )
        if load >= 1:
            print("# other work is running: these figures are noisy, those at 2+ threads most")
        costs = measure(cfg, args.rounds, threads)
        report(cfg, costs)
        if args.together > 0:
            report_together(cfg, costs, cores, args.together)
    except UsageError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
