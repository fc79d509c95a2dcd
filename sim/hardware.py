"""GPUs: peak rates, memory and the achievable fractions measured on them.

Every number is a property of the GPU and cites where it comes from; the facts are collected
with their sources in the project's hardware notes (NVIDIA datasheets, cuBLASLt GEMM sweeps,
the FlashAttention papers, nccl-tests). Nothing here is keyed to a model or a published case.

The catalogue is immutable: :func:`get_gpu` returns a frozen :class:`GPUSpec`, and what-if
studies build modified copies with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from sim.errors import InfeasibleError
from sim.types import Dtype
from sim.units import GB, GBPS, GiB, TB, TFLOPS, US

__all__ = ["EfficiencyCurve", "GPUSpec", "GPU_CATALOGUE", "get_gpu", "gpu_names"]


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
    def constant(cls, efficiency: float) -> "EfficiencyCurve":
        """A curve that is ``efficiency`` at every size."""
        return cls(((1.0, efficiency),))

    def __call__(self, size: float) -> float:
        xs, pts = self._xs, self.points
        if size <= xs[0]:
            return pts[0][1]
        if size >= xs[-1]:
            return pts[-1][1]
        i = bisect.bisect_right(xs, size)
        (x0, e0), (x1, e1) = pts[i - 1], pts[i]
        w = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
        return e0 + w * (e1 - e0)


def _cube_flops(n: int) -> float:
    """FLOPs of an n x n x n GEMM (2 n^3), the x-axis of a square cuBLAS sweep."""
    return 2.0 * n**3


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
    attention_efficiency : float
        Achieved fraction of the 16-bit peak in fused (flash) attention, forward and backward.
    memory_efficiency : float
        Achieved fraction of HBM bandwidth by streaming kernels.
    kernel_launch_s : float
        Gap a kernel adds on the GPU between back-to-back launches.
    sources : str
        Where the numbers come from.
    """

    name: str
    peak_flops_per_s: tuple[tuple[Dtype, float], ...]
    hbm_capacity_bytes: float
    hbm_bandwidth_bytes_per_s: float
    nvlink_bandwidth_bytes_per_s: float
    gemm_efficiency: tuple[tuple[Dtype, EfficiencyCurve], ...]
    attention_efficiency: float
    memory_efficiency: float
    kernel_launch_s: float
    sources: str = ""

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

# H100 SXM BF16: plateau 0.69 from pytorch/ao torchao/testing/training/roofline_utils.py
# (pct_achievable_gemm_tops_bf16, "experimental observation with sample large inputs"); the
# fall-off with size follows the H100 FP8 cuBLASLt sweep (Azure ND_H100_v5_results.md:
# 4096^3 1216.9, 8192^3 1290.1, 16384^3 1377.3 TFLOP/s), scaled to that plateau; below 4096^3
# the A100 sweep's relative shape is used (no H100 sweep published there).
_H100_BF16_PLATEAU = 0.69
_H100_FP8_REL = (1216.9 / 1377.3, 1290.1 / 1377.3, 1.0)
_H100_GEMM = EfficiencyCurve(
    (
        (_cube_flops(1024), _H100_BF16_PLATEAU * (119.4 / 256.5)),
        (_cube_flops(2048), _H100_BF16_PLATEAU * (221.8 / 256.5)),
        (_cube_flops(4096), _H100_BF16_PLATEAU * _H100_FP8_REL[0]),
        (_cube_flops(8192), _H100_BF16_PLATEAU * _H100_FP8_REL[1]),
        (_cube_flops(16384), _H100_BF16_PLATEAU * _H100_FP8_REL[2]),
    )
)
# H100 FP8 cuBLASLt (Azure ND_H100_v5_results.md): 1216.9 / 1290.1 / 1377.3 / 1382.2 of 1979.
_H100_FP8_GEMM = EfficiencyCurve(
    (
        (_cube_flops(4096), 1216.9 / 1979),
        (_cube_flops(8192), 1290.1 / 1979),
        (_cube_flops(16384), 1377.3 / 1979),
        (_cube_flops(32768), 1382.2 / 1979),
    )
)
# GB200 FP8 peaks at 2906.9 TFLOP/s of 5000 and FP4 at 7627.6 of 10000
# (Azure ND_GB200_v6_results.md @2a370be); 16-bit follows pytorch/ao, which copies the H100
# fractions for B200 "for now".
_BLACKWELL_FP8_GEMM = EfficiencyCurve(((_cube_flops(16384), 2906.9 / 5000),))
_BLACKWELL_FP4_GEMM = EfficiencyCurve(((_cube_flops(16384), 7627.6 / 10000),))

# Achieved HBM bandwidth of streaming kernels: pytorch/ao roofline_utils.py
# pct_achievable_mem_bw = 0.92 (H100; used for every GPU until measured otherwise).
_MEM_EFF = 0.92
# Kernel launch gap: pytorch/ao roofline_utils.py KERNEL_LAUNCH_OVERHEAD_SEC = 0.002 ms.
_LAUNCH_S = 2.0 * US

_A100_DTYPES = ((Dtype.BF16, 312 * TFLOPS), (Dtype.FP16, 312 * TFLOPS), (Dtype.TF32, 156 * TFLOPS),
                (Dtype.FP32, 19.5 * TFLOPS))
_HOPPER_DTYPES = ((Dtype.BF16, 989 * TFLOPS), (Dtype.FP16, 989 * TFLOPS), (Dtype.FP8, 1979 * TFLOPS),
                  (Dtype.TF32, 494.7 * TFLOPS), (Dtype.FP32, 67 * TFLOPS))
_HOPPER_GEMM = ((Dtype.BF16, _H100_GEMM), (Dtype.FP8, _H100_FP8_GEMM))


def _blackwell(bf16_tflops: float, fp4_tflops: float) -> tuple[tuple[Dtype, float], ...]:
    fp8 = 2 * bf16_tflops
    return ((Dtype.BF16, bf16_tflops * TFLOPS), (Dtype.FP16, bf16_tflops * TFLOPS),
            (Dtype.FP8, fp8 * TFLOPS), (Dtype.MXFP8, fp8 * TFLOPS),
            (Dtype.NVFP4, fp4_tflops * TFLOPS), (Dtype.TF32, bf16_tflops / 2 * TFLOPS))


_BLACKWELL_GEMM = ((Dtype.BF16, _H100_GEMM), (Dtype.FP8, _BLACKWELL_FP8_GEMM),
                   (Dtype.MXFP8, _BLACKWELL_FP8_GEMM), (Dtype.NVFP4, _BLACKWELL_FP4_GEMM))

_GPUS = (
    GPUSpec(
        name="A100-SXM4-80GB",
        peak_flops_per_s=_A100_DTYPES,
        hbm_capacity_bytes=80 * GiB,
        hbm_bandwidth_bytes_per_s=2039 * GBPS,
        nvlink_bandwidth_bytes_per_s=300 * GBPS,
        gemm_efficiency=((Dtype.BF16, _A100_GEMM),),
        # FlashAttention-2 on A100, fwd+bwd, head dim 64: 179.5 TFLOP/s of 312 (Azure
        # AI-benchmarking-guide FA2 microbenchmark); FA2 paper: "50-73%" (arXiv 2307.08691).
        attention_efficiency=179.5 / 312,
        memory_efficiency=_MEM_EFF,
        kernel_launch_s=_LAUNCH_S,
        sources="NVIDIA A100 datasheet (312 TF BF16 dense, 80 GB HBM2e at 2,039 GB/s, NVLink3 "
        "600 GB/s bidirectional); cuBLASLt and FA2 sweeps from Azure/AI-benchmarking-guide",
    ),
    GPUSpec(
        name="H100-SXM5-80GB",
        peak_flops_per_s=_HOPPER_DTYPES,
        hbm_capacity_bytes=80 * GiB,
        hbm_bandwidth_bytes_per_s=3350 * GBPS,
        nvlink_bandwidth_bytes_per_s=450 * GBPS,
        gemm_efficiency=_HOPPER_GEMM,
        # FlashAttention-3 (arXiv 2407.08608): forward up to 75% of peak in BF16; the backward
        # is 1.5-1.75x FA2's ~35%, so ~0.55 for fwd+bwd together.
        attention_efficiency=0.55,
        memory_efficiency=_MEM_EFF,
        kernel_launch_s=_LAUNCH_S,
        sources="glennklockwood.com/garden/processors/h100 (989 TF BF16 dense, 1979 FP8, 3.35 TB/s, "
        "NVLink4 900 GB/s bidirectional); pytorch/ao roofline_utils",
    ),
    GPUSpec(
        name="H100-SXM5-96GB-HBM2e",
        peak_flops_per_s=_HOPPER_DTYPES,
        hbm_capacity_bytes=96 * GB,
        hbm_bandwidth_bytes_per_s=2400 * GBPS,
        nvlink_bandwidth_bytes_per_s=450 * GBPS,
        gemm_efficiency=_HOPPER_GEMM,
        attention_efficiency=0.55,
        memory_efficiency=_MEM_EFF,
        kernel_launch_s=_LAUNCH_S,
        sources="Meta Grand Teton H100 variant: 96 GB HBM2e at 2.4 TB/s, 500 W cap (validation README; "
        "pytorch/ao roofline_utils 'Meta's H100 variant has 2.4 TB/s'); compute as H100 SXM "
        "(torchtitan reports MFU against 989 TF)",
    ),
    GPUSpec(
        name="H200",
        peak_flops_per_s=_HOPPER_DTYPES,
        hbm_capacity_bytes=141 * GB,
        hbm_bandwidth_bytes_per_s=4800 * GBPS,
        nvlink_bandwidth_bytes_per_s=450 * GBPS,
        gemm_efficiency=_HOPPER_GEMM,
        attention_efficiency=0.55,
        memory_efficiency=_MEM_EFF,
        kernel_launch_s=_LAUNCH_S,
        sources="MLPerf Inference v4.1 system JSON (141 GB, 18x NVLink4 900 GB/s); pytorch/ao spec table "
        "(H200 = H100 compute); 4.8 TB/s from the NVIDIA H200 page [unverified]",
    ),
    GPUSpec(
        name="B200",
        peak_flops_per_s=_blackwell(2250, 9000),
        hbm_capacity_bytes=180 * GB,
        hbm_bandwidth_bytes_per_s=8 * TB,
        nvlink_bandwidth_bytes_per_s=900 * GBPS,
        gemm_efficiency=_BLACKWELL_GEMM,
        attention_efficiency=0.55,
        memory_efficiency=_MEM_EFF,
        kernel_launch_s=_LAUNCH_S,
        sources="glennklockwood.com/garden/processors/B200 (HGX 1000 W); pytorch/ao roofline_utils "
        "(2.25e15 BF16, 4.5e15 FP8, 9.0e15 FP4, 8.0e12 B/s); DGX B200: 180 GB visible per GPU",
    ),
    GPUSpec(
        name="GB200",
        peak_flops_per_s=_blackwell(2500, 10000),
        hbm_capacity_bytes=186 * GB,
        hbm_bandwidth_bytes_per_s=8 * TB,
        nvlink_bandwidth_bytes_per_s=900 * GBPS,
        gemm_efficiency=_BLACKWELL_GEMM,
        attention_efficiency=0.55,
        memory_efficiency=_MEM_EFF,
        kernel_launch_s=_LAUNCH_S,
        sources="glennklockwood.com/garden/processors/B200 (GB200 1200 W table: 2.5 PF BF16 dense, "
        "~186 GB HBM3e at 8 TB/s, NVLink5 1.8 TB/s bidirectional)",
    ),
    GPUSpec(
        name="GB300",
        peak_flops_per_s=_blackwell(2500, 15000),
        hbm_capacity_bytes=279 * GB,
        hbm_bandwidth_bytes_per_s=8 * TB,
        nvlink_bandwidth_bytes_per_s=900 * GBPS,
        gemm_efficiency=_BLACKWELL_GEMM,
        attention_efficiency=0.55,
        memory_efficiency=_MEM_EFF,
        kernel_launch_s=_LAUNCH_S,
        sources="NVIDIA Blackwell Ultra announcements: 288 GB HBM3e (279 GB usable), 8 TB/s, "
        "15 PF dense NVFP4, BF16 as GB200, NVLink5 1.8 TB/s bidirectional [unverified]",
    ),
)

GPU_CATALOGUE: dict[str, GPUSpec] = {g.name: g for g in _GPUS}
"""Name -> GPU. Treat as read-only."""

_ALIASES = {"A100": "A100-SXM4-80GB", "H100": "H100-SXM5-80GB"}


def gpu_names() -> list[str]:
    """The catalogue's GPU names, sorted."""
    return sorted(GPU_CATALOGUE)


def get_gpu(name: str) -> GPUSpec:
    """Look a GPU up by its canonical name (or the short aliases ``A100``, ``H100``).

    Raises
    ------
    KeyError
        With the list of known names.

    >>> get_gpu("A100").hbm_capacity_bytes / 2**30
    80.0
    """
    key = _ALIASES.get(name, name)
    try:
        return GPU_CATALOGUE[key]
    except KeyError:
        raise KeyError(f"unknown GPU {name!r}; known: {gpu_names()}") from None
