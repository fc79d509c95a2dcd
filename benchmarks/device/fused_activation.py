"""Time the fused activation kernels of a Megatron-Core MLP, forward and backward, on the GPU
this runs on, against a plain copy.

Megatron-Core fuses the MLP's activation with ``jit_fuser``, which is ``torch.compile`` from
PyTorch 2.2 on (``megatron/core/jit.py``), and writes the backward by hand
(``megatron/core/fusions/fused_bias_swiglu.py``, ``fused_bias_gelu.py``). A training step
compiles each for its one shape. The functions below are the same math, written from the
formulas:

* SwiGLU: forward ``silu(y1) * y2`` over ``y = [y1, y2]`` (read 2N, write N elements);
  backward ``[g * s * (1 + y1 (1 - s)) * y2, g * silu(y1)]`` with ``s = sigmoid(y1)`` (read g
  and y, 3N; write 2N);
* bias GELU (tanh approximation, as ``bias_gelu``): forward over ``x = y + b`` (read N, write N);
  backward the tanh formula's derivative times g (read g and y, 2N; write N).

Each kernel is compiled for its shape alone (``torch._dynamo.reset()`` between shapes,
``dynamic=False``), run 20 times to warm up, then timed with CUDA events over 100 runs, five
times; the median is kept. The reference is ``dst.copy_(src)`` of 1 GiB (read and write). The
figures llmsim reads are each kernel's achieved bandwidth over the copy's
(``sim/workload/nongemm.py``).

It runs on a lent GPU machine only (needs torch); nothing in llmsim imports it.

    python benchmarks/device/fused_activation.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess

import torch
import torch.nn.functional as F

TOKENS = 8192
"""Tokens of one micro-batch (sequence 8192 x micro-batch 1, or 2048 x 4)."""

WIDTHS = (1792, 3584, 7168, 14336, 28672)
"""The MLP's local width: Llama 3 8B's 14,336 at TP 8, 4, 2, 1, and 70B's 28,672 at TP 1."""


def swiglu(y):
    y1, y2 = torch.chunk(y, 2, -1)
    return F.silu(y1) * y2


def swiglu_back(g, y):
    y1, y2 = torch.chunk(y, 2, -1)
    s = torch.sigmoid(y1)
    return torch.cat((g * s * (1 + y1 * (1 - s)) * y2, g * F.silu(y1)), -1)


def bias_gelu(bias, y):
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def bias_gelu_back(g, bias, y):
    x = bias + y
    t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t)
    return ff * g


def timed_ms(fn, *args) -> float:
    for _ in range(20):
        fn(*args)
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(100):
            fn(*args)
        b.record()
        torch.cuda.synchronize()
        runs.append(a.elapsed_time(b) / 100)
    return statistics.median(runs)


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.mem,power.limit",
                               "--format=csv,noheader"], check=False, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    dev, bf16 = "cuda", torch.bfloat16
    src = torch.empty(2**29, dtype=bf16, device=dev).normal_()
    dst = torch.empty_like(src)
    copy_ms = timed_ms(dst.copy_, src)
    copy = gbps(2 * src.numel() * 2, copy_ms)
    del src, dst
    rows = []
    for f in WIDTHS:
        n = TOKENS * f  # elements of the activation's output
        torch._dynamo.reset()
        y = torch.randn(TOKENS, 2 * f, dtype=bf16, device=dev)
        g = torch.randn(TOKENS, f, dtype=bf16, device=dev)
        fwd = torch.compile(swiglu, dynamic=False)
        bwd = torch.compile(swiglu_back, dynamic=False)
        t_f, t_b = timed_ms(fwd, y), timed_ms(bwd, g, y)
        rows.append({"kernel": "swiglu", "tokens": TOKENS, "width": f, "forward_ms": t_f, "backward_ms": t_b,
                     "forward_bytes": 3 * n * 2, "backward_bytes": 5 * n * 2,
                     "forward_over_copy": gbps(3 * n * 2, t_f) / copy,
                     "backward_over_copy": gbps(5 * n * 2, t_b) / copy})
        del y, g
        torch._dynamo.reset()
        y = torch.randn(TOKENS, f, dtype=bf16, device=dev)
        b = torch.randn(f, dtype=bf16, device=dev)
        g = torch.randn(TOKENS, f, dtype=bf16, device=dev)
        fwd = torch.compile(bias_gelu, dynamic=False)
        bwd = torch.compile(bias_gelu_back, dynamic=False)
        t_f, t_b = timed_ms(fwd, b, y), timed_ms(bwd, g, b, y)
        rows.append({"kernel": "bias_gelu", "tokens": TOKENS, "width": f, "forward_ms": t_f, "backward_ms": t_b,
                     "forward_bytes": 2 * n * 2, "backward_bytes": 3 * n * 2,
                     "forward_over_copy": gbps(2 * n * 2, t_f) / copy,
                     "backward_over_copy": gbps(3 * n * 2, t_b) / copy})
        del y, b, g
        print(rows[-2], rows[-1], flush=True)
    out = {"device": torch.cuda.get_device_name(), "nvidia_smi": smi(), "torch": torch.__version__,
           "copy_gb_per_s": copy, "copy_ms": copy_ms, "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fused_activation.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}))
    for r in rows:
        print(f"{r['kernel']:9s} width {r['width']:6d}  forward {r['forward_over_copy']:.3f}  "
              f"backward {r['backward_over_copy']:.3f} of the copy's bandwidth")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
