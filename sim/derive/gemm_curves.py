"""GEMM and attention efficiency points from the device kernel timings.

The timings are what ``benchmarks/device/kernels.py`` measured (committed under
``benchmarks/device/results/``: ``h100-sxm5-80gb-2026-11-26.json`` on our H100,
``h200-2026-11-27-kernels.json`` on our H200). Each point is the median achieved fraction of
the dense peak per power-of-two bin of FLOPs, the launch gap removed. ``sim/hardware.py``
carries those points for Hopper; ``tests/unit/test_hardware.py`` re-derives them from the
committed JSON, so the constants cannot drift from the measurement.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from sim.workload.ops import AttentionOp

__all__ = ["LAUNCH_S", "PEAK", "achieved_efficiency", "attention_flops", "binned", "derive_curves"]

LAUNCH_S = 2e-6
"""The launch gap taken off every measured kernel time."""
PEAK = {"bf16": 989e12, "fp8": 1979e12}
"""The dense BF16 and FP8 peaks (FLOP/s) the efficiencies are fractions of (H100 SXM5 and H200)."""


def attention_flops(r: dict, backward: bool) -> float:
    """FLOPs of a measured attention kernel (a row of the ``attention`` list) as llmsim counts them."""
    return AttentionOp(r["batch"], r["heads"], r["kv_heads"], r["seq"], r["head_dim"], r["causal"], backward).flops


def achieved_efficiency(flops: float, time_s: float, peak_flops_per_s: float, launch_s: float = LAUNCH_S) -> float:
    """The fraction of ``peak_flops_per_s`` a kernel of ``flops`` reached in ``time_s``, the
    launch gap ``launch_s`` taken off: ``flops / ((time_s - launch_s) x peak)``, the inverse of
    the compute term of :func:`sim.costs.compute.gemm_time_s`."""
    return flops / ((time_s - launch_s) * peak_flops_per_s)


def binned(pairs: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """``(FLOPs, efficiency)`` pairs as the median efficiency per power-of-two bin of FLOPs,
    rounded to three decimals."""
    bins: dict[int, list[float]] = defaultdict(list)
    for flops, eff in pairs:
        bins[round(math.log2(flops))].append(eff)
    return [(2.0 ** b, round(statistics.median(v), 3)) for b, v in sorted(bins.items())]


def derive_curves(path: str | Path) -> dict[str, list[tuple[float, float]]]:
    """Efficiency points (FLOPs, fraction of the dense BF16/FP8 peak) from the measurement at ``path``.

    Keys: ``gemm_bf16``, ``gemm_fp8``, ``attention_fwd``, ``attention_bwd`` (cuDNN) and
    ``attention_flash2_fwd``, ``attention_flash2_bwd`` (FlashAttention 2).
    """
    d = json.loads(Path(path).read_text())
    out = {}
    for dt, peak in PEAK.items():
        out[f"gemm_{dt}"] = binned(
            (f, achieved_efficiency(f, r["median_s"], peak))
            for r in d["gemms"] if r["dtype"] == dt and "median_s" in r
            for f in [2.0 * r["batch"] * r["m"] * r["n"] * r["k"]])
    for backend, prefix in (("cudnn", "attention"), ("flash", "attention_flash2")):
        for key, bwd in ((f"{prefix}_fwd", False), (f"{prefix}_bwd", True)):
            out[key] = binned(
                (f, achieved_efficiency(f, r["bwd_s" if bwd else "fwd_s"], PEAK["bf16"]))
                for r in d["attention"] if r["backend"] == backend and "fwd_s" in r
                for f in [attention_flops(r, bwd)])
    return out
