"""Where each task goes on its stream without the clock: eager placement, SM contention, bounds.

:class:`Placement` is a mixin of :class:`~sim.engine.simulation.Simulation`. A stream places a
compute op as soon as its dependencies' end times are known and so are all the comm kernels
that can run beside it on its GPU (:meth:`Placement._quiet_end`, the kernels holding some of its
SMs: :mod:`sim.engine.contention`); a comm op with no group to meet at its solo time when no
other transfer can meet it on its links before that time is up (:meth:`Placement._alone_on_links`).
What it cannot place this way it leaves to the stream's SimPy process
(:meth:`~sim.engine.simulation.Simulation._stream`), which runs it on the clock.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from sim.engine.contention import HeldSMs
from sim.engine.pricing import Pricing
from sim.program import Block
from sim.types import Stream

__all__ = ["Placement", "Containers"]


class Containers(NamedTuple):
    """The engine's containers that :meth:`Placement._eager` and :meth:`Placement._quiet_end`
    read (a tuple, so that the hot one unpacks them in one step); each field is the attribute
    of :class:`~sim.engine.simulation.Simulation` it names."""

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


class Placement(Pricing):
    """The engine's placement of tasks ahead of the clock (a mixin of
    :class:`~sim.engine.simulation.Simulation`, whose constructor and ``run()`` set up the state;
    it prices ops through :class:`~sim.engine.pricing.Pricing`).

    Reads ``program``, ``plans``, ``duration``, ``stream_ids``, ``rendezvous`` (the collectives
    meeting on the clock), ``_ctx`` (the hot containers, :class:`Containers`), ``_owner``,
    ``_index``, ``_compute_of``, ``_on_clock`` (the comm streams running an op on the clock) and
    the reference switches ``_all_contend``, ``_shared_comm_on_clock`` and ``_compute_on_clock``.
    Writes ``start``, ``finish`` and ``mem`` of the tasks it places, the streams' ``_pos``,
    ``_cursor``, ``_stalled``, ``_gate`` and ``_seen``, the held SMs ``_held``, the link
    counters and ``pulses`` of the comm ops it places, ``_contenders`` and ``_retiring``
    (:meth:`_retire`), and its caches ``_sharers``, ``_solo``, ``_solo_sums`` and ``_members``.
    Wakes the waiters (``waiters``) of the tasks it places, and re-times the compute op running
    on the clock beside a kernel it places (the process's ``_rerun``).
    """

    duration: list[float]
    mem: dict[int, list[tuple[float, float]]]
    stream_ids: list[list[int]]
    rendezvous: dict[int, Any]
    """Collective key -> its gathering on the clock (``Simulation.rendezvous``: ``ids``, the
    members there)."""
    _ctx: Containers
    _pos: list[int]
    _seen: list[int]
    _owner: list[int]
    _index: dict[tuple[int, Stream], int]
    _sharers: dict[tuple[int, int], tuple[int, ...]]
    _on_clock: set[int]
    _compute_of: dict[int, int]
    _contenders: dict[int, tuple[int, ...]]
    _held: dict[int, HeldSMs]
    _retiring: set[int]
    _solo_sums: dict[int, list[float]]
    _members: dict[int, list[int]] | None
    _all_contend: bool
    _shared_comm_on_clock: bool
    _compute_on_clock: bool

    if TYPE_CHECKING:
        def _rerun(self, rank: int) -> None:
            """The SimPy side (:meth:`~sim.engine.simulation.Simulation._rerun`)."""

    # -- comm placed at its solo time, and bounds on other streams' next starts ----------------
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

    # -- the eager placement -------------------------------------------------------------------
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
