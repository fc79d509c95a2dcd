"""The default cost model: roofline compute times and topology-aware communication plans."""

from __future__ import annotations

import dataclasses

from sim.costs.base import CommPlan
from sim.costs.comm import kernel_sms, plan_comm
from sim.costs.compute import attention_time_s, gemm_time_s, memory_time_s
from sim.costs.factors import CalibrationFactors
from sim.hardware import GPUSpec
from sim.topology.routing import Fabric
from sim.workload.ops import AttentionOp, CommOp, GemmOp, Op

__all__ = ["AnalyticalCostModel"]


class AnalyticalCostModel:
    """Prices compute ops with :mod:`sim.costs.compute` and plans comm with :mod:`sim.costs.comm`.

    Each distinct op shape is priced once; the caches belong to the instance.

    Parameters
    ----------
    gpu : GPUSpec
    fabric : Fabric
    representative : bool
        Whether only representative ranks are simulated (see :func:`sim.costs.comm.plan_comm`).
    simulated : frozenset of int, optional
        The simulated ranks, when representative: plans then hold only the flows they send or
        receive, the ones the engine keeps, and plan only the replicas whose flows share links
        with those (``plan_comm``'s ``keep``); None plans every flow of every replica.
    clock_hz : float, optional
        The SM clock this run's kernel mix holds under the GPU's power limit
        (:func:`sim.power.solve_clock_hz`); GEMMs and attention then run at it instead of the
        clocks their efficiencies were measured at. None: at those clocks.
    factors : CalibrationFactors, optional
        A calibration's scaling of every compute kernel's time
        (:meth:`~sim.costs.factors.CalibrationFactors.compute_time_s`); None: the catalogue's times.
    """

    def __init__(self, gpu: GPUSpec, fabric: Fabric, representative: bool = True,
                 simulated: frozenset[int] | None = None, excluded: frozenset = frozenset(),
                 clock_hz: float | None = None, factors: CalibrationFactors | None = None) -> None:
        self.gpu = gpu
        self.factors = factors
        self.clock_hz = clock_hz
        self.excluded = excluded
        """Collective algorithms NCCL may not use in this run (``plan_comm``'s ``excluded``)."""
        self.fabric = fabric
        self.representative = representative
        self.simulated = simulated if representative else None
        self._families: dict = {}
        self._compute: dict[Op, float] = {}
        self._plans: dict[CommOp, CommPlan] = {}

    def compute_time_s(self, op: Op) -> float:
        t = self._compute.get(op)
        if t is None:
            if isinstance(op, GemmOp):
                t = gemm_time_s(self.gpu, op, self.clock_hz)
            elif isinstance(op, AttentionOp):
                t = attention_time_s(self.gpu, op, self.clock_hz)
            else:
                t = memory_time_s(self.gpu, op)
            if self.factors is not None:
                t = self.factors.compute_time_s(t)
            self._compute[op] = t
        return t

    def comm_plan(self, op: CommOp) -> CommPlan:
        """The op's plan, with the share of each member GPU's SMs its kernel holds
        (:func:`~sim.costs.comm.kernel_sms`: NCCL's channels, or a userbuffers or
        symmetric-memory kernel's SMs, over the GPU's SM count)."""
        plan = self._plans.get(op)
        if plan is None:
            plan = plan_comm(self.fabric, op, self.representative, keep=self.simulated,
                             families=self._families, excluded=self.excluded)
            ctas = kernel_sms(self.fabric, op, plan.algorithm) if self.gpu.sm_count else 0
            if ctas:
                plan = dataclasses.replace(plan, sm_fraction=min(ctas / self.gpu.sm_count, 1.0))
            self._plans[op] = plan
        return plan
