"""Topology specs: what a topology YAML describes, in SI units.

A topology is a scale-up domain (GPUs joined by NVLink through NVSwitches) repeated over
nodes, and a scale-out fabric joining the nodes' NICs. :func:`sim.topology.build.build_topology`
turns a :class:`TopologySpec` into a NetworkX graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sim.errors import ConfigError
from sim.hardware import EfficiencyCurve

__all__ = ["LinkSpec", "ScaleUpKind", "FabricKind", "ScaleUpSpec", "ScaleOutSpec", "TopologySpec"]

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
    """NIC i of every node on leaf i of its scalable unit; leaves joined by spines."""
    FAT_TREE = "fat-tree"
    """All NICs of a node on the same leaf."""
    NONE = "none"
    """A single node: no scale-out fabric."""


@dataclass(frozen=True)
class ScaleUpSpec:
    kind: ScaleUpKind
    link: LinkSpec
    """Each GPU's link to the scale-up fabric, per direction."""
    domain_size: int = 8
    """GPUs per scale-up (NVLink) domain."""


@dataclass(frozen=True)
class ScaleOutSpec:
    kind: FabricKind
    nic: LinkSpec
    """Each NIC's link to its leaf, per direction."""
    nics_per_node: int = 8
    nodes_per_leaf: int = 32
    """Nodes in one scalable unit (one leaf per rail)."""
    switch_latency_s: float = 0.0
    oversubscription: float = 1.0
    """Leaf downlink / uplink bandwidth; 1 is non-blocking."""
    pcie: LinkSpec | None = None
    """GPU to NIC link; None means the NIC is never slower than it."""


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
    faults: tuple[LinkFault, ...] = ()
    """Links running slower than built, or failed (:class:`LinkFault`)."""
    """A GraphML file describing the links (:mod:`sim.topology.graphml`); when set, it is the
    whole topology and ``scale_up`` / ``scale_out`` are not used."""

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise ConfigError(_SPEC, "gpus_per_node", "a positive integer", self.gpus_per_node)
        if self.scale_up.domain_size % self.gpus_per_node and self.gpus_per_node % self.scale_up.domain_size:
            raise ConfigError(_SPEC, "scale_up.domain_size",
                              f"a multiple or divisor of gpus_per_node={self.gpus_per_node}",
                              self.scale_up.domain_size)
