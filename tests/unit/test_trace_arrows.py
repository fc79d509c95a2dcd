"""The p2p arrows of real runs' traces run forward in time and bind where Perfetto binds them.

``_bind`` re-implements, independently of sim.output.trace, what Perfetto's trace processor does with
a JSON trace's slices and v1 flow events (google/perfetto):

* ``trace_sorter.h`` (``TimestampedEvent::SlowOperatorLess``, used once a JSON trace has an
  ``X`` event): events by ``ts`` in whole nanoseconds; at one ``ts`` a complete (``X``) event
  before the other events, a longer one first; then file order. Older releases sort by ``ts``
  then file order alone, so both orders are checked.
* ``json_trace_parser.cc``: an ``X`` event, and an ``i`` event of thread scope, begins a slice
  on its thread's track (the instant with duration 0); ``SliceTracker::StartSlice`` first pops
  the slices that ended at or before it (``MaybeCloseStack``).
* ``flow_tracker.cc``: an ``s``, and an ``f`` with ``"bp": "e"``, binds to the top of its
  track's stack (``GetTopmostSliceOnTrack``): the slice most recently begun and not yet popped.

The UI then draws the arrow from the end of the slice that starts first to the start of the
other (``ui/src/frontend/flow_events_renderer.ts``); the legacy viewer from the ``s``'s ``ts`` to
the ``f``'s.
"""

from __future__ import annotations

import collections
import json

import pytest

import sim.output.trace_ranks as trace_ranks
from sim.config import load_topology, load_workload_with_notes
from sim.hardware import get_gpu
from sim.inference import InferenceSpec, simulate_inference
from sim.output.trace import chrome_trace, validate_chrome_trace, write_chrome_trace
from sim.output.trace_ranks import rank_traces
from sim.runner import simulate
from sim.types import Stream
from sim.workload.spec import ModelSpec

_RECV_OF = {Stream.PP_SEND: Stream.PP_RECV, Stream.PP_SEND_GRAD: Stream.PP_RECV_GRAD}
"""The stream a send's data arrive on, by the send's stream."""


def _ns(us: float) -> int:
    return round(us * 1000)


def _begins(e: dict) -> bool:
    """Whether Perfetto makes a slice of ``e`` on its thread's track."""
    return e["ph"] == "X" or (e["ph"] == "i" and e.get("s", "t") == "t")


def _bind(events: list[dict], *, newest: bool) -> dict[int, dict[str, tuple[dict, dict | None]]]:
    """{flow id: {"s" or "f": (the flow event, the slice event it binds to, or None)}}."""
    tracks: dict[tuple, list[tuple]] = collections.defaultdict(list)
    for i, e in enumerate(events):
        if _begins(e) or e["ph"] in ("s", "f"):
            key = -_ns(e["dur"]) if (newest and e["ph"] == "X") else 0
            tracks[(e["pid"], e["tid"])].append((_ns(e["ts"]), key, i, e))
    out: dict[int, dict] = collections.defaultdict(dict)
    for rows in tracks.values():
        stack: list[dict] = []
        for ts, _, _, e in sorted(rows, key=lambda r: r[:3]):
            if _begins(e):
                while stack and _ns(stack[-1]["ts"]) + _ns(stack[-1].get("dur", 0.0)) <= ts:
                    stack.pop()
                stack.append(e)
            else:
                assert e["ph"] == "s" or e.get("bp") == "e", e  # an f without it binds to the next slice
                out[e["id"]][e["ph"]] = (e, stack[-1] if stack else None)
    return out


def _end_us(x: dict) -> float:
    return x["ts"] + x.get("dur", 0.0)


def _check_arrows(trace: dict, linked: int) -> None:
    """Every arrow: both ends, ``f`` not before ``s``, the ``s`` in its send slice at the
    transfer's start, the ``f`` on the receiving rank's matching stream at the instant the
    data arrive (the end of the send, and of the receive slice just before it), and Perfetto
    drawing it forward: the slice it leaves ends no later than the one it enters starts."""
    events = trace["traceEvents"]
    assert validate_chrome_trace(trace) == []
    recv_end: dict[tuple, dict[int, dict]] = collections.defaultdict(dict)  # (pid, tid) -> end ns -> recv X
    for e in events:
        if e["ph"] == "X" and e["name"].startswith("ncclRecv"):
            recv_end[(e["pid"], e["tid"])][_ns(_end_us(e))] = e
    for newest in (True, False):
        flows = _bind(events, newest=newest)
        assert len(flows) == linked > 0
        for fid, ends in flows.items():
            assert sorted(ends) == ["f", "s"], fid
            (s, send), (f, arrival) = ends["s"], ends["f"]
            assert f["ts"] >= s["ts"], (s, f)
            # the s: in its send slice, where the transfer starts
            assert send is not None and send["ph"] == "X" and send["name"].startswith("ncclSend"), (s, send)
            assert send["tid"] in _RECV_OF and send["ts"] <= s["ts"] < _end_us(send) or send["dur"] == 0, (s, send)
            assert _ns(s["ts"]) == _ns(send["args"]["transfer_start_s"] * 1e6), (s, send)
            # the f: at the arrival instant, on the receiving rank's stream for those data
            assert arrival is not None and (arrival["ph"], arrival["name"]) == ("i", "p2p arrival"), (f, arrival)
            assert (f["pid"], f["tid"]) == (arrival["pid"], arrival["tid"]) and f["ts"] == arrival["ts"]
            assert f["pid"] != s["pid"] and f["tid"] == _RECV_OF[Stream(send["tid"])]
            assert _ns(f["ts"]) == _ns(_end_us(send))  # the data arrive as the send ends
            recv = recv_end[(f["pid"], f["tid"])].get(_ns(f["ts"]))
            assert recv is not None and recv["name"].replace("Recv", "Send") == send["name"], (f, send)
            # the same transfer (the pass and chunk are each side's own: the last stage's chunk 0
            # feeds stage 0's chunk 1, a prefill's token the next decode step)
            assert (recv["args"]["transfer_start_s"], recv["args"]["bytes"]) == \
                (send["args"]["transfer_start_s"], send["args"]["bytes"]), (recv, send)
            # Perfetto: the send slice starts first (so it is the arrow's source) and ends no
            # later than the arrival starts (so the arrow is drawn forward)
            assert send["ts"] <= arrival["ts"] and _ns(_end_us(send)) <= _ns(arrival["ts"])


def _linked(result) -> int:
    outs = {s.flow_out for s in result.spans} - {None}
    return len(outs & {s.flow_in for s in result.spans})


@pytest.mark.parametrize("name,granularity,sets", [
    ("tiny", "op", []),
    ("tiny", "op", ["parallel.pp=4", "parallel.dp=1", "parallel.virtual_pipeline_stages=1"]),
    ("gpt3-175b", "chunk", []),  # interleaved 1F1B on 8 stages, 64 micro-batches: 2,944 arrows
])
def test_arrows_of_a_training_run_run_forward(name, granularity, sets):
    w, notes = load_workload_with_notes(name, sets, None)
    r = simulate(w, load_topology(w.system.topology or "dgx-a100"), notes=notes, granularity=granularity).result
    _check_arrows(chrome_trace(r), _linked(r))


def test_arrows_of_an_inference_run_run_forward():
    model = ModelSpec("small", 4, 1024, 16, 4, 4096, 32000, 2048, gated_mlp=True)
    spec = InferenceSpec(name="small", model=model, gpu=get_gpu("A100"), tp=1, pp=2, batch=2, prompt_tokens=64,
                         generate_tokens=4)
    r = simulate_inference(spec, load_topology("dgx-a100"), granularity="op").result
    _check_arrows(chrome_trace(r), _linked(r))


def test_written_file_has_the_arrows_of_chrome_trace(tmp_path):
    """The bytes written (bulk path, gzip) hold the same arrows and arrival instants."""
    w, notes = load_workload_with_notes("tiny", [], None)
    r = simulate(w, load_topology("dgx-a100"), notes=notes).result
    write_chrome_trace(r, tmp_path / "t.json")
    written = json.loads((tmp_path / "t.json").read_text())
    _check_arrows(written, _linked(r))
    assert written == chrome_trace(r)


def test_rank_files_leave_out_the_arrows_and_their_instants():
    """Written from the merged trace's pieces or parsed from its text (which has the instants)."""
    w, notes = load_workload_with_notes("tiny", [], None)
    r = simulate(w, load_topology("dgx-a100"), notes=notes).result
    assert any(e["ph"] == "i" for e in chrome_trace(r)["traceEvents"])
    for texts in (rank_traces(r), dict(trace_ranks._plain_texts(r, "llmsim", None))):
        for text in texts.values():
            phases = {e["ph"] for e in json.loads(text)["traceEvents"]}
            assert phases.isdisjoint({"s", "f", "i"}) and "X" in phases
