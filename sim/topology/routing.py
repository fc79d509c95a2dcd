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
        edges = sorted(graph.edges(data=True), key=lambda e: e[2]["link_id"])
        self.capacity_bytes_per_s: list[float] = [d["bandwidth_bytes_per_s"] for _, _, d in edges]
        self.link_names: list[str] = [f"{u}->{v}" for u, v, _ in edges]
        self.link_kinds: list[str] = [d["link"] for _, _, d in edges]
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
