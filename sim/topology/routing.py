"""Routes between GPUs over a topology, and the per-link arrays the engine uses.

Routing is shortest-path by each edge's ``hop_weight`` (NetworkX Dijkstra; on a fat tree the
same routes read off its structure, :mod:`sim.topology.fattree_routes`), deterministic for a
given topology, and cached per :class:`Fabric` instance (never across instances).
:meth:`Fabric.of` does not even build the graph of a fat tree it can read from its spec
(:mod:`sim.topology.fattree_index`): link ids, capacities and routes are those of the graph.

Callers speak in ranks. A fabric with a ``placement`` runs rank ``r`` on GPU ``placement[r]``
(the graph's node ``gpu{placement[r]}``); every method that takes ranks maps them here, so the
task program, the layout and the engine never see GPU indices. Link names keep the GPUs'.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.hardware import EfficiencyCurve
from sim.topology.build import build_topology
from sim.topology.fattree_index import FatTreeIndex
from sim.topology.fattree_routes import FatTreeRouter
from sim.topology.spec import TopologySpec
from sim.types import LinkKind, NodeKind

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Fabric", "Route"]


def _nvlink_domains(graph: nx.DiGraph, num_gpus: int) -> tuple[list[int], list[bool]]:
    """The NVLink component of each GPU index, and per component whether it is one NVSwitch
    star (every GPU of it linked to one switch node that only GPUs of it reach by NVLink)."""
    import networkx as nx

    nv = nx.Graph()
    nv.add_nodes_from(f"gpu{i}" for i in range(num_gpus))
    nv.add_edges_from((u, v) for u, v, d in graph.edges(data=True) if d["link"] == LinkKind.NVLINK)
    domain = [0] * num_gpus
    star: list[bool] = []
    comps = sorted((sorted(c) for c in nx.connected_components(nv)), key=lambda c: c[0])
    for i, comp in enumerate(comps):
        gpus = [n for n in comp if graph.nodes[n]["kind"] == NodeKind.GPU]
        switches = [n for n in comp if graph.nodes[n]["kind"] != NodeKind.GPU]
        for n in gpus:
            domain[int(n[3:])] = i
        star.append(len(switches) == 1 and all(graph.has_edge(n, switches[0]) and graph.has_edge(switches[0], n)
                                               for n in gpus)
                    and all(graph.edges[n, switches[0]]["link"] == LinkKind.NVLINK for n in gpus)
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


class _LinkColumn(Sequence):
    """One attribute of every link of a fabric read from a fat tree's structure: what the
    routes handed out recorded (:attr:`FatTreeIndex.info`), else the built graph's (built on
    first need; only a caller that reads links no route uses gets there)."""

    def __init__(self, fabric: Fabric, field: int) -> None:
        self._fabric, self._field = fabric, field

    def __len__(self) -> int:
        return len(self._fabric.capacity_bytes_per_s)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        hit = self._fabric._index.info.get(i)
        if hit is not None:
            if self._field == 0:
                name, args = hit[0]
                return name.format(*args)
            return hit[self._field]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"link {i} of {n}")
        return self._fabric._graph_columns()[self._field][i]


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

    Notes
    -----
    :meth:`of` builds a fat tree's fabric from its structure instead
    (:class:`~sim.topology.fattree_index.FatTreeIndex`): the same link ids, capacities and
    routes, with the graph built only if asked for (:attr:`graph`).
    """

    def __init__(self, graph: nx.DiGraph, placement: Sequence[int] | None = None) -> None:
        self._graph = graph
        self._index: FatTreeIndex | None = None
        self._columns: tuple[list, ...] | None = None
        m = graph.number_of_edges()
        self.capacity_bytes_per_s: list[float] = [0.0] * m
        self.link_names: Sequence[str] = [""] * m
        self.link_kinds: Sequence[LinkKind | str] = [""] * m
        self._latency_s: Sequence[float] = [0.0] * m
        self._efficiency: Sequence[EfficiencyCurve] = [_FREE] * m
        for u, v, d in graph.edges(data=True):  # link ids are 0..m-1 (build.py numbers them)
            i = d["link_id"]
            self.capacity_bytes_per_s[i] = d["bandwidth_bytes_per_s"]
            self.link_names[i] = f"{u}->{v}"
            self.link_kinds[i] = d["link"]
            self._latency_s[i] = d["latency_s"]
            self._efficiency[i] = d["efficiency"]
        self.num_gpus = sum(1 for _, d in graph.nodes(data=True) if d["kind"] == NodeKind.GPU)
        self._place(placement)
        self.collective_latency_s = float(graph.graph.get("collective_latency_s", 0.0))
        """The topology's fixed latency of one collective (``scale_up.collective_latency_us``)."""
        self.nvls_efficiency: EfficiencyCurve | None = graph.graph.get("nvls_efficiency")
        """NVLink SHARP's efficiency curve, or None where the switches have none."""
        self.alltoall_efficiency: EfficiencyCurve | None = graph.graph.get("alltoall_efficiency")
        """An all-to-all's own curve inside one NVSwitch domain, or None (the links')."""
        self.p2p_efficiency: EfficiencyCurve | None = graph.graph.get("p2p_efficiency")
        """Point-to-point sends' own curve inside one NVSwitch domain, or None (the links')."""
        self.all_gather_efficiency: EfficiencyCurve | None = graph.graph.get("all_gather_efficiency")
        """A ring all-gather's own curve inside one NVSwitch domain, or None (the links')."""
        self.reduce_scatter_efficiency: EfficiencyCurve | None = graph.graph.get("reduce_scatter_efficiency")
        """A ring reduce-scatter's own curve inside one NVSwitch domain, or None (the links')."""
        self.scale_out_alltoall_efficiency: EfficiencyCurve | None = graph.graph.get("scale_out_alltoall_efficiency")
        """An all-to-all's own curve for its sends between domains, or None (each route's)."""
        self.scale_out_all_gather_efficiency: EfficiencyCurve | None = \
            graph.graph.get("scale_out_all_gather_efficiency")
        """A ring all-gather's own curve for its hops between domains, or None (each route's)."""
        self.scale_out_reduce_scatter_efficiency: EfficiencyCurve | None = \
            graph.graph.get("scale_out_reduce_scatter_efficiency")
        """A ring reduce-scatter's own curve for its hops between domains, or None (each route's)."""
        self._fat_tree = FatTreeRouter.of(graph, self.num_gpus)
        """Routes a fat tree from its structure (:mod:`sim.topology.fattree_routes`); None:
        Dijkstra."""
        if self._fat_tree is not None:  # it has found the domains, all NVSwitch stars
            self._domain, self._star = self._fat_tree.gpu_domain, [True] * self._fat_tree.num_domains
        else:
            self._domain, self._star = _nvlink_domains(graph, self.num_gpus)
        self._bounds: tuple[float, float] | None = None

    @classmethod
    def of(cls, spec: TopologySpec, num_gpus: int, placement: Sequence[int] | None = None) -> Fabric:
        """The fabric of ``spec`` at ``num_gpus``: read from the fat tree's structure where
        :meth:`FatTreeIndex.of <sim.topology.fattree_index.FatTreeIndex.of>` covers it, else
        built as a graph (:func:`~sim.topology.build.build_topology`); the same either way.

        Raises
        ------
        ConfigError
            If the sizes do not fit together (from ``build_topology``).
        """
        index = FatTreeIndex.of(spec, num_gpus)
        if index is None:
            return cls(build_topology(spec, num_gpus), placement)
        fab = cls.__new__(cls)
        fab._graph, fab._index, fab._columns = None, index, None
        fab.capacity_bytes_per_s = index.capacities()
        fab.link_names = _LinkColumn(fab, 0)
        fab.link_kinds = _LinkColumn(fab, 1)
        fab._latency_s = _LinkColumn(fab, 2)
        fab._efficiency = _LinkColumn(fab, 3)
        fab.num_gpus = num_gpus
        fab._place(placement)
        up = spec.scale_up
        fab.collective_latency_s = float(up.collective_latency_s)
        fab.nvls_efficiency = up.nvls_efficiency
        fab.alltoall_efficiency, fab.p2p_efficiency = up.alltoall_efficiency, up.p2p_efficiency
        fab.all_gather_efficiency, fab.reduce_scatter_efficiency = up.all_gather_efficiency, \
            up.reduce_scatter_efficiency
        fab.scale_out_alltoall_efficiency = spec.scale_out.alltoall_efficiency
        fab.scale_out_all_gather_efficiency = spec.scale_out.all_gather_efficiency
        fab.scale_out_reduce_scatter_efficiency = spec.scale_out.reduce_scatter_efficiency
        fab._fat_tree = FatTreeRouter.from_index(index)
        fab._domain, fab._star = fab._fat_tree.gpu_domain, [True] * index.num_domains
        fab._bounds = None
        return fab

    @property
    def graph(self) -> nx.DiGraph:
        """The topology graph (built on first use when the fabric was read from a fat tree's
        structure)."""
        if self._graph is None:
            self._graph = build_topology(self._index.spec, self._index.num_gpus)
        return self._graph

    def _graph_columns(self) -> tuple[list, ...]:
        """Names, kinds, latencies and efficiencies of every link, from the graph."""
        if self._columns is None:
            m = len(self.capacity_bytes_per_s)
            cols: tuple[list, ...] = ([""] * m, [""] * m, [0.0] * m, [_FREE] * m)
            for u, v, d in self.graph.edges(data=True):
                i = d["link_id"]
                cols[0][i], cols[1][i], cols[2][i], cols[3][i] = f"{u}->{v}", d["link"], d["latency_s"], d["efficiency"]
            self._columns = cols
        return self._columns

    def with_capacities(self, capacity_bytes_per_s: Sequence[float]) -> Fabric:
        """This fabric with link ``i`` at ``capacity_bytes_per_s[i]`` (a calibration's
        ``comm_efficiency`` applied, :meth:`sim.costs.factors.CalibrationFactors.capacities`):
        the same links, placement and latencies, its routes' bottlenecks read from the new
        capacities, so that what plans on it (the algorithm NCCL's tuner would pick, the
        protocol) sees the bandwidth the engine runs at."""
        if len(capacity_bytes_per_s) != len(self.capacity_bytes_per_s):
            raise ValueError(f"{len(self.capacity_bytes_per_s)} link capacities, got {len(capacity_bytes_per_s)}")
        fab = copy.copy(self)
        fab.capacity_bytes_per_s = list(capacity_bytes_per_s)
        fab._routes = {}
        fab._bounds = None
        return fab

    def _place(self, placement: Sequence[int] | None) -> None:
        self._routes: dict[tuple[int, int], Route] = {}
        self._all_stars: bool | None = None
        self._placement_array: np.ndarray | None = None
        self._domain_array: np.ndarray | None = None
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
        if self._index is not None:
            return self.gpu_of(rank) // self._index.gpus_per_node
        return self.graph.nodes[f"gpu{self.gpu_of(rank)}"]["node"]

    def local_gpu(self, rank: int) -> int:
        """The index of a rank's GPU within its server."""
        if self._index is not None:
            return self.gpu_of(rank) % self._index.gpus_per_node
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
        src, dst = self.gpu_of(src), self.gpu_of(dst)
        if self._fat_tree is not None:
            links = self._fat_tree.links(src, dst)
        else:
            import networkx as nx

            g = self.graph
            nodes = nx.shortest_path(g, f"gpu{src}", f"gpu{dst}", weight="hop_weight")
            links = tuple(g.edges[u, v]["link_id"] for u, v in zip(nodes, nodes[1:]))
        cap = self.capacity_bytes_per_s
        bottleneck = min(links, key=cap.__getitem__)  # the first of equal ones, as before
        latency = 0.0
        if self._index is not None:
            info = self._index.info
            for link in links:
                latency += info[link][2]
            efficiency = info[bottleneck][3]
        else:
            for link in links:
                latency += self._latency_s[link]
            efficiency = self._efficiency[bottleneck]
        return Route(links=links, latency_s=latency, bottleneck_bytes_per_s=cap[bottleneck], efficiency=efficiency)

    def near_ranks(self, links) -> frozenset[int] | None:
        """The ranks among which every route through any of ``links`` starts or ends (a
        superset, :meth:`FatTreeRouter.endpoints <sim.topology.fattree_routes.FatTreeRouter.endpoints>`),
        or None where the fabric cannot tell (no fat-tree router)."""
        ft = self._fat_tree
        if ft is None:
            return None
        gpus: set[int] = set()
        for link in links:
            gpus |= ft.endpoints(link)
        if self._rank_on is None:
            return frozenset(gpus)
        return frozenset(self._rank_on[g] for g in gpus)

    def latency_bounds_s(self) -> tuple[float, float] | None:
        """``(most, most within a domain)``: no route's latency exceeds the first, no route
        between two GPUs of one NVSwitch domain the second; None without a fat-tree router.

        Each is the latency of a form a route can take (:meth:`FatTreeRouter.route_shapes
        <sim.topology.fattree_routes.FatTreeRouter.route_shapes>`) with the largest latency of
        each of its links' roles, summed in route order as :meth:`route` sums, so that no
        route's sum exceeds it even in floating point."""
        ft = self._fat_tree
        if ft is None:
            return None
        if self._bounds is None:
            most: dict[str, float] = {}
            lat = self._latency_s
            sums = []
            for shape in ft.route_shapes():
                total = 0.0
                for role in shape:
                    if role not in most:
                        most[role] = max(lat[link] for link in ft.role_links(role))
                    total += most[role]
                sums.append(total)
            self._bounds = (max(sums), sums[0])
        return self._bounds

    def domain_key(self, rank: int) -> int | None:
        """The NVSwitch domain of ``rank``'s GPU: ranks with equal keys are in one domain
        (:meth:`same_domain`), those with different keys are not; None where the domain is not
        one NVSwitch and only :meth:`same_domain` can tell."""
        d = self._domain[self.gpu_of(rank)]
        return d if self._star[d] else None

    def domain_keys(self, ranks: Sequence[int]) -> np.ndarray | None:
        """:meth:`domain_key` of each of ``ranks`` at once (an integer array), or None where a
        domain is not one NVSwitch."""
        if self._all_stars is None:
            self._all_stars = all(self._star)
        if not self._all_stars:
            return None
        gpus = np.asarray(ranks, dtype=np.int64)
        if self.placement is not None:
            if self._placement_array is None:
                self._placement_array = np.asarray(self.placement, dtype=np.int64)
            gpus = self._placement_array[gpus]
        if self._index is not None:
            return gpus // self._index.domain_size
        if self._domain_array is None:
            self._domain_array = np.asarray(self._domain, dtype=np.int64)
        return self._domain_array[gpus]

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
        return all(all(kinds[link] == LinkKind.NVLINK for link in self.route(ranks[0], r).links) for r in ranks[1:])
