"""``llmsim run``: one training iteration, its report and the traces and pages written from it.

::

    llmsim run [WORKLOAD.yaml] [--case ID] [--topology T] [--trace PATH] [--json PATH] [--set KEY=VALUE ...] [--full]
               [--slow-gpu RANK=FACTOR ...] [--granularity op|layer|chunk] [--trace-dir DIR] [--html PATH]
               [--chakra DIR] [--calibration FILE]
    llmsim run --megatron-args "ARGS"|@FILE [--hf-config config.json] [--set system.gpu=NAME] [run options]
"""

from __future__ import annotations

import argparse
import gc
import os
from collections.abc import Sequence
from pathlib import Path

from sim.cli.io import (
    TOPOLOGY_GPU_HELP,
    add_budget_option,
    add_calibration_option,
    add_megatron_options,
    calibration,
    load_workload,
    place,
    tuned_workload,
)
from sim.errors import ConfigError
from sim.output.json_output import write_json

__all__ = ["LINK_COUNTERS", "MAX_SLOWDOWN", "register"]

MAX_SLOWDOWN = 1e6
"""The largest ``--slow-gpu`` factor (a GPU a million times slower has stopped)."""

LINK_COUNTERS = 5
"""Busiest links whose utilization a written trace carries as counter tracks."""


def register(sub) -> None:
    """Add ``run`` to ``llmsim``'s subcommands."""
    run = sub.add_parser("run", help="simulate one training iteration",
                         description="Simulate one training iteration and report where the time goes.")
    run.add_argument("workload", nargs="?", default=None,
                     help="workload YAML or preset name (default: workloads/gpt3-175b.yaml)")
    run.add_argument("--topology", help="topology YAML or preset name (default: the workload's, else the GPU's "
                     "DGX preset; a topology the workload file names keeps the file's system.gpu)" + TOPOLOGY_GPU_HELP)
    run.add_argument("--trace", metavar="PATH", help="write a Chrome trace (gzip if PATH ends in .gz)")
    run.add_argument("--json", metavar="PATH", help="write the report as JSON")
    run.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="override one workload field, e.g. parallel.tp=4 (repeatable)")
    run.add_argument("--case", metavar="ID", help="the case to run from a file of several "
                     "(e.g. workloads/validation/korthikanti2022.yaml)")
    run.add_argument("--full", action="store_true",
                     help="simulate every rank, not one representative rank per pipeline stage")
    run.add_argument("--slow-gpu", action="append", metavar="RANK=FACTOR",
                     help="a straggler: GPU RANK computes FACTOR times slower (repeatable)")
    run.add_argument("--granularity", choices=("op", "layer", "chunk"), default="op",
                     help="op: every kernel and collective a task (default); layer: each layer pass one "
                     "block timed alone, several times faster; chunk: each model chunk's pass one block, "
                     "faster still, for searches")
    run.add_argument("--trace-dir", metavar="DIR", help="write one trace per simulated rank into DIR "
                     "(rank-N.json.gz) for Holistic Trace Analysis; keep --trace out of DIR")
    run.add_argument("--html", metavar="PATH", help="write a one-page HTML report: summary, time and memory "
                     "charts, notes, links to the traces")
    run.add_argument("--chakra", metavar="DIR", help="write Chakra execution traces for ASTRA-sim into DIR: "
                     "llmsim.<rank>.et for every rank and llmsim.comm_groups.json (needs pip install "
                     "'llmsim[chakra]'; docs/interop.md)")
    add_calibration_option(run, "its scale_up values to the topology (--topology's, else the one the file was "
                           "calibrated on), its factors to the cost model; the interval from its runs' left-out "
                           "residuals where it has five or more")
    add_megatron_options(run)
    run.set_defaults(func=_cmd_run)
    add_budget_option(run)


def _cmd_run(args: argparse.Namespace) -> int:
    from sim.output.report import format_report, make_report
    from sim.runner import simulate

    _check_trace_dir(args.trace, args.trace_dir)
    _check_chakra(args)
    workload, notes = load_workload(args)
    calibrated: list[str] = []
    topology, factors = calibration(args, args.topology, calibrated)
    workload, notes = tuned_workload(args, workload, notes, topology, factors)
    notes += calibrated
    placed = place(workload, topology, args, notes)
    workload, topo = placed.workload, placed.topology
    run = simulate(workload, topo, full=args.full, notes=notes, slow_gpus=_slow_gpus(args.slow_gpu),
                   link_counters=LINK_COUNTERS if args.trace or args.trace_dir else 0, granularity=args.granularity,
                   factors=factors)
    # this process ends with the command: the run's objects (acyclic, freed by reference
    # counting) stay out of the collector's later passes over the report and the trace
    # (gpt3-175b with --trace: 4.5-4.8 s without, 3.9-4.1 s with)
    gc.freeze()
    if args.trace_dir:
        from sim.output.trace_ranks import representative_note

        note = representative_note(run.result)
        if note:
            run.notes.append(note)
    report = _with_interval(make_report(run), args, workload.system.gpu.generation)
    print(format_report(report))
    if args.json:
        write_json(args.json, report.to_dict())
    if args.trace:
        from sim.output.trace import write_chrome_trace

        write_chrome_trace(run.result, args.trace, title=f"llmsim {workload.name}",
                           metadata={"workload": workload.name, "topology": topo.name})
    if args.trace_dir:
        from sim.output.trace_ranks import write_rank_traces

        write_rank_traces(run.result, args.trace_dir, title=f"llmsim {workload.name}",
                          metadata={"workload": workload.name, "topology": topo.name})
    if args.html:
        _write_html(args.html, workload, report, args.trace, args.trace_dir)
    if args.chakra:
        from sim.export.chakra import export_chakra

        print(export_chakra(run, args.chakra).summary())
    return 0


def _with_interval(report, args: argparse.Namespace, generation):
    """``report`` with its iteration time's interval: with a ``--calibration`` of fitted factors,
    from its runs' left-out residuals (:func:`sim.studies.intervals.calibration_band`);
    else, or where it has fewer than :data:`~sim.studies.intervals.MIN_CALIBRATION_RUNS` runs with
    them (the line says so), from the validation residuals
    of runs of the workload's stack on its GPU generation (:mod:`sim.studies.intervals`)."""
    import dataclasses

    from sim.cli.io import workload_stack_name
    from sim.studies.intervals import MIN_CALIBRATION_RUNS, calibration_band, run_band

    note = ""
    if args.calibration is not None:
        from sim.calibrate.calibration import load_calibration

        cal = load_calibration(args.calibration)
        if cal.factors:
            own = calibration_band(cal.runs, args.calibration)
            if own is not None:
                return dataclasses.replace(report, interval=own.time_interval(report.iteration_time_s))
            have = sum(1 for r in cal.runs if isinstance(r, dict) and r.get("predicted_left_out") is not None)
            note = (f"calibration {args.calibration} has {have} fitted run{'' if have == 1 else 's'} with a left-out "
                    f"residual, its own interval needs {MIN_CALIBRATION_RUNS}")
    band = run_band(workload_stack_name(args), generation)
    return dataclasses.replace(report, interval=band.time_interval(report.iteration_time_s, note))


def _slow_gpus(items: Sequence[str] | None) -> dict[int, float]:
    """``--slow-gpu`` ``["5=1.2", ...]`` -> {5: 1.2}."""
    out: dict[int, float] = {}
    for item in items or ():
        rank, _, factor = item.partition("=")
        try:
            if len(rank.strip()) > 18:
                raise ValueError(rank)
            out[int(rank)] = float(factor)
        except ValueError:
            raise ConfigError("<--slow-gpu>", "--slow-gpu", "RANK=FACTOR, e.g. 5=1.2", item) from None
        if not 1.0 <= out[int(rank)] <= MAX_SLOWDOWN:
            raise ConfigError("<--slow-gpu>", "--slow-gpu", f"a slowdown FACTOR from 1 to {MAX_SLOWDOWN:g}", item)
    return out


def _check_chakra(args: argparse.Namespace) -> None:
    """``--chakra`` needs op granularity and protobuf: say so before simulating."""
    if not args.chakra:
        return
    if args.granularity != "op":
        raise ConfigError("<--chakra>", "--granularity", "op (a Chakra trace has a node per kernel and "
                          "collective; a layer block hides their order and times)", args.granularity)
    from sim.export.etfile import require_schema

    require_schema()


def _check_trace_dir(trace: str | None, trace_dir: str | None) -> None:
    """HTA reads every ``.json``/``.gz`` file in the per-rank folder as a rank: keep the merged trace out."""
    if trace and trace_dir and Path(trace).resolve().parent == Path(trace_dir).resolve():
        raise ConfigError("<--trace>", "--trace", "a path outside --trace-dir (Holistic Trace Analysis reads "
                          "every .json and .gz file there as a rank)", trace)


def _write_html(path: str, workload, report, trace: str | None, trace_dir: str | None) -> None:
    """``llmsim run --html``: the report page, with the workload's closed-form memory per stage and
    links to the traces written beside it, relative to the page."""
    from urllib.parse import quote

    from sim.memory import memory_table
    from sim.output.html_report import write_html_report

    base = Path(path).resolve().parent

    def href(target: str | None, folder: bool = False) -> str | None:
        if not target:
            return None
        rel = Path(os.path.relpath(Path(target).resolve(), base)).as_posix()
        return quote(rel + ("/" if folder else ""))

    rc = workload.parallel.recompute
    write_html_report(path, report, memory=memory_table(workload, [rc])[rc], model=workload.model.name,
                      trace_href=href(trace), trace_dir_href=href(trace_dir, folder=True))
