"""Compute beside communication kernels (sim/engine/contention.py): a collective's NCCL kernel
holds a fraction ``f`` of its GPU's SMs, and compute meanwhile runs at ``1 - f``.

Hand-built programs check the arithmetic on both of the engine's paths (a collective placed at
its solo time, and one that runs as flows on the clock); whole workloads check that holding no
SMs leaves every span where it was, on the eager path and on the clock-driven one alike.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import sim.runner as runner
from sim.config import load_topology, load_workload
from sim.costs.analytical import AnalyticalCostModel
from sim.costs.base import CommPlan, FixedCostModel, Flow, Phase
from sim.costs.comm import CTAS_IN_DOMAIN, nccl_ctas
from sim.engine import ReferencePaths, Simulation
from sim.engine.contention import HeldSMs
from sim.hardware import get_gpu
from sim.output.report import format_report, make_report
from sim.program import Program, Task
from sim.results import RankInfo
from sim.runner import simulate
from sim.topology.build import build_topology
from sim.topology.routing import Fabric
from sim.types import CollectiveKind, CommClass, Dtype, OpKind, Stream
from sim.workload.ops import AttentionOp, CommOp, GemmOp, MemoryOp
from sim.workload.taskgraph import build_program
from tests.unit.test_granularity import CASES, FIXED, _workload


def _spans(result):
    return [(s.rank, s.stream, s.name, s.start_s, s.end_s) for s in result.spans]


# -- the held fraction over time ---------------------------------------------------------------
def test_held_sms_stretch_what_runs_beside_them_and_nothing_else():
    h = HeldSMs()
    h.hold(1.0, 6.0, 0.2)
    assert h.end_s(0.0, 0.5) == 0.5                      # before the kernel: its solo time
    assert h.end_s(1.0, 2.0) == pytest.approx(1.0 + 2.0 / 0.8, rel=1e-15)   # inside it: / (1 - f)
    assert h.end_s(3.5, 6.0) == pytest.approx(6.0 + (6.0 - 2.5 * 0.8), rel=1e-15)  # 2.5 s beside it
    assert h.end_s(7.0, 1.25) == 7.0 + 1.25              # after it: bit for bit
    two = HeldSMs()
    two.hold(0.0, 10.0, 0.2)
    two.hold(0.0, 10.0, 0.3)
    assert two.end_s(0.0, 1.0) == pytest.approx(2.0)     # kernels together hold what they add up to
    assert two.end_s(1.0, 1.0, sensitivity=0.5) == pytest.approx(1.0 + 1.0 / 0.75)  # a block's compute share


# -- hand-built programs -----------------------------------------------------------------------
class _FlowCosts(FixedCostModel):
    """Comm as one flow of ``size`` bytes over link 0 (1 B/s): it runs on the flow network."""

    def comm_plan(self, op):
        return CommPlan((Phase(0.0, (Flow(0, 1, op.size_bytes, (0,), (1.0,)),)),), "test",
                        self.comm_sm_fraction)


def _program(g2_op, flows: bool) -> Program:
    """Rank 0: ``norm`` (1 s), then ``g2`` beside a 5 s collective issued after ``norm``, then
    ``g3`` (1 s) once the collective is done. With ``flows``, a second collective on another
    stream shares the collective's link, so the engine runs both as flows on the clock."""
    tp = CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, (0,), 5.0)
    dp = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, (0,), 1.0)
    norm, g3 = MemoryOp(OpKind.NORM, 1.0), GemmOp(8, 8, 8, Dtype.BF16)
    c = Stream.COMPUTE
    spec = [("norm", c, norm, False, []), ("coll", Stream.TP_COMM, tp, True, [0]), ("g2", c, g2_op, False, []),
            ("g3", c, g3, False, [1])]
    if flows:
        spec.append(("dp", Stream.DP_COMM, dp, True, [3]))
    tasks, streams, members = [], {}, {}
    for i, (name, stream, op, comm, deps) in enumerate(spec):
        key = i if comm else -1
        if comm:
            members[key] = 1
        tasks.append(Task(i, 0, stream, name, op, op.kind, comm, deps, (), key))
        streams.setdefault((0, stream), []).append(i)
    return Program(tasks, streams, [RankInfo(0, 0, 0, 0, 0, 0)], members, {}, 1, False)


@pytest.mark.parametrize("flows", [False, True], ids=["solo-time", "flows"])
@pytest.mark.parametrize("fraction", [0.0, 0.2, 0.5])
def test_a_gemm_beside_a_collective_stretches_by_one_over_one_minus_the_fraction(flows, fraction):
    model = _FlowCosts if flows else FixedCostModel
    # norm 1 s; the GEMM g2 1 s (all of it beside the 5 s collective), g3 1 s after it
    costs = model({OpKind.NORM: 1.0, OpKind.GEMM: 1.0}, comm_s=5.0, comm_sm_fraction=fraction)
    res = Simulation(_program(GemmOp(4, 4, 4, Dtype.BF16), flows), costs, [1.0] if flows else []).run()
    span = {s.name: s for s in res.spans}
    assert span["coll"].start_s == 1.0 and span["coll"].end_s == 6.0
    assert span["g2"].start_s == 1.0
    assert span["g2"].end_s == pytest.approx(1.0 + 1.0 / (1.0 - fraction), rel=1e-15)
    # not beside any collective: exactly its own time
    assert span["norm"].end_s == 1.0
    assert span["g3"].start_s == 6.0 and span["g3"].end_s == 7.0


@pytest.mark.parametrize("flows", [False, True], ids=["solo-time", "flows"])
def test_a_gemm_longer_than_the_collective_is_slowed_only_while_it_runs(flows):
    model = _FlowCosts if flows else FixedCostModel
    costs = model({OpKind.NORM: 1.0, OpKind.ATTENTION: 6.0, OpKind.GEMM: 1.0}, comm_s=5.0, comm_sm_fraction=0.2)
    res = Simulation(_program(AttentionOp(1, 1, 1, 64, 64, True, False), flows), costs, [1.0] if flows else []).run()
    span = {s.name: s for s in res.spans}
    # 5 s beside the collective do 4 s of its 6 s of work; the last 2 s at full rate
    assert span["g2"].end_s == pytest.approx(8.0, rel=1e-15)
    assert span["g3"].start_s == pytest.approx(8.0, rel=1e-15)


# -- whole workloads ---------------------------------------------------------------------------
@pytest.mark.parametrize("representative", [True, False], ids=["representative", "full"])
@pytest.mark.parametrize("case", ["tp-pp-dp", "sequence-parallel", "interleaved", "zero3-fsdp", "moe-tp-ep-shared"])
def test_holding_no_sms_the_clock_driven_path_gives_the_eager_timeline(case, representative, monkeypatch):
    """Every comm stream treated as one whose kernels hold SMs (at a fraction of 0): compute
    that might meet a kernel waits for the clock, and must land exactly where the eager
    placement puts it."""
    w = _workload(CASES[case])
    eager = Simulation(build_program(w, representative), FIXED).run()
    clock = Simulation(build_program(w, representative), FIXED, reference=ReferencePaths(all_contend=True)).run()
    assert _spans(clock) == _spans(eager) and clock.makespan_s == eager.makespan_s


@pytest.mark.parametrize("representative", [True, False], ids=["representative", "full"])
@pytest.mark.parametrize("case", ["tp-pp-dp", "sequence-parallel", "tp-comm-overlap", "interleaved", "zb-h1",
                                  "zero3-fsdp", "context-parallel", "moe-tp-ep-shared"])
def test_compute_placed_ahead_of_the_clock_lands_where_the_clock_puts_it(case, representative, monkeypatch):
    """With kernels holding SMs, the engine places a compute op ahead of the clock only when no
    kernel it does not know yet can start before the op ends. The reference runs every such op
    on the clock (its end re-computed at every kernel's start and end): the same timeline."""
    costs = dataclasses.replace(FIXED, comm_sm_fraction=0.2)
    w = _workload(CASES[case])
    eager = Simulation(build_program(w, representative), costs).run()
    clock = Simulation(build_program(w, representative), costs, reference=ReferencePaths(compute_on_clock=True)).run()
    assert _spans(eager) == _spans(clock)
    assert eager.events < clock.events


@pytest.mark.parametrize("full", [False, True], ids=["representative", "full"])
@pytest.mark.parametrize("sets", [["parallel.sequence_parallel=true"], ["parallel.zero_stage=3"],
                                  ["parallel.schedule=interleaved-1f1b", "parallel.virtual_pipeline_stages=2"],
                                  ["parallel.cp=2", "parallel.dp=1"]])
def test_analytical_runs_place_compute_as_the_clock_would(sets, full, monkeypatch):
    """The same with NCCL's fractions of an A100's SMs, collectives running as flows."""
    w, topo = load_workload("tiny", sets), load_topology("dgx-a100")
    # collectives whose links other streams cross run as flows in both (where one is placed at
    # its solo time depends on what is placed ahead of the clock: a rounding apart, tested below)
    eager = simulate(w, topo, full=full, reference=ReferencePaths(shared_comm_on_clock=True)).result
    clock = simulate(w, topo, full=full,
                     reference=ReferencePaths(shared_comm_on_clock=True, compute_on_clock=True)).result
    assert _spans(eager) == _spans(clock)


@pytest.mark.parametrize("sets", [["parallel.sequence_parallel=true"], ["parallel.zero_stage=3"],
                                  ["parallel.schedule=interleaved-1f1b", "parallel.virtual_pipeline_stages=2"]])
def test_holding_no_sms_analytical_runs_are_unchanged(sets, monkeypatch):
    """The analytical model with the GPU's SM count unknown (no fraction held) on both paths:
    collectives here run as flows on the clock, and the spans do not move."""
    w = load_workload("tiny", sets)
    w = dataclasses.replace(w, system=dataclasses.replace(w.system, gpu=dataclasses.replace(w.system.gpu,
                                                                                           sm_count=0)))
    topo = load_topology("dgx-a100")
    eager = simulate(w, topo, full=True).result
    clock = simulate(w, topo, full=True, reference=ReferencePaths(all_contend=True)).result
    assert _spans(clock) == _spans(eager)


def test_collectives_slow_the_compute_beside_them_deterministically():
    w, topo = load_workload("tiny", ["parallel.sequence_parallel=true"]), load_topology("dgx-a100")
    off = dataclasses.replace(w, system=dataclasses.replace(w.system, gpu=dataclasses.replace(w.system.gpu,
                                                                                             sm_count=0)))
    runs = [make_report(simulate(w, topo)).to_dict() for _ in range(2)]
    assert json.dumps(runs[0]) == json.dumps(runs[1])
    base = make_report(simulate(off, topo))
    assert runs[0]["iteration_time_s"] > base.iteration_time_s
    assert runs[0]["compute_s"]["gemm"] > base.compute_s["gemm"]


def test_an_nccl_ring_in_a_dgx_a100_holds_24_of_its_108_sms():
    fab = Fabric(build_topology(load_topology("dgx-a100"), 16))
    costs = AnalyticalCostModel(get_gpu("A100"), fab)
    tp = CommOp(CollectiveKind.REDUCE_SCATTER, CommClass.TP, tuple(range(8)), 2**27)
    assert costs.comm_plan(tp).sm_fraction == CTAS_IN_DOMAIN / 108
    # one GPU per node: one NIC's two channels; a pipeline send: not counted
    dp = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, (0, 8), 2**27)
    pp = CommOp(CollectiveKind.SEND_RECV, CommClass.PP, (0, 8), 2**27)
    assert costs.comm_plan(dp).sm_fraction == 2 / 108 and costs.comm_plan(pp).sm_fraction == 0.0
    assert nccl_ctas(fab, CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, tuple(range(16)), 2**27),
                     costs.comm_plan(CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, tuple(range(16)),
                                            2**27)).algorithm) == 16


@pytest.mark.parametrize("case", list(CASES))
def test_layer_and_chunk_blocks_slow_as_the_op_run_does(case):
    """Under fixed costs with collectives holding a fifth of the SMs, a layer or chunk block
    (its compute slowed by its own collectives, and by those outside it in proportion to its
    compute share) gives the op run's timeline, except where a collective outside the block
    meets only part of it: FSDP's gathers beside a layer pass, under ZB-H1 a collective that
    ends one pass, which the op run overlaps with the next pass's first ops, and under the
    interleaved schedule a pipeline receive posted a pass ahead, which runs beside part of the
    pass in between."""
    costs = dataclasses.replace(FIXED, comm_sm_fraction=0.2)
    w = _workload(CASES[case])
    op = Simulation(build_program(w), costs).run().makespan_s
    tol = 2e-3 if case in ("zero3-fsdp", "zb-h1", "interleaved") else 1e-12
    for granularity in ("layer", "chunk"):
        blocks = Simulation(build_program(w, granularity=granularity), costs).run().makespan_s
        assert blocks == pytest.approx(op, rel=tol)
    # not vacuous: with TP, the backward's collectives run beside GEMMs and lengthen the run
    if w.parallel.tp > 1:
        assert op > Simulation(build_program(w), FIXED).run().makespan_s


# -- comm kernels beside an idle compute stream ------------------------------------------------
def _next_compute(prog, task):
    """The first compute task after ``task`` (by id) on its rank's compute stream."""
    ids = prog.streams[(task.rank, Stream.COMPUTE)]
    return next((prog.tasks[i] for i in ids if i > task.id), None)


@pytest.mark.parametrize("case", ["tp-pp-dp", "sequence-parallel", "tp-comm-overlap", "interleaved", "zb-h1",
                                  "zero3-fsdp", "context-parallel", "moe-tp-ep-shared"])
def test_a_comm_task_marked_alone_runs_while_its_gpu_computes_nothing(case):
    """``Task.alone``: the compute op issued before it is among its dependencies and the next
    compute op of its rank waits for it, so no compute op can run beside its kernel."""
    prog = build_program(_workload(CASES[case]), False)
    alone = [t for t in prog.tasks if t.alone]
    assert all(t.comm for t in alone)
    for t in alone:
        before = [i for i in prog.streams[(t.rank, Stream.COMPUTE)] if i < t.id]
        assert not before or before[-1] in t.deps
        nxt = _next_compute(prog, t)
        assert nxt is None or t.id in nxt.deps
    if case in ("sequence-parallel", "tp-pp-dp"):
        assert alone  # the forward's TP collectives


@pytest.mark.parametrize("representative", [True, False], ids=["representative", "full"])
@pytest.mark.parametrize("case", ["tp-pp-dp", "sequence-parallel", "tp-comm-overlap", "interleaved", "zb-h1",
                                  "zero3-fsdp", "context-parallel", "moe-tp-ep-shared"])
def test_the_sms_of_comm_kernels_marked_alone_would_slow_nothing(case, representative):
    """The engine does not count the SMs an ``alone`` comm task's kernel holds. Counted (every
    task's mark cleared), the timeline is the same to the last bit."""
    costs = dataclasses.replace(FIXED, comm_sm_fraction=0.2)
    w = _workload(CASES[case])
    skipped = Simulation(build_program(w, representative), costs).run()
    prog = build_program(w, representative)
    marked = sum(t.alone for t in prog.tasks)
    for t in prog.tasks:
        t.alone = False
    counted = Simulation(prog, costs).run()
    assert _spans(skipped) == _spans(counted) and skipped.makespan_s == counted.makespan_s
    if case == "sequence-parallel":
        assert marked


@pytest.mark.parametrize("full", [False, True], ids=["representative", "full"])
def test_analytical_runs_are_the_same_counting_the_sms_of_alone_kernels(full, monkeypatch):
    """The same with NCCL's fractions of an A100's SMs, collectives running as flows."""
    w, topo = load_workload("tiny", ["parallel.sequence_parallel=true"]), load_topology("dgx-a100")
    shared = ReferencePaths(shared_comm_on_clock=True)  # as in the test above
    skipped = simulate(w, topo, full=full, reference=shared).result
    build = runner.build_program
    cleared = []

    def unmarked(*args, **kwargs):
        prog = build(*args, **kwargs)
        cleared.extend(t for t in prog.tasks if t.alone)
        for t in cleared:
            t.alone = False
        return prog

    monkeypatch.setattr(runner, "build_program", unmarked)
    counted = simulate(w, topo, full=full, reference=shared).result
    assert cleared and _spans(skipped) == _spans(counted)


# -- collectives alone on links other streams cross --------------------------------------------
def _sharing(dp_dep: int, dp_after_s: float, g2_waits: bool = True) -> Program:
    """Rank 0: ``norm`` (1 s), a 5-byte collective on link 0 (1 B/s) after it, ``g2`` and ``g3``
    (1 s each), the first waiting for it (or ``g3``, if not ``g2_waits``), then ``late``
    (``dp_after_s``); a 1-byte collective on another stream crosses link 0 after task
    ``dp_dep``."""
    tp = CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, (0,), 5.0)
    dp = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, (0,), 1.0)
    c = Stream.COMPUTE
    spec = [("norm", c, MemoryOp(OpKind.NORM, 1.0), False, []), ("coll", Stream.TP_COMM, tp, True, [0]),
            ("g2", c, GemmOp(4, 4, 4, Dtype.BF16), False, [1] if g2_waits else []),
            ("g3", c, GemmOp(8, 8, 8, Dtype.BF16), False, [] if g2_waits else [1]),
            ("late", c, AttentionOp(1, 1, 1, 64, 64, True, False), False, []),
            ("dp", Stream.DP_COMM, dp, True, [dp_dep])]
    tasks, streams, members = [], {}, {}
    for i, (name, stream, op, comm, deps) in enumerate(spec):
        if comm:
            members[i] = 1
        tasks.append(Task(i, 0, stream, name, op, op.kind, comm, deps, (), i if comm else -1))
        streams.setdefault((0, stream), []).append(i)
    return Program(tasks, streams, [RankInfo(0, 0, 0, 0, 0, 0)], members, {}, 1, False)


def _sharing_costs(late_s: float) -> _FlowCosts:
    return _FlowCosts({OpKind.NORM: 1.0, OpKind.GEMM: 1.0, OpKind.ATTENTION: late_s}, comm_s=0.0)


def test_a_collective_no_other_transfer_can_meet_takes_its_solo_time_without_the_clock(monkeypatch):
    """The DP collective waits for ``late``, which cannot end before 1 + 5 + 1 + 1 + 10 s: the
    TP collective is alone on link 0 (5 s), placed like a compute op; the same spans as when it
    runs as a flow on the clock, with fewer engine events."""
    solo = Simulation(_sharing(4, 10.0), _sharing_costs(10.0), [1.0]).run()
    flows = Simulation(_sharing(4, 10.0), _sharing_costs(10.0), [1.0],
                       reference=ReferencePaths(shared_comm_on_clock=True)).run()
    span = {x.name: x for x in solo.spans}
    assert (span["coll"].start_s, span["coll"].end_s) == (1.0, 6.0)
    assert (span["dp"].start_s, span["dp"].end_s) == (18.0, 19.0)
    assert _spans(solo) == _spans(flows)
    assert solo.events < flows.events


@pytest.mark.parametrize("dp_dep, g2_waits", [(0, True), (2, False), (2, True)],
                         ids=["starts-with-it", "starts-beside-it", "starts-after-it"])
def test_a_collective_another_transfer_may_meet_shares_the_link(dp_dep, g2_waits):
    """The DP collective may start on link 0 while the TP one runs (after ``norm`` at 1 s, or
    after ``g2``, which runs beside it or after it): where they meet, both run as flows and
    share the link."""
    res = Simulation(_sharing(dp_dep, 10.0, g2_waits), _sharing_costs(10.0), [1.0]).run()
    span = {x.name: x for x in res.spans}
    if dp_dep == 0:  # both from t=1 at 0.5 B/s: DP's byte done at 3, TP's last 4 bytes at 1 B/s
        assert span["dp"].end_s == pytest.approx(3.0) and span["coll"].end_s == pytest.approx(7.0)
    elif not g2_waits:  # DP from t=2 (g2 beside TP): TP alone 1 s (1 byte), then both at 0.5 B/s
        assert span["dp"].start_s == 2.0
        assert span["dp"].end_s == pytest.approx(4.0) and span["coll"].end_s == pytest.approx(7.0)
    else:  # g2 waits for the TP collective, so DP starts after it: no overlap, both at full rate
        assert span["coll"].end_s == 6.0 and span["dp"].start_s == 7.0 and span["dp"].end_s == 8.0


@pytest.mark.parametrize("full", [False, True], ids=["representative", "full"])
@pytest.mark.parametrize("sets", [["parallel.sequence_parallel=true"], ["parallel.zero_stage=3"],
                                  ["parallel.schedule=interleaved-1f1b", "parallel.virtual_pipeline_stages=2"],
                                  ["parallel.cp=2", "parallel.dp=1"], ["parallel.tp=1", "parallel.dp=4"]])
def test_collectives_placed_alone_on_their_links_give_the_flows_timeline(sets, full, monkeypatch):
    """Analytical runs whose collectives share links with other streams' (NCCL's plans, the
    A100's SM fractions): placing one at its solo time where nothing can meet it gives the
    timeline of running every such collective as flows on the clock, to rounding (the flow
    network advances every flow at each event, so its ends carry a few ulps of its own), and
    the same report."""
    w, topo = load_workload("tiny", sets), load_topology("dgx-a100")
    solo = simulate(w, topo, full=full)
    flows = simulate(w, topo, full=full, reference=ReferencePaths(shared_comm_on_clock=True))
    a, b = solo.result.spans, flows.result.spans
    assert [(s.rank, s.stream, s.name) for s in a] == [(s.rank, s.stream, s.name) for s in b]
    for x, y in zip(a, b):
        assert x.start_s == pytest.approx(y.start_s, rel=1e-12, abs=1e-15)
        assert x.end_s == pytest.approx(y.end_s, rel=1e-12, abs=1e-15)
    def shown(run) -> list[str]:  # the report as printed, but for the simulator's own wall time and events
        return [line for line in format_report(make_report(run)).splitlines() if "engine events" not in line]

    assert shown(solo) == shown(flows)
    assert solo.result.events <= flows.result.events
