"""One inference simulation from spec to result: the fabric, the program, the engine.

>>> from sim.config import load_topology
>>> from sim.hardware import get_gpu
>>> from sim.workload.spec import ModelSpec
>>> m = ModelSpec("m", 2, 1024, 16, 16, 4096, 32000, 2048, gated_mlp=True)
>>> run = simulate_inference(InferenceSpec("m", m, get_gpu("A100"), tp=2, generate_tokens=4), load_topology("dgx-a100"))
>>> len(run.step_end_s), run.step_end_s[0] < run.step_end_s[-1]
(4, True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sim.budget import check, inference_estimate
from sim.costs.analytical import AnalyticalCostModel
from sim.engine import Simulation
from sim.errors import ConfigError
from sim.inference.host import HostCostModel, host_gap_s, step_durations
from sim.inference.program import GRANULARITIES, HostGap, InferenceProgram, build_inference_program
from sim.inference.spec import InferenceSpec
from sim.inference.stack import ServingStack, load_serving_stack
from sim.results import SimResult
from sim.topology.routing import Fabric
from sim.topology.spec import TopologySpec
from sim.types import Stream

__all__ = ["InferenceRun", "simulate_inference", "fabric_for", "fabric_gpus"]


@dataclass
class InferenceRun:
    """A finished inference simulation and what it was made of."""

    spec: InferenceSpec
    topology: TopologySpec
    fabric: Fabric
    program: InferenceProgram
    costs: AnalyticalCostModel
    result: SimResult
    step_end_s: list[float]
    """When each step's tokens are sampled: ``[0]`` is the time to first token."""
    wall_s: float
    granularity: str
    notes: list[str] = field(default_factory=list)
    stack: ServingStack | None = None
    """The serving stack whose host issued the kernels."""


def fabric_for(spec: InferenceSpec, topology: TopologySpec) -> Fabric:
    """The fabric of ``topology`` holding the spec's ``tp x pp`` GPUs (ranks on GPUs
    ``0 .. tp x pp - 1``; a topology of fixed size keeps its size).

    Raises
    ------
    ConfigError
        If the topology has fewer GPUs than the spec needs.
    """
    return Fabric.of(topology, fabric_gpus(spec, topology))


def fabric_gpus(spec: InferenceSpec, topology: TopologySpec) -> int:
    """The GPUs of the fabric :func:`fabric_for` builds."""
    n = spec.num_gpus
    if topology.num_gpus is not None:
        if topology.num_gpus < n:
            raise ConfigError(topology.origin, "num_gpus", f"at least tp x pp = {n} GPUs", topology.num_gpus)
        n = topology.num_gpus
    return n


def simulate_inference(spec: InferenceSpec, topology: TopologySpec, *, granularity: str = "layer",
                       notes: list[str] | None = None, stack: ServingStack | None = None) -> InferenceRun:
    """Simulate the prefill and every decode step of ``spec`` on ``topology``.

    Parameters
    ----------
    granularity : {"layer", "op", "step"}
        ``"layer"`` (the default) runs each layer of each step as one block timed alone;
        ``"op"`` every kernel and collective as a task; ``"step"`` all of a stage's layers of
        one step as one block (:mod:`sim.inference.program`). All give the same times;
        ``"op"`` shows each kernel in the trace, ``"step"`` is the fastest for long outputs.
    stack : ServingStack, optional
        The serving stack whose host issues the kernels (:mod:`sim.inference.host`); None: the
        default stack (:data:`sim.inference.stack.DEFAULT_STACK`, CUDA graphs and no host work).
    """
    if granularity not in GRANULARITIES:
        raise ConfigError("<simulate_inference>", "granularity", f"one of {list(GRANULARITIES)}", granularity)
    t0 = time.perf_counter()
    stack = stack if stack is not None else load_serving_stack()
    factor = spec.gpu.host_time_factor
    if factor != 1.0 and stack.has_host_cost:
        notes = [*(notes or []), f"host costs x{factor:.2f}: the {spec.gpu.name}'s kernels are issued by "
                 f"{spec.gpu.host_cpu.value}, not the x86 host the stack was measured on"]
        stack = stack.on_slower_host(factor)
    check(inference_estimate(spec, topology, fabric_gpus(spec, topology), granularity))  # before anything is built
    fabric = fabric_for(spec, topology)
    costs = HostCostModel(spec.gpu, fabric, representative=True)
    ip = build_inference_program(spec, fabric.node_of, fabric.local_gpu, granularity,
                                 _host_gap(stack, costs, fabric) if stack.has_host_cost else None)
    result = Simulation(ip.program, costs, fabric.capacity_bytes_per_s).run()
    ends = _task_ends(result, ip)
    wall = time.perf_counter() - t0
    result.metadata["simulated_wall_s"] = wall
    return InferenceRun(spec, topology, fabric, ip, costs, result, ends, wall, granularity, list(notes or []),
                        stack)


def _host_gap(stack: ServingStack, costs: AnalyticalCostModel, fabric: Fabric) -> HostGap:
    """The program's ``host_gap``: each step's ops timed alone, then the stack's host gap
    (:func:`sim.inference.host.host_gap_s`); the request's work goes before the first stage's
    prefill."""
    durations = step_durations(costs, fabric.capacity_bytes_per_s)

    def gap(stage: int, step: int, ops: tuple) -> float:
        return host_gap_s(stack, durations(ops), step == 0 and stage == 0)

    return gap


def _task_ends(result: SimResult, ip: InferenceProgram) -> list[float]:
    """End time of each step's sampling (the step-end task's span, found by its step)."""
    names = {ip.program.tasks[t].name for t in ip.step_end_tasks}
    out = [0.0] * len(ip.step_end_tasks)
    for s in result.spans:
        if s.name in names and s.stream is Stream.COMPUTE:
            out[dict(s.args)["step"]] = s.end_s
    return out
