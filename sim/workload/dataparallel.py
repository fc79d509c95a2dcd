"""Data-parallel work of one rank's program: gradient buckets reduced during the backward
pass (Megatron-LM's DDP), and ZeRO-3/FSDP's per-layer weight gathers and gradient
reduce-scatters. A mixin of the task-graph builder's rank program (``self.b`` is the builder,
``self.collective`` issues a comm task); kept apart because it is its own concept.
"""

from __future__ import annotations

from sim.memory import _layer_split
from sim.types import CollectiveKind, CommClass, Stream
from sim.workload.ops import CommOp

__all__ = ["DataParallelMixin", "GRAD_REDUCE_BYTES", "PARAM_GATHER_BYTES"]

GRAD_REDUCE_BYTES = 4.0
"""Gradients are reduced in fp32 under bf16 (Megatron-LM ``arguments.py``)."""
PARAM_GATHER_BYTES = 2.0
"""The distributed optimizer and ZeRO-3 gather 16-bit weights."""


class DataParallelMixin:
    """Bucketed gradient reduction and ZeRO-3 gathers for :class:`_RankProgram`."""

    # -- ZeRO-3 / FSDP ---------------------------------------------------------------------
    def dp_op(self, kind: CollectiveKind, size_bytes: float) -> CommOp:
        """The ``kind`` collective of ``size_bytes`` over this rank's (data x context)-parallel
        group, shared by every task that issues the same one."""
        key = (kind, self.stage, self.tp_c, size_bytes)
        op = self.b.ops.get(key)
        if op is None:
            lay = self.layout
            op = self.b.ops[key] = CommOp(kind, CommClass.DP, lay.dp_group(self.tp_c, self.stage), size_bytes,
                                          lay.dp_groups(self.stage) if self.rep else ())
        return op

    def fsdp_gather(self, params: float, args: tuple, after: int) -> None:
        """All-gather one layer's 16-bit weights over the DP group before it computes, issued
        when the layer before it starts (FSDP2's one-module forward and backward prefetch;
        Zhao et al. 2023, "PyTorch FSDP", arXiv 2304.11277, Sec. 3.3)."""
        op = self.dp_op(CollectiveKind.ALL_GATHER, params * PARAM_GATHER_BYTES)
        t = self.collective(Stream.DP_GATHER, "ncclAllGather fsdp-params", op, args, [after] if after >= 0 else [])
        self.extra.append(t.id)

    def fsdp_reduce(self, params: float, args: tuple) -> None:
        """Reduce-scatter one layer's gradients (fp32) right after its backward."""
        op = self.dp_op(CollectiveKind.REDUCE_SCATTER, params * GRAD_REDUCE_BYTES)
        t = self.collective(Stream.DP_COMM, "ncclReduceScatter fsdp-grads", op, args, [self.last_c])
        self.dp_tasks.append(t.id)

    def layer_params(self, vs: int, layer: int, first: bool, last: bool) -> float:
        """One layer's parameters on this GPU, the embedding or output layer folded into the
        first or last layer of the model (for ZeRO-3 gathers)."""
        m, p = self.w.model, self.w.parallel
        split, replicated = _layer_split(m)
        params = split / p.tp + replicated
        emb = m.embedding_params() / p.tp
        if vs == 0 and first:
            params += emb
        if vs == p.pp * p.virtual_pipeline_stages - 1 and last and (p.pp > 1 or not m.tied_embeddings):
            params += emb
        return params

    # -- data parallel ---------------------------------------------------------------------
    def buckets(self, vs_layers: tuple[range, ...]) -> dict[tuple, list[float]]:
        """Gradient buckets (parameter counts), keyed by the (chunk, layer) after whose last
        backward they are complete; ``(chunk, "end")`` for the chunk's embedding/head params.

        Layers fill buckets of at least ``grad_bucket_size_params`` in backward order, as
        Megatron-LM's DDP does (``megatron/core/distributed/param_and_grad_buffer.py``).
        """
        w, p = self.w, self.w.parallel
        if p.dp * p.cp == 1 or p.zero >= 3:
            return {}
        m = w.model
        pp, v = p.pp, p.virtual_pipeline_stages
        emb = m.embedding_params() / p.tp
        out: dict[tuple, list[float]] = {}
        for chunk in range(v):
            vs = chunk * pp + self.stage
            acc = 0.0
            if vs == pp * v - 1 and (pp > 1 or not m.tied_embeddings):
                acc += emb
            last_layer = None
            for layer in reversed(vs_layers[vs]):
                acc += (m.layer_params(layer) - m.expert_params(layer)) / p.tp
                last_layer = layer
                if acc >= p.grad_bucket_size_params:
                    out.setdefault((chunk, layer), []).append(acc)
                    acc = 0.0
            if vs == 0:
                acc += emb
            if acc > 0:
                key = (chunk, "end") if vs == 0 else (chunk, last_layer)
                out.setdefault(key, []).append(acc)
        return out

    def reduce_bucket(self, params: float, args: tuple) -> None:
        p = self.w.parallel
        kind = CollectiveKind.REDUCE_SCATTER if p.shards_optimizer else CollectiveKind.ALL_REDUCE
        op = self.dp_op(kind, params * GRAD_REDUCE_BYTES)
        name = "ncclReduceScatter grads" if p.shards_optimizer else "ncclAllReduce grads"
        t = self.collective(Stream.DP_COMM, name, op, args + (("params", params),), [self.last_c])
        self.dp_tasks.append(t.id)

    # -- expert data parallel --------------------------------------------------------------
    def edp_op(self, kind: CollectiveKind, size_bytes: float) -> CommOp:
        """The ``kind`` collective over this rank's expert-data-parallel group (the ranks that
        hold the same experts), shared like :meth:`dp_op`."""
        lay = self.layout
        group = lay.edp_group(self.tp_c, self.dp_c, self.stage)
        key = ("edp", kind, group, size_bytes)
        op = self.b.ops.get(key)
        if op is None:
            op = self.b.ops[key] = CommOp(kind, CommClass.DP, group, size_bytes,
                                          lay.edp_groups(self.stage) if self.rep else ())
        return op

    def reduce_experts(self, layer: int, args: tuple) -> None:
        """Reduce one MoE layer's routed-expert gradients over the expert-data-parallel group
        (Megatron-Core keeps expert parameters in their own gradient buffer, reduced over
        ``expert_data_parallel_group``)."""
        w, p = self.w, self.w.parallel
        params = w.model.expert_params(layer) / (p.expert_tp * p.ep)
        if not params or p.expert_dp == 1:
            return
        kind = CollectiveKind.REDUCE_SCATTER if p.shards_optimizer else CollectiveKind.ALL_REDUCE
        op = self.edp_op(kind, params * GRAD_REDUCE_BYTES)
        name = "ncclReduceScatter expert-grads" if p.shards_optimizer else "ncclAllReduce expert-grads"
        t = self.collective(Stream.DP_COMM, name, op, args + (("params", params),), [self.last_c])
        self.dp_tasks.append(t.id)
