"""Compare llmsim's kernel times with the ones ``kernels.py`` measured, and derive the curves.

::

    python benchmarks/device/compare.py [benchmarks/device/results/h100-sxm5-80gb-2026-11-26.json]

prints, per dtype and kernel family, the model's time over the measured one (median and
spread, weighted by each shape's share of the validation cases' time where known) and the
efficiency curves the measurement gives: the median achieved fraction of peak per power-of-two
bin of FLOPs, launch gap removed (:func:`sim.derive.gemm_curves.derive_curves`).
``sim/hardware.py`` carries those points for Hopper; the unit tests re-derive them from the
committed JSON, so the constants cannot drift from the measurement.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

from sim.derive.gemm_curves import derive_curves

HERE = Path(__file__).resolve().parent
DEFAULT = HERE / "results" / "h100-sxm5-80gb-2026-11-26.json"


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    from sim.costs.compute import attention_time_s, gemm_time_s
    from sim.hardware import get_gpu
    from sim.types import Dtype
    from sim.workload.ops import AttentionOp, GemmOp

    d = json.loads(path.read_text())
    gpu = get_gpu("H100")
    print(f"{d['device']}, torch {d['torch']}, CUDA {d['cuda']}, cuDNN {d['cudnn']}")
    print(f"{'family':<22}{'n':>5}{'model/measured median':>24}{'p10':>8}{'p90':>8}")

    def line(name, ratios):
        ratios = sorted(ratios)
        if not ratios:
            return
        q = lambda p: ratios[min(len(ratios) - 1, int(p * len(ratios)))]  # noqa: E731
        print(f"{name:<22}{len(ratios):>5}{statistics.median(ratios):>24.3f}{q(0.1):>8.3f}{q(0.9):>8.3f}")

    for dt in ("bf16", "fp8"):
        for tag in ("case", "case-bf16", "grid"):
            line(f"GEMM {dt} {tag}", [gemm_time_s(gpu, GemmOp(r["m"], r["n"], r["k"], Dtype(dt), r["batch"]))
                                      / r["median_s"] for r in d["gemms"]
                                      if r["dtype"] == dt and r["tag"] == tag and "median_s" in r])
    for bwd in (False, True):
        line(f"attention {'bwd' if bwd else 'fwd'} cuDNN",
             [attention_time_s(gpu, AttentionOp(r["batch"], r["heads"], r["kv_heads"], r["seq"], r["head_dim"],
                                                r["causal"], bwd)) / r["bwd_s" if bwd else "fwd_s"]
              for r in d["attention"] if r["backend"] == "cudnn" and "fwd_s" in r])
    c = d.get("contention", {})
    if c:
        print(f"8192^3 BF16 GEMM alone {c['gemm_8192_alone_s'] * 1e3:.3f} ms, beside a streaming copy "
              f"{c['gemm_8192_beside_copy_s'] * 1e3:.3f} ms "
              f"(x{c['gemm_8192_beside_copy_s'] / c['gemm_8192_alone_s']:.2f})")
    print("derived efficiency curves (FLOPs, fraction of peak):")
    for k, pts in derive_curves(path).items():
        print(f"  {k}: " + ", ".join(f"(2**{int(math.log2(x))}, {e})" for x, e in pts))


if __name__ == "__main__":
    main()
