"""``llmsim calibrate``: measured nccl-tests logs in, a calibration file out
(:mod:`sim.calibrate`; ``llmsim run --calibration FILE`` applies it).

::

    llmsim calibrate --nccl-tests LOG [LOG ...] [--topology T] -o FILE
"""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(sub) -> None:
    """Add ``calibrate`` to ``llmsim``'s subcommands."""
    cal = sub.add_parser("calibrate", help="measured nccl-tests logs in, a calibration file out (run --calibration)",
                         description="Derive the topology's scale-up collective latency and efficiency curves from "
                         "nccl-tests output and write them, each with its source (docs/calibrate.md).")
    cal.add_argument("--nccl-tests", nargs="+", required=True, metavar="LOG", help="nccl-tests text output "
                     "(all_reduce_perf of one node calibrates; other logs are read and listed)")
    cal.add_argument("--topology", help="topology YAML or preset (default: the usual one of the logs' GPU)")
    cal.add_argument("-o", "--output", required=True, metavar="FILE", help="the calibration file to write (YAML)")
    cal.set_defaults(func=_cmd_calibrate)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from sim.calibrate.command import calibrate

    return calibrate(args.nccl_tests, args.topology, args.output)
