"""The trace writer's bulk path gives the span-at-a-time path's text to the byte.

``sim.trace._events`` rounds every span's times at once and writes them as whole nanoseconds,
joins cached pieces of text, and formats the args of comm spans together;
``sim.trace._events_plain`` formats one span at a time, as the writer always did. Both are run
on whole simulations and on hand-made spans that hit each corner (ties sorted by name, times
half a nanosecond off, every kind of args value, repeated keys, arrows with one end); the
gzip writer that compresses on a second thread is compared with compressing the whole text.
"""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest

import sim.trace as trace
from sim.config import load_topology, load_workload_with_notes
from sim.results import CounterSample, RankInfo, SimResult, Span
from sim.runner import simulate
from sim.types import CommClass, OpKind, Stream


def _fast(result: SimResult, monkeypatch) -> str:
    """The bulk path's text; fails if it handed the spans to the plain path."""
    with monkeypatch.context() as m:
        m.setattr(trace, "_events_plain", lambda r: pytest.fail("the bulk path fell back"))
        return ",".join(trace._events(result))


def _plain(result: SimResult) -> str:
    return ",".join(trace._events_plain(result))


@pytest.mark.parametrize("sets", [[], ["parallel.pp=4", "parallel.dp=1", "parallel.sequence_parallel=true"]])
def test_bulk_equals_plain_on_a_simulation(sets, monkeypatch):
    w, notes = load_workload_with_notes("tiny", sets, None)
    r = simulate(w, load_topology("dgx-a100"), notes=notes, link_counters=2).result
    assert any(s.flow_out is not None for s in r.spans)  # p2p arrows are written too
    assert _fast(r, monkeypatch) == _plain(r)


def _corners() -> SimResult:
    """Spans that need each rule of the plain path."""
    ranks = [RankInfo(0, 0, 0, 0, 0, 0), RankInfo(3, 0, 3, 1, 0, 0)]
    base = (("phase", "fwd"), ("microbatch", 1), ("layer", 2))
    spans = [
        # out of order on one stream; ties on (ts, dur) sorted by name; zero durations
        Span(0, Stream.COMPUTE, "b", OpKind.GEMM, 2e-6, 3e-6, base),
        Span(0, Stream.COMPUTE, "a", OpKind.GEMM, 2e-6, 3e-6, base),
        Span(0, Stream.COMPUTE, "z", OpKind.NORM, 1e-6, 1e-6),
        Span(0, Stream.COMPUTE, "first", OpKind.ELEMENTWISE, 0.0, 1e-6, {"k": True, "n": None, "x": 1.5}),
        # times half a nanosecond off, in µs: 0.0005, 0.0015, 2.675, 1.0005
        Span(3, Stream.COMPUTE, "half", OpKind.GEMM, 5e-13, 1.5e-12, base, op_args=(("m", 4),)),
        Span(3, Stream.COMPUTE, "half2", OpKind.GEMM, 2.675e-6, 1.0005e-6 + 2.675e-6, (), op_args={"b": 1}),
        # values of every kind, a repeated key, non-ASCII text
        Span(3, Stream.COMPUTE, "vals", OpKind.ATTENTION, 1e-5, 2e-5,
             (("s", "é\"x"), ("i", np.int64(3)), ("f", np.float64(0.1)), ("b", False), ("s", "again"))),
        # arrows: a pair, and one with its other end missing
        Span(0, Stream.PP_SEND, "send", OpKind.P2P, 3e-6, 4e-6, comm_class=CommClass.PP, flow_out=7),
        Span(3, Stream.PP_RECV, "recv", OpKind.P2P, 3e-6, 4.0000005e-6, comm_class=CommClass.PP, flow_in=7),
        Span(3, Stream.PP_RECV, "recv0", OpKind.P2P, 5e-6, 5e-6, comm_class=CommClass.PP, flow_in=9),
        Span(0, Stream.PP_SEND, "send0", OpKind.P2P, 5e-6, 5e-6, comm_class=CommClass.PP, flow_out=9),
        Span(0, Stream.PP_SEND, "dangling", OpKind.P2P, 6e-6, 7e-6, comm_class=CommClass.PP, flow_out=8),
    ]
    # comm spans, enough to be formatted together: a task's pairs with one float appended
    for i in range(100):
        spans.append(Span(0, Stream.TP_COMM, f"ar{i % 3}", OpKind.COLLECTIVE, i * 1e-6, i * 1e-6 + 3.3e-7,
                          base + (("transfer_start_s", i * 1e-6 + 1e-9 / 3),), CommClass.TP,
                          op_args=(("bytes", 1024),)))
    # and a stream where some do not fit that pattern: the name again, an int, a numpy float
    odd = [base + (("layer", 0.5),), base + (("transfer_start_s", 1),), base + (("transfer_start_s", np.float64(2.5)),)]
    for i in range(90):
        spans.append(Span(3, Stream.TP_COMM, "rs", OpKind.COLLECTIVE, i * 1e-6, i * 1e-6 + 1e-7,
                          odd[i % 3] if i % 10 == 0 else base + (("transfer_start_s", i * 0.1),), CommClass.TP))
    counters = [CounterSample(0, 0.0, "memory", 2.0**31), CounterSample(3, 1e-6, "link a-b", 0.5)]
    return SimResult(ranks, spans, counters, 1e-4, 1, 4)


def test_bulk_equals_plain_on_corners(monkeypatch):
    r = _corners()
    assert _fast(r, monkeypatch) == _plain(r)
    shuffled = SimResult(r.ranks, r.spans[::-1], r.counters, r.makespan_s, r.events, r.world_size)
    assert _fast(shuffled, monkeypatch) == _plain(r)


def test_round_ns_is_pythons_round():
    rng = np.random.default_rng(0)
    us = np.concatenate([rng.random(20000) * 1e6,
                         (np.floor(rng.random(20000) * 1e9) + 0.5) / 1000,  # exact halves
                         [0.0, 0.0005, 0.0015, 2.675, 1e11 - 0.0005]])
    assert (trace._ns(us) / 1000).tolist() == [round(x, 3) for x in us.tolist()]


def test_times_the_bulk_path_does_not_take_go_to_the_plain_path():
    r = _corners()
    r.spans.append(Span(0, Stream.COMPUTE, "late", OpKind.GEMM, 2e5, 2e5 + 1e-3))  # past 1e11 µs
    assert ",".join(trace._events(r)) == _plain(r)
    r.spans[-1] = Span(0, Stream.COMPUTE, "signed zero", OpKind.GEMM, -0.0, -0.0)  # written "-0.0"
    assert ",".join(trace._events(r)) == _plain(r)
    assert '"ts":-0.0' in _plain(r)
    r.spans.append(Span(0, Stream.COMPUTE, "nan", OpKind.GEMM, 0.0, float("nan")))
    with pytest.raises(ValueError, match="not finite"):
        list(trace._events(r))


def test_span_on_unknown_rank_raises_in_bulk():
    r = _corners()
    r.spans.append(Span(5, Stream.COMPUTE, "lost", OpKind.GEMM, 0.0, 1e-6))
    with pytest.raises(ValueError, match="rank 5"):
        list(trace._events(r))


def test_threaded_gzip_is_one_shot_gzip():
    r = _corners()
    text = trace._trace_text(r, "t", {"k": 1})
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=3) as gz:
        gz.write(text.encode("utf-8"))
    parts = list(trace._trace_parts(r, "t", {"k": 1}))
    assert "".join(parts) == text
    assert trace._gzip_bytes(iter(parts)) == buf.getvalue()
    assert trace._gzip_bytes(iter([text[:7], "", text[7:]])) == buf.getvalue()


def test_failed_gzip_write_leaves_no_file(tmp_path):
    r = _corners()
    r.counters.append(CounterSample(0, 1e-6, "memory", float("inf")))  # raised after the spans
    path = tmp_path / "t.json.gz"
    with pytest.raises(ValueError, match="not finite"):
        trace.write_chrome_trace(r, path)
    assert not path.exists()
