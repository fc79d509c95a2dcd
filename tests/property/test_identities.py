"""Identities that must hold exactly under a fixed-cost model, and invariants of the engine."""

from __future__ import annotations

import dataclasses

import networkx as nx
import pytest

from sim.config import load_topology
from sim.costs.base import FixedCostModel
from sim.costs.compute import attention_time_s, gemm_time_s, memory_time_s
from sim.engine import Simulation
from sim.errors import DeadlockError
from sim.output.analysis import breakdown
from sim.output.report import make_report
from sim.runner import simulate
from sim.types import CollectiveKind, CommClass, OpKind, RecomputeKind, ScheduleKind, Stream
from sim.workload.ops import AttentionOp, GemmOp
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload

# Only attention costs time: 1 s forward, and under selective recomputation 1 s recompute +
# 1 s backward, so t_b = 2 t_f; embedding, head and optimizer are free, communication is free.
ATTENTION_ONLY = FixedCostModel({OpKind.ATTENTION: 1.0})


def _bubble(result):
    rows = breakdown(result)
    return [r.idle_s / result.makespan_s for r in rows]


@pytest.mark.parametrize("schedule", [ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B])
@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (4, 8), (4, 3), (8, 16)])
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(schedule, p, m):
    w = make_workload(layers=p, pp=p, gbs=m, schedule=schedule, recompute=RecomputeKind.SELECTIVE)
    res = Simulation(build_program(w), ATTENTION_ONLY).run()
    assert res.makespan_s == pytest.approx((m + p - 1) * 3.0)
    for b in _bubble(res):
        assert b == pytest.approx((p - 1) / (m + p - 1), rel=1e-12)


@pytest.mark.parametrize("p,v,m", [(2, 2, 4), (4, 2, 8), (4, 3, 8)])
def test_interleaving_shrinks_the_bubble(p, v, m):
    plain = make_workload(layers=p * v, pp=p, gbs=m)
    inter = make_workload(layers=p * v, pp=p, gbs=m, vps=v, schedule=ScheduleKind.INTERLEAVED)
    b_plain = max(_bubble(Simulation(build_program(plain), ATTENTION_ONLY).run()))
    res = Simulation(build_program(inter), ATTENTION_ONLY).run()
    b_inter = max(_bubble(res))
    assert b_inter < b_plain
    # Narayanan et al. 2021: the bubble shrinks by the factor v, to (p-1)/v of a stage's
    # per-micro-batch time; here t_f = t_b = 1 s per chunk-layer... per stage 2v s.
    assert res.makespan_s == pytest.approx(m * 2 * v + (p - 1) * 2, rel=1e-12)


def test_one_gpu_one_layer_is_the_sum_of_its_ops():
    w = make_workload(layers=1, gbs=1)
    run = simulate(w, load_topology("dgx-a100"))
    gpu = w.system.gpu
    total = 0.0
    for t in run.program.tasks:
        assert t.stream is Stream.COMPUTE
        op = t.op
        total += (gemm_time_s(gpu, op) if isinstance(op, GemmOp) else
                  attention_time_s(gpu, op) if isinstance(op, AttentionOp) else memory_time_s(gpu, op))
    assert run.result.makespan_s == pytest.approx(total, rel=1e-12)


def _scaled(topo, factor):
    up = dataclasses.replace(topo.scale_up, link=dataclasses.replace(
        topo.scale_up.link, bandwidth_bytes_per_s=topo.scale_up.link.bandwidth_bytes_per_s * factor))
    out = dataclasses.replace(topo.scale_out, nic=dataclasses.replace(
        topo.scale_out.nic, bandwidth_bytes_per_s=topo.scale_out.nic.bandwidth_bytes_per_s * factor))
    return dataclasses.replace(topo, scale_up=up, scale_out=out)


@pytest.mark.parametrize("kw", [
    dict(tp=2, pp=2, dp=2, gbs=8, sp=True),
    dict(tp=1, pp=4, dp=4, gbs=16, layers=8, dist_opt=True, gpus_per_node=4),
    dict(tp=4, pp=2, dp=2, gbs=8, layers=4, vps=2, schedule=ScheduleKind.INTERLEAVED),
])
def test_more_bandwidth_never_makes_an_iteration_slower(kw):
    w = make_workload(**kw)
    topo = load_topology("dgx-a100")
    times = [simulate(w, _scaled(topo, f)).result.makespan_s for f in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:])), times
    assert times[-1] < times[0]


def _nodes_of(topo, gpus: int):
    """The same fabric with ``gpus`` GPUs (and NICs) per node."""
    return dataclasses.replace(
        topo, gpus_per_node=gpus, scale_up=dataclasses.replace(topo.scale_up, domain_size=gpus),
        scale_out=dataclasses.replace(topo.scale_out, nics_per_node=gpus))


@pytest.mark.parametrize("kw,gpus_per_node", [
    (dict(tp=2, pp=2, dp=2, gbs=8, sp=True), 8),
    (dict(tp=2, pp=2, dp=2, gbs=8, dist_opt=True, recompute=RecomputeKind.FULL, tied=True), 8),
    (dict(tp=2, pp=2, dp=2, gbs=8, layers=4, vps=2, schedule=ScheduleKind.INTERLEAVED), 2),
    (dict(tp=2, pp=4, dp=2, gbs=8, layers=8, vps=2, schedule=ScheduleKind.INTERLEAVED, sp=True,
          dist_opt=True), 4),
    (dict(tp=1, pp=2, dp=8, gbs=16, overlap=False), 4),
    (dict(tp=2, pp=2, dp=4, gbs=16, zero=3, recompute=RecomputeKind.FULL), 4),
    (dict(tp=2, pp=2, dp=2, cp=2, gbs=8, sp=True, dist_opt=True), 4),
    # mixture of experts: EP inside a node, then EP across nodes (all-to-all over the NICs)
    (dict(tp=2, pp=2, dp=4, ep=2, experts=4, gbs=16, sp=True, dist_opt=True), 8),
    (dict(tp=1, pp=2, dp=4, ep=4, experts=8, topk=2, shared=1, first_dense=1, gbs=8, layers=4), 2),
])
def test_representative_and_full_simulation_agree(kw, gpus_per_node):
    """Exact where no link carries traffic of two different collectives from ranks that the
    representative run does not simulate (TP inside a node, PP and DP across nodes, as in
    practice); the representative run folds other ranks' flows of the *same* op into link
    weights, but cannot see a different op's flows from an unsimulated rank."""
    w = make_workload(**kw)
    topo = _nodes_of(load_topology("dgx-a100"), gpus_per_node)
    rep = make_report(simulate(w, topo))
    full = make_report(simulate(w, topo, full=True))
    assert full.simulated_ranks == w.system.num_gpus > rep.simulated_ranks
    assert rep.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    for c in rep.exposed_comm_s:
        assert rep.exposed_comm_s[c] == pytest.approx(full.exposed_comm_s[c], rel=1e-6, abs=1e-12)
    assert [s.peak_memory_bytes for s in rep.stages] == pytest.approx([s.peak_memory_bytes for s in full.stages])


def test_shared_nic_is_shared_in_both_modes():
    """Two GPUs per NIC: the representative run must load the NIC as the full run does."""
    w = make_workload(tp=1, pp=1, dp=16, gbs=16, layers=2, gpus_per_node=8)
    topo = load_topology("dgx-a100")
    half = dataclasses.replace(topo, scale_out=dataclasses.replace(topo.scale_out, nics_per_node=4))
    rep = simulate(w, half).result.makespan_s
    full = simulate(w, half, full=True).result.makespan_s
    base = simulate(w, topo).result.makespan_s
    assert rep == pytest.approx(full, rel=1e-9)
    assert rep > base


def test_program_is_a_dag_and_every_task_runs_once_without_overlap():
    w = make_workload(tp=2, pp=2, dp=2, gbs=8, sp=True, dist_opt=True, recompute=RecomputeKind.SELECTIVE)
    run = simulate(w, load_topology("dgx-a100"))
    assert nx.is_directed_acyclic_graph(run.program.to_networkx())
    spans = run.result.spans
    assert len(spans) == len(run.program.tasks)
    by_thread = {}
    for s in spans:
        assert s.end_s >= s.start_s >= 0.0
        by_thread.setdefault((s.rank, s.stream), []).append(s)
    for ss in by_thread.values():
        ss.sort(key=lambda s: s.start_s)
        for a, b in zip(ss, ss[1:]):
            assert b.start_s >= a.end_s - 1e-15
    # a task starts only after its dependencies end
    start = {t.id: s.start_s for t, s in zip(run.program.tasks, spans)}
    end = {t.id: s.end_s for t, s in zip(run.program.tasks, spans)}
    for t in run.program.tasks:
        for d in t.deps:
            assert start[t.id] >= end[d] - 1e-15


def test_memory_returns_to_the_static_level_and_peaks_above_it():
    w = make_workload(pp=2, gbs=8, layers=4)
    run = simulate(w, load_topology("dgx-a100"))
    for info in run.result.ranks:
        series = [c.value for c in run.result.counters if c.rank == info.rank]
        static = run.program.static_memory_bytes[info.rank]
        assert series[0] == pytest.approx(static)
        assert series[-1] == pytest.approx(static, rel=1e-12)
        assert max(series) > static


def test_first_stage_holds_more_activations_under_1f1b():
    w = make_workload(pp=4, gbs=16, layers=4)
    rep = make_report(simulate(w, load_topology("dgx-a100")))
    act = [s.peak_memory_bytes for s in rep.stages]
    assert act[0] > act[1] > act[2]


def test_a_cycle_is_reported_as_deadlock():
    w = make_workload(pp=2, gbs=2, layers=2)
    prog = build_program(w)
    first, last = prog.tasks[0], prog.tasks[-1]
    first.deps.append(last.id)
    with pytest.raises(DeadlockError, match="never ran"):
        Simulation(prog, ATTENTION_ONLY).run()


def test_same_inputs_same_result():
    w = make_workload(tp=2, pp=2, dp=2, gbs=8, sp=True)
    a = simulate(w, load_topology("dgx-a100")).result
    b = simulate(w, load_topology("dgx-a100")).result
    assert [(s.start_s, s.end_s, s.name) for s in a.spans] == [(s.start_s, s.end_s, s.name) for s in b.spans]


def test_trace_of_an_interleaved_dp_run_is_valid():
    """Every event has what Perfetto needs, no two slices on one thread overlap, every arrow
    has both ends -- on a run with all streams in use."""
    from sim.output.trace import chrome_trace, validate_chrome_trace

    w = make_workload(tp=2, pp=4, dp=2, gbs=16, layers=8, vps=2, schedule=ScheduleKind.INTERLEAVED, sp=True,
                      dist_opt=True, recompute=RecomputeKind.SELECTIVE, tied=True)
    for full in (False, True):
        obj = chrome_trace(simulate(w, _nodes_of(load_topology("dgx-a100"), 4), full=full).result)
        assert validate_chrome_trace(obj) == []
        events = obj["traceEvents"]
        assert sum(e["ph"] == "s" for e in events) == sum(e["ph"] == "f" for e in events) > 0
        unused = {int(Stream.DP_GATHER), int(Stream.CP_COMM), int(Stream.EP_COMM), int(Stream.DP_REPLICATE)}
        assert {e["tid"] for e in events if e["ph"] == "X"} >= {int(s) for s in Stream} - unused


def test_zero3_gathers_each_layer_before_it_computes_and_reduces_after():
    w = make_workload(tp=1, pp=1, dp=8, gbs=16, layers=4, zero=3)
    run = simulate(w, load_topology("dgx-a100"))
    spans = run.result.spans
    gathers = [s for s in spans if s.stream is Stream.DP_GATHER]
    reduces = [s for s in spans if s.name == "ncclReduceScatter fsdp-grads"]
    m = w.parallel.num_microbatches
    assert len(gathers) == 2 * 4 * m and len(reduces) == 4 * m  # forward and backward, every layer
    first_compute = {}
    for s in spans:
        a = dict(s.args)
        if s.stream is Stream.COMPUTE and "layer" in a:
            first_compute.setdefault((a["phase"], a["microbatch"], a["layer"]), s.start_s)
    for g in gathers:
        a = dict(g.args)
        phase = "fwd" if a["phase"] == "fwd" else "bwd"
        assert first_compute[(phase, a["microbatch"], a["layer"])] >= g.end_s - 1e-15
    # the optimizer step waits for every reduce-scatter, and no bucketed all-reduce remains
    opt = next(s for s in spans if s.name == "optimizer")
    assert opt.start_s >= max(r.end_s for r in reduces) - 1e-15
    assert not [s for s in spans if "grads" in s.name and "fsdp" not in s.name]


def test_context_parallel_ring_exchanges_overlap_the_attention_steps():
    w = make_workload(tp=1, pp=1, dp=1, cp=4, gbs=1, layers=1, seq=4096)
    run = simulate(w, load_topology("dgx-a100"))
    spans = run.result.spans
    fwd = [s for s in spans if dict(s.args).get("phase") == "fwd"]
    steps = [s for s in fwd if s.name == "attention"]
    exchanges = [s for s in fwd if s.stream is Stream.CP_COMM]
    assert len(steps) == 4 and len(exchanges) == 3
    for j, x in enumerate(exchanges):
        # exchange j starts when step j starts and step j+1 waits for it
        assert x.start_s == pytest.approx(steps[j].start_s)
        assert steps[j + 1].start_s >= x.end_s - 1e-15
    rep = make_report(run)
    assert rep.exposed_comm_s["cp"] >= 0.0 and rep.parallel["cp"] == 4


def test_context_parallelism_divides_activation_memory_and_token_work():
    from sim.memory import stage_memory

    base = make_workload(tp=1, pp=1, dp=4, gbs=4, layers=2, seq=8192)
    cp = make_workload(tp=1, pp=1, dp=1, cp=4, gbs=1, layers=2, seq=8192)
    assert stage_memory(cp, 0).activations_bytes < stage_memory(base, 0).activations_bytes / 3
    t_base = simulate(base, load_topology("dgx-a100")).result.makespan_s
    t_cp = simulate(cp, load_topology("dgx-a100")).result.makespan_s
    assert t_cp < t_base  # a quarter of one sequence per GPU, against a whole one


def test_fp8_layers_pay_for_casts_and_keep_the_output_layer_in_bf16():
    from sim.types import Dtype
    from sim.workload.layers import layer_ops

    w = make_workload(tp=1, gpu="H100-SXM5-80GB")
    bf16 = layer_ops(w.model, w.parallel, Dtype.BF16, (0,), kernels=w.kernels)
    fp8 = layer_ops(w.model, w.parallel, Dtype.FP8, (0,), kernels=w.kernels)
    gemms = lambda steps: [s.op for s in steps if isinstance(s.op, GemmOp) and s.op.kind is OpKind.GEMM]  # noqa: E731
    assert all(op.extra_bytes == 0 for op in gemms(bf16.layer_fwd + bf16.layer_bwd))
    assert all(op.extra_bytes > 0 and op.dtype is Dtype.FP8 for op in gemms(fp8.layer_fwd + fp8.layer_bwd))
    assert all(op.dtype is Dtype.BF16 and op.extra_bytes == 0 for op in gemms(fp8.head_fwd + fp8.head_bwd))
    gpu = w.system.gpu
    op = gemms(fp8.layer_fwd)[0]
    plain = GemmOp(op.m, op.n, op.k, op.dtype)
    assert gemm_time_s(gpu, op) == pytest.approx(
        gemm_time_s(gpu, plain) + op.extra_bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency)
        + gpu.kernel_launch_s)


def test_context_parallel_ranks_reduce_their_gradients_together():
    """CP ranks hold the same weights: with DP 1 and CP 2 the gradients are still all-reduced,
    over the CP pair (Megatron's dp-cp group)."""
    w = make_workload(tp=1, pp=1, dp=1, cp=2, gbs=1, layers=2, seq=4096)
    spans = simulate(w, load_topology("dgx-a100")).result.spans
    grads = [s for s in spans if s.name == "ncclAllReduce grads"]
    assert grads and all(s.end_s > s.start_s for s in grads)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16)])
def test_zero_bubble_h1_shrinks_the_bubble_at_equal_memory(p, m):
    """ZB-H1 (Qi et al. 2024): splitting the backward into B and W and deferring the
    cool-down's W passes takes the bubble from (p-1)(F+B+W) towards (p-1)(F+B-W), with
    1F1B's peak memory. Here only GEMMs cost time (1 s each), so F = B = W per layer."""
    from sim.workload.ops import GemmOp

    class LayerGemmsOnly(FixedCostModel):
        """1 s per transformer-layer GEMM; the output layer (vocabulary-wide) is free."""

        def compute_time_s(self, op):
            return 1.0 if isinstance(op, GemmOp) and 32000 not in (op.m, op.n, op.k) else 0.0

    costs = LayerGemmsOnly()
    one = make_workload(layers=p, pp=p, gbs=m)
    zb = make_workload(layers=p, pp=p, gbs=m, schedule=ScheduleKind.ZB_H1)
    r1 = Simulation(build_program(one), costs).run()
    rz = Simulation(build_program(zb), costs).run()
    # per layer F = B = W = 4 s: 1F1B takes (m + p - 1)(F + B + W); ZB-H1 m(F + B + W) plus
    # a bubble of (p - 1)(F + B - W) (the paper's Table 1)
    assert r1.makespan_s == pytest.approx((m + p - 1) * 12)
    assert rz.makespan_s == pytest.approx(12 * m + 4 * (p - 1))
    assert max(_bubble(rz)) < max(_bubble(r1))
    # memory: every stage holds at most p micro-batches, 1F1B's first-stage peak (the last
    # stage adds its output layer's and loss's buffers for one micro-batch, as in 1F1B)
    from sim.memory import activation_model, stage_memory
    am = activation_model(zb)
    peak_1f1b = max(stage_memory(one, s).total_bytes for s in range(p))
    for s in range(p):
        assert stage_memory(zb, s).total_bytes <= peak_1f1b + am.head + am.logits + 1e-6
    rep = make_report(simulate(zb, load_topology("dgx-a100")))
    assert [s.peak_memory_bytes for s in rep.stages] == \
        pytest.approx([stage_memory(zb, s).total_bytes for s in range(p)], rel=1e-12)


def test_context_parallelism_with_free_communication_divides_attention_time_by_cp():
    """Load-balanced ring attention: each of the cp steps does 1/cp^2 of the sequence's causal
    work, so a rank's attention time is 1/cp of the whole sequence's, exactly."""
    from sim.workload.ops import AttentionOp

    class AttentionByFlops(FixedCostModel):
        def compute_time_s(self, op):
            return op.flops / 1e15 if isinstance(op, AttentionOp) else 0.0

    def attention_s(w):
        res = Simulation(build_program(w), AttentionByFlops()).run()
        return sum(s.end_s - s.start_s for s in res.spans
                   if s.rank == res.ranks[0].rank and s.kind is OpKind.ATTENTION)

    base = attention_s(make_workload(tp=1, pp=1, dp=1, gbs=1, layers=2, seq=8192))
    for cp in (2, 4, 8):
        assert attention_s(make_workload(tp=1, pp=1, dp=1, cp=cp, gbs=1, layers=2, seq=8192)) == \
            pytest.approx(base / cp, rel=1e-12)


def test_zero3_moves_one_and_a_half_times_zero1s_elements_per_step():
    """ZeRO (Rajbhandari et al. 2020, Sec. 7): stage 1 reduce-scatters the gradients and
    all-gathers the weights once (2 psi); stage 3 gathers the weights for the forward and again
    for the backward and reduce-scatters the gradients (3 psi)."""
    from sim.workload.dataparallel import GRAD_REDUCE_BYTES, PARAM_GATHER_BYTES

    def elements(zero, dist_opt):
        w = make_workload(tp=1, pp=1, dp=8, gbs=8, layers=4, zero=zero, dist_opt=dist_opt)
        prog = build_program(w)
        total = 0.0
        for t in prog.tasks:
            if t.comm and t.op.comm_class is CommClass.DP:
                per = PARAM_GATHER_BYTES if t.op.collective is CollectiveKind.ALL_GATHER else GRAD_REDUCE_BYTES
                total += t.op.size_bytes / per
        return total

    assert elements(3, False) == pytest.approx(1.5 * elements(1, True), rel=1e-4)


def test_fp8_current_scaling_reads_each_cast_input_once_more():
    """Transformer Engine's current scaling takes an amax pass over each 16-bit input before
    casting it: every forward and input-gradient cast moves 2 more bytes per element."""
    import dataclasses

    from sim.types import Dtype, ScalingRecipe
    from sim.workload.ops import GemmOp

    w = dataclasses.replace(make_workload(layers=2, gbs=1, gpu="H100-SXM5-80GB"), dtype=Dtype.FP8)
    cur = dataclasses.replace(w, scaling=ScalingRecipe.CURRENT)

    def casts(x):
        return {(t.name, t.op.m, t.op.n, t.op.k): t.op.extra_bytes for t in build_program(x).tasks
                if isinstance(t.op, GemmOp) and t.op.extra_bytes and "wgrad" not in t.name}

    a, b = casts(w), casts(cur)
    assert a.keys() == b.keys() and a
    for (name, m, n, k), delayed in a.items():
        # the cast operand is [m, k] (the input forward, the incoming gradient for dgrad)
        assert b[(name, m, n, k)] - delayed == pytest.approx(2 * m * k)
    t_delayed = simulate(w, load_topology("dgx-h100")).result.makespan_s
    assert simulate(cur, load_topology("dgx-h100")).result.makespan_s > t_delayed


def test_cases_that_publish_current_scaling_use_it():
    from sim.config.workload import load_case_records
    from sim.types import ScalingRecipe

    recs = load_case_records("workloads/validation/megatronbridge.yaml")
    cs = [r for r in recs if "fp8-cs" in r.id]
    mx = [r for r in recs if "mxfp8" in r.id or "nvfp4" in r.id]
    assert cs and all(r.workload.scaling is ScalingRecipe.CURRENT for r in cs)
    assert mx and all(r.workload.scaling is ScalingRecipe.BLOCK for r in mx)
