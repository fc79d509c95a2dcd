"""Scale-out fabrics: the switches and routers that join the nodes' NICs, added to a graph.

:func:`sim.topology.build.build_topology` lays out the GPUs and their scale-up domains, then
calls one of the builders here for the scale-out fabric. Each adds its switch or router nodes,
links them, and attaches every node's NICs (and the NICs to their GPUs) with
:func:`attach_nodes`. docs/topologies.md describes every builder, its YAML keys and the
presets.

Nodes added here carry ``kind``:

* ``"nic"`` ``nic{node}.{j}``: ``node`` (the server's index) and ``plane`` (0 unless the fat
  tree has several planes);
* ``"leaf"`` ``leaf{unit}.{i}`` and ``"spine"`` (``spine``, or ``spine.p{k}`` with several
  planes): ``plane``, and for a leaf ``unit`` and ``rail`` (the NIC index of a rail-optimized
  leaf; the plane of a plain fat tree's leaf);
* ``"router"``: a torus's ``router{n}`` with ``coords`` (a tuple, first dimension fastest), or
  a dragonfly's ``router{g}.{r}`` with ``group`` and ``index``.

Edges carry the attributes every edge of the graph carries (``bandwidth_bytes_per_s``,
``latency_s``, ``efficiency``, ``link`` = ``"network"`` here, ``hop_weight``); fabric links
take the NIC's efficiency curve. ``link_id`` is numbered afterwards, once for the whole graph.

References
----------
NVIDIA, "HGX AI factory reference architecture: network logical architecture" (rail-optimized
leaf-spine fat tree).
Zhao et al. 2025, "Insights into DeepSeek-V3: Scaling Challenges and Reflections on Hardware
for AI Architectures", arXiv 2505.09343, Sec. 5 (multi-plane fat tree: each GPU-NIC pair in
its own plane).
Jouppi et al. 2023, "TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning
with Hardware Support for Embeddings", arXiv 2304.01433 (3D torus of chips).
Kim, Dally, Scott and Abts 2008, "Technology-Driven, Highly-Scalable Dragonfly Topology",
ISCA (groups, local and global channels, minimal routing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from sim.errors import ConfigError
from sim.topology.spec import FabricKind, LinkSpec, TopologySpec
from sim.types import LinkKind, NodeKind

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["HOP_WEIGHT", "GLOBAL_HOP_WEIGHT", "add_link", "add_fat_tree", "add_torus", "add_dragonfly",
           "attach_nodes", "torus_coords", "dragonfly_global_links"]

HOP_WEIGHT = {LinkKind.NVLINK: 1.5, LinkKind.PCIE: 2.0, LinkKind.NETWORK: 1.0}
"""Routing weight of an edge by link type: GPU-to-GPU traffic inside a node stays on NVLink
(two NVLink hops, 3.0, beat going through a shared NIC, 4.0), and cross-node traffic leaves
through the sender's own NIC rather than through a peer GPU."""

GLOBAL_HOP_WEIGHT = 2.5
"""Routing weight of a dragonfly global link: more than two local hops, so that shortest paths
are the dragonfly's minimal routes (at most one global hop: local, global, local; Kim et al.
2008, Sec. 4) and never two global hops through a third group."""


def add_link(g: nx.DiGraph, u: str, v: str, spec: LinkSpec, link: str, both: bool = True,
             bandwidth_scale: float = 1.0, hop_weight: float | None = None) -> None:
    """Add the edge ``u -> v`` (and ``v -> u`` when ``both``) with the documented attributes."""
    for a, b in ((u, v), (v, u)) if both else ((u, v),):
        g.add_edge(a, b, bandwidth_bytes_per_s=spec.bandwidth_bytes_per_s * bandwidth_scale,
                   latency_s=spec.latency_s, efficiency=spec.efficiency, link=link,
                   hop_weight=HOP_WEIGHT[link] if hop_weight is None else hop_weight)


def _fabric_link(spec: TopologySpec, link: LinkSpec) -> LinkSpec:
    """A router-to-router link with the NIC's efficiency curve."""
    return LinkSpec(link.bandwidth_bytes_per_s, link.latency_s, spec.scale_out.nic.efficiency)


def attach_nodes(g: nx.DiGraph, spec: TopologySpec, num_gpus: int, num_nodes: int,
                 switch_of: Callable[[int, int], str], plane_of: Callable[[int], int] = lambda j: 0) -> None:
    """Add every node's NICs, link NIC ``j`` of node ``n`` to ``switch_of(n, j)`` and each GPU
    to its NIC (``nics_per_node / gpus_per_node`` GPUs per NIC, or NIC ``i`` for GPU ``i`` when
    there are more NICs than GPUs).

    Raises
    ------
    ConfigError
        If the NICs per node neither divide nor are a multiple of the GPUs per node.
    """
    out, gpn = spec.scale_out, spec.gpus_per_node
    nics = out.nics_per_node
    if gpn % nics and nics % gpn:
        raise ConfigError(spec.origin, "scale_out.nics_per_node",
                          f"a divisor or multiple of gpus_per_node={gpn}", nics)
    pcie = out.pcie or LinkSpec(bandwidth_bytes_per_s=math.inf, latency_s=0.0)
    for n in range(num_nodes):
        for j in range(nics):
            nic = f"nic{n}.{j}"
            g.add_node(nic, kind=NodeKind.NIC, node=n, plane=plane_of(j))
            add_link(g, nic, switch_of(n, j), out.nic, LinkKind.NETWORK)
        for lg in range(gpn):
            r = n * gpn + lg
            if r >= num_gpus:
                break
            j = lg * nics // gpn if nics <= gpn else lg
            add_link(g, f"gpu{r}", f"nic{n}.{j}", pcie, LinkKind.PCIE)


def add_fat_tree(g: nx.DiGraph, spec: TopologySpec, num_gpus: int, num_nodes: int) -> None:
    """A two-level leaf-spine fat tree in ``planes`` independent planes.

    Nodes are grouped in scalable units of ``nodes_per_leaf``. Rail-optimized: NIC ``j`` of
    every node of unit ``u`` is on leaf ``leaf{u}.{j}``; plain: the NICs of a node in plane
    ``k`` are on leaf ``leaf{u}.{k}``. NIC ``j`` is in plane ``j * planes // nics_per_node``;
    each plane's leaves uplink to its own spine (``spine`` with one plane, ``spine.p{k}``
    otherwise), modelled as one non-blocking switch whose link from each leaf carries the
    leaf's NIC bandwidth over ``oversubscription``. Planes share no switch, so traffic between
    NICs of different planes crosses inside a node (NVLink) first.
    """
    out = spec.scale_out
    nics, planes = out.nics_per_node, out.planes
    units = math.ceil(num_nodes / out.nodes_per_leaf)
    rail_optimized = out.kind is FabricKind.RAIL_OPTIMIZED_FAT_TREE
    leaves = nics if rail_optimized else planes  # leaves per unit

    def plane_of(j: int) -> int:
        return j * planes // nics

    def spine(k: int) -> str:
        return "spine" if planes == 1 else f"spine.p{k}"

    for k in range(planes):
        g.add_node(spine(k), kind=NodeKind.SPINE, plane=k)
    for u in range(units):
        nodes_here = min(out.nodes_per_leaf, num_nodes - u * out.nodes_per_leaf)
        for i in range(leaves):
            k = plane_of(i) if rail_optimized else i
            leaf = f"leaf{u}.{i}"
            g.add_node(leaf, kind=NodeKind.LEAF, unit=u, rail=i, plane=k)
            nics_on_leaf = nodes_here * (1 if rail_optimized else nics // planes)
            uplink = LinkSpec(out.nic.bandwidth_bytes_per_s * nics_on_leaf / out.oversubscription,
                              out.switch_latency_s, out.nic.efficiency)
            add_link(g, leaf, spine(k), uplink, LinkKind.NETWORK)

    def leaf_of(n: int, j: int) -> str:
        return f"leaf{n // out.nodes_per_leaf}.{j if rail_optimized else plane_of(j)}"

    attach_nodes(g, spec, num_gpus, num_nodes, leaf_of, plane_of)


def torus_coords(n: int, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Coordinates of position ``n`` in a torus of ``dims``, the first dimension fastest.

    >>> torus_coords(5, (4, 4)), torus_coords(17, (4, 4, 4))
    ((1, 1), (1, 0, 1))
    """
    out = []
    for k in dims:
        out.append(n % k)
        n //= k
    return tuple(out)


def add_torus(g: nx.DiGraph, spec: TopologySpec, num_gpus: int, num_nodes: int) -> None:
    """A torus of ``prod(dims)`` routers ``router{n}``; node ``n``'s NICs attach to
    ``router{n}``, and every router links to its neighbours one step up each dimension (so to
    the ones a step down too), wrapping around; a size-2 dimension gets one link, a size-1
    dimension none. Routers without a node still forward traffic.

    Router-to-router directed edges: ``2 * sum(N if k >= 3 else N / 2 if k == 2 else 0 for k
    in dims)`` with ``N = prod(dims)``.

    Raises
    ------
    ConfigError
        If the torus has fewer routers than the workload has nodes.
    """
    torus = spec.scale_out.torus
    dims, n_routers = torus.dims, torus.num_routers
    if num_nodes > n_routers:
        raise ConfigError(spec.origin, "scale_out.dims",
                          f"a torus of at least the workload's {num_nodes} nodes ({num_gpus} GPUs, "
                          f"{spec.gpus_per_node} per node)", list(dims))
    link = _fabric_link(spec, torus.link)
    strides = [math.prod(dims[:d]) for d in range(len(dims))]
    for n in range(n_routers):
        g.add_node(f"router{n}", kind=NodeKind.ROUTER, coords=torus_coords(n, dims))
    for n in range(n_routers):
        c = torus_coords(n, dims)
        for d, k in enumerate(dims):
            if k < 2:
                continue
            m = n + (((c[d] + 1) % k) - c[d]) * strides[d]
            a, b = f"router{n}", f"router{m}"
            if not g.has_edge(a, b):  # a size-2 dimension: the wraparound is the same link
                add_link(g, a, b, link, LinkKind.NETWORK)
    attach_nodes(g, spec, num_gpus, num_nodes, lambda n, j: f"router{n}")


def dragonfly_global_links(groups: int, routers: int, per_router: int) -> dict[tuple[int, int, int, int], int]:
    """The global cabling: ``{(group i, router r, group j, router s): cables}`` for ``i < j``.

    Group ``i``'s global port ``m`` (router ``m // per_router``) leads to group ``t`` or
    ``t + 1`` (skipping ``i``) with ``t = m mod (groups - 1)``: copy ``c = m // (groups - 1)``
    of the ``i``-``j`` link, which lands on port ``c (groups - 1) + (i if i < j else i - 1)``
    of group ``j``. Ports past the last whole copy stay unused. Several cables between the
    same two routers are one edge with their summed bandwidth.

    >>> dragonfly_global_links(3, 2, 1)  # 3 groups of 2 routers, one global port each
    {(0, 0, 1, 0): 1, (0, 1, 2, 0): 1, (1, 1, 2, 1): 1}
    """
    out: dict[tuple[int, int, int, int], int] = {}
    if groups < 2:
        return out
    copies = routers * per_router // (groups - 1)
    for i in range(groups):
        for m in range(copies * (groups - 1)):
            c, t = divmod(m, groups - 1)
            j = t if t < i else t + 1
            if j < i:
                continue
            back = c * (groups - 1) + (i if i < j else i - 1)
            key = (i, m // per_router, j, back // per_router)
            out[key] = out.get(key, 0) + 1
    return out


def add_dragonfly(g: nx.DiGraph, spec: TopologySpec, num_gpus: int, num_nodes: int) -> None:
    """A dragonfly: routers ``router{g}.{r}``, all-to-all local links inside each group, and
    the global links of :func:`dragonfly_global_links`. Node ``n`` sits on router
    ``(n // nodes_per_router) mod routers_per_group`` of group ``n // nodes_per_group``, and all
    its NICs attach there.

    Only the groups holding nodes are built: minimal routes (local, global, local; enforced by
    :data:`GLOBAL_HOP_WEIGHT`) never cross a third group, so the others would carry nothing.
    Global links get ``hop_weight`` :data:`GLOBAL_HOP_WEIGHT`.

    Raises
    ------
    ConfigError
        If the dragonfly has room for fewer nodes than the workload has.
    """
    df = spec.scale_out.dragonfly
    a, p = df.routers_per_group, df.nodes_per_router
    if num_nodes > df.groups * df.nodes_per_group:
        raise ConfigError(spec.origin, "scale_out.groups",
                          f"enough groups of {df.nodes_per_group} nodes for the workload's {num_nodes} "
                          f"nodes ({num_gpus} GPUs, {spec.gpus_per_node} per node)", df.groups)
    built = math.ceil(num_nodes / df.nodes_per_group)
    local, glob = _fabric_link(spec, df.local), _fabric_link(spec, df.global_link)
    for grp in range(built):
        for r in range(a):
            g.add_node(f"router{grp}.{r}", kind=NodeKind.ROUTER, group=grp, index=r)
    for grp in range(built):
        for r in range(a):
            for s in range(r + 1, a):
                add_link(g, f"router{grp}.{r}", f"router{grp}.{s}", local, LinkKind.NETWORK)
    for (i, r, j, s), cables in dragonfly_global_links(df.groups, a, df.global_links_per_router).items():
        if j < built:
            add_link(g, f"router{i}.{r}", f"router{j}.{s}", glob, LinkKind.NETWORK, bandwidth_scale=cables,
                     hop_weight=GLOBAL_HOP_WEIGHT)
    attach_nodes(g, spec, num_gpus, num_nodes,
                 lambda n, j: f"router{n // df.nodes_per_group}.{(n // p) % a}")
