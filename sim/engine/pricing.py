"""What each op costs the engine: compute prices, comm plans, solo times, link accounting.

:class:`Pricing` is a mixin of :class:`~sim.engine.simulation.Simulation`: its methods price
the program's ops once per run (compute ops by the cost model, slowed on a straggler rank; comm
ops by their plans, kept to the flows simulated ranks send or receive; a layer block timed alone
from its ops' prices, :func:`_time_block`), find the comm ops no concurrent transfer can meet on
a link (:meth:`Pricing._fixed_comm`), and add the bytes of ops the flow network never carries to
its links' busy counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sim.costs.base import CommPlan, CostModel, Phase, share_weights
from sim.engine.contention import HeldSMs
from sim.engine.network import solo_time_s
from sim.program import Block, Program
from sim.types import CollectiveKind, CommClass, Stream

if TYPE_CHECKING:
    from sim.engine.network import FlowNetwork

__all__ = ["Pricing", "MAX_SHARED_ALL_TO_ALL"]

MAX_SHARED_ALL_TO_ALL = 32
"""An all-to-all over more ranks than this is priced alone (see ``Pricing._fixed_comm``)."""


class Pricing:
    """The engine's prices and link accounting (a mixin of
    :class:`~sim.engine.simulation.Simulation`, whose constructor and ``run()`` set up the state).

    Reads ``program``, ``costs``, ``capacity``, ``slowdown``, ``representative``, ``plans``,
    ``net`` (its ``busy_bytes``), ``pulses``, ``start`` and ``finish``. Writes ``_blocks``
    (block timings, by block and factor), ``_part_times`` (compute prices and comm solo times,
    by op), ``_op_links`` and ``_link_users`` (each comm op's links, each link's (rank, stream)s:
    :meth:`_fixed_comm`), ``_op_loads`` (each comm op's bytes per link: :meth:`_loads`) and the
    links' busy bytes.
    """

    program: Program
    costs: CostModel
    capacity: list[float]
    slowdown: dict[int, float]
    representative: bool
    plans: dict[int, CommPlan]
    net: FlowNetwork
    pulses: list[tuple[float, float, list, int]] | None
    start: list[float]
    finish: list[float | None]
    _blocks: dict[tuple[int, float], tuple]
    _part_times: dict[int, float]
    _op_links: dict[int, set]
    _link_users: dict[int, set]
    _op_loads: dict[int, list[tuple[int, float]]]

    def _durations(self, tasks) -> list[float]:
        cache: dict[int, float] = {}
        costs = self.costs
        out = [0.0] * len(tasks)
        self._blocks: dict[tuple[int, float], tuple] = {}
        for t in tasks:
            if t.comm:
                continue
            op = t.op
            if type(op) is Block:
                out[t.id] = self.block_timing(op, self.slowdown.get(t.rank, 1.0))[0]
                continue
            d = cache.get(id(op))
            if d is None:
                d = cache[id(op)] = costs.compute_time_s(op)
            out[t.id] = d * self.slowdown.get(t.rank, 1.0)
        return out

    def block_timing(self, block: Block, factor: float) -> tuple:
        """``(duration, exposed, compute_s, shares)`` of ``block`` with its compute ``factor``
        times slower: its duration timed alone, the exposed time of each comm class (with the
        class's stream), its compute time and each op kind's share of that."""
        key = (id(block), factor)
        hit = self._blocks.get(key)
        if hit is not None:
            return hit
        times, held = [], []
        for s, op in zip(block.streams, block.ops):
            if s is None:
                d = self._part_times.get(id(op))
                if d is None:
                    d = self._part_times[id(op)] = self.costs.compute_time_s(op)
                times.append(d * factor)
                held.append(0.0)
            else:
                d = self.solo_time(id(op))
                times.append(d)
                held.append(self.plans[id(op)].sm_fraction)
        waited, ran = _time_block(block, times, held)
        by_kind: dict = {}
        for s, op, d, solo in zip(block.streams, block.ops, ran, times):
            if s is None:
                # the op's price, times how much its GPU's comm kernels stretched it
                base = self._part_times[id(op)]
                by_kind[op.kind] = by_kind.get(op.kind, 0.0) + (base if d == solo else base * (d / solo))
        compute = sum(d for s, d in zip(block.streams, ran) if s is None)
        total = sum(by_kind.values())
        shares = tuple((k, v / total if total > 0 else 0.0) for k, v in by_kind.items())
        streams = {cls: s for cls, s, _ in block.comm_classes()}
        exposed = tuple((cls, streams[cls], e) for cls, e in waited.items())
        hit = self._blocks[key] = (compute + sum(e for _, _, e in exposed), exposed, compute, shares)
        return hit

    def _plans(self, tasks, simulated: set[int]) -> dict[int, CommPlan]:
        """Each comm op's plan, keeping the flows that simulated ranks send or receive.

        A flow into a simulated rank from an unsimulated one stands, by symmetry, for the
        traffic that arrives at every rank of the collective; keeping it loads the simulated
        rank's incoming links as the full job does. In representative mode a flow's weight on
        a link counts the job's flows there; where several kept flows share a link (an
        all-to-all's flows out of one rank), each stands for its share of that count."""
        cache: dict[int, CommPlan] = {}
        self._part_times: dict[int, float] = {}

        def plan(op) -> None:
            p = self.costs.comm_plan(op)
            phases = []
            for ph in p.phases:
                kept = tuple(f for f in ph.flows if f.src in simulated or f.dst in simulated)
                if self.representative and kept:
                    kept = share_weights(kept)
                phases.append(Phase(ph.latency_s, kept))
            cache[id(op)] = CommPlan(tuple(phases), p.algorithm, p.sm_fraction)

        blocks = set()
        for t in tasks:
            if t.comm:
                if id(t.op) not in cache:
                    plan(t.op)
            elif type(t.op) is Block and id(t.op) not in blocks:
                blocks.add(id(t.op))
                for op in t.op.comm_ops():
                    if id(op) not in cache:
                        plan(op)
        return cache

    def _fixed_comm(self, tasks) -> dict[int, float]:
        """Comm ops that can never share a link with a concurrent transfer, with their times.

        Two comm tasks that run on a common stream never overlap (streams run in order, and
        a collective ends for all its members at once). So a link is never contended when all
        the ops using it share one stream, and an op whose links are all like that takes its
        solo time wherever it runs: the engine places it like a compute op.

        An all-to-all over more than :data:`MAX_SHARED_ALL_TO_ALL` ranks (a large
        expert-parallel group: ``p - 1`` flows out of and into every rank) is also priced at its
        solo time, its flows sharing links only among themselves: re-rating hundreds of flows at
        every start and end would cost more than the rest of the run. The rule looks at the op
        alone, so representative and full runs price it the same way.
        """
        comm = [t for t in tasks if t.comm]
        # each op with the set of (rank, stream) its key's tasks run on: a key with one task
        # (most: a simulated rank's own collective) gives its own; the others are gathered
        counts = self.program.coll_members
        singles: set[tuple] = set()
        shared: dict[int, tuple[set, set]] = {}  # key -> its tasks' op ids and (rank, stream)s
        for t in comm:
            k = t.coll_key
            if k >= 0 and counts.get(k, 1) == 1:
                singles.add((id(t.op), t.rank, t.stream))
            else:
                hit = shared.get(k)
                if hit is None:
                    hit = shared[k] = (set(), set())
                hit[0].add(id(t.op))
                hit[1].add((t.rank, t.stream))
        alone: dict[tuple, frozenset] = {}  # one frozenset per (rank, stream)
        signatures = set()
        for oid, rank, stream in singles:
            here = (rank, stream)
            signatures.add((oid, alone.get(here) or alone.setdefault(here, frozenset((here,)))))
        for oids, heres in shared.values():
            together = frozenset(heres)
            signatures.update((oid, together) for oid in oids)
        link_common: dict[int, frozenset] = {}
        link_users: dict[int, set] = {}
        op_links: dict[int, set] = {}
        for oid, streams in signatures:
            links = op_links.get(oid)
            if links is None:
                links = op_links[oid] = {link for ph in self.plans[oid].phases for f in ph.flows for link in f.links}
            for link in links:
                common = link_common.get(link)
                link_common[link] = streams if common is None else (common & streams)
                link_users.setdefault(link, set()).update(streams)
        self._op_links, self._link_users = op_links, link_users
        out: dict[int, float] = {}
        seen: set[int] = set()
        for t in comm:
            if id(t.op) not in seen:
                seen.add(id(t.op))
                big_a2a = t.op.collective is CollectiveKind.ALL_TO_ALL and len(t.op.group) > MAX_SHARED_ALL_TO_ALL
                if big_a2a or all(link_common[link] for link in op_links[id(t.op)]):
                    out[id(t.op)] = self.solo_time(id(t.op))
        return out

    def solo_time(self, oid: int) -> float:
        """How long comm op ``oid`` takes on an idle network (:func:`solo_time_s`), once per op."""
        d = self._part_times.get(oid)
        if d is None:
            d = self._part_times[oid] = solo_time_s(self.plans[oid].phases, self.capacity)
        return d

    def _loads(self, op) -> list[tuple[int, float]]:
        loads = self._op_loads.get(id(op))
        if loads is None:
            acc: dict[int, float] = {}
            for ph in self.plans[id(op)].phases:
                for f in ph.flows:
                    for link, w in zip(f.links, f.weights):
                        acc[link] = acc.get(link, 0.0) + f.size_bytes * w
            loads = self._op_loads[id(op)] = sorted(acc.items())
        return loads

    def _account_blocks(self) -> None:
        """Add the bytes of the blocks' comm ops to their links' busy counters (the flow
        network never carried them): each op once per run, a run being shared by the block
        tasks of its simulated members; recorded link rates spread them evenly over each
        block."""
        busy, pulses = self.net.busy_bytes, self.pulses
        simulated = {r.rank for r in self.program.ranks}
        members: dict[int, int] = {}
        runs: dict[int, list] = {}
        for t in self.program.tasks:
            if type(t.op) is not Block:
                continue
            for op in t.op.comm_ops():
                hit = runs.get(id(op))
                if hit is None:
                    hit = runs[id(op)] = [op, 0]
                    members[id(op)] = sum(1 for r in op.group if r in simulated)
                hit[1] += 1
            f = self.finish[t.id]
            if pulses is not None and f is not None and f > self.start[t.id]:
                t0, d = self.start[t.id], f - self.start[t.id]
                for op in t.op.comm_ops():
                    pulses.append((t0, d, self._loads(op), members[id(op)]))
        for op, n in runs.values():
            for link, nbytes in self._loads(op):
                busy[link] += nbytes * n / members[id(op)]

    def _account(self, op, t0: float, duration_s: float) -> None:
        """Add the bytes of a comm op placed at its solo time to its links' busy counters
        (the flow network counts the others as they move); when link rates are recorded, the
        op loads each link evenly over ``[t0, t0 + duration_s]``."""
        loads = self._loads(op)
        busy = self.net.busy_bytes
        for link, nbytes in loads:
            busy[link] += nbytes
        if self.pulses is not None and duration_s > 0:
            self.pulses.append((t0, duration_s, loads, 0))


def _time_block(block: Block, times: list[float],
                held: Sequence[float] = ()) -> tuple[dict[CommClass, float], list[float]]:
    """Run ``block`` alone from time 0 with its ops taking ``times`` (solo); return, per comm
    class, how long its compute stream waited on that class (their sum plus the compute time
    is the block's duration), and each op's time as run. A wait is charged to the comm op that
    ended last among those the compute op waited for; a comm op no compute op of the block
    waits for holds its end. ``held[i]``: the fraction of the GPU's SMs comm op ``i`` holds
    while it runs; the compute ops beside it run that much slower
    (:class:`~sim.engine.contention.HeldSMs`).

    >>> from sim.types import OpKind
    >>> from sim.workload.ops import CommOp, MemoryOp
    >>> ar = CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, (0, 1), 8.0)
    >>> c = MemoryOp(OpKind.NORM, 1.0)
    >>> blk = Block((c, ar, c, c), (None, Stream.TP_COMM, None, None), (0, 1, 0, 0))
    >>> _time_block(blk, [1.0, 3.0, 1.0, 1.0])     # the all-reduce hides behind one compute op
    ({<CommClass.TP: 'tp'>: 2.0}, [1.0, 3.0, 1.0, 1.0])
    >>> # holding half the SMs, it stretches the op beside it to 2 s and shows for 1 s
    >>> _time_block(blk, [1.0, 3.0, 1.0, 1.0], [0.0, 0.5, 0.0, 0.0])
    ({<CommClass.TP: 'tp'>: 1.0}, [1.0, 3.0, 2.0, 1.0])
    """
    cursor = 0.0
    free: dict[Stream, float] = {}
    pending: list[list] = []      # [end, class, compute ops left before the one that waits]
    exposed: dict[CommClass, float] = {}
    sms = HeldSMs() if held and any(held) else None
    ran = list(times)
    for i, (s, op, w, d) in enumerate(zip(block.streams, block.ops, block.waits, times)):
        if s is not None:
            start = max(cursor, free.get(s, 0.0))
            free[s] = start + d
            cls = op.comm_class  # type: ignore[union-attr]  # a comm stream's op is a CommOp (Block)
            pending.append([start + d, cls, w])
            exposed.setdefault(cls, 0.0)
            if sms is not None and held[i]:
                sms.hold(start, start + d, held[i])
            continue
        start, cls = cursor, None
        if pending:
            keep = []
            for p in pending:
                if p[2] == 0:
                    if p[0] > start:
                        start, cls = p[0], p[1]
                else:
                    p[2] -= 1
                    keep.append(p)
            pending = keep
        if cls is not None:
            exposed[cls] += start - cursor
        if sms is None:
            cursor = start + d
        else:
            cursor = sms.end_s(start, d)
            ran[i] = cursor - start
    for end, cls, _ in pending:
        if end > cursor:
            exposed[cls] += end - cursor
            cursor = end
    return exposed, ran
