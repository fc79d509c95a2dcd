"""The iteration time from shorter runs of a job's steady state (:mod:`sim.steady`) against the
whole iteration's run, and the line test that decides when it is used."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

import sim.steady as steady
from sim.config import default_topology_name, load_topology, load_workload
from sim.runner import simulate
from sim.steady import MIN_SAVING, steady_iteration, steady_points, with_microbatches
from sim.types import RecomputeKind, ScheduleKind
from tests.conftest import make_workload

SI, ZB, GP = ScheduleKind.INTERLEAVED, ScheduleKind.ZB_H1, ScheduleKind.GPIPE
CASES = {   # every schedule and the traffic that runs beside the passes (M micro-batches each)
    "1f1b-tp-dp": dict(tp=2, pp=2, dp=2, gbs=2 * 24),
    "interleaved": dict(tp=2, pp=4, gbs=48, layers=8, vps=2, schedule=SI),
    "gpipe-full-recompute": dict(tp=2, pp=2, gbs=24, schedule=GP, recompute=RecomputeKind.FULL),
    "zb-h1": dict(tp=2, pp=2, gbs=24, sp=True, schedule=ZB),
    "no-pipeline-dp": dict(tp=2, dp=4, gbs=4 * 24),
    "context-parallel": dict(tp=2, dp=2, cp=2, gbs=2 * 24, seq=1024),
    "zero3-fsdp": dict(tp=2, pp=2, dp=2, gbs=2 * 24, sp=True, zero=3),
    "distributed-optimizer": dict(tp=2, pp=2, dp=2, gbs=2 * 24, dist_opt=True),
    "moe-ep": dict(pp=2, dp=4, gbs=4 * 24, experts=8, ep=4),
}


@pytest.mark.parametrize("gpu", ["A100-SXM4-80GB", "H100-SXM5-80GB"], ids=["a100", "h100-power-limited"])
@pytest.mark.parametrize("case", list(CASES))
def test_steady_state_gives_the_whole_runs_iteration_time(case, gpu):
    w = make_workload(gpu=gpu, **CASES[case])
    topo = load_topology("dgx-h100" if gpu.startswith("H100") else "dgx-a100")
    est = steady_iteration(w, topo)
    if est is None:
        # refused only where the whole runs at those counts are off one line: GPipe's forward
        # sends share the NVLink of H100 with the TP all-reduces at a phase that drifts from
        # one micro-batch to the next
        assert (case, gpu) == ("gpipe-full-recompute", "H100-SXM5-80GB")
        m1, period = steady_points(w)
        t = [simulate(with_microbatches(w, m1 + k * period), topo).result.makespan_s for k in range(4)]
        assert abs((t[2] - t[1]) - (t[1] - t[0])) > 1e-6 * t[2]
        assert abs((t[3] - t[2]) - (t[2] - t[1])) > 1e-6 * t[3]
        return
    whole = simulate(w, topo)
    assert est.iteration_time_s == pytest.approx(whole.result.makespan_s, rel=1e-9)
    # the shorter runs simulate fewer micro-batches, at the whole iteration's clock
    assert max(est.microbatches) * MIN_SAVING <= w.parallel.num_microbatches
    assert all(r.clock_hz == whole.clock_hz for r in est.runs)
    m1, period = steady_points(w)
    assert est.microbatches == tuple(m1 + k * period for k in range(len(est.runs)))


def test_steady_state_at_chunk_granularity_and_on_a_preset():
    w = load_workload("llama3-70b")
    w = with_microbatches(w, 12 * max(2, w.parallel.pp))
    topo = load_topology(w.system.topology or default_topology_name(w.system.gpu.name))
    est = steady_iteration(w, topo, granularity="chunk", exact=True)
    whole = simulate(w, topo)
    assert est.iteration_time_s == pytest.approx(whole.result.makespan_s, rel=1e-9)


def test_a_short_job_is_simulated_whole():
    w = make_workload(tp=2, pp=4, gbs=16, layers=8, vps=2, schedule=SI)   # runs of 4, 8, 12 against 16
    assert steady_points(w) is None
    assert steady_iteration(w, load_topology("dgx-a100")) is None
    # the period: pp micro-batches under the interleaved schedule, one under the others
    assert steady_points(make_workload(tp=2, pp=4, gbs=64, layers=8, vps=2, schedule=SI)) == (4, 4)
    assert steady_points(make_workload(tp=2, pp=4, gbs=64)) == (4, 1)
    assert steady_points(make_workload(tp=2, pp=4, gbs=64, schedule=ZB)) == (4, 1)
    assert steady_points(make_workload(tp=2, dp=2, gbs=64)) == (2, 1)


def _fake(times: dict[int, float]):
    """A ``simulate`` whose iteration time is ``times[micro-batches]``."""
    def simulate(w, topo, **kw):
        m = w.parallel.num_microbatches
        return SimpleNamespace(result=SimpleNamespace(makespan_s=times[m]), coarse_divergence=None,
                               clock_hz=None, workload=w, granularity="op")
    return simulate


def test_times_off_one_line_fall_back_to_the_whole_run(monkeypatch):
    w = make_workload(tp=2, pp=2, gbs=40)     # 40 micro-batches: runs of 2, 3, 4, 5
    # a warm-up that ends after the first run: the last three are on one line
    monkeypatch.setattr(steady, "simulate", _fake({2: 1.0, 3: 2.5, 4: 3.5, 5: 4.5}))
    est = steady_iteration(w, None)
    assert est.microbatches == (2, 3, 4, 5)
    assert est.iteration_time_s == pytest.approx(4.5 + 1.0 * (40 - 5))
    # never periodic: no estimate
    monkeypatch.setattr(steady, "simulate", _fake({2: 1.0, 3: 2.5, 4: 3.5, 5: 4.6}))
    assert steady_iteration(w, None) is None
    # periodic from the first run: three runs are enough
    monkeypatch.setattr(steady, "simulate", _fake({2: 1.0, 3: 2.0, 4: 3.0}))
    assert steady_iteration(w, None).iteration_time_s == pytest.approx(39.0)   # T(m) = m - 1


def test_a_placement_no_rank_order_gives_is_simulated_whole():
    w = make_workload(tp=2, pp=2, dp=2, gbs=2 * 24)
    assert steady_points(w) is not None
    gpus = list(range(8))
    gpus[1], gpus[2] = 2, 1   # a TP pair split across another pair: every rank is simulated
    w = dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, placement=tuple(gpus)))
    assert steady.placed_unlike_an_order(w)
    assert steady_iteration(w, load_topology("dgx-a100")) is None
