"""Turn a :class:`~sim.results.SimResult` into a Chrome trace that Perfetto and HTA can open.

This is the one module that converts seconds to microseconds (``_US_PER_S``; see STYLE.md C/E).
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
  ``f`` share ``cat = name = "p2p"``. The ``s`` sits at the send slice's start; the ``f``
  carries ``"bp": "e"`` (bind to the enclosing slice) and sits inside the receive slice.
  An arrow whose other end was not simulated is dropped, since a dangling ``s`` or ``f``
  binds to nothing.
* Non-ASCII text is written as UTF-8 rather than ``\\uXXXX``, which older tokenizers reject.

The output is deterministic: events are sorted by a total order, no wall-clock time is
recorded and gzip output has ``mtime=0`` and no file name, so equal inputs give equal bytes.
The JSON is compact (``","``/``":"``); HTA's rank regex needs ``"rank": N`` with a space, which
matters only for per-rank files carrying ``distributedInfo``, not for this merged trace.
"""

from __future__ import annotations

import bisect
import gc
import gzip
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from sim.results import SimResult
from sim.types import CommClass, OpKind, Stream

__all__ = ["chrome_trace", "write_chrome_trace", "validate_chrome_trace"]

_US_PER_S = 1e6
"""Microseconds per second: the only seconds-to-microseconds factor in llmsim."""
_SLACK_US = 1e-3
"""Rounding slack (one nanosecond) allowed when comparing slice bounds."""
_FLOW = "p2p"
_METADATA_ARG = {"process_name": ("name", str), "thread_name": ("name", str),
                 "process_sort_index": ("sort_index", int), "thread_sort_index": ("sort_index", int)}


def _us(seconds: np.ndarray) -> np.ndarray:
    """Seconds to microseconds, rounded to 3 decimals (nanoseconds), element-wise."""
    return np.round(np.multiply(seconds, _US_PER_S), 3)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic collector while building ~10^5 small acyclic dicts (halves the time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def chrome_trace(result: SimResult, *, title: str = "llmsim", metadata: dict | None = None) -> dict:
    """Build the Chrome-trace object for one simulated iteration.

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
        If a span or counter names a rank that has no :class:`~sim.results.RankInfo`.

    Examples
    --------
    >>> from sim.results import RankInfo, SimResult, Span
    >>> from sim.types import OpKind, Stream
    >>> r = SimResult([RankInfo(0, 0, 0, 0, 0, 0)],
    ...               [Span(0, Stream.COMPUTE, "fwd", OpKind.GEMM, 0.0, 0.0015)], [], 0.0015, 1, 1)
    >>> [(e["ph"], e.get("dur")) for e in chrome_trace(r)["traceEvents"]][-1]
    ('X', 1500.0)
    """
    ranks = {info.rank: info for info in result.ranks}
    spans = result.spans
    linked = ({s.flow_out for s in spans} & {s.flow_in for s in spans}) - {None}  # both ends
    kinds = {k: (k.value, "comm" if k.is_comm else "kernel") for k in OpKind}
    classes: dict = {None: None, **{c: c.value for c in CommClass}}
    n = len(spans)
    start = _us(np.fromiter((s.start_s for s in spans), float, n))
    dur = np.round(_us(np.fromiter((s.end_s for s in spans), float, n)) - start, 3)
    mid = np.where(dur > 0, np.round(start + dur / 2, 3), start)
    threads: set[tuple[int, int]] = set()
    body: list[dict] = []
    keys: list[tuple] = []  # the sort key of body[i]: (pid, tid, ts, ph, name, dur, id)
    with _gc_paused():
        for s, ts, d, at in zip(spans, start.tolist(), dur.tolist(), mid.tolist()):
            info = ranks.get(s.rank)
            if info is None:
                raise ValueError(f"span {s.name!r} is on rank {s.rank}, which has no RankInfo")
            pid, tid, name = s.rank, int(s.stream), s.name
            threads.add((pid, tid))
            kind, cat = kinds[s.kind]
            args = dict(s.args)  # a mapping or (key, value) pairs
            args["kind"] = kind
            args["stream"] = tid
            args["device"] = info.local_gpu
            comm_class = classes[s.comm_class]
            if comm_class is not None:
                args["comm_class"] = comm_class
            body.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                         "ts": ts, "dur": d, "args": args})
            keys.append((pid, tid, ts, "X", name, d, -1))
            if s.flow_out in linked:
                body.append({"ph": "s", "id": s.flow_out, "cat": _FLOW, "name": _FLOW,
                             "pid": pid, "tid": tid, "ts": ts})
                keys.append((pid, tid, ts, "s", _FLOW, -1.0, s.flow_out))
            if s.flow_in in linked:
                body.append({"ph": "f", "bp": "e", "id": s.flow_in, "cat": _FLOW, "name": _FLOW,
                             "pid": pid, "tid": tid, "ts": at})
                keys.append((pid, tid, at, "f", _FLOW, -1.0, s.flow_in))
        counters = result.counters
        times = _us(np.fromiter((c.time_s for c in counters), float, len(counters))).tolist()
        for c, ts in zip(counters, times):
            if c.rank not in ranks:
                raise ValueError(f"counter {c.name!r} is on rank {c.rank}, which has no RankInfo")
            value = float(c.value)
            args = {"allocated_GiB": value / 2**30} if c.name == "memory" else {c.name: value}
            body.append({"ph": "C", "name": c.name, "pid": c.rank, "tid": 0, "ts": ts, "args": args})
            keys.append((c.rank, 0, ts, "C", c.name, -1.0, -1))
        body = [body[i] for i in sorted(range(len(keys)), key=keys.__getitem__)]

    meta: list[dict] = []
    for pid in sorted(ranks):
        meta += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                  "args": {"name": ranks[pid].label}},
                 {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                  "args": {"sort_index": pid}}]
    for pid, tid in sorted(threads):
        meta += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                  "args": {"name": Stream(tid).label}},
                 {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                  "args": {"sort_index": tid}}]
    other = {"title": title, **(metadata or {}), "simulator": "llmsim"}
    return {"schemaVersion": 1, "displayTimeUnit": "ms", "otherData": other,
            "traceEvents": meta + body}


def write_chrome_trace(result: SimResult, path: str | os.PathLike, **kw) -> None:
    """Write :func:`chrome_trace` ``(result, **kw)`` to ``path`` as compact JSON.

    Parameters
    ----------
    result : SimResult
        What to write.
    path : str or os.PathLike
        Destination; gzip-compressed when it ends in ``.gz``. Parent folders are created.
    **kw
        ``title`` and ``metadata``, passed to :func:`chrome_trace`.

    Raises
    ------
    ValueError
        If a time or value is NaN or infinite (``allow_nan=False``: NaN is not JSON).

    Notes
    -----
    The bytes depend only on the inputs: the gzip header has no file name and ``mtime=0``.
    """
    data = json.dumps(chrome_trace(result, **kw), separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        if path.name.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=3) as gz:
                gz.write(data)
        else:
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
    ``(pid, tid)`` (bounds inclusive); each pid with ``X`` events has a ``process_name``.
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
        for e in ends:
            if not inside(e):
                problems.append(f"flow id {fid!r}: {e['ph']!r} at {e['ts']} is not inside an "
                                f"X event on pid {e['pid']} tid {e['tid']}")
    return problems
