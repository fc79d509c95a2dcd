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

``torch`` -- PyTorch's experimental ``context_parallel``, torchtitan's CP
    (pytorch/pytorch ``torch/distributed/tensor/experimental/_attention.py``,
    ``_templated_ring_attention`` and its backward; defaults ``_ContextParallelOptions``:
    ``convert_to_f32=True``, ``enable_load_balance=True``, ``rotate_method=ALL_GATHER``): see
    :func:`_torch_ring`.

The four Megatron variants are one construction here: an all-to-all level of ``a`` ranks (none when ``a = 1``)
around a ring of ``p`` ranks (no exchange when ``p = 1``), or the all-gather. Every variant
leaves a rank ``1 / cp`` of the whole sequence's attention FLOPs.
"""

from __future__ import annotations

from sim.types import AttentionKernel, CollectiveKind, CommClass, CpCommType, Dtype, OpKind, Stream
from sim.workload.ops import AttentionOp, CommOp, MemoryOp, dtype_bytes
from sim.workload.spec import ModelSpec, ParallelSpec
from sim.workload.steps import Step

__all__ = ["cp_attention", "cp_levels", "cp_subgroups", "cp_bytes_sent", "cp_transient_bytes"]

Group = tuple[int, ...]

_F32 = 4
"""Bytes of an fp32 element (PyTorch's context_parallel merges and accumulates in fp32)."""


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
                 cp_group: Group, cp_replicas: tuple[Group, ...] = (), rank: int | None = None, *,
                 kernel: AttentionKernel) -> tuple[list[Step], list[Step]]:
    """The forward and backward steps (:class:`~sim.workload.steps.Step` lists) of one
    layer's attention under ``parallel.cp_comm_type``, for the rank ``rank`` (default the CP
    group's first) of ``cp_group`` whose TP rank holds ``heads`` query and ``kv_heads``
    key/value heads; ``cp_replicas`` are the CP groups running the same at the same time;
    ``kernel`` is the fused attention kernel (:attr:`~sim.workload.kernels.KernelsSpec.attention_kernel`)."""

    b, s, hd = parallel.micro_batch_size, model.seq_length, model.head_dim
    cp, ak, e = parallel.cp, kernel, dtype_bytes(dtype)
    rank = cp_group[0] if rank is None else rank

    def op(backward: bool, h: int, kvh: int, fraction: float) -> AttentionOp:
        return AttentionOp(b, h, kvh, s, hd, True, backward, dtype, fraction, ak)

    def comm(kind: CollectiveKind, group: Group, replicas: tuple[Group, ...], size: float) -> CommOp:
        return CommOp(kind, CommClass.CP, group, size, replicas)

    if parallel.cp_comm_type is CpCommType.TORCH:
        return _torch_ring(parallel, s, heads, hd, dtype, cp_group, cp_replicas, kernel)
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
    * ``torch``: the backward holds the all-gathered K and V of the whole sequence with every
      query head (``repeat_kv`` runs before SDPA), ``4 b s (H / t) d`` bytes, their contiguous
      local copies, the fp32 dQ, dK, dV accumulators and the fp32 dK/dV buffers being sent
      and received (``_templated_ring_attention_backward``).
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
    if kind is CpCommType.TORCH:
        n = b * (s // parallel.cp) * heads * d  # one local tensor, all query heads
        return 2.0 * parallel.cp * n * e + 2.0 * n * e + 3.0 * n * _F32 + 2.0 * 2 * n * _F32
    if kind is CpCommType.ALL_GATHER:
        return 4.0 * b * s * kv * d * e
    if parallel.cp_a2a_size > 1:
        sl = b * (s // parallel.cp) * d * e
        return sl * (heads + 2 * kv) + 2.0 * sl * heads
    return 0.0


def _torch_ring(parallel: ParallelSpec, s: int, heads: int, hd: int, dtype: Dtype, group: Group,
                replicas: tuple[Group, ...], kernel: AttentionKernel) -> tuple[list[Step], list[Step]]:
    """One layer's attention under PyTorch's ``context_parallel`` (torch
    ``distributed/tensor/experimental/_attention.py``, stored at 0123248; the SDPA handler
    torchtitan's CP runs through).

    torchtitan calls SDPA after ``repeat_kv``, so K and V carry all ``heads`` query heads; a
    rank holds ``c = s / cp`` tokens (two load-balanced chunks), ``n = b c heads d`` elements
    per tensor. Forward (``_templated_ring_attention``): K and V made contiguous (copies: SDPA
    sees them transposed), concatenated (``torch.cat``, before each of the first ``cp - 1``
    steps) and all-gathered once (``_AllGatherRotater``; waited for before step 1); step 0 is
    causal over the local ``c`` tokens, steps ``i > 0`` non-causal over ``c x c / 2`` (full
    queries on the first K/V half, or the second query half on all of K/V); each step's output
    and log-sum-exp are merged in fp32 by eager ops (``_SDPAMerger``: ``out.to(float32)``,
    ``out - sigmoid(lse_b - lse) * (out - out_b)`` in three kernels, the log-sum-exp update),
    the result cast back to bf16. Backward: fp32 ``zeros_like`` accumulators for dQ, dK, dV,
    the K/V copies and gather again, per step the flash backward, ``dK/dV +=`` (on a half then
    a ``torch.cat`` of the whole when the step used half of K/V), their fp32 concatenation sent
    to the next rank (``_AllToAllRotater``: ``permute_tensor``, waited for after the next
    step's attention), ``dQ +=``; finally dQ, dK, dV cast to bf16.

    Ranks differ in which steps use half of K/V (rank ``r``: steps ``1..r``); the per-step
    collectives of the backward make every rank wait for the slowest, so the merges are priced
    as the last rank of the group runs them (full-width merges on every step).
    """

    b, cp = parallel.micro_batch_size, parallel.cp
    e = dtype_bytes(dtype)
    c = s // cp
    n = float(b * c * heads * hd)
    rows = float(b * c * heads)  # log-sum-exp elements

    def mem(name: str, nbytes: float) -> Step:
        return Step(None, name, MemoryOp(OpKind.ELEMENTWISE, nbytes))

    def att(backward: bool, causal: bool, fraction: float) -> Step:
        return Step(None, "attention-bwd" if backward else "attention",
                    AttentionOp(b, heads, heads, c, hd, causal, backward, dtype, fraction, kernel))

    gather = Step(Stream.CP_COMM, "ncclAllGather attention-kv",
                  CommOp(CollectiveKind.ALL_GATHER, CommClass.CP, group, cp * 2 * n * e, replicas), wait=2)
    copies = [mem("cp-k-contiguous", 2 * n * e), mem("cp-v-contiguous", 2 * n * e)]
    cat_kv = mem("cp-kv-cat", 4 * n * e)
    lse_ops = [mem(f"cp-merge-lse-{k}", 3 * rows * _F32) for k in ("sub", "sigmoid", "sub2", "logsigmoid", "update")]
    fwd = [*copies, cat_kv, gather, att(False, True, 1.0), mem("cp-merge-to-f32", n * (e + _F32))]
    for i in range(1, cp):
        fwd += [cat_kv] if i < cp - 1 else []
        fwd += [att(False, False, 0.5), mem("cp-merge-to-f32", n * (e + _F32)),
                mem("cp-merge-diff", 3 * n * _F32), *lse_ops[:2], mem("cp-merge-scale", 2 * n * _F32),
                mem("cp-merge-update", 3 * n * _F32), *lse_ops[2:]]
    fwd.append(mem("cp-merge-to-bf16", n * (_F32 + e)))

    ring = CommOp(CollectiveKind.RING_EXCHANGE, CommClass.CP, group, 2 * n * _F32, replicas)
    bwd = [mem("cp-dq-zeros", n * _F32), mem("cp-dk-zeros", n * _F32), mem("cp-dv-zeros", n * _F32),
           *copies, cat_kv, Step(gather.stream, gather.name, gather.op, wait=5), att(True, True, 1.0),
           mem("cp-dk-add", n * (2 * _F32 + e)), mem("cp-dv-add", n * (2 * _F32 + e))]
    for i in range(1, cp + 1):
        # the step's dK/dV concatenated and sent on; step i + 1 (or the final cast) waits for it
        more = i < cp
        wait = 3 if i < cp - 1 else 2
        bwd += [mem("cp-dkv-cat", 4 * n * _F32),
                Step(Stream.CP_COMM, "ncclSendRecv attention-dkv", ring, wait=wait),
                mem("cp-dq-add", n * (2 * _F32 + e))]
        if not more:
            break
        bwd += [cat_kv] if i < cp - 1 else []
        bwd += [att(True, False, 0.5),
                mem("cp-dk-add-half", n / 2 * (2 * _F32 + e)), mem("cp-dk-cat", 2 * n * _F32),
                mem("cp-dv-add-half", n / 2 * (2 * _F32 + e)), mem("cp-dv-cat", 2 * n * _F32)]
    bwd += [mem("cp-dq-to-bf16", n * (_F32 + e)), mem("cp-dkv-to-bf16", 2 * n * (_F32 + e))]
    return fwd, bwd
