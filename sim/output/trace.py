"""Turn a :class:`~sim.results.SimResult` into a Chrome trace that Perfetto and HTA can open.

This is the one module that converts seconds to microseconds (``US_PER_S``; see STYLE.md C/E).
The layout follows the Kineto conventions collected in ``shared/docs/conventions.md`` §1.3:
``pid`` = global rank (one process per :class:`~sim.results.RankInfo`), ``tid`` = the
:class:`~sim.types.Stream` value (one thread per stream in use), ``cat`` ``"kernel"`` or
``"comm"``, and ``args.stream`` / ``args.device`` on every slice (HTA reads ``args.stream``
and treats a slice without it as non-GPU; ``hta/utils/utils.py::normalize_gpu_stream_numbers``).
Span names are kept as the engine wrote them, since HTA classifies kernels by name: a name
starting ``nccl`` is communication (``hta/utils/utils.py::get_kernel_type``).

Rules followed so that Perfetto's strict JSON importer accepts the trace
(``src/trace_processor/importers/json/json_trace_parser.cc`` and ``json_trace_tokenizer.cc``,
google/perfetto):

* ``ts`` and ``dur`` are microseconds, written with 3 decimals (nanoseconds, like Kineto's
  ``output_json.cpp``). ``displayTimeUnit`` is ignored by Perfetto, so only the value matters.
* Only the four metadata names Perfetto honours are emitted: ``process_name``,
  ``process_sort_index``, ``thread_name``, ``thread_sort_index``.
* Complete (``X``) events on one ``(pid, tid)`` never overlap. Perfetto moves partially
  overlapping slices to an overflow track (stat ``slice_spill_overlapping_complete_event``),
  so concurrent work lives on separate streams. Zero-duration spans are kept (``dur`` 0.0);
  one that touches a neighbour is fine, one strictly inside another slice is a problem.
* Counter (``C``) events never have empty ``args``, which is a parse error.
* A v1 flow is keyed by ``(id, cat, name)`` (``FlowTracker::GetFlowIdForV1Event``): ``s`` and
  ``f`` share ``cat = name = "p2p"``. Each p2p arrow runs forward in time, from the moment the
  data leave to the moment they arrive. Perfetto binds an ``s``, and an ``f`` with
  ``"bp": "e"``, to the slice most recently begun on its track (``SliceTracker::
  GetTopmostSliceOnTrack``; events taken by ``ts``, at one ``ts`` complete events first,
  longest first, then the others in file order: ``TraceSorter``), orders the two slices by
  their starts (``FlowTracker``) and draws the arrow from the first slice's end to the
  second's start (``ui/src/frontend/flow_events_renderer.ts``); the legacy viewer draws it
  from the ``s``'s ``ts`` to the ``f``'s. A receive slice starts when its rank posts the
  receive, often long before the send, and ends when the data arrive, with the send: Perfetto
  draws an arrow bound to it backward (to its start, before the send's end). So the ``s``
  sits in the send slice at the transfer's start (:attr:`~sim.results.Span.transfer_start_s`;
  the slice's start where a span has none), and the ``f`` at the receive slice's end, where a
  thread-scoped instant ``"p2p arrival"`` (``"ph": "i"``, ``"s": "t"``: a zero-length slice
  to Perfetto) is written just before it on the receive stream's track for it to bind to.
  An arrow whose other end was not simulated is dropped, since a dangling ``s`` or ``f``
  binds to nothing.
* Non-ASCII text is written as UTF-8 rather than ``\\uXXXX``, which older tokenizers reject.

The output is deterministic: events are sorted by a total order, no wall-clock time is
recorded and gzip output has ``mtime=0`` and no file name, so equal inputs give equal bytes.
The spans are formatted a stream at a time (:class:`Bulk`), to the byte the text of
formatting them one at a time (:func:`_events_plain`, kept as the reference and the path for
times the bulk path does not take), and compressed on a second thread as they are formatted;
for a large trace, when a CPU is free, a forked process formats the later streams
(:func:`_forked_parts`) while this one formats the first ones and feeds the compressor the
whole text in order, so the bytes are those of one process.
The JSON is compact (``","``/``":"``); HTA's rank regex needs ``"rank": N`` with a space, which
matters only for per-rank files carrying ``distributedInfo``, not for this merged trace.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import json
import math
import operator
import os
import queue
import signal
import struct
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

from sim.output.gzip_parts import GzipParts, crc32, deflate_part
from sim.results import SimResult, Span, span_arrays, span_column, span_fields, span_flows
from sim.types import CommClass, OpKind, Stream

__all__ = ["chrome_trace", "write_chrome_trace", "validate_chrome_trace"]

US_PER_S = 1e6
"""Microseconds per second: the only seconds-to-microseconds factor in llmsim."""
_SLACK_US = 1e-3
"""Rounding slack (one nanosecond) allowed when comparing slice bounds."""
_FLOW = "p2p"
_ARRIVAL = "p2p arrival"
"""The name of the instant at which a p2p arrow ends (the data arrive)."""
_METADATA_ARG = {"process_name": ("name", str), "thread_name": ("name", str),
                 "process_sort_index": ("sort_index", int), "thread_sort_index": ("sort_index", int)}


def _us(seconds: float) -> float:
    """Seconds to microseconds, rounded to 3 decimals (nanoseconds)."""
    return round(seconds * US_PER_S, 3)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic collector while building ~10^5 small acyclic objects (halves the time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Json:
    """JSON text of argument values, with the strings' encodings cached (they repeat a lot)."""

    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        self.tuples: dict[int, tuple[object, str]] = {}
        self.pairs: dict[tuple, str] = {}
        """The text of a ``(key, value)`` pair with an int or str value, by the key, the value's
        type and the value (the args of layer passes repeat them)."""

    def str(self, text: str) -> str:
        out = self.strings.get(text)
        if out is None:
            out = self.strings[text] = json.dumps(text, ensure_ascii=False)
        return out

    def value(self, v: object) -> str:
        t = type(v)
        if t is str:
            return self.str(v)
        if t is bool or v is None:
            return json.dumps(v)
        if t is int:
            return str(v)
        if t is float or isinstance(v, (float, np.floating)):
            if not math.isfinite(v):
                raise ValueError(f"trace values must be finite numbers (got {v!r})")
            return repr(float(v))
        if isinstance(v, (int, np.integer)):
            return str(int(v))
        return json.dumps(v, ensure_ascii=False, allow_nan=False)

    def args(self, pairs) -> str:
        """``"k":v,...`` for a mapping or pairs; a tuple's text is cached by identity (the
        engine shares one tuple among the spans of a layer pass, or of an op)."""
        if type(pairs) is tuple:
            hit = self.tuples.get(id(pairs))
            if hit is None or hit[0] is not pairs:
                hit = self.tuples[id(pairs)] = (pairs, self._args(pairs))
            return hit[1]
        return self._args(pairs)

    def _args(self, pairs) -> str:
        items = pairs.items() if isinstance(pairs, dict) else pairs
        seen: dict[str, str] = {}  # a key given twice: its first place, its last value
        cache = self.pairs
        for k, v in items:
            t = type(v)
            if t is int or t is str:  # a pair's text by the pair (and the value's type: 1 == True)
                text = cache.get((k, t, v))
                if text is None:
                    text = cache[(k, t, v)] = f"{self.str(k)}:{self.value(v)}"
            else:
                text = f"{self.str(k)}:{self.value(v)}"
            seen[k] = text
        return ",".join(seen.values())


def _events(result: SimResult) -> Iterator[str]:
    """The trace's events as JSON text, in a total order that does not depend on the order of
    the spans given: metadata, then each (pid, tid) in order with its slices and arrows by time,
    then each rank's counters by time.

    The same text as :func:`_events_plain`, which formats one span at a time, in a fraction of
    its time (:class:`Bulk`)."""
    for batch in _event_batches(result):
        yield from batch


def _event_batches(result: SimResult) -> Iterator[list[str]]:
    """:func:`_events` in lists: the metadata, each (pid, tid)'s events, the counters (or pieces
    of :func:`_events_plain`, for spans the bulk path does not take)."""
    bulk = Bulk.of(result)
    if bulk is None:
        plain = _events_plain(result)  # which raises on NaN and infinities
        while batch := list(itertools.islice(plain, _PART_EVENTS)):
            yield batch
        return
    yield from bulk.batches(0, len(bulk))


class Bulk:
    """The spans of a result grouped by (pid, tid), ordered and rounded, ready to be formatted
    a (pid, tid) at a time, to the byte the text of :func:`_events_plain`.

    The spans' times are rounded to whole nanoseconds all at once (:func:`_ns`) and written as
    integers, the text around them that depends on the op and the stream is cached, and so is
    each args tuple's text (by identity; a comm span's transfer start, its own field, is
    written after its task's shared args, :meth:`with_transfer`); each event is then joined
    from its pieces. Everything
    that needs all the spans is worked out here, once, so that a forked process can format a
    share of the groups (:func:`_forked_parts`)."""

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
        enc = self.enc = _Json()
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
        is negative, not finite or past :data:`_FAST_MAX_US`, or an end before its start)."""
        spans = result.spans
        n = len(spans)
        ranks = {info.rank: info for info in result.ranks}
        if not n:
            return None
        rank_a, tid_a, start, end = span_arrays(spans)
        start, end = start * US_PER_S, end * US_PER_S
        if not (np.all((start >= 0) & (start < _FAST_MAX_US)) and np.all((end >= start) & (end < _FAST_MAX_US))) \
                or np.any(np.signbit(start)) or np.any(np.signbit(end)):  # -0.0 is written "-0.0"
            return None
        ts_ns = _ns(start)
        dur_ns = _ns(end) - ts_ns
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
        ``transfer_start_s`` after them, followed by a comma, as :func:`_with_transfer` writes
        it: appended to ``text`` unless ``args`` already has that key (then written whole)."""
        key = self.xfer_keys.get(id(args))
        if key is None:
            try:
                key = _TRANSFER not in (dict(args) if args else {})
            except (TypeError, ValueError):  # not pairs: written whole (and refused there)
                key = False
            self.xfer_keys[id(args)] = key
        if key:
            return f"{text}{self.enc.str(_TRANSFER)}:{self.enc.value(start_s)},"
        return _with_transfer(self.enc, args, start_s) + ","

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
        frac, linked = _FRACTIONS, self.linked
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
            tag = _TRANSFER_TAG
            texts[0] = [t if x is None else f"{t}{tag}{x!r}," if type(x) is float and x - x == 0.0 and tag not in t
                        else self.with_transfer(a, t, x) for a, t, x in zip(args_g, texts[0], xfer)]
        head = list(map(heads.__getitem__, keys))
        columns = [map(_FIRST, head), map(str, tq), map(_FRACTIONS_DUR.__getitem__, tr), map(str, dq),
                   map(_FRACTIONS_ARGS.__getitem__, dr), texts[0], texts[1], map(_SECOND, head)]
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
                    at = _flow_start_us(start_ns / 1000, end_ns / 1000, xfer[j])
                    out.append(_flow_out(outs[j], pid, tid, repr(at)))
                if ins[j] in linked:
                    out += _flow_in(ins[j], pid, tid, f"{end_ns // 1000}{frac[end_ns % 1000]}")
        return out


def _flow_start_us(start_us: float, end_us: float, transfer_start_s) -> float:
    """Where a p2p arrow leaves its send slice ``[start_us, end_us]`` (µs): the transfer's start
    (seconds, as :attr:`~sim.results.Span.transfer_start_s` holds it) rounded to nanoseconds
    where it lies in ``[start_us, end_us)``, else the slice's start (no transfer start, or one
    that is not a finite number or lies outside). Not at the end: a slice beginning there on
    the same track would take the ``s``, since Perfetto orders a complete event before other
    events of the same time (``TraceSorter``, ``SlowOperatorLess::KeyForType``).

    >>> _flow_start_us(2.0, 5.0, 3.0000004e-6), _flow_start_us(2.0, 5.0, None), _flow_start_us(2.0, 5.0, 5e-6)
    (3.0, 2.0, 2.0)
    """
    if transfer_start_s is None:
        return start_us
    try:
        at = round(float(transfer_start_s) * US_PER_S, 3) + 0.0  # + 0.0: -0.0 written as 0.0
    except (TypeError, ValueError):
        return start_us
    return at if start_us <= at < end_us else start_us


def _flow_out(flow: int, pid: int, tid: int, ts: str) -> str:
    """The ``s`` of p2p arrow ``flow``, at ``ts`` (its text) in the send slice on ``(pid, tid)``."""
    return f'{{"ph":"s","id":{flow},"cat":"{_FLOW}","name":"{_FLOW}","pid":{pid},"tid":{tid},"ts":{ts}}}'


def _flow_in(flow: int, pid: int, tid: int, ts: str) -> tuple[str, str]:
    """The end of p2p arrow ``flow`` at ``ts`` (its text), the end of the receive slice on
    ``(pid, tid)``: the ``"p2p arrival"`` instant there, then the ``f`` that binds to it."""
    return (f'{{"ph":"i","s":"t","cat":"{_FLOW}","name":"{_ARRIVAL}","pid":{pid},"tid":{tid},"ts":{ts}}}',
            f'{{"ph":"f","bp":"e","id":{flow},"cat":"{_FLOW}","name":"{_FLOW}","pid":{pid},"tid":{tid},"ts":{ts}}}')


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
_TRANSFER = "transfer_start_s"
_TRANSFER_TAG = f'"{_TRANSFER}":'
"""The key's text as :meth:`_Json.args` writes it: args text without it has no such key."""
_GROUP_FIELDS = (_F_NAME, _F_KIND, _F_CLASS, _F_ARGS, _F_OP_ARGS, _F_XFER, _F_FLOW_OUT, _F_FLOW_IN)
"""The fields :meth:`Bulk.group` reads, in its order."""


def _with_transfer(enc: _Json, args, start_s) -> str:
    """The text of ``args`` with ``("transfer_start_s", start_s)`` after them (a comm span's
    :attr:`~sim.results.Span.transfer_start_s`), as one args mapping: a key given twice keeps
    its first place and its last value, as :meth:`_Json.args` writes any repeated key."""
    items = list(args.items() if isinstance(args, dict) else args)
    return enc._args(items + [(_TRANSFER, start_s)])
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_SCALARS = frozenset((str, int, float, bool))
_FAST_MAX_US = 1e11
"""The largest time (µs, 28 hours) :func:`_events` writes from whole nanoseconds: below it a
time rounded to nanoseconds has at most 15 significant digits, which a double holds, so the
shortest repr of the double nearest ``n / 1000``, which ``round(x, 3)`` gives, is that decimal."""
_FRACTIONS = tuple(".0" if r == 0 else "." + f"{r:03d}".rstrip("0") for r in range(1000))
"""The digits after the point of ``repr(n / 1000)`` by ``n % 1000`` (``12.0``, ``12.5``, ``12.345``)."""
_FRACTIONS_DUR = tuple(f + ',"dur":' for f in _FRACTIONS)
_FRACTIONS_ARGS = tuple(f + ',"args":{' for f in _FRACTIONS)
"""The same, each followed by the text up to the next number (a slice's duration, its args)."""


def _ns(us: np.ndarray) -> np.ndarray:
    """``round(x, 3) * 1000`` of each element, as integers, to the last bit: Python rounds the
    exact binary value half to even; ``rint`` of ``x * 1000`` does too except where the
    product's own rounding could cross a half, and those few are left to Python. For
    ``0 <= x <`` :data:`_FAST_MAX_US`.

    >>> x = np.array([0.0005, 0.0015, 1.2345, 2.675, 1234567.0004999])
    >>> (_ns(x) / 1000).tolist() == [round(v, 3) for v in x.tolist()]
    True
    """
    p = us * 1000.0
    r = np.rint(p)
    near_half = np.abs(np.abs(p - r) - 0.5) <= 4 * np.spacing(p)
    for j in np.flatnonzero(near_half).tolist():
        r[j] = round(round(float(us[j]), 3) * 1000.0)
    return r.astype(np.int64)


def _counter_events(result: SimResult, ranks: dict, enc: _Json) -> Iterator[str]:
    """Each rank's counters by time."""
    counters: dict[int, list] = {}
    for c in result.counters:
        if c.rank not in ranks:
            raise ValueError(f"counter {c.name!r} is on rank {c.rank}, which has no RankInfo")
        counters.setdefault(c.rank, []).append((_us(c.time_s), c.name, float(c.value)))
    for pid in sorted(counters):
        for ts, name, value in sorted(counters[pid]):
            if not (math.isfinite(ts) and math.isfinite(value)):
                raise ValueError(f"counter {name!r} has a value that is not finite")
            key, v = _counter_key(name), value / 2**30 if name == "memory" else value
            yield (f'{{"ph":"C","name":{enc.str(name)},"pid":{pid},"tid":0,"ts":{ts!r},'
                   f'"args":{{{enc.str(key)}:{v!r}}}}}')


def _counter_key(name: str) -> str:
    """The arg a counter's value is written under: ``allocated_GiB`` for ``memory`` (its bytes
    divided by 2**30), ``utilization`` for a link's, else the counter's name."""
    return "allocated_GiB" if name == "memory" else "utilization" if name.startswith("link ") else name


_C_RANK, _C_TIME, _C_NAME, _C_VALUE = map(operator.attrgetter, ("rank", "time_s", "name", "value"))


def counter_columns(result: SimResult, ranks: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The counters' ranks, times in µs and values as arrays, where :func:`counter_batch`
    writes them by columns; None where it leaves them to :func:`_counter_events` (a time or value
    not finite or not a number, a time negative or past :data:`_FAST_MAX_US`, a rank with no
    :class:`~sim.results.RankInfo`)."""
    counters = result.counters
    n = len(counters)
    pid = np.fromiter(map(_C_RANK, counters), dtype=np.int64, count=n)
    us = np.fromiter(map(_C_TIME, counters), dtype=float, count=n) * US_PER_S
    try:
        value = np.fromiter(map(float, map(_C_VALUE, counters)), dtype=float, count=n)
    except (TypeError, ValueError):
        return None
    if not (set(np.unique(pid).tolist()) <= ranks.keys() and np.all(np.isfinite(value))
            and np.all((us >= 0) & (us < _FAST_MAX_US)) and not np.any(np.signbit(us))):
        return None
    return pid, us, value


def counter_batch(result: SimResult, ranks: dict, enc: _Json) -> list[str]:
    """:func:`_counter_events`, to the byte, made by columns: each counter's time rounded to
    whole nanoseconds at once and written as integer microseconds plus a fraction (as
    :class:`Bulk` writes the slices'), the text around it cached per name and rank, the
    counters ordered by one stable sort on (rank, time, name, value). Counters it does not take
    (a time or value not finite, a time negative or past :data:`_FAST_MAX_US`, a rank with no
    :class:`~sim.results.RankInfo`) go to :func:`_counter_events`, which writes or refuses them."""
    counters = result.counters
    n = len(counters)
    if not n:
        return []
    columns = counter_columns(result, ranks)
    if columns is None:
        return list(_counter_events(result, ranks, enc))
    pid, us, value = columns
    names = list(map(_C_NAME, counters))
    code = {name: i for i, name in enumerate(sorted(set(names)))}  # in the names' order
    name_code = np.fromiter(map(code.__getitem__, names), dtype=np.int64, count=n)
    ts_ns = _ns(us)
    order = np.lexsort((value, name_code, ts_ns, pid))  # stable, as sorted() on the tuples
    if "memory" in code:
        value[name_code == code["memory"]] /= 2**30  # bytes -> GiB, as _counter_events divides
    q, r = np.divmod(ts_ns[order], 1000)
    pid_o, name_o = pid[order].tolist(), [names[i] for i in order.tolist()]
    heads = {(name, p): f'{{"ph":"C","name":{enc.str(name)},"pid":{p},"tid":0,"ts":'
             for name, p in set(zip(name_o, pid_o))}
    mids = {name: ',"args":{' + enc.str(_counter_key(name)) + ":" for name in code}
    return list(map("".join, zip(map(heads.__getitem__, zip(name_o, pid_o)), map(str, q.tolist()),
                                 map(_FRACTIONS.__getitem__, r.tolist()), map(mids.__getitem__, name_o),
                                 map(repr, value[order].tolist()), itertools.repeat("}}"))))


def _events_plain(result: SimResult) -> Iterator[str]:
    """The trace's events as JSON text, one span at a time: the reference :func:`_events` must
    equal (``tests/unit/test_trace.py``), and the path for spans it does not take (a time that
    is not finite or is past :data:`_FAST_MAX_US`)."""
    ranks = {info.rank: info for info in result.ranks}
    spans = result.spans
    linked = ({s.flow_out for s in spans} & {s.flow_in for s in spans}) - {None}  # both ends
    enc = _Json()
    kinds = {k: (enc.str(k.value), "comm" if k.is_comm else "kernel") for k in OpKind}
    classes: dict = {None: "", **{c: f',"comm_class":"{c.value}"' for c in CommClass}}
    groups: dict[tuple[int, int], list] = {}
    for s in spans:
        if s.rank not in ranks:
            raise ValueError(f"span {s.name!r} is on rank {s.rank}, which has no RankInfo")
        groups.setdefault((s.rank, int(s.stream)), []).append(s)
    for pid in sorted(ranks):
        yield (f'{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":'
               f'{enc.str(ranks[pid].label)}}}}}')
        yield f'{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}'
    for pid, tid in sorted(groups):
        yield (f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":'
               f'{enc.str(Stream(tid).label)}}}}}')
        yield f'{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{tid}}}}}'
    us, isfinite = US_PER_S, math.isfinite
    args_of = enc.args
    for (pid, tid), group in sorted(groups.items()):
        device = ranks[pid].local_gpu
        rows = []
        for s in group:
            ts = round(s.start_s * us, 3)  # = _us(start), inlined: this loop runs per span
            rows.append((ts, round(round(s.end_s * us, 3) - ts, 3), s.name, s))
        for a, b in zip(rows, rows[1:]):
            if (b[0], b[1], b[2]) < (a[0], a[1], a[2]):
                rows.sort(key=lambda r: r[:3])  # the engine's streams arrive sorted already
                break
        where = f'"pid":{pid},"tid":{tid},"ts":'
        tails = {c: f'"stream":{tid},"device":{device}{classes[c]}}}}}' for c in classes}
        for ts, d, name, s in rows:
            if not (isfinite(ts) and isfinite(d)):
                raise ValueError(f"span {name!r} has a time that is not finite")
            kind, cat = kinds[s.kind]
            args = args_of(s.args) if s.transfer_start_s is None else _with_transfer(enc, s.args, s.transfer_start_s)
            if s.op_args:
                args = f"{args},{args_of(s.op_args)}" if args else args_of(s.op_args)
            yield (f'{{"ph":"X","cat":"{cat}","name":{enc.str(name)},{where}{ts!r},"dur":{d!r},'
                   f'"args":{{{args}{"," if args else ""}"kind":{kind},{tails[s.comm_class]}')
            if s.flow_out in linked:
                at = _flow_start_us(ts, round(s.end_s * us, 3), s.transfer_start_s)
                yield _flow_out(s.flow_out, pid, tid, repr(at))
            if s.flow_in in linked:
                yield from _flow_in(s.flow_in, pid, tid, repr(round(s.end_s * us, 3)))
    yield from _counter_events(result, ranks, enc)


def _header(title: str, metadata: dict | None) -> str:
    """The text before the first event."""
    other = {"title": title, **(metadata or {}), "simulator": "llmsim"}
    return ('{"schemaVersion":1,"displayTimeUnit":"ms","otherData":'
            + json.dumps(other, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            + ',"traceEvents":[')


def _trace_parts(result: SimResult, title: str, metadata: dict | None) -> Iterator[str]:
    """The trace's JSON text in pieces (joined, the whole): the header, each batch of
    :func:`_event_batches` (a stream's events, mostly), the end."""
    yield _header(title, metadata)
    yield from _pieces(_event_batches(result), first=True)
    yield "]}"


def _pieces(batches: Iterator[list[str]], *, first: bool) -> Iterator[str]:
    """Each non-empty batch's events joined by commas, after a comma unless it is the first
    piece and ``first`` is true: the text between the header and the end, in pieces."""
    for batch in batches:
        if batch:
            yield ",".join(batch if first else itertools.chain(("",), batch))
            first = False


_PART_EVENTS = 1 << 14
"""Events per batch of :func:`_events_plain` (about 4 MB of text)."""
_FORK_MIN_SPANS = 50_000
"""Spans from which :func:`_forked_parts` formats a share of them in a second process: below
it, forking (a few ms, and copies of the pages both processes touch) costs more than it saves."""
_PARENT_SHARE = 0.48
"""The share of the spans (counters counted as spans) formatted by the process that forks the
child: each process deflates the text it formats (:func:`_gzip_bytes`), so about half. The
child's share costs it more than the same share costs the parent (it first copies the pages
it touches: gpt3-175b-1024 formatted and deflated whole, 1.25 s in the child against 1.05 s
here); shares from 0.42 to 0.55 write that trace in 0.75-0.85 s here, within the noise."""


def _forked_parts(result: SimResult, title: str, metadata: dict | None, *,
                  deflate: bool = False) -> Iterator[str | bytes | _Deflated | _TextSum]:
    """:func:`_trace_parts`, with the later batches of events (:class:`Bulk`: streams, then the
    counters) formatted by a forked child process while this one formats the metadata and the
    earlier streams, and its text arriving UTF-8 encoded (``deflate``: each of its pieces
    deflated apart, :class:`_Deflated`, then the CRC-32 and length of them all, :class:`_TextSum`,
    for :func:`_gzip_bytes`).

    The child writes each batch's text (or its deflated text) to an unlinked temporary file and
    then its length to a pipe, so it never waits for this process to read; this process, once
    it has made its own pieces, passes on the child's as they come, so the text is that of
    :func:`_trace_parts`, cut in the same pieces. Should the child fail, this process formats
    the batches it did not send (and so raises what the child raised). Where :func:`_may_fork` says no (a small
    trace, no ``os.fork``, a running thread, no CPU free) or no child can be had, this is
    :func:`_trace_parts`; no thread may start before the first piece is taken, since forking
    copies no other thread, whatever lock it held (:func:`_gzip_bytes` starts its compressor
    after)."""
    bulk = Bulk.of(result) if _may_fork(len(result.spans)) else None
    if bulk is None:
        yield from _trace_parts(result, title, metadata)
        return
    yield _header(title, metadata)
    done = np.cumsum(bulk.weights())
    split = min(max(1, int(np.searchsorted(done, _PARENT_SHARE * done[-1])) + 1), len(bulk))
    child = _Child.start(bulk, split, deflate)
    if child is None:  # no child to be had: all of it here
        yield from _pieces(bulk.batches(0, len(bulk)), first=True)
    else:
        try:
            yield from _pieces(bulk.batches(0, split), first=True)
            yield from child.pieces()
        finally:
            child.close()
    yield "]}"


def _may_fork(spans: int) -> bool:
    """Whether :func:`_forked_parts` forks for a trace of ``spans`` spans: :data:`_FORK_MIN_SPANS`
    or more, ``os.fork`` available, no other thread running, and a CPU idle for the child: more
    CPUs than the 1-minute load average (which counts this process). On a busy machine the
    child only waits for a CPU, and the two processes' copies of the pages they both touch
    make the whole slower than one process (gpt3-175b-1024 at load 8 on 2 cores: 12%)."""
    if spans < _FORK_MIN_SPANS or not hasattr(os, "fork") or threading.active_count() > 1:
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available here
        load = 0.0
    return cpus > 1 and load < cpus


class _Deflated(NamedTuple):
    """A piece of the trace's text deflated in the child (:func:`sim.output.gzip_parts.deflate_part`)."""

    chunk: bytes


class _TextSum(NamedTuple):
    """The CRC-32 and length of the text of the :class:`_Deflated` pieces before it."""

    crc: int
    size: int


_MESSAGE = struct.Struct("<qIq")
"""The child's message for each batch: the bytes it wrote to the spool, and the running CRC-32
and length of its text so far."""


class _Child:
    """A forked process formatting the batches of a :class:`Bulk` from ``split`` on.

    It writes each batch's text, UTF-8 encoded (``deflate``: deflated, with the running CRC-32
    and length of the text), to an unlinked temporary file, then a message to a pipe (a message
    a batch, even an empty one), so it never waits for this process to read; :meth:`pieces`
    passes the texts on as they come and, should the child fail, formats the batches it did
    not send, here."""

    def __init__(self, bulk: Bulk, split: int, deflate: bool, spool, read_end: int, pid: int) -> None:
        self.bulk, self.split, self.deflate = bulk, split, deflate
        self.spool, self.read_end, self.pid = spool, read_end, pid
        self.running = True

    @classmethod
    def start(cls, bulk: Bulk, split: int, deflate: bool = False) -> _Child | None:
        """Fork the child; None if the system would not (no memory, processes or temporary
        file for it)."""
        spool = read_end = write_end = None
        try:
            spool = tempfile.TemporaryFile(prefix="llmsim-trace-")
            read_end, write_end = os.pipe()
            pid = os.fork()
        except OSError:
            for fd in (read_end, write_end):
                if fd is not None:
                    os.close(fd)
            if spool is not None:
                spool.close()
            return None
        if pid == 0:  # the child: never returns
            status = 1
            try:
                os.close(read_end)
                crc = size = 0
                for batch in bulk.batches(split, len(bulk)):
                    data = "".join(_pieces([batch], first=False)).encode("utf-8")
                    if deflate and data:
                        crc, size = crc32(data, crc), size + len(data)
                        data = deflate_part(data)
                    _write_all(spool.fileno(), data)
                    _write_all(write_end, _MESSAGE.pack(len(data), crc, size))
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        return cls(bulk, split, deflate, spool, read_end, pid)

    def pieces(self) -> Iterator[bytes | _Deflated | _TextSum]:
        """The child's text, in the pieces of :func:`_pieces` (deflated, then their sum)."""
        offset = sent = crc = size = 0
        while message := _read_all(self.read_end, _MESSAGE.size):
            n, crc, size = _MESSAGE.unpack(message)
            if n:
                data = _pread_all(self.spool.fileno(), n, offset)
                yield _Deflated(data) if self.deflate else data
            offset, sent = offset + n, sent + 1
        if size:
            yield _TextSum(crc, size)
        self.running = False
        if os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1]) != 0:  # it failed: the rest here
            yield from _pieces(self.bulk.batches(self.split + sent, len(self.bulk)), first=False)

    def close(self) -> None:
        """Release the pipe and the file; end the child if it still runs (the trace was given
        up early)."""
        os.close(self.read_end)
        self.spool.close()
        if self.running:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int, size: int) -> bytes:
    """``size`` bytes from a pipe, or b"" at its end."""
    got = b""
    while len(got) < size and (more := os.read(fd, size - len(got))):
        got += more
    return got


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    chunks = []
    while size:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            raise OSError(f"trace spool ended {size} bytes early")
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _trace_text(result: SimResult, title: str, metadata: dict | None) -> str:
    with _gc_paused():
        return "".join(_trace_parts(result, title, metadata))


def _gzip_bytes(parts: Iterator[str | bytes | _Deflated | _TextSum]) -> bytes:
    """``parts`` as one gzip member (:class:`sim.output.gzip_parts.GzipParts`: ISA-L, or zlib where it is
    missing, no file name, ``mtime=0``): each text part (UTF-8 encoded unless bytes already)
    deflated apart, on a second thread while the next parts are formatted (both release the GIL); parts deflated in
    :func:`_forked_parts`'s child passed through, with their sum. The thread starts once the
    first part is taken, so that :func:`_forked_parts` forks before it. The bytes depend on
    the text and where it is cut into parts, not on which process deflated a part."""
    gz = GzipParts()
    todo: queue.Queue = queue.Queue(maxsize=4)
    failed: list[BaseException] = []

    def compress() -> None:
        try:
            while (part := todo.get()) is not None:
                kind = type(part)
                if kind is _Deflated:
                    gz.add_deflated(part.chunk)
                elif kind is _TextSum:
                    gz.add_sum(part.crc, part.size)
                else:
                    gz.add_text(part)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            failed.append(e)
            while todo.get() is not None:
                pass

    worker = None
    try:
        for part in parts:
            if worker is None:
                worker = threading.Thread(target=compress, name="llmsim-trace-gzip", daemon=True)
                worker.start()
            todo.put(part.encode("utf-8") if type(part) is str else part)
    finally:
        if worker is not None:
            todo.put(None)
            worker.join()
    if failed:
        raise failed[0]
    return gz.finish()


def chrome_trace(result: SimResult, *, title: str = "llmsim", metadata: dict | None = None) -> dict:
    """Build the Chrome-trace object for one simulated iteration.

    It is the JSON that :func:`write_chrome_trace` writes, parsed back: one code path makes both.

    Parameters
    ----------
    result : SimResult
        Spans, counters and ranks as recorded by the engine; times in seconds.
    title : str, optional
        Stored as ``otherData["title"]`` (shown in the viewer's Metadata dialog).
    metadata : dict, optional
        Extra JSON-serialisable entries for ``otherData``.

    Returns
    -------
    dict
        ``{"schemaVersion", "displayTimeUnit", "otherData", "traceEvents"}``, with times in µs.

    Raises
    ------
    ValueError
        If a span or counter names a rank that has no :class:`~sim.results.RankInfo`, or a
        time or value is not finite.

    Examples
    --------
    >>> from sim.results import RankInfo, SimResult, Span
    >>> from sim.types import OpKind, Stream
    >>> r = SimResult([RankInfo(0, 0, 0, 0, 0, 0)],
    ...               [Span(0, Stream.COMPUTE, "fwd", OpKind.GEMM, 0.0, 0.0015)], [], 0.0015, 1, 1)
    >>> [(e["ph"], e.get("dur")) for e in chrome_trace(r)["traceEvents"]][-1]
    ('X', 1500.0)
    """
    return json.loads(_trace_text(result, title, metadata))


def write_chrome_trace(result: SimResult, path: str | os.PathLike, *, title: str = "llmsim",
                       metadata: dict | None = None) -> None:
    """Write the trace of ``result`` to ``path`` as compact JSON.

    Parameters
    ----------
    result : SimResult
        What to write.
    path : str or os.PathLike
        Destination; gzip-compressed when it ends in ``.gz``. Parent folders are created.
    title, metadata
        As for :func:`chrome_trace`.

    Raises
    ------
    ValueError
        If a time or value is NaN or infinite (NaN is not JSON).

    Notes
    -----
    The bytes depend only on the inputs: the gzip header has no file name and ``mtime=0``.
    """
    path = Path(path)
    if path.name.endswith(".gz"):
        with _gc_paused():
            data = _gzip_bytes(_forked_parts(result, title, metadata, deflate=True))
    else:
        with _gc_paused():
            data = b"".join(p if type(p) is bytes else p.encode("utf-8")
                            for p in _forked_parts(result, title, metadata))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def _num(x: object) -> bool:
    """A finite JSON number (an int or float, not a bool)."""
    return type(x) in (int, float) and math.isfinite(x)


def validate_chrome_trace(obj: dict) -> list[str]:
    """List what would stop Perfetto or HTA from reading ``obj`` the way we intend.

    Parameters
    ----------
    obj : dict
        A trace object as built by :func:`chrome_trace` (or loaded from its JSON).

    Returns
    -------
    list of str
        One message per problem; empty when the trace is valid.

    Notes
    -----
    Checks: every event has ``ph``; ``X`` events have name, cat, ts, ``dur >= 0``, pid and tid;
    ``M`` events are one of the four names Perfetto honours, with ``args.name`` (str) or
    ``args.sort_index`` (int); ``C`` events have non-empty numeric args; ``X`` events on one
    ``(pid, tid)`` do not overlap or nest (touching is fine; 1 ns slack); each flow id has one
    ``s`` and one ``f`` with the same cat and name, each inside an ``X`` event on its own
    ``(pid, tid)`` (bounds inclusive), the ``f`` not before the ``s``; each pid with ``X``
    events has a ``process_name``.
    Runs in :math:`O(n \\log n)` for ``n`` events.
    """
    events = obj.get("traceEvents") if isinstance(obj, dict) else None
    if not isinstance(events, list):
        return ["trace has no 'traceEvents' list"]
    with _gc_paused():
        return _problems(events)


def _problems(events: list) -> list[str]:
    problems: list[str] = []
    slices: defaultdict[tuple, list[tuple[float, float, str]]] = defaultdict(list)
    flows: defaultdict[object, list[dict]] = defaultdict(list)
    named: set = set()
    for i, e in enumerate(events):
        if not isinstance(e, dict) or "ph" not in e:
            problems.append(f"event {i}: missing 'ph'")
            continue
        ph, name = e["ph"], e.get("name")
        if ph == "X":
            missing = [k for k in ("name", "cat", "ts", "dur", "pid", "tid") if k not in e]
            if missing:
                problems.append(f"event {i} (X {name!r}): missing {', '.join(missing)}")
            elif not (_num(e["ts"]) and _num(e["dur"])):
                problems.append(f"event {i} (X {name!r}): ts/dur not finite numbers")
            elif e["dur"] < 0:
                problems.append(f"event {i} (X {name!r}): negative dur {e['dur']}")
            else:
                slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], name))
        elif ph == "M":
            spec = _METADATA_ARG.get(name)
            args = e.get("args")
            if spec is None:
                problems.append(f"event {i} (M {name!r}): not a metadata name Perfetto honours")
            elif not isinstance(args, dict) or not isinstance(args.get(spec[0]), spec[1]):
                problems.append(f"event {i} (M {name!r}): args needs {spec[0]!r} "
                                f"({spec[1].__name__}), got {args!r}")
            elif "pid" not in e or "tid" not in e:
                problems.append(f"event {i} (M {name!r}): missing pid or tid")
            elif name == "process_name":
                named.add(e["pid"])
        elif ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args:
                problems.append(f"event {i} (C {name!r}): empty args")
            elif not all(_num(v) for v in args.values()):
                problems.append(f"event {i} (C {name!r}): non-numeric args {args!r}")
            if "pid" not in e or not _num(e.get("ts")):
                problems.append(f"event {i} (C {name!r}): missing pid or ts")
        elif ph in ("s", "f"):
            if any(k not in e for k in ("id", "pid", "tid", "cat", "name")) or not _num(e.get("ts")):
                problems.append(f"event {i} ({ph} {name!r}): missing id, pid, tid, ts, cat or name")
            else:
                flows[e["id"]].append(e)

    index: dict[tuple, tuple[list[float], list[float]]] = {}
    for (pid, tid), xs in sorted(slices.items(), key=lambda kv: repr(kv[0])):
        xs.sort(key=lambda x: (x[0], x[1]))
        starts, reach = [], []  # reach[j] = max end of xs[:j+1]
        top_end, top_name = -math.inf, None
        for ts, end, nm in xs:
            if ts < top_end - _SLACK_US:
                problems.append(f"pid {pid} tid {tid}: X {nm!r} at {ts} overlaps X {top_name!r} "
                                f"ending at {top_end}")
            if end > top_end:
                top_end, top_name = end, nm
            starts.append(ts)
            reach.append(top_end)
        index[(pid, tid)] = (starts, reach)
        if pid not in named:
            named.add(pid)
            problems.append(f"pid {pid}: has X events but no process_name")

    def inside(e: dict) -> bool:
        starts, reach = index.get((e["pid"], e["tid"]), ((), ()))
        j = bisect.bisect_right(starts, e["ts"] + _SLACK_US) - 1
        return j >= 0 and reach[j] >= e["ts"] - _SLACK_US

    for fid in sorted(flows, key=repr):
        ends = flows[fid]
        phs = sorted(e["ph"] for e in ends)
        if phs != ["f", "s"]:
            problems.append(f"flow id {fid!r}: {phs.count('s')} 's' and {phs.count('f')} 'f' "
                            "events, expected exactly one of each")
            continue
        if len({(e["cat"], e["name"]) for e in ends}) != 1:
            problems.append(f"flow id {fid!r}: 's' and 'f' differ in cat or name")
        start, finish = sorted(ends, key=lambda e: e["ph"], reverse=True)
        if finish["ts"] < start["ts"] - _SLACK_US:
            problems.append(f"flow id {fid!r}: 'f' at {finish['ts']} is before its 's' at {start['ts']} "
                            "(the arrow runs backward)")
        for e in ends:
            if not inside(e):
                problems.append(f"flow id {fid!r}: {e['ph']!r} at {e['ts']} is not inside an "
                                f"X event on pid {e['pid']} tid {e['tid']}")
    return problems
