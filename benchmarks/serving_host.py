"""Derive the per-step host work of TensorRT-LLM's Python runtime from its published benchmark.

::

    python benchmarks/serving_host.py [--json PATH]

prints, for the published GPT-350M request of TensorRT-LLM's Python-runtime benchmark (A100,
float16, 60 prompt and 20 output tokens; :mod:`sim.derive.serving_host` quotes the figures and
their source), at batch 1, 8 and 64: the measured latency, llmsim's latency on stack
``nemo-trtllm-python`` with no host work per step, the per-step work the batch-1 figure gives,
and llmsim's latency on the shipped stack with its error (batch 8 and 64 are checks: nothing is
derived from them). ``tests/unit/test_inference_host.py`` checks that the shipped stack holds
what this derives.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from sim.derive.serving_host import GENERATE_TOKENS, PUBLISHED_MS, SOURCE, derive_step_s, simulated_latency_s
from sim.inference.stack import load_serving_stack

STACK = "nemo-trtllm-python"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    shipped = load_serving_stack(STACK)
    bare = dataclasses.replace(shipped, step_s=0.0, request_s=0.0)
    derived = derive_step_s(shipped)
    print(f"source: {SOURCE}")
    print(f"derived host work per step: {derived * 1e3:.4f} ms "
          f"(stack {STACK} ships {shipped.step_s * 1e3:.4f} ms)\n")
    print(f"{'batch':>5} {'measured ms':>12} {'no step work ms':>16} {'shipped stack ms':>17} {'error':>7}")
    rows = []
    for batch, measured in PUBLISHED_MS.items():
        bare_ms = simulated_latency_s(bare, batch) * 1e3
        with_ms = simulated_latency_s(shipped, batch) * 1e3
        err = (with_ms - measured) / measured * 100
        print(f"{batch:>5} {measured:>12.3f} {bare_ms:>16.3f} {with_ms:>17.3f} {err:>+6.1f}%")
        rows.append({"batch": batch, "measured_ms": measured, "no_step_work_ms": round(bare_ms, 4),
                     "shipped_stack_ms": round(with_ms, 4), "error_pct": round(err, 2)})
    print(f"\n(measured - no step work) / {GENERATE_TOKENS} steps at batch 1 = the derived figure; "
          "batch 8 and 64 are checks")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"source": SOURCE, "derived_step_s": derived, "shipped_step_s": shipped.step_s,
                       "rows": rows}, fh, indent=2, sort_keys=True)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
