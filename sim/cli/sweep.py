"""``llmsim sweep``: search a space of parallel strategies for the fastest that fits.

::

    llmsim sweep [WORKLOAD.yaml] [--topology T] [--space SPACE.yaml] [--top N] [--executor local|dask://HOST:PORT]
                 [--workers N] [--csv PATH] [--json PATH] [--plot PATH] [--fidelity fast|op] [--exhaustive]
                 [--calibration FILE]

Ctrl-C prints what had finished and exits with status 130.
"""

from __future__ import annotations

import argparse
import sys

from sim.cli.io import TOPOLOGY_GPU_HELP, add_budget_option, add_calibration_option, calibration, place
from sim.output.json_output import write_json

__all__ = ["register"]


def register(sub) -> None:
    """Add ``sweep`` to ``llmsim``'s subcommands."""
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
    add_calibration_option(swp, "its scale_up values to the topology (--topology's, else the one the file was "
                           "calibrated on), its factors to every configuration's simulation; the ties from its runs' "
                           "left-out residuals where it has five or more")
    swp.set_defaults(func=_cmd_sweep)
    add_budget_option(swp)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim.config import load_workload_with_notes
    from sim.config.space import load_space
    from sim.studies.sweep.core import Fidelity, sweep
    from sim.studies.sweep.report import format_sweep, sweep_json, write_sweep_csv

    workload, _notes = load_workload_with_notes(args.workload, args.set or (), args.case)
    notes: list[str] = []
    topology, factors = calibration(args, args.topology, notes)
    placed = place(workload, topology, args, notes)
    workload, topo = placed.workload, placed.topology
    space = load_space(args.space) if args.space else None
    result = sweep(workload, topo, space, top=args.top, fidelity=Fidelity(args.fidelity), executor=args.executor,
                   workers=args.workers, progress=True, notes=notes, exhaustive=args.exhaustive,
                   factors=factors)
    from sim.cli.io import workload_stack_name
    from sim.studies.intervals import calibration_band, run_band

    own = None
    if args.calibration is not None:
        from sim.calibrate.calibration import load_calibration

        own = calibration_band(load_calibration(args.calibration).runs, args.calibration)
    result.interval = own or run_band(workload_stack_name(args), workload.system.gpu.generation)
    print(format_sweep(result))
    if args.json:
        write_json(args.json, sweep_json(result))
    if args.csv:
        write_sweep_csv(result, args.csv)
    if args.plot:
        from sim.output.plot import plot_sweep

        plot_sweep(result, args.plot, f"{workload.name} on {workload.system.num_gpus} x {workload.system.gpu.name}: "
                   f"{result.simulated} configurations")
    if result.interrupted:
        return 130
    if not result.top and result.tried and result.invalid == result.tried:
        why = ", ".join(f"{k} ({v:,})" for k, v in sorted(result.invalid_reasons.items(), key=lambda kv: -kv[1]))
        print(f"llmsim sweep: error: {args.space or 'the default space'}: expected a space with at least one valid "
              f"configuration (got {result.tried:,}, each rejected by its spec: {why})", file=sys.stderr)
        return 2
    return 0
