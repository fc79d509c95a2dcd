"""Data-parallel work of one rank's program: gradient buckets reduced during the backward
pass (Megatron-LM's DDP), and ZeRO-3/FSDP's per-layer weight gathers and gradient
reduce-scatters. A mixin of the task-graph builder's rank program (``self.b`` is the builder,
``self.collective`` issues a comm task); kept apart because it is its own concept.

Hybrid sharding (``parallel.dp_shard``, :mod:`sim.workload.layout`): weights are gathered
within the shard group only; a gradient is reduce-scattered within the shard group, then the
rank's shard (``1 / (dp_shard x cp)`` of it) is all-reduced across the replicas. FSDP2 runs
that all-reduce on its own stream after the reduce-scatter's (``foreach_reduce`` in
``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``: "if all_reduce_group is not
None:  # HSDP"), here :attr:`~sim.types.Stream.DP_REPLICATE`; Megatron-LM's distributed
optimizer with ``--num-distributed-optimizer-instances`` > 1 issues both on one
communication stream, one after the other (``_ParamAndGradBucketGroup.start_grad_sync`` in
``megatron/core/distributed/param_and_grad_buffer.py``), here both on
:attr:`~sim.types.Stream.DP_COMM`.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from sim.memory import FSDP_ACCUMULATED_GRAD_BYTES, layer_split
from sim.types import CollectiveKind, CommClass, FsdpCopies, MemoryAccess, OpKind, Stream
from sim.workload import deepspeed_zero3 as ds3
from sim.workload.ops import CommOp, MemoryOp

if TYPE_CHECKING:
    from sim.program import Task
    from sim.workload.layout import Layout
    from sim.workload.spec import WorkloadSpec

__all__ = ["DataParallelMixin", "DPScope", "FSDP_GRAD_BYTES", "FSDP_SHARD_BYTES", "GRAD_REDUCE_BYTES",
           "PARAM_GATHER_BYTES"]

GRAD_REDUCE_BYTES = 4.0
"""Gradients are reduced in fp32 under bf16 (Megatron-LM ``arguments.py``), unless the workload
turns :attr:`~sim.workload.kernels.KernelsSpec.grad_reduce_in_fp32` off
(:attr:`~sim.workload.kernels.KernelsSpec.grad_bytes`)."""
PARAM_GATHER_BYTES = 2.0
"""The distributed optimizer and ZeRO-3 gather 16-bit weights."""
FSDP_SHARD_BYTES = 4.0
"""Bytes per element of FSDP2's sharded parameters, fp32, which its all-gather copy-in casts to
the 16-bit parameter dtype (``MixedPrecisionPolicy(param_dtype=bfloat16)``; torchtitan
``--training.mixed_precision_param bfloat16``)."""
FSDP_GRAD_BYTES = 2.0
"""Bytes per element of the unsharded gradient the backward writes: the 16-bit parameter dtype."""


class DPScope(Enum):
    """Which data-parallel ranks a collective spans."""

    ALL = "all"
    """The whole (data x context)-parallel group."""
    SHARD = "shard"
    """The rank's ZeRO/FSDP shard group (the whole group without hybrid sharding)."""
    REPLICATE = "replicate"
    """The ranks holding the same shard, one per replica (hybrid sharding only)."""
    EXPERT = "expert"
    EXPERT_SHARD = "expert-shard"
    EXPERT_REPLICATE = "expert-replicate"
    """The same three for routed experts, over the expert-data-parallel group."""


class CommOpCache(Protocol):
    """What the mixin needs of the task-graph builder (``self.b``): its comm ops, shared by
    every task that moves the same bytes between the same ranks."""

    ops: dict[tuple, CommOp]

    def add(self, rank: int, stream: Stream, name: str, op: MemoryOp, deps: list[int], args: tuple) -> Task: ...


class DataParallelMixin:
    """Bucketed gradient reduction and ZeRO-3 gathers for :class:`_RankProgram`."""

    if TYPE_CHECKING:  # the rank program's state and primitive this mixin uses (sim.workload.taskgraph)
        b: CommOpCache
        w: WorkloadSpec
        layout: Layout
        rank: int
        tp_c: int
        dp_c: int
        stage: int
        rep: bool
        last_c: int
        extra: list[int]
        dp_tasks: list[int]
        ds_waits: list[int]
        _dp_groups: dict[DPScope, tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]

        def collective(self, stream: Stream, name: str, op: CommOp, args: tuple, deps: list[int]) -> Task: ...

    def dp_group_of(self, scope: DPScope) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """This rank's group of ``scope`` and, when ranks are representative, every group of
        that kind in its stage (the replicas that load the links alongside)."""
        cache = self._dp_groups
        hit = cache.get(scope)
        if hit is None:
            lay, t, d, s = self.layout, self.tp_c, self.dp_c, self.stage
            hybrid = lay.dp_replicate > 1
            every: Callable[[int], tuple[tuple[int, ...], ...]]  # a Layout method (some lru-cached)
            if scope is DPScope.ALL or (scope is DPScope.SHARD and not hybrid):
                group, every = lay.dp_group(t, s), lay.dp_groups
            elif scope is DPScope.SHARD:
                group, every = lay.dp_shard_group(t, d, s), lay.dp_shard_groups
            elif scope is DPScope.REPLICATE:
                group, every = lay.dp_replicate_group(t, d, s), lay.dp_replicate_groups
            elif scope is DPScope.EXPERT or (scope is DPScope.EXPERT_SHARD and not hybrid):
                group, every = lay.edp_group(t, d, s), lay.edp_groups
            elif scope is DPScope.EXPERT_SHARD:
                group, every = lay.edp_shard_group(t, d, s), lay.edp_shard_groups
            else:
                group, every = lay.edp_replicate_group(t, d, s), lay.edp_replicate_groups
            hit = cache[scope] = (group, every(s) if self.rep else ())
        return hit

    def dp_op(self, kind: CollectiveKind, size_bytes: float, scope: DPScope = DPScope.SHARD,
              issue_s: float = 0.0) -> CommOp:
        """The ``kind`` collective of ``size_bytes`` over this rank's ``scope`` group (by
        default its shard group: the (data x context)-parallel group unless hybrid), shared
        by every task that issues the same one; ``issue_s``: what issuing it costs besides
        the transfer (:attr:`CommOp.issue_s`)."""
        group, every = self.dp_group_of(scope)
        key = (kind, group, size_bytes, issue_s)
        op = self.b.ops.get(key)
        if op is None:
            op = self.b.ops[key] = CommOp(kind, CommClass.DP, group, size_bytes, every, issue_s=issue_s)
        return op

    def reduce_grads(self, params: float, args: tuple, name: str, expert: bool = False,
                     replicate_stream: Stream = Stream.DP_COMM) -> None:
        """Reduce-scatter ``params`` gradients (fp32, or 16-bit without
        ``grad_reduce_in_fp32``) over the shard group after the last compute task, then, under
        hybrid sharding, all-reduce the rank's shard across the replicas on ``replicate_stream``
        once the reduce-scatter is done."""
        shard, _ = self.dp_group_of(DPScope.EXPERT_SHARD if expert else DPScope.SHARD)
        size = params * self.w.kernels.grad_bytes
        deps = [self.last_c]
        if len(shard) > 1:
            op = self.dp_op(CollectiveKind.REDUCE_SCATTER, size, DPScope.EXPERT_SHARD if expert else DPScope.SHARD)
            t = self.collective(Stream.DP_COMM, f"ncclReduceScatter {name}", op, args, deps)
            self.dp_tasks.append(t.id)
            deps = [t.id]
        if self.layout.dp_replicate > 1:
            op = self.dp_op(CollectiveKind.ALL_REDUCE, size / len(shard),
                            DPScope.EXPERT_REPLICATE if expert else DPScope.REPLICATE)
            t = self.collective(replicate_stream, f"ncclAllReduce {name} (replicas)", op, args, deps)
            self.dp_tasks.append(t.id)

    # -- ZeRO-3 / FSDP ---------------------------------------------------------------------
    def fsdp_gather(self, params: float, args: tuple, after: int) -> None:
        """All-gather one layer's 16-bit weights over the shard group before it computes,
        issued when the layer before it starts (FSDP2's one-module forward and backward
        prefetch; Zhao et al. 2023, "PyTorch FSDP", arXiv 2304.11277, Sec. 3.3). Nothing
        when the shard group is one rank (hybrid sharding with ``dp_shard x cp = 1``).

        With FSDP2's copies (:attr:`~sim.types.FsdpCopies.FSDP2`) the gather first waits for
        the copy of the rank's fp32 shards into its 16-bit input (the copy-in stream's
        ``torch._foreach_copy_``, priced as the op's issue time), and the layer's first kernel
        waits for the copy of the gathered buffer into each parameter, on the compute stream
        (``foreach_all_gather_copy_out``: ``torch.split_with_sizes_copy`` reads and writes
        the layer's 16-bit weights once)."""
        shard = len(self.dp_group_of(DPScope.SHARD)[0])
        if shard == 1:
            return
        copies = self.w.kernels.fsdp_copies is FsdpCopies.FSDP2
        issue = self._hbm_s(params / shard * (FSDP_SHARD_BYTES + PARAM_GATHER_BYTES)) if copies else 0.0
        op = self.dp_op(CollectiveKind.ALL_GATHER, params * PARAM_GATHER_BYTES, issue_s=issue)
        t = self.collective(Stream.DP_GATHER, "ncclAllGather fsdp-params", op, args, [after] if after >= 0 else [])
        self.extra.append(t.id)
        if copies:
            self.fsdp_copy("fsdp copy-out", params * 2 * PARAM_GATHER_BYTES, args)

    def fsdp_reduce(self, params: float, args: tuple, accumulated: bool = False) -> None:
        """Reduce-scatter one layer's gradients (fp32) right after its backward (and, hybrid,
        all-reduce the shard across the replicas on FSDP2's all-reduce stream).

        With FSDP2's copies the reduce-scatter waits for the copy of the layer's gradients
        into its input in the reduce dtype, which the compute stream waits for too
        (``foreach_reduce``: ``torch._chunk_cat``, widening the 16-bit gradients, or reading
        the ``accumulated`` ones, already in the reduce dtype)."""
        if self.w.kernels.fsdp_copies is FsdpCopies.FSDP2:
            read = FSDP_ACCUMULATED_GRAD_BYTES if accumulated else FSDP_GRAD_BYTES
            self.fsdp_copy("fsdp copy-in", params * (read + self.w.kernels.grad_bytes), args)
        self.reduce_grads(params, args, "fsdp-grads", replicate_stream=Stream.DP_REPLICATE)

    def fsdp_accumulate(self, params: float, args: tuple, first: bool) -> None:
        """FSDP2 with gradient sync off (all but the last micro-batch under pipeline
        parallelism): the layer's 16-bit gradient of this micro-batch is upcast into the
        unsharded fp32 one (``FSDPParam.to_accumulated_grad_if_needed`` the ``first`` time,
        ``accumulate_unsharded_grad_if_needed`` after: PyTorch's casting elementwise kernels,
        :attr:`~sim.types.MemoryAccess.UPCAST`)."""
        if self.w.kernels.fsdp_copies is not FsdpCopies.FSDP2:
            return
        acc = FSDP_ACCUMULATED_GRAD_BYTES
        nbytes = params * (FSDP_GRAD_BYTES + acc if first else FSDP_GRAD_BYTES + 2 * acc)
        self.fsdp_copy("fsdp grad-accumulate", nbytes, args, MemoryAccess.UPCAST)

    def fsdp_copy(self, name: str, nbytes: float, args: tuple, access: MemoryAccess = MemoryAccess.STREAM) -> None:
        """One of FSDP2's copies on the compute stream, after everything issued before it (the
        gather it copies out of, the backward whose gradients it copies in); the next compute
        kernel follows it. Collectives left pending keep their count of kernels to wait out."""
        deps = self.extra
        self.extra = []
        if self.last_c >= 0:
            deps.append(self.last_c)
        t = self.b.add(self.rank, Stream.COMPUTE, name, MemoryOp(OpKind.ELEMENTWISE, nbytes, access), deps, args)
        self.last_c = t.id

    def _hbm_s(self, nbytes: float) -> float:
        gpu = self.w.system.gpu
        return nbytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency) + gpu.kernel_launch_s

    # -- DeepSpeed 0.3 ZeRO-3 (sim.workload.deepspeed_zero3) ------------------------------
    def ds_tensors(self, vs: int, layer: int, first: bool, last: bool) -> tuple[float, ...]:
        """One layer's parameter tensors on this GPU, the embedding (one tensor) folded into
        the model's first or last layer as :meth:`layer_params` folds it."""
        m, p = self.w.model, self.w.parallel
        out = ds3.layer_tensors(m, layer, p.tp)
        emb = m.embedding_params() / p.tp
        if vs == 0 and first:
            positions = (float(m.learned_positions * m.hidden_size),) if m.learned_positions else ()
            out = (emb,) + positions + out
        if vs == p.pp * p.virtual_pipeline_stages - 1 and last and (p.pp > 1 or not m.tied_embeddings):
            out = out + (emb,)
        return out

    def ds_gather(self, tensors: tuple[float, ...], args: tuple, keep_last: bool = False) -> None:
        """DeepSpeed 0.3's fetch of a layer's modules: one all-gather per gathered tensor, each
        after everything before it on the device (its ``torch.cuda.synchronize()``), the next
        compute after all of them, each carrying the hooks' host time
        (:data:`~sim.workload.deepspeed_zero3.FETCH_HOST_S`) on top of its per-rank issue cost;
        ``keep_last``: the last tensor is still gathered (a recomputed forward's last module,
        kept for the backward that follows at once)."""
        shard, _ = self.dp_group_of(DPScope.SHARD)
        big = ds3.gathered(tensors)
        if len(shard) == 1 or not big:
            return
        if keep_last:
            big = big[:-1]
        gpu = self.w.system.gpu
        for numel in big:
            size = numel * PARAM_GATHER_BYTES
            op = self.dp_op(CollectiveKind.ALL_GATHER, size,
                            issue_s=ds3.gather_issue_s(len(shard), size, gpu) + ds3.FETCH_HOST_S)
            deps = ([self.last_c] if self.last_c >= 0 else []) + self.ds_waits
            t = self.collective(Stream.DP_GATHER, "ncclAllGather ds-param", op, args, deps)
            self.ds_waits = []
            self.extra.append(t.id)

    def ds_reduce(self, tensors: tuple[float, ...], args: tuple) -> None:
        """DeepSpeed 0.3's gradient reduction of a layer: one fp16 reduce-scatter per tensor
        (persistent ones too), which the next gather's device-wide synchronize waits for."""
        shard, _ = self.dp_group_of(DPScope.SHARD)
        if len(shard) == 1:
            return
        gpu = self.w.system.gpu
        for numel in tensors:
            size = numel * ds3.GRAD_BYTES
            op = self.dp_op(CollectiveKind.REDUCE_SCATTER, size, issue_s=ds3.reduce_issue_s(len(shard), size, gpu))
            t = self.collective(Stream.DP_COMM, "ncclReduceScatter ds-grads", op, args, [self.last_c])
            self.dp_tasks.append(t.id)
            self.ds_waits.append(t.id)
            self.extra.append(t.id)

    def ds_persistent_gather(self, vs_layers: tuple[range, ...], after: int) -> None:
        """DeepSpeed 0.3's ``_post_step``: one all-gather of every persistent (small)
        parameter of the stage after the optimizer step, unpacked rank by rank in Python."""
        shard, _ = self.dp_group_of(DPScope.SHARD)
        p = self.w.parallel
        small = [x for vs in range(self.stage, p.pp * p.virtual_pipeline_stages, p.pp)
                 for layer in vs_layers[vs]
                 for x in ds3.persistent(ds3.layer_tensors(self.w.model, layer, p.tp))]
        if self.stage == p.pp - 1:
            small += [float(self.w.model.hidden_size)] * 2  # the final norm's weight and bias
        if len(shard) == 1 or not small:
            return
        size = sum(small) * PARAM_GATHER_BYTES
        op = self.dp_op(CollectiveKind.ALL_GATHER, size,
                        issue_s=ds3.persistent_issue_s(len(shard), len(small), size, self.w.system.gpu))
        self.collective(Stream.DP_COMM, "ncclAllGather ds-persistent-params", op, (("phase", "param-sync"),),
                        [after])

    def layer_params(self, vs: int, layer: int, first: bool, last: bool) -> float:
        """One layer's parameters on this GPU, the embedding or output layer folded into the
        first or last layer of the model (for ZeRO-3 gathers)."""
        m, p = self.w.model, self.w.parallel
        split, replicated = layer_split(m)
        params = split / p.tp + replicated
        emb = m.embedding_params() / p.tp
        if vs == 0 and first:
            params += m.input_embedding_params(p.tp)
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
            if vs == pp * v - 1 and m.mtp_num_layers:  # the multi-token-prediction modules
                experts = m.mtp_num_layers * m.expert_params(m.mtp_layer)  # reduced with the experts'
                acc += (m.mtp_params() - experts) / p.tp + (emb if pp > 1 and not m.tied_embeddings else 0.0)
            last_layer = None
            for layer in reversed(vs_layers[vs]):
                acc += (m.layer_params(layer) - m.expert_params(layer)) / p.tp
                last_layer = layer
                if acc >= p.grad_bucket_size_params:
                    out.setdefault((chunk, layer), []).append(acc)
                    acc = 0.0
            if vs == 0:
                acc += m.input_embedding_params(p.tp)
            if acc > 0:
                key = (chunk, "end") if vs == 0 or last_layer is None else (chunk, last_layer)
                out.setdefault(key, []).append(acc)
        return out

    def reduce_bucket(self, params: float, args: tuple) -> None:
        """Reduce one gradient bucket: all-reduced over the (data x context)-parallel group,
        or with the distributed optimizer reduce-scattered over the shard group (and, with
        several optimizer instances, its shard all-reduced across them); DeepSpeed's bf16
        optimizer all-reduces it though it shards the optimizer
        (:attr:`~sim.workload.spec.ParallelSpec.reduce_scatters_grads`)."""
        p = self.w.parallel
        args = args + (("params", params),)
        if p.reduce_scatters_grads:
            self.reduce_grads(params, args, "grads")
            return
        op = self.dp_op(CollectiveKind.ALL_REDUCE, params * self.w.kernels.grad_bytes, DPScope.ALL)
        t = self.collective(Stream.DP_COMM, "ncclAllReduce grads", op, args, [self.last_c])
        self.dp_tasks.append(t.id)

    # -- expert data parallel --------------------------------------------------------------
    def edp_op(self, kind: CollectiveKind, size_bytes: float) -> CommOp:
        """The ``kind`` collective over this rank's expert-data-parallel group (the ranks that
        hold the same experts), shared like :meth:`dp_op`."""
        return self.dp_op(kind, size_bytes, DPScope.EXPERT)

    def reduce_experts(self, layer: int, args: tuple) -> None:
        """Reduce one MoE layer's routed-expert gradients over the expert-data-parallel group
        (Megatron-Core keeps expert parameters in their own gradient buffer, reduced over
        ``expert_data_parallel_group``; with several optimizer instances reduce-scattered over
        its intra-instance part and all-reduced across the instances)."""
        w, p = self.w, self.w.parallel
        params = w.model.expert_params(layer) / (p.expert_tp * p.ep)
        if not params or p.expert_dp == 1:
            return
        args = args + (("params", params),)
        if p.reduce_scatters_grads:
            self.reduce_grads(params, args, "expert-grads", expert=True)
            return
        op = self.edp_op(CollectiveKind.ALL_REDUCE, params * self.w.kernels.grad_bytes)
        t = self.collective(Stream.DP_COMM, "ncclAllReduce expert-grads", op, args, [self.last_c])
        self.dp_tasks.append(t.id)
