"""A workload's published scale-out network (``system.network``), and its mapping onto a topology.

A validation case or workload file may say what fabric its source ran on, in numbers:
``system.network: {nics_per_node, nic_bandwidth_Gbps, fabric}`` and, where published,
``node_bandwidth_Gbps`` (the per-node total when the NIC split is not given), ``pod_gpus`` and
``between_pods_oversubscription`` (a Clos whose pods of that many GPUs are full-bisection inside
and oversubscribed between; workloads/validation/README.md). :class:`NetworkSpec` holds it in
SI units; :func:`apply_network` puts it on a topology's leaf-spine fat tree
(:mod:`sim.topology.fabrics`), a field left null keeping the topology's value:

* NICs per node and per-NIC bandwidth replace the topology's (the node total over the NICs
  when only the total is published). The builders give each NIC ``nics / gpus_per_node`` GPUs
  (:func:`sim.topology.fabrics.attach_nodes`), so a count that neither divides nor is a
  multiple of the GPUs per node, or that exceeds them, is modelled as the nearest count that
  does, carrying the same node total (a note says so).
* ``infiniband-fat-tree``, ``roce`` and ``omni-path`` keep the topology's fat-tree kind
  (rail-optimized on the DGX/HGX presets), its per-link efficiency and its latency. For RoCE no
  source found gives NCCL a different efficiency: Meta ran Llama 3 on its 24K-GPU RoCE cluster
  and an InfiniBand twin "without any network bottlenecks" after tuning both ("Building Meta's
  GenAI Infrastructure", Engineering at Meta, 2024-03-12), and IBM reports its RoCE H100
  clusters' NCCL benchmarks "near line rate" and production training "similar ... to Infiniband"
  ("Designing RoCE Networks for AI Workloads", IBM Research keynote, 2024). NCCL's own
  latencies do not tell the two apart: both run its IB verbs transport (``src/graph/tuning.cc``
  has one ``NET`` latency). For Omni-Path no published NCCL figures were found: it is modelled
  with the InfiniBand values, with a note.
* ``roce-clos`` is a Clos of pods: a plain fat tree (every NIC of a node on its pod's leaf),
  the leaf being one full-bisection switch per pod of ``pod_gpus`` GPUs (``nodes_per_leaf`` =
  ``pod_gpus / gpus_per_node``) and the uplinks to the spine oversubscribed by
  ``between_pods_oversubscription``, so only cross-pod flows see it. The pod's own two tiers
  (top-of-rack and cluster switches) are one switch here: full bisection inside a pod has no
  other effect on bandwidth, and their extra hop latency is not modelled.
* ``pod_gpus`` and ``between_pods_oversubscription`` with another fabric set the same two keys
  on the topology's own fat-tree kind.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum

from sim.errors import ConfigError
from sim.topology.spec import FAT_TREE_KINDS, FabricKind, LinkSpec, TopologySpec
from sim.units import GBIT_PER_S

__all__ = ["NetworkFabric", "NetworkSpec", "NetworkApplied", "apply_network", "NODE_BANDWIDTH_TOLERANCE"]

_SPEC = "<spec>"
_FIELD = "system.network"

NODE_BANDWIDTH_TOLERANCE = 0.01
"""Relative difference allowed between ``node_bandwidth_Gbps`` and NICs x NIC bandwidth when
both are published (sources round: "1.6 Tb/s" for 8 x 200 Gb/s)."""


class NetworkFabric(str, Enum):
    """The scale-out fabric a source names (workloads/validation/README.md)."""

    INFINIBAND_FAT_TREE = "infiniband-fat-tree"
    ROCE = "roce"
    """RDMA over Converged Ethernet, in the topology's fat-tree shape."""
    ROCE_CLOS = "roce-clos"
    """RoCE in a Clos of pods, full-bisection inside a pod, oversubscribed between pods."""
    OMNI_PATH = "omni-path"


@dataclass(frozen=True)
class NetworkSpec:
    """A published scale-out network; every field None means "not published: keep the
    topology's"."""

    fabric: NetworkFabric | None = None
    nics_per_node: int | None = None
    nic_bandwidth_bytes_per_s: float | None = None
    """Each NIC's bandwidth, per direction."""
    node_bandwidth_bytes_per_s: float | None = None
    """All NICs of a node together, per direction."""
    pod_gpus: int | None = None
    """GPUs in one full-bisection pod."""
    between_pods_oversubscription: float | None = None
    """A pod's bandwidth to its NICs over its bandwidth to other pods; 1 is non-blocking."""

    def __post_init__(self) -> None:
        for name in ("nics_per_node", "pod_gpus"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(_SPEC, f"{_FIELD}.{name}", "a positive integer", value)
        for name, key in (("nic_bandwidth_bytes_per_s", "nic_bandwidth_Gbps"),
                          ("node_bandwidth_bytes_per_s", "node_bandwidth_Gbps")):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise ConfigError(_SPEC, f"{_FIELD}.{key}", "a positive bandwidth in Gb/s",
                                  value if value is None else value / GBIT_PER_S)
        over = self.between_pods_oversubscription
        if over is not None and not (over >= 1 and math.isfinite(over)):
            raise ConfigError(_SPEC, f"{_FIELD}.between_pods_oversubscription",
                              "a ratio >= 1 (1 is non-blocking)", over)
        if self.fabric is not None and not isinstance(self.fabric, NetworkFabric):
            raise ConfigError(_SPEC, f"{_FIELD}.fabric", f"one of {[f.value for f in NetworkFabric]}", self.fabric)
        nic, node = self.nic_bandwidth_bytes_per_s, self.node_bandwidth_bytes_per_s
        if nic is not None and node is not None:
            if self.nics_per_node is not None:
                total = self.nics_per_node * nic
                if abs(total - node) > NODE_BANDWIDTH_TOLERANCE * node:
                    raise ConfigError(_SPEC, f"{_FIELD}.node_bandwidth_Gbps",
                                      f"nics_per_node x nic_bandwidth_Gbps = {self.nics_per_node} x "
                                      f"{nic / GBIT_PER_S:g} = {total / GBIT_PER_S:g} (within 1%), or null",
                                      node / GBIT_PER_S)
            elif round(node / nic) < 1 or abs(node / nic - round(node / nic)) > NODE_BANDWIDTH_TOLERANCE * node / nic:
                raise ConfigError(_SPEC, f"{_FIELD}.node_bandwidth_Gbps",
                                  f"a whole multiple of nic_bandwidth_Gbps={nic / GBIT_PER_S:g} (the NICs per "
                                  "node), or nics_per_node given", node / GBIT_PER_S)

    @property
    def nics(self) -> int | None:
        """NICs per node: published, or the node total over the per-NIC bandwidth."""
        if self.nics_per_node is not None:
            return self.nics_per_node
        if self.nic_bandwidth_bytes_per_s is not None and self.node_bandwidth_bytes_per_s is not None:
            return round(self.node_bandwidth_bytes_per_s / self.nic_bandwidth_bytes_per_s)
        return None

    def describe(self) -> str:
        """The network in the words of the file.

        >>> NetworkSpec(NetworkFabric.ROCE, 8, 400 * GBIT_PER_S).describe()
        '8 x 400 Gb/s roce'
        >>> NetworkSpec(node_bandwidth_bytes_per_s=1600 * GBIT_PER_S, pod_gpus=1024,
        ...             between_pods_oversubscription=7).describe()
        '1600 Gb/s per node, pods of 1024 GPUs, 7:1 between pods'
        """
        parts = []
        nics, nic = self.nics, self.nic_bandwidth_bytes_per_s
        if nic is not None:
            parts.append(f"{nics} x {_gbps(nic)}" if nics is not None else f"{_gbps(nic)} per NIC")
        elif self.node_bandwidth_bytes_per_s is not None:
            parts.append(f"{_gbps(self.node_bandwidth_bytes_per_s)} per node"
                         + (f" over {nics} NICs" if nics is not None else ""))
        elif nics is not None:
            parts.append(f"{nics} NICs")
        head = " ".join(parts + ([self.fabric.value] if self.fabric is not None else []))
        tail = ([f"pods of {self.pod_gpus} GPUs"] if self.pod_gpus is not None else []) + \
            ([f"{self.between_pods_oversubscription:g}:1 between pods"]
             if self.between_pods_oversubscription is not None else [])
        return ", ".join(([head] if head else []) + tail) or "nothing published"


def _gbps(bytes_per_s: float) -> str:
    return f"{bytes_per_s / GBIT_PER_S:g} Gb/s"


@dataclass(frozen=True)
class NetworkApplied:
    """A topology with a workload's network on it, and the note that says what changed."""

    topology: TopologySpec
    note: str | None
    """What the network changed or how it is modelled; None when it is the topology's own."""


def _modelled_nics(nics: int, gpus_per_node: int) -> int:
    """The NIC count the builders can attach (:func:`sim.topology.fabrics.attach_nodes` gives
    each NIC ``nics / gpus_per_node`` GPUs, or NIC ``i`` to GPU ``i``): ``nics`` when it divides
    the GPUs per node, else the GPUs per node when there are more NICs, else the largest
    divisor below ``nics``.

    >>> _modelled_nics(4, 8), _modelled_nics(16, 8), _modelled_nics(6, 8), _modelled_nics(3, 4)
    (4, 8, 4, 2)
    """
    if gpus_per_node % nics == 0:
        return nics
    if nics > gpus_per_node:
        return gpus_per_node
    return max(d for d in range(1, nics) if gpus_per_node % d == 0)


def apply_network(topology: TopologySpec, network: NetworkSpec) -> NetworkApplied:
    """``topology`` with ``network`` as its scale-out fabric (the module docstring's mapping).

    Raises
    ------
    ConfigError
        When the topology has no leaf-spine fat tree to apply the network to (a torus, a
        dragonfly, a single node, a GraphML file).

    >>> from sim.config import load_topology
    >>> r = apply_network(load_topology("dgx-h100"), NetworkSpec(NetworkFabric.ROCE, 4, 200 * GBIT_PER_S))
    >>> r.topology.scale_out.nics_per_node, r.topology.scale_out.nic.bandwidth_bytes_per_s * 8 / 1e9
    (4, 200.0)
    >>> print(r.note)  # doctest: +NORMALIZE_WHITESPACE
    system.network: 4 x 200 Gb/s roce -> dgx-h100's scale-out: 4 NICs per node (of 8); 200 Gb/s per NIC
    (of 400 Gb/s); RoCE with the topology's InfiniBand efficiency and latency (Meta and IBM report RoCE
    and InfiniBand clusters alike for training)
    """
    out = topology.scale_out
    if topology.graph_file is not None or out.kind not in FAT_TREE_KINDS:
        what = "a GraphML file" if topology.graph_file is not None else f"a {out.kind.value} fabric"
        raise ConfigError(f"<{topology.name}>", _FIELD, f"a topology with a leaf-spine fat tree to put the "
                          f"network on (topology {topology.name} has {what}; system.network: null keeps it)",
                          network.describe())
    gpn = topology.gpus_per_node
    changes: list[str] = []
    nics = network.nics or out.nics_per_node
    if network.nic_bandwidth_bytes_per_s is not None:
        per_nic = network.nic_bandwidth_bytes_per_s
    elif network.node_bandwidth_bytes_per_s is not None:
        per_nic = network.node_bandwidth_bytes_per_s / nics
    else:
        per_nic = out.nic.bandwidth_bytes_per_s
    modelled = _modelled_nics(nics, gpn)
    if modelled != nics:
        changes.append(f"{nics} NICs of {_gbps(per_nic)} modelled as {modelled} of "
                       f"{_gbps(per_nic * nics / modelled)} (the same node total; the builders give every "
                       f"NIC the same share of the node's {gpn} GPUs)")
        per_nic = per_nic * nics / modelled
    elif modelled != out.nics_per_node:
        changes.append(f"{modelled} NICs per node (of {out.nics_per_node})")
    if modelled == nics and per_nic != out.nic.bandwidth_bytes_per_s:
        changes.append(f"{_gbps(per_nic)} per NIC (of {_gbps(out.nic.bandwidth_bytes_per_s)})")
    planes = math.gcd(out.planes, modelled)
    if planes != out.planes:
        changes.append(f"{planes} planes (of {out.planes}: each plane needs as many NICs per node)")
    kind, nodes_per_leaf, oversub = out.kind, out.nodes_per_leaf, out.oversubscription
    if network.fabric is NetworkFabric.ROCE_CLOS and kind is not FabricKind.FAT_TREE:
        kind = FabricKind.FAT_TREE
        changes.append(f"a Clos of pods: {FabricKind.FAT_TREE.value} (every NIC of a node on its pod's "
                       f"leaf; of {out.kind.value})")
    if network.pod_gpus is not None:
        nodes_per_leaf = max(1, math.ceil(network.pod_gpus / gpn))
        if nodes_per_leaf != out.nodes_per_leaf:
            exact = "" if network.pod_gpus % gpn == 0 else f", {network.pod_gpus} GPUs rounded up to whole nodes"
            changes.append(f"pods of {nodes_per_leaf} nodes under one leaf (of {out.nodes_per_leaf}{exact})")
    if network.between_pods_oversubscription is not None:
        oversub = network.between_pods_oversubscription
        if oversub != out.oversubscription:
            pods = "" if network.pod_gpus is not None else f"; pods: the topology's units of {nodes_per_leaf} nodes"
            changes.append(f"{oversub:g}:1 oversubscribed between pods (of {out.oversubscription:g}:1{pods})")
    if network.fabric is NetworkFabric.ROCE:
        changes.append("RoCE with the topology's InfiniBand efficiency and latency (Meta and IBM report RoCE "
                       "and InfiniBand clusters alike for training)")
    elif network.fabric is NetworkFabric.OMNI_PATH:
        changes.append("Omni-Path with the topology's InfiniBand efficiency and latency (no published NCCL "
                       "figures for Omni-Path found)")
    nic = LinkSpec(per_nic, out.nic.latency_s, out.nic.efficiency)
    scale_out = dataclasses.replace(out, kind=kind, nic=nic, nics_per_node=modelled, planes=planes,
                                    nodes_per_leaf=nodes_per_leaf, oversubscription=oversub)
    changed = scale_out != out
    note = f"system.network: {network.describe()} -> {topology.name}'s scale-out: {'; '.join(changes)}" \
        if changes else None
    if not changed:
        return NetworkApplied(topology, note)
    return NetworkApplied(dataclasses.replace(topology, scale_out=scale_out), note)
