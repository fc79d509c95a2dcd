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

from harness import Column, Table, best_of, make_parser, write_json

from sim.inference.config import InferenceArgs, build_spec
from sim.inference.report import make_inference_report
from sim.inference.runner import simulate_inference

CASES = (
    InferenceArgs("llama2-7b", "A100-SXM4-80GB", tp=1, prompt=200, generate=200),
    InferenceArgs("llama2-70b", "A100-SXM4-80GB", tp=8, prompt=200, generate=200),
    InferenceArgs("llama2-70b", "A100-SXM4-80GB", tp=4, pp=2, prompt=200, generate=200),
    InferenceArgs("llama3-70b", "H100-SXM5-80GB", tp=2, prompt=500, generate=2000, dtype="fp8"),
)


TABLE = Table((Column("model", 12, align="<"), Column("gpu", 16, align="<"), Column("tp", 3), Column("pp", 3),
               Column("in/out", 10), Column("granularity", 12, align="<", sep="  "), Column("tasks", 9, ","),
               Column("events", 9, ","), Column("wall s", 8, ".2f"), Column("e2e s", 10, ".4f")), sep="", rule=False)


def main() -> None:
    ap = make_parser(__doc__, repeat=1)
    a = ap.parse_args()
    rows = []
    print(TABLE.heading())
    for args in CASES:
        spec, topo, _ = build_spec(args)
        for g in ("op", "layer", "step"):
            if g == "op" and args.generate > 1000:
                continue
            t = best_of(lambda spec=spec, topo=topo, g=g:
                        make_inference_report(simulate_inference(spec, topo, granularity=g)), a.repeat)
            best, rep = t.best_s, t.result
            row = {"model": spec.name, "gpu": spec.gpu.name, "tp": spec.tp, "pp": spec.pp,
                   "prompt_tokens": spec.prompt_tokens, "generate_tokens": spec.generate_tokens, "granularity": g,
                   "tasks": rep.tasks, "events": rep.events, "wall_s": best, "e2e_latency_s": rep.e2e_latency_s}
            rows.append(row)
            print(TABLE.row((spec.name, spec.gpu.name, spec.tp, spec.pp, f"{spec.prompt_tokens}/{spec.generate_tokens}",
                             g, rep.tasks, rep.events, best, rep.e2e_latency_s)))
    write_json(a.json, rows, fields=())

if __name__ == "__main__":
    main()
