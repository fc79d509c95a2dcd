"""Routes between GPUs over a built topology graph, and the per-link arrays the engine uses.

Routing is shortest-path by each edge's ``hop_weight`` (NetworkX Dijkstra), deterministic for
a given graph, and cached per :class:`Fabric` instance (never across instances).

Callers speak in ranks. A fabric with a ``placement`` runs rank ``r`` on GPU ``placement[r]``
(the graph's node ``gpu{placement[r]}``); every method that takes ranks maps them here, so the
task program, the layout and the engine never see GPU indices. Link names keep the GPUs'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from sim.hardware import EfficiencyCurve
from sim.topology.fattree_routes import FatTreeRouter

__all__ = ["Fabric", "Route"]


def _nvlink_domains(graph: nx.DiGraph, num_gpus: int) -> tuple[list[int], list[bool]]:
    """The NVLink component of each GPU index, and per component whether it is one NVSwitch
    star (every GPU of it linked to one switch node that only GPUs of it reach by NVLink)."""
    nv = nx.Graph()
    nv.add_nodes_from(f"gpu{i}" for i in range(num_gpus))
    nv.add_edges_from((u, v) for u, v, d in graph.edges(data=True) if d["link"] == "nvlink")
    domain = [0] * num_gpus
    star: list[bool] = []
    comps = sorted((sorted(c) for c in nx.connected_components(nv)), key=lambda c: c[0])
    for i, comp in enumerate(comps):
        gpus = [n for n in comp if graph.nodes[n]["kind"] == "gpu"]
        switches = [n for n in comp if graph.nodes[n]["kind"] != "gpu"]
        for n in gpus:
            domain[int(n[3:])] = i
        star.append(len(switches) == 1 and all(graph.has_edge(n, switches[0]) and graph.has_edge(switches[0], n)
                                               for n in gpus)
                    and all(graph.edges[n, switches[0]]["link"] == "nvlink" for n in gpus)
                    and not any(nv.has_edge(a, b) for a in gpus for b in nv.neighbors(a) if b in gpus))
    return domain, star


@dataclass(frozen=True)
class Route:
    """A path between two GPUs: its links (by ``link_id``), latency and bottleneck."""

    links: tuple[int, ...]
    latency_s: float
    bottleneck_bytes_per_s: float
    efficiency: EfficiencyCurve
    """The efficiency curve of the bottleneck link."""


_FREE = EfficiencyCurve.constant(1.0)


class Fabric:
    """A topology graph with routing and per-link capacities.

    Parameters
    ----------
    graph : networkx.DiGraph
        As built by :func:`sim.topology.build.build_topology`.
    placement : sequence of int, optional
        The GPU index of each rank (a permutation of the graph's GPUs); None, or the identity,
        runs rank ``r`` on GPU ``r``.

    Raises
    ------
    ValueError
        If ``placement`` is not a permutation of the graph's GPU indices.
    """

    def __init__(self, graph: nx.DiGraph, placement: Sequence[int] | None = None) -> None:
        self.graph = graph
        m = graph.number_of_edges()
        self.capacity_bytes_per_s: list[float] = [0.0] * m
        self.link_names: list[str] = [""] * m
        self.link_kinds: list[str] = [""] * m
        self._latency_s: list[float] = [0.0] * m
        self._efficiency: list[EfficiencyCurve] = [_FREE] * m
        for u, v, d in graph.edges(data=True):  # link ids are 0..m-1 (build.py numbers them)
            i = d["link_id"]
            self.capacity_bytes_per_s[i] = d["bandwidth_bytes_per_s"]
            self.link_names[i] = f"{u}->{v}"
            self.link_kinds[i] = d["link"]
            self._latency_s[i] = d["latency_s"]
            self._efficiency[i] = d["efficiency"]
        self._routes: dict[tuple[int, int], Route] = {}
        self.num_gpus = sum(1 for _, d in graph.nodes(data=True) if d["kind"] == "gpu")
        if placement is not None:
            placement = tuple(placement)
            if sorted(placement) != list(range(self.num_gpus)):
                raise ValueError(f"placement must be a permutation of the {self.num_gpus} GPU indices "
                                 f"0..{self.num_gpus - 1}, got {len(placement)} items")
            if placement == tuple(range(self.num_gpus)):
                placement = None
        self.placement: tuple[int, ...] | None = placement
        """The GPU of each rank; None when rank ``r`` runs on GPU ``r``."""
        self._rank_on = None if placement is None else {g: r for r, g in enumerate(placement)}
        self._fat_tree = FatTreeRouter.of(graph, self.num_gpus)
        """Routes a fat tree from its structure (:mod:`sim.topology.fattree_routes`); None:
        Dijkstra."""
        if self._fat_tree is not None:  # it has found the domains, all NVSwitch stars
            self._domain, self._star = self._fat_tree.gpu_domain, [True] * self._fat_tree.num_domains
        else:
            self._domain, self._star = _nvlink_domains(graph, self.num_gpus)

    def gpu_of(self, rank: int) -> int:
        """The GPU index (graph node ``gpu{i}``) that ``rank`` runs on."""
        return rank if self.placement is None else self.placement[rank]

    def rank_on(self, gpu: int) -> int:
        """The rank that runs on GPU ``gpu`` (the inverse of :meth:`gpu_of`)."""
        return gpu if self._rank_on is None else self._rank_on[gpu]

    def node_of(self, rank: int) -> int:
        """The server (node) index of a rank's GPU."""
        return self.graph.nodes[f"gpu{self.gpu_of(rank)}"]["node"]

    def local_gpu(self, rank: int) -> int:
        """The index of a rank's GPU within its server."""
        return self.graph.nodes[f"gpu{self.gpu_of(rank)}"]["local_gpu"]

    def route(self, src: int, dst: int) -> Route:
        """The route from rank ``src``'s GPU to rank ``dst``'s (an empty route when they are
        equal)."""
        key = (src, dst)
        r = self._routes.get(key)
        if r is None:
            r = self._routes[key] = self._compute(src, dst)
        return r

    def _compute(self, src: int, dst: int) -> Route:
        if src == dst:
            return Route((), 0.0, float("inf"), _FREE)
        g = self.graph
        src, dst = self.gpu_of(src), self.gpu_of(dst)
        if self._fat_tree is not None:
            links = self._fat_tree.links(src, dst)
        else:
            nodes = nx.shortest_path(g, f"gpu{src}", f"gpu{dst}", weight="hop_weight")
            links = tuple(g.edges[u, v]["link_id"] for u, v in zip(nodes, nodes[1:]))
        cap = self.capacity_bytes_per_s
        bottleneck = min(links, key=lambda l: cap[l])  # the first of equal ones, as before
        latency = 0.0
        for l in links:
            latency += self._latency_s[l]
        return Route(links=links, latency_s=latency, bottleneck_bytes_per_s=cap[bottleneck],
                     efficiency=self._efficiency[bottleneck])

    def domain_key(self, rank: int) -> int | None:
        """The NVSwitch domain of ``rank``'s GPU: ranks with equal keys are in one domain
        (:meth:`same_domain`), those with different keys are not; None where the domain is not
        one NVSwitch and only :meth:`same_domain` can tell."""
        d = self._domain[self.gpu_of(rank)]
        return d if self._star[d] else None

    def same_domain(self, ranks: tuple[int, ...]) -> bool:
        """Whether all ``ranks`` reach each other without leaving the scale-up fabric.

        That is, whether the route from the first to each other is NVLink only. Ranks in
        different NVLink components never are; in one NVSwitch domain (every GPU one hop from
        one switch) they always are, since two NVLink hops (weight 3.0) beat any way out
        through a NIC (at least 6.0, :data:`~sim.topology.fabrics.HOP_WEIGHT`); other domains
        (NVLink rings, GraphML graphs) are checked on the routes.
        """
        dom = self._domain
        first = self.gpu_of(ranks[0])
        d = dom[first]
        if any(dom[self.gpu_of(r)] != d for r in ranks[1:]):
            return False
        if self._star[d]:
            return True
        kinds = self.link_kinds
        return all(all(kinds[l] == "nvlink" for l in self.route(ranks[0], r).links) for r in ranks[1:])
