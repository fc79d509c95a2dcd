"""What a simulation will cost, estimated from its specs before anything is built, and the
memory budget it must fit.

A workload or topology file is a few lines; the job it describes may be a hundred million
tasks (10,000 micro-batches of a 126-layer model on 16,384 GPUs, ``--full``) or a torus of
eight billion routers. Building such a job runs for minutes and ends in a ``MemoryError`` or
the kernel's OOM killer. So :func:`sim.runner.simulate`, :func:`sim.inference.runner.
simulate_inference` and ``llmsim collective`` first estimate the job's memory from its specs
(:func:`training_estimate`, :func:`inference_estimate`, :func:`topology_estimate`) and stop
with one line saying the estimate and the budget when it exceeds it (:func:`check`,
:class:`BudgetError`).

The budget is :data:`DEFAULT_FRACTION` of the memory this process may use
(:func:`machine_memory_bytes`: the physical memory, a container's cgroup limit or the
address-space limit, whichever is least), or what ``--max-memory-gib`` sets for one command
(:func:`memory_budget`).

The estimate counts tasks (one per kernel or collective at op granularity, one per layer or
chunk pass when coarser), topology nodes and links, and prices them at the bytes each was
measured to hold, with the engine's events and the results they leave
(``benchmarks/bench_budget.py`` prints the measured and estimated figures for the presets):
it stays above the growth of the peak resident set, by 1.1 to 4 times, for every preset job
of more than a few MB (one of a few MB reads below: the allocator's arenas and lazily built
tables, not the job, dominate it, and no budget is near that small).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from sim.errors import ConfigError, Described, clip

__all__ = ["DEFAULT_FRACTION", "Budget", "BudgetError", "Estimate", "adopt_budget", "check", "collective_estimate",
           "collective_flow_bytes", "current_budget", "default_budget", "explicit_budget", "inference_estimate",
           "machine_memory_bytes", "memory_budget", "topology_estimate", "training_estimate"]

GiB = 2**30

DEFAULT_FRACTION = 0.5
"""The share of the memory this process may use that one simulation may take by default."""

BYTES_PER_TASK = {"op": 700, "layer": 1300, "chunk": 1300, "step": 6000}
"""Peak bytes per task with the engine's events and the spans it records, by granularity
(``benchmarks/bench_budget.py``, growth of the peak resident set over the tasks built:
420-620 B per op task and 970-1,020 B per layer or chunk task of the training presets;
710 B per op task and 1,060-1,140 B per layer task of inference; 3,000-5,600 B per step
task of inference)."""

BYTES_PER_GRAPH_ITEM = 1000
"""Bytes per node or directed link of a topology built as a NetworkX graph, with its routes
(``benchmarks/bench_budget.py``: 860-1,020 B for the torus and dragonfly presets at 4,096
GPUs)."""

BYTES_PER_INDEXED_LINK = 100
"""Bytes per link of a fat tree read from its structure (:class:`~sim.topology.fattree_index.
FatTreeIndex`; ``benchmarks/bench_budget.py``: under 60 B per GPU, about eight links per GPU,
at 16,384 GPUs)."""

BYTES_PER_RANK = 400
"""Bytes per rank of the job for its groups and placement, whether simulated or not."""

TASKS_PER_LAYER_PASS = {"op": 64, "op-moe": 96, "layer": 6, "chunk": 6}
"""Tasks per rank, micro-batch and layer of the rank's stage (forward, backward, recomputation,
their collectives; measured 26-60 for dense presets and 39-83 for mixture-of-experts ones at op
granularity, 2.4-6.3 at layer and chunk granularity: ``benchmarks/bench_budget.py`` prints the
tasks estimated and built, the estimate 1.1 to 2.6 times the tasks built)."""

TASKS_PER_MICROBATCH = 24
"""Tasks per rank and micro-batch outside the layers (embedding, output layer, pipeline sends
and receives)."""

INFERENCE_TASKS_PER_LAYER = {"op": 14, "layer": 1.3, "step": 0.0}
"""Inference tasks per generated token and layer (measured 12.2-12.3 at op granularity and
1.2-1.3 at layer granularity, Llama 2 7B)."""

BYTES_PER_FLOW = 700
"""Bytes per flow of a collective's plan (``benchmarks/bench_budget.py``: 460 B per estimated
flow of a 1,024-GPU all-reduce, 640 B of a 256-GPU all-to-all, topology included)."""

FLOWS_PER_RANK = 32
"""Flows a collective's plan holds per rank of its group, at most (a double binary tree's,
measured in ``benchmarks/bench_budget.py``; :func:`collective_estimate` counts the same)."""

INFERENCE_TASKS_PER_STAGE = 6
"""Inference tasks per generated token and pipeline stage outside the layers."""


@dataclass(frozen=True)
class Estimate:
    """What one job is estimated to cost."""

    what: str
    """The job, in words (``Llama 3 405B on 16,384 GPUs``)."""
    tasks: int
    """Tasks of the program, or flows of a collective (0 for a topology alone)."""
    graph_items: int
    """Nodes and directed links of the topology."""
    bytes: float
    """Peak memory, in bytes."""

    unit: str = "tasks"
    """What :attr:`tasks` counts: ``tasks``, or ``flows`` for a collective."""

    def describe(self) -> str:
        """``2,475 GiB for Llama 3 405B on 16,384 GPUs, ...: 2,000,000,000 tasks, 100 topology nodes and links``."""
        parts = [f"{self.tasks:,} {self.unit}"] if self.tasks else []
        if self.graph_items:
            parts.append(f"{self.graph_items:,} topology nodes and links")
        return f"{_gib(self.bytes)} for {self.what}: {', '.join(parts)}"


@dataclass(frozen=True)
class Budget:
    """The memory one simulation may take, and where that figure comes from."""

    bytes: float
    why: str


class BudgetError(ConfigError):
    """A job whose estimated memory exceeds the budget (names ``--max-memory-gib``)."""

    def __init__(self, estimate: Estimate, budget: Budget) -> None:
        super().__init__("<--max-memory-gib>", "--max-memory-gib",
                         f"a job that fits in the simulation memory budget of {_gib(budget.bytes)} ({budget.why})",
                         Described(f"an estimated {estimate.describe()}"))
        self.estimate, self.budget = estimate, budget


def _gib(n: float) -> str:
    if n < GiB:
        return f"{n / 2**20:,.0f} MiB"
    return f"{n / GiB:,.1f} GiB" if n < 100 * GiB else f"{n / GiB:,.0f} GiB"


def machine_memory_bytes() -> int:
    """The memory this process may use: the least of the physical memory, the cgroup's limit
    (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) and the address-space limit
    (``RLIMIT_AS``), where each is known; 8 GiB where none is."""
    found = []
    try:
        found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read(64).strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**62:
            found.append(int(text))
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            found.append(soft)
    except (ImportError, ValueError, OSError):
        pass
    return min((n for n in found if n > 0), default=8 * GiB)


_LIMIT: ContextVar[Budget | None] = ContextVar("llmsim_memory_budget", default=None)


def default_budget(shared_by: int = 1) -> Budget:
    """:data:`DEFAULT_FRACTION` of :func:`machine_memory_bytes`; with ``shared_by`` processes
    simulating at once (a validation's or a sweep's local workers), an equal share of it each."""
    total = machine_memory_bytes()
    if shared_by == 1:
        return Budget(DEFAULT_FRACTION * total, f"{DEFAULT_FRACTION:.0%} of the {_gib(total)} this process may use; "
                      "--max-memory-gib raises it")
    return Budget(DEFAULT_FRACTION * total / shared_by,
                  f"{DEFAULT_FRACTION:.0%} of the {_gib(total)} this machine may use, shared by {shared_by} "
                  "worker processes; --max-memory-gib sets each one's")


def explicit_budget() -> Budget | None:
    """The budget :func:`memory_budget` set (``--max-memory-gib``), None for the default: what
    worker processes take over (:func:`sim.studies.workers.start_worker`)."""
    return _LIMIT.get()


def adopt_budget(budget: Budget | None) -> None:
    """From here on in this context (a worker process), simulations may take ``budget``
    (None: the default budget)."""
    _LIMIT.set(budget)


def current_budget() -> Budget:
    """The budget in effect: the one :func:`memory_budget` set, else :func:`default_budget`."""
    return _LIMIT.get() or default_budget()


@contextmanager
def memory_budget(gib: float | None) -> Iterator[None]:
    """Within the block, simulations may take ``gib`` GiB (None: the default budget).

    Raises
    ------
    ConfigError
        For a ``gib`` that is not a positive finite number (``--max-memory-gib``).
    """
    if gib is None:
        yield
        return
    if not (isinstance(gib, (int, float)) and math.isfinite(gib) and gib > 0):
        raise ConfigError("<--max-memory-gib>", "--max-memory-gib", "a positive number of GiB", gib)
    token = _LIMIT.set(Budget(gib * GiB, "--max-memory-gib"))
    try:
        yield
    finally:
        _LIMIT.reset(token)


def check(estimate: Estimate, budget: Budget | None = None) -> Estimate:
    """``estimate``, or a :class:`BudgetError` when it exceeds ``budget`` (default: the
    budget in effect, :func:`current_budget`)."""
    budget = budget or current_budget()
    if estimate.bytes > budget.bytes:
        raise BudgetError(estimate, budget)
    return estimate


def topology_estimate(topology, num_gpus: int, what: str | None = None) -> Estimate:
    """The memory of ``topology``'s fabric at ``num_gpus`` (:func:`sim.topology.build.graph_size`,
    or the links of a fat tree read from its structure)."""
    from sim.topology.build import graph_size
    from sim.topology.spec import FAT_TREE_KINDS, ScaleUpKind

    nodes, links = graph_size(topology, num_gpus)
    indexed = (topology.scale_out.kind in FAT_TREE_KINDS and topology.scale_up.kind is ScaleUpKind.NVSWITCH
               and not topology.faults and topology.graph_file is None)  # as FatTreeIndex.of reads most of them
    per = BYTES_PER_INDEXED_LINK if indexed else BYTES_PER_GRAPH_ITEM
    return Estimate(what or f"{clip(topology.name, 40)} with {num_gpus:,} GPUs", 0, nodes + links,
                    float(nodes + links) * per + float(num_gpus) * BYTES_PER_RANK)


def training_estimate(workload, topology, full: bool, granularity: str) -> Estimate:
    """The memory of simulating one iteration of ``workload`` on ``topology`` (every rank when
    ``full``, else one per pipeline stage) at ``granularity``."""
    p, m = workload.parallel, workload.model
    world = p.num_gpus
    ranks = world if full else p.pp
    layers = m.num_layers / p.pp
    kind = "op-moe" if granularity == "op" and m.is_moe else granularity
    per_rank = p.num_microbatches * (layers * TASKS_PER_LAYER_PASS[kind] + TASKS_PER_MICROBATCH)
    tasks = int(ranks * per_rank)
    fabric = topology_estimate(topology, workload.system.num_gpus)
    mbs = f"{p.num_microbatches:,} micro-batch{'es' if p.num_microbatches != 1 else ''}"
    what = f"{clip(m.name, 40)} on {world:,} GPUs, {mbs}{', every rank' if full else ''}"
    return Estimate(what, tasks, fabric.graph_items, float(ranks) * per_rank * BYTES_PER_TASK[granularity]
                    + fabric.bytes + collective_flow_bytes(p))


def collective_flow_bytes(parallel) -> float:
    """The plan of the job's largest collective, held while it is priced: a collective's plan
    has flows over its whole group even when one rank of it is simulated (at most
    :data:`FLOWS_PER_RANK` a rank, :data:`BYTES_PER_FLOW` each). The largest group is the data
    parallel one over the context-parallel ranks too (the gradients' reduction), or the
    tensor- or expert-parallel one when larger.

    >>> from sim.workload.spec import ParallelSpec
    >>> collective_flow_bytes(ParallelSpec(tp=2, pp=2, dp=262144)) / 2**30  # a million GPUs' DP all-reduce
    5.46875
    """
    group = max(parallel.dp * parallel.cp, parallel.tp, parallel.ep)
    return float(FLOWS_PER_RANK * group * BYTES_PER_FLOW)


def inference_estimate(spec, topology, num_gpus: int, granularity: str) -> Estimate:
    """The memory of simulating ``spec``'s prefill and decode steps at ``granularity``."""
    m = spec.model
    per_token = m.num_layers * INFERENCE_TASKS_PER_LAYER[granularity] + spec.pp * INFERENCE_TASKS_PER_STAGE
    tasks = spec.generate_tokens * per_token
    fabric = topology_estimate(topology, num_gpus)
    what = f"{clip(m.name, 40)}, {spec.generate_tokens:,} tokens generated"
    return Estimate(what, int(tasks), fabric.graph_items, float(tasks) * BYTES_PER_TASK[granularity] + fabric.bytes)


def collective_estimate(topology, ranks: int, all_to_all: bool) -> Estimate:
    """The memory of pricing one collective over ``ranks`` GPUs of ``topology`` alone: the
    fabric and the plan's flows (every pair's for an all-to-all; measured at most 32 per rank
    for the others, a double binary tree's)."""
    flows = ranks * (ranks - 1) if all_to_all else FLOWS_PER_RANK * ranks
    fabric = topology_estimate(topology, ranks)
    return Estimate(f"{'an all-to-all' if all_to_all else 'a collective'} over {ranks:,} GPUs of "
                    f"{clip(topology.name, 40)}",
                    flows, fabric.graph_items, float(flows) * BYTES_PER_FLOW + fabric.bytes, "flows")
