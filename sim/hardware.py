"""GPUs: peak rates, memory and the achievable fractions measured on them.

Every number is a property of the GPU and cites where it comes from; the facts are collected
with their sources in the project's hardware notes (NVIDIA datasheets, cuBLASLt GEMM sweeps,
the FlashAttention papers, nccl-tests). Nothing here is keyed to a model or a published case.

The catalogue is immutable: :func:`get_gpu` returns a frozen :class:`GPUSpec`, and what-if
studies build modified copies with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from dataclasses import dataclass, field

from sim.errors import InfeasibleError
from sim.power import PowerSpec
from sim.types import AttentionKernel, Dtype, GpuGeneration, HostCpu, MemoryAccess, compact_name
from sim.units import GB, GBPS, TB, TFLOPS, US, GiB, MiB
from sim.workload.ops import AttentionOp

__all__ = ["B200_HBM_BANDWIDTH", "EfficiencyCurve", "GPUSpec", "GPU_CATALOGUE", "GRACE_HOST_TIME_FACTOR",
           "MXFP8_GEMM_SLOWDOWN", "SHARED_SWEEP_FLOPS", "bf16_from_b200", "cudnn_919_fractions", "get_gpu",
           "gpu_names"]


@dataclass(frozen=True)
class EfficiencyCurve:
    """Achievable fraction of a peak rate as a function of work size.

    ``points`` are ``(size, efficiency)`` pairs sorted by size; between points the
    efficiency is interpolated linearly in ``log(size)``, outside them it is clamped to the
    nearest end (the approach of Calculon's ``gflops_efficiency`` tables, calculon-ai/calculon
    ``systems/a100_80g.json``, made continuous).

    >>> c = EfficiencyCurve(((1e9, 0.4), (1e12, 0.8)))
    >>> round(c(10**10.5), 3)
    0.6
    >>> c(1.0), c(1e15)
    (0.4, 0.8)
    """

    points: tuple[tuple[float, float], ...]
    _xs: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("EfficiencyCurve needs at least one point")
        xs = tuple(float(x) for x, _ in self.points)
        if any(b <= a for a, b in zip(xs, xs[1:])):
            raise ValueError(f"EfficiencyCurve sizes must increase (got {xs})")
        for _, e in self.points:
            if not 0.0 < e <= 1.0:
                raise ValueError(f"efficiency must be in (0, 1] (got {e})")
        object.__setattr__(self, "_xs", xs)

    @classmethod
    def constant(cls, efficiency: float) -> EfficiencyCurve:
        """A curve that is ``efficiency`` at every size."""
        return cls(((1.0, efficiency),))

    def __call__(self, size: float) -> float:
        return _log_interpolate(self.points, self._xs, size)

    def scaled(self, factor: float) -> EfficiencyCurve:
        """This curve with every efficiency multiplied by ``factor`` (at most 1).

        >>> EfficiencyCurve(((1e9, 0.4), (1e12, 0.8))).scaled(0.5).points
        ((1000000000.0, 0.2), (1000000000000.0, 0.4))
        """
        return _scaled_curve(self, factor)

    def times(self, factors: tuple[tuple[float, float], ...]) -> EfficiencyCurve:
        """This curve times ``factors`` (``(size, factor)`` points, interpolated in log(size) and
        held at the ends), sampled at both's sizes, each efficiency at most 1.

        >>> c = EfficiencyCurve(((1e9, 0.4), (1e12, 0.8))).times(((1e10, 0.5), (1e11, 1.0)))
        >>> [round(e, 3) for _, e in c.points]
        [0.2, 0.267, 0.667, 0.8]
        """
        fx = tuple(x for x, _ in factors)
        xs = sorted({x for x, _ in self.points} | set(fx))
        return EfficiencyCurve(tuple((x, min(1.0, self(x) * _log_interpolate(factors, fx, x))) for x in xs))


def _log_interpolate(points: tuple[tuple[float, float], ...], xs: tuple[float, ...], size: float) -> float:
    """``points``' value at ``size``: linear in ``log(size)`` between them, clamped outside."""
    if size <= xs[0]:
        return points[0][1]
    if size >= xs[-1]:
        return points[-1][1]
    i = bisect.bisect_right(xs, size)
    (x0, e0), (x1, e1) = points[i - 1], points[i]
    w = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return e0 + w * (e1 - e0)


@functools.cache
def _scaled_curve(curve: EfficiencyCurve, factor: float) -> EfficiencyCurve:
    return EfficiencyCurve(tuple((x, min(1.0, e * factor)) for x, e in curve.points))


FLASH1_RATE = 0.5
"""The first FlashAttention's rate as a fraction of FlashAttention-2's, both directions, on every
GPU: FlashAttention-2 yields "around 2x speedup compared to FlashAttention" (Dao 2023, arXiv
2307.08691, abstract; measured on A100), and PyTorch 2.2's move of ``scaled_dot_product_attention``
from it to FlashAttention-2 "around 2x speedups compared to previous versions" (PyTorch 2.2
release blog, January 2024). The Triton FlashAttention (Dao-AILab/flash-attention
``flash_attn/flash_attn_triton.py``, which MosaicML's llm-foundry vendors as ``attn_impl:
triton``) runs at about the first one's rate: "Overall Triton forward + backward is slightly
slower than CUDA forward + backward" (its docstring, the CUDA version of its time being the
first FlashAttention), and "In our experience, `triton` is slightly faster than `flash`"
(mosaicml/llm-foundry TUTORIAL.md @ 5e85bd62d, `flash` being flash-attn 1.x there). The ratio
is A100's; Hopper and Blackwell take it until measured."""


def _gemm_flops(m: int, n: int, k: int) -> float:
    """FLOPs of an m x n x k GEMM (2 m n k), the x-axis of a cuBLAS sweep."""
    return 2.0 * m * n * k


def _cube_flops(n: int) -> float:
    """FLOPs of an n x n x n GEMM (2 n^3), the x-axis of a square cuBLAS sweep."""
    return _gemm_flops(n, n, n)


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model.

    Attributes
    ----------
    name : str
        Canonical name, as in the validation cases (``A100-SXM4-80GB``).
    peak_flops_per_s : tuple of (Dtype, float)
        Dense tensor-core peak per number format (no 2:4 sparsity).
    hbm_capacity_bytes, hbm_bandwidth_bytes_per_s : float
        Device memory size and peak bandwidth.
    nvlink_bandwidth_bytes_per_s : float
        Scale-up bandwidth per direction (half the datasheet's bidirectional figure).
    gemm_efficiency : tuple of (Dtype, EfficiencyCurve)
        Achieved fraction of peak for one GEMM, by its FLOPs (cuBLASLt sweeps).
    attention_efficiency, attention_backward_efficiency : EfficiencyCurve
        Achieved fraction of the 16-bit peak in the vendor's fused attention kernel, forward
        and backward, by the kernel's FLOPs.
    flash2_attention_efficiency, flash2_attention_backward_efficiency : EfficiencyCurve
        The same for FlashAttention-2 as PyTorch's SDPA runs it (None: as the vendor's).
    memory_efficiency : float
        Achieved fraction of HBM bandwidth by streaming kernels.
    gemm_memory_efficiency : float or None
        Achieved fraction of HBM bandwidth by a GEMM whose time is its operands' traffic (a
        decode step's or a short prompt's GEMMs, a few rows against a weight matrix read once):
        a few output tiles stream a long ``K`` each and keep fewer loads in flight than a
        streaming kernel does. None: not measured, ``memory_efficiency``.
    kernel_launch_s : float
        Gap a kernel adds on the GPU between back-to-back launches.
    generation : GpuGeneration
        The architecture generation (NVIDIA's product pages: A100 and A800 Ampere, H100, H800 and
        H200 Hopper, B200, GB200 and GB300 Blackwell).
    deterministic_attention_efficiency, deterministic_attention_backward_efficiency : EfficiencyCurve or None
        The attention's efficiency, forward and backward, when training must be deterministic
        and Transformer Engine then runs another kernel than the one measured above (None:
        the same kernel, or not known; priced as above).
    sm_count : int
        Streaming multiprocessors. A running NCCL kernel holds some of them (one CTA per
        channel) and compute beside it gets the rest (:mod:`sim.engine.contention`); 0: unknown,
        compute is not slowed by communication.
    memory_access_efficiency : tuple of (MemoryAccess, float)
        Achieved fraction of HBM bandwidth of PyTorch's non-vectorized elementwise kernels, by
        access pattern; a pattern not listed (and :attr:`MemoryAccess.STREAM`) runs at
        ``memory_efficiency``.
    power : PowerSpec or None
        Board power limit and the clocks the efficiency curves were measured at; an iteration's
        compute-bound kernels then run at the clock its kernel mix holds under the limit
        (:mod:`sim.power`). None: not measured, every kernel at its measured rate.
    host_cpu : HostCpu
        The CPU that issues the GPU's kernels: x86 (DGX and HGX systems) unless the GPU comes on
        a superchip with its own (GB200 and GB300 with Grace). It scales the host's issue time
        of the kernels that wait on it (:attr:`host_time_factor`).
    sources : str
        Where the numbers come from.
    """

    name: str
    peak_flops_per_s: tuple[tuple[Dtype, float], ...]
    hbm_capacity_bytes: float
    hbm_bandwidth_bytes_per_s: float
    nvlink_bandwidth_bytes_per_s: float
    gemm_efficiency: tuple[tuple[Dtype, EfficiencyCurve], ...]
    attention_efficiency: EfficiencyCurve
    attention_backward_efficiency: EfficiencyCurve
    memory_efficiency: float
    kernel_launch_s: float
    generation: GpuGeneration
    sources: str = ""
    flash2_attention_efficiency: EfficiencyCurve | None = None
    flash2_attention_backward_efficiency: EfficiencyCurve | None = None
    sm_count: int = 0
    power: PowerSpec | None = None
    memory_access_efficiency: tuple[tuple[MemoryAccess, float], ...] = ()
    deterministic_attention_efficiency: EfficiencyCurve | None = None
    deterministic_attention_backward_efficiency: EfficiencyCurve | None = None
    gemm_memory_efficiency: float | None = None
    host_cpu: HostCpu = HostCpu.X86

    @property
    def host_time_factor(self) -> float:
        """The host's time to issue a kernel over an x86 DGX host's, which the issue costs in
        the catalogue were measured on (:data:`GRACE_HOST_TIME_FACTOR` for Grace, else 1)."""
        return GRACE_HOST_TIME_FACTOR if self.host_cpu is HostCpu.GRACE else 1.0

    @property
    def fp8_any_layout(self) -> bool:
        """Whether the FP8 tensor cores take every operand layout, so that a per-tensor FP8
        weight gradient reads the row-wise copies its operands already have: Blackwell's do
        (Transformer Engine's ``nvte_is_non_tn_fp8_gemm_supported``, true at compute capability
        10.x and 13+, ``transformer_engine/common/transformer_engine.cpp``), Hopper's take only
        the TN layout (NVIDIA, "Using FP8 with Transformer Engine")."""
        return self.generation is GpuGeneration.BLACKWELL

    @property
    def gemm_streaming_efficiency(self) -> float:
        """The fraction of HBM bandwidth a bandwidth-bound GEMM reaches
        (:attr:`gemm_memory_efficiency`, else :attr:`memory_efficiency`)."""
        return self.memory_efficiency if self.gemm_memory_efficiency is None else self.gemm_memory_efficiency

    def attention_curve(self, kernel: AttentionKernel, backward: bool,
                        deterministic: bool = False) -> EfficiencyCurve:
        """The efficiency curve of ``kernel`` in one direction (the deterministic kernel's
        where asked for and known); the first FlashAttention's is FlashAttention-2's at
        :data:`FLASH1_RATE`."""
        det = self.deterministic_attention_backward_efficiency if backward else self.deterministic_attention_efficiency
        if kernel is AttentionKernel.FLASH1:
            return self.attention_curve(AttentionKernel.FLASH2, backward, deterministic).scaled(FLASH1_RATE)
        if deterministic and det is not None:
            return det
        if kernel is AttentionKernel.FLASH2 and self.flash2_attention_efficiency is not None:
            return self.flash2_attention_backward_efficiency if backward else self.flash2_attention_efficiency
        return self.attention_backward_efficiency if backward else self.attention_efficiency

    def peak(self, dtype: Dtype) -> float:
        """Dense peak FLOP/s for ``dtype``.

        Raises
        ------
        InfeasibleError
            If the GPU has no tensor-core support for ``dtype``.
        """
        for d, v in self.peak_flops_per_s:
            if d is dtype:
                return v
        have = [d.value for d, _ in self.peak_flops_per_s]
        raise InfeasibleError(f"{self.name} has no {dtype.value} tensor cores (it has {have})")

    def gemm_curve(self, dtype: Dtype) -> EfficiencyCurve:
        """The GEMM efficiency curve for ``dtype`` (16-bit formats share one curve)."""
        key = Dtype.BF16 if dtype is Dtype.FP16 else dtype
        for d, c in self.gemm_efficiency:
            if d is key:
                return c
        raise InfeasibleError(f"{self.name}: no GEMM efficiency data for {dtype.value}")

    def memory_efficiency_of(self, access: MemoryAccess) -> float:
        """Achieved fraction of HBM bandwidth of a bandwidth-bound kernel walking memory so."""
        if access is not MemoryAccess.STREAM:
            for a, e in self.memory_access_efficiency:
                if a is access:
                    return e
        return self.memory_efficiency

    @property
    def gemm_epilogue_overlapped(self) -> bool:
        """Whether a GEMM's epilogue (reading and writing ``C``) runs beside its main loop, so
        that extra epilogue traffic (:attr:`~sim.workload.ops.GemmOp.epilogue_bytes`) adds no
        time.

        From Hopper on, cuBLAS's and CUTLASS's GEMMs are warp-specialized persistent kernels:
        in the ping-pong design "the two consumer warp groups are assigned a different output
        tile ... This allows for epilogue of one consumer warp group to be overlapped with the
        math operations of the other consumer warp group" (CUTLASS ``media/docs/cpp/
        efficient_gemm.md``, "Hopper Warp Specialization"); Blackwell's kernels double-buffer
        the accumulator in tensor memory for the same end. Ampere's kernels (CUTLASS 2.x
        multistage, ``ampere_*gemm*_stages_*`` in cuBLAS) run one output tile per thread block
        and its epilogue after the main loop, and a large tile holds its SM alone, so the
        epilogue's traffic is time the tensor cores wait: on the A100 it is priced."""
        return self.generation is not GpuGeneration.AMPERE

    @property
    def fastest_clock_hz(self) -> float | None:
        """The clock no kernel mix runs faster than (the maximum), for lower bounds; None
        without a power model (every kernel at its measured rate)."""
        return self.power.max_clock_hz if self.power is not None else None

    def supports(self, dtype: Dtype) -> bool:
        return any(d is dtype for d, _ in self.peak_flops_per_s)


# --- measured efficiencies ------------------------------------------------------------------

# cuBLASLt FP16 GEMM on A100 SXM4 80GB, square sizes, 10k warm-up iterations
# (Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md @8fd0c6e):
# 1024^3 119.4, 2048^3 221.8, 4096^3 228.0, 8192^3 253.7, 16384^3 256.5 TFLOP/s of 312.
_A100_GEMM = EfficiencyCurve(
    (
        (_cube_flops(1024), 119.4 / 312),
        (_cube_flops(2048), 221.8 / 312),
        (_cube_flops(4096), 228.0 / 312),
        (_cube_flops(8192), 253.7 / 312),
        (_cube_flops(16384), 256.5 / 312),
    )
)

# H100 SXM5 80GB, measured by this project: benchmarks/device/kernels.py on one H100 80GB HBM3
# (700 W limit; torch 2.11 + CUDA 13.0 cuBLASLt, cuDNN 9.19), 2026-11-26, each kernel timed in a
# CUDA graph over rotating inputs. Points: median achieved fraction of the dense peak per
# power-of-two bin of FLOPs over every measured shape (the GEMMs of the Hopper validation
# cases, in their dtype and in BF16, and a 6x3x3 m/n/k grid), launch gap removed. Raw data:
# benchmarks/device/results/h100-sxm5-80gb-2026-11-26.json; sim.derive.gemm_curves (printed by
# benchmarks/device/compare.py) re-derives these points and tests/unit/test_hardware.py checks they match. (The BF16
# plateau, 0.69, is also pytorch/ao's pct_achievable_gemm_tops_bf16 for H100.)
_H100_GEMM = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (30, 0.288), (31, 0.431), (32, 0.509), (33, 0.558), (34, 0.605), (35, 0.615), (36, 0.747),
    (37, 0.69), (38, 0.696), (39, 0.69), (40, 0.689), (41, 0.692), (42, 0.693), (43, 0.703),
    (44, 0.709))))
# FP8 (e4m3 x e4m3 -> BF16, torch._scaled_mm), same measurement, fraction of 1979 TFLOP/s.
_H100_FP8_GEMM = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (30, 0.182), (31, 0.223), (32, 0.325), (33, 0.357), (34, 0.407), (35, 0.431), (36, 0.624),
    (37, 0.616), (38, 0.616), (39, 0.604), (40, 0.617), (41, 0.626), (42, 0.606), (43, 0.613),
    (44, 0.648))))
# Fused attention on H100 (cuDNN SDPA, the kernel Megatron-Core/Transformer Engine use on
# Hopper), BF16, head dim 128, causal, same measurement; fraction of 989 TFLOP/s by the
# kernel's FLOPs as AttentionOp counts them. Short sequences and few heads per GPU fill the
# chip poorly; FlashAttention-3 (arXiv 2407.08608) reports the same rise to ~0.6-0.75.
_H100_ATTN_FWD = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (33, 0.3), (34, 0.366), (35, 0.416), (36, 0.486), (37, 0.511), (38, 0.529), (39, 0.545),
    (40, 0.572), (41, 0.586), (42, 0.61), (43, 0.617))))
_H100_ATTN_BWD = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (34, 0.255), (35, 0.29), (36, 0.333), (37, 0.388), (38, 0.431), (39, 0.481), (40, 0.545),
    (41, 0.549), (42, 0.533), (43, 0.556), (44, 0.559))))
# FlashAttention-2 as PyTorch's SDPA runs it (its FLASH_ATTENTION backend), same measurement:
# about half the cuDNN kernel's rate on H100, as the FlashAttention-3 paper reports ("FA2
# achieves only 35% utilization on H100", arXiv 2407.08608, Sec. 1).
_H100_FA2_FWD = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (33, 0.158), (34, 0.184), (35, 0.204), (36, 0.233), (37, 0.285), (38, 0.295), (39, 0.306),
    (40, 0.313), (41, 0.336), (42, 0.339), (43, 0.339))))
_H100_FA2_BWD = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (34, 0.137), (35, 0.163), (36, 0.185), (37, 0.211), (38, 0.25), (39, 0.272), (40, 0.301),
    (41, 0.316), (42, 0.314), (43, 0.305), (44, 0.309))))
# cuDNN's deterministic attention backward on H100: what Transformer Engine asks cuDNN for
# under deterministic training on sm90 (NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, which Megatron-LM's
# --deterministic-mode sets; TE keeps FusedAttention for it on sm90+, see
# FA2_DETERMINISTIC_BWD_RATIO below), i.e. ``use_deterministic_algorithm=True`` in the cuDNN
# frontend's ``sdpa_backward``. Measured by this project on H100 SXM5 with cuDNN 9.19.0
# (benchmarks/device/attention_deterministic.py; results/h100-sxm5-80gb-2026-11-27-
# attention-deterministic.json): its time over the default backward's, same run, batch 1,
# 32 query / 8 KV heads, head dim 128, causal, at _H100_DET_SEQS tokens. Other shapes of the
# run spread 1.13-1.31, higher with fewer (batch x heads) to spread over the SMs (8 heads at
# 16k: 1.31; 64 heads at 8k: 1.13); the curve, like every attention curve here, goes by FLOPs.
_H100_DET_SEQS = (2048, 4096, 8192, 16384, 32768)
_H100_DET_SLOWDOWN = (1.040, 1.129, 1.141, 1.173, 1.159)


def _det_flops(seq: int) -> float:
    """FLOPs, as AttentionOp counts them, of the measured deterministic backward at ``seq``."""
    return AttentionOp(1, 32, 8, seq, 128, True, True).flops


def _slowed(base: EfficiencyCurve, slowdown: tuple[tuple[float, float], ...]) -> EfficiencyCurve:
    """``base`` divided by ``slowdown`` (``(FLOPs, factor)`` points, interpolated in
    log(FLOPs), held at the ends), sampled at both's sizes."""
    sx = tuple(x for x, _ in slowdown)
    xs = sorted({x for x, _ in base.points} | set(sx))
    return EfficiencyCurve(tuple((x, base(x) / _log_interpolate(slowdown, sx, x)) for x in xs))


_H100_DET_POINTS = tuple(zip(map(_det_flops, _H100_DET_SEQS), _H100_DET_SLOWDOWN))
_H100_ATTN_DET_BWD = _slowed(_H100_ATTN_BWD, _H100_DET_POINTS)


# The same sweep on our H200 (benchmarks/device/kernels.py, the same shapes; raw data
# benchmarks/device/results/h200-2026-11-27-kernels.json, re-derived by sim.derive.gemm_curves and checked
# by tests/unit/test_hardware.py). Back to back its GEMMs reach the H100's fractions of peak
# (0.69-0.70 BF16, 0.61-0.64 FP8 above 2^37 FLOPs) at a higher clock (BF16 1,461 MHz against
# 1,364: its power model below), so they are its own curves, not the H100's at its clock.
_H200_GEMM = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (30, 0.307), (31, 0.432), (32, 0.497), (33, 0.567), (34, 0.616), (35, 0.625), (36, 0.72),
    (37, 0.695), (38, 0.694), (39, 0.686), (40, 0.697), (41, 0.697), (42, 0.696), (43, 0.702),
    (44, 0.697))))
_H200_FP8_GEMM = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (30, 0.171), (31, 0.229), (32, 0.34), (33, 0.418), (34, 0.442), (35, 0.481), (36, 0.665),
    (37, 0.621), (38, 0.621), (39, 0.613), (40, 0.622), (41, 0.628), (42, 0.617), (43, 0.626),
    (44, 0.638))))
_H200_ATTN_FWD = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (33, 0.302), (34, 0.366), (35, 0.42), (36, 0.483), (37, 0.519), (38, 0.536), (39, 0.592),
    (40, 0.596), (41, 0.586), (42, 0.6), (43, 0.61))))
_H200_ATTN_BWD = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (34, 0.262), (35, 0.3), (36, 0.347), (37, 0.4), (38, 0.451), (39, 0.488), (40, 0.562),
    (41, 0.534), (42, 0.542), (43, 0.551), (44, 0.553))))
_H200_FA2_FWD = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (33, 0.156), (34, 0.191), (35, 0.207), (36, 0.23), (37, 0.287), (38, 0.295), (39, 0.311),
    (40, 0.339), (41, 0.347), (42, 0.34), (43, 0.353))))
_H200_FA2_BWD = EfficiencyCurve(tuple((2.0**b, e) for b, e in (
    (34, 0.141), (35, 0.166), (36, 0.191), (37, 0.216), (38, 0.251), (39, 0.277), (40, 0.305),
    (41, 0.307), (42, 0.318), (43, 0.328), (44, 0.323))))


def _square_sweep(peak_tflops: float, *tflops: float) -> EfficiencyCurve:
    """A curve from a square cuBLASLt sweep at m = n = k = 1024, 2048, ... 32768
    (:data:`_SQUARE_SIZES`): each point is the measured TFLOP/s over ``peak_tflops``."""
    return EfficiencyCurve(tuple((_cube_flops(n), t / peak_tflops) for n, t in zip(_SQUARE_SIZES, tflops, strict=True)))


_SQUARE_SIZES = (1024, 2048, 4096, 8192, 16384, 32768)
"""The square sizes of Azure's AI-benchmarking-guide cuBLASLt sweeps."""


# Blackwell cuBLASLt sweeps. Each point is the published TFLOP/s over the catalogue's dense
# peak for that GPU and format (B200 2250 BF16 / 4500 FP8; GB200 and GB300 5000 FP8; FP4 10000
# on GB200, 15000 on GB300). Non-square rows of the Azure tables (1024x2145x1024, 6144x12288x12288,
# the skinny 802816x192x768) are left out, as for A100: the curve is by FLOPs, and skinny GEMMs
# are priced by the roofline's memory term.
#
# GB200, Azure ND GB200 v6, cuBLASLt, random init, 10k warm-up iterations, CUDA 12.8
# (Azure/AI-benchmarking-guide, Azure_Results/ND_GB200_v6_results.md @2a370be), square m=n=k:
# FP8 1024 489.2, 2048 2243.6, 4096 2834.6, 8192 2876.6, 16384 2906.9, 32768 2825.6 TFLOP/s;
# FP4 1024 287.2, 2048 1677.7, 4096 5177.3, 8192 7535.6, 16384 7627.6, 32768 7487.2 TFLOP/s.
_GB200_FP8_GEMM = _square_sweep(5000, 489.2, 2243.6, 2834.6, 2876.6, 2906.9, 2825.6)
_GB200_FP4_GEMM = _square_sweep(10000, 287.2, 1677.7, 5177.3, 7535.6, 7627.6, 7487.2)
# GB300, Azure ND GB300 v6, the same benchmark on CUDA 13.0 (Azure_Results/ND_GB300_v6_results.md
# in the fork egmsft/AI-benchmarking-guide @18e80a2; not in Azure's own stored history):
# FP8 1024 553.5, 2048 2288.9, 4096 3257.0, 8192 3286.3, 16384 3308.5, 32768 3271.3 TFLOP/s;
# FP4 1024 316.4, 2048 1678.0, 4096 5417.0, 8192 8155.9, 16384 8640.3, 32768 8555.1 TFLOP/s.
_GB300_FP8_GEMM = _square_sweep(5000, 553.5, 2288.9, 3257.0, 3286.3, 3308.5, 3271.3)
_GB300_FP4_GEMM = _square_sweep(15000, 316.4, 1678.0, 5417.0, 8155.9, 8640.3, 8555.1)
# B200 (a production part), cuBLASLt with the best of 8 heuristic algorithms, m=n=8192 and a
# k sweep, median of triton.testing.do_bench over 10k iterations after 10k warm-up, CUDA/cuBLAS
# 13.0 (tmoreau89/triton, python/triton_cublas_bench/prod_benchmark_results2/fp16_results.csv
# @ced5e01 and fp8_results.csv @f948a56; method in RESULTS.md @aabd14f):
# k = 128, 256, 384, 512, 640, 768, 896, 1024:
# FP16 492.9, 845.4, 1072.9, 1221.7, 1313.0, 1341.8, 1373.3, 1389.3 TFLOP/s (BF16 runs at the
# same dense rate on Blackwell; the catalogue prices FP16 and BF16 with one curve);
# FP8 (e4m3) 647.2, 1102.5, 1521.2, 1950.2, 2300.0, 2607.9, 2729.8, 2770.0 TFLOP/s.
# The sweep ends at 1.4e11 FLOPs, where it has nearly levelled off; larger GEMMs take its last
# point (GB200's square FP8 sweep is flat within 3% from 4096^3 to 32768^3).
_B200_SWEEP_K = (128, 256, 384, 512, 640, 768, 896, 1024)
_B200_BF16_GEMM = EfficiencyCurve(tuple(
    (_gemm_flops(8192, 8192, k), t / 2250) for k, t in zip(_B200_SWEEP_K, (
        492.9, 845.4, 1072.9, 1221.7, 1313.0, 1341.8, 1373.3, 1389.3)))
)
_B200_FP8_GEMM = EfficiencyCurve(tuple(
    (_gemm_flops(8192, 8192, k), t / 4500) for k, t in zip(_B200_SWEEP_K, (
        647.2, 1102.5, 1521.2, 1950.2, 2300.0, 2607.9, 2729.8, 2770.0)))
)
# MXFP8 (block-scaled) is priced with each GPU's FP8 curve slowed by MXFP8_GEMM_SLOWDOWN, what
# Transformer Engine measured at a training layer's shapes (below). The same B200 run as above
# measured cuBLASLt MXFP8 at 8192^3 2886.1 and 8192x8192x16384 2809.7 TFLOP/s
# (mxfp8_results.csv @ced5e01), 0.641 and 0.624 of 4500, within 5% of the FP8 curve's 0.616
# there: square sizes, one GEMM at a time, where block scaling costs least.
# No 16-bit sweep of GB200 or GB300 was found: both run B200's 16-bit rate times their own FP8
# rate over B200's (bf16_from_b200, below), and B200, with no cuBLASLt FP4 result (cuBLAS 13.0
# in that run rejected FP4), borrows GB200's FP4 ones.
# Fused attention on Blackwell (cuDNN, the kernel Transformer Engine runs), from NVIDIA's
# cuDNN-frontend SDPA training benchmark run with cuDNN 9.19.1 (the H100 measurement above ran
# 9.19.0) on GB200, GB300 and, in the same harness, H200 (NVIDIA/cudnn-frontend
# benchmark/sdpa_benchmark_training/results/gb200_919_only_cudnn/llama3.1_20260226_174648.csv
# and h200_919_only_cudnn/llama3.1_20260227_034703.csv @df73764, gb300_919_only_cudnn/
# llama3.1_20260226_185510.csv @afa9f7c): batch 1, 64 query / 8 KV heads, head dim 128, BF16,
# causal (top_left), kernel device time. Published TFLOP/s, forward and backward, at
# s = 2k, 4k, 8k, 16k, 32k are in _CUDNN_919 below (their FLOPs count the s (s + 1) / 2
# unmasked scores, the backward 2.5x the forward). That harness reads Hopper higher than ours
# does: its H200 forward is 0.66-0.70 of peak at 8k-32k where the H100 curve has 0.57-0.62 at
# the same FLOPs (backward within 6%). So each Blackwell curve is the H100
# curve times the published ratio of achieved fractions, Blackwell over H200, at the same shape
# -- the same FLOPs, so each source's FLOP count cancels -- placed at the kernel's FLOPs as
# AttentionOp counts them, interpolated in log(FLOPs) between the five sizes and held at the
# end ones beyond: what our H100 measurement would read on Blackwell. GB200 / H200: forward
# 0.85, 0.89, 0.98, 0.99, 0.99, backward 0.89, 0.94, 0.96, 0.96, 1.00; GB300 / H200: forward
# 1.03, 1.12, 1.16, 1.16, 1.16 (Blackwell Ultra's faster exponentials), backward 0.97-1.05.
# B200 (GB200's die at a lower power limit; its own 2250 peak) takes GB200's fractions: NVIDIA's
# earlier run of the same benchmark on B200 and GB300 with cuDNN 9.13 through PyTorch
# (artifacts/sdpa_bf16_benchmark_results_NVIDIA_{B200,GB300}.csv @bb37575; CUDA-event timing, so
# host overhead at short sequences) has B200 at 0.87 / 0.94 (forward / backward, 16k) and
# 0.88 / 0.93 (32k) of GB300's fractions, where GB200 is at 0.86 / 0.94 and 0.85 / 0.95 in the
# 9.19 run. FlashAttention-2 (attention_kernel: flash2) stays at the H100 curves on Blackwell.
_CUDNN_919_SEQS = (2048, 4096, 8192, 16384, 32768)
_CUDNN_919 = {  # GPU: (dense BF16 peak, forward TFLOP/s, backward TFLOP/s at _CUDNN_919_SEQS)
    "H200": (989, (484, 591, 644, 673, 688), (370, 474, 541, 579, 581)),
    "GB200": (2500, (1042, 1335, 1598, 1687, 1720), (836, 1132, 1311, 1402, 1473)),
    "GB300": (2500, (1266, 1672, 1887, 1968, 2014), (906, 1195, 1385, 1490, 1549)),
}


def _cudnn_919_flops(seq: int, backward: bool) -> float:
    """FLOPs, as AttentionOp counts them, of the benchmark's kernel at ``seq`` tokens."""
    return AttentionOp(1, 64, 8, seq, 128, True, backward).flops


def cudnn_919_fractions(gpu: str, backward: bool) -> tuple[tuple[float, float], ...]:
    """``(FLOPs as AttentionOp counts them, achieved fraction of the dense BF16 peak)`` of each
    size of NVIDIA's cuDNN 9.19 SDPA benchmark on ``gpu`` (H200, GB200 or GB300; above)."""
    peak, times = _CUDNN_919[gpu][0], _CUDNN_919[gpu][2 if backward else 1]
    return tuple((_cudnn_919_flops(s, backward), t / peak) for s, t in zip(_CUDNN_919_SEQS, times))


def _attention_relative_to_h100(gpu: str, backward: bool) -> EfficiencyCurve:
    """The H100 attention curve times ``gpu``'s published achieved fraction over H200's in the
    cuDNN 9.19 benchmark, sampled at the H100 curve's sizes and the benchmark's."""
    base = _H100_ATTN_BWD if backward else _H100_ATTN_FWD
    ratio = tuple((x, f / h) for (x, f), (_, h) in zip(cudnn_919_fractions(gpu, backward),
                                                        cudnn_919_fractions("H200", backward)))
    return base.times(ratio)


# FlashAttention-2's deterministic backward (flash-attn >= 2.4.1, ``deterministic=True``):
# the key blocks of a (batch, head) are looped in at most ceil(SMs / (batch x heads)) CTAs,
# each keeping its own fp32 dQ accumulator, instead of one CTA per key block adding into dQ
# with atomics (Dao-AILab/flash-attention #988: "kernels need to avoid seqK parallelism and
# loop it sequentially instead"). Measured on H100 by Dao-AILab/flash-attention PR #1893
# (hopper/benchmark_attn.py, head dim 128, causal, 8192 tokens, 16 heads, batch 2,
# deterministic=True): "Fav2 bwd: 8.279ms, 166.0 TFLOPS". Over the non-deterministic
# FlashAttention-2 backward measured here at the same FLOPs (_H100_FA2_BWD), the rate ratio
# below (0.55). Transformer Engine runs it wherever deterministic training rules out cuDNN's
# fused attention, which its backend filter does below sm90 ("sub-backend 1 | workspace
# optimization path and sm90+: yes; otherwise: no", transformer_engine/pytorch/attention/
# dot_product_attention/utils.py): on A100, whose FlashAttention-2 curve it scales.
FA2_DETERMINISTIC_BWD_RATIO = 166.0 / (989 * _H100_FA2_BWD(AttentionOp(2, 16, 16, 8192, 128, True, True).flops))

# FlashAttention-2 on Blackwell: it has no tcgen05 kernels, so B200 runs its Ampere-style
# mma.sync kernels at about H100's absolute rate: 361.6 TFLOP/s forward at batch 8, 16 heads,
# 8192 tokens, head dim 128 (meta-pytorch/tritonbench PR #171, flash_v2 on B200; non-causal),
# 0.161 of B200's 2250 TFLOP/s, where our H100 FlashAttention-2 forward curve has 0.339 of
# 989 at the same FLOPs. So on Blackwell the H100 FlashAttention-2 curves are scaled by that
# ratio of fractions (0.47), both directions (B200's FlashAttention-2 backward runs at 0.96 of
# its forward in Dao-AILab/flash-attention #1589, flash_attn 2.7.4, head dim 64, 8192 tokens:
# 329.1 against 343.1 TFLOP/s), and the deterministic backward by FA2_DETERMINISTIC_BWD_RATIO.
# Transformer Engine runs it for deterministic training on sm100+ ("Disabling FusedAttention
# for determinism reasons on Blackwell", utils.py, TransformerEngine PR #2130: "As of cuDNN
# 9.12, cuDNN does not support determinism for attention backward"), until TE PR #2584
# (2026-01) re-enabled cuDNN there with cuDNN >= 9.18.1; Megatron-LM pinned TE release_v2.9
# (pyproject.toml at 000c4ac), which predates it.
FA2_BLACKWELL_RATIO = (361.6 / 2250) / _H100_FA2_FWD(AttentionOp(8, 16, 16, 8192, 128, False, False).flops)


def _scaled(curve: EfficiencyCurve, factor: float) -> EfficiencyCurve:
    """``curve`` times ``factor`` at each of its points."""
    return EfficiencyCurve(tuple((x, e * factor) for x, e in curve.points))


_BLACKWELL_FA2_FWD = _scaled(_H100_FA2_FWD, FA2_BLACKWELL_RATIO)
_BLACKWELL_FA2_DET_BWD = _scaled(_H100_FA2_BWD, FA2_BLACKWELL_RATIO * FA2_DETERMINISTIC_BWD_RATIO)

_GB200_ATTN_FWD = _attention_relative_to_h100("GB200", backward=False)
_GB200_ATTN_BWD = _attention_relative_to_h100("GB200", backward=True)
_GB300_ATTN_FWD = _attention_relative_to_h100("GB300", backward=False)
_GB300_ATTN_BWD = _attention_relative_to_h100("GB300", backward=True)
# Achieved HBM bandwidth of streaming kernels: pytorch/ao roofline_utils.py
# pct_achievable_mem_bw = 0.92 (H100; used for every GPU until measured otherwise).
_MEM_EFF = 0.92
# Kernel launch gap: pytorch/ao roofline_utils.py KERNEL_LAUNCH_OVERHEAD_SEC = 0.002 ms.
_LAUNCH_S = 2.0 * US
# A bandwidth-bound GEMM on the H100 (a few rows against a large weight matrix): the best
# CUTLASS sm90 kernels the profiler offers for 16/32/64 x 14336 x 4096 in FP8 move 2.2 TB/s,
# "~68% of memory b/w" by Nsight Compute, and hand-written ones peak "at ~70%" (NVIDIA/cutlass
# issue #1139, 2023-10, cutlass3x_sm90_tensorop_s64x128x32gemm_e4m3 ... warpspecialized_pingpong
# kernels); cuBLAS reaches ~40% on a smaller 2752 x 16 x 4096 FP16 product (issue #1176). So a
# bandwidth-bound GEMM is priced at 2.2 TB/s of the H100's 3.35, not at a streaming kernel's
# 0.92; Hopper and, until measured, Blackwell take the same fraction.
H100_SKINNY_GEMM_BYTES_PER_S = 2.2e12
_GEMM_MEM_EFF = H100_SKINNY_GEMM_BYTES_PER_S / (3350 * GBPS)
# The A100's, from a whole decode step: gpt-fast's Llama-2-7B in BF16 on an A100-80GB, batch 1,
# CUDA graphs (torch.compile mode="reduce-overhead"), 104.9 tokens/s (pytorch-labs/gpt-fast
# README, "Benchmarks", on an A100 "power limited to 330W"), is what llmsim's decode step gives
# with its GEMMs at this fraction (sim/derive/decode_gemm.py derives it; the README notes the
# 330-W part's streaming peak at "about 1700 GB/s", so a 400-W A100 may do better).
A100_GEMM_MEM_EFF = 0.733

# Dense peaks per format. TF32 (tensor cores) and FP32 (CUDA cores, FFMA) are the datasheets'
# (NVIDIA A100 datasheet: TF32 156, FP32 19.5; H100 SXM: TF32 494.7, FP32 67, glennklockwood.com
# /garden/processors/h100 and /garden/peak-FLOPS "66.9 TFLOPS FP32 using vector FMAs"; B200 HGX
# TF32 1,100 and FP32 80, GB200 TF32 1,250 and FP32 90, glennklockwood.com/garden/processors/B200;
# GB300 TF32 as GB200 [unverified], FP32 not found) for the record and the roofline: no TF32 or
# FP32 GEMM is measured, and nothing is simulated in them (sim.types.SIMULATED_DTYPES says why).
_A100_DTYPES = ((Dtype.BF16, 312 * TFLOPS), (Dtype.FP16, 312 * TFLOPS), (Dtype.TF32, 156 * TFLOPS),
                (Dtype.FP32, 19.5 * TFLOPS))
_HOPPER_DTYPES = ((Dtype.BF16, 989 * TFLOPS), (Dtype.FP16, 989 * TFLOPS), (Dtype.FP8, 1979 * TFLOPS),
                  (Dtype.TF32, 494.7 * TFLOPS), (Dtype.FP32, 67 * TFLOPS))
_HOPPER_GEMM = ((Dtype.BF16, _H100_GEMM), (Dtype.FP8, _H100_FP8_GEMM))


def _blackwell(bf16_tflops: float, fp4_tflops: float, tf32_tflops: float,
               fp32_tflops: float | None) -> tuple[tuple[Dtype, float], ...]:
    """A Blackwell GPU's dense peaks: FP8 and MXFP8 twice BF16 (FP32 left out where not
    published)."""
    fp8 = 2 * bf16_tflops
    fp32 = () if fp32_tflops is None else ((Dtype.FP32, fp32_tflops * TFLOPS),)
    return ((Dtype.BF16, bf16_tflops * TFLOPS), (Dtype.FP16, bf16_tflops * TFLOPS),
            (Dtype.FP8, fp8 * TFLOPS), (Dtype.MXFP8, fp8 * TFLOPS),
            (Dtype.NVFP4, fp4_tflops * TFLOPS), (Dtype.TF32, tf32_tflops * TFLOPS), *fp32)


# The kernel efficiencies Hopper GPUs share (attention measured on our H100, HBM from pytorch/ao).
# Blackwell has its own cuDNN attention curves (B200 and GB200 one, GB300 another) and borrows
# the rest until measured, as pytorch/ao's roofline tables do ("for now").
_HOPPER_KERNELS = dict(
    attention_efficiency=_H100_ATTN_FWD, attention_backward_efficiency=_H100_ATTN_BWD,
    deterministic_attention_backward_efficiency=_H100_ATTN_DET_BWD,
    flash2_attention_efficiency=_H100_FA2_FWD, flash2_attention_backward_efficiency=_H100_FA2_BWD,
    memory_efficiency=_MEM_EFF, gemm_memory_efficiency=_GEMM_MEM_EFF, kernel_launch_s=_LAUNCH_S)
# The H200's own curves (its deterministic backward slowed by the H100's measured factor: the
# same cuDNN kernel, not measured on the H200).
_H200_KERNELS = dict(
    _HOPPER_KERNELS, attention_efficiency=_H200_ATTN_FWD, attention_backward_efficiency=_H200_ATTN_BWD,
    deterministic_attention_backward_efficiency=_slowed(_H200_ATTN_BWD, _H100_DET_POINTS),
    flash2_attention_efficiency=_H200_FA2_FWD, flash2_attention_backward_efficiency=_H200_FA2_BWD)
# deterministic training on Blackwell: Transformer Engine's FlashAttention-2 (FA2_BLACKWELL_RATIO)
_BLACKWELL_DETERMINISTIC = dict(deterministic_attention_efficiency=_BLACKWELL_FA2_FWD,
                                deterministic_attention_backward_efficiency=_BLACKWELL_FA2_DET_BWD)
_BLACKWELL_KERNELS = dict(
    _HOPPER_KERNELS, attention_efficiency=_GB200_ATTN_FWD, attention_backward_efficiency=_GB200_ATTN_BWD,
    **_BLACKWELL_DETERMINISTIC)
_BLACKWELL_ULTRA_KERNELS = dict(
    _HOPPER_KERNELS, attention_efficiency=_GB300_ATTN_FWD, attention_backward_efficiency=_GB300_ATTN_BWD,
    **_BLACKWELL_DETERMINISTIC)


GRACE_HOST_TIME_FACTOR = 37.08 / 13.48
"""How much longer a Grace CPU takes than an x86 DGX host to issue the same kernels from
PyTorch: 2.75. NVIDIA/TransformerEngine issue #2053 ("High CPU overhead on Grace systems",
2025-08-11) timed one ``torch.nn.Linear`` forward (BF16, hidden 2,048, 8,192 tokens, averaged
over many runs) at 37.08 us of CPU time on GB200 against 13.48 us on an H100 DGX (Intel Xeon
Platinum 8480C); GH200's Grace took 33.17 us. The same report's Transformer Engine ``Linear``
took 99.66 us of CPU time on GB200 for 99.73 us of GPU time: the host, not the GPU, set the
pace. Applied to the host issue floors llmsim prices (:attr:`sim.workload.ops.GemmOp.issue_s`)
on the GPUs that come with Grace (:attr:`GPUSpec.host_cpu`)."""


MXFP8_GEMM_SLOWDOWN = 7.161 / 6.812
"""An MXFP8 GEMM's time over an FP8 (per-tensor scaled) GEMM's at the same shape on Blackwell,
the kernels alone: Transformer Engine's GEMM benchmark on a B300 with pre-quantized operands
(``benchmarks/gemm/benchmark_gemm.py --pre-quantize``), the 12 GEMMs of a 5B model's layer
(hidden 4096, FFN 16384, 15,872 tokens), 7.161 ms in MXFP8 against 6.812 ms in FP8 current
scaling (fprop 2.365 / 2.158, dgrad 2.397 / 2.329, wgrad 2.400 / 2.325; NVIDIA/TransformerEngine
``docs/examples/gemm_profiling/gemm_profiling.rst`` @ ``1609c890e``, PR #2863): the 1x32-block
scale factors the MXFP8 kernels load. 1.051, applied at every size to each Blackwell GPU's
FP8 curve; the casts around the GEMMs are priced apart (:mod:`sim.workload.quantization`)."""


B200_HBM_BANDWIDTH = 7.7 * TB
"""The B200's HBM3e bandwidth: 7.7 TB/s, the NVIDIA Blackwell datasheet's figure for the HGX
B200 (as ai-dynamo/aiconfigurator PR #1246 and pytorch/pytorch PR #194297's ``dram_bw_gbs=7700``
read it), not the 8 TB/s of the first announcements, which the GB200 keeps. A B200's driver
reports a 7,680-bit bus at a 3,996 MHz memory clock, 7.672 TB/s (pytorch/ao PR #4002, which
moved its roofline's B200 from 8.0e12 to that figure, 2026-03-05)."""


SHARED_SWEEP_FLOPS = _gemm_flops(8192, 8192, 1024)
"""The one FLOP count both Blackwell FP8 sweeps measured: B200's 8192 x 8192 x 1024 (its last,
largest point) and the square 4096^3 of the GB200 and GB300 sweeps, 1.37e11 FLOPs each."""


_B200_PEAKS = _blackwell(2250, 9000, 1100, 80)
_GB200_PEAKS = _blackwell(2500, 10000, 1250, 90)
_GB300_PEAKS = _blackwell(2500, 15000, 1250, None)


def bf16_from_b200(fp8: EfficiencyCurve, peaks: tuple[tuple[Dtype, float], ...]) -> EfficiencyCurve:
    """The 16-bit GEMM curve of a Blackwell GPU with no 16-bit sweep: B200's 16-bit rate at
    each size, times what this GPU's FP8 GEMMs reach over B200's at :data:`SHARED_SWEEP_FLOPS`,
    as a fraction of this GPU's 16-bit peak.

    GB200 is B200's die under a 1,200 W limit (1,000 W on HGX B200), and its datasheet peaks are
    11% higher (2.5 PF BF16 against 2.25); measured, its FP8 GEMMs are 2.3% faster than B200's
    at the shared size (2,834.6 TFLOP/s at 4096^3 on Azure's ND GB200 v6 against 2,770.0 at
    8192 x 8192 x 1024 on a B200; the sweeps above), so a higher limit buys its tensor cores
    2%, not the datasheet's 11%. The 16-bit and FP8 GEMMs of one Blackwell GPU run on the same
    tensor cores at the same clock, so this GPU's 16-bit rate is B200's times that measured FP8
    ratio: 0.921 of B200's 16-bit fractions on GB200, 1.058 on GB300 (3,257.0 at 4096^3,
    a B300 die at 1,400 W). The GB200 sweep ran CUDA 12.8 and the B200 and GB300 sweeps CUDA 13.0,
    so the GB200 ratio carries any difference between those cuBLAS releases too.

    ``peaks`` are the GPU's dense peaks (``_blackwell``), to which ``fp8``'s fractions refer.

    >>> c = bf16_from_b200(_B200_FP8_GEMM, _B200_PEAKS)
    >>> round(c(SHARED_SWEEP_FLOPS) / _B200_BF16_GEMM(SHARED_SWEEP_FLOPS), 6)
    1.0
    """
    own, b200 = dict(peaks), dict(_B200_PEAKS)
    fp8_ratio = fp8(SHARED_SWEEP_FLOPS) * own[Dtype.FP8] / (_B200_FP8_GEMM(SHARED_SWEEP_FLOPS) * b200[Dtype.FP8])
    return _B200_BF16_GEMM.scaled(b200[Dtype.BF16] / own[Dtype.BF16] * fp8_ratio)


def _blackwell_gemm(fp8: EfficiencyCurve, fp4: EfficiencyCurve,
                    bf16: EfficiencyCurve = _B200_BF16_GEMM) -> tuple[tuple[Dtype, EfficiencyCurve], ...]:
    """A Blackwell GPU's GEMM curves: its 16-bit curve (B200's sweep, or one derived from it by
    :func:`bf16_from_b200`), its own (or the nearest) FP8 and FP4."""
    return ((Dtype.BF16, bf16), (Dtype.FP8, fp8),
            (Dtype.MXFP8, _slowed(fp8, ((1.0, MXFP8_GEMM_SLOWDOWN),))), (Dtype.NVFP4, fp4))


# H100 SXM5 80GB under its 700 W limit, measured by this project: benchmarks/device/
# power_clock.py on one H100 80GB HBM3 (driver 580.159, torch 2.11), nvidia-smi sampled every
# 100 ms beside each kernel family run back to back for 3-4 s. Raw samples:
# benchmarks/device/results/h100-sxm5-80gb-2026-11-26-power.json; sim.derive.power (printed by
# benchmarks/device/power_derive.py) derives every number below from them and tests/unit/test_power.py checks the
# two agree. Idle with the clocks up 134.3 W; maximum clock 1980 MHz; gamma 2.22 (least squares
# over FP8 GEMMs on 32/66/99/132 SMs: below the limit at 1980 MHz, at it at 1636/1387/1241 MHz).
# Clocks held back to back at the limit: BF16 GEMMs 1364 MHz (median of six large-shape runs,
# 1339-1410), FP8 GEMMs 1293 (4096^3 and 8192^3), cuDNN attention forward 1684 and
# forward+backward 1543, FlashAttention-2 forward 1712 and forward+backward 1794 (2 x 32 heads
# x 8192, causal). Eight PyTorch bandwidth-bound kernels drew 499-566 W at 1980 MHz: median
# 390.1 W above idle.
# PyTorch's non-vectorized elementwise kernels on the same H100, same runs (``mem-*``: each back
# to back, bytes = inputs read once + output written once), as fractions of its 3.35 TB/s:
# a bf16 -> fp32 copy 1.954 TB/s, ``x * weight`` (bf16, weight along the last dim) 1.569,
# ``x * rstd`` (fp32, one value per row) 2.375, ``repeat_kv``'s expand-and-reshape 1.256; the
# vectorized add, fp32 -> bf16 copy, pow and mean reach 2.90-3.03, the 0.92 above. The H100 96GB
# (HBM2e) takes the same fractions of its own bandwidth (not measured).
_H100_MEMORY_ACCESS = ((MemoryAccess.UPCAST, 0.583), (MemoryAccess.BROADCAST_LAST, 0.468),
                       (MemoryAccess.BROADCAST_ROW, 0.709), (MemoryAccess.STRIDED, 0.375))
# The same kernels on our H200 (benchmarks/device/results/h200-2026-11-26-power.json), as fractions
# of its 4.8 TB/s: 2.134, 1.679, 2.744 and 1.261 TB/s (the vectorized ones 4.03-4.29).
_H200_MEMORY_ACCESS = ((MemoryAccess.UPCAST, 0.445), (MemoryAccess.BROADCAST_LAST, 0.350),
                       (MemoryAccess.BROADCAST_ROW, 0.572), (MemoryAccess.STRIDED, 0.263))

# Bandwidth-bound kernels on Blackwell: NVIDIA's cuDNN-frontend normalization benchmark ran
# RMSNorm at 10 training shapes (Llama 3 8B to 405B, Mixtral, Qwen3, DeepSeek-V3; N x C >= 2^24,
# bfloat16) through cuDNN's fused kernels, PyTorch and torch.compile on H200, GB200 and GB300
# in one harness (NVIDIA/cudnn-frontend benchmark/norms/results/{h200,gb200,gb300}/
# all_models_*.csv @ df73764). Their achieved bandwidth grows less than HBM's 8 / 4.8: the
# medians of the per-shape ratios, GB200 over H200, are 1.591 forward and 1.395 backward for
# cuDNN's fused kernels and 1.536 and 1.327 for PyTorch's over its 8 shapes that ran (the two
# 128-wide ones did not) (GB300: 1.585, 1.419; 1.566, 1.363).
# As for attention (above), Blackwell takes the H100/H200 fractions times the published ratio
# of achieved fractions, Blackwell over H200, the mean of forward and backward: fused kernels
# (Transformer Engine's, ``memory_efficiency``) 0.896 of them on GB200 and 0.901 on GB300,
# PyTorch's non-vectorized eager kernels (the H200's own access fractions) 0.859 and 0.879.
# B200 (GB200's die) takes GB200's ratios.
_HBM_RATIO_BLACKWELL_H200 = 8.0 / 4.8
_NORM_RATES_OVER_H200 = {  # GPU: ((cuDNN forward, backward), (PyTorch forward, backward)) medians
    "GB200": ((1.591, 1.395), (1.536, 1.327)),
    "GB300": ((1.585, 1.419), (1.566, 1.363)),
}


def _blackwell_memory(gpu: str) -> dict:
    """``memory_efficiency`` and ``memory_access_efficiency`` of a Blackwell GPU: the H100/H200
    fractions times the cuDNN-frontend norms benchmark's ratio of achieved fractions, ``gpu``
    over H200 (:data:`_NORM_RATES_OVER_H200`)."""
    fused, eager = (sum(pair) / 2 / _HBM_RATIO_BLACKWELL_H200 for pair in _NORM_RATES_OVER_H200[gpu])
    return dict(memory_efficiency=_MEM_EFF * fused,
                memory_access_efficiency=tuple((a, e * eager) for a, e in _H200_MEMORY_ACCESS))


_GB200_MEMORY = _blackwell_memory("GB200")
_GB300_MEMORY = _blackwell_memory("GB300")


def _h200_power(limit_w: float) -> PowerSpec:
    """Our H200's power behaviour (benchmarks/device/power_clock.py on it, raw samples in
    results/h200-2026-11-26-power.json, constants from sim.derive.power and checked by
    tests/unit/test_power.py): HBM3e's bandwidth-bound kernels draw more (509.8 W above idle
    against 390.1), its dynamic power is steeper in the clock (2.50 against 2.22), and each
    family holds a higher clock back to back."""
    return PowerSpec(limit_w=limit_w, measured_limit_w=700.0, idle_w=125.5, max_clock_hz=1980e6,
                     dvfs_exponent=2.50, gemm_clock_hz=(("bf16", 1461e6), ("fp8", 1388e6)),
                     attention_clock_hz=1686e6, attention_backward_clock_hz=1675e6,
                     flash2_clock_hz=1874e6, flash2_backward_clock_hz=1944e6, memory_activity_w=509.8)


def _h100_power(limit_w: float) -> PowerSpec:
    return PowerSpec(limit_w=limit_w, measured_limit_w=700.0, idle_w=134.3, max_clock_hz=1980e6,
                     dvfs_exponent=2.22, gemm_clock_hz=(("bf16", 1364e6), ("fp8", 1293e6)),
                     attention_clock_hz=1684e6, attention_backward_clock_hz=1543e6,
                     flash2_clock_hz=1712e6, flash2_backward_clock_hz=1794e6, memory_activity_w=390.1)


# HBM capacity is the total the NVIDIA driver reports for the GPU (nvidia-smi's memory total, in
# MiB), the memory CUDA's allocator draws from: A100 80GB 81,920 MiB, H100 SXM5 80GB 81,559,
# H200 143,771, B200 183,359, GB200 189,471, GB300 284,208 (nvidia-smi's table on these GPUs as
# pasted in public logs and issue threads). NVIDIA's headline figures for the newer parts are
# nearer these totals in GiB than in 10^9 bytes: "141 GB" is 140.4 GiB (150.8e9 bytes), "180 GB"
# 179.1 GiB, "186 GB" 185.0 GiB, "288 GB" 277.5 GiB. Read as 10^9 bytes they would be 6.4% short,
# enough to make a configuration that fits read as not fitting (sim/config/fit.py).
_GPUS = (
    GPUSpec(
        name="A100-SXM4-80GB",
        generation=GpuGeneration.AMPERE,
        peak_flops_per_s=_A100_DTYPES,
        hbm_capacity_bytes=80 * GiB,
        hbm_bandwidth_bytes_per_s=2039 * GBPS,
        nvlink_bandwidth_bytes_per_s=300 * GBPS,
        gemm_efficiency=((Dtype.BF16, _A100_GEMM),),
        # FlashAttention-2 on A100, fwd+bwd, head dim 64: 179.5 TFLOP/s of 312 (Azure
        # AI-benchmarking-guide FA2 microbenchmark); FA2 paper: "50-73%" (arXiv 2307.08691).
        attention_efficiency=EfficiencyCurve.constant(179.5 / 312),
        attention_backward_efficiency=EfficiencyCurve.constant(179.5 / 312),
        memory_efficiency=_MEM_EFF,
        gemm_memory_efficiency=A100_GEMM_MEM_EFF,
        kernel_launch_s=_LAUNCH_S,
        sm_count=108,
        # deterministic training: Transformer Engine runs FlashAttention-2's deterministic
        # backward on sm80 (FA2_DETERMINISTIC_BWD_RATIO above)
        deterministic_attention_backward_efficiency=EfficiencyCurve.constant(
            179.5 / 312 * FA2_DETERMINISTIC_BWD_RATIO),
        sources="NVIDIA A100 datasheet (312 TF BF16 dense, 80 GB HBM2e at 2,039 GB/s, NVLink3 "
        "600 GB/s bidirectional); 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper); "
        "cuBLASLt and FA2 sweeps from Azure/AI-benchmarking-guide",
    ),
    GPUSpec(
        name="H100-SXM5-80GB",
        generation=GpuGeneration.HOPPER,
        peak_flops_per_s=_HOPPER_DTYPES,
        hbm_capacity_bytes=81559 * MiB,  # the driver's total (above)
        hbm_bandwidth_bytes_per_s=3350 * GBPS,
        nvlink_bandwidth_bytes_per_s=450 * GBPS,
        gemm_efficiency=_HOPPER_GEMM,
        **_HOPPER_KERNELS,
        sm_count=132,
        power=_h100_power(700.0),
        memory_access_efficiency=_H100_MEMORY_ACCESS,
        sources="glennklockwood.com/garden/processors/h100 (989 TF BF16 dense, 1979 FP8, 3.35 TB/s, "
        "NVLink4 900 GB/s bidirectional); 132 SMs (NVIDIA H100 Tensor Core GPU Architecture "
        "whitepaper, SXM5); pytorch/ao roofline_utils",
    ),
    GPUSpec(
        name="H100-SXM5-96GB-HBM2e",
        generation=GpuGeneration.HOPPER,
        peak_flops_per_s=_HOPPER_DTYPES,
        hbm_capacity_bytes=96 * GB,
        hbm_bandwidth_bytes_per_s=2400 * GBPS,
        nvlink_bandwidth_bytes_per_s=450 * GBPS,
        gemm_efficiency=_HOPPER_GEMM,
        **_HOPPER_KERNELS,
        sm_count=132,
        power=_h100_power(500.0),
        memory_access_efficiency=_H100_MEMORY_ACCESS,
        sources="Meta Grand Teton H100 variant: 96 GB HBM2e at 2.4 TB/s, 500 W cap (validation README; "
        "pytorch/ao roofline_utils 'Meta's H100 variant has 2.4 TB/s'); compute as H100 SXM "
        "(torchtitan reports MFU against 989 TF), 132 SMs",
    ),
    GPUSpec(
        name="H200",
        generation=GpuGeneration.HOPPER,
        peak_flops_per_s=_HOPPER_DTYPES,
        hbm_capacity_bytes=143771 * MiB,  # the driver's total (above)
        hbm_bandwidth_bytes_per_s=4800 * GBPS,
        nvlink_bandwidth_bytes_per_s=450 * GBPS,
        gemm_efficiency=((Dtype.BF16, _H200_GEMM), (Dtype.FP8, _H200_FP8_GEMM)),
        **_H200_KERNELS,
        sm_count=132,
        power=_h200_power(700.0),
        memory_access_efficiency=_H200_MEMORY_ACCESS,
        sources="MLPerf Inference v4.1 system JSON (141 GB, 18x NVLink4 900 GB/s); pytorch/ao spec table "
        "(H200 = H100 compute, 132 SMs); 4.8 TB/s from the NVIDIA H200 page (our H200 moved 4.28 TB/s "
        "in a vectorized add)",
    ),
    GPUSpec(
        name="B200",
        generation=GpuGeneration.BLACKWELL,
        peak_flops_per_s=_B200_PEAKS,
        hbm_capacity_bytes=183359 * MiB,  # the driver's total (above)
        hbm_bandwidth_bytes_per_s=B200_HBM_BANDWIDTH,
        nvlink_bandwidth_bytes_per_s=900 * GBPS,
        gemm_efficiency=_blackwell_gemm(_B200_FP8_GEMM, _GB200_FP4_GEMM),
        **dict(_BLACKWELL_KERNELS, **_GB200_MEMORY),
        sm_count=148,
        sources="glennklockwood.com/garden/processors/B200 (HGX 1000 W); pytorch/ao roofline_utils "
        "(2.25e15 BF16, 4.5e15 FP8, 9.0e15 FP4); 7.7 TB/s HBM3e (B200_HBM_BANDWIDTH); "
        "DGX B200: 180 GB per GPU (the driver reports 183,359 MiB); "
        "cuBLASLt BF16/FP8 k-sweep from tmoreau89/triton triton_cublas_bench (FP4 as GB200); "
        "148 SMs, 74 per die (chipsandcheese.com, 'Nvidia's B200: Keeping the CUDA Juggernaut Rolling'); "
        "cuDNN attention as GB200 (NVIDIA/cudnn-frontend SDPA benchmark)",
    ),
    GPUSpec(
        name="GB200",
        generation=GpuGeneration.BLACKWELL,
        host_cpu=HostCpu.GRACE,  # the superchip's own Grace issues its kernels
        peak_flops_per_s=_GB200_PEAKS,
        hbm_capacity_bytes=189471 * MiB,  # the driver's total (above)
        hbm_bandwidth_bytes_per_s=8 * TB,
        nvlink_bandwidth_bytes_per_s=900 * GBPS,
        gemm_efficiency=_blackwell_gemm(_GB200_FP8_GEMM, _GB200_FP4_GEMM,
                                        bf16_from_b200(_GB200_FP8_GEMM, _GB200_PEAKS)),
        **dict(_BLACKWELL_KERNELS, **_GB200_MEMORY),
        sm_count=148,
        sources="glennklockwood.com/garden/processors/B200 (GB200 1200 W table: 2.5 PF BF16 dense, "
        "~186 GB HBM3e at 8 TB/s, NVLink5 1.8 TB/s bidirectional); cuBLASLt FP8/FP4 sweeps from "
        "Azure/AI-benchmarking-guide ND GB200 v6 (BF16: B200's rate times the FP8 ratio, bf16_from_b200); "
        "cuDNN 9.19 attention from the "
        "NVIDIA/cudnn-frontend SDPA benchmark (relative to its H200 run); 148 SMs as B200 [unverified]",
    ),
    GPUSpec(
        name="GB300",
        generation=GpuGeneration.BLACKWELL,
        host_cpu=HostCpu.GRACE,  # the superchip's own Grace issues its kernels
        peak_flops_per_s=_GB300_PEAKS,
        hbm_capacity_bytes=284208 * MiB,  # the driver's total (above)
        hbm_bandwidth_bytes_per_s=8 * TB,
        nvlink_bandwidth_bytes_per_s=900 * GBPS,
        gemm_efficiency=_blackwell_gemm(_GB300_FP8_GEMM, _GB300_FP4_GEMM,
                                        bf16_from_b200(_GB300_FP8_GEMM, _GB300_PEAKS)),
        **dict(_BLACKWELL_ULTRA_KERNELS, **_GB300_MEMORY),
        sm_count=160,
        sources="NVIDIA Blackwell Ultra announcements: 288 GB HBM3e (the driver reports 284,208 MiB), 8 TB/s, "
        "15 PF dense NVFP4, BF16 as GB200, NVLink5 1.8 TB/s bidirectional, 160 SMs [unverified]; cuBLASLt "
        "FP8/FP4 sweeps from the Azure AI-benchmarking-guide ND GB300 v6 results (BF16 GEMM: B200's rate times the "
        "FP8 ratio, bf16_from_b200); "
        "cuDNN 9.19 attention from the NVIDIA/cudnn-frontend SDPA benchmark (relative to its H200 run)",
    ),
)

# A100 40GB: the same GA100 die, clocks, tensor cores and NVLink as the 80GB part, with 40 GB of
# HBM2 at 1,555 GB/s (NVIDIA A100 datasheet, "A100 40GB SXM"). Its kernels run at the 80GB
# part's fractions of peak: the A100 GEMM and FlashAttention-2 curves above were measured on
# Azure ND A100 v4, whose GPUs are A100 40GB ("8 NVIDIA Ampere A100 40GB Tensor Core GPUs",
# Azure ND A100 v4-series documentation), and the bandwidth-bound fractions are fractions of
# each part's own peak.
_A100_80 = next(g for g in _GPUS if g.name == "A100-SXM4-80GB")
_GPUS = _GPUS + (dataclasses.replace(
    _A100_80, name="A100-SXM4-40GB", hbm_capacity_bytes=40 * GiB, hbm_bandwidth_bytes_per_s=1555 * GBPS,
    sources="NVIDIA A100 datasheet (A100 40GB SXM: 312 TF BF16 dense, 40 GB HBM2 at 1,555 GB/s, NVLink3 "
    "600 GB/s bidirectional); kernel fractions of the A100-SXM4-80GB entry (cuBLASLt and FA2 sweeps "
    "from Azure/AI-benchmarking-guide on ND A100 v4, A100 40GB)"),)

# H800 and A800: the export variants of the H100 SXM5 and the A100 SXM4 80GB, the same die,
# compute, memory and power as their parents with NVLink cut to 400 GB/s bidirectional (200 GB/s
# per direction). H800 SXM5: the same GH100 die, compute, HBM3 (80 GB, 3.35 TB/s) and power as
# the H100 SXM5, NVLink 400 GB/s down from the H100's 900 (Zhao et al., "Insights into
# DeepSeek-V3: Scaling Challenges and Reflections on Hardware for AI Architectures", arXiv
# 2505.09343: H800 has reduced FP64 and NVLink bandwidth; each node 8 x 400 Gb/s InfiniBand CX7
# NICs).
# A800 SXM4 80GB: the same GA100 die, compute, HBM2e (80 GB, 2,039 GB/s) and 400 W as the A100
# SXM4 80GB, NVLink 400 GB/s instead of 600 (Reuters via Tweakers.net, 2022-11-07, "Nvidia
# introduceert A800-gpu voor China"). Their kernels run at their parents' measured fractions.
_H100_80 = next(g for g in _GPUS if g.name == "H100-SXM5-80GB")
_GPUS = _GPUS + (dataclasses.replace(
    _H100_80, name="H800-SXM5-80GB", nvlink_bandwidth_bytes_per_s=200 * GBPS,
    sources="Zhao et al., 'Insights into DeepSeek-V3: Scaling Challenges and Reflections on Hardware "
    "for AI Architectures', arXiv 2505.09343 (H800: reduced FP64 and NVLink bandwidth, NVLink 400 GB/s "
    "bidirectional down from 900 GB/s); otherwise as H100-SXM5-80GB (GH100, 989 TF BF16 dense, 80 GB "
    "HBM3 at 3.35 TB/s, 700 W, 132 SMs) and its kernel fractions"), dataclasses.replace(
    _A100_80, name="A800-SXM4-80GB", nvlink_bandwidth_bytes_per_s=200 * GBPS,
    sources="Reuters via Tweakers.net, 2022-11-07, 'Nvidia introduceert A800-gpu voor China' (NVLink "
    "400 GB/s bidirectional instead of 600; otherwise as A100); compute, 80 GB HBM2e at 2,039 GB/s, "
    "400 W and kernel fractions of the A100-SXM4-80GB entry"),)

GPU_CATALOGUE: dict[str, GPUSpec] = {g.name: g for g in _GPUS}
"""Name -> GPU. Treat as read-only."""

_ALIASES = {"a100": "A100-SXM4-80GB", "h100": "H100-SXM5-80GB", "a100sxm": "A100-SXM4-80GB",
            "a10080gb": "A100-SXM4-80GB", "a100sxm80gb": "A100-SXM4-80GB", "a10040gb": "A100-SXM4-40GB",
            "a100sxm40gb": "A100-SXM4-40GB", "h100sxm": "H100-SXM5-80GB", "h10080gb": "H100-SXM5-80GB",
            "h100sxm80gb": "H100-SXM5-80GB", "h800": "H800-SXM5-80GB", "h800sxm": "H800-SXM5-80GB",
            "h80080gb": "H800-SXM5-80GB", "h800sxm80gb": "H800-SXM5-80GB", "a800": "A800-SXM4-80GB",
            "a800sxm": "A800-SXM4-80GB", "a80080gb": "A800-SXM4-80GB", "a800sxm80gb": "A800-SXM4-80GB"}
"""Other names of catalogue GPUs, in :func:`~sim.types.compact_name` form: the short ``A100``,
``H100``, ``A800`` and ``H800``, and the SXM part and memory size without the form factor's
generation (``H100 SXM``, ``A100-80GB``)."""
_NAMES = {**{compact_name(n): n for n in GPU_CATALOGUE}, **_ALIASES}
"""Every name :func:`get_gpu` reads, in :func:`~sim.types.compact_name` form -> catalogue name."""


def gpu_names() -> list[str]:
    """The catalogue's GPU names, sorted."""
    return sorted(GPU_CATALOGUE)


def power_limited(gpu: GPUSpec, limit_w: float) -> GPUSpec:
    """``gpu`` under a board power cap of ``limit_w`` (as ``nvidia-smi -pl`` sets it).

    Raises
    ------
    ValueError
        With what a cap needs, if ``gpu``'s power behaviour is not measured or ``limit_w`` is
        not above its idle draw and at most twice the limit it was measured at.
    """
    if gpu.power is None:
        measured = ", ".join(n for n in gpu_names() if GPU_CATALOGUE[n].power is not None)
        raise ValueError(f"a GPU whose power behaviour is measured ({measured})")
    p = gpu.power
    if not p.idle_w < limit_w <= 2 * p.measured_limit_w:
        raise ValueError(f"watts above the GPU's idle draw ({p.idle_w:g} W) and at most {2 * p.measured_limit_w:g}")
    return dataclasses.replace(gpu, power=dataclasses.replace(p, limit_w=float(limit_w)))


def get_gpu(name: str) -> GPUSpec:
    """Look a GPU up by its canonical name (or the short aliases ``A100``, ``H100``, ``A800``,
    ``H800``).

    Raises
    ------
    KeyError
        With the list of known names.

    The name is also read in any case and with or without spaces, hyphens and underscores
    (``h100 sxm5 80gb``), and as the SXM part and memory size name it (``H100 SXM``,
    ``A100-40GB``).

    >>> get_gpu("A100").hbm_capacity_bytes / 2**30
    80.0
    >>> get_gpu("h100 sxm5 80gb").name, get_gpu("A100-40GB").name
    ('H100-SXM5-80GB', 'A100-SXM4-40GB')
    """
    key = _NAMES.get(compact_name(name)) if isinstance(name, str) else None
    if key is None:
        raise KeyError(f"unknown GPU {name!r}; known: {gpu_names()}")
    return GPU_CATALOGUE[key]
