"""Derive the H100 power constants of ``sim/hardware.py`` (``_h100_power``) from the measurement.

Reads ``results/h100-sxm5-80gb-2026-11-26-power.json`` (written from ``power_clock.py``'s
output: every configuration with the nvidia-smi samples taken during it) and prints each
constant with what it comes from. ``tests/unit/test_power.py`` runs :func:`derive` and checks
the catalogue against it, so the constants cannot drift from the data.

    python benchmarks/device/power_derive.py [RESULTS.json]
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "results", "h100-sxm5-80gb-2026-11-26-power.json")
LIMIT_W = 700.0


def _configs(data: dict) -> dict[str, dict]:
    return {c["name"]: c for run in data["runs"] for c in run["configs"]}


def _steady(c: dict, start: float = 0.4) -> list[list]:
    """The samples of the later part of a run (the first 40% is the clock settling)."""
    cut = c["seconds"] * start
    return [s for s in c["smi"] if s[0] >= cut]


def _mean(samples: list[list], col: int) -> float:
    return statistics.mean(s[col] for s in samples)


def derive(path: str = DEFAULT) -> dict:
    """Every constant of ``_h100_power`` from the measurement, with its evidence."""
    with open(path) as fh:
        cfg = _configs(json.load(fh))
    # just after load, clocks still up; the instantaneous column (power.draw trails by a second)
    idle_w = _mean(cfg["idle-after"]["smi"], 2)
    max_clock = max(s[3] for c in cfg.values() for s in c["smi"]) * 1e6
    # FP8 GEMMs on part of the chip (cuBLASLt honours the SM-count target for _scaled_mm):
    # per-SM draw above idle at the clock held; the run below the limit fixes g(f_max).
    pts = []
    for name in ("gemm-fp8-carveout100", "gemm-fp8-carveout66", "gemm-fp8-carveout33", "gemm-fp8-carveout0"):
        c = cfg[name]
        s = _steady(c)
        pts.append((_mean(s, 3) * 1e6, (_mean(s, 1) - idle_w) / c["active_sms"]))
    (f0, a0), capped = pts[0], pts[1:]
    assert abs(f0 - max_clock) < 1e6, "the 32-SM run should sit at the maximum clock"
    num = sum(math.log(a / a0) * math.log(f / f0) for f, a in capped)
    den = sum(math.log(f / f0) ** 2 for f, _ in capped)
    gamma = num / den

    def clock(name: str) -> float:
        return _mean(_steady(cfg[name]), 3) * 1e6

    bf16_names = ["gemm-bf16-carveout0", "gemm-bf16-4096x4096x4096", "gemm-bf16-16384x4096x4096",
                  "gemm-bf16-16384x14336x4096", "gemm-16384x14336x4096-alone", "alone-gemm"]
    bf16 = statistics.median(clock(n) for n in bf16_names)
    fp8 = statistics.mean((clock("gemm-fp8-carveout0"), clock("gemm-fp8-4096x4096x4096")))

    def mean_clock(*names: str) -> float:
        return statistics.mean(clock(n) for n in names)

    mem = [n for n in cfg if n.startswith("mem-")]
    memory_w = statistics.median(_mean(_steady(cfg[n]), 1) for n in mem) - idle_w
    return {"idle_w": idle_w, "max_clock_hz": max_clock, "dvfs_exponent": gamma,
            "gemm_bf16_clock_hz": bf16, "gemm_fp8_clock_hz": fp8,
            # forward: the two back-to-back runs (kernels part, mix part); backward: the warmed
            # forward+backward runs (one clock for both kernels of the pair)
            "attention_clock_hz": mean_clock("attn-cudnn-fwd", "alone-cudnn-fwd"),
            "attention_backward_clock_hz": clock("alone-cudnn-fwdbwd"),
            "flash2_clock_hz": mean_clock("attn-fa2-fwd", "alone-fa2-fwd"),
            "flash2_backward_clock_hz": clock("alone-fa2-fwdbwd"),
            "memory_activity_w": memory_w, "fp8_points": pts}


def main() -> None:
    d = derive(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
    print(f"idle (clocks up, just after load)        {d['idle_w']:.1f} W")
    print(f"maximum clock                            {d['max_clock_hz'] / 1e6:.0f} MHz")
    for f, a in d["fp8_points"]:
        print(f"  FP8 GEMM: {f / 1e6:6.0f} MHz, {a:6.2f} W per SM above idle")
    print(f"DVFS exponent (least squares, FP8 GEMMs) {d['dvfs_exponent']:.3f}")
    for key in ("gemm_bf16_clock_hz", "gemm_fp8_clock_hz", "attention_clock_hz", "attention_backward_clock_hz",
                "flash2_clock_hz", "flash2_backward_clock_hz"):
        print(f"{key:40s} {d[key] / 1e6:.0f} MHz")
    print(f"bandwidth-bound kernels above idle       {d['memory_activity_w']:.1f} W")


if __name__ == "__main__":
    main()
