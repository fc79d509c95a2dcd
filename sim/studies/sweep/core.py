"""Design-space search (``llmsim sweep``): every parallel strategy of a space, ranked by speed.

The search runs in four steps, one function each:

1. :func:`space_points` walks the space (:class:`~sim.config.space.Space`) depth-first, setting
   by setting in :data:`~sim.config.space.AXES` order; ``dp`` follows as
   ``num_gpus / (tp x pp x cp)``.
2. :func:`make_candidate` turns a point into a :class:`~sim.workload.spec.WorkloadSpec` by
   replacing fields of the workload's :class:`~sim.workload.spec.ParallelSpec`; the specs check
   themselves, and a point they reject with a :class:`~sim.errors.ConfigError` is *invalid*.
3. :class:`~sim.studies.sweep.memory_check.MemoryCheck` prices each stage's memory in closed form
   (:mod:`sim.memory`, term for term); a configuration whose peak exceeds the GPU's capacity
   is *pruned* without being simulated.
4. A branch and bound (:mod:`sim.studies.sweep.branch_and_bound`) simulates the rest on an executor (local
   processes, or a Dask cluster's ``get_executor()``) in order of a closed-form lower bound
   on their iteration time (:class:`~sim.studies.sweep.bound.IterationBound`), each job first
   checking a tighter one (:mod:`sim.studies.sweep.timeline_bound`, :func:`screen_one`); a configuration
   whose bound exceeds the N-th best time of the batches finished before is left out
   (*pruned (bound)*): it cannot be among the ``top`` fastest. With ``exhaustive=True``
   (``--exhaustive``) :func:`run_simulations` simulates every one. Each worker gets the two
   specs and returns a :class:`SimOutcome`, a handful of numbers.

The ranking sorts by iteration time, then by the configuration's canonical key
(:data:`KEY_FIELDS`), never by completion order, so the result does not depend on the number
of workers; the bounded search picks what to simulate from fixed batches, so that does not
either, and its ``top`` are exactly the exhaustive sweep's. With ``fidelity="fast"``
configurations are simulated at chunk granularity (:data:`SCREEN_GRANULARITY`) and the best
``top`` again op by op; with ``"op"`` everything op by op. The counts add up:
``tried = invalid + pruned + pruned_bound + simulated + failed + cancelled``.

The default rule of each setting (where a space says ``auto``, or there is no space):

* ``tp``: divisors of the GPU count up to the NVLink (scale-up) domain that divide the
  attention heads and the MLP width and divide or are divided by the KV heads: tensor
  parallelism across the scale-out network is never competitive (Narayanan et al. 2021, arXiv
  2104.04473, Takeaway #1).
* ``cp``: divisors of ``num_gpus / tp`` whose ring-attention chunks keep at least
  :data:`MIN_TOKENS_PER_CP_RANK` tokens per rank (``seq / cp``, and ``seq`` a multiple of ``2 cp``).
* ``pp``: divisors of ``num_gpus / (tp x cp)`` for which the layers split into stages,
  unevenly as Megatron-LM does when it counts the embedding and the loss as a layer each.
* ``ep``: 1 for a dense model; for a mixture of experts, the divisors of the expert count that
  divide ``dp``.
* ``virtual_pipeline_stages``: 1, and with ``pp > 1`` every ``v`` for which ``pp x v`` divides
  the layers.
* ``schedule``: 1F1B without a pipeline; GPipe, 1F1B and ZB-H1 with one; interleaved 1F1B with
  ``v > 1``.
* ``micro_batch_size``: those of :data:`MICRO_BATCH_SIZES` that divide the local batch.
* ``recompute``: every :class:`~sim.types.RecomputeKind`.
* ``sequence_parallel``: off and on when ``tp > 1``.
* ``zero_stage``: 0 to 3 (1 is the distributed optimizer) when ``dp x cp > 1``, else 0.

Hybrid sharding (``parallel.dp_shard``) is not searched: candidates shard over their whole
``dp x cp`` group, except those with the workload's own DP, CP, EP and ZeRO level, which keep
its shard degree (so the workload's point is the workload).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum

from sim.config.space import AXES, Space, default_space
from sim.costs.factors import CalibrationFactors
from sim.errors import ConfigError, NotBuiltError
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.intervals import Band
from sim.studies.sweep.bound import IterationBound
from sim.studies.sweep.branch_and_bound import bounded_search
from sim.studies.sweep.memory_check import MemoryCheck, StageStates
from sim.studies.sweep.timeline_bound import timeline_bound
from sim.studies.workers import abandon, check_workers, cpu_count, in_worker, local_pool
from sim.topology.spec import TopologySpec
from sim.types import RecomputeKind, ScheduleKind
from sim.workload.spec import DEFAULT_RECOMPUTE_MODULES, WorkloadSpec, pipeline_split

__all__ = ["Fidelity", "KEY_FIELDS", "MICRO_BATCH_SIZES", "MIN_TOKENS_PER_CP_RANK", "Candidate", "SimOutcome",
           "SweepRow", "SweepResult", "space_points", "tp_limit_of", "make_candidate",
           "candidate_key", "MemoryCheck", "feasible_candidates", "simulate_one", "screen_one", "open_executor",
           "run_simulations", "pareto_front", "sweep"]

MICRO_BATCH_SIZES = (1, 2, 4, 8)
"""Micro-batch sizes the default space tries."""
MIN_TOKENS_PER_CP_RANK = 1024
"""The default space's smallest sequence share of one context-parallel rank: below it each
ring-attention step is too short to hide the next K/V exchange."""
KEY_FIELDS = ("tp", "pp", "dp", "cp", "ep", "virtual_pipeline_stages", "schedule", "micro_batch_size",
              "recompute", "sequence_parallel", "zero_stage")
"""The settings that name a configuration, in the order of its canonical key."""
_SHARDING = {0: (False, 0), 1: (True, 0), 2: (False, 2), 3: (False, 3)}
"""ZeRO level -> (distributed_optimizer, zero_stage) of a candidate."""
_WINDOW_PER_SLOT = 2
"""Simulations in flight per worker slot: enough to keep every worker busy, few enough that
Ctrl-C has little to cancel."""


class Fidelity(str, Enum):
    """How finely ``llmsim sweep`` simulates (``--fidelity``)."""

    FAST = "fast"
    """Every configuration at layer granularity, the best again op by op."""
    OP = "op"
    """Every configuration op by op."""


# --- 1. the points of a space ------------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _auto_tp(w: WorkloadSpec, c: dict, tp_limit: int) -> tuple:
    m = w.model
    return tuple(d for d in _divisors(w.system.num_gpus) if d <= tp_limit and m.num_attention_heads % d == 0
                 and m.ffn_hidden_size % d == 0 and (m.num_kv_heads % d == 0 or d % m.num_kv_heads == 0))


def _auto_cp(w: WorkloadSpec, c: dict, tp_limit: int) -> tuple:
    s = w.model.seq_length
    return tuple(d for d in _divisors(w.system.num_gpus // c["tp"] if w.system.num_gpus % c["tp"] == 0 else 1)
                 if d == 1 or (s % (2 * d) == 0 and s // d >= MIN_TOKENS_PER_CP_RANK))


def _auto_pp(w: WorkloadSpec, c: dict, tp_limit: int) -> tuple:
    n = w.system.num_gpus
    rest = n // (c["tp"] * c["cp"]) if n % (c["tp"] * c["cp"]) == 0 else 1
    m = w.model
    return tuple(d for d in _divisors(rest) if pipeline_split(m.num_layers, d, m.mtp_num_layers) is not None)


def _auto_ep(w: WorkloadSpec, c: dict, tp_limit: int) -> tuple:
    if not w.model.is_moe:
        return (1,)
    return tuple(d for d in _divisors(w.model.num_experts) if c["dp"] % d == 0)


def _auto_vps(w: WorkloadSpec, c: dict, tp_limit: int) -> tuple:
    pp, layers = c["pp"], w.model.num_layers
    return (1,) if pp == 1 else (1,) + tuple(v for v in range(2, layers // pp + 1) if layers % (pp * v) == 0)


def _auto_schedule(w: WorkloadSpec, c: dict, tp_limit: int) -> tuple:
    if c["pp"] == 1:
        return (ScheduleKind.ONE_F_ONE_B,)
    if c["virtual_pipeline_stages"] > 1:
        return (ScheduleKind.INTERLEAVED,)
    return (ScheduleKind.GPIPE, ScheduleKind.ONE_F_ONE_B, ScheduleKind.ZB_H1)


def _auto_mbs(w: WorkloadSpec, c: dict, tp_limit: int) -> tuple:
    gbs = w.parallel.global_batch_size
    return tuple(b for b in MICRO_BATCH_SIZES if gbs % (b * c["dp"]) == 0) or (1,)


_DEFAULT_RULES: dict[str, Callable[[WorkloadSpec, dict, int], tuple]] = {
    "tp": _auto_tp, "cp": _auto_cp, "pp": _auto_pp, "ep": _auto_ep, "virtual_pipeline_stages": _auto_vps,
    "schedule": _auto_schedule, "micro_batch_size": _auto_mbs,
    "recompute": lambda w, c, t: tuple(RecomputeKind),
    "sequence_parallel": lambda w, c, t: (False, True) if c["tp"] > 1 else (False,),
    "zero_stage": lambda w, c, t: (0, 1, 2, 3) if c["dp"] * c["cp"] > 1 else (0,),
}


def _axis_values(axis: str, w: WorkloadSpec, space: Space, chosen: dict, tp_limit: int) -> tuple:
    """The values of ``axis`` to try after the settings ``chosen`` so far."""
    if space.is_fixed(axis):
        return (w.parallel.zero if axis == "zero_stage" else getattr(w.parallel, axis),)
    listed = space.values(axis)
    return listed if listed is not None else _DEFAULT_RULES[axis](w, chosen, tp_limit)


def space_points(w: WorkloadSpec, space: Space, tp_limit: int) -> Iterator[dict]:
    """Every point of ``space`` for workload ``w``: one dict per combination, with a value for
    every setting of :data:`~sim.config.space.AXES` and ``dp``, depth-first in that order.

    ``tp_limit`` bounds the default rule's ``tp`` (the scale-up domain's GPUs).

    >>> from sim.config import load_workload
    >>> from sim.config.space import Space
    >>> pts = list(space_points(load_workload("tiny"), Space({"tp": (1, 2), "pp": (1, 2)}), 8))
    >>> [(p["tp"], p["pp"], p["dp"]) for p in pts]
    [(1, 1, 8), (1, 2, 4), (2, 1, 4), (2, 2, 2)]
    """
    n = w.system.num_gpus
    chosen: dict = {}

    def walk(i: int) -> Iterator[dict]:
        if i == len(AXES):
            yield dict(chosen)
            return
        axis = AXES[i]
        for value in _axis_values(axis, w, space, chosen, tp_limit):
            chosen[axis] = value
            if axis == "pp":  # dp follows; a product that does not divide the GPUs is left to the spec
                model_parallel = chosen["tp"] * chosen["cp"] * value
                chosen["dp"] = max(1, n // model_parallel)
            yield from walk(i + 1)

    yield from walk(0)


def tp_limit_of(topology: TopologySpec) -> int:
    """The largest TP the default space tries: the GPUs of one NVLink (scale-up) domain."""
    if topology.graph_file is not None:
        return topology.gpus_per_node
    return max(topology.gpus_per_node, topology.scale_up.domain_size)


# --- 2. candidates -----------------------------------------------------------------------------


def make_candidate(w: WorkloadSpec, point: dict) -> WorkloadSpec:
    """The workload ``w`` with the parallel settings of ``point`` (see :func:`space_points`).

    ZeRO level 1 is Megatron-LM's distributed optimizer; the workload's own level keeps its own
    flags, so a point equal to the workload gives back the workload. The workload's block
    recomputation (``recompute_num_layers``) is kept where the pipeline split and the
    recomputation are its own; elsewhere full recomputation is of every layer. Its selective
    recomputation's modules (``recompute_modules``) hold wherever a candidate recomputes
    selectively, its pipeline layout (``pipeline_layout``) where the candidate's pipeline and
    virtual stages are its own. The workload's hybrid
    sharding degree (``dp_shard``) is kept where DP, CP, EP and the ZeRO level are its own, else
    the candidate shards fully.

    Raises
    ------
    ConfigError
        When the specs reject the combination (heads not divisible by TP, a global batch not
        divisible by micro-batch x DP, ZB-H1 with full recomputation, ...).
    """
    p = w.parallel
    zero = point["zero_stage"]
    dist_opt, zero_stage = (p.distributed_optimizer, p.zero_stage) if zero == p.zero else _SHARDING[zero]
    own_dp = (point["dp"], point["cp"], point["ep"], zero) == (p.dp, p.cp, p.ep, p.zero)
    # the workload's block recomputation holds on its own chunks; elsewhere full is of every layer
    own_chunks = (point["pp"], point["virtual_pipeline_stages"], point["recompute"]) == (
        p.pp, p.virtual_pipeline_stages, p.recompute)
    settings = dict(tp=point["tp"], pp=point["pp"], dp=point["dp"], cp=point["cp"], ep=point["ep"],
                    virtual_pipeline_stages=point["virtual_pipeline_stages"], schedule=point["schedule"],
                    micro_batch_size=point["micro_batch_size"], recompute=point["recompute"],
                    recompute_num_layers=p.recompute_num_layers if own_chunks else None,
                    recompute_modules=p.recompute_modules if point["recompute"] is RecomputeKind.SELECTIVE
                    else DEFAULT_RECOMPUTE_MODULES,
                    pipeline_layout=p.pipeline_layout if (point["pp"], point["virtual_pipeline_stages"]) == (
                        p.pp, p.virtual_pipeline_stages) else None,
                    sequence_parallel=point["sequence_parallel"], distributed_optimizer=dist_opt,
                    zero_stage=zero_stage, dp_shard=p.dp_shard if own_dp else None)
    try:
        parallel = replace(p, **settings)
    except ConfigError as exc:
        # the workload's EP A2A overlap holds where the spec (as Megatron-Core) accepts it; the
        # candidates where it does not run without it, the delayed weight gradients with it
        if exc.field != "parallel.ep_overlap":
            raise
        parallel = replace(p, **settings, ep_overlap=False, delay_wgrad=False)
    return replace(w, parallel=parallel)


def candidate_key(w: WorkloadSpec) -> tuple:
    """The canonical key of a configuration: its :data:`KEY_FIELDS` (enums by their names)."""
    p = w.parallel
    return (p.tp, p.pp, p.dp, p.cp, p.ep, p.virtual_pipeline_stages, p.schedule.value, p.micro_batch_size,
            p.recompute.value, p.sequence_parallel, p.zero)


@dataclass(frozen=True)
class Candidate:
    """A valid configuration that fits in memory."""

    key: tuple
    """Its canonical key (:func:`candidate_key`)."""
    workload: WorkloadSpec
    peak_memory_bytes: float
    """The closed-form peak of its fullest stage (:mod:`sim.memory`)."""

    @property
    def settings(self) -> dict:
        return dict(zip(KEY_FIELDS, self.key))


# --- 4. simulation -----------------------------------------------------------------------------


SCREEN_GRANULARITY = "chunk"
"""What ``fidelity="fast"`` screens at: a block per model chunk's pass of a micro-batch
(:func:`sim.runner.simulate`; the same iteration time as layer granularity on every preset,
1.2-1.9x faster, ``benchmarks/bench_granularity.py``)."""


@dataclass(frozen=True)
class SimOutcome:
    """What a worker sends back for one configuration: a few numbers, not the run."""

    granularity: str
    """``"op"``, ``"layer"`` or ``"chunk"``: how finely it was simulated."""
    iteration_time_s: float = math.nan
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    bubble_fraction: float = 0.0
    exposed_comm_s: dict = field(default_factory=dict)
    """Exposed communication per parallel dimension (the report's ``exposed_comm_s``)."""
    wall_s: float = 0.0
    error: str | None = None
    """Why the simulation failed (``"TypeName: message"``), or None."""
    lower_bound_s: float = math.nan
    """The timeline bound (:mod:`sim.studies.sweep.timeline_bound`) when the worker computed it."""
    bounded: bool = False
    """Not simulated: ``lower_bound_s`` exceeded the gate it was sent with
    (:mod:`sim.studies.sweep.branch_and_bound`)."""

    @property
    def ok(self) -> bool:
        """Simulated without error."""
        return self.error is None and not self.bounded

    @property
    def exposed_comm_total_s(self) -> float:
        return sum(self.exposed_comm_s.values())


def simulate_one(workload: WorkloadSpec, topology: TopologySpec, granularity: str | None,
                 factors: CalibrationFactors | None = None) -> SimOutcome:
    """Simulate one configuration (in a worker) and keep the numbers the sweep reports.

    ``granularity`` is passed to :func:`~sim.runner.simulate` when given; None runs its default
    (op by op); ``factors`` are a calibration's (:mod:`sim.costs.factors`). Any exception is
    returned as the outcome's ``error``: one failing configuration is a result of the sweep, not
    its end.
    """
    t0 = time.perf_counter()
    try:
        run = simulate(workload, topology, factors=factors,
                       **({} if granularity is None else {"granularity": granularity}))
        rep = make_report(run)
    except Exception as exc:  # noqa: BLE001 -- reported per configuration, with its type
        return SimOutcome(granularity or "op", wall_s=time.perf_counter() - t0,
                          error=f"{type(exc).__name__}: {exc}")
    return SimOutcome(granularity or "op", rep.iteration_time_s, rep.tokens_per_s, rep.mfu, rep.bubble_fraction,
                      dict(rep.exposed_comm_s), time.perf_counter() - t0)


def screen_one(workload: WorkloadSpec, topology: TopologySpec, granularity: str | None, gate_s: float,
               factors: CalibrationFactors | None = None) -> SimOutcome:
    """A bounded sweep's job (in a worker): the configuration's timeline bound
    (:func:`~sim.studies.sweep.timeline_bound.timeline_bound`, kept per worker process) and, unless it
    exceeds ``gate_s`` (an N-th best time of the search), its simulation (:func:`simulate_one`).
    With ``gate_s`` infinite the bound is not computed. With calibration ``factors`` the bound is
    the uncalibrated one times :meth:`~sim.costs.factors.CalibrationFactors.least_time_scale`."""
    if math.isinf(gate_s):
        return simulate_one(workload, topology, granularity, factors)
    t0 = time.perf_counter()
    try:
        bound = timeline_bound(topology, workload.model, workload.system.gpu).lower_bound_s(workload)
        if factors is not None:
            bound *= factors.least_time_scale
    except Exception:  # noqa: BLE001 -- a bound that cannot be had leaves the configuration in the race
        return simulate_one(workload, topology, granularity, factors)
    if bound > gate_s:
        return SimOutcome(granularity or "op", wall_s=time.perf_counter() - t0, lower_bound_s=bound, bounded=True)
    return replace(simulate_one(workload, topology, granularity, factors), lower_bound_s=bound)


def _dask_client():
    try:
        from distributed import Client
    except ImportError:
        raise NotBuiltError("--executor dask://... needs dask.distributed: pip install 'llmsim[dask]'") from None
    return Client


@contextmanager
def open_executor(executor: str = "local", workers: int | None = None) -> Iterator[tuple[Executor, int]]:
    """An executor and its number of worker slots.

    Parameters
    ----------
    executor : str
        ``"local"``: :func:`sim.studies.workers.local_pool` of ``workers`` processes (default
        :func:`sim.studies.workers.cpu_count`; 1 runs in this process); ``"dask://HOST:PORT"``: the
        ``concurrent.futures`` executor of a Dask scheduler at that address
        (``dask.distributed.Client(address).get_executor()``), imported only then; there
        ``workers`` only bounds the simulations in flight (default: the cluster's threads).

    Raises
    ------
    ConfigError
        For another executor string or ``workers < 1``.
    NotBuiltError
        For a Dask address when ``dask.distributed`` is not installed.
    """
    _check_executor(executor, workers)
    if executor == "local":
        n = workers or cpu_count()
        with local_pool(n) as pool:
            yield pool, n
        return
    with _connect(executor) as client:
        slots = workers or sum(client.nthreads().values()) or 1
        ex = client.get_executor(pure=False)
        try:
            yield ex, slots
        finally:
            ex.shutdown(wait=False)


DASK_CONNECT_TIMEOUT_S = 5.0
"""How long ``--executor dask://HOST:PORT`` waits for the scheduler to answer (Dask's own default,
``distributed.comm.timeouts.connect``, is 30 s): an address that does not answer is an error
after this, not a half-minute wait."""


def _connect(executor: str):
    """A ``dask.distributed.Client`` of the scheduler ``executor`` names (``dask://HOST:PORT``),
    or a ConfigError naming the option, the address and what happened."""
    address = "tcp://" + executor[len("dask://"):]
    try:
        return _dask_client()(address, timeout=DASK_CONNECT_TIMEOUT_S)
    except (OSError, ValueError) as exc:  # TimeoutError, a refused or unresolvable address
        raise ConfigError("<--executor>", "--executor", f"a reachable Dask scheduler; connecting to {address} "
                          f"failed: {exc or type(exc).__name__}", executor) from None


def _check_executor(executor: str, workers: int | None) -> None:
    """Check the arguments of :func:`open_executor` before any work: a ConfigError for an
    executor it does not know or no workers, a NotBuiltError for Dask when it is missing."""
    check_workers(workers, "--workers")
    if executor == "local":
        return
    if not (executor.startswith("dask://") and len(executor) > len("dask://")):
        raise ConfigError("<--executor>", "--executor", "local or dask://HOST:PORT", executor)
    _dask_client()


def run_simulations(jobs: Sequence[Candidate], topology: TopologySpec, granularity: str | None,
                    executor: Executor, slots: int,
                    on_done: Callable[[Candidate, SimOutcome], None] | None = None,
                    factors: CalibrationFactors | None = None) -> tuple[dict[tuple, SimOutcome], bool]:
    """Simulate ``jobs`` on ``executor``, at most ``2 x slots`` in flight.

    Returns
    -------
    (dict, bool)
        The outcome of each finished job by its key, and whether Ctrl-C (KeyboardInterrupt)
        stopped the run: then the jobs in flight are cancelled and the dict holds those that
        had finished.
    """
    out: dict[tuple, SimOutcome] = {}
    todo = iter(jobs)
    pending: dict[Future, Candidate] = {}
    try:
        while True:
            while len(pending) < _WINDOW_PER_SLOT * slots:
                job = next(todo, None)
                if job is None:
                    break
                pending[executor.submit(in_worker, simulate_one, job.workload, topology, granularity, factors)] = job
            if not pending:
                return out, False
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f].key):
                job = pending.pop(fut)
                try:
                    outcome = fut.result()
                except Exception as exc:  # noqa: BLE001 -- a lost worker fails its job, not the sweep
                    outcome = SimOutcome(granularity or "op", error=f"{type(exc).__name__}: {exc}")
                out[job.key] = outcome
                if on_done is not None:
                    on_done(job, outcome)
    except KeyboardInterrupt:
        abandon(executor)  # drops the jobs in flight (sim/studies/workers.py)
        return out, True


# --- ranking -----------------------------------------------------------------------------------


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: ``(memory, throughput)`` pairs, less memory
    and more throughput being better. A point is dominated when another has no more memory and
    no less throughput, and differs. Returned by increasing memory.

    >>> pareto_front([(10, 5), (20, 9), (15, 4), (20, 8), (30, 9)])
    [0, 1]
    """
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1], i))
    front: list[int] = []
    best = -math.inf
    for i in order:
        mem, thr = points[i]
        if thr > best or (front and points[front[-1]] == (mem, thr)):
            front.append(i)
            best = max(best, thr)
    return front


@dataclass(frozen=True)
class SweepRow:
    """One simulated configuration: its screening result, and op by op if it was re-run."""

    candidate: Candidate
    screen: SimOutcome
    """The sweep's first simulation (chunk granularity under ``fidelity="fast"``)."""
    op: SimOutcome | None = None
    """The op-by-op re-run of a top configuration (``fidelity="fast"`` only)."""

    @property
    def best(self) -> SimOutcome:
        """The finest result there is: the op-level re-run when it succeeded."""
        return self.op if self.op is not None and self.op.ok else self.screen


@dataclass
class SweepResult:
    """A finished (or interrupted) sweep, every number in SI units."""

    workload: str
    topology: str
    gpu: str
    num_gpus: int
    capacity_bytes: float
    fidelity: Fidelity
    screen_granularity: str
    space: str
    tried: int = 0
    invalid: int = 0
    pruned: int = 0
    """Left out by the closed-form memory check."""
    pruned_bound: int = 0
    """Left out by the branch and bound: a lower bound on their iteration time exceeds a time
    the top ``top`` already beat (:mod:`sim.studies.sweep.branch_and_bound`; 0 with ``exhaustive``)."""
    failed: int = 0
    cancelled: int = 0
    exhaustive: bool = False
    """Every configuration that fits was simulated (no bound)."""
    invalid_reasons: dict = field(default_factory=dict)
    """How many points each field's check rejected (``parallel.global_batch_size``: 12)."""
    rows: list[SweepRow] = field(default_factory=list)
    """Every configuration simulated without error, by (screening time, key)."""
    top: list[SweepRow] = field(default_factory=list)
    """The best ``top``, by (their finest time, key)."""
    failures: list[tuple[Candidate, str]] = field(default_factory=list)
    interrupted: bool = False
    stopped_while: str = ""
    """What Ctrl-C interrupted: ``"checking"`` the space, ``"simulating"`` or the ``"op-level re-run"``."""
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    step_wall_s: dict = field(default_factory=dict)
    """Where the time went: ``check`` (enumeration, validity, memory), ``bound`` (the
    closed-form bounds and their order), ``simulate``, ``op_rerun``."""
    interval: Band | None = None
    """The band of the workload's stack on its GPU generation (:mod:`sim.studies.intervals`):
    every configuration's iteration time gets the same multiplicative interval, and one whose
    interval overlaps the best one's is tied with it (:meth:`tied_with_best`). None: not given."""

    @property
    def simulated(self) -> int:
        return len(self.rows)

    def tied_with_best(self, row: SweepRow) -> bool | None:
        """Whether ``row``'s interval overlaps the best top configuration's: its time ``t`` and
        the best one's ``t0`` (``t >= t0``) with the band's factors ``low`` and ``high`` overlap
        when ``t * low <= t0 * high``. The best one is tied with itself; None without a band."""
        if self.interval is None or not self.top:
            return None
        best = self.top[0].best.iteration_time_s
        return row.best.iteration_time_s * self.interval.low_factor <= best * self.interval.high_factor

    def pareto_rows(self) -> list[SweepRow]:
        """The simulated configurations on the Pareto front of tokens/s (as screened) against
        peak memory (:func:`pareto_front`), by increasing memory."""
        points = [(r.candidate.peak_memory_bytes, r.screen.tokens_per_s) for r in self.rows]
        return [self.rows[i] for i in pareto_front(points)]


def _bar(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="config", disable=None if enabled else True, leave=False,
                dynamic_ncols=True)


def feasible_candidates(w: WorkloadSpec, space: Space, tp_limit: int, result: SweepResult,
                        progress: bool = False, memory: MemoryCheck | None = None) -> list[Candidate]:
    """Steps 1 to 3: the valid points of ``space`` that fit in memory, by key; the points
    tried, invalid and pruned are counted on ``result``."""
    points = list(space_points(w, space, tp_limit))
    kept: list[Candidate] = []
    memory = memory or MemoryCheck()
    bar = _bar(len(points), "checking", progress)
    try:
        for point in points:
            result.tried += 1
            bar.update(1)
            try:
                cand = make_candidate(w, point)
            except ConfigError as exc:
                result.invalid += 1
                result.invalid_reasons[exc.field] = result.invalid_reasons.get(exc.field, 0) + 1
                continue
            peak = memory.fitting_peak_bytes(cand)
            if peak is None:
                result.pruned += 1
            else:
                kept.append(Candidate(candidate_key(cand), cand, peak))
    finally:
        bar.close()
    kept.sort(key=lambda c: c.key)
    return kept


def _simulate_all(jobs: list[Candidate], topology: TopologySpec, granularity: str | None, executor: Executor,
                  slots: int, desc: str, progress: bool, factors: CalibrationFactors | None
                  ) -> tuple[dict[tuple, SimOutcome], bool]:
    bar = _bar(len(jobs), desc, progress)
    try:
        return run_simulations(jobs, topology, granularity, executor, slots, lambda job, o: bar.update(1), factors)
    finally:
        bar.close()


def _search(jobs: list[Candidate], bound: IterationBound, top: int, topology: TopologySpec,
            granularity: str | None, executor: Executor, progress: bool, result: SweepResult,
            factors: CalibrationFactors | None) -> tuple[dict[tuple, SimOutcome], bool]:
    """Step 4 with the branch and bound (:mod:`sim.studies.sweep.branch_and_bound`): the outcome of each
    configuration simulated (or left out by its timeline bound) by key, and whether Ctrl-C
    stopped it; ``result.pruned_bound`` counts those left out."""
    t0 = time.perf_counter()
    scale = 1.0 if factors is None else factors.least_time_scale
    bound_s = {c.key: bound.lower_bound_s(c.workload) * scale for c in jobs}
    order = sorted(jobs, key=lambda c: (bound_s[c.key], c.key))
    result.step_wall_s["bound"] = time.perf_counter() - t0
    bar = _bar(len(jobs), "simulating", progress)
    try:
        found = bounded_search(
            order, bound_s, top,
            submit=lambda c, gate: executor.submit(in_worker, screen_one, c.workload, topology, granularity, gate,
                                                   factors),
            times_of=lambda o: o.iteration_time_s if o.ok else None,
            on_done=lambda c, o: bar.update(1),
            failed=lambda exc: SimOutcome(granularity or "op", error=f"{type(exc).__name__}: {exc}"),
            abandon=lambda: abandon(executor))
        bar.update(found.unsent)
    finally:
        bar.close()
    result.pruned_bound = found.unsent + sum(1 for o in found.outcomes.values() if o.bounded)
    return {k: o for k, o in found.outcomes.items() if not o.bounded}, found.interrupted


def sweep(workload: WorkloadSpec, topology: TopologySpec, space: Space | None = None, *, top: int = 10,
          fidelity: Fidelity = Fidelity.FAST, executor: str = "local", workers: int | None = None,
          progress: bool = False, notes: Sequence[str] = (), exhaustive: bool = False,
          factors: CalibrationFactors | None = None) -> SweepResult:
    """Search ``space`` (default: :func:`~sim.config.space.default_space`) for the fastest
    parallel strategies of ``workload`` on ``topology``.

    Parameters
    ----------
    top : int
        How many of the fastest to rank (and, under ``fidelity="fast"``, to re-run op by op).
    executor, workers
        Where to simulate (:func:`open_executor`).
    progress : bool
        Show progress bars (tqdm, on stderr, when it is a terminal).
    exhaustive : bool
        Simulate every configuration that fits in memory. By default a branch and bound
        (:mod:`sim.studies.sweep.branch_and_bound`) leaves out those a lower bound on their iteration time
        (:mod:`sim.studies.sweep.bound`, :mod:`sim.studies.sweep.timeline_bound`) shows cannot be among the ``top``
        fastest; the ``top`` found, their times and their order are the same either way, but
        ``rows`` (the CSV, the Pareto front) then hold only what was simulated.
    factors : CalibrationFactors, optional
        A calibration's factors (:mod:`sim.costs.factors`), applied to every simulation; the
        lower bounds are scaled by their :attr:`~sim.costs.factors.CalibrationFactors.least_time_scale`
        so that they stay bounds.

    Returns
    -------
    SweepResult
        Ctrl-C during the search returns what had finished, with ``interrupted`` set.
    """
    if top < 1:
        raise ConfigError("<--top>", "--top", "a positive number of configurations", top)
    _check_executor(executor, workers)
    t0 = time.perf_counter()
    space = space or default_space()
    screen = SCREEN_GRANULARITY if fidelity is Fidelity.FAST else None
    result = SweepResult(workload.name, topology.name, workload.system.gpu.name, workload.system.num_gpus,
                         workload.system.gpu.hbm_capacity_bytes, fidelity, screen or "op", space.source,
                         notes=list(notes), exhaustive=exhaustive)
    states = StageStates()
    try:
        jobs = feasible_candidates(workload, space, tp_limit_of(topology), result, progress, MemoryCheck(states))
    except KeyboardInterrupt:
        result.interrupted, result.stopped_while, result.wall_s = True, "checking", time.perf_counter() - t0
        return result
    steps = result.step_wall_s
    steps["check"] = time.perf_counter() - t0
    with open_executor(executor, workers) as (ex, slots):
        t1 = time.perf_counter()
        if exhaustive:
            outcomes, result.interrupted = _simulate_all(jobs, topology, screen, ex, slots, "simulating", progress,
                                                         factors)
        else:
            bound = IterationBound(workload.model, workload.system.gpu, states)
            outcomes, result.interrupted = _search(jobs, bound, top, topology, screen, ex, progress, result, factors)
        steps["simulate"] = time.perf_counter() - t1 - steps.get("bound", 0.0)
        result.cancelled = len(jobs) - len(outcomes) - result.pruned_bound
        result.stopped_while = "simulating" if result.interrupted else ""
        rows = []
        for job in jobs:
            o = outcomes.get(job.key)
            if o is not None and o.ok:
                rows.append(SweepRow(job, o))
            elif o is not None:
                result.failures.append((job, o.error))
        result.failed = len(result.failures)
        rows.sort(key=lambda r: (r.screen.iteration_time_s, r.candidate.key))
        result.rows = rows
        best = rows[:top]
        if screen is not None and best and not result.interrupted:
            t1 = time.perf_counter()
            again, result.interrupted = _simulate_all([r.candidate for r in best], topology, "op", ex, slots,
                                                      "op-level re-run", progress, factors)
            best = [replace(r, op=again.get(r.candidate.key)) for r in best]
            result.stopped_while = "op-level re-run" if result.interrupted else ""
            steps["op_rerun"] = time.perf_counter() - t1
    result.top = sorted(best, key=lambda r: (r.best.iteration_time_s, r.candidate.key))
    result.wall_s = time.perf_counter() - t0
    return result
