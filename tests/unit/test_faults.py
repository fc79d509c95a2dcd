"""Degraded and failed links: what they cost, and that traffic is rerouted."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim
from sim.config import load_topology
from sim.errors import ConfigError
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.collective import collective
from sim.types import CollectiveKind
from tests.conftest import make_workload

PRESET = (Path(sim.__file__).resolve().parent.parent / "topologies" / "dgx-h100.yaml").read_text()


def _faulty(tmp_path, faults: str, name="faulty"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(PRESET.replace("name: dgx-h100", f"name: {name}") + f"faults:\n{faults}")
    return load_topology(str(path))


def test_a_nic_at_half_speed_slows_a_cross_node_ring_by_its_share(tmp_path):
    healthy = load_topology("dgx-h100")
    slow = _faulty(tmp_path, "  - {between: [nic0.0, leaf0.0], bandwidth_fraction: 0.5}\n")
    a = collective(healthy, CollectiveKind.ALL_REDUCE, 2**30, 16, algorithm="ring")
    b = collective(slow, CollectiveKind.ALL_REDUCE, 2**30, 16, algorithm="ring")
    # one ring over both nodes crosses through nic0.0 (gpu0 <- gpu15): its bottleneck halves
    assert b.time_s == pytest.approx(2 * a.time_s, rel=0.02)


def test_a_failed_nvlink_port_reroutes_through_the_nic(tmp_path):
    broken = _faulty(tmp_path, "  - {between: [gpu1, nvs0], bandwidth_fraction: 0}\n")
    w = make_workload(tp=8, pp=1, dp=2, gbs=4, layers=2, gpu="H100-SXM5-80GB", sp=True)
    ok = make_report(simulate(w, load_topology("dgx-h100"), full=True))
    bad = make_report(simulate(w, broken, full=True))
    assert bad.iteration_time_s > ok.iteration_time_s
    assert bad.exposed_comm_s["tp"] > ok.exposed_comm_s["tp"]


@pytest.mark.parametrize("gpu", ["gpu0", "gpu3", "gpu6"])
def test_a_fault_costs_the_same_wherever_the_symmetric_job_meets_it(gpu, tmp_path):
    """A slow port on any GPU of a symmetric job costs the same; the default run, where one rank
    per stage stood for the others, missed a fault that rank's traffic did not cross."""
    topo = _faulty(tmp_path, f"  - {{between: [{gpu}, nvs0], bandwidth_fraction: 0.25}}\n")
    w = make_workload(tp=2, pp=2, dp=2, gbs=4, layers=4, gpu="H100-SXM5-80GB", sp=True)
    healthy = make_report(simulate(w, load_topology("dgx-h100"))).iteration_time_s
    run = simulate(w, topo)
    full = make_report(simulate(w, topo, full=True)).iteration_time_s
    assert make_report(run).iteration_time_s == full > healthy
    assert any(n.startswith("topology faults: ") for n in run.notes)


def test_faults_that_cut_a_gpu_off_or_name_no_link_are_clear_errors(tmp_path):
    cut = _faulty(tmp_path, "  - {between: [gpu1, nvs0], bandwidth_fraction: 0}\n"
                  "  - {between: [gpu1, nic0.1], bandwidth_fraction: 0}\n", "cut")
    with pytest.raises(ConfigError, match="reachable"):
        collective(cut, CollectiveKind.ALL_REDUCE, 1e6, 16)
    nolink = _faulty(tmp_path, "  - {between: [gpu1, spine], bandwidth_fraction: 0.5}\n", "nolink")
    with pytest.raises(ConfigError) as info:
        collective(nolink, CollectiveKind.ALL_REDUCE, 1e6, 16)
    assert info.value.field == "faults[0].between"
    with pytest.raises(ConfigError) as info:
        _faulty(tmp_path, "  - {between: [gpu1, nvs0], bandwidth_fraction: 1.5}\n", "frac")
    assert info.value.field == "faults[0].bandwidth_fraction"


@pytest.mark.parametrize("rank", [0, 5])
def test_a_straggler_gpu_slows_the_iteration_and_the_representative_run_agrees(rank):
    """A GPU computing 1.3x slower holds its TP group every layer and its data-parallel peers
    at the gradient reduction; simulating the stage's representative slow in its place gives
    the full run's iteration time."""
    w = make_workload(tp=2, pp=2, dp=2, gbs=8, layers=4)
    topo = load_topology("dgx-a100")
    base = make_report(simulate(w, topo)).iteration_time_s
    rep = make_report(simulate(w, topo, slow_gpus={rank: 1.3}))
    full = make_report(simulate(w, topo, full=True, slow_gpus={rank: 1.3}))
    assert rep.iteration_time_s > base
    assert rep.iteration_time_s == pytest.approx(full.iteration_time_s, rel=0.02)
    assert any(f"GPU {rank} computes 1.3x slower" in n for n in full.notes)


def test_bad_straggler_is_a_clear_error():
    w = make_workload(tp=2, pp=2, dp=2, gbs=8, layers=4)
    with pytest.raises(ConfigError, match="0..7"):
        simulate(w, load_topology("dgx-a100"), slow_gpus={8: 1.2})
    with pytest.raises(ConfigError, match=">= 1"):
        simulate(w, load_topology("dgx-a100"), slow_gpus={1: 0.5})
