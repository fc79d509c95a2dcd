"""The ``llmsim`` command line.

::

    llmsim run [WORKLOAD.yaml] [--case ID] [--topology T] [--trace PATH] [--json PATH] [--set KEY=VALUE ...] [--full]
               [--slow-gpu RANK=FACTOR ...] [--granularity op|layer] [--trace-dir DIR] [--html PATH] [--chakra DIR]
    llmsim run --megatron-args "ARGS"|@FILE [--hf-config config.json] [--set system.gpu=NAME] [run options]
    llmsim memory [WORKLOAD.yaml] [--recompute none,selective,selective-op,full] [--plot PATH] [--json PATH]
    llmsim validate [FILE...] [--json PATH]
    llmsim presets [--json PATH]
    llmsim collective --topology T --op all-reduce --bytes 1GiB --ranks 8
                 [--algo auto|ring|multi-ring|tree|nvls|pat|hierarchical] [--json PATH]
    llmsim compare [WORKLOAD.yaml] --topology A --topology B [...] [--json PATH] [--plot PATH]
    llmsim sweep [WORKLOAD.yaml] [--topology T] [--space SPACE.yaml] [--top N] [--executor local|dask://HOST:PORT]
                 [--workers N] [--csv PATH] [--json PATH] [--plot PATH] [--fidelity fast|op] [--exhaustive]
    llmsim whatif generations [WORKLOAD.yaml] --from A100 --to B200 [--dtype fp8] [--order F,...] [--reoptimize]
                 [--from-topology T] [--to-topology T] [--plot PATH] [--json PATH]
    llmsim whatif nodes [WORKLOAD.yaml] [--nodes 12,7,5,3,2,1] [--scale logic,memory,network] [--table PATH]
                 [--plot PATH] [--json PATH]
    llmsim whatif memory [MODEL] --gpu H100-SXM5-80GB --hbm HBM2e,HBM3,HBM3e,HBM4 [--plot PATH] [--json PATH]
    llmsim whatif power [WORKLOAD.yaml] [--limits 400,500,600,700] [--json PATH]
    llmsim infer [MODEL] --gpu H100-SXM5-80GB --tp 8 [--pp 1] --batch 1 --prompt 200 --generate 200 [--dtype fp8]
                 [--trace PATH] [--json PATH]          (inference: sim/inference/commands.py, docs/inference.md)
    llmsim roofline [MODEL] --gpu A100-SXM4-80GB,H100-SXM5-80GB,B200 --phase prefill,decode [--plot PATH]
    llmsim validate-infer [FILE] [--json PATH]

Bad input prints one line naming the file, the field, what was expected and what arrived,
and exits with status 2; it never prints a traceback. Ctrl-C prints ``llmsim: interrupted``
and exits with status 130 (``sweep`` first prints what had finished). ``--json -`` writes the
JSON to standard output and what the command prints to standard error. A topology given on
the command line that fixes its GPU brings it (:mod:`sim.topology.choice`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from sim.budget import memory_budget
from sim.errors import ConfigError, NotBuiltError, SimError, clip
from sim.output.json_output import json_to_stdout, write_json
from sim.output.paths import STDOUT, check_output_paths
from sim.types import SIMULATED_DTYPES, dtype_names
from sim.version import __version__

__all__ = ["main"]

TOPOLOGY_GPU_HELP = ("; one whose file fixes its GPU (gpu: B200 in topologies/dgx-b200.yaml) brings it, unless "
                     "--set system.gpu=NAME keeps the workload's GPU on its links (sim/topology/choice.py)")
"""The rule for a topology option and the GPU (:mod:`sim.topology.choice`), in every such option's help."""

MAX_SLOWDOWN = 1e6
"""The largest ``--slow-gpu`` factor (a GPU a million times slower has stopped)."""

LINK_COUNTERS = 5
"""Busiest links whose utilization a written trace carries as counter tracks."""


def _run_command(args: argparse.Namespace) -> int:
    """Run the command; with ``--json -`` the JSON goes to standard output and what the command
    prints to standard error, so that ``llmsim run --json - | jq .iteration_time_s`` works."""
    if getattr(args, "json", None) != STDOUT:
        return args.func(args)
    with json_to_stdout(), contextlib.redirect_stdout(sys.stderr):
        return args.func(args)


def _place(workload, topology: str | None, args: argparse.Namespace, notes: list[str]):
    """The workload on ``topology`` (None: its own), the GPU chosen by the one rule of
    :mod:`sim.topology.choice`."""
    from sim.topology.choice import gpu_given, place_workload

    return place_workload(workload, topology, notes, gpu_named=gpu_given(getattr(args, "set", None)))


def _slow_gpus(items: Sequence[str] | None) -> dict[int, float]:
    """``["5=1.2", ...]`` -> {5: 1.2}."""
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


def _load_workload(args: argparse.Namespace):
    """The workload of ``run`` and ``memory``: a workload file, or Megatron-LM launch arguments
    (``--megatron-args``, docs/megatron-args.md), whose unknown flags are also printed on stderr."""
    from sim.config import load_workload_with_notes

    if getattr(args, "megatron_args", None) is None:
        if getattr(args, "hf_config", None):
            raise ConfigError("<--hf-config>", "--hf-config", "--megatron-args beside it (a workload file names "
                              "its Hugging Face config in model.hf_config)", args.hf_config)
        return load_workload_with_notes(args.workload, args.set or (), args.case)
    from sim.config.megatron_args import UNKNOWN_NOTE, load_megatron_workload, read_megatron_args

    if args.workload or args.case:
        raise ConfigError("<--megatron-args>", "--megatron-args", "no workload file or --case beside it",
                          args.workload or args.case)
    text, source = read_megatron_args(args.megatron_args)
    workload, notes = load_megatron_workload(text, source=source, hf_config=args.hf_config,
                                             topology=getattr(args, "topology", None), overrides=args.set or ())
    for note in notes:
        if note.startswith(UNKNOWN_NOTE):
            print(f"llmsim: warning: {note}", file=sys.stderr)
    return workload, notes


def _add_megatron_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--megatron-args", metavar='"ARGS"|@FILE',
                   help="the workload as Megatron-LM launch arguments, or @FILE: a launch-script fragment "
                   "(torchrun ... pretrain_gpt.py --flag v ...); GPU type with --set system.gpu=NAME "
                   "(docs/megatron-args.md)")
    p.add_argument("--hf-config", metavar="PATH", help="with --megatron-args: a Hugging Face config.json giving "
                   "the model, or a shipped one's name (llmsim presets); model flags given beside it must agree")


def _cmd_run(args: argparse.Namespace) -> int:
    from sim.output.report import format_report, make_report
    from sim.runner import simulate

    _check_trace_dir(args.trace, args.trace_dir)
    _check_chakra(args)
    workload, notes = _load_workload(args)
    from sim.calibrate.calibration import topology_option

    placed = _place(workload, topology_option(args.calibration, args.topology, notes), args, notes)
    workload, topo = placed.workload, placed.topology
    run = simulate(workload, topo, full=args.full, notes=notes, slow_gpus=_slow_gpus(args.slow_gpu),
                   link_counters=LINK_COUNTERS if args.trace or args.trace_dir else 0, granularity=args.granularity)
    # this process ends with the command: the run's objects (acyclic, freed by reference
    # counting) stay out of the collector's later passes over the report and the trace
    # (gpt3-175b with --trace: 4.5-4.8 s without, 3.9-4.1 s with)
    gc.freeze()
    if args.trace_dir:
        from sim.output.trace_ranks import representative_note

        note = representative_note(run.result)
        if note:
            run.notes.append(note)
    report = make_report(run)
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


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from sim.calibrate.command import calibrate

    return calibrate(args.nccl_tests, args.topology, args.output)


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


def _methods(text: str | None):
    from sim.types import RecomputeKind, parse_enum

    if text is None:
        return list(RecomputeKind)
    out = []
    for item in text.split(","):
        m = parse_enum(RecomputeKind, item.strip(), "<--recompute>", "--recompute")
        if m not in out:
            out.append(m)
    return out


def _cmd_memory(args: argparse.Namespace) -> int:
    from sim.output.memory_report import format_memory, memory_json, memory_report

    workload, notes = _load_workload(args)
    methods = _methods(args.recompute)
    table = memory_report(workload, methods)
    print(format_memory(workload, table, notes))
    if args.json:
        write_json(args.json, memory_json(workload, table, notes))
    if args.plot:
        from sim.output.plot import plot_memory

        plot_memory(table, args.plot, f"{workload.name}: {workload.system.num_gpus} x {workload.system.gpu.name}, "
                    f"TP {workload.parallel.tp} PP {workload.parallel.pp} DP {workload.parallel.dp}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from sim.studies.validate import format_row, format_validation, validate

    def progress(rec, rows):
        if args.verbose:
            from tqdm import tqdm

            for r in rows:
                tqdm.write(format_row(r), file=sys.stderr)  # above the progress bar

    files = args.files or _shipped_cases()
    result = validate(files, progress, jobs=args.jobs, bar=True)
    print(format_validation(result))
    if args.json:
        write_json(args.json, result.to_dict())
    if args.markdown:
        from sim.studies.validate import update_markdown

        update_markdown(args.markdown, result, " ".join(["llmsim validate", *args.files, "--markdown", args.markdown]))
    return 0


def _shipped_cases() -> list[str]:
    """``llmsim validate`` with no files: every case file shipped in ``workloads/validation/``."""
    from sim.config.presets import preset_folder

    return [str(p) for p in sorted(preset_folder("workloads/validation").glob("*.yaml"))]


def _cmd_presets(args: argparse.Namespace) -> int:
    from sim.config.presets import PRESET_GROUPS, preset_root, presets

    found = presets()
    width = max(len(p.name) for p in found)
    print(f"llmsim presets, in {preset_root()}: a command takes a preset's name or a file's path; "
          "copy a file to edit it")
    for group, _folder, _suffix, used_by in PRESET_GROUPS:
        print(f"\n{group} ({used_by})")
        for p in (p for p in found if p.group == group):
            text = p.description if len(p.description) <= 90 else p.description[:87] + "..."
            print(f"  {p.name:<{width}}  {text}")
    if args.json:
        write_json(args.json, {"root": str(preset_root()), "presets": [p.to_dict() for p in found]})
    return 0


def _cmd_collective(args: argparse.Namespace) -> int:
    from sim.config import load_topology
    from sim.studies.collective import collective, parse_size_bytes
    from sim.types import CollectiveKind, parse_enum

    op = parse_enum(CollectiveKind, args.op, "<--op>", "--op")
    r = collective(load_topology(args.topology), op, parse_size_bytes(args.bytes), args.ranks, args.algo)
    print(f"llmsim collective: {r.op.value} of {r.size_bytes:,.0f} bytes over {r.ranks} GPUs of {r.topology}")
    print(f"  algorithm     {r.algorithm} ({r.phases} phase{'s' if r.phases != 1 else ''})")
    print(f"  time          {r.time_s * 1e6:,.1f} us")
    print(f"  algbw         {r.algbw_bytes_per_s / 1e9:,.2f} GB/s")
    print(f"  busbw         {r.busbw_bytes_per_s / 1e9:,.2f} GB/s  (nccl-tests' bus bandwidth)")
    if args.json:
        write_json(args.json, r.to_dict())
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from sim.config import load_workload_with_notes
    from sim.studies.compare import compare, format_compare

    workload, _notes = load_workload_with_notes(args.workload, args.set or (), args.case)
    notes: list[str] = []
    rows = compare([_place(workload, t, args, notes) for t in args.topology], full=args.full)
    print(format_compare(workload, rows, list(dict.fromkeys(notes))))
    if args.plot:
        from sim.output.plot import plot_compare

        gpus = " / ".join(dict.fromkeys(r.gpu for r in rows))
        plot_compare(rows, args.plot, f"{workload.name} on {workload.system.num_gpus} x {gpus}")
    if args.json:
        write_json(args.json, {"workload": workload.name, "num_gpus": workload.system.num_gpus,
                                "rows": [r.to_dict() for r in rows]})
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim.config import load_workload_with_notes
    from sim.config.space import load_space
    from sim.studies.sweep.core import Fidelity, sweep
    from sim.studies.sweep.report import format_sweep, sweep_json, write_sweep_csv

    workload, _notes = load_workload_with_notes(args.workload, args.set or (), args.case)
    notes: list[str] = []
    placed = _place(workload, args.topology, args, notes)
    workload, topo = placed.workload, placed.topology
    space = load_space(args.space) if args.space else None
    result = sweep(workload, topo, space, top=args.top, fidelity=Fidelity(args.fidelity), executor=args.executor,
                   workers=args.workers, progress=True, notes=notes, exhaustive=args.exhaustive)
    print(format_sweep(result))
    if args.json:
        write_json(args.json, sweep_json(result))
    if args.csv:
        write_sweep_csv(result, args.csv)
    if args.plot:
        from sim.output.plot import plot_sweep

        plot_sweep(result, args.plot, f"{workload.name} on {workload.system.num_gpus} x {workload.system.gpu.name}: "
                   f"{result.simulated} configurations")
    return 130 if result.interrupted else 0


def _cmd_whatif(args: argparse.Namespace) -> int:
    from sim.config import load_topology, load_workload_with_notes
    from sim.hardware import get_gpu
    from sim.studies.whatif.systems import (
        format_generations,
        format_nodes,
        generations,
        load_nodes_table,
        nodes,
        parse_dtype,
        parse_order,
        sweep_reoptimizer,
    )

    overrides = list(args.set or ())
    if args.study == "power":
        from sim.studies.whatif.power import format_power_caps, parse_limits, power_caps

        workload, _notes = load_workload_with_notes(args.workload, overrides, args.case)
        placed = _place(workload, None, args, [])
        workload, topo = placed.workload, placed.topology
        rated = workload.system.gpu.power.limit_w if workload.system.gpu.power else 0.0
        rows = power_caps(workload, topo, parse_limits(args.limits, rated))
        print(format_power_caps(rows, f"{workload.name} on {workload.system.num_gpus} x "
                                      f"{workload.system.gpu.name} under board power caps"))
        if args.json:
            write_json(args.json, {"workload": workload.name, "gpu": workload.system.gpu.name,
                                    "num_gpus": workload.system.num_gpus, "caps": [r.to_dict() for r in rows]})
        return 0
    if args.study == "generations":
        notes: list[str] = []
        src, from_topo = _generation_end(args.from_gpu, "--from", "A100", args.from_topology, notes)
        dst, to_topo = _generation_end(args.to_gpu, "--to", "B200", args.to_topology, notes)
        workload, _notes = load_workload_with_notes(args.workload, overrides + [f"system.gpu={src.name}"], args.case)
        g = generations(workload, dst, from_topo, to_topo, parse_order(args.order), parse_dtype(args.dtype),
                        sweep_reoptimizer() if args.reoptimize else None)
        print(format_generations(g))
        for note in notes:
            print(f"  note: {note}")
        if args.plot:
            from sim.output.plot import plot_generations

            plot_generations(g, args.plot)
        if args.json:
            write_json(args.json, g.to_dict())
        return 0
    table = load_nodes_table(args.table)
    workload, _notes = load_workload_with_notes(args.workload, overrides + [f"system.gpu={table['base_gpu']}"],
                                                args.case)
    node_list = None
    if args.nodes:
        try:
            node_list = [float(x) for x in args.nodes.split(",") if x.strip()]
        except ValueError:
            raise ConfigError("<--nodes>", "--nodes", "comma-separated node sizes in nm, e.g. 12,7,5", args.nodes) \
                from None
    scale = tuple(x.strip() for x in (args.scale or "logic,memory,network").split(",") if x.strip())
    rows = nodes(workload, table, load_topology(table["base_topology"]), get_gpu(table["base_gpu"]), node_list, scale)
    title = f"{workload.name} on {workload.system.num_gpus} x {table['base_gpu']}-class GPUs, scaling {','.join(scale)}"
    print(format_nodes(rows, title))
    if args.plot:
        from sim.output.plot import plot_nodes

        plot_nodes(rows, args.plot, title)
    if args.json:
        write_json(args.json, {"workload": workload.name, "base_gpu": table["base_gpu"],
                                "base_topology": table["base_topology"], "scale": list(scale),
                                "nodes": [r.to_dict() for r in rows]})
    return 0


def _generation_end(gpu: str | None, gpu_flag: str, gpu_default: str, topology: str | None, notes: list[str]):
    """One end of ``whatif generations``: its GPU and topology under :mod:`sim.topology.choice`'s
    rule (a topology option that fixes a GPU brings it unless the GPU option is given too)."""
    from sim.config import default_topology_name, load_topology
    from sim.hardware import get_gpu
    from sim.topology.choice import choose_gpu

    gpu_spec = _gpu_arg(gpu or gpu_default, gpu_flag)
    if topology is None:
        return gpu_spec, load_topology(default_topology_name(gpu_spec.name))
    topo = load_topology(topology)
    chosen, note = choose_gpu(gpu_spec.name, topo, topology_given=True, gpu_named=gpu is not None,
                              gpu_option=f"{gpu_flag} NAME", whose=f"{gpu_flag}'s")
    if note:
        notes.append(note)
    return get_gpu(chosen), topo


def _collective_ops_help() -> str:
    """``collective --op``'s help: every :class:`~sim.types.CollectiveKind`, the set it takes
    and its error lists (:func:`sim.types.parse_enum`)."""
    from sim.types import CollectiveKind

    return (f"one of {', '.join(k.value for k in CollectiveKind)} (default all-reduce); send-recv goes from "
            "GPU 0 to GPU N-1, ring-exchange from every GPU to the next at once (nccl-tests' sendrecv)")


def _gpu_arg(name: str, flag: str):
    from sim.hardware import get_gpu, gpu_names

    try:
        return get_gpu(name)
    except KeyError:
        raise ConfigError(f"<{flag}>", flag, f"one of {gpu_names()} (or A100, H100)", name) from None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="llmsim", description="Simulate distributed LLM training.")
    ap.add_argument("--version", action="version", version=f"llmsim {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
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
    run.add_argument("--calibration", metavar="FILE", help="apply a calibration file (llmsim calibrate) to the "
                     "topology: --topology's, else the one the file was calibrated on (docs/calibrate.md)")
    _add_megatron_options(run)
    run.set_defaults(func=_cmd_run)
    cal = sub.add_parser("calibrate", help="measured nccl-tests logs in, a calibration file out (run --calibration)",
                         description="Derive the topology's scale-up collective latency and efficiency curves from "
                         "nccl-tests output and write them, each with its source (docs/calibrate.md).")
    cal.add_argument("--nccl-tests", nargs="+", required=True, metavar="LOG", help="nccl-tests text output "
                     "(all_reduce_perf of one node calibrates; other logs are read and listed)")
    cal.add_argument("--topology", help="topology YAML or preset (default: the usual one of the logs' GPU)")
    cal.add_argument("-o", "--output", required=True, metavar="FILE", help="the calibration file to write (YAML)")
    cal.set_defaults(func=_cmd_calibrate)
    mem = sub.add_parser("memory", help="memory per GPU under each recomputation method",
                         description="Per pipeline stage: weights, gradients, optimizer state, activations "
                         "at the peak, other buffers, the GPU's capacity and the headroom.")
    mem.add_argument("workload", nargs="?", default=None, help="workload YAML or preset name")
    mem.add_argument("--recompute", metavar="METHODS",
                     help="comma-separated: none,selective,selective-op,full (default: all four)")
    mem.add_argument("--plot", metavar="PATH", help="draw stacked bars per method with the capacity line "
                     "(needs matplotlib: pip install 'llmsim[plot]')")
    mem.add_argument("--json", metavar="PATH", help="write the table as JSON")
    mem.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one workload field")
    mem.add_argument("--case", metavar="ID", help="the case to use from a file of several")
    _add_megatron_options(mem)
    mem.set_defaults(func=_cmd_memory)
    val = sub.add_parser("validate", help="simulate published, measured runs and score the predictions",
                         description="Reads validation-case files (format: workloads/validation/README.md), "
                         "simulates every case, prints a row per case and the MAPE lines.")
    val.add_argument("files", nargs="*", metavar="FILE", help="case files or names of the shipped ones, e.g. "
                     "korthikanti2022 (default: every shipped case, workloads/validation/*.yaml)")
    val.add_argument("--json", metavar="PATH", help="write the rows and MAPE figures as JSON")
    val.add_argument("--markdown", metavar="PATH", help="write the table into PATH (docs/validation.md), "
                     "replacing only its generated part")
    val.add_argument("--jobs", type=int, default=None, metavar="N",
                     help="simulate cases in N processes (default: the CPU count; 1 runs in this process; "
                     "the rows are the same)")
    val.add_argument("-v", "--verbose", action="store_true", help="print each row to stderr as it is scored")
    val.set_defaults(func=_cmd_validate)
    pre = sub.add_parser("presets", help="list the shipped workloads, topologies, models and validation cases",
                         description="List every preset llmsim ships, by group, with where it is installed: "
                         "commands take these names wherever they take a file.")
    pre.add_argument("--json", metavar="PATH", help="write the list as JSON")
    pre.set_defaults(func=_cmd_presets)
    col = sub.add_parser("collective", help="time one collective on a topology, as nccl-tests reports it",
                         description="One collective on GPUs 0..N-1 of a topology, alone on the network: "
                         "time, algbw = S/t and busbw (nccl-tests' definitions).")
    col.add_argument("--topology", default="dgx-h100", help="topology YAML or preset (default dgx-h100)")
    col.add_argument("--op", default="all-reduce", help=_collective_ops_help())
    col.add_argument("--bytes", default="1GiB", help="message size as nccl-tests counts it, e.g. 1GiB, 256MB")
    col.add_argument("--ranks", type=int, default=8, help="number of GPUs (default 8)")
    col.add_argument("--algo", default="auto",
                     help="auto (the fastest of NCCL's candidates, as NCCL's tuner picks), ring (one ring), "
                     "multi-ring (a ring per channel across nodes), tree (double binary tree, all-reduce), "
                     "nvls (NVLink SHARP, all-reduce in one NVSwitch domain), pat (all-gather/reduce-scatter, "
                     "one GPU per node), hierarchical (intra-node, inter-node, intra-node phases)")
    col.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    col.set_defaults(func=_cmd_collective)
    cmp = sub.add_parser("compare", help="the same workload on several topologies",
                         description="Simulate one workload on each topology given and print them side by side.")
    cmp.add_argument("workload", nargs="?", default=None, help="workload YAML or preset name")
    cmp.add_argument("--topology", action="append", required=True, metavar="TOPOLOGY",
                     help="topology YAML or preset (repeat for each; the first is the baseline)" + TOPOLOGY_GPU_HELP)
    cmp.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one workload field")
    cmp.add_argument("--case", metavar="ID", help="the case to use from a file of several")
    cmp.add_argument("--full", action="store_true", help="simulate every rank")
    cmp.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    cmp.add_argument("--plot", metavar="PATH", help="draw the time per topology as stacked bars "
                     "(needs matplotlib: pip install 'llmsim[plot]')")
    cmp.set_defaults(func=_cmd_compare)
    swp = sub.add_parser("sweep", help="search the parallel strategies for the fastest that fits",
                         description="Enumerate every valid parallel strategy of a space, prune those whose "
                         "closed-form memory exceeds the GPU, simulate the rest and rank them by iteration time.")
    swp.add_argument("workload", nargs="?", default=None, help="workload YAML or preset name (its model, GPUs, "
                     "batch and the settings the space leaves fixed)")
    swp.add_argument("--topology", help="topology YAML or preset name (default: the workload's)" + TOPOLOGY_GPU_HELP)
    swp.add_argument("--space", metavar="SPACE.yaml", help="lists of values per setting (tp, cp, pp, ep, "
                     "virtual_pipeline_stages, schedule, micro_batch_size, recompute, sequence_parallel, "
                     "zero_stage), or 'auto'; settings left out keep the workload's value (default: every "
                     "setting 'auto')")
    swp.add_argument("--top", type=int, default=10, metavar="N", help="how many of the fastest to print (default 10)")
    swp.add_argument("--executor", default="local", metavar="local|dask://HOST:PORT",
                     help="local processes (default), or a Dask scheduler (needs pip install 'llmsim[dask]')")
    swp.add_argument("--workers", type=int, default=None, metavar="N",
                     help="local worker processes (default: the CPU count; 1 runs in this process)")
    swp.add_argument("--fidelity", choices=["fast", "op"], default="fast",
                     help="fast (default): every configuration at chunk granularity, the top N again op by op; "
                     "op: every configuration op by op")
    swp.add_argument("--exhaustive", action="store_true",
                     help="simulate every configuration that fits (default: a branch and bound skips those a lower "
                     "bound on their iteration time shows cannot reach the top N; the top N are the same)")
    swp.add_argument("--csv", metavar="PATH", help="write every simulated configuration as CSV")
    swp.add_argument("--json", metavar="PATH", help="write the counts and the top configurations as JSON")
    swp.add_argument("--plot", metavar="PATH", help="draw tokens/s against peak memory with the Pareto front "
                     "(needs matplotlib: pip install 'llmsim[plot]')")
    swp.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one workload field")
    swp.add_argument("--case", metavar="ID", help="the case to use from a file of several")
    swp.set_defaults(func=_cmd_sweep)
    wif = sub.add_parser("whatif", help="what-if studies: GPU generations, technology nodes, power caps",
                         description="Move a workload from one GPU system to another one factor at a time "
                         "(generations), onto hypothetical GPUs of each technology node (nodes), or under "
                         "several board power caps (power).")
    wsub = wif.add_subparsers(dest="study", metavar="STUDY", required=True)
    gen = wsub.add_parser("generations", help="the speed-up from one GPU system to another, factor by factor",
                          description="Move the workload from one GPU system to another one factor at a time "
                          "(compute, number format, HBM bandwidth, HBM capacity, NVLink, network), simulate after "
                          "each swap and print each factor's speed-up; the factors multiply to the end-to-end "
                          "speed-up (sim/studies/whatif/systems.py).")
    gen.add_argument("workload", nargs="?", default=None, help="workload YAML or preset name")
    gen.add_argument("--from", dest="from_gpu", help="the GPU it starts on (default: --from-topology's GPU when "
                     "that topology fixes one, else A100)")
    gen.add_argument("--to", dest="to_gpu", help="the GPU it ends on (default: --to-topology's GPU when that "
                     "topology fixes one, else B200)")
    gen.add_argument("--from-topology", help="topology of the first system (default: the GPU's usual one); one "
                     "that fixes its GPU (topologies/dgx-b200.yaml: gpu: B200) brings it unless --from is given")
    gen.add_argument("--to-topology", help="topology of the second system (default: the GPU's usual one); one "
                     "that fixes its GPU brings it unless --to is given")
    gen.add_argument("--dtype", help=f"number format on the second system: {dtype_names(SIMULATED_DTYPES)} (the "
                     "'format' factor; default: the workload's)")
    gen.add_argument("--order", help="the factors in the order applied (default "
                     "compute,format,hbm-bandwidth,hbm-capacity,nvlink,network)")
    gen.add_argument("--reoptimize", action="store_true", help="search pipeline depth, interleaving, micro-batch "
                     "and recomputation again for every state (llmsim sweep's search), so each runs its best layout")
    nod = wsub.add_parser("nodes", help="hypothetical GPUs per technology node and where the time goes",
                          description="Scale the base GPU and its links by each technology node's factors "
                          "(topologies/technology-nodes.yaml: logic, HBM, network), simulate the workload on each "
                          "hypothetical system and print the time, its breakdown and the bottleneck.")
    nod.add_argument("workload", nargs="?", default=None, help="workload YAML or preset name")
    nod.add_argument("--nodes", help="which nodes of the table, e.g. 12,7,5,3,2,1 (default: all)")
    nod.add_argument("--scale", help="what to scale: a subset of logic,memory,network (default: all three)")
    nod.add_argument("--table", help="technology-scaling YAML (default topologies/technology-nodes.yaml)")
    pwr = wsub.add_parser("power", help="the same job under several board power caps (Hopper GPUs)",
                          description="Simulate the workload under each board power cap (as nvidia-smi -pl sets "
                          "it): the SM clock the kernels hold, iteration time, tokens/s, mean power, energy per "
                          "iteration and tokens per joule; needs a GPU whose power behaviour is measured (H100, "
                          "H200).")
    pwr.add_argument("workload", nargs="?", default=None, help="workload YAML or preset name")
    pwr.add_argument("--limits", help="caps in watts, e.g. 400,500,600,700 (default: 60-100%% of the GPU's limit)")
    pwr.add_argument("--json", metavar="PATH", help="write the same numbers as JSON")
    pwr.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one workload field")
    pwr.add_argument("--case", metavar="ID", help="the case to use from a file of several")
    pwr.set_defaults(func=_cmd_whatif)
    for p in (gen, nod):
        p.add_argument("--plot", metavar="PATH", help="draw the figure (needs matplotlib)")
        p.add_argument("--json", metavar="PATH", help="write the same numbers as JSON")
        p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one workload field")
        p.add_argument("--case", metavar="ID", help="the case to use from a file of several")
        p.set_defaults(func=_cmd_whatif)
    from sim.inference.commands import add_commands, add_whatif_memory

    add_whatif_memory(wsub)
    add_commands(sub)
    _note_json_stdout(ap)
    _add_budget_option(sub, ("run", "compare", "sweep", "collective", "validate", "infer", "validate-infer"))
    _add_budget_option(wsub, ("generations", "nodes", "power"))
    return ap


def _add_budget_option(sub, names: Sequence[str]) -> None:
    """``--max-memory-gib`` on the commands that simulate (:mod:`sim.budget`)."""
    for name in names:
        sub.choices[name].add_argument(
            "--max-memory-gib", type=float, metavar="GIB",
            help="the memory one simulation may take: a job whose estimate (tasks, topology) exceeds it stops "
            "before it is built, with the estimate (default: half of the memory this process may use)")


def _note_json_stdout(parser: argparse.ArgumentParser) -> None:
    """Add to every command's ``--json`` help what ``-`` does (:func:`_run_command`)."""
    for action in parser._actions:
        if "--json" in action.option_strings:
            action.help = f"{action.help} (- writes it to standard output, the printed report to stderr)"
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):  # a command's subcommands
            for child in choices.values():
                if isinstance(child, argparse.ArgumentParser):
                    _note_json_stdout(child)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    ap = _parser()
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        ap.print_help()
        return 2
    try:
        check_output_paths(args)  # before any work: a mistyped --json is not found minutes later
        with memory_budget(getattr(args, "max_memory_gib", None)):
            return _run_command(args)
    except (ConfigError, NotBuiltError) as e:
        print(f"llmsim: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except SimError as e:
        print(f"llmsim: error: {_one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT (128 + 2)
        _ignore_sigint()  # a second Ctrl-C while the line is written does not print a traceback
        print("llmsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `llmsim run | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- keep the interpreter's flush quiet
        return 0
    except OSError as e:
        print(f"llmsim: error: {_one_line(_os_error(e))}", file=sys.stderr)
        return 2


MESSAGE_CHARS = 2000
"""The longest error line printed (each part of a message is cut already: :mod:`sim.errors`)."""


def _one_line(error: object) -> str:
    """An error message on one line of at most :data:`MESSAGE_CHARS` characters."""
    return clip(str(error), MESSAGE_CHARS)


def _ignore_sigint() -> None:
    """Ignore further Ctrl-C from here to the exit (the main thread only can set it)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _os_error(e: OSError) -> str:
    """What the operating system refused, in one line: ``PATH: reason`` when it names a path,
    the reason alone otherwise, never an empty field.

    >>> _os_error(OSError(28, "No space left on device", "out/report.json"))
    'out/report.json: No space left on device'
    >>> _os_error(TimeoutError("Timed out")), _os_error(OSError())
    ('Timed out', 'OSError')
    """
    reason = e.strerror or str(e) or type(e).__name__
    paths = [clip(str(p), 1000) for p in (e.filename, e.filename2) if p not in (None, "")]
    return ": ".join([" -> ".join(paths), reason] if paths else [reason])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
