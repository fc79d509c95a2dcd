"""Calibration factors: a few named scalings of the cost model, fitted to a user's measured runs.

``llmsim calibrate --runs`` fits them (:mod:`sim.calibrate.runs`) and ``llmsim run --calibration``
applies them; :func:`sim.runner.simulate` takes them as ``factors`` (None: the model as it is).

* ``compute_efficiency`` multiplies the rate of every compute kernel (GEMM, attention and the
  bandwidth-bound elementwise kernels): each kernel's time is divided by it. 1.0 is the
  catalogue's rate (:mod:`sim.costs.compute`).
* ``comm_efficiency`` multiplies the bandwidth of every link of the fabric, so the rate of every
  flow of every collective and transfer; the fixed latencies stay. :func:`sim.runner.simulate`
  scales the fabric itself (:meth:`sim.topology.routing.Fabric.with_capacities`), so that the
  algorithm and protocol the planner picks see it too. 1.0 is the topology as given.
* ``host_issue_s`` is a floor under every compute kernel's time: the host issues one kernel at a
  time, and a kernel shorter than the time it takes to issue the next leaves the GPU waiting
  (the launch-bound regime of small kernels, docs/design.md). 0 sets no floor.

``kernels`` (:class:`KernelCurves`, ``llmsim calibrate --kernels``) are efficiency curves
measured on the user's GPU: on a workload whose GPU is the one measured, they stand in for its
catalogue curves (:meth:`KernelCurves.on`), so every GEMM and attention kernel is priced from
the user's own measurement before ``compute_efficiency`` scales it.

These are the factors SimuMax (GEMM, attention and NCCL efficiencies measured on the target
machine) and Lumos (per-kernel times replayed from the job's own traces) calibrate, reduced to
one scalar each so that a handful of measured iteration times determine them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from sim.hardware import EfficiencyCurve, GPUSpec
from sim.types import AttentionKernel, Dtype

__all__ = ["ATTENTION_CURVES", "CalibrationFactors", "FACTOR_NAMES", "GEMM_CURVE_PREFIX", "KernelCurves", "curve_key"]

FACTOR_NAMES = ("compute_efficiency", "comm_efficiency", "host_issue_us")
"""The factors' names as a calibration file and ``--fit`` write them."""


GEMM_CURVE_PREFIX = "gemm_"
"""A GEMM curve's key is this and the format (``gemm_bf16``: :attr:`GPUSpec.gemm_efficiency`'s BF16 curve)."""
ATTENTION_CURVES = {
    "attention_fwd": ("attention_efficiency", AttentionKernel.VENDOR, False),
    "attention_bwd": ("attention_backward_efficiency", AttentionKernel.VENDOR, True),
    "attention_flash2_fwd": ("flash2_attention_efficiency", AttentionKernel.FLASH2, False),
    "attention_flash2_bwd": ("flash2_attention_backward_efficiency", AttentionKernel.FLASH2, True),
}
"""An attention curve's key, and the :class:`~sim.hardware.GPUSpec` field, kernel and direction it is."""


def curve_key(dtype: Dtype) -> str:
    """The key of ``dtype``'s GEMM curve (16-bit formats share the BF16 one, as
    :meth:`GPUSpec.gemm_curve` prices them)."""
    return GEMM_CURVE_PREFIX + (Dtype.BF16 if dtype is Dtype.FP16 else dtype).value


def _base_curve(gpu: GPUSpec, key: str) -> EfficiencyCurve:
    """``gpu``'s own curve for ``key`` (the vendor attention curve where it has no FlashAttention-2 one)."""
    if key.startswith(GEMM_CURVE_PREFIX):
        return gpu.gemm_curve(Dtype(key[len(GEMM_CURVE_PREFIX):]))
    _, kernel, backward = ATTENTION_CURVES[key]
    return gpu.attention_curve(kernel, backward)


@dataclass(frozen=True)
class KernelCurves:
    """Efficiency curves measured on one GPU (``llmsim calibrate --kernels``): each, by key
    (:func:`curve_key`, :data:`ATTENTION_CURVES`), a fraction of the dense peak the GPU had
    when they were measured (``peaks``). ``source`` names the calibration file;
    ``least_time_scale`` is the least a kernel's catalogue time is multiplied by where these
    curves replace the catalogue's (:meth:`measured_on`)."""

    gpu: str
    curves: tuple[tuple[str, EfficiencyCurve], ...]
    peaks: tuple[tuple[Dtype, float], ...]
    source: str
    least_time_scale: float = 1.0

    @classmethod
    def measured_on(cls, gpu: GPUSpec, curves: Sequence[tuple[str, EfficiencyCurve]], source: str) -> KernelCurves:
        """``curves`` measured on ``gpu`` (the catalogue's spec), with the peaks they are
        fractions of and ``least_time_scale``: the least ratio of ``gpu``'s own efficiency to the
        measured one over every curve (both are linear in log size between their points and
        flat beyond them, so the ratio is monotone between the union of their points and its
        least is at one of them), at most 1."""
        scale = 1.0
        for key, curve in curves:
            base = _base_curve(gpu, key)
            for x in sorted({p[0] for p in base.points} | {p[0] for p in curve.points}):
                scale = min(scale, base(x) / curve(x))
        dtypes = {Dtype(k[len(GEMM_CURVE_PREFIX):]) for k, _ in curves if k.startswith(GEMM_CURVE_PREFIX)}
        if any(not k.startswith(GEMM_CURVE_PREFIX) for k, _ in curves):
            dtypes.add(Dtype.BF16)
        peaks = tuple((d, gpu.peak(d)) for d in sorted(dtypes, key=lambda d: d.value))
        return cls(gpu.name, tuple(curves), peaks, source, scale)

    def why_not(self, gpu: GPUSpec) -> str | None:
        """Why the curves do not apply to ``gpu`` (None: they do): another GPU, or the same
        one with other peaks than those the curves are fractions of."""
        if gpu.name != self.gpu:
            return f"measured on {self.gpu}, the workload runs on {gpu.name}: its catalogue curves stand"
        for dtype, peak in self.peaks:
            if not gpu.supports(dtype) or abs(gpu.peak(dtype) - peak) > 1e-9 * peak:
                return (f"{gpu.name}'s {dtype.value} peak is not the {peak / 1e12:g} TFLOP/s the curves are fractions "
                        "of: its catalogue curves stand")
        return None

    def on(self, gpu: GPUSpec, notes: list[str] | None = None) -> GPUSpec:
        """``gpu`` with these curves in place of its own where they apply (:meth:`why_not`),
        ``gpu`` itself where not; either is noted in ``notes``."""
        why = self.why_not(gpu)
        if why is not None:
            if notes is not None:
                notes.append(f"calibration {self.source}: kernel curves not applied ({why})")
            return gpu
        gemm = dict(gpu.gemm_efficiency)
        fields: dict[str, EfficiencyCurve] = {}
        for key, curve in self.curves:
            if key.startswith(GEMM_CURVE_PREFIX):
                gemm[Dtype(key[len(GEMM_CURVE_PREFIX):])] = curve
            else:
                fields[ATTENTION_CURVES[key][0]] = curve
        if notes is not None:
            notes.append(f"calibration {self.source}: {gpu.name}'s {', '.join(k for k, _ in self.curves)} efficiency "
                         "curves measured on the user's GPU (llmsim calibrate --kernels)")
        return dataclasses.replace(gpu, gemm_efficiency=tuple(gemm.items()), **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CalibrationFactors:
    """Scalings of the cost model (module docstring); the defaults change nothing."""

    compute_efficiency: float = 1.0
    comm_efficiency: float = 1.0
    host_issue_s: float = 0.0
    kernels: KernelCurves | None = None

    def __post_init__(self) -> None:
        assert self.compute_efficiency > 0 and self.comm_efficiency > 0 and self.host_issue_s >= 0, self

    def compute_time_s(self, catalogue_s: float) -> float:
        """A compute kernel's time from its catalogue time: at ``compute_efficiency`` times the
        rate, and no shorter than the host's issue floor."""
        return max(catalogue_s / self.compute_efficiency, self.host_issue_s)

    @property
    def least_time_scale(self) -> float:
        """The least any task's time is multiplied by: a compute kernel's by at least
        ``1 / compute_efficiency`` (the floor only lengthens it), a flow's by at most
        ``1 / comm_efficiency`` on its bandwidth part and not at all on its latency, so a
        lower bound on the uncalibrated iteration times this is one on the calibrated
        (a makespan is a sum of task times along a path, each scaled by at least this). Measured
        kernel curves multiply a compute kernel's time by at least their
        :attr:`KernelCurves.least_time_scale` first."""
        curves = 1.0 if self.kernels is None else min(1.0, self.kernels.least_time_scale)
        return min(1.0, curves / self.compute_efficiency, 1.0 / self.comm_efficiency)

    def capacities(self, capacity_bytes_per_s: Sequence[float]) -> list[float]:
        """The fabric's link capacities at ``comm_efficiency`` times their bandwidth."""
        return [c * self.comm_efficiency for c in capacity_bytes_per_s]

    def value(self, name: str) -> float:
        """The factor ``name`` (one of :data:`FACTOR_NAMES`) in its file units."""
        if name == "host_issue_us":
            return self.host_issue_s * 1e6
        return float(getattr(self, name))

    @classmethod
    def of(cls, values: dict[str, float], kernels: KernelCurves | None = None) -> CalibrationFactors:
        """Factors from ``{name: value}`` in file units (:data:`FACTOR_NAMES`; missing: unchanged),
        with measured ``kernels`` curves."""
        return cls(values.get("compute_efficiency", 1.0), values.get("comm_efficiency", 1.0),
                   values.get("host_issue_us", 0.0) * 1e-6, kernels)
