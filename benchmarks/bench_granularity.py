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

import argparse
import json
import subprocess
import sys
from pathlib import Path

import sim

WORKLOADS = Path(sim.__file__).resolve().parent.parent / "workloads"


def _one(preset: str, granularity: str, repeat: int) -> dict:
    """Run in a fresh process: the cold run, then ``repeat`` warm ones."""
    import gc
    import time

    from sim.config import load_workload_with_notes
    from sim.runner import simulate
    from sim.topology.choice import place_workload

    workload, notes = load_workload_with_notes(preset)
    topology = place_workload(workload, None, notes).topology
    walls = []
    for _ in range(repeat + 1):
        gc.collect()
        t0 = time.perf_counter()
        run = simulate(workload, topology, notes=list(notes), granularity=granularity)
        walls.append(time.perf_counter() - t0)
        peak = max(c.value for c in run.result.counters if c.name == "memory")
        out = {"iteration_time_s": run.result.makespan_s, "tasks": len(run.program.tasks),
               "engine_events": run.result.events, "peak_memory_bytes": peak}
        run = None
    return {**out, "cold_wall_s": walls[0], "warm_wall_s": min(walls[1:])}


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


def _table(rows: list[dict]) -> str:
    head = (f"{'preset':<16} {'granularity':<11} {'iter s':>10} {'rel diff':>9} {'peak mem eq':>11} "
            f"{'tasks':>9} {'cold s':>7} {'x':>5} {'warm s':>7} {'x':>5}")
    lines = [head, "-" * len(head)]
    for r in rows:
        op = r["op"]
        for g in ("op",) + COARSE:
            c = r[g]
            same = "yes" if op["peak_memory_bytes"] == c["peak_memory_bytes"] else "no"
            diff = f"{100 * c['relative_difference']:>+8.3f}%" if g != "op" else f"{'':>9}"
            lines.append(f"{r['preset'] if g == 'op' else '':<16} {g:<11} {c['iteration_time_s']:>10.4f} {diff} "
                         f"{same if g != 'op' else '':>11} {c['tasks']:>9,} {c['cold_wall_s']:>7.3f} "
                         f"{c.get('cold_speedup', 1.0):>5.1f} {c['warm_wall_s']:>7.3f} "
                         f"{c.get('warm_speedup', 1.0):>5.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("presets", nargs="*", help="workload presets or files (default: workloads/*.yaml)")
    ap.add_argument("--repeat", type=int, default=3, help="warm runs per preset; the best is kept (default 3)")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    presets = args.presets or sorted(p.stem for p in WORKLOADS.glob("*.yaml"))
    rows = []
    for preset in presets:
        rows.append(bench(preset, args.repeat))
        print(f"  {preset}: done", file=sys.stderr, flush=True)
    print(_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"llmsim_version": sim.__version__, "repeat": args.repeat,
                                               "presets": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
