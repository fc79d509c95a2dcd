"""Could an engine place a layer pass as one unit and still give the op level's times to the bit?

::

    python benchmarks/pass_replay.py                       # gpt3-175b-1024 gpt3-175b llama3-70b
    python benchmarks/pass_replay.py tiny --json replay.json

``docs/design.md`` ("Speed at scale") plans an engine that holds a layer pass as one task and
places it with the op level's arithmetic. ``quiet_passes.py`` counts the passes no contending
kernel overlaps; this answers the question that count left open, for the passes whose compute
only their own tensor-parallel collectives overlap: does replaying such a pass on its own give
every op's start and end exactly as the op-level engine placed them?

For each workload preset this simulates one iteration at op level and sorts each simulated
rank's layer passes (its compute tasks with one layer's, micro-batch's and phase's args, a
backward's recomputed forward ops with it, and the collectives of those args on its TP, CP
and EP streams) into three kinds, by the kernels of contending streams
(``Simulation._contending_streams``) that overlap the pass's compute:

* **quiet**: none;
* **own only**: only the pass's own collectives' kernels (a collective the next compute op
  waits for runs between two compute ops and does not count);
* **met by others**: a kernel of another pass or another stream (a data-parallel bucket, the
  next pass's first collective).

It then replays every quiet and own-only pass alone, from the engine's start of its first op:
each comm op from the end of what it waits for (inside the pass, the replayed ends) for its
solo time, holding its SMs in a fresh :class:`~sim.engine.contention.HeldSMs` unless the next
compute op waits for it (``Task.alone``); each compute op from the end of the one before and of
what it waits for, ending where ``HeldSMs.end_s`` says. A pass replays **to the bit** when every
one of its ops' starts and ends equals the engine's; for the others it prints the first op
that does not. An op a pass waits for outside it (the op before it on the same stream, a
received activation, a gathered weight) takes the engine's end.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quiet_passes import pass_of  # noqa: E402  (a sibling script: how both sort ops into passes)

from sim.config import load_workload_with_notes
from sim.engine.contention import HeldSMs
from sim.engine.simulation import Simulation
from sim.runner import simulate
from sim.topology.choice import place_workload
from sim.types import Stream

DEFAULT = ("gpt3-175b-1024", "gpt3-175b", "llama3-70b")


def _captured(preset: str):
    """One op-level simulation of ``preset`` and the :class:`Simulation` that ran it."""
    workload, notes = load_workload_with_notes(preset, [], None)
    topology = place_workload(workload, None, notes).topology
    seen: list[Simulation] = []
    original = Simulation._result

    def spy(self, wall_s):
        seen.append(self)
        return original(self, wall_s)

    Simulation._result = spy
    try:
        run = simulate(workload, topology, notes=list(notes))
    finally:
        Simulation._result = original
    return run, seen[-1]


_OWN = (Stream.TP_COMM, Stream.CP_COMM, Stream.EP_COMM)
"""The streams of a layer pass's own collectives (its step list's)."""
_PREVIOUS: dict[int, dict[int, int]] = {}


def _previous(sim: Simulation) -> dict[int, int]:
    """Each task's predecessor on its stream."""
    hit = _PREVIOUS.get(id(sim))
    if hit is None:
        hit = _PREVIOUS[id(sim)] = {b: a for ids in sim._ids for a, b in zip(ids, ids[1:])}
    return hit


def replay(sim: Simulation, ids: list[int]) -> tuple[list[float], list[float]]:
    """The starts and ends of the tasks ``ids`` (one pass, in task order) placed alone from the
    engine's start of the first, as described in the module docstring."""
    tasks, finish, duration = sim.program.tasks, sim.finish, sim.duration
    mine: dict[int, float] = {}
    stream_end: dict[Stream, float] = {}  # the replayed end of each stream's last op
    before = _previous(sim)
    held = HeldSMs()
    starts, ends = [], []
    cursor = None
    for tid in ids:
        t = tasks[tid]
        ready = max((mine.get(d, finish[d]) for d in t.deps), default=0.0)
        if t.comm:
            last = stream_end.get(t.stream)
            if last is None:  # the stream's op before the pass: the engine's end
                p = before.get(tid)
                last = finish[p] if p is not None else 0.0
            s = max(ready, last)
            e = s + sim._solo_time(id(t.op))
            f = sim.plans[id(t.op)].sm_fraction
            if f and not t.alone:
                held.hold(s, e, f)
            stream_end[t.stream] = e
        else:
            s = sim.start[tid] if cursor is None else max(cursor, ready)
            e = held.end_s(s, duration[tid])
            cursor = e
        mine[tid] = e
        starts.append(s)
        ends.append(e)
    return starts, ends


def study(preset: str) -> dict:
    """The passes of ``preset`` by kind, and how many of the quiet and own-only ones replay to
    the bit."""
    run, sim = _captured(preset)
    tasks = sim.program.tasks
    contenders = {r: {tasks[sim._ids[k][0]].stream for k in ks} for r, ks in sim._contenders.items()}
    # the contenders left at the end of the run were pruned as streams finished: take them all
    for r in list(contenders):
        contenders[r] = {t.stream for t in tasks if t.rank == r and t.comm
                         and sim.plans[id(t.op)].sm_fraction > 0}
    keys: dict[int, tuple] = {}

    def key(t) -> tuple:
        """The pass of task ``t`` (:func:`quiet_passes.pass_of`) on its rank."""
        return (t.rank, pass_of(t.args, keys))

    passes: dict[tuple, list[int]] = defaultdict(list)
    kernels: dict[int, list] = defaultdict(list)  # rank -> (start, end, its pass or None) of SM-holding kernels
    for t in tasks:
        if t.stream is Stream.COMPUTE and not t.comm:
            passes[key(t)].append(t.id)
        elif t.comm and t.stream in contenders.get(t.rank, ()) and not t.alone:
            s, e = sim.xfer_start.get(t.id, sim.start[t.id]), sim.finish[t.id]
            if e > s and sim.plans[id(t.op)].sm_fraction > 0:
                kernels[t.rank].append((s, e, key(t) if t.stream in _OWN else None))
    comm_of: dict[tuple, list[int]] = defaultdict(list)  # a pass's own collectives
    for t in tasks:
        if t.comm and t.stream in _OWN:
            comm_of[key(t)].append(t.id)
    index = {r: (np.array([k[0] for k in sorted(v)]), sorted(v)) for r, v in kernels.items()}

    def overlapping(rank: int, a: float, b: float) -> list:
        if rank not in index:
            return []
        starts, ks = index[rank]
        i = int(np.searchsorted(starts, b, side="left"))
        return [k for k in ks[:i] if k[1] > a]

    kinds = {"quiet": 0, "own_only": 0, "met_by_others": 0}
    ops = {"quiet": 0, "own_only": 0, "met_by_others": 0}
    exact = {"quiet": 0, "own_only": 0}
    worst = {"quiet": 0.0, "own_only": 0.0}
    first_off: Counter = Counter()  # the first op of a pass that does not replay to the bit
    for pk, compute in passes.items():
        rank = pk[0]
        met = [k for tid in compute for k in overlapping(rank, sim.start[tid], sim.finish[tid])]
        kind = "quiet" if not met else "own_only" if all(k[2] == pk for k in met) else "met_by_others"
        kinds[kind] += 1
        ops[kind] += len(compute)
        if kind == "met_by_others":
            continue
        ids = sorted(compute + comm_of.get(pk, []))
        ids = [tid for tid in ids if tid >= compute[0]]  # from the pass's first compute op on
        starts, ends = replay(sim, ids)
        want_s = [sim.start[tid] for tid in ids]
        want_e = [sim.finish[tid] for tid in ids]
        if starts == want_s and ends == want_e:
            exact[kind] += 1
        else:
            worst[kind] = max(worst[kind], max(abs(a - b) for a, b in zip(starts + ends, want_s + want_e)))
            j = next(j for j in range(len(ids)) if starts[j] != want_s[j] or ends[j] != want_e[j])
            t = tasks[ids[j]]
            first_off[f"{t.stream.label} {t.name}"] += 1
    total = sum(ops.values())
    return {"preset": preset, "passes": kinds, "compute_ops": ops,
            "op_share": {k: v / total for k, v in ops.items()} if total else {},
            "replayed_to_the_bit": exact, "worst_difference_s": worst,
            "first_op_off": dict(first_off.most_common())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("presets", nargs="*", default=list(DEFAULT), help="workload presets (default: %(default)s)")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    rows = [study(p) for p in args.presets]
    head = (f"{'preset':<16} {'quiet':>16} {'own only':>16} {'met by others':>16}   "
            f"{'quiet exact':>12} {'own exact':>12}  {'worst diff s':>12}")
    print(head)
    print("-" * len(head))
    for r in rows:
        p, o, x, w = r["passes"], r["op_share"], r["replayed_to_the_bit"], r["worst_difference_s"]
        cell = {k: f"{p[k]:,} ({o.get(k, 0):.0%} ops)" for k in p}
        print(f"{r['preset']:<16} {cell['quiet']:>16} {cell['own_only']:>16} {cell['met_by_others']:>16}   "
              f"{x['quiet']:>12,} {x['own_only']:>12,}  {max(w.values()):>12.3g}")
        for op, n in r["first_op_off"].items():
            print(f"{'':<16} off from the bit first at {op}: {n:,} passes")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
