"""``llmsim memory``: the closed-form memory per GPU under each recomputation method.

::

    llmsim memory [WORKLOAD.yaml] [--recompute none,selective,selective-op,full] [--plot PATH] [--json PATH]
    llmsim memory --megatron-args "ARGS"|@FILE [--hf-config config.json] [memory options]
"""

from __future__ import annotations

import argparse

from sim.cli.io import add_megatron_options, load_workload
from sim.output.json_output import write_json

__all__ = ["register"]


def register(sub) -> None:
    """Add ``memory`` to ``llmsim``'s subcommands."""
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
    add_megatron_options(mem)
    mem.set_defaults(func=_cmd_memory)


def _cmd_memory(args: argparse.Namespace) -> int:
    from sim.output.memory_report import format_memory, memory_json, memory_report

    workload, notes = load_workload(args)
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


def _methods(text: str | None):
    """``--recompute``'s methods, in the order given, each once (default: every one)."""
    from sim.types import RecomputeKind, parse_enum

    if text is None:
        return list(RecomputeKind)
    out = []
    for item in text.split(","):
        m = parse_enum(RecomputeKind, item.strip(), "<--recompute>", "--recompute")
        if m not in out:
            out.append(m)
    return out
