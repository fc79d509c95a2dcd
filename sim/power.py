"""The clocks a GPU holds under its board power limit, for the kernels it runs.

A GPU at its power limit lowers its SM clock until the board draws no more than the limit,
averaged over about a second (on our H100 a kernel's instantaneous draw rose to 760-790 W
under the 700 W limit while the one-second average held at 700 W: ``benchmarks/device/
power_clock.py``). Within that second the clock follows the kernel: a 16384x14336x4096 GEMM
back to back with others held 1,339 MHz and 686 TFLOP/s; the same GEMM between BF16-to-FP32
casts ran at 795 TFLOP/s (1,550 MHz) while the casts ran at the maximum 1,980 MHz; in a
torchtitan Llama layer the FlashAttention-2 forward ran faster than back to back and the GEMMs
slower than it. The efficiency curves of :mod:`sim.hardware` were measured back to back, each
kernel family at its own sustained clock (:class:`PowerSpec`); this module finds the clocks an
iteration's mix allows and rescales the compute-bound kernels to them.

The model (dynamic power ``~ C V^2 f``, the voltage falling with the clock along the chip's
DVFS table):

* a kernel family of activity ``A`` (watts above idle at the maximum clock) draws
  ``P = P_idle + A (f / f_max)^gamma`` at clock ``f``; ``gamma`` comes from FP8 GEMMs run on
  32 to 132 SMs of our H100 (cuBLASLt's SM-count target), which moved the card from below its
  limit (1,980 MHz) to 1,241 MHz at it;
* a family measured back to back at the limit ``P_lim`` at clock ``f_s`` has
  ``A = (P_lim - P_idle) / (f_s / f_max)^gamma``; bandwidth-bound kernels, below the limit at
  the maximum clock, have their measured draw above idle;
* every kernel runs at the clock at which it draws one common power level ``L``, or at the
  maximum clock if it draws less there (``f = f_max min(1, ((L - P_idle) / A)^(1/gamma))``):
  the casts above ran at the maximum, the GEMMs between them at the level, and the
  FlashAttention-2 forward (less dense than a GEMM) faster than the GEMMs beside it;
* a compute-bound kernel's compute time scales with ``f_s / f``; a bandwidth-bound kernel's
  does not (HBM has its own clock);
* ``L`` is the highest level at which the time-weighted mean draw of the iteration's kernels
  stays within the limit (none: the mix never reaches it at the maximum clocks).

It predicts the GEMM between casts at 793 TFLOP/s (measured 795). What it leaves out: the
communication kernels' draw (NVLink and the SMs NCCL holds), idle time inside the iteration
(pipeline bubbles, waits: the firmware averages over a second or so, so these would raise the
clocks a little), and the temperature dependence of leakage (measured at 49-69 C). Only GPUs
with a :class:`PowerSpec` (measured) are modelled; the others run every kernel at its
measured rate, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

__all__ = ["PowerSpec", "KernelLoad", "solve_level_w", "mean_power_w"]


@dataclass(frozen=True)
class PowerSpec:
    """A GPU's power limit and the clocks its kernel families hold at the measured limit.

    Attributes
    ----------
    limit_w : float
        The board power limit this GPU runs at.
    measured_limit_w : float
        The limit under which the GPU's efficiency curves were measured (their clocks below).
    idle_w : float
        Board draw with the clocks up and no kernel running.
    max_clock_hz : float
        The highest SM clock the GPU boosts to.
    dvfs_exponent : float
        ``gamma`` in ``P - P_idle ~ f^gamma`` along the chip's voltage-frequency table.
    gemm_clock_hz : tuple of (str, float)
        The SM clock the GEMM sweeps ran at, by number-format name (``"bf16"``, ``"fp8"``).
    attention_clock_hz, attention_backward_clock_hz : float
        The same for the vendor's fused attention, forward and backward.
    flash2_clock_hz, flash2_backward_clock_hz : float
        The same for FlashAttention-2.
    memory_activity_w : float
        Draw above idle of bandwidth-bound kernels at the maximum clock.
    """

    limit_w: float
    measured_limit_w: float
    idle_w: float
    max_clock_hz: float
    dvfs_exponent: float
    gemm_clock_hz: tuple[tuple[str, float], ...]
    attention_clock_hz: float
    attention_backward_clock_hz: float
    flash2_clock_hz: float
    flash2_backward_clock_hz: float
    memory_activity_w: float

    def gemm_clock(self, dtype_name: str) -> float:
        """The clock the GEMM sweep of this format ran at (16-bit formats share BF16's; a
        format without its own measurement takes FP8's, the narrowest measured)."""
        table = dict(self.gemm_clock_hz)
        key = "bf16" if dtype_name in ("bf16", "fp16", "tf32", "fp32") else dtype_name
        return table.get(key, table.get("fp8", table["bf16"]))

    def clock_hz(self, level_w: float, activity_w: float) -> float:
        """The clock of a kernel of ``activity_w`` when kernels run at power ``level_w``
        (``inf``: the limit is not reached, the maximum clock)."""
        if self.idle_w + activity_w <= level_w:
            return self.max_clock_hz
        return self.max_clock_hz * (max(level_w - self.idle_w, 1e-9) / activity_w) ** (1.0 / self.dvfs_exponent)

    def activity_w(self, sustained_clock_hz: float) -> float:
        """Draw above idle at the maximum clock of a kernel family that held
        ``sustained_clock_hz`` back to back at the measured limit."""
        return (self.measured_limit_w - self.idle_w) / (sustained_clock_hz / self.max_clock_hz) ** self.dvfs_exponent


@dataclass(frozen=True, slots=True)
class KernelLoad:
    """One kernel (or ``count`` alike) as the clock solve sees it.

    It runs ``max(compute_s * clock_hz / f, floor_s) + added_s`` at clock ``f``:
    ``compute_s`` is its compute-bound time at ``clock_hz`` (0 for a bandwidth-bound kernel),
    ``floor_s`` its bandwidth-bound time, ``added_s`` what runs beside it regardless (launch
    gap, fused casts); ``activity_w`` is its draw above idle at the maximum clock.
    """

    compute_s: float
    clock_hz: float
    floor_s: float
    added_s: float
    activity_w: float
    count: float = 1.0


def _time_s(k: KernelLoad, f: float) -> float:
    return (max(k.compute_s * k.clock_hz / f, k.floor_s) if k.compute_s else k.floor_s) + k.added_s


def mean_power_w(power: PowerSpec, loads: Iterable[KernelLoad], level_w: float) -> float:
    """Time-weighted mean board draw of ``loads``, each at its clock for ``level_w``."""
    energy = total = 0.0
    for k in loads:
        f = power.clock_hz(level_w, k.activity_w)
        t = _time_s(k, f) * k.count
        energy += t * (power.idle_w + k.activity_w * (f / power.max_clock_hz) ** power.dvfs_exponent)
        total += t
    return energy / total if total > 0 else power.idle_w


def solve_level_w(power: PowerSpec, loads: Iterable[KernelLoad]) -> float:
    """The power level the kernels run at so that their mean draw is the limit (``inf``:
    within the limit with every kernel at the maximum clock).

    The mean draw rises with the level (each kernel's clock, its draw and, for compute-bound
    ones, its energy rise with it), so a bisection finds it.

    >>> p = PowerSpec(700.0, 700.0, 134.0, 1980e6, 2.2, (("bf16", 1374e6),), 1679e6, 1537e6, 1703e6,
    ...               1776e6, 391.0)
    >>> gemm = KernelLoad(1e-3, 1374e6, 0.0, 0.0, p.activity_w(1374e6))
    >>> level = solve_level_w(p, [gemm])  # back to back: at the limit, the clock it was measured at
    >>> round(level), round(p.clock_hz(level, gemm.activity_w) / 1e6)
    (700, 1374)
    >>> copy = KernelLoad(0.0, 0.0, 1e-3, 0.0, 391.0)
    >>> level = solve_level_w(p, [gemm, copy])  # beside copies the GEMM draws more, runs faster
    >>> round(level), round(p.clock_hz(level, gemm.activity_w) / 1e6), round(p.clock_hz(level, 391.0) / 1e6)
    (901, 1577, 1980)
    """
    loads = list(loads)
    if mean_power_w(power, loads, math.inf) <= power.limit_w:
        return math.inf
    lo = power.idle_w
    hi = power.idle_w + max(k.activity_w for k in loads)
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if mean_power_w(power, loads, mid) <= power.limit_w:
            lo = mid
        else:
            hi = mid
    return lo
