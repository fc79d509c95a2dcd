"""One simulation from specs to results: build the topology, the program, run the engine.

>>> from sim.config import load_workload, load_topology
>>> run = simulate(load_workload("tiny"), load_topology("dgx-a100"))
>>> run.result.makespan_s > 0
True
"""

from __future__ import annotations

import dataclasses
import gc
import math
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

from sim.budget import check as check_budget
from sim.budget import training_estimate
from sim.costs.analytical import AnalyticalCostModel
from sim.costs.base import CostModel
from sim.costs.compute import kernel_load
from sim.costs.factors import CalibrationFactors
from sim.engine import ENGINE_RULES, ReferencePaths, Simulation
from sim.engine.block_check import WATCH_AT_EVENTS_PER_TASK, BlockInterference, block_interference, watch_blocks
from sim.errors import ConfigError
from sim.hardware import GPUSpec
from sim.power import KernelLoad, solve_clock_hz
from sim.program import Block
from sim.results import CounterSample, SimResult
from sim.topology.routing import Fabric
from sim.topology.spec import TopologySpec
from sim.types import CollectiveAlgorithm, Stream
from sim.units import round_sig
from sim.workload.layout import Layout, gpu_placement, order_placements
from sim.workload.spec import WorkloadSpec
from sim.workload.taskgraph import GRANULARITIES, Program, build_program

__all__ = ["Run", "simulate"]


@dataclass
class Run:
    """A finished simulation and what it was made of."""

    workload: WorkloadSpec
    topology: TopologySpec
    fabric: Fabric
    program: Program
    result: SimResult
    wall_s: float
    notes: list[str] = field(default_factory=list)
    granularity: str = "op"
    """``"op"`` or ``"layer"``: what one task of the program stands for (see :func:`simulate`)."""
    clock_hz: float | None = None
    """The SM clock its compute-bound kernels ran at under the GPU's power limit
    (:func:`power_clock_hz`; None: not modelled, or a cost model of the caller's):
    ``AnalyticalCostModel(..., clock_hz=run.clock_hz)`` prices its ops as the run did."""
    power_loads: list = field(default_factory=list)
    """The compute kernels the clock was solved over (:func:`power_loads`; empty where it was
    not), for what draws power at that clock (``sim.studies.whatif.power``)."""
    coarse_divergence: str | None = None
    """For :func:`simulate` with ``exact``: why the run at the coarse granularity asked for was
    set aside for this op-level one (:func:`sim.engine.block_check.block_interference`); None
    when it was used, or not asked for."""


@contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector: building and running a program allocates hundreds
    of thousands of small objects and almost no cycles, and the collector's passes over them
    cost more than the simulation (measured: 1.8 s -> 1.1 s for the default run). On the way
    out the collector is left as it was found, enabled or not, with the same objects frozen.

    Re-enabled as it is, the collector's next pass would walk every object the run made, all
    still young and nearly all alive (0.34 s of gpt3-175b's 1.5 s). Where nothing is frozen,
    they are first moved to the oldest generation unscanned (:func:`gc.freeze` then
    :func:`gc.unfreeze`, two list splices), as a pass that found them alive would have moved
    them; the next full collection still sees them. A process that ends after its run (the
    CLI) may freeze the survivors itself; a library caller's frozen objects are its own."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


@lru_cache(maxsize=4)
def cached_fabric(topology: TopologySpec, num_gpus: int, placement: tuple[int, ...] | None) -> Fabric:
    """The fabric of ``topology`` at ``num_gpus`` with ``placement`` (:meth:`Fabric.of`: a fat
    tree read from its structure, other fabrics built as graphs), kept for the next runs on
    the same one (a design-space sweep simulates thousands of workloads on one topology).
    Building it and routing (cached in the fabric) are deterministic, so a reused fabric gives
    the same results; its route cache is what is worth keeping: routing the data-parallel
    rings of 1024 GPUs costs more than simulating the iteration at layer granularity."""
    return Fabric.of(topology, num_gpus, placement)


def placed_unlike_an_order(workload: WorkloadSpec) -> bool:
    """Whether ``workload.parallel.placement`` is an explicit GPU list that no rank order gives:
    :func:`simulate` then simulates every rank (a representative rank per stage stands for the
    others only when they are placed alike)."""
    placement = gpu_placement(workload.parallel)
    return (placement is not None and not isinstance(workload.parallel.placement, str)
            and placement not in order_placements(workload.parallel))


def excluded_algorithms(workload: WorkloadSpec) -> frozenset:
    """The collective algorithms the run's NCCL may not use: NVLS and NVLS-tree under deterministic mode
    (Megatron-LM's ``validate_args``, ``megatron/training/arguments.py``, requires
    ``NCCL_ALGO`` to be one of Tree, Ring, CollnetDirect, CollnetChain or ``^NVLS``: whichever
    is set, NCCL runs no NVLS)."""
    return frozenset({CollectiveAlgorithm.NVLS, CollectiveAlgorithm.NVLS_TREE}) if workload.kernels.deterministic \
        else frozenset()


def simulate(workload: WorkloadSpec, topology: TopologySpec, *, full: bool = False,
             costs: CostModel | None = None, notes: list[str] | None = None,
             slow_gpus: dict[int, float] | None = None, link_counters: int = 0,
             granularity: str = "op", exact: bool = False, clock_hz: float | None = None,
             reference: ReferencePaths = ENGINE_RULES, factors: CalibrationFactors | None = None) -> Run:
    """Simulate one training iteration of ``workload`` on ``topology``.

    Ranks run on the GPUs ``workload.parallel.placement`` gives (:func:`gpu_placement`). One
    representative rank per stage stands for the others only when they are placed alike, as
    a rank order places them; an explicit GPU list that no order gives is therefore simulated
    in full, with a note.

    Parameters
    ----------
    full : bool
        Simulate every rank instead of one representative rank per pipeline stage.
    costs : CostModel, optional
        Defaults to :class:`~sim.costs.analytical.AnalyticalCostModel` for the workload's GPU.
    slow_gpus : dict, optional
        Rank -> factor (> 1) by which its compute runs slower (a straggler; a rank, wherever
        ``parallel.placement`` puts it). With one representative rank per stage, the
        straggler's stage representative runs slow in its place: the stage's collectives make
        its peers wait for it every step, so the iteration ends with it either way;
        ``full=True`` slows exactly that rank.
    link_counters : int
        Record link rates and add, for this many of the busiest links that start or end at a
        simulated GPU, a counter ``link <name>`` of its utilization (carried rate over
        capacity) over time to the result, for the trace.
    granularity : {"op", "layer", "chunk"}
        ``"op"`` (the default) simulates every kernel and collective as a task. ``"layer"``
        makes each transformer layer's forward, backward (with its recompute) and weight-gradient
        pass of each micro-batch one block, timed alone from the same prices (its collectives at
        their solo times, with the overlaps the op level has) and placed as one task; the
        embedding, output layer, pipeline transfers, data-parallel and ZeRO/FSDP traffic and the
        optimizer stay as they are. It runs several times faster, for design-space searches.
        What it gives up: a layer's collectives never share links with other traffic (the op
        level runs those that can meet another transfer as flows), and inside a layer pass the
        exposed communication sits before the compute (docs/design.md, "Layer granularity").
        ``"chunk"`` goes further: a model chunk's whole forward, backward or weight-gradient
        pass of a micro-batch is one block, except where something is issued between its
        layers (the last micro-batch's gradient buckets, FSDP's per-layer gathers and
        reduce-scatters), which stay at layer granularity; for screening many configurations.
    exact : bool
        With ``granularity`` layer or chunk: use that run only where it gives the op-level
        run's timeline, up to the order of floating-point additions, and simulate op by op
        otherwise. The coarse run watches for anything that meets one of its blocks
        (:mod:`sim.engine.block_check`: a transfer on its collectives' links, a kernel beside
        it), once while it runs (cut short at a first meeting, :data:`WATCH_AT_EVENTS_PER_TASK`)
        and once at its end; the op run that replaces it says why in
        :attr:`Run.coarse_divergence`.
    clock_hz : float, optional
        Price compute at this SM clock instead of the one ``workload``'s GPU holds under its
        power limit over this program's kernels (:func:`power_clock_hz`); for a GPU whose power
        behaviour is measured, without ``costs``. :mod:`sim.steady` passes the clock of the
        whole iteration to the shorter runs it simulates in its place.
    reference : ReferencePaths, optional
        Replace the engine's shortcuts by the plainer placements they must match
        (:class:`sim.engine.ReferencePaths`; for the tests that hold the two to each other).
    factors : CalibrationFactors, optional
        A calibration's factors (:mod:`sim.costs.factors`, ``llmsim calibrate --runs``): every
        compute kernel's time and every link's bandwidth scaled by them, and their measured
        kernel curves (``llmsim calibrate --kernels``) in place of the workload's GPU's where it
        is the GPU they were measured on (:meth:`~sim.costs.factors.KernelCurves.on`, noted
        either way). None (the default) simulates the model as it is. Only without ``costs``
        (they scale the analytical model).
    """
    if granularity not in GRANULARITIES:
        raise ConfigError("<simulate>", "granularity", f"one of {list(GRANULARITIES)}", granularity)
    if factors is not None and costs is not None:
        raise ConfigError("<simulate>", "factors", "no calibration factors with a cost model of the caller's "
                          "(they scale the analytical model's prices)", factors)
    args = (workload, topology, full, costs, notes, slow_gpus, link_counters, clock_hz, reference, factors)
    if not exact or granularity == "op":
        return _simulate(*args, granularity, False)
    try:
        run = _simulate(*args, granularity, True)
    except BlockInterference as exc:
        why = str(exc)
    else:
        if run.coarse_divergence is None:
            return run
        why = run.coarse_divergence
        run = None
    out = _simulate(*args, "op", False)
    out.coarse_divergence = why
    out.notes.append(f"granularity: op ({granularity} set aside: {why})")
    return out


def _simulate(workload: WorkloadSpec, topology: TopologySpec, full: bool, costs: CostModel | None,
              notes: list[str] | None, slow_gpus: dict[int, float] | None, link_counters: int,
              given_clock_hz: float | None, reference: ReferencePaths, factors: CalibrationFactors | None,
              granularity: str, check: bool) -> Run:
    """:func:`simulate` at one granularity; with ``check``, the run watches its blocks and
    raises :class:`~sim.engine.block_check.BlockInterference` when something meets one while
    it runs, and says what met one by its end in :attr:`Run.coarse_divergence`."""
    notes = list(notes or [])
    if factors is not None and factors.kernels is not None:
        gpu = factors.kernels.on(workload.system.gpu, notes)
        if gpu is not workload.system.gpu:
            workload = dataclasses.replace(workload, system=dataclasses.replace(workload.system, gpu=gpu))
    t0 = time.perf_counter()
    with _gc_paused():
        placement = gpu_placement(workload.parallel)
        if not full and placed_unlike_an_order(workload):
            full = True
            notes.append("parallel.placement: an explicit GPU list that no rank order gives -> every "
                         "rank simulated (as --full): a representative rank per stage stands for "
                         "the others only when they are placed alike")
        if not full and topology.faults:
            full = True
            notes.append("topology faults: a degraded link slows only the ranks whose traffic crosses it -> "
                         "every rank simulated (as --full): a representative rank per stage stands for the "
                         "others only when their links are alike")
        check_budget(training_estimate(workload, topology, full, granularity))  # before anything is built
        fabric = cached_fabric(topology, workload.system.num_gpus, placement)
        if factors is not None and factors.comm_efficiency != 1.0:
            # every link at comm_efficiency times its bandwidth, for the engine and for what
            # plans on the fabric (the algorithm and protocol NCCL's tuner would pick) alike
            fabric = fabric.with_capacities(factors.capacities(fabric.capacity_bytes_per_s))
        program = build_program(workload, representative=not full, node_of=fabric.node_of,
                                local_gpu_of=fabric.local_gpu, granularity=granularity)
        clock_hz, loads = None, []
        if costs is None:
            gpu = workload.system.gpu
            if given_clock_hz is not None and gpu.power is not None:
                clock_hz = given_clock_hz
            else:
                clock_hz, loads = power_clock_hz(gpu, program)
            if clock_hz is not None:
                notes.append(f"power: under {gpu.name}'s {gpu.power.limit_w:.0f} W limit this iteration's "
                             f"kernels hold {clock_hz / 1e6:.0f} MHz (back to back: BF16 GEMMs "
                             f"{gpu.power.gemm_clock('bf16') / 1e6:.0f}, bandwidth-bound kernels "
                             f"{gpu.power.max_clock_hz / 1e6:.0f}); GEMMs and attention run at it (sim/power.py)")
            costs = AnalyticalCostModel(gpu, fabric, representative=not full,
                                        simulated=None if full else frozenset(r.rank for r in program.ranks),
                                        excluded=excluded_algorithms(workload), clock_hz=clock_hz,
                                        factors=factors)
        slowdown = _slowdown(workload, program, slow_gpus or {}, notes)
        watch = (watch_blocks, max(1, int(WATCH_AT_EVENTS_PER_TASK * len(program.tasks)))) if check else None
        capacity = fabric.capacity_bytes_per_s
        engine = Simulation(program, costs, capacity, slowdown, record_links=link_counters > 0,
                            watch=watch, reference=reference)
        why = None
        try:
            result = engine.run()
        except BlockInterference as exc:
            why = str(exc)
        if why is not None:
            # the stopped engine's processes and their events hold it in cycles: free them before
            # the next one (or the CLI's freeze) would otherwise keep them
            del engine
            gc.collect()
            raise BlockInterference(why)
        divergence = block_interference(engine) if check else None
        del engine
        if link_counters:
            result.counters.extend(busiest_link_counters(fabric, result, link_counters))
    wall = time.perf_counter() - t0
    result.metadata["simulated_wall_s"] = wall
    if clock_hz is not None:
        result.metadata["sm_clock_hz"] = clock_hz
    result.metadata["granularity"] = granularity
    if granularity == "layer":
        notes.append("granularity: layer (each layer pass one block, timed alone; --granularity op "
                      "simulates every op)")
    elif granularity == "chunk":
        notes.append("granularity: chunk (each model chunk's pass of a micro-batch one block, timed alone, "
                     "layer blocks where buckets or FSDP traffic are issued between layers; --granularity op "
                     "simulates every op)")
    return Run(workload, topology, fabric, program, result, wall, notes, granularity, clock_hz, loads, divergence)


def power_loads(gpu: GPUSpec, program: Program) -> list[KernelLoad]:
    """``program``'s compute kernels as the power model sees them: every simulated rank's,
    each distinct op once with the count of times it runs (``gpu.power`` must be set)."""
    return loads_of(gpu, compute_op_counts(program))


def loads_of(gpu: GPUSpec, counts: dict) -> list[KernelLoad]:
    """The power model's kernels for ``counts`` (op -> times it runs, :func:`compute_op_counts`)."""
    return [dataclasses.replace(kernel_load(gpu, op), count=n) for op, n in counts.items()]


def compute_op_counts(program: Program) -> dict:
    """Every distinct compute op of ``program``'s simulated ranks (the ops inside a block
    included), in the order of first issue, with the number of times it runs."""
    by_id: dict[int, list] = {}
    for t in program.tasks:
        if t.comm or t.stream is not Stream.COMPUTE:
            continue
        entry = by_id.get(id(t.op))
        if entry is None:
            by_id[id(t.op)] = [t.op, 1]
        else:
            entry[1] += 1
    counts: dict = {}
    for op, n in by_id.values():
        for o in ([o for s, o in zip(op.streams, op.ops) if s is None] if isinstance(op, Block) else (op,)):
            counts[o] = counts.get(o, 0) + n
    return counts


def power_clock_hz(gpu: GPUSpec, program: Program) -> tuple[float | None, list[KernelLoad]]:
    """The SM clock ``gpu`` holds under its power limit over ``program``'s compute kernels
    (:func:`sim.power.solve_clock_hz`), with those kernels (:func:`power_loads`); None and no
    kernels when the GPU's power behaviour is not measured (:attr:`GPUSpec.power`)."""
    if gpu.power is None:
        return None, []
    loads = power_loads(gpu, program)
    return (solve_clock_hz(gpu.power, loads) if loads else None), loads


def _slowdown(workload: WorkloadSpec, program: Program, slow_gpus: dict[int, float],
              notes: list[str]) -> dict[int, float]:
    """Map straggler GPUs to simulated ranks (their own, or their stage's representative)."""
    out: dict[int, float] = {}
    n = workload.system.num_gpus
    simulated = {r.rank for r in program.ranks}
    layout = Layout.of(workload.parallel)
    for rank, factor in sorted(slow_gpus.items()):
        if not (isinstance(rank, int) and 0 <= rank < n):
            raise ConfigError("<--slow-gpu>", "--slow-gpu", f"a GPU rank in 0..{n - 1}", rank)
        if not 1.0 <= factor < math.inf:
            raise ConfigError("<--slow-gpu>", "--slow-gpu", "a finite slowdown factor >= 1", factor)
        target = rank if rank in simulated else layout.rank(0, 0, layout.coords(rank)[2])
        out[target] = max(out.get(target, 1.0), factor)
        where = "" if target == rank else f" (simulated as stage {layout.coords(rank)[2]}'s rank {target})"
        notes.append(f"GPU {rank} computes {factor:g}x slower{where}")
    return out


def busiest_link_counters(fabric: Fabric, result, n: int) -> list:
    """Utilization counters of the ``n`` busiest links with a simulated GPU at one end: each
    link's carried rate over its capacity in ``fabric`` (the engine's)."""
    simulated = {r.rank for r in result.ranks}
    busy = result.metadata["link_busy_bytes"]
    picked = []
    for link in sorted(range(len(busy)), key=lambda i: (-round_sig(busy[i]), i)):
        if busy[link] <= 0 or len(picked) == n:
            break
        ends = [fabric.rank_on(int(m)) for m in re.findall(r"\bgpu(\d+)\b", fabric.link_names[link])]
        owner = next((r for r in ends if r in simulated), None)
        if owner is not None:
            picked.append((link, owner))
    link_rates = result.metadata.get("link_rates")
    rates = link_rates.series(link for link, _ in picked) if link_rates is not None else {}
    out = []
    for link, owner in picked:
        cap = fabric.capacity_bytes_per_s[link]
        name = f"link {fabric.link_names[link]}"
        out.append(CounterSample(owner, 0.0, name, 0.0))
        for t, rate in rates.get(link, ()):
            out.append(CounterSample(owner, t, name, rate / cap))
    return out

