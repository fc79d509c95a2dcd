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
is timed alone once from its ops' prices (:meth:`~sim.engine.pricing.Pricing.block_timing`, its
compute slowed by its own collectives) and placed like compute; kernels outside it slow its
compute share.

This module holds :class:`Simulation`'s constructor, :meth:`Simulation.run` and the SimPy
processes (a stream's, a collective's rendezvous and flows, a compute op on the clock); the
rest of the engine is in mixins that :class:`Simulation` inherits, one concept each:
:mod:`sim.engine.pricing` (what ops cost, link accounting), :mod:`sim.engine.placement` (placement
ahead of the clock, SM contention) and :mod:`sim.engine.spans` (the result). The flow network is
:mod:`sim.engine.network`, the held SMs :mod:`sim.engine.contention`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import simpy

from sim.costs.base import CostModel
from sim.engine.contention import HeldSMs
from sim.engine.network import FlowNetwork
from sim.engine.placement import Containers, Placement
from sim.engine.pricing import MAX_SHARED_ALL_TO_ALL, Pricing
from sim.engine.spans import SpanKeeping
from sim.errors import DeadlockError
from sim.program import Program
from sim.results import SimResult
from sim.types import Stream

__all__ = ["Simulation", "ReferencePaths", "ENGINE_RULES", "MAX_SHARED_ALL_TO_ALL"]


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


class Simulation(Placement, SpanKeeping, Pricing):
    """One iteration of ``program`` under ``costs``.

    Parameters
    ----------
    program : Program
        From :func:`sim.workload.taskgraph.build_program`.
    costs : CostModel
        Prices compute ops and plans communication.
    capacity_bytes_per_s : list of float
        Link capacities by link id (empty for a cost model that plans no flows).

    Notes
    -----
    The constructor and :meth:`run` set up the state; the SimPy processes are here, and the
    rest is in mixins, one concept each: :class:`~sim.engine.pricing.Pricing` (prices, plans,
    link accounting), :class:`~sim.engine.placement.Placement` (placement ahead of the clock, SM
    contention) and :class:`~sim.engine.spans.SpanKeeping` (the result). Each mixin's docstring
    names the attributes it reads and writes.
    """

    env: _CountingEnvironment
    """The SimPy environment of the run (set by :meth:`run`)."""

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
        self._ctx = Containers(
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

    # -- the stream process -------------------------------------------------------------------
    def _notify(self, tid: int) -> None:
        ev = self.waiters.pop(tid, None)
        if ev is not None:
            ev.succeed()

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


def _ran(run: _Run, gen: int, _event) -> None:
    """A compute task's timer fired: it is done unless its end moved since."""
    if gen == run.gen and not run.done.triggered:
        run.done.succeed()
