"""Pipeline schedules: every pass exactly once, in an order that respects dependencies."""

from __future__ import annotations

import pytest

from sim.types import ScheduleKind
from sim.workload.schedules import Pass, pipeline_order


@pytest.mark.parametrize("kind,p,v,m", [
    (ScheduleKind.GPIPE, 4, 1, 8), (ScheduleKind.ONE_F_ONE_B, 4, 1, 8), (ScheduleKind.ONE_F_ONE_B, 4, 1, 2),
    (ScheduleKind.INTERLEAVED, 4, 2, 8), (ScheduleKind.INTERLEAVED, 4, 3, 4), (ScheduleKind.INTERLEAVED, 2, 4, 6),
    (ScheduleKind.ZB_H1, 4, 1, 8), (ScheduleKind.ZB_H1, 4, 1, 2),
])
def test_every_pass_once_and_forward_before_backward(kind, p, v, m):
    passes = [Pass.FORWARD, Pass.BACKWARD] + ([Pass.WEIGHT] if kind is ScheduleKind.ZB_H1 else [])
    for rank in range(p):
        order = pipeline_order(kind, p, v, m, rank)
        assert sorted(order) == sorted((ps, mb, c) for ps in passes for mb in range(m) for c in range(v))
        seen_f, seen_b = set(), set()
        for ps, mb, c in order:
            if ps is Pass.FORWARD:
                seen_f.add((mb, c))
            elif ps is Pass.BACKWARD:
                assert (mb, c) in seen_f, (rank, mb, c)
                seen_b.add((mb, c))
            else:
                assert (mb, c) in seen_b, (rank, mb, c)


def test_1f1b_warmup_depth_is_p_minus_rank_minus_1():
    p, m = 4, 8
    for rank in range(p):
        order = pipeline_order(ScheduleKind.ONE_F_ONE_B, p, 1, m, rank)
        first_b = next(i for i, (ps, _, _) in enumerate(order) if ps is Pass.BACKWARD)
        assert first_b == (p - rank - 1) + 1


def test_interleaved_matches_megatron_chunk_order():
    # Megatron-LM: forward k runs chunk (k mod pv) // p of micro-batch (k // pv) p + k mod p
    order = [x for x in pipeline_order(ScheduleKind.INTERLEAVED, 2, 2, 4, 0) if x[0] is Pass.FORWARD]
    assert [(mb, c) for _, mb, c in order] == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1)]


def test_tp_comm_overlap_hides_tensor_parallel_communication():
    """Megatron-LM --tp-comm-overlap: the GEMMs no longer wait for whole all-gathers and
    reduce-scatters, so exposed TP time and the iteration shrink. The GEMMs themselves take
    longer, as Transformer Engine's defaults run them: beside a ring exchange one chunk per TP
    rank, the pipelined ones in 4 chunks, the bulk and pipelined ones on the 116 SMs their
    communicators leave (where the NCCL collectives beside the backward's GEMMs took 24 SMs
    while they ran); on a GPU of unknown SM count only the chunks remain, and the bandwidth-bound
    kernels take as long."""
    import dataclasses

    from sim.config import load_topology
    from sim.output.report import make_report
    from sim.runner import simulate
    from tests.conftest import make_workload

    w = make_workload(tp=8, pp=1, dp=1, gbs=4, layers=4, hidden=4096, heads=32, seq=2048, sp=True,
                      gpu="H100-SXM5-80GB")
    on = dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, tp_comm_overlap=True))
    a, b = (make_report(simulate(x, load_topology("dgx-h100"))) for x in (w, on))
    assert b.exposed_comm_s["tp"] < 0.8 * a.exposed_comm_s["tp"]
    assert b.iteration_time_s < a.iteration_time_s
    assert b.compute_s["gemm"] > a.compute_s["gemm"]
    no_sms = [dataclasses.replace(x, system=dataclasses.replace(x.system, gpu=dataclasses.replace(
        x.system.gpu, sm_count=0))) for x in (w, on)]
    a, b = (make_report(simulate(x, load_topology("dgx-h100"))) for x in no_sms)
    assert b.compute_s["gemm"] > a.compute_s["gemm"]
    clocked = ("gemm", "attention", "total")   # the clock under the power limit follows the GEMMs
    assert {k: v for k, v in b.compute_s.items() if k not in clocked} == pytest.approx(
        {k: v for k, v in a.compute_s.items() if k not in clocked})


def test_tp_comm_overlap_needs_sequence_parallelism():
    from sim.errors import ConfigError
    from sim.workload.spec import ParallelSpec

    with pytest.raises(ConfigError) as info:
        ParallelSpec(tp=2, tp_comm_overlap=True)
    assert info.value.field == "parallel.sequence_parallel"


def test_overlap_param_gather_moves_the_weight_gather_into_the_forward():
    import dataclasses

    from sim.config import load_topology
    from sim.runner import simulate
    from sim.types import Stream
    from tests.conftest import make_workload

    w = make_workload(tp=1, pp=1, dp=16, gbs=32, layers=8, hidden=4096, heads=32, seq=2048, dist_opt=True,
                      gpu="H100-SXM5-80GB")
    on = dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, overlap_param_gather=True))
    runs = [simulate(x, load_topology("dgx-h100")) for x in (w, on)]
    names = [{s.name for s in r.result.spans if s.stream in (Stream.DP_COMM, Stream.DP_GATHER)} for r in runs]
    assert "ncclAllGather params" in names[0] and "ncclAllGather params" not in names[1]
    gathers = [s for s in runs[1].result.spans if s.stream is Stream.DP_GATHER]
    assert len(gathers) == 8  # one per layer, before the first forward
    assert runs[1].result.makespan_s < runs[0].result.makespan_s


def test_case_launch_flags_set_the_overlaps(tmp_path):
    from sim.config.workload import load_case_records

    rec = next(r for r in load_case_records("workloads/validation/megatronlm.yaml")
               if r.id == "megatronlm_readme_h100_32B")
    p = rec.workload.parallel
    assert p.tp_comm_overlap and p.sequence_parallel and p.overlap_param_gather and p.distributed_optimizer
    assert any("--tp-comm-overlap" in n for n in rec.notes)
