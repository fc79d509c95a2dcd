"""cuDNN's deterministic attention backward against its default one, on this GPU.

Megatron-LM's ``--deterministic-mode`` (its CI jobs run with it) makes Transformer Engine ask
cuDNN's fused attention for a deterministic backward on Hopper (``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0``;
TE keeps FusedAttention for deterministic training on sm90). llmsim has no figure for that
kernel on Hopper and prices it as the default backward. This times, through the cuDNN
frontend's Python graph API (``nvidia-cudnn-frontend``; its ``sdpa_backward`` takes
``use_deterministic_algorithm``), on the shapes of those CI jobs:

* the forward;
* the backward with ``use_deterministic_algorithm=False`` and ``True``;
* torch's ``scaled_dot_product_attention`` on its cuDNN backend, as a check that the frontend
  graph runs the kernels ``kernels.py`` measured.

Median of CUDA-event timings over repeated executions, after warm-up; causal, BF16, layout
``[b, s, h, d]``. It runs on a lent H100/H200 only; nothing in llmsim imports it.

    python benchmarks/device/attention_deterministic.py --out DIR [--shapes "b,hq,hk,s,d;..."]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import smi  # noqa: E402

SHAPES = [  # (batch, q heads, kv heads, seq, head_dim)
    (2, 8, 2, 8192, 128),    # Megatron-LM CI gpt3_7b TP 4, micro-batch 2
    (1, 32, 8, 8192, 128),   # the same at TP 1 (PP 4), micro-batch 1
    (1, 32, 32, 4096, 128),  # an MHA shape, for comparison
    (1, 8, 8, 16384, 128),
]


def timed(fn, reps: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def causal(kwargs: dict, cudnn) -> list[dict]:
    """The ways frontend versions spell a causal (top-left) mask, newest first."""
    return [dict(kwargs, diagonal_band_right_bound=0, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT),
            dict(kwargs, use_causal_mask=True)]


def build(graph, outputs, cudnn):
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    return torch.empty(graph.get_workspace_size(), device="cuda", dtype=torch.uint8)


def frontend_case(cudnn, handle, b, hq, hk, s, d) -> dict:
    dt = torch.bfloat16
    q = torch.randn(b, s, hq, d, device="cuda", dtype=dt).transpose(1, 2)   # [b, h, s, d] views of bshd
    k = torch.randn(b, s, hk, d, device="cuda", dtype=dt).transpose(1, 2)
    v = torch.randn(b, s, hk, d, device="cuda", dtype=dt).transpose(1, 2)
    o = torch.empty(b, s, hq, d, device="cuda", dtype=dt).transpose(1, 2)
    do = torch.randn(b, s, hq, d, device="cuda", dtype=dt).transpose(1, 2)
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    stats = torch.empty(b, hq, s, 1, device="cuda", dtype=torch.float32)
    scale = 1.0 / math.sqrt(d)
    out: dict = {}

    def graph():
        return cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                             compute_data_type=cudnn.data_type.FLOAT, handle=handle)

    last = None
    spellings = causal(dict(name="sdpa", generate_stats=True, attn_scale=scale), cudnn) + \
        causal(dict(name="sdpa", is_inference=False, attn_scale=scale), cudnn)
    for kw in spellings:
        try:
            g = graph()
            tq, tk, tv = g.tensor_like(q), g.tensor_like(k), g.tensor_like(v)
            to, ts = g.sdpa(q=tq, k=tk, v=tv, **kw)
            to.set_output(True).set_dim(o.size()).set_stride(o.stride())
            ts.set_output(True).set_data_type(cudnn.data_type.FLOAT)
            ws = build(g, None, cudnn)
            pack = {tq: q, tk: k, tv: v, to: o, ts: stats}
            out["fwd_s"] = timed(lambda: g.execute(pack, ws, handle=handle))  # noqa: B023 (called in this iteration)
            break
        except Exception as exc:  # noqa: BLE001
            last = repr(exc)[:300]
    else:
        out["fwd_error"] = last
        return out
    for det in (False, True):
        last = None
        for kw in causal(dict(name="sdpa_backward", attn_scale=scale, use_deterministic_algorithm=det), cudnn):
            try:
                g = graph()
                tq, tk, tv, to, tdo, ts = (g.tensor_like(x) for x in (q, k, v, o, do, stats))
                tdq, tdk, tdv = g.sdpa_backward(q=tq, k=tk, v=tv, o=to, dO=tdo, stats=ts, **kw)
                for t, x in ((tdq, dq), (tdk, dk), (tdv, dv)):
                    t.set_output(True).set_dim(x.size()).set_stride(x.stride())
                ws = build(g, None, cudnn)
                pack = {tq: q, tk: k, tv: v, to: o, tdo: do, ts: stats, tdq: dq, tdk: dk, tdv: dv}
                # the closure runs within this iteration (B023)
                out["bwd_deterministic_s" if det else "bwd_s"] = timed(lambda: g.execute(pack, ws, handle=handle))  # noqa: B023
                break
            except Exception as exc:  # noqa: BLE001
                last = repr(exc)[:300]
        else:
            out["bwd_deterministic_error" if det else "bwd_error"] = last
    return out


def torch_case(b, hq, hk, s, d) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dt = torch.bfloat16
    q = torch.randn(b, hq, s, d, device="cuda", dtype=dt, requires_grad=True)
    k = torch.randn(b, hq, s, d, device="cuda", dtype=dt, requires_grad=True)  # KV repeated to q's heads
    v = torch.randn(b, hq, s, d, device="cuda", dtype=dt, requires_grad=True)
    g = torch.randn(b, hq, s, d, device="cuda", dtype=dt)
    out = {}
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def both():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(o, (q, k, v), g)
        out["torch_fwd_s"] = timed(fwd)
        out["torch_fwd_bwd_s"] = timed(both)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="", help="b,hq,hk,s,d;... (default: SHAPES)")
    a = ap.parse_args()
    shapes = [tuple(map(int, x.split(","))) for x in a.shapes.split(";") if x] or SHAPES
    t0 = time.time()
    torch.backends.cudnn.version()  # load torch's cuDNN first: the frontend binds to the loaded library
    import cudnn
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn_torch": torch.backends.cudnn.version(),
           "cudnn_frontend": getattr(cudnn, "__version__", "?"),
           "cudnn_backend": getattr(cudnn, "backend_version", lambda: None)(),
           "smi_before": smi(), "rows": []}
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    for (b, hq, hk, s, d) in shapes:
        row = {"batch": b, "heads": hq, "kv_heads": hk, "seq": s, "head_dim": d}
        try:
            row.update(frontend_case(cudnn, handle, b, hq, hk, s, d))
        except Exception as exc:  # noqa: BLE001
            row["error"] = repr(exc)[:300]
        try:
            row.update(torch_case(b, hq, hk, s, d))
        except Exception as exc:  # noqa: BLE001
            row["torch_error"] = repr(exc)[:300]
        if row.get("bwd_s") and row.get("bwd_deterministic_s"):
            row["deterministic_over_default"] = row["bwd_deterministic_s"] / row["bwd_s"]
        res["rows"].append(row)
        print(json.dumps(row), f"{time.time() - t0:.0f}s", flush=True)
    res["smi_after"] = smi()
    res["wall_s"] = time.time() - t0
    with open(f"{a.out}/attention_deterministic.json", "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
