"""How many layer passes run with no contending communication kernel beside them?

::

    python benchmarks/quiet_passes.py                       # gpt3-175b-1024 gpt3-175b llama3-70b
    python benchmarks/quiet_passes.py tiny mixtral-8x7b --json quiet.json

A pass here is a simulated rank's compute spans of one layer, micro-batch, chunk and phase
(the generator gives every op of one layer pass the same args tuple; a backward's recomputed
forward ops, with phase ``recompute``, belong to that backward pass).
``benchmarks/pass_replay.py`` goes on from here: it replays the passes alone. For each
workload preset this simulates one iteration at op level. It prints the comm streams whose
kernels slow compute on the first simulated rank (``Simulation._contending_streams``: those
holding SMs). It then counts the passes none of whose compute spans a kernel of such a stream
overlaps, the pass's own TP collectives included: a collective the next compute op waits for
runs between two of them and does not count, one overlapped with the next ops does. Such a
pass's ops run at their solo rates, so its timeline is fixed once its first op starts.
``docs/design.md`` ("Speed at scale") reads the counts as the share of the work an engine
could place a pass at a time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from sim.config import load_workload_with_notes
from sim.engine.pass_replay import pass_of
from sim.engine.simulation import Simulation
from sim.runner import simulate
from sim.topology.choice import place_workload
from sim.types import Stream

DEFAULT = ("gpt3-175b-1024", "gpt3-175b", "llama3-70b")


def count(preset: str) -> dict:
    """The passes of one op-level simulation of ``preset`` and those none of whose compute
    spans a contending comm kernel (the pass's own TP collectives included) overlaps."""
    workload, notes = load_workload_with_notes(preset, [], None)
    topology = place_workload(workload, None, notes).topology
    seen: list[dict] = []
    original = Simulation._contending_streams

    def spy(self, tasks, streams):
        out = original(self, tasks, streams)
        seen.append({r: sorted(tasks[streams[k][0]].stream.name for k in ks) for r, ks in out.items()})
        return out

    Simulation._contending_streams = spy
    try:
        run = simulate(workload, topology, notes=list(notes))
    finally:
        Simulation._contending_streams = original
    contenders = seen[0] if seen else {}
    first = run.result.ranks[0].rank
    passes: dict[tuple, list] = defaultdict(list)
    beside: dict[int, list] = defaultdict(list)
    keys: dict[int, tuple] = {}
    for s in run.result.spans:
        if s.stream is Stream.COMPUTE:
            passes[(s.rank, pass_of(s.args, keys))].append(s)
        elif s.stream.name in contenders.get(s.rank, ()) and s.end_s > s.start_s:
            beside[s.rank].append((s.start_s, s.end_s))
    starts = {r: sorted(v) for r, v in beside.items()}
    ends = {r: np.maximum.accumulate([e for _, e in v]) for r, v in starts.items()}
    firsts = {r: np.array([a for a, _ in v]) for r, v in starts.items()}

    def met(rank: int, a: float, b: float) -> bool:
        """Whether a contending kernel runs somewhere inside ``(a, b)``."""
        if rank not in firsts:
            return False
        i = int(np.searchsorted(firsts[rank], b, side="left"))  # kernels starting before b
        return i > 0 and ends[rank][i - 1] > a

    quiet = ops = quiet_ops = 0
    for (rank, _), spans in passes.items():
        ops += len(spans)
        if not any(met(rank, x.start_s, x.end_s) for x in spans):
            quiet += 1
            quiet_ops += len(spans)
    return {"preset": preset, "contending_streams": contenders.get(first, []), "passes": len(passes),
            "quiet_passes": quiet, "compute_ops": ops, "quiet_compute_ops": quiet_ops,
            "quiet_pass_share": quiet / len(passes) if passes else None,
            "quiet_op_share": quiet_ops / ops if ops else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("presets", nargs="*", default=list(DEFAULT), help="workload presets (default: %(default)s)")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    rows = [count(p) for p in args.presets]
    head = f"{'preset':<16} {'contending streams':<30} {'passes':>8} {'quiet':>8} {'share':>7} {'ops share':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        share = "-" if r["quiet_pass_share"] is None else f"{r['quiet_pass_share']:.1%}"
        ops = "-" if r["quiet_op_share"] is None else f"{r['quiet_op_share']:.1%}"
        print(f"{r['preset']:<16} {', '.join(r['contending_streams']) or '-':<30} {r['passes']:>8,} "
              f"{r['quiet_passes']:>8,} {share:>7} {ops:>9}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
