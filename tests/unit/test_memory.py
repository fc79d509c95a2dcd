"""Memory per GPU: the closed forms, the timeline, and published numbers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.config import load_cases, load_topology, load_workload
from sim.config.fit import peak_memory_bytes
from sim.hardware import get_gpu
from sim.memory import activation_model, layer_activation_bytes, stage_memory, stage_params, state_bytes
from sim.output.report import make_report
from sim.runner import simulate
from sim.types import Dtype, RecomputeKind, ScheduleKind
from sim.units import GB, GiB
from tests.conftest import make_workload, replace_settings

ROOT = Path(__file__).resolve().parents[2]

GPT3 = dict(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200, tp=8, pp=8, gbs=64)


@pytest.mark.parametrize("sp,recompute,units_of_sbh", [
    # Korthikanti et al. 2022, Table 2, for GPT-3 175B at TP 8 (as in the seed paper's notes)
    (False, RecomputeKind.NONE, 23.0),
    (True, RecomputeKind.NONE, 14.25),
    (False, RecomputeKind.SELECTIVE, 13.0),
    (True, RecomputeKind.SELECTIVE, 4.25),
    (False, RecomputeKind.FULL, 2.0),
])
def test_gpt3_activations_per_layer_match_the_paper(sp, recompute, units_of_sbh):
    w = make_workload(**GPT3, sp=sp, recompute=recompute, flash=False)
    sbh = 2048 * 1 * 12288
    assert layer_activation_bytes(w.model, w.parallel, kernels=w.kernels) / sbh == pytest.approx(units_of_sbh)


def test_gpt3_model_state_per_gpu_matches_the_paper():
    """2.73 B parameters per GPU at TP 8 x PP 8; 18 B per parameter (fp32 gradients) is 49 GB."""
    w = make_workload(**GPT3)
    params = stage_params(w.model, w.parallel, 3)
    assert params == pytest.approx(2.73e9, rel=0.01)
    sb = state_bytes(w.model, w.parallel, 3, kernels=w.kernels)
    assert sb.total_bytes / params == pytest.approx(18.0)
    assert sb.total_bytes / GB == pytest.approx(49.2, rel=0.01)


def test_flash_attention_stores_no_scores_so_selective_saves_nothing_more():
    w = make_workload(**GPT3, sp=True)
    none = layer_activation_bytes(w.model, w.parallel, RecomputeKind.NONE, kernels=w.kernels)
    sel = layer_activation_bytes(w.model, w.parallel, RecomputeKind.SELECTIVE, kernels=w.kernels)
    assert none == sel == pytest.approx(2048 * 12288 * 34 / 8 + 4 * 12 * 2048)


@pytest.mark.parametrize("schedule,vps,layers", [
    (ScheduleKind.GPIPE, 1, 4), (ScheduleKind.ONE_F_ONE_B, 1, 4), (ScheduleKind.INTERLEAVED, 2, 8),
])
@pytest.mark.parametrize("recompute", list(RecomputeKind))
def test_timeline_peak_equals_the_schedule_walk(schedule, vps, layers, recompute):
    w = make_workload(tp=2, pp=4, dp=1, gbs=8, layers=layers, vps=vps, schedule=schedule, recompute=recompute,
                      sp=True)
    rep = make_report(simulate(w, load_topology("dgx-a100")))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


@pytest.mark.parametrize("m", [2, 4, 8])
def test_1f1b_closed_form(m):
    """Stage s holds min(p - s, m) micro-batches of L/p layers (Korthikanti et al. 2022, Sec. 4.3)."""
    p, L = 4, 8
    w = make_workload(pp=p, gbs=m, layers=L)
    a = activation_model(w).layer_stored
    for s in range(1, p - 1):  # the middle stages hold no embedding or head
        assert stage_memory(w, s).activations_bytes == pytest.approx(min(p - s, m) * (L // p) * a, rel=1e-12)


@pytest.mark.parametrize("kw", [dict(sp=True), dict(sp=False), dict(sp=True, tp=4, pp=2, layers=8)])
def test_full_le_selective_le_none(kw):
    base = dict(tp=2, pp=2, gbs=8, layers=4, seq=2048)
    w = make_workload(**{**base, **kw})
    for s in range(w.parallel.pp):
        full, sel, none = (stage_memory(w, s, rc).total_bytes for rc in
                           (RecomputeKind.FULL, RecomputeKind.SELECTIVE, RecomputeKind.NONE))
        assert full <= sel <= none
        assert full < none


def _max_weights(**kw):
    w = make_workload(layers=8, **kw)
    return max(state_bytes(w.model, w.parallel, s, kernels=w.kernels).weights_bytes for s in range(w.parallel.pp))


def test_more_tp_or_pp_never_raises_weight_memory():
    for tp in (1, 2, 4):
        for pp in (1, 2, 4):
            here = _max_weights(tp=tp, pp=pp)
            if tp < 4:
                assert _max_weights(tp=2 * tp, pp=pp) <= here
            if pp < 4:
                assert _max_weights(tp=tp, pp=2 * pp) <= here


@pytest.mark.parametrize("recompute", list(RecomputeKind))
def test_bigger_micro_batch_never_lowers_activation_memory(recompute):
    prev = 0.0
    for mbs in (1, 2, 4):
        w = make_workload(tp=2, pp=2, mbs=mbs, gbs=16, recompute=recompute)
        act = max(stage_memory(w, s).activations_bytes for s in range(2))
        assert act >= prev
        prev = act


def test_zero_stages_shard_state_over_dp():
    sizes = []
    for zero in range(4):
        w = make_workload(dp=8, gbs=8, zero=zero)
        sizes.append(state_bytes(w.model, w.parallel, 0, kernels=w.kernels))
    assert sizes[1].optimizer_bytes == pytest.approx(sizes[0].optimizer_bytes / 8)
    assert sizes[2].grads_bytes == pytest.approx(sizes[0].grads_bytes / 8)
    assert sizes[3].weights_bytes == pytest.approx(sizes[0].weights_bytes / 8)
    assert [s.total_bytes for s in sizes] == sorted((s.total_bytes for s in sizes), reverse=True)


def test_run_says_when_a_stage_does_not_fit(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "--set", "parallel.recompute=none", "--json", str(out)]) == 0
    assert "DOES NOT FIT" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["fits_in_memory"] is False
    assert not data["stages"][0]["fits"] and data["stages"][0]["peak_memory_bytes"] > 80 * GiB


def test_memory_command_gives_the_verdict_and_exits_0(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["memory", "--recompute", "none,full", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "DOES NOT FIT" in text and "recompute full" in text
    data = json.loads(out.read_text())
    assert set(data["methods"]) == {"none", "full"}
    none, full = data["methods"]["none"], data["methods"]["full"]
    assert none["fits"] is False and full["fits"] is True
    st = full["stages"][0]
    assert set(st) >= {"stage", "weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                       "other_bytes", "total_bytes", "capacity_bytes", "fits"}
    assert st["total_bytes"] == pytest.approx(sum(st[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes",
                                                                  "activations_bytes", "other_bytes")))
    assert len(full["stages"]) == 8


def test_memory_plot_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "mem.png"
    assert main(["memory", "tiny", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_recompute_method_is_one_clean_error(capsys):
    assert main(["memory", "--recompute", "some"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--recompute" in err[0] and "selective" in err[0]


def test_zero3_runs_and_shards_memory(capsys):
    assert main(["run", "tiny", "--set", "parallel.zero_stage=3"]) == 0
    assert main(["memory", "tiny", "--set", "parallel.zero_stage=3"]) == 0


@pytest.mark.parametrize("case_id,w", [c for c in load_cases(
    str(__import__("pathlib").Path(__file__).resolve().parents[2] / "workloads" / "validation" / "megatron-ci.yaml"))])
def test_megatron_ci_peak_memory_within_10_percent(case_id, w):
    """Megatron-LM CI's torch max_memory_allocated (which stage it logs is not stated, so the
    fullest stage is compared)."""
    peak = max(stage_memory(w, s).total_bytes for s in range(w.parallel.pp))
    assert peak == pytest.approx(w.reference.peak_memory_bytes, rel=0.10)


def test_default_run_memory_is_reported_per_stage():
    w = load_workload(None)
    rep = make_report(simulate(w, load_topology("dgx-a100")))
    assert [s.peak_memory_bytes for s in rep.stages] == pytest.approx(
        [stage_memory(w, s).total_bytes for s in range(8)], rel=1e-12)


def test_uneven_pipeline_timeline_peak_equals_the_walk():
    w = make_workload(tp=2, pp=4, gbs=8, layers=10, vps=2, schedule=ScheduleKind.INTERLEAVED, sp=True)
    # 10 layers + embedding + loss = 12 units over 8 virtual stages, the remainder to the first
    # and then the middle ones; the ends give one back
    assert [len(r) for r in w.virtual_stage_layers()] == [1, 2, 2, 2, 1, 1, 1, 0]
    rep = make_report(simulate(w, load_topology("dgx-a100")))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


def _llama8b(**kw):
    """Llama 3 8B as torchtitan trains it (GQA, SwiGLU), small batch."""
    from dataclasses import replace

    from sim.workload.spec import ModelSpec
    w = make_workload(layers=4, tp=kw.pop("tp", 1), pp=1, dp=1, gbs=kw.pop("gbs", 1), mbs=kw.pop("mbs", 1),
                      seq=8192, vocab=128256, **kw)
    model = ModelSpec("llama3-8b", 4, 4096, 32, 8, 14336, 128256, 8192, gated_mlp=True)
    return replace(w, model=model)


def test_op_level_checkpointing_keeps_every_other_matmul_and_the_attention_output():
    """torchtitan's op policy, counted by hand for one Llama 3 8B layer at TP 1: the layer input,
    the outputs of wq, wv, w1, w2 (mm 1, 3, 5, 7) and SDPA's output and log-sum-exp."""
    w = _llama8b(recompute=RecomputeKind.SELECTIVE_OP)
    sb, h, q, kv, f = 8192, 4096, 4096, 1024, 14336
    expected = 2 * sb * h + 2 * sb * (q + kv + f + h) + 2 * sb * q + 4 * 32 * 8192
    assert layer_activation_bytes(w.model, w.parallel, kernels=w.kernels) == pytest.approx(expected)
    by = {rc: layer_activation_bytes(w.model, w.parallel, rc, kernels=w.kernels) for rc in RecomputeKind}
    assert by[RecomputeKind.FULL] < by[RecomputeKind.SELECTIVE_OP] < by[RecomputeKind.SELECTIVE]


def test_op_level_checkpointing_recomputes_half_the_matmuls_in_the_timeline():
    base = simulate(_llama8b(recompute=RecomputeKind.NONE), load_topology("dgx-h100"))
    op = simulate(_llama8b(recompute=RecomputeKind.SELECTIVE_OP), load_topology("dgx-h100"))
    extra = op.program.hardware_flops_per_iteration - op.program.flops_per_iteration
    # wk, wo, w3 recomputed: 2 sb (h kv + q h + h f) per layer
    assert extra == pytest.approx(4 * 2 * 8192 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336))
    assert base.program.hardware_flops_per_iteration == base.program.flops_per_iteration
    assert make_report(op).iteration_time_s > make_report(base).iteration_time_s


@pytest.mark.parametrize("tp", [1, 2])
def test_torch_fp32_loss_holds_two_more_fp32_logit_copies_at_its_backward(tp):
    """PyTorch's cross entropy on fp32 logits: the saved log-softmax plus, in its backward,
    the incoming gradient and the result (8 sbV/t on top; under TP its loss parallel, 12 sbV/t,
    and the output layer's input gathered whole, 2 sbh (1 - 1/t)), and the BF16 logits the
    caching allocator keeps meanwhile (2 sbV/t); the timeline agrees."""
    from dataclasses import replace

    from sim.types import LossKind
    fused = _llama8b(tp=tp, sp=tp > 1, recompute=RecomputeKind.FULL)
    torch = replace(fused, kernels=replace(fused.kernels, cross_entropy=LossKind.TORCH_FP32))
    diff = stage_memory(torch, 0).activations_bytes - stage_memory(fused, 0).activations_bytes
    loss = 8.0 if tp == 1 else 12.0
    # the cached 16-bit logits against the 16-bit logits Megatron's loss holds beside its fp32 copy
    assert diff == pytest.approx(loss * 8192 * 128256 / tp + 2.0 * 8192 * 4096 * (1 - 1 / tp))
    rep = make_report(simulate(torch, load_topology("dgx-h100")))
    assert rep.stages[0].peak_memory_bytes == pytest.approx(stage_memory(torch, 0).total_bytes, rel=1e-12)


def test_torchtitan_cases_read_selective_as_its_op_policy_and_its_loss_in_fp32():
    from sim.config.workload import load_case_records
    from sim.types import AttentionKernel, LossKind
    rec = next(r for r in load_case_records("workloads/validation/torchtitan.yaml")
               if r.id == "torchtitan_h100_t1_llama31_8b_8gpu_FSDP")
    assert rec.workload.parallel.recompute is RecomputeKind.SELECTIVE_OP
    assert rec.workload.kernels.cross_entropy is LossKind.TORCH_FP32
    assert rec.workload.kernels.attention_kernel is AttentionKernel.FLASH2
    assert any("selective-op" in n for n in rec.notes)
    mega = load_workload("gpt3-175b")
    assert mega.parallel.recompute is RecomputeKind.SELECTIVE and mega.kernels.cross_entropy is LossKind.FUSED
    assert mega.kernels.attention_kernel is AttentionKernel.VENDOR


@pytest.mark.parametrize("case_id", ["torchtitan_h100_t1_llama31_8b_8gpu_FSDP_torchcompile",
                                     "torchtitan_h100_t3_llama31_8b_128gpu_FSDP_torchcompile"])
def test_torchtitan_fsdp_peak_memory_within_10_percent(case_id):
    """torchtitan logs the caching allocator's max *reserved* memory; llmsim predicts what is
    allocated, so it may only come out lower."""
    from sim.config.workload import load_case_records
    rec = next(r for r in load_case_records("workloads/validation/torchtitan.yaml") if r.id == case_id)
    w = rec.workload
    peak = max(stage_memory(w, s).total_bytes for s in range(w.parallel.pp)) / GiB
    assert -0.10 <= peak / rec.targets["peak_memory_gib"] - 1 <= 0.0


def test_eager_torchtitan_layer_memory_is_what_the_h100_measured():
    """An eager torchtitan Llama layer's activation memory (sim.memory.eager_layer_bytes,
    derived from the tensors its autograd keeps) against the allocator's counts on our H100
    (benchmarks/device/memory_layer.py, results committed): the stored bytes of a layer with no
    recomputation and its op-level policy, and the backward's transient under the op-level
    policy and full recomputation, each within 6%; the loss's peak as torchtitan computes it
    (fp32 logits, PyTorch's cross entropy) within 3%, and the caching allocator's reserved
    excess there at least the cached BF16 logits (ActivationModel.loss_cached) and at most
    a quarter more."""
    from pathlib import Path

    from sim.memory import eager_layer_bytes

    path = (Path(__file__).resolve().parents[2] / "benchmarks" / "device" / "results"
            / "h100-sxm5-80gb-2026-11-27-memory-layer.json")
    measured = json.loads(path.read_text())
    rows = {r["case"]: r for r in measured["layers"]}
    loss = {(r["batch"], r["seq"]): r for r in measured["loss"]}

    def workload(b, s, rc):
        from sim.types import LossKind
        from sim.workload.kernels import KernelsSpec
        from sim.workload.spec import ModelSpec, ParallelSpec, SystemSpec, WorkloadSpec

        model = ModelSpec("llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, s, gated_mlp=True)
        par = ParallelSpec(micro_batch_size=b, global_batch_size=b, recompute=rc)
        kernels = KernelsSpec(fused_elementwise=False, flash_attention=True, cross_entropy=LossKind.TORCH_FP32)
        return WorkloadSpec("eager", model, par, SystemSpec(get_gpu("H100"), 1, 8), kernels=kernels)

    w = workload(2, 8192, RecomputeKind.NONE)
    full, _ = eager_layer_bytes(w.model, w.parallel)
    assert activation_model(w).layer_stored == full
    assert full / GiB == pytest.approx(rows["b2_s8192_none"]["stored_per_layer_gib"], rel=0.06)
    op = activation_model(workload(2, 8192, RecomputeKind.SELECTIVE_OP))
    assert op.layer_stored / GiB == pytest.approx(rows["b2_s8192_op"]["stored_per_layer_gib"], rel=0.06)
    assert op.layer_transient / GiB == pytest.approx(rows["b2_s8192_op"]["backward_transient_gib"], rel=0.06)
    fr = activation_model(workload(1, 32768, RecomputeKind.FULL))
    assert fr.layer_transient / GiB == pytest.approx(rows["b1_s32768_full"]["backward_transient_gib"], rel=0.06)
    for (b, s), r in loss.items():
        am = activation_model(workload(b, s, RecomputeKind.FULL))
        assert (am.logits + am.loss_transient) / GiB == pytest.approx(r["peak_above_base_gib"], rel=0.03)
        # the caching allocator's excess there: the cached BF16 logits, most of it
        excess = r["max_reserved_gib"] - r["max_allocated_gib"]
        assert 0.8 * excess < am.loss_cached / GiB < excess


@pytest.mark.parametrize("loss", ["torch-fp32", "fused"])
def test_pytorch_loss_parallel_holds_one_more_fp32_logits_tensor(loss):
    """Under TP > 1 PyTorch computes cross entropy on vocabulary-sharded logits with its loss
    parallel, whose backward is tensor code (``zeros_like``, then ``(zeros + exp(x)) *
    grad``): three fp32 vocabulary-wide tensors on top of the saved log-softmax, against the
    two of ATen's kernels; and the output layer keeps its all-gathered input whole. Megatron's
    fused kernel is the same at any TP. Per GPU the logits are the same size at TP 1 with half
    the tokens, so the difference is the mechanism, not the shape."""
    from sim.types import LossKind
    from sim.workload.kernels import KernelsSpec
    from sim.workload.spec import ModelSpec, ParallelSpec, SystemSpec, WorkloadSpec

    def am(tp, mbs):
        model = ModelSpec("llama", 4, 4096, 32, 8, 14336, 128256, 8192, gated_mlp=True)
        par = ParallelSpec(tp=tp, micro_batch_size=mbs, global_batch_size=mbs, sequence_parallel=tp > 1,
                           recompute=RecomputeKind.FULL)
        kernels = KernelsSpec(flash_attention=True, cross_entropy=LossKind(loss))
        return activation_model(WorkloadSpec("w", model, par, SystemSpec(get_gpu("H100"), tp, 8), kernels=kernels))

    one, two = am(1, 1), am(2, 2)
    logits = 8192 * 128256  # logits elements a GPU holds in both
    held = {"te": 2.0}.get(loss, 4.0)  # TE's 16-bit logits, else an fp32 softmax or log-softmax
    assert one.logits == two.logits == held * logits
    sbh = 2 * 8192 * 4096
    if loss == "torch-fp32":
        assert one.loss_transient == 8.0 * logits and two.loss_transient == 12.0 * logits
        assert two.head == 2.0 * sbh / 2 + 2.0 * sbh  # the norm's input sharded, the output layer's whole
    else:  # Megatron's: the 16-bit logits beside their fp32 copy; TE's: nothing
        assert one.loss_transient == two.loss_transient == (0.0 if loss == "te" else 2.0 * logits)
        assert two.head == 4.0 * sbh / 2
    assert one.head == 4.0 * sbh / 2  # TP 1: sbh of one sequence is half that of two


def test_deepspeed_zero3_holds_a_few_tensors_gathered_not_two_layers():
    """DeepSpeed v0.3's ZeRO-3 gathers and releases one submodule's parameters at a time: a
    rank holds three tensors the size of a layer's largest weight (the running module's
    gathered weight and its full fp16 gradient, the layer's last module kept for reuse), where
    FSDP holds two whole layers' 16-bit weights."""
    from dataclasses import replace

    from sim.memory import CUBLAS_WORKSPACE_BYTES, DEEPSPEED_LIVE_TENSORS, other_bytes
    from sim.types import ZeroImpl
    from sim.workload.deepspeed_zero3 import layer_tensors

    w = make_workload(tp=1, pp=1, dp=8, gbs=8, layers=4)
    fsdp = replace(w, parallel=replace(w.parallel, zero_stage=3))
    ds = replace(fsdp, parallel=replace(fsdp.parallel, zero_impl=ZeroImpl.DEEPSPEED_0_3))
    largest = max(layer_tensors(ds.model, 0, 1))
    assert other_bytes(ds, 0) - CUBLAS_WORKSPACE_BYTES == DEEPSPEED_LIVE_TENSORS * largest * 2.0
    assert other_bytes(fsdp, 0) - CUBLAS_WORKSPACE_BYTES == 2 * ds.model.layer_params(0) * 2.0
    assert other_bytes(ds, 0) < other_bytes(fsdp, 0)


@pytest.mark.parametrize("dtype,saved", [(Dtype.FP8, 1.0), (Dtype.MXFP8, 1.0 + 1 / 32), (Dtype.NVFP4, 0.5 + 1 / 16)])
@pytest.mark.parametrize("sp", [False, True])
def test_low_precision_linears_keep_their_quantized_inputs(dtype, saved, sp):
    """Transformer Engine keeps each linear's quantized input for the weight gradient: the two
    norm outputs (``h``, split by TP under sequence parallelism) and the MLP activation output
    (``f / t``) drop from 2 bytes to the format's width, and the output projection keeps a
    quantized copy of the attention output that the attention keeps in 16 bits (``+ q / t``)."""
    gpu = "B200" if dtype is not Dtype.FP8 else "H100-SXM5-80GB"
    w16 = make_workload(tp=2, dp=1, sp=sp, hidden=1024, heads=16, seq=512, gpu=gpu)
    w8 = dataclasses.replace(w16, dtype=dtype)
    sb, h, t = 512, 1024, 2
    f, q = 4 * h / t, h / t
    drop = (2.0 - saved) * (2 * h / (t if sp else 1) + f) - saved * q
    assert activation_model(w8).layer_stored == pytest.approx(activation_model(w16).layer_stored - sb * drop)
    torchao = replace_settings(w8, quantized_saved_inputs=False)  # torchao's float8 keeps the 16-bit input
    assert activation_model(torchao).layer_stored == pytest.approx(activation_model(w16).layer_stored)


def test_a_recipe_that_runs_without_recomputation_fits_with_quantized_inputs(tmp_path):
    """Megatron-Bridge ran Llama 3.1 405B in MXFP8 on 256 GB200 with no recomputation (its
    26.04 workload configs: ``LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_MX_V2``): llmsim fills the
    null setting so, and the same configuration with 16-bit saved inputs holds more."""
    cases = yaml.safe_load((ROOT / "workloads" / "validation" / "megatronbridge.yaml").read_text())
    case = next(c for c in cases if c["id"] == "megatronbridge_26.04.01_gb200_llama3_405b_mxfp8_256gpu")
    assert case["parallel"]["recompute"] is None
    (tmp_path / "te.yaml").write_text(yaml.safe_dump([case]))
    te = load_cases(str(tmp_path / "te.yaml"))[0][1]
    assert te.parallel.recompute is RecomputeKind.NONE
    case["parallel"].update(quantized_saved_inputs=False, recompute="none")
    (tmp_path / "hp.yaml").write_text(yaml.safe_dump([case]))
    hp = load_cases(str(tmp_path / "hp.yaml"))[0][1]
    assert peak_memory_bytes(te) < peak_memory_bytes(hp)


def _torch_pipeline(buffers, **kw):
    """A pipelined workload under PyTorch's loss and ``torch.distributed.pipelining``'s buffers."""
    from sim.types import LossKind
    w = make_workload(**{"tp": 2, "pp": 2, "gbs": 4, "layers": 4, "sp": True, "recompute": RecomputeKind.FULL, **kw})
    return replace_settings(w, cross_entropy=LossKind.TORCH_FP32, pipeline_buffers=buffers)


@pytest.mark.parametrize("buffers", ["torch", "torch-2024"])
@pytest.mark.parametrize("schedule,vps,layers,recompute", [
    (ScheduleKind.ONE_F_ONE_B, 1, 4, RecomputeKind.FULL), (ScheduleKind.INTERLEAVED, 2, 8, RecomputeKind.FULL),
    (ScheduleKind.INTERLEAVED, 2, 8, RecomputeKind.NONE), (ScheduleKind.ZB_H1, 1, 4, RecomputeKind.NONE),
])
def test_timeline_peak_equals_the_walk_under_torch_pipelining(buffers, schedule, vps, layers, recompute):
    from sim.types import PipelineBuffers
    w = _torch_pipeline(PipelineBuffers(buffers), schedule=schedule, vps=vps, layers=layers, recompute=recompute)
    rep = make_report(simulate(w, load_topology("dgx-a100")))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


def test_torch_pipelining_allocates_a_receive_buffer_per_micro_batch_and_boundary():
    """PipelineStage keeps, for each virtual stage and micro-batch, an input buffer (but on the
    first stage) and an output-gradient buffer (but on the last): 2 sbh/t each under sequence
    parallelism. Megatron-Core's schedules keep none beyond the micro-batches in flight."""
    from sim.memory import other_bytes, receive_buffer_bytes
    from sim.types import PipelineBuffers
    a = 2 * 512 * 1024 / 2  # seq 512, micro-batch 1, hidden 1024, TP 2 with SP
    for buffers in (PipelineBuffers.TORCH, PipelineBuffers.TORCH_2024):
        plain = _torch_pipeline(buffers)  # PP 2, 4 micro-batches: one end each stage
        assert [receive_buffer_bytes(plain, s) for s in range(2)] == [4 * a, 4 * a]
        looped = _torch_pipeline(buffers, schedule=ScheduleKind.INTERLEAVED, vps=2, layers=8)
        # stage 0 holds virtual stages 0 (a gradient end) and 2 (both); stage 1 holds 1 (both) and 3 (an input)
        assert [receive_buffer_bytes(looped, s) for s in range(2)] == [12 * a, 12 * a]
    megatron = _torch_pipeline(PipelineBuffers.IN_FLIGHT)
    assert receive_buffer_bytes(megatron, 0) == receive_buffer_bytes(megatron, 1) == 0.0
    assert other_bytes(plain, 1) - other_bytes(megatron, 1) == pytest.approx(4 * a)
    assert receive_buffer_bytes(_torch_pipeline(PipelineBuffers.TORCH, pp=1, gbs=1), 0) == 0.0


@pytest.mark.parametrize("buffers", ["torch", "torch-2024"])
def test_torch_pipelining_keeps_the_last_stages_logits_until_the_step_ends(buffers):
    """On the last stage of a loss-dominated 1F1B pipeline the loss of the last of n micro-batches
    is the peak; torch.distributed.pipelining holds there the 16-bit logits of the n - 1 before it
    (output_chunks) and, before pytorch#164329, their inputs' gradients (val.grad on the receive
    buffers), while the current micro-batch's logits stay live instead of cached."""
    from sim.types import PipelineBuffers
    kw = dict(tp=1, sp=False, hidden=256, heads=4, vocab=128256, gbs=6)
    kept = _torch_pipeline(PipelineBuffers(buffers), **kw)
    megatron = _torch_pipeline(PipelineBuffers.IN_FLIGHT, **kw)
    n, a = 6, 2 * 512 * 256
    logits = 2 * 512 * 128256
    am = activation_model(kept)
    assert (am.boundary, am.last_output, am.loss_cached) == (a, logits, 0.0)
    assert activation_model(megatron).loss_cached == logits
    grads = a if buffers == "torch-2024" else 0
    diff = stage_memory(kept, 1).activations_bytes - stage_memory(megatron, 1).activations_bytes
    # the layers' first input is the receive buffer, counted among the other buffers
    assert diff == pytest.approx((n - 1) * (logits + grads) - a)


def test_torchtitan_pipelines_take_its_runtimes_buffers_and_megatron_its_own():
    from sim.config.workload import load_case_records
    from sim.types import PipelineBuffers
    rec = next(r for r in load_case_records("workloads/validation/torchtitan.yaml")
               if r.id == "torchtitan_h100_t5_llama31_405b_512gpu_1F1B")
    assert rec.workload.kernels.pipeline_buffers is PipelineBuffers.TORCH_2024
    assert any(n.startswith("parallel.pipeline_buffers: null -> torch-2024") for n in rec.notes)
    flat = next(r for r in load_case_records("workloads/validation/torchtitan.yaml")
                if r.id == "torchtitan_h100_t1_llama31_8b_8gpu_FSDP")
    assert not any("pipeline_buffers" in n for n in flat.notes)  # PP 1: nothing to say
    mega = next(r for r in load_case_records("workloads/validation/narayanan2021.yaml") if r.workload.parallel.pp > 1)
    assert mega.workload.kernels.pipeline_buffers is PipelineBuffers.IN_FLIGHT


@pytest.mark.parametrize("tp", [1, 4])
def test_megatrons_loss_holds_the_16bit_logits_beside_their_fp32_copy_and_te_only_them(tp):
    """Megatron's cross entropy casts the 16-bit logits to fp32 while the caller holds them and
    casts the fp32 gradient back beside itself: 4 + 2 sbV/t at the loss. Transformer Engine's
    kernel writes the gradient over the 16-bit logits: 2 sbV/t. On a loss-dominated last stage
    the peaks differ by 4 sbV/t; the timeline agrees."""
    from sim.types import LossKind
    w = make_workload(tp=tp, pp=2, gbs=2, layers=2, hidden=256, heads=4, vocab=128256, seq=1024, sp=tp > 1)
    te = replace_settings(w, cross_entropy=LossKind.TE)
    diff = stage_memory(w, 1).activations_bytes - stage_memory(te, 1).activations_bytes
    assert diff == pytest.approx(4.0 * 1024 * 128256 / tp)
    rep = make_report(simulate(te, load_topology("dgx-a100")))
    assert rep.stages[1].peak_memory_bytes == pytest.approx(stage_memory(te, 1).total_bytes, rel=1e-12)


@pytest.mark.parametrize("tp", [1, 4])
def test_a_learned_position_embedding_sits_whole_on_every_first_stage_rank(tp):
    """Megatron-Core's learned absolute position embedding (seq x h) beside the vocabulary-parallel
    word embedding, unsplit by TP, on the first stage only; its gradient is reduced with the
    others over data parallelism."""
    w = make_workload(tp=tp, pp=2, dp=2, gbs=4, layers=4, seq=2048, hidden=1024)
    learned = dataclasses.replace(w, model=dataclasses.replace(w.model, learned_positions=2048))
    assert stage_params(learned.model, learned.parallel, 0) - stage_params(w.model, w.parallel, 0) == 2048 * 1024
    assert stage_params(learned.model, learned.parallel, 1) == stage_params(w.model, w.parallel, 1)
    assert learned.model.num_params() - w.model.num_params() == 2048 * 1024
    rep = make_report(simulate(learned, load_topology("dgx-a100")))
    base = make_report(simulate(w, load_topology("dgx-a100")))
    assert rep.stages[0].peak_memory_bytes - base.stages[0].peak_memory_bytes == pytest.approx(
        2048 * 1024 * (2 + 4 + 12), rel=1e-9)  # 16-bit weight, fp32 gradient, Adam state


def test_a_negative_learned_position_table_is_refused():
    from sim.errors import ConfigError
    w = make_workload()
    with pytest.raises(ConfigError, match="model.learned_positions"):
        dataclasses.replace(w.model, learned_positions=-1)
