"""``llmsim collective``: one collective on a topology, timed as nccl-tests reports it.

::

    llmsim collective --topology T --op all-reduce --bytes 1GiB --ranks 8
                      [--algo auto|ring|multi-ring|tree|nvls|nvls-tree|pat|hierarchical] [--json PATH]
"""

from __future__ import annotations

import argparse

from sim.cli.io import add_budget_option
from sim.output.json_output import write_json

__all__ = ["register"]


def register(sub) -> None:
    """Add ``collective`` to ``llmsim``'s subcommands."""
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
                     "nvls (NVLink SHARP, all-reduce in one NVSwitch domain), nvls-tree (NVLink SHARP in each "
                     "domain, a tree across them, all-reduce), pat (all-gather/reduce-scatter, "
                     "one GPU per node), hierarchical (intra-node, inter-node, intra-node phases)")
    col.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    col.set_defaults(func=_cmd_collective)
    add_budget_option(col)


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


def _collective_ops_help() -> str:
    """``collective --op``'s help: every :class:`~sim.types.CollectiveKind`, the set it takes
    and its error lists (:func:`sim.types.parse_enum`)."""
    from sim.types import CollectiveKind

    return (f"one of {', '.join(k.value for k in CollectiveKind)} (default all-reduce); send-recv goes from "
            "GPU 0 to GPU N-1, ring-exchange from every GPU to the next at once (nccl-tests' sendrecv)")
