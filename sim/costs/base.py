"""The one seam between the workload and the engine's notion of time.

A cost model answers two questions: how long a compute op runs on its GPU, and how a
communication op moves over the network (a :class:`CommPlan`: phases of fixed latency
followed by flows of bytes over links, which the engine's flow network shares fairly).
:class:`FixedCostModel` is the test double (httpx's ``MockTransport`` idea): fixed times per
op kind and instant or fixed-latency communication.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sim.types import OpKind
from sim.workload.ops import CommOp, Op

__all__ = ["Flow", "Phase", "CommPlan", "CostModel", "FixedCostModel", "share_weights"]


@dataclass(frozen=True, slots=True)
class Flow:
    """``size_bytes`` from GPU ``src`` to GPU ``dst`` over ``links``.

    ``weights`` (parallel to ``links``) count how many flows of the whole job this one stands
    for on each link; they are 1 when every rank is simulated.
    """

    src: int
    dst: int
    size_bytes: float
    links: tuple[int, ...]
    weights: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Phase:
    """A step of a collective: wait ``latency_s``, then move all ``flows`` at once."""

    latency_s: float
    flows: tuple[Flow, ...] = ()


@dataclass(frozen=True, slots=True)
class CommPlan:
    """The phases of one communication op, run one after another.

    ``sm_fraction`` is the share of each member GPU's SMs the op's kernel holds while it
    moves data: NCCL runs one CTA per channel, each on an SM of its own that no compute
    kernel shares (NVIDIA/nccl issue #689). A compute op on that GPU meanwhile runs at
    ``1 - sum`` of the fractions held (:mod:`sim.engine.contention`); 0 leaves compute alone.
    """

    phases: tuple[Phase, ...] = ()
    algorithm: str = "none"
    sm_fraction: float = 0.0


class CostModel(Protocol):
    """What the engine asks of a cost model."""

    def compute_time_s(self, op: Op) -> float:
        """Seconds a compute op occupies its GPU's compute stream."""

    def comm_plan(self, op: CommOp) -> CommPlan:
        """How a communication op moves over the network."""


@dataclass(frozen=True)
class FixedCostModel:
    """Fixed times for tests: ``compute_s[kind]`` per compute op, ``comm_s`` per comm op.

    Kinds not in ``compute_s`` take ``default_compute_s``. Communication is a single phase
    of ``comm_s`` latency with no flows, so the network never slows it; its kernel holds
    ``comm_sm_fraction`` of the GPU's SMs (0 by default: compute is never slowed by it).

    >>> FixedCostModel({OpKind.GEMM: 2.0}).compute_time_s(
    ...     __import__("sim.workload.ops", fromlist=["MemoryOp"]).MemoryOp(OpKind.NORM, 1.0))
    0.0
    """

    compute_s: Mapping[OpKind, float] = field(default_factory=dict)
    default_compute_s: float = 0.0
    comm_s: float = 0.0
    comm_sm_fraction: float = 0.0

    def compute_time_s(self, op: Op) -> float:
        return self.compute_s.get(op.kind, self.default_compute_s)

    def comm_plan(self, op: CommOp) -> CommPlan:
        return CommPlan((Phase(self.comm_s),), algorithm="fixed", sm_fraction=self.comm_sm_fraction)


def share_weights(flows: tuple[Flow, ...]) -> tuple[Flow, ...]:
    """Divide each flow's weight on a link by the number of these flows on that link: the flows
    a representative simulation keeps of a plan whose weights count the whole job's flows on
    each link (:meth:`sim.engine.simulation.Simulation._plans`, :func:`sim.studies.collective.collective`),
    where several kept flows share a link, each stands for its share of that count.

    >>> f = Flow(0, 1, 1.0, (5,), (2.0,))
    >>> [x.weights for x in share_weights((f, Flow(0, 2, 1.0, (5, 6), (2.0, 1.0))))]
    [(1.0,), (1.0, 1.0)]
    """
    count: dict[int, int] = {}
    for f in flows:
        for link in f.links:
            count[link] = count.get(link, 0) + 1
    if all(c == 1 for c in count.values()):
        return flows
    return tuple(Flow(f.src, f.dst, f.size_bytes, f.links,
                      tuple(w / count[link_id] for link_id, w in zip(f.links, f.weights)))
                 for f in flows)
