"""Hybrid sharding (HSDP, ``parallel.dp_shard``): groups, timeline, memory, config.

The byte counts are nccl-tests' bus bytes per rank (:func:`sim.studies.collective.bus_factor`): an
all-reduce of ``B`` bytes over ``n`` ranks moves ``2 (n-1)/n B`` in and out of each rank, a
reduce-scatter of ``B`` (its input) or an all-gather of ``B`` (its output) ``(n-1)/n B``.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from sim.cli import main
from sim.config import load_topology, load_workload, load_workload_with_notes
from sim.config.megatron_args import load_megatron_workload
from sim.errors import ConfigError
from sim.memory import memory_table, stage_memory, state_bytes
from sim.output.memory_report import format_memory
from sim.output.report import format_report, make_report
from sim.runner import simulate
from sim.studies.collective import bus_factor
from sim.studies.sweep.core import make_candidate
from sim.studies.sweep.memory_check import MemoryCheck
from sim.studies.sweep.timeline_bound import timeline_bound
from sim.types import CommClass, RecomputeKind, Stream
from sim.workload.dataparallel import GRAD_REDUCE_BYTES, PARAM_GATHER_BYTES
from sim.workload.layout import Layout
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload

DGX = load_topology("dgx-a100")


def _shard(w, dp_shard):
    return dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, dp_shard=dp_shard))


def _dp_bus_bytes(program, rank, name_part=""):
    """Bus bytes of ``rank``'s data-parallel collectives whose name contains ``name_part``."""
    return sum(bus_factor(t.op.collective, len(t.op.group)) * t.op.size_bytes for t in program.tasks
               if t.rank == rank and t.comm and t.op.comm_class is CommClass.DP and name_part in t.name)


# --- the layout -------------------------------------------------------------------------------


def test_shard_groups_are_consecutive_dp_ranks_and_replicas_stride_them():
    lay = Layout(2, 16, 2, cp=2, dp_replicate=2)  # tp 2, dp 8 x cp 2 -> shard groups of dp 4 x cp 2
    for pp in range(2):
        shards, reps = lay.dp_shard_groups(pp), lay.dp_replicate_groups(pp)
        every = sorted(r for g in lay.dp_groups(pp) for r in g)
        assert sorted(r for g in shards for r in g) == every == sorted(r for g in reps for r in g)
        for g in shards:  # the 8 dp-cp coordinates of a replica, one TP coordinate
            tps, dps = {lay.coords(r)[0] for r in g}, sorted(lay.coords(r)[1] for r in g)
            assert len(tps) == 1 and dps == list(range(dps[0], dps[0] + 8)) and dps[0] % 8 == 0
            assert max(g) - min(g) < 2 * 8 * 2  # within 32 consecutive ranks (a 32-GPU NVLink domain)
        for g in reps:
            assert len(g) == 2 and len({lay.coords(r)[1] % 8 for r in g}) == 1
        # every CP group lies inside one shard group (CP ranks hold the same shard)
        for cpg in lay.cp_groups(pp):
            assert any(set(cpg) <= set(g) for g in shards)


def test_without_replicas_the_shard_group_is_the_data_parallel_group():
    lay = Layout(2, 8, 2, cp=2)
    assert lay.dp_shard_groups(1) == lay.dp_groups(1)
    assert lay.dp_replicate_group(1, 3, 1) == (lay.rank(1, 3, 1),)


# --- results unchanged at dp_shard = dp ---------------------------------------------------------


@pytest.mark.parametrize("kw", [
    dict(tp=2, pp=2, dp=2, gbs=8, dist_opt=True),
    dict(tp=1, pp=1, dp=8, gbs=16, zero=2),
    dict(tp=1, pp=2, dp=4, gbs=8, zero=3),
    dict(tp=1, pp=1, dp=2, cp=2, gbs=4, zero=3, seq=2048),
    dict(tp=1, pp=1, dp=4, gbs=8, dist_opt=True, experts=4, ep=2),
])
def test_dp_shard_equal_to_dp_changes_nothing(kw):
    w = make_workload(layers=4, **kw)
    same = _shard(w, w.parallel.dp)
    assert not same.parallel.hybrid_shard
    for full in (False, True):
        a, b = simulate(w, DGX, full=full), simulate(same, DGX, full=full)
        assert [(s.rank, s.stream, s.name, s.start_s, s.end_s) for s in a.result.spans] == \
            [(s.rank, s.stream, s.name, s.start_s, s.end_s) for s in b.result.spans]
    for s in range(w.parallel.pp):
        assert stage_memory(w, s) == stage_memory(same, s)
    assert make_report(simulate(same, DGX)).parallel == make_report(simulate(w, DGX)).parallel


# --- bytes ----------------------------------------------------------------------------------------


def test_zero3_with_one_rank_shards_moves_the_bytes_of_a_plain_all_reduce():
    """dp_shard = 1 (cp 1): the reduce-scatter over a one-rank shard group moves nothing and
    the "shard" all-reduced across the dp replicas is the whole gradient, so per rank ZeRO-3
    moves sum_layers 2 (N-1)/N x 4 P_layer = 2 (N-1)/N x 4 P: DDP's bucketed all-reduce of
    the same parameters; and no weight is gathered."""
    kw = dict(tp=1, pp=2, dp=8, gbs=16, layers=4)  # under PP, FSDP reduces once per iteration
    ddp = build_program(make_workload(**kw))
    hsdp_w = _shard(make_workload(zero=3, **kw), 1)
    hsdp = build_program(hsdp_w)
    for stage in range(2):
        rank = Layout.of(hsdp_w.parallel).rank(0, 0, stage)
        plain = _dp_bus_bytes(ddp, rank, "grads")
        assert plain > 0
        assert _dp_bus_bytes(hsdp, rank, "grads") == pytest.approx(plain, rel=1e-12)
        assert _dp_bus_bytes(hsdp, rank) == pytest.approx(plain, rel=1e-12)  # nothing else: no gathers
    assert not [t for t in hsdp.tasks if t.stream is Stream.DP_GATHER or "ReduceScatter" in t.name]


@pytest.mark.parametrize("dp,dp_shard,cp", [(8, 4, 1), (8, 2, 1), (4, 2, 2), (8, 8, 1)])
def test_zero3_bytes_per_rank_are_the_hsdp_closed_form(dp, dp_shard, cp):
    """Per layer of P parameters, each rank all-gathers 2P bytes of weights over its shard
    group of S = dp_shard x cp ranks before the forward and the backward ((S-1)/S x 2P each),
    reduce-scatters 4P bytes of gradients over it ((S-1)/S x 4P) and all-reduces its 4P/S
    shard over the R = dp / dp_shard replicas (2 (R-1)/R x 4P/S)."""
    w = _shard(make_workload(tp=1, pp=1, dp=dp, cp=cp, gbs=dp, layers=3, zero=3, seq=1024), dp_shard)
    prog = build_program(w)
    S, R = dp_shard * cp, dp // dp_shard
    params = [t for t in prog.tasks if t.name == "ncclAllGather fsdp-params" and dict(t.args)["phase"] == "fwd"]
    P = sum(t.op.size_bytes for t in params) / PARAM_GATHER_BYTES  # the stage's layers, embedding folded in
    m = w.parallel.num_microbatches
    grads = m * P * GRAD_REDUCE_BYTES * ((S - 1) / S + 2 * (R - 1) / (R * S))
    gathers = m * 2 * P * PARAM_GATHER_BYTES * (S - 1) / S
    assert _dp_bus_bytes(prog, 0, "grads") == pytest.approx(grads, rel=1e-12)
    assert _dp_bus_bytes(prog, 0, "fsdp-params") == pytest.approx(gathers, rel=1e-12)
    for t in prog.tasks:
        if t.comm and t.op.comm_class is CommClass.DP:
            assert len(t.op.group) == (R if "(replicas)" in t.name else S)


def test_distributed_optimizer_instances_bytes_per_rank():
    """Megatron-LM with N optimizer instances: each bucket of P parameters is reduce-scattered
    within the instance (S ranks) and its shard all-reduced across the N instances; after the
    step the weights are all-gathered within the instance."""
    w = _shard(make_workload(tp=2, pp=1, dp=8, gbs=8, layers=4, dist_opt=True), 2)
    prog = build_program(w)
    S, R = 2, 4
    buckets = [dict(t.args)["params"] for t in prog.tasks if t.name == "ncclReduceScatter grads"]
    P = sum(buckets)
    assert len(buckets) == sum(1 for t in prog.tasks if t.name == "ncclAllReduce grads (replicas)")
    grads = P * GRAD_REDUCE_BYTES * ((S - 1) / S + 2 * (R - 1) / (R * S))
    assert _dp_bus_bytes(prog, 0, "grads") == pytest.approx(grads, rel=1e-12)
    sb = state_bytes(w.model, w.parallel, 0, kernels=w.kernels)
    assert _dp_bus_bytes(prog, 0, "params") == pytest.approx(sb.params * PARAM_GATHER_BYTES * (S - 1) / S)
    # both collectives of a bucket on Megatron's one communication stream
    assert {t.stream for t in prog.tasks if "grads" in t.name} == {Stream.DP_COMM}


def test_the_replica_all_reduce_follows_its_reduce_scatter_and_the_optimizer_waits():
    w = _shard(make_workload(tp=1, pp=1, dp=16, gbs=16, layers=4, zero=3, gpus_per_node=8), 8)
    run = simulate(w, DGX)
    spans = run.result.spans
    rs = {dict(s.args)["layer"]: s for s in spans if s.name == "ncclReduceScatter fsdp-grads"}
    ar = {dict(s.args)["layer"]: s for s in spans if s.name == "ncclAllReduce fsdp-grads (replicas)"}
    assert set(rs) == set(ar) == set(range(4))
    for layer in rs:
        assert ar[layer].stream is Stream.DP_REPLICATE and ar[layer].start_s >= rs[layer].end_s - 1e-15
    opt = next(s for s in spans if s.name == "optimizer")
    assert opt.start_s >= max(s.end_s for s in ar.values()) - 1e-15
    # the shard group is one node's NVLink domain, the replicas cross the network
    fab = run.fabric
    rs_op = next(t.op for t in run.program.tasks if t.name == "ncclReduceScatter fsdp-grads")
    ar_op = next(t.op for t in run.program.tasks if t.name == "ncclAllReduce fsdp-grads (replicas)")
    assert len({fab.domain_key(r) for r in rs_op.group}) == 1
    assert len({fab.domain_key(r) for r in ar_op.group}) == 2


@pytest.mark.parametrize("kw,dp_shard", [
    (dict(tp=2, pp=2, dp=8, gbs=16, zero=3), 2),
    (dict(tp=1, pp=2, dp=8, gbs=16, dist_opt=True, overlap=False), 4),
    (dict(tp=1, pp=1, dp=8, gbs=8, dist_opt=True, experts=8, ep=2), 4),
])
def test_one_rank_per_stage_stands_for_all_under_hybrid_sharding(kw, dp_shard):
    """Shard and replicate groups are symmetric, so the representative run (replica groups'
    flows folded into link weights) times the iteration as simulating every rank does."""
    w = _shard(make_workload(layers=4, **kw), dp_shard)
    rep, full = simulate(w, DGX).result.makespan_s, simulate(w, DGX, full=True).result.makespan_s
    assert rep == pytest.approx(full, rel=1e-12)
    assert rep != pytest.approx(simulate(_shard(w, None), DGX).result.makespan_s, rel=1e-6)


# --- memory ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("zero,dist_opt", [(0, True), (2, False), (3, False)])
@pytest.mark.parametrize("cp", [1, 2])
def test_sharded_state_scales_as_one_over_dp_shard(zero, dist_opt, cp):
    w = make_workload(tp=2, pp=2, dp=8, cp=cp, gbs=16, layers=4, zero=zero, dist_opt=dist_opt, seq=1024)
    full = state_bytes(w.model, w.parallel, 1, kernels=w.kernels)
    for n in (1, 2, 4, 8):
        sb = state_bytes(w.model, w.parallel if n == 8 else _shard(w, n).parallel, 1, kernels=w.kernels)
        assert sb.optimizer_bytes == pytest.approx(full.optimizer_bytes * 8 / n, rel=1e-12)
        assert sb.grads_bytes == pytest.approx(full.grads_bytes * (8 / n if zero >= 2 else 1), rel=1e-12)
        assert sb.weights_bytes == pytest.approx(full.weights_bytes * (8 / n if zero >= 3 else 1), rel=1e-12)
        # ZeRO-1: 12 bytes of optimizer state per parameter over dp_shard x cp ranks
        assert sb.optimizer_bytes == pytest.approx(12.0 * sb.params / (n * cp), rel=1e-12)


def test_expert_state_is_sharded_over_the_expert_group_of_one_replica():
    w = make_workload(tp=1, pp=1, dp=8, gbs=8, layers=2, dist_opt=True, experts=8, ep=4)
    hybrid = _shard(w, 4)  # 2 replicas; expert-data-parallel degree 8 / 4 = 2, 1 rank per replica
    a = state_bytes(w.model, w.parallel, 0, kernels=w.kernels)
    b = state_bytes(hybrid.model, hybrid.parallel, 0, kernels=hybrid.kernels)
    dense = a.params - a.expert_params
    assert b.optimizer_bytes == pytest.approx(12.0 * (dense / 4 + a.expert_params / 1), rel=1e-12)
    prog = build_program(hybrid)
    names = {t.name for t in prog.tasks if t.comm and t.op.comm_class is CommClass.DP}
    assert "ncclAllReduce expert-grads (replicas)" in names
    assert "ncclReduceScatter expert-grads" not in names  # one rank per expert shard group


@pytest.mark.parametrize("kw", [
    dict(tp=2, pp=2, dp=8, gbs=16, zero=3),
    dict(tp=1, pp=4, dp=4, gbs=16, dist_opt=True),
    dict(tp=2, pp=1, dp=4, cp=2, gbs=8, zero=2, seq=1024),
])
def test_sweep_memory_check_is_the_closed_form_with_hybrid_sharding(kw):
    """One MemoryCheck across shard degrees (its caches keyed by the degree) gives
    :func:`sim.memory.stage_memory`'s peak float for float."""
    w = make_workload(layers=8, **kw)
    check = MemoryCheck()
    dp = w.parallel.dp
    for n in [d for d in range(1, dp + 1) if dp % d == 0] + [None]:
        c = _shard(w, n)
        want = max(stage_memory(c, s).total_bytes for s in range(c.parallel.pp))
        assert check.fitting_peak_bytes(dataclasses.replace(c, system=dataclasses.replace(
            c.system, gpu=dataclasses.replace(c.system.gpu, hbm_capacity_bytes=1e15)))) == want


def test_timeline_bound_stays_below_the_hybrid_simulation():
    w = _shard(make_workload(tp=1, pp=2, dp=8, gbs=16, layers=4, dist_opt=True, overlap=False), 2)
    bound = timeline_bound(DGX, w.model, w.system.gpu).lower_bound_s(w)
    assert 0 < bound <= simulate(w, DGX).result.makespan_s


# --- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize("sets,expected", [
    (["parallel.dp_shard=3"], "divisor of parallel.dp=8"),
    (["parallel.dp_shard=0"], "positive integer"),
    (["parallel.dp_shard=-2"], "positive integer"),
    (["parallel.dp_shard=true"], "integer"),
    (["parallel.dp_shard=2", "parallel.distributed_optimizer=false"], "without the distributed optimizer"),
])
def test_bad_dp_shard_is_one_config_error(sets, expected):
    with pytest.raises(ConfigError) as err:
        load_workload("llama3-8b-h100", sets)
    assert err.value.field == "parallel.dp_shard" and expected in err.value.expected
    assert "llama3-8b-h100.yaml" in err.value.path


def test_replicas_must_divide_the_expert_data_parallel_degree():
    with pytest.raises(ConfigError) as err:
        load_workload("mixtral-8x7b", ["parallel.dp_shard=1"])  # 16 replicas, 16 x 8 / (8 x 8) = 2 experts' DP
    assert err.value.field == "parallel.dp_shard" and "expert-data-parallel" in err.value.expected


def test_cli_names_the_field_and_exits_2(capsys):
    assert main(["run", "llama3-8b-h100", "--set", "parallel.dp_shard=5"]) == 2
    err = capsys.readouterr().err
    assert "parallel.dp_shard" in err and "Traceback" not in err


def test_the_default_is_noted_where_something_is_sharded():
    _, notes = load_workload_with_notes("llama3-8b-h100")
    assert any(n.startswith("parallel.dp_shard: null -> 8 (full sharding") for n in notes)
    _, notes = load_workload_with_notes("llama3-8b-h100", ["parallel.dp_shard=4"])
    assert not any(n.startswith("parallel.dp_shard") for n in notes)
    _, notes = load_workload_with_notes("tiny")  # ZeRO 0: nothing to shard, nothing noted
    assert not any(n.startswith("parallel.dp_shard") for n in notes)


def test_report_shows_the_shard_degree_only_when_hybrid(tmp_path):
    w = load_workload("llama3-8b-h100", ["parallel.dp_shard=4"])
    rep = make_report(simulate(w, DGX))
    assert rep.parallel["dp_shard"] == 4 and rep.parallel["dp_replicate"] == 2
    assert "DP 8 (shard 4 x 2 replicas)" in format_report(rep)
    out = tmp_path / "r.json"
    assert main(["run", "llama3-8b-h100", "--set", "parallel.dp_shard=2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["parallel"]["dp_shard"] == 2
    plain = make_report(simulate(load_workload("llama3-8b-h100"), DGX))
    assert "dp_shard" not in plain.parallel and "shard" not in format_report(plain).splitlines()[1]
    assert "ZeRO-1 (shard 4 x 2 replicas)" in format_memory(w, memory_table(w, [RecomputeKind.NONE]), [])


_MEGATRON = ("--tensor-model-parallel-size 2 --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
             "--seq-length 1024 --max-position-embeddings 1024 --vocab-size 32000 --micro-batch-size 1 "
             "--global-batch-size 32 --bf16 --use-distributed-optimizer --overlap-grad-reduce ")


def test_megatron_optimizer_instances_set_the_shard_degree():
    spec, notes = load_megatron_workload(_MEGATRON + "--num-distributed-optimizer-instances 4",
                                         gpu="H100-SXM5-80GB", num_gpus=32)
    assert spec.parallel.dp == 16 and spec.parallel.dp_shard == 4 and spec.parallel.dp_replicate == 4
    assert any("--num-distributed-optimizer-instances 4 -> parallel.dp_shard 4" in n for n in notes)
    assert not any("num-distributed-optimizer-instances" in n and "not modelled" in n for n in notes)
    one, _ = load_megatron_workload(_MEGATRON + "--num-distributed-optimizer-instances 1",
                                    gpu="H100-SXM5-80GB", num_gpus=32)
    assert one.parallel.dp_shard is None


@pytest.mark.parametrize("extra,expected", [
    ("--num-distributed-optimizer-instances 3", "a divisor of DP = 16"),
    ("--num-distributed-optimizer-instances 0", "positive integer"),
])
def test_megatron_bad_instances(extra, expected):
    with pytest.raises(ConfigError) as err:
        load_megatron_workload(_MEGATRON + extra, gpu="H100-SXM5-80GB", num_gpus=32)
    assert err.value.field == "--num-distributed-optimizer-instances" and expected in err.value.expected


def test_megatron_instances_need_the_distributed_optimizer():
    text = _MEGATRON.replace("--use-distributed-optimizer ", "") + "--num-distributed-optimizer-instances 2"
    with pytest.raises(ConfigError) as err:
        load_megatron_workload(text, gpu="H100-SXM5-80GB", num_gpus=32)
    assert "Partial DistOpt" in err.value.expected


def test_sweep_candidates_keep_the_shard_degree_only_at_the_workloads_own_dp():
    w = load_workload("llama3-8b-h100", ["parallel.dp_shard=4", "system.num_gpus=16", "parallel.dp=16",
                                         "parallel.global_batch_size=32"])
    own = dict(tp=1, pp=1, dp=16, cp=1, ep=1, virtual_pipeline_stages=1, schedule=w.parallel.schedule,
               micro_batch_size=1, recompute=w.parallel.recompute, sequence_parallel=False, zero_stage=1)
    assert make_candidate(w, own) == w
    assert make_candidate(w, {**own, "tp": 2, "dp": 8}).parallel.dp_shard is None
    assert make_candidate(w, {**own, "zero_stage": 3}).parallel.dp_shard is None


def test_chakra_export_of_a_hybrid_run_asks_for_full(tmp_path):
    from sim.export.chakra import export_chakra

    w = _shard(make_workload(tp=1, pp=1, dp=4, gbs=4, layers=2, dist_opt=True), 2)
    with pytest.raises(ConfigError) as err:
        export_chakra(simulate(w, DGX), tmp_path)
    assert err.value.field == "parallel.dp_shard"
    assert export_chakra(simulate(w, DGX, full=True), tmp_path).synthesized_ranks == 0
