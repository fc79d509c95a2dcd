"""A whole torchtitan Llama layer on the H100 against llmsim's prediction of it, kernel family by family.

Reads ``results/h100-sxm5-80gb-2026-11-26-eager-layer.json`` (``eager_layer.py``: the
profiled kernels of three Llama 3.1 8B layers, forward then backward, eager PyTorch, local
batch 2 x 8192 tokens) and simulates the same layer: the torchtitan Table 1 case
(``workloads/validation/torchtitan.yaml``) on one H100 SXM5 80GB, without FSDP or
recomputation. It prints, per pass of the middle layer, the GEMMs, the attention and the
bandwidth-bound kernels, measured and predicted.

    python benchmarks/device/compare_layer.py [--compiled]

``--compiled``: the same layer under ``torch.compile`` (each block compiled, as torchtitan's
``--training.compile``) against the case with ``torch.compile`` (fused elementwise kernels).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results", "h100-sxm5-80gb-2026-11-26-eager-layer.json")
CASES = {False: ("torchtitan_h100_t1_llama31_8b_8gpu_FSDP", "llama31_8b_b2_s8192"),
         True: ("torchtitan_h100_t1_llama31_8b_8gpu_FSDP_torchcompile", "llama31_8b_b2_s8192_compiled")}


def _family_measured(aten_op: str) -> str:
    if aten_op in ("aten::mm", "aten::addmm"):
        return "gemm"
    return "attention" if "flash_attention" in aten_op else "bandwidth-bound"


def _family_sim(name: str) -> str:
    if name.startswith("attention"):
        return "attention"
    gemms = ("qkv", "proj", "fc1", "fc2", "wq", "wk", "wv", "wo", "w1", "w2", "w3")
    return "gemm" if name.split("-")[0] in gemms and not name.startswith(("norm",)) else "bandwidth-bound"


def measured(compiled: bool = False) -> dict:
    """Per pass and family, microseconds of the middle layer's kernels."""
    case = CASES[compiled][1]
    with open(RESULTS) as fh:
        data = json.load(fh)
    layers = next(c["layers"] for c in data["summary"]["cases"] if c["case"] == case)
    rows = data["kernels"][case]
    out: dict = {}
    for phase in ("fwd", "bwd"):
        ks = [r for r in rows if r[0] == phase]
        per = len(ks) // layers
        for _, op, _, us in ks[per:2 * per]:  # the middle layer (the backward runs last to first)
            out[(phase, _family_measured(op))] = out.get((phase, _family_measured(op)), 0.0) + us
    return out


def simulated(compiled: bool = False) -> dict:
    from sim.config import default_topology_name, load_case_records, load_topology
    from sim.runner import simulate
    from sim.types import Stream

    with open(os.path.join(ROOT, "workloads", "validation", "torchtitan.yaml")) as fh:
        cases = yaml.safe_load(fh)
    c = next(x for x in cases if x["id"] == CASES[compiled][0])
    c["system"].update(gpu="H100-SXM5-80GB", num_gpus=1)
    c["parallel"].update(dp=1, global_batch_size=2, recompute="none")
    c["model"]["num_layers"] = 3
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump([c], fh, sort_keys=False)
    try:
        w = load_case_records(fh.name)[0].workload
    finally:
        os.unlink(fh.name)
    run = simulate(w, load_topology(default_topology_name(w.system.gpu.name)))
    out: dict = {}
    for s in run.result.spans:
        a = dict(s.args)
        if s.stream is not Stream.COMPUTE or a.get("layer") != 1:
            continue
        key = ("fwd" if a["phase"] == "fwd" else "bwd", _family_sim(s.name))
        out[key] = out.get(key, 0.0) + (s.end_s - s.start_s) * 1e6
    clock = run.result.metadata.get("sm_clock_hz")
    print(f"llmsim: {w.system.gpu.name}, compute clock {clock / 1e6:.0f} MHz" if clock else "llmsim: no power model")
    return out


def main() -> None:
    compiled = "--compiled" in sys.argv[1:]
    m, s = measured(compiled), simulated(compiled)
    print(f"{'pass':5s} {'kernels':16s} {'measured ms':>12s} {'llmsim ms':>10s} {'error':>7s}")
    for phase in ("fwd", "bwd"):
        tm = ts = 0.0
        for fam in ("gemm", "attention", "bandwidth-bound"):
            a, b = m.get((phase, fam), 0.0) / 1e3, s.get((phase, fam), 0.0) / 1e3
            tm, ts = tm + a, ts + b
            print(f"{phase:5s} {fam:16s} {a:12.3f} {b:10.3f} {100 * (b - a) / a:+6.1f}%")
        print(f"{phase:5s} {'all':16s} {tm:12.3f} {ts:10.3f} {100 * (ts - tm) / tm:+6.1f}%")


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    main()
