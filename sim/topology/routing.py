"""Routes between GPUs over a built topology graph, and the per-link arrays the engine uses.

Routing is shortest-path by each edge's ``hop_weight`` (NetworkX Dijkstra), deterministic for
a given graph, and cached per :class:`Fabric` instance (never across instances).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from sim.hardware import EfficiencyCurve

__all__ = ["Fabric", "Route"]


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
    """

    def __init__(self, graph: nx.DiGraph) -> None:
        self.graph = graph
        edges = sorted(graph.edges(data=True), key=lambda e: e[2]["link_id"])
        self.capacity_bytes_per_s: list[float] = [d["bandwidth_bytes_per_s"] for _, _, d in edges]
        self.link_names: list[str] = [f"{u}->{v}" for u, v, _ in edges]
        self.link_kinds: list[str] = [d["link"] for _, _, d in edges]
        self._routes: dict[tuple[int, int], Route] = {}
        self.num_gpus = sum(1 for _, d in graph.nodes(data=True) if d["kind"] == "gpu")

    def node_of(self, rank: int) -> int:
        """The server (node) index of a GPU."""
        return self.graph.nodes[f"gpu{rank}"]["node"]

    def local_gpu(self, rank: int) -> int:
        return self.graph.nodes[f"gpu{rank}"]["local_gpu"]

    def route(self, src: int, dst: int) -> Route:
        """The route from GPU ``src`` to GPU ``dst`` (an empty route when they are equal)."""
        key = (src, dst)
        r = self._routes.get(key)
        if r is None:
            r = self._routes[key] = self._compute(src, dst)
        return r

    def _compute(self, src: int, dst: int) -> Route:
        if src == dst:
            return Route((), 0.0, float("inf"), _FREE)
        g = self.graph
        nodes = nx.shortest_path(g, f"gpu{src}", f"gpu{dst}", weight="hop_weight")
        datas = [g.edges[u, v] for u, v in zip(nodes, nodes[1:])]
        bottleneck = min(datas, key=lambda d: d["bandwidth_bytes_per_s"])
        return Route(
            links=tuple(d["link_id"] for d in datas),
            latency_s=sum(d["latency_s"] for d in datas),
            bottleneck_bytes_per_s=bottleneck["bandwidth_bytes_per_s"],
            efficiency=bottleneck["efficiency"],
        )

    def same_domain(self, ranks: tuple[int, ...]) -> bool:
        """Whether all ``ranks`` reach each other without leaving the scale-up fabric."""
        kinds = self.link_kinds
        first = ranks[0]
        return all(all(kinds[l] == "nvlink" for l in self.route(first, r).links) for r in ranks[1:])
