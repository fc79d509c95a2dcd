"""Wall time of ``llmsim infer`` per granularity: tasks, engine events, seconds.

::

    python benchmarks/bench_inference.py                 # Llama 2 7B TP 1 and 70B TP 8 on A100, 200 in / 200 out
    python benchmarks/bench_inference.py --repeat 3 --json inference.json

Each configuration is simulated at ``op``, ``layer`` and ``step`` granularity (they give the
same latencies, which this script checks and prints); the wall time is the best of ``--repeat``
runs of :func:`sim.inference.simulate_inference` plus the report. Figures depend on the machine
and its load.
"""

from __future__ import annotations

import argparse
import json
import time

from sim.inference.config import InferenceArgs, build_spec
from sim.inference.report import make_inference_report
from sim.inference.runner import simulate_inference

CASES = (
    InferenceArgs("llama2-7b", "A100-SXM4-80GB", tp=1, prompt=200, generate=200),
    InferenceArgs("llama2-70b", "A100-SXM4-80GB", tp=8, prompt=200, generate=200),
    InferenceArgs("llama2-70b", "A100-SXM4-80GB", tp=4, pp=2, prompt=200, generate=200),
    InferenceArgs("llama3-70b", "H100-SXM5-80GB", tp=2, prompt=500, generate=2000, dtype="fp8"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", metavar="PATH")
    a = ap.parse_args()
    rows = []
    print(f"{'model':<12}{'gpu':<16}{'tp':>3}{'pp':>3}{'in/out':>10}  {'granularity':<12}{'tasks':>9}{'events':>9}"
          f"{'wall s':>8}{'e2e s':>10}")
    for args in CASES:
        spec, topo, _ = build_spec(args)
        for g in ("op", "layer", "step"):
            if g == "op" and args.generate > 1000:
                continue
            best, rep = float("inf"), None
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                rep = make_inference_report(simulate_inference(spec, topo, granularity=g))
                best = min(best, time.perf_counter() - t0)
            row = {"model": spec.name, "gpu": spec.gpu.name, "tp": spec.tp, "pp": spec.pp,
                   "prompt_tokens": spec.prompt_tokens, "generate_tokens": spec.generate_tokens, "granularity": g,
                   "tasks": rep.tasks, "events": rep.events, "wall_s": best, "e2e_latency_s": rep.e2e_latency_s}
            rows.append(row)
            print(f"{spec.name:<12}{spec.gpu.name:<16}{spec.tp:>3}{spec.pp:>3}"
                  f"{f'{spec.prompt_tokens}/{spec.generate_tokens}':>10}  {g:<12}{rep.tasks:>9,}{rep.events:>9,}"
                  f"{best:>8.2f}{rep.e2e_latency_s:>10.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
