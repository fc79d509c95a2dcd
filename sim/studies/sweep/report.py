"""The report of ``llmsim sweep``: the top configurations as a table, the JSON, the CSV.

Every number is the sweep's (:class:`sim.studies.sweep.core.SweepResult`), in SI units with the unit in the
key names; the table prints seconds, tokens/s, per cent and GiB.
"""

from __future__ import annotations

import csv
from pathlib import Path

from sim.studies.sweep.core import KEY_FIELDS, Fidelity, SweepResult, SweepRow
from sim.types import CommClass
from sim.units import GiB, byte_count
from sim.version import __version__

__all__ = ["format_sweep", "sweep_json", "write_sweep_csv"]

_CLASSES = tuple(c.value for c in CommClass)


def _rerun(r: SweepResult) -> bool:
    """Whether the top configurations were simulated twice (screened coarser, then op)."""
    return r.screen_granularity != "op"


def _counts(r: SweepResult) -> dict:
    """tried = invalid + pruned_memory + pruned_bound + simulated + failed + cancelled."""
    return {"tried": r.tried, "invalid": r.invalid, "pruned_memory": r.pruned, "pruned_bound": r.pruned_bound,
            "simulated": r.simulated, "failed": r.failed, "cancelled": r.cancelled}


def _row_dict(row: SweepRow, rerun: bool, r: SweepResult) -> dict:
    best = row.best
    out = {"parallel": row.candidate.settings, "iteration_time_s": best.iteration_time_s,
           "granularity": best.granularity}
    if r.interval is not None:
        low, high = r.interval.interval(best.iteration_time_s)
        out.update({"iteration_time_s_low": low, "iteration_time_s_high": high,
                    "tied_with_best": r.tied_with_best(row)})
    if rerun:
        out["screen_iteration_time_s"] = row.screen.iteration_time_s
        if row.op is not None and not row.op.ok:
            out["op_error"] = row.op.error
    out.update({"tokens_per_s": best.tokens_per_s, "mfu": best.mfu,
                "peak_memory_bytes": byte_count(row.candidate.peak_memory_bytes),
                "exposed_comm_total_s": best.exposed_comm_total_s, "exposed_comm_s": dict(best.exposed_comm_s),
                "bubble_fraction": best.bubble_fraction})
    return out


def sweep_json(r: SweepResult) -> dict:
    """The sweep as JSON: the counts, the top rows (both times under ``fidelity="fast"``), the
    Pareto front of throughput against memory, the failures and the notes."""
    rerun = _rerun(r)
    return {
        "llmsim_version": __version__,
        "workload": r.workload,
        "topology": r.topology,
        "gpu": r.gpu,
        "num_gpus": r.num_gpus,
        "capacity_bytes": byte_count(r.capacity_bytes),
        "space": r.space,
        "fidelity": r.fidelity.value,
        "screen_granularity": r.screen_granularity,
        "exhaustive": r.exhaustive,
        "counts": _counts(r),
        "invalid_reasons": dict(sorted(r.invalid_reasons.items())),
        "interrupted": r.interrupted,
        "stopped_while": r.stopped_while or None,
        "interval": None if r.interval is None else _interval_json(r),
        "top": [{"rank": i + 1, **_row_dict(row, rerun, r)} for i, row in enumerate(r.top)],
        "pareto_front": [{"parallel": row.candidate.settings, "tokens_per_s": row.screen.tokens_per_s,
                          "peak_memory_bytes": byte_count(row.candidate.peak_memory_bytes)}
                         for row in r.pareto_rows()],
        "failures": [{"parallel": c.settings, "error": err} for c, err in r.failures],
        "notes": list(r.notes),
    }


def _interval_json(r: SweepResult) -> dict:
    """The band every configuration's interval comes from."""
    band = r.interval
    assert band is not None
    return {"from": band.scope, "rows": band.rows, "low_factor": band.low_factor, "high_factor": band.high_factor}


def write_sweep_csv(r: SweepResult, path: str) -> None:
    """One row per configuration simulated without error, by screening time then key: its
    settings, peak memory and figures (op-level for the re-run top ones; ``granularity`` says)."""
    top = {row.candidate.key: row for row in r.top}
    head = list(KEY_FIELDS) + ["peak_memory_bytes", "granularity", "iteration_time_s", "tokens_per_s", "mfu",
                               "bubble_fraction", "exposed_comm_s"] + [f"exposed_{c}_s" for c in _CLASSES]
    if _rerun(r):
        head += ["screen_iteration_time_s", "op_iteration_time_s"]
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(head)
        for row in r.rows:
            row = top.get(row.candidate.key, row)
            b = row.best
            line = list(row.candidate.key) + [row.candidate.peak_memory_bytes, b.granularity, b.iteration_time_s,
                                              b.tokens_per_s, b.mfu, b.bubble_fraction, b.exposed_comm_total_s]
            line += [b.exposed_comm_s.get(c, 0.0) for c in _CLASSES]
            if _rerun(r):
                op = row.op.iteration_time_s if row.op is not None and row.op.ok else ""
                line += [row.screen.iteration_time_s, op]
            out.writerow(line)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def format_sweep(r: SweepResult) -> str:
    """The printed report: what was searched, the counts, the top configurations."""
    rerun = _rerun(r)
    which = "every configuration" if r.exhaustive else "branch and bound (lower bounds skip the slow)"
    if r.fidelity is Fidelity.FAST and rerun:
        how = (f"fidelity fast: {which} at {r.screen_granularity} granularity, the best {len(r.top)} "
               "again op by op")
    else:
        how = f"fidelity {r.fidelity.value}: {which} op by op"
    lines = [f"llmsim {__version__} sweep: {r.workload} on {r.num_gpus} x {r.gpu} ({r.topology}), "
             f"{r.capacity_bytes / GiB:.1f} GiB per GPU",
             f"  space: {r.space}; {how}",
             f"  tried {r.tried:,}   invalid {r.invalid:,}   pruned (memory) {r.pruned:,}"
             + ("" if r.exhaustive else f"   pruned (bound) {r.pruned_bound:,}")
             + f"   simulated {r.simulated:,}   failed {r.failed:,}"
             + (f"   cancelled {r.cancelled:,}" if r.cancelled else "")]
    if r.invalid_reasons:
        why = ", ".join(f"{k} {v:,}" for k, v in sorted(r.invalid_reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"  invalid, by the field the specs rejected: {why}")
    if r.interrupted:
        lines.append(f"  interrupted (Ctrl-C) {_interruption(r)}")
    lines.append("")
    if not r.top:
        lines.append("  no configuration of the space was simulated")
    else:
        ep = any(row.candidate.settings["ep"] > 1 for row in r.top)
        head = (f"  {'rank':>4} {'TP':>3} {'PP':>3} {'DP':>4} {'CP':>3}" + (f" {'EP':>3}" if ep else "")
                + f" {'v':>3}  {'schedule':<16} {'mbs':>3}  {'recompute':<12} {'SP':<3} {'ZeRO':>4}"
                + (f" {r.screen_granularity + ' s':>10}" if rerun else "")
                + f" {'iteration s':>11}" + (f" {'tied':>4}" if r.interval is not None else "")
                + f" {'tokens/s':>11} {'MFU':>6} {'peak GiB':>8} {'exp comm s':>10}")
        lines += [head, "  " + "-" * (len(head) - 2)]
        for i, row in enumerate(r.top):
            s, b = row.candidate.settings, row.best
            lines.append(
                f"  {i + 1:>4} {s['tp']:>3} {s['pp']:>3} {s['dp']:>4} {s['cp']:>3}" + (f" {s['ep']:>3}" if ep else "")
                + f" {s['virtual_pipeline_stages']:>3}  {s['schedule']:<16} {s['micro_batch_size']:>3}  "
                f"{s['recompute']:<12} {_yes(s['sequence_parallel']):<3} {s['zero_stage']:>4}"
                + (f" {_secs(row.screen.iteration_time_s):>10}" if rerun else "")
                + f" {_op_cell(row, rerun):>11}" + (f" {_tie_cell(r, row, i):>4}" if r.interval is not None else "")
                + f" {b.tokens_per_s:>11,.0f} {100 * b.mfu:>5.1f}% {row.candidate.peak_memory_bytes / GiB:>8.1f}"
                f" {_secs(b.exposed_comm_total_s):>10}")
        lines.append(f"  ({len(r.pareto_rows())} configurations on the Pareto front of tokens/s against peak memory)")
        if r.interval is not None:
            b = r.interval
            lines += ["  (tied: its 80% interval overlaps the best one's; every configuration has the same stack "
                      "and GPU, so one band,",
                      f"   x{b.low_factor:.3f} to x{b.high_factor:.3f} of its time, from the {b.residuals} of "
                      f"{b.scope}, {b.rows} rows: sim/studies/intervals.py)"]
    if r.failures:
        shown = "; ".join(f"{_label(c.settings)}: {err}" for c, err in r.failures[:3])
        lines.append(f"  failed: {shown}" + (" ..." if len(r.failures) > 3 else ""))
    if r.notes:
        lines += ["", "  notes:"] + [f"    {n}" for n in r.notes]
    return "\n".join(lines)


def _interruption(r: SweepResult) -> str:
    """What an interrupted sweep kept."""
    if r.stopped_while == "checking":
        return f"while checking the space: {r.tried:,} points checked, nothing simulated"
    if r.stopped_while == "op-level re-run":
        done = sum(1 for row in r.top if row.op is not None)
        return (f"during the op-level re-run: {done} of {len(r.top)} re-run, the others ranked by their "
                f"{r.screen_granularity}-granularity time")
    return (f"while simulating: {r.simulated + r.failed:,} of {r.simulated + r.failed + r.cancelled:,} finished, "
            "the rest cancelled; the ranking covers those that finished")


def _secs(t: float) -> str:
    """Four decimals, or four significant digits below a second."""
    return f"{t:.4f}" if t >= 1 else f"{t:.4g}"


def _op_cell(row: SweepRow, rerun: bool) -> str:
    if not rerun or (row.op is not None and row.op.ok):
        return _secs(row.best.iteration_time_s)
    return "-" if row.op is None else "failed"


def _tie_cell(r: SweepResult, row: SweepRow, rank: int) -> str:
    """``best`` for the first, else whether its interval overlaps the best one's."""
    return "best" if rank == 0 else _yes(bool(r.tied_with_best(row)))


def _label(s: dict) -> str:
    return (f"TP {s['tp']} PP {s['pp']} DP {s['dp']} CP {s['cp']} v {s['virtual_pipeline_stages']} {s['schedule']} "
            f"mbs {s['micro_batch_size']} {s['recompute']} SP {_yes(s['sequence_parallel'])} ZeRO {s['zero_stage']}")
