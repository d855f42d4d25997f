"""Optimizers whose state lives in shared memory and that many processes step lock-free.

Each works on the flat parameter vector of :mod:`hogwild.flat`, so one update is a few
vector ops (a flat Adam step measured ~25 us against ~63 us for ``torch.optim.Adam``
with ``fused=True`` on a 17k-parameter MLP, one thread). The gradient is an argument of
:meth:`SharedOptimizer.step`: what gets applied is exactly that update's gradient, never
a ``.grad`` left over or accumulated from an earlier one.

Step counts are kept per worker (one slot each, written only by its owner) and summed
when needed: exact without a lock, and the sum is what Adam's bias correction uses.
"""

from __future__ import annotations

import math

import torch


class SharedOptimizer:
    """Base class: flat shared parameters, per-worker step counters, shared state tensors."""

    state_names: tuple[str, ...] = ()

    def __init__(self, params: torch.Tensor, lr: float, num_workers: int = 1) -> None:
        if params.dim() != 1:
            raise ValueError("params must be the flat parameter vector (hogwild.flat)")
        if lr <= 0:
            raise ValueError(f"learning rate must be positive, got {lr}")
        self.params = params
        self.lr = lr
        self.steps = torch.zeros(num_workers, dtype=torch.int64)
        self.state = {name: torch.zeros_like(params) for name in self.state_names}
        self._scratch: torch.Tensor | None = None

    def share_memory(self) -> SharedOptimizer:
        self.params.share_memory_()
        self.steps.share_memory_()
        for t in self.state.values():
            t.share_memory_()
        return self

    @property
    def total_steps(self) -> int:
        return int(self.steps.sum())

    def step(self, grad: torch.Tensor, worker: int = 0, lr: float | None = None) -> None:
        """Apply ``grad`` to the shared parameters in place; ``lr`` overrides the base rate."""
        self.steps[worker] += 1
        if self._scratch is None:  # per process: never shared, never pickled with a value
            self._scratch = torch.empty_like(self.params)
        self._update(grad, self.lr if lr is None else lr, self._scratch)

    def _update(self, grad: torch.Tensor, lr: float, scratch: torch.Tensor) -> None:
        raise NotImplementedError

    def hyperparameters(self) -> dict[str, float]:
        return {"lr": self.lr}

    def state_dict(self) -> dict:
        return {
            "type": type(self).__name__,
            "hyperparameters": self.hyperparameters(),
            "steps": self.steps.clone(),
            "state": {k: v.clone() for k, v in self.state.items()},
        }

    def load_state_dict(self, sd: dict) -> None:
        """Restore state in place (keeps the shared storage); the worker count may differ."""
        if sd.get("type") != type(self).__name__:
            raise ValueError(f"optimizer state is for {sd.get('type')}, not {type(self).__name__}")
        for name, t in self.state.items():
            src = sd["state"][name]
            if src.shape != t.shape:
                raise ValueError(
                    f"optimizer state '{name}' has shape {tuple(src.shape)}, "
                    f"expected {tuple(t.shape)}"
                )
            t.copy_(src)
        self.steps.zero_()
        self.steps[0] = int(sd["steps"].sum())

    def __getstate__(self) -> dict:
        d = self.__dict__.copy()
        d["_scratch"] = None
        return d


class SharedAdam(SharedOptimizer):
    """Adam (Kingma & Ba) with shared moments and a shared, exact step count.

    Sequential Adam cannot move a weight by more than :func:`adam_step_bound` times the
    rate; lock-free workers can, when one divides a first moment holding another's
    gradient by a second moment that does not (yet) hold it. While the second moment is
    near zero that step is unbounded: on Pong with 2 workers, 7 of 12 starts exceeded the
    bound in their first 200 steps, 5 by 76-5,000x (46k weights at 293x on step 2), and
    before the clamp 2 of 15 starts collapsed their policy in the first updates. So each
    step is clamped to the bound, which a sequential Adam never exceeds.
    """

    state_names = ("exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: torch.Tensor,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        num_workers: int = 1,
    ) -> None:
        super().__init__(params, lr, num_workers)
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay

    def hyperparameters(self) -> dict[str, float]:
        return {
            "lr": self.lr,
            "beta1": self.betas[0],
            "beta2": self.betas[1],
            "eps": self.eps,
            "weight_decay": self.weight_decay,
        }

    def _update(self, grad: torch.Tensor, lr: float, scratch: torch.Tensor) -> None:
        b1, b2 = self.betas
        t = max(self.total_steps, 1)
        if self.weight_decay:
            grad = grad.add(self.params, alpha=self.weight_decay)
        m, v = self.state["exp_avg"], self.state["exp_avg_sq"]
        m.lerp_(grad, 1 - b1)
        v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        torch.sqrt(v, out=scratch).div_(math.sqrt(1 - b2**t)).add_(self.eps)
        bias1 = 1 - b1**t  # m / bias1 is m_hat: the clamp is on m's scale, the bound's times bias1
        limit = adam_step_bound(b1, b2, t) * bias1
        torch.div(m, scratch, out=scratch).clamp_(-limit, limit)
        self.params.add_(scratch, alpha=-lr / bias1)


def adam_step_bound(beta1: float, beta2: float, t: int) -> float:
    """The most sequential Adam can move a weight at step ``t``, in units of the rate:
    ``|m_hat| / sqrt(v_hat)`` over all gradient sequences (Cauchy-Schwarz on the two
    moving averages; 1 at the first step, ~7.3 for the usual betas later on)."""
    gamma = beta1**2 / beta2
    decay_sum = t if gamma == 1 else (1 - gamma**t) / (1 - gamma)
    second = math.sqrt((1 - beta2**t) / (1 - beta2))
    return (1 - beta1) / (1 - beta1**t) * second * math.sqrt(decay_sum)


class SharedRMSprop(SharedOptimizer):
    """RMSprop as in the A3C paper's shared-statistics variant (no momentum, not centered).

    As :class:`SharedAdam`, each step is clamped to what a sequential RMSprop can move a
    weight (:func:`rmsprop_step_bound`): a worker whose ``+ g**2`` another worker's
    write lost divides its gradient by an average that does not hold it. Milder than
    Adam's race: in 8 starts of A3C on Pong (2 workers, first 300 steps each) one exceeded
    the bound, twice, by 2.0-2.8x on 69-180 weights. The clamp costs one more pass over
    the parameters (~0.1 ms a step on the 680k of the A3C conv net).
    """

    state_names = ("square_avg",)
    initial_square_avg = 0.0
    eps_inside_root = False

    def __init__(
        self,
        params: torch.Tensor,
        lr: float = 7e-4,
        alpha: float = 0.99,
        eps: float = 1e-5,
        num_workers: int = 1,
    ) -> None:
        super().__init__(params, lr, num_workers)
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1), got {alpha}")
        self.alpha, self.eps = alpha, eps
        self.state["square_avg"].fill_(self.initial_square_avg)

    def hyperparameters(self) -> dict[str, float]:
        return {"lr": self.lr, "alpha": self.alpha, "eps": self.eps}

    def _update(self, grad: torch.Tensor, lr: float, scratch: torch.Tensor) -> None:
        sq = self.state["square_avg"]
        sq.mul_(self.alpha).addcmul_(grad, grad, value=1 - self.alpha)
        if self.eps_inside_root:
            torch.add(sq, self.eps, out=scratch).sqrt_()
        else:
            torch.sqrt(sq, out=scratch).add_(self.eps)
        limit = rmsprop_step_bound(self.alpha)
        torch.div(grad, scratch, out=scratch).clamp_(-limit, limit)
        self.params.add_(scratch, alpha=-lr)


def rmsprop_step_bound(alpha: float) -> float:
    """The most sequential RMSprop can move a weight, in units of the rate: the average
    holds at least ``(1 - alpha) * g**2`` once ``g`` is in it, so ``|g| / sqrt(avg)`` is at
    most ``1 / sqrt(1 - alpha)`` (10 for alpha 0.99; reached when the average was 0)."""
    return 1.0 / math.sqrt(1.0 - alpha)


class SharedRMSpropTF(SharedRMSprop):
    """RMSprop as TensorFlow's (OpenAI Baselines' A2C, SB3's ``RMSpropTFLike``): the
    average starts at one and eps goes inside the square root, which bounds the step of
    a weight whose gradients are small; SB3 recommends it for stabler A2C on Atari."""

    initial_square_avg = 1.0
    eps_inside_root = True


class SharedSGD(SharedOptimizer):
    """SGD with (optionally Nesterov-free) heavy-ball momentum, as ``torch.optim.SGD``."""

    state_names = ("momentum_buffer",)

    def __init__(
        self,
        params: torch.Tensor,
        lr: float = 0.01,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        num_workers: int = 1,
    ) -> None:
        super().__init__(params, lr, num_workers)
        self.momentum, self.weight_decay = momentum, weight_decay

    def hyperparameters(self) -> dict[str, float]:
        return {"lr": self.lr, "momentum": self.momentum, "weight_decay": self.weight_decay}

    def _update(self, grad: torch.Tensor, lr: float, scratch: torch.Tensor) -> None:
        if self.weight_decay:
            grad = grad.add(self.params, alpha=self.weight_decay)
        if self.momentum:
            # The buffer starts at zero, so the first step stores the gradient, as in torch.
            grad = self.state["momentum_buffer"].mul_(self.momentum).add_(grad)
        self.params.add_(grad, alpha=-lr)


class SharedAdagrad(SharedOptimizer):
    """Adagrad as ``torch.optim.Adagrad`` (no decay of the rate), its squared sums shared."""

    state_names = ("sum",)

    def __init__(
        self, params: torch.Tensor, lr: float = 0.01, eps: float = 1e-10, num_workers: int = 1
    ) -> None:
        super().__init__(params, lr, num_workers)
        self.eps = eps

    def hyperparameters(self) -> dict[str, float]:
        return {"lr": self.lr, "eps": self.eps}

    def _update(self, grad: torch.Tensor, lr: float, scratch: torch.Tensor) -> None:
        total = self.state["sum"]
        total.addcmul_(grad, grad)
        torch.sqrt(total, out=scratch).add_(self.eps)
        self.params.addcdiv_(grad, scratch, value=-lr)


OPTIMIZERS: dict[str, type[SharedOptimizer]] = {
    "adagrad": SharedAdagrad,
    "adam": SharedAdam,
    "rmsprop": SharedRMSprop,
    "rmsprop_tf": SharedRMSpropTF,
    "sgd": SharedSGD,
}
