"""The same workload on several topologies, side by side (``llmsim compare``).

Each topology is simulated with the same workload, on the GPU :mod:`sim.topology.choice`
gives it (a topology that fixes its GPU, as ``dgx-b200``, brings it); the rows carry the GPU,
the iteration time, the throughput, the exposed communication per parallel dimension and the
bubble, and the speed-up against the first topology given.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.costs.factors import CalibrationFactors
from sim.output.report import Report, links_json, make_report
from sim.runner import simulate
from sim.topology.choice import Placed
from sim.workload.spec import WorkloadSpec

__all__ = ["CompareRow", "compare", "format_compare"]


@dataclass(frozen=True)
class CompareRow:
    topology: str
    gpu: str
    report: Report
    speedup: float
    """Iteration time on the first topology over the time on this one."""

    def to_dict(self) -> dict:
        r = self.report
        return {"topology": self.topology, "gpu": self.gpu, "iteration_time_s": r.iteration_time_s,
                "tokens_per_s": r.tokens_per_s,
                "mfu": r.mfu, "bubble_fraction": r.bubble_fraction, "exposed_comm_s": dict(r.exposed_comm_s),
                "busiest_links": links_json(r.busiest_links), "speedup_vs_first": self.speedup}


def compare(systems: list[Placed], full: bool = False, factors: CalibrationFactors | None = None) -> list[CompareRow]:
    """Simulate each workload on its topology (in order; :func:`sim.topology.choice.place_workload`
    places one workload on each topology), with a calibration's ``factors`` (:mod:`sim.costs.factors`)
    on every one when given."""
    reports = [make_report(simulate(p.workload, p.topology, full=full, factors=factors)) for p in systems]
    first = reports[0].iteration_time_s
    return [CompareRow(p.topology.name, p.workload.system.gpu.name, r, first / r.iteration_time_s)
            for p, r in zip(systems, reports)]


def _busiest(rep: Report) -> str:
    if not rep.busiest_links:
        return "-"
    lk = rep.busiest_links[0]
    return f"{lk['link']} ({lk['kind']}) {100 * lk['utilization']:.0f}%"


def format_compare(workload: WorkloadSpec, rows: list[CompareRow], notes: list[str] = ()) -> str:
    """The table ``llmsim compare`` prints: a GPU column when the topologies bring different
    GPUs, and ``notes`` (how each topology's GPU was chosen) below it."""
    classes = [c for c in ("tp", "pp", "dp", "cp", "ep")
               if any(r.report.exposed_comm_s.get(c, 0.0) > 0 for r in rows)]
    width = max(12, *(len(r.topology) for r in rows))
    gpus = list(dict.fromkeys(r.gpu for r in rows))
    gpu_width = max(len(g) for g in gpus) if len(gpus) > 1 else 0
    head = (f"  {'topology':<{width}} " + (f"{'GPU':<{gpu_width}} " if gpu_width else "")
            + f"{'iteration s':>12} {'tokens/s':>12} {'MFU':>6} {'bubble':>7} "
            + "".join(f"{'exp ' + c + ' s':>10}" for c in classes) + f" {'speed-up':>9}  busiest link")
    on = f"{workload.system.num_gpus} x " + " / ".join(gpus)
    lines = [f"llmsim compare: {workload.name} on {on}", "", head, "  " + "-" * (len(head) - 2)]
    for r in rows:
        rep = r.report
        lines.append(f"  {r.topology:<{width}} " + (f"{r.gpu:<{gpu_width}} " if gpu_width else "")
                     + f"{rep.iteration_time_s:>12.4f} {rep.tokens_per_s:>12,.0f} "
                     f"{100 * rep.mfu:>5.1f}% {100 * rep.bubble_fraction:>6.1f}% "
                     + "".join(f"{rep.exposed_comm_s.get(c, 0.0):>10.4f}" for c in classes)
                     + f" {r.speedup:>8.3f}x  " + _busiest(rep))
    if notes:
        lines += [""] + [f"  note: {n}" for n in notes]
    return "\n".join(lines)
