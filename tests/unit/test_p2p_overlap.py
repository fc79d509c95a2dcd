"""Pipeline receives under the interleaved schedule: Megatron-Core posts the receive of the next
pass's input as soon as the current pass of the same direction ends, so the transfer runs while
the pass of the other direction in between computes (``overlap_p2p_comm``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

import sim
from sim.config import load_topology, load_workload_with_notes
from sim.runner import simulate
from sim.types import ScheduleKind, Stream
from tests.conftest import make_workload

REPO = Path(sim.__file__).resolve().parent.parent


def _spans(schedule: ScheduleKind, vps: int, overlap: bool = True):
    w = make_workload(layers=8, pp=2, vps=vps, schedule=schedule, gbs=8, hidden=2048, heads=16, seq=2048)
    w = dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, overlap_p2p_comm=overlap))
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


def test_interleaved_without_overlap_p2p_comm_waits_like_1f1b():
    """Off (Megatron-LM before Megatron-Core, torchtitan, ``--no-overlap-p2p-communication``):
    each receive starts after the compute before it, as in 1F1B."""
    spans = _spans(ScheduleKind.INTERLEAVED, 2, overlap=False)
    for kind in ("act", "grad"):
        pairs = _steady_receives(spans, kind)
        assert pairs and all(start >= end for start, end in pairs), (kind, pairs)


def _tiny_with(tmp_path, framework: str | None, vps: int):
    raw = yaml.safe_load((REPO / "workloads" / "tiny.yaml").read_text())
    raw["framework"] = framework
    raw["parallel"].update(virtual_pipeline_stages=vps, schedule=None)
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_workload_with_notes(str(path))


@pytest.mark.parametrize("framework, expected", [
    ("Megatron-LM (2022)", False), ("Megatron-LM (2021)", False), ("torchtitan (2024-12)", False),
    ("Megatron-Core 0.9 (2024)", True), ("NeMo 24.07", True), (None, True)])
def test_the_framework_decides_a_null_overlap_p2p_comm(tmp_path, framework, expected):
    w, notes = _tiny_with(tmp_path, framework, 2)
    assert w.parallel.schedule is ScheduleKind.INTERLEAVED
    assert w.parallel.overlap_p2p_comm is expected
    assert any(n.startswith("parallel.overlap_p2p_comm: null -> false") for n in notes) is (not expected)


def test_a_1f1b_workload_gets_no_note(tmp_path):
    w, notes = _tiny_with(tmp_path, "Megatron-LM (2022)", 1)
    assert w.parallel.schedule is ScheduleKind.ONE_F_ONE_B
    assert not any("overlap_p2p_comm" in n for n in notes)


def test_megatron_launch_can_turn_it_off():
    args = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
            "--global-batch-size 8 --vocab-size 32000 --bf16 --pipeline-model-parallel-size 2 "
            "--num-layers-per-virtual-pipeline-stage 2 --no-overlap-p2p-communication")
    from sim.config.megatron_args import load_megatron_workload

    on, _ = load_megatron_workload(args.replace(" --no-overlap-p2p-communication", ""), gpu="H100-SXM5-80GB")
    off, _ = load_megatron_workload(args, gpu="H100-SXM5-80GB")
    assert on.parallel.overlap_p2p_comm and not off.parallel.overlap_p2p_comm
