"""``system.network``: a workload's published scale-out fabric, read from its file and put on
the topology it runs on (sim.topology.network)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import sim
from sim.cli import main
from sim.config import load_case_records, load_topology, load_workload, load_workload_with_notes
from sim.errors import ConfigError
from sim.studies.collective import collective
from sim.studies.validate import validate
from sim.topology.build import build_topology
from sim.topology.choice import place_workload
from sim.topology.network import NetworkFabric, NetworkSpec, apply_network
from sim.topology.spec import FabricKind
from sim.types import CollectiveKind
from sim.units import GBIT_PER_S

REPO = Path(sim.__file__).resolve().parent.parent
CASES = sorted((REPO / "workloads" / "validation").glob("*.yaml"))
TWO_NODES = ["system.num_gpus=16", "parallel.tp=8", "parallel.pp=1", "parallel.dp=2",
             "parallel.global_batch_size=4"]
"""tiny on two DGX nodes: TP inside each node, the data-parallel all-reduce across them."""


def _placed(network: str, topology: str | None = None, notes: list[str] | None = None):
    w = load_workload("tiny", TWO_NODES + [f"system.network={network}"])
    return place_workload(w, topology, [] if notes is None else notes)


def _all_reduce_s(topology, ranks: int = 16, size: float = 2**28) -> float:
    return collective(topology, CollectiveKind.ALL_REDUCE, size, ranks).time_s


# --- the validation cases --------------------------------------------------------------------


def test_every_validation_case_states_its_network_and_loads():
    for path in CASES:
        for case in yaml.safe_load(path.read_text()):
            assert "network" in case["system"], (path.name, case["id"])
        for rec in load_case_records(str(path)):
            assert rec.error is None, (rec.id, rec.error)


def test_the_dev_cases_networks_are_read_as_published():
    nets = {rec.id: rec.workload.system.network for path in CASES for rec in load_case_records(str(path))}
    a100 = NetworkSpec(NetworkFabric.INFINIBAND_FAT_TREE, 8, 200 * GBIT_PER_S)
    roce = NetworkSpec(NetworkFabric.ROCE, 8, 400 * GBIT_PER_S)
    assert sum(n == a100 for n in nets.values()) == 36
    assert sum(n == roce for n in nets.values()) == 18
    assert sum(n is None for n in nets.values()) == len(nets) - 54
    assert all(nets[i] == roce for i in nets if i.startswith("torchtitan"))


@pytest.mark.parametrize("preset, network", [
    ("dgx-a100", NetworkSpec(NetworkFabric.INFINIBAND_FAT_TREE, 8, 200 * GBIT_PER_S)),
    ("dgx-h100", NetworkSpec(NetworkFabric.ROCE, 8, 400 * GBIT_PER_S)),
    ("dgx-h100", NetworkSpec()),
])
def test_a_network_equal_to_the_default_system_leaves_the_topology_as_it_is(preset, network):
    topo = load_topology(preset)
    assert apply_network(topo, network).topology == topo


# --- the mapping -----------------------------------------------------------------------------


@pytest.mark.parametrize("network, nics, gbps", [
    ("{nics_per_node: 4}", 4, 200),
    ("{nic_bandwidth_Gbps: 100}", 8, 100),
    ("{node_bandwidth_Gbps: 800}", 8, 100),                       # the total over the topology's NICs
    ("{nics_per_node: 4, node_bandwidth_Gbps: 800}", 4, 200),
    ("{nic_bandwidth_Gbps: 200, node_bandwidth_Gbps: 800}", 4, 200),  # NICs = total / per NIC
])
def test_fewer_or_slower_nics_give_that_scale_out_and_a_slower_all_reduce_across_nodes(network, nics, gbps):
    default = _placed("null").topology
    notes: list[str] = []
    topo = _placed(network, notes=notes).topology
    out = topo.scale_out
    assert (out.nics_per_node, out.nic.bandwidth_bytes_per_s) == (nics, gbps * GBIT_PER_S)
    assert (out.kind, out.nic.efficiency, out.nic.latency_s) == (default.scale_out.kind,
                                                                 default.scale_out.nic.efficiency,
                                                                 default.scale_out.nic.latency_s)
    assert any(n.startswith("system.network: ") and "dgx-a100's scale-out" in n for n in notes)
    assert _all_reduce_s(topo) > 1.25 * _all_reduce_s(default)
    assert _all_reduce_s(topo, ranks=8) == _all_reduce_s(default, ranks=8)  # inside a node: NVLink only


def test_a_slower_network_slows_a_two_node_run_and_the_default_one_changes_nothing():
    from sim.runner import simulate

    def iteration_s(network: str) -> float:
        p = _placed(network)
        return simulate(p.workload, p.topology).result.makespan_s

    base = iteration_s("null")
    assert iteration_s("{nics_per_node: 8, nic_bandwidth_Gbps: 200, fabric: infiniband-fat-tree}") == base
    assert iteration_s("{nic_bandwidth_Gbps: 50}") > base


def test_a_nic_count_the_builders_cannot_attach_keeps_the_node_total():
    notes: list[str] = []
    out = _placed("{nics_per_node: 6, nic_bandwidth_Gbps: 100}", notes=notes).topology.scale_out
    assert (out.nics_per_node, out.nic.bandwidth_bytes_per_s) == (4, 150 * GBIT_PER_S)
    assert any("6 NICs of 100 Gb/s modelled as 4 of 150 Gb/s" in n for n in notes)
    out = _placed("{nics_per_node: 16, nic_bandwidth_Gbps: 100}").topology.scale_out
    assert (out.nics_per_node, out.nic.bandwidth_bytes_per_s) == (8, 200 * GBIT_PER_S)


def test_roce_clos_oversubscription_between_pods_slows_only_cross_pod_flows():
    h100 = load_topology("dgx-h100")
    flat = apply_network(h100, NetworkSpec(NetworkFabric.ROCE_CLOS, pod_gpus=16, between_pods_oversubscription=1))
    pods = apply_network(h100, NetworkSpec(NetworkFabric.ROCE_CLOS, pod_gpus=16, between_pods_oversubscription=4))
    out = pods.topology.scale_out
    assert (out.kind, out.nodes_per_leaf, out.oversubscription) == (FabricKind.FAT_TREE, 2, 4.0)
    assert "4:1 oversubscribed between pods" in pods.note
    for op in (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.ALL_TO_ALL):
        inside = [collective(t.topology, op, 2**30, 16).time_s for t in (flat, pods)]
        across = [collective(t.topology, op, 2**30, 32).time_s for t in (flat, pods)]
        assert inside[0] == inside[1], op
        assert across[1] > 1.5 * across[0], op
    # the links: a pod's uplink carries its NICs' bandwidth over the oversubscription, the NICs all of theirs
    g = build_topology(pods.topology, 32)
    assert g.edges["leaf0.0", "spine"]["bandwidth_bytes_per_s"] == 2 * 8 * 400 * GBIT_PER_S / 4
    assert g.edges["nic0.0", "leaf0.0"]["bandwidth_bytes_per_s"] == 400 * GBIT_PER_S


def test_oversubscription_without_pods_uses_the_topologys_units_and_planes_follow_the_nics():
    r = apply_network(load_topology("dgx-a100"), NetworkSpec(between_pods_oversubscription=2))
    assert (r.topology.scale_out.nodes_per_leaf, r.topology.scale_out.oversubscription) == (20, 2.0)
    assert "pods: the topology's units of 20 nodes" in r.note
    r = apply_network(load_topology("dgx-h100-8plane"), NetworkSpec(nics_per_node=4))
    assert (r.topology.scale_out.nics_per_node, r.topology.scale_out.planes) == (4, 4)
    gather = [collective(t, CollectiveKind.ALL_GATHER, 2**28, 16).time_s
              for t in (load_topology("dgx-h100-8plane"), r.topology)]
    assert gather[1] > 1.5 * gather[0]  # half the NICs: the gather across two nodes is network-bound


def test_omni_path_and_roce_keep_the_link_figures_and_say_so():
    a100 = load_topology("dgx-a100")
    r = apply_network(a100, NetworkSpec(NetworkFabric.OMNI_PATH, 8, 100 * GBIT_PER_S))
    assert r.topology.scale_out.nic.efficiency == a100.scale_out.nic.efficiency
    assert "Omni-Path with the topology's InfiniBand efficiency and latency" in r.note
    assert "RoCE" in apply_network(a100, NetworkSpec(NetworkFabric.ROCE)).note


def test_a_topology_named_on_the_command_line_stands():
    notes: list[str] = []
    topo = _placed("{nics_per_node: 4}", topology="dgx-a100", notes=notes).topology
    assert topo == load_topology("dgx-a100")
    assert any("not applied: --topology dgx-a100 stands" in n for n in notes)


def test_the_workloads_own_topology_takes_the_network():
    topo = _placed("{nics_per_node: 4}").topology  # tiny names system.topology: dgx-a100
    assert topo.name == "dgx-a100" and topo.scale_out.nics_per_node == 4


def test_a_network_on_a_topology_without_a_fat_tree_is_refused():
    with pytest.raises(ConfigError, match="system.network: expected a topology with a leaf-spine fat tree"):
        apply_network(load_topology("torus-3d"), NetworkSpec(nics_per_node=4))


def test_validate_puts_a_case_network_on_its_topology(tmp_path):
    case = yaml.safe_load((REPO / "workloads" / "tiny.yaml").read_text())
    case["system"].update(num_gpus=16)
    case["parallel"].update(tp=8, pp=1, dp=2, global_batch_size=4)
    case["targets"] = {"iteration_time_s": {"value": 0.01}}
    cases = []
    for i, network in enumerate([None, {"nics_per_node": 8, "nic_bandwidth_Gbps": 200, "fabric": "infiniband-fat-tree"},
                                 {"nic_bandwidth_Gbps": 50, "fabric": "roce"}]):
        cases.append({**case, "id": f"c{i}", "system": {**case["system"], "network": network}})
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump(cases))
    rows = validate([str(path)], jobs=1).rows
    assert [r.skipped for r in rows] == [None] * 3
    assert rows[1].predicted == rows[0].predicted
    assert rows[2].predicted > rows[0].predicted


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("network, field", [
    ("{nics_per_node: 0}", "system.network.nics_per_node"),
    ("{nics_per_node: 2.5}", "system.network.nics_per_node"),
    ("{nic_bandwidth_Gbps: -400}", "system.network.nic_bandwidth_Gbps"),
    ("{node_bandwidth_Gbps: 0}", "system.network.node_bandwidth_Gbps"),
    ("{fabric: ethernet}", "system.network.fabric"),
    ("{nics_per_node: 8, nic_bandwidth_Gbps: 400, node_bandwidth_Gbps: 1600}", "system.network.node_bandwidth_Gbps"),
    ("{nic_bandwidth_Gbps: 400, node_bandwidth_Gbps: 1000}", "system.network.node_bandwidth_Gbps"),
    ("{pod_gpus: 12}", "system.network.pod_gpus"),
    ("{between_pods_oversubscription: 0.5}", "system.network.between_pods_oversubscription"),
    # past a topology file's bounds (sim.config.topology): an iteration of hundreds of digits
    ("{nic_bandwidth_Gbps: 1.0e-300}", "system.network.nic_bandwidth_Gbps"),
    ("{node_bandwidth_Gbps: 1.0e+300}", "system.network.node_bandwidth_Gbps"),
    ("{between_pods_oversubscription: 1.0e+9}", "system.network.between_pods_oversubscription"),
    ("{nic_speed: 400}", "system.network.nic_speed"),
    ("400", "system.network"),
])
def test_bad_networks_exit_2_with_one_line_naming_the_field(capsys, network, field):
    status = main(["run", "tiny", "--set", f"system.network={network}"])
    out, err = capsys.readouterr()
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("llmsim: error: ") and "tiny.yaml" in err and f"{field}: expected" in err


def test_a_null_network_is_not_published():
    w, notes = load_workload_with_notes("tiny", ["system.network=null"])
    assert w.system.network is None and not any("network" in n for n in notes)


def test_the_spec_refuses_what_the_loader_refuses():
    with pytest.raises(ConfigError, match="nics_per_node"):
        NetworkSpec(nics_per_node=0)
    with pytest.raises(ConfigError, match="between_pods_oversubscription"):
        NetworkSpec(between_pods_oversubscription=0.9)
    with pytest.raises(ConfigError, match="fabric"):
        NetworkSpec(fabric="roce")


def test_a_workload_of_four_gpu_nodes_runs_on_four_gpu_nodes_of_its_gpus_usual_system():
    """A100 boards of four GPUs (Perlmutter, Polaris, JUWELS Booster): a workload that says
    ``gpus_per_node: 4`` and names no topology runs on the DGX A100 preset built with nodes of
    four (an NVLink domain of four, a NIC per GPU), so TP 8 spans two nodes and its all-reduces
    cross the network; one that names the DGX A100 keeps its nodes of eight, with a note."""
    from sim.output.report import make_report
    from sim.runner import simulate

    tp8 = ["system.num_gpus=8", "parallel.tp=8", "parallel.pp=1", "parallel.dp=1", "parallel.global_batch_size=4"]
    notes: list[str] = []
    four = place_workload(load_workload("tiny", tp8 + ["system.gpus_per_node=4", "system.topology=null"]), None,
                          notes)
    assert (four.topology.gpus_per_node, four.topology.scale_up.domain_size,
            four.topology.scale_out.nics_per_node) == (4, 4, 4)
    assert any(n.startswith("system.gpus_per_node: 4 -> dgx-a100 built with nodes of 4") for n in notes)
    eight = place_workload(load_workload("tiny", tp8 + ["system.topology=null"]), None, [])
    assert eight.topology.gpus_per_node == 8
    # a 256 MiB all-reduce over the 8 ranks: across two nodes' 4 x 200 Gb/s NICs, not one NVSwitch
    assert _all_reduce_s(four.topology, ranks=8) > 1.3 * _all_reduce_s(eight.topology, ranks=8)
    r4, r8 = simulate(four.workload, four.topology), simulate(eight.workload, eight.topology)
    assert make_report(r4).exposed_comm_s["tp"] > make_report(r8).exposed_comm_s["tp"]
    named: list[str] = []
    kept = place_workload(load_workload("tiny", tp8 + ["system.gpus_per_node=4"]), None, named)
    assert kept.topology.gpus_per_node == 8 and any("the topology's is used" in n for n in named)


def test_validate_runs_a_case_on_nodes_of_its_gpus_per_node_as_run_does(tmp_path):
    """``validate`` builds the same 4-GPU nodes as ``run`` (sim.studies.validate._topology):
    a case's prediction is the run's iteration time."""
    from sim.runner import simulate

    doc = yaml.safe_load((REPO / "workloads" / "tiny.yaml").read_text())
    doc["system"] = {"gpu": "A100-SXM4-40GB", "num_gpus": 8, "gpus_per_node": 4}
    doc["parallel"].update(tp=8, pp=1, dp=1, global_batch_size=4)
    doc.update(id="four", targets={"iteration_time_s": {"value": 1.0, "derived": False}})
    path = tmp_path / "four.yaml"
    path.write_text(yaml.safe_dump([doc]))
    row = next(r for r in validate([str(path)], jobs=1).rows if r.metric == "iteration_time_s")
    placed = place_workload(load_workload(str(path)), None, [])
    assert placed.topology.gpus_per_node == 4
    run = simulate(placed.workload, placed.topology)
    assert row.predicted == pytest.approx(run.result.makespan_s, rel=1e-9)
