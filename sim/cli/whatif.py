"""``llmsim whatif``: a workload moved to other systems, one study per subcommand.

::

    llmsim whatif generations [WORKLOAD.yaml] --from A100 --to B200 [--dtype fp8] [--order F,...] [--reoptimize]
                 [--from-topology T] [--to-topology T] [--plot PATH] [--json PATH] [--calibration FILE]
    llmsim whatif nodes [WORKLOAD.yaml] [--nodes 12,7,5,3,2,1] [--scale logic,memory,network] [--table PATH]
                 [--plot PATH] [--json PATH]
    llmsim whatif power [WORKLOAD.yaml] [--limits 400,500,600,700] [--json PATH]
    llmsim whatif memory [MODEL] --gpu H100-SXM5-80GB --hbm HBM2e,HBM3,HBM3e,HBM4 [--plot PATH] [--json PATH]

``memory`` is an inference study, registered by :mod:`sim.cli.inference`; the studies
themselves are :mod:`sim.studies.whatif` and :mod:`sim.inference.hbm`.
"""

from __future__ import annotations

import argparse

from sim.cli.io import add_budget_option, add_calibration_option, calibration, place
from sim.config.fields import comma_items
from sim.errors import ConfigError
from sim.output.json_output import write_json
from sim.types import SIMULATED_DTYPES, dtype_names

__all__ = ["register"]


def register(sub) -> None:
    """Add ``whatif`` and its studies to ``llmsim``'s subcommands."""
    from sim.cli.inference import register_whatif_memory

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
    add_calibration_option(gen, "its scale_up values to the first system's topology (--from-topology's, else the one "
                           "the file was calibrated on; the second keeps its own), its factors to every state (the "
                           "measured software's efficiency, carried to the new system)")
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
    for p in (gen, nod, pwr):
        add_budget_option(p)
    register_whatif_memory(wsub)


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
        placed = place(workload, None, args, [])
        workload, topo = placed.workload, placed.topology
        rated = workload.system.gpu.power.limit_w if workload.system.gpu.power else 0.0
        try:
            rows = power_caps(workload, topo, parse_limits(args.limits, rated))
        except ConfigError as exc:
            if exc.path != "<whatif power>":
                raise
            raise ConfigError(str(args.workload), exc.field, exc.expected, exc.got) from None  # the workload's GPU
        print(format_power_caps(rows, f"{workload.name} on {workload.system.num_gpus} x "
                                      f"{workload.system.gpu.name} under board power caps"))
        if args.json:
            write_json(args.json, {"workload": workload.name, "gpu": workload.system.gpu.name,
                                    "num_gpus": workload.system.num_gpus, "caps": [r.to_dict() for r in rows]})
        return 0
    if args.study == "generations":
        notes: list[str] = []
        from_arg, factors = calibration(args, args.from_topology, notes)
        src, from_topo = _generation_end(args.from_gpu, "--from", "A100", from_arg, notes)
        dst, to_topo = _generation_end(args.to_gpu, "--to", "B200", args.to_topology, notes)
        workload, _notes = load_workload_with_notes(args.workload, overrides + [f"system.gpu={src.name}"], args.case)
        g = generations(workload, dst, from_topo, to_topo, parse_order(args.order), parse_dtype(args.dtype),
                        sweep_reoptimizer(factors=factors) if args.reoptimize else None, factors)
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
    if args.nodes is not None:
        expected = "comma-separated node sizes in nm, e.g. 12,7,5"
        items = comma_items(args.nodes, "--nodes", expected)
        try:
            node_list = [float(x) for x in items]
        except ValueError:
            raise ConfigError("<--nodes>", "--nodes", expected, args.nodes) from None
    scale = comma_items(args.scale if args.scale is not None else "logic,memory,network", "--scale",
                        "comma-separated parts to scale: logic, memory, network")
    node_rows = nodes(workload, table, load_topology(table["base_topology"]), get_gpu(table["base_gpu"]), node_list,
                      scale)
    title = f"{workload.name} on {workload.system.num_gpus} x {table['base_gpu']}-class GPUs, scaling {','.join(scale)}"
    print(format_nodes(node_rows, title))
    if args.plot:
        from sim.output.plot import plot_nodes

        plot_nodes(node_rows, args.plot, title)
    if args.json:
        write_json(args.json, {"workload": workload.name, "base_gpu": table["base_gpu"],
                                "base_topology": table["base_topology"], "scale": list(scale),
                                "nodes": [r.to_dict() for r in node_rows]})
    return 0


def _generation_end(gpu: str | None, gpu_flag: str, gpu_default: str, topology, notes: list[str]):
    """One end of ``whatif generations``: its GPU and topology (``topology``: a name, a file, a
    calibrated spec or None) under :mod:`sim.topology.choice`'s rule (a topology option that fixes
    a GPU brings it unless the GPU option is given too)."""
    from sim.config import default_topology_name, load_topology
    from sim.hardware import get_gpu
    from sim.topology.choice import choose_gpu
    from sim.topology.spec import TopologySpec

    gpu_spec = _gpu_arg(gpu_default if gpu is None else gpu, gpu_flag)
    if topology is None:
        return gpu_spec, load_topology(default_topology_name(gpu_spec.name))
    topo = topology if isinstance(topology, TopologySpec) else load_topology(topology)
    chosen, note = choose_gpu(gpu_spec.name, topo, topology_given=True, gpu_named=gpu is not None,
                              gpu_option=f"{gpu_flag} NAME", whose=f"{gpu_flag}'s")
    if note:
        notes.append(note)
    return get_gpu(chosen), topo


def _gpu_arg(name: str, flag: str):
    """The GPU ``flag`` names, or one line listing the catalogue's."""
    from sim.hardware import get_gpu, gpu_names

    try:
        return get_gpu(name)
    except KeyError:
        raise ConfigError(f"<{flag}>", flag, f"one of {gpu_names()} (or A100, H100)", name) from None
