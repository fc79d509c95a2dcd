"""Analytical compute times: a roofline with measured, size-dependent efficiencies.

``t = max(flops / (peak x efficiency(flops)), bytes / (hbm_bandwidth x memory_efficiency))
+ kernel_launch`` -- the roofline of Williams et al. 2009 (CACM 52(4)) with the achievable
fractions measured on each GPU (:mod:`sim.hardware`); a GEMM's bandwidth term takes the GPU's
share for bandwidth-bound GEMMs (:attr:`~sim.hardware.GPUSpec.gemm_streaming_efficiency`).

Each efficiency was measured back to back, at the clock the GPU's power limit allowed that
kernel family (:class:`~sim.power.PowerSpec`). Given ``clock_hz``, the clock an iteration's
mix holds (:func:`sim.power.solve_clock_hz`), the compute term scales by the family's measured
clock over it; the bandwidth term does not.
"""

from __future__ import annotations

from sim.hardware import GPUSpec
from sim.power import KernelLoad
from sim.types import AttentionKernel, Dtype
from sim.workload.ops import AttentionOp, GemmOp, MemoryOp, Op

__all__ = ["gemm_time_s", "attention_time_s", "memory_time_s", "issue_time_s", "kernel_load", "Dtype"]


def _memory_s(gpu: GPUSpec, nbytes: float) -> float:
    return nbytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency)


def _sm_share(gpu: GPUSpec, op: GemmOp) -> float:
    """The share of the GPU's SMs ``op`` is launched on (:attr:`GemmOp.sm_margin`; 1 where the
    GPU's SM count is unknown)."""
    if not (op.sm_margin and gpu.sm_count):
        return 1.0
    return 1.0 - min(op.sm_margin, gpu.sm_count - 1) / gpu.sm_count


def _gemm_parts(gpu: GPUSpec, op: GemmOp) -> tuple[float, float, float]:
    """(compute-bound, bandwidth-bound, added) seconds: the time is ``max`` of the first two
    (the bandwidth term at the GPU's share for a bandwidth-bound GEMM,
    :attr:`~sim.hardware.GPUSpec.gemm_streaming_efficiency`)
    plus the third, which holds the work beside the GEMM (``op.extra_bytes``) and, where the
    GPU runs a GEMM's epilogue after its main loop, the epilogue's own extra traffic
    (``op.epilogue_bytes``, :attr:`~sim.hardware.GPUSpec.gemm_epilogue_overlapped`)."""
    f = op.flops
    # a chunked GEMM runs each chunk at the efficiency of its own size; one launched on fewer
    # SMs computes at their share of the GPU's rate; a batch run as kernels of their own on
    # ``streams`` streams at the efficiency of as many of them side by side as run at once
    concurrent = min(op.batch, op.streams)
    size = f / op.batch * concurrent if op.streams else f / op.chunks
    compute = f / (gpu.peak(op.dtype) * gpu.gemm_curve(op.dtype)(size) * _sm_share(gpu, op))
    cast = _memory_s(gpu, op.extra_bytes) + op.extra_kernels * gpu.kernel_launch_s if op.extra_bytes else 0.0
    if op.epilogue_bytes and not gpu.gemm_epilogue_overlapped:
        cast += _memory_s(gpu, op.epilogue_bytes)
    memory = op.bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.gemm_streaming_efficiency)
    # a stream's kernels launch one after another: the longest stream's count of them
    launches = -(-op.batch // concurrent) if op.streams else op.chunks
    return compute, memory, launches * gpu.kernel_launch_s + cast


def _attention_parts(gpu: GPUSpec, op: AttentionOp) -> tuple[float, float, float]:
    f = op.flops
    curve = gpu.attention_curve(op.kernel, op.backward, op.deterministic)
    compute = f / (gpu.peak(op.dtype) * curve(f))
    fill = _memory_s(gpu, op.extra_bytes) + gpu.kernel_launch_s if op.extra_bytes else 0.0
    return compute, _memory_s(gpu, op.bytes), gpu.kernel_launch_s + fill


def _clock_hz(gpu: GPUSpec, op: Op) -> float:
    """The clock ``op``'s family was measured at (its :class:`~sim.power.PowerSpec`)."""
    p = gpu.power
    if isinstance(op, GemmOp):
        return p.gemm_clock(op.dtype.value)
    if op.kernel in (AttentionKernel.FLASH2, AttentionKernel.FLASH1):  # FLASH1: FlashAttention-2's curve, scaled
        return p.flash2_backward_clock_hz if op.backward else p.flash2_clock_hz
    return p.attention_backward_clock_hz if op.backward else p.attention_clock_hz


def _scaled(gpu: GPUSpec, op: Op, compute: float, clock_hz: float | None) -> float:
    """``compute`` (at the family's measured clock) at ``clock_hz`` (None or ``gpu.power``
    None: unchanged)."""
    if clock_hz is None or gpu.power is None:
        return compute
    return compute * _clock_hz(gpu, op) / clock_hz


def issue_time_s(gpu: GPUSpec, op: GemmOp) -> float:
    """The host's time to issue ``op``'s kernels on ``gpu``'s host: the op's issue time (an
    x86 DGX host's, :attr:`~sim.workload.ops.GemmOp.issue_s`) scaled by the host's
    (:attr:`~sim.hardware.GPUSpec.host_time_factor`: a Grace host takes 2.75 times as long)."""
    return op.issue_s * gpu.host_time_factor


def kernel_load(gpu: GPUSpec, op: Op) -> KernelLoad:
    """``op`` as :func:`sim.power.solve_clock_hz` sees it (``gpu.power`` must be set), a GEMM
    with its host's issue time (:attr:`~sim.workload.ops.GemmOp.issue_s`) as the floor on its
    slot, as :func:`gemm_time_s` takes it."""
    p = gpu.power
    if isinstance(op, (GemmOp, AttentionOp)):
        compute, memory, added = (_gemm_parts if isinstance(op, GemmOp) else _attention_parts)(gpu, op)
        host = issue_time_s(gpu, op) if isinstance(op, GemmOp) else 0.0
        if compute > memory:
            clock = _clock_hz(gpu, op)
            # a GEMM launched on fewer SMs draws their share of the dynamic power
            share = _sm_share(gpu, op) if isinstance(op, GemmOp) else 1.0
            return KernelLoad(compute, clock, memory, added, p.activity_w(clock) * share, host_s=host)
        return KernelLoad(0.0, 0.0, memory, added, p.memory_activity_w, host_s=host)
    return KernelLoad(0.0, 0.0, memory_time_s(gpu, op), 0.0, p.memory_activity_w)


def gemm_time_s(gpu: GPUSpec, op: GemmOp, clock_hz: float | None = None) -> float:
    """Time of one GEMM on ``gpu``: the longer of its compute- and bandwidth-bound times, plus
    the work beside it, and never less than its host's time to issue it
    (:func:`issue_time_s`).

    >>> from sim.hardware import get_gpu
    >>> t = gemm_time_s(get_gpu("A100"), GemmOp(16384, 16384, 16384, Dtype.BF16))
    >>> round(2 * 16384**3 / (t - 2e-6) / 1e12, 1)  # cuBLASLt measured 256.5 TFLOP/s
    256.5
    """
    compute, memory, added = _gemm_parts(gpu, op)
    return max(max(_scaled(gpu, op, compute, clock_hz), memory) + added, issue_time_s(gpu, op))


def attention_time_s(gpu: GPUSpec, op: AttentionOp, clock_hz: float | None = None) -> float:
    """Time of one fused attention kernel (forward or backward) on ``gpu``, at the efficiency
    measured for a kernel of its FLOPs in that direction (its deterministic backward where the
    op asks for it and the GPU has a figure), plus the bandwidth-bound work beside it
    (``op.extra_bytes``)."""
    compute, memory, added = _attention_parts(gpu, op)
    return max(_scaled(gpu, op, compute, clock_hz), memory) + added


def memory_time_s(gpu: GPUSpec, op: MemoryOp) -> float:
    """Time of a bandwidth-bound kernel on ``gpu``, at the share of HBM bandwidth its access
    pattern reaches (:meth:`GPUSpec.memory_efficiency_of`) times the kernel's own measured
    share of that (:attr:`MemoryOp.efficiency`)."""
    rate = gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency_of(op.access) * op.efficiency
    return op.bytes / rate + gpu.kernel_launch_s

