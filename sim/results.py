"""What a simulation hands back: spans, counters and the ranks they belong to.

These records are plain data. The engine fills them; :mod:`sim.output.trace` turns them into a
Chrome trace and :mod:`sim.output.report` into the summary. Times are seconds from the start of the
iteration.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from sim.types import CommClass, OpKind, Stream

__all__ = ["Span", "SPAN_FIELDS", "SpanTable", "span_column", "span_fields", "span_flows", "span_op_args",
           "span_arrays", "CounterSample", "RankInfo", "SimResult"]


class Span(NamedTuple):
    """One task's execution on one stream of one GPU.

    ``args`` (this task's: phase, layer, micro-batch) and ``op_args`` (its op's: shape,
    FLOPs, bytes) are mappings or tuples of ``(key, value)`` pairs (``dict(...)`` reads both).
    ``flow_out`` / ``flow_in`` carry the id of a p2p arrow that starts at this span
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
without a Python-level attribute access per span (:func:`span_column` and :func:`span_fields`
over a list of spans)."""


_SEND_STREAMS = (Stream.PP_SEND, Stream.PP_SEND_GRAD)
_RECV_STREAMS = (Stream.PP_RECV, Stream.PP_RECV_GRAD)
(_F_RANK, _F_STREAM, _F_NAME, _F_KIND, _F_START, _F_END, _F_ARGS, _F_CLASS, _F_FLOW_OUT, _F_FLOW_IN, _F_OP_ARGS,
 _F_XFER) = range(len(Span._fields))
_T_FIELD = {_F_RANK: "rank", _F_STREAM: "stream", _F_NAME: "name", _F_KIND: "kind", _F_ARGS: "args"}
"""The span fields that are their task's attribute of the same meaning."""
_T_OP, _T_COMM, _T_FLOW, _T_RANK, _T_STREAM = map(operator.attrgetter, ("op", "comm", "flow_id", "rank", "stream"))
_COMM_FIELDS = (_F_CLASS, _F_FLOW_OUT, _F_FLOW_IN, _F_XFER)
"""The fields a comm span has of its own (None on a compute span), in
:meth:`SpanTable._comm_fields`' order."""


class SpanTable(Sequence):
    """The spans of an op-level run, one per task in task order, kept as the engine left them:
    the program's tasks, each task's start and end, the comm tasks' transfer starts, and each
    op's args. Nothing is made per span until asked.

    A consumer that reads many spans takes them a field at a time (:func:`span_column`,
    :func:`span_arrays`: the trace writer, the breakdown). Anything else (indexing, iterating,
    slicing, comparing) reads the :class:`Span` tuples, made once, all together, the first time
    and kept; they are those the engine made one by one before this table existed, field for
    field (``tests/unit/test_span_table.py``).

    Parameters
    ----------
    tasks
        The program's tasks (:class:`sim.program.Task`), task ``i`` at position ``i``.
    start_s, end_s
        Each task's start and end, by task id.
    transfer_start_s
        A comm task's transfer start (its group met), by task id, where it differs from its
        start.
    op_args
        Each op's args (shape, FLOPs, bytes), by the op's ``id``.
    """

    __slots__ = ("tasks", "start_s", "end_s", "transfer_start_s", "op_args", "_spans", "_columns", "_arrays")

    def __init__(self, tasks: list, start_s: list[float], end_s: list[float], transfer_start_s: dict[int, float],
                 op_args: dict[int, tuple]) -> None:
        self.tasks, self.start_s, self.end_s = tasks, start_s, end_s
        self.transfer_start_s, self.op_args = transfer_start_s, op_args
        self._spans: list[Span] | None = None
        self._columns: dict[int, list] = {}
        self._arrays: tuple | None = None

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, i):
        return self.spans()[i]

    def __iter__(self):
        return iter(self.spans())

    def __eq__(self, other) -> bool:
        if isinstance(other, (SpanTable, list)):
            return self.spans() == list(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"SpanTable({len(self)} spans)"

    def __reduce__(self):  # pickled as the list it stands for
        return (list, (self.spans(),))

    def spans(self) -> list[Span]:
        """Every span as a :class:`Span` tuple, made the first time (one loop over the tasks)."""
        if self._spans is None:
            out = []
            append = out.append
            new = tuple.__new__  # a Span without the Python-level __new__ of a NamedTuple
            start, finish, xfer, op_args = self.start_s, self.end_s, self.transfer_start_s, self.op_args
            for t in self.tasks:
                i, op = t.id, t.op
                if t.comm:
                    flow_out = flow_in = None
                    if t.flow_id >= 0:
                        if t.stream in _SEND_STREAMS:
                            flow_out = t.flow_id
                        elif t.stream in _RECV_STREAMS:
                            flow_in = t.flow_id
                    append(new(Span, (t.rank, t.stream, t.name, t.kind, start[i], finish[i], t.args, op.comm_class,
                                      flow_out, flow_in, op_args[id(op)], xfer.get(i, start[i]))))
                else:
                    append(new(Span, (t.rank, t.stream, t.name, t.kind, start[i], finish[i], t.args, None, None,
                                      None, op_args[id(op)], None)))
            self._spans = out
        return self._spans

    def column(self, f: int) -> list:
        """Field ``f`` (its index in :class:`Span`) of every span, as :meth:`spans` would give
        it, made from the tasks and kept."""
        col = self._columns.get(f)
        if col is None:
            if f == _F_START:
                col = self.start_s
            elif f == _F_END:
                col = self.end_s
            elif f in _COMM_FIELDS:  # one loop over the comm tasks makes the four
                self._columns.update(zip(_COMM_FIELDS, self._comm_fields(self.tasks)))
                return self._columns[f]
            else:
                (col,) = self.fields((f,), None)
            self._columns[f] = col
        return col

    def fields(self, fields, at: list[int] | None) -> list[list]:
        """Fields ``fields`` (indices in :class:`Span`) of the spans at positions ``at`` (all:
        None), one list per field, as :meth:`spans` would give them, made from those tasks
        alone (C-level maps; a loop over the comm tasks among them for their own fields), or
        taken from a kept column."""
        tasks = self.tasks if at is None else list(map(self.tasks.__getitem__, at))
        comm = None
        out = []
        for f in fields:
            col = self._columns.get(f)
            if col is not None:
                out.append(col[:] if at is None else list(map(col.__getitem__, at)))
            elif f in _T_FIELD:
                out.append(list(map(operator.attrgetter(_T_FIELD[f]), tasks)))
            elif f == _F_START or f == _F_END:
                col = self.start_s if f == _F_START else self.end_s
                out.append(col[:] if at is None else list(map(col.__getitem__, at)))
            elif f == _F_OP_ARGS:
                out.append(list(map(self.op_args.__getitem__, map(id, map(_T_OP, tasks)))))
            else:
                if comm is None:
                    comm = dict(zip(_COMM_FIELDS, self._comm_fields(tasks)))
                out.append(comm[f])
        return out

    def _comm_fields(self, tasks: list) -> tuple[list, list, list, list]:
        """The comm class, arrow out, arrow in and transfer start of the spans of ``tasks``
        (None for a compute task's): one loop over the comm tasks among them."""
        n = len(tasks)
        cls, outs, ins, xs = [None] * n, [None] * n, [None] * n, [None] * n
        start, xfer = self.start_s, self.transfer_start_s
        for j in np.flatnonzero(np.fromiter(map(_T_COMM, tasks), dtype=bool, count=n)).tolist():
            t = tasks[j]
            i = t.id
            cls[j] = t.op.comm_class
            xs[j] = xfer.get(i, start[i])
            if t.flow_id >= 0:
                if t.stream in _SEND_STREAMS:
                    outs[j] = t.flow_id
                elif t.stream in _RECV_STREAMS:
                    ins[j] = t.flow_id
        return cls, outs, ins, xs

    def flows(self) -> tuple[set[int], set[int]]:
        """The ids of the arrows that start at a span and of those that end in one."""
        tasks = self.tasks
        at = np.flatnonzero(np.fromiter(map(_T_FLOW, tasks), dtype=np.int64, count=len(tasks)) >= 0).tolist()
        _, outs, ins, _ = self._comm_fields(list(map(tasks.__getitem__, at)))
        return set(outs) - {None}, set(ins) - {None}

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every span's rank and stream (as integers), start and end (s), as arrays (made
        once; read-only)."""
        if self._arrays is None:
            tasks, n = self.tasks, len(self.tasks)
            self._arrays = (np.fromiter(map(_T_RANK, tasks), dtype=np.int64, count=n),
                            np.fromiter(map(int, map(_T_STREAM, tasks)), dtype=np.int64, count=n),
                            np.fromiter(self.start_s, dtype=float, count=n),  # faster than np.array on a list
                            np.fromiter(self.end_s, dtype=float, count=n))
            for a in self._arrays:
                a.flags.writeable = False
        return self._arrays


def span_column(spans: Sequence[Span], f: int) -> list:
    """Field ``f`` (its index in :class:`Span`) of every span of ``spans``, a list or a
    :class:`SpanTable` (made from its tasks, no :class:`Span` made)."""
    if isinstance(spans, SpanTable):
        return spans.column(f)
    return list(map(SPAN_FIELDS[f], spans))


def span_fields(spans: Sequence[Span], fields, at: list[int]) -> list[list]:
    """Fields ``fields`` (indices in :class:`Span`) of the spans of ``spans`` at positions
    ``at``, one list per field (of a :class:`SpanTable`: made from those tasks alone)."""
    if isinstance(spans, SpanTable):
        return spans.fields(fields, at)
    group = list(map(spans.__getitem__, at))
    return [list(map(SPAN_FIELDS[f], group)) for f in fields]


def span_flows(spans: Sequence[Span]) -> tuple[set[int], set[int]]:
    """The ids of the arrows that start at a span of ``spans`` and of those that end in one."""
    if isinstance(spans, SpanTable):
        return spans.flows()
    return set(map(SPAN_FIELDS[_F_FLOW_OUT], spans)) - {None}, set(map(SPAN_FIELDS[_F_FLOW_IN], spans)) - {None}


def span_op_args(spans: Sequence[Span]) -> list:
    """The distinct ``op_args`` of ``spans`` (by identity; of a :class:`SpanTable`: each op's)."""
    if isinstance(spans, SpanTable):
        return list(spans.op_args.values())
    col = span_column(spans, _F_OP_ARGS)
    return list(dict(zip(map(id, col), col)).values())


def span_arrays(spans: Sequence[Span]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every span's rank and stream (as integers), start and end (s), as arrays."""
    if isinstance(spans, SpanTable):
        return spans.arrays()
    n = len(spans)
    return (np.fromiter(map(SPAN_FIELDS[_F_RANK], spans), dtype=np.int64, count=n),
            np.fromiter(map(int, map(SPAN_FIELDS[_F_STREAM], spans)), dtype=np.int64, count=n),
            np.fromiter(map(SPAN_FIELDS[_F_START], spans), dtype=float, count=n),
            np.fromiter(map(SPAN_FIELDS[_F_END], spans), dtype=float, count=n))


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
    spans: list[Span] | SpanTable
    """One span per task and stream it ran on (an op-level run's: a :class:`SpanTable`)."""
    counters: list[CounterSample]
    makespan_s: float
    events: int
    world_size: int
    metadata: dict = field(default_factory=dict)
