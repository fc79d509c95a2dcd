"""TP collectives under TP communication overlap hold the SMs of what runs them, not NCCL's.

Transformer Engine's userbuffers run a ring exchange on the copy engines (no SM) and a bulk or
pipelined overlap on ``num_sm`` SMs (16 by default); torchtitan's async TP copies on the copy
engines (sim/workload/tp_overlap.py). A GEMM beside such a collective runs at
``1 - SMs / sm_count`` while it runs (sim/engine/contention.py); without overlap the TP
collectives stay NCCL kernels on their channels (tests/unit/test_contention.py).
"""

from __future__ import annotations

import dataclasses

import pytest

from sim.config import load_topology, load_workload
from sim.costs.analytical import AnalyticalCostModel
from sim.costs.comm import CTAS_IN_DOMAIN
from sim.errors import ConfigError
from sim.runner import simulate
from sim.types import CommClass, CommKernel, Stream, TpOverlapMethod
from sim.workload.tp_overlap import ASYNC_TP, TE_DEFAULTS, TE_METHODS, UB_GEMMS, UbGemm, UbSplit, userbuffers
from tests.conftest import make_workload

H100_SMS = 132

# the TP collective of each layer step under overlap, and the TE GEMM it is overlapped with
_GEMM_OF = {("fwd", "ncclAllGather qkv-in"): "qkv_fprop", ("fwd", "ncclReduceScatter proj-out"): "proj_fprop",
            ("fwd", "ncclAllGather fc1-in"): "fc1_fprop", ("fwd", "ncclReduceScatter fc2-out"): "fc2_fprop",
            ("bwd", "ncclAllGather fc2-grad"): "fc2_dgrad", ("bwd", "ncclAllGather fc1-in"): "fc1_dgrad",
            ("bwd", "ncclReduceScatter fc1-grad"): "fc1_wgrad", ("bwd", "ncclAllGather proj-grad"): "proj_dgrad",
            ("bwd", "ncclAllGather qkv-in"): "qkv_dgrad", ("bwd", "ncclReduceScatter qkv-grad"): "qkv_wgrad"}


def _run(overlap: bool = True, cfg=TE_DEFAULTS):
    """Two layers on two H100s (TP 2, sequence parallel, one micro-batch): nothing but the
    layers' own TP collectives runs beside their GEMMs."""
    w = make_workload(layers=2, tp=2, sp=True, gbs=1, gpu="H100-SXM5-80GB", hidden=2048, seq=2048)
    w = dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, tp_comm_overlap=overlap,
                                                            tp_comm_overlap_cfg=cfg))
    run = simulate(w, load_topology("dgx-h100"))
    return run, AnalyticalCostModel(w.system.gpu, run.fabric, clock_hz=run.clock_hz)


def _layer(run, layer: int = 1) -> dict[tuple[str, str], tuple]:
    """``(phase, name) -> (span, task)`` of rank 0's ``layer``."""
    def key(args):
        a = dict(args)
        return a.get("phase"), a.get("layer"), a.get("microbatch")
    tasks = {(t.name, key(t.args)): t for t in run.program.tasks if t.rank == 0}
    out = {}
    for s in run.result.spans:
        a = dict(s.args)
        if s.rank == 0 and a.get("layer") == layer:
            # a GEMM run in two parts and its collective in two (the chunk pipeline,
            # sim.workload.layers._chunk_pipeline) keep their first
            out.setdefault((a["phase"], s.name), (s, tasks[(s.name, key(s.args))]))
    return out


def test_te_defaults_follow_initialize_ub():
    assert set(UB_GEMMS) == set(TE_METHODS) and len(UB_GEMMS) == 10
    for gemm in UB_GEMMS:
        method = TE_METHODS[gemm]
        # every communicator's SMs are either the copy engines' (ring) or left to it by its GEMM
        assert TE_DEFAULTS.sms_of(gemm) == 0
        expected = {TpOverlapMethod.RING_EXCHANGE: UbSplit(ring=True),
                    TpOverlapMethod.PIPELINE: UbSplit(4, sm_margin=16),
                    TpOverlapMethod.BULK: UbSplit(sm_margin=16)}[method]
        assert TE_DEFAULTS.split_of(gemm) == expected
    assert TE_DEFAULTS.kernel is CommKernel.USERBUFFERS
    assert ASYNC_TP.kernel is CommKernel.SYMMETRIC_MEMORY and all(n == 0 for _, n in ASYNC_TP.sms)
    with pytest.raises(KeyError):
        userbuffers({"out_proj": UbGemm(num_sm=8)})


def test_layer_collectives_carry_the_te_kernel_of_their_gemm():
    run, costs = _run()
    layer = _layer(run)
    tp = {k: v for k, v in layer.items() if v[0].stream is Stream.TP_COMM}
    assert set(tp) == set(_GEMM_OF)
    for key, (_span, task) in tp.items():
        gemm = _GEMM_OF[key]
        assert task.op.kernel is CommKernel.USERBUFFERS and task.op.kernel_sms == TE_DEFAULTS.sms_of(gemm)
        assert costs.comm_plan(task.op).sm_fraction == TE_DEFAULTS.sms_of(gemm) / H100_SMS
    # outside the layers (embedding, loss) and without overlap: NCCL on its channels
    others = [t for t in run.program.tasks if t.comm and t.op.comm_class is CommClass.TP
              and dict(t.args).get("layer") is None]
    assert others and all(t.op.kernel is CommKernel.NCCL for t in others)
    off, off_costs = _run(overlap=False)
    for span, task in _layer(off).values():
        if span.stream is Stream.TP_COMM:
            assert task.op.kernel is CommKernel.NCCL
            assert off_costs.comm_plan(task.op).sm_fraction == CTAS_IN_DOMAIN / H100_SMS


def test_a_gemm_beside_a_ring_exchange_on_the_copy_engines_is_not_slowed():
    run, costs = _run()
    layer = _layer(run)
    for comm, gemm in ((("fwd", "ncclAllGather qkv-in"), ("fwd", "qkv")),
                       (("fwd", "ncclAllGather fc1-in"), ("fwd", "fc1")),
                       (("bwd", "ncclAllGather fc2-grad"), ("bwd", "fc2-dgrad"))):
        c, (g, task) = layer[comm][0], layer[gemm]
        assert g.start_s == c.start_s < c.end_s     # the GEMM runs beside the exchange
        assert g.end_s - g.start_s == pytest.approx(costs.compute_time_s(task.op), rel=1e-12)


def _slowed_end_s(start_s: float, comm_end_s: float, solo_s: float, held: float) -> float:
    """End of an op of solo time ``solo_s`` that starts with a kernel holding ``held`` of the
    SMs until ``comm_end_s``, then runs alone."""
    beside = (comm_end_s - start_s) * (1.0 - held)
    return start_s + solo_s / (1.0 - held) if solo_s <= beside else comm_end_s + solo_s - beside


_NEMO_BULK = userbuffers({g: UbGemm(num_sm=n, set_sm_margin=False) for g, n in (
    ("qkv_dgrad", 4), ("fc1_dgrad", 4), ("qkv_wgrad", 24), ("fc1_wgrad", 24))})


@pytest.mark.parametrize("cfg, sms", [(userbuffers({g: UbGemm(set_sm_margin=False) for g in (
    "qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")}), 16), (_NEMO_BULK, None)],
    ids=["te-num-sm", "nemo-style"])
def test_a_gemm_beside_a_bulk_overlap_runs_at_one_minus_num_sm_over_sm_count(cfg, sms):
    """Without ``set_sm_margin`` (NeMo's and Megatron-Bridge's tables) the GEMM is launched on
    every SM and the bulk communicator takes its ``num_sm`` while it runs."""
    run, costs = _run(cfg=cfg)
    layer = _layer(run)
    for comm, gemm, name in ((("bwd", "ncclAllGather qkv-in"), ("bwd", "qkv-dgrad"), "qkv_dgrad"),
                             (("bwd", "ncclReduceScatter qkv-grad"), ("bwd", "qkv-wgrad"), "qkv_wgrad"),
                             (("bwd", "ncclAllGather fc1-in"), ("bwd", "fc1-dgrad"), "fc1_dgrad"),
                             (("bwd", "ncclReduceScatter fc1-grad"), ("bwd", "fc1-wgrad"), "fc1_wgrad")):
        c, (g, task) = layer[comm][0], layer[gemm]
        held = (sms if sms is not None else cfg.sms_of(name)) / H100_SMS
        solo = costs.compute_time_s(task.op)
        assert g.start_s == c.start_s
        assert g.end_s == pytest.approx(_slowed_end_s(g.start_s, c.end_s, solo, held), rel=1e-12)
        assert g.end_s - g.start_s > solo


def test_a_ring_exchange_on_sms_slows_its_gemm_by_num_sm_over_sm_count():
    cfg = userbuffers({"qkv_fprop": UbGemm(num_sm=2, use_ce=False)})
    run, costs = _run(cfg=cfg)
    c, (g, task) = _layer(run)[("fwd", "ncclAllGather qkv-in")][0], _layer(run)[("fwd", "qkv")]
    solo = costs.compute_time_s(task.op)
    assert g.end_s == pytest.approx(_slowed_end_s(g.start_s, c.end_s, solo, 2 / H100_SMS), rel=1e-12)


# -- the chunk pipeline: what a chunked GEMM and its collective wait for -------------------------
def _spans_named(run, phase: str, name: str, layer: int = 1) -> list:
    """Rank 0's spans of ``layer`` called ``name`` in ``phase``, in start order."""
    return sorted((s for s in run.result.spans if s.rank == 0 and s.name == name
                   and dict(s.args).get("layer") == layer and dict(s.args).get("phase") == phase),
                  key=lambda s: s.start_s)


def test_a_chunked_gemm_and_its_collective_are_split_as_transformer_engine_pipelines_them():
    """Beside a ring-exchange all-gather the GEMM's last chunk waits for the gather (its head
    does not); beside a chunk-by-chunk reduce-scatter the GEMM's first chunk runs before any of
    it and the last chunk's share is reduced after the whole GEMM. The parts add up to the
    whole; bulk overlaps stay one GEMM beside one collective."""
    from sim.workload.layers import layer_ops
    from sim.workload.ops import CommOp, GemmOp

    t = 4
    w = make_workload(tp=t, sp=True, seq=512, hidden=1024, heads=16)
    par = dataclasses.replace(w.parallel, tp_comm_overlap=True, tp_comm_overlap_cfg=TE_DEFAULTS)
    ops = layer_ops(w.model, par, w.dtype, tuple(range(t)), kernels=w.kernels)
    plain = layer_ops(w.model, dataclasses.replace(par, tp_comm_overlap=False), w.dtype, tuple(range(t)),
                      kernels=w.kernels)
    whole = {st.name: st.op for st in plain.layer_fwd + plain.layer_bwd}
    steps = list(ops.layer_fwd) + list(ops.layer_bwd)
    names = [st.name for st in steps]

    def at(name: str) -> int:
        return names.index(name)

    for gemm, gather in (("qkv", "ncclAllGather qkv-in"), ("fc1", "ncclAllGather fc1-in"),
                         ("proj-dgrad", "ncclAllGather proj-grad"), ("fc2-dgrad", "ncclAllGather fc2-grad")):
        i = at(gemm)
        ag, head, tail = steps[i - 1], steps[i], steps[i + 1]
        assert ag.name == gather and ag.wait == 1 and tail.name == gemm   # the second GEMM part waits
        assert (head.op.chunks, tail.op.chunks) == (t - 1, 1)
        assert (head.op.m, tail.op.m) == (whole[gemm].m * (t - 1) // t, whole[gemm].m // t)
    for gemm, scatter in (("proj", "ncclReduceScatter proj-out"), ("fc2", "ncclReduceScatter fc2-out")):
        i = at(gemm)
        first, rs_a, rest, rs_b = steps[i:i + 4]
        assert [s.name for s in (rs_a, rest, rs_b)] == [scatter, gemm, scatter]
        assert (first.op.chunks, rest.op.chunks) == (1, 3)   # TE's 4 pipelined splits
        assert (rs_a.wait, rs_b.wait) == (1, 0)
        assert isinstance(rs_a.op, CommOp) and rs_a.op.size_bytes == pytest.approx(whole[scatter].size_bytes * 3 / 4)
        assert rs_b.op.size_bytes == pytest.approx(whole[scatter].size_bytes / 4)
        assert first.op.m + rest.op.m == whole[gemm].m
    for gemm in ("qkv-dgrad", "qkv-wgrad", "fc1-dgrad", "fc1-wgrad"):   # bulk: one GEMM
        assert names.count(gemm) == 1 and isinstance(steps[at(gemm)].op, GemmOp)


def test_the_last_chunk_waits_for_the_gather_and_the_last_share_for_the_gemm():
    run, costs = _run()
    (ag,) = _spans_named(run, "fwd", "ncclAllGather qkv-in")
    head, tail = _spans_named(run, "fwd", "qkv")
    assert head.start_s == ag.start_s                      # the head runs beside the exchange
    assert tail.start_s == pytest.approx(max(head.end_s, ag.end_s), abs=1e-15)
    first, rest = _spans_named(run, "fwd", "proj")
    rs_a, rs_b = _spans_named(run, "fwd", "ncclReduceScatter proj-out")
    assert rs_a.start_s == pytest.approx(first.end_s, abs=1e-15)    # nothing reduced before a chunk is done
    assert rest.start_s == pytest.approx(first.end_s, abs=1e-15)
    assert rs_b.start_s == pytest.approx(max(rest.end_s, rs_a.end_s), abs=1e-15)
    after = min(s.start_s for s in run.result.spans if s.rank == 0 and s.stream is Stream.COMPUTE
                and s.start_s >= rest.end_s and s is not rest)
    assert after >= rs_b.end_s - 1e-15                      # the layer goes on once the last share is in


def test_async_tp_copies_hold_no_sms():
    run, costs = _run(cfg=ASYNC_TP)
    fwd = [(span, task) for (phase, _), (span, task) in _layer(run).items() if phase == "fwd"]
    assert any(span.stream is Stream.TP_COMM for span, _ in fwd)
    for span, task in fwd:
        if span.stream is Stream.TP_COMM:
            assert task.op.kernel is CommKernel.SYMMETRIC_MEMORY and costs.comm_plan(task.op).sm_fraction == 0.0
        elif span.stream is Stream.COMPUTE:   # nothing else runs beside the forward: all at solo time
            assert span.end_s - span.start_s == pytest.approx(costs.compute_time_s(task.op), rel=1e-12)


def test_async_tp_overlaps_the_first_forward_only():
    """PyTorch's async TP (torch.compile's micro-pipeline pass) overlaps the forward pass's TP
    collectives; the recomputed forward and the backward run theirs as plain TP does, NCCL
    kernels in the same places (sim/workload/tp_overlap.py, ASYNC_TP). Transformer Engine's
    userbuffers overlap all three passes alike."""
    from sim.types import RecomputeKind

    w = make_workload(layers=2, tp=2, sp=True, gbs=1, gpu="H100-SXM5-80GB", hidden=2048, seq=2048)

    def tp_kernels(overlap, cfg):
        par = dataclasses.replace(w.parallel, tp_comm_overlap=overlap, tp_comm_overlap_cfg=cfg,
                                  recompute=RecomputeKind.FULL)
        run = simulate(dataclasses.replace(w, parallel=par), load_topology("dgx-h100"))
        out: dict[str, list] = {}
        for t in run.program.tasks:
            a = dict(t.args)
            if t.rank == 0 and t.comm and t.op.comm_class is CommClass.TP and a.get("layer") == 1:
                out.setdefault(a["phase"], []).append((t.name, t.op.kernel))
        return out, run.result.makespan_s

    sym, sym_s = tp_kernels(True, ASYNC_TP)
    plain, plain_s = tp_kernels(False, TE_DEFAULTS)
    ub, _ = tp_kernels(True, TE_DEFAULTS)
    assert set(sym) == {"fwd", "recompute", "bwd"}
    assert sym["fwd"] and all(k is CommKernel.SYMMETRIC_MEMORY for _, k in sym["fwd"])
    assert sym["recompute"] == plain["recompute"] and sym["bwd"] == plain["bwd"]
    assert all(k is CommKernel.NCCL for phase in ("recompute", "bwd") for _, k in sym[phase])
    assert all(k is CommKernel.USERBUFFERS for phase in ("fwd", "recompute", "bwd") for _, k in ub[phase])
    assert sym_s < plain_s     # the forward's overlap still pays


# -- the config boundary -----------------------------------------------------------------------
def test_a_case_states_its_userbuffers_table_as_megatron_reads_it():
    cfg = load_workload("tiny", ["parallel.sequence_parallel=true", "parallel.tp_comm_overlap=true",
                                 "parallel.tp_comm_overlap_cfg={qkv_wgrad: {method: bulk, num_sm: 24, cga_size: 2},"
                                 " fc2_fprop: {method: ring_exchange, num_sm: 1, set_sm_margin: true}}"]
                        ).parallel.tp_comm_overlap_cfg
    assert cfg.sms_of("qkv_wgrad") == 0 and cfg.split_of("qkv_wgrad") == UbSplit(sm_margin=24)  # TE's default margin
    assert cfg.split_of("fc2_fprop") == UbSplit(ring=True, sm_margin=1)
    assert cfg.split_of("proj_fprop") == UbSplit(4, sm_margin=16)
    assert load_workload("tiny").parallel.tp_comm_overlap_cfg == TE_DEFAULTS


@pytest.mark.parametrize("value, field", [
    ("{out_proj: {num_sm: 4}}", "parallel.tp_comm_overlap_cfg.out_proj"),
    ("{qkv_wgrad: {method: tree}}", "parallel.tp_comm_overlap_cfg.qkv_wgrad.method"),
    ("{qkv_wgrad: {num_sm: -1}}", "parallel.tp_comm_overlap_cfg.qkv_wgrad.num_sm"),
    ("{qkv_wgrad: {sms: 4}}", "parallel.tp_comm_overlap_cfg.qkv_wgrad.sms"),
    ("[1, 2]", "parallel.tp_comm_overlap_cfg")])
def test_a_bad_userbuffers_table_names_the_field(value, field):
    with pytest.raises(ConfigError) as err:
        load_workload("tiny", [f"parallel.tp_comm_overlap_cfg={value}"])
    assert err.value.field == field


def test_torchtitan_async_tp_runs_on_symmetric_memory(tmp_path):
    path = tmp_path / "titan.yaml"
    path.write_text("""
name: titan
framework: torchtitan (2024)
model: {num_layers: 2, hidden_size: 1024, num_attention_heads: 8, num_kv_heads: 8, ffn_hidden_size: 4096,
        vocab_size: 32000, seq_length: 1024}
system: {gpu: H100-SXM5-80GB, num_gpus: 2, gpus_per_node: 8}
parallel: {tp: 2, pp: 1, dp: 1, micro_batch_size: 1, global_batch_size: 1, details: "torch.compile + AsyncTP"}
""")
    w = load_workload(str(path))
    assert w.parallel.tp_comm_overlap and w.parallel.tp_comm_overlap_cfg == ASYNC_TP
    with pytest.raises(ConfigError) as err:
        load_workload(str(path), ["parallel.tp_comm_overlap_cfg={qkv_wgrad: {num_sm: 4}}"])
    assert err.value.field == "parallel.tp_comm_overlap_cfg"


@pytest.mark.parametrize("details, on", [
    ("TP comm overlap with userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192; performance_mode=True", True),
    ("sequence_parallel, ub_tp_comm_overlap (userbuffers TP overlap), overlap_p2p_comm", True),
    ("MegatronCommOverlapCallback(tp_comm_overlap=True)", True),
    ("no TP comm overlap for 8b", False),
    ("ub_tp_comm_overlap: false, overlap_p2p_comm", False),
    ("MegatronCommOverlapCallback(tp_comm_overlap=False, defer_embedding_wgrad_compute=True)", False)])
def test_nemo_settings_that_name_the_userbuffers_overlap_turn_it_on(tmp_path, details, on):
    """A NeMo case's published settings name the TP overlap in NeMo's words, not Megatron-LM's
    flag: the launcher's ``ub_tp_comm_overlap``, NeMo 2's ``tp_comm_overlap=True`` or the
    ``userbuffers_*`` configuration its recipe passes. Those turn it on (NeMo's stacks leave it
    off: the recipes set it per model); the same keys written false do not."""
    path = tmp_path / "nemo.yaml"
    path.write_text(f"""
name: nemo
framework: NeMo 25.02.01
model: {{num_layers: 2, hidden_size: 1024, num_attention_heads: 8, num_kv_heads: 8, ffn_hidden_size: 4096,
        vocab_size: 32000, seq_length: 1024}}
system: {{gpu: H100-SXM5-80GB, num_gpus: 4, gpus_per_node: 8}}
parallel: {{tp: 4, pp: 1, dp: 1, micro_batch_size: 1, global_batch_size: 1, details: "{details}"}}
""")
    w = load_workload(str(path))
    assert w.parallel.tp_comm_overlap is on
    no_tp = ["parallel.tp=1", "parallel.dp=4", "parallel.global_batch_size=4"]
    assert not load_workload(str(path), no_tp).parallel.tp_comm_overlap


def test_async_tp_sums_the_received_chunks_after_each_reduce_scattered_gemm():
    """Under PyTorch's async TP the forward's two GEMMs whose outputs are reduce-scattered (the
    attention and MLP output projections) carry one more kernel reading the m x n stacked
    partials and writing the m/t x n shard; the backward's input gradients are reduce-scattered
    by NCCL (async TP overlaps the forward only); nothing else changes, and Transformer Engine's
    userbuffers add nothing."""
    import dataclasses

    from sim.workload.layers import layer_ops
    from tests.conftest import make_workload

    t = 4
    w = make_workload(tp=t, sp=True, seq=512, hidden=1024, heads=16)

    def gemms(cfg):
        par = dataclasses.replace(w.parallel, tp_comm_overlap=True, tp_comm_overlap_cfg=cfg)
        ops = layer_ops(w.model, par, w.dtype, tuple(range(t)), kernels=w.kernels)
        return _whole_gemms(ops.layer_fwd + ops.layer_bwd)

    te, sym = gemms(TE_DEFAULTS), gemms(ASYNC_TP)
    reduced = {"proj", "fc2"}
    assert all(op.extra_bytes == 0 for op in te.values())
    for name, op in sym.items():
        if name in reduced:
            assert op.extra_bytes == pytest.approx(op.m * op.n * (1 + 1 / t) * 2) and op.extra_kernels == 1
        else:   # async TP does not split the GEMMs Transformer Engine splits
            assert op == dataclasses.replace(te[name], chunks=1, sm_margin=0)


def _whole_gemms(steps) -> dict:
    """``name -> GemmOp`` of a pass's GEMMs, a GEMM the chunk pipeline runs in two parts
    (sim.workload.layers._chunk_pipeline) joined back into one: its rows, chunks and the work
    beside it summed."""
    from sim.workload.ops import GemmOp

    out: dict = {}
    for st in steps:
        if isinstance(st.op, GemmOp):
            prev = out.get(st.name)
            out[st.name] = st.op if prev is None else dataclasses.replace(
                prev, m=prev.m + st.op.m, chunks=prev.chunks + st.op.chunks,
                extra_bytes=prev.extra_bytes + st.op.extra_bytes,
                epilogue_bytes=prev.epilogue_bytes + st.op.epilogue_bytes)
    return out


# -- the GEMMs beside userbuffers: chunks and SM margins ------------------------------------------
def test_a_chunked_gemm_runs_each_chunk_at_its_own_size_and_rereads_its_weights():
    """Transformer Engine runs a GEMM beside a ring exchange one chunk per TP rank and a
    pipelined one in ``num_splits``: each chunk at the efficiency measured for its own FLOPs,
    one launch each, the weight operand read once per chunk."""
    from sim.costs.compute import gemm_time_s
    from sim.hardware import get_gpu
    from sim.types import Dtype
    from sim.workload.ops import GemmOp

    gpu = get_gpu("H100-SXM5-80GB")
    whole = GemmOp(4096, 2304, 16384, Dtype.FP8)
    for chunks in (2, 4, 8):
        op = dataclasses.replace(whole, chunks=chunks)
        curve = gpu.gemm_curve(Dtype.FP8)
        compute = op.flops / (gpu.peak(Dtype.FP8) * curve(op.flops / chunks))
        assert gemm_time_s(gpu, op) == pytest.approx(compute + chunks * gpu.kernel_launch_s, rel=1e-12)
        assert op.bytes - whole.bytes == (chunks - 1) * 2304 * 16384   # B once more per chunk
    assert gemm_time_s(gpu, dataclasses.replace(whole, chunks=8)) > gemm_time_s(gpu, whole)


def test_a_gemm_launched_with_an_sm_margin_computes_on_the_rest_and_draws_their_power():
    from sim.costs.compute import gemm_time_s, kernel_load
    from sim.hardware import get_gpu
    from sim.types import Dtype
    from sim.workload.ops import GemmOp

    gpu = get_gpu("H100-SXM5-80GB")
    op = GemmOp(8192, 8192, 8192, Dtype.BF16)
    slim = dataclasses.replace(op, sm_margin=24)
    launch = gpu.kernel_launch_s
    assert gemm_time_s(gpu, slim) - launch == pytest.approx((gemm_time_s(gpu, op) - launch) * 132 / 108, rel=1e-12)
    assert kernel_load(gpu, slim).activity_w == pytest.approx(kernel_load(gpu, op).activity_w * 108 / 132)


def test_the_layer_gemms_beside_userbuffers_run_as_their_table_says():
    from sim.workload.layers import layer_ops

    t = 4
    w = make_workload(tp=t, sp=True, seq=512, hidden=1024, heads=16)

    def gemms(overlap, cfg=TE_DEFAULTS):
        par = dataclasses.replace(w.parallel, tp_comm_overlap=overlap, tp_comm_overlap_cfg=cfg)
        ops = layer_ops(w.model, par, w.dtype, tuple(range(t)), kernels=w.kernels)
        return _whole_gemms(ops.layer_fwd + ops.layer_bwd)

    plain, te = gemms(False), gemms(True)
    assert all(op.chunks == 1 and op.sm_margin == 0 for op in plain.values())
    expected = {"qkv": (t, 0), "fc1": (t, 0), "proj-dgrad": (t, 0), "fc2-dgrad": (t, 0),
                "proj": (4, 16), "fc2": (4, 16),
                "qkv-dgrad": (1, 16), "qkv-wgrad": (1, 16), "fc1-dgrad": (1, 16), "fc1-wgrad": (1, 16),
                "proj-wgrad": (1, 0), "fc2-wgrad": (1, 0)}
    assert {name: (op.chunks, op.sm_margin) for name, op in te.items()} == expected
    assert all(dataclasses.replace(te[n], chunks=1, sm_margin=0) == plain[n] for n in te)
    aggregated = gemms(True, userbuffers({"qkv_fprop": UbGemm(aggregate=True)}))
    assert aggregated["qkv"].chunks == t // 2 and aggregated["fc1"].chunks == t


@pytest.mark.parametrize("framework, dtype, proj", [
    ("Megatron-Bridge", "bf16", UbSplit(4, sm_margin=24)), ("Megatron-Bridge", "fp8", UbSplit(ring=True, sm_margin=1)),
    ("Megatron-Bridge", "mxfp8", UbSplit(ring=True, sm_margin=1)), ("NeMo 24.09", "fp8", UbSplit(4, sm_margin=24)),
    ("Megatron-LM core_r0.8.0", "fp8", UbSplit(4, sm_margin=16))])
def test_a_stack_fills_the_userbuffers_table_its_recipes_pass(tmp_path, framework, dtype, proj):
    """NeMo's and Megatron-Bridge's recipes pass per-model tables (bulk communicators beside
    GEMMs on every SM; Megatron-Bridge's FP8 tables ring-exchange the row-parallel forward
    GEMMs too); Megatron-LM without --tp-comm-overlap-cfg keeps Transformer Engine's defaults."""
    path = tmp_path / "w.yaml"
    path.write_text(f"""
name: w
framework: {framework}
dtype: {dtype}
model: {{num_layers: 2, hidden_size: 1024, num_attention_heads: 8, num_kv_heads: 8, ffn_hidden_size: 4096,
        vocab_size: 32000, seq_length: 1024}}
system: {{gpu: B200, num_gpus: 4, gpus_per_node: 8}}
parallel: {{tp: 4, pp: 1, dp: 1, micro_batch_size: 1, global_batch_size: 1, sequence_parallel: true,
           tp_comm_overlap: true}}
""")
    cfg = load_workload(str(path)).parallel.tp_comm_overlap_cfg
    assert cfg.split_of("proj_fprop") == proj
    bulk = UbSplit(sm_margin=16) if proj == UbSplit(4, sm_margin=16) else UbSplit()
    assert cfg.split_of("qkv_wgrad") == bulk
    assert cfg.sms_of("qkv_wgrad") == (0 if bulk.sm_margin else 24)


def test_a_table_takes_nemo_launchers_ones_and_zeros():
    cfg = load_workload("tiny", ["parallel.tp_comm_overlap_cfg={proj_fprop: {method: pipeline, num_sm: 24, "
                                 "num_splits: 2, set_sm_margin: 0}, qkv_fprop: {aggregate: 1}}"]
                        ).parallel.tp_comm_overlap_cfg
    assert cfg.split_of("proj_fprop") == UbSplit(2) and cfg.sms_of("proj_fprop") == 24
    assert cfg.split_of("qkv_fprop") == UbSplit(ring=True, aggregate=True)
    with pytest.raises(ConfigError) as err:
        load_workload("tiny", ["parallel.tp_comm_overlap_cfg={proj_fprop: {num_splits: 0}}"])
    assert err.value.field == "parallel.tp_comm_overlap_cfg.proj_fprop.num_splits"
