"""Check a Chrome trace for what would stop Perfetto or HTA from reading it as intended (the
rules in :mod:`sim.output.trace.events`)."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict

from sim.output.trace.collector import gc_paused

_SLACK_US = 1e-3
"""Rounding slack (one nanosecond) allowed when comparing slice bounds."""


_METADATA_ARG = {"process_name": ("name", str), "thread_name": ("name", str),
                 "process_sort_index": ("sort_index", int), "thread_sort_index": ("sort_index", int)}


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
    with gc_paused():
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
