"""A whole torchtitan Llama layer profiled on the H100 against llmsim's prediction of it, kernel
family by family.

The profile is what ``benchmarks/device/eager_layer.py`` recorded (committed as
``benchmarks/device/results/h100-sxm5-80gb-2026-11-26-eager-layer.json``: the kernels of three
Llama 3.1 8B layers, forward then backward, eager PyTorch and under ``torch.compile``, local
batch 2 x 8192 tokens). The simulated layer is the torchtitan Table 1 case
(``workloads/validation/torchtitan.yaml``) on one H100 SXM5 80GB, without FSDP or
recomputation, cut to three layers. Both are summed per pass of the middle layer into GEMMs,
attention and bandwidth-bound kernels. ``tests/unit/test_eager.py`` holds the bandwidth-bound
kernels, whose efficiencies come from kernels run alone, to the profiled layer;
``benchmarks/device/compare_layer.py`` prints every family.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml

from sim.config import default_topology_name, load_case_records, load_topology
from sim.config.presets import preset_folder
from sim.runner import Run, simulate
from sim.types import Stream

CASES = {False: ("torchtitan_h100_t1_llama31_8b_8gpu_FSDP", "llama31_8b_b2_s8192"),
         True: ("torchtitan_h100_t1_llama31_8b_8gpu_FSDP_torchcompile", "llama31_8b_b2_s8192_compiled")}
"""Eager (``False``) or compiled (``True``) -> (the validation case simulated, the profiled case)."""
FAMILIES = ("gemm", "attention", "bandwidth-bound")
"""The kernel families the times are summed into."""


def family_measured(aten_op: str) -> str:
    """The family of a profiled kernel, by the ATen op that launched it."""
    if aten_op in ("aten::mm", "aten::addmm"):
        return "gemm"
    return "attention" if "flash_attention" in aten_op else "bandwidth-bound"


def family_simulated(name: str) -> str:
    """The family of a simulated compute span, by its name."""
    if name.startswith("attention"):
        return "attention"
    gemms = ("qkv", "proj", "fc1", "fc2", "wq", "wk", "wv", "wo", "w1", "w2", "w3")
    return "gemm" if name.split("-")[0] in gemms and not name.startswith(("norm",)) else "bandwidth-bound"


def measured(path: str | Path, compiled: bool = False) -> dict:
    """Per (pass, family), microseconds of the middle layer's kernels in the profile at ``path``."""
    case = CASES[compiled][1]
    with open(path) as fh:
        data = json.load(fh)
    layers = next(c["layers"] for c in data["summary"]["cases"] if c["case"] == case)
    rows = data["kernels"][case]
    out: dict = {}
    for phase in ("fwd", "bwd"):
        ks = [r for r in rows if r[0] == phase]
        per = len(ks) // layers
        for _, op, _, us in ks[per:2 * per]:  # the middle layer (the backward runs last to first)
            out[(phase, family_measured(op))] = out.get((phase, family_measured(op)), 0.0) + us
    return out


def layer_run(compiled: bool = False) -> Run:
    """The profiled layer simulated: the torchtitan case on one H100, three layers, no FSDP or
    recomputation, a local batch of 2."""
    cases = yaml.safe_load((preset_folder("workloads/validation") / "torchtitan.yaml").read_text())
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
    return simulate(w, load_topology(default_topology_name(w.system.gpu.name)))


def simulated(run: Run) -> dict:
    """Per (pass, family), microseconds of the middle layer's compute spans of :func:`layer_run`."""
    out: dict = {}
    for s in run.result.spans:
        a = dict(s.args)
        if s.stream is not Stream.COMPUTE or a.get("layer") != 1:
            continue
        key = ("fwd" if a["phase"] == "fwd" else "bwd", family_simulated(s.name))
        out[key] = out.get(key, 0.0) + (s.end_s - s.start_s) * 1e6
    return out
