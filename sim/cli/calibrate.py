"""``llmsim calibrate``: measured nccl-tests logs, kernel times and runs in, a calibration file out
(:mod:`sim.calibrate`; ``llmsim run --calibration FILE`` applies it).

::

    llmsim calibrate [--nccl-tests LOG [LOG ...]] [--topology T] [--kernels FILE [--gpu NAME]]
                     [--runs FILE [FILE ...] [--fit LIST] [--no-prior]] -o FILE
"""

from __future__ import annotations

import argparse

from sim.errors import ConfigError

__all__ = ["register"]


def register(sub) -> None:
    """Add ``calibrate`` to ``llmsim``'s subcommands."""
    cal = sub.add_parser("calibrate", help="measured nccl-tests logs, kernel times and runs in, a calibration file "
                         "out (run --calibration)",
                         description="Derive the topology's collective latency and efficiency curves from "
                         "nccl-tests output and the GPU's GEMM and attention efficiency curves from measured kernel "
                         "times, fit the cost model's factors to measured runs, and write them, each with its source "
                         "(docs/calibrate.md).")
    cal.add_argument("--nccl-tests", nargs="+", metavar="LOG", help="nccl-tests text output "
                     "(the first all_reduce_perf log of one node calibrates the scale-up, across nodes the "
                     "scale-out; with none, an all_gather, reduce_scatter, alltoall or sendrecv log in that order; "
                     "the others are checks)")
    cal.add_argument("--topology", help="topology YAML or preset the logs calibrate (default: the usual one of the "
                     "logs' GPU)")
    cal.add_argument("--kernels", metavar="FILE", help="measured kernel times: a CSV table (kind, m, n, k, batch, "
                     "dtype, time_us; attention rows ...; benchmarks/device/measure_kernels.py writes one) or a "
                     "PyTorch profiler trace recorded with record_shapes=True (its GEMMs)")
    cal.add_argument("--gpu", metavar="NAME", help="the GPU --kernels was measured on (default: --topology's GPU, else "
                     "the nccl-tests logs', else the table's device)")
    cal.add_argument("--runs", nargs="+", metavar="FILE", help="measured runs: workload files with targets "
                     "(iteration_time_s, tflops_per_gpu or tokens_per_s_per_gpu), as the validation cases")
    cal.add_argument("--fit", metavar="LIST", help="the factors to fit to --runs, of compute,comm,host (default: "
                     "compute with one run, compute,comm with several)")
    cal.add_argument("--no-prior", dest="prior", action="store_false", help="keep the factors fitted to --runs as "
                     "they are (default: moved toward the catalogue as far as the validation residuals say one "
                     "cluster's runs share their errors; docs/calibrate.md)")
    cal.add_argument("-o", "--output", required=True, metavar="FILE", help="the calibration file to write (YAML)")
    cal.set_defaults(func=_cmd_calibrate)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from sim.calibrate.command import calibrate
    from sim.calibrate.runs import parse_fit

    if args.fit is not None and not args.runs:
        raise ConfigError("<--fit>", "--fit", "--runs FILE ... (the runs the factors are fitted to)", args.fit)
    if not args.prior and not args.runs:
        raise ConfigError("<--no-prior>", "--no-prior", "--runs FILE ... (the runs the factors are fitted to)", False)
    if args.gpu is not None and not args.kernels:
        raise ConfigError("<--gpu>", "--gpu", "--kernels FILE (the kernel times measured on that GPU)", args.gpu)
    return calibrate(args.nccl_tests, args.topology, args.output, args.runs, parse_fit(args.fit), args.kernels,
                     args.gpu, args.prior)
