"""The workload generator: a transformer and a parallel strategy become a task program.

For each simulated rank it emits, per stream and in issue order, the tasks of one training
iteration: the pipeline schedule's forward and backward passes (layer ops, TP collectives,
recomputation), pipeline sends and receives, the data-parallel gradient reduction in buckets,
and the optimizer step. Tasks name their cross-stream dependencies; the order on one stream is
the dependency within it (streams run in order, like CUDA streams).

By default one representative rank per pipeline stage is simulated (TP and DP ranks of a
stage run the same program); their collectives are still planned over the real groups, and
the flows of the other ranks load the links (:func:`sim.costs.comm.plan_comm`). With
``representative=False`` every rank is simulated and collectives wait for all members.

At ``granularity="layer"`` each transformer layer's forward, backward (with its recompute) and
zero-bubble weight-gradient pass of each micro-batch is one :class:`~sim.program.Block`
task instead of one task per op: the engine times the block alone (its ops priced as usual,
its collectives at their solo times, overlaps as the steps' waits say) and places it on the
compute stream for that long; its spans show each comm class's exposed time, then the compute.
The embedding, output layer, pipeline transfers, data-parallel and ZeRO/FSDP traffic and
the optimizer stay tasks of their own, so bubbles and data-parallel overlap still come from the
timeline; the memory deltas of a layer sit on its block, at the pass's start and end. At
``granularity="chunk"`` a model chunk's pass over its layers is one block where nothing is
issued between them; a backward pass under block recomputation
(:attr:`~sim.workload.spec.ParallelSpec.recompute_num_layers`) is two, the layers it keeps and
then those it recomputes, so that each holds its own transient memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.memory import ActivationModel, BoundaryHolds, activation_model, boundary_holds, stage_memory, state_bytes
from sim.program import Block, Program, Task
from sim.results import RankInfo
from sim.types import CollectiveKind, CommClass, OpKind, RecomputeKind, ScheduleKind, Stream, ZeroImpl
from sim.workload.dataparallel import GRAD_REDUCE_BYTES, PARAM_GATHER_BYTES, DataParallelMixin, DPScope
from sim.workload.deepspeed_pipe import PipeCommand, PipeInstruction, exchanges_by_pass
from sim.workload.ep_overlap import split_backward, split_forward
from sim.workload.flops import model_flops
from sim.workload.layers import LayerOps, backward_steps, layer_ops
from sim.workload.layout import Layout
from sim.workload.ops import CommOp, Op
from sim.workload.schedules import Pass, pipeline_order, steady_pairs
from sim.workload.spec import WorkloadSpec
from sim.workload.step_passes import optimizer_op

__all__ = ["Task", "Program", "build_program", "GRAD_REDUCE_BYTES", "GRANULARITIES"]

GRANULARITIES = ("op", "layer", "chunk")
"""``op``: a task per op; ``layer``: a layer pass per block; ``chunk``: a model chunk's pass
over its layers per block where nothing is issued between its layers (see the module
docstring)."""

# Task and Program live in sim.program (shared with the engine); re-exported here.


class _Builder:
    """Holds the growing program; one :class:`_RankProgram` per simulated rank writes into it."""

    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.streams: dict[tuple[int, Stream], list[int]] = {}
        self.keys: dict[tuple, int] = {}
        self.early_block_waits = 0
        """Blocks that wait at their start for a collective a later op of their pass waits for."""
        self.members: dict[int, int] = {}
        self.ops: dict[tuple, CommOp] = {}
        """Comm ops shared by every task that moves the same bytes between the same ranks."""
        self.blocks: dict[tuple, tuple] = {}
        self._by_rank: dict[int, dict[Stream, list[int]]] = {}
        self.steps: dict[tuple, tuple] = {}
        """Layer granularity: (block, its first comm group or None, its compute op count) per
        step list."""

    def block_steps(self, key: tuple, steps) -> tuple:
        """The step list ``key`` names (``steps()`` builds it on the first call)."""
        st = self.steps.get(key)
        if st is None:
            st = self.steps[key] = tuple(steps())
        return st

    def block(self, key: tuple, steps) -> tuple:
        """The :class:`Block` of the step list ``key`` names (``steps()`` builds the list on
        the first call), shared by every layer and micro-batch that runs it."""
        hit = self.blocks.get(key)
        if hit is None:
            st = self.block_steps(key, steps)
            blk = Block(tuple(x.op for x in st), tuple(x.stream for x in st), tuple(x.wait for x in st))
            classes = blk.comm_classes()
            hit = self.blocks[key] = (blk, classes[0][2] if classes else None,
                                      sum(1 for x in st if x.stream is None))
        return hit

    def add(self, rank: int, stream: Stream, name: str, op: Op, deps: list[int], args: tuple,
            key: tuple | None = None, kind: OpKind | None = None) -> Task:
        comm = isinstance(op, CommOp)
        if kind is None:
            kind = op.op_kind if comm else op.kind  # type: ignore[union-attr]  # comm: op is a CommOp
        tasks = self.tasks
        task = Task(len(tasks), rank, stream, name, op, kind, comm, deps, args)
        if key is not None:
            k = self.keys.setdefault(key, len(self.keys))
            task.coll_key = k
            self.members[k] = self.members.get(k, 0) + 1
        tasks.append(task)
        lists = self.rank_streams(rank)
        lst = lists.get(stream)
        if lst is None:
            lst = lists[stream] = self.streams[(rank, stream)] = []
        lst.append(task.id)
        return task

    def rank_streams(self, rank: int) -> dict[Stream, list[int]]:
        """``rank``'s entries of :attr:`streams` by stream (the same lists)."""
        lists = self._by_rank.get(rank)
        if lists is None:
            lists = self._by_rank[rank] = {s: ids for (r, s), ids in self.streams.items() if r == rank}
        return lists


class _RankProgram(DataParallelMixin):
    """Writes one simulated rank's tasks."""

    def __init__(self, b: _Builder, w: WorkloadSpec, layout: Layout, rank: int, ops: LayerOps,
                 representative: bool, layer: bool = False, chunk: bool = False) -> None:
        self.b: _Builder = b
        self.w, self.layout, self.rank = w, layout, rank
        self.tp_c, self.dp_c, self.stage = layout.coords(rank)
        self.ops = ops
        self.rep = representative
        self.last_c = -1
        self.pass_end: dict[Pass, int] = {}
        """The last compute task of this rank's latest forward and backward pass (:meth:`recv`)."""
        self.pending: list[list[int]] = []   # [task id, computes left before it is waited for]
        self.p2p_last = -1
        """Under blocking p2p (DeepSpeed's pipeline engine) the latest send or receive, which the
        next one waits for (:meth:`send`, :meth:`recv`)."""
        self.extra: list[int] = []
        self.seq: dict[tuple, int] = {}
        self.dp_tasks: list[int] = []
        self.ds_waits: list[int] = []
        self.fsdp_accumulated: set[tuple[int, int]] = set()
        """FSDP under PP: the (virtual stage, layer) whose unsharded gradient is accumulating."""
        """DeepSpeed 0.3 ZeRO-3: reduce-scatters the next gather's synchronize waits for."""
        self._dp_groups: dict = {}
        """This rank's data-parallel groups by scope (:meth:`dp_group_of`)."""
        self.layer = layer or chunk
        self.chunk = chunk

    # -- primitives ---------------------------------------------------------------------
    def compute(self, name: str, op: Op, args: tuple, kind: OpKind | None = None) -> Task:
        deps = self.extra
        self.extra = []
        if self.pending:
            keep = []
            for p in self.pending:
                if p[1] == 0:
                    deps.append(p[0])
                else:
                    p[1] -= 1
                    keep.append(p)
            self.pending = keep
        t = self.b.add(self.rank, Stream.COMPUTE, name, op, deps, args, kind=kind)
        self.last_c = t.id
        return t

    def collective(self, stream: Stream, name: str, op: CommOp, args: tuple, deps: list[int]) -> Task:
        n = self.seq.get(op.group, 0)
        self.seq[op.group] = n + 1
        return self.b.add(self.rank, stream, name, op, deps, args, key=(op.group, n))

    def run_steps(self, steps, args: tuple, first_mem: float = 0.0, last_mem: float = 0.0
                  ) -> tuple[Task | None, Task | None]:
        """Issue ``steps``; return the first and last compute task.

        The tasks are those :meth:`compute` and :meth:`collective` would add one at a time,
        made here in one loop (this runs for every op of every layer pass)."""
        first = last = None
        b, rank = self.b, self.rank
        tasks, seq, keys, members = b.tasks, self.seq, b.keys, b.members
        lists = b.rank_streams(rank)
        compute_ids = lists.get(Stream.COMPUTE)
        last_c, pending, extra = self.last_c, self.pending, self.extra
        for st in steps:
            stream = st.stream
            tid = len(tasks)
            if stream is not None:
                op = st.op
                n = seq.get(op.group, 0)
                seq[op.group] = n + 1
                t = Task(tid, rank, stream, st.name, op, st.kind, True, [last_c] if last_c >= 0 else [], args)
                k = keys.setdefault((op.group, n), len(keys))
                t.coll_key = k
                members[k] = members.get(k, 0) + 1
                ids = lists.get(stream)
                if ids is None:
                    ids = lists[stream] = b.streams[(rank, stream)] = []
                ids.append(tid)
                pending.append([tid, st.wait])
                if not st.wait:  # the next compute op waits for it
                    t.alone = True
            else:
                deps, extra = extra, []
                if pending:
                    keep = []
                    for p in pending:
                        if p[1] == 0:
                            deps.append(p[0])
                        else:
                            p[1] -= 1
                            keep.append(p)
                    pending = keep
                t = Task(tid, rank, Stream.COMPUTE, st.name, st.op, st.kind, False, deps, args)
                if compute_ids is None:
                    compute_ids = lists[Stream.COMPUTE] = b.streams[(rank, Stream.COMPUTE)] = []
                compute_ids.append(tid)
                last_c, last = tid, t
                if first is None:
                    first = t
            tasks.append(t)
        self.last_c, self.pending, self.extra = last_c, pending, extra
        if first is not None:
            assert last is not None  # set with first
            first.mem_start_bytes += first_mem
            last.mem_end_bytes += last_mem
        return first, last

    def hold(self, delta: float) -> None:
        """Change the memory in use by ``delta`` bytes at the end of the last compute task
        issued (what a pipeline runtime holds at a pass's end, :func:`sim.memory.boundary_holds`)."""
        if delta and self.last_c >= 0:
            self.b.tasks[self.last_c].mem_end_bytes += delta

    def run_block(self, key: tuple, steps, args: tuple, name: str, first_mem: float = 0.0,
                  last_mem: float = 0.0, split_first: bool = False) -> Task:
        """Issue a layer pass as one :class:`Block` task on the compute stream (layer
        granularity), with the pass's memory deltas; return its first task. It waits for what
        the pass's first op would (a received activation, a gathered weight, a collective left
        pending); every simulated member of its first comm class's group meets at its start,
        as they would at the pass's first collective.

        ``split_first``: the pass's first op stays a task of its own, for what is issued once
        it has run (ZeRO-3/FSDP prefetch the next layer's weights then)."""
        if split_first:
            st = self.b.block_steps(key, steps)
            if st and st[0].stream is None:
                head = self.compute(st[0].name, st[0].op, args, st[0].kind)
                head.mem_start_bytes += first_mem
                self.run_block(key + ("tail",), lambda: st[1:], args, name, 0.0, last_mem)
                return head
        blk, group, n_compute = self.b.block(key, steps)
        deps = self.extra
        self.extra = []
        if self.pending:
            keep = []
            for p in self.pending:
                if p[1] < n_compute:
                    deps.append(p[0])
                    if p[1]:
                        self.b.early_block_waits += 1
                else:
                    p[1] -= n_compute
                    keep.append(p)
            self.pending = keep
        meet = None
        if group is not None and not self.rep:
            n = self.seq.get(("block", group), 0)
            self.seq[("block", group)] = n + 1
            meet = ("block", group, n)
        t = self.b.add(self.rank, Stream.COMPUTE, name, blk, deps, args, key=meet, kind=blk.kind)
        t.mem_start_bytes += first_mem
        t.mem_end_bytes += last_mem
        self.last_c = t.id
        return t

    def chunk_block(self, phase: str, layers, args: tuple, steps_of, first_mem: float = 0.0,
                    last_mem: float = 0.0, rcs: tuple = ()) -> Task:
        """Chunk granularity: the pass ``phase`` over ``layers`` (in the order given) as one
        block, the layers' steps one after another, with the pass's memory deltas at its start
        and end (see the module docstring). ``steps_of(lops, rc)`` gives a layer's steps under
        its recomputation, ``rcs[i]`` that of ``layers[i]`` (none when not given)."""
        lops = [self.layer_ops(x) for x in layers]
        rcs = rcs or (RecomputeKind.NONE,) * len(layers)
        key = (tuple(id(x) for x in lops), rcs, phase, "chunk")
        name = f"chunk-{phase}"
        la = args + (("layers", f"{layers[0]}..{layers[-1]}"),)
        return self.run_block(key, lambda: tuple(st for x, rc in zip(lops, rcs) for st in steps_of(x, rc)), la,
                              name, first_mem=first_mem, last_mem=last_mem)

    def layer_ops(self, layer: int) -> LayerOps:
        """The step lists of transformer layer ``layer`` (MoE or dense, low precision or BF16)."""
        return self.ops.for_layer(self.w.model.is_moe_layer(layer), self.w.is_bf16_layer(layer))

    # -- pipeline ------------------------------------------------------------------------
    def stage_rank(self, stage: int) -> int:
        if self.rep:
            return self.layout.rank(0, 0, stage)
        return self.layout.rank(self.tp_c, self.dp_c, stage)

    def p2p_op(self, src: int, dst: int, size: float) -> CommOp:
        op = self.b.ops.get(("p2p", src, dst, size))
        if op is None:
            lay = self.layout
            replicas = lay.stage_pairs(lay.coords(src)[2], lay.coords(dst)[2]) if self.rep else ()
            op = self.b.ops[("p2p", src, dst, size)] = CommOp(CollectiveKind.SEND_RECV, CommClass.PP,
                                                               (src, dst), size, replicas)
        return op

    def send(self, kind: str, vs: int, mb: int, dst_stage: int, size: float, args: tuple) -> None:
        """Send an activation (``kind`` "act") or its gradient ("grad") to ``dst_stage`` once
        the compute before it ends. Megatron's schedules do not wait for a send; under
        :attr:`~sim.workload.spec.ParallelSpec.blocking_p2p` the next send or receive and the
        next pass wait for it."""
        dst = self.stage_rank(dst_stage)
        stream = Stream.PP_SEND if kind == "act" else Stream.PP_SEND_GRAD
        key = ("p2p", kind, vs, mb, self.tp_c, self.dp_c)
        t = self.b.add(self.rank, stream, f"ncclSend {kind}", self.p2p_op(self.rank, dst, size),
                       self._after_p2p([self.last_c]), args, key=key)
        t.flow_id = t.coll_key
        if self.w.parallel.blocking_p2p:
            self.extra.append(t.id)
            self.p2p_last = t.id

    def _after_p2p(self, deps: list[int]) -> list[int]:
        """``deps``, and under blocking p2p the latest send or receive too."""
        return deps + [self.p2p_last] if self.p2p_last >= 0 else deps

    def exchange(self, c: PipeCommand, size: float) -> None:
        """Issue one of DeepSpeed's exchange commands (:mod:`sim.workload.deepspeed_pipe`) of this
        rank's stage (one model chunk a rank)."""
        vs, pp, mb, kind = self.stage, self.w.parallel.pp, c.microbatch, c.instruction
        fwd = (("phase", "fwd"), ("microbatch", mb), ("chunk", 0))
        bwd = (("phase", "bwd"), ("microbatch", mb), ("chunk", 0))
        if kind is PipeInstruction.SEND_ACTIVATION:
            self.send("act", vs + 1, mb, vs + 1, size, fwd)
        elif kind is PipeInstruction.RECV_ACTIVATION:
            self.recv("act", vs, mb, vs - 1, size, fwd)
        elif kind is PipeInstruction.SEND_GRAD:
            self.send("grad", vs - 1, mb, vs - 1, size, bwd)
        else:
            assert kind is PipeInstruction.RECV_GRAD and vs + 1 < pp, c
            self.recv("grad", vs, mb, vs + 1, size, bwd)

    def recv(self, kind: str, vs: int, mb: int, src_stage: int, size: float, args: tuple) -> None:
        """Receive an activation (``kind`` "act") or its gradient ("grad") from ``src_stage``.

        The receive is posted when the compute before it ends, as Megatron-Core's 1F1B schedule
        does (``forward_backward_pipelining_without_interleaving``: ``send_forward_recv_backward``
        and ``send_backward_recv_forward`` wait before the next pass), except under the
        interleaved schedule with :attr:`~sim.workload.spec.ParallelSpec.overlap_p2p_comm`:
        there Megatron-Core posts the receive of the next pass's input when the current pass of
        the same direction ends and waits for it just before that pass, so the transfer runs
        while the pass of the other direction in between computes
        (``forward_backward_pipelining_with_interleaving`` with ``overlap_p2p_comm``:
        ``send_forward_recv_forward(..., overlap_p2p_comm=True)`` after a forward,
        ``send_backward_recv_backward(..., overlap_p2p_comm=True)`` after a backward,
        ``megatron/core/pipeline_parallel/schedules.py``). ``overlap_p2p_comm`` is on by default
        in Megatron-LM (``--no-overlap-p2p-communication`` turns it off, ``arguments.py``), in
        NeMo's launcher configurations (``overlap_p2p_comm: true``, NeMo-Framework-Launcher
        ``conf/training/llama/llama3_70b.yaml``) and in Megatron-Bridge whenever virtual pipeline
        stages are used (``comm_overlap.py``: ``if vp_size > 1: overlap_p2p_comm = True``).
        A receive with no earlier pass of its direction is posted at the iteration's start.
        """
        src = self.stage_rank(src_stage)
        stream = Stream.PP_RECV if kind == "act" else Stream.PP_RECV_GRAD
        key = ("p2p", kind, vs, mb, self.tp_c, self.dp_c)
        after = self.last_c
        if self.w.parallel.schedule is ScheduleKind.INTERLEAVED and self.w.parallel.overlap_p2p_comm:
            after = self.pass_end.get(Pass.FORWARD if kind == "act" else Pass.BACKWARD, -1)
        t = self.b.add(self.rank, stream, f"ncclRecv {kind}", self.p2p_op(src, self.rank, size),
                       self._after_p2p([after] if after >= 0 else []), args, key=key)
        t.flow_id = t.coll_key
        p = self.w.parallel
        if p.pipeline_scatter_gather and p.tp > 1 and not p.sequence_parallel:
            # Megatron-LM's scatter/gather: the received 1/tp chunks all-gathered over the TP
            # group before the pass (gather_split_1d_tensor, on the compute stream)
            group = self.layout.tp_group(self.dp_c, self.stage)
            gather = self.b.ops.get(("pp-gather", group, size))  # one op a group and size, priced once
            if gather is None:
                gather = self.b.ops[("pp-gather", group, size)] = CommOp(
                    CollectiveKind.ALL_GATHER, CommClass.PP, group, size * p.tp,
                    self.layout.tp_groups(self.stage) if self.rep else ())
            t = self.collective(Stream.TP_COMM, f"ncclAllGather pipeline-{kind}", gather, args, [t.id])
        self.extra.append(t.id)
        if p.blocking_p2p:
            self.p2p_last = t.id

    def build(self) -> None:
        w, p = self.w, self.w.parallel
        m = w.model
        pp, v = p.pp, p.virtual_pipeline_stages
        n_vs = pp * v
        vs_layers = w.virtual_stage_layers()
        order = pipeline_order(p.schedule, pp, v, p.num_microbatches, self.stage, extra_warmup=int(p.ep_overlap))
        pairs = frozenset(steady_pairs(p.schedule, pp, v, p.num_microbatches, self.stage, int(p.ep_overlap))
                          if p.ep_overlap else ())
        zb = p.schedule is ScheduleKind.ZB_H1
        last_b: dict[int, int] = {}
        last_w: dict[int, int] = {}
        first_f: dict[int, int] = {}
        for i, (pas, _mb, chunk) in enumerate(order):
            if pas is Pass.BACKWARD:
                last_b[chunk] = i
            elif pas is Pass.WEIGHT:
                last_w[chunk] = i
            else:
                first_f.setdefault(chunk, i)
        # the pass after which a layer's weight gradients are complete
        last_g = last_w if zb else last_b
        act_size = w.pipeline_message_bytes
        # DeepSpeed's pipeline engine: each pass's sends and receives as its TrainSchedule issues them
        exchanges = exchanges_by_pass(p.num_microbatches, pp, self.stage) if p.blocking_p2p and pp > 1 else None
        assert exchanges is None or len(exchanges[0]) == len(order), "TrainSchedule runs 1F1B's passes"
        am = activation_model(w)
        holds = [boundary_holds(w, am, c * pp + self.stage) for c in range(p.virtual_pipeline_stages)]
        fsdp = p.zero >= 3 and p.dp * p.cp > 1  # (hybrid with one-rank shard groups: all-reduces only)
        # With pipeline parallelism FSDP keeps a stage's weights gathered across its
        # micro-batches and reduce-scatters once, after the last one (torchtitan: no reshard
        # after forward under PP; torch.distributed.pipelining turns gradient sync off for all
        # but the last micro-batch); without it, every micro-batch gathers and reduces.
        fsdp_once = fsdp and pp > 1
        # DeepSpeed 0.3's ZeRO-3: per-parameter, blocking gathers and reduce-scatters instead
        # (sim.workload.deepspeed_zero3); no prefetch, so no pass's first op is split off
        ds = fsdp and p.zero_impl is ZeroImpl.DEEPSPEED_0_3
        # --overlap-param-gather: the distributed optimizer's weight all-gather runs layer by
        # layer ahead of the first forward of each model chunk (Megatron-LM's param-gather
        # buckets, dispatched in forward order), in place of the gather after the optimizer
        pgather = p.overlap_param_gather and p.shards_optimizer and p.zero < 3 and p.shard_group_size > 1
        buckets = self.buckets(vs_layers)
        ctx = _PassContext(vs_layers, am, holds, act_size, buckets, last_b, last_g)
        merged = -1  # the index of the backward pass a combined pass ran with its forward
        no_layers: tuple[int, ...] = ()
        layers: range | tuple[int, ...]  # a pass's layers; no_layers once a chunk block has run them
        first: Task | None  # a layer pass's first compute task
        for i, (pas, mb, chunk) in enumerate(order):
            if i == merged:
                continue
            if i and i - 1 != merged:
                self.pass_end[order[i - 1][0]] = self.last_c
            if i in pairs and not (pgather and i == first_f[chunk]):
                self.combined_pass(order[i], order[i + 1], i + 1, ctx)
                merged = i + 1
                continue
            vs = chunk * pp + self.stage
            layers = vs_layers[vs]
            first_layer = layers.start if layers else 0
            for c in exchanges[0][i] if exchanges else ():
                self.exchange(c, act_size)
            if pas is Pass.FORWARD:
                args = (("phase", "fwd"), ("microbatch", mb), ("chunk", chunk))
                if vs > 0 and not exchanges:
                    self.recv("act", vs, mb, (vs - 1) % pp, act_size, args)
                if vs == 0:
                    self.run_steps(self.ops.embedding_fwd, args, first_mem=am.embedding)
                prev = self.last_c
                gather = (fsdp and (not fsdp_once or i == first_f[chunk])) or (pgather and i == first_f[chunk])
                if self.chunk and not gather and layers:
                    self.chunk_block("fwd", layers, args, lambda lops, rc: lops.layer_fwd,
                                     first_mem=sum(am.stored(m.is_moe_layer(x), x - first_layer) for x in layers))
                    layers = no_layers
                for layer in layers:
                    if gather and ds:
                        self.ds_gather(self.ds_tensors(vs, layer, layer == layers[0], layer == layers[-1]),
                                       args + (("layer", layer),))
                    elif gather:
                        self.fsdp_gather(self.layer_params(vs, layer, layer == layers[0], layer == layers[-1]),
                                         args + (("layer", layer),), prev)
                    is_moe = m.is_moe_layer(layer)
                    lops = self.layer_ops(layer)
                    stored = am.stored(is_moe, layer - first_layer)
                    if self.layer:
                        # run_block calls the thunk, if at all, before it returns (B023)
                        first = self.run_block((id(lops), "fwd"), lambda: lops.layer_fwd, args + (("layer", layer),),  # noqa: B023
                                               "layer-fwd", first_mem=stored, split_first=gather and not ds)
                    else:
                        first, _ = self.run_steps(lops.layer_fwd, args + (("layer", layer),), first_mem=stored)
                    prev = first.id  # type: ignore[union-attr]  # a layer pass has a compute op
                if vs == n_vs - 1:
                    self.run_steps(self.ops.head_fwd, args, first_mem=am.head + am.logits)
                self.hold(holds[chunk].forward)
                if vs != n_vs - 1 and not exchanges:
                    self.send("act", vs + 1, mb, (vs + 1) % pp, act_size, args)
            elif pas is Pass.WEIGHT:
                args = (("phase", "wgrad"), ("microbatch", mb), ("chunk", chunk))
                if self.chunk and i != last_g[chunk] and not (fsdp and not fsdp_once) and layers:
                    self.chunk_block("wgrad", layers[::-1], args, lambda lops, rc: lops.split_bwd[1],
                                     last_mem=-sum(am.stored(m.is_moe_layer(x), x - first_layer) for x in layers))
                    layers = no_layers
                for layer in reversed(layers):
                    la = args + (("layer", layer),)
                    is_moe = m.is_moe_layer(layer)
                    lops = self.layer_ops(layer)
                    stored = am.stored(is_moe, layer - first_layer)
                    if self.layer:
                        # run_block calls the thunk, if at all, before it returns (B023)
                        self.run_block((id(lops), "wgrad"), lambda: lops.split_bwd[1], la, "layer-wgrad",  # noqa: B023
                                       last_mem=-stored)
                    else:
                        self.run_steps(lops.split_bwd[1], la, last_mem=-stored)
                    self.grads_ready(vs, layer, layers, chunk, i == last_g[chunk], la, buckets, fsdp, fsdp_once)
                self.hold(holds[chunk].weight)
            else:
                args = (("phase", "bwd"), ("microbatch", mb), ("chunk", chunk))
                if vs < n_vs - 1:
                    if not exchanges:
                        self.recv("grad", vs, mb, (vs + 1) % pp, act_size, args)
                else:
                    self.run_steps(self.ops.head_bwd, args, first_mem=am.loss_transient + am.loss_cached,
                                   last_mem=-(am.head + am.logits + am.loss_transient + am.loss_cached))
                prev = self.last_c
                if self.chunk and not (fsdp and not fsdp_once) and (zb or i != last_g[chunk]) and layers:
                    def steps(lops, rc, zb=zb):
                        bwd, k = lops.layer_bwd, lops.attention_bwd_index
                        if zb:
                            bwd, _, k = lops.split_bwd
                        return backward_steps(lops, bwd, k, rc)
                    # a block per run of layers under one recomputation and one transient (block
                    # recomputation: the layers it keeps, then those it recomputes; a model's dense
                    # and MoE layers), so that each run's transient is held over its own layers
                    # only, as the op program holds it
                    def same(x: int, first: int = first_layer) -> tuple:
                        return p.recompute_at(x - first), am.transient(m.is_moe_layer(x), x - first)
                    for run in _runs(layers[::-1], same):
                        held = max(am.transient(m.is_moe_layer(x), x - first_layer) for x in run)
                        stored = 0.0 if zb else sum(am.stored(m.is_moe_layer(x), x - first_layer) for x in run)
                        self.chunk_block("bwd", run, args, steps, first_mem=held, last_mem=-(stored + held),
                                         rcs=tuple(p.recompute_at(x - first_layer) for x in run))
                    layers = no_layers
                for layer in reversed(layers):
                    la = args + (("layer", layer),)
                    rc = p.recompute_at(layer - first_layer)
                    if ds:
                        tensors = self.ds_tensors(vs, layer, layer == layers[0], layer == layers[-1])
                        if rc is RecomputeKind.FULL:  # the recomputed forward's gathers
                            self.ds_gather(tensors, (("phase", "recompute"),) + la[1:])
                        self.ds_gather(tensors, la, keep_last=rc is RecomputeKind.FULL)
                    elif fsdp and not fsdp_once:
                        self.fsdp_gather(self.layer_params(vs, layer, layer == layers[0], layer == layers[-1]),
                                         la, prev)
                    is_moe = m.is_moe_layer(layer)
                    lops = self.layer_ops(layer)
                    bwd, k = lops.layer_bwd, lops.attention_bwd_index
                    held = am.transient(is_moe, layer - first_layer)
                    release = -(am.stored(is_moe, layer - first_layer) + held)
                    if zb:  # B only; the W pass frees what the layer stored
                        bwd, _, k = lops.split_bwd
                        release = -held
                    if self.layer:
                        # run_block calls the thunk, if at all, before it returns (B023)
                        first = self.run_block((id(lops), "bwd", rc), lambda: backward_steps(lops, bwd, k, rc), la,  # noqa: B023
                                               "layer-bwd", first_mem=held, last_mem=release,
                                               split_first=fsdp and not fsdp_once and not ds)
                    elif rc is RecomputeKind.FULL:
                        first, _ = self.run_steps(lops.recompute_fwd, (("phase", "recompute"),) + la[1:],
                                                  first_mem=held)
                        self.run_steps(bwd, la, last_mem=release)
                    elif rc is RecomputeKind.SELECTIVE_OP:
                        first, _ = self.run_steps(lops.op_recompute, (("phase", "recompute"),) + la[1:],
                                                  first_mem=held)
                        self.run_steps(bwd, la, last_mem=release)
                    elif rc is RecomputeKind.SELECTIVE:
                        again = (("phase", "recompute"),) + la[1:]
                        if lops.selective_before:
                            first, _ = self.run_steps(lops.selective_before, again, first_mem=held)
                            after, _ = self.run_steps(bwd[:k], la, first_mem=0.0 if first else held)
                            first = first or after
                        else:
                            first, _ = self.run_steps(bwd[:k], la, first_mem=held)
                        self.run_steps(lops.selective_at, again)
                        self.run_steps(bwd[k:], la, last_mem=release)
                    else:
                        first, _ = self.run_steps(bwd, la, first_mem=held, last_mem=release)
                    prev = first.id  # type: ignore[union-attr]  # a layer pass has a compute op
                    if not zb:
                        self.grads_ready(vs, layer, layers, chunk, i == last_g[chunk], la, buckets, fsdp, fsdp_once)
                if vs == 0:
                    self.run_steps(self.ops.embedding_bwd, args, last_mem=-am.embedding)
                self.hold(holds[chunk].backward)
                if vs != 0 and not exchanges:
                    self.send("grad", vs - 1, mb, (vs - 1) % pp, act_size, args)
                if p.overlap_grad_reduce and i == last_b[chunk]:
                    for bucket in buckets.get((chunk, "end"), ()):
                        self.reduce_bucket(bucket, args)
                    if vs == n_vs - 1 and not vs_layers[vs]:  # a last stage of no decoder layers
                        self.reduce_mtp_experts(args)
        for c in exchanges[1] if exchanges else ():
            self.exchange(c, act_size)
        if not p.overlap_grad_reduce:
            for key in sorted(buckets, key=lambda k: (k[0], -1 if k[1] == "end" else k[1])):
                for bucket in buckets[key]:
                    self.reduce_bucket(bucket, (("phase", "grad-sync"),))
            for vs_l in vs_layers[self.stage::pp]:
                for layer in vs_l:
                    if m.is_moe_layer(layer):
                        self.reduce_experts(layer, (("phase", "grad-sync"), ("layer", layer)))
            if self.stage == pp - 1:
                self.reduce_mtp_experts((("phase", "grad-sync"),))
        self.finish()

    # -- EP A2A overlap (sim.workload.ep_overlap) ------------------------------------------
    def combined_pass(self, f_item: tuple, b_item: tuple, b_index: int, ctx: _PassContext) -> None:
        """A forward pass and the backward pass after it run as one combined pass (Megatron-Core
        ``combined_forward_backward_step``; :mod:`sim.workload.ep_overlap`).

        Each direction keeps its own chain of dependencies (:class:`_Chain`): a collective
        waits for its own direction's last compute op, a compute op for its own direction's
        collectives, while the compute stream and each communication stream run their ops in
        the order issued, which is Megatron-Core's: the receives, the forward's embedding and
        the backward's loss first, then the layer pairs, the backward's leftover layers, the
        forward's, and last the forward's output layer and loss and the backward's embedding,
        each direction's send after its own part. On the last virtual stage the
        multi-token-prediction modules pair as layers after the forward's decoder layers and
        before the backward's (``TransformerLayerSchedulePlan`` builds an MTP layer's nodes as a
        decoder layer's, its output layer and loss in its ``mtp_post_process``); their memory
        stays with the output layer's terms (:func:`sim.memory.activation_model`)."""
        w, p = self.w, self.w.parallel
        m, pp = w.model, p.pp
        n_vs = pp * p.virtual_pipeline_stages
        am = ctx.am
        _, mbf, cf = f_item
        _, mbb, cb = b_item
        vsf, vsb = cf * pp + self.stage, cb * pp + self.stage
        f_layers, b_layers = ctx.vs_layers[vsf], ctx.vs_layers[vsb]
        f_first = f_layers.start if f_layers else 0
        b_first = b_layers.start if b_layers else 0
        fargs = (("phase", "fwd"), ("microbatch", mbf), ("chunk", cf))
        bargs = (("phase", "bwd"), ("microbatch", mbb), ("chunk", cb))
        start = len(self.b.tasks)
        fwd = _Chain(self.last_c, self.pending, self.extra)  # the forward continues what was issued
        bwd = _Chain(self.last_c, [], [])
        active = [fwd]

        def use(chain: _Chain) -> None:
            """Keep the issue state (:meth:`run_steps`, :meth:`recv`, :meth:`send` and the
            gradient reductions continue from it) in the direction issuing until now, and
            continue from ``chain``'s."""
            left = active[0]
            left.last_c, left.pending, left.extra = self.last_c, self.pending, self.extra
            self.last_c, self.pending, self.extra = chain.last_c, chain.pending, chain.extra
            active[0] = chain

        def issue(chain: _Chain, steps, args: tuple, first_mem: float = 0.0, last_mem: float = 0.0) -> None:
            use(chain)
            first, _ = self.run_steps(steps, args, first_mem=chain.mem + first_mem, last_mem=last_mem)
            if first is None:  # collectives only: the deltas go to the direction's compute ops
                chain.mem += first_mem
                self.hold(last_mem)
            else:
                chain.mem = 0.0

        # the receives and the pre-processing
        if vsf > 0:
            self.recv("act", vsf, mbf, (vsf - 1) % pp, ctx.act_size, fargs)
        if vsf == 0:
            issue(fwd, self.ops.embedding_fwd, fargs, first_mem=am.embedding)
        use(bwd)
        ops, mtp = self.ops, m.mtp_num_layers
        head_fwd, head_bwd = ops.output_fwd, ops.output_bwd  # the modules pair as layers below
        if vsb < n_vs - 1:
            self.recv("grad", vsb, mbb, (vsb + 1) % pp, ctx.act_size, bargs)
        else:
            issue(bwd, head_bwd, bargs, first_mem=am.loss_transient + am.loss_cached,
                  last_mem=-(am.head + am.logits + am.loss_transient + am.loss_cached))
        # the layers in the order each direction runs them; None: a multi-token-prediction module
        forward: list[int | None] = [*f_layers, *([None] * mtp if vsf == n_vs - 1 else [])]
        fla: tuple = ()
        bla: tuple = ()
        backward: list[int | None] = [*([None] * mtp if vsb == n_vs - 1 else []), *reversed(b_layers)]
        for j in range(max(len(forward), len(backward))):
            fl = forward[j] if j < len(forward) else -1
            bl = backward[j] if j < len(backward) else -1
            f_parts = b_parts = None
            if fl is None:
                f_parts, f_mem, fla = split_forward(ops.mtp_fwd), 0.0, fargs + (("layer", "mtp"),)
            elif fl >= 0:
                lops = self.layer_ops(fl)
                f_parts = split_forward(lops.layer_fwd)
                f_mem = am.stored(m.is_moe_layer(fl), fl - f_first)
                fla = fargs + (("layer", fl),)
            if bl is None:
                b_parts, held, release = split_backward(ops.mtp_bwd, p.delay_wgrad), 0.0, 0.0
                bla = bargs + (("layer", "mtp"),)
            elif bl >= 0:
                lops = self.layer_ops(bl)
                rc = p.recompute_at(bl - b_first)
                b_parts = split_backward(backward_steps(lops, lops.layer_bwd, lops.attention_bwd_index, rc),
                                         p.delay_wgrad)
                held = am.transient(m.is_moe_layer(bl), bl - b_first)
                release = -(am.stored(m.is_moe_layer(bl), bl - b_first) + held)
                bla = bargs + (("layer", bl),)
            if b_parts is not None:
                issue(bwd, b_parts.combine, bla, first_mem=held)
            if f_parts is not None:
                issue(fwd, f_parts.pre, fla, first_mem=f_mem)
            if b_parts is not None:
                issue(bwd, b_parts.experts, bla)
            if f_parts is not None:
                issue(fwd, f_parts.dispatch, fla)
            if b_parts is not None:
                issue(bwd, b_parts.dispatch + b_parts.wgrad, bla)
            if f_parts is not None:
                issue(fwd, f_parts.experts + f_parts.combine, fla)
            if b_parts is not None:
                issue(bwd, b_parts.pre, bla, last_mem=release)
                if bl is not None:
                    self.grads_ready(vsb, bl, b_layers, cb, b_index == ctx.last_g[cb], bla, ctx.buckets, False,
                                     False)
            if f_parts is not None:
                issue(fwd, f_parts.post, fla)
        # the post-processing and the sends
        if vsf == n_vs - 1:
            issue(fwd, head_fwd, fargs, first_mem=am.head + am.logits)
        use(fwd)
        self.hold(ctx.holds[cf].forward)
        if vsf != n_vs - 1:
            self.send("act", vsf + 1, mbf, (vsf + 1) % pp, ctx.act_size, fargs)
        if vsb == 0:
            issue(bwd, self.ops.embedding_bwd, bargs, last_mem=-am.embedding)
        use(bwd)
        self.hold(ctx.holds[cb].backward)
        if vsb != 0:
            self.send("grad", vsb - 1, mbb, (vsb - 1) % pp, ctx.act_size, bargs)
        if p.overlap_grad_reduce and b_index == ctx.last_b[cb]:
            for bucket in ctx.buckets.get((cb, "end"), ()):
                self.reduce_bucket(bucket, bargs)
            if vsb == n_vs - 1 and not ctx.vs_layers[vsb]:  # a last stage of no decoder layers
                self.reduce_mtp_experts(bargs)
        use(bwd)  # keeps what the backward issued last
        self.pass_end[Pass.FORWARD] = fwd.last_c
        self.pass_end[Pass.BACKWARD] = bwd.last_c
        # the compute stream's last op, and what each direction left for the next pass
        self.last_c = max(fwd.last_c, bwd.last_c)
        self.pending = fwd.pending + bwd.pending
        self.extra = fwd.extra + bwd.extra
        # a collective here runs beside the other direction's compute: its kernel's SMs count
        for t in self.b.tasks[start:]:
            t.alone = False

    def grads_ready(self, vs: int, layer: int, layers, chunk: int, last: bool, la: tuple, buckets,
                    fsdp: bool, fsdp_once: bool) -> None:
        """A layer's weight gradients of one micro-batch are complete: FSDP reduce-scatters
        them, and after the chunk's last micro-batch its full gradient buckets and its
        experts' gradients are reduced."""
        p = self.w.parallel
        if fsdp and p.zero_impl is ZeroImpl.DEEPSPEED_0_3:
            self.ds_reduce(self.ds_tensors(vs, layer, layer == layers[0], layer == layers[-1]), la)
        elif fsdp:
            params = self.layer_params(vs, layer, layer == layers[0], layer == layers[-1])
            if fsdp_once:  # gradient sync off but after the last micro-batch: accumulate, unsharded
                first = (vs, layer) not in self.fsdp_accumulated
                self.fsdp_accumulated.add((vs, layer))
                self.fsdp_accumulate(params, la, first)
            if not fsdp_once or last:
                self.fsdp_reduce(params, la, accumulated=fsdp_once)
        if p.overlap_grad_reduce and last:
            args = la[:-1]
            for bucket in buckets.get((chunk, layer), ()):
                self.reduce_bucket(bucket, args)
            if self.w.model.is_moe_layer(layer):
                self.reduce_experts(layer, la)
            if vs == p.pp * p.virtual_pipeline_stages - 1 and layer == layers[-1]:
                self.reduce_mtp_experts(args)

    def reduce_mtp_experts(self, args: tuple) -> None:
        """Reduce the routed-expert gradients of the multi-token-prediction layers (on the last
        stage, of the decoder's last layer's kind: :attr:`~sim.workload.spec.ModelSpec.mtp_layer`)."""
        m = self.w.model
        if m.is_moe_layer(m.mtp_layer):
            for k in range(m.mtp_num_layers):
                self.reduce_experts(m.mtp_layer, args + (("layer", f"mtp-{k}"),))

    def finish(self) -> None:
        w, p = self.w, self.w.parallel
        m = w.model
        lay = self.layout
        if (m.tied_embeddings or m.mtp_num_layers) and p.pp > 1 and self.stage in (0, p.pp - 1):
            # Megatron all-reduces the tied embedding's gradient between the first and the
            # last stage after the backward (finalize_model_grads, _allreduce_embedding_grads),
            # and the word embedding's where the last stage's multi-token prediction holds a
            # copy of it (_get_shared_word_embedding_weight: "or mtp_num_layers").
            group = (lay.rank(self.tp_c, self.dp_c, 0), lay.rank(self.tp_c, self.dp_c, p.pp - 1))
            replicas = tuple((lay.rank(t, d, 0), lay.rank(t, d, p.pp - 1))
                             for d in range(lay.dp) for t in range(p.tp)) if self.rep else ()
            op = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, group,
                        m.embedding_params() / p.tp * w.kernels.grad_bytes, replicas)
            t = self.collective(Stream.DP_COMM, "ncclAllReduce embedding-grads", op,
                                (("phase", "grad-sync"),), [self.last_c])
            self.dp_tasks.append(t.id)
        sb = state_bytes(m, p, self.stage, kernels=w.kernels)
        self.extra.extend(self.dp_tasks)
        # Adam and the release's passes over the gradient buffer and master weights (zeroing,
        # NaN check, division, clipping norm, master-weight copy: sim.workload.step_passes)
        opt = self.compute("optimizer", optimizer_op(w, sb), (("phase", "optimizer"),))
        if p.zero >= 3 and p.zero_impl is ZeroImpl.DEEPSPEED_0_3 and p.dp * p.cp > 1:
            self.ds_persistent_gather(w.virtual_stage_layers(), opt.id)
        if p.shards_optimizer and p.dp * p.cp > 1 and p.zero < 3 and not p.overlap_param_gather:
            # within the shard group: every optimizer instance updates its own copy (Megatron-LM's
            # start_param_sync gathers over intra_distributed_optimizer_instance_group)
            if p.shard_group_size > 1:
                op = self.dp_op(CollectiveKind.ALL_GATHER, (sb.params - sb.expert_params) * PARAM_GATHER_BYTES)
                self.collective(Stream.DP_COMM, "ncclAllGather params", op, (("phase", "param-sync"),), [opt.id])
            if sb.expert_params and p.expert_shard_group_size > 1:
                op = self.dp_op(CollectiveKind.ALL_GATHER, sb.expert_params * PARAM_GATHER_BYTES,
                                DPScope.EXPERT_SHARD)
                self.collective(Stream.DP_COMM, "ncclAllGather expert-params", op, (("phase", "param-sync"),),
                                [opt.id])


@dataclass(slots=True)
class _Chain:
    """One direction's issue state in a combined pass (:meth:`_RankProgram.combined_pass`)."""

    last_c: int
    pending: list
    extra: list
    mem: float = 0.0
    """A memory delta waiting for the direction's next compute op (from a part with
    collectives only)."""


@dataclass(frozen=True, slots=True)
class _PassContext:
    """What :meth:`_RankProgram.build` computes once for every pass of a rank."""

    vs_layers: tuple[range, ...]
    am: ActivationModel
    holds: list[BoundaryHolds]
    act_size: float
    buckets: dict[tuple, list[float]]
    last_b: dict[int, int]
    last_g: dict[int, int]


def _runs(layers, key) -> list[list[int]]:
    """``layers`` (in the order given) cut into maximal runs of equal ``key(layer)``."""
    out: list[list[int]] = []
    for x in layers:
        if out and key(out[-1][-1]) == key(x):
            out[-1].append(x)
        else:
            out.append([x])
    return out


def build_program(w: WorkloadSpec, representative: bool = True,
                  node_of=lambda r: 0, local_gpu_of=lambda r: r, granularity: str = "op") -> Program:
    """Build the task program of one iteration of ``w``.

    Parameters
    ----------
    representative : bool
        Simulate one rank per pipeline stage (tp = dp = 0) instead of every rank.
    node_of, local_gpu_of : callable
        Placement of a rank (from the topology), for the rank labels.
    granularity : {"op", "layer", "chunk"}
        A task per op, a block per layer pass, or a block per model chunk's pass (see the
        module docstring).
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {list(GRANULARITIES)}, got {granularity!r}")
    p = w.parallel
    layout = Layout.of(p)
    b = _Builder()
    if representative:
        ranks = [layout.rank(0, 0, s) for s in range(p.pp)]
    else:
        ranks = list(range(layout.world_size))
    ops_cache: dict[tuple, LayerOps] = {}
    infos, static = [], {}
    for r in ranks:
        tp_c, dp_c, stage = layout.coords(r)
        group = layout.tp_group(dp_c, stage)
        replicas = layout.tp_groups(stage) if representative else ()
        cp_group = layout.cp_group(tp_c, dp_c, stage)
        cp_replicas = layout.cp_groups(stage) if representative else ()
        ep_group = layout.ep_group(tp_c, dp_c, stage)
        ep_replicas = layout.ep_groups(stage) if representative else ()
        etp_group = layout.etp_group(tp_c, dp_c, stage)
        etp_replicas = layout.etp_groups(stage) if representative else ()
        ops = ops_cache.get((group, cp_group, ep_group, etp_group))
        if ops is None:
            ops = ops_cache[(group, cp_group, ep_group, etp_group)] = layer_ops(
                w.model, p, w.dtype, group, replicas, cp_group, cp_replicas, ep_group, ep_replicas, w.scaling,
                etp_group, etp_replicas, w.keeps_bf16_layers, kernels=w.kernels,
                fp8_any_layout=w.system.gpu.fp8_any_layout)
        _RankProgram(b, w, layout, r, ops, representative, granularity == "layer",
                     granularity == "chunk").build()
        infos.append(RankInfo(r, node_of(r), local_gpu_of(r), tp_c, stage, dp_c // p.cp, dp_c % p.cp))
        sm = stage_memory(w, stage)
        static[r] = sm.weights_bytes + sm.grads_bytes + sm.optimizer_bytes + sm.other_bytes
    for key, n in b.members.items():
        assert n in (1, 2) or not representative or n == 1, (key, n)
    flops, hw_flops = model_flops(w)
    return Program(b.tasks, b.streams, infos, b.members, static, layout.world_size, representative,
                   flops, hw_flops, b.early_block_waits)
