"""The trace writer's bulk path gives the span-at-a-time path's text to the byte.

``sim.output.trace.document.events`` rounds every span's times at once and writes them as whole nanoseconds,
joins cached pieces of text, and formats the args of comm spans together;
``sim.output.trace.events.events_plain`` formats one span at a time, as the writer always did. Both are run
on whole simulations and on hand-made spans that hit each corner (ties sorted by name, times
half a nanosecond off, every kind of args value, repeated keys, arrows with one end); the
gzip writer that compresses on a second thread is compared with compressing the whole text, and
the writer that has a forked process format the later streams with the one that formats them all
(also when the child fails, cannot be forked, or is given up early).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import threading
import zlib

import numpy as np
import pytest

import sim.output.trace as trace
from sim.config import load_topology, load_workload_with_notes
from sim.output.gzip_parts import deflate_part
from sim.output.trace import document, pipeline, times
from sim.output.trace import events as trace_events
from sim.results import CounterSample, RankInfo, SimResult, Span
from sim.runner import simulate
from sim.types import CommClass, OpKind, Stream


def _fast(result: SimResult, monkeypatch) -> str:
    """The bulk path's text; fails if it handed the spans to the plain path."""
    with monkeypatch.context() as m:
        m.setattr(document, "events_plain", lambda r: pytest.fail("the bulk path fell back"))
        return ",".join(document.events(result))


def _plain(result: SimResult) -> str:
    return ",".join(trace_events.events_plain(result))


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
        # values equal as Python values, each written as its type is: 1, true, 1.0, "1"
        *(Span(3, Stream.COMPUTE, f"eq{j}", OpKind.NORM, 3e-5 + j * 1e-6, 3e-5 + (j + 1) * 1e-6, (("v", v), ("w", j)))
          for j, v in enumerate((1, True, 1.0, "1", 1, np.int64(1), 0, False, 0.0, -0.0))),
        # arrows: a pair, and one with its other end missing
        Span(0, Stream.PP_SEND, "send", OpKind.P2P, 3e-6, 4e-6, comm_class=CommClass.PP, flow_out=7),
        Span(3, Stream.PP_RECV, "recv", OpKind.P2P, 3e-6, 4.0000005e-6, comm_class=CommClass.PP, flow_in=7),
        Span(3, Stream.PP_RECV, "recv0", OpKind.P2P, 5e-6, 5e-6, comm_class=CommClass.PP, flow_in=9),
        Span(0, Stream.PP_SEND, "send0", OpKind.P2P, 5e-6, 5e-6, comm_class=CommClass.PP, flow_out=9),
        Span(0, Stream.PP_SEND, "dangling", OpKind.P2P, 6e-6, 7e-6, comm_class=CommClass.PP, flow_out=8),
        # arrows leaving at the transfer start: a numpy float, a third of a nanosecond past a
        # whole one, and one at the send's end (so at its start)
        *(Span(0, Stream.PP_SEND, f"send{k}", OpKind.P2P, t, t + 1e-6, comm_class=CommClass.PP, flow_out=k,
               transfer_start_s=x) for k, t, x in ((10, 8e-6, np.float64(8.5e-6)), (11, 1e-5, 1e-5 + 1e-9 / 3),
                                                   (12, 1.2e-5, 1.3e-5))),
        *(Span(3, Stream.PP_RECV, f"recv{k}", OpKind.P2P, t - 5e-7, t + 1e-6, comm_class=CommClass.PP, flow_in=k)
          for k, t in ((10, 8e-6), (11, 1e-5), (12, 1.2e-5))),
    ]
    # comm spans with the transfer start appended to their args (as a span made elsewhere may carry it)
    for i in range(100):
        spans.append(Span(0, Stream.TP_COMM, f"ar{i % 3}", OpKind.COLLECTIVE, i * 1e-6, i * 1e-6 + 3.3e-7,
                          base + (("transfer_start_s", i * 1e-6 + 1e-9 / 3),), CommClass.TP,
                          op_args=(("bytes", 1024),)))
    # and a stream where some do not fit that pattern: the name again, an int, a numpy float
    odd = [base + (("layer", 0.5),), base + (("transfer_start_s", 1),), base + (("transfer_start_s", np.float64(2.5)),)]
    for i in range(90):
        spans.append(Span(3, Stream.TP_COMM, "rs", OpKind.COLLECTIVE, i * 1e-6, i * 1e-6 + 1e-7,
                          odd[i % 3] if i % 10 == 0 else base + (("transfer_start_s", i * 0.1),), CommClass.TP))
    # the engine's comm spans: the task's own args, the transfer start in its field (also
    # after args that have the key already, after a mapping, an int and a numpy float)
    odd_args = [base, base + (("transfer_start_s", 9.5),), {"phase": "fwd"}, (), base]
    odd_starts = [1e-6 / 3, 2.5e-6, 3, np.float64(4.25e-6), 7e-7]
    for i in range(80):
        spans.append(Span(3, Stream.DP_COMM, "ag", OpKind.COLLECTIVE, i * 1e-6, i * 1e-6 + 2e-7,
                          odd_args[i % 5] if i % 8 == 0 else base, CommClass.DP, op_args=(("bytes", 64),),
                          transfer_start_s=odd_starts[i % 5] if i % 8 == 0 else i * 1e-6 + 1e-9 / 7))
    counters = [CounterSample(0, 0.0, "memory", 2.0**31), CounterSample(3, 1e-6, "link a-b", 0.5)]
    return SimResult(ranks, spans, counters, 1e-4, 1, 4)


def test_transfer_start_field_writes_the_arg_it_replaced():
    """A comm span's ``transfer_start_s`` field is written exactly as the same pair appended
    to its args was (how the engine recorded it before), on the bulk and the plain path."""
    base = (("phase", "bwd"), ("layer", 3))
    ranks = [RankInfo(0, 0, 0, 0, 0, 0)]
    for args, start in ((base, 1.25e-6), ((), 3), (base + (("transfer_start_s", 0.5),), 2e-7),
                        ({"phase": "fwd"}, np.float64(1e-6))):
        field = [Span(0, Stream.TP_COMM, "ar", OpKind.COLLECTIVE, 1e-6, 2e-6, args, CommClass.TP,
                      op_args=(("bytes", 8),), transfer_start_s=start)]
        items = tuple(args.items()) if isinstance(args, dict) else args
        appended = [field[0]._replace(args=items + (("transfer_start_s", start),), transfer_start_s=None)]
        want = _plain(SimResult(ranks, appended, [], 2e-6, 1, 1))
        assert _plain(SimResult(ranks, field, [], 2e-6, 1, 1)) == want
        assert ",".join(document.events(SimResult(ranks, field, [], 2e-6, 1, 1))) == want


def test_bulk_equals_plain_on_corners(monkeypatch):
    r = _corners()
    assert _fast(r, monkeypatch) == _plain(r)
    shuffled = SimResult(r.ranks, r.spans[::-1], r.counters, r.makespan_s, r.events, r.world_size)
    assert _fast(shuffled, monkeypatch) == _plain(r)


def test_args_equal_as_python_values_keep_their_json_types(monkeypatch):
    """1, True, 1.0 and "1" are one dict key in Python (or two); each arg is written as its own
    type, whatever was written before it (the writer caches a pair's text)."""
    events = json.loads(f"[{_fast(_corners(), monkeypatch)}]")
    got = {e["name"]: e["args"]["v"] for e in events if e.get("name", "").startswith("eq")}
    want = (1, True, 1.0, "1", 1, 1, 0, False, 0.0, -0.0)
    assert [(type(v), v) for v in (got[f"eq{j}"] for j in range(len(want)))] == [(type(v), v) for v in want]
    assert math.copysign(1.0, got["eq9"]) == -1.0


def test_round_ns_is_pythons_round():
    rng = np.random.default_rng(0)
    us = np.concatenate([rng.random(20000) * 1e6,
                         (np.floor(rng.random(20000) * 1e9) + 0.5) / 1000,  # exact halves
                         [0.0, 0.0005, 0.0015, 2.675, 1e11 - 0.0005]])
    assert (times.ns(us) / 1000).tolist() == [round(x, 3) for x in us.tolist()]


def test_times_the_bulk_path_does_not_take_go_to_the_plain_path():
    r = _corners()
    r.spans.append(Span(0, Stream.COMPUTE, "late", OpKind.GEMM, 2e5, 2e5 + 1e-3))  # past 1e11 µs
    assert ",".join(document.events(r)) == _plain(r)
    r.spans[-1] = Span(0, Stream.COMPUTE, "signed zero", OpKind.GEMM, -0.0, -0.0)  # written "-0.0"
    assert ",".join(document.events(r)) == _plain(r)
    assert '"ts":-0.0' in _plain(r)
    r.spans.append(Span(0, Stream.COMPUTE, "nan", OpKind.GEMM, 0.0, float("nan")))
    with pytest.raises(ValueError, match="not finite"):
        list(document.events(r))


def test_span_on_unknown_rank_raises_in_bulk():
    r = _corners()
    r.spans.append(Span(5, Stream.COMPUTE, "lost", OpKind.GEMM, 0.0, 1e-6))
    with pytest.raises(ValueError, match="rank 5"):
        list(document.events(r))


def test_gzip_of_the_parts_is_one_member_of_the_text():
    r = _corners()
    text = document.trace_text(r, "t", {"k": 1})
    parts = list(document.trace_parts(r, "t", {"k": 1}))
    assert "".join(parts) == text and len(parts) > 2
    data = pipeline.gzip_bytes(iter(parts))
    assert gzip.decompress(data) == text.encode("utf-8")
    assert zlib.decompress(data, 31) == text.encode("utf-8")  # one member: nothing after it
    assert pipeline.gzip_bytes(iter(parts)) == data  # the same parts, the same bytes
    # cut elsewhere: the same text (the bytes follow the cuts)
    assert gzip.decompress(pipeline.gzip_bytes(iter([text[:7], "", text[7:]]))) == text.encode("utf-8")


def test_parts_deflated_elsewhere_give_the_bytes_of_deflating_them_here():
    """What the forked writer's child sends (its pieces deflated apart, then their CRC-32 and
    length) makes the file deflating the same pieces in this process makes."""
    pieces = ["{head", ',"a":"é"' * 1000, ',"b":2' * 3000, "]}"]
    here = pipeline.gzip_bytes(iter(pieces))
    sent = [p.encode("utf-8") for p in pieces[1:3]]
    crc = zlib.crc32(sent[1], zlib.crc32(sent[0]))
    elsewhere = [pieces[0], *(pipeline.Deflated(deflate_part(b)) for b in sent),
                 pipeline.TextSum(crc, sum(map(len, sent))), pieces[3]]
    assert pipeline.gzip_bytes(iter(elsewhere)) == here
    assert gzip.decompress(here) == "".join(pieces).encode("utf-8")


def test_failed_gzip_write_leaves_no_file(tmp_path):
    r = _corners()
    r.counters.append(CounterSample(0, 1e-6, "memory", float("inf")))  # raised after the spans
    path = tmp_path / "t.json.gz"
    with pytest.raises(ValueError, match="not finite"):
        trace.write_chrome_trace(r, path)
    assert not path.exists()


# -- the forked writer: a child process formats the later streams -------------------------------

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")


def _serial_bytes(result: SimResult, gz: bool) -> bytes:
    """What the writer writes with no child: the text, or its parts as one gzip member."""
    text = document.trace_text(result, "t", {"k": 1}).encode("utf-8")
    if not gz:
        return text
    data = pipeline.gzip_bytes(document.trace_parts(result, "t", {"k": 1}))
    assert gzip.decompress(data) == text
    return data


def _idle_two_cpus(m) -> None:
    """Make the machine look like one with a CPU free for the child, whatever runs beside."""
    m.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    m.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))


def _written(result: SimResult, path, monkeypatch, share: float) -> bytes:
    with monkeypatch.context() as m:
        m.setattr(pipeline, "FORK_MIN_SPANS", 0)
        _idle_two_cpus(m)
        # earlier tests may leave idle threads behind (tqdm's monitor, Dask's offload thread),
        # which would rightly keep a real run from forking; the child here only formats
        m.setattr(threading, "active_count", lambda: 1)
        m.setattr(pipeline, "PARENT_SHARE", share)
        m.setattr(pipeline, "trace_parts", lambda *a: pytest.fail("the forked writer did not fork"))
        trace.write_chrome_trace(result, path, title="t", metadata={"k": 1})
    return path.read_bytes()


@needs_fork
@pytest.mark.parametrize("share", [0.0, 0.3, 0.7, 1.0])  # 0: the child formats every stream; 1: nothing
@pytest.mark.parametrize("name", ["t.json.gz", "t.json"])
def test_forked_writer_gives_the_serial_bytes(share, name, tmp_path, monkeypatch):
    w, notes = load_workload_with_notes("tiny", ["parallel.pp=4", "parallel.dp=1"], None)
    r = simulate(w, load_topology("dgx-a100"), notes=notes, link_counters=2).result
    for result in (r, _corners()):
        assert _written(result, tmp_path / name, monkeypatch, share) == _serial_bytes(result, name.endswith(".gz"))


@needs_fork
def test_forked_writer_finishes_what_a_failed_child_did_not_send(tmp_path, monkeypatch):
    r = _corners()
    parent, group = os.getpid(), trace.Bulk.group

    def fails_in_the_child(self, g):
        if os.getpid() != parent and g == len(self.groups) - 1:
            raise RuntimeError("the child fails at its last stream")
        return group(self, g)

    monkeypatch.setattr(trace.Bulk, "group", fails_in_the_child)
    assert _written(r, tmp_path / "t.json.gz", monkeypatch, 0.3) == _serial_bytes(r, True)


@needs_fork
def test_forked_writer_raises_what_the_child_raised(tmp_path, monkeypatch):
    r = _corners()
    r.counters.append(CounterSample(0, 1e-6, "memory", float("nan")))  # formatted by the child
    with pytest.raises(ValueError, match="not finite"):
        _written(r, tmp_path / "t.json.gz", monkeypatch, 0.3)
    assert not (tmp_path / "t.json.gz").exists()


@needs_fork
def test_forked_writer_without_a_child_writes_it_all_itself(tmp_path, monkeypatch):
    def no_fork():
        raise OSError("no memory for a child")

    monkeypatch.setattr(os, "fork", no_fork)
    assert _written(_corners(), tmp_path / "t.json.gz", monkeypatch, 0.3) == _serial_bytes(_corners(), True)


@needs_fork
def test_a_trace_given_up_early_ends_its_child(monkeypatch):
    forked, fork = [], os.fork

    def recorded():
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(pipeline, "FORK_MIN_SPANS", 0)
    _idle_two_cpus(monkeypatch)
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # as in _written
    monkeypatch.setattr(pipeline, "PARENT_SHARE", 0.0)
    monkeypatch.setattr(os, "fork", recorded)
    parts = pipeline.forked_parts(_corners(), "t", None)
    next(parts), next(parts)  # the header and the metadata: the child has started
    parts.close()
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):  # reaped
        os.waitpid(forked[0], 0)


def test_forked_writer_does_not_fork_beside_a_thread(tmp_path, monkeypatch):
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        monkeypatch.setattr(pipeline, "FORK_MIN_SPANS", 0)
        _idle_two_cpus(monkeypatch)
        monkeypatch.setattr(os, "fork", lambda: pytest.fail("forked beside a running thread"))
        trace.write_chrome_trace(_corners(), tmp_path / "t.json.gz", title="t", metadata={"k": 1})
    finally:
        release.set()
        other.join()
    assert (tmp_path / "t.json.gz").read_bytes() == _serial_bytes(_corners(), True)


@pytest.mark.parametrize("cpus, load, forks", [({0, 1}, 0.9, True), ({0, 1}, 2.5, False), ({0}, 0.0, False)])
def test_forks_only_with_a_cpu_free(cpus, load, forks, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cpus, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # as in _written
    assert pipeline.may_fork(pipeline.FORK_MIN_SPANS) is (forks and hasattr(os, "fork"))
    assert not pipeline.may_fork(pipeline.FORK_MIN_SPANS - 1)


def test_gzip_of_bytes_and_of_nothing():
    text = "é" * 10
    assert gzip.decompress(pipeline.gzip_bytes(iter([text[:3], text[3:].encode("utf-8")]))) == text.encode("utf-8")
    assert gzip.decompress(pipeline.gzip_bytes(iter([]))) == b""


def _counter_corners() -> SimResult:
    """Counters that need each rule of the plain path: ties of time sorted by name then value
    (0.0 and -0.0 tied, kept in their order), times half a nanosecond off, memory in GiB, link
    utilization, another name, ranks given out of order, ints and numpy values."""
    ranks = [RankInfo(0, 0, 0, 0, 0, 0), RankInfo(3, 0, 3, 1, 0, 0)]
    c = CounterSample
    counters = [c(3, 2e-6, "memory", 3.0 * 2**30), c(0, 2e-6, "link b", 0.25), c(0, 2e-6, "link a", 0.75),
                c(0, 2e-6, "link a", 0.5), c(0, 5e-10, "memory", 1), c(0, 1.5e-9, "memory", np.float64(2.5)),
                c(0, 2.675e-6, "other", -0.0), c(0, 2.675e-6, "other", 0.0), c(0, 2.675e-6, "other", -0.0),
                c(3, 0.0, "link gpu3->nvs0", np.int64(1)), c(3, 1.0005e-6, "memory", 1e300), c(0, 7.0, "é\"x", 1e-300)]
    rng = np.random.default_rng(5)
    for _ in range(300):  # many at a few times, on both ranks
        counters.append(c(int(rng.choice([0, 3])), float(rng.integers(0, 20)) * 1e-7,
                          str(rng.choice(["memory", "link x"])),
                          float(rng.choice([0.0, 1.0, 0.1, 2.0**33]))))
    return SimResult(ranks, [], counters, 8.0, 0, 4)


def test_counters_by_columns_are_the_plain_texts():
    r = _counter_corners()
    ranks = {i.rank: i for i in r.ranks}
    want = list(trace_events.counter_events(r, ranks, trace_events.Json()))
    assert trace.counter_batch(r, ranks, trace_events.Json()) == want
    text = ",".join(want)
    assert '"ts":2.675,' in text and '"allocated_GiB":3.0}' in text
    assert '"name":"link gpu3->nvs0","pid":3,"tid":0,"ts":0.0,"args":{"utilization":1.0}}' in text


@pytest.mark.parametrize("bad,error", [
    (CounterSample(0, 1e-6, "memory", float("nan")), "not finite"),
    (CounterSample(0, float("inf"), "memory", 1.0), "not finite"),
    (CounterSample(5, 1e-6, "memory", 1.0), "rank 5, which has no RankInfo"),
])
def test_counters_the_columns_do_not_take_are_refused_as_plain(bad, error):
    r = _counter_corners()
    r.counters.insert(40, bad)
    with pytest.raises(ValueError, match=error):
        trace.counter_batch(r, {i.rank: i for i in r.ranks}, trace_events.Json())


def test_counters_at_times_the_columns_do_not_take_are_written_as_plain():
    r = _counter_corners()
    r.counters += [CounterSample(3, -1e-6, "memory", 1.0), CounterSample(0, -0.0, "link a", 0.5)]
    ranks = {i.rank: i for i in r.ranks}
    assert trace.counter_batch(r, ranks, trace_events.Json()) == \
        list(trace_events.counter_events(r, ranks, trace_events.Json()))
