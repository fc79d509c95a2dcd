"""Tests for sim.output.trace: Chrome-trace export, gzip output and the validator."""

from __future__ import annotations

import copy
import gzip
import json

import pytest

from sim.output.trace import chrome_trace, validate_chrome_trace, write_chrome_trace
from sim.results import CounterSample, RankInfo, SimResult, Span
from sim.types import CommClass, OpKind, Stream

GiB = 2**30


def _result() -> SimResult:
    """Two ranks (pp stages 0 and 1); compute and comm streams; one p2p arrow 0 -> 1."""
    ranks = [RankInfo(0, node=0, local_gpu=0, tp=0, pp=0, dp=0),
             RankInfo(1, node=0, local_gpu=1, tp=0, pp=1, dp=0)]
    spans = [
        Span(0, Stream.COMPUTE, "fwd L0 mb0 GEMM", OpKind.GEMM, 0.0, 0.0015, {"microbatch": 0}),
        Span(0, Stream.COMPUTE, "fwd L0 mb0 norm", OpKind.NORM, 0.0015, 0.0020),
        Span(0, Stream.COMPUTE, "marker", OpKind.ELEMENTWISE, 0.0020, 0.0020),  # zero duration
        Span(0, Stream.TP_COMM, "ncclDevKernel_AllReduce tp L0 mb0", OpKind.COLLECTIVE,
             0.0010, 0.0018, comm_class=CommClass.TP),
        Span(0, Stream.PP_SEND, "ncclDevKernel_SendRecv pp send mb0", OpKind.P2P,
             0.0020, 0.0022, comm_class=CommClass.PP, flow_out=1),
        Span(1, Stream.PP_RECV, "ncclDevKernel_SendRecv pp recv mb0", OpKind.P2P,
             0.0020, 0.0022, comm_class=CommClass.PP, flow_in=1),
        Span(1, Stream.COMPUTE, "fwd L1 mb0 GEMM", OpKind.GEMM, 0.0022, 0.0030),
    ]
    counters = [CounterSample(0, 0.0, "memory", 2 * GiB), CounterSample(0, 0.001, "memory", 3 * GiB),
                CounterSample(1, 0.0, "memory", 1 * GiB)]
    return SimResult(ranks, spans, counters, makespan_s=0.003, events=10, world_size=2)


def _x(trace: dict, name: str) -> dict:
    return next(e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == name)


def test_trace_validates_and_has_top_level_keys():
    trace = chrome_trace(_result(), metadata={"config_hash": "abc"})
    assert validate_chrome_trace(trace) == []
    assert list(trace) == ["schemaVersion", "displayTimeUnit", "otherData", "traceEvents"]
    assert trace["otherData"]["simulator"] == "llmsim"
    assert trace["otherData"]["config_hash"] == "abc"


def test_times_are_microseconds():
    trace = chrome_trace(_result())
    gemm = _x(trace, "fwd L0 mb0 GEMM")
    assert (gemm["ts"], gemm["dur"]) == (0.0, 1500.0)
    norm = _x(trace, "fwd L0 mb0 norm")
    assert (norm["ts"], norm["dur"]) == (1500.0, 500.0)
    assert _x(trace, "marker")["dur"] == 0.0


def test_categories_names_and_args():
    trace = chrome_trace(_result())
    ar = _x(trace, "ncclDevKernel_AllReduce tp L0 mb0")
    assert ar["cat"] == "comm"
    assert ar["args"] == {"kind": "collective", "stream": 21, "device": 0, "comm_class": "tp"}
    gemm = _x(trace, "fwd L0 mb0 GEMM")
    assert gemm["cat"] == "kernel"
    assert gemm["args"] == {"microbatch": 0, "kind": "gemm", "stream": 7, "device": 0}


def test_args_given_as_pairs():
    ranks = [RankInfo(0, 0, 3, 0, 0, 0)]
    spans = [Span(0, Stream.COMPUTE, "bwd", OpKind.GEMM, 0.0, 1e-3, (("layer", 4), ("stream", 99)))]
    (x,) = [e for e in chrome_trace(SimResult(ranks, spans, [], 1e-3, 1, 1))["traceEvents"]
            if e["ph"] == "X"]
    assert x["args"] == {"layer": 4, "stream": 7, "kind": "gemm", "device": 3}


def test_every_gpu_slice_has_int_stream_and_device():
    trace = chrome_trace(_result())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 7
    for e in xs:
        assert type(e["args"]["stream"]) is int and e["args"]["stream"] == e["tid"]
        assert e["args"]["device"] in (0, 1)
    assert _x(trace, "fwd L1 mb0 GEMM")["args"]["device"] == 1


def test_process_and_thread_names():
    trace = chrome_trace(_result())
    meta = {(e["name"], e["pid"], e["tid"]): e["args"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert meta[("process_name", 0, 0)] == {"name": "rank 0 (node 0, GPU 0) pp=0 tp=0 dp=0"}
    assert meta[("process_sort_index", 1, 0)] == {"sort_index": 1}
    assert meta[("thread_name", 0, 7)] == {"name": "compute"}
    assert meta[("thread_name", 0, 21)] == {"name": "tp-comm"}
    assert meta[("thread_name", 0, 22)] == {"name": "pp-send"}
    assert meta[("thread_name", 1, 23)] == {"name": "pp-recv"}
    assert meta[("thread_sort_index", 1, 23)] == {"sort_index": 23}
    assert ("thread_name", 1, 21) not in meta  # only streams in use
    phs = [e["ph"] for e in trace["traceEvents"]]
    assert phs[: phs.count("M")] == ["M"] * phs.count("M")  # metadata first


def test_counters_use_allocated_gib():
    trace = chrome_trace(_result())
    cs = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert [(e["pid"], e["tid"], e["ts"], e["args"]) for e in cs] == [
        (0, 0, 0.0, {"allocated_GiB": 2.0}), (0, 0, 1000.0, {"allocated_GiB": 3.0}),
        (1, 0, 0.0, {"allocated_GiB": 1.0})]
    other = SimResult(_result().ranks, [], [CounterSample(0, 0.0, "flops", 5.0)], 0.0, 0, 2)
    (c,) = [e for e in chrome_trace(other)["traceEvents"] if e["ph"] == "C"]
    assert c["args"] == {"flops": 5.0}


def test_p2p_flow_pair():
    """The arrow leaves the send at its start (no transfer start given) and ends where the data
    arrive, the receive's end, at an instant written there for it to bind to."""
    trace = chrome_trace(_result())
    events = trace["traceEvents"]
    s, f = (next(e for e in events if e["ph"] == ph) for ph in "sf")
    assert (s["id"], s["pid"], s["tid"], s["ts"], s["cat"], s["name"]) == (1, 0, 22, 2000.0, "p2p", "p2p")
    assert (f["id"], f["pid"], f["tid"], f["ts"], f["bp"]) == (1, 1, 23, 2200.0, "e")  # the receive's end
    assert (f["cat"], f["name"]) == (s["cat"], s["name"])
    i = events.index(f) - 1  # the instant just before the f
    assert events[i] == {"ph": "i", "s": "t", "cat": "p2p", "name": "p2p arrival", "pid": 1, "tid": 23, "ts": 2200.0}
    assert events[i - 1]["name"] == "ncclDevKernel_SendRecv pp recv mb0"


@pytest.mark.parametrize("xfer,at", [(0.0021, 2100.0), (None, 2000.0), (0.0019, 2000.0), (0.0022, 2000.0),
                                     ("soon", 2000.0)])
def test_flow_leaves_the_send_at_its_transfer_start(xfer, at):
    """Within the send slice, before its end (a slice beginning there would take it); its start
    where the transfer start is missing, outside, or not a number (a NaN is refused as args)."""
    ranks = [RankInfo(0, 0, 0, 0, 0, 0), RankInfo(1, 0, 1, 0, 1, 0)]
    spans = [Span(0, Stream.PP_SEND, "send", OpKind.P2P, 0.002, 0.0022, flow_out=1, transfer_start_s=xfer),
             Span(1, Stream.PP_RECV, "recv", OpKind.P2P, 0.001, 0.0022, flow_in=1, transfer_start_s=xfer)]
    trace = chrome_trace(SimResult(ranks, spans, [], 0.0022, 2, 2))
    (s,) = [e for e in trace["traceEvents"] if e["ph"] == "s"]
    assert s["ts"] == at


def test_flow_into_zero_duration_span_sits_at_its_end():
    ranks = [RankInfo(0, 0, 0, 0, 0, 0), RankInfo(1, 0, 1, 0, 1, 0)]
    spans = [Span(0, Stream.PP_SEND, "send", OpKind.P2P, 0.001, 0.002, flow_out=9),
             Span(1, Stream.PP_RECV, "recv", OpKind.P2P, 0.002, 0.002, flow_in=9)]
    trace = chrome_trace(SimResult(ranks, spans, [], 0.002, 2, 2))
    (f,) = [e for e in trace["traceEvents"] if e["ph"] == "f"]
    assert f["ts"] == 2000.0
    assert validate_chrome_trace(trace) == []


def test_flow_with_missing_end_is_dropped():
    ranks = [RankInfo(0, 0, 0, 0, 0, 0)]
    spans = [Span(0, Stream.PP_SEND, "send to unsimulated rank", OpKind.P2P, 0.0, 0.001, flow_out=3),
             Span(0, Stream.PP_RECV, "recv from unsimulated rank", OpKind.P2P, 0.0, 0.001, flow_in=4)]
    trace = chrome_trace(SimResult(ranks, spans, [], 0.001, 2, 4))
    assert not [e for e in trace["traceEvents"] if e["ph"] in ("s", "f")]
    assert len([e for e in trace["traceEvents"] if e["ph"] == "X"]) == 2
    assert validate_chrome_trace(trace) == []


def test_span_on_unknown_rank_raises():
    bad = SimResult([RankInfo(0, 0, 0, 0, 0, 0)],
                    [Span(5, Stream.COMPUTE, "x", OpKind.GEMM, 0.0, 1.0)], [], 1.0, 1, 8)
    with pytest.raises(ValueError, match="rank 5"):
        chrome_trace(bad)


def test_events_do_not_depend_on_input_order():
    r = _result()
    shuffled = SimResult(r.ranks[::-1], r.spans[::-1], r.counters[::-1], r.makespan_s, r.events,
                         r.world_size)
    assert chrome_trace(shuffled) == chrome_trace(r)


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_write_is_byte_identical_and_round_trips(tmp_path, name):
    a, b = tmp_path / "a" / "deep" / name, tmp_path / "b" / name
    write_chrome_trace(_result(), a, title="t")
    write_chrome_trace(_result(), b, title="t")
    raw = a.read_bytes()
    assert raw == b.read_bytes()
    if name.endswith(".gz"):
        assert raw[:2] == b"\x1f\x8b"
        raw = gzip.decompress(raw)
    assert json.loads(raw) == chrome_trace(_result(), title="t")


def test_write_rejects_nan(tmp_path):
    r = _result()
    r.counters.append(CounterSample(0, 0.002, "memory", float("nan")))
    with pytest.raises(ValueError):
        write_chrome_trace(r, tmp_path / "nan.json")


# --- validator: each test breaks one rule and expects that problem reported --------------

def _valid() -> dict:
    return copy.deepcopy(chrome_trace(_result()))


def _one(problems: list[str], *needles: str) -> None:
    assert len(problems) == 1, problems
    for needle in needles:
        assert needle in problems[0], problems


def test_validator_catches_partial_overlap():
    trace = _valid()
    trace["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "late", "pid": 0, "tid": 7,
                                 "ts": 1400.0, "dur": 50.0, "args": {"stream": 7, "device": 0}})
    trace["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "straddle", "pid": 1, "tid": 7,
                                 "ts": 2900.0, "dur": 500.0, "args": {"stream": 7, "device": 1}})
    problems = validate_chrome_trace(trace)
    assert len(problems) == 2, problems
    assert "pid 0 tid 7" in problems[0] and "'late'" in problems[0] and "overlaps" in problems[0]
    assert "pid 1 tid 7" in problems[1] and "'straddle'" in problems[1]


def test_validator_allows_touching_and_rounding_slack():
    trace = _valid()
    trace["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "after", "pid": 1, "tid": 7,
                                 "ts": 2999.9995, "dur": 1.0, "args": {"stream": 7, "device": 1}})
    assert validate_chrome_trace(trace) == []


def test_validator_catches_flow_with_missing_end():
    trace = _valid()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["ph"] != "f"]
    _one(validate_chrome_trace(trace), "flow id 1", "1 's' and 0 'f'")


def test_validator_catches_flow_outside_any_slice():
    trace = _valid()
    next(e for e in trace["traceEvents"] if e["ph"] == "f")["ts"] = 5000.0
    _one(validate_chrome_trace(trace), "flow id 1", "'f'", "not inside")


def test_validator_catches_flow_running_backward():
    trace = _valid()
    next(e for e in trace["traceEvents"] if e["ph"] == "s")["ts"] = 2200.0  # the send's end
    next(e for e in trace["traceEvents"] if e["ph"] == "f")["ts"] = 2100.0  # inside the receive
    _one(validate_chrome_trace(trace), "flow id 1", "'f' at 2100.0 is before its 's' at 2200.0")


def test_validator_catches_flow_cat_mismatch():
    trace = _valid()
    next(e for e in trace["traceEvents"] if e["ph"] == "f")["cat"] = "other"
    _one(validate_chrome_trace(trace), "flow id 1", "cat or name")


def test_validator_catches_x_without_dur():
    trace = _valid()
    del _x(trace, "fwd L1 mb0 GEMM")["dur"]
    _one(validate_chrome_trace(trace), "'fwd L1 mb0 GEMM'", "missing dur")


def test_validator_catches_negative_dur():
    trace = _valid()
    _x(trace, "fwd L1 mb0 GEMM")["dur"] = -1.0
    _one(validate_chrome_trace(trace), "negative dur")


def test_validator_catches_empty_counter_args():
    trace = _valid()
    next(e for e in trace["traceEvents"] if e["ph"] == "C")["args"] = {}
    _one(validate_chrome_trace(trace), "(C 'memory')", "empty args")


def test_validator_catches_bad_metadata_and_missing_process_name():
    trace = _valid()
    events = trace["traceEvents"]
    events.remove(next(e for e in events if e["name"] == "process_name" and e["pid"] == 1))
    events.append({"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "x"}})
    events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": 7, "args": {}})
    events.append({"ph": "i", "name": "instant", "pid": 0, "tid": 7, "ts": 1.0})  # ignored
    events.append({"name": "phaseless"})
    problems = validate_chrome_trace(trace)
    assert len(problems) == 4, problems
    assert any("process_labels" in p for p in problems)
    assert any("thread_sort_index" in p and "sort_index" in p for p in problems)
    assert any("missing 'ph'" in p for p in problems)
    assert any(p == "pid 1: has X events but no process_name" for p in problems)


def test_validator_catches_zero_duration_nested_inside():
    trace = _valid()
    trace["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "inner", "pid": 1, "tid": 7,
                                 "ts": 2500.0, "dur": 0.0, "args": {"stream": 7, "device": 1}})
    _one(validate_chrome_trace(trace), "'inner'", "overlaps")
