"""Topology specs: what a topology YAML describes, in SI units.

A topology is a scale-up domain (GPUs joined by NVLink through NVSwitches) repeated over
nodes, and a scale-out fabric joining the nodes' NICs: a leaf-spine fat tree (rail-optimized or
plain, oversubscribed or not, in one or several planes), a torus of per-node routers
(:class:`TorusSpec`) or a dragonfly of router groups (:class:`DragonflySpec`).
:func:`sim.topology.build.build_topology` turns a :class:`TopologySpec` into a NetworkX graph;
docs/topologies.md describes every builder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from sim.errors import ConfigError
from sim.hardware import EfficiencyCurve

__all__ = ["LinkSpec", "ScaleUpKind", "FabricKind", "ScaleUpSpec", "ScaleOutSpec", "TorusSpec",
           "DragonflySpec", "TopologySpec"]

_SPEC = "<spec>"


@dataclass(frozen=True)
class LinkSpec:
    """One direction of a link.

    The time to move ``size_bytes`` alone on it is
    ``latency_s + size_bytes / (bandwidth_bytes_per_s * efficiency(size_bytes))``; the
    efficiency curve is what nccl-tests measure of the link's peak at each message size.
    """

    bandwidth_bytes_per_s: float
    latency_s: float
    efficiency: EfficiencyCurve = EfficiencyCurve.constant(1.0)

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_per_s > 0:
            raise ConfigError(_SPEC, "bandwidth", "a positive bandwidth", self.bandwidth_bytes_per_s)
        if not self.latency_s >= 0:
            raise ConfigError(_SPEC, "latency", "a non-negative latency", self.latency_s)


class ScaleUpKind(str, Enum):
    NVSWITCH = "nvswitch"
    """Every GPU has one link to a non-blocking switch (DGX/HGX, NVL72)."""
    RING = "ring"
    """GPUs in a ring, each linked to its two neighbours (for tests and identities)."""


class FabricKind(str, Enum):
    RAIL_OPTIMIZED_FAT_TREE = "rail-optimized-fat-tree"
    """NIC i of every node on leaf i of its scalable unit; leaves joined by spines (one spine
    per plane when ``planes > 1``)."""
    FAT_TREE = "fat-tree"
    """All NICs of a node (of one plane) on the same leaf."""
    TORUS = "torus"
    """A 1-, 2- or 3-D torus of routers, one per node, each linked to its two neighbours in
    every dimension with wraparound (TPU-style ICI; Jouppi et al. 2023, arXiv 2304.01433)."""
    DRAGONFLY = "dragonfly"
    """Groups of routers linked all-to-all inside a group, and every pair of groups joined by
    global links (Kim, Dally, Scott and Abts 2008, "Technology-Driven, Highly-Scalable
    Dragonfly Topology", ISCA)."""
    NONE = "none"
    """A single node: no scale-out fabric."""


FAT_TREE_KINDS = (FabricKind.RAIL_OPTIMIZED_FAT_TREE, FabricKind.FAT_TREE)
"""The leaf-spine kinds: the ones with leaves, spines, oversubscription and planes."""


@dataclass(frozen=True)
class ScaleUpSpec:
    kind: ScaleUpKind
    link: LinkSpec
    """Each GPU's link to the scale-up fabric, per direction."""
    domain_size: int = 8
    """GPUs per scale-up (NVLink) domain."""
    collective_latency_s: float = 0.0
    """Fixed latency of one collective on this system besides the hops (NCCL's base latency
    and the kernel's start): nccl-tests' time at the smallest size less the hops
    (``benchmarks/nccl/derive_curves.py``)."""
    nvls_efficiency: EfficiencyCurve | None = None
    """NVLink SHARP's achieved fraction of the link bandwidth by message size, for switches that
    have it (NVSwitch 3 and later); None: no NVLS."""
    alltoall_efficiency: EfficiencyCurve | None = None
    """An all-to-all's achieved fraction of the link bandwidth by message size inside one
    NVSwitch domain, where it has a curve of its own (``llmsim calibrate`` from an
    ``alltoall_perf`` log beside an all-reduce one); None: the link's curve."""
    p2p_efficiency: EfficiencyCurve | None = None
    """Point-to-point sends' (pipeline transfers, a ring exchange) fraction inside one NVSwitch
    domain, where they have a curve of their own (from a ``sendrecv_perf`` log); None: the
    link's curve."""
    all_gather_efficiency: EfficiencyCurve | None = None
    """A ring all-gather's fraction inside one NVSwitch domain, where it has a curve of its own
    (from an ``all_gather_perf`` log beside an all-reduce one); None: the link's curve."""
    reduce_scatter_efficiency: EfficiencyCurve | None = None
    """A ring reduce-scatter's, likewise (from a ``reduce_scatter_perf`` log)."""


@dataclass(frozen=True)
class TorusSpec:
    """A torus of routers, one per node: node ``n`` sits at coordinates
    ``(n % X, (n // X) % Y, n // (X * Y))`` (the first dimension fastest) and its router is
    linked to the routers one step up and one step down each dimension, with wraparound.

    A dimension of size 2 has one link between its two routers (not two); a dimension of size
    1 has none.
    """

    dims: tuple[int, ...]
    """Routers along each dimension (1 to 3 dimensions); their product is the most nodes."""
    link: LinkSpec
    """Each router-to-router link, per direction."""

    def __post_init__(self) -> None:
        if not (isinstance(self.dims, tuple) and 1 <= len(self.dims) <= 3
                and all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in self.dims)):
            raise ConfigError(_SPEC, "scale_out.dims", "a list of 1 to 3 positive integers, e.g. [4, 4, 4]",
                              self.dims)

    @property
    def num_routers(self) -> int:
        return math.prod(self.dims)


@dataclass(frozen=True)
class DragonflySpec:
    """A dragonfly (Kim et al. 2008): ``groups`` groups of ``routers_per_group`` routers, the
    routers of a group linked all-to-all by local links, ``nodes_per_router`` nodes on each
    router, and ``global_links_per_router`` global ports on each router cabled so that every
    pair of groups is joined (group ``i``'s global port ``m``, on router
    ``m // global_links_per_router``, leads to group ``m mod (groups - 1)``, skipping ``i``
    itself; see :func:`sim.topology.fabrics.dragonfly_global_links`).
    """

    groups: int
    routers_per_group: int
    nodes_per_router: int
    global_links_per_router: int
    """Global ports per router; at least ``ceil((groups - 1) / routers_per_group)``."""
    local: LinkSpec
    """Each local (intra-group) link, per direction."""
    global_link: LinkSpec
    """Each global (inter-group) link, per direction."""

    def __post_init__(self) -> None:
        for name in ("groups", "routers_per_group", "nodes_per_router"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ConfigError(_SPEC, f"scale_out.{name}", "a positive integer", value)
        need = math.ceil((self.groups - 1) / self.routers_per_group)
        if not (isinstance(self.global_links_per_router, int) and self.global_links_per_router >= need):
            raise ConfigError(_SPEC, "scale_out.global_links_per_router",
                              f"at least ceil((groups - 1) / routers_per_group) = {need}, so that every "
                              "pair of groups is joined", self.global_links_per_router)

    @property
    def nodes_per_group(self) -> int:
        return self.routers_per_group * self.nodes_per_router


@dataclass(frozen=True)
class ScaleOutSpec:
    kind: FabricKind
    nic: LinkSpec
    """Each NIC's link to its leaf (fat trees) or router (torus, dragonfly), per direction."""
    nics_per_node: int = 8
    nodes_per_leaf: int = 32
    """Nodes in one scalable unit (one leaf per rail)."""
    switch_latency_s: float = 0.0
    oversubscription: float = 1.0
    """Leaf downlink / uplink bandwidth; 1 is non-blocking."""
    pcie: LinkSpec | None = None
    """GPU to NIC link; None means the NIC is never slower than it."""
    planes: int = 1
    """Independent leaf-spine trees (fat trees only): NIC ``j`` of every node is in plane
    ``j * planes // nics_per_node`` and planes never meet in the fabric."""
    torus: TorusSpec | None = None
    """The torus (kind ``torus`` only)."""
    dragonfly: DragonflySpec | None = None
    """The dragonfly (kind ``dragonfly`` only)."""
    alltoall_efficiency: EfficiencyCurve | None = None
    """An all-to-all's fraction of the NIC bandwidth by message size for its sends between nodes,
    where it has a curve of its own (``llmsim calibrate`` from an ``alltoall_perf`` log across
    nodes beside another collective's that calibrates the NICs); None: the NICs' curve."""
    all_gather_efficiency: EfficiencyCurve | None = None
    """A ring all-gather's fraction of the NIC bandwidth by message size for its hops between
    nodes, where it has a curve of its own (``llmsim calibrate`` from an ``all_gather_perf`` log
    across nodes beside another collective's that calibrates the NICs); None: the NICs' curve."""
    reduce_scatter_efficiency: EfficiencyCurve | None = None
    """The same for a ring reduce-scatter (a ``reduce_scatter_perf`` log across nodes)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.planes, int) and self.planes >= 1):
            raise ConfigError(_SPEC, "scale_out.planes", "a positive integer", self.planes)
        if self.planes > 1 and self.kind not in FAT_TREE_KINDS:
            raise ConfigError(_SPEC, "scale_out.planes",
                              f"1 for kind {self.kind.value} (planes are for the fat-tree kinds)", self.planes)
        if self.nics_per_node % self.planes:
            raise ConfigError(_SPEC, "scale_out.planes",
                              f"a divisor of scale_out.nics_per_node={self.nics_per_node}", self.planes)
        if (self.kind is FabricKind.TORUS) != (self.torus is not None):
            raise ConfigError(_SPEC, "scale_out.dims", "a torus exactly when kind is torus", self.torus)
        if (self.kind is FabricKind.DRAGONFLY) != (self.dragonfly is not None):
            raise ConfigError(_SPEC, "scale_out.groups", "a dragonfly exactly when kind is dragonfly",
                              self.dragonfly)


@dataclass(frozen=True)
class LinkFault:
    """A degraded or failed link between nodes ``u`` and ``v`` of the built graph (both
    directions): it runs at ``bandwidth_fraction`` of its bandwidth, or is gone at 0 (traffic
    is rerouted)."""

    u: str
    v: str
    bandwidth_fraction: float


@dataclass(frozen=True)
class TopologySpec:
    """A cluster: GPUs per node, scale-up and scale-out, and an optional fixed size."""

    name: str
    gpus_per_node: int
    scale_up: ScaleUpSpec
    scale_out: ScaleOutSpec
    gpu: str | None = None
    """GPU the preset is built with; None lets the workload's GPU stand."""
    num_gpus: int | None = None
    """A fixed size; None sizes the topology from the workload."""
    description: str = ""
    graph_file: str | None = None
    """A GraphML file describing the links (:mod:`sim.topology.graphml`); when set, it is the
    whole topology and ``scale_up`` / ``scale_out`` are not used."""
    faults: tuple[LinkFault, ...] = ()
    """Links running slower than built, or failed (:class:`LinkFault`)."""
    source: str | None = field(default=None, compare=False)
    """The file it was read from (:func:`sim.config.load_topology`); None for one made in code.
    Not part of its identity: the same topology read from two files is one topology."""

    @property
    def origin(self) -> str:
        """What an error found in this topology after it is read names: the file it was read
        from, else its name."""
        return self.source or self.name

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise ConfigError(_SPEC, "gpus_per_node", "a positive integer", self.gpus_per_node)
        if self.scale_up.domain_size % self.gpus_per_node and self.gpus_per_node % self.scale_up.domain_size:
            raise ConfigError(_SPEC, "scale_up.domain_size",
                              f"a multiple or divisor of gpus_per_node={self.gpus_per_node}",
                              self.scale_up.domain_size)
