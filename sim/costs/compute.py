"""Analytical compute times: a roofline with measured, size-dependent efficiencies.

``t = max(flops / (peak x efficiency(flops)), bytes / (hbm_bandwidth x memory_efficiency))
+ kernel_launch`` -- the roofline of Williams et al. 2009 (CACM 52(4)) with the achievable
fractions measured on each GPU (:mod:`sim.hardware`).
"""

from __future__ import annotations

from sim.hardware import GPUSpec
from sim.types import Dtype
from sim.workload.ops import AttentionOp, GemmOp, MemoryOp

__all__ = ["gemm_time_s", "attention_time_s", "memory_time_s", "Dtype"]


def _memory_s(gpu: GPUSpec, nbytes: float) -> float:
    return nbytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency)


def gemm_time_s(gpu: GPUSpec, op: GemmOp) -> float:
    """Time of one GEMM on ``gpu``.

    >>> from sim.hardware import get_gpu
    >>> t = gemm_time_s(get_gpu("A100"), GemmOp(16384, 16384, 16384, Dtype.BF16))
    >>> round(2 * 16384**3 / (t - 2e-6) / 1e12, 1)  # cuBLASLt measured 256.5 TFLOP/s
    256.5
    """
    f = op.flops
    compute = f / (gpu.peak(op.dtype) * gpu.gemm_curve(op.dtype)(f))
    cast = _memory_s(gpu, op.extra_bytes) + op.extra_kernels * gpu.kernel_launch_s if op.extra_bytes else 0.0
    return max(compute, _memory_s(gpu, op.bytes)) + gpu.kernel_launch_s + cast


def attention_time_s(gpu: GPUSpec, op: AttentionOp) -> float:
    """Time of one fused attention kernel (forward or backward) on ``gpu``, at the efficiency
    measured for a kernel of its FLOPs in that direction (its deterministic backward where the
    op asks for it and the GPU has a figure), plus the bandwidth-bound work beside it
    (``op.extra_bytes``)."""
    f = op.flops
    curve = gpu.attention_curve(op.kernel, op.backward, op.deterministic)
    compute = f / (gpu.peak(op.dtype) * curve(f))
    fill = _memory_s(gpu, op.extra_bytes) + gpu.kernel_launch_s if op.extra_bytes else 0.0
    return max(compute, _memory_s(gpu, op.bytes)) + gpu.kernel_launch_s + fill


def memory_time_s(gpu: GPUSpec, op: MemoryOp) -> float:
    """Time of a bandwidth-bound kernel on ``gpu``."""
    return _memory_s(gpu, op.bytes) + gpu.kernel_launch_s

