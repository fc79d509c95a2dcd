"""Print the H100 power constants of ``sim/hardware.py`` (``_h100_power``) derived from the measurement.

Reads ``results/h100-sxm5-80gb-2026-11-26-power.json`` (written from ``power_clock.py``'s
output: every configuration with the nvidia-smi samples taken during it), or the file given,
derives the constants with :func:`sim.derive.power.derive` and prints each with what it comes
from. ``tests/unit/test_power.py`` runs that function and checks the catalogue against it, so
the constants cannot drift from the data.

    python benchmarks/device/power_derive.py [RESULTS.json]
"""

from __future__ import annotations

import os
import sys

from sim.derive.power import derive

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "results", "h100-sxm5-80gb-2026-11-26-power.json")


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
