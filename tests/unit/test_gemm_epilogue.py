"""The fp32 epilogue of a weight-gradient GEMM that accumulates into ``main_grad``
(:attr:`sim.workload.ops.GemmOp.epilogue_bytes`), priced where the GPU runs a GEMM's epilogue
after its main loop (:attr:`sim.hardware.GPUSpec.gemm_epilogue_overlapped`)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.config import load_topology
from sim.costs.compute import gemm_time_s
from sim.hardware import GPUSpec, get_gpu
from sim.output.report import make_report
from sim.runner import simulate
from sim.types import Dtype, GpuGeneration
from sim.workload.layers import layer_ops
from tests.conftest import make_workload, replace_settings

E = 2
"""Bytes of the 16-bit output a GEMM writes anyway."""


def _bwd(**changes):
    w = replace_settings(make_workload(hidden=1024, heads=16, seq=512, mbs=2, tp=2), **changes)
    ops = layer_ops(w.model, w.parallel, w.dtype, (0, 1), kernels=w.kernels)
    return ops, {st.name: st.op for st in ops.layer_bwd + ops.layer_fwd if st.stream is None}


def _hbm_s(gpu: GPUSpec, nbytes: float) -> float:
    return nbytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency)


@pytest.mark.parametrize(("grad_fp32", "per_weight"), [(True, 4 + 4 - E), (False, 2 + 2 - E)])
def test_fused_wgrad_epilogue_reads_and_writes_main_grad(grad_fp32, per_weight):
    """Under gradient-accumulation fusion each weight-gradient GEMM (and the output layer's)
    reads and writes the gradient dtype per weight instead of writing 16 bits: 6 extra bytes
    with an fp32 ``main_grad``, 2 with a 16-bit one; no other GEMM carries any."""
    ops, by_name = _bwd(grad_reduce_in_fp32=grad_fp32)
    wgrads = {n for n in by_name if n.endswith("wgrad")}
    assert wgrads == {"fc2-wgrad", "fc1-wgrad", "proj-wgrad", "qkv-wgrad"}
    for name, op in by_name.items():
        if name in wgrads:
            assert op.epilogue_bytes == op.m * op.n * per_weight
        elif hasattr(op, "epilogue_bytes"):
            assert op.epilogue_bytes == 0.0
    head = {st.name: st.op for st in ops.head_bwd}["lm-head-wgrad"]
    assert head.epilogue_bytes == head.m * head.n * per_weight


def test_unfused_wgrad_has_no_epilogue_of_its_own():
    _, by_name = _bwd(gradient_accumulation_fusion=False)
    assert all(by_name[n].epilogue_bytes == 0.0 for n in by_name if n.endswith("wgrad"))


def test_only_ampere_runs_the_epilogue_after_the_main_loop():
    for name in ("A100", "H100", "H200", "B200", "GB200", "GB300"):
        gpu = get_gpu(name)
        assert gpu.gemm_epilogue_overlapped is (gpu.generation is not GpuGeneration.AMPERE)
    assert not get_gpu("A100").gemm_epilogue_overlapped


@pytest.mark.parametrize("name", ["A100", "H100", "B200", "GB300"])
def test_epilogue_bytes_cost_their_hbm_time_on_ampere_and_nothing_later(name):
    gpu = get_gpu(name)
    plain = dataclasses.replace(_bwd()[1]["fc1-wgrad"], epilogue_bytes=0.0)
    fused = dataclasses.replace(plain, epilogue_bytes=3.0e8)
    added = gemm_time_s(gpu, fused) - gemm_time_s(gpu, plain)
    if gpu.gemm_epilogue_overlapped:
        assert added == 0.0
    else:
        assert added == pytest.approx(_hbm_s(gpu, 3.0e8), rel=1e-12)
        assert added > 0.0


def test_a100_iteration_pays_every_wgrad_epilogue_once_per_micro_batch(monkeypatch):
    """One A100 (no communication, no power model): the iteration is its compute stream, so
    pricing the epilogue adds exactly the sum of the wgrad GEMMs' epilogue times, once per
    layer and micro-batch, and the output layer's once per micro-batch."""
    w = make_workload(layers=2, hidden=1024, heads=16, seq=512, mbs=1, gbs=4, gpus_per_node=1)
    assert w.dtype is Dtype.BF16 and w.kernels.gradient_accumulation_fusion
    topo = load_topology("dgx-a100")
    ops = layer_ops(w.model, w.parallel, w.dtype, (0,), kernels=w.kernels)
    gpu = w.system.gpu
    per_layer = sum(_hbm_s(gpu, st.op.epilogue_bytes) for st in ops.layer_bwd
                    if st.stream is None and getattr(st.op, "epilogue_bytes", 0.0))
    head = sum(_hbm_s(gpu, st.op.epilogue_bytes) for st in ops.head_bwd
               if st.stream is None and getattr(st.op, "epilogue_bytes", 0.0))
    assert per_layer > 0 and head > 0
    priced = make_report(simulate(w, topo)).iteration_time_s
    monkeypatch.setattr(GPUSpec, "gemm_epilogue_overlapped", property(lambda self: True))
    hidden = make_report(simulate(w, topo)).iteration_time_s
    m = w.parallel.num_microbatches
    assert m == 4
    assert priced - hidden == pytest.approx(m * (w.model.num_layers * per_layer + head), rel=1e-6)
