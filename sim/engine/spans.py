"""The run's result: every task's spans, the memory counters, the links' busy bytes.

:class:`SpanKeeping` is a mixin of :class:`~sim.engine.simulation.Simulation`: once the run has
ended it turns the engine's per-task starts and ends into a :class:`~sim.results.SimResult`, the
spans kept columnar (:class:`~sim.results.SpanTable`) when every task is an op at its id's
place, else made one by one (a layer block's spans: each comm class's exposed time, then its
compute).
"""

from __future__ import annotations

import operator
from typing import Any, Protocol, cast

import numpy as np

from sim.engine.link_rates import LinkRates
from sim.engine.pricing import Pricing
from sim.program import Block
from sim.results import CounterSample, SimResult, Span, SpanTable
from sim.types import OpKind

__all__ = ["SpanKeeping"]


class _EventCounter(Protocol):
    """What the result reads of the engine's environment: how many events it processed."""

    events_processed: int


class SpanKeeping(Pricing):
    """The engine's result (a mixin of :class:`~sim.engine.simulation.Simulation`, whose
    constructor and ``run()`` set up the state; a block's spans come from its timing,
    :meth:`~sim.engine.pricing.Pricing.block_timing`).

    Reads ``program``, ``slowdown``, ``start``, ``finish``, ``xfer_start`` (a collective's
    transfer start, by task), ``mem`` (each rank's memory deltas), ``net`` (its busy bytes and
    rate log), ``pulses``, ``record_links`` and ``env`` (its event count); writes nothing of
    the engine's.
    """

    xfer_start: dict[int, float]
    mem: dict[int, list[tuple[float, float]]]
    record_links: bool
    env: _EventCounter

    # -- results ------------------------------------------------------------------------------
    def _block_spans(self, t, spans: list, op_args: dict) -> None:
        """A block's spans: each comm class's exposed time (from the block's start, one after
        another), then its compute."""
        op = t.op
        factor = self.slowdown.get(t.rank, 1.0)
        key = (id(op), factor, t.name)
        parts = op_args.get(key)
        if parts is None:
            _, exposed, _, shares = self.block_timing(op, factor)
            comm = tuple((stream, f"nccl {cls.value} {t.name}", cls, e,
                          (("collectives", len(op.comm_ops(cls))),
                           ("bytes", sum(c.size_bytes for c in op.comm_ops(cls)))))
                         for cls, stream, e in exposed if e > 0)
            extra = (("compute_by_kind", shares), ("ops", sum(1 for s in op.streams if s is None)),
                     ("flops", op.flops), ("bytes", op.bytes))
            parts = op_args[key] = (comm, extra)
        comm, extra = parts
        at, end = self.start[t.id], self.finish[t.id]
        for stream, name, cls, e, bytes_ in comm:
            spans.append(Span(t.rank, stream, name, OpKind.COLLECTIVE, at, at + e, t.args, cls, None, None, bytes_,
                              at))
            at += e
        spans.append(Span(t.rank, t.stream, t.name, t.kind, at if at < end else end, end, t.args, None, None, None,
                          extra))

    def _span_list(self, op_args: dict[int, tuple]) -> list[Span]:
        """Every task's spans, made one by one: a layer block's (:meth:`_block_spans`) and the
        others' as :meth:`sim.results.SpanTable.spans` makes them."""
        spans: list[Span] = []
        block_args: dict = {}
        for t in self.program.tasks:
            op = t.op
            if type(op) is Block:
                self._block_spans(t, spans, block_args)
                continue
            if id(op) not in op_args:
                op_args[id(op)] = _op_args(op)
            spans.extend(SpanTable([t], {t.id: self.start[t.id]}, {t.id: self.finish[t.id]},  # type: ignore[arg-type]
                                   self.xfer_start, op_args).spans())  # (spans() reads start and end by task id alone)
        return spans

    def _result(self, wall_s: float) -> SimResult:
        prog = self.program
        finish, start = cast("list[float]", self.finish), self.start  # every task ended (run() checked)
        op_list = list(map(_T_OP, prog.tasks))
        ops = dict(zip(map(id, op_list), op_list))
        op_args: dict[int, tuple] = {}
        for oid, op in ops.items():
            if type(op) is Block:
                break
            op_args[oid] = _op_args(op)
        spans: SpanTable | list[Span]
        if len(op_args) == len(ops) and _in_place(prog.tasks):
            spans = SpanTable(prog.tasks, start, finish, self.xfer_start, op_args)
        else:  # layer blocks (or tasks not at their ids' places): every span made here
            spans = self._span_list(op_args)
        counters = []
        for rank in sorted(self.mem):
            level = prog.static_memory_bytes.get(rank, 0.0)
            counters.append(CounterSample(rank, 0.0, "memory", level))
            for ts, delta in sorted(self.mem[rank]):
                level += delta
                counters.append(CounterSample(rank, ts, "memory", level))
        makespan = max(finish, default=0.0)
        meta = {"simulated_wall_s": wall_s, "link_busy_bytes": list(self.net.busy_bytes)}
        if self.record_links:
            assert self.pulses is not None and self.net.rate_log is not None  # both lists when recording (run())
            meta["link_rates"] = LinkRates(self.pulses, self.net.rate_log)
        return SimResult(list(prog.ranks), spans, counters, makespan, self.env.events_processed,
                         prog.world_size, meta)


_T_OP, _T_ID = operator.attrgetter("op"), operator.attrgetter("id")


def _op_args(op) -> tuple:
    """An op's args on its spans: its GEMM shape (and batch, and the streams a batch of
    separate kernels runs on), FLOPs where it has any, bytes."""
    extra: tuple[tuple[str, Any], ...] = \
        (("m", op.m), ("n", op.n), ("k", op.k)) if getattr(op, "m", None) is not None else ()
    if getattr(op, "batch", 1) > 1:
        extra += (("batch", op.batch),)
        if getattr(op, "streams", 0):
            extra += (("streams", op.streams),)
    if op.flops:
        extra += (("flops", op.flops),)
    return extra + (("bytes", op.bytes),)


def _in_place(tasks: list) -> bool:
    """Whether every task sits at the position of its id (as the program builders add them)."""
    n = len(tasks)
    return bool(np.array_equal(np.fromiter(map(_T_ID, tasks), dtype=np.int64, count=n), np.arange(n)))
