"""Build a NetworkX graph of GPUs, switches and NICs from a :class:`TopologySpec`.

Written like NetworkX's generators: a pure function that returns a graph and documents its
attributes.

Nodes carry ``kind`` (a :class:`~sim.types.NodeKind`: GPU, NVSwitch, NIC, leaf, spine,
router); GPU nodes are named ``gpu{rank}`` and carry ``rank``, ``node`` and
``local_gpu``; NVSwitches are ``nvs{domain}`` with ``domain``. The scale-out fabric (a
leaf-spine fat tree in one or more planes, a torus, or a dragonfly) is added by
:mod:`sim.topology.fabrics`, which documents its nodes.
Edges are directed (one per link direction) and carry ``bandwidth_bytes_per_s``,
``latency_s``, ``efficiency`` (an :class:`~sim.hardware.EfficiencyCurve` of message size),
``link`` (a :class:`~sim.types.LinkKind`: NVLink, PCIe, network), ``hop_weight`` (used for routing) and
``link_id`` (a dense integer index, the flow network's handle). The graph itself carries
``collective_latency_s`` (the system's fixed latency per collective) and ``nvls_efficiency``
(NVLink SHARP's efficiency curve, or None where the switches have none), which the planner
(:mod:`sim.costs.comm`) reads.

References
----------
NVIDIA, "HGX AI factory reference architecture: network logical architecture": GPUs reach the
compute fabric through a rail-optimized, non-blocking leaf-spine fat tree (NIC i of every node
of a scalable unit on leaf i).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sim.errors import ConfigError
from sim.topology.fabrics import HOP_WEIGHT, add_dragonfly, add_fat_tree, add_link, add_torus
from sim.topology.spec import FabricKind, LinkSpec, ScaleUpKind, TopologySpec
from sim.types import LinkKind, NodeKind

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["build_topology", "graph_size", "ring_topology_spec", "HOP_WEIGHT"]

_FABRICS = {FabricKind.RAIL_OPTIMIZED_FAT_TREE: add_fat_tree, FabricKind.FAT_TREE: add_fat_tree,
            FabricKind.TORUS: add_torus, FabricKind.DRAGONFLY: add_dragonfly}
"""The scale-out builder of each fabric kind (:mod:`sim.topology.fabrics`)."""


def build_topology(spec: TopologySpec, num_gpus: int) -> nx.DiGraph:
    """Return the directed link graph of ``num_gpus`` GPUs laid out as ``spec`` says.

    Parameters
    ----------
    spec : TopologySpec
        The cluster description.
    num_gpus : int
        How many GPUs to build; must equal ``spec.num_gpus`` when the spec fixes its size.

    Raises
    ------
    ConfigError
        If the sizes do not fit together.

    Examples
    --------
    >>> from sim.topology.spec import *
    >>> s = ring_topology_spec(4, bandwidth_bytes_per_s=1e9, latency_s=1e-6)
    >>> g = build_topology(s, 4)
    >>> sorted(n for n, d in g.nodes(data=True) if d["kind"] == "gpu")
    ['gpu0', 'gpu1', 'gpu2', 'gpu3']
    >>> g.number_of_edges()
    8
    """
    if spec.graph_file is not None:
        from sim.topology.graphml import read_graphml_topology

        g = read_graphml_topology(spec.graph_file)
        have = sum(1 for _, d in g.nodes(data=True) if d["kind"] == NodeKind.GPU)
        if have != num_gpus:
            raise ConfigError(spec.graph_file, "nodes", f"the workload's GPU count {num_gpus} (a GraphML "
                              "topology has a fixed size)", have)
        return _apply_faults(g, spec, num_gpus)
    if spec.num_gpus is not None and spec.num_gpus != num_gpus:
        raise ConfigError(spec.origin, "num_gpus",
                          f"the workload's GPU count {num_gpus} (the topology fixes its own size)",
                          spec.num_gpus)
    gpn = spec.gpus_per_node
    if num_gpus % gpn and num_gpus > gpn:
        raise ConfigError(spec.origin, "gpus_per_node", f"a divisor of the GPU count {num_gpus}", gpn)
    import networkx as nx  # imported where a graph is built: a fat tree's runs need none

    g = nx.DiGraph(name=spec.name, collective_latency_s=spec.scale_up.collective_latency_s,
                   nvls_efficiency=spec.scale_up.nvls_efficiency if spec.scale_up.kind is ScaleUpKind.NVSWITCH
                   else None, alltoall_efficiency=spec.scale_up.alltoall_efficiency,
                   p2p_efficiency=spec.scale_up.p2p_efficiency,
                   all_gather_efficiency=spec.scale_up.all_gather_efficiency,
                   reduce_scatter_efficiency=spec.scale_up.reduce_scatter_efficiency,
                   scale_out_alltoall_efficiency=spec.scale_out.alltoall_efficiency,
                   scale_out_all_gather_efficiency=spec.scale_out.all_gather_efficiency,
                   scale_out_reduce_scatter_efficiency=spec.scale_out.reduce_scatter_efficiency)
    for r in range(num_gpus):
        g.add_node(f"gpu{r}", kind=NodeKind.GPU, rank=r, node=r // gpn, local_gpu=r % gpn)

    up = spec.scale_up
    dom = min(up.domain_size, num_gpus)
    for d in range(math.ceil(num_gpus / dom)):
        members = [r for r in range(d * dom, min((d + 1) * dom, num_gpus))]
        if up.kind is ScaleUpKind.NVSWITCH:
            sw = f"nvs{d}"
            g.add_node(sw, kind=NodeKind.NVSWITCH, domain=d)
            for r in members:
                add_link(g, f"gpu{r}", sw, up.link, LinkKind.NVLINK)
        else:  # ring
            if len(members) > 1:
                for i, r in enumerate(members):
                    nxt = members[(i + 1) % len(members)]
                    if len(members) == 2 and i == 1:
                        break
                    add_link(g, f"gpu{r}", f"gpu{nxt}", up.link, LinkKind.NVLINK)

    num_nodes = math.ceil(num_gpus / gpn)
    out = spec.scale_out
    if out.kind is not FabricKind.NONE and num_gpus > dom:
        _FABRICS[out.kind](g, spec, num_gpus, num_nodes)
    return _apply_faults(g, spec, num_gpus)


def graph_size(spec: TopologySpec, num_gpus: int) -> tuple[int, int]:
    """How many nodes and directed links :func:`build_topology` makes of ``spec`` at
    ``num_gpus`` (an upper bound where the builder skips some), counted from the spec alone,
    so that a topology too large to build is known before it is built; a dragonfly's count
    adds the global ports :func:`~sim.topology.fabrics.dragonfly_global_links` visits. A
    GraphML topology counts nothing here (its file's size is bounded where it is read).

    >>> from sim.config import load_topology
    >>> spec = load_topology("dgx-a100")
    >>> g = build_topology(spec, 64)
    >>> graph_size(spec, 64) == (g.number_of_nodes(), g.number_of_edges())
    True
    """
    if spec.graph_file is not None:
        return 0, 0
    n, gpn, up, out = num_gpus, spec.gpus_per_node, spec.scale_up, spec.scale_out
    dom = max(1, min(up.domain_size, n))
    domains = -(-n // dom)
    nodes, links = n + (domains if up.kind is ScaleUpKind.NVSWITCH else 0), 2 * n
    if out.kind is FabricKind.NONE or n <= dom:
        return nodes, links
    servers = -(-n // gpn)
    nics = servers * out.nics_per_node
    nodes += nics
    links += 2 * nics + 2 * n
    if out.kind is FabricKind.TORUS:
        routers = math.prod(out.torus.dims)
        nodes += routers
        links += 2 * sum(routers if k >= 3 else routers // 2 if k == 2 else 0 for k in out.torus.dims)
    elif out.kind is FabricKind.DRAGONFLY:
        df = out.dragonfly
        built = -(-servers // df.nodes_per_group)
        routers = built * df.routers_per_group
        ports = df.groups * df.routers_per_group * df.global_links_per_router
        nodes += routers + ports
        links += routers * (df.routers_per_group - 1) + 2 * built * df.routers_per_group * df.global_links_per_router
    else:
        units = -(-servers // out.nodes_per_leaf)
        leaves = units * (out.nics_per_node if out.kind is FabricKind.RAIL_OPTIMIZED_FAT_TREE else out.planes)
        nodes += leaves + out.planes
        links += 2 * leaves
    return nodes, links


def _apply_faults(g: nx.DiGraph, spec: TopologySpec, num_gpus: int) -> nx.DiGraph:
    """Slow down or remove the faulty links, check every GPU still reaches every other, and
    number the links (``link_id``)."""
    for i, fault in enumerate(spec.faults):
        if not (g.has_edge(fault.u, fault.v) and g.has_edge(fault.v, fault.u)):
            raise ConfigError(spec.origin, f"faults[{i}].between", "two adjacent nodes of the built topology "
                              "(e.g. [gpu0, nvs0], [nic0.0, leaf0.0])", [fault.u, fault.v])
        for a, b in ((fault.u, fault.v), (fault.v, fault.u)):
            if fault.bandwidth_fraction == 0:
                g.remove_edge(a, b)
            else:
                g.edges[a, b]["bandwidth_bytes_per_s"] *= fault.bandwidth_fraction
    if spec.faults:
        import networkx as nx

        to, back = nx.descendants(g, "gpu0"), nx.ancestors(g, "gpu0")  # one search each way, not one per GPU
        lost = [r for r in range(1, num_gpus) if f"gpu{r}" not in to or f"gpu{r}" not in back]
        if lost:
            raise ConfigError(spec.origin, "faults", "failed links that leave every GPU reachable",
                              [f"gpu{r}" for r in lost[:8]])
    for i, (u, v) in enumerate(sorted(g.edges())):
        g.edges[u, v]["link_id"] = i
    return g


def ring_topology_spec(n: int, bandwidth_bytes_per_s: float, latency_s: float) -> TopologySpec:
    """A single ring of ``n`` GPUs with uniform links and no scale-out fabric.

    The topology of the textbook ring all-reduce, ``2(p-1)a + 2(p-1)/p S/B``
    (Patarasuk and Yuan 2009), used by the identity tests.
    """
    from sim.topology.spec import ScaleOutSpec, ScaleUpSpec

    link = LinkSpec(bandwidth_bytes_per_s, latency_s)
    return TopologySpec(
        name=f"ring{n}", gpus_per_node=n,
        scale_up=ScaleUpSpec(ScaleUpKind.RING, link, domain_size=n),
        scale_out=ScaleOutSpec(FabricKind.NONE, link), num_gpus=n,
    )
