"""A task program: what the engine runs, independent of how it was generated.

The workload generator (:mod:`sim.workload.taskgraph`) writes tasks; the engine
(:mod:`sim.engine`) runs them without knowing what a layer or a micro-batch is: each task
has a stream, dependencies, an op to price, and for communication the key that joins the
members of one collective.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from sim.results import RankInfo
from sim.types import OpKind, Stream
from sim.workload.ops import Op

__all__ = ["Task", "Program"]


@dataclass(slots=True, eq=False)
class Task:
    """One op on one stream of one simulated rank.

    ``coll_key`` (>= 0) joins the tasks of all simulated members of one collective or p2p
    transfer; ``peer`` is the other rank of a p2p transfer and ``flow_id`` its trace arrow.
    Memory deltas are applied at the task's start (``mem_start_bytes``) and end
    (``mem_end_bytes``).
    """

    id: int
    rank: int
    stream: Stream
    name: str
    op: Op
    kind: OpKind
    comm: bool
    deps: list[int]
    args: tuple
    coll_key: int = -1
    mem_start_bytes: float = 0.0
    mem_end_bytes: float = 0.0
    flow_id: int = -1


@dataclass
class Program:
    """Every simulated rank's tasks, grouped into in-order streams."""

    tasks: list[Task]
    streams: dict[tuple[int, Stream], list[int]]
    ranks: list[RankInfo]
    coll_members: dict[int, int]
    static_memory_bytes: dict[int, float]
    world_size: int
    representative: bool
    flops_per_iteration: float = 0.0
    """Model FLOPs of the iteration (Megatron's count, :func:`sim.workload.flops.model_flops`)."""
    hardware_flops_per_iteration: float = 0.0
    """The same plus the recomputed forward work."""

    def to_networkx(self) -> nx.DiGraph:
        """The task graph: dependencies plus stream order as edges (``dep`` = "data" / "stream")."""
        g = nx.DiGraph()
        for t in self.tasks:
            g.add_node(t.id, rank=t.rank, stream=t.stream, name=t.name, kind=t.kind)
            for d in t.deps:
                g.add_edge(d, t.id, dep="data")
        for ids in self.streams.values():
            for a, b in zip(ids, ids[1:]):
                g.add_edge(a, b, dep="stream")
        return g
