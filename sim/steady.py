"""An iteration's time from shorter runs of the same job: the pipeline's steady state.

A training iteration of ``M`` micro-batches runs a warm-up, a steady state that repeats the
same passes for every further group of micro-batches, and a cool-down (the gradient reduction,
the optimizer). Past the warm-up, each added group of ``P`` micro-batches adds the same time,
so the iteration time is affine in the count: ``T(m + P) - T(m)`` is one constant. The period
``P`` is the pipeline depth under the interleaved schedule (Megatron-Core runs micro-batches in
groups of ``pp`` per model chunk, ``microbatch_group_size_per_vp_stage``, and takes a count
that is a multiple of ``pp``) and one micro-batch under the others (1F1B, ZB-H1 and GPipe
repeat every micro-batch once each stage has one in flight, from ``pp`` micro-batches on).

:func:`steady_iteration` simulates the job at ``m1``, ``m1 + P`` and ``m1 + 2P`` micro-batches
(``m1`` the larger of ``pp`` and 2, a multiple of ``P`` as ``M`` is) and,
where the three times lie on one line (their two differences agree to
:data:`LINEAR_RTOL` of the time; else a fourth run at ``m1 + 3P`` is asked the same of the
last three), extends the line to ``M``. Where they do not, it returns None and the caller runs
the whole iteration. The shorter runs price compute at the SM clock of the whole iteration
under the GPU's power limit: each compute op's count is affine in the micro-batches as well,
so the counts of the iteration are extended from two built programs
(:func:`sim.runner.compute_op_counts`) and the clock solved over them.

What it gives: the iteration time the whole run gives, to the order of floating-point
additions (``tests/unit/test_steady.py`` holds it to the op-level and chunk runs of the
presets and of validation cases); nothing else of the run (the spans, the breakdown, the
trace describe the shorter runs only). ``llmsim validate`` scores a case on it
(:mod:`sim.studies.validate`), at ``3(m1 + P)`` micro-batches' cost instead of ``M``'s: 4x fewer on
the dev set's Llama 3 405B runs (384 micro-batches over 16 stages).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sim.costs.factors import CalibrationFactors
from sim.power import solve_clock_hz
from sim.runner import compute_op_counts, loads_of, placed_unlike_an_order, simulate
from sim.topology.spec import TopologySpec
from sim.types import ScheduleKind
from sim.workload.spec import WorkloadSpec
from sim.workload.taskgraph import build_program

__all__ = ["SteadyIteration", "ShortRun", "steady_iteration", "steady_points", "LINEAR_RTOL", "MIN_SAVING"]

LINEAR_RTOL = 1e-9
"""How closely two successive differences of the shorter runs' times must agree, relative to
the longest run's time, for the times to count as on one line. The times of a periodic steady
state agree to ~1e-13 (the additions of a run's event times); a pass that is not yet periodic
moves them by a kernel's duration or more, ~1e-5 of an iteration."""

MIN_SAVING = 1.25
"""Use the shorter runs only when the whole iteration has at least this many times the
micro-batches they have together (else the one whole run costs about as much)."""


@dataclass(frozen=True)
class SteadyIteration:
    """The iteration time read from shorter runs, and what they were."""

    iteration_time_s: float
    times_s: tuple[float, ...]
    """Their iteration times."""
    period: int
    """Micro-batches per repetition of the steady state (``P``)."""
    runs: tuple[ShortRun, ...]
    """How each shorter run was simulated (its runs are dropped as soon as their time is read:
    kept, three runs of hundreds of thousands of tasks would stay in memory and in the garbage
    collector's passes over the next one)."""

    @property
    def microbatches(self) -> tuple[int, ...]:
        """The micro-batch counts simulated, in order."""
        return tuple(r.microbatches for r in self.runs)


@dataclass(frozen=True)
class ShortRun:
    """One of the shorter runs: what :func:`steady_iteration` keeps of it."""

    microbatches: int
    granularity: str
    """The granularity whose run was used (:attr:`sim.runner.Run.granularity`)."""
    coarse_divergence: str | None
    """Why a coarser run was set aside for this one (:attr:`sim.runner.Run.coarse_divergence`)."""
    clock_hz: float | None
    """The SM clock its compute was priced at (:attr:`sim.runner.Run.clock_hz`)."""


def steady_points(workload: WorkloadSpec) -> tuple[int, int] | None:
    """``(m1, P)``: the first micro-batch count to simulate and the period, or None where the
    whole iteration is not at least :data:`MIN_SAVING` times the three shorter runs."""
    p = workload.parallel
    total = p.num_microbatches
    period = p.pp if p.schedule is ScheduleKind.INTERLEAVED else 1
    m1 = max(2, p.pp)
    if total < MIN_SAVING * (3 * m1 + 3 * period):
        return None
    return m1, period


def steady_iteration(workload: WorkloadSpec, topology: TopologySpec, *, granularity: str = "op",
                     exact: bool = False, factors: CalibrationFactors | None = None) -> SteadyIteration | None:
    """The iteration time of ``workload`` from shorter runs (module docstring), simulated
    with :func:`sim.runner.simulate`'s ``granularity``, ``exact`` and ``factors``; None where the job is too
    short for them to save time or their times are not on one line (simulate the whole
    iteration then)."""
    points = steady_points(workload)
    if points is None or placed_unlike_an_order(workload):
        return None
    m1, period = points
    total = workload.parallel.num_microbatches
    clock_hz = _whole_clock_hz(workload, m1, period, total)
    times: list[float] = []
    runs: list[ShortRun] = []
    for k in range(4):
        m = m1 + k * period
        run = simulate(with_microbatches(workload, m), topology, granularity=granularity, exact=exact,
                       clock_hz=clock_hz, factors=factors)
        times.append(run.result.makespan_s)
        runs.append(ShortRun(m, run.granularity, run.coarse_divergence, run.clock_hz))
        diverged = run.coarse_divergence is not None
        del run
        if diverged:  # the longer runs meet their blocks alike
            granularity, exact = "op", False
        if k >= 2:
            a, b, c = times[-3:]
            if abs((c - b) - (b - a)) <= LINEAR_RTOL * c:
                estimate = c + (c - b) * ((total - m) // period)
                return SteadyIteration(estimate, tuple(times), period, tuple(runs))
    return None


def with_microbatches(workload: WorkloadSpec, m: int) -> WorkloadSpec:
    """``workload`` with ``m`` micro-batches per iteration (its global batch scaled)."""
    p = workload.parallel
    return dataclasses.replace(workload, parallel=dataclasses.replace(
        p, global_batch_size=m * p.micro_batch_size * p.dp))


def _whole_clock_hz(workload: WorkloadSpec, m1: int, period: int, total: int) -> float | None:
    """The SM clock the whole iteration's compute holds under the GPU's power limit
    (:func:`sim.runner.power_clock_hz`), from the compute op counts of two shorter programs:
    each count is affine in the micro-batches. None where the GPU's power is not modelled."""
    gpu = workload.system.gpu
    if gpu.power is None:
        return None
    a = compute_op_counts(build_program(with_microbatches(workload, m1)))
    b = compute_op_counts(build_program(with_microbatches(workload, m1 + period)))
    steps = (total - m1) // period
    counts = {op: a.get(op, 0) + (n - a.get(op, 0)) * steps for op, n in b.items()}
    return solve_clock_hz(gpu.power, loads_of(gpu, counts)) if counts else None
