"""The power model's constants from the nvidia-smi samples of the power runs.

The samples are what ``benchmarks/device/power_clock.py`` recorded (committed under
``benchmarks/device/results/``: ``h100-sxm5-80gb-2026-11-26-power.json`` on our H100,
``h200-2026-11-26-power.json`` on our H200): every configuration with the nvidia-smi samples
taken during it, each sample a row of ``benchmarks/device/power_results.py``'s ``COLUMNS``
(seconds since the configuration started, power.draw W, instantaneous W, SM clock MHz, ...).
:func:`derive` gives every constant of a GPU's power model in ``sim/hardware.py``
(``_h100_power`` and its H200 counterpart); ``tests/unit/test_power.py`` checks the catalogue
against it, so the constants cannot drift from the data, and
``benchmarks/device/power_derive.py`` prints them with what each comes from.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

STEADY_FROM = 0.4
"""The share of a run's seconds its clock takes to settle: later samples are its steady state."""


def configs(data: dict) -> dict[str, dict]:
    """Every configuration of a power measurement, by name."""
    return {c["name"]: c for run in data["runs"] for c in run["configs"]}


def steady(c: dict, start: float = STEADY_FROM) -> list[list]:
    """The samples of the later part of a run (the first 40% is the clock settling)."""
    cut = c["seconds"] * start
    return [s for s in c["smi"] if s[0] >= cut]


def mean_column(samples: list[list], col: int) -> float:
    """The mean of column ``col`` of ``samples``."""
    return statistics.mean(s[col] for s in samples)


def derive(path: str | Path) -> dict:
    """Every constant of a power model from the measurement at ``path``, with its evidence.

    Returns
    -------
    dict
        ``idle_w``, ``max_clock_hz``, ``dvfs_exponent``, ``gemm_bf16_clock_hz``,
        ``gemm_fp8_clock_hz``, ``attention_clock_hz``, ``attention_backward_clock_hz``,
        ``flash2_clock_hz``, ``flash2_backward_clock_hz``, ``memory_activity_w`` and
        ``fp8_points`` (the FP8 GEMM runs' ``(clock Hz, W per SM above idle)``).
    """
    with open(path) as fh:
        cfg = configs(json.load(fh))
    # just after load, clocks still up; the instantaneous column (power.draw trails by a second)
    idle_w = mean_column(cfg["idle-after"]["smi"], 2)
    max_clock = max(s[3] for c in cfg.values() for s in c["smi"]) * 1e6
    # FP8 GEMMs on part of the chip (cuBLASLt honours the SM-count target for _scaled_mm):
    # per-SM draw above idle at the clock held; the run below the limit fixes g(f_max).
    pts = []
    for name in ("gemm-fp8-carveout100", "gemm-fp8-carveout66", "gemm-fp8-carveout33", "gemm-fp8-carveout0"):
        c = cfg[name]
        s = steady(c)
        pts.append((mean_column(s, 3) * 1e6, (mean_column(s, 1) - idle_w) / c["active_sms"]))
    (f0, a0), capped = pts[0], pts[1:]
    assert abs(f0 - max_clock) < 1e6, "the 32-SM run should sit at the maximum clock"
    num = sum(math.log(a / a0) * math.log(f / f0) for f, a in capped)
    den = sum(math.log(f / f0) ** 2 for f, _ in capped)
    gamma = num / den

    def clock(name: str) -> float:
        return mean_column(steady(cfg[name]), 3) * 1e6

    bf16_names = ["gemm-bf16-carveout0", "gemm-bf16-4096x4096x4096", "gemm-bf16-16384x4096x4096",
                  "gemm-bf16-16384x14336x4096", "gemm-16384x14336x4096-alone", "alone-gemm"]
    bf16 = statistics.median(clock(n) for n in bf16_names)
    fp8 = statistics.mean((clock("gemm-fp8-carveout0"), clock("gemm-fp8-4096x4096x4096")))

    def mean_clock(*names: str) -> float:
        return statistics.mean(clock(n) for n in names)

    mem = [n for n in cfg if n.startswith("mem-")]
    memory_w = statistics.median(mean_column(steady(cfg[n]), 1) for n in mem) - idle_w
    return {"idle_w": idle_w, "max_clock_hz": max_clock, "dvfs_exponent": gamma,
            "gemm_bf16_clock_hz": bf16, "gemm_fp8_clock_hz": fp8,
            # forward: the two back-to-back runs (kernels part, mix part); backward: the warmed
            # forward+backward runs (one clock for both kernels of the pair)
            "attention_clock_hz": mean_clock("attn-cudnn-fwd", "alone-cudnn-fwd"),
            "attention_backward_clock_hz": clock("alone-cudnn-fwdbwd"),
            "flash2_clock_hz": mean_clock("attn-fa2-fwd", "alone-fa2-fwd"),
            "flash2_backward_clock_hz": clock("alone-fa2-fwdbwd"),
            "memory_activity_w": memory_w, "fp8_points": pts}
