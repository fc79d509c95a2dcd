"""The clock a GPU holds under its board power limit, for the kernels it runs.

A GPU at its power limit lowers its SM clock until the board draws no more than the limit,
averaged over about a second (on our H100 a kernel's instantaneous draw rose to 760-790 W
under the 700 W limit while the one-second average held at 700 W: ``benchmarks/device/
power_clock.py``). So the clock a kernel gets depends on what runs beside it: a
16384x14336x4096 GEMM back to back with others held 1,339 MHz and 686 TFLOP/s; between
BF16-to-FP32 casts (which drew 499 W at the maximum 1,980 MHz) it ran at 795 TFLOP/s; between
FlashAttention-2 or cuDNN attention kernels (which alone hold 1,550-1,800 MHz) it ran 2-13%
faster than alone, and they 2-10% slower. The efficiency curves of :mod:`sim.hardware` were
measured back to back, each kernel family at its own sustained clock (:class:`PowerSpec`);
this module finds the clock an iteration's mix holds and rescales the compute-bound kernels
to it.

The model (dynamic power ``~ C V^2 f``, the voltage falling with the clock along the chip's
DVFS table):

* a compute-bound kernel family of activity ``A`` (watts above idle at the maximum clock)
  draws ``P = P_idle + A (f / f_max)^gamma`` at clock ``f``; ``gamma`` comes from FP8 GEMMs run
  on 32 to 132 SMs of our H100 (cuBLASLt's SM-count target), which moved the card from below
  its limit (1,980 MHz) to 1,241 MHz at it;
* a family measured back to back at the limit ``P_lim`` at clock ``f_s`` has
  ``A = (P_lim - P_idle) / (f_s / f_max)^gamma``;
* the compute-bound kernels of an iteration share one clock ``f``, their compute time scaled
  by ``f_s / f``; bandwidth-bound kernels keep their time (HBM has its own clock) and draw
  what they drew at the maximum clock, or the limit if that is less;
* ``f`` is the highest clock, at most the maximum, at which the time-weighted mean draw of the
  iteration's kernels stays within the limit.

Against the measured mixes (held out of the constants): the GEMM between casts at 774 TFLOP/s
(measured 795); in the four GEMM-attention mixes every kernel within 9% and every pair's total
within 1% (``tests/unit/test_power.py``). The clocks of two compute families in a mix were
found between one shared clock and each at its own clock for a common draw, nearer the former;
the total, which sets the iteration's time, is within 1% either way. The controller is slow:
polled every 0.6 ms through NVML (``benchmarks/device/clock_lag.py``), the clock held 1,980 MHz
for 100-200 ms after dense GEMMs began and then fell to about 1,500 MHz (later 1,185-1,260), and
after a switch to copies held its low value for about 100 ms before rising; so across the
kernels of a layer (tens of ms) the clock is about one value, set by the recent mix. What it leaves out: the
communication kernels' draw (NVLink and the SMs NCCL holds), idle time inside the iteration
(pipeline bubbles, waits: the firmware averages over a second or so, so these would raise the
clock a little), and the temperature dependence of leakage (measured at 49-69 C). Only GPUs
with a :class:`PowerSpec` (measured) are modelled; the others run every kernel at its
measured rate, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PowerSpec", "KernelLoad", "solve_clock_hz", "mean_power_w"]


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

    def activity_w(self, sustained_clock_hz: float) -> float:
        """Draw above idle at the maximum clock of a kernel family that held
        ``sustained_clock_hz`` back to back at the measured limit."""
        return (self.measured_limit_w - self.idle_w) / (sustained_clock_hz / self.max_clock_hz) ** self.dvfs_exponent


@dataclass(frozen=True, slots=True)
class KernelLoad:
    """One kernel (or ``count`` alike) as the clock solve sees it.

    A compute-bound kernel (``compute_s > 0``) runs ``max(compute_s * clock_hz / f, floor_s) +
    added_s`` at clock ``f``: ``compute_s`` is its compute-bound time at ``clock_hz``, the clock
    its efficiency was measured at, ``floor_s`` its bandwidth-bound time, ``added_s`` what runs
    beside it regardless (launch gap, fused casts); it draws ``P_idle + activity_w (f /
    f_max)^gamma``. A bandwidth-bound kernel (``compute_s == 0``) runs ``floor_s + added_s``
    and draws ``P_idle + activity_w``, at most the limit. ``host_s`` is the host's time to
    issue it (:attr:`~sim.workload.ops.GemmOp.issue_s`): the kernel's slot lasts at least that
    long, and for what the slot outlasts the kernel the GPU waits at ``P_idle``, as
    :func:`sim.costs.compute.gemm_time_s` takes the same floor for its time.
    """

    compute_s: float
    clock_hz: float
    floor_s: float
    added_s: float
    activity_w: float
    count: float = 1.0
    host_s: float = 0.0


def mean_power_w(power: PowerSpec, loads: Iterable[KernelLoad], clock_hz: float) -> float:
    """Time-weighted mean board draw of ``loads``, the compute-bound ones at ``clock_hz``."""
    g = (clock_hz / power.max_clock_hz) ** power.dvfs_exponent
    energy = total = 0.0
    for k in loads:
        if k.compute_s:
            t = max(k.compute_s * k.clock_hz / clock_hz, k.floor_s) + k.added_s
            p = power.idle_w + k.activity_w * g
        else:
            t = k.floor_s + k.added_s
            p = min(power.idle_w + k.activity_w, power.limit_w)
        wait = max(k.host_s - t, 0.0)  # the GPU idles until the host has issued the kernel
        energy += (t * p + wait * power.idle_w) * k.count
        total += (t + wait) * k.count
    return energy / total if total > 0 else power.idle_w


def solve_clock_hz(power: PowerSpec, loads: Iterable[KernelLoad]) -> float:
    """The highest clock, at most the maximum, at which ``loads`` draw within the limit on
    average (a third of the maximum if even that exceeds it).

    The mean draw rises with the clock (each compute-bound kernel's energy grows as
    ``f^(gamma - 1)`` and its share of the time with it), so a bisection finds it.

    >>> p = PowerSpec(700.0, 700.0, 134.0, 1980e6, 2.2, (("bf16", 1374e6),), 1679e6, 1537e6, 1703e6,
    ...               1776e6, 391.0)
    >>> gemm = KernelLoad(1e-3, 1374e6, 0.0, 0.0, p.activity_w(1374e6))
    >>> round(solve_clock_hz(p, [gemm]) / 1e6)  # back to back: the clock it was measured at
    1374
    >>> copy = KernelLoad(0.0, 0.0, 1e-3, 0.0, 391.0)
    >>> round(solve_clock_hz(p, [gemm, copy]) / 1e6)  # beside a cast at full draw: faster
    1577
    """
    loads = list(loads)
    hi = power.max_clock_hz
    if mean_power_w(power, loads, hi) <= power.limit_w:
        return hi
    lo = hi / 3.0
    if mean_power_w(power, loads, lo) > power.limit_w:
        return lo
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if mean_power_w(power, loads, mid) <= power.limit_w:
            lo = mid
        else:
            hi = mid
    return lo
