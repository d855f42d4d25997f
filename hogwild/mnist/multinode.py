"""Hogwild! nodes under torchrun: the rounds in which they agree on epoch ends and stops.

Every node runs its own worker generations on its own shards and averages parameters with
the others in :class:`~hogwild.distributed.NodeSync` rounds. Rounds pair up by their order
on each node, so every decision here (epoch over, stop, target reached) is taken from round
totals, which are the same on all nodes. Counters: [samples trained since the last round,
"my epoch is done", "stop"].
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from hogwild.distributed import NodeFailure, NodeSync
from hogwild.errors import UsageError
from hogwild.mnist.config import MnistConfig

log = logging.getLogger(__name__)

# Flags that must be the same on every node of a torchrun job: they decide the shards, the
# schedule and what is trained.
SAME_ON_EVERY_NODE = (
    "mode", "model", "optimizer", "batch_size", "epochs", "lr", "momentum", "lr_decay",
    "seed", "workers", "train_subset", "max_batches_per_epoch", "target_accuracy",
)  # fmt: skip


def params_digest(flat: torch.Tensor) -> str:
    """A short fingerprint of the parameters' exact bits (nodes compare theirs at the end)."""
    return hashlib.sha256(flat.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


class NodeRounds:
    """This node's side of the rounds; joins the torchrun group on construction.

    ``stop_requested`` says whether this node was asked to stop (a signal);
    ``add_samples`` receives the samples the other nodes trained, as each round counts
    them; ``say`` prints a console line.
    """

    def __init__(
        self,
        flat: torch.Tensor,
        cfg: MnistConfig,
        stop_requested: Callable[[], bool],
        add_samples: Callable[[int], None],
        say: Callable[[str], None],
    ) -> None:
        self.flat, self.cfg = flat, cfg
        self.stop_requested, self.add_samples, self.say = stop_requested, add_samples, say
        self.sync = NodeSync(
            flat, num_counters=3, sync_every=cfg.sync_every, timeout=cfg.dist_timeout
        )
        self.rank, self.nodes = self.sync.rank, self.sync.world
        self.unsynced = self._in_round = 0  # local samples not yet / being counted in a round
        self.stop_agreed = self.all_done = False

    def close(self) -> None:
        """Leave the torchrun group."""
        self.sync.close()

    def agree_on_start(self, state: tuple[Any, ...]) -> tuple[Any, ...]:
        """Check that every node got the same training flags; return rank 0's ``state``.

        The weights already came from rank 0 (NodeSync's broadcast); the epoch and sample
        counts of a resumed run come from rank 0 too, so only rank 0 needs the checkpoint
        (another node given ``--resume`` also restores its own workers' optimizer state).
        """
        mine = {k: getattr(self.cfg, k) for k in SAME_ON_EVERY_NODE}
        gathered: list[Any] = [None] * self.nodes
        self._collective(lambda: dist.all_gather_object(gathered, (mine, *state)))
        differ = [k for k in SAME_ON_EVERY_NODE if any(g[0][k] != mine[k] for g in gathered)]
        if differ:
            flags = ", ".join("--" + k.replace("_", "-") for k in differ)
            raise UsageError(f"every node must be given the same {flags} (they differ)")
        return tuple(gathered[0][1:])

    def start_epoch(self) -> None:
        self.all_done = False

    def epoch_over(self, finished: bool) -> bool:
        """True once the round totals say that every node is done, or that some node was
        asked to stop. A node that is done starts its rounds as soon as the last one ends,
        the others every ``--sync-every`` seconds (or at once when they get done), so the
        epoch ends for everyone at the first round after the last node finished."""
        sync = self.sync
        stop = self.stop_requested()
        done = finished and not stop
        if not sync.in_flight and (done or stop or sync.due()):
            self._in_round, self.unsynced = self.unsynced, 0
            sync.start([float(self._in_round), float(done), float(stop)])
        result = sync.poll()
        if result is None:
            return False
        self._count_round(result.totals)
        self.all_done = bool(result.totals[1] >= self.nodes)
        return self.all_done or self.stop_agreed

    def last_round(self) -> bool:
        """The blocking, exact round after the workers stopped: identical models everywhere.
        True if every node finished its shards."""
        self._in_round, self.unsynced = self.unsynced, 0
        result = self.sync.final_round(
            [float(self._in_round), float(self.all_done), float(self.stop_requested())]
        )
        self._count_round(result.totals)
        return self.all_done

    def agree_on_target(self, reached: bool) -> bool:
        """Rank 0's ``--target-accuracy`` verdict (only rank 0 tests), for all, in a
        blocking round in which the others wait while rank 0 tests."""
        # NodeSync has no counters-only round; the parameters are identical on every
        # node here, so they are put back bit for bit after the (exact) average.
        keep = self.flat.clone()
        totals = self.sync.final_round([0.0, float(reached), float(self.stop_requested())]).totals
        self.flat.copy_(keep)
        self._count_round(totals)
        return bool(totals[1] > 0)

    def check_identical(self) -> None:
        """Compare the final parameters of all nodes (they must be the same bits)."""
        digest = params_digest(self.flat)
        digests: list[Any] = [None] * self.nodes
        self._collective(lambda: dist.all_gather_object(digests, digest))
        if len(set(digests)) == 1:
            self.say(f"final parameters identical on all {self.nodes} nodes (sha256 {digest})")
        else:
            log.warning("final parameters differ between nodes: %s", ", ".join(digests))

    def _count_round(self, totals: torch.Tensor) -> None:
        """Add the other nodes' samples; note a stop that some node asked for."""
        others = int(totals[0]) - self._in_round
        self._in_round = 0
        self.add_samples(others)
        if totals[2] > 0 and not self.stop_agreed:
            self.stop_agreed = True
            if not self.stop_requested():
                self.say("another node was asked to stop: stopping")

    def _collective(self, fn: Callable[[], object]) -> None:
        """A collective of the app's own; like NodeSync's, a failure is a NodeFailure."""
        try:
            fn()
        except (RuntimeError, dist.DistBackendError) as e:
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            raise NodeFailure(
                f"node {self.rank}: lost contact with the other nodes ({reason})"
            ) from None
