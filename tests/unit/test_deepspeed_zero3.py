"""DeepSpeed v0.3's ZeRO-3 (``parallel.zero_impl: deepspeed-0.3``): the mapping from a case's
framework text, the collectives it issues (per parameter, blocking, fp16 gradients, re-gathered
by full recomputation), and what issuing each costs (:mod:`sim.workload.deepspeed_zero3`)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.config import load_topology, load_workload_with_notes
from sim.costs.comm import plan_comm
from sim.errors import ConfigError
from sim.hardware import get_gpu
from sim.runner import simulate
from sim.topology.build import build_topology
from sim.topology.routing import Fabric
from sim.types import CollectiveKind, CommClass, RecomputeKind, Stream, ZeroImpl
from sim.workload import deepspeed_zero3 as ds3
from sim.workload.dataparallel import PARAM_GATHER_BYTES
from sim.workload.ops import CommOp
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload

DGX = load_topology("dgx-a100")


def _ds(w, impl=ZeroImpl.DEEPSPEED_0_3):
    return dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, zero_impl=impl))


def _yaml(tmp_path, framework: str, zero: int, extra: str = "") -> str:
    path = tmp_path / "case.yaml"
    path.write_text(f"""
name: case
framework: "{framework}"
model: {{num_layers: 2, hidden_size: 1024, num_attention_heads: 8, num_kv_heads: 8, ffn_hidden_size: 4096,
        vocab_size: 32000, seq_length: 1024}}
system: {{gpu: A100-SXM4-80GB, num_gpus: 16, gpus_per_node: 8}}
parallel: {{tp: 1, pp: 1, dp: 16, micro_batch_size: 1, global_batch_size: 16, recompute: full,
           zero_stage: {zero}{extra}}}
""")
    return str(path)


# --- the mapping from the case's framework text ---------------------------------------------------


@pytest.mark.parametrize("framework,zero,impl", [
    ("Megatron-LM (+DeepSpeed ZeRO-3 for zero3 rows)", 3, ZeroImpl.DEEPSPEED_0_3),
    ("Megatron-DeepSpeed (DeepSpeed 0.3.16)", 3, ZeroImpl.DEEPSPEED_0_3),
    ("Megatron-DeepSpeed (DeepSpeed v0.9.2)", 3, ZeroImpl.FSDP),
    ("DeepSpeed ZeRO-3 (2023)", 3, ZeroImpl.FSDP),
    ("torchtitan (2024)", 3, ZeroImpl.FSDP),
    ("Megatron-LM (+DeepSpeed ZeRO-3 for zero3 rows)", 0, ZeroImpl.FSDP),
])
def test_framework_text_sets_the_zero3_implementation(tmp_path, framework, zero, impl):
    w, notes = load_workload_with_notes(_yaml(tmp_path, framework, zero))
    assert w.parallel.zero_impl is impl
    noted = [n for n in notes if n.startswith("parallel.zero_impl")]
    assert bool(noted) == (impl is ZeroImpl.DEEPSPEED_0_3)  # the stack's choice is noted where not FSDP's


def test_a_given_zero_impl_wins_and_a_bad_one_is_a_config_error(tmp_path):
    w, notes = load_workload_with_notes(_yaml(tmp_path, "DeepSpeed 0.3", 3, ", zero_impl: fsdp"))
    assert w.parallel.zero_impl is ZeroImpl.FSDP and not any(n.startswith("parallel.zero_impl") for n in notes)
    with pytest.raises(ConfigError) as err:
        load_workload_with_notes(_yaml(tmp_path, "DeepSpeed 0.3", 3, ", zero_impl: megatron"))
    assert err.value.field == "parallel.zero_impl"


def test_deepspeed_zero3_with_pipeline_parallelism_is_refused():
    w = make_workload(layers=4, pp=2, dp=2, gbs=4, zero=3)
    with pytest.raises(ConfigError) as err:
        _ds(w)
    assert err.value.field == "parallel.zero_impl"


# --- the collectives --------------------------------------------------------------------------


def _dp_tasks(program, rank, name):
    return [t for t in program.tasks if t.rank == rank and t.comm and t.op.comm_class is CommClass.DP
            and t.name == name]


@pytest.mark.parametrize("recompute", [RecomputeKind.FULL, RecomputeKind.NONE])
def test_one_gather_per_weight_per_use_and_one_fp16_reduce_scatter_per_tensor(recompute):
    layers, dp = 3, 16
    w = _ds(make_workload(layers=layers, dp=dp, gbs=dp, zero=3, recompute=recompute, tied=True))
    m = w.model
    prog = build_program(w)
    tensors = ds3.layer_tensors(m, 0, 1)
    big, small = ds3.gathered(tensors), ds3.persistent(tensors)
    assert len(big) == 4 and len(small) == 4  # qkv, proj, fc1, fc2; two norms' weight and bias
    gathers = _dp_tasks(prog, 0, "ncclAllGather ds-param")
    # forward: every weight (and the embedding in the first layer); backward: again, and with
    # full recomputation once more for the recomputed forward, less the layer's last weight
    per_layer = len(big) * (3 if recompute is RecomputeKind.FULL else 2) - (recompute is RecomputeKind.FULL)
    emb_uses = 3 if recompute is RecomputeKind.FULL else 2
    assert len(gathers) == layers * per_layer + emb_uses
    assert sorted({t.op.size_bytes for t in gathers}) == sorted(
        {x * PARAM_GATHER_BYTES for x in big} | {m.embedding_params() * PARAM_GATHER_BYTES})
    reduces = _dp_tasks(prog, 0, "ncclReduceScatter ds-grads")
    assert len(reduces) == layers * len(tensors) + 1  # every tensor, the embedding once
    assert sum(t.op.size_bytes for t in reduces) == pytest.approx(
        (layers * sum(tensors) + m.embedding_params()) * ds3.GRAD_BYTES)
    assert all(len(t.op.group) == dp for t in gathers + reduces)
    persist = _dp_tasks(prog, 0, "ncclAllGather ds-persistent-params")
    assert len(persist) == 1
    assert persist[0].op.size_bytes == pytest.approx((layers * sum(small) + 2 * m.hidden_size) * PARAM_GATHER_BYTES)


def test_gathers_are_blocking_where_fsdp_prefetches():
    """Each DeepSpeed 0.3 gather waits for the compute issued before it (its
    torch.cuda.synchronize) and for the reduce-scatters still in flight, and the next compute
    waits for it; FSDP's gather of a layer is issued when the layer before starts."""
    w = make_workload(layers=3, dp=16, gbs=16, zero=3, recompute=RecomputeKind.FULL)
    for impl in (ZeroImpl.DEEPSPEED_0_3, ZeroImpl.FSDP):
        prog = build_program(_ds(w, impl))
        tasks = prog.tasks
        compute = [t.id for t in tasks if t.rank == 0 and t.stream is Stream.COMPUTE]
        name = "ncclAllGather ds-param" if impl is ZeroImpl.DEEPSPEED_0_3 else "ncclAllGather fsdp-params"
        gathers = _dp_tasks(prog, 0, name)
        assert gathers
        blocking = []
        for g in gathers:
            before = [c for c in compute if c < g.id]
            blocking.append(bool(before) and before[-1] in g.deps)
            if impl is ZeroImpl.DEEPSPEED_0_3:
                after = [c for c in compute if c > g.id]
                assert g.id in tasks[after[0]].deps  # the next compute waits for it
        if impl is ZeroImpl.DEEPSPEED_0_3:
            assert all(blocking[1:])  # (the very first one has no compute before it)
        else:
            assert not all(blocking[1:])  # prefetched: issued before the layer ahead has run
        if impl is ZeroImpl.DEEPSPEED_0_3:
            reduces = {t.id for t in _dp_tasks(prog, 0, "ncclReduceScatter ds-grads")}
            later = [g for g in gathers if any(r < g.id for r in reduces)]
            assert later and all(set(g.deps) & reduces for g in later[:1])


def test_the_issue_cost_is_per_rank_and_lands_in_the_collective_latency():
    gpu = get_gpu("A100-SXM4-80GB")
    assert ds3.gather_issue_s(1536, 0.0, gpu) == pytest.approx(1536 * (ds3.PY_TENSOR_OP_S + gpu.kernel_launch_s))
    assert ds3.gather_issue_s(768, 0.0, gpu) == pytest.approx(ds3.gather_issue_s(1536, 0.0, gpu) / 2)
    size = 2.0**30
    hbm = gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency
    # zeroing the output, the copies out of the flattened buffer (read, write), the debug
    # print's norm (a read): four passes over the gathered tensor
    assert ds3.gather_issue_s(8, size, gpu) - ds3.gather_issue_s(8, 0.0, gpu) == pytest.approx(4 * size / hbm)
    assert ds3.reduce_issue_s(64, 0.0, gpu) == pytest.approx(64 * gpu.kernel_launch_s)
    assert ds3.persistent_issue_s(16, 10, 0.0, gpu) == pytest.approx(
        16 * gpu.kernel_launch_s + 10 * 16 * ds3.UNPACK_OPS_PER_RANK * ds3.PY_TENSOR_OP_S)
    fab = Fabric(build_topology(DGX, 16))
    plain = CommOp(CollectiveKind.ALL_GATHER, CommClass.DP, tuple(range(16)), 2.0**24)
    listed = dataclasses.replace(plain, issue_s=1e-3)
    a, b = plan_comm(fab, plain, False), plan_comm(fab, listed, False)
    assert b.phases[0].latency_s - a.phases[0].latency_s == pytest.approx(1e-3)
    assert [f.size_bytes for f in b.phases[0].flows] == [f.size_bytes for f in a.phases[0].flows]


def test_each_parameter_gather_carries_the_fetch_host_time_and_nothing_else_does():
    """The module hooks' host time is charged once per gathered tensor, on top of the per-rank
    issue cost; the reduce-scatters and the step's persistent gather do not carry it."""
    w = _ds(make_workload(layers=2, dp=16, gbs=16, zero=3, recompute=RecomputeKind.FULL))
    prog = build_program(w)
    gpu = w.system.gpu
    gathers = _dp_tasks(prog, 0, "ncclAllGather ds-param")
    assert gathers
    for t in gathers:
        bare = ds3.gather_issue_s(16, t.op.size_bytes, gpu)
        assert t.op.issue_s == pytest.approx(bare + ds3.FETCH_HOST_S)
    for t in _dp_tasks(prog, 0, "ncclReduceScatter ds-grads"):
        assert t.op.issue_s == pytest.approx(ds3.reduce_issue_s(16, t.op.size_bytes, gpu))
    persist = _dp_tasks(prog, 0, "ncclAllGather ds-persistent-params")[0]
    count = 2 * len(ds3.persistent(ds3.layer_tensors(w.model, 0, 1))) + 2  # and the final norm's two
    assert persist.op.issue_s == pytest.approx(ds3.persistent_issue_s(16, count, persist.op.size_bytes, gpu))


@pytest.mark.parametrize("recompute", [RecomputeKind.FULL, RecomputeKind.NONE])
def test_the_fetch_host_time_is_exposed_once_per_gather(monkeypatch, recompute):
    """The gathers are blocking, so each one's host time lengthens the iteration by itself:
    the makespan grows by exactly (number of gathers) x the added time; FSDP does not move."""
    def run(impl, host_s):
        monkeypatch.setattr(ds3, "FETCH_HOST_S", host_s)
        w = _ds(make_workload(layers=2, dp=16, gbs=16, zero=3, recompute=recompute), impl)
        return simulate(w, DGX).result.makespan_s, len(_dp_tasks(build_program(w), 0, "ncclAllGather ds-param"))
    (base, n), (more, n2) = run(ZeroImpl.DEEPSPEED_0_3, 0.0), run(ZeroImpl.DEEPSPEED_0_3, 1e-3)
    assert n == n2 > 0
    assert more - base == pytest.approx(n * 1e-3, rel=1e-6)
    assert run(ZeroImpl.FSDP, 0.0)[0] == run(ZeroImpl.FSDP, 1e-3)[0]


def test_per_parameter_blocking_collectives_cost_time_growing_with_the_group():
    """The same per-GPU work over more ranks: FSDP's overlapped gathers stay hidden, DeepSpeed
    0.3's serialized per-parameter collectives add time that grows with the group."""
    def run(dp, impl):
        w = _ds(make_workload(layers=2, dp=dp, gbs=dp, zero=3, recompute=RecomputeKind.FULL), impl)
        return simulate(w, DGX).result.makespan_s
    fsdp16, fsdp64 = run(16, ZeroImpl.FSDP), run(64, ZeroImpl.FSDP)
    ds16, ds64 = run(16, ZeroImpl.DEEPSPEED_0_3), run(64, ZeroImpl.DEEPSPEED_0_3)
    assert ds16 > fsdp16 and ds64 > fsdp64
    assert ds64 - fsdp64 > ds16 - fsdp16


@pytest.mark.parametrize("granularity", ["layer", "chunk"])
def test_layer_and_chunk_blocks_keep_the_op_timeline(granularity):
    """Under fixed costs a layer block starts and ends when its first and last op would, so
    the blocking per-parameter collectives give the same timeline at every granularity."""
    from sim.costs.base import FixedCostModel
    from sim.engine import Simulation
    from sim.types import OpKind
    fixed = FixedCostModel({OpKind.GEMM: 1.0, OpKind.ATTENTION: 0.7, OpKind.NORM: 0.1, OpKind.ELEMENTWISE: 0.05,
                            OpKind.LOSS: 0.3, OpKind.EMBEDDING: 0.2, OpKind.OPTIMIZER: 0.5}, comm_s=0.4)
    w = _ds(make_workload(layers=3, dp=4, gbs=8, zero=3, recompute=RecomputeKind.FULL, tied=True))
    op = Simulation(build_program(w), fixed).run()
    blk = Simulation(build_program(w, granularity=granularity), fixed).run()
    assert blk.makespan_s == pytest.approx(op.makespan_s, rel=1e-12)
