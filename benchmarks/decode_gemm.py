"""Derive the A100's share of HBM bandwidth in a bandwidth-bound GEMM from gpt-fast's decode rate.

::

    python benchmarks/decode_gemm.py [--json PATH]

prints what :mod:`sim.derive.decode_gemm` derives from gpt-fast's published Llama-2-7B decode
rate on an A100 under CUDA graphs (the share the catalogue holds, ``A100_GEMM_MEM_EFF``), then
llmsim's decode rate on the catalogue's A100 for the README's tensor-parallel rows beside the
README's first and later figures (checks: nothing is derived from them; the later figures were
made with PyTorch's intra-node all-reduce, faster than the NCCL all-reduces llmsim prices).
``tests/unit/test_hardware.py`` checks the catalogue against the derivation.
"""

from __future__ import annotations

import argparse
import json
import sys

from sim.derive.decode_gemm import (
    PUBLISHED_TOKENS_PER_S,
    SOURCE,
    TP_TOKENS_PER_S,
    decode_tokens_per_s,
    derive_gemm_memory_efficiency,
)
from sim.hardware import get_gpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    a100 = get_gpu("A100-SXM4-80GB")
    derived = derive_gemm_memory_efficiency()
    print(f"source: {SOURCE}")
    print(f"Llama-2-7B, 1 GPU: {PUBLISHED_TOKENS_PER_S} tokens/s published -> GEMM share of HBM bandwidth "
          f"{derived:.4f} (the catalogue holds {a100.gemm_memory_efficiency}; streaming kernels "
          f"{a100.memory_efficiency})\n")
    print(f"{'model':<11} {'TP':>3} {'llmsim tok/s':>13} {'first':>8} {'error':>7} {'later':>8} {'error':>7}")
    rows = []
    for (model, tp), (first, later) in TP_TOKENS_PER_S.items():
        rate = decode_tokens_per_s(a100, model, tp)
        e1, e2 = (rate - first) / first * 100, (rate - later) / later * 100
        print(f"{model:<11} {tp:>3} {rate:>13.1f} {first:>8.2f} {e1:>+6.1f}% {later:>8.2f} {e2:>+6.1f}%")
        rows.append({"model": model, "tp": tp, "llmsim_tokens_per_s": round(rate, 3), "first_tokens_per_s": first,
                     "later_tokens_per_s": later, "error_first_pct": round(e1, 2), "error_later_pct": round(e2, 2)})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"source": SOURCE, "derived_gemm_memory_efficiency": derived,
                       "catalogue_gemm_memory_efficiency": a100.gemm_memory_efficiency, "rows": rows},
                      fh, indent=2, sort_keys=True)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
