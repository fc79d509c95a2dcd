"""Measure the bandwidth-bound kernels of a layer and batched (MoE expert) GEMMs on this GPU.

Companion of ``kernels.py`` (same timing: CUDA-graph replays over rotating inputs). Writes
``memory_and_experts.json`` to ``--out``:

* ``memory``: RMSNorm, SwiGLU's ``silu(a) * b``, a residual add, a BF16 -> FP8 cast and a
  plain copy over ``tokens x width`` BF16 tensors, each with the bytes it must move (every
  input read once, every output written once) and the achieved bytes/s;
* ``experts``: ``torch.bmm`` over ``experts`` groups of ``tokens x n x k`` (the grouped GEMM
  of a MoE layer's local experts under balanced routing), and the single GEMM of the same
  total FLOPs for comparison.

    python benchmarks/device/memory_and_experts.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import smi, time_fn  # noqa: E402


def memory_kernels(out: list) -> None:
    for tokens in (4096, 8192, 16384, 32768):
        for width in (4096, 8192, 14336):
            n = tokens * width
            xs = [torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            ys = [torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            wgt = torch.ones(width, device="cuda", dtype=torch.bfloat16)
            cases = {
                # the closure runs within this iteration (B023)
                "rmsnorm": (lambda i: F.rms_norm(xs[i % 2], (width,), wgt), 2 * n * 2),  # noqa: B023
                "swiglu": (lambda i: F.silu(xs[i % 2]) * ys[i % 2], 3 * n * 2),  # noqa: B023 (called in this iteration)
                "add": (lambda i: xs[i % 2] + ys[i % 2], 3 * n * 2),  # noqa: B023 (called in this iteration)
                # the closure runs within this iteration (B023)
                "cast_fp8": (lambda i: xs[i % 2].to(torch.float8_e4m3fn), n * 3),  # noqa: B023
                "copy": (lambda i: xs[i % 2].clone(), 2 * n * 2),  # noqa: B023 (called in this iteration)
            }
            for name, (fn, nbytes) in cases.items():
                try:
                    med = time_fn(fn)[0]
                    out.append({"kernel": name, "tokens": tokens, "width": width, "bytes": nbytes,
                                "median_s": med, "bytes_per_s": nbytes / med})
                except Exception as exc:  # noqa: BLE001
                    out.append({"kernel": name, "tokens": tokens, "width": width, "error": repr(exc)[:200]})
            torch.cuda.empty_cache()


def expert_gemms(out: list) -> None:
    # (local experts, tokens per expert, n, k): Mixtral-like (h 4096, f 14336), DeepSeek-V3-like
    # (h 7168, f 2048: gate+up 4096), fine-grained small-batch cases
    shapes = []
    for experts in (1, 4, 8, 32):
        for tokens in (256, 1024, 4096, 8192):
            shapes.append((experts, tokens, 4096, 7168))      # DeepSeek fc1 (gate + up)
            shapes.append((experts, tokens, 7168, 2048))      # DeepSeek fc2
            shapes.append((experts, tokens, 28672, 4096))     # Mixtral fc1 (gate + up)
    for e, m, n, k in shapes:
        if e * (m * k + n * k + m * n) * 2 > 20e9:
            continue
        a = torch.randn(e, m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)
        try:
            med = time_fn(lambda i: torch.bmm(a, b.transpose(1, 2)))[0]  # noqa: B023 (called in this iteration)
            flops = 2.0 * e * m * n * k
            row = {"experts": e, "tokens": m, "n": n, "k": k, "median_s": med, "tflops": flops / med / 1e12}
            a1 = torch.randn(e * m, k, device="cuda", dtype=torch.bfloat16)
            b1 = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            row["single_gemm_s"] = time_fn(lambda i: F.linear(a1, b1))[0]  # noqa: B023 (called in this iteration)
        except Exception as exc:  # noqa: BLE001
            row = {"experts": e, "tokens": m, "n": n, "k": k, "error": repr(exc)[:200]}
        out.append(row)
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    t0 = time.time()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "smi_before": smi(),
           "memory": [], "experts": []}
    memory_kernels(res["memory"])
    print("memory kernels", f"{time.time() - t0:.0f}s", flush=True)
    expert_gemms(res["experts"])
    res["smi_after"] = smi()
    res["wall_s"] = time.time() - t0
    with open(os.path.join(a.out, "memory_and_experts.json"), "w") as f:
        json.dump(res, f, indent=1)
    for r in res["memory"]:
        if r["tokens"] == 8192 and "bytes_per_s" in r:
            print(f"{r['kernel']:10} {r['width']:6} {r['bytes_per_s'] / 1e12:.2f} TB/s")
    for r in res["experts"]:
        if "tflops" in r:
            print(f"experts {r['experts']:3} tokens {r['tokens']:5} n {r['n']:6} k {r['k']:5} "
                  f"{r['tflops']:.0f} TF/s  (one GEMM of the same FLOPs: "
                  f"{2 * r['experts'] * r['tokens'] * r['n'] * r['k'] / r['single_gemm_s'] / 1e12:.0f})")
    print(f"wall {res['wall_s']:.0f}s", flush=True)


if __name__ == "__main__":
    main()
