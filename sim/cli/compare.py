"""``llmsim compare``: the same workload on several topologies, side by side.

::

    llmsim compare [WORKLOAD.yaml] --topology A --topology B [...] [--full] [--json PATH] [--plot PATH]
                   [--calibration FILE]

Each topology brings its GPU when its file fixes one (:mod:`sim.topology.choice`, through
:func:`sim.cli.io.place`).
"""

from __future__ import annotations

import argparse

from sim.cli.io import TOPOLOGY_GPU_HELP, add_budget_option, add_calibration_option, calibration, place
from sim.output.json_output import write_json

__all__ = ["register"]


def register(sub) -> None:
    """Add ``compare`` to ``llmsim``'s subcommands."""
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
    add_calibration_option(cmp, "its scale_up values to every --topology (each must have the scale-up bandwidth "
                           "the file was calibrated on), its factors to every row")
    cmp.set_defaults(func=_cmd_compare)
    add_budget_option(cmp)


def _cmd_compare(args: argparse.Namespace) -> int:
    from sim.config import load_workload_with_notes
    from sim.studies.compare import compare, format_compare

    workload, _notes = load_workload_with_notes(args.workload, args.set or (), args.case)
    notes: list[str] = []
    placed, factors = [], None
    for t in args.topology:
        topology, factors = calibration(args, t, notes)
        placed.append(place(workload, topology, args, notes))
    rows = compare(placed, full=args.full, factors=factors)
    print(format_compare(workload, rows, list(dict.fromkeys(notes))))
    if args.plot:
        from sim.output.plot import plot_compare

        gpus = " / ".join(dict.fromkeys(r.gpu for r in rows))
        plot_compare(rows, args.plot, f"{workload.name} on {workload.system.num_gpus} x {gpus}")
    if args.json:
        write_json(args.json, {"workload": workload.name, "num_gpus": workload.system.num_gpus,
                                "rows": [r.to_dict() for r in rows]})
    return 0
