"""Run a task program on SimPy: one process per (rank, stream), flows on a shared network.

Streams run their tasks in order, like CUDA streams. A compute task's duration depends on
nothing but the communication kernels beside it on its GPU, which hold some of its SMs
(:mod:`sim.engine.contention`), so when its dependencies' end times are already known, and so
are all the kernels that can run beside it, the stream places it without waiting for the
clock: its end time is fixed, its span recorded, and any stream waiting on it is told at once.
Runs of compute ops therefore cost no engine events. A compute op that a kernel not yet known
may meet (a collective in flight, or one whose start is not settled) runs on the clock instead:
its end is re-computed whenever a kernel on its GPU starts or ends. A comm task the next
compute op of its rank waits for (:attr:`~sim.program.Task.alone`) runs while that GPU
computes nothing, so its kernel's SMs are not counted held: they would slow no op.
Communication does depend on what else is on the network, so a comm task waits for the clock
to reach its start, joins the other simulated members of its collective (a rendezvous), then
runs its plan's phases: a latency, then flows on :class:`~sim.engine.network.FlowNetwork`.
Two exceptions are placed like compute, at their solo time: an op whose links no other
stream's ops cross (:meth:`Simulation._fixed_comm`), and an op with no group to meet that no
other transfer can meet on its links before that time is up (:meth:`Simulation._alone_on_links`:
every other stream crossing them has ended its last op and cannot start its next before then).
The result is the same timeline a one-event-per-task simulation gives (to rounding, where an op
is placed alone: the flow network's own ends carry a few ulps from the events beside them).

A task whose op is a :class:`~sim.program.Block` (a whole layer pass, at layer granularity)
is timed alone once from its ops' prices (:func:`_time_block`, its compute slowed by its own
collectives) and placed like compute; kernels outside it slow its compute share.
"""

from __future__ import annotations

import bisect
import math
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, cast

import numpy as np
import simpy

from sim.costs.base import CommPlan, CostModel, Phase, share_weights
from sim.engine.contention import HeldSMs
from sim.engine.link_rates import LinkRates
from sim.engine.network import FlowNetwork, solo_time_s
from sim.errors import DeadlockError
from sim.program import Block, Program
from sim.results import CounterSample, SimResult, Span, SpanTable
from sim.types import CollectiveKind, CommClass, OpKind, Stream

__all__ = ["Simulation", "ReferencePaths", "ENGINE_RULES"]


class _CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


class _WatchedEnvironment(_CountingEnvironment):
    """A counting environment that calls ``watch()`` once, after ``at`` events (the watch
    stops the run by raising)."""

    def __init__(self, watch: Callable[[], None], at: int) -> None:
        super().__init__()
        self.watch: Callable[[], None] | None = watch
        self.at = at

    def step(self) -> None:
        self.events_processed += 1
        simpy.Environment.step(self)
        if self.events_processed == self.at:
            self.watch()  # type: ignore[misc]  # None only once the run has ended (Simulation.run)


@dataclass(frozen=True)
class ReferencePaths:
    """Slower, plainer placements the engine's shortcuts must match (for the tests:
    ``Simulation(..., reference=ReferencePaths(compute_on_clock=True))`` is the reference a
    test holds the default run's spans to). The defaults are the engine's own rules."""

    all_contend: bool = False
    """Treat every comm stream as one whose kernels hold SMs, even at a fraction of 0: the
    clock-driven placement of compute must then give the eager placement's timeline."""
    shared_comm_on_clock: bool = False
    """Run every comm op whose links other streams' ops cross as flows on the clock, none placed
    at its solo time when alone there."""
    compute_on_clock: bool = False
    """Run all compute beside comm streams whose kernels hold SMs on the clock, none placed
    ahead of it."""


ENGINE_RULES = ReferencePaths()
"""The engine's own rules, every shortcut taken (the default of :class:`Simulation`)."""


class _Containers(NamedTuple):
    """The engine's containers that :meth:`Simulation._eager` and :meth:`Simulation._quiet_end`
    read (a tuple, so that the hot one unpacks them in one step); each field is the attribute
    of :class:`Simulation` it names."""

    busy: set
    """The streams being placed up the call chain (``Simulation._busy``)."""
    tasks: list
    finish: list
    owner: list
    """Task id -> the index of its stream (``Simulation._owner``)."""
    start: list
    fixed: dict
    """``Simulation.fixed_comm``."""
    members: dict
    """Collective key -> its simulated members (``Program.coll_members``)."""
    contenders: dict
    held: dict
    gate: list
    duration: list
    mem: dict
    waiters: dict
    ids: list
    """Per stream: its task ids in order (``Simulation._ids``)."""
    positions: list
    """Per stream: its first task not placed (``Simulation._pos``)."""
    cursors: list
    """Per stream: the end of its last placed task (``Simulation._cursor``)."""
    stalled: list
    solo: dict
    busy_bytes: list
    """Bytes each link carried (``FlowNetwork.busy_bytes``)."""
    running: dict
    compute_of: dict


class _Gathering:
    """The simulated members of one collective that have reached it: how many, their task ids
    in arrival order, and the event the last one fires to release the others."""

    __slots__ = ("count", "ids", "released")

    def __init__(self, released: simpy.Event) -> None:
        self.count = 0
        self.ids: list[int] = []
        self.released = released


class _Meeting:
    """The simulated members of one layer block's group that have reached its start (a run of
    every rank): how many, the latest arrival's time, and the event that releases them."""

    __slots__ = ("count", "start", "released")

    def __init__(self, start: float, released: simpy.Event) -> None:
        self.count = 0
        self.start = start
        self.released = released


class _Run:
    """A compute task running on the clock: its start, solo duration, share of compute
    (``sens``), current predicted end, the generation of its pending timer, and its event."""

    __slots__ = ("start", "work", "sens", "end", "gen", "done")

    def __init__(self, start: float, work: float, sens: float, done: simpy.Event) -> None:
        self.start, self.work, self.sens, self.done = start, work, sens, done
        self.end = start + work
        self.gen = 0


class Simulation:
    """One iteration of ``program`` under ``costs``.

    Parameters
    ----------
    program : Program
        From :func:`sim.workload.taskgraph.build_program`.
    costs : CostModel
        Prices compute ops and plans communication.
    capacity_bytes_per_s : list of float
        Link capacities by link id (empty for a cost model that plans no flows).
    """

    def __init__(self, program: Program, costs: CostModel, capacity_bytes_per_s: Sequence[float] = (),
                 slowdown: dict[int, float] | None = None, record_links: bool = False,
                 watch: tuple[Callable[[Simulation], None], int] | None = None,
                 reference: ReferencePaths = ENGINE_RULES) -> None:
        self.program = program
        self.costs = costs
        self.capacity = list(capacity_bytes_per_s)
        self.slowdown = dict(slowdown or {})
        """Simulated rank -> factor its compute ops take longer by (a straggler GPU)."""
        self.record_links = record_links
        """Record every link's carried rate over time (``metadata["link_rates"]``, a
        :class:`~sim.engine.link_rates.LinkRates` that works out the links asked for)."""
        self.watch = watch
        """``(fn, n)``: call ``fn(self)`` once, after the engine's ``n``-th event, to look at the
        run so far; ``fn`` stops the run by raising (``sim.engine.block_check.watch_blocks``)."""
        self.reference = reference
        """Which of the engine's shortcuts to replace by the plainer placement they must match."""
        self._all_contend = reference.all_contend
        self._shared_comm_on_clock = reference.shared_comm_on_clock
        self._compute_on_clock = reference.compute_on_clock

    def run(self) -> SimResult:
        """Simulate and return the recorded spans and counters.

        Raises
        ------
        DeadlockError
            If the engine runs out of events with tasks still waiting.
        """
        wall0 = time.perf_counter()
        prog = self.program
        tasks = prog.tasks
        n = len(tasks)
        env = _CountingEnvironment() if self.watch is None else \
            _WatchedEnvironment(partial(self.watch[0], self), self.watch[1])
        self.env = env
        self.net = FlowNetwork(env, self.capacity)
        self.pulses: list[tuple[float, float, list, int]] | None = [] if self.record_links else None
        """Ops loading their links evenly: ``(start, duration, loads, members)``, read by
        :class:`~sim.engine.link_rates.LinkRates` (only when link rates are recorded)."""
        if self.record_links:
            self.net.rate_log = []
        self.finish: list[float | None] = [None] * n
        self.start: list[float] = [0.0] * n
        self.xfer_start: dict[int, float] = {}
        self.waiters: dict[int, simpy.Event] = {}
        self.rendezvous: dict[int, _Gathering] = {}
        """Collectives some but not all of whose simulated members have reached them."""
        self.meetings: dict[int, _Meeting] = {}
        """Layer blocks (a run of every rank) some but not all of whose group have reached them."""
        self.mem: dict[int, list[tuple[float, float]]] = {r.rank: [] for r in prog.ranks}
        simulated = {r.rank for r in prog.ranks}
        self.representative = prog.representative
        self.plans = self._plans(tasks, simulated)
        self.duration = self._durations(tasks)
        self.fixed_comm = self._fixed_comm(tasks)
        self._op_loads: dict[int, list[tuple[int, float]]] = {}
        streams = [ids for _, ids in sorted(prog.streams.items())]
        self.stream_ids = streams
        """Per stream (in ``(rank, stream)`` order), the ids of its tasks in the order it runs them."""
        self._pos = [0] * len(streams)
        self._cursor = [0.0] * len(streams)
        owner = np.zeros(n, dtype=np.int64)  # the stream of each task
        if streams:
            owner[np.concatenate([np.asarray(ids, dtype=np.int64) for ids in streams])] = \
                np.repeat(np.arange(len(streams)), [len(ids) for ids in streams])
        self._owner = owner.tolist()
        self._busy: set[int] = set()
        self._contenders = self._contending_streams(tasks, streams)
        """Rank -> its comm streams whose kernels hold SMs (empty: compute is never slowed)."""
        self._held = {r: HeldSMs() for r in self._contenders}
        self._retiring = {c for cs in self._contenders.values() for c in cs}
        """Contending comm streams with tasks left (:meth:`_retire`)."""
        self._running: dict[int, _Run] = {}
        self._stalled = [-1] * len(streams)
        """Per stream, why :meth:`_eager` last stopped: -1 unknown, a task id it waits for, or -2
        (its next task needs the process, or it is done)."""
        self._compute_of = {r: k for k, ids in enumerate(streams)
                            if ids and tasks[ids[0]].stream is Stream.COMPUTE for r in (tasks[ids[0]].rank,)}
        """Rank -> the index of its compute stream."""
        self._gate = [-1] * len(streams)
        """Per comm stream, a task of its rank's compute stream its next task waits for."""
        self._seen = [0] * len(streams)
        """Per stream, a position all tasks before which have ended (:meth:`_first_unplaced`)."""
        self._on_clock: set[int] = set()
        """Comm streams running an op on the clock now (met, or meeting, its group; its latency
        or its flows)."""
        self._solo_sums: dict[int, list[float]] = {}
        """Per compute stream, the running sums of its ops' solo times (a lower bound on when
        an op not placed yet ends: :meth:`_end_bound`), made when first asked."""
        self._index = {key: k for k, key in enumerate(sorted(prog.streams))}
        """(rank, stream) -> the index of that stream."""
        self._members: dict[int, list[int]] | None = None
        """The tasks of each collective with several simulated members (made when first asked)."""
        self._sharers: dict[tuple[int, int], tuple[int, ...]] = {}
        """A comm op's links' other users, by the op and its stream: every other stream with an
        op that crosses one of them."""
        self._solo: dict[int, tuple] = {}
        """A comm op placed at its solo time (:meth:`_eager`): its link loads and SM share."""
        self._ctx = _Containers(
            busy=self._busy, tasks=tasks, finish=self.finish, owner=self._owner, start=self.start,
            fixed=self.fixed_comm, members=prog.coll_members, contenders=self._contenders, held=self._held,
            gate=self._gate, duration=self.duration, mem=self.mem, waiters=self.waiters, ids=self.stream_ids,
            positions=self._pos, cursors=self._cursor, stalled=self._stalled, solo=self._solo,
            busy_bytes=self.net.busy_bytes, running=self._running, compute_of=self._compute_of)
        """The containers :meth:`_eager` reads, one named tuple that it unpacks at once (it runs
        for nearly every task)."""
        for k in range(len(streams)):
            env.process(self._stream(k))
        env.run()
        if isinstance(env, _WatchedEnvironment):
            env.watch = None  # it holds this simulation, which holds env: no cycle left for gc.freeze
        self._account_blocks()
        missing = [t for t in tasks if self.finish[t.id] is None] if None in self.finish else []
        if missing:
            first = ", ".join(f"{t.name}@rank{t.rank}/{t.stream.label}" for t in missing[:5])
            raise DeadlockError(f"{len(missing)} tasks never ran; first: {first}")
        return self._result(time.perf_counter() - wall0)

    # -- pricing ----------------------------------------------------------------------------
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

    def _alone_on_links(self, task, k: int, start: float) -> float | None:
        """The solo time of comm task ``task`` (of stream ``k``, no group to meet) started at
        ``start``, when no transfer of another stream can share one of its links before that
        time is up; None when one may (one running on the clock, one placed ahead of it that
        ends after ``start``, or one whose start is not settled or falls before the end).

        An op that some other stream's ops cross a link of runs as flows on the clock unless it
        is alone there (:meth:`_fixed_comm` places the others at their solo time everywhere):
        alone, its flows share links only among themselves, as :func:`solo_time_s` times them.
        """
        oid = id(task.op)
        sharers = self._sharers.get((oid, k))
        if sharers is None:
            users = set()
            for link in self._op_links[oid]:
                users |= self._link_users[link]
            sharers = self._sharers[(oid, k)] = tuple(sorted(self._index[u] for u in users if self._index[u] != k))
        on_clock = self._on_clock
        if not sharers or self._shared_comm_on_clock or k in on_clock:
            return None
        if on_clock:  # first the cheap no: a stream crossing these links is moving bytes now
            tasks, rendezvous = self.program.tasks, self.rendezvous
            for s in sharers:
                if s in on_clock and tasks[self.stream_ids[s][self._pos[s]]].coll_key not in rendezvous:
                    return None
        d = self.solo_time(oid)
        end = start + d
        mine = self._compute_of.get(task.rank, -1) if task.alone else -1
        for s in sharers:
            last, lb = self._next_start(s, mine)
            if last > start or lb < end:  # an op of s placed ends after this starts, or may start before its end
                return None
        return d

    def _next_start(self, s: int, mine: int = -1, nested: bool = False) -> tuple[float, float]:
        """The end of stream ``s``'s last op placed, and a time its next op cannot start
        before: its last end, its dependencies' ends, and for one not placed yet a bound
        (:meth:`_end_bound`); for one meeting its group on the clock, the latest bound of the
        members not there yet (``nested``: unknown); -inf when unknown (its transfer running)."""
        finish, ids = self.finish, self.stream_ids[s]
        p = self._first_unplaced(s)
        last: float = finish[ids[p - 1]] if p else 0.0  # type: ignore[assignment]  # the ops before p have ended
        if p >= len(ids):
            return last, math.inf
        nxt = self.program.tasks[ids[p]]
        if s in self._on_clock:
            rv = self.rendezvous.get(nxt.coll_key)
            if rv is None or nested:  # its transfer has begun
                return last, -math.inf
            arrived, lb = rv.ids, -math.inf
            for m in self._members_of(nxt.coll_key):
                if m not in arrived:
                    lb = max(lb, self._next_start(self._owner[m], nested=True)[1])
            return last, lb
        lb = last
        for dep in nxt.deps:
            f = finish[dep]
            if f is None:
                f = self._end_bound(dep, mine)
            if f > lb:
                lb = f
        return last, lb

    def _end_bound(self, tid: int, mine: int = -1) -> float:
        """A time task ``tid``, not placed yet, cannot end before: on a compute stream, its
        stream's last end plus the solo times of it and the ops before it (held SMs only slow
        them); +inf on ``mine``, the compute stream of a comm task the next compute op waits for
        (:attr:`~sim.program.Task.alone`), from that op on; -inf elsewhere (unknown)."""
        q = self._owner[tid]
        ids = self.stream_ids[q]
        sums = self._solo_sums.get(q)
        if sums is None:
            if self.program.tasks[ids[0]].stream is not Stream.COMPUTE:
                return -math.inf
            duration = self.duration
            sums = self._solo_sums[q] = np.concatenate(([0.0], np.cumsum([duration[t] for t in ids]))).tolist()
        at, here = bisect.bisect_left(ids, tid), self._first_unplaced(q)
        if q == mine and at >= here:
            return math.inf
        prev: float = self.finish[ids[here - 1]] if here else 0.0  # type: ignore[assignment]  # ended: before here
        return prev + (sums[at + 1] - sums[here])

    def _members_of(self, key: int) -> list[int]:
        """The tasks of collective ``key`` (of those with several simulated members)."""
        if self._members is None:
            self._members = {}
            counts = self.program.coll_members
            for t in self.program.tasks:
                if t.comm and counts.get(t.coll_key, 1) > 1:
                    self._members.setdefault(t.coll_key, []).append(t.id)
        return self._members[key]

    def _first_unplaced(self, k: int) -> int:
        """The position of stream ``k``'s first task with no end yet (its length if none). A
        stream being placed up the call chain has placed tasks past its ``_pos``; tasks are
        placed in order, so the walk goes on from where the last one stopped."""
        ids, finish = self.stream_ids[k], self.finish
        p, n = max(self._pos[k], self._seen[k]), len(ids)
        while p < n and finish[ids[p]] is not None:
            p += 1
        self._seen[k] = p
        return p

    # -- the stream process -------------------------------------------------------------------
    def _notify(self, tid: int) -> None:
        ev = self.waiters.pop(tid, None)
        if ev is not None:
            ev.succeed()

    def _place(self, task, start: float, end: float | None = None) -> float:
        """Place a compute task (or block) at ``start`` (ending at ``end``, by default its
        duration later): its span's start and its memory deltas; returns its end."""
        if end is None:
            end = start + self.duration[task.id]
        self.start[task.id] = start
        if task.mem_start_bytes:
            self.mem[task.rank].append((start, task.mem_start_bytes))
        if task.mem_end_bytes:
            self.mem[task.rank].append((end, task.mem_end_bytes))
        return end

    def _eager(self, k: int) -> int:
        """Place stream ``k``'s next tasks that need no clock: compute, and comm at its solo
        time with no group to meet, as soon as their dependencies' end times are known. A
        dependency on a task not placed yet first tries to place that task's stream the same
        way (streams already being placed up the call chain are skipped). Returns the task it
        stopped at: -1 when the stream is done, else a task that needs the process (its
        dependency is still unknown, or it needs the clock or a rendezvous)."""
        (busy, tasks, finish, owner, start_of, fixed, members, contenders, held, gate, duration, mem,
         waiters, all_ids, positions, cursors, stalled, solo, busy_bytes, running, compute_of) = self._ctx
        ids, pos = all_ids[k], positions[k]
        if pos >= len(ids):
            return -1
        busy.add(k)
        cursor = cursors[k]
        stop = -1
        why = -2
        n = len(ids)
        while pos < n:
            tid = ids[pos]
            task = tasks[tid]
            start = cursor
            blocked = False
            for d in task.deps:
                f = finish[d]
                if f is None:
                    o = owner[d]
                    if o not in busy:
                        self._eager(o)
                        f = finish[d]
                    if f is None:
                        blocked = True
                        break
                if f > start:
                    start = f
            if blocked:
                stop, why = tid, d
                if task.comm and owner[d] == compute_of.get(task.rank):
                    gate[k] = d  # its next kernel waits for d: the compute ops before d are quiet
                break
            if task.comm:
                if members.get(task.coll_key, 1) > 1:
                    stop = tid
                    break
                dur = fixed.get(id(task.op))
                if dur is None:
                    positions[k], cursors[k] = pos, cursor
                    dur = self._alone_on_links(task, k, start)
                    if dur is None:
                        stop = tid
                        break
                start_of[tid] = start
                op = task.op
                hit = solo.get(id(op))
                if hit is None:
                    hit = solo[id(op)] = (self._loads(op), self.plans[id(op)].sm_fraction)
                loads, f = hit
                for link, nbytes in loads:  # _account, inlined
                    busy_bytes[link] += nbytes
                end = start + dur
                if self.pulses is not None and dur > 0:
                    self.pulses.append((start, dur, loads, 0))
                r = task.rank
                if f and r in held and not task.alone:  # _hold, inlined
                    held[r].hold(start, end, f)
                    if running:
                        self._rerun(r)
            else:
                if task.coll_key >= 0 and members.get(task.coll_key, 1) > 1:
                    stop = tid
                    break
                r = task.rank
                if r in contenders:
                    gated = type(task.op) is not Block and not self._compute_on_clock
                    for c in contenders[r]:
                        g = gate[c]
                        if g < 0 or finish[g] is not None:
                            gated = False
                            break
                    if gated:  # every comm stream beside it waits for a later op of this stream:
                        end = held[r].end_s(start, duration[tid])  # what _quiet_end finds first
                    else:
                        positions[k], cursors[k] = pos, cursor
                        end = self._quiet_end(task, k, start)
                        if end is None:
                            stop = tid
                            break
                else:
                    end = start + duration[tid]
                start_of[tid] = start
                if task.mem_start_bytes:
                    mem[r].append((start, task.mem_start_bytes))
                if task.mem_end_bytes:
                    mem[r].append((end, task.mem_end_bytes))
            finish[tid] = end
            if tid in waiters:
                waiters.pop(tid).succeed()
            cursor = end
            pos += 1
        positions[k], cursors[k] = pos, cursor
        stalled[k] = why
        busy.discard(k)
        if pos >= n and k in self._retiring:
            self._retire(k)
        return stop

    def _retire(self, k: int) -> None:
        """Comm stream ``k`` has placed its last task: no kernel of it is left to meet, so its
        rank's compute no longer looks at it."""
        self._retiring.discard(k)
        r = self.program.tasks[self.stream_ids[k][0]].rank
        self._contenders[r] = tuple(c for c in self._contenders[r] if c != k)

    def _stream(self, k: int):
        """The process of stream ``k``: place what needs no clock (:meth:`_eager`), wait for
        what it cannot, run what needs the clock or a rendezvous."""
        env = self.env
        tasks = self.program.tasks
        finish, start_of = self.finish, self.start
        ids = self.stream_ids[k]
        while True:
            tid = self._eager(k)
            if tid < 0:
                return
            task = tasks[tid]
            start = self._cursor[k]
            waited = False
            for d in task.deps:
                f = finish[d]
                if f is None:
                    ev = self.waiters.get(d)
                    if ev is None:
                        ev = self.waiters[d] = env.event()
                    yield ev
                    waited = True
                    break
                if f > start:
                    start = f
            if waited or self._pos[k] >= len(ids) or ids[self._pos[k]] != tid:
                continue  # something moved on while this waited: look again
            if task.comm and id(task.op) in self.fixed_comm:
                start_of[tid] = start
                dur = self.fixed_comm[id(task.op)]
                # the group's members start together; the last to arrive accounts it once
                meet, last = yield from self._meet(task, start)
                if last:
                    self._account(task.op, meet, dur)
                end = meet + dur
                self.xfer_start[tid] = meet
                if task.rank in self._held and not task.alone:
                    self._hold(task.rank, task.op, meet, end)
            elif task.comm:
                if start > env.now:
                    yield env.timeout(start - env.now)
                    if self._pos[k] >= len(ids) or ids[self._pos[k]] != tid:
                        continue  # placed at its solo time while this waited
                start_of[tid] = start
                self._on_clock.add(k)
                yield from self._comm(task)
                self._on_clock.discard(k)
                end = env.now
            else:  # compute that needs the clock, or a block that meets its group's members
                if task.coll_key >= 0:
                    start, _ = yield from self._meet(task, start)
                if task.rank in self._contenders:
                    if start > env.now:
                        yield env.timeout(start - env.now)
                        if self._pos[k] >= len(ids) or ids[self._pos[k]] != tid:
                            continue  # placed while this waited
                    self._busy.add(k)  # nothing else places this stream meanwhile
                    end = self._quiet_end(task, k, start)
                    if end is None:
                        end = yield from self._run_on_clock(task, start)
                    self._busy.discard(k)
                    end = self._place(task, start, end)
                else:
                    end = self._place(task, start)
            finish[tid] = end
            self._cursor[k] = end
            self._pos[k] += 1
            self._notify(tid)
            if self._pos[k] >= len(ids) and k in self._retiring:
                self._retire(k)

    # -- compute beside communication kernels ----------------------------------------------
    def _contending_streams(self, tasks, streams) -> dict[int, tuple[int, ...]]:
        """Rank -> the indices of its comm streams that run a kernel holding SMs."""
        out: dict[int, list[int]] = {}
        plans = self.plans
        for k, ids in enumerate(streams):
            first = tasks[ids[0]] if ids else None
            if first is None or not first.comm:
                continue
            if self._all_contend or any(plans[id(tasks[t].op)].sm_fraction > 0 for t in ids):
                out.setdefault(first.rank, []).append(k)
        return {r: tuple(ks) for r, ks in out.items()}

    def _hold(self, rank: int, op, t0: float, t1: float) -> None:
        """A kernel of ``op`` runs on ``rank`` over ``[t0, t1]``."""
        f = self.plans[id(op)].sm_fraction
        if f:
            self._held[rank].hold(t0, t1, f)
            self._rerun(rank)

    def _sensitivity(self, task) -> float:
        """The share of ``task`` that comm kernels outside it slow: 1 for a compute op; a
        block's compute share (its own collectives' exposed time is not slowed)."""
        if type(task.op) is not Block:
            return 1.0
        d, _, compute, _ = self.block_timing(task.op, self.slowdown.get(task.rank, 1.0))
        return compute / d if d > 0 else 0.0

    def _quiet_end(self, task, k: int, start: float) -> float | None:
        """The end of compute task ``task`` (of stream ``k``) started at ``start``, when every
        comm kernel that can run beside it on its GPU is known; None when one is not (one in
        flight, or one whose start is not settled and may fall before that end)."""
        if self._compute_on_clock:
            return None
        r = task.rank
        ctx = self._ctx
        busy, tasks, finish, owner, gate, duration = ctx.busy, ctx.tasks, ctx.finish, ctx.owner, ctx.gate, ctx.duration
        all_ids, positions, cursors, stalled = ctx.ids, ctx.positions, ctx.cursors, ctx.stalled
        contenders, held = ctx.contenders[r], ctx.held[r]
        work = duration[task.id]
        sens = 1.0 if type(task.op) is not Block else self._sensitivity(task)
        end = held.end_s(start, work, sens)
        c = 0
        while c < len(contenders):
            s = contenders[c]
            g = gate[s]
            if g >= 0 and finish[g] is None:
                c += 1
                continue
            # whether stream s's next kernel cannot start before `end` (its start's lower bound: its
            # stream's last end and its dependencies' ends, one not placed yet on stream k ending later)
            ids = all_ids[s]
            p, n, lb = positions[s], len(ids), cursors[s]
            while p < n:  # a stream being placed up the call chain has placed tasks past _pos
                f = finish[ids[p]]
                if f is None:
                    break
                lb, p = f, p + 1
            if p >= n:
                c += 1
                continue
            after = quiet = False
            for d in tasks[ids[p]].deps:
                f = finish[d]
                if f is None:
                    if owner[d] != k:
                        break
                    after = True
                    gate[s] = d  # quiet for every op of stream k before d, until d is placed
                elif f > lb:
                    lb = f
            else:
                quiet = after or lb >= end
            if quiet:
                c += 1
                continue
            # its next kernel may start before `end`: settle what it can without the clock
            # (a kernel placed at its solo time is then known) and look at every stream again
            d = stalled[s]
            if s in busy or not (d == -1 or (d >= 0 and finish[d] is not None)):
                return None
            at = positions[s]
            self._eager(s)
            if positions[s] == at:
                return None
            end, c = held.end_s(start, work, sens), 0
        return end

    def _run_on_clock(self, task, start: float):
        """Run compute task ``task`` from ``start`` (the clock's time) until its work is done,
        its end re-computed as the comm kernels on its GPU start and end; return its end."""
        r = task.rank
        run = self._running[r] = _Run(start, self.duration[task.id], self._sensitivity(task), self.env.event())
        self._rerun(r)
        yield run.done
        del self._running[r]
        return run.end

    def _rerun(self, rank: int) -> None:
        """Re-compute the end of the compute task running on the clock on ``rank``, if any."""
        run = self._running.get(rank)
        if run is None or run.done.triggered:
            return
        run.end = self._held[rank].end_s(run.start, run.work, run.sens)
        run.gen += 1
        ev = self.env.timeout(max(run.end - self.env.now, 0.0))
        ev.callbacks.append(partial(_ran, run, run.gen))

    def _meet(self, task, start: float):
        """Wait until every simulated member of ``task``'s group has reached it. Returns the
        latest arrival's time, everyone's start, and whether this member arrived last."""
        need = self.program.coll_members.get(task.coll_key, 1)
        if need <= 1:
            return start, True
        meet = self.meetings.get(task.coll_key)
        if meet is None:
            meet = self.meetings[task.coll_key] = _Meeting(start, self.env.event())
        meet.count += 1
        meet.start = max(meet.start, start)
        if meet.count < need:
            yield meet.released
            return meet.start, False
        del self.meetings[task.coll_key]
        meet.released.succeed()
        return meet.start, True

    def _comm(self, task):
        env = self.env
        key = task.coll_key
        need = self.program.coll_members.get(key, 1)
        if need > 1:
            rv = self.rendezvous.get(key)
            if rv is None:
                rv = self.rendezvous[key] = _Gathering(env.event())
            rv.count += 1
            rv.ids.append(task.id)
            if rv.count < need:
                yield rv.released
                return
            del self.rendezvous[key]
            for tid in rv.ids:
                self.xfer_start[tid] = env.now
        else:
            rv = None
        plan = self.plans[id(task.op)]
        tasks = self.program.tasks
        ranks = [tasks[t].rank for t in (rv.ids if rv is not None else (task.id,))
                 if tasks[t].rank in self._held and not tasks[t].alone] if plan.sm_fraction else []
        for r in ranks:
            self._held[r].change(env.now, plan.sm_fraction)
            self._rerun(r)
        for phase in plan.phases:
            if phase.latency_s > 0:
                yield env.timeout(phase.latency_s)
            if phase.flows:
                yield self.net.transfer(phase.flows)
        for r in ranks:
            self._held[r].change(env.now, -plan.sm_fraction)
            self._rerun(r)
        if rv is not None:
            rv.released.succeed()

    # -- results ------------------------------------------------------------------------------
    def _block_spans(self, t, spans: list, op_args: dict) -> None:
        """A block's spans: each comm class's exposed time (from the block's start, one after
        another), then its compute."""
        op = t.op
        factor = self.slowdown.get(t.rank, 1.0)
        key = (id(op), factor, t.name)
        parts = op_args.get(key)
        if parts is None:
            _, exposed, _, shares = self.block_timing(op, factor)
            comm = tuple((stream, f"nccl {cls.value} {t.name}", cls, e,
                          (("collectives", len(op.comm_ops(cls))),
                           ("bytes", sum(c.size_bytes for c in op.comm_ops(cls)))))
                         for cls, stream, e in exposed if e > 0)
            extra = (("compute_by_kind", shares), ("ops", sum(1 for s in op.streams if s is None)),
                     ("flops", op.flops), ("bytes", op.bytes))
            parts = op_args[key] = (comm, extra)
        comm, extra = parts
        at, end = self.start[t.id], self.finish[t.id]
        for stream, name, cls, e, bytes_ in comm:
            spans.append(Span(t.rank, stream, name, OpKind.COLLECTIVE, at, at + e, t.args, cls, None, None, bytes_,
                              at))
            at += e
        spans.append(Span(t.rank, t.stream, t.name, t.kind, at if at < end else end, end, t.args, None, None, None,
                          extra))

    def _span_list(self, op_args: dict[int, tuple]) -> list[Span]:
        """Every task's spans, made one by one: a layer block's (:meth:`_block_spans`) and the
        others' as :meth:`sim.results.SpanTable.spans` makes them."""
        spans: list[Span] = []
        block_args: dict = {}
        for t in self.program.tasks:
            op = t.op
            if type(op) is Block:
                self._block_spans(t, spans, block_args)
                continue
            if id(op) not in op_args:
                op_args[id(op)] = _op_args(op)
            spans.extend(SpanTable([t], {t.id: self.start[t.id]}, {t.id: self.finish[t.id]},  # type: ignore[arg-type]
                                   self.xfer_start, op_args).spans())  # (spans() reads start and end by task id alone)
        return spans

    def _result(self, wall_s: float) -> SimResult:
        prog = self.program
        finish, start = cast("list[float]", self.finish), self.start  # every task ended (run() checked)
        op_list = list(map(_T_OP, prog.tasks))
        ops = dict(zip(map(id, op_list), op_list))
        op_args: dict[int, tuple] = {}
        for oid, op in ops.items():
            if type(op) is Block:
                break
            op_args[oid] = _op_args(op)
        spans: SpanTable | list[Span]
        if len(op_args) == len(ops) and _in_place(prog.tasks):
            spans = SpanTable(prog.tasks, start, finish, self.xfer_start, op_args)
        else:  # layer blocks (or tasks not at their ids' places): every span made here
            spans = self._span_list(op_args)
        counters = []
        for rank in sorted(self.mem):
            level = prog.static_memory_bytes.get(rank, 0.0)
            counters.append(CounterSample(rank, 0.0, "memory", level))
            for ts, delta in sorted(self.mem[rank]):
                level += delta
                counters.append(CounterSample(rank, ts, "memory", level))
        makespan = max(finish, default=0.0)
        meta = {"simulated_wall_s": wall_s, "link_busy_bytes": list(self.net.busy_bytes)}
        if self.record_links:
            assert self.pulses is not None and self.net.rate_log is not None  # both lists when recording (run())
            meta["link_rates"] = LinkRates(self.pulses, self.net.rate_log)
        return SimResult(list(prog.ranks), spans, counters, makespan, self.env.events_processed,
                         prog.world_size, meta)


_T_OP, _T_ID = operator.attrgetter("op"), operator.attrgetter("id")


def _op_args(op) -> tuple:
    """An op's args on its spans: its GEMM shape (and batch), FLOPs where it has any, bytes."""
    extra: tuple[tuple[str, Any], ...] = \
        (("m", op.m), ("n", op.n), ("k", op.k)) if getattr(op, "m", None) is not None else ()
    if getattr(op, "batch", 1) > 1:
        extra += (("batch", op.batch),)
    if op.flops:
        extra += (("flops", op.flops),)
    return extra + (("bytes", op.bytes),)


def _in_place(tasks: list) -> bool:
    """Whether every task sits at the position of its id (as the program builders add them)."""
    n = len(tasks)
    return bool(np.array_equal(np.fromiter(map(_T_ID, tasks), dtype=np.int64, count=n), np.arange(n)))


def _time_block(block: Block, times: list[float],
                held: Sequence[float] = ()) -> tuple[dict[CommClass, float], list[float]]:
    """Run ``block`` alone from time 0 with its ops taking ``times`` (solo); return, per comm
    class, how long its compute stream waited on that class (their sum plus the compute time
    is the block's duration), and each op's time as run. A wait is charged to the comm op that
    ended last among those the compute op waited for; a comm op no compute op of the block
    waits for holds its end. ``held[i]``: the fraction of the GPU's SMs comm op ``i`` holds
    while it runs; the compute ops beside it run that much slower
    (:class:`~sim.engine.contention.HeldSMs`).

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


def _ran(run: _Run, gen: int, _event) -> None:
    """A compute task's timer fired: it is done unless its end moved since."""
    if gen == run.gen and not run.done.triggered:
        run.done.succeed()


MAX_SHARED_ALL_TO_ALL = 32
"""An all-to-all over more ranks than this is priced alone (see ``Simulation._fixed_comm``)."""
