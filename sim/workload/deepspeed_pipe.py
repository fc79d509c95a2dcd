"""DeepSpeed's pipeline engine: the commands its ``TrainSchedule`` gives one stage, in order.

DeepSpeed trains a pipeline (``deepspeed/runtime/pipe/engine.py``, ``PipelineEngine``, which
Megatron-DeepSpeed and GPT-NeoX run) by executing, stage by stage, the instruction stream of
``TrainSchedule`` (``deepspeed/runtime/pipe/schedule.py``). The schedule has ``2 (m + p - 1)``
steps; a stage runs forwards on the steps of its parity and backwards on the others, and in
each step first its exchanges, then its pass:

* a forward step: ``SendGrad`` of the previous step's micro-batch, then ``RecvActivation`` of
  this one, then ``ForwardPass``;
* a backward step: ``RecvGrad`` of this step's micro-batch, then ``SendActivation`` of the
  previous step's, then ``BackwardPass``.

A step whose micro-batch is out of range runs no pass but still sends the previous step's, so
a stage's activation send follows its forward at once when the next step has no backward (the
warm-up), and after the next backward's receive when it has. Each exchange is a blocking
``torch.distributed.send`` or ``recv`` (``deepspeed/runtime/pipe/p2p.py``: ``async_op`` must be
False), which the compute stream waits for: a stage waits at each exchange until its
neighbour reaches the matching one. Its passes come in 1F1B's order
(:func:`sim.workload.schedules.pipeline_order`; ``tests/unit/test_deepspeed_schedule.py``).
:meth:`sim.workload.taskgraph._RankProgram.build` issues the exchanges in this order under
:attr:`~sim.workload.spec.ParallelSpec.blocking_p2p`.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

__all__ = ["PipeInstruction", "PipeCommand", "train_schedule", "exchanges_by_pass"]


class PipeInstruction(str, Enum):
    """The instructions of ``TrainSchedule`` that move data or compute (the schedule's
    ``LoadMicroBatch``, ``ReduceTiedGrads``, ``ReduceGrads`` and ``OptimizerStep`` aside)."""

    FORWARD = "F"
    """``ForwardPass``."""
    BACKWARD = "B"
    """``BackwardPass``."""
    SEND_ACTIVATION = "SA"
    """``SendActivation``: the forward's output to the next stage."""
    RECV_ACTIVATION = "RA"
    """``RecvActivation``: the previous stage's output."""
    SEND_GRAD = "SG"
    """``SendGrad``: the gradient of the stage's input to the previous stage."""
    RECV_GRAD = "RG"
    """``RecvGrad``: the gradient of the stage's output from the next stage."""

    @property
    def is_pass(self) -> bool:
        return self in (PipeInstruction.FORWARD, PipeInstruction.BACKWARD)


class PipeCommand(NamedTuple):
    """One instruction of a stage's stream and the micro-batch it is for."""

    instruction: PipeInstruction
    microbatch: int


def train_schedule(m: int, p: int, s: int) -> list[PipeCommand]:
    """Stage ``s``'s commands in order for ``m`` micro-batches over ``p`` stages, as
    ``TrainSchedule.steps`` yields them (``_step_to_micro_batch``: even stages run forwards on
    even steps, odd stages on odd steps; the forward of a step is micro-batch
    ``step // 2 - s // 2`` (even step) or ``(step - 1) // 2 - s // 2`` (odd), its backward
    ``step // 2 - p + (s + 1) // 2`` (even) or ``(step - 1) // 2 - p + 1 + s // 2`` (odd)).

    >>> [f"{c.instruction.value}{c.microbatch}" for c in train_schedule(3, 4, 0)]
    ['F0', 'SA0', 'F1', 'SA1', 'F2', 'SA2', 'RG0', 'B0', 'RG1', 'B1', 'RG2', 'B2']
    """
    def fwd_id(step: int) -> int:
        return (step // 2 if step % 2 == 0 else (step - 1) // 2) - s // 2

    def bwd_id(step: int) -> int:
        if step % 2 == 0:
            return step // 2 - p + (s + 1) // 2
        return (step - 1) // 2 - p + 1 + s // 2

    def valid(i: int) -> bool:
        return 0 <= i < m

    prev, out = -1, []
    for step in range(2 * (m + p - 1)):
        forward = (step % 2 == 0) == (s % 2 == 0)
        mb = fwd_id(step) if forward else bwd_id(step)
        if forward:
            if valid(prev) and s > 0:
                out.append(PipeCommand(PipeInstruction.SEND_GRAD, prev))
            if valid(mb) and s > 0:
                out.append(PipeCommand(PipeInstruction.RECV_ACTIVATION, mb))
        else:
            if valid(mb) and s < p - 1:
                out.append(PipeCommand(PipeInstruction.RECV_GRAD, mb))
            if valid(prev) and s < p - 1:
                out.append(PipeCommand(PipeInstruction.SEND_ACTIVATION, prev))
        if valid(mb):
            out.append(PipeCommand(PipeInstruction.FORWARD if forward else PipeInstruction.BACKWARD, mb))
        prev = mb
    return out


def exchanges_by_pass(m: int, p: int, s: int) -> tuple[tuple[tuple[PipeCommand, ...], ...], tuple[PipeCommand, ...]]:
    """Stage ``s``'s exchanges grouped by the pass they precede: for the ``k``-th pass of its
    stream, the sends and receives issued since the pass before it, in order; and the exchanges
    after its last pass.

    >>> before, after = exchanges_by_pass(2, 2, 1)
    >>> [[f"{c.instruction.value}{c.microbatch}" for c in x] for x in before], after
    ([['RA0'], [], ['SG0', 'RA1'], []], (PipeCommand(instruction=<PipeInstruction.SEND_GRAD: 'SG'>, microbatch=1),))
    """
    before: list[tuple[PipeCommand, ...]] = []
    pending: list[PipeCommand] = []
    for c in train_schedule(m, p, s):
        if c.instruction.is_pass:
            before.append(tuple(pending))
            pending = []
        else:
            pending.append(c)
    return tuple(before), tuple(pending)
