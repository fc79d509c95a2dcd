"""An op-level run's spans kept as a table (:class:`sim.results.SpanTable`): its spans follow the
rule written out per task, the columns the trace writer and the breakdown read equal those
spans' fields, and reading the columns makes no span."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

import sim.output.trace.document as trace_document
from sim.config import load_topology, load_workload_with_notes
from sim.output.analysis import breakdown
from sim.results import (
    SPAN_FIELDS,
    Span,
    SpanTable,
    span_arrays,
    span_column,
    span_fields,
    span_flows,
    span_op_args,
)
from sim.runner import simulate
from sim.types import ScheduleKind, Stream
from tests.conftest import make_workload

# every kind of communication: TP, DP (distributed optimizer), pipeline sends over an
# interleaved schedule with a tied embedding, CP ring exchanges and EP all-to-alls
_MIXED = dict(tp=2, pp=2, dp=2, cp=2, ep=2, experts=4, topk=2, layers=4, vps=2,
              schedule=ScheduleKind.INTERLEAVED, tied=True, sp=True, dist_opt=True, seq=1024, gbs=8)


@pytest.fixture(scope="module")
def runs():
    w, notes = load_workload_with_notes("tiny", ["parallel.pp=4", "parallel.dp=1", "parallel.sequence_parallel=true"],
                                        None)
    topo = load_topology("dgx-a100")
    return [simulate(w, topo, notes=notes), simulate(make_workload(**_MIXED), topo)]


def _fresh(table: SpanTable) -> SpanTable:
    """The same table, with nothing made yet."""
    return SpanTable(table.tasks, table.start_s, table.end_s, table.transfer_start_s, table.op_args)


def _rule(task, start: float, end: float, transfer: float | None) -> Span:
    """The span of ``task``, written out field by field."""
    op = task.op
    op_args = (("m", op.m), ("n", op.n), ("k", op.k)) if getattr(op, "m", None) is not None else ()
    if getattr(op, "batch", 1) > 1:
        op_args += (("batch", op.batch),)
        if getattr(op, "streams", 0):
            op_args += (("streams", op.streams),)
    if op.flops:
        op_args += (("flops", op.flops),)
    op_args += (("bytes", op.bytes),)
    sends = task.comm and task.flow_id >= 0 and task.stream in (Stream.PP_SEND, Stream.PP_SEND_GRAD)
    receives = task.comm and task.flow_id >= 0 and task.stream in (Stream.PP_RECV, Stream.PP_RECV_GRAD)
    return Span(task.rank, task.stream, task.name, task.kind, start, end, task.args,
                op.comm_class if task.comm else None, task.flow_id if sends else None,
                task.flow_id if receives else None, op_args, (start if transfer is None else transfer)
                if task.comm else None)


def test_spans_follow_the_rule_per_task(runs):
    for run in runs:
        table = run.result.spans
        assert isinstance(table, SpanTable) and len(table) == len(run.program.tasks)
        want = [_rule(t, table.start_s[t.id], table.end_s[t.id], table.transfer_start_s.get(t.id))
                for t in run.program.tasks]
        assert list(map(repr, table)) == list(map(repr, want))
    mixed = runs[1].result.spans
    assert any(s.flow_out is not None for s in mixed) and any(s.flow_in is not None for s in mixed)
    assert any(s.transfer_start_s != s.start_s for s in mixed if s.transfer_start_s is not None)


def test_columns_equal_the_spans_fields_and_make_no_span(runs):
    for run in runs:
        spans = list(run.result.spans)
        table = _fresh(run.result.spans)
        for f, field in enumerate(SPAN_FIELDS):
            assert list(map(repr, span_column(table, f))) == list(map(repr, map(field, spans))), Span._fields[f]
            assert span_column(spans, f) == list(map(field, spans))
        for got, want in zip(span_arrays(table), span_arrays(spans)):
            assert got.dtype == want.dtype and np.array_equal(got, want)
        assert span_flows(table) == span_flows(spans) and all(span_flows(spans))
        assert sorted(map(repr, span_op_args(table))) == sorted(map(repr, span_op_args(spans)))
        assert table._spans is None


def test_fields_of_some_spans_equal_theirs_made_or_kept(runs):
    fields = range(len(SPAN_FIELDS))
    for run in runs:
        spans = list(run.result.spans)
        at = list(range(len(spans)))[::-7]  # out of order, every kind of span among them
        want = list(map(repr, span_fields(spans, fields, at)))
        table = _fresh(run.result.spans)
        assert list(map(repr, span_fields(table, fields, at))) == want  # made from those tasks alone
        for f in fields:
            span_column(table, f)
        assert list(map(repr, span_fields(table, fields, at))) == want  # taken from the kept columns
        assert table._spans is None


def test_trace_and_breakdown_read_the_table_as_the_list(runs, monkeypatch):
    monkeypatch.setattr(trace_document, "events_plain", lambda r: pytest.fail("the bulk path fell back"))
    for run in runs:
        res = dataclasses.replace(run.result, spans=_fresh(run.result.spans))
        as_list = dataclasses.replace(run.result, spans=list(run.result.spans))
        assert ",".join(trace_document.events(res)) == ",".join(trace_document.events(as_list))
        assert breakdown(res) == breakdown(as_list)
        assert res.spans._spans is None


def test_the_table_reads_as_its_list(runs):
    table = runs[1].result.spans
    spans = list(table)
    assert table[0] == spans[0] and table[-1] == spans[-1] and table[2:5] == spans[2:5]
    assert table == spans and spans == table and table == _fresh(table)
    assert table != spans[:-1] and spans[0] in table and table.index(spans[3]) == spans.index(spans[3])
    assert pickle.loads(pickle.dumps(table)) == spans


def test_layer_blocks_give_a_list_of_spans():
    w, notes = load_workload_with_notes("tiny", [], None)
    res = simulate(w, load_topology("dgx-a100"), notes=notes, granularity="layer").result
    assert type(res.spans) is list and res.spans
