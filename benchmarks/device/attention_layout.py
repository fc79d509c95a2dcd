"""Does the memory layout Megatron-LM hands its attention kernel slow it down? (needs torch)

llmsim prices fused attention from kernels timed on contiguous ``[b, h, s, d]`` tensors
(``kernels.py``). Megatron-LM and NeMo keep activations as ``[s, b, h*d]`` and take q, k and v
as views of one fused QKV projection's output, ``[s, b, groups, (heads/groups + 2), d]``
(``megatron/core/transformer/attention.py``, ``SelfAttention.get_query_key_value_tensors``),
so the attention kernel reads (and its backward writes) strided rows. This times cuDNN's and
FlashAttention-2's kernels (through ``torch.nn.functional.scaled_dot_product_attention``) on
the same shapes in three layouts:

* ``bhsd``: contiguous ``[b, h, s, d]`` (what ``kernels.py`` measured);
* ``sbhd``: q, k, v each a contiguous ``[s, b, h, d]`` tensor;
* ``qkv_interleaved``: q, k, v views of one ``[s, b, h, 3, d]`` tensor (MHA's fused QKV).

Kernel time is read from the CUDA profiler, summed over the attention kernels only (names with
``fmha``, ``flash``, ``cudnn`` or ``attention``; any layout copy torch adds is reported apart),
per call, forward and forward+backward. It runs on a lent H100/H200 only; nothing in llmsim
imports it.

    python benchmarks/device/attention_layout.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import smi  # noqa: E402

SHAPES = [  # (batch, heads, seq, head_dim): Llama 2 7B at TP 1 and TP 4, the 1.7B README model, GPT-3 heads
    (1, 32, 4096, 128), (1, 32, 16384, 128), (1, 8, 16384, 128), (1, 8, 32768, 128),
    (1, 16, 4096, 128), (1, 12, 2048, 128), (2, 32, 4096, 128),
]
ATTENTION_NAMES = ("fmha", "flash", "cudnn", "attention", "sdpa", "cutlass")


def tensors(layout: str, b: int, h: int, s: int, d: int):
    """q, k, v as [b, h, s, d] views (leaf tensors to take gradients of, the views)."""
    opts = dict(device="cuda", dtype=torch.bfloat16)
    if layout == "bhsd":
        leaves = [torch.randn(b, h, s, d, **opts, requires_grad=True) for _ in range(3)]
        return leaves, leaves
    if layout == "sbhd":
        leaves = [torch.randn(s, b, h, d, **opts, requires_grad=True) for _ in range(3)]
        return leaves, [x.permute(1, 2, 0, 3) for x in leaves]
    mixed = torch.randn(s, b, h, 3, d, **opts, requires_grad=True)
    return [mixed], [mixed[:, :, :, i, :].permute(1, 2, 0, 3) for i in range(3)]


def kernel_times(fn, calls: int) -> dict:
    """Per call: the attention kernels' time and every other kernel's, from the profiler."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    att = other = 0.0
    names = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = e.self_cuda_time_total
        if not t:
            continue
        is_att = any(k in e.key.lower() for k in ATTENTION_NAMES)
        if is_att:
            att += t
        else:
            other += t
        names[e.key[:90]] = round(t / calls, 2)
    return {"attention_us": att / calls, "other_us": other / calls, "kernels_us": names}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    t0 = time.time()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "smi_before": smi(), "rows": []}
    for backend, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        for (b, h, s, d) in SHAPES:
            for layout in ("bhsd", "sbhd", "qkv_interleaved"):
                leaves, (q, k, v) = tensors(layout, b, h, s, d)
                g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                row = {"backend": backend, "batch": b, "heads": h, "seq": s, "head_dim": d, "layout": layout}
                try:
                    with sdpa_kernel([be]):
                        def fwd():
                            with torch.no_grad():
                                # the closure runs within this iteration (B023)
                                F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: B023

                        def both():
                            # the closure runs within this iteration (B023)
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: B023
                            torch.autograd.grad(o, leaves, g)  # noqa: B023 (called in this iteration)
                        row["fwd"] = kernel_times(fwd, a.calls)
                        row["fwd_bwd"] = kernel_times(both, a.calls)
                except Exception as exc:  # noqa: BLE001
                    row["error"] = repr(exc)[:300]
                res["rows"].append(row)
                f = row.get("fwd", {}).get("attention_us")
                fb = row.get("fwd_bwd", {}).get("attention_us")
                print(backend, b, h, s, d, layout, f and round(f, 1), fb and round(fb, 1),
                      row.get("error", ""), f"{time.time() - t0:.0f}s", flush=True)
    res["smi_after"] = smi()
    res["wall_s"] = time.time() - t0
    with open(f"{a.out}/attention_layout.json", "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
