"""Figures, drawn with matplotlib when it is installed (``pip install 'llmsim[plot]'``).

matplotlib is the one optional dependency: a stacked bar chart with labels and a legend is
a few lines with it and a small library of our own without it. The file's suffix picks the
format, any that matplotlib writes, each written reproducibly (:mod:`sim.output.plot_formats`, which
the command line also uses to check ``--plot`` before any work).
"""

from __future__ import annotations

from pathlib import Path

from sim.errors import NotBuiltError
from sim.memory import StageMemory
from sim.output.plot_formats import INSTALL_HINT, figure_bytes, plot_format
from sim.types import RecomputeKind
from sim.units import GiB

__all__ = ["plot_memory", "plot_compare", "plot_sweep", "plot_generations", "plot_nodes"]

_PARTS = (("weights_bytes", "weights"), ("grads_bytes", "gradients"), ("optimizer_bytes", "optimizer state"),
          ("activations_bytes", "activations"), ("other_bytes", "other buffers"))


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the environment
        raise NotBuiltError(f"--plot needs matplotlib: {INSTALL_HINT}") from None
    return plt


def _save(plt, fig, path: str) -> None:
    """Write ``fig`` to ``path`` in the format its suffix names, reproducibly
    (:func:`sim.output.plot_formats.figure_bytes`); drawn in memory first, so that a writer's error
    leaves no partial file."""
    fig.tight_layout()
    try:
        data = figure_bytes(fig, plot_format(path))
    finally:
        plt.close(fig)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(data)


def plot_memory(table: dict[RecomputeKind, list[StageMemory]], path: str, title: str) -> None:
    """Stacked bars of the fullest stage's memory per recomputation method, with the GPU's
    capacity as a line: the figure of the recomputation papers (Korthikanti et al. 2022, Fig. 7)."""
    plt = _pyplot()
    methods = list(table)
    fullest = [max(table[m], key=lambda s: s.total_bytes) for m in methods]
    fig, ax = plt.subplots(figsize=(7.6, 4.2), dpi=120)
    bottom = [0.0] * len(methods)
    for attr, label in _PARTS:
        vals = [getattr(s, attr) / GiB for s in fullest]
        ax.bar([m.value for m in methods], vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    cap = fullest[0].capacity_bytes / GiB
    ax.axhline(cap, color="black", linestyle="--", linewidth=1)
    ax.text(-0.45, cap, f"capacity {cap:.0f} GiB", va="bottom", ha="left", fontsize=8)
    for i, s in enumerate(fullest):
        ax.text(i, bottom[i], f"{bottom[i]:.1f}\n(stage {s.stage})", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("GiB per GPU (fullest pipeline stage)")
    ax.set_xlabel("activation recomputation")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(0, max(max(bottom), cap) * 1.2)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(plt, fig, path)


def plot_compare(rows: list, path: str, title: str) -> None:
    """Stacked bars per topology (``llmsim compare`` rows, :class:`sim.studies.compare.CompareRow`):
    compute, exposed communication by dimension, bubble."""
    plt = _pyplot()
    names = [r.topology for r in rows]
    parts = [("compute", [r.report.compute_s["total"] for r in rows])]
    for c in ("tp", "pp", "dp", "cp", "ep"):
        vals = [r.report.exposed_comm_s.get(c, 0.0) for r in rows]
        if any(vals):
            parts.append((f"exposed {c}", vals))
    parts.append(("bubble, idle", [r.report.bubble_fraction * r.report.iteration_time_s for r in rows]))
    fig, ax = plt.subplots(figsize=(7.2, 4.0), dpi=120)
    bottom = [0.0] * len(rows)
    for label, vals in parts:
        ax.bar(names, vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in enumerate(rows):
        ax.text(i, bottom[i], f"{r.report.iteration_time_s:.3f} s", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("seconds per iteration (mean over pipeline stages)")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(0, max(bottom) * 1.15)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(plt, fig, path)


def plot_sweep(result, path: str, title: str) -> None:
    """Throughput against peak memory of every configuration a sweep simulated
    (:class:`sim.studies.sweep.core.SweepResult`), the Pareto front joined and marked, the best configuration
    ringed and the GPU's capacity as a line."""
    plt = _pyplot()
    rows, front = result.rows, result.pareto_rows()
    fig, ax = plt.subplots(figsize=(7.2, 4.4), dpi=120)
    ax.scatter([r.candidate.peak_memory_bytes / GiB for r in rows], [r.screen.tokens_per_s for r in rows],
               s=8, alpha=0.4, color="tab:blue", label=f"simulated ({len(rows)})")
    ax.plot([r.candidate.peak_memory_bytes / GiB for r in front], [r.screen.tokens_per_s for r in front],
            marker="o", markersize=5, color="tab:red", linewidth=1.2, label=f"Pareto front ({len(front)})")
    if rows:
        best = rows[0]
        ax.scatter([best.candidate.peak_memory_bytes / GiB], [best.screen.tokens_per_s], s=120,
                   facecolors="none", edgecolors="black", label="fastest")
    cap = result.capacity_bytes / GiB
    if rows and max(r.candidate.peak_memory_bytes for r in rows) / GiB > cap / 2:  # else it would squash the points
        ax.axvline(cap, color="black", linestyle="--", linewidth=1)
        ax.text(cap, ax.get_ylim()[1], f"capacity {cap:.0f} GiB ", rotation=90, va="top", ha="right", fontsize=8)
    ax.set_xlabel(f"peak memory per GPU, GiB (closed form, fullest stage; the GPU has {cap:.0f})")
    ax.set_ylabel(f"tokens/s ({result.screen_granularity} granularity)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    _save(plt, fig, path)


def plot_generations(result, path: str) -> None:
    """A waterfall of the factor-by-factor speed-up (:func:`sim.studies.whatif.systems.generations`): each bar
    spans the cumulative speed-up before and after its factor, on a log scale so that the
    bars' heights multiply to the end-to-end bar."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.6, 4.2), dpi=120)
    cum = 1.0
    labels = []
    for i, step in enumerate(result.steps):
        new = cum * step.speedup
        lo, hi = min(cum, new), max(cum, new)
        ax.bar(i, hi - lo, bottom=lo, color="tab:green" if new >= cum else "tab:red")
        ax.text(i, hi, f"x{step.speedup:.2f}", ha="center", va="bottom", fontsize=8)
        labels.append(step.factor)
        cum = new
    ax.bar(len(labels), cum - 1.0, bottom=1.0, color="tab:blue")
    ax.text(len(labels), cum, f"x{cum:.2f}", ha="center", va="bottom", fontsize=8)
    labels.append("end to end")
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
    ax.set_ylabel("cumulative speed-up (log scale)")
    ax.set_title(f"{result.workload}: {result.from_system} -> {result.to_system}", fontsize=9)
    _save(plt, fig, path)


_NODE_PARTS = (("tensor_compute_s", "tensor-core compute"), ("memory_bound_s", "memory-bound work"),
               ("exposed_comm_s", "exposed communication"), ("bubble_idle_s", "bubble and idle"))


def plot_nodes(rows, path: str, title: str) -> None:
    """Stacked bars of where one iteration goes on each technology node's hypothetical GPU
    (:func:`sim.studies.whatif.systems.nodes`), so that the bottleneck's shift is visible."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.6, 4.2), dpi=120)
    names = [f"{r.node_nm:g} nm" for r in rows]
    bottom = [0.0] * len(rows)
    for key, label in _NODE_PARTS:
        vals = [r.breakdown_s[key] for r in rows]
        ax.bar(names, vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in enumerate(rows):
        ax.text(i, bottom[i], f"{r.iteration_time_s:.3g} s" + ("" if r.fits else "\n(does not fit)"),
                ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("seconds per iteration (per GPU)")
    ax.set_xlabel("technology node")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    _save(plt, fig, path)


# --- inference (sim/inference) ------------------------------------------------------------------

__all__ += ["plot_roofline", "plot_hbm_generations"]

_PHASE_MARKERS = {"prefill": "o", "decode": "^"}


def plot_roofline(result, path: str, title: str) -> None:
    """The roofline of each GPU (Williams et al. 2009, CACM 52(4)): attainable FLOP/s
    ``min(peak, intensity x HBM bandwidth)`` on log-log axes, and each op of one layer
    (:func:`sim.inference.roofline.roofline`) at its arithmetic intensity and the FLOP/s the
    simulator's time gives it; circles prefill, triangles decode, one colour per GPU."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 5.0), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    points = [r for g in result for p in g.phases for r in p.ops if r.flops > 0 and r.bytes > 0]
    lo = min([r.intensity_flops_per_byte for r in points] + [0.5]) / 2
    hi = max([r.intensity_flops_per_byte for r in points] + [1e3]) * 2
    for i, g in enumerate(result):
        c = colors[i % len(colors)]
        bw = g.gpu.hbm_bandwidth_bytes_per_s
        used = {r.dtype for p in g.phases for r in p.ops if r.flops > 0}
        for dtype, peak in g.gpu.peak_flops_per_s:
            if dtype.value not in used:
                continue
            ridge = peak / bw
            xs = [lo, ridge, hi]
            ax.plot(xs, [min(peak, x * bw) / 1e12 for x in xs], color=c, linewidth=1.2,
                    linestyle="-" if dtype.value == "bf16" else "--", label=f"{g.gpu.name} {dtype.value}")
        for p in g.phases:
            ops = [r for r in p.ops if r.flops > 0 and r.bytes > 0]
            ax.scatter([r.intensity_flops_per_byte for r in ops], [r.achieved_flops_per_s / 1e12 for r in ops],
                       color=c, marker=_PHASE_MARKERS[p.phase.value], s=28, zorder=3)
            if i == 0:
                for r in ops:
                    ax.annotate(f"{r.name}", (r.intensity_flops_per_byte, r.achieved_flops_per_s / 1e12),
                                fontsize=6, xytext=(3, 2), textcoords="offset points")
    for phase, m in _PHASE_MARKERS.items():
        ax.scatter([], [], color="gray", marker=m, label=f"{phase} ops")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity, FLOP per byte of HBM traffic")
    ax.set_ylabel("TFLOP/s (lines: attainable; points: as simulated)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    _save(plt, fig, path)


def plot_hbm_generations(rows, path: str, title: str) -> None:
    """Time to first token and time per output token per HBM generation
    (:func:`sim.inference.hbm.memory_whatif`), with each generation's bandwidth."""
    plt = _pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8.4, 3.8), dpi=120)
    names = [f"{r.generation}\n{r.hbm_bandwidth_bytes_per_s / 1e12:.2f} TB/s" for r in rows]
    for ax, key, label in ((a1, "ttft_s", "time to first token, ms"), (a2, "tpot_s", "time per output token, ms")):
        vals = [getattr(r, key) * 1e3 for r in rows]
        bars = ax.bar(names, vals, color=["tab:blue" if r.own else "tab:gray" for r in rows])
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylim(0, max(vals) * 1.2 if vals else 1)
    fig.suptitle(title + " (blue: the GPU's own HBM)", fontsize=9)
    _save(plt, fig, path)
