"""What-if studies: move a workload from one GPU system to another one factor at a time.

The seed paper (BanaGozar et al., arXiv 2407.14645, Sec. 5) dissects the ~35x training speed-up
from A100 to B200 into its causes. :func:`generations` does it with the simulator: starting from
the workload on system A, it swaps one resource at a time for system B's, simulates after each
swap, and reports each factor's speed-up. The speed-ups multiply to the end-to-end one exactly
(they telescope), and the last state is system B itself, so the end-to-end figure is the
workload's time on A over its time on B.

The factors (:data:`FACTORS`), each a set of fields of the GPU or the topology:

``compute``
    Tensor-core peak per number format and the measured kernel efficiencies (GEMM, attention),
    the kernel launch gap, the SM count (of which NCCL's kernels hold their channels') and the
    architecture generation (whose GEMM kernels decide whether an epilogue overlaps the main
    loop: :attr:`~sim.hardware.GPUSpec.gemm_epilogue_overlapped`).
``format``
    The number format the workload trains in (BF16 -> FP8 -> NVFP4), at the current GPU's peak
    for it (so it must come after ``compute`` when the source GPU lacks the format).
``hbm-bandwidth``
    HBM bandwidth and the fraction streaming kernels reach.
``hbm-capacity``
    HBM capacity; with a re-optimizer (:func:`sweep_reoptimizer`) every state runs its best
    parallel layout and recomputation, so this factor carries what the memory lets it choose.
``nvlink``
    The scale-up domain: NVLink bandwidth, latency, its collective efficiency curves and size
    (GPUs per node and per NVLink domain).
``network``
    The scale-out fabric: NICs per node, their bandwidth, efficiency and latency, the switches.

:func:`scale_system` multiplies every rate by ``k`` and divides every latency by ``k``: the
iteration then takes exactly ``1/k`` of the time (all efficiencies are functions of sizes, not
times), the identity the tests check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.config.fields import comma_items
from sim.costs.factors import CalibrationFactors
from sim.errors import ConfigError
from sim.hardware import GPUSpec
from sim.topology.spec import LinkSpec, TopologySpec
from sim.types import NOT_SIMULATED_DTYPES, SIMULATED_DTYPES, Dtype, parse_enum
from sim.workload.spec import ParallelSpec, WorkloadSpec

__all__ = ["FACTORS", "SCALABLE", "Step", "Generations", "NodeRow", "generations", "scale_system", "breakdown", "nodes",
           "node_system", "load_nodes_table", "NODE_FACTORS", "NODE_FACTOR_RANGE", "NODE_NM_RANGE",
           "format_generations", "format_nodes", "parse_order", "parse_dtype"]

FACTORS = ("compute", "format", "hbm-bandwidth", "hbm-capacity", "nvlink", "network")
"""The factors of :func:`generations`, in the seed paper's order (compute and format first,
then memory, then the networks; seed-paper.md, Sec. 10 item 4)."""

_COMPUTE_FIELDS = ("peak_flops_per_s", "gemm_efficiency", "attention_efficiency", "attention_backward_efficiency",
                   "flash2_attention_efficiency", "flash2_attention_backward_efficiency", "kernel_launch_s",
                   "sm_count", "power", "generation")

Reoptimizer = Callable[[WorkloadSpec, TopologySpec], ParallelSpec]
"""Given a workload (on its current hybrid GPU) and topology, the best parallel settings."""


@dataclass(frozen=True)
class Step:
    """One factor applied: the iteration before and after, and what changed."""

    factor: str
    iteration_time_s: float
    speedup: float
    """The previous step's iteration time over this one's."""
    detail: str
    breakdown_s: dict
    """Where this step's iteration goes (:func:`breakdown`)."""
    fits: bool

    def to_dict(self) -> dict:
        return {"factor": self.factor, "iteration_time_s": self.iteration_time_s, "speedup": self.speedup,
                "detail": self.detail, "breakdown_s": self.breakdown_s, "fits": self.fits}


@dataclass(frozen=True)
class Generations:
    """The factor-by-factor path from one system to another."""

    workload: str
    from_system: str
    to_system: str
    base_time_s: float
    base_breakdown_s: dict
    steps: tuple[Step, ...]

    @property
    def final_time_s(self) -> float:
        return self.steps[-1].iteration_time_s if self.steps else self.base_time_s

    @property
    def speedup(self) -> float:
        """End to end: the time on the first system over the time on the second."""
        return self.base_time_s / self.final_time_s

    def to_dict(self) -> dict:
        return {"workload": self.workload, "from": self.from_system, "to": self.to_system,
                "base_iteration_time_s": self.base_time_s, "base_breakdown_s": self.base_breakdown_s,
                "final_iteration_time_s": self.final_time_s, "speedup": self.speedup,
                "steps": [s.to_dict() for s in self.steps]}


def breakdown(run) -> dict:
    """Where one iteration goes, per GPU (mean over stages), in seconds: tensor-core compute
    (GEMM and attention), memory-bound work (every other compute op), exposed communication and
    the pipeline bubble / idle time; they add up to the iteration time."""
    from sim.output.report import make_report

    return _breakdown_of(make_report(run))


def _breakdown_of(rep) -> dict:
    """:func:`breakdown` from the run's report."""
    tensor = sum(v for k, v in rep.compute_s.items() if k in ("gemm", "attention"))
    memory = rep.compute_s["total"] - tensor
    comm = sum(rep.exposed_comm_s.values())
    idle = max(0.0, rep.iteration_time_s - tensor - memory - comm)
    return {"tensor_compute_s": tensor, "memory_bound_s": memory, "exposed_comm_s": comm, "bubble_idle_s": idle}


def _with_system(w: WorkloadSpec, gpu: GPUSpec, topo: TopologySpec, dtype: Dtype,
                 parallel: ParallelSpec) -> WorkloadSpec:
    system = dataclasses.replace(w.system, gpu=gpu, gpus_per_node=topo.gpus_per_node)
    return dataclasses.replace(w, system=system, dtype=dtype, parallel=parallel)


def _simulate(w: WorkloadSpec, topo: TopologySpec, factors: CalibrationFactors | None = None):
    from sim.runner import simulate

    return simulate(w, topo, factors=factors)


def _figures(run) -> tuple[dict, bool]:
    """The run's :func:`breakdown` and whether every stage fits its GPU's memory, from one
    report (:func:`sim.output.report.make_report`)."""
    from sim.output.report import make_report

    rep = make_report(run)
    return _breakdown_of(rep), all(s.fits for s in rep.stages)


def generations(workload: WorkloadSpec, to_gpu: GPUSpec, from_topology: TopologySpec, to_topology: TopologySpec,
                order: Sequence[str] = FACTORS, to_dtype: Dtype | None = None,
                reoptimize: Reoptimizer | None = None, factors: CalibrationFactors | None = None) -> Generations:
    """Move ``workload`` (on its own GPU and ``from_topology``) to ``to_gpu`` on ``to_topology``
    one factor at a time, in ``order`` (a permutation of :data:`FACTORS`).

    Parameters
    ----------
    to_dtype : Dtype, optional
        The number format on the new system (the ``format`` factor); default: the workload's.
    reoptimize : callable, optional
        Called on every state, the first system's included, to run each on its best layout
        (what a user would do on that system): a factor then carries what it gains with the
        layout re-chosen for it, and the capacity factor what the larger memory lets the
        search choose. None keeps the workload's layout throughout.
    factors : CalibrationFactors, optional
        A calibration's factors (:mod:`sim.costs.factors`), applied to every state: they
        describe the measured job's software against the catalogue's rates, which the study
        carries to the new system (the speed-ups are those of the calibrated model).

    Raises
    ------
    ConfigError
        For an order that is not a permutation of the factors, or a format the GPU of that step
        has no tensor cores for.
    """
    if sorted(order) != sorted(FACTORS):
        raise ConfigError("<--order>", "--order", f"a comma-separated permutation of {','.join(FACTORS)}",
                          ",".join(order))
    to_dtype = workload.dtype if to_dtype is None else to_dtype
    if to_dtype not in dict(to_gpu.peak_flops_per_s):  # no order of the steps reaches it
        raise ConfigError("<--dtype>", "--dtype", f"a format {to_gpu.name}'s tensor cores have: one of "
                          f"{[d.value for d, _ in to_gpu.peak_flops_per_s]}", to_dtype.value)
    gpu, topo, dtype, parallel = workload.system.gpu, from_topology, workload.dtype, workload.parallel
    from_name = f"{gpu.name} on {from_topology.name}"
    if reoptimize is not None:  # start from the best layout of the first system, not the workload's
        parallel = reoptimize(_with_system(workload, gpu, topo, dtype, parallel), topo)
        from_name += f" ({_describe(parallel)})"
    state = (_with_system(workload, gpu, topo, dtype, parallel), topo)
    run = _simulate(*state, factors)
    figures = _figures(run)
    base_time, base_break = run.result.makespan_s, figures[0]
    prev, steps = base_time, []
    for factor in order:
        if factor == "compute":
            gpu = dataclasses.replace(gpu, **{f: getattr(to_gpu, f) for f in _COMPUTE_FIELDS})
            detail = f"{workload.dtype.value} peak {gpu.peak(dtype) / 1e12:,.0f} TFLOP/s"
        elif factor == "format":
            if to_dtype not in dict(gpu.peak_flops_per_s):
                raise ConfigError("<--order>", "--order", f"'compute' before 'format': {gpu.name}'s tensor cores "
                                  f"have no {to_dtype.value}", ",".join(order))
            dtype = to_dtype
            detail = f"{dtype.value} at {gpu.peak(dtype) / 1e12:,.0f} TFLOP/s"
        elif factor == "hbm-bandwidth":
            gpu = dataclasses.replace(gpu, hbm_bandwidth_bytes_per_s=to_gpu.hbm_bandwidth_bytes_per_s,
                                      memory_efficiency=to_gpu.memory_efficiency,
                                      gemm_memory_efficiency=to_gpu.gemm_memory_efficiency,
                                      memory_access_efficiency=to_gpu.memory_access_efficiency)
            detail = f"{gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f} TB/s"
        elif factor == "hbm-capacity":
            gpu = dataclasses.replace(gpu, hbm_capacity_bytes=to_gpu.hbm_capacity_bytes)
            detail = f"{gpu.hbm_capacity_bytes / 2**30:.0f} GiB"
        elif factor == "nvlink":
            gpu = dataclasses.replace(gpu, nvlink_bandwidth_bytes_per_s=to_gpu.nvlink_bandwidth_bytes_per_s)
            topo = dataclasses.replace(topo, scale_up=to_topology.scale_up, gpus_per_node=to_topology.gpus_per_node)
            detail = (f"{topo.scale_up.link.bandwidth_bytes_per_s / 1e9:.0f} GB/s per direction, "
                      f"{topo.scale_up.domain_size} GPUs per domain")
        else:  # network
            topo = dataclasses.replace(topo, scale_out=to_topology.scale_out)
            detail = (f"{topo.scale_out.nics_per_node} x {topo.scale_out.nic.bandwidth_bytes_per_s * 8 / 1e9:.0f} Gb/s "
                      f"NICs per node")
        if len(steps) == len(FACTORS) - 1:  # the last step lands exactly on the target system
            gpu, topo = to_gpu, to_topology
        if reoptimize is not None:
            parallel = reoptimize(_with_system(workload, gpu, topo, dtype, parallel), topo)
            detail += f"; best layout {_describe(parallel)}"
        now = (_with_system(workload, gpu, topo, dtype, parallel), topo)
        if now != state:  # a factor that leaves the workload and system as they were (a format the
            state, run = now, _simulate(*now, factors)  # workload already has) is not simulated again
            figures = _figures(run)
        t = run.result.makespan_s
        steps.append(Step(factor, t, prev / t, detail, *figures))
        prev = t
    return Generations(workload.name, from_name, f"{to_gpu.name} on {to_topology.name}", base_time, base_break,
                       tuple(steps))


def _describe(p: ParallelSpec) -> str:
    vp = f" v={p.virtual_pipeline_stages}" if p.virtual_pipeline_stages > 1 else ""
    return (f"TP {p.tp} PP {p.pp}{vp} DP {p.dp}" + (f" CP {p.cp}" if p.cp > 1 else "") +
            f", mbs {p.micro_batch_size}, recompute {p.recompute.value}")


def _scale_curve_free(link: LinkSpec, k: float) -> LinkSpec:
    return dataclasses.replace(link, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s * k, latency_s=link.latency_s / k)


def scale_system(gpu: GPUSpec, topo: TopologySpec, k: float) -> tuple[GPUSpec, TopologySpec]:
    """Every rate times ``k`` and every latency over ``k``: FLOP/s, HBM and link bandwidths,
    kernel launch gap, link, switch and collective latencies. Efficiency curves are functions
    of work sizes and stay as they are, so an iteration takes exactly ``1/k`` the time."""
    g = dataclasses.replace(
        gpu, peak_flops_per_s=tuple((d, v * k) for d, v in gpu.peak_flops_per_s),
        hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s * k,
        nvlink_bandwidth_bytes_per_s=gpu.nvlink_bandwidth_bytes_per_s * k, kernel_launch_s=gpu.kernel_launch_s / k)
    up, out = topo.scale_up, topo.scale_out
    up = dataclasses.replace(up, link=_scale_curve_free(up.link, k), collective_latency_s=up.collective_latency_s / k)
    changes = dict(nic=_scale_curve_free(out.nic, k), switch_latency_s=out.switch_latency_s / k)
    if out.pcie is not None:
        changes["pcie"] = _scale_curve_free(out.pcie, k)
    for sub in ("torus", "dragonfly"):
        spec = getattr(out, sub, None)
        if spec is not None:
            changes[sub] = dataclasses.replace(spec, **{
                f.name: _scale_curve_free(getattr(spec, f.name), k) for f in dataclasses.fields(spec)
                if isinstance(getattr(spec, f.name), LinkSpec)})
    return g, dataclasses.replace(topo, scale_up=up, scale_out=dataclasses.replace(out, **changes))


def parse_order(text: str | None) -> tuple[str, ...]:
    """``"compute,format,..."`` -> a tuple (default :data:`FACTORS` when not given); an empty
    text or a list without a name is refused."""
    if text is None:
        return FACTORS
    return comma_items(text, "--order", f"a comma-separated permutation of {','.join(FACTORS)}")


def parse_dtype(text: str | None) -> Dtype | None:
    return None if text is None else parse_enum(Dtype, text, "<--dtype>", "--dtype", SIMULATED_DTYPES,
                                                NOT_SIMULATED_DTYPES)



SCALABLE = ("logic", "memory", "network")
"""What ``nodes`` can scale: logic (tensor-core and vector throughput), memory (HBM bandwidth
and capacity), network (NVLink and NIC bandwidth)."""


@dataclass(frozen=True)
class NodeRow:
    """One technology node's hypothetical GPU and what one iteration costs on it."""

    node_nm: float
    factors: dict
    iteration_time_s: float
    breakdown_s: dict
    fits: bool
    bottleneck: str
    """The largest part of :attr:`breakdown_s`."""

    def to_dict(self) -> dict:
        return {"node_nm": self.node_nm, "factors": self.factors, "iteration_time_s": self.iteration_time_s,
                "breakdown_s": self.breakdown_s, "fits": self.fits, "bottleneck": self.bottleneck}


NODE_FACTORS = ("logic", "hbm_bandwidth", "hbm_capacity", "link_bandwidth", "nic_bandwidth")
"""The factors of a technology-node row that scale the base system (:func:`node_system`)."""

NODE_FACTOR_RANGE = (0.01, 100.0)
"""The factors a technology-node row may give, relative to the base node, both ends included.
The shipped table (``topologies/technology-nodes.yaml``, relative to the A100's 7 nm) spans 0.37
(12 nm SRAM density) to 25.6 (the HBM bandwidth projected for 1 nm). A hundredth of an A100
(312 dense BF16 TFLOP/s, 2,039 GB/s of HBM, 300 GB/s of NVLink per direction: NVIDIA's A100
datasheet, :mod:`sim.hardware`) is below even the 2016 P100 (21 FP16 TFLOP/s, 732 GB/s of HBM2,
80 GB/s of NVLink per direction, NVIDIA's Tesla P100 datasheet: 0.07x, 0.36x, 0.27x), and a
hundred times one is beyond every announced part (B200: 2,250 TFLOP/s, 7.7 TB/s, 900 GB/s, NVIDIA's
Blackwell datasheet, HGX B200: 7x, 4x and 3x an A100). Outside the range a factor only makes numbers no
system has: at 1e-300 the compute times reach 1e294 s and the memory-bound share of the
breakdown, a difference of two of them, comes out negative."""

NODE_NM_RANGE = (0.1, 10_000.0)
"""The process nodes (nm) a row may name, both ends included: from the 10 um of the first
microprocessors (Intel 4004, 1971) to a fifth of imec's A2 (0.2 nm), the end of its published
logic roadmap (imec ITF 2022)."""

_NODES_KEYS = ("base_gpu", "base_topology", "base_node_nm", "nodes", "sources")
_NODE_ROW_KEYS = ("node_nm", *NODE_FACTORS, "sram")


def load_nodes_table(path: str | None = None) -> dict:
    """Read the technology-scaling table (default ``topologies/technology-nodes.yaml``).

    The table has these keys, and no others:

    ``base_gpu``
        The GPU the factors scale, a name of the catalogue (:func:`sim.hardware.get_gpu`).
    ``base_topology``
        The topology they scale, a file or a preset of ``topologies/``.
    ``base_node_nm``
        The base GPU's node: one of the rows, whose factors are all 1.
    ``nodes``
        A list of rows ``{node_nm, logic, hbm_bandwidth, hbm_capacity, link_bandwidth,
        nic_bandwidth, sram}``: the node in nm (within :data:`NODE_NM_RANGE`, each node once)
        and the factors relative to the base node (within :data:`NODE_FACTOR_RANGE`, 0.01 to
        100), all required but ``sram`` (informational: llmsim's GPU model has no SRAM term).
    ``sources``
        Text: where the figures come from.

    Parameters
    ----------
    path : str, optional
        A YAML file or a preset name of ``topologies/``.

    Returns
    -------
    dict
        The table, its numbers as floats and ``base_gpu`` as the catalogue's canonical name.

    Raises
    ------
    ConfigError
        For anything else, one line naming the file and the field (an error inside the base
        topology's own file names that file).
    """
    from sim.config import load_topology
    from sim.config.fields import Fields, read_yaml
    from sim.config.presets import resolve_preset

    file = resolve_preset(path or "technology-nodes", "topologies")
    where = str(file)
    top = Fields(read_yaml(file), where, "", _NODES_KEYS)
    sources = top.text("sources")
    gpu_name = top.text("base_gpu", required=True)
    base_gpu = top.catalogue_gpu("base_gpu", gpu_name)
    topo_name = top.text("base_topology", required=True)
    try:
        load_topology(topo_name)
    except ConfigError as exc:
        if exc.path != topo_name or exc.field != "<file>":
            raise  # an error inside the topology's own file names that file
        raise top.error("base_topology", exc.expected, topo_name) from None
    raw_rows = top.raw.get("nodes")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise top.error("nodes", "a list of {node_nm, logic, hbm_bandwidth, ...} rows", raw_rows)
    lo_nm, hi_nm = NODE_NM_RANGE
    lo, hi = NODE_FACTOR_RANGE
    nm_what = f"a process node in nm, from {lo_nm:g} to {hi_nm:,g}"
    factor_what = f"a factor relative to the base node, from {lo:g} to {hi:g}"
    rows: list[dict] = []
    seen: dict[float, int] = {}
    for i, raw_row in enumerate(raw_rows):
        f = Fields(raw_row, where, f"nodes[{i}]", _NODE_ROW_KEYS)
        nm = f.quantity("node_nm", nm_what, low=lo_nm, high=hi_nm, required=True)
        if nm in seen:
            raise f.error("node_nm", f"each node once (nodes[{seen[nm]}] is {nm:g} nm too)", nm)
        seen[nm] = i
        row = {"node_nm": nm, **{k: f.quantity(k, factor_what, low=lo, high=hi, required=True) for k in NODE_FACTORS}}
        sram = f.quantity("sram", factor_what, low=lo, high=hi)
        if sram is not None:
            row["sram"] = sram
        rows.append(row)
    base_nm = top.quantity("base_node_nm", nm_what, low=lo_nm, high=hi_nm, required=True)
    if base_nm not in seen:
        raise top.error("base_node_nm", f"one of the rows' nodes ({', '.join(f'{n:g}' for n in seen)})", base_nm)
    base_row = rows[seen[base_nm]]
    for k in (*NODE_FACTORS, "sram"):
        if base_row.get(k, 1.0) != 1.0:
            raise ConfigError(where, f"nodes[{seen[base_nm]}].{k}", f"1 at the base node ({base_nm:g} nm): the "
                              "factors are relative to it", base_row[k])
    table = {"base_gpu": base_gpu, "base_topology": topo_name, "base_node_nm": base_nm, "nodes": rows}
    if sources is not None:
        table["sources"] = sources
    return table


def node_system(gpu: GPUSpec, topo: TopologySpec, row: dict, scale: Sequence[str] = SCALABLE
                ) -> tuple[GPUSpec, TopologySpec]:
    """The hypothetical GPU and topology of one node row: the base's figures times the row's
    factors, for the parts in ``scale`` (the rest stay at the base node's)."""
    f = {k: (row[k] if part in scale else 1.0) for part, ks in (
        ("logic", ("logic",)), ("memory", ("hbm_bandwidth", "hbm_capacity")),
        ("network", ("link_bandwidth", "nic_bandwidth"))) for k in ks}
    g = dataclasses.replace(
        gpu, name=f"{gpu.name}@{row['node_nm']:g}nm",
        peak_flops_per_s=tuple((d, v * f["logic"]) for d, v in gpu.peak_flops_per_s),
        hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s * f["hbm_bandwidth"],
        hbm_capacity_bytes=gpu.hbm_capacity_bytes * f["hbm_capacity"],
        nvlink_bandwidth_bytes_per_s=gpu.nvlink_bandwidth_bytes_per_s * f["link_bandwidth"])
    up, out = topo.scale_up, topo.scale_out
    up = dataclasses.replace(up, link=dataclasses.replace(
        up.link, bandwidth_bytes_per_s=up.link.bandwidth_bytes_per_s * f["link_bandwidth"]))
    out = dataclasses.replace(out, nic=dataclasses.replace(
        out.nic, bandwidth_bytes_per_s=out.nic.bandwidth_bytes_per_s * f["nic_bandwidth"]))
    return g, dataclasses.replace(topo, scale_up=up, scale_out=out)


def nodes(workload: WorkloadSpec, table: dict, base_topology: TopologySpec, base_gpu: GPUSpec,
          node_list: Sequence[float] | None = None, scale: Sequence[str] = SCALABLE) -> list[NodeRow]:
    """Run ``workload`` on each node's hypothetical system (:func:`node_system`) and return the
    time and its breakdown per node, in the table's order (or ``node_list``'s)."""
    bad = [s for s in scale if s not in SCALABLE]
    if bad or not scale:
        raise ConfigError("<--scale>", "--scale", f"a comma-separated subset of {','.join(SCALABLE)}", ",".join(scale))
    rows = {float(r["node_nm"]): r for r in table["nodes"]}
    wanted = [float(n) for n in node_list] if node_list else list(rows)
    missing = [n for n in wanted if n not in rows]
    if missing:
        raise ConfigError("<--nodes>", "--nodes", f"nodes of the table ({', '.join(f'{n:g}' for n in rows)})",
                          ",".join(f"{n:g}" for n in missing))
    out = []
    for n in wanted:
        row = rows[n]
        gpu, topo = node_system(base_gpu, base_topology, row, scale)
        run = _simulate(_with_system(workload, gpu, topo, workload.dtype, workload.parallel), topo)
        b, fits = _figures(run)
        factors = {k: row[k] for k in NODE_FACTORS}
        out.append(NodeRow(n, factors, run.result.makespan_s, b, fits, max(b, key=b.get)))
    return out


def format_generations(g: Generations) -> str:
    """The table ``llmsim whatif generations`` prints."""
    lines = [f"llmsim whatif generations: {g.workload}, {g.from_system} -> {g.to_system}", "",
             f"  {'factor':15s} {'iteration s':>12s} {'speed-up':>9s} {'cumulative':>11s}  "
             f"{'compute s':>9s} {'memory s':>9s} {'comm s':>8s} {'bubble s':>9s}  change"]
    b = g.base_breakdown_s
    lines.append(f"  {'(start)':15s} {g.base_time_s:12.4f} {'':9s} {'x1.00':>11s}  {b['tensor_compute_s']:9.3f} "
                 f"{b['memory_bound_s']:9.3f} {b['exposed_comm_s']:8.3f} {b['bubble_idle_s']:9.3f}  {g.from_system}")
    cum = 1.0
    for s in g.steps:
        cum *= s.speedup
        b = s.breakdown_s
        lines.append(f"  {s.factor:15s} {s.iteration_time_s:12.4f} {f'x{s.speedup:.3f}':>9s} {f'x{cum:.2f}':>11s}  "
                     f"{b['tensor_compute_s']:9.3f} {b['memory_bound_s']:9.3f} {b['exposed_comm_s']:8.3f} "
                     f"{b['bubble_idle_s']:9.3f}  {s.detail}{'' if s.fits else ' (DOES NOT FIT)'}")
    lines += ["", f"  end to end: x{g.speedup:.2f} ({g.base_time_s:.4f} s -> {g.final_time_s:.4f} s); "
              "the factors multiply to it"]
    return "\n".join(lines)


def format_nodes(rows: Sequence[NodeRow], title: str) -> str:
    """The table ``llmsim whatif nodes`` prints."""
    lines = [f"llmsim whatif nodes: {title}", "",
             f"  {'node':>6s} {'logic':>6s} {'HBM bw':>7s} {'HBM cap':>8s} {'NVLink':>7s} {'NIC':>5s}  "
             f"{'iteration s':>12s} {'compute s':>9s} {'memory s':>9s} {'comm s':>8s} {'bubble s':>9s}  bottleneck"]
    for r in rows:
        f, b = r.factors, r.breakdown_s
        lines.append(f"  {r.node_nm:4g} nm {f['logic']:6.2f} {f['hbm_bandwidth']:7.2f} {f['hbm_capacity']:8.2f} "
                     f"{f['link_bandwidth']:7.2f} {f['nic_bandwidth']:5.1f}  {r.iteration_time_s:12.4f} "
                     f"{b['tensor_compute_s']:9.3f} {b['memory_bound_s']:9.3f} {b['exposed_comm_s']:8.3f} "
                     f"{b['bubble_idle_s']:9.3f}  {r.bottleneck.replace('_s', '')}"
                     f"{'' if r.fits else ' (DOES NOT FIT)'}")
    lines += ["", "  factors are relative to the base node; only the parts asked for with --scale are scaled"]
    return "\n".join(lines)


REOPTIMIZE_SPACE = {"pp": "auto", "virtual_pipeline_stages": "auto", "schedule": "auto",
                    "micro_batch_size": "auto", "recompute": "auto"}
"""What the ``hbm-capacity`` step searches again with ``--reoptimize``: the settings memory
decides (pipeline depth and interleaving, micro-batch, recomputation); TP, CP and the sharding
stay the workload's, so the search stays a few dozen configurations."""


def sweep_reoptimizer(workers: int | None = None, factors: CalibrationFactors | None = None) -> Reoptimizer:
    """A re-optimizer that runs ``llmsim sweep``'s search over :data:`REOPTIMIZE_SPACE` (fast
    fidelity, the best re-run op by op) and returns the fastest configuration's settings.

    The search keeps what finished when Ctrl-C stops it (:func:`sim.studies.sweep.core.sweep`); a study
    cannot go on from a state whose best layout is unknown, so the re-optimizer raises
    :class:`KeyboardInterrupt` again and the study stops with it (``llmsim: interrupted``,
    status 130)."""
    from sim.config.space import space_from_mapping
    from sim.studies.sweep.core import sweep

    def best(w: WorkloadSpec, topo: TopologySpec) -> ParallelSpec:
        result = sweep(w, topo, space_from_mapping(REOPTIMIZE_SPACE, "<whatif --reoptimize>"), top=1,
                       workers=workers, factors=factors)
        if result.interrupted:
            raise KeyboardInterrupt
        if not result.top:
            return w.parallel
        return result.top[0].candidate.workload.parallel

    return best
