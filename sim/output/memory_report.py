"""The report of ``llmsim memory``: per pipeline stage and recomputation method, what one GPU
holds at its peak, its capacity and the headroom, as a table and as JSON."""

from __future__ import annotations

from sim.memory import StageMemory, memory_table
from sim.types import RecomputeKind, recompute_module_names
from sim.units import GiB, byte_count
from sim.version import __version__
from sim.workload.spec import DEFAULT_RECOMPUTE_MODULES, WorkloadSpec

__all__ = ["memory_report", "format_memory", "memory_json"]


def memory_report(w: WorkloadSpec, methods: list[RecomputeKind]) -> dict[RecomputeKind, list[StageMemory]]:
    """Every stage under every method in ``methods`` (see :func:`sim.memory.memory_table`)."""
    return memory_table(w, methods)


def memory_json(w: WorkloadSpec, table: dict[RecomputeKind, list[StageMemory]], notes: list[str]) -> dict:
    """``{"methods": {method: {"stages": [...], "fits": ...}}, ...}``, bytes in ``_bytes`` keys."""
    out = {
        "llmsim_version": __version__,
        "workload": w.name,
        "gpu": w.system.gpu.name,
        "num_gpus": w.system.num_gpus,
        "workload_recompute": w.parallel.recompute.value,
        "workload_recompute_num_layers": w.parallel.recompute_num_layers,
        "methods": {rc.value: {"stages": [s.to_dict() for s in stages],
                               "peak_bytes": byte_count(max(s.total_bytes for s in stages)),
                               "fits": all(s.fits for s in stages)}
                    for rc, stages in table.items()},
        "notes": list(notes),
    }
    if w.parallel.recompute_modules != DEFAULT_RECOMPUTE_MODULES:  # only off the default: other reports keep their keys
        out["workload_recompute_modules"] = recompute_module_names(w.parallel.recompute_modules)
    if w.model.mtp_num_layers:  # likewise only with multi-token prediction
        out["mtp_num_layers"] = w.model.mtp_num_layers
    return out


def format_memory(w: WorkloadSpec, table: dict[RecomputeKind, list[StageMemory]], notes: list[str]) -> str:
    """The printed table, in GiB."""
    p = w.parallel
    sched = p.schedule.value + (f" (v={p.virtual_pipeline_stages})" if p.virtual_pipeline_stages > 1 else "")
    zero = f"  ZeRO-{p.zero}" if p.zero else ""
    if p.hybrid_shard:
        zero += f" (shard {p.dp_shard_degree} x {p.dp_replicate} replicas)"
    lines = [f"llmsim {__version__} memory: {w.name} on {w.system.num_gpus} x {w.system.gpu.name}",
             f"  TP {p.tp}  PP {p.pp}  DP {p.dp}{f'  CP {p.cp} ({p.cp_comm_type.value})' if p.cp > 1 else ''}"
             f"{f'  EP {p.ep}' if p.ep > 1 else ''}  {sched}  {p.num_microbatches} micro-batches of "
             f"{p.micro_batch_size}  seq {w.model.seq_length}{'  sequence parallel' if p.sequence_parallel else ''}"
             f"{zero}  {'flash' if w.kernels.flash_attention else 'unfused'} attention"
             f"{f'  MTP {w.model.mtp_num_layers}' if w.model.mtp_num_layers else ''}", ""]
    for rc, stages in table.items():
        mine = " (the workload's)" if rc is p.recompute else ""
        n = p.recompute_num_layers if rc is p.recompute else None  # sim.memory.activation_model
        block = f" of {n} layer{'s' if n > 1 else ''} a chunk" if n else ""
        if rc is RecomputeKind.SELECTIVE and p.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
            block += f" ({', '.join(recompute_module_names(p.recompute_modules)) or 'no module'})"
        lines.append(f"  recompute {rc.value}{block}{mine}: GiB per GPU")
        lines.append("    stage  weights    grads  optimizer  activations   other    total  capacity  headroom  fits")
        for s in stages:
            lines.append(f"    {s.stage:5d}  {s.weights_bytes / GiB:7.2f}  {s.grads_bytes / GiB:7.2f}  "
                         f"{s.optimizer_bytes / GiB:9.2f}  {s.activations_bytes / GiB:11.2f}  "
                         f"{s.other_bytes / GiB:6.2f}  {s.total_bytes / GiB:7.2f}  {s.capacity_bytes / GiB:8.1f}  "
                         f"{s.headroom_bytes / GiB:8.2f}  {'yes' if s.fits else 'NO'}")
        worst = max(stages, key=lambda s: s.total_bytes)
        verdict = "fits" if all(s.fits for s in stages) else "DOES NOT FIT"
        lines.append(f"    peak {worst.total_bytes / GiB:.2f} GiB on stage {worst.stage}: {verdict}")
        lines.append("")
    if notes:
        lines += ["  defaults and notes:"] + [f"    {n}" for n in notes]
    return "\n".join(lines).rstrip()
