"""Where the time of the op-level GPT-3 175B case goes, against the least each part can cost.

::

    python benchmarks/bench_floor.py [--repeat 3] [--json floor.json]

The speed issue's first target is GPT-3 175B on 1,024 A100 (the ``gpt3-175b-1024`` preset),
simulated at op level with its full Chrome trace written, in under 1 s on this 2-core
machine. This prints, best of ``--repeat`` runs in one process:

* **the pipeline's phases**: building the task program, pricing (plans, compute prices, the
  comm ops placed at their solo time), the engine's loop, assembling the result (its spans, a
  :class:`~sim.results.SpanTable` of the tasks' starts and ends) and
  the busiest links' utilization counters (as ``llmsim run --trace`` does), and writing the
  gzip-compressed trace (its text formatted and deflated on both cores);
* **floors**: what the output alone costs in CPython here, with none of llmsim's logic:
  - one record per op (:class:`~sim.program.Task`, a slotted dataclass) and one span per op
    (a :class:`~sim.results.Span` tuple made with ``tuple.__new__``, as the engine did before it
    kept its spans as a table: the least one Python object per op of output costs, which the
    trace's and the report's fields now are);
  - the least per-op placement loop (``end = start + duration``, stored);
  - the engine's events: as many bare SimPy events (a timeout each, nothing attached) as the
    engine processed, on eight processes;
  - the trace's bytes: deflating the trace's text in one go as the writer does it (ISA-L at
    :data:`sim.output.gzip_parts.LEVEL`, five times as fast as zlib's fastest level here), joining
    the already formatted event strings a batch at a time with their encoding to UTF-8, and
    writing two integers per event as text (what is left of formatting once every other piece
    of text exists).

The floors add up to what no rewrite in Python of the same design gets under: the trace's
compression and joining split over the two cores at best (the writer deflates the text in
pieces, :mod:`sim.output.gzip_parts`), the rest on one.
"""

from __future__ import annotations

import gc
import gzip
import json
import sys
import time
from pathlib import Path

import simpy
from harness import best_of, make_parser, write_json

from sim.cli.run import LINK_COUNTERS
from sim.config import load_workload_with_notes
from sim.costs.analytical import AnalyticalCostModel
from sim.engine.simulation import Simulation
from sim.output.gzip_parts import deflate_part
from sim.output.trace import write_chrome_trace
from sim.program import Task
from sim.results import Span
from sim.runner import busiest_link_counters, cached_fabric, excluded_algorithms, gpu_placement, power_clock_hz
from sim.topology.choice import place_workload
from sim.types import OpKind, Stream
from sim.workload.taskgraph import build_program

PRESET = "gpt3-175b-1024"
TARGET_S = 1.0


def _best(fn, repeat: int):
    """The best wall time of ``fn`` over ``repeat`` runs, each with the cyclic collector off, and
    the last run's result."""
    t = best_of(fn, repeat, disable_gc=True)
    return t.best_s, t.result


def phases(repeat: int) -> tuple[dict, object]:
    w, notes = load_workload_with_notes(PRESET, [], None)
    topo = place_workload(w, None, notes).topology
    fabric = cached_fabric(topo, w.system.num_gpus, gpu_placement(w.parallel))
    out: dict = {}
    out["build_program_s"], prog = _best(lambda: build_program(w, node_of=fabric.node_of,
                                                               local_gpu_of=fabric.local_gpu), repeat)
    clock, _ = power_clock_hz(w.system.gpu, prog)

    def engine():
        costs = AnalyticalCostModel(w.system.gpu, fabric, representative=True,
                                    simulated=frozenset(r.rank for r in prog.ranks),
                                    excluded=excluded_algorithms(w), clock_hz=clock)
        s = Simulation(prog, costs, fabric.capacity_bytes_per_s, {}, record_links=True)
        marks = {}
        orig_result = s._result

        def timed_result(wall):
            marks["loop_end"] = time.perf_counter()
            r = orig_result(wall)
            marks["result_end"] = time.perf_counter()
            return r
        s._result = timed_result
        orig_fixed = s._fixed_comm

        def timed_fixed(tasks):
            r = orig_fixed(tasks)
            marks["priced"] = time.perf_counter()
            return r
        s._fixed_comm = timed_fixed
        marks["start"] = time.perf_counter()
        res = s.run()
        res.counters.extend(busiest_link_counters(fabric, res, LINK_COUNTERS))  # as llmsim run --trace does
        marks["result_end"] = time.perf_counter()
        return res, marks

    best = None
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        res, m = engine()
        gc.enable()
        row = {"pricing_s": m["priced"] - m["start"], "engine_loop_s": m["loop_end"] - m["priced"],
               "result_spans_s": m["result_end"] - m["loop_end"]}
        if best is None or sum(row.values()) < sum(best.values()):
            best = row
    out.update(best)
    path = Path("/tmp") / "llmsim-floor-trace.json.gz"
    out["trace_write_s"], _ = _best(lambda: write_chrome_trace(res, path, title="floor"), repeat)
    out["trace_bytes_gz"] = path.stat().st_size
    out["tasks"] = len(prog.tasks)
    return out, (prog, res, path)


def floors(prog, res, path: Path, repeat: int) -> dict:
    n = len(prog.tasks)
    out: dict = {}
    ops = [t.op for t in prog.tasks]
    out["task_records_s"], _ = _best(lambda: [Task(i, 0, Stream.COMPUTE, "x", op, OpKind.GEMM, False, [], ())
                                              for i, op in enumerate(ops)], repeat)
    new = tuple.__new__
    times = [(s.start_s, s.end_s) for s in res.spans]
    out["span_tuples_s"], _ = _best(lambda: [new(Span, (0, Stream.COMPUTE, "x", OpKind.GEMM, a, b, (), None, None,
                                                        None, (), None)) for a, b in times], repeat)
    durations = [b - a for a, b in times]

    def place():
        start, ends = 0.0, [0.0] * n
        for i, d in enumerate(durations):
            start = ends[i] = start + d
        return ends
    out["placement_loop_s"], _ = _best(place, repeat)
    text = gzip.decompress(path.read_bytes())
    out["trace_text_bytes"] = len(text)
    out["deflate_s"], _ = _best(lambda: deflate_part(text), repeat)
    events = json.loads(text)["traceEvents"]
    strings = [json.dumps(e, separators=(",", ":"), ensure_ascii=False) for e in events]
    out["trace_events"] = len(strings)
    # joined and encoded a batch at a time, as the writer does (one 100 MB string would time the
    # kernel handing the process fresh pages, not the join)
    batches = [strings[i:i + _BATCH] for i in range(0, len(strings), _BATCH)]
    out["join_encode_s"], _ = _best(lambda: [",".join(b).encode("utf-8") for b in batches], repeat)
    # every event's two numbers (ts and dur, or ts and a counter's value) as text: the spans'
    # start and end in whole microseconds, as many as the events need
    us = [int(x * 1e6) for s in res.spans for x in (s.start_s, s.end_s)]
    numbers = (us * (2 * len(strings) // len(us) + 1))[:2 * len(strings)]
    out["number_text_s"], _ = _best(lambda: list(map(str, numbers)), repeat)
    out["engine_events"] = res.events
    out["simpy_events_s"], _ = _best(lambda: _bare_events(res.events), repeat)
    one_core = out["task_records_s"] + out["span_tuples_s"] + out["placement_loop_s"] + out["simpy_events_s"]
    # the trace's text is made and deflated in pieces (sim.output.gzip_parts), so those split over the two cores
    out["floor_s"] = one_core + (out["deflate_s"] + out["join_encode_s"] + out["number_text_s"]) / 2
    return out


_BATCH = 1 << 14
"""Events per batch of the floor's join (about the writer's: a stream, or 16,384 events)."""


def _bare_events(n: int) -> int:
    """``n`` SimPy events with nothing attached: eight processes each waiting on a timeout in
    turn (the engine keeps a process per stream)."""
    env = simpy.Environment()

    def proc(k: int):
        for _ in range(k):
            yield env.timeout(1e-6)
    for i in range(8):
        env.process(proc(n // 8 + (i < n % 8)))
    env.run()
    return n


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, repeat=3)
    a = ap.parse_args(argv)
    ph, (prog, res, path) = phases(a.repeat)
    fl = floors(prog, res, path, a.repeat)
    total = ph["build_program_s"] + ph["pricing_s"] + ph["engine_loop_s"] + ph["result_spans_s"] + ph["trace_write_s"]
    print(f"{PRESET}: {ph['tasks']:,} tasks, {fl['trace_events']:,} trace events, "
          f"{fl['trace_text_bytes'] / 1e6:.1f} MB of trace text ({ph['trace_bytes_gz'] / 1e6:.1f} MB gzip)")
    print("\nphase                          s")
    for k in ("build_program_s", "pricing_s", "engine_loop_s", "result_spans_s", "trace_write_s"):
        print(f"  {k[:-2].replace('_', ' '):<26} {ph[k]:6.3f}")
    print(f"  {'total':<26} {total:6.3f}   (target {TARGET_S:.1f})")
    print("\nfloor (CPython, no llmsim logic) s")
    for k in ("task_records_s", "span_tuples_s", "placement_loop_s", "simpy_events_s", "deflate_s",
              "join_encode_s", "number_text_s"):
        print(f"  {k[:-2].replace('_', ' '):<26} {fl[k]:6.3f}")
    print(f"  {'sum (trace parts on 2 cores)':<26} {fl['floor_s']:6.3f}")
    write_json(a.json, {"preset": PRESET, "phases": ph, "floors": fl, "total_s": total}, fields=("llmsim_version",))
    return 0


if __name__ == "__main__":
    sys.exit(main())
