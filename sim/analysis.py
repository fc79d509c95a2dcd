"""Where the time goes: per-rank breakdown of a simulated iteration.

For each simulated rank the iteration splits into compute (the compute stream busy), exposed
communication (a transfer in flight while the compute stream is idle, charged to one class in
the order tp, cp, ep, pp, dp so nothing is counted twice) and idle time, which is the
pipeline bubble plus waiting on peers. A communication span counts from the moment its
transfer starts (all members arrived), not from when this rank began waiting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.results import SimResult, Span
from sim.types import CommClass, OpKind, Stream

__all__ = ["RankBreakdown", "breakdown", "union_length"]

_PRIORITY = (CommClass.TP, CommClass.CP, CommClass.EP, CommClass.PP, CommClass.DP)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by ``intervals``.

    >>> union_length([(0, 2), (1, 3), (5, 6)])
    4
    """
    return sum(b - a for a, b in _union(intervals))


def _subtract(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``a`` minus ``b``, both sorted disjoint unions."""
    out = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


@dataclass
class RankBreakdown:
    """One simulated rank's iteration, in seconds."""

    rank: int
    stage: int
    compute_s: float
    exposed_comm_s: dict[CommClass, float]
    idle_s: float
    compute_by_kind_s: dict[OpKind, float] = field(default_factory=dict)
    comm_busy_s: dict[CommClass, float] = field(default_factory=dict)


def _transfer_start(span: Span) -> float:
    return span.start_s if span.transfer_start_s is None else span.transfer_start_s


def breakdown(result: SimResult) -> list[RankBreakdown]:
    """The breakdown of every simulated rank, in rank order."""
    by_rank: dict[int, list[Span]] = {}
    for s in result.spans:
        by_rank.setdefault(s.rank, []).append(s)
    out = []
    T = result.makespan_s
    for info in result.ranks:
        spans = by_rank.get(info.rank, [])
        compute, by_kind = [], {}
        comm: dict[CommClass, list] = {c: [] for c in CommClass}
        for s in spans:
            if s.stream is Stream.COMPUTE:
                compute.append((s.start_s, s.end_s))
                if s.op_args and s.op_args[0][0] == "compute_by_kind":  # a layer block's share per kind
                    for kind, share in s.op_args[0][1]:
                        by_kind[kind] = by_kind.get(kind, 0.0) + (s.end_s - s.start_s) * share
                else:
                    by_kind[s.kind] = by_kind.get(s.kind, 0.0) + (s.end_s - s.start_s)
            elif s.comm_class is not None:
                comm[s.comm_class].append((_transfer_start(s), s.end_s))
        covered = _union(compute)
        compute_s = sum(b - a for a, b in covered)
        exposed, busy = {}, {}
        for c in _PRIORITY:
            u = _union(comm[c])
            busy[c] = sum(b - a for a, b in u)
            rest = _subtract(u, covered)
            exposed[c] = sum(b - a for a, b in rest)
            covered = _union(covered + rest)
        idle = max(T - compute_s - sum(exposed.values()), 0.0)
        out.append(RankBreakdown(info.rank, info.pp, compute_s, exposed, idle, by_kind, busy))
    return out
