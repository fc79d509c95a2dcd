"""Topology builders and routing: what the graph holds and where traffic goes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import networkx as nx
import pytest

import sim
from sim.cli import main
from sim.config import load_topology
from sim.errors import ConfigError
from sim.topology.build import build_topology
from sim.topology.routing import Fabric


def _kinds(g):
    out = {}
    for _, d in g.nodes(data=True):
        out[d["kind"]] = out.get(d["kind"], 0) + 1
    return out


def test_dgx_a100_is_sized_from_the_workload():
    g = build_topology(load_topology("dgx-a100"), 64)
    k = _kinds(g)
    assert k["gpu"] == 64 and k["nvswitch"] == 8 and k["nic"] == 64 and k["leaf"] == 8
    assert nx.is_strongly_connected(g)
    assert sorted({d["link_id"] for *_, d in g.edges(data=True)}) == list(range(g.number_of_edges()))


def test_traffic_stays_on_nvlink_in_a_node_and_uses_the_own_nic_across_nodes():
    fab = Fabric(build_topology(load_topology("dgx-a100"), 16))
    inside = fab.route(0, 5)
    assert [fab.link_kinds[link] for link in inside.links] == ["nvlink", "nvlink"]
    assert inside.bottleneck_bytes_per_s == pytest.approx(300e9)
    across = fab.route(3, 11)  # same rail: one leaf hop
    names = [fab.link_names[link] for link in across.links]
    assert names[0] == "gpu3->nic0.3" and names[-1] == "nic1.3->gpu11"
    assert across.bottleneck_bytes_per_s == pytest.approx(200e9 / 8)


def test_nvl72_puts_72_gpus_in_one_nvlink_domain():
    fab = Fabric(build_topology(load_topology("gb200-nvl72"), 144))
    assert fab.same_domain(tuple(range(72)))
    assert not fab.same_domain((0, 72))
    assert fab.node_of(5) == 1  # four GPUs per compute tray


def test_a_topology_that_fixes_its_size_rejects_another_gpu_count(tmp_path, capsys):
    topo = dataclasses.replace(load_topology("dgx-a100"), num_gpus=16)
    with pytest.raises(ConfigError, match="num_gpus"):
        build_topology(topo, 8)
    preset = Path(sim.__file__).resolve().parent.parent / "topologies" / "dgx-a100.yaml"
    assert "num_gpus: null" in preset.read_text()
    path = tmp_path / "fixed.yaml"
    path.write_text(preset.read_text().replace("num_gpus: null", "num_gpus: 16"))
    assert main(["run", "tiny", "--topology", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "num_gpus" in err[0]
