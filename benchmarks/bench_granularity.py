"""Op against layer and chunk granularity on the workload presets: predicted iteration time and
the wall time of ``sim.runner.simulate``.

::

    python benchmarks/bench_granularity.py                      # every workloads/*.yaml
    python benchmarks/bench_granularity.py tiny gpt3-175b-1024  # just these
    python benchmarks/bench_granularity.py --repeat 5 --json granularity.json

Two wall times per granularity: ``cold`` is the first ``simulate`` of a fresh Python process
(the topology built and routed from scratch), ``warm`` the best of ``--repeat`` further runs in
that process, where the runner's fabric cache holds the routes, as it does for every
configuration after the first in a design-space sweep on one topology. Figures depend on the
machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness import Column, Table, best_of, make_parser, presets_or_all, write_json


def _one(preset: str, granularity: str, repeat: int) -> dict:
    """Run in a fresh process: the cold run, then ``repeat`` warm ones."""
    from sim.config import load_workload_with_notes
    from sim.runner import simulate
    from sim.topology.choice import place_workload

    workload, notes = load_workload_with_notes(preset)
    topology = place_workload(workload, None, notes).topology

    def run():
        return simulate(workload, topology, notes=list(notes), granularity=granularity)

    cold_s = best_of(run, 1).best_s
    warm = best_of(run, repeat)
    result = warm.result.result
    peak = max(c.value for c in result.counters if c.name == "memory")
    return {"iteration_time_s": result.makespan_s, "tasks": len(warm.result.program.tasks),
            "engine_events": result.events, "peak_memory_bytes": peak, "cold_wall_s": cold_s,
            "warm_wall_s": warm.best_s}


COARSE = ("layer", "chunk")


def bench(preset: str, repeat: int) -> dict:
    row = {"preset": preset}
    for g in ("op",) + COARSE:
        code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                f"from bench_granularity import _one; print(json.dumps(_one({preset!r}, {g!r}, {repeat})))")
        res = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        row[g] = json.loads(res.stdout.strip().splitlines()[-1])
    op = row["op"]
    for g in COARSE:
        c = row[g]
        c["relative_difference"] = c["iteration_time_s"] / op["iteration_time_s"] - 1.0
        c["cold_speedup"] = op["cold_wall_s"] / c["cold_wall_s"]
        c["warm_speedup"] = op["warm_wall_s"] / c["warm_wall_s"]
    return row


TABLE = Table((Column("preset", 16, align="<"), Column("granularity", 11, align="<"), Column("iter s", 10, ".4f"),
               Column("rel diff", 9), Column("peak mem eq", 11), Column("tasks", 9, ","), Column("cold s", 7, ".3f"),
               Column("x", 5, ".1f"), Column("warm s", 7, ".3f"), Column("x", 5, ".1f")))


def _table(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        op = r["op"]
        for g in ("op",) + COARSE:
            c = r[g]
            same = "yes" if op["peak_memory_bytes"] == c["peak_memory_bytes"] else "no"
            diff = f"{100 * c['relative_difference']:>+8.3f}%" if g != "op" else ""
            lines.append((r["preset"] if g == "op" else "", g, c["iteration_time_s"], diff,
                          same if g != "op" else "", c["tasks"], c["cold_wall_s"], c.get("cold_speedup", 1.0),
                          c["warm_wall_s"], c.get("warm_speedup", 1.0)))
    return TABLE.format(lines)


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, repeat=3, repeat_help="warm runs per preset; the best is kept (default 3)",
                     presets=True)
    args = ap.parse_args(argv)
    presets = presets_or_all(args.presets)
    rows = []
    for preset in presets:
        rows.append(bench(preset, args.repeat))
        print(f"  {preset}: done", file=sys.stderr, flush=True)
    print(_table(rows))
    write_json(args.json, {"repeat": args.repeat, "presets": rows}, fields=("llmsim_version",))
    return 0


if __name__ == "__main__":
    sys.exit(main())
