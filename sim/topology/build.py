"""Build a NetworkX graph of GPUs, switches and NICs from a :class:`TopologySpec`.

Written like NetworkX's generators: a pure function that returns a graph and documents its
attributes.

Nodes carry ``kind`` (``"gpu"``, ``"nvswitch"``, ``"nic"``, ``"leaf"``, ``"spine"``); GPU
nodes are named ``gpu{rank}`` and carry ``rank``, ``node`` and ``local_gpu``.
Edges are directed (one per link direction) and carry ``bandwidth_bytes_per_s``,
``latency_s``, ``efficiency`` (an :class:`~sim.hardware.EfficiencyCurve` of message size),
``link`` (``"nvlink"``, ``"pcie"``, ``"network"``), ``hop_weight`` (used for routing) and
``link_id`` (a dense integer index, the flow network's handle).

References
----------
NVIDIA, "HGX AI factory reference architecture: network logical architecture": GPUs reach the
compute fabric through a rail-optimized, non-blocking leaf-spine fat tree (NIC i of every node
of a scalable unit on leaf i).
"""

from __future__ import annotations

import math

import networkx as nx

from sim.errors import ConfigError
from sim.topology.spec import FabricKind, LinkSpec, ScaleUpKind, TopologySpec

__all__ = ["build_topology", "ring_topology_spec", "HOP_WEIGHT"]

HOP_WEIGHT = {"nvlink": 1.5, "pcie": 2.0, "network": 1.0}
"""Routing weight of an edge by link type: GPU-to-GPU traffic inside a node stays on NVLink
(two NVLink hops, 3.0, beat going through a shared NIC, 4.0), and cross-node traffic leaves
through the sender's own NIC rather than through a peer GPU."""


def _add_link(g: nx.DiGraph, u: str, v: str, spec: LinkSpec, link: str, both: bool = True,
              bandwidth_scale: float = 1.0) -> None:
    for a, b in ((u, v), (v, u)) if both else ((u, v),):
        g.add_edge(a, b, bandwidth_bytes_per_s=spec.bandwidth_bytes_per_s * bandwidth_scale,
                   latency_s=spec.latency_s, efficiency=spec.efficiency, link=link,
                   hop_weight=HOP_WEIGHT[link])


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
        have = sum(1 for _, d in g.nodes(data=True) if d["kind"] == "gpu")
        if have != num_gpus:
            raise ConfigError(spec.graph_file, "nodes", f"the workload's GPU count {num_gpus} (a GraphML "
                              "topology has a fixed size)", have)
        return _apply_faults(g, spec, num_gpus)
    if spec.num_gpus is not None and spec.num_gpus != num_gpus:
        raise ConfigError(spec.name, "num_gpus",
                          f"the workload's GPU count {num_gpus} (the topology fixes its own size)",
                          spec.num_gpus)
    gpn = spec.gpus_per_node
    if num_gpus % gpn and num_gpus > gpn:
        raise ConfigError(spec.name, "gpus_per_node", f"a divisor of the GPU count {num_gpus}", gpn)
    g = nx.DiGraph(name=spec.name)
    for r in range(num_gpus):
        g.add_node(f"gpu{r}", kind="gpu", rank=r, node=r // gpn, local_gpu=r % gpn)

    up = spec.scale_up
    dom = min(up.domain_size, num_gpus)
    for d in range(math.ceil(num_gpus / dom)):
        members = [r for r in range(d * dom, min((d + 1) * dom, num_gpus))]
        if up.kind is ScaleUpKind.NVSWITCH:
            sw = f"nvs{d}"
            g.add_node(sw, kind="nvswitch", domain=d)
            for r in members:
                _add_link(g, f"gpu{r}", sw, up.link, "nvlink")
        else:  # ring
            if len(members) > 1:
                for i, r in enumerate(members):
                    nxt = members[(i + 1) % len(members)]
                    if len(members) == 2 and i == 1:
                        break
                    _add_link(g, f"gpu{r}", f"gpu{nxt}", up.link, "nvlink")

    num_nodes = math.ceil(num_gpus / gpn)
    out = spec.scale_out
    if out.kind is not FabricKind.NONE and num_gpus > dom:
        _build_fabric(g, spec, num_gpus, num_nodes)
    return _apply_faults(g, spec, num_gpus)


def _apply_faults(g: nx.DiGraph, spec: TopologySpec, num_gpus: int) -> nx.DiGraph:
    """Slow down or remove the faulty links, check every GPU still reaches every other, and
    number the links (``link_id``)."""
    for i, fault in enumerate(spec.faults):
        if not (g.has_edge(fault.u, fault.v) and g.has_edge(fault.v, fault.u)):
            raise ConfigError(spec.name, f"faults[{i}].between", "two adjacent nodes of the built topology "
                              "(e.g. [gpu0, nvs0], [nic0.0, leaf0.0])", [fault.u, fault.v])
        for a, b in ((fault.u, fault.v), (fault.v, fault.u)):
            if fault.bandwidth_fraction == 0:
                g.remove_edge(a, b)
            else:
                g.edges[a, b]["bandwidth_bytes_per_s"] *= fault.bandwidth_fraction
    if spec.faults:
        lost = [r for r in range(1, num_gpus) if not (nx.has_path(g, "gpu0", f"gpu{r}")
                                                      and nx.has_path(g, f"gpu{r}", "gpu0"))]
        if lost:
            raise ConfigError(spec.name, "faults", "failed links that leave every GPU reachable",
                              [f"gpu{r}" for r in lost[:8]])
    for i, (u, v) in enumerate(sorted(g.edges())):
        g.edges[u, v]["link_id"] = i
    return g


def _build_fabric(g: nx.DiGraph, spec: TopologySpec, num_gpus: int, num_nodes: int) -> None:
    out, gpn = spec.scale_out, spec.gpus_per_node
    nics = out.nics_per_node
    if gpn % nics and nics % gpn:
        raise ConfigError(spec.name, "scale_out.nics_per_node",
                          f"a divisor or multiple of gpus_per_node={gpn}", nics)
    units = math.ceil(num_nodes / out.nodes_per_leaf)
    rails = nics if out.kind is FabricKind.RAIL_OPTIMIZED_FAT_TREE else 1
    pcie = out.pcie or LinkSpec(bandwidth_bytes_per_s=math.inf, latency_s=0.0)
    g.add_node("spine", kind="spine")
    for u in range(units):
        nodes_here = min(out.nodes_per_leaf, num_nodes - u * out.nodes_per_leaf)
        for rail in range(rails):
            leaf = f"leaf{u}.{rail}"
            g.add_node(leaf, kind="leaf", unit=u, rail=rail)
            nics_on_leaf = nodes_here * (1 if rails > 1 else nics)
            uplink = LinkSpec(out.nic.bandwidth_bytes_per_s * nics_on_leaf / out.oversubscription,
                              out.switch_latency_s, out.nic.efficiency)
            _add_link(g, leaf, "spine", uplink, "network")
    for n in range(num_nodes):
        u = n // out.nodes_per_leaf
        for j in range(nics):
            nic = f"nic{n}.{j}"
            g.add_node(nic, kind="nic", node=n)
            leaf = f"leaf{u}.{j if rails > 1 else 0}"
            _add_link(g, nic, leaf, out.nic, "network")
        for lg in range(gpn):
            r = n * gpn + lg
            if r >= num_gpus:
                break
            j = lg * nics // gpn if nics <= gpn else lg
            _add_link(g, f"gpu{r}", f"nic{n}.{j}", pcie, "pcie")


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
