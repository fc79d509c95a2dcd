"""Simulator speed at frontier scale: the targets of the speed issue and the cost as a job grows.

::

    python benchmarks/bench_scale.py                 # the three targets and the growth table
    python benchmarks/bench_scale.py --skip-growth   # the targets only
    python benchmarks/bench_scale.py --json scale.json

Every case runs in a fresh child process (so its peak resident memory is its own) and keeps
the best wall time of ``--repeat`` runs in that process. It prints:

* **gpt3-175b-1024**: GPT-3 175B on 1,024 A100 (the preset), op level, simulated and its full
  Chrome trace written (``.json.gz``) as ``llmsim run --trace`` writes it, with the
  utilization counters of the busiest links (``sim.cli.run.LINK_COUNTERS``) -- target under 1 s;
* **Llama 3 405B on 16,384 H100**: TP 8, CP 1, PP 16, DP 128, global batch 2048, sequence
  8192 (the ``llama3-405b`` preset's model and GPU, 1F1B, selective recomputation with sequence
  parallelism and the distributed optimizer so that it fits), op level -- target under 5 s;
* **the same on 100,352 H100** (DP 784, 16 micro-batches per data-parallel rank, as above) --
  target under 10 s and under 2 GB of memory;
* **growth**: events, tasks and wall time as DP, PP, micro-batches and layers double from the
  16,384-GPU job.

Wall times are of :func:`sim.runner.simulate` (building the topology and routes, the program,
and running the engine); the first case adds writing the trace. The summary report
(:func:`sim.output.report.make_report`, what ``llmsim run`` prints) is timed apart, after them, and
left out of the totals the targets compare. Wall times depend on the machine and its load;
compare figures from one machine only.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path

from harness import Column, Table, make_parser, write_json

TARGETS_S = {"gpt3-175b-1024": 1.0, "llama3-405b-16k": 5.0, "llama3-405b-100k": 10.0}
MEMORY_TARGET_BYTES = 2e9
"""The 100,000-GPU job's memory target (2 GB)."""

BASE = {"dp": 128, "pp": 16, "micro_batches": 16, "layers": 126}
"""The 16,384-GPU Llama 3 405B job of the issue: TP 8, PP 16, DP 128, global batch 2048."""


def _llama_sets(dp: int, pp: int, micro_batches: int, layers: int) -> list[str]:
    return [f"parallel.pp={pp}", f"parallel.dp={dp}", "parallel.cp=1", "parallel.tp=8",
            f"system.num_gpus={8 * pp * dp}", f"parallel.global_batch_size={dp * micro_batches}",
            "parallel.micro_batch_size=1", "parallel.virtual_pipeline_stages=null", "parallel.schedule=1f1b",
            "dtype=bf16", "parallel.recompute=selective", "parallel.sequence_parallel=true",
            "parallel.distributed_optimizer=true", f"model.num_layers={layers}"]


def _case(preset: str, sets: list[str], trace: bool, repeat: int, out: mp.Queue) -> None:
    """Run in a child process: simulate ``repeat`` times and report the best."""
    from sim.cli.run import LINK_COUNTERS
    from sim.config import load_workload_with_notes
    from sim.output.report import make_report
    from sim.output.trace import write_chrome_trace
    from sim.runner import simulate
    from sim.topology.choice import place_workload

    workload, notes = load_workload_with_notes(preset, sets, None)
    topology = place_workload(workload, None, notes).topology
    best_sim, best_trace, best_report, run, size = float("inf"), 0.0, 0.0, None, 0
    with tempfile.TemporaryDirectory(prefix="llmsim-scale-") as tmp:
        path = Path(tmp) / "trace.json.gz"
        for _ in range(repeat):
            run = None
            gc.collect()
            t0 = time.perf_counter()
            run = simulate(workload, topology, notes=list(notes), link_counters=LINK_COUNTERS if trace else 0)
            t1 = time.perf_counter()
            if trace:
                write_chrome_trace(run.result, path, title="llmsim bench")
                size = path.stat().st_size
            t2 = time.perf_counter()
            make_report(run)
            t3 = time.perf_counter()
            if (t2 - t0) < best_sim + best_trace:
                best_sim, best_trace, best_report = t1 - t0, t2 - t1, t3 - t2
    assert run is not None
    out.put({"num_gpus": workload.system.num_gpus, "simulated_ranks": len(run.result.ranks),
             "tasks": len(run.program.tasks), "engine_events": run.result.events,
             "simulate_wall_s": best_sim, "trace_write_wall_s": best_trace, "report_wall_s": best_report,
             "trace_bytes": size,
             "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
             "iteration_time_s": run.result.makespan_s})


def run_case(name: str, preset: str, sets: list[str], trace: bool, repeat: int) -> dict:
    """``_case`` in a fresh process (spawned, so it inherits no memory)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_case, args=(preset, sets, trace, repeat, q))
    p.start()
    row = q.get()
    p.join()
    row["case"] = name
    row["wall_s"] = row["simulate_wall_s"] + row["trace_write_wall_s"]
    print(f"  {name}: {row['wall_s']:.2f} s", file=sys.stderr, flush=True)
    return row


def targets(repeat: int) -> list[dict]:
    rows = [run_case("gpt3-175b-1024", "gpt3-175b-1024", [], True, repeat),
            run_case("llama3-405b-16k", "llama3-405b", _llama_sets(**BASE), False, repeat),
            run_case("llama3-405b-100k", "llama3-405b", _llama_sets(**{**BASE, "dp": 784}), False, 1)]
    for r in rows:
        limit = TARGETS_S[r["case"]]
        r["target_s"] = limit
        r["met"] = r["wall_s"] < limit and (r["case"] != "llama3-405b-100k"
                                            or r["peak_rss_bytes"] < MEMORY_TARGET_BYTES)
    return rows


def growth(repeat: int) -> list[dict]:
    rows = [run_case("base", "llama3-405b", _llama_sets(**BASE), False, repeat)]
    for key in ("dp", "pp", "micro_batches", "layers"):
        params = {**BASE, key: 2 * BASE[key]}
        rows.append(run_case(f"2x {key}", "llama3-405b", _llama_sets(**params), False, repeat))
    base = rows[0]
    for r in rows:
        r["events_ratio"] = r["engine_events"] / base["engine_events"]
        r["tasks_ratio"] = r["tasks"] / base["tasks"]
        r["wall_ratio"] = r["simulate_wall_s"] / base["simulate_wall_s"]
    return rows


TARGETS_TABLE = Table((
    Column("case", 18, align="<"), Column("GPUs", 7, ","), Column("sim ranks", 9), Column("tasks", 8, ","),
    Column("events", 8, ","), Column("simulate s", 10, ".2f"), Column("trace s", 8, ".2f"), Column("total s", 8, ".2f"),
    Column("target s", 8, ".1f"), Column("peak RSS MB", 11, ",.0f"), Column("iter s", 8, ".3f"),
    Column("met", 3, align="<", sep="  "), Column("report s", 8, ".2f", sep="  ")))

GROWTH_TABLE = Table((
    Column("Llama 3 405B", 16, align="<"), Column("GPUs", 7, ","), Column("tasks", 8, ","), Column("events", 8, ","),
    Column("simulate s", 10, ".2f"), Column("x tasks", 8, ".2f"), Column("x events", 8, ".2f"),
    Column("x wall", 7, ".2f")))


def _fmt_targets(rows: list[dict]) -> str:
    return TARGETS_TABLE.format(
        (r["case"], r["num_gpus"], r["simulated_ranks"], r["tasks"], r["engine_events"], r["simulate_wall_s"],
         r["trace_write_wall_s"], r["wall_s"], r["target_s"], r["peak_rss_bytes"] / 1e6, r["iteration_time_s"],
         "yes" if r["met"] else "NO", r["report_wall_s"]) for r in rows)


def _fmt_growth(rows: list[dict]) -> str:
    return GROWTH_TABLE.format(
        (r["case"], r["num_gpus"], r["tasks"], r["engine_events"], r["simulate_wall_s"], r["tasks_ratio"],
         r["events_ratio"], r["wall_ratio"]) for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, repeat=2, repeat_help="runs per case, the best kept (default 2)")
    ap.add_argument("--skip-growth", action="store_true", help="only the three targets")
    args = ap.parse_args(argv)
    rows = targets(args.repeat)
    print(_fmt_targets(rows))
    grow = [] if args.skip_growth else growth(args.repeat)
    if grow:
        print()
        print(_fmt_growth(grow))
    write_json(args.json, {"repeat": args.repeat, "targets": rows, "growth": grow},
               fields=("llmsim_version", "python", "machine"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
