"""A tighter lower bound on a configuration's simulated iteration time: the pipeline's
timeline at pass granularity, every duration a lower bound (``llmsim sweep``'s second test).

The engine's timeline is a max-plus system: a task starts when its stream's previous task and
its dependencies have ended, and runs for its duration. Lowering durations can only move every
end earlier, so the same schedule timed with lower bounds of the durations ends no later than
the simulation. Here each representative rank's passes run in
:func:`~sim.workload.schedules.pipeline_order`, a forward pass waiting for the previous virtual
stage's forward of the micro-batch plus the activation transfer, a backward for the next one's
backward plus the gradient transfer; then the optimizer step and, with a sharded optimizer,
the weight all-gather it issues. The durations:

* a pass: its step lists (each layer's, the embedding's, the output layer's) timed alone by
  the rules of a :class:`~sim.program.Block` (a collective starts after the compute op issued
  before it and the previous op of its stream; the ``wait``-th compute op after it waits for
  it), each list up to the end of its last compute op, and summed. Under those rules a list
  takes at least that long at op, layer and chunk granularity alike: a chunk block adds
  waits across its layers, the op level carries pending collectives from one list into the
  next;
* a communication op: per phase its latency, then the longest of its flows at the rate the
  flow network can give it at most (``min`` over its links of capacity over weight) and the
  busiest link's bytes over its capacity (:func:`comm_lower_bound_s`), with the flows the
  engine keeps (those of simulated ranks, weights shared; ``Simulation._plans``). Contention
  and solo pricing only lengthen it.

What it leaves out: data-parallel gradient reductions (other than the closing weight
all-gather), ZeRO-3/FSDP gathers, rendezvous waits, contention between transfers, and
collectives no compute op waits for. On a 24-configuration sample of gpt3-175b-1024's default
space it is a median 0.98 of the chunk-granularity time (0.75 to 0.996), on the 2,753 nearest
the top 0.97, on tiny's default space 0.94 (``python benchmarks/bench_sweep.py``, and
``tests/unit/test_sweep.py`` checks it against every configuration of tiny's). It costs a
few milliseconds once the plans of a layout are known (a walk over every pass; tens of
milliseconds before), so the sweep runs it in the workers, only for the configurations the
closed-form bound (:mod:`sim.studies.sweep.bound`) leaves in the race.
"""

from __future__ import annotations

import math
from functools import lru_cache

from sim.costs.analytical import AnalyticalCostModel
from sim.costs.base import CommPlan
from sim.hardware import GPUSpec
from sim.runner import cached_fabric
from sim.studies.sweep.bound import ROUNDING, IterationBound, layer_ops_key
from sim.topology.spec import TopologySpec
from sim.types import CollectiveKind, CommClass, ScheduleKind
from sim.workload.layers import LayerOps, backward_steps, layer_ops
from sim.workload.layout import Layout, gpu_placement, order_placements
from sim.workload.ops import CommOp
from sim.workload.schedules import Pass, pipeline_order
from sim.workload.spec import ModelSpec, WorkloadSpec
from sim.workload.steps import Step
from sim.workload.taskgraph import PARAM_GATHER_BYTES

__all__ = ["comm_lower_bound_s", "compute_end_s", "ORDERS_KEPT", "TimelineBound", "timeline_bound"]

ORDERS_KEPT = 64
"""Pipeline schedules (every stage's order of passes) a :class:`TimelineBound` keeps."""
_KIND = {Pass.FORWARD: 0, Pass.BACKWARD: 1, Pass.WEIGHT: 2}


def comm_lower_bound_s(plan: CommPlan, simulated: frozenset[int], capacity_bytes_per_s, shared: bool) -> float:
    """A lower bound on how long ``plan`` takes in the engine, alone or beside other traffic.

    Per phase: its latency, then the longest of (each kept flow's bytes over the most it can
    get, ``min`` over its finite links of capacity over weight, which progressive filling never
    exceeds) and (each link's weighted bytes over its capacity, which the rates on a link never
    exceed together). ``shared``: the weights of the kept flows are divided by their number on
    each link, as the engine does in representative mode.
    """
    total = 0.0
    for ph in plan.phases:
        kept = [f for f in ph.flows if f.src in simulated or f.dst in simulated]
        count: dict[int, int] = {}
        if shared:
            for f in kept:
                for link in f.links:
                    count[link] = count.get(link, 0) + 1
        longest = 0.0
        load: dict[int, float] = {}
        for f in kept:
            for link, w in zip(f.links, f.weights):
                cap = capacity_bytes_per_s[link]
                if math.isinf(cap):
                    continue
                b = f.size_bytes * w / count.get(link, 1)
                longest = max(longest, b / cap)
                load[link] = load.get(link, 0.0) + b
        busiest = max((b / capacity_bytes_per_s[link] for link, b in load.items()), default=0.0)
        total += ph.latency_s + max(longest, busiest)
    return total * (1.0 - ROUNDING)


def compute_end_s(steps: tuple[Step, ...], times: list[float]) -> float:
    """When the last compute op of ``steps`` ends, the list run alone from 0 with step ``i``
    taking ``times[i]``, by the rules of :class:`~sim.program.Block` (as the engine's
    ``_time_block`` times a block, less what collectives that no compute op waits for add
    after it).

    >>> from sim.types import OpKind, Stream
    >>> from sim.workload.ops import MemoryOp
    >>> ar = CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, (0, 1), 8.0)
    >>> c = MemoryOp(OpKind.NORM, 1.0)
    >>> steps = (Step(None, "a", c), Step(Stream.TP_COMM, "ar", ar, 1), Step(None, "b", c), Step(None, "c", c))
    >>> compute_end_s(steps, [1.0, 3.0, 1.0, 1.0])     # c waits for the all-reduce: 1 + 3 + 1
    5.0
    """
    cursor = 0.0
    free: dict = {}
    pending: list[list] = []  # [end, compute ops left before the one that waits]
    for st, d in zip(steps, times):
        if st.stream is not None:
            start = max(cursor, free.get(st.stream, 0.0))
            free[st.stream] = start + d
            pending.append([start + d, st.wait])
            continue
        start = cursor
        if pending:
            keep = []
            for p in pending:
                if p[1] == 0:
                    start = max(start, p[0])
                else:
                    p[1] -= 1
                    keep.append(p)
            pending = keep
        cursor = start + d
    return cursor


class TimelineBound:
    """The bound of the module docstring for the candidates of one model on one topology and
    GPU (:meth:`~sim.studies.sweep.bound.IterationBound.check`).

    Remembers each distinct op's price and plan, so candidates sharing a layout cost little.
    """

    def __init__(self, topology: TopologySpec, model: ModelSpec, gpu: GPUSpec) -> None:
        self.topology = topology
        self.closed_form = IterationBound(model, gpu)
        self.gpu = gpu
        self._costs: dict[tuple, AnalyticalCostModel] = {}
        self._layouts: dict[tuple, tuple] = {}
        self._order_cache: dict[tuple, list] = {}
        self._comm: dict[tuple, float] = {}
        self._lists: dict[tuple, float] = {}
        self._ops: dict[tuple, LayerOps] = {}

    # -- prices -------------------------------------------------------------------------------
    def _layout(self, w: WorkloadSpec) -> tuple:
        """``(key, cost model, simulated ranks, one rank per stage?)`` of ``w``'s layout and
        placement (:func:`~sim.runner.simulate` runs every rank for an explicit GPU list that no
        rank order gives)."""
        p = w.parallel
        key = (p.tp, p.pp, p.dp, p.cp, p.ep, p.placement)
        hit = self._layouts.get(key)
        if hit is None:
            placement = gpu_placement(p)
            costs = self._costs.get((w.system.num_gpus, placement))
            if costs is None:
                fabric = cached_fabric(self.topology, w.system.num_gpus, placement)
                costs = self._costs[(w.system.num_gpus, placement)] = AnalyticalCostModel(
                    self.gpu, fabric, representative=True, clock_hz=self.gpu.fastest_clock_hz)  # see sweep_bound
            lay = Layout.of(p)
            rep = placement is None or isinstance(p.placement, str) or placement in order_placements(p)
            hit = self._layouts[key] = (key, costs, frozenset(lay.rank(0, 0, s) for s in range(p.pp)), rep)
        return hit

    def comm_s(self, w: WorkloadSpec, op: CommOp, key: tuple | None = None) -> float:
        """:func:`comm_lower_bound_s` of ``op`` in ``w``'s representative simulation (``key``,
        when given, names the op among ``w``'s layout's instead of the op itself)."""
        layout_key, costs, simulated, _ = self._layout(w)
        key = (layout_key, op if key is None else key)
        hit = self._comm.get(key)
        if hit is None:
            if callable(op):
                op = op()
            hit = self._comm[key] = comm_lower_bound_s(costs.comm_plan(op), simulated,
                                                       costs.fabric.capacity_bytes_per_s, True)
        return hit

    def _stage_ops(self, w: WorkloadSpec, stage: int) -> LayerOps:
        """The step lists of ``stage``'s representative rank, groups as ``build_program`` gives."""
        p = w.parallel
        key = (layer_ops_key(w), p.pp, p.dp, p.placement, stage)
        ops = self._ops.get(key)
        if ops is None:
            lay = Layout.of(p)
            ops = self._ops[key] = layer_ops(w.model, p, w.dtype, lay.tp_group(0, stage), lay.tp_groups(stage),
                                             lay.cp_group(0, 0, stage), lay.cp_groups(stage),
                                             lay.ep_group(0, 0, stage), lay.ep_groups(stage), w.scaling,
                                             bf16_layers=w.keeps_bf16_layers, kernels=w.kernels,
                                             fp8_any_layout=w.system.gpu.fp8_any_layout)
        return ops

    def _list_s(self, w: WorkloadSpec, steps: tuple[Step, ...], key: tuple) -> float:
        """:func:`compute_end_s` of ``steps`` with compute at the cost model's times and
        collectives at their lower bounds; ``key`` names the list among ``w``'s stage's."""
        hit = self._lists.get(key)
        if hit is None:
            costs = self.closed_form.costs
            times = [costs.compute_time_s(st.op) if st.stream is None else self.comm_s(w, st.op) for st in steps]
            hit = self._lists[key] = compute_end_s(steps, times)
        return hit

    def _virtual_stage_s(self, w: WorkloadSpec) -> list[tuple[float, float, float]]:
        """``(forward, backward, weight-gradient)`` lower bounds of each virtual stage's pass
        of one micro-batch."""
        p, m = w.parallel, w.model
        zb = p.schedule is ScheduleKind.ZB_H1
        base = (layer_ops_key(w), p.pp, p.dp, p.placement)
        out = []
        last = p.pp * p.virtual_pipeline_stages - 1
        for vs, layers in enumerate(w.virtual_stage_layers()):
            s = vs % p.pp
            ops = self._stage_ops(w, s)
            f = b = wg = 0.0
            rcs = sorted({p.recompute_at(i - layers.start) for i in layers})
            for moe, bf16, rc in ((x, y, r) for x in (False, True) for y in (False, True) for r in rcs):
                n = sum(1 for i in layers if (m.is_moe_layer(i), w.is_bf16_layer(i),
                                              p.recompute_at(i - layers.start)) == (moe, bf16, rc))
                if not n:
                    continue
                lops = ops.for_layer(moe, bf16)
                key = base + (s, moe, bf16)
                bwd, wgrad, k = lops.split_bwd if zb else (lops.layer_bwd, (), lops.attention_bwd_index)
                f += n * self._list_s(w, lops.layer_fwd, key + ("fwd",))
                b += n * self._list_s(w, backward_steps(lops, bwd, k, rc), key + ("bwd", zb, rc))
                if wgrad:
                    wg += n * self._list_s(w, wgrad, key + ("wgrad",))
            if vs == 0:
                f += self._list_s(w, ops.embedding_fwd, base + (s, "emb-fwd"))
                b += self._list_s(w, ops.embedding_bwd, base + (s, "emb-bwd"))
            if vs == last:
                f += self._list_s(w, ops.head_fwd, base + (s, "head-fwd"))
                b += self._list_s(w, ops.head_bwd, base + (s, "head-bwd"))
            out.append((f, b, wg))
        return out

    def _p2p_s(self, w: WorkloadSpec, src_stage: int, dst_stage: int) -> float:
        """The activation (or gradient: the same bytes) transfer between two stages."""
        lay = Layout.of(w.parallel)
        size = w.pipeline_message_bytes
        return self.comm_s(w, lambda: CommOp(CollectiveKind.SEND_RECV, CommClass.PP,
                                             (lay.rank(0, 0, src_stage), lay.rank(0, 0, dst_stage)), size,
                                             lay.stage_pairs(src_stage, dst_stage)),
                           ("p2p", src_stage, dst_stage, size))

    def _param_gather_s(self, w: WorkloadSpec, stage: int) -> float:
        """The weight all-gather after the optimizer step (``_RankProgram.finish``), or 0."""
        p = w.parallel
        if not (p.shards_optimizer and p.shard_group_size > 1 and p.zero < 3 and not p.overlap_param_gather):
            return 0.0
        sb = self.closed_form.states(w, stage)
        lay = Layout.of(p)
        size = (sb.params - sb.expert_params) * PARAM_GATHER_BYTES
        # over the shard group (the data-parallel group unless hybrid), as _RankProgram.finish
        return self.comm_s(w, lambda: CommOp(CollectiveKind.ALL_GATHER, CommClass.DP, lay.dp_shard_group(0, 0, stage),
                                             size, lay.dp_shard_groups(stage)),
                           ("param-gather", stage, size, lay.dp_replicate))

    # -- the bound ----------------------------------------------------------------------------
    def _orders(self, w: WorkloadSpec) -> list[tuple[int, ...]]:
        """Every stage's :func:`~sim.workload.schedules.pipeline_order`, each pass as
        ``(micro-batch x pp v + virtual stage) << 2 | kind`` (0 forward, 1 backward, 2
        weight gradient); the last :data:`ORDERS_KEPT` schedules are kept."""
        p = w.parallel
        pp, v, m = p.pp, p.virtual_pipeline_stages, p.num_microbatches
        key = (p.schedule, pp, v, m, int(p.ep_overlap))
        hit = self._order_cache.pop(key, None)
        if hit is None:
            V = pp * v
            hit = [tuple(((mb * V + c * pp + s) << 2) | _KIND[pas]
                         for pas, mb, c in pipeline_order(p.schedule, pp, v, m, s, key[4])) for s in range(pp)]
            if len(self._order_cache) >= ORDERS_KEPT:
                del self._order_cache[next(iter(self._order_cache))]
        self._order_cache[key] = hit  # most recent last
        return hit

    def lower_bound_s(self, w: WorkloadSpec) -> float:
        """A lower bound on ``w``'s simulated iteration time (seconds); the closed-form one
        (:class:`~sim.studies.sweep.bound.IterationBound`) where this one does not apply."""
        closed = self.closed_form.lower_bound_s(w)
        if not self._layout(w)[3]:  # every rank simulated: the representative's plans do not apply
            return closed
        p = w.parallel
        pp, v, m = p.pp, p.virtual_pipeline_stages, p.num_microbatches
        V = pp * v
        vst = self._virtual_stage_s(w)
        act = [self._p2p_s(w, vs % pp, (vs + 1) % pp) for vs in range(V - 1)]
        grad = [0.0] + [self._p2p_s(w, vs % pp, (vs - 1) % pp) for vs in range(1, V)]
        orders = self._orders(w)
        fwd, bwd, wgr = [x[0] for x in vst], [x[1] for x in vst], [x[2] for x in vst]
        f_end: list = [None] * (m * V)
        b_end: list = [None] * (m * V)
        pos, clock = [0] * pp, [0.0] * pp
        left = sum(len(o) for o in orders)
        while left:
            moved = 0
            for s in range(pp):
                order, i, t = orders[s], pos[s], clock[s]
                n = len(order)
                while i < n:
                    code = order[i]
                    slot, kind = code >> 2, code & 3
                    vs = slot % V
                    if kind == 0:  # forward: after the previous virtual stage's and the transfer
                        if vs:
                            dep = f_end[slot - 1]
                            if dep is None:
                                break
                            dep += act[vs - 1]
                            if dep > t:
                                t = dep
                        t += fwd[vs]
                        f_end[slot] = t
                    elif kind == 1:  # backward: after the next virtual stage's and the transfer
                        if vs < V - 1:
                            dep = b_end[slot + 1]
                            if dep is None:
                                break
                            dep += grad[vs + 1]
                            if dep > t:
                                t = dep
                        t += bwd[vs]
                        b_end[slot] = t
                    else:
                        t += wgr[vs]
                    i += 1
                moved += i - pos[s]
                pos[s], clock[s] = i, t
            left -= moved
            if not moved:
                raise AssertionError(f"the schedules wait on each other at {pos}")
        end = max(clock[s] + self.closed_form.optimizer_s(w, s) + self._param_gather_s(w, s) for s in range(pp))
        return max(closed, end * (1.0 - ROUNDING))


@lru_cache(maxsize=2)
def timeline_bound(topology: TopologySpec, model: ModelSpec, gpu: GPUSpec) -> TimelineBound:
    """The :class:`TimelineBound` of this process for ``model`` on ``topology`` and ``gpu``: a
    sweep's workers price every candidate they are sent on the same one, so its plans and
    prices are kept between candidates (as :func:`sim.runner.simulate` keeps its fabric)."""
    return TimelineBound(topology, model, gpu)
