"""A node for tests/test_distributed.py: NodeSync with a busy "worker", in a process that
has torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) set.

Each node starts from different parameters (rank 0's win via the initial broadcast), a
background thread keeps changing them in place like a Hogwild! worker would, a few
asynchronous rounds run, then a final exact round; each node saves what it ended with.
"""

from __future__ import annotations

import sys
import threading
import time

import torch

from hogwild.distributed import NodeSync


def main(out_dir: str, rounds: int, seed: int) -> None:
    params = torch.full((1000,), 0.0)
    params.normal_(generator=torch.Generator().manual_seed(1234 + seed))
    sync = NodeSync(params, num_counters=2, sync_every=0.05, timeout=20)
    after_broadcast = params.clone()
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            params.add_(1e-3)
            time.sleep(0.001)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    done = 0
    while done < rounds:
        if sync.due():
            sync.start([1.0, float(sync.rank)])
        result = sync.poll()
        if result is not None:
            assert result.totals[0] == sync.world
            done += 1
        time.sleep(0.005)
    stop.set()
    thread.join()
    final = sync.final_round([0.0, 0.0])
    torch.save(
        {"broadcast": after_broadcast, "final": params.clone(), "rounds": final.rounds},
        f"{out_dir}/node{sync.rank}.pt",
    )
    sync.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
