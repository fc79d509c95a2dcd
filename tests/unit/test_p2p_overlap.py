"""Pipeline receives under the interleaved schedule: Megatron-Core posts the receive of the next
pass's input as soon as the current pass of the same direction ends, so the transfer runs while
the pass of the other direction in between computes (``overlap_p2p_comm``)."""

from __future__ import annotations

from sim.config import load_topology
from sim.runner import simulate
from sim.types import ScheduleKind, Stream
from tests.conftest import make_workload


def _spans(schedule: ScheduleKind, vps: int):
    w = make_workload(layers=8, pp=2, vps=vps, schedule=schedule, gbs=8, hidden=2048, heads=16, seq=2048)
    run = simulate(w, load_topology("dgx-a100"))
    rank = run.result.ranks[1].rank  # stage 1: receives activations from stage 0
    return [s for s in run.result.spans if s.rank == rank]


def _steady_receives(spans, kind: str):
    """(transfer start, end of the last compute op before the pass that waits for it) for each
    receive of ``kind`` ("act" or "grad") whose pass follows a pass of the other direction."""
    compute = sorted((s for s in spans if s.stream is Stream.COMPUTE), key=lambda s: s.start_s)
    phase = "fwd" if kind == "act" else "bwd"
    other = "bwd" if kind == "act" else "fwd"
    out = []
    for r in spans:
        if r.name != f"ncclRecv {kind}":
            continue
        a = dict(r.args)
        key = (phase, a["microbatch"], a["chunk"])
        first = next(i for i, c in enumerate(compute)
                     if (dict(c.args).get("phase"), dict(c.args).get("microbatch"), dict(c.args).get("chunk")) == key)
        before = compute[first - 1] if first else None
        if before is not None and dict(before.args).get("phase") == other:
            out.append((r.start_s, before.end_s))
    return out


def test_interleaved_receives_overlap_the_pass_in_between():
    spans = _spans(ScheduleKind.INTERLEAVED, 2)
    for kind in ("act", "grad"):
        pairs = _steady_receives(spans, kind)
        assert pairs, kind
        # the transfer starts before the other direction's pass in between has finished
        assert all(start < end for start, end in pairs), (kind, pairs)


def test_1f1b_receives_wait_for_the_pass_before():
    """Megatron-Core's non-interleaved 1F1B communicates blocking (``send_forward_recv_backward``
    and ``send_backward_recv_forward`` wait before the next pass): the receive starts after the
    compute before it."""
    spans = _spans(ScheduleKind.ONE_F_ONE_B, 1)
    pairs = _steady_receives(spans, "act")
    assert pairs
    assert all(start >= end for start, end in pairs), pairs
