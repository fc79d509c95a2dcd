"""A whole torchtitan Llama layer on the H100 against llmsim's prediction of it, kernel family by family.

Reads ``results/h100-sxm5-80gb-2026-11-26-eager-layer.json`` (``eager_layer.py``: the
profiled kernels of three Llama 3.1 8B layers, forward then backward, eager PyTorch, local
batch 2 x 8192 tokens) and simulates the same layer: the torchtitan Table 1 case
(``workloads/validation/torchtitan.yaml``) on one H100 SXM5 80GB, without FSDP or
recomputation (:mod:`sim.studies.layer_profile`). It prints, per pass of the middle layer, the
GEMMs, the attention and the bandwidth-bound kernels, measured and predicted.

    python benchmarks/device/compare_layer.py [--compiled]

``--compiled``: the same layer under ``torch.compile`` (each block compiled, as torchtitan's
``--training.compile``) against the case with ``torch.compile`` (fused elementwise kernels).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results", "h100-sxm5-80gb-2026-11-26-eager-layer.json")


def main() -> None:
    from sim.studies.layer_profile import FAMILIES, layer_run, measured, simulated

    compiled = "--compiled" in sys.argv[1:]
    m = measured(RESULTS, compiled)
    run = layer_run(compiled)
    s = simulated(run)
    clock = run.result.metadata.get("sm_clock_hz")
    print(f"llmsim: {run.workload.system.gpu.name}, compute clock {clock / 1e6:.0f} MHz" if clock
          else "llmsim: no power model")
    print(f"{'pass':5s} {'kernels':16s} {'measured ms':>12s} {'llmsim ms':>10s} {'error':>7s}")
    for phase in ("fwd", "bwd"):
        tm = ts = 0.0
        for fam in FAMILIES:
            a, b = m.get((phase, fam), 0.0) / 1e3, s.get((phase, fam), 0.0) / 1e3
            tm, ts = tm + a, ts + b
            print(f"{phase:5s} {fam:16s} {a:12.3f} {b:10.3f} {100 * (b - a) / a:+6.1f}%")
        print(f"{phase:5s} {'all':16s} {tm:12.3f} {ts:10.3f} {100 * (ts - tm) / tm:+6.1f}%")


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    main()
