"""Where a command will write, checked before it works.

A large simulation takes minutes (``llmsim validate`` over every published run, Narayanan et
al.'s 530B model on 560 GPUs alone about 45 s); a mistyped ``--json`` or ``--trace`` should not
be found after it. :func:`check_output_paths` looks at each output option a command was given
and raises one :class:`~sim.errors.ConfigError` naming the option, what it needs and the path,
before anything is simulated:

* a file (``--json``, ``--trace``, ``--html``, ``--plot``, ``--csv``, ``--markdown``) may not
  be a folder, and may be written: an existing one writable, a new one in a folder that exists
  or can be made (its nearest existing ancestor a folder this process may write into);
* a folder (``--trace-dir``, ``--chakra``) may not be a file, and the same for the rest;
* a figure (``--plot``) needs matplotlib and a suffix naming a format this installation
  writes (:func:`sim.output.plot_formats.check_plot_path`);
* no two outputs may name one file, and no output may name a file the command reads (its
  workload, ``--topology``, ``--runs`` and every other argument naming an existing file): one
  would overwrite the other, or the input, with no word said.

Nothing is created here; the writers make the missing folders as before. What the operating
system refuses in spite of these checks (a full disk, a file system that takes no new files
such as ``/proc``, a path whose permissions change meanwhile) is still reported after the work,
as one line naming the path (:func:`sim.cli.main`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from sim.errors import ConfigError
from sim.inputs import is_file, same_file
from sim.output.plot_formats import check_plot_path

__all__ = ["DIR_OPTIONS", "FILE_OPTIONS", "STDOUT", "check_output_path", "check_output_paths"]

STDOUT = "-"
"""``--json -``: the JSON on standard output (the command's printed report then on stderr)."""

FILE_OPTIONS: Mapping[str, str] = {"json": "--json", "trace": "--trace", "html": "--html", "plot": "--plot",
                                   "csv": "--csv", "markdown": "--markdown", "output": "--output"}
"""argparse destination -> option, for the options that name a file to write."""
DIR_OPTIONS: Mapping[str, str] = {"trace_dir": "--trace-dir", "chakra": "--chakra"}
"""argparse destination -> option, for the options that name a folder to write into."""


def check_output_path(path: str, option: str, *, folder: bool = False) -> None:
    """Raise :class:`~sim.errors.ConfigError` unless ``path`` (given to ``option``) can be
    written as a file (``folder`` false) or a folder.

    >>> check_output_path("report.json", "--json")
    >>> check_output_path(".", "--json")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: --json: expected a file to write, not a folder (got '.')
    """
    where = f"<{option}>"
    what = "a folder to write into" if folder else "a file to write"
    p = Path(path)
    if p.exists():
        if folder and not p.is_dir():
            raise ConfigError(where, option, f"{what}, not a file", path)
        if not folder and p.is_dir():
            raise ConfigError(where, option, f"{what}, not a folder", path)
        if not os.access(p, os.W_OK | (os.X_OK if folder else 0)):
            raise ConfigError(where, option, f"{what} that this user may write", path)
        return
    ancestor = p.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(where, option, f"{what} under a folder ({ancestor} is a file)", path)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(where, option, f"{what} in a folder this user may write into "
                                         f"({ancestor} is not writable)", path)


def check_output_paths(args: object) -> list[tuple[str, str]]:
    """:func:`check_output_path` for each output option set on ``args`` (an argparse
    namespace), files first, in a fixed order; then, with ``--plot``, its format
    (:func:`~sim.output.plot_formats.check_plot_path`); then that no two outputs, and no
    output and input, name one file (module docstring). Returns the outputs' ``(option,
    path)``, for :func:`sim.inputs.writing_to` to refuse the inputs found only as they are read."""
    outputs: list[tuple[str, str]] = []
    for options, folder in ((FILE_OPTIONS, False), (DIR_OPTIONS, True)):
        for dest, option in options.items():
            path = getattr(args, dest, None)
            if dest == "json" and path == STDOUT:
                continue
            if isinstance(path, str):
                check_output_path(path, option, folder=folder)
                outputs.append((option, path))
    plot = getattr(args, "plot", None)
    if isinstance(plot, str):
        check_plot_path(plot, FILE_OPTIONS["plot"])
    _check_distinct(outputs, _input_paths(args))
    return outputs


def _input_paths(args: object) -> list[tuple[str, str]]:
    """``(argument, path)`` for every argument of ``args`` that names an existing file and is
    not an output option: what the command may read."""
    out_dests = set(FILE_OPTIONS) | set(DIR_OPTIONS)
    found = []
    for dest, value in sorted(vars(args).items()):
        if dest in out_dests:
            continue
        for v in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(v, str) and v != STDOUT and is_file(v):
                found.append((dest.replace("_", "-"), v))
    return found


def _check_distinct(outputs: list[tuple[str, str]], inputs: list[tuple[str, str]]) -> None:
    """Raise :class:`~sim.errors.ConfigError` when two outputs, or an output and an input,
    name one file.

    >>> _check_distinct([("--json", "a.json"), ("--trace", "./a.json")], [])
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: --trace: expected a file no other output writes (--json writes it too) (got './a.json')
    """
    for i, (option, path) in enumerate(outputs):
        for other, earlier in outputs[:i]:
            if same_file(path, earlier):
                raise ConfigError(f"<{option}>", option, f"a file no other output writes ({other} writes it too)",
                                  path)
        for arg, read in inputs:
            if same_file(path, read):
                raise ConfigError(f"<{option}>", option,
                                  f"a file this command does not read (it reads it as its {arg} argument)", path)
