"""The spans formatted a stream at a time (:class:`Bulk`), to the byte the text of formatting
them one at a time (:func:`sim.output.trace.events.events_plain`, kept as the reference and the
path for times the bulk path does not take)."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator

import numpy as np

from sim.output.trace.events import (
    TRANSFER,
    TRANSFER_TAG,
    Json,
    counter_batch,
    flow_in,
    flow_out,
    flow_start_us,
    with_transfer,
)
from sim.output.trace.times import FAST_MAX_US, FRACTIONS, FRACTIONS_ARGS, FRACTIONS_DUR, US_PER_S, ns
from sim.results import SimResult, Span, span_arrays, span_column, span_fields, span_flows
from sim.types import CommClass, OpKind, Stream


class Bulk:
    """The spans of a result grouped by (pid, tid), ordered and rounded, ready to be formatted
    a (pid, tid) at a time, to the byte the text of :func:`events_plain`.

    The spans' times are rounded to whole nanoseconds all at once (:func:`ns`) and written as
    integers, the text around them that depends on the op and the stream is cached, and so is
    each args tuple's text (by identity; a comm span's transfer start, its own field, is
    written after its task's shared args, :meth:`with_transfer`); each event is then joined
    from its pieces. Everything
    that needs all the spans is worked out here, once, so that a forked process can format a
    share of the groups (:func:`forked_parts`)."""

    def __init__(self, result: SimResult, ranks: dict, rank_a: np.ndarray, tid_a: np.ndarray, ts_ns: np.ndarray,
                 dur_ns: np.ndarray) -> None:
        spans = self.spans = result.spans
        n = len(spans)
        self.result, self.ranks, self.ts_ns, self.dur_ns = result, ranks, ts_ns, dur_ns
        missing = set(np.unique(rank_a).tolist()) - ranks.keys()
        if missing:
            s = next(s for s in spans if s.rank in missing)
            raise ValueError(f"span {s.name!r} is on rank {s.rank}, which has no RankInfo")
        order = self.order = np.lexsort((tid_a, rank_a))  # stable: a (pid, tid)'s spans in their given order
        key = rank_a[order] * (int(tid_a.max()) + 1) + tid_a[order]
        cuts = (np.flatnonzero(key[1:] != key[:-1]) + 1).tolist()
        firsts = [0] + cuts
        self.bounds = list(zip(firsts, cuts + [n]))
        self.groups = [(int(rank_a[order[i]]), int(tid_a[order[i]])) for i in firsts]
        """The (pid, tid) pairs in order; :attr:`bounds` are their spans' slices of :attr:`order`."""
        self.ts_qr = np.divmod(ts_ns, 1000)  # whole µs and ns
        self.dur_qr = np.divmod(dur_ns, 1000)
        outs, ins = span_flows(spans)
        self.linked = outs & ins  # both ends
        enc = self.enc = Json()
        self.kinds = {k: (enc.str(k.value), "comm" if k.is_comm else "kernel") for k in OpKind}
        self.classes: dict = {None: "", **{c: f',"comm_class":"{c.value}"' for c in CommClass}}
        self.xfer_keys: dict[int, bool] = {}
        """Whether an args tuple (by id, as :attr:`parts`) lacks a ``transfer_start_s`` key."""
        self.parts: dict[int, str] = {}
        """The text of an args tuple (or mapping) by id, with a comma after it unless it is
        empty: the spans keep each one alive, so an id stays its object's here."""

    @classmethod
    def of(cls, result: SimResult) -> Bulk | None:
        """The bulk form of ``result``; None for spans it does not take (none at all, a time that
        is negative, not finite or past :data:`FAST_MAX_US`, or an end before its start)."""
        spans = result.spans
        n = len(spans)
        ranks = {info.rank: info for info in result.ranks}
        if not n:
            return None
        rank_a, tid_a, start, end = span_arrays(spans)
        start, end = start * US_PER_S, end * US_PER_S
        if not (np.all((start >= 0) & (start < FAST_MAX_US)) and np.all((end >= start) & (end < FAST_MAX_US))) \
                or np.any(np.signbit(start)) or np.any(np.signbit(end)):  # -0.0 is written "-0.0"
            return None
        ts_ns = ns(start)
        dur_ns = ns(end) - ts_ns
        if np.any(dur_ns < 0):
            return None
        return cls(result, ranks, rank_a, tid_a, ts_ns, dur_ns)

    def __len__(self) -> int:
        """The number of batches: the metadata, each (pid, tid)'s events, the counters."""
        return len(self.groups) + 2

    def batch(self, i: int) -> list[str]:
        """The ``i``-th batch of events (:meth:`__len__`)."""
        if i == 0:
            return self.metadata()
        if i <= len(self.groups):
            return self.group(i - 1)
        return counter_batch(self.result, self.ranks, self.enc)

    def weights(self) -> list[int]:
        """Each batch's events, about (the number of spans or counters it formats)."""
        return [2 * (len(self.ranks) + len(self.groups)), *(hi - lo for lo, hi in self.bounds),
                len(self.result.counters)]

    def batches(self, lo: int, hi: int) -> Iterator[list[str]]:
        """The batches from ``lo`` to ``hi``."""
        return map(self.batch, range(lo, hi))

    def metadata(self) -> list[str]:
        """The process and thread names and sort indices: every process's, then every thread's."""
        return [e for pid in sorted(self.ranks) for e in self.process_metadata(pid)] + \
            [e for pid, tid in self.groups for e in self.thread_metadata(pid, tid)]

    def process_metadata(self, pid: int) -> list[str]:
        """Process ``pid``'s name and sort index."""
        return [f'{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":'
                f'{self.enc.str(self.ranks[pid].label)}}}}}',
                f'{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}']

    def thread_metadata(self, pid: int, tid: int) -> list[str]:
        """Thread ``tid`` of process ``pid``: its name and sort index."""
        return [f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":'
                f'{self.enc.str(Stream(tid).label)}}}}}',
                f'{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{tid}}}}}']

    def with_transfer(self, args, text: str, start_s) -> str:
        """The text of ``args`` (``text``, from :attr:`parts`) with a span's
        ``transfer_start_s`` after them, followed by a comma, as :func:`with_transfer` writes
        it: appended to ``text`` unless ``args`` already has that key (then written whole)."""
        key = self.xfer_keys.get(id(args))
        if key is None:
            try:
                key = TRANSFER not in (dict(args) if args else {})
            except (TypeError, ValueError):  # not pairs: written whole (and refused there)
                key = False
            self.xfer_keys[id(args)] = key
        if key:
            return f"{text}{self.enc.str(TRANSFER)}:{self.enc.value(start_s)},"
        return with_transfer(self.enc, args, start_s) + ","

    def scalar_args(self) -> bool:
        """Whether every span's args and op args hold only strings, ints, floats, bools and
        None (numpy's included): JSON that parsing and compact re-encoding give back unchanged
        (a list or mapping value is written with spaces after its commas)."""
        for col in (_F_ARGS, _F_OP_ARGS):
            for a in {id(a): a for a in span_column(self.spans, col)}.values():
                for _, v in (a.items() if isinstance(a, dict) else a):
                    if not (v is None or type(v) in _SCALARS or isinstance(v, (np.integer, np.floating))):
                        return False
        return True

    def group(self, g: int, hta: tuple[int, Callable] | None = None) -> list[str]:
        """The slices and arrows of the ``g``-th (pid, tid), by time.

        ``hta``: ``(n, namer)`` to write them as a per-rank file for Holistic Trace Analysis has
        them (:mod:`sim.output.trace_ranks`): ``cat`` ``"kernel"``, the name ``namer(name, kind)``, a
        ``correlation`` id after the args counted on from ``n``, and no arrows."""
        (pid, tid), (lo, hi) = self.groups[g], self.bounds[g]
        enc, parts, ts_ns, dur_ns = self.enc, self.parts, self.ts_ns, self.dur_ns
        idx = self.order[lo:hi]
        at = idx.tolist()
        name_g, kind_g, class_g, args_g, op_args_g, xfer, outs, ins = span_fields(self.spans, _GROUP_FIELDS, at)
        if hi - lo > 1 and not _in_order(ts_ns[idx], dur_ns[idx], name_g.__getitem__):  # sorted: again
            names = dict(zip(at, name_g))
            at = sorted(at, key=lambda i: (ts_ns[i], dur_ns[i], names[i]))
            idx = np.asarray(at)
            name_g, kind_g, class_g, args_g, op_args_g, xfer, outs, ins = span_fields(self.spans, _GROUP_FIELDS, at)
        tq, tr, dq, dr = (c[idx].tolist() for c in (*self.ts_qr, *self.dur_qr))
        frac, linked = FRACTIONS, self.linked
        device = self.ranks[pid].local_gpu
        where = f'"pid":{pid},"tid":{tid},"ts":'
        tails = {c: f'"stream":{tid},"device":{device}{t}}}}}' for c, t in self.classes.items()}
        # each event is pieces joined: the text before "ts", ts, dur, the args, the text after
        keys = list(zip(name_g, kind_g, class_g))
        heads = {}
        for name, kind, cc in set(keys):
            k, cat = self.kinds[kind]
            if hta is None:
                heads[(name, kind, cc)] = (f'{{"ph":"X","cat":"{cat}","name":{enc.str(name)},{where}',
                                           f'"kind":{k},{tails[cc]}')
            else:  # the args end with the correlation id, written per slice below
                heads[(name, kind, cc)] = (f'{{"ph":"X","cat":"kernel","name":{enc.str(hta[1](name, kind))},{where}',
                                           f'"kind":{k},{tails[cc][:-2]},"correlation":')
        texts = []
        for col in (args_g, op_args_g):
            got = list(map(parts.get, map(id, col)))
            if None in got:
                missing = itertools.compress(col, map(operator.is_, got, itertools.repeat(None)))
                for a in {id(a): a for a in missing}.values():
                    t = enc.args(a)
                    parts[id(a)] = f"{t}," if t else ""
                got = list(map(parts.__getitem__, map(id, col)))
            texts.append(got)
        if xfer.count(None) < len(xfer):  # comm spans: their transfer start after their task's args
            # a finite float after args whose text has no such key (the tag not in it) is appended
            # here, as with_transfer would; anything else goes through it
            tag = TRANSFER_TAG
            texts[0] = [t if x is None else f"{t}{tag}{x!r}," if type(x) is float and x - x == 0.0 and tag not in t
                        else self.with_transfer(a, t, x) for a, t, x in zip(args_g, texts[0], xfer)]
        head = list(map(heads.__getitem__, keys))
        columns = [map(_FIRST, head), map(str, tq), map(FRACTIONS_DUR.__getitem__, tr), map(str, dq),
                   map(FRACTIONS_ARGS.__getitem__, dr), texts[0], texts[1], map(_SECOND, head)]
        if hta is not None:  # each slice's correlation id, then the end of its args and of it
            n = hta[0]
            return list(map("".join, zip(*columns, map(str, range(n + 1, n + 1 + len(at))),
                                         itertools.repeat("}}"))))
        events = list(map("".join, zip(*columns)))
        if linked.isdisjoint(outs) and linked.isdisjoint(ins):
            return events
        out = []
        for j, e in enumerate(events):
            out.append(e)
            if outs[j] in linked or ins[j] in linked:
                start_ns = tq[j] * 1000 + tr[j]
                end_ns = start_ns + dq[j] * 1000 + dr[j]
                if outs[j] in linked:  # start and end as floats: those the plain path rounds to
                    at = flow_start_us(start_ns / 1000, end_ns / 1000, xfer[j])
                    out.append(flow_out(outs[j], pid, tid, repr(at)))
                if ins[j] in linked:
                    out += flow_in(ins[j], pid, tid, f"{end_ns // 1000}{frac[end_ns % 1000]}")
        return out


def _in_order(ts: np.ndarray, dur: np.ndarray, name: Callable[[int], str]) -> bool:
    """Whether the rows ``(ts, dur, name(j))`` are sorted (the engine's streams arrive sorted);
    a row's name is asked for only where its time and duration tie with a neighbour's."""
    a, b = (ts[:-1], dur[:-1]), (ts[1:], dur[1:])
    if np.any((b[0] < a[0]) | ((b[0] == a[0]) & (b[1] < a[1]))):
        return False
    for j in np.flatnonzero((b[0] == a[0]) & (b[1] == a[1])).tolist():
        if name(j + 1) < name(j):
            return False
    return True


(_F_NAME, _F_KIND, _F_ARGS, _F_CLASS, _F_FLOW_OUT, _F_FLOW_IN, _F_OP_ARGS, _F_XFER) = map(
    Span._fields.index, ("name", "kind", "args", "comm_class", "flow_out", "flow_in", "op_args", "transfer_start_s"))


_GROUP_FIELDS = (_F_NAME, _F_KIND, _F_CLASS, _F_ARGS, _F_OP_ARGS, _F_XFER, _F_FLOW_OUT, _F_FLOW_IN)
"""The fields :meth:`Bulk.group` reads, in its order."""


_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_SCALARS = frozenset((str, int, float, bool))
