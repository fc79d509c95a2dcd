"""What the benchmark scripts share: a best-of-N timer, a fixed-width table, the common options
and the ``--json`` writer.

::

    from harness import Column, Table, best_of, make_parser, write_json

    ap = make_parser(__doc__, repeat=3, presets=True)
    args = ap.parse_args()
    timing = best_of(lambda: simulate(workload, topology), args.repeat)
    table = Table((Column("preset", 16, align="<"), Column("simulate s", 10, ".3f")))
    print(table.format([(preset, timing.best_s)]))
    write_json(args.json, {"repeat": args.repeat, "presets": rows})

The scripts import it as ``harness`` (Python puts a script's own folder first on ``sys.path``).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import sim

T = TypeVar("T")

WORKLOADS = Path(sim.__file__).resolve().parent.parent / "workloads"
"""The repository's workload presets, the default of the scripts' positional ``presets``."""

HEADER_FIELDS = ("llmsim_version", "python", "machine", "processor")
"""The fields :func:`write_json` can put ahead of a script's figures, in this order."""


@dataclass(frozen=True)
class Timing(Generic[T]):
    """What :func:`best_of` measured.

    Attributes
    ----------
    best_s : float
        The least wall time of the runs, seconds (:func:`time.perf_counter`).
    result : T
        What the last run returned.
    """

    best_s: float
    result: T


def best_of(fn: Callable[[], T], repeat: int, *, disable_gc: bool = False,
            before: Callable[[], object] | None = None) -> Timing[T]:
    """Run ``fn`` ``repeat`` times and keep the least wall time.

    Before each run the previous run's result is released and :func:`gc.collect` runs, so that
    no run pays for collecting or freeing what an earlier one left (the first run finds neither).

    Parameters
    ----------
    fn : callable
        The work to time, without arguments.
    repeat : int
        How many runs, at least 1.
    disable_gc : bool
        Keep the cyclic collector off while ``fn`` runs (reference counting still frees), so that
        a run times no collection at all.
    before : callable or None
        Untimed work before each run, ahead of the collection (removing the file a run writes).

    Returns
    -------
    Timing
        The best wall time and the last run's result.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    best, result = float("inf"), None
    for _ in range(repeat):
        result = None
        if before is not None:
            before()
        gc.collect()
        if disable_gc:
            gc.disable()
        try:
            t0 = time.perf_counter()
            result = fn()
            best = min(best, time.perf_counter() - t0)
        finally:
            if disable_gc:
                gc.enable()
    return Timing(best, result)


@dataclass(frozen=True)
class Column:
    """One column of a :class:`Table`.

    Attributes
    ----------
    header : str
        Its heading, aligned like its values.
    width : int
        Characters wide (a longer value widens its row, as an f-string does).
    spec : str
        Format spec applied to values that are not strings, after alignment and width:
        ``","`` (thousands), ``".3f"``, ``",.1f"``, ``"+.1e"``; strings are only aligned, so a
        blank or preformatted cell is a string.
    align : str
        ``">"`` (right, the default: numbers), ``"<"`` (left: names) or ``"^"``.
    sep : str or None
        The text before this column; None: the table's ``sep``. Ignored for the first column.
    """

    header: str
    width: int
    spec: str = ""
    align: str = ">"
    sep: str | None = None

    def cell(self, value: Any) -> str:
        """``value`` aligned in the column, formatted by ``spec`` unless it is a string."""
        spec = "" if isinstance(value, str) else self.spec
        return format(value, f"{self.align}{self.width}{spec}")


@dataclass(frozen=True)
class Table:
    """A fixed-width text table: a heading line, a rule of dashes under it, then a line per row.

    Attributes
    ----------
    columns : tuple of Column
        The columns, left to right.
    sep : str
        The text between two columns unless a column names its own.
    indent : str
        Text before every line.
    rule : bool
        Whether a line of dashes as long as the heading follows it.
    """

    columns: tuple[Column, ...]
    sep: str = " "
    indent: str = ""
    rule: bool = True

    def _line(self, cells: Iterable[str]) -> str:
        parts = []
        for i, (col, text) in enumerate(zip(self.columns, cells)):
            if i:
                parts.append(self.sep if col.sep is None else col.sep)
            parts.append(text)
        return self.indent + "".join(parts)

    def heading(self) -> str:
        """The heading line, and the rule under it if the table has one."""
        head = self._line(col.cell(col.header) for col in self.columns)
        return f"{head}\n{'-' * len(head)}" if self.rule else head

    def row(self, values: Sequence[Any]) -> str:
        """One row's line: a value per column."""
        if len(values) != len(self.columns):
            raise ValueError(f"{len(values)} values for {len(self.columns)} columns")
        return self._line(col.cell(v) for col, v in zip(self.columns, values))

    def format(self, rows: Iterable[Sequence[Any]]) -> str:
        """The heading and every row, as one string without a final newline."""
        return "\n".join([self.heading(), *(self.row(r) for r in rows)])


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def make_parser(doc: str | None, *, repeat: int | None = None, repeat_help: str | None = None,
                presets: bool = False, with_json: bool = True) -> argparse.ArgumentParser:
    """An argument parser with the options the scripts share.

    Parameters
    ----------
    doc : str or None
        The script's module docstring; its first paragraph is the description.
    repeat : int or None
        ``--repeat N``'s default (runs per case, the best kept; N at least 1); None: no
        ``--repeat``.
    repeat_help : str or None
        ``--repeat``'s help; None: "runs per case; the best is kept (default N)".
    presets : bool
        Add the positional ``presets`` (workload presets or files; :func:`presets_or_all` gives
        every ``workloads/*.yaml`` when none is named).
    with_json : bool
        Add ``--json PATH`` (default None: :func:`write_json` then writes nothing).

    Returns
    -------
    argparse.ArgumentParser
        With the options asked for; the script adds its own.
    """
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0].strip() or None)
    if presets:
        ap.add_argument("presets", nargs="*", help="workload presets or files (default: workloads/*.yaml)")
    if repeat is not None:
        ap.add_argument("--repeat", type=_positive, default=repeat, metavar="N",
                        help=repeat_help or f"runs per case; the best is kept (default {repeat})")
    if with_json:
        ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    return ap


def presets_or_all(presets: Sequence[str]) -> list[str]:
    """The presets named, or every ``workloads/*.yaml`` by name when none is."""
    return list(presets) or sorted(p.stem for p in WORKLOADS.glob("*.yaml"))


def header(fields: Iterable[str] = HEADER_FIELDS) -> dict[str, str]:
    """The common fields of a ``--json`` document that say what produced it.

    Parameters
    ----------
    fields : iterable of str
        Names from :data:`HEADER_FIELDS`: ``llmsim_version`` (:data:`sim.__version__`),
        ``python`` (:func:`platform.python_version`), ``machine`` (:func:`platform.machine`),
        ``processor`` (:func:`platform.processor`).

    Returns
    -------
    dict
        The fields asked for, in the order given.
    """
    values = {"llmsim_version": lambda: sim.__version__, "python": platform.python_version,
              "machine": platform.machine, "processor": platform.processor}
    return {f: values[f]() for f in fields}


def write_json(path: str | Path | None, figures: dict | list, *, fields: Iterable[str] = HEADER_FIELDS,
               sort_keys: bool = False) -> None:
    """Write a script's figures as ``--json`` asks: the header fields, then the figures.

    Parameters
    ----------
    path : str, Path or None
        Where; None (``--json`` not given) writes nothing.
    figures : dict or list
        The figures; a list is written as it is (it takes no header, so ``fields`` must be empty).
    fields : iterable of str
        The :func:`header` fields ahead of a dict's figures.
    sort_keys : bool
        Sort every object's keys.

    Notes
    -----
    Indented by two spaces, with a final newline; a value JSON cannot hold (an enum, a path) is
    written as its ``str``.
    """
    if path is None:
        return
    fields = tuple(fields)
    if isinstance(figures, list):
        if fields:
            raise ValueError("a list of figures takes no header fields")
        doc: dict | list = figures
    else:
        doc = {**header(fields), **figures}
    Path(path).write_text(json.dumps(doc, indent=2, sort_keys=sort_keys, default=str) + "\n")
