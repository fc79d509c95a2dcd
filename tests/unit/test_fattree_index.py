"""A fat tree read from its structure (sim/topology/fattree_index.py) against the built graph.

Small instances of every fat-tree preset and of the shapes the index covers (plain fat trees in
planes, fewer or more NICs than GPUs, NVSwitch domains smaller or larger than a server, a
partial last domain and scalable unit, oversubscription, a PCIe link): every link's id, name,
kind, latency, efficiency, hop weight and capacity are the graph's, and so are the routes, the
GPUs each link's routes can come from and the latency bounds. Specs the index does not cover
are built as graphs.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools

import pytest

from sim.config import load_topology
from sim.topology.build import build_topology
from sim.topology.fattree_index import FatTreeIndex, str_rank
from sim.topology.routing import Fabric
from sim.topology.spec import FabricKind, LinkFault, LinkSpec


def test_str_rank_counts_what_sorting_the_strings_gives():
    for n in [*range(0, 130), 999, 1000, 1001, 12544, 100352]:
        keys = sorted(str(y) for y in range(n))
        for x in (range(n + 3) if n < 130 else [0, 1, 9, 10, 99, 100, 101, 999, 1000, n // 3, n - 1, n, 7 * n]):
            assert str_rank(x, n) == bisect.bisect_left(keys, str(x)), (x, n)


def _variant(name, npl, **changes):
    spec = load_topology(name)
    up = {k[3:]: v for k, v in changes.items() if k.startswith("up_")}
    out = {k: v for k, v in changes.items() if not k.startswith("up_")}
    return dataclasses.replace(spec, scale_up=dataclasses.replace(spec.scale_up, **up),
                               scale_out=dataclasses.replace(spec.scale_out, nodes_per_leaf=npl, **out))


VARIANTS = {
    "dgx-h100": (_variant("dgx-h100", 2), 96),
    "dgx-h100 units of 3": (_variant("dgx-h100", 3, switch_latency_s=1e-6), 88),  # a partial last unit
    "dgx-h100-8plane": (_variant("dgx-h100-8plane", 2), 40),
    "dgx-a100 one node a unit": (_variant("dgx-a100", 1, oversubscription=2.0), 96),
    "dgx-b200": (_variant("dgx-b200", 3), 40),
    "gb200-nvl72": (_variant("gb200-nvl72", 5), 108),  # a partial last domain
    "plain fat tree, 2 planes": (_variant("dgx-h100", 3, kind=FabricKind.FAT_TREE, planes=2), 88),
    "2 NICs a server, PCIe": (_variant("dgx-h100", 3, nics_per_node=2, pcie=LinkSpec(64e9, 1e-6)), 88),
    "4 NICs in 2 planes": (_variant("dgx-h100", 2, nics_per_node=4, planes=2), 40),
    "16 NICs a server": (_variant("dgx-h100", 2, nics_per_node=16), 40),
    "domains of 4 GPUs": (_variant("dgx-h100", 3, up_domain_size=4, nics_per_node=2), 88),
    "domains of 2 servers": (_variant("dgx-h100", 3, up_domain_size=16), 88),
}


def _edge_id(x: FatTreeIndex, u: str, v: str) -> int:
    """The index's id for the graph's edge ``u -> v``."""
    def nums(s, prefix):
        return tuple(int(p) for p in s[len(prefix):].split("."))
    if u.startswith("gpu"):
        return x.gpu_to_nic(nums(u, "gpu")[0]) if v.startswith("nic") else x.gpu_to_nvs(nums(u, "gpu")[0])
    if u.startswith("nvs"):
        return x.nvs_to_gpu(nums(v, "gpu")[0])
    if u.startswith("nic"):
        return x.nic_to_gpu(nums(v, "gpu")[0]) if v.startswith("gpu") else x.nic_to_leaf(*nums(u, "nic"))
    if u.startswith("leaf"):
        return x.leaf_to_nic(*nums(v, "nic")) if v.startswith("nic") else x.leaf_to_spine(*nums(u, "leaf"))
    return x.spine_to_leaf(*nums(v, "leaf"))


@pytest.mark.parametrize("case", list(VARIANTS))
def test_every_link_is_the_built_graphs(case):
    spec, n = VARIANTS[case]
    g = build_topology(spec, n)
    x = FatTreeIndex.of(spec, n)
    assert x is not None and x.num_links == g.number_of_edges()
    cap = [0.0] * x.num_links
    for u, v, d in g.edges(data=True):
        lid = _edge_id(x, u, v)
        assert lid == d["link_id"], (u, v)
        _, kind, latency, eff, weight = x.info[lid]
        assert (x.link_name(lid), kind, latency, eff, weight) == \
               (f"{u}->{v}", d["link"], d["latency_s"], d["efficiency"], d["hop_weight"])
        cap[lid] = d["bandwidth_bytes_per_s"]
    assert x.capacities() == cap


@pytest.mark.parametrize("case", list(VARIANTS))
def test_fabric_from_the_structure_routes_as_the_graph(case):
    spec, n = VARIANTS[case]
    fast, built = Fabric.of(spec, n), Fabric(build_topology(spec, n))
    assert fast._index is not None and fast._graph is None
    bounds = fast.latency_bounds_s()
    assert bounds == built.latency_bounds_s()
    gpus = sorted(set(range(0, n, 3)) | {1, 2, n - 1})
    for s, t in itertools.permutations(gpus, 2):
        route = fast.route(s, t)
        assert route == built.route(s, t)
        assert route.latency_s <= bounds[0]
        if built.same_domain((s, t)):
            assert route.latency_s <= bounds[1]
        for link in route.links:
            near = fast._fat_tree.endpoints(link)
            assert near == built._fat_tree.endpoints(link) and (s in near or t in near)
    assert fast._graph is None  # nothing so far needed the graph
    assert list(fast.link_names) == list(built.link_names)  # links no route used: from the graph
    assert list(fast.link_kinds) == list(built.link_kinds)
    assert [(fast.node_of(r), fast.local_gpu(r), fast.domain_key(r)) for r in range(n)] == \
           [(built.node_of(r), built.local_gpu(r), built.domain_key(r)) for r in range(n)]
    assert list(fast.domain_keys(range(n))) == [built.domain_key(r) for r in range(n)]


def test_a_placement_maps_ranks_as_the_graph_fabric_does():
    spec, n = VARIANTS["dgx-h100 units of 3"]
    placement = [(r * 37) % n for r in range(n)]
    fast, built = Fabric.of(spec, n, placement), Fabric(build_topology(spec, n), placement)
    for s, t in [(0, 1), (5, 60), (87, 3), (40, 41)]:
        assert fast.route(s, t) == built.route(s, t)
    links = fast.route(5, 60).links
    assert fast.near_ranks(links) == built.near_ranks(links)
    assert {5, 60} <= fast.near_ranks(links)


@pytest.mark.parametrize("spec,n", [
    (load_topology("torus-3d"), 16),
    (load_topology("dragonfly"), 32),
    (dataclasses.replace(VARIANTS["dgx-h100"][0], faults=(LinkFault("nic0.0", "leaf0.0", 0.5),)), 32),
    (VARIANTS["dgx-h100"][0], 8),  # one NVSwitch domain: no fabric
    (_variant("dgx-h100", 2, up_domain_size=2, nics_per_node=2), 32),  # a NIC serving two domains
], ids=["torus", "dragonfly", "failed link", "one domain", "NIC across domains"])
def test_other_fabrics_are_built_as_graphs(spec, n):
    assert FatTreeIndex.of(spec, n) is None
    fab = Fabric.of(spec, n)
    assert fab._index is None and fab.graph.number_of_edges() == len(fab.capacity_bytes_per_s)
    if fab._fat_tree is None:
        assert fab.near_ranks(fab.route(0, n - 1).links) is None and fab.latency_bounds_s() is None
