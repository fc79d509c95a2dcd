"""``llmsim validate``: simulate published, measured training runs and score the predictions.

::

    llmsim validate [FILE...] [--json PATH] [--markdown PATH] [--jobs N] [-v] [--calibration FILE]

The inference cases have their own command, ``validate-infer`` (:mod:`sim.cli.inference`).
"""

from __future__ import annotations

import argparse
import sys

from sim.cli.io import add_budget_option, add_calibration_option
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
    add_calibration_option(val, "its factors to every case, its scale_up values to the cases on the topology it "
                           "calibrated, to score it on held-out runs (not with --markdown)")
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
    _each_file_once(files)
    notes: list[str] = []
    calibration = _case_calibration(args, notes)
    result = validate(files, progress, jobs=args.jobs, bar=True, calibration=calibration)
    print(format_validation(result))
    for note in notes:
        print(f"  note: {note}")
    if args.json:
        out = result.to_dict()
        if args.calibration:
            out["calibration"] = args.calibration
        write_json(args.json, out)
    if args.markdown:
        from sim.studies.validate import update_markdown

        command = " ".join(["llmsim validate", *args.files, "--markdown", args.markdown])
        update_markdown(args.markdown, result, command)
        _write_intervals(args, result, command)
    return _skipped_status(result)


def _each_file_once(files: list[str]) -> None:
    """Refuse a case file given twice (its rows would count twice in the MAPE)."""
    from sim.config.presets import resolve_preset
    from sim.errors import ConfigError

    seen: dict[str, str] = {}
    for f in files:
        try:
            key = str(resolve_preset(f, "workloads/validation", "workloads").resolve())
        except ConfigError:
            continue  # validate names the file it cannot read
        if key in seen:
            raise ConfigError("<FILE>", "FILE", f"each case file once ({seen[key]!r} names the same file)", f)
        seen[key] = f


def _skipped_status(result) -> int:
    """0 when every case was simulated; else one line naming the first case not simulated (its
    file, id and reason) and status 2: a case file that holds a case llmsim cannot read is bad
    input, even though the table above scores the others."""
    ids = {r.id for r in result.rows}
    if not ids:
        print("llmsim: error: the case files hold no cases: expected one or more measured runs", file=sys.stderr)
        return 2
    skipped = [r for r in result.rows if r.skipped is not None]
    if not skipped:
        return 0
    first = skipped[0]
    print(f"llmsim: error: {first.file}: {first.id}: not simulated: {first.skipped} "
          f"({len({r.id for r in skipped})} of {len(ids)} cases skipped; the table gives each reason)",
          file=sys.stderr)
    return 2


def _case_calibration(args: argparse.Namespace, notes: list[str]):
    """``--calibration FILE`` as :class:`sim.studies.validate.CaseCalibration` (None without it),
    what it sets noted; refused beside ``--markdown``, whose tables and shipped intervals are
    the uncalibrated model's."""
    if args.calibration is None:
        return None
    from sim.errors import ConfigError

    if args.markdown:
        raise ConfigError("<--calibration>", "--calibration", "no --markdown beside it (docs/validation.md and the "
                          "shipped intervals score the uncalibrated model; use --json)", args.calibration)
    from sim.calibrate.calibration import calibrated_topology, load_calibration
    from sim.studies.validate import CaseCalibration

    cal = load_calibration(args.calibration)
    topology = calibrated_topology(args.calibration, None, notes, cal) if cal.sets_topology else None
    if topology is not None:
        notes.append(f"calibration {args.calibration}: its scale_up values apply to the cases on {cal.topology}; "
                     "the others keep their topology's")
    factors = cal.calibration_factors()
    if cal.factors:
        notes.append(f"calibration {args.calibration}: " + ", ".join(f"{v.key} {v.value:g}" for v in cal.factors)
                     + " on every case (fitted to measured runs by llmsim calibrate --runs; sim/costs/factors.py)")
    return CaseCalibration(cal.topology, topology, factors)


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
