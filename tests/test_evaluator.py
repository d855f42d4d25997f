"""hogwild.evaluator's snapshots: each score comes back with exactly the parameters and
buffers it was offered, and the snapshots waiting for a slot are bounded."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as tmp
from engine_helpers import (
    build_probe_with_buffers,
    child_pids,
    collect_scores,
    score_probe_buffers,
    wait_for,
)

from hogwild.evaluator import Evaluator
from hogwild.flat import flatten_buffers, flatten_parameters

pytestmark = pytest.mark.usefixtures("hang_guard")


@pytest.fixture
def evaluator():
    before = child_pids()
    made: list[Evaluator] = []

    def make(numel: int, buffers_numel: int) -> Evaluator:
        ev = Evaluator(
            build_probe_with_buffers,
            score_probe_buffers,
            numel,
            buffers_numel=buffers_numel,
            device="cpu",
            seed=0,
            slots=2,
        )
        made.append(ev)
        return ev

    yield make
    for ev in made:
        ev.stop(timeout=5)
    assert tmp.active_children() == []
    assert wait_for(lambda: not (child_pids() - before), 2.0), child_pids() - before


def test_evaluator_keeps_exactly_the_snapshot_it_sent(evaluator):
    model = build_probe_with_buffers()
    params, buffers = flatten_parameters(model), flatten_buffers(model)
    assert buffers.numel() == 8
    ev = evaluator(params.numel(), buffers.numel())
    params.copy_(torch.randn(params.numel()))
    buffers.copy_(torch.arange(8.0))
    offered = {"params": params.clone(), "buffers": buffers.clone()}
    assert ev.offer(params, 7, buffers, keep=lambda: {"note": "kept"}) is True
    # The live vectors go on changing (workers keep writing them) before any score.
    params.add_(1000.0)
    buffers.mul_(-1.0)

    ev.start()
    scores = collect_scores(ev, lambda s: bool(s), "a score")
    [(step, metrics, snapshot)] = scores
    assert step == 7
    assert snapshot.step == 7 and snapshot.kept == {"note": "kept"}
    assert torch.equal(snapshot.params, offered["params"])
    assert torch.equal(snapshot.buffers, offered["buffers"])
    assert snapshot.params.data_ptr() != params.data_ptr()
    # ...and what the evaluator scored was that same snapshot, buffers included.
    assert metrics["shift_sum"] == float(offered["buffers"][:4].sum()) == 6.0
    assert metrics["scale_first"] == 4.0
    assert metrics["param_sum"] == pytest.approx(float(offered["params"].sum()), abs=1e-5)
    assert not ev.snapshots  # handed over, not kept


def test_evaluator_snapshot_history_is_bounded():
    ev = Evaluator(build_probe_with_buffers, score_probe_buffers, 10, buffers_numel=8, device="cpu")
    try:
        # Never started: every offer beyond the free slots is refused, nothing is kept.
        called: list[int] = []
        sent = [
            ev.offer(
                torch.full((10,), float(i)), i, torch.zeros(8), keep=lambda i=i: called.append(i)
            )
            for i in range(4)
        ]
        assert sent == [True, True, False, False]
        assert called == [0, 1]  # what is kept is made only for a snapshot that is sent
        assert [s.step for s in ev.snapshots.values()] == [0, 1]
        assert list(ev.snapshots.values())[1].params.tolist() == [1.0] * 10
        assert not list(ev.snapshots.values())[0].buffers.any()
    finally:
        ev.stop(timeout=5)


def test_two_offers_at_one_step_each_meet_their_own_score(evaluator):
    """Two snapshots offered at the same step (no telemetry in between, or a resume) are
    two evaluations: each score comes back with exactly the parameters it scored."""
    model = build_probe_with_buffers()
    params, buffers = flatten_parameters(model), flatten_buffers(model)
    ev = evaluator(params.numel(), buffers.numel())
    first, second = torch.randn(params.numel()), torch.randn(params.numel())
    assert ev.offer(first, 5, buffers, keep=lambda: "first") is True
    assert ev.offer(second, 5, buffers, keep=lambda: "second") is True
    ev.start()
    scores = collect_scores(ev, lambda s: len(s) >= 2, "two scores")
    assert [step for step, _, _ in scores] == [5, 5]
    for _, metrics, snapshot in scores:
        assert snapshot is not None
        sent = {"first": first, "second": second}[snapshot.kept]
        assert torch.equal(snapshot.params, sent)
        assert metrics["param_sum"] == pytest.approx(float(sent.sum()), abs=1e-4)
