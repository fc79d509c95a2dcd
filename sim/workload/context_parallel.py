"""Context parallelism's attention: the steps of each of Megatron-LM's ``--cp-comm-type``.

Context parallelism (Megatron-LM ``--context-parallel-size``) splits every sequence over the
``cp`` ranks of a CP group, each holding two of ``2 cp`` chunks (chunks ``i`` and
``2cp - 1 - i``, Transformer Engine's "DualChunkSwap" causal load balancing), so every
token-wise op sees ``s / cp`` tokens and only the attention needs the rest of the sequence.
Megatron-Core hands the choice of exchange to Transformer Engine
(``megatron/core/extensions/transformer_engine.py``, ``TEDotProductAttention``: ``cp_comm_type``,
and for ``a2a+p2p`` the two-level groups of ``get_hierarchical_context_parallel_groups``), whose
``attn_forward_func_with_cp``
(``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``) runs:

``p2p`` -- ``AttnFuncWithCPAndKVP2P``, ring attention (Liu et al. 2023, arXiv 2310.01889):
    ``cp`` steps; before step ``i`` computes, the rank sends the K/V chunk it holds to the next
    rank and receives the previous rank's (``flash_attn_p2p_communicate`` on the CP stream),
    which step ``i + 1`` waits for, so the exchange overlaps the compute. Each step is
    ``1 / cp^2`` of the sequence's causal work. The backward passes the K/V and their
    gradients around the ring the same way: twice the bytes.
``all_gather`` -- ``AttnFuncWithCPAndKVAllGather``: K and V are all-gathered over the CP group
    (``gather_along_first_dim`` on the compute stream: nothing overlaps it) and reordered to
    sequence order; the rank's two query chunks then attend, each on its own stream, to the
    keys up to their end (together ``1 / cp`` of the causal work). The forward saves only the
    local K/V, so the backward gathers them again, computes the two steps' gradients into
    full-sequence dK/dV buffers and reduce-scatters those (``reduce_scatter_along_first_dim``,
    again not overlapped).
``a2a`` -- ``AttnFuncWithCPAndQKVOA2A``, DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv
    2309.14509): one all-to-all each for Q, K and V (``flash_attn_a2a_communicate``, issued
    back to back; the compute stream waits for all) turns ``s / cp`` tokens x ``H`` heads into
    ``s`` tokens x ``H / cp`` heads; one attention kernel over the whole sequence; one
    all-to-all of the output back. The backward all-to-alls the output and its gradient in,
    and dQ, dK, dV out. Heads (query and key/value) per TP rank must divide by ``cp``.
``a2a+p2p`` -- the same ``AttnFuncWithCPAndKVP2P`` with two groups
    (``--hierarchical-context-parallel-sizes a p``, ``a x p = cp``): the all-to-alls of ``a2a``
    over the first level (``a`` consecutive CP ranks, Megatron-Core's
    ``create_hierarchical_parallel_groups``), ring attention with ``H / a`` heads over the
    second (every ``a``-th CP rank), ``p`` steps of ``1 / p^2`` each.

The four are one construction here: an all-to-all level of ``a`` ranks (none when ``a = 1``)
around a ring of ``p`` ranks (no exchange when ``p = 1``), or the all-gather. Every variant
leaves a rank ``1 / cp`` of the whole sequence's attention FLOPs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.types import CollectiveKind, CommClass, CpCommType, Dtype, Stream
from sim.workload.ops import AttentionOp, CommOp, dtype_bytes
from sim.workload.spec import ModelSpec, ParallelSpec

__all__ = ["cp_attention", "cp_levels", "cp_subgroups", "cp_bytes_sent", "cp_transient_bytes"]

if TYPE_CHECKING:
    from sim.workload.layers import Step

Group = tuple[int, ...]


def cp_levels(parallel: ParallelSpec) -> tuple[int, int]:
    """``(a2a size, ring size)`` of the CP group: ``(1, cp)`` for ``p2p``, ``(cp, 1)`` for
    ``a2a``, the hierarchical sizes for ``a2a+p2p`` (``all_gather`` has neither: ``(1, cp)``).

    >>> cp_levels(ParallelSpec(cp=8, dp=1, cp_comm_type=CpCommType.A2A_P2P,
    ...                        hierarchical_context_parallel_sizes=(2, 4)))
    (2, 4)
    """
    a = parallel.cp_a2a_size
    return a, parallel.cp // a


def cp_subgroups(group: Group, a: int) -> tuple[tuple[Group, ...], tuple[Group, ...]]:
    """The two levels of a CP group (ranks in CP order): its all-to-all groups of ``a``
    consecutive ranks and its ring groups of every ``a``-th rank (Megatron-Core
    ``parallel_state.create_hierarchical_parallel_groups``: for sizes ``[2, 4]`` of
    ``g0..g7``, ``[g0, g1], [g2, g3], ...`` and ``[g0, g2, g4, g6], [g1, g3, g5, g7]``).

    >>> cp_subgroups((0, 1, 2, 3, 4, 5, 6, 7), 2)
    (((0, 1), (2, 3), (4, 5), (6, 7)), ((0, 2, 4, 6), (1, 3, 5, 7)))
    """
    first = tuple(group[k:k + a] for k in range(0, len(group), a))
    second = tuple(group[j::a] for j in range(a))
    return first, second


def _mine(groups: tuple[Group, ...], rank: int) -> Group:
    return next((g for g in groups if rank in g), groups[0])


def cp_attention(model: ModelSpec, parallel: ParallelSpec, heads: int, kv_heads: int, dtype: Dtype,
                 cp_group: Group, cp_replicas: tuple[Group, ...] = (), rank: int | None = None
                 ) -> tuple[list[Step], list[Step]]:
    """The forward and backward steps (:class:`~sim.workload.layers.Step` lists) of one
    layer's attention under ``parallel.cp_comm_type``, for the rank ``rank`` (default the CP
    group's first) of ``cp_group`` whose TP rank holds ``heads`` query and ``kv_heads``
    key/value heads; ``cp_replicas`` are the CP groups running the same at the same time."""
    from sim.workload.layers import Step  # noqa: F811 (layers imports this module)

    b, s, hd = parallel.micro_batch_size, model.seq_length, model.head_dim
    cp, ak, e = parallel.cp, parallel.attention_kernel, dtype_bytes(dtype)
    rank = cp_group[0] if rank is None else rank

    def op(backward: bool, h: int, kvh: int, fraction: float) -> AttentionOp:
        return AttentionOp(b, h, kvh, s, hd, True, backward, dtype, fraction, ak)

    def comm(kind: CollectiveKind, group: Group, replicas: tuple[Group, ...], size: float) -> CommOp:
        return CommOp(kind, CommClass.CP, group, size, replicas)

    if parallel.cp_comm_type is CpCommType.ALL_GATHER:
        # K and V of the whole sequence (the all-gather's output; its gradients, the
        # reduce-scatter's input); the two local query chunks each 1 / (2 cp) of the work
        full_kv = 2.0 * b * (s // cp) * kv_heads * hd * e * cp
        ag = Step(Stream.CP_COMM, "ncclAllGather attention-kv",
                  comm(CollectiveKind.ALL_GATHER, cp_group, cp_replicas, full_kv))
        rs = Step(Stream.CP_COMM, "ncclReduceScatter attention-dkv",
                  comm(CollectiveKind.REDUCE_SCATTER, cp_group, cp_replicas, full_kv))
        half = 1.0 / (2 * cp)
        fwd = [ag, *[Step(None, "attention", op(False, heads, kv_heads, half))] * 2]
        bwd = [ag, *[Step(None, "attention-bwd", op(True, heads, kv_heads, half))] * 2, rs]
        return fwd, bwd

    a, p = cp_levels(parallel)
    a2a_groups, ring_groups = cp_subgroups(cp_group, a)
    a2a_group, ring_group = _mine(a2a_groups, rank), _mine(ring_groups, rank)
    levels = [cp_subgroups(g, a) for g in cp_replicas]
    a2a_replicas = tuple(g for first, _ in levels for g in first)
    ring_replicas = tuple(g for _, second in levels for g in second)

    local = b * (s // cp) * hd * e  # one head's rank-local slice of the sequence

    def a2a(names: str, width_heads: tuple[int, ...]) -> list[Step]:
        if a == 1:
            return []
        return [Step(Stream.CP_COMM, f"ncclAllToAll attention-{n}",
                     comm(CollectiveKind.ALL_TO_ALL, a2a_group, a2a_replicas, local * w))
                for n, w in zip(names.split(), width_heads)]

    h_a, kv_a = heads // a, kv_heads // a
    # after the all-to-all a rank holds s / p tokens of H / a heads: the ring's K/V chunk
    kv_chunk = 2.0 * b * (s // p) * kv_a * hd * e
    fwd_x = comm(CollectiveKind.RING_EXCHANGE, ring_group, ring_replicas, kv_chunk)
    bwd_x = comm(CollectiveKind.RING_EXCHANGE, ring_group, ring_replicas, 2.0 * kv_chunk)

    def ring(name: str, att: AttentionOp, x: CommOp) -> list[Step]:
        out: list[Step] = []
        for j in range(p):
            if j < p - 1:
                # exchange chunk j+1 while step j computes; step j+1 waits for it
                out.append(Step(Stream.CP_COMM, f"ncclSendRecv {name}-kv", x, wait=1))
            out.append(Step(None, name, att))
        return out

    frac = 1.0 / (p * p)
    fwd = [*a2a("q k v", (heads, kv_heads, kv_heads)), *ring("attention", op(False, h_a, kv_a, frac), fwd_x),
           *a2a("out", (heads,))]
    bwd = [*a2a("out dout", (heads, heads)), *ring("attention-bwd", op(True, h_a, kv_a, frac), bwd_x),
           *a2a("dq dk dv", (heads, kv_heads, kv_heads))]
    return fwd, bwd


def cp_bytes_sent(op: CommOp) -> float:
    """Bytes one rank of ``op``'s group sends: a ring exchange's whole buffer, ``(n - 1) / n``
    of an all-gather's output, a reduce-scatter's input or an all-to-all's buffer
    (NVIDIA/nccl-tests doc/PERFORMANCE.md sizes)."""
    n = len(op.group)
    if op.collective is CollectiveKind.RING_EXCHANGE:
        return op.size_bytes if n > 1 else 0.0
    return op.size_bytes * (n - 1) / n


def cp_transient_bytes(model: ModelSpec, parallel: ParallelSpec, dtype: Dtype = Dtype.BF16) -> float:
    """Bytes one layer's CP attention holds beyond what ring attention does, while its
    backward runs (its forward holds less), per GPU.

    * ``all_gather``: the backward holds the gathered K and V of the whole sequence and their
      full-sequence gradients before the reduce-scatter (``k_ag``, ``v_ag``, ``dk``, ``dv`` in
      ``AttnFuncWithCPAndKVAllGather.backward``): ``4 b s (kv / t) d`` elements; the forward,
      ``k_ag`` and ``v_ag`` only, half that.
    * ``a2a`` and ``a2a+p2p``: the all-to-all's output lives beside its input. The forward
      holds head-sharded copies of Q, K and V (``s`` tokens of ``H / (t a)`` heads: as many
      bytes as the sequence-sharded ones, ``b (s / cp) (H + 2 kv) d / t``); the backward the
      head-sharded output and its gradient, and dQ, dK, dV in both layouts at their
      all-to-all (``AttnFuncWithCPAndQKVOA2A.backward``): one more copy of Q, K, V plus
      ``2 b (s / cp) H d / t``. What is saved for the backward is the same as ring
      attention's (Q, K, V and the output, in either layout the same bytes).
    * ``p2p``: none (the ring's one-chunk K/V buffers are not counted for any variant).

    ``H / t`` and ``kv / t`` are the heads a TP rank holds (one key/value head when ``t``
    exceeds the KV heads, which Megatron replicates).
    """
    if parallel.cp == 1:
        return 0.0
    b, s, d, t = parallel.micro_batch_size, model.seq_length, model.head_dim, parallel.tp
    e = dtype_bytes(dtype)
    heads, kv = model.num_attention_heads // t, max(model.num_kv_heads // t, 1)
    kind = parallel.cp_comm_type
    if kind is CpCommType.ALL_GATHER:
        return 4.0 * b * s * kv * d * e
    if parallel.cp_a2a_size > 1:
        sl = b * (s // parallel.cp) * d * e
        return sl * (heads + 2 * kv) + 2.0 * sl * heads
    return 0.0
