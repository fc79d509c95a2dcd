"""Mixture of experts: the model, expert parallelism, the all-to-all, memory and FLOPs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import sim
from sim.config import load_topology, load_workload, load_workload_with_notes
from sim.config.hf import read_hf_config
from sim.costs.comm import plan_comm
from sim.engine.network import solo_time_s
from sim.errors import ConfigError
from sim.memory import layer_activation_bytes, stage_memory, state_bytes
from sim.output.report import make_report
from sim.runner import simulate
from sim.topology.build import build_topology, ring_topology_spec
from sim.topology.choice import place_workload
from sim.topology.routing import Fabric
from sim.types import CollectiveKind, CommClass, Stream
from sim.workload.flops import model_flops
from sim.workload.ops import CommOp
from sim.workload.spec import ModelSpec
from tests.conftest import make_workload

HF = Path(sim.__file__).resolve().parent.parent / "workloads" / "hf"


def test_mixtral_from_its_hugging_face_config_has_its_published_size():
    """Mixtral 8x7B: 46.7 B parameters, 12.9 B active per token (Mistral AI, "Mixtral of
    Experts", arXiv 2401.04088, Sec. 2)."""
    fields = read_hf_config(HF / "mixtral-8x7b.json")
    assert (fields["num_experts"], fields["moe_top_k"]) == (8, 2)
    keys = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
            "vocab_size", "gated_mlp", "num_experts", "moe_top_k")
    m = ModelSpec("mixtral", seq_length=4096, **{k: fields[k] for k in keys})
    assert m.num_params() / 1e9 == pytest.approx(46.7, rel=0.01)
    assert m.active_params() / 1e9 == pytest.approx(12.9, rel=0.01)


def test_deepseek_style_fields_first_dense_layers_and_shared_experts(tmp_path):
    cfg = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 8,
           "vocab_size": 1000, "n_routed_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 256,
           "n_shared_experts": 1, "first_k_dense_replace": 1}
    path = tmp_path / "config.json"
    path.write_text(__import__("json").dumps(cfg))
    f = read_hf_config(path)
    assert (f["num_experts"], f["moe_top_k"], f["moe_ffn_hidden_size"], f["num_shared_experts"],
            f["first_dense_layers"]) == (16, 4, 256, 1, 1)


@pytest.mark.parametrize("kw,field", [
    (dict(ep=2, dp=2), "parallel.ep"),                          # EP on a dense model
    (dict(experts=6, ep=4, dp=4), "parallel.ep"),               # 4 does not divide 6 experts
    (dict(experts=4, ep=4, dp=2), "parallel.ep"),               # EP must divide DP x CP
    (dict(experts=4, ep=2, dp=2, zero=3), "parallel.zero_stage"),
])
def test_bad_expert_parallel_settings_are_one_clear_error(kw, field):
    with pytest.raises(ConfigError) as info:
        make_workload(gbs=8, **kw)
    assert info.value.field == field


def test_direct_all_to_all_on_two_gpus_is_one_send_each_way():
    bw, lat, size = 50e9, 2e-6, 1e8
    fabric = Fabric(build_topology(ring_topology_spec(2, bw, lat), 2))
    op = CommOp(CollectiveKind.ALL_TO_ALL, CommClass.EP, (0, 1), size)
    for representative in (False, True):
        plan = plan_comm(fabric, op, representative)
        assert plan.algorithm == "direct"
        assert solo_time_s(plan.phases, fabric.capacity_bytes_per_s) == pytest.approx(lat + size / 2 / bw)


def test_all_to_all_in_an_nvswitch_node_is_limited_by_each_gpus_nvlink():
    """8 GPUs behind NVSwitch: each sends 7/8 of its buffer over its own NVLink port, all at
    once, so the time is that over the port's bandwidth (at NCCL's efficiency for the size)."""
    fabric = Fabric(build_topology(load_topology("dgx-h100"), 8))
    size = 2**28
    op = CommOp(CollectiveKind.ALL_TO_ALL, CommClass.EP, tuple(range(8)), size)
    plan = plan_comm(fabric, op, False)
    route = fabric.route(0, 1)
    port = min(fabric.capacity_bytes_per_s[link] for link in route.links)
    fixed = fabric.graph.graph["collective_latency_s"]
    expected = fixed + route.latency_s + 7 / 8 * size / route.efficiency(size) / port
    assert solo_time_s(plan.phases, fabric.capacity_bytes_per_s) == pytest.approx(expected, rel=1e-9)


def test_expert_parallelism_divides_expert_weights_and_their_optimizer_state():
    dense_part = None
    for ep in (1, 2, 4):
        w = make_workload(experts=8, ep=ep, dp=4, gbs=8, dist_opt=True)
        sb = state_bytes(w.model, w.parallel, 0, kernels=w.kernels)
        experts = sum(w.model.expert_params(i) for i in range(w.model.num_layers))
        assert sb.expert_params == pytest.approx(experts / ep)
        if dense_part is None:
            dense_part = sb.params - sb.expert_params
        assert sb.params - sb.expert_params == pytest.approx(dense_part)
        # optimizer state: dense over dp = 4, experts over the expert-data-parallel group dp / ep
        assert sb.optimizer_bytes == pytest.approx(12 * (dense_part / 4 + experts / ep / (4 // ep)))


def test_moe_layer_stores_k_copies_of_each_tokens_expert_activations():
    dense = make_workload(experts=0, hidden=1024, seq=512)
    top1 = make_workload(experts=8, topk=1, hidden=1024, seq=512)
    top2 = make_workload(experts=8, topk=2, hidden=1024, seq=512)
    a = [layer_activation_bytes(w.model, w.parallel, moe=w.model.is_moe, kernels=w.kernels)
         for w in (dense, top1, top2)]
    assert a[0] < a[1] < a[2]
    # the k-th copy adds its expert input and the expert's MLP activations (and its weighted output)
    sb, h, f = 512, 1024, 4096
    assert a[2] - a[1] == pytest.approx(sb * (2 * h + 4 * f) + 2 * sb * h)


def test_moe_flops_count_the_active_experts_only():
    """Model FLOPs ~ 6 x active parameters x tokens (plus attention) for any number of experts."""
    base = make_workload(experts=8, topk=2, gbs=8, seq=512, hidden=1024)
    more = make_workload(experts=32, topk=2, gbs=8, seq=512, hidden=1024)
    f8, f32 = model_flops(base)[0], model_flops(more)[0]
    router = 3 * 2 * base.tokens_per_iteration * base.model.num_layers * 1024 * (32 - 8)
    assert f32 - f8 == pytest.approx(router)


def test_expert_parallel_run_has_all_to_alls_and_its_timeline_peak_is_the_closed_form():
    w = make_workload(tp=2, pp=2, dp=4, ep=2, experts=4, gbs=16, sp=True, dist_opt=True,
                      gpu="H100-SXM5-80GB")
    run = simulate(w, load_topology("dgx-h100"))
    ep_stream = [s for s in run.result.spans if s.stream is Stream.EP_COMM]
    a2a = [s for s in ep_stream if s.name.startswith("ncclAllToAll")]
    # 2 MoE layers per stage x (dispatch, combine) forward and backward x 4 micro-batches,
    # on each of the 2 simulated ranks; each beside the experts' TP gather or reduce-scatter of
    # its output or input, on its stream
    assert len(a2a) == 2 * 4 * 4 * 2 and len(ep_stream) == 2 * len(a2a)
    rep = make_report(run)
    assert rep.exposed_comm_s["ep"] >= 0
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


def test_mixtral_preset_runs():
    w = load_workload("mixtral-8x7b")
    assert w.model.is_moe and w.parallel.ep == 8
    rep = make_report(simulate(w, load_topology("dgx-h100")))
    assert 0 < rep.mfu < 1 and rep.exposed_comm_s["ep"] > 0


def _deepseek_fields(**over):
    fields = read_hf_config(HF / "deepseek-v3.json")
    for k in ("name", "activation", "seq_length", "normalization", "position_embedding"):
        fields.pop(k)
    fields.update(over)
    return fields


def test_deepseek_v3_from_its_hugging_face_config_has_its_published_size():
    """671 B parameters in the main model, 37 B activated per token (DeepSeek-V3 technical
    report, arXiv 2412.19437, Sec. 1 and 4.2); MLA heads of 192 (query/key) and 128 (value)."""
    m = ModelSpec("dsv3", seq_length=4096, **_deepseek_fields(mtp_num_layers=0))
    assert m.is_mla and m.is_moe and m.first_dense_layers == 3
    assert m.num_params() / 1e9 == pytest.approx(671, rel=0.005)
    assert m.active_params() / 1e9 == pytest.approx(37, rel=0.02)
    # "685B, which includes 671B of the Main Model weights and 14B of the Multi-Token Prediction
    # (MTP) Module weights" (deepseek-ai/DeepSeek-V3 README): the config's one module (its layer,
    # projection and norms) and the embedding and output head the checkpoint stores with it
    mtp = ModelSpec("dsv3", seq_length=4096, **_deepseek_fields())
    assert mtp.mtp_num_layers == 1 and mtp.num_params() - m.num_params() == mtp.mtp_params()
    assert (mtp.mtp_params() + 2 * m.embedding_params()) / 1e9 == pytest.approx(14, rel=0.05)
    assert (m.qk_head_dim, m.v_head_dim, m.head_dim) == (192, 128, 160)


def test_mla_attention_projections_and_kernel_flops():
    m = ModelSpec("dsv3", seq_length=4096, **_deepseek_fields())
    h, H = 7168, 128
    expected = (h * 1536 + 1536 * H * 192 + h * (512 + 64) + 512 * H * (128 + 128) + H * 128 * h
                + 1536 + 512)
    assert m.attention_params() == expected
    # the kernel: Q K^T over 192-wide heads, P V over 128-wide: 2 s^2 H (192 + 128) per sequence
    from sim.workload.ops import AttentionOp
    op = AttentionOp(1, H, H, 4096, m.head_dim, False, False)
    assert op.flops == pytest.approx(2 * 4096**2 * H * (192 + 128))


def test_a_small_deepseek_style_model_agrees_in_both_modes():
    """MLA + MoE with shared experts and a dense first layer, EP across nodes."""
    import dataclasses

    from sim.workload.spec import ModelSpec as MS
    w = make_workload(tp=1, pp=2, dp=4, ep=4, experts=8, topk=2, gbs=8, layers=4, gpu="H100-SXM5-80GB")
    m = MS("tiny-ds", 4, 1024, 16, 16, 4096, 32000, 512, gated_mlp=True, num_experts=8, moe_top_k=2,
           moe_ffn_hidden_size=512, num_shared_experts=1, first_dense_layers=1, q_lora_rank=256,
           kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64)
    w = dataclasses.replace(w, model=m)
    topo = load_topology("dgx-h100")
    topo = dataclasses.replace(topo, gpus_per_node=2,
                               scale_up=dataclasses.replace(topo.scale_up, domain_size=2),
                               scale_out=dataclasses.replace(topo.scale_out, nics_per_node=2))
    rep, full = make_report(simulate(w, topo)), make_report(simulate(w, topo, full=True))
    assert rep.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    assert rep.exposed_comm_s["ep"] == pytest.approx(full.exposed_comm_s["ep"], rel=1e-6)
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


def test_large_all_to_alls_are_priced_alone():
    """An all-to-all over 64 ranks has 126 flows out of and into each simulated rank; above
    MAX_SHARED_ALL_TO_ALL ranks it takes its solo time, the same every time it runs."""
    from sim.engine.simulation import MAX_SHARED_ALL_TO_ALL
    w = make_workload(tp=1, pp=1, dp=64, ep=64, experts=64, topk=2, gbs=64, layers=2, gpu="H100-SXM5-80GB")
    run = simulate(w, load_topology("dgx-h100"))
    spans = [s for s in run.result.spans if s.stream is Stream.EP_COMM and s.name.endswith("dispatch")]
    assert 64 > MAX_SHARED_ALL_TO_ALL and len(spans) == 2
    assert spans[0].end_s - spans[0].start_s == pytest.approx(spans[1].end_s - spans[1].start_s, rel=1e-12)


# --- expert tensor parallelism (MoE parallel folding) ----------------------------------------


def _with_experts_at(w, ep: int, etp: int | None):
    """``w`` with ``ep``-way expert parallelism and the experts at tensor-parallel degree ``etp``
    (set after building: with ``etp < tp`` EP need not divide DP)."""
    import dataclasses
    return dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, ep=ep, etp=etp))


@pytest.mark.parametrize("pp,dp", [(1, 4), (2, 4)])
def test_experts_folded_below_tp_agree_in_both_modes(pp, dp):
    """TP 2 attention, experts at ETP 1 over EP 4 (Megatron-Core's expert ``RankGenerator``
    folds each EP group over TP ranks): the representative rank and every rank simulated
    agree, and the experts' all-to-alls run with no TP gather around them."""
    w = make_workload(tp=2, pp=pp, dp=dp, experts=8, gbs=16, sp=True, dist_opt=True, gpu="H100-SXM5-80GB")
    w = _with_experts_at(w, ep=4, etp=1)
    topo = load_topology("dgx-h100")
    runs = simulate(w, topo), simulate(w, topo, full=True)
    rep, full = (make_report(r) for r in runs)
    assert rep.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    assert rep.exposed_comm_s["ep"] == pytest.approx(full.exposed_comm_s["ep"], rel=1e-6)
    spans = runs[0].result.spans
    assert any(s.stream is Stream.EP_COMM for s in spans)
    assert not [s for s in spans if s.stream is Stream.TP_COMM and s.name.endswith((" dispatch", " combine"))]
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


def test_expert_parallel_groups_may_span_context_parallel_ranks():
    """EP 4 over DP 2 x CP 4 (NeMo's Mixtral 8x22B runs EP 8 beside CP 8 at DP 4): Megatron-Core's
    expert rank generator draws each EP group from a stage's data- and context-parallel ranks,
    so EP need only divide DP x CP. The groups partition each stage, each EP group holds every
    CP coordinate of one data-parallel replica, and the representative rank and every rank
    simulated agree. EP 4 over DP 2 x CP 3 divides neither, and is refused."""
    from sim.workload.layout import Layout
    from sim.workload.spec import ParallelSpec
    w = make_workload(tp=1, dp=2, cp=4, ep=4, experts=8, gbs=4, seq=1024, dist_opt=True, gpu="H100-SXM5-80GB")
    lay = Layout.of(w.parallel)
    groups = lay.ep_groups(0)
    assert lay.folded and len(groups) == 2
    assert sorted(r for g in groups for r in g) == list(range(8))
    assert [sorted(lay.coords(r)[1] % 4 for r in g) for g in groups] == [[0, 1, 2, 3]] * 2
    assert [{lay.coords(r)[1] // 4 for r in g} for g in groups] == [{0}, {1}]
    topo = load_topology("dgx-h100")
    rep, full = (make_report(r) for r in (simulate(w, topo), simulate(w, topo, full=True)))
    assert rep.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    assert rep.exposed_comm_s["ep"] == pytest.approx(full.exposed_comm_s["ep"], rel=1e-6)
    with pytest.raises(ConfigError) as info:
        ParallelSpec(dp=2, cp=3, ep=4)
    assert info.value.field == "parallel.ep" and "parallel.dp x parallel.cp = 6" in str(info.value)


def test_experts_at_tp_reproduce_the_default_exactly():
    """``etp = tp`` is Megatron-Core's default: the same program and the same iteration."""
    w = make_workload(tp=2, pp=2, dp=4, ep=2, experts=4, gbs=16, sp=True, dist_opt=True, shared=1,
                      gpu="H100-SXM5-80GB")
    same = _with_experts_at(w, ep=2, etp=2)
    topo = load_topology("dgx-h100")
    a, b = make_report(simulate(w, topo)), make_report(simulate(same, topo))
    assert a.iteration_time_s == b.iteration_time_s
    assert [s.peak_memory_bytes for s in a.stages] == [s.peak_memory_bytes for s in b.stages]
    assert state_bytes(w.model, w.parallel, 0, kernels=w.kernels) == \
        state_bytes(same.model, same.parallel, 0, kernels=same.kernels)


@pytest.mark.parametrize("etp,ep", [(4, 1), (4, 4), (2, 4), (1, 4), (1, 8), (2, 8)])
def test_expert_state_is_divided_by_etp_times_ep(etp, ep):
    """Each GPU holds ``1 / (etp ep)`` of the experts; the distributed optimizer shards them
    over the ``tp dp / (etp ep)`` expert-data-parallel ranks (Megatron-Core's
    ``expert_data_parallel_size``), the rest over DP."""
    w = _with_experts_at(make_workload(tp=4, dp=4, experts=8, gbs=8, sp=True, dist_opt=True), ep, etp)
    sb = state_bytes(w.model, w.parallel, 0, kernels=w.kernels)
    experts = sum(w.model.expert_params(i) for i in range(w.model.num_layers))
    dense = sb.params - sb.expert_params
    assert sb.expert_params == pytest.approx(experts / (etp * ep))
    edp = 16 // (etp * ep)
    assert w.parallel.expert_dp == edp
    assert sb.optimizer_bytes == pytest.approx(12 * (dense / 4 + experts / (etp * ep) / edp))


def test_each_token_expert_pair_is_computed_once_whatever_the_expert_tp():
    """Folding moves work, not amounts: per rank the routed tokens sent and the expert GEMM
    FLOPs (``2 x T/t x k x f x h`` per projection) are the same at every ETP degree."""
    from sim.workload.layers import layer_ops
    from sim.workload.layout import Layout
    from sim.workload.ops import GemmOp
    w0 = make_workload(tp=4, dp=4, experts=8, gbs=8, sp=True)
    seen = set()
    for etp in (1, 2, 4):
        w = _with_experts_at(w0, 4, etp)
        lay = Layout.of(w.parallel)
        steps = layer_ops(w.model, w.parallel, w.dtype, lay.tp_group(0, 0), (), ep_group=lay.ep_group(0, 0, 0),
                          etp_group=lay.etp_group(0, 0, 0), kernels=w.kernels).moe.layer_fwd
        flops = sum(s.op.flops for s in steps if s.name.startswith("experts-") and isinstance(s.op, GemmOp))
        a2a = [s.op.size_bytes for s in steps if s.stream is Stream.EP_COMM and s.name.startswith("ncclAllToAll")]
        # the experts' TP gather runs on the all-to-all's stream, after it
        etp_groups = {s.op.group for s in steps if s.stream is Stream.EP_COMM and s.name == "ncclAllGather dispatch"}
        assert etp_groups == ({lay.etp_group(0, 0, 0)} if etp > 1 else set())
        seen.add((flops, tuple(a2a)))
    T, k, f, h = 512 // 4, 2, 4096, 1024
    assert seen == {(2 * 2 * T * k * f * h, (T * k * h * 2.0,) * 2)}


def test_folded_groups_follow_megatron_core_expert_rank_generator():
    """``RankGenerator(tp=etp, ep=ep, dp=edp, cp=1, order="tp-cp-ep-dp-pp")``: rank
    ``etp + ETP (ep + EP edp)`` within a stage; each kind of group partitions the stage."""
    from sim.workload.layout import Layout
    lay = Layout(4, 4, 2, ep=4, etp=2)
    assert lay.ep_group(0, 0, 0) == (0, 2, 4, 6) and lay.ep_group(1, 2, 1) == (25, 27, 29, 31)
    assert lay.etp_group(3, 0, 0) == (2, 3) and lay.edp_group(1, 0, 0) == (1, 9)
    for groups in (lay.ep_groups(1), lay.etp_groups(1), lay.edp_groups(1)):
        assert sorted(r for g in groups for r in g) == list(range(16, 32))


@pytest.mark.parametrize("kw,field", [
    (dict(tp=2, dp=4, ep=4, etp=3), "parallel.etp"),   # 3 x 4 does not divide 2 x 4 ranks
    (dict(tp=2, dp=2, ep=4, etp=2), "parallel.ep"),    # at TP, EP is carved out of DP
    (dict(tp=2, dp=4, ep=1, etp=0), "parallel.etp"),
])
def test_bad_expert_tensor_parallel_sizes_are_one_clear_error(kw, field):
    from sim.workload.spec import ParallelSpec
    with pytest.raises(ConfigError) as info:
        ParallelSpec(sequence_parallel=True, **kw)
    assert info.value.field == field


def test_expert_tp_must_split_the_experts_and_needs_experts():
    with pytest.raises(ConfigError) as info:
        _with_experts_at(make_workload(tp=2, dp=4, gbs=8, sp=True), 1, 1)
    assert info.value.field == "parallel.etp"
    with pytest.raises(ConfigError) as info:
        _with_experts_at(make_workload(tp=1, dp=8, experts=8, hidden=1001, heads=7, gbs=8), 1, 8)
    assert info.value.field == "parallel.etp" and "moe_ffn_hidden_size=4004" in str(info.value)


def test_megatron_expert_tensor_parallel_size_maps_to_parallel_etp():
    from sim.config.megatron_args import load_megatron_workload
    args = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
            "--global-batch-size 8 --vocab-size 32000 --bf16 --num-experts 8 --moe-router-topk 2 "
            "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 4 "
            "--expert-tensor-parallel-size 1")
    spec, notes = load_megatron_workload(args, gpu="A100-SXM4-80GB", num_gpus=8)
    assert (spec.parallel.tp, spec.parallel.ep, spec.parallel.etp, spec.parallel.expert_dp) == (2, 4, 1, 2)
    assert not any("expert-tensor" in n for n in notes)


def _bridge_moe_case(tmp_path, pp: int = 1, **system) -> Path:
    """A Megatron-Bridge MoE case of Qwen3-30B-A3B's shape, 128 experts top-8, at ``system``:
    TP 2, EP 32 (or all the GPUs of a stage), ``pp`` stages of one layer each."""
    doc = {
        "id": "bridge-moe",
        "model": {"name": "moe", "num_layers": max(pp, 4), "hidden_size": 2048, "num_attention_heads": 32,
                  "num_kv_heads": 4, "head_dim": 128, "ffn_hidden_size": 6144, "vocab_size": 151936, "seq_length": 4096,
                  "activation": "swiglu", "gated_mlp": True, "num_experts": 128, "moe_top_k": 8,
                  "moe_ffn_hidden_size": 768},
        "system": {"gpu": "GB200", **system},
        "parallel": {"tp": 2, "pp": 1, "cp": 1, "micro_batch_size": 1, "global_batch_size": 64},
        "dtype": "bf16",
        "framework": "NeMo 26.04 container / Megatron-Bridge",
    }
    dp = system["num_gpus"] // (2 * pp)
    doc["parallel"].update(pp=pp, dp=dp, ep=min(32, 2 * dp), global_batch_size=8 * dp)
    path = tmp_path / "bridge.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_megatron_bridge_folds_its_experts_over_the_tp_ranks(tmp_path):
    """Megatron-Bridge's MoE recipes set expert_tensor_parallel_size = 1, so EP may take the TP
    ranks too (EP 32 at TP 2, DP 16: Megatron-Bridge's Qwen3-235B H100 row); under
    Megatron-Core's own default (experts at the TP size) the same job is refused."""
    path = _bridge_moe_case(tmp_path, num_gpus=32)
    w, notes = load_workload_with_notes(str(path))
    assert w.parallel.etp == 1 and w.parallel.expert_dp == 1
    assert any(n.startswith("parallel.etp: null -> 1 (stack megatron-bridge") for n in notes)
    with pytest.raises(ConfigError, match="parallel.ep"):
        load_workload(str(path), ["stack=megatron-core"])


def test_a_multi_rack_gb200_job_runs_in_segments_under_nvidias_launch_scripts(tmp_path):
    """256 GB200 (64 trays) launched as NeMo's and Megatron-Bridge's scripts do (Slurm
    --segment 16) run as four NVLink domains of 64, so each pipeline stage of 32 GPUs, and its
    32-rank expert-parallel all-to-all, stays inside one; filled rack by rack (72, 72, 72, 40)
    three of the eight stages straddle two racks, their all-to-alls cross the network and the
    job is slower."""

    def placed(segments: bool | None):
        extra = {} if segments is None else {"nvlink_segments": segments}
        notes: list[str] = []
        w = load_workload(str(_bridge_moe_case(tmp_path, pp=8, num_gpus=256, **extra)))
        p = place_workload(w, None, notes)
        return w, p, notes

    w, seg, notes = placed(None)  # the stack's: segments
    assert w.system.nvlink_segments and seg.topology.scale_up.domain_size == 64
    assert any("segments of 16" in n for n in notes)
    _, fill, _ = placed(False)
    assert fill.topology.scale_up.domain_size == 72
    t_seg = simulate(seg.workload, seg.topology, granularity="chunk").result.makespan_s
    t_fill = simulate(fill.workload, fill.topology, granularity="chunk").result.makespan_s
    assert t_seg < 0.95 * t_fill  # 0.90 of it with GB200's 16-bit GEMMs as priced today
    # a job one rack holds is not changed
    small: list[str] = []
    one = place_workload(load_workload(str(_bridge_moe_case(tmp_path, num_gpus=64))), None, small)
    assert one.topology.scale_up.domain_size == 72 and not any("segments" in n for n in small)


@pytest.mark.parametrize("dtype", ["fp8", "mxfp8"])
def test_experts_quantize_their_operands_as_a_dense_layer_does(dtype):
    """Megatron-Core's experts are Transformer Engine linears in the layers' recipe: one expert
    per rank that gets every token (4 experts, top-1, EP 4, balanced routing) prices its three
    GEMMs of each projection exactly as the dense MLP of the same width prices fc1 and fc2,
    quantization of their operands included; in BF16 there is none to price."""
    import dataclasses

    from sim.types import Dtype
    from sim.workload.layers import layer_ops
    from sim.workload.layout import Layout
    from sim.workload.ops import GemmOp

    def gemms(w, prefixes):
        lay = Layout.of(w.parallel)
        ops = layer_ops(w.model, w.parallel, w.dtype, lay.tp_group(0, 0), (), ep_group=lay.ep_group(0, 0, 0),
                        kernels=w.kernels)
        layer = ops.moe if w.model.is_moe else ops
        steps = (*layer.layer_fwd, *layer.layer_bwd)
        return {s.name: s.op for s in steps if isinstance(s.op, GemmOp) and s.name.startswith(prefixes)}

    for d in (Dtype(dtype), Dtype.BF16):
        gpu = "B200" if d is Dtype.MXFP8 else "H100-SXM5-80GB"
        moe = dataclasses.replace(make_workload(dp=4, ep=4, experts=4, topk=1, gpu=gpu), dtype=d)
        dense = dataclasses.replace(make_workload(dp=4, gpu=gpu), dtype=d)
        experts, mlp = gemms(moe, ("experts-",)), gemms(dense, ("fc1", "fc2"))
        assert len(experts) == len(mlp) == 6
        for name, op in mlp.items():
            twin = experts["experts-" + name]
            assert (twin.flops, twin.extra_bytes, twin.extra_kernels, twin.epilogue_bytes) == \
                (op.flops, op.extra_bytes, op.extra_kernels, op.epilogue_bytes)
        assert (sum(op.extra_bytes for op in experts.values()) > 0) == (d is not Dtype.BF16)


def test_a_moe_case_under_tp_with_sequence_parallelism_null_runs_it(tmp_path):
    """Megatron-LM refuses a mixture-of-experts model under TP > 1 without sequence
    parallelism, so a case that leaves it null runs it, noted, whatever the stack's default
    (Megatron-Core's is off); a case that turns it off is still refused, naming the field."""
    case = {"name": "moe-sp", "framework": "Megatron-Core 0.12",
            "model": {"num_layers": 2, "hidden_size": 1024, "num_attention_heads": 8, "num_kv_heads": 8,
                      "ffn_hidden_size": 2048, "vocab_size": 32000, "seq_length": 1024, "num_experts": 8,
                      "moe_top_k": 2, "gated_mlp": True},
            "system": {"gpu": "H100-SXM5-80GB", "num_gpus": 8},
            "parallel": {"tp": 2, "pp": 1, "dp": 4, "ep": 4, "micro_batch_size": 1, "global_batch_size": 8,
                         "sequence_parallel": None}}
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(case))
    w, notes = load_workload_with_notes(str(path))
    assert w.parallel.sequence_parallel
    assert any(n.startswith("parallel.sequence_parallel: null -> true (a mixture-of-experts") for n in notes)
    case["parallel"]["sequence_parallel"] = False
    path.write_text(yaml.safe_dump(case))
    with pytest.raises(ConfigError) as err:
        load_workload(str(path))
    assert err.value.field == "parallel.sequence_parallel"


def _mixtral_open_ep(tmp_path, num_gpus: int = 8, **settings) -> str:
    """Mixtral 8x7B's shape on ``num_gpus`` H100s, data-parallel, its expert-parallel size not
    published; ``settings`` override ``parallel`` keys, or ``model`` keys they name."""
    par = {"tp": 1, "pp": 1, "dp": num_gpus, "ep": None, "micro_batch_size": 1, "global_batch_size": num_gpus}
    model = {"name": "probe", "num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_kv_heads": 8,
             "ffn_hidden_size": 14336, "vocab_size": 32000, "seq_length": 4096, "gated_mlp": True,
             "normalization": "rmsnorm", "num_experts": 8, "moe_top_k": 2}
    for key, value in settings.items():
        (model if key in model else par)[key] = value
    case = {"name": "moe-ep-open", "framework": "Megatron-Core (2024)", "model": model,
            "system": {"gpu": "H100-SXM5-80GB", "num_gpus": num_gpus, "gpus_per_node": 8}, "parallel": par}
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(case))
    return str(path)


def test_a_null_expert_parallel_size_that_does_not_fit_takes_the_smallest_that_fits(tmp_path):
    """Every expert on every GPU (EP 1, Megatron-Core's default) needs more than an H100 holds,
    memory savers and all, on 16 GPUs; the smallest EP that fits is taken and every smaller one
    does not fit; a published EP is kept, fitting or not; a model whose experts fit on every GPU
    keeps EP 1."""
    from sim.config.fit import fits_in_memory

    path = _mixtral_open_ep(tmp_path, dp=16, global_batch_size=16, num_gpus=16)
    w, notes = load_workload_with_notes(path)
    p = w.parallel
    assert p.ep > 1 and fits_in_memory(w)
    for smaller in (e for e in (1, 2, 4) if e < p.ep):
        assert not fits_in_memory(load_workload(_mixtral_open_ep(tmp_path, dp=16, global_batch_size=16,
                                                                 num_gpus=16, ep=smaller))), smaller
    note = next(n for n in notes if n.startswith(f"parallel.ep: null -> {p.ep} ("))
    assert "the smallest expert-parallel size that fits" in note and "at EP 1" in note
    kept = load_workload(_mixtral_open_ep(tmp_path, dp=16, global_batch_size=16, num_gpus=16, ep=1))
    assert kept.parallel.ep == 1 and not fits_in_memory(kept)
    small = load_workload(_mixtral_open_ep(tmp_path, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192,
                                           num_layers=16))
    assert small.parallel.ep == 1 and fits_in_memory(small)
