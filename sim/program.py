"""A task program: what the engine runs, independent of how it was generated.

The workload generator (:mod:`sim.workload.taskgraph`) writes tasks; the engine
(:mod:`sim.engine`) runs them without knowing what a layer or a micro-batch is: each task
has a stream, dependencies, an op to price, and for communication the key that joins the
members of one collective.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.results import RankInfo
from sim.types import CommClass, OpKind, Stream
from sim.workload.ops import CommOp, Op

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Task", "Program", "Block"]


@dataclass(frozen=True, slots=True, eq=False)
class Block:
    """Ops run as one task at their solo times: a whole layer pass at layer granularity.

    ``ops[i]`` is a compute op when ``streams[i]`` is None, else a comm op on that stream,
    with the rules of a layer's steps (:class:`sim.workload.steps.Step`): a compute op follows
    the one before it; a comm op starts after the compute op issued before it (or the block's
    start) and after the previous op of its stream, and the ``waits[i]``-th compute op after it
    waits for it. The engine times the block alone once (each compute op at the cost model's
    time, each comm op at its solo time on an idle network) and places it on the compute stream
    like a compute op, for the block's whole duration. Its spans: per comm class, the time the
    compute stream waited on that class inside the block (its exposed communication, on the
    class's stream, first), then the compute, in one span. The block starts and ends when its
    first and last op would; what moves is where inside it the exposed communication sits.

    Shared by every layer and micro-batch that runs the same steps.
    """

    ops: tuple[Op, ...]
    streams: tuple[Stream | None, ...]
    waits: tuple[int, ...]

    kind = OpKind.GEMM
    """The kind of its compute span; the engine also reports each kind's share of it."""

    @property
    def flops(self) -> float:
        return sum(op.flops for s, op in zip(self.streams, self.ops) if s is None)

    @property
    def bytes(self) -> float:
        return sum(op.bytes for s, op in zip(self.streams, self.ops) if s is None)

    def comm_classes(self) -> list[tuple[CommClass, Stream, tuple[int, ...]]]:
        """Each comm class in the block, in order of first use: its stream and its group."""
        out: dict[CommClass, tuple[CommClass, Stream, tuple[int, ...]]] = {}
        for s, op in zip(self.streams, self.ops):
            if s is not None and op.comm_class not in out:
                out[op.comm_class] = (op.comm_class, s, op.group)
        return list(out.values())

    def comm_ops(self, comm_class: CommClass | None = None) -> tuple[CommOp, ...]:
        """The block's comm ops (of ``comm_class``, when given), in order."""
        return tuple(op for s, op in zip(self.streams, self.ops)
                     if s is not None and (comm_class is None or op.comm_class is comm_class))


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
    op: Op | Block
    kind: OpKind
    comm: bool
    deps: list[int]
    args: tuple
    coll_key: int = -1
    mem_start_bytes: float = 0.0
    mem_end_bytes: float = 0.0
    flow_id: int = -1
    alone: bool = False
    """A comm task that no compute op of its rank runs beside: it starts after the compute op
    issued before it and the next compute op waits for it. Its kernel's SMs slow nothing."""


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
    early_block_waits: int = 0
    """Blocks (layer or chunk granularity) that wait at their start for a collective that a
    later op of their pass waits for in the op-level program (:mod:`sim.engine.block_check`)."""

    def to_networkx(self) -> nx.DiGraph:
        """The task graph: dependencies plus stream order as edges (``dep`` = "data" / "stream")."""
        import networkx as nx

        g = nx.DiGraph()
        for t in self.tasks:
            g.add_node(t.id, rank=t.rank, stream=t.stream, name=t.name, kind=t.kind)
            for d in t.deps:
                g.add_edge(d, t.id, dep="data")
        for ids in self.streams.values():
            for a, b in zip(ids, ids[1:]):
                g.add_edge(a, b, dep="stream")
        return g
