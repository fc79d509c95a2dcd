"""The trace's events as JSON text: the encoding of argument values, the p2p arrows, the
counters, and the span-at-a-time formatter that is the reference for the bulk one.

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

* ``ts`` and ``dur`` are microseconds with 3 decimals (:mod:`sim.output.trace.times`).
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

The JSON is compact (``","``/``":"``); HTA's rank regex needs ``"rank": N`` with a space, which
matters only for per-rank files carrying ``distributedInfo``, not for the merged trace.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
from collections.abc import Iterator

import numpy as np

from sim.output.trace.times import FAST_MAX_US, FRACTIONS, US_PER_S, ns, to_us
from sim.results import SimResult
from sim.types import CommClass, OpKind, Stream

_FLOW = "p2p"
_ARRIVAL = "p2p arrival"
"""The name of the instant at which a p2p arrow ends (the data arrive)."""


class Json:
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


def flow_start_us(start_us: float, end_us: float, transfer_start_s) -> float:
    """Where a p2p arrow leaves its send slice ``[start_us, end_us]`` (µs): the transfer's start
    (seconds, as :attr:`~sim.results.Span.transfer_start_s` holds it) rounded to nanoseconds
    where it lies in ``[start_us, end_us)``, else the slice's start (no transfer start, or one
    that is not a finite number or lies outside). Not at the end: a slice beginning there on
    the same track would take the ``s``, since Perfetto orders a complete event before other
    events of the same time (``TraceSorter``, ``SlowOperatorLess::KeyForType``).

    >>> flow_start_us(2.0, 5.0, 3.0000004e-6), flow_start_us(2.0, 5.0, None), flow_start_us(2.0, 5.0, 5e-6)
    (3.0, 2.0, 2.0)
    """
    if transfer_start_s is None:
        return start_us
    try:
        at = round(float(transfer_start_s) * US_PER_S, 3) + 0.0  # + 0.0: -0.0 written as 0.0
    except (TypeError, ValueError):
        return start_us
    return at if start_us <= at < end_us else start_us


def flow_out(flow: int, pid: int, tid: int, ts: str) -> str:
    """The ``s`` of p2p arrow ``flow``, at ``ts`` (its text) in the send slice on ``(pid, tid)``."""
    return f'{{"ph":"s","id":{flow},"cat":"{_FLOW}","name":"{_FLOW}","pid":{pid},"tid":{tid},"ts":{ts}}}'


def flow_in(flow: int, pid: int, tid: int, ts: str) -> tuple[str, str]:
    """The end of p2p arrow ``flow`` at ``ts`` (its text), the end of the receive slice on
    ``(pid, tid)``: the ``"p2p arrival"`` instant there, then the ``f`` that binds to it."""
    return (f'{{"ph":"i","s":"t","cat":"{_FLOW}","name":"{_ARRIVAL}","pid":{pid},"tid":{tid},"ts":{ts}}}',
            f'{{"ph":"f","bp":"e","id":{flow},"cat":"{_FLOW}","name":"{_FLOW}","pid":{pid},"tid":{tid},"ts":{ts}}}')


TRANSFER = "transfer_start_s"
TRANSFER_TAG = f'"{TRANSFER}":'
"""The key's text as :meth:`Json.args` writes it: args text without it has no such key."""


def with_transfer(enc: Json, args, start_s) -> str:
    """The text of ``args`` with ``("transfer_start_s", start_s)`` after them (a comm span's
    :attr:`~sim.results.Span.transfer_start_s`), as one args mapping: a key given twice keeps
    its first place and its last value, as :meth:`Json.args` writes any repeated key."""
    items = list(args.items() if isinstance(args, dict) else args)
    return enc._args(items + [(TRANSFER, start_s)])


def counter_events(result: SimResult, ranks: dict, enc: Json) -> Iterator[str]:
    """Each rank's counters by time."""
    counters: dict[int, list] = {}
    for c in result.counters:
        if c.rank not in ranks:
            raise ValueError(f"counter {c.name!r} is on rank {c.rank}, which has no RankInfo")
        counters.setdefault(c.rank, []).append((to_us(c.time_s), c.name, float(c.value)))
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
    writes them by columns; None where it leaves them to :func:`counter_events` (a time or value
    not finite or not a number, a time negative or past :data:`FAST_MAX_US`, a rank with no
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
            and np.all((us >= 0) & (us < FAST_MAX_US)) and not np.any(np.signbit(us))):
        return None
    return pid, us, value


def counter_batch(result: SimResult, ranks: dict, enc: Json) -> list[str]:
    """:func:`counter_events`, to the byte, made by columns: each counter's time rounded to
    whole nanoseconds at once and written as integer microseconds plus a fraction (as
    :class:`Bulk` writes the slices'), the text around it cached per name and rank, the
    counters ordered by one stable sort on (rank, time, name, value). Counters it does not take
    (a time or value not finite, a time negative or past :data:`FAST_MAX_US`, a rank with no
    :class:`~sim.results.RankInfo`) go to :func:`counter_events`, which writes or refuses them."""
    counters = result.counters
    n = len(counters)
    if not n:
        return []
    columns = counter_columns(result, ranks)
    if columns is None:
        return list(counter_events(result, ranks, enc))
    pid, us, value = columns
    names = list(map(_C_NAME, counters))
    code = {name: i for i, name in enumerate(sorted(set(names)))}  # in the names' order
    name_code = np.fromiter(map(code.__getitem__, names), dtype=np.int64, count=n)
    ts_ns = ns(us)
    order = np.lexsort((value, name_code, ts_ns, pid))  # stable, as sorted() on the tuples
    if "memory" in code:
        value[name_code == code["memory"]] /= 2**30  # bytes -> GiB, as counter_events divides
    q, r = np.divmod(ts_ns[order], 1000)
    pid_o, name_o = pid[order].tolist(), [names[i] for i in order.tolist()]
    heads = {(name, p): f'{{"ph":"C","name":{enc.str(name)},"pid":{p},"tid":0,"ts":'
             for name, p in set(zip(name_o, pid_o))}
    mids = {name: ',"args":{' + enc.str(_counter_key(name)) + ":" for name in code}
    return list(map("".join, zip(map(heads.__getitem__, zip(name_o, pid_o)), map(str, q.tolist()),
                                 map(FRACTIONS.__getitem__, r.tolist()), map(mids.__getitem__, name_o),
                                 map(repr, value[order].tolist()), itertools.repeat("}}"))))


def events_plain(result: SimResult) -> Iterator[str]:
    """The trace's events as JSON text, one span at a time: the reference :func:`events` must
    equal (``tests/unit/test_trace.py``), and the path for spans it does not take (a time that
    is not finite or is past :data:`FAST_MAX_US`)."""
    ranks = {info.rank: info for info in result.ranks}
    spans = result.spans
    linked = ({s.flow_out for s in spans} & {s.flow_in for s in spans}) - {None}  # both ends
    enc = Json()
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
            ts = round(s.start_s * us, 3)  # = to_us(start), inlined: this loop runs per span
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
            args = args_of(s.args) if s.transfer_start_s is None else with_transfer(enc, s.args, s.transfer_start_s)
            if s.op_args:
                args = f"{args},{args_of(s.op_args)}" if args else args_of(s.op_args)
            yield (f'{{"ph":"X","cat":"{cat}","name":{enc.str(name)},{where}{ts!r},"dur":{d!r},'
                   f'"args":{{{args}{"," if args else ""}"kind":{kind},{tails[s.comm_class]}')
            if s.flow_out in linked:
                at = flow_start_us(ts, round(s.end_s * us, 3), s.transfer_start_s)
                yield flow_out(s.flow_out, pid, tid, repr(at))
            if s.flow_in in linked:
                yield from flow_in(s.flow_in, pid, tid, repr(round(s.end_s * us, 3)))
    yield from counter_events(result, ranks, enc)
