"""Eager (uncompiled) elementwise kernels of torchtitan's Llama layer (sim/workload/eager.py) and
the ``kernels.fused_elementwise`` option that selects them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sim.config import load_workload
from sim.hardware import get_gpu
from sim.studies.layer_profile import layer_run, measured, simulated
from sim.types import MemoryAccess
from sim.workload import eager
from sim.workload.layers import layer_ops
from sim.workload.ops import MemoryOp
from tests.conftest import make_workload

TITAN = "workloads/validation/torchtitan.yaml"


def _mem(steps) -> tuple[int, float]:
    ops = [st.op for st in steps if isinstance(st.op, MemoryOp)]
    return len(ops), sum(op.bytes for op in ops)


def test_rmsnorm_kernels_are_the_ops_of_torchtitans_norm():
    """Forward: float(), pow, mean, +eps, rsqrt, mul, type_as, *weight -- 8 kernels; per
    element 2+4, 4+4, 4, -, -, 4+4, 4+2, 2+2 bytes = 36. Backward: 16 kernels."""
    T, w = 3, 1000
    fwd, bwd = eager.rmsnorm_forward("n", T, w), eager.rmsnorm_backward("n", T, w)
    assert len(fwd) == 8 and len(bwd) == 16
    per_elem = (2 + 4) + (4 + 4) + 4 + (4 + 4) + (4 + 2) + (2 + 2)
    per_row = 4 + 8 + 8 + 4  # mean's output, +eps, rsqrt, mul's rstd read
    assert sum(b for _, b, _ in fwd) == pytest.approx(T * (w * per_elem + per_row))
    assert all(name.startswith("n-") for name, _, _ in fwd + bwd)


def test_gqa_repeat_and_rope_widths():
    """RoPE runs on q and k (three kernels each, 20 bytes an element); repeat_kv copies K and V
    from kv to q width only under GQA."""
    assert len(eager.rope_forward(4, 64, 16)) == 6
    assert sum(b for _, b, _ in eager.rope_forward(4, 64, 16)) == pytest.approx(4 * (64 + 16) * 20)
    assert eager.repeat_kv_forward(4, 64, 64) == [] == eager.repeat_kv_backward(4, 64, 64)
    assert sum(b for _, b, _ in eager.repeat_kv_backward(4, 64, 16)) == pytest.approx(2 * 4 * (64 + 16) * 2)


def test_each_kernel_walks_memory_as_pytorchs_kernel_for_it():
    """The upcasts run the unrolled kernel, the broadcasts and repeat_kv's copy the strided one
    (as profiled in the layer on our H100); the rest are vectorized."""
    access = {n: a for n, _, a in eager.rmsnorm_forward("n", 1, 8) + eager.rmsnorm_backward("n", 1, 8)
              + eager.rope_forward(1, 8, 2) + eager.rope_backward(1, 8, 2) + eager.repeat_kv_forward(1, 8, 2)}
    assert access["n-float"] is access["n-type-as-bwd"] is access["rope-q-float"] is MemoryAccess.UPCAST
    assert access["n-mul-weight"] is access["n-mul-weight-dgrad"] is MemoryAccess.BROADCAST_LAST
    assert access["n-mul-rstd"] is access["n-mul-rstd-dgrad"] is access["n-mean-bwd"] is MemoryAccess.BROADCAST_ROW
    assert access["repeat-kv-k"] is MemoryAccess.STRIDED
    assert access["n-pow"] is access["n-type-as"] is access["rope-q-type-as"] is MemoryAccess.STREAM
    h100, a100 = get_gpu("H100-SXM5-80GB"), get_gpu("A100-SXM4-80GB")
    assert all(h100.memory_efficiency_of(a) < h100.memory_efficiency for a in MemoryAccess
               if a is not MemoryAccess.STREAM)
    assert all(a100.memory_efficiency_of(a) == a100.memory_efficiency for a in MemoryAccess)  # not measured


def test_the_bandwidth_bound_kernels_of_a_profiled_layer_take_the_time_measured():
    """Held out: the access efficiencies come from kernels run alone (power_clock.py); a whole
    torchtitan layer profiled on the same H100 (eager_layer.py) must agree, per pass, within 5%."""
    results = Path(__file__).resolve().parents[2] / "benchmarks" / "device" / "results"
    measured_us = measured(results / "h100-sxm5-80gb-2026-11-26-eager-layer.json")
    simulated_us = simulated(layer_run())
    for phase in ("fwd", "bwd"):
        key = (phase, "bandwidth-bound")
        assert simulated_us[key] == pytest.approx(measured_us[key], rel=0.05), phase


def _gated(w, kv_heads):
    model = dataclasses.replace(w.model, gated_mlp=True, num_kv_heads=kv_heads)
    return dataclasses.replace(w, model=model)


def test_eager_layer_adds_exactly_the_unfused_kernels():
    """Against the fused layer, eager adds per layer: two norms of 36 - 4 bytes an element
    (forward) and 92 - 6 (backward), 7 and 15 more kernels each; the rotary embedding and the
    K/V repeat of GQA; SwiGLU at 10 instead of 6 bytes an element forward and 18 instead of 10
    backward. GEMMs and attention are untouched."""
    w = _gated(make_workload(seq=512, hidden=1024, heads=16), kv_heads=4)
    T, h, f, q, kv = 512, 1024, 4096, 1024, 256
    fused = layer_ops(w.model, w.parallel, w.dtype, (0,), kernels=w.kernels)
    x = dataclasses.replace(w, kernels=dataclasses.replace(w.kernels, fused_elementwise=False))
    eag = layer_ops(x.model, x.parallel, x.dtype, (0,), kernels=x.kernels)
    (nf, bf), (ne, be) = _mem(fused.layer_fwd), _mem(eag.layer_fwd)
    rope_and_repeat = T * (q + kv) * 20 + 2 * T * (q + kv) * 2
    assert be - bf == pytest.approx(2 * (36 - 4) * T * h + 2 * 24 * T + rope_and_repeat + (10 - 6) * T * f)
    assert ne - nf == 2 * 7 + 6 + 2 + 1
    (nf, bf), (ne, be) = _mem(fused.layer_bwd), _mem(eag.layer_bwd)
    rsqrt_rows = 4 + 4 + 8 + 12 + 8 + 4  # sum-rstd write, per-row reads/writes of the rsqrt backward, mean-bwd
    assert be - bf == pytest.approx(2 * (92 - 6) * T * h + 2 * rsqrt_rows * T + rope_and_repeat + (18 - 10) * T * f)
    gemms = lambda steps: [st.op for st in steps if not isinstance(st.op, MemoryOp)]  # noqa: E731
    assert gemms(fused.layer_fwd) == gemms(eag.layer_fwd) and gemms(fused.layer_bwd) == gemms(eag.layer_bwd)


def test_op_level_recompute_reruns_the_eager_kernels():
    """torchtitan's op-level checkpointing recomputes every non-matmul op: eagerly, each of them."""
    w = _gated(make_workload(seq=512), kv_heads=16)
    x = dataclasses.replace(w, kernels=dataclasses.replace(w.kernels, fused_elementwise=False))
    ops = layer_ops(x.model, x.parallel, x.dtype, (0,), kernels=x.kernels)
    assert _mem(ops.op_recompute) == _mem(ops.layer_fwd)


def test_case_fields_choose_the_mode():
    """torchtitan rows are eager unless their settings name torch.compile; other frameworks
    are fused; an explicit value wins."""
    eager_row = load_workload(TITAN, case="torchtitan_h100_t1_llama31_8b_8gpu_FSDP")
    compiled = load_workload(TITAN, case="torchtitan_h100_t1_llama31_8b_8gpu_FSDP_torchcompile")
    assert eager_row.kernels.fused_elementwise is False and compiled.kernels.fused_elementwise is True
    forced = load_workload(TITAN, ["parallel.fused_elementwise=true"], case="torchtitan_h100_t1_llama31_8b_8gpu_FSDP")
    assert forced.kernels.fused_elementwise is True
    assert load_workload("tiny").kernels.fused_elementwise is True


def test_torchtitan_float8_is_dynamically_scaled():
    """torchtitan's float8 (torchao Float8Linear) defaults to dynamic, i.e. current, scaling;
    Megatron cases keep Transformer Engine's delayed default."""
    from sim.types import ScalingRecipe
    w = load_workload(TITAN, case="torchtitan_h100_t1_llama31_8b_8gpu_FSDP_torchcompile_Float8")
    assert w.scaling is ScalingRecipe.CURRENT
    assert load_workload("tiny", ["dtype=fp8", "system.gpu=H100-SXM5-80GB"]).scaling is ScalingRecipe.DELAYED


def _eager(w, **model_changes):
    model = dataclasses.replace(w.model, **model_changes)
    return dataclasses.replace(w, model=model, kernels=dataclasses.replace(w.kernels, fused_elementwise=False))


def test_eager_layernorm_is_atens_one_kernel_and_only_rotary_models_pay_rope():
    """Eager LayerNorm is ATen's native layer_norm, one kernel priced as the fused norm; only an
    RMSNorm (or unstated) model runs torchtitan's eight-kernel tensor code. The rotary kernels
    belong to rotary models: a model stated with learned or ALiBi positions has none, and the
    K/V repeat of GQA stays."""
    from sim.types import NormKind
    w = _gated(make_workload(seq=512, hidden=1024, heads=16), kv_heads=4)
    T, q, kv = 512, 1024, 256
    fused = layer_ops(w.model, w.parallel, w.dtype, (0,), kernels=w.kernels)
    rms = _eager(w, norm=NormKind.RMSNORM, rotary=True)
    ln = _eager(w, norm=NormKind.LAYERNORM, rotary=True)
    unstated = _eager(w)
    built = {name: layer_ops(x.model, x.parallel, x.dtype, (0,), kernels=x.kernels)
             for name, x in (("rms", rms), ("ln", ln), ("unstated", unstated))}
    norms = lambda steps: [st for st in steps if "norm" in st.name]  # noqa: E731
    for phase in ("layer_fwd", "layer_bwd"):
        f_n, r_n, l_n = (norms(getattr(x, phase)) for x in (fused, built["rms"], built["ln"]))
        assert _mem(l_n) == _mem(f_n) and len(r_n) > len(l_n)
        assert _mem(getattr(built["unstated"], phase)) == _mem(getattr(built["rms"], phase))
    no_rope = _eager(w, norm=NormKind.RMSNORM, rotary=False)
    plain = layer_ops(no_rope.model, no_rope.parallel, no_rope.dtype, (0,), kernels=no_rope.kernels)
    (n_r, b_r), (n_p, b_p) = _mem(built["rms"].layer_fwd), _mem(plain.layer_fwd)
    assert (n_r - n_p, b_r - b_p) == (6, pytest.approx(T * (q + kv) * 20))
    assert any(st.name == "repeat-kv-k" for st in plain.layer_fwd)


@pytest.mark.parametrize("field, value, expected", [
    ("normalization", "LayerNorm", "layernorm"), ("normalization", "low_precision_layernorm", "layernorm"),
    ("normalization", "RMSNorm", "rmsnorm"), ("position_embedding", "alibi", False),
    ("position_embedding", "rope", True), ("position_embedding", "learned_absolute", False),
])
def test_the_model_states_its_norm_and_position_embedding(tmp_path, field, value, expected):
    import yaml
    doc = yaml.safe_load(Path("workloads/tiny.yaml").read_text())
    doc["model"][field] = value
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(doc))
    model = load_workload(str(path)).model
    got = model.norm.value if field == "normalization" else model.rotary
    assert got == expected


def test_an_unknown_normalization_is_one_line_naming_the_field(tmp_path, capsys):
    import yaml

    from sim.cli import main
    doc = yaml.safe_load(Path("workloads/tiny.yaml").read_text())
    doc["model"]["normalization"] = "batchnorm"
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "model.normalization" in err[0] and "batchnorm" in err[0]


@pytest.mark.parametrize("rotary", [True, False, None])
def test_fused_kernels_run_one_rotary_kernel_each_for_q_and_k_where_the_model_states_rope(rotary):
    """Megatron-Core's fused RoPE (Transformer Engine's FusedRoPEFunc) and torch.compile's
    kernel read and write q and k once each way; a model that does not state a rotary
    embedding (Megatron-LM's default is learned absolute positions) runs none."""
    w = make_workload(tp=2, hidden=1024, heads=16, seq=512, mbs=2, gbs=2, dp=1)
    w = dataclasses.replace(w, model=dataclasses.replace(w.model, rotary=rotary))
    assert w.kernels.fused_elementwise
    ops = layer_ops(w.model, w.parallel, w.dtype, (0, 1), kernels=w.kernels)
    fwd = {st.name: st.op for st in ops.layer_fwd if st.name.startswith("rope")}
    bwd = {st.name: st.op for st in ops.layer_bwd if st.name.startswith("rope")}
    if rotary is not True:
        assert not fwd and not bwd
        return
    tokens, q_width = 2 * 512, 1024 // 2  # the rank's tokens, its query heads' width
    assert set(fwd) == {"rope-q", "rope-k"} and set(bwd) == {"rope-q-bwd", "rope-k-bwd"}
    assert fwd["rope-q"].bytes == bwd["rope-q-bwd"].bytes == 2 * tokens * q_width * 2
    assert fwd["rope-k"].bytes == bwd["rope-k-bwd"].bytes == fwd["rope-q"].bytes  # as many K heads
