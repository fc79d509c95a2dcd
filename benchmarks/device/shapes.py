"""Collect the distinct GEMM and attention shapes of the Hopper validation cases.

Writes ``benchmarks/device/shapes.json``: each GEMM ``(m, n, k, batch, dtype)`` and each
attention ``(batch, heads, kv_heads, seq, head_dim, causal, backward, fraction)`` with the
time the analytical model gives it and how much of the cases' compute time it accounts for, so
``kernels.py`` measures the shapes that matter on a real H100 and ``compare.py`` sets the two
side by side.

    python benchmarks/device/shapes.py [--max-gemms 220]
"""

from __future__ import annotations

import argparse
import glob
import json
from collections import defaultdict
from pathlib import Path

from sim.config import load_topology
from sim.config.topology import default_topology_name
from sim.config.workload import load_case_records
from sim.costs.compute import attention_time_s, gemm_time_s
from sim.topology.build import build_topology
from sim.topology.routing import Fabric
from sim.workload.ops import AttentionOp, GemmOp
from sim.workload.taskgraph import build_program

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-gemms", type=int, default=220)
    ap.add_argument("--max-attention", type=int, default=60)
    ap.add_argument("--out", default=str(HERE / "shapes.json"))
    a = ap.parse_args()
    gemm_s: dict[tuple, float] = defaultdict(float)
    attn_s: dict[tuple, float] = defaultdict(float)
    cases = 0
    for path in sorted(glob.glob(str(ROOT / "workloads/validation/*.yaml"))):
        for rec in load_case_records(path):
            w = rec.workload
            if w is None or not w.system.gpu.name.startswith(("H100", "H200")):
                continue
            cases += 1
            topo = load_topology(w.system.topology or default_topology_name(w.system.gpu.name))
            fabric = Fabric(build_topology(topo, w.system.num_gpus))
            prog = build_program(w, representative=True, node_of=fabric.node_of,
                                 local_gpu_of=fabric.local_gpu)
            gpu = w.system.gpu
            for t in prog.tasks:
                op = t.op
                if isinstance(op, GemmOp):
                    key = (op.m, op.n, op.k, op.batch, op.dtype.value)
                    gemm_s[key] += gemm_time_s(gpu, op)
                elif isinstance(op, AttentionOp):
                    key = (op.batch, op.heads, op.kv_heads, op.seq, op.head_dim, op.causal,
                           op.backward, op.fraction)
                    attn_s[key] += attention_time_s(gpu, op)
    from sim.hardware import get_gpu
    from sim.types import Dtype
    h100 = get_gpu("H100")
    total = sum(gemm_s.values())
    gemms = sorted(gemm_s.items(), key=lambda kv: -kv[1])[: a.max_gemms]
    atts = sorted(attn_s.items(), key=lambda kv: -kv[1])[: a.max_attention]
    out = {
        "cases": cases,
        "gemm_share_covered": sum(v for _, v in gemms) / total,
        "gemms": [{"m": m, "n": n, "k": k, "batch": b, "dtype": d,
                   "model_s": gemm_time_s(h100, GemmOp(m, n, k, Dtype(d), b)),
                   "share": v / total} for (m, n, k, b, d), v in gemms],
        "attention": [{"batch": b, "heads": h, "kv_heads": kv, "seq": s, "head_dim": hd,
                       "causal": c, "backward": bw, "fraction": fr,
                       "model_s": attention_time_s(h100, AttentionOp(b, h, kv, s, hd, c, bw, Dtype.BF16, fr))}
                      for (b, h, kv, s, hd, c, bw, fr), _ in atts],
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{cases} cases, {len(gemm_s)} GEMM shapes ({len(gemms)} kept, "
          f"{out['gemm_share_covered']:.1%} of GEMM time), {len(attn_s)} attention shapes -> {a.out}")


if __name__ == "__main__":
    main()
