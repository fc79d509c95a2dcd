"""The ``llmsim`` command line.

::

    llmsim run [WORKLOAD.yaml] [--case ID] [--topology T] [--trace PATH] [--json PATH] [--set KEY=VALUE ...] [--full]
               [--slow-gpu RANK=FACTOR ...] [--granularity op|layer] [--trace-dir DIR] [--html PATH] [--chakra DIR]
    llmsim run --megatron-args "ARGS"|@FILE [--hf-config config.json] [--set system.gpu=NAME] [run options]
               [--calibration FILE]
    llmsim calibrate --nccl-tests LOG [LOG ...] [--topology T] -o FILE
    llmsim memory [WORKLOAD.yaml] [--recompute none,selective,selective-op,full] [--plot PATH] [--json PATH]
    llmsim validate [FILE...] [--json PATH]
    llmsim presets [--json PATH]
    llmsim collective --topology T --op all-reduce --bytes 1GiB --ranks 8
                 [--algo auto|ring|multi-ring|tree|nvls|nvls-tree|pat|hierarchical] [--json PATH]
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
                 [--trace PATH] [--json PATH]          (inference: sim/cli/inference.py, docs/inference.md)
    llmsim roofline [MODEL] --gpu A100-SXM4-80GB,H100-SXM5-80GB,B200 --phase prefill,decode [--plot PATH]
    llmsim validate-infer [FILE] [--json PATH]

Bad input prints one line naming the file, the field, what was expected and what arrived,
and exits with status 2; it never prints a traceback. Ctrl-C prints ``llmsim: interrupted``
and exits with status 130 (``sweep`` first prints what had finished). ``--json -`` writes the
JSON to standard output and what the command prints to standard error. A topology given on
the command line that fixes its GPU brings it (:mod:`sim.topology.choice`).

This module builds the parser from each command's ``register`` (:data:`COMMANDS`, then
:mod:`sim.cli.inference`), runs the command chosen and turns what went wrong into one line and
an exit status; :mod:`sim.cli.io` holds what the commands share.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from sim.budget import memory_budget
from sim.cli import calibrate, collective, compare, memory, presets, run, sweep, validate, whatif
from sim.cli.io import note_json_stdout, run_command
from sim.errors import ConfigError, NotBuiltError, SimError, clip
from sim.inputs import writing_to
from sim.output.paths import check_output_paths
from sim.version import __version__

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS = (run, calibrate, memory, validate, presets, collective, compare, sweep, whatif)
"""The training commands' modules, in the order ``llmsim --help`` lists them; each has
``register(subparsers)``. The inference commands follow (:mod:`sim.cli.inference`)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, as llmsim's others are (``llmsim run:
    error: argument --tp: invalid int value: '2.5' (llmsim run --help lists the options)``), not
    argparse's usage block; the subcommands' parsers are of this class too."""

    def error(self, message: str):  # type: ignore[override]
        print(f"{self.prog}: error: {message} ({self.prog} --help lists the options)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """``llmsim``'s parser: every command's options, each ``--json`` noting what ``-`` does."""
    from sim.cli import inference

    ap = _Parser(prog="llmsim", description="Simulate distributed LLM training.")
    ap.add_argument("--version", action="version", version=f"llmsim {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for command in (*COMMANDS, inference):
        command.register(sub)
    note_json_stdout(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    ap = build_parser()
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        ap.print_help()
        return 2
    outputs: list[tuple[str, str]] = []
    try:
        outputs = check_output_paths(args)  # before any work: a mistyped --json is not found minutes later
        with memory_budget(getattr(args, "max_memory_gib", None)), writing_to(outputs):
            return run_command(args)
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
        print(f"llmsim: error: {_one_line(_os_error(e, outputs))}", file=sys.stderr)
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


def _os_error(e: OSError, outputs: Sequence[tuple[str, str]] = ()) -> str:
    """What the operating system refused, in one line: ``PATH: reason`` when it names a path,
    the reason alone otherwise, never an empty field; ``OPTION PATH: reason`` when the path is
    one of ``outputs`` (``(option, path)``) or inside an output folder.

    >>> _os_error(OSError(28, "No space left on device", "out/report.json"))
    'out/report.json: No space left on device'
    >>> _os_error(OSError(2, "No such file or directory", "/proc/x.json"), [("--trace", "/proc/x.json")])
    '--trace /proc/x.json: No such file or directory'
    >>> _os_error(TimeoutError("Timed out")), _os_error(OSError())
    ('Timed out', 'OSError')
    """
    reason = e.strerror or str(e) or type(e).__name__
    paths = [clip(str(p), 1000) for p in (e.filename, e.filename2) if p not in (None, "")]
    if paths and isinstance(e.filename, (str, os.PathLike)):
        failed = Path(os.path.abspath(e.filename))
        option = next((o for o, out in outputs if failed == Path(os.path.abspath(out))
                       or Path(os.path.abspath(out)) in failed.parents), None)
        if option is not None:
            paths[0] = f"{option} {paths[0]}"
    return ": ".join([" -> ".join(paths), reason] if paths else [reason])

