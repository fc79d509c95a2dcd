"""NVFP4 as Transformer Engine's ``NVFP4BlockScaling`` recipe runs it, and the first and last
layers a low-precision recipe keeps in BF16 (:mod:`sim.workload.quantization`)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.config import load_topology, load_workload
from sim.config.megatron_args import load_megatron_workload
from sim.costs.compute import gemm_time_s
from sim.errors import ConfigError
from sim.hardware import get_gpu
from sim.runner import simulate
from sim.studies.sweep.bound import IterationBound
from sim.types import Dtype, OpKind, ScalingRecipe
from sim.workload.layers import layer_ops
from sim.workload.ops import GemmOp
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload, replace_settings

E = 2.0
"""Bytes of a BF16 element."""
COPY = 0.5 + 1 / 16
"""Bytes of an NVFP4 element with its share of an E4M3 scale per 16."""


def _nvfp4(**kw):
    w = make_workload(gpu="GB200", gpus_per_node=4, **kw)
    return dataclasses.replace(w, dtype=Dtype.NVFP4, scaling=ScalingRecipe.BLOCK)


def _gemms(steps):
    return [st for st in steps if st.stream is None and isinstance(st.op, GemmOp) and st.op.kind is OpKind.GEMM]


@pytest.mark.parametrize("hidden, fused", [(1024, True), (1040, False)])
def test_nvfp4_quantization_bytes_per_gemm_are_the_closed_form(hidden, fused):
    """Forward input and incoming gradient: an amax read, then (fused: one kernel) a read and
    both quantized copies, else a row-wise cast, a Hadamard pass over the 16-bit tensor and a
    column-wise cast; the weight gradient reads those copies and adds nothing."""
    w = _nvfp4(hidden=hidden, seq=512)  # 512 tokens: rows % 64 == 0; 1040 columns: not % 128
    ops = layer_ops(w.model, w.parallel, w.dtype, (0,), scaling=w.scaling, kernels=w.kernels)
    per_elem, kernels = (2 * E + 2 * COPY, 2) if fused else (5 * E + 2 * COPY, 4)
    gpu = w.system.gpu
    steps = _gemms(ops.layer_fwd + ops.layer_bwd)
    assert {st.name for st in steps} >= {"qkv", "proj", "fc1", "fc2", "fc2-dgrad", "fc2-wgrad", "qkv-wgrad"}
    for st in steps:
        op = st.op
        assert op.dtype is Dtype.NVFP4
        if st.name.endswith("wgrad"):
            assert (op.extra_bytes, op.extra_kernels) == (0.0, 0)
            continue
        # forward [T, inp] x [inp, out] casts [T, inp]; dgrad [T, out] x [out, inp] casts [T, out]: [m, k]
        assert op.extra_bytes == pytest.approx(per_elem * op.m * op.k, rel=1e-12)
        assert op.extra_kernels == kernels
        plain = GemmOp(op.m, op.n, op.k, op.dtype)
        assert gemm_time_s(gpu, op) == pytest.approx(
            gemm_time_s(gpu, plain) + op.extra_bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency)
            + kernels * gpu.kernel_launch_s, rel=1e-12)


def test_fp8_casts_keep_their_model():
    """FP8 is priced as before: 3 bytes an element cast (read 16 bits, write 8), 5 under current
    scaling, the weight gradient's two 8-bit operands transposed, one kernel each."""
    w = dataclasses.replace(make_workload(gpu="H100-SXM5-80GB"), dtype=Dtype.FP8)
    for scaling, cast in ((ScalingRecipe.DELAYED, 3.0), (ScalingRecipe.CURRENT, 5.0)):
        ops = layer_ops(w.model, w.parallel, w.dtype, (0,), scaling=scaling, kernels=w.kernels)
        for st in _gemms(ops.layer_fwd + ops.layer_bwd):
            op = st.op
            want = 2.0 * op.k * (op.m + op.n) if st.name.endswith("wgrad") else cast * op.m * op.k
            assert (op.extra_bytes, op.extra_kernels) == (want, 1)


@pytest.mark.parametrize("scaling", [ScalingRecipe.DELAYED, ScalingRecipe.CURRENT])
def test_transformer_engine_fp8_on_blackwell_makes_no_transposes(scaling):
    """Transformer Engine's per-tensor FP8 quantizers make no column-wise copy where the GPU's
    FP8 GEMMs take every layout (Blackwell): the weight gradient adds nothing, the casts are
    Hopper's. MXFP8 keeps its column-wise copy there, and torchao's float8 (te_quantizer off)
    its transposes, and casts its weight at every call."""
    def gemms(gpu, dtype=Dtype.FP8, scaling=scaling, **kernels):
        w = replace_settings(make_workload(gpu=gpu, gpus_per_node=4), **kernels)
        ops = layer_ops(w.model, w.parallel, dtype, (0,), scaling=scaling, kernels=w.kernels,
                        fp8_any_layout=w.system.gpu.fp8_any_layout)
        return {st.name: st.op for st in _gemms(ops.layer_fwd + ops.layer_bwd)}

    assert get_gpu("GB200").fp8_any_layout and get_gpu("B200").fp8_any_layout
    assert not get_gpu("H100-SXM5-80GB").fp8_any_layout and not get_gpu("A100-SXM4-80GB").fp8_any_layout
    hopper, blackwell = gemms("H100-SXM5-80GB"), gemms("GB200")
    torchao = gemms("GB200", te_quantizer=False)
    mx = gemms("GB200", Dtype.MXFP8, ScalingRecipe.BLOCK)
    assert hopper.keys() == blackwell.keys() and any(name.endswith("wgrad") for name in hopper)
    for name, op in blackwell.items():
        if name.endswith("wgrad"):
            assert (op.extra_bytes, op.extra_kernels) == (0.0, 0)
            assert hopper[name].extra_bytes == torchao[name].extra_bytes == mx[name].extra_bytes \
                == 2.0 * op.k * (op.m + op.n) > 0
        else:
            assert (op.extra_bytes, op.extra_kernels) == (hopper[name].extra_bytes, hopper[name].extra_kernels)
            # torchao's activation casts are the same; it also casts its weight at every forward
            # and transposes the saved 8-bit weight for the input gradient (weight_casts)
            weight = 2.0 if name.endswith("dgrad") else 5.0
            assert torchao[name].extra_bytes == op.extra_bytes + weight * op.n * op.k > op.extra_bytes > 0


def test_each_stack_names_its_quantizer():
    from sim.config.stacks import load_stack
    for name in ("megatron-core", "nemo-24", "megatron-bridge", "pytorch-fsdp"):
        assert load_stack(name).value("te_quantizer") is True, name
    assert load_stack("torchtitan").value("te_quantizer") is False


def _layer_gemms(w):
    """{layer: GEMM ops of its forward, input- and weight-gradient passes} of stage 0's rank."""
    out: dict[int, list[GemmOp]] = {}
    for t in build_program(w).tasks:
        layer = dict(t.args).get("layer")
        if layer is not None and isinstance(t.op, GemmOp) and t.op.kind is OpKind.GEMM:
            out.setdefault(layer, []).append(t.op)
    return out


def test_layers_kept_in_bf16_are_priced_in_bf16():
    """Megatron-LM's --first-last-layers-bf16: the kept layers' GEMMs are those of a BF16 run
    (no casts), the others stay NVFP4; the output layer is BF16 either way."""
    w = _nvfp4(layers=6, pp=2, gbs=4, hidden=4096, heads=32, seq=4096)  # FP4 GEMMs that outrun their casts
    kept = dataclasses.replace(w, num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=2)
    bf16 = dataclasses.replace(w, dtype=Dtype.BF16)
    assert [kept.is_bf16_layer(i) for i in range(6)] == [True, False, False, False, True, True]
    got, ref, low = _layer_gemms(kept), _layer_gemms(bf16), _layer_gemms(w)
    assert sorted(got) == list(range(6))
    for layer, ops in got.items():
        assert ops == (ref[layer] if kept.is_bf16_layer(layer) else low[layer])
    assert all(op.dtype is Dtype.BF16 and op.extra_bytes == 0 for op in ref[0])
    head = [t.op for t in build_program(kept).tasks if t.name.startswith("lm-head")]
    assert head and all(op.dtype is Dtype.BF16 for op in head)

    topo = load_topology("gb200-nvl72")
    t_low, t_kept = (simulate(x, topo).result.makespan_s for x in (w, kept))
    assert t_kept > t_low
    # the layer-granularity run prices the kept layers' blocks apart from the others
    assert simulate(kept, topo, granularity="layer").result.makespan_s == pytest.approx(t_kept, rel=1e-9)
    # the sweep's closed-form bound sees them too, and stays a lower bound
    bound = IterationBound(w.model, w.system.gpu)
    assert bound.lower_bound_s(w) < bound.lower_bound_s(kept) <= t_kept


def test_kept_layers_change_nothing_in_16_bits():
    w = make_workload(layers=4)
    kept = dataclasses.replace(w, num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=1)
    assert not kept.keeps_bf16_layers and not kept.is_bf16_layer(0)
    topo = load_topology("dgx-a100")
    assert simulate(kept, topo).result.makespan_s == simulate(w, topo).result.makespan_s


def test_bf16_layer_counts_from_yaml_and_megatron_args(tmp_path):
    src = tmp_path / "w.yaml"
    src.write_text("model: {num_layers: 4, hidden_size: 1024, num_attention_heads: 16, seq_length: 512, "
                   "vocab_size: 32000}\n"
                   "parallel: {tp: 1, pp: 1, dp: 1, global_batch_size: 1}\n"
                   "system: {gpu: GB200, gpus_per_node: 4}\n"
                   "dtype: nvfp4\nnum_layers_at_end_in_bf16: 2\n")
    w = load_workload(str(src))
    assert (w.num_layers_at_start_in_bf16, w.num_layers_at_end_in_bf16) == (0, 2)
    assert [w.is_bf16_layer(i) for i in range(4)] == [False, False, True, True]
    with pytest.raises(ConfigError, match="num_layers_at_start_in_bf16"):
        load_workload(str(src), overrides=["num_layers_at_start_in_bf16=-1"])

    args = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 "
            "--max-position-embeddings 512 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 1 "
            "--bf16 --fp4-format e2m1 ")
    m, _ = load_megatron_workload(args + "--first-last-layers-bf16", gpu="GB200")
    assert (m.num_layers_at_start_in_bf16, m.num_layers_at_end_in_bf16) == (1, 1)  # Megatron-LM's defaults
    m, _ = load_megatron_workload(args + "--first-last-layers-bf16 --num-layers-at-end-in-bf16 3", gpu="GB200")
    assert (m.num_layers_at_start_in_bf16, m.num_layers_at_end_in_bf16) == (1, 3)
    m, notes = load_megatron_workload(args + "--num-layers-at-end-in-bf16 3", gpu="GB200")
    assert not m.keeps_bf16_layers and any("without --first-last-layers-bf16" in n for n in notes)
    fp8 = args.replace("--fp4-format e2m1", "--fp8-format hybrid") + "--first-last-layers-bf16"
    with pytest.raises(ConfigError, match="--first-last-layers-bf16"):  # delayed scaling: Megatron asserts
        load_megatron_workload(fp8, gpu="H100")
    m, _ = load_megatron_workload(fp8 + " --fp8-recipe tensorwise", gpu="H100")
    assert [m.is_bf16_layer(i) for i in range(4)] == [True, False, False, True]


def test_megatron_bridge_nvfp4_cases_keep_no_transformer_layer_in_bf16():
    """Megatron-Bridge's performance recipe (``bf16_with_nvfp4_mixed``) keeps none."""
    from sim.config.workload import load_case_records

    recs = [r for r in load_case_records("workloads/validation/megatronbridge.yaml") if "nvfp4" in r.id]
    assert recs and all(r.workload.dtype is Dtype.NVFP4 and not r.workload.keeps_bf16_layers for r in recs)
