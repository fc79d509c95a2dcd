"""``llmsim whatif power``: the same job under several board power caps.

Datacenters cap GPUs below their rated power to fit a power budget (Meta's Grand Teton H100s
run at 500 W, not 700). For a GPU whose clock under its limit is measured (:mod:`sim.power`),
this study simulates the workload at each cap and reports what it costs: the clock its kernels
hold, the iteration time and throughput, the mean board draw and the energy per iteration.

Energy per GPU and iteration is ``P_busy x t_busy + P_idle x (T - t_busy)``: ``P_busy`` is the
time-weighted draw of the compute stream's kernels at the solved clock
(:func:`sim.power.mean_power_w`), ``t_busy`` the compute time per GPU (the report's
``compute_s``, mean over pipeline stages), ``P_idle`` the GPU's idle draw for the rest (exposed
communication and pipeline bubbles). The communication kernels' own draw is not counted, nor
the rest of the node (CPUs, NICs, switches, fans).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from sim.config.fields import comma_items
from sim.errors import ConfigError
from sim.hardware import power_limited
from sim.output.report import make_report
from sim.power import mean_power_w
from sim.runner import simulate
from sim.topology.spec import TopologySpec
from sim.workload.spec import WorkloadSpec

__all__ = ["PowerRow", "power_caps", "parse_limits", "format_power_caps"]


@dataclass(frozen=True)
class PowerRow:
    """One cap: what the job does under it (per GPU unless said)."""

    limit_w: float
    sm_clock_hz: float
    iteration_time_s: float
    tokens_per_s: float
    mean_power_w: float
    energy_per_iteration_j: float
    tokens_per_j: float
    """Whole job: tokens per joule drawn by all its GPUs."""
    clock_at_floor: bool = False
    """Whether the cap held the clock at the model's floor, a third of the maximum
    (:func:`sim.power.solve_clock_hz`), where the kernels' draw still exceeds the cap: the mean
    draw is then above the cap (the firmware would also throttle what the model does not)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def parse_limits(text: str | None, rated_w: float) -> tuple[float, ...]:
    """``--limits 400,500,600,700`` -> watts (default: 60% to 100% of the rated limit)."""
    if text is None:
        return tuple(round(rated_w * f) for f in (0.6, 0.7, 0.8, 0.9, 1.0))
    expected = "comma-separated watts, e.g. 400,500,600,700"
    items = comma_items(text, "--limits", expected)
    try:
        return tuple(float(x) for x in items)
    except ValueError:
        raise ConfigError("<--limits>", "--limits", expected, text) from None


def power_caps(workload: WorkloadSpec, topology: TopologySpec, limits: Sequence[float]) -> list[PowerRow]:
    """Simulate ``workload`` under each board power cap in ``limits``.

    Raises
    ------
    ConfigError
        If the workload's GPU has no measured power behaviour, or a cap is below its idle draw.
    """
    gpu = workload.system.gpu
    rows = []
    for limit in limits:
        try:
            capped = power_limited(gpu, limit)
        except ValueError as exc:
            if gpu.power is None:
                raise ConfigError("<whatif power>", "system.gpu", str(exc), gpu.name) from None
            raise ConfigError("<--limits>", "--limits", f"caps in {str(exc)} W", f"{limit:g}") from None
        w = dataclasses.replace(workload, system=dataclasses.replace(workload.system, gpu=capped))
        run = simulate(w, topology)
        rep = make_report(run)
        t = rep.iteration_time_s
        busy = min(sum(rep.compute_s.values()), t)
        p_busy = mean_power_w(capped.power, run.power_loads, run.clock_hz)
        energy = p_busy * busy + capped.power.idle_w * (t - busy)
        floor = run.clock_hz <= capped.power.max_clock_hz / 3.0 and p_busy > limit
        rows.append(PowerRow(float(limit), run.clock_hz, t, rep.tokens_per_s, energy / t, energy,
                             w.tokens_per_iteration / (energy * w.system.num_gpus), floor))
    return rows


def format_power_caps(rows: Sequence[PowerRow], title: str) -> str:
    lines = [title, "",
             f"  {'cap W':>6} {'clock MHz':>10} {'iteration s':>12} {'tokens/s':>12} {'mean W':>7} "
             f"{'J/iteration/GPU':>16} {'tokens/J':>9}"]
    for r in rows:
        lines.append(f"  {r.limit_w:6.0f} {r.sm_clock_hz / 1e6:10.0f} {r.iteration_time_s:12.4f} "
                     f"{r.tokens_per_s:12,.0f} {r.mean_power_w:7.0f} {r.energy_per_iteration_j:16,.0f} "
                     f"{r.tokens_per_j:9.2f}")
    lines += ["", "  per GPU: the compute stream's draw while busy, idle draw while it waits; communication "
              "kernels and the rest of the node not counted (sim/studies/whatif/power.py)"]
    for r in rows:
        if r.clock_at_floor:
            lines.append(f"  note: at {r.limit_w:g} W the clock stops at the model's floor, a third of the "
                         f"maximum, where the kernels still draw {r.mean_power_w:.0f} W on average (the "
                         "bandwidth-bound ones at their full draw): the model reaches no lower draw")
    return "\n".join(lines)
