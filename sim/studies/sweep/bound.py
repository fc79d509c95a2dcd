"""A closed-form lower bound on a configuration's simulated iteration time (``llmsim sweep``'s
branch and bound).

Every compute op of a simulated rank runs on that rank's compute stream, one after another,
priced by the cost model alone (:meth:`~sim.costs.analytical.AnalyticalCostModel.compute_time_s`
uses only the GPU); communication runs on other streams or, inside a layer or chunk block,
adds its exposed time to the block (:class:`~sim.program.Block`: duration = compute +
exposed communication). So the compute ops of one pipeline stage, summed, never exceed the
iteration time, at op, layer or chunk granularity alike. The bound prices the same ops the
task program has (:func:`~sim.workload.layers.layer_ops`, the recomputation of
:func:`~sim.workload.layers.backward_steps`, the embedding, the output layer and the
optimizer step) and adds the two dependency chains of the pipeline's fill and drain:

* stage ``s`` computes nothing before micro-batch 0 has passed forward through stages
  ``0 .. s-1``: ``H_s = sum_{j<s} f_j``;
* every schedule ends each stage's backward passes with micro-batch ``m - 1`` of model chunk 0,
  whose gradient then runs backward through stages ``s-1 .. 0``, after which stage 0 still
  runs what it issues after that pass (``A_0``: its optimizer step, ZB-H1's deferred
  weight-gradient passes): ``T_s = sum_{j<s} b_j + A_0``.

With ``W_s`` the compute of stage ``s`` (``m`` micro-batches of its chunks' forward,
backward with recomputation and weight-gradient passes, plus its optimizer step) and ``A_s``
what it runs after its own last backward pass,

``LB = max_s max(H_s + W_s, H_s + W_s - A_s + T_s)``

which holds the 1F1B bubble ``(p - 1)(f + b)`` (``/ v`` interleaved; ZB-H1's smaller one) of
Narayanan et al. 2021 (arXiv 2104.04473, Sec. 2.2) and Qi et al. 2024 (arXiv 2401.10241,
Sec. 3.1) as lower bounds, from the dependencies alone. ``f_j`` and ``b_j`` are chunk 0's
per-micro-batch forward and backward (B) compute on stage ``j``. Communication (TP, CP, EP,
pipeline transfers, data-parallel reductions) is left out, so the bound is loosest where it
is exposed: on a 24-configuration sample of gpt3-175b-1024's default space it is a median
0.85 of the chunk-granularity time (0.70 to 0.97; ``python benchmarks/bench_sweep.py``), on
tiny's default space 0.70. It costs about 0.2 ms a configuration, so the sweep orders every
candidate by it; the tighter timeline bound (:mod:`sim.studies.sweep.timeline_bound`, median 0.98) is
computed only for those this one leaves in the race. It is multiplied by ``1 - ROUNDING`` so
that summing in another order than the engine never lifts it above the simulated time.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.costs.analytical import AnalyticalCostModel
from sim.hardware import GPUSpec
from sim.studies.sweep.memory_check import StageStates
from sim.types import RecomputeKind, ScheduleKind
from sim.workload.layers import LayerOps, backward_steps, layer_ops
from sim.workload.schedules import Pass, pipeline_order
from sim.workload.spec import ModelSpec, WorkloadSpec
from sim.workload.step_passes import optimizer_op
from sim.workload.steps import Step

__all__ = ["ROUNDING", "PassTimes", "IterationBound"]

ROUNDING = 1e-6
"""Relative margin the bounds are lowered by: the engine adds the same prices in its own
order, which can differ in the last bits, and its flow network ends a flow when less than a
billionth of it is left (:mod:`sim.engine.network`)."""


@dataclass(frozen=True)
class PassTimes:
    """Compute seconds of one layer's passes for one micro-batch."""

    fwd_s: float
    bwd_s: float
    """The backward with its recomputation (under ZB-H1 its input-gradient pass B only)."""
    wgrad_s: float
    """ZB-H1's weight-gradient pass W (0 otherwise: it is part of ``bwd_s``)."""


def layer_ops_key(w: WorkloadSpec) -> tuple:
    """What :func:`~sim.workload.layers.layer_ops` reads of a workload besides its groups."""
    p = w.parallel
    return (p.tp, p.cp, p.ep, p.micro_batch_size, p.sequence_parallel, w.kernels,
            p.tp_comm_overlap, w.dtype, w.scaling, p.cp_comm_type, p.hierarchical_context_parallel_sizes,
            w.keeps_bf16_layers, p.moe_dispatcher, w.system.gpu.fp8_any_layout)


class IterationBound:
    """The lower bound of the module docstring, for the candidates of one workload on ``gpu``.

    One per sweep: it remembers the step lists and prices of each distinct layer shape, the
    stage states and the schedules' tails, so a candidate costs well under a millisecond once
    its shape has been seen.

    Its caches are keyed by the parallel settings, so it serves one model on one GPU
    (:meth:`check` raises ``ValueError`` for another).

    >>> from sim.config import load_workload
    >>> w = load_workload("tiny")
    >>> bound = IterationBound(w.model, w.system.gpu)
    >>> 0 < bound.lower_bound_s(w) < bound.lower_bound_s(w) * 1.01
    True
    """

    def __init__(self, model: ModelSpec, gpu: GPUSpec, states: StageStates | None = None) -> None:
        self.model, self.gpu = model, gpu
        # compute_time_s uses only the GPU; at the maximum clock, so the bound holds whatever
        # clock a candidate's kernel mix holds under the power limit (sim.power)
        self.costs = AnalyticalCostModel(gpu, None, clock_hz=gpu.fastest_clock_hz)
        self.states = states or StageStates()
        self._ops: dict[tuple, LayerOps] = {}
        """Kept for the life of the bound: the ids of their step lists key ``_steps_s``."""
        self._passes: dict[tuple, PassTimes] = {}
        self._steps_s: dict[int, float] = {}
        self._tails: dict[tuple, tuple | None] = {}

    def check(self, w: WorkloadSpec) -> None:
        """Raise ``ValueError`` unless ``w`` has this bound's model and GPU."""
        if not ((w.model is self.model or w.model == self.model)
                and (w.system.gpu is self.gpu or w.system.gpu == self.gpu)):
            raise ValueError(f"a bound of {self.model.name} on {self.gpu.name} asked about {w.model.name} on "
                             f"{w.system.gpu.name}")

    # -- prices ------------------------------------------------------------------------------
    def _compute_s(self, steps: tuple[Step, ...]) -> float:
        """Compute seconds of a step list (its collectives left out)."""
        hit = self._steps_s.get(id(steps))
        if hit is None:
            hit = sum(self.costs.compute_time_s(st.op) for st in steps if st.stream is None)
            self._steps_s[id(steps)] = hit
        return hit

    def layer_ops(self, w: WorkloadSpec) -> LayerOps:
        """The step lists of ``w``'s layers (groups of ranks ``0 .. n-1``: only the compute
        ops are priced, and they do not depend on which ranks a collective joins)."""
        key = layer_ops_key(w)
        ops = self._ops.get(key)
        if ops is None:
            p = w.parallel
            ops = self._ops[key] = layer_ops(w.model, p, w.dtype, tuple(range(p.tp)), (), tuple(range(p.cp)), (),
                                             tuple(range(p.ep)), (), w.scaling, bf16_layers=w.keeps_bf16_layers,
                                             kernels=w.kernels, fp8_any_layout=w.system.gpu.fp8_any_layout)
        return ops

    def pass_times(self, w: WorkloadSpec, is_moe: bool, bf16: bool = False,
                   recompute: RecomputeKind | None = None) -> PassTimes:
        """One (MoE if ``is_moe``, kept in BF16 if ``bf16``) layer's :class:`PassTimes` under
        ``recompute`` (default ``w``'s recomputation) and ``w``'s schedule, as the task program
        issues them (``_RankProgram.build``)."""
        p = w.parallel
        rc = p.recompute if recompute is None else recompute
        zb = p.schedule is ScheduleKind.ZB_H1
        key = (layer_ops_key(w), is_moe, bf16, rc, zb)
        hit = self._passes.get(key)
        if hit is None:
            lops = self.layer_ops(w).for_layer(is_moe, bf16)
            if zb:
                bwd, wgrad, k = lops.split_bwd
            else:
                bwd, wgrad, k = lops.layer_bwd, (), lops.attention_bwd_index
            hit = self._passes[key] = PassTimes(self._compute_s(lops.layer_fwd),
                                                sum(self.costs.compute_time_s(st.op)
                                                    for st in backward_steps(lops, bwd, k, rc)
                                                    if st.stream is None),
                                                self._compute_s(wgrad) if wgrad else 0.0)
        return hit

    def optimizer_s(self, w: WorkloadSpec, stage: int) -> float:
        """The optimizer step of a GPU of ``stage`` (``_RankProgram.finish``)."""
        return self.costs.compute_time_s(optimizer_op(w, self.states(w, stage)))

    def _tail(self, w: WorkloadSpec, stage: int) -> tuple | None:
        """The passes ``stage`` runs after its last backward pass, as ``(pass, chunk)``, or
        None when that last backward is not micro-batch ``m - 1`` of chunk 0 (then the drain
        chain is not used)."""
        p = w.parallel
        key = (p.schedule, p.pp, p.virtual_pipeline_stages, p.num_microbatches, stage, int(p.ep_overlap))
        if key not in self._tails:
            order = pipeline_order(*key)
            last = max(i for i, (pas, _, _) in enumerate(order) if pas is Pass.BACKWARD)
            _, mb, chunk = order[last]
            self._tails[key] = (tuple((pas, c) for pas, _, c in order[last + 1:])
                                if (mb, chunk) == (p.num_microbatches - 1, 0) else None)
        return self._tails[key]

    # -- the bound ----------------------------------------------------------------------------
    def stage_compute_s(self, w: WorkloadSpec) -> list[float]:
        """``W_s``: the compute seconds of one GPU of each stage over the iteration."""
        self.check(w)
        return self._stage_work(w, self._virtual_stages(w))

    def _stage_work(self, w: WorkloadSpec, vst: list[tuple[float, float, float]]) -> list[float]:
        p = w.parallel
        return [sum(f + b + wg for c in range(p.virtual_pipeline_stages) for f, b, wg in [vst[c * p.pp + s]])
                * p.num_microbatches + self.optimizer_s(w, s) for s in range(p.pp)]

    def _virtual_stages(self, w: WorkloadSpec) -> list[tuple[float, float, float]]:
        """``(f, b, wgrad)`` compute seconds of each virtual stage for one micro-batch."""
        m = w.model
        lops = self.layer_ops(w)
        emb_f, emb_b = self._compute_s(lops.embedding_fwd), self._compute_s(lops.embedding_bwd)
        head_f, head_b = self._compute_s(lops.head_fwd), self._compute_s(lops.head_bwd)
        layers = w.virtual_stage_layers()
        out = []
        for vs, rng in enumerate(layers):
            f = b = wg = 0.0
            def kind_of(i: int, rng=rng) -> tuple:
                return m.is_moe_layer(i), w.is_bf16_layer(i), w.parallel.recompute_at(i - rng.start)
            for kind in sorted({kind_of(i) for i in rng}):
                n = sum(1 for i in rng if kind_of(i) == kind)
                t = self.pass_times(w, *kind)
                f, b, wg = f + n * t.fwd_s, b + n * t.bwd_s, wg + n * t.wgrad_s
            if vs == 0:
                f, b = f + emb_f, b + emb_b
            if vs == len(layers) - 1:
                f, b = f + head_f, b + head_b
            out.append((f, b, wg))
        return out

    def lower_bound_s(self, w: WorkloadSpec) -> float:
        """A lower bound on ``w``'s simulated iteration time (seconds), at any granularity.

        See the module docstring for the terms.
        """
        self.check(w)
        pp = w.parallel.pp
        vst = self._virtual_stages(w)
        work = self._stage_work(w, vst)
        tails = [self._tail(w, s) for s in range(pp)]
        a0 = None if tails[0] is None else self._after_last_backward(w, 0, tails[0], vst)
        best = head = drain = 0.0  # H_s and sum_{j<s} b_j
        for s in range(pp):
            bound = head + work[s]
            if s > 0 and tails[s] is not None and a0 is not None:
                bound = max(bound, head + work[s] - self._after_last_backward(w, s, tails[s], vst) + drain + a0)
            best = max(best, bound)
            head += vst[s][0]
            drain += vst[s][1]
        return best * (1.0 - ROUNDING)

    def _after_last_backward(self, w: WorkloadSpec, stage: int, tail: tuple, vst) -> float:
        """``A_s``: what ``stage`` computes after its last backward pass."""
        pp = w.parallel.pp
        after = self.optimizer_s(w, stage)
        for pas, chunk in tail:
            f, b, wg = vst[chunk * pp + stage]
            after += f if pas is Pass.FORWARD else (wg if pas is Pass.WEIGHT else b)
        return after
