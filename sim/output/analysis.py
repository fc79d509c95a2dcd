"""Where the time goes: per-rank breakdown of a simulated iteration.

For each simulated rank the iteration splits into compute (the compute stream busy), exposed
communication (a transfer in flight while the compute stream is idle, charged to one class in
the order tp, cp, ep, pp, dp so nothing is counted twice) and idle time, which is the
pipeline bubble plus waiting on peers. A communication span counts from the moment its
transfer starts (all members arrived), not from when this rank began waiting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.results import SimResult, Span, span_arrays, span_column, span_op_args
from sim.types import CommClass, OpKind, Stream

__all__ = ["RankBreakdown", "breakdown"]

_PRIORITY = (CommClass.TP, CommClass.CP, CommClass.EP, CommClass.PP, CommClass.DP)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``intervals``, as sorted disjoint intervals (empty ones dropped, touching
    ones merged): the plain definition :func:`_merge` computes with numpy.

    >>> _union([(0, 2), (1, 3), (5, 6), (7, 7)])
    [(0, 3), (5, 6)]
    """
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


def _merge(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_union` of the intervals ``[s, e)``, as the arrays of its starts and ends: the
    same intervals, to the bit (an end is the largest end merged into it)."""
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    if not s.size:
        return s, e
    order = np.lexsort((e, s))
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    first = np.empty(s.size, dtype=bool)
    first[0] = True
    np.greater(s[1:], reach[:-1], out=first[1:])  # touching intervals merge, as in _union
    at = np.flatnonzero(first)
    return s[at], reach[np.append(at[1:] - 1, s.size - 1)]


def _minus(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The parts of ``a`` outside ``b`` (both :func:`_merge` results), in order: each one the
    overlap of an interval of ``a`` with a gap between ``b``'s intervals, none empty."""
    (a_s, a_e), (b_s, b_e) = a, b
    gap_s = np.concatenate(([-np.inf], b_e))
    gap_e = np.concatenate((b_s, [np.inf]))
    lo = np.searchsorted(gap_e, a_s, side="right")   # the first gap ending after the interval starts
    hi = np.searchsorted(gap_s, a_e, side="left")    # past the last gap starting before it ends
    count = np.maximum(hi - lo, 0)
    which = np.repeat(np.arange(a_s.size), count)
    gap = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count) + np.repeat(lo, count)
    s = np.maximum(a_s[which], gap_s[gap])
    e = np.minimum(a_e[which], gap_e[gap])
    keep = e > s
    return s[keep], e[keep]


def _total(x: np.ndarray) -> float:
    """``sum(x)`` added one element after another, in order, as a loop would (an
    accumulation is sequential; ``np.sum`` adds pairwise); 0 when empty, as ``sum([])``."""
    return float(np.add.accumulate(x)[-1]) if x.size else 0


def _length(iv: tuple[np.ndarray, np.ndarray]) -> float:
    """``sum(b - a for a, b in intervals)``, added in the same order."""
    return _total(iv[1] - iv[0])


_F_KIND, _F_CLASS, _F_OP_ARGS, _F_XFER = map(Span._fields.index, ("kind", "comm_class", "op_args", "transfer_start_s"))


def _kind_shares(op_args) -> bool:
    """Whether a compute span's op args carry a layer block's time per kind (its first pair)."""
    return bool(op_args) and op_args[0][0] == "compute_by_kind"


def _by_kind_loop(spans: list[Span]) -> dict[OpKind, float]:
    """Compute time by kind from the compute spans ``spans``, a layer block's by its shares."""
    by_kind: dict[OpKind, float] = {}
    for s in spans:
        if _kind_shares(s.op_args):  # a layer block's share per kind
            for kind, share in s.op_args[0][1]:
                by_kind[kind] = by_kind.get(kind, 0.0) + (s.end_s - s.start_s) * share
        else:
            by_kind[s.kind] = by_kind.get(s.kind, 0.0) + (s.end_s - s.start_s)
    return by_kind


def breakdown(result: SimResult) -> list[RankBreakdown]:
    """The breakdown of every simulated rank, in rank order.

    Each rank's compute time is the union of its compute spans; each class's exposed time, in
    the order tp, cp, ep, pp, dp, the part of its transfers' union outside what is covered so
    far (compute and the classes before it), which it then joins. The unions are taken with
    numpy (:func:`_merge`, :func:`_minus`); every sum adds the same numbers in the same order
    as a loop over the spans would, so the figures do not depend on how they were reached."""
    spans = result.spans
    n = len(spans)
    T = result.makespan_s
    classes = list(CommClass)
    rank, stream, start, end = span_arrays(spans)
    code = {None: -1, **{c: i for i, c in enumerate(classes)}}
    cls = np.fromiter(map(code.__getitem__, span_column(spans, _F_CLASS)), dtype=np.int64, count=n)
    xfer = start.copy()  # a comm span counts from its transfer's start
    comm_at = np.flatnonzero(cls >= 0).tolist()
    got = list(map(span_column(spans, _F_XFER).__getitem__, comm_at))
    if None in got:
        got = [x if x is not None else float(start[i]) for i, x in zip(comm_at, got)]
    xfer[comm_at] = got
    kinds = list(OpKind)
    kcode = {k: i for i, k in enumerate(kinds)}
    kind = np.fromiter(map(kcode.__getitem__, span_column(spans, _F_KIND)), dtype=np.int64, count=n)
    blocks = any(map(_kind_shares, span_op_args(spans)))  # layer blocks' shares
    op_args = span_column(spans, _F_OP_ARGS) if blocks else None
    order = np.argsort(rank, kind="stable")
    ranks_sorted = rank[order]
    out = []
    for info in result.ranks:
        lo, hi = np.searchsorted(ranks_sorted, [info.rank, info.rank + 1])
        idx = order[lo:hi]  # this rank's spans, in their order
        is_compute = stream[idx] == int(Stream.COMPUTE)
        ci = idx[is_compute]
        covered = _merge(start[ci], end[ci])
        compute_s = _length(covered)
        if blocks and any(map(_kind_shares, map(op_args.__getitem__, ci.tolist()))):
            by_kind = _by_kind_loop([spans[i] for i in ci.tolist()])
        else:
            dur = end[ci] - start[ci]
            kc = kind[ci]
            firsts = np.unique(kc, return_index=True)[1]
            by_kind = {}
            for j in np.sort(firsts).tolist():  # in order of first appearance
                k = int(kc[j])
                by_kind[kinds[k]] = _total(dur[kc == k])
        comm_idx = idx[~is_compute]
        comm_cls = cls[comm_idx]
        exposed, busy = {}, {}
        for c in _PRIORITY:
            sel = comm_idx[comm_cls == code[c]]
            u = _merge(xfer[sel], end[sel])
            busy[c] = _length(u)
            rest = _minus(u, covered)
            exposed[c] = _length(rest)
            covered = _merge(np.concatenate((covered[0], rest[0])), np.concatenate((covered[1], rest[1])))
        idle = max(T - compute_s - sum(exposed.values()), 0.0)
        out.append(RankBreakdown(info.rank, info.pp, compute_s, exposed, idle, by_kind, busy))
    return out
