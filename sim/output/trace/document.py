"""The whole trace's JSON text in pieces: the header, the events a batch at a time (a stream's
events, mostly: :class:`~sim.output.trace.bulk.Bulk`, or the plain formatter where the bulk one
does not take the spans), the end."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

from sim.output.trace.bulk import Bulk
from sim.output.trace.collector import gc_paused
from sim.output.trace.events import events_plain
from sim.results import SimResult


def events(result: SimResult) -> Iterator[str]:
    """The trace's events as JSON text, in a total order that does not depend on the order of
    the spans given: metadata, then each (pid, tid) in order with its slices and arrows by time,
    then each rank's counters by time.

    The same text as :func:`events_plain`, which formats one span at a time, in a fraction of
    its time (:class:`Bulk`)."""
    for batch in event_batches(result):
        yield from batch


def event_batches(result: SimResult) -> Iterator[list[str]]:
    """:func:`events` in lists: the metadata, each (pid, tid)'s events, the counters (or pieces
    of :func:`events_plain`, for spans the bulk path does not take)."""
    bulk = Bulk.of(result)
    if bulk is None:
        plain = events_plain(result)  # which raises on NaN and infinities
        while batch := list(itertools.islice(plain, PART_EVENTS)):
            yield batch
        return
    yield from bulk.batches(0, len(bulk))


def header(title: str, metadata: dict | None) -> str:
    """The text before the first event."""
    other = {"title": title, **(metadata or {}), "simulator": "llmsim"}
    return ('{"schemaVersion":1,"displayTimeUnit":"ms","otherData":'
            + json.dumps(other, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            + ',"traceEvents":[')


def trace_parts(result: SimResult, title: str, metadata: dict | None) -> Iterator[str]:
    """The trace's JSON text in pieces (joined, the whole): the header, each batch of
    :func:`event_batches` (a stream's events, mostly), the end."""
    yield header(title, metadata)
    yield from pieces(event_batches(result), first=True)
    yield "]}"


def pieces(batches: Iterator[list[str]], *, first: bool) -> Iterator[str]:
    """Each non-empty batch's events joined by commas, after a comma unless it is the first
    piece and ``first`` is true: the text between the header and the end, in pieces."""
    for batch in batches:
        if batch:
            yield ",".join(batch if first else itertools.chain(("",), batch))
            first = False


PART_EVENTS = 1 << 14
"""Events per batch of :func:`events_plain` (about 4 MB of text)."""


def trace_text(result: SimResult, title: str, metadata: dict | None) -> str:
    with gc_paused():
        return "".join(trace_parts(result, title, metadata))
