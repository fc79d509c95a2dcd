"""Megatron-Core's EP A2A overlap: a forward and a backward pass combined, layer by layer.

Under ``overlap_moe_expert_parallel_comm`` (Megatron-LM ``--overlap-moe-expert-parallel-comm``;
:attr:`~sim.workload.spec.ParallelSpec.ep_overlap`) each steady-state step of the 1F1B schedule
runs the forward pass of one micro-batch and the backward pass of another as one combined pass
(``megatron/core/pipeline_parallel/combined_1f1b.py``, ``combined_forward_backward_step``): layer
``i`` of the forward chunk is paired with layer ``i`` from the end of the backward chunk, the
layers left over run alone (the backward's first, then the forward's), and each pair is split at
its mixture-of-experts token exchanges into four nodes a direction, issued on a compute and a
communication stream in this order (``TransformerLayerSchedulePlan.run`` in
``megatron/core/models/common/model_chunk_schedule_plan.py``)::

    comm stream:  combine_bwd       | dispatch_fwd -> dispatch_bwd | combine_fwd
    comp stream:  pre_dispatch_fwd  | mlp_bwd -> mlp_fwd            | pre_dispatch_bwd

so each direction's all-to-all runs while the other direction computes. The nodes are cut
from a layer's steps (:class:`~sim.workload.steps.Step`) at its expert-parallel collectives:

* forward: ``pre`` (attention, router, permutation), ``dispatch`` (the EP all-to-all and any
  expert-TP gather after it), ``experts`` (the local experts), ``combine`` (any expert-TP
  reduce-scatter and the EP all-to-all back) and ``post`` (unpermutation, shared experts,
  residual add: Megatron-Core runs the combine's post-processing on the communication stream,
  so it waits there, after the backward's ``pre``);
* backward: ``combine`` (the residual and unpermutation gradients, then the all-to-all of the
  output gradient), ``experts``, ``dispatch`` (the all-to-all of the input gradient) and
  ``pre`` (permutation, router and attention backward).

A layer without an expert exchange (a dense layer, or ``ep`` 1) has all its steps in ``pre``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.types import CommClass
from sim.workload.ops import CommOp
from sim.workload.steps import Step

__all__ = ["BackwardParts", "ForwardParts", "split_backward", "split_forward"]


@dataclass(frozen=True, slots=True)
class ForwardParts:
    """A forward layer pass cut at its expert-parallel exchanges (module docstring)."""

    pre: tuple[Step, ...]
    dispatch: tuple[Step, ...] = ()
    experts: tuple[Step, ...] = ()
    combine: tuple[Step, ...] = ()
    post: tuple[Step, ...] = ()


@dataclass(frozen=True, slots=True)
class BackwardParts:
    """A backward layer pass (with its recomputation) cut at its expert-parallel exchanges;
    ``wgrad`` holds the experts' weight-gradient GEMMs when they are delayed past the
    dispatch's all-to-all (``--delay-wgrad-compute``), which then does not wait for them."""

    combine: tuple[Step, ...]
    experts: tuple[Step, ...] = ()
    dispatch: tuple[Step, ...] = ()
    wgrad: tuple[Step, ...] = ()
    pre: tuple[Step, ...] = ()


def _cuts(steps: tuple[Step, ...]) -> tuple[int, int, int, int] | None:
    """``(a, b, c, d)``: the first expert-parallel exchange's run of collectives is
    ``steps[a:b]``, the second's ``steps[c:d]`` (each with the collectives issued back to back
    with it, such as an expert-TP gather or reduce-scatter); None without two exchanges."""
    ep = [i for i, s in enumerate(steps)
          if s.stream is not None and isinstance(s.op, CommOp) and s.op.comm_class is CommClass.EP]
    if len(ep) < 2:
        return None
    a, c = ep[0], ep[1]
    b = a + 1
    while b < c and steps[b].stream is not None:
        b += 1
    while c > b and steps[c - 1].stream is not None:
        c -= 1
    return a, b, c, ep[1] + 1


def split_forward(steps: tuple[Step, ...]) -> ForwardParts:
    """A forward layer pass's :class:`ForwardParts`.

    >>> from sim.types import CollectiveKind, CommClass, Dtype, Stream
    >>> from sim.workload.ops import CommOp, GemmOp
    >>> g, x = GemmOp(8, 8, 8, Dtype.BF16), CommOp(CollectiveKind.ALL_TO_ALL, CommClass.EP, (0, 1), 64.0)
    >>> steps = (Step(None, "attn", g), Step(Stream.EP_COMM, "dispatch", x), Step(None, "experts", g),
    ...          Step(Stream.EP_COMM, "combine", x), Step(None, "unpermute", g))
    >>> [[s.name for s in part] for part in (lambda p: (p.pre, p.dispatch, p.experts, p.combine, p.post))(
    ...     split_forward(steps))]
    [['attn'], ['dispatch'], ['experts'], ['combine'], ['unpermute']]
    """
    cuts = _cuts(steps)
    if cuts is None:
        return ForwardParts(tuple(steps))
    a, b, c, d = cuts
    return ForwardParts(tuple(steps[:a]), tuple(steps[a:b]), tuple(steps[b:c]), tuple(steps[c:d]),
                        tuple(steps[d:]))


def split_backward(steps: tuple[Step, ...], delay_wgrad: bool = False) -> BackwardParts:
    """A backward layer pass's :class:`BackwardParts` (``steps`` as
    :func:`sim.workload.layers.backward_steps` issues them).

    With ``delay_wgrad`` (Megatron-Core ``delay_wgrad_compute``) the experts' weight-gradient
    GEMMs leave ``experts`` for ``wgrad``: ``TransformerLayerSchedulePlan.run`` issues them
    (``mlp.backward_dw``) after the forward's dispatch, while the input gradient's dispatch
    waits only for the experts' input-gradient GEMMs, so it runs beside them."""
    cuts = _cuts(steps)
    if cuts is None:
        return BackwardParts(tuple(steps))
    a, b, c, d = cuts
    experts, dispatch = tuple(steps[b:c]), tuple(steps[c:d])
    wgrad: tuple[Step, ...] = ()
    if delay_wgrad:
        wgrad = tuple(s for s in experts if s.stream is None and s.name.startswith("experts-")
                      and s.name.endswith("-wgrad"))
        experts = tuple(s for s in experts if s not in wgrad)
        dispatch = tuple(replace(s, wait=s.wait + len(wgrad)) for s in dispatch)
    return BackwardParts(tuple(steps[:b]), experts, dispatch, wgrad, tuple(steps[d:]))
