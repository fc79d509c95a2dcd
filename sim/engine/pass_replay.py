"""Could an engine place a layer pass as one unit and still give the op level's times to the bit?

``docs/design.md`` ("Speed at scale") plans an engine that holds a layer pass as one task and
places it with the op level's arithmetic. ``benchmarks/quiet_passes.py`` counts the passes no
contending kernel overlaps; :func:`study` answers the question that count left open, for the
passes whose compute only their own tensor-parallel collectives overlap: does replaying such a
pass on its own give every op's start and end exactly as the op-level engine placed them?

For a workload preset it simulates one iteration at op level and sorts each simulated rank's
layer passes (its compute tasks with one layer's, micro-batch's and phase's args
(:func:`pass_of`), a backward's recomputed forward ops with it, and the collectives of those
args on its TP, CP and EP streams) into three kinds, by the kernels of contending streams (the
comm streams whose kernels hold SMs) that overlap the pass's compute:

* **quiet**: none;
* **own only**: only the pass's own collectives' kernels (a collective the next compute op
  waits for runs between two compute ops and does not count);
* **met by others**: a kernel of another pass or another stream (a data-parallel bucket, the
  next pass's first collective).

It then replays every quiet and own-only pass alone (:func:`replay`), from the engine's start
of its first op: each comm op from the end of what it waits for (inside the pass, the replayed
ends) for its solo time, holding its SMs in a fresh :class:`~sim.engine.contention.HeldSMs`
unless the next compute op waits for it (``Task.alone``); each compute op from the end of the
one before and of what it waits for, ending where ``HeldSMs.end_s`` says. A pass replays **to
the bit** when every one of its ops' starts and ends equals the engine's; for the others the
study names the first op that does not. An op a pass waits for outside it (the op before it on
the same stream, a received activation, a gathered weight) takes the engine's end.

``benchmarks/pass_replay.py`` prints the study for several presets.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import cast

import numpy as np

from sim.config import load_workload_with_notes
from sim.engine.contention import HeldSMs
from sim.engine.simulation import Simulation
from sim.runner import Run, simulate
from sim.topology.choice import place_workload
from sim.types import Stream

OWN = (Stream.TP_COMM, Stream.CP_COMM, Stream.EP_COMM)
"""The streams of a layer pass's own collectives (its step list's)."""


def pass_of(args: tuple, seen: dict[int, tuple]) -> tuple:
    """The layer pass whose op has ``args``: its layer, micro-batch, chunk and phase, a
    backward's recomputed forward ops (phase ``recompute``) with that backward. ``seen`` keeps
    the answer by the tuple's id (the generator shares one tuple among a pass's ops, and the
    run keeps them alive). ``benchmarks/quiet_passes.py`` counts passes by it too."""
    k = seen.get(id(args))
    if k is None:
        k = seen[id(args)] = tuple(("phase", "bwd") if p == ("phase", "recompute") else p for p in args)
    return k


def captured(preset: str) -> tuple[Run, Simulation]:
    """One op-level simulation of ``preset`` and the :class:`Simulation` that ran it (caught by
    wrapping :meth:`Simulation.run` while it runs: not for use from several threads at once)."""
    workload, notes = load_workload_with_notes(preset, [], None)
    topology = place_workload(workload, None, notes).topology
    seen: list[Simulation] = []
    original = Simulation.run

    def spy(self):
        seen.append(self)
        return original(self)

    Simulation.run = spy  # type: ignore[method-assign]  # the spy, for this call only
    try:
        run = simulate(workload, topology, notes=list(notes))
    finally:
        Simulation.run = original  # type: ignore[method-assign]  # restored
    return run, seen[-1]


def previous_on_stream(sim: Simulation) -> dict[int, int]:
    """Each task's predecessor on its stream."""
    return {b: a for ids in sim.stream_ids for a, b in zip(ids, ids[1:])}


def replay(sim: Simulation, ids: list[int], before: dict[int, int]) -> tuple[list[float], list[float]]:
    """The starts and ends of the tasks ``ids`` (one pass, in task order) placed alone from the
    engine's start of the first, as described in the module docstring; ``before`` is
    :func:`previous_on_stream` of ``sim``."""
    tasks, duration = sim.program.tasks, sim.duration
    finish = cast("list[float]", sim.finish)  # every task ended (Simulation.run checked)
    mine: dict[int, float] = {}
    stream_end: dict[Stream, float] = {}  # the replayed end of each stream's last op
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
            e = s + sim.solo_time(id(t.op))
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
    run, sim = captured(preset)
    tasks = sim.program.tasks
    finish = cast("list[float]", sim.finish)  # every task ended (Simulation.run checked)
    before = previous_on_stream(sim)
    contenders: dict[int, set] = defaultdict(set)  # rank -> its comm streams whose kernels hold SMs
    for t in tasks:
        if t.comm and sim.plans[id(t.op)].sm_fraction > 0:
            contenders[t.rank].add(t.stream)
    keys: dict[int, tuple] = {}

    def key(t) -> tuple:
        """The pass of task ``t`` (:func:`pass_of`) on its rank."""
        return (t.rank, pass_of(t.args, keys))

    passes: dict[tuple, list[int]] = defaultdict(list)
    kernels: dict[int, list] = defaultdict(list)  # rank -> (start, end, its pass or None) of SM-holding kernels
    for t in tasks:
        if t.stream is Stream.COMPUTE and not t.comm:
            passes[key(t)].append(t.id)
        elif t.comm and t.stream in contenders.get(t.rank, ()) and not t.alone:
            s, e = sim.xfer_start.get(t.id, sim.start[t.id]), finish[t.id]
            if e > s and sim.plans[id(t.op)].sm_fraction > 0:
                kernels[t.rank].append((s, e, key(t) if t.stream in OWN else None))
    comm_of: dict[tuple, list[int]] = defaultdict(list)  # a pass's own collectives
    for t in tasks:
        if t.comm and t.stream in OWN:
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
        met = [k for tid in compute for k in overlapping(rank, sim.start[tid], finish[tid])]
        kind = "quiet" if not met else "own_only" if all(k[2] == pk for k in met) else "met_by_others"
        kinds[kind] += 1
        ops[kind] += len(compute)
        if kind == "met_by_others":
            continue
        ids = sorted(compute + comm_of.get(pk, []))
        ids = [tid for tid in ids if tid >= compute[0]]  # from the pass's first compute op on
        starts, ends = replay(sim, ids, before)
        want_s = [sim.start[tid] for tid in ids]
        want_e = [finish[tid] for tid in ids]
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
