"""The check that a run at layer or chunk granularity gave the op-level run's timeline
(:mod:`sim.engine.block_check`, ``simulate(..., check_coarse=True)``).

Soundness is what matters: wherever the check finds nothing, the coarse run's iteration time
is the op run's up to the order of floating-point additions. Measured on these variants and on
the dev set's 127 cases, such runs agree to 5e-13 relative; 1e-9 leaves room for sums of
~1e6 durations (n x eps ~ 1e-10) and is still four orders below the smallest real difference
seen (1.6e-7: pipeline sends beside TP collectives on a GB200 NVLink domain).
"""

from __future__ import annotations

import pytest

from sim.config import load_topology, load_workload
from sim.costs.analytical import AnalyticalCostModel
from sim.engine import Simulation
from sim.engine.block_check import _meet, _structure, block_interference
from sim.program import Block
from sim.runner import simulate
from sim.topology.routing import Fabric
from sim.types import CollectiveKind, CommClass, OpKind, ScheduleKind, Stream
from sim.workload.ops import CommOp, MemoryOp
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload

EXACT = 1e-9

TINY = {
    "tiny": [],
    "sequence-parallel": ["parallel.sequence_parallel=true"],
    "tp-comm-overlap": ["parallel.sequence_parallel=true", "parallel.tp_comm_overlap=true"],
    "full-recompute": ["parallel.recompute=full"],
    "block-recompute": ["parallel.recompute=full", "parallel.recompute_num_layers=1"],
    "zb-h1": ["parallel.schedule=zb-h1"],
    "dp4": ["parallel.pp=1", "parallel.dp=4"],
    "context-parallel": ["parallel.cp=2", "parallel.dp=1"],
    "interleaved": ["parallel.schedule=interleaved-1f1b", "parallel.virtual_pipeline_stages=2"],
    "zero3": ["parallel.zero_stage=3"],
}
"""``tiny`` on a DGX A100, with each feature that changes what a layer pass holds."""

SMALL = {
    "tp-pp-dp": dict(tp=2, pp=2, dp=2, gbs=8),
    "fsdp-alone": dict(dp=4, gbs=8, zero=3),
    "moe-ep": dict(pp=2, dp=4, gbs=8, experts=8, ep=4),
    "moe-tp-ep-shared": dict(tp=2, pp=2, dp=2, gbs=8, sp=True, experts=4, ep=2, shared=1),
    "tp2-dp4-one-node": dict(tp=2, dp=4, gbs=8),
    "no-grad-overlap": dict(tp=2, pp=2, dp=2, gbs=8, overlap=False),
}
"""Small models of ``tests.conftest.make_workload`` (mixtures of experts among them)."""


def _variants():
    for name, sets in TINY.items():
        yield name, load_workload("tiny", sets)
    for name, kw in SMALL.items():
        yield name, make_workload(**kw)


@pytest.fixture(scope="module")
def outcomes():
    """Per variant and coarse granularity: the check's verdict (``exact=True``) and the
    relative difference of the coarse run's iteration time from the op run's."""
    topo = load_topology("dgx-a100")
    out = {}
    for name, w in _variants():
        op = simulate(w, topo).result.makespan_s
        for g in ("layer", "chunk"):
            coarse = simulate(w, topo, granularity=g).result.makespan_s
            run = simulate(w, topo, granularity=g, exact=True)
            if run.coarse_divergence is None:
                assert run.granularity == g and run.result.makespan_s == coarse
            else:
                assert run.granularity == "op" and run.result.makespan_s == op
            out[(name, g)] = (run.coarse_divergence, abs(coarse / op - 1.0))
    return out


def test_where_the_check_finds_nothing_the_op_run_agrees(outcomes):
    for key, (why, diff) in outcomes.items():
        if why is None:
            assert diff < EXACT, key


def test_the_check_is_not_vacuous(outcomes):
    """Some variants pass (the coarse run is used) and some coarse runs really differ from the
    op run, each of them flagged (the test above would fail otherwise)."""
    assert sum(why is None for why, _ in outcomes.values()) >= len(outcomes) // 2
    differing = [key for key, (_, diff) in outcomes.items() if diff > EXACT]
    assert differing
    assert all(outcomes[k][0] is not None for k in differing)


def test_pipeline_sends_beside_tp_collectives_are_found(outcomes):
    """tiny's interleaved schedule sends activations over the NVSwitch ports its TP
    all-reduces use (tests/unit/test_granularity.py measures 0.22% at layer granularity)."""
    why, diff = outcomes[("interleaved", "layer")]
    assert diff > EXACT
    assert "shares a link" in why


def test_an_op_run_is_never_flagged():
    run = simulate(load_workload("tiny"), load_topology("dgx-a100"), exact=True)
    assert run.granularity == "op" and run.coarse_divergence is None


def test_a_run_that_meets_early_is_cut_short(monkeypatch):
    """The watch looks while the run is a tenth of the way through and stops it there; the op
    run replaces it."""
    import sim.engine.block_check as bc

    looks = []
    real = bc.block_interference

    def spy(sim):
        done = sum(f is not None for f in sim.finish)
        looks.append((done, len(sim.finish)))
        return real(sim)

    monkeypatch.setattr(bc, "block_interference", spy)
    w = load_workload("tiny", TINY["interleaved"])
    run = simulate(w, load_topology("dgx-a100"), granularity="chunk", exact=True)
    assert run.granularity == "op" and "shares a link" in run.coarse_divergence
    assert len(looks) == 1 and 0 < looks[0][0] < looks[0][1]   # once, part of the way
    assert "chunk set aside" in run.notes[-1]


def _engine(w, granularity="layer", representative=True):
    topo = load_topology("dgx-a100")
    fabric = Fabric.of(topo, w.system.num_gpus, None)
    prog = build_program(w, representative, node_of=fabric.node_of, local_gpu_of=fabric.local_gpu,
                         granularity=granularity)
    sim = Simulation(prog, AnalyticalCostModel(w.system.gpu, fabric, representative=representative,
                                               simulated=frozenset(r.rank for r in prog.ranks) if representative
                                               else None), fabric.capacity_bytes_per_s)
    sim.run()
    return sim


def test_a_run_of_every_rank_is_flagged():
    w = load_workload("tiny")
    assert block_interference(_engine(w)) is None
    assert "every rank" in block_interference(_engine(w, representative=False))


def test_a_block_waiting_early_is_flagged():
    sim = _engine(load_workload("tiny"))
    assert block_interference(sim) is None
    sim.program.early_block_waits = 1
    assert "waits at its start" in block_interference(sim)


def test_the_builder_counts_no_early_waits_where_passes_wait_inside():
    for name, w in _variants():
        for g in ("layer", "chunk"):
            assert build_program(w, granularity=g).early_block_waits == 0, (name, g)


def test_a_kernel_beside_a_block_that_waits_on_its_collectives_is_flagged():
    """TP 8 in a node, data parallelism across nodes: the gradient all-reduce's kernel runs
    beside backward blocks whose TP all-reduces are exposed, on no link of theirs. The op run
    slows each compute op beside it, the block its compute share (the dev set's
    torchtitan_h100_t4 cases differ by 5.6e-4 and 1.0e-3 for it: tests/test_validation.py)."""
    w = make_workload(tp=8, dp=2, gbs=4, layers=8, hidden=4096, heads=32)
    assert "holds SMs" in block_interference(_engine(w))


def _links(table):
    return lambda op: table[op]


def test_structure_flags_a_collective_no_compute_of_the_block_waits_for():
    c = MemoryOp(OpKind.NORM, 1.0)
    ar = CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, (0, 1), 8.0)
    links = _links({ar: frozenset({1})})
    waited = Block((c, ar, c), (None, Stream.TP_COMM, None), (0, 0, 0))
    assert _structure(waited, links) is None
    trailing = Block((c, ar, c), (None, Stream.TP_COMM, None), (0, 1, 0))   # the 2nd compute op after it: none
    assert "outlives" in _structure(trailing, links)


def test_structure_flags_collectives_of_two_streams_on_one_link():
    c = MemoryOp(OpKind.NORM, 1.0)
    tp = CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, (0, 1), 8.0)
    cp = CommOp(CollectiveKind.SEND_RECV, CommClass.CP, (0, 1), 8.0)
    steps = (c, tp, cp, c), (None, Stream.TP_COMM, Stream.CP_COMM, None), (0, 0, 0, 0)
    assert _structure(Block(*steps), _links({tp: frozenset({1}), cp: frozenset({2})})) is None
    assert "two streams" in _structure(Block(*steps), _links({tp: frozenset({1, 3}), cp: frozenset({3})}))


@pytest.mark.parametrize("a,b,met", [
    ([(0.0, 1.0)], [(1.0, 2.0)], False),              # touching ends do not meet
    ([(0.0, 1.0)], [(0.5, 2.0)], True),
    ([(3.0, 4.0)], [(0.0, 1.0), (1.0, 2.5)], False),  # after the union of b
    ([(1.2, 1.3)], [(0.0, 1.0), (1.0, 2.5)], True),
    ([(2.0, 3.0)], [(0.0, 10.0), (1.0, 1.5)], True),  # inside an interval that a later one starts in
    ([(5.0, 6.0), (11.0, 12.0)], [(0.0, 4.0), (6.0, 11.0)], False),
    ([], [(0.0, 1.0)], False),
])
def test_meet(a, b, met):
    assert _meet(a, b) is met


def test_zb_h1_and_moe_variants_are_covered():
    names = {n for n, _ in _variants()}
    assert {"zb-h1", "moe-ep", "moe-tp-ep-shared", "context-parallel", "tp-comm-overlap", "zero3"} <= names
    assert load_workload("tiny", TINY["zb-h1"]).parallel.schedule is ScheduleKind.ZB_H1
