"""The fat-tree router (sim/topology/fattree_routes.py) against NetworkX's Dijkstra.

Every GPU pair of small fat trees of each preset, with scalable units of two nodes so that
routes cross leaves and the spine: the router's route has Dijkstra's weight, is a path, and is
Dijkstra's own where the shortest path is unique.
"""

from __future__ import annotations

import dataclasses
import itertools

import networkx as nx
import pytest

from sim.config import load_topology
from sim.topology.build import build_topology
from sim.topology.fattree_routes import FatTreeRouter
from sim.topology.routing import Fabric

PRESETS = ["dgx-a100", "dgx-h100", "dgx-h100-8plane", "dgx-b200", "gb200-nvl72"]


def _small(name: str):
    spec = load_topology(name)
    nodes_per_leaf = 2 if spec.scale_up.domain_size <= spec.gpus_per_node else 18
    return dataclasses.replace(spec, scale_out=dataclasses.replace(spec.scale_out, nodes_per_leaf=nodes_per_leaf))


def _sizes(spec) -> int:
    dom = spec.scale_up.domain_size
    return 5 * spec.gpus_per_node if dom <= spec.gpus_per_node else 3 * dom


@pytest.mark.parametrize("name", PRESETS)
def test_router_matches_dijkstra(name):
    spec = _small(name)
    n = _sizes(spec)
    g = build_topology(spec, n)
    router = FatTreeRouter.of(g, n)
    assert router is not None
    by_id = {d["link_id"]: (u, v) for u, v, d in g.edges(data=True)}
    gpus = range(n) if n <= 40 else sorted(set(range(0, n, 7)) | {0, 1, n - 1})
    unique = 0
    for s, t in itertools.permutations(gpus, 2):
        links = router.links(s, t)
        hops = [by_id[link] for link in links]
        assert hops[0][0] == f"gpu{s}" and hops[-1][1] == f"gpu{t}"
        assert all(a[1] == b[0] for a, b in zip(hops, hops[1:]))
        weight = sum(g.edges[u, v]["hop_weight"] for u, v in hops)
        best = nx.shortest_path_length(g, f"gpu{s}", f"gpu{t}", weight="hop_weight")
        assert weight == pytest.approx(best)
        paths = list(itertools.islice(nx.all_shortest_paths(g, f"gpu{s}", f"gpu{t}", weight="hop_weight"), 2))
        if len(paths) == 1:
            unique += 1
            assert [u for u, _ in hops] + [hops[-1][1]] == paths[0]
    assert unique > 0


def test_fabric_uses_router_and_keeps_dijkstra_elsewhere():
    spec = _small("dgx-h100")
    fab = Fabric(build_topology(spec, 32))
    assert fab._fat_tree is not None
    torus = load_topology("torus-3d")
    g = build_topology(torus, torus.gpus_per_node * 8)
    assert FatTreeRouter.of(g, torus.gpus_per_node * 8) is None


def test_failed_link_falls_back_to_dijkstra():
    from sim.topology.spec import LinkFault

    spec = _small("dgx-h100")
    faulty = dataclasses.replace(spec, faults=(LinkFault("nic0.0", "leaf0.0", 0.0),))
    g = build_topology(faulty, 32)
    assert FatTreeRouter.of(g, 32) is None
    fab = Fabric(g)
    r = fab.route(0, 8)
    assert all("nic0.0" not in fab.link_names[link] for link in r.links)
