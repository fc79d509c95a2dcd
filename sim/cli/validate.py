"""``llmsim validate``: simulate published, measured training runs and score the predictions.

::

    llmsim validate [FILE...] [--json PATH] [--markdown PATH] [--jobs N] [-v]

The inference cases have their own command, ``validate-infer`` (:mod:`sim.cli.inference`).
"""

from __future__ import annotations

import argparse
import sys

from sim.cli.io import add_budget_option
from sim.output.json_output import write_json

__all__ = ["register"]


def register(sub) -> None:
    """Add ``validate`` to ``llmsim``'s subcommands."""
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
    add_budget_option(val)


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

        command = " ".join(["llmsim validate", *args.files, "--markdown", args.markdown])
        update_markdown(args.markdown, result, command)
        _write_intervals(args, result, command)
    return 0


def _write_intervals(args: argparse.Namespace, result, command: str) -> None:
    """``--markdown``: the interval coverage section beside the table (:mod:`sim.studies.intervals`)
    and, over every shipped case, the shipped interval table ``llmsim run`` reads."""
    from sim.studies.intervals import (
        build_table,
        coverage,
        residuals,
        shipped_path,
        update_coverage_markdown,
        write_table,
    )

    rows = residuals([r.to_dict() for r in result.rows])
    if not rows:
        return
    update_coverage_markdown(args.markdown, coverage(rows), command)
    if not args.files:
        written_by = command + (f" --json {args.json}" if args.json else "")
        write_table(shipped_path(), build_table(rows, command=written_by, validation=args.json or "(none written)"))
        print(f"intervals: {len(rows)} rows -> {shipped_path()}", file=sys.stderr)


def _shipped_cases() -> list[str]:
    """``llmsim validate`` with no files: every case file shipped in ``workloads/validation/``."""
    from sim.config.presets import preset_folder

    return [str(p) for p in sorted(preset_folder("workloads/validation").glob("*.yaml"))]
