"""The sweep's memory check: the closed-form peak memory of :mod:`sim.memory`, term for term,
with what candidates share computed once.

A design-space sweep prices tens of thousands of candidates that differ in a few settings;
:func:`sim.memory.stage_memory` recomputes each stage's parameters layer by layer and walks the
schedule pass by pass for each of them. Here the model state of a (TP, PP, v, DP, CP, EP,
ZeRO, shard degree, stage) (:class:`StageStates`), the other buffers and each activation walk
(:func:`sim.memory.activation_peak_bytes` over a kept schedule order) are remembered, so every
peak is the one :func:`sim.memory.stage_memory` gives (tested on whole default spaces).
"""

from __future__ import annotations

from sim.memory import (
    ActivationModel,
    StageMemory,
    StateBytes,
    activation_model,
    activation_peak_bytes,
    other_bytes,
    state_bytes,
)
from sim.workload.schedules import pipeline_order
from sim.workload.spec import WorkloadSpec

__all__ = ["StageStates", "MemoryCheck"]


class StageStates:
    """:func:`sim.memory.state_bytes` of one model's candidates, each (TP, PP, v, DP, CP, EP,
    ETP, ZeRO, DP shard degree, stage) computed once: the memory check and the time bound
    (:mod:`sim.studies.sweep.bound`) both need it, and candidates that differ only in schedule,
    micro-batch, recomputation or sequence parallelism share it."""

    def __init__(self) -> None:
        self._states: dict[tuple, StateBytes] = {}

    def __call__(self, w: WorkloadSpec, stage: int) -> StateBytes:
        p = w.parallel
        key = (p.tp, p.pp, p.virtual_pipeline_stages, p.dp, p.cp, p.ep, p.expert_tp, p.zero, p.dp_shard_degree,
               w.kernels.grad_bytes, w.kernels.optimizer_bytes, stage)
        sb = self._states.get(key)
        if sb is None:
            sb = self._states[key] = state_bytes(w.model, p, stage, kernels=w.kernels)
        return sb


class MemoryCheck:
    """The closed-form peak memory of candidates (:func:`sim.memory.stage_memory`, term for
    term), with each stage's state, other buffers and schedule walk remembered. One per sweep
    (the caches are of one model)."""

    def __init__(self, states: StageStates | None = None) -> None:
        self.states = states or StageStates()
        self._walks: dict[tuple, float] = {}
        self._other: dict[tuple, float] = {}
        self._orders: dict[tuple, list] = {}

    def _order(self, w: WorkloadSpec, stage: int) -> list:
        """The schedule of ``stage``; the orders of one (schedule, pp, v, micro-batches) are
        kept until another comes (candidates arrive grouped by those settings)."""
        p = w.parallel
        key = (p.schedule, p.pp, p.virtual_pipeline_stages, p.num_microbatches, stage, int(p.ep_overlap))
        order = self._orders.get(key)
        if order is None:
            if any(k[:4] != key[:4] or k[5:] != key[5:] for k in self._orders):
                self._orders.clear()
            order = self._orders[key] = pipeline_order(*key)
        return order

    def _activations(self, w: WorkloadSpec, stage: int, am: ActivationModel) -> float:
        p = w.parallel
        key = (p.schedule, p.pp, p.virtual_pipeline_stages, p.num_microbatches, stage, p.ep_overlap, am)
        hit = self._walks.get(key)
        if hit is None:
            hit = self._walks[key] = activation_peak_bytes(w, stage, am, self._order(w, stage))
        return hit

    def _other_bytes(self, w: WorkloadSpec, stage: int) -> float:
        p = w.parallel
        key = (p.sequence_parallel, p.cp, p.micro_batch_size, p.zero, p.tp, p.pp, p.virtual_pipeline_stages,
               p.ep, p.dp, p.dp_shard_degree, p.num_microbatches, stage)
        hit = self._other.get(key)
        if hit is None:
            hit = self._other[key] = other_bytes(w, stage)
        return hit

    def fitting_peak_bytes(self, w: WorkloadSpec) -> float | None:
        """The peak memory of ``w``'s fullest stage, or None if some stage exceeds the GPU's
        capacity.

        Stages are tried first and last first (the first holds the most micro-batches in
        flight, the last the logits), and a stage whose weights, gradients and optimizer state
        alone exceed the capacity stops the search before its schedule is walked.
        """
        pp, cap = w.parallel.pp, w.system.gpu.hbm_capacity_bytes
        am = activation_model(w)
        peak = 0.0
        for stage in [0] + ([pp - 1] if pp > 1 else []) + list(range(1, pp - 1)):
            sb = self.states(w, stage)
            if sb.total_bytes > cap:
                return None
            total = StageMemory(stage, sb.weights_bytes, sb.grads_bytes, sb.optimizer_bytes,
                                self._activations(w, stage, am), self._other_bytes(w, stage), cap).total_bytes
            if total > cap:
                return None
            peak = max(peak, total)
        return peak
