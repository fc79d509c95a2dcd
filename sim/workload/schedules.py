"""Pipeline schedules: the order in which one pipeline rank runs its forward and backward passes.

Pure functions returning, for pipeline rank ``rank``, a list of ``(Pass, microbatch, chunk)``
where ``chunk`` is the model chunk (virtual stage) on that rank. They follow Megatron-LM's
``megatron/core/pipeline_parallel/schedules.py``:

* GPipe (Huang et al. 2019): all forwards, then all backwards.
* 1F1B (PipeDream-Flush, Narayanan et al. 2021, arXiv 2104.04473 Sec. 2.2.1): ``p - rank - 1``
  warm-up forwards, then one forward and one backward alternately, then the cool-down.
* ZB-H1 (Qi et al. 2024, arXiv 2401.10241, Sec. 3.1 and Fig. 3): 1F1B's order with each
  backward split into B (input gradients, sent upstream at once) and W (weight gradients),
  rank ``r`` running its W passes ``r`` micro-batches late (the last stage defers the most),
  so the gradients travel upstream at B's pace and the deferred W passes fill the time 1F1B
  spends waiting. A micro-batch's activations are freed after its W, so every rank holds up to
  ``p`` micro-batches, the first stage's 1F1B peak.
* Interleaved 1F1B (same paper, Sec. 2.2.2): ``v`` chunks per rank; forward ``k`` runs chunk
  ``(k mod pv) // p`` of micro-batch ``(k // pv) p + k mod p``, backward chunks in reverse;
  ``2(p - rank - 1) + (v - 1) p`` warm-up forwards, or all of them if that is as many (recent
  Megatron-Core; older Megatron-LM also ran all forwards first whenever ``m == p``).
"""

from __future__ import annotations

from enum import Enum

from sim.types import ScheduleKind

__all__ = ["Pass", "pipeline_order", "steady_pairs"]


class Pass(str, Enum):
    FORWARD = "fwd"
    BACKWARD = "bwd"
    """The whole backward, or under a zero-bubble schedule its input-gradient part."""
    WEIGHT = "wgrad"
    """The weight-gradient part of a backward (zero-bubble schedules only)."""


def _interleaved_id(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """(microbatch, chunk) of the k-th forward or backward of an interleaved schedule."""
    in_group = k % (p * v)
    chunk = in_group // p
    if not forward:
        chunk = v - chunk - 1
    mb = (k // (p * v)) * p + k % p
    return mb, chunk


def pipeline_order(kind: ScheduleKind, pp: int, vps: int, num_microbatches: int, rank: int,
                   extra_warmup: int = 0) -> list[tuple[Pass, int, int]]:
    """The passes pipeline rank ``rank`` runs, in order.

    ``extra_warmup`` forward passes more run before the steady state of the 1F1B and
    interleaved schedules: Megatron-Core schedules one under ``overlap_moe_expert_parallel_comm``
    "to ensure the forward and backward computations are independent in all 1f1b steps"
    (``get_pp_rank_microbatches`` in ``megatron/core/pipeline_parallel/schedules.py``; without
    pipelining, ``combined_1f1b_schedule_for_no_pipelining`` runs the first forward alone).

    >>> [(p.value, m) for p, m, _ in pipeline_order(ScheduleKind.ONE_F_ONE_B, 2, 1, 3, 0)]
    [('fwd', 0), ('fwd', 1), ('bwd', 0), ('fwd', 2), ('bwd', 1), ('bwd', 2)]
    >>> [(p.value, m) for p, m, _ in pipeline_order(ScheduleKind.ZB_H1, 2, 1, 3, 1)]  # doctest: +NORMALIZE_WHITESPACE
    [('fwd', 0), ('bwd', 0), ('fwd', 1), ('bwd', 1), ('wgrad', 0), ('fwd', 2), ('bwd', 2), ('wgrad', 1),
     ('wgrad', 2)]
    """
    m, p, v = num_microbatches, pp, vps
    F, B, W = Pass.FORWARD, Pass.BACKWARD, Pass.WEIGHT
    if kind is ScheduleKind.GPIPE:
        return [(F, i, 0) for i in range(m)] + [(B, i, 0) for i in range(m)]
    if kind is ScheduleKind.ONE_F_ONE_B:
        warm = _warmup(kind, p, v, m, rank, extra_warmup)
        order = [(F, i, 0) for i in range(warm)]
        for i in range(m - warm):
            order.append((F, warm + i, 0))
            order.append((B, i, 0))
        order += [(B, i, 0) for i in range(m - warm, m)]
        return order
    if kind is ScheduleKind.ZB_H1:
        warm = min(p - rank - 1, m)
        order = [(F, i, 0) for i in range(warm)]
        pending: list[int] = []
        for i in range(m - warm):
            order += [(F, warm + i, 0), (B, i, 0)]
            pending.append(i)
            if i >= rank:  # rank r runs its W passes r micro-batches late
                order.append((W, pending.pop(0), 0))
        for i in range(m - warm, m):  # cool-down: each B, then the oldest W waiting
            order.append((B, i, 0))
            pending.append(i)
            order.append((W, pending.pop(0), 0))
        order += [(W, i, 0) for i in pending]
        return order
    total = m * v
    warm = _warmup(kind, p, v, m, rank, extra_warmup)
    order = [(F, *_interleaved_id(k, p, v, True)) for k in range(warm)]
    rest = total - warm
    for i in range(rest):
        order.append((F, *_interleaved_id(warm + i, p, v, True)))
        order.append((B, *_interleaved_id(i, p, v, False)))
    order += [(B, *_interleaved_id(k, p, v, False)) for k in range(rest, total)]
    return order


def steady_pairs(kind: ScheduleKind, pp: int, vps: int, num_microbatches: int, rank: int,
                 extra_warmup: int = 0) -> range:
    """The indices into :func:`pipeline_order`'s list (same arguments) of the steady state's
    forward passes, each followed there by its backward pass: the pairs Megatron-Core runs as
    one combined pass under ``overlap_moe_expert_parallel_comm``. The warm-up's forwards and
    the cool-down's backwards are not among them, even where the one meets the other (every
    forward in the warm-up). Empty for GPipe and ZB-H1.

    >>> list(steady_pairs(ScheduleKind.ONE_F_ONE_B, 1, 1, 3, 0, extra_warmup=1))
    [1, 3]
    >>> list(steady_pairs(ScheduleKind.ONE_F_ONE_B, 1, 1, 1, 0, extra_warmup=1))
    []
    """
    if kind not in (ScheduleKind.ONE_F_ONE_B, ScheduleKind.INTERLEAVED):
        return range(0)
    total = num_microbatches * vps
    warm = _warmup(kind, pp, vps, num_microbatches, rank, extra_warmup)
    return range(warm, warm + 2 * (total - warm), 2)


def _warmup(kind: ScheduleKind, p: int, v: int, m: int, rank: int, extra_warmup: int) -> int:
    """The forward passes rank ``rank`` runs before the 1F1B or interleaved schedule's steady
    state: ``p - rank - 1`` (PipeDream-Flush); interleaved, Megatron-Core's ``(p - rank - 1) x 2
    + (v - 1) x p`` (``get_pp_rank_microbatches`` with ``microbatch_group_size_per_vp_stage =
    p``, its default); ``extra_warmup`` more; all of them when that covers them all anyway."""
    if kind is ScheduleKind.ONE_F_ONE_B:
        return min(p - rank - 1 + extra_warmup, m)
    return min((p - rank - 1) * 2 + (v - 1) * p + extra_warmup, m * v)
