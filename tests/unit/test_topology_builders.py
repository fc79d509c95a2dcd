"""Scale-out builders: multi-plane fat trees, tori and dragonflies (issue #6).

Closed-form node and edge counts for small sizes, reachability, hop counts against the
topologies' distances, plane isolation, collectives over each fabric, the YAML keys' errors,
and the presets through ``llmsim compare``.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import networkx as nx
import pytest
import yaml

import sim
from sim.cli import main
from sim.config import load_topology
from sim.errors import ConfigError
from sim.studies.collective import collective
from sim.topology.build import build_topology
from sim.topology.fabrics import GLOBAL_HOP_WEIGHT, dragonfly_global_links, torus_coords
from sim.topology.routing import Fabric
from sim.topology.spec import FabricKind
from sim.types import CollectiveKind

TOPOLOGIES = Path(sim.__file__).resolve().parent.parent / "topologies"


def _preset(name: str) -> dict:
    return yaml.safe_load((TOPOLOGIES / f"{name}.yaml").read_text())


def _write(tmp_path: Path, data: dict, name: str) -> Path:
    data = dict(data, name=name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _torus(tmp_path, dims, gpn=1, name="t", **out) -> Path:
    data = _preset("torus-3d")
    data["gpus_per_node"] = gpn
    data["scale_up"]["domain_size"] = gpn
    data["scale_out"].update(dims=list(dims), nics_per_node=gpn, **out)
    return _write(tmp_path, data, name)


def _dragonfly(tmp_path, groups, routers, per_router, gpn=1, name="d", **out) -> Path:
    data = _preset("dragonfly")
    data["gpus_per_node"] = gpn
    data["scale_up"]["domain_size"] = gpn
    out.setdefault("global_links_per_router", None)  # the fewest that join every pair of groups
    data["scale_out"].update(groups=groups, routers_per_group=routers, nodes_per_router=per_router,
                             nics_per_node=gpn, **out)
    return _write(tmp_path, data, name)


def _planes(tmp_path, planes, kind="rail-optimized-fat-tree", name="p", **out) -> Path:
    data = _preset("dgx-h100")
    data["scale_out"].update(kind=kind, planes=planes, **out)
    return _write(tmp_path, data, name)


def _kinds(g) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, d in g.nodes(data=True):
        out[d["kind"]] = out.get(d["kind"], 0) + 1
    return out


def _edges_between(g, kind_u: str, kind_v: str) -> list:
    return [(u, v) for u, v in g.edges() if g.nodes[u]["kind"] == kind_u and g.nodes[v]["kind"] == kind_v]


def _router_hops(fab: Fabric, src: int, dst: int) -> list[tuple[str, str]]:
    """The router-to-router links of the route from GPU ``src`` to GPU ``dst``."""
    g = fab.graph
    pairs = [tuple(fab.link_names[link].split("->")) for link in fab.route(src, dst).links]
    return [(u, v) for u, v in pairs if g.nodes[u]["kind"] == g.nodes[v]["kind"] == "router"]


# --- multi-plane fat trees --------------------------------------------------------------------


def test_one_plane_keeps_the_names_and_two_planes_split_the_spine(tmp_path):
    one = build_topology(load_topology("dgx-h100"), 32)
    assert "spine" in one and "leaf0.7" in one and one.nodes["nic3.5"]["plane"] == 0
    g = build_topology(load_topology(str(_planes(tmp_path, 2))), 32)
    assert _kinds(g) == {"gpu": 32, "nvswitch": 4, "spine": 2, "leaf": 8, "nic": 32}
    assert "spine" not in g and {"spine.p0", "spine.p1"} <= set(g)
    # nvlink + pcie + nic-leaf, both directions, plus one uplink per leaf: the same as one plane
    assert g.number_of_edges() == one.number_of_edges() == 2 * (32 * 3 + 8)
    assert [g.nodes[f"nic1.{j}"]["plane"] for j in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert g.has_edge("leaf0.3", "spine.p0") and g.has_edge("leaf0.4", "spine.p1")
    assert not g.has_edge("leaf0.4", "spine.p0")


def test_a_plain_fat_tree_has_one_leaf_per_plane_per_unit_with_its_share_of_uplink(tmp_path):
    path = _planes(tmp_path, 4, kind="fat-tree", nodes_per_leaf=2, oversubscription=2.0)
    topo = load_topology(str(path))
    g = build_topology(topo, 32)  # 4 nodes, 2 units
    assert _kinds(g)["leaf"] == 2 * 4 and _kinds(g)["spine"] == 4
    assert g.nodes["leaf1.3"] == {"kind": "leaf", "unit": 1, "rail": 3, "plane": 3}
    assert g.has_edge("nic3.7", "leaf1.3") and g.has_edge("nic3.0", "leaf1.0")
    # 2 nodes x 2 NICs of the plane on the leaf, at 50 GB/s, over 2:1
    assert g.edges["leaf1.3", "spine.p3"]["bandwidth_bytes_per_s"] == pytest.approx(2 * 2 * 50e9 / 2)


@pytest.mark.parametrize("planes, kind", [(8, "rail-optimized-fat-tree"), (2, "rail-optimized-fat-tree"),
                                          (4, "fat-tree")])
def test_planes_never_meet_in_the_fabric(tmp_path, planes, kind):
    """Without the GPUs and NVSwitches (so without NVLink and PCIe), each connected piece of
    the fabric holds NICs of one plane only, and each plane is one piece."""
    g = build_topology(load_topology(str(_planes(tmp_path, planes, kind=kind, nodes_per_leaf=2))), 64)
    fabric = g.subgraph(n for n, d in g.nodes(data=True) if d["kind"] not in ("gpu", "nvswitch"))
    pieces = list(nx.weakly_connected_components(fabric))
    assert len(pieces) == planes
    for piece in pieces:
        assert len({g.nodes[n]["plane"] for n in piece}) == 1
    for a, b in [("nic0.0", "nic7.7"), ("nic0.0", "nic0.7")]:
        assert nx.has_path(fabric, a, b) == (g.nodes[a]["plane"] == g.nodes[b]["plane"])


def test_cross_plane_traffic_crosses_nvlink_and_every_gpu_reaches_every_other():
    fab = Fabric(build_topology(load_topology("dgx-h100-8plane"), 32))
    names = [fab.link_names[link] for link in fab.route(0, 13).links]  # NIC 0 (plane 0) to NIC 5 (plane 5)
    assert not any("spine" in n for n in names)
    assert any(fab.link_kinds[link] == "nvlink" for link in fab.route(0, 13).links)
    assert nx.is_strongly_connected(fab.graph)
    same_plane = [fab.link_names[link] for link in fab.route(3, 27).links]
    assert same_plane == ["gpu3->nic0.3", "nic0.3->leaf0.3", "leaf0.3->nic3.3", "nic3.3->gpu27"]


# --- torus -------------------------------------------------------------------------------------


def _torus_router_edges(dims) -> int:
    n = math.prod(dims)
    return 2 * sum(n if k >= 3 else n // 2 if k == 2 else 0 for k in dims)


@pytest.mark.parametrize("dims", [(4, 4), (2, 3), (3, 3, 3), (2, 2, 2), (5,), (4, 1, 3)])
def test_torus_node_and_edge_counts(tmp_path, dims):
    n = math.prod(dims)
    g = build_topology(load_topology(str(_torus(tmp_path, dims))), n)
    assert _kinds(g) == {"gpu": n, "nvswitch": n, "router": n, "nic": n}
    assert len(_edges_between(g, "router", "router")) == _torus_router_edges(dims)
    # each GPU: one NVLink port, one PCIe hop to its NIC, the NIC to its router; both ways
    assert g.number_of_edges() == _torus_router_edges(dims) + 2 * 3 * n
    assert nx.is_strongly_connected(g)
    if dims == (4, 4):
        assert _torus_router_edges(dims) == 4 * 4 * 2 * 2


def test_torus_router_attributes_and_neighbours(tmp_path):
    g = build_topology(load_topology(str(_torus(tmp_path, (4, 3, 2)))), 24)
    assert g.nodes["router17"] == {"kind": "router", "coords": torus_coords(17, (4, 3, 2))} == \
        {"kind": "router", "coords": (1, 1, 1)}
    assert sorted(g.successors("router0")) == ["nic0.0", "router1", "router12", "router3", "router4", "router8"]


@pytest.mark.parametrize("dims", [(4, 4), (5, 3), (4, 4, 4), (3, 2, 4)])
def test_torus_routes_are_shortest_torus_distances(tmp_path, dims):
    """Route hops between two routers = sum over dimensions of min(d, k - d); opposite
    corners are the farthest."""
    n = math.prod(dims)
    fab = Fabric(build_topology(load_topology(str(_torus(tmp_path, dims))), n))

    def dist(a, b):
        return sum(min(abs(x - y), k - abs(x - y))
                   for x, y, k in zip(torus_coords(a, dims), torus_coords(b, dims), dims))

    far = sum(k // 2 for k in dims)
    corner = sum((k // 2) * math.prod(dims[:d]) for d, k in enumerate(dims))
    assert len(_router_hops(fab, 0, corner)) == far == dist(0, corner)
    pairs = (itertools.product(range(n), repeat=2) if n <= 16
             else [(0, b) for b in range(n)] + [(b, 5) for b in range(n)])
    for a, b in pairs:
        assert len(_router_hops(fab, a, b)) == dist(a, b)


def test_torus_with_several_gpus_per_node_and_fewer_nodes_than_routers(tmp_path):
    path = _torus(tmp_path, (3, 3), gpn=4)
    g = build_topology(load_topology(str(path)), 5 * 4)  # 5 nodes on a 9-router torus
    assert _kinds(g) == {"gpu": 20, "nvswitch": 5, "router": 9, "nic": 20}
    fab = Fabric(g)
    assert fab.same_domain((0, 1, 2, 3)) and not fab.same_domain((0, 4))
    assert len(_router_hops(fab, 0, 19)) == 2  # node 4 at (1, 1)
    with pytest.raises(ConfigError) as info:
        build_topology(load_topology(str(path)), 10 * 4)
    assert info.value.field == "scale_out.dims" and "\n" not in str(info.value)


def test_a_failed_torus_link_is_routed_around(tmp_path):
    data = yaml.safe_load(_torus(tmp_path, (4, 4)).read_text())
    data["faults"] = [{"between": ["router0", "router1"], "bandwidth_fraction": 0}]
    fab = Fabric(build_topology(load_topology(str(_write(tmp_path, data, "cut"))), 16))
    assert len(_router_hops(fab, 0, 1)) == 3


# --- dragonfly ---------------------------------------------------------------------------------


@pytest.mark.parametrize("groups, routers, per_router", [(3, 4, 2), (5, 2, 1), (4, 3, 2), (9, 4, 1)])
def test_dragonfly_node_and_edge_counts(tmp_path, groups, routers, per_router):
    n = groups * routers * per_router
    path = _dragonfly(tmp_path, groups, routers, per_router)
    topo = load_topology(str(path))
    h = topo.scale_out.dragonfly.global_links_per_router
    assert h == math.ceil((groups - 1) / routers)
    g = build_topology(topo, n)
    assert _kinds(g) == {"gpu": n, "nvswitch": n, "router": groups * routers, "nic": n}
    local = [(u, v) for u, v in _edges_between(g, "router", "router")
             if g.nodes[u]["group"] == g.nodes[v]["group"]]
    glob = [(u, v) for u, v in _edges_between(g, "router", "router")
            if g.nodes[u]["group"] != g.nodes[v]["group"]]
    assert len(local) == groups * routers * (routers - 1)
    # every pair of groups joined by copies of the all-to-all cabling, 25 GB/s (200 Gb/s) each;
    # cables between the same two routers are one edge of their summed bandwidth
    cables = sum(dragonfly_global_links(groups, routers, h).values())
    assert cables == routers * h // (groups - 1) * groups * (groups - 1) // 2
    glob_set = set(glob)
    assert sum(g.edges[e]["bandwidth_bytes_per_s"] for e in glob) == pytest.approx(2 * cables * 25e9)
    assert {(g.nodes[u]["group"], g.nodes[v]["group"]) for u, v in glob} == \
        {(i, j) for i in range(groups) for j in range(groups) if i != j}
    for r in (x for x, d in g.nodes(data=True) if d["kind"] == "router"):
        used = sum(g.edges[r, s]["bandwidth_bytes_per_s"] for s in g.successors(r) if (r, s) in glob_set)
        assert used <= h * 25e9 * (1 + 1e-12)
    assert all(g.edges[e]["hop_weight"] == GLOBAL_HOP_WEIGHT for e in glob)
    assert nx.is_strongly_connected(g)


def test_dragonfly_global_cabling_is_symmetric_and_uses_each_port_once():
    for groups, routers, h in [(3, 2, 1), (5, 4, 1), (24, 32, 17), (4, 2, 3)]:
        links = dragonfly_global_links(groups, routers, h)
        ports: dict[tuple[int, int], int] = {}
        for (i, r, j, s), cables in links.items():
            assert i < j
            ports[i, r] = ports.get((i, r), 0) + cables
            ports[j, s] = ports.get((j, s), 0) + cables
        assert max(ports.values()) <= h
        assert {(i, j) for i, _, j, _ in links} == set(itertools.combinations(range(groups), 2))


@pytest.mark.parametrize("groups, routers, per_router, h", [(4, 3, 2, None), (5, 2, 1, None), (3, 4, 1, 3)])
def test_dragonfly_routes_are_minimal_local_global_local(tmp_path, groups, routers, per_router, h):
    n = groups * routers * per_router
    fab = Fabric(build_topology(load_topology(str(_dragonfly(tmp_path, groups, routers, per_router,
                                                             global_links_per_router=h))), n))
    group = {r: d["group"] for r, d in fab.graph.nodes(data=True) if d["kind"] == "router"}
    for a, b in itertools.permutations(range(n), 2):
        hops = _router_hops(fab, a, b)
        kinds = ["g" if group[u] != group[v] else "l" for u, v in hops]
        assert len(hops) <= 3 and kinds.count("g") <= 1
        assert "".join(kinds) in ("", "l", "g", "lg", "gl", "lgl")
        same_group = a // (routers * per_router) == b // (routers * per_router)
        assert kinds.count("g") == (0 if same_group else 1)


def test_dragonfly_builds_only_the_groups_it_fills_and_refuses_too_many_nodes(tmp_path):
    path = _dragonfly(tmp_path, 6, 4, 2, gpn=2)
    g = build_topology(load_topology(str(path)), 2 * 10)  # 10 nodes, 8 per group
    assert _kinds(g)["router"] == 2 * 4
    assert g.has_node("nic9.1") and g.has_edge("nic9.1", "router1.0")
    with pytest.raises(ConfigError) as info:
        build_topology(load_topology(str(path)), 2 * 49)
    assert info.value.field == "scale_out.groups" and "\n" not in str(info.value)


# --- every builder: documented attributes, determinism, presets --------------------------------

_NODE_ATTRS = {"gpu": {"rank", "node", "local_gpu"}, "nvswitch": {"domain"}, "nic": {"node", "plane"},
               "leaf": {"unit", "rail", "plane"}, "spine": {"plane"}}
_ROUTER_ATTRS = {FabricKind.TORUS: {"coords"}, FabricKind.DRAGONFLY: {"group", "index"}}
_EDGE_ATTRS = {"bandwidth_bytes_per_s", "latency_s", "efficiency", "link", "hop_weight", "link_id"}


@pytest.mark.parametrize("name, gpus, kind", [
    ("dgx-h100-8plane", 32, FabricKind.RAIL_OPTIMIZED_FAT_TREE), ("torus-3d", 64, FabricKind.TORUS),
    ("dragonfly", 64, FabricKind.DRAGONFLY),
])
def test_presets_build_graphs_with_the_documented_attributes(name, gpus, kind):
    topo = load_topology(name)
    assert topo.name == name and topo.scale_out.kind is kind
    assert load_topology(str(TOPOLOGIES / f"{name}.yaml")) == topo
    g = build_topology(topo, gpus)
    for _, d in g.nodes(data=True):
        assert set(d) - {"kind"} == (_ROUTER_ATTRS[kind] if d["kind"] == "router" else _NODE_ATTRS[d["kind"]])
    for *_, d in g.edges(data=True):
        assert set(d) == _EDGE_ATTRS and d["link"] in ("nvlink", "pcie", "network")
    assert sorted(d["link_id"] for *_, d in g.edges(data=True)) == list(range(g.number_of_edges()))
    again = build_topology(topo, gpus)
    assert list(again.edges(data="link_id")) == list(g.edges(data="link_id"))
    assert list(again.nodes) == list(g.nodes)


# --- collectives over the new fabrics ----------------------------------------------------------


@pytest.mark.parametrize("make, slower, ranks", [
    (lambda p: _torus(p, (4, 4)), {"link_bandwidth_Gbps": 100}, 16),
    (lambda p: _dragonfly(p, 3, 2, 2, gpn=2), {"global_bandwidth_Gbps": 50, "local_bandwidth_Gbps": 50}, 24),
    (lambda p: _planes(p, 8, nodes_per_leaf=2), {"nic_bandwidth_Gbps": 100}, 32),
])
def test_all_reduce_over_each_fabric_runs_and_a_slower_link_is_slower(tmp_path, make, slower, ranks):
    fast = make(tmp_path)
    data = yaml.safe_load(fast.read_text())
    data["scale_out"].update(slower)
    slow = _write(tmp_path, data, "slow")
    a = collective(load_topology(str(fast)), CollectiveKind.ALL_REDUCE, 2**28, ranks)
    b = collective(load_topology(str(slow)), CollectiveKind.ALL_REDUCE, 2**28, ranks)
    assert 0 < a.time_s < b.time_s
    assert 0 < a.busbw_bytes_per_s < math.inf


def test_all_to_all_on_a_torus_is_held_by_its_links(tmp_path):
    """A direct all-to-all over a 4x4 torus of one-GPU nodes: more hops share links than on
    the fat tree's NICs, so it is slower than the links' rate would give alone."""
    t = load_topology(str(_torus(tmp_path, (4, 4))))
    r = collective(t, CollectiveKind.ALL_TO_ALL, 2**26, 16)
    assert r.algorithm == "direct" and 0 < r.busbw_bytes_per_s < 50e9


# --- YAML errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("preset, key, value, field", [
    ("torus-3d", "dims", "4x4", "scale_out.dims"),
    ("torus-3d", "dims", [4, 0, 4], "scale_out.dims"),
    ("torus-3d", "dims", [2, 2, 2, 2], "scale_out.dims"),
    ("torus-3d", "dims", None, "scale_out.dims"),
    ("torus-3d", "link_bandwidth_Gbps", -1, "scale_out.link_bandwidth_Gbps"),
    ("torus-3d", "link_latency_us", None, "scale_out.link_latency_us"),
    ("torus-3d", "planes", 2, "scale_out.planes"),
    ("torus-3d", "groups", 4, "scale_out.groups"),
    ("dragonfly", "groups", 0, "scale_out.groups"),
    ("dragonfly", "routers_per_group", 2.5, "scale_out.routers_per_group"),
    ("dragonfly", "global_links_per_router", 0, "scale_out.global_links_per_router"),
    ("dragonfly", "groups", 600, "scale_out.global_links_per_router"),  # 17 ports x 32 < 599 groups
    ("dragonfly", "local_bandwidth_Gbps", "fast", "scale_out.local_bandwidth_Gbps"),
    ("dragonfly", "global_latency_us", -0.1, "scale_out.global_latency_us"),
    ("dragonfly", "dims", [4, 4], "scale_out.dims"),
    ("dgx-h100", "planes", 3, "scale_out.planes"),
    ("dgx-h100", "planes", 0, "scale_out.planes"),
    ("dgx-h100", "planes", True, "scale_out.planes"),
    ("dgx-h100", "link_bandwidth_Gbps", 400, "scale_out.link_bandwidth_Gbps"),
])
def test_bad_values_are_one_line_errors_naming_the_field(tmp_path, preset, key, value, field):
    data = _preset(preset)
    data["scale_out"][key] = value
    path = _write(tmp_path, data, "bad")
    with pytest.raises(ConfigError) as info:
        load_topology(str(path))
    err = info.value
    assert err.field == field and err.path == str(path)
    assert "\n" not in str(err) and field in str(err)


def test_a_bad_torus_is_one_line_on_the_command_line(tmp_path, capsys):
    data = _preset("torus-3d")
    data["scale_out"]["dims"] = [4, "x"]
    assert main(["run", "tiny", "--topology", str(_write(tmp_path, data, "bad"))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scale_out.dims" in err[0]


@pytest.mark.parametrize("preset", ["torus-3d", "dragonfly", "dgx-h100-8plane"])
def test_compare_runs_each_new_preset_against_dgx_h100(tmp_path, capsys, preset):
    out = tmp_path / "cmp.json"
    # tiny with its DP spread over the 64 GPUs, so its gradient all-reduce crosses the fabric
    assert main(["compare", "tiny", "--set", "system.gpu=H100-SXM5-80GB", "--set", "parallel.dp=16",
                 "--set", "parallel.global_batch_size=32", "--set", "system.num_gpus=64",
                 "--topology", preset, "--topology", "dgx-h100", "--json", str(out)]) == 0
    rows = {r["topology"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {preset, "dgx-h100"}
    assert rows[preset]["iteration_time_s"] > 0 and rows["dgx-h100"]["speedup_vs_first"] > 0
    assert preset in capsys.readouterr().out
