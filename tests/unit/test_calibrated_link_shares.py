"""A calibration's ``comm_efficiency`` scales every link's capacity: the engine runs at it, the
planner picks NCCL's algorithm and protocol at it, and the report's busiest-link shares and the
trace's link-utilization counters are fractions of it (issue #33)."""

from __future__ import annotations

import pytest

from sim.config import load_topology, load_workload
from sim.costs.factors import CalibrationFactors
from sim.output.report import make_report
from sim.runner import simulate


@pytest.mark.parametrize("comm_efficiency", [0.5, 2.0])
def test_link_shares_are_of_the_calibrated_capacity(comm_efficiency):
    w, topo = load_workload("tiny"), load_topology("dgx-a100")
    run = simulate(w, topo, factors=CalibrationFactors(comm_efficiency=comm_efficiency), link_counters=2)
    rep = make_report(run)
    assert rep.busiest_links
    plain = simulate(w, topo).fabric
    index = {name: i for i, name in enumerate(plain.link_names)}
    for link in rep.busiest_links:
        cap = plain.capacity_bytes_per_s[index[link["link"]]] * comm_efficiency
        assert link["utilization"] == pytest.approx(link["busy_bytes"] / (cap * rep.iteration_time_s), rel=1e-9)
    assert run.fabric.capacity_bytes_per_s == [c * comm_efficiency for c in plain.capacity_bytes_per_s]
    # the trace's counters: no link carries more than its calibrated capacity
    peaks = [c.value for c in run.result.counters if c.name.startswith("link ")]
    assert peaks and max(peaks) <= 1.0 + 1e-9 and max(peaks) > 0.5


def test_an_uncalibrated_run_and_a_factor_of_one_keep_the_cached_fabric():
    w, topo = load_workload("tiny"), load_topology("dgx-a100")
    assert simulate(w, topo).fabric is simulate(w, topo, factors=CalibrationFactors(compute_efficiency=0.9)).fabric


@pytest.mark.parametrize("scale", [0.25, 0.5, 2.0])
def test_the_planner_weighs_algorithms_at_the_calibrated_bandwidth(scale):
    """NCCL's tuner weighs latency against bandwidth (the algorithm, and the protocol of a ring
    across nodes), so a calibration that scales every link moves the sizes where they cross: on
    the calibrated fabric, AUTO picks at every size what it picks on the same topology with
    every bandwidth scaled, at the same estimated time."""
    from sim.costs.comm import estimate_s, plan_comm
    from sim.topology.routing import Fabric
    from sim.types import CollectiveKind, CommClass
    from sim.workload.ops import CommOp

    moved = 0
    for name, n in (("dgx-a100", 16), ("dgx-h100", 16), ("dgx-h100", 8)):
        topo = load_topology(name)
        up_GBps = topo.scale_up.link.bandwidth_bytes_per_s / 1e9 * scale
        nic_Gbps = topo.scale_out.nic.bandwidth_bytes_per_s * 8 / 1e9 * scale
        scaled = load_topology(name, [f"scale_up.bandwidth_GBps={up_GBps}", f"scale_out.nic_bandwidth_Gbps={nic_Gbps}"])
        fabric = Fabric.of(topo, n)
        factors = CalibrationFactors(comm_efficiency=scale)
        calibrated = fabric.with_capacities(factors.capacities(fabric.capacity_bytes_per_s))
        reference = Fabric.of(scaled, n)
        for e in range(10, 34):
            op = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, tuple(range(n)), float(2**e))
            got, want = plan_comm(calibrated, op, False), plan_comm(reference, op, False)
            assert got.algorithm == want.algorithm, (name, n, e)
            assert estimate_s(calibrated, got) == pytest.approx(estimate_s(reference, want), rel=1e-9), (name, n, e)
            moved += got.algorithm != plan_comm(fabric, op, False).algorithm
    assert moved  # the choice does move somewhere (e.g. tree -> rings at 16-128 MiB on two A100 nodes at 0.25)
