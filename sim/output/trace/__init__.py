"""Turn a :class:`~sim.results.SimResult` into a Chrome trace that Perfetto and HTA can open.

The output is deterministic: events are sorted by a total order, no wall-clock time is
recorded and gzip output has ``mtime=0`` and no file name, so equal inputs give equal bytes.
The package, one concept a module:

* :mod:`~sim.output.trace.times`: seconds to microseconds, times rounded to nanoseconds;
* :mod:`~sim.output.trace.events`: the events' JSON text (the Kineto layout and Perfetto's
  rules), p2p arrows, counters, and the span-at-a-time reference formatter;
* :mod:`~sim.output.trace.bulk`: the same text formatted a stream at a time;
* :mod:`~sim.output.trace.document`: the whole trace's text in pieces;
* :mod:`~sim.output.trace.pipeline`: the forked formatter and the threaded compressor;
* :mod:`~sim.output.trace.validate`: the checks of a trace;
* :mod:`~sim.output.trace.collector`: the garbage collector paused while objects are built.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sim.output.trace.bulk import Bulk as Bulk
from sim.output.trace.collector import gc_paused
from sim.output.trace.document import trace_text
from sim.output.trace.events import counter_batch as counter_batch
from sim.output.trace.events import counter_columns as counter_columns
from sim.output.trace.pipeline import forked_parts, gzip_bytes
from sim.output.trace.times import US_PER_S as US_PER_S
from sim.output.trace.validate import validate_chrome_trace
from sim.results import SimResult

# Bulk, counter_batch, counter_columns and US_PER_S (as-imports, re-exported) serve
# sim.output.trace_ranks, which writes the per-rank files from the merged trace's pieces.
__all__ = ["chrome_trace", "write_chrome_trace", "validate_chrome_trace"]


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
    return json.loads(trace_text(result, title, metadata))


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
        with gc_paused():
            data = gzip_bytes(forked_parts(result, title, metadata, deflate=True))
    else:
        with gc_paused():
            data = b"".join(p if type(p) is bytes else p.encode("utf-8")
                            for p in forked_parts(result, title, metadata))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
