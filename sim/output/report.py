"""The report of one simulated iteration: the numbers, their JSON form and the printed table.

Throughput figures follow the field's conventions: model FLOPs as Megatron-LM counts them
(Narayanan et al. 2021, arXiv 2104.04473), hardware FLOPs adding recomputation (Korthikanti et
al. 2022, Appendix A), MFU and HFU against the GPU's dense peak for the workload's dtype
(PaLM, Chowdhery et al. 2022, Appendix B).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.output.analysis import breakdown
from sim.runner import Run
from sim.types import CommClass, LinkKind, MoeDispatcher, OpKind, recompute_module_names
from sim.units import TFLOPS, GiB, byte_count, round_sig
from sim.version import __version__
from sim.workload.spec import DEFAULT_RECOMPUTE_MODULES

__all__ = ["Report", "TimeInterval", "make_report", "format_report", "links_json", "LINKS_SHOWN"]

LINKS_SHOWN = 5
"""How many of the busiest links the report lists."""


@dataclass(frozen=True)
class TimeInterval:
    """The interval around a predicted iteration time, from the validation residuals of
    comparable runs, or a calibration's residuals after its fit (:mod:`sim.studies.intervals`)."""

    low_s: float
    high_s: float
    scope: str
    """The rows it comes from: ``nemo-24 on Hopper``, ``Hopper`` or ``all``; a calibration file's runs."""
    rows: int
    coverage: str = "80%"
    """The interval's nominal coverage."""
    residuals: str = "validation residuals"
    """What kind of residuals its rows are."""
    note: str = ""
    """Why it is not the interval asked for (a calibration with too few runs), or empty."""


@dataclass(frozen=True)
class StageReport:
    stage: int
    compute_s: float
    exposed_comm_s: float
    idle_s: float
    peak_memory_bytes: float
    capacity_bytes: float

    @property
    def fits(self) -> bool:
        return self.peak_memory_bytes <= self.capacity_bytes


@dataclass(frozen=True)
class Report:
    """Everything ``llmsim run`` prints, in SI units."""

    workload: str
    topology: str
    gpu: str
    num_gpus: int
    parallel: dict
    iteration_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    hfu_tflops_per_gpu: float
    mfu: float
    hfu: float
    bubble_fraction: float
    exposed_comm_s: dict
    compute_s: dict
    stages: tuple[StageReport, ...]
    events: int
    tasks: int
    simulated_wall_s: float
    """Wall-clock seconds the simulation took, for benchmarks in the same process; never
    printed nor written, so that the same inputs give the same report byte for byte."""
    simulated_ranks: int
    reference: dict | None
    notes: tuple[str, ...]
    busiest_links: tuple[dict, ...] = ()
    """The most used links: ``link``, ``kind``, ``busy_bytes`` (the whole job's traffic on it,
    at the efficiency its messages reach), ``utilization`` (busy time over the iteration)."""
    granularity: str = "op"
    """What one simulated task stood for: ``"op"`` or ``"layer"`` (:func:`sim.runner.simulate`)."""
    sm_clock_hz: float | None = None
    """The SM clock the compute-bound kernels ran at under the GPU's power limit
    (:mod:`sim.power`; None: the GPU has no power model, every kernel at its measured rate)."""
    interval: TimeInterval | None = None
    """The iteration time's interval (``llmsim run`` sets it; None: not given)."""

    def to_dict(self) -> dict:
        """The JSON form: units in the key names, the same numbers as the table."""
        out = self._fields()
        if self.interval is not None:
            at = list(out).index("iteration_time_s") + 1
            items = list(out.items())
            items[at:at] = [("iteration_time_s_low", self.interval.low_s),
                            ("iteration_time_s_high", self.interval.high_s),
                            ("iteration_time_interval", {"coverage": self.interval.coverage,
                                                         "from": self.interval.scope, "rows": self.interval.rows,
                                                         **self._interval_extra()})]
            out = dict(items)
        return out

    def _interval_extra(self) -> dict:
        """The interval's residuals and note, where they are not the validation residuals'."""
        i = self.interval
        assert i is not None
        out = {} if i.residuals == TimeInterval.residuals else {"residuals": i.residuals}
        return out | ({"note": i.note} if i.note else {})

    def _fields(self) -> dict:
        return {
            "llmsim_version": __version__,
            "workload": self.workload,
            "topology": self.topology,
            "gpu": self.gpu,
            "num_gpus": self.num_gpus,
            "parallel": self.parallel,
            "iteration_time_s": self.iteration_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "hfu_tflops_per_gpu": self.hfu_tflops_per_gpu,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "bubble_fraction": self.bubble_fraction,
            "exposed_comm_s": self.exposed_comm_s,
            "compute_s": self.compute_s,
            "peak_memory_bytes": [byte_count(s.peak_memory_bytes) for s in self.stages],
            "stages": [{"stage": s.stage, "compute_s": s.compute_s, "exposed_comm_s": s.exposed_comm_s,
                        "idle_s": s.idle_s, "peak_memory_bytes": byte_count(s.peak_memory_bytes),
                        "capacity_bytes": byte_count(s.capacity_bytes), "fits": s.fits} for s in self.stages],
            "fits_in_memory": all(s.fits for s in self.stages),
            "reference": self.reference,
            "events": self.events,
            "tasks": self.tasks,
            "simulated_ranks": self.simulated_ranks,
            "granularity": self.granularity,
            "sm_clock_hz": self.sm_clock_hz,
            "busiest_links": links_json(self.busiest_links),
            "notes": list(self.notes),
        }


def links_json(links) -> list[dict]:
    """:attr:`Report.busiest_links` as JSON: the bytes each carried as an integer."""
    return [{**lk, "busy_bytes": byte_count(lk["busy_bytes"])} for lk in links]


def make_report(run: Run) -> Report:
    """Summarise a :class:`~sim.runner.Run`."""
    w, res, prog = run.workload, run.result, run.program
    p = w.parallel
    T = res.makespan_s
    n = w.system.num_gpus
    peak = w.system.gpu.peak(w.dtype)
    flops = prog.flops_per_iteration
    hw = prog.hardware_flops_per_iteration
    rows = breakdown(res)
    k = len(rows)
    exposed = {c.value: sum(r.exposed_comm_s[c] for r in rows) / k for c in CommClass}
    compute = {}
    for kind in OpKind:
        if kind.is_comm:
            continue
        v = sum(r.compute_by_kind_s.get(kind, 0.0) for r in rows) / k
        if v:
            compute[kind.value] = v
    compute["total"] = sum(r.compute_s for r in rows) / k
    bubble = sum(r.idle_s for r in rows) / k / T if T else 0.0
    peak_mem: dict[int, float] = {}
    stage_of = {}
    for i in res.ranks:
        stage_of.setdefault(i.rank, i.pp)  # the first RankInfo of a rank, as a search would find
    for c in res.counters:
        if c.name == "memory":
            stage = stage_of[c.rank]
            peak_mem[stage] = max(peak_mem.get(stage, 0.0), c.value)
    cap = w.system.gpu.hbm_capacity_bytes
    stages = []
    for s in range(p.pp):
        rs = [r for r in rows if r.stage == s]
        stages.append(StageReport(
            s, sum(r.compute_s for r in rs) / len(rs), sum(sum(r.exposed_comm_s.values()) for r in rs) / len(rs),
            sum(r.idle_s for r in rs) / len(rs), peak_mem.get(s, 0.0), cap))
    busy = res.metadata.get("link_busy_bytes", [])
    fab = run.fabric
    used = [(b / (fab.capacity_bytes_per_s[i] * T), i) for i, b in enumerate(busy) if b > 0 and T > 0]
    links = tuple({"link": fab.link_names[i], "kind": LinkKind(fab.link_kinds[i]).value, "busy_bytes": busy[i],
                   "utilization": u}
                  for u, i in sorted(used, key=lambda x: (-round_sig(x[0]), x[1]))[:LINKS_SHOWN])
    ref = None
    if w.reference is not None and w.reference.iteration_time_s:
        m = w.reference.iteration_time_s
        ref = {"source": w.reference.source, "iteration_time_s": m, "error_pct": 100.0 * (T - m) / m}
    elif w.reference is not None and w.reference.tflops_per_gpu:
        m = w.reference.tflops_per_gpu
        pred = (hw if w.reference.tflops_includes_recompute else flops) / T / n / TFLOPS
        ref = {"source": w.reference.source, "tflops_per_gpu": m, "error_pct": 100.0 * (pred - m) / m}
    parallel = {"tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "ep": p.ep, "etp": p.expert_tp, "zero_stage": p.zero,
                "virtual_pipeline_stages": p.virtual_pipeline_stages,
                "schedule": p.schedule.value, "sequence_parallel": p.sequence_parallel,
                "micro_batch_size": p.micro_batch_size, "global_batch_size": p.global_batch_size,
                "num_microbatches": p.num_microbatches, "recompute": p.recompute.value,
                "distributed_optimizer": p.distributed_optimizer, "dtype": w.dtype.value}
    if p.cp > 1:  # only with context parallelism, so other reports stay as they were
        parallel["cp_comm_type"] = p.cp_comm_type.value
        if p.hierarchical_context_parallel_sizes is not None:
            parallel["hierarchical_context_parallel_sizes"] = list(p.hierarchical_context_parallel_sizes)
    if p.ep > 1 and p.moe_dispatcher is not MoeDispatcher.ALLTOALL:  # likewise only off Megatron's all-to-all
        parallel["moe_dispatcher"] = p.moe_dispatcher.value
    if p.ep_overlap:  # only where on, so that every other report keeps its keys
        parallel["ep_overlap"] = True
        if p.delay_wgrad:
            parallel["delay_wgrad"] = True
    if run.fabric.placement is not None:  # only off the default, so default reports stay as they were
        parallel["placement"] = p.placement if isinstance(p.placement, str) else list(p.placement)
    if p.hybrid_shard:  # likewise only with hybrid sharding
        parallel["dp_shard"], parallel["dp_replicate"] = p.dp_shard_degree, p.dp_replicate
    if p.recompute_num_layers is not None:  # likewise only under block recomputation
        parallel["recompute_num_layers"] = p.recompute_num_layers
    if p.pipeline_layout is not None:  # likewise only with a layout given
        parallel["pipeline_layout"] = list(p.pipeline_layout)
    if p.recompute_modules != DEFAULT_RECOMPUTE_MODULES:  # likewise only off Megatron-Core's default
        parallel["recompute_modules"] = recompute_module_names(p.recompute_modules)
    if w.model.mtp_num_layers:  # likewise only with multi-token prediction (a model setting, shown here)
        parallel["mtp_num_layers"] = w.model.mtp_num_layers
    return Report(
        workload=w.name, topology=run.topology.name, gpu=w.system.gpu.name, num_gpus=n, parallel=parallel,
        iteration_time_s=T, tokens_per_s=w.tokens_per_iteration / T,
        tflops_per_gpu=flops / T / n / TFLOPS, hfu_tflops_per_gpu=hw / T / n / TFLOPS,
        mfu=flops / T / n / peak, hfu=hw / T / n / peak, bubble_fraction=bubble,
        exposed_comm_s=exposed, compute_s=compute, stages=tuple(stages), events=res.events,
        tasks=len(prog.tasks), simulated_wall_s=run.wall_s, simulated_ranks=len(res.ranks),
        reference=ref, notes=tuple(run.notes), busiest_links=links, granularity=run.granularity,
        sm_clock_hz=res.metadata.get("sm_clock_hz"))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _cp_comm_label(p: dict) -> str:
    """How context parallelism communicates, e.g. ``p2p`` or ``a2a+p2p 2x4``."""
    levels = p.get("hierarchical_context_parallel_sizes")
    kind = p.get("cp_comm_type", "p2p")
    return f"{kind} {levels[0]}x{levels[1]}" if kind == "a2a+p2p" and levels else kind


def format_report(r: Report) -> str:
    """The human-readable table of a report."""
    p = r.parallel
    sched = p["schedule"] + (f" (v={p['virtual_pipeline_stages']})" if p["virtual_pipeline_stages"] > 1 else "")
    cp = f"  CP {p['cp']} ({_cp_comm_label(p)})" if p["cp"] > 1 else ""
    dispatcher = f" ({p['moe_dispatcher']}{', overlapped' if p.get('ep_overlap') else ''})" \
        if "moe_dispatcher" in p else " (overlapped)" if p.get("ep_overlap") else ""
    cp += f"  EP {p['ep']}{dispatcher}" if p.get("ep", 1) > 1 else ""
    cp += f"  ETP {p['etp']}" if p.get("etp", p["tp"]) != p["tp"] else ""
    placed = p.get("placement")
    placed = "" if placed is None else f" (placed {placed if isinstance(placed, str) else 'by GPU list'})"
    if "dp_shard" in p:
        placed = f" (shard {p['dp_shard']} x {p['dp_replicate']} replicas)" + placed
    zero = f"ZeRO-{p['zero_stage']}" if p["zero_stage"] >= 2 else None
    block = p.get("recompute_num_layers")
    flags = [f"recompute {p['recompute']}" + (f" of {block} layer{'s' if block > 1 else ''} a chunk" if block else "")
             + (f" ({', '.join(p['recompute_modules']) or 'no module'})" if "recompute_modules" in p else "")]
    flags += [zero] if zero else []
    if p["sequence_parallel"]:
        flags.append("sequence parallel")
    if p["distributed_optimizer"]:
        flags.append("distributed optimizer")
    if p.get("mtp_num_layers"):
        flags.append(f"MTP {p['mtp_num_layers']}")
    lines = [
        f"llmsim {__version__}: {r.workload} on {r.num_gpus} x {r.gpu} ({r.topology})",
        f"  TP {p['tp']}  PP {p['pp']}{cp}  DP {p['dp']}{placed}  {sched}  {p['num_microbatches']} micro-batches of "
        f"{p['micro_batch_size']}  {p['dtype']}  {', '.join(flags)}",
        "",
    ]
    lines.append(f"  iteration time        {r.iteration_time_s:.3f} s")
    if r.interval is not None:
        i = r.interval
        lines.append(f"  {i.coverage} interval          {i.low_s:.3f} - {i.high_s:.3f} s   ({i.residuals} of "
                     f"{i.scope}, {i.rows} rows{'; ' + i.note if i.note else ''}: sim/studies/intervals.py)")
    if r.reference and "iteration_time_s" in r.reference:
        lines.append(f"  measured              {r.reference['iteration_time_s']:.3f} s   prediction "
                     f"{r.reference['error_pct']:+.1f}%   ({r.reference['source']})")
    lines += [
        f"  throughput            {r.tokens_per_s:,.0f} tokens/s  ({r.tokens_per_s / r.num_gpus:,.1f} per GPU)",
        f"  model TFLOP/s per GPU {r.tflops_per_gpu:.1f}   MFU {_pct(r.mfu)}",
        f"  with recomputation    {r.hfu_tflops_per_gpu:.1f}   HFU {_pct(r.hfu)}",
    ]
    if r.sm_clock_hz is not None:
        lines.append(f"  SM clock              {r.sm_clock_hz / 1e6:.0f} MHz under the power limit (sim/power.py)")
    if r.reference and "tflops_per_gpu" in r.reference:
        lines.append(f"  measured TFLOP/s      {r.reference['tflops_per_gpu']:.1f}   ({r.reference['source']}: "
                     f"{r.reference['error_pct']:+.1f}%)")
    T = r.iteration_time_s
    comp = r.compute_s
    exposed_total = sum(r.exposed_comm_s.values())
    lines += ["", "  where the time goes (per GPU, mean over pipeline stages)",
              f"    compute               {comp['total']:8.3f} s  {_pct(comp['total'] / T)}"]
    for kind, v in sorted(((k, v) for k, v in comp.items() if k != "total"), key=lambda kv: -kv[1]):
        lines.append(f"      {kind:<19} {v:8.3f} s")
    lines.append(f"    exposed communication {exposed_total:8.3f} s  {_pct(exposed_total / T)}")
    for c, v in r.exposed_comm_s.items():
        if v > 0:
            lines.append(f"      {c:<19} {v:8.3f} s")
    lines.append(f"    pipeline bubble, idle {r.bubble_fraction * T:8.3f} s  {_pct(r.bubble_fraction)}")
    lines += ["", "  stage  compute s  exposed comm s  idle s  peak memory GiB  of GiB  fits"]
    for s in r.stages:
        lines.append(f"  {s.stage:5d}  {s.compute_s:9.3f}  {s.exposed_comm_s:14.3f}  {s.idle_s:6.3f}  "
                     f"{s.peak_memory_bytes / GiB:15.1f}  {s.capacity_bytes / GiB:6.1f}  "
                     f"{'yes' if s.fits else 'NO'}")
    if not all(s.fits for s in r.stages):
        worst = max(r.stages, key=lambda s: s.peak_memory_bytes)
        lines.append(f"  DOES NOT FIT: stage {worst.stage} needs {worst.peak_memory_bytes / GiB:.1f} GiB of "
                     f"{worst.capacity_bytes / GiB:.1f} GiB")
    if r.busiest_links:
        lines += ["", "  busiest links (share of the iteration each is busy, whole job)"]
        for lk in r.busiest_links:
            lines.append(f"    {lk['link']:<28} {lk['kind']:<8} {_pct(lk['utilization']):>6}  "
                         f"{lk['busy_bytes'] / 1e9:10.2f} GB")
    if r.notes:
        lines += ["", "  defaults and notes:"] + [f"    {n}" for n in r.notes]
    at = f" at {r.granularity} granularity" if r.granularity != "op" else ""
    lines += ["", f"  simulated {r.simulated_ranks} ranks, {r.tasks:,} tasks{at}, {r.events:,} engine events"]
    return "\n".join(lines)
