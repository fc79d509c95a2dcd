"""``llmsim calibrate --kernels FILE``: measured kernel times become a GPU's efficiency curves.

The file is a kernel table (:mod:`sim.calibrate.kernel_table`) or a PyTorch profiler trace
(:mod:`sim.calibrate.profiler_trace`, its GEMMs). Each measured kernel's achieved fraction of
the GPU's dense peak in its format is

    ``efficiency = FLOPs / ((time - launch gap) x peak)``

(:func:`sim.derive.gemm_curves.achieved_efficiency`, the inverse of the compute term of
:mod:`sim.costs.compute`, with the GPU's own ``kernel_launch_s``), and each curve's points are
the median efficiency per power-of-two bin of FLOPs (:func:`sim.derive.gemm_curves.binned`), as
the catalogue's Hopper curves were derived from this project's own H100 and H200 measurement.
GEMMs give the curve of their format (``gemm_bf16``: BF16 and FP16, ``gemm_fp8``, ...),
attention kernels the forward and backward curves of their backend (``attention_fwd`` ...:
cuDNN, ``attention_flash2_fwd`` ...: FlashAttention-2); a curve the file has no kernel of stays
the catalogue's.

An efficiency over 1 means the peak or the time is wrong (a table measured on another GPU
than ``--gpu``, times in the wrong unit) and is refused, naming the row; so is a time not above
the launch gap, and a format the GPU has no GEMM curve for. The check prices every measured
kernel (rows of one shape as one, at their median time) on the GPU before and after, with
:func:`sim.costs.compute.gemm_time_s` and :func:`~sim.costs.compute.attention_time_s`: how well
the binned curves reproduce the table.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sim.calibrate.kernel_section import CURVE_KEYS
from sim.calibrate.kernel_table import KernelTable, MeasuredAttention, MeasuredGemm, read_kernel_csv
from sim.calibrate.profiler_trace import is_trace, read_profiler_trace
from sim.calibrate.scale_up import CalibratedValue
from sim.costs.compute import attention_time_s, gemm_time_s
from sim.costs.factors import KernelCurves, curve_key
from sim.derive.gemm_curves import achieved_efficiency, attention_flops, binned
from sim.errors import ConfigError, InfeasibleError
from sim.hardware import EfficiencyCurve, GPUSpec
from sim.types import AttentionKernel
from sim.workload.ops import AttentionOp, GemmOp

__all__ = ["KernelFit", "check_rows", "fit_kernels", "read_kernels"]


def read_kernels(path: str) -> KernelTable:
    """The measured kernels of ``path``: a profiler trace where it is JSON (or gzip), a kernel
    table otherwise."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise ConfigError(path, "<file>", "a readable kernel table or PyTorch profiler trace", str(exc)) from None
    return read_profiler_trace(path) if is_trace(head) else read_kernel_csv(path)


MAX_KERNEL_S = 1000.0
"""The longest one measured kernel may take: over 16 minutes, past any kernel a training or
serving step launches. Longer is a unit slip, and beside it the catalogue's prediction (a few
microseconds at least, the launch gap) is a relative error of -1 to a float's precision."""


@dataclass(frozen=True)
class KernelFit:
    """The curves fitted to a table on one GPU, and the check of every measured kernel."""

    gpu: GPUSpec
    table: KernelTable
    values: tuple[CalibratedValue, ...]
    check: tuple[dict, ...]
    dropped: tuple[str, ...]

    def curves(self) -> list[tuple[str, EfficiencyCurve]]:
        """The fitted curves by key."""
        return [(v.key, EfficiencyCurve(tuple((float(x), float(e)) for x, e in v.value)))  # type: ignore[union-attr]
                for v in self.values]


def _gemm_efficiency(table: KernelTable, gpu: GPUSpec, g: MeasuredGemm) -> tuple[str, float, float]:
    """(curve key, FLOPs, efficiency) of a measured GEMM; a ConfigError naming the row when its
    format has no curve on ``gpu``, its time is not above the launch gap or its efficiency
    exceeds 1."""
    try:
        gpu.gemm_curve(g.dtype)
        peak = gpu.peak(g.dtype)
    except InfeasibleError:
        have = [d.value for d, _ in gpu.gemm_efficiency]
        raise ConfigError(table.path, f"{g.where}: dtype", f"a format {gpu.name} has a GEMM curve for ({have}; fp16 "
                          "as bf16)", g.dtype.value) from None
    return curve_key(g.dtype), g.flops, _efficiency(table, gpu, g, g.flops, g.time_s, peak, "time_us")


def _efficiency(table: KernelTable, gpu: GPUSpec, row: MeasuredGemm | MeasuredAttention, flops: float,
                time_s: float, peak: float, column: str) -> float:
    launch = gpu.kernel_launch_s
    field = f"{row.where}: {column}" if table.form == "table" else row.where
    if time_s <= launch:
        raise ConfigError(table.path, field, f"a time above {gpu.name}'s launch gap of {launch * 1e6:g} us (the "
                          "time one kernel takes on the GPU, launch gap included)",
                          f"{time_s * 1e6:g} us for {row.describe()}")
    if time_s > MAX_KERNEL_S:
        raise ConfigError(table.path, field, f"a kernel's time of at most {MAX_KERNEL_S:g} s (in microseconds: "
                          f"{MAX_KERNEL_S * 1e6:g})", f"{time_s * 1e6:g} us for {row.describe()}")
    eff = achieved_efficiency(flops, time_s, peak, launch)
    if eff > 1.0:
        least = flops / peak + launch
        raise ConfigError(table.path, field, f"a time {gpu.name}'s dense {row.dtype.value} peak of "
                          f"{peak / 1e12:g} TFLOP/s allows: at least {least * 1e6:.4g} us for {row.describe()} "
                          f"(an efficiency over 1 means the peak or the time is wrong: is the table measured on "
                          f"{gpu.name} (--gpu), in microseconds?)", f"{time_s * 1e6:g} us, {eff:.3g} of the peak")
    return eff


def _attention_op(a: MeasuredAttention, backward: bool) -> AttentionOp:
    return AttentionOp(a.batch, a.heads, a.kv_heads, a.seq, a.head_dim, a.causal, backward, a.dtype,
                       kernel=a.kernel)


def _attention_key(a: MeasuredAttention, backward: bool) -> str:
    prefix = "attention_flash2" if a.kernel is AttentionKernel.FLASH2 else "attention"
    return f"{prefix}_{'bwd' if backward else 'fwd'}"


def _attention_flops(a: MeasuredAttention, backward: bool) -> float:
    return attention_flops({"batch": a.batch, "heads": a.heads, "kv_heads": a.kv_heads, "seq": a.seq,
                            "head_dim": a.head_dim, "causal": a.causal}, backward)


def fit_kernels(table: KernelTable, gpu: GPUSpec) -> KernelFit:
    """The efficiency curves of ``gpu`` from ``table`` and the check (the module docstring).

    Raises
    ------
    ConfigError
        Naming the table and the row, for a format ``gpu`` has no curve for, a time not above
        its launch gap, or an efficiency over 1.
    """
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    for g in table.gemms:
        key, flops, eff = _gemm_efficiency(table, gpu, g)
        pairs[key].append((flops, eff))
        counts[key] += 1
    for a in table.attention:
        peak = gpu.peak(a.dtype)
        for backward, t in ((False, a.fwd_s), (True, a.bwd_s)):
            if t is None:
                continue
            flops = _attention_flops(a, backward)
            key = _attention_key(a, backward)
            pairs[key].append((flops, _efficiency(table, gpu, a, flops, t, peak, "bwd_us" if backward else "fwd_us")))
            counts[key] += 1
    where = table.path + (f" (measured on {table.device})" if table.device else "")
    values: list[CalibratedValue] = []
    dropped: list[str] = []
    for key in CURVE_KEYS:
        if key not in pairs:
            continue
        bins = binned(pairs[key])
        points = [(x, e) for x, e in bins if e > 0]
        dropped.extend(f"{key}: the bin at 2^{round(math.log2(x))} FLOPs, its median efficiency under 0.0005 of the "
                       "peak (launch- or memory-bound kernels)" for x, e in bins if not e > 0)
        if not points:
            continue
        what = ("GEMM" if key.startswith("gemm_") else "kernel") + ("s" if counts[key] > 1 else "")
        source = (f"{where}: {counts[key]} {what}, the median of FLOPs / ((time - {gpu.kernel_launch_s * 1e6:g} us "
                  f"launch gap) x {gpu.name}'s dense peak) per power-of-two bin of FLOPs "
                  "(sim/calibrate/kernels.py)")
        values.append(CalibratedValue(key, [[int(x), e] for x, e in points], source))
    fit = KernelFit(gpu, table, tuple(values), (), tuple(dropped))
    calibrated = KernelCurves.measured_on(gpu, fit.curves(), table.path).on(gpu)
    return KernelFit(gpu, table, fit.values, tuple(check_rows(table, gpu, calibrated)), fit.dropped)


def check_rows(table: KernelTable, before: GPUSpec, after: GPUSpec) -> list[dict]:
    """Every measured kernel (rows of one shape as one, at their median time) priced on
    ``before`` (the catalogue's GPU) and ``after`` (with the fitted curves): the file's
    ``check`` list, ordered by curve and FLOPs."""
    gemm_times: dict[tuple, list[float]] = defaultdict(list)
    first_gemm: dict[tuple, MeasuredGemm] = {}
    for g in table.gemms:
        gemm_times[g.shape].append(g.time_s)
        first_gemm.setdefault(g.shape, g)
    rows = []
    for shape, times in gemm_times.items():
        g = first_gemm[shape]
        op = GemmOp(g.m, g.n, g.k, g.dtype, g.batch)
        rows.append(_row(curve_key(g.dtype), g.describe(), op.flops, times, gemm_time_s(before, op),
                         gemm_time_s(after, op)))
    att_times: dict[tuple, list[float]] = defaultdict(list)
    first_att: dict[tuple, MeasuredAttention] = {}
    for a in table.attention:
        for backward, t in ((False, a.fwd_s), (True, a.bwd_s)):
            if t is not None:
                att_times[a.shape + (backward,)].append(t)
                first_att.setdefault(a.shape + (backward,), a)
    for shape, times in att_times.items():
        a, backward = first_att[shape], bool(shape[-1])
        att = _attention_op(a, backward)
        rows.append(_row(_attention_key(a, backward), a.describe() + (" bwd" if backward else " fwd"), att.flops,
                         times, attention_time_s(before, att), attention_time_s(after, att)))
    order = {k: i for i, k in enumerate(CURVE_KEYS)}
    rows.sort(key=lambda r: (order[r["curve"]], r["flops"], r["kernel"]))
    return rows


def _row(curve: str, kernel: str, flops: float, times: Sequence[float], before_s: float, after_s: float) -> dict:
    measured = statistics.median(times)
    return {"curve": curve, "kernel": kernel, "flops": flops, "samples": len(times),
            "measured_us": round(measured * 1e6, 3), "catalogue_us": round(before_s * 1e6, 3),
            "calibrated_us": round(after_s * 1e6, 3), "error_before": round(before_s / measured - 1, 4) + 0.0,
            "error_after": round(after_s / measured - 1, 4) + 0.0}  # + 0.0: no -0.0
