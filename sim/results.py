"""What a simulation hands back: spans, counters and the ranks they belong to.

These records are plain data. The engine fills them; :mod:`sim.trace` turns them into a
Chrome trace and :mod:`sim.report` into the summary. Times are seconds from the start of the
iteration.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import NamedTuple

from sim.types import CommClass, OpKind, Stream

__all__ = ["Span", "SPAN_FIELDS", "CounterSample", "RankInfo", "SimResult"]


class Span(NamedTuple):
    """One task's execution on one stream of one GPU.

    ``args`` (this task's: phase, layer, micro-batch) and ``op_args`` (its op's: shape,
    FLOPs, bytes) are mappings or tuples of ``(key, value)`` pairs (``dict(...)`` reads both). ``flow_out`` / ``flow_in`` carry the id of a p2p arrow that starts at this span
    (the send) or ends in it (the receive). ``transfer_start_s``: a communication span's
    transfer start (once its group's members have met; its span starts when its stream
    reached it), None for the others; the trace writes it as the ``transfer_start_s`` arg
    after ``args``. (A comm span's ``args`` are then its task's own tuple, shared with the
    task's other spans, whose text the trace writer formats once.)
    """

    rank: int
    stream: Stream
    name: str
    kind: OpKind
    start_s: float
    end_s: float
    args: dict | tuple = ()
    comm_class: CommClass | None = None
    flow_out: int | None = None
    flow_in: int | None = None
    op_args: tuple = ()
    """Arguments of the op itself (shape, FLOPs, bytes), shared by every span of that op."""
    transfer_start_s: float | None = None


SPAN_FIELDS = tuple(map(operator.itemgetter, range(len(Span._fields))))
"""A getter of each of :class:`Span`'s fields, in their order: ``map`` one over many spans
(the trace writer, the breakdown) without a Python-level attribute access per span."""


@dataclass(frozen=True, slots=True)
class CounterSample:
    """The value of a per-rank counter from ``time_s`` on (memory in bytes)."""

    rank: int
    time_s: float
    name: str
    value: float


@dataclass(frozen=True, slots=True)
class RankInfo:
    """Where a simulated rank sits: its node, its GPU in the node, its parallel coordinates."""

    rank: int
    node: int
    local_gpu: int
    tp: int
    pp: int
    dp: int
    cp: int = 0

    @property
    def label(self) -> str:
        cp = f" cp={self.cp}" if self.cp else ""
        return f"rank {self.rank} (node {self.node}, GPU {self.local_gpu}) pp={self.pp} tp={self.tp}{cp} dp={self.dp}"


@dataclass
class SimResult:
    """Everything the engine recorded for one iteration."""

    ranks: list[RankInfo]
    spans: list[Span]
    counters: list[CounterSample]
    makespan_s: float
    events: int
    world_size: int
    metadata: dict = field(default_factory=dict)
