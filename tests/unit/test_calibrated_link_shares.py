"""A calibration's ``comm_efficiency`` scales every link's capacity; the report's busiest-link
shares and the trace's link-utilization counters are fractions of the capacities the engine
ran with, not of the fabric's uncalibrated ones (issue #33)."""

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
    index = {name: i for i, name in enumerate(run.fabric.link_names)}
    for link in rep.busiest_links:
        cap = run.fabric.capacity_bytes_per_s[index[link["link"]]] * comm_efficiency
        assert link["utilization"] == pytest.approx(link["busy_bytes"] / (cap * rep.iteration_time_s), rel=1e-9)
    assert run.capacities == [c * comm_efficiency for c in run.fabric.capacity_bytes_per_s]
    # the trace's counters: no link carries more than its calibrated capacity
    peaks = [c.value for c in run.result.counters if c.name.startswith("link ")]
    assert peaks and max(peaks) <= 1.0 + 1e-9 and max(peaks) > 0.5


def test_an_uncalibrated_run_reports_shares_of_the_fabric():
    run = simulate(load_workload("tiny"), load_topology("dgx-a100"))
    assert run.link_capacity_bytes_per_s is None and run.capacities is run.fabric.capacity_bytes_per_s
