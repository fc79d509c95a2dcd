"""Non-GEMM kernels priced from published measurements (:mod:`sim.workload.nongemm`): the
constants are what ``benchmarks/nongemm_derive.py`` derives from the published figures it quotes
and what our H200 measured (``benchmarks/device/results/``), and a
layer's fused norm backward and its cross entropy cost what those measurements say."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

import sim
from sim.costs.compute import memory_time_s
from sim.derive import nongemm as nongemm_derive
from sim.hardware import get_gpu
from sim.types import MemoryAccess, OpKind
from sim.workload import nongemm
from sim.workload.layers import layer_ops
from sim.workload.ops import MemoryOp
from tests.conftest import make_workload, replace_settings

E = 2
"""Bytes of a BF16 element."""


def _derive():
    return nongemm_derive


def test_constants_are_the_published_measurements():
    """Re-derived from the quoted published figures, so none can be edited to fit a case."""
    d = _derive()
    fwd, bwd = d.cross_entropy_bytes_per_logit("megatron-unfused")
    fwd_bytes = nongemm.CROSS_ENTROPY_FORWARD_BYTES / nongemm.CROSS_ENTROPY_FORWARD_EFFICIENCY
    bwd_bytes = nongemm.CROSS_ENTROPY_BACKWARD_BYTES / nongemm.CROSS_ENTROPY_BACKWARD_EFFICIENCY
    assert fwd_bytes == pytest.approx(fwd, abs=0.05)
    assert bwd_bytes == pytest.approx(bwd, abs=0.05)
    assert nongemm.NORM_BACKWARD_EFFICIENCY == pytest.approx(d.norm_backward_ratio("apex contrib FastLayerNorm"))
    # the measurement the derivation rests on: the H100's streaming bandwidth as priced
    h100 = get_gpu("H100")
    assert d.H100_STREAM_BYTES_PER_S == pytest.approx(h100.hbm_bandwidth_bytes_per_s * h100.memory_efficiency)


def test_measured_cross_entropy_is_slower_than_one_pass_per_tensor():
    """Megatron's cross entropy takes 45.1 bytes' time a logit forward and 15.5 backward at the
    streaming rate, against the 14 and 6 of a bf16 read and three fp32 passes."""
    d = _derive()
    fwd, bwd = d.cross_entropy_bytes_per_logit("megatron-unfused")
    assert 40 < fwd < 50 and 14 < bwd < 17
    assert 0.0 < nongemm.CROSS_ENTROPY_FORWARD_EFFICIENCY < 1.0
    assert 0.0 < nongemm.CROSS_ENTROPY_BACKWARD_EFFICIENCY < 1.0


def _ops(**par):
    w = make_workload(hidden=1024, heads=16, seq=512, mbs=2, tp=2)
    w = replace_settings(w, **par)
    return w, layer_ops(w.model, w.parallel, w.dtype, (0, 1), kernels=w.kernels)


def _step(steps, name):
    return next(st.op for st in steps if st.name == name)


@pytest.mark.parametrize("gpu_name", ["A100", "H100", "GB200"])
def test_cross_entropy_costs_the_measured_time_per_logit(gpu_name):
    """Forward and backward of the loss cost, per logit, the H100-measured time scaled by the
    GPU's streaming bandwidth, plus one launch each."""
    w, ops = _ops()
    gpu = get_gpu(gpu_name)
    logits = w.parallel.micro_batch_size * w.model.seq_length * (w.model.vocab_size // w.parallel.tp)
    stream = gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency
    d = _derive()
    fwd_b, bwd_b = d.cross_entropy_bytes_per_logit("megatron-unfused")
    t_fwd = memory_time_s(gpu, _step(ops.head_fwd, "cross-entropy")) - gpu.kernel_launch_s
    t_bwd = memory_time_s(gpu, _step(ops.head_bwd, "cross-entropy-bwd")) - gpu.kernel_launch_s
    assert t_fwd == pytest.approx(logits * fwd_b / stream, rel=2e-3)
    assert t_bwd == pytest.approx(logits * bwd_b / stream, rel=2e-3)


def test_fused_norm_backward_runs_at_the_measured_share_of_the_forward_bandwidth():
    """The forward moves 2 tensors at the streaming rate; the backward 3 at
    1163.4 / 1258.0 of it (apex FastLayerNorm, PR #1037): 1.5 / 0.925 = 1.62x the forward."""
    gpu = get_gpu("H100")
    for sp in (False, True):
        w, ops = _ops(sequence_parallel=sp)
        fwd, bwd = _step(ops.layer_fwd, "norm1"), _step(ops.layer_bwd, "norm1-bwd")
        tokens = w.parallel.micro_batch_size * w.model.seq_length // (w.parallel.tp if sp else 1)
        assert bwd.bytes == 3 * tokens * w.model.hidden_size * E
        t_f = memory_time_s(gpu, fwd) - gpu.kernel_launch_s
        t_b = memory_time_s(gpu, bwd) - gpu.kernel_launch_s
        assert t_b / t_f == pytest.approx(1.5 * 1258.0318 / 1163.4357)


def test_deterministic_fill_of_a_norm_backward_streams():
    """Under deterministic mode the NaN fill of the norm's output is one more tensor written at
    the streaming rate, beside the kernel's three at the measured share."""
    gpu = get_gpu("H100")
    w, ops = _ops(deterministic=True)
    bwd = _step(ops.layer_bwd, "norm1-bwd")
    n = w.parallel.micro_batch_size * w.model.seq_length * w.model.hidden_size * E
    stream = gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency
    assert memory_time_s(gpu, bwd) - gpu.kernel_launch_s == pytest.approx(
        (3 * n / nongemm.NORM_BACKWARD_EFFICIENCY + n) / stream)


def test_eager_norms_keep_their_kernel_by_kernel_pricing():
    """torchtitan's eager RMSNorm is its ATen kernels, each priced by its access pattern."""
    _, ops = _ops(fused_elementwise=False)
    norm = [st.op for st in ops.layer_bwd if st.name.startswith("norm1-bwd-")]
    assert len(norm) == 16 and all(op.efficiency == 1.0 for op in norm)


def test_memory_op_efficiency_scales_its_time():
    gpu = get_gpu("H100")
    base = MemoryOp(OpKind.NORM, 1e9, MemoryAccess.UPCAST)
    slow = dataclasses.replace(base, efficiency=0.5)
    assert memory_time_s(gpu, slow) - gpu.kernel_launch_s == pytest.approx(
        2 * (memory_time_s(gpu, base) - gpu.kernel_launch_s))


def _device_rows():
    path = Path(sim.__file__).resolve().parent.parent / "benchmarks" / "device" / "results"
    return json.loads((path / "h200-2026-11-28-fused-activation.json").read_text())["rows"]


def test_swiglu_backward_share_is_the_h200_measurement():
    """The constant is the median backward-to-copy ratio of the committed H200 run, widths of
    3,584 and up; the forward there reaches the copy's bandwidth, so it stays a streaming kernel."""
    rows = [r for r in _device_rows() if r["kernel"] == "swiglu" and r["width"] >= 3584]
    assert len(rows) == 4
    assert nongemm.SWIGLU_BACKWARD_EFFICIENCY == pytest.approx(statistics.median(r["backward_over_copy"] for r in rows),
                                                              abs=5e-4)
    assert min(r["forward_over_copy"] for r in rows) > 0.9


def _gated(w):
    return dataclasses.replace(w, model=dataclasses.replace(w.model, gated_mlp=True, ffn_hidden_size=2816))


def test_fused_swiglu_backward_runs_at_the_measured_share():
    """A gated MLP's fused activation backward moves 5 elements per output element at
    SWIGLU_BACKWARD_EFFICIENCY of the streaming rate; its forward (3 elements) streams; a GELU
    MLP's backward streams."""
    gpu = get_gpu("H100")
    w, _ = _ops()
    w = _gated(w)
    ops = layer_ops(w.model, w.parallel, w.dtype, (0, 1), kernels=w.kernels)
    fwd, bwd = _step(ops.layer_fwd, "activation"), _step(ops.layer_bwd, "activation-bwd")
    n = w.parallel.micro_batch_size * w.model.seq_length * w.model.ffn_hidden_size // w.parallel.tp
    assert fwd.bytes == 3 * n * E and bwd.bytes == 5 * n * E
    t_f = memory_time_s(gpu, fwd) - gpu.kernel_launch_s
    t_b = memory_time_s(gpu, bwd) - gpu.kernel_launch_s
    assert t_b / t_f == pytest.approx(5 / 3 / nongemm.SWIGLU_BACKWARD_EFFICIENCY)
    w2, ops2 = _ops()
    g_f, g_b = _step(ops2.layer_fwd, "activation"), _step(ops2.layer_bwd, "activation-bwd")
    assert (memory_time_s(gpu, g_b) - gpu.kernel_launch_s) / (memory_time_s(gpu, g_f) - gpu.kernel_launch_s) == \
        pytest.approx(3 / 2)


def test_gated_experts_activation_backward_runs_at_the_measured_share():
    """A mixture of experts' gated experts (and its shared expert) price their activation's
    backward like a dense SwiGLU MLP: 5 elements per output element at the measured share."""
    gpu = get_gpu("H100")
    w = make_workload(hidden=1024, heads=16, seq=512, mbs=2, experts=8, topk=2, shared=1)
    w = _gated(w)
    ops = layer_ops(w.model, w.parallel, w.dtype, (0,), kernels=w.kernels).for_layer(True)
    for fwd_name, bwd_name in (("experts-activation", "experts-activation-bwd"),
                               ("shared-activation", "shared-activation-bwd")):
        fwd, bwd = _step(ops.layer_fwd, fwd_name), _step(ops.layer_bwd, bwd_name)
        t_f = memory_time_s(gpu, fwd) - gpu.kernel_launch_s
        t_b = memory_time_s(gpu, bwd) - gpu.kernel_launch_s
        assert t_b / t_f == pytest.approx(5 / 3 / nongemm.SWIGLU_BACKWARD_EFFICIENCY)
