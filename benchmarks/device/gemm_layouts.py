"""Do backward GEMMs run as fast as forward ones of the same shape on this GPU? (needs torch)

``kernels.py`` timed every GEMM as a forward linear layer computes it, ``Y = X @ W^T``
(``F.linear``: both operands contiguous along the reduced dimension K). A layer's backward
stores them otherwise: the input gradient ``dX = dY @ W`` reads the weight as it is (its
operand contiguous along N), the weight gradient ``dW = dY^T @ X`` reads the output gradient
transposed (contiguous along M); llmsim prices all three from the same curve by FLOPs. This
times the BF16 shapes of the validation cases with the most time
(``shapes.json``) in each of the three layouts, with ``kernels.py``'s timing (CUDA-graph
replays over rotating inputs), and writes ``gemm_layouts.json`` to ``--out``. FP8 GEMMs on
Hopper take only the K-contiguous layout (Transformer Engine transposes their operands
first, which llmsim prices), so only BF16 is timed. It runs on a lent H100/H200 only;
nothing in llmsim imports it.

    python benchmarks/device/gemm_layouts.py --shapes benchmarks/device/shapes.json --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import n_sets, smi, time_fn  # noqa: E402


def _timed(make, op) -> float:
    """Median seconds of ``op(*pair)`` over rotating input pairs from ``make()``."""
    pairs = make()
    return time_fn(lambda i: op(*pairs[i % len(pairs)]))[0]


def layouts(m: int, n: int, k: int) -> dict:
    """Seconds per ``C[m, n] = A[m, k] B[k, n]`` with A and B stored three ways."""
    dev, dt = "cuda", torch.bfloat16
    nsets = n_sets((m * k + n * k) * 2)

    def pairs(a_shape, b_shape):
        return lambda: [(torch.randn(*a_shape, device=dev, dtype=dt), torch.randn(*b_shape, device=dev, dtype=dt))
                        for _ in range(nsets)]
    return {
        # forward (F.linear): A [m, k], B stored [n, k]
        "fwd_s": _timed(pairs((m, k), (n, k)), torch.nn.functional.linear),
        # input gradient: A [m, k], B stored [k, n] (the weight as it is)
        "dgrad_s": _timed(pairs((m, k), (k, n)), torch.matmul),
        # weight gradient: A stored [k, m] (the output gradient, tokens first), B stored [k, n]
        "wgrad_s": _timed(pairs((k, m), (k, n)), lambda a, b: torch.matmul(a.t(), b)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=48, help="the BF16 shapes with the most case time")
    ap.add_argument("--budget-s", type=float, default=150)
    a = ap.parse_args()
    t0 = time.time()
    shapes = json.load(open(a.shapes))
    bf16 = sorted((g for g in shapes["gemms"] if g["dtype"] == "bf16" and g["batch"] == 1),
                  key=lambda g: -g.get("share", 0.0))[:a.count]
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "smi_before": smi(), "rows": []}
    for g in bf16:
        if time.time() - t0 > a.budget_s:
            break
        m, n, k = g["m"], g["n"], g["k"]
        try:
            row = {"m": m, "n": n, "k": k, "share": g.get("share"), **layouts(m, n, k)}
        except Exception as exc:  # noqa: BLE001
            row = {"m": m, "n": n, "k": k, "error": repr(exc)[:200]}
        res["rows"].append(row)
        if "fwd_s" in row:
            print(m, n, k, f"dgrad/fwd {row['dgrad_s'] / row['fwd_s']:.3f}",
                  f"wgrad/fwd {row['wgrad_s'] / row['fwd_s']:.3f}",
                  f"{time.time() - t0:.0f}s", flush=True)
        torch.cuda.empty_cache()
    res["smi_after"] = smi()
    res["wall_s"] = time.time() - t0
    with open(f"{a.out}/gemm_layouts.json", "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
