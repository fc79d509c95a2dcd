"""One op of a layer pass as the generator issues it: a :class:`Step`."""

from __future__ import annotations

from dataclasses import dataclass

from sim.types import OpKind, Stream
from sim.workload.ops import CommOp, Op

__all__ = ["Step"]


@dataclass(frozen=True, slots=True)
class Step:
    """One op of a pass: a collective on ``stream``, or a compute op when it is None."""

    stream: Stream | None
    name: str
    op: Op
    wait: int = 0
    kind: OpKind = OpKind.GEMM

    def __post_init__(self) -> None:
        kind = self.op.op_kind if isinstance(self.op, CommOp) else self.op.kind
        object.__setattr__(self, "kind", kind)
