"""``--json PATH``: a command's figures as JSON, into a file or onto standard output."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TextIO

from sim.errors import SimError
from sim.output.paths import STDOUT

__all__ = ["write_json", "json_to_stdout"]

JSON_STDOUT: ContextVar[TextIO | None] = ContextVar("llmsim_json_stdout", default=None)
"""Standard output while a command given ``--json -`` runs with its printed report on stderr."""


@contextmanager
def json_to_stdout() -> Iterator[None]:
    """Within the block, ``write_json(STDOUT, ...)`` writes to the standard output this
    process has now, even where the block redirects ``sys.stdout`` (the printed report goes to
    standard error then, so that ``llmsim run --json - | jq .iteration_time_s`` works)."""
    token = JSON_STDOUT.set(sys.stdout)
    try:
        yield
    finally:
        JSON_STDOUT.reset(token)


def write_json(path: str, obj: dict) -> None:
    """``--json PATH``: the object as indented JSON, into PATH (its folders made), or on
    standard output for ``-`` (:data:`sim.output.paths.STDOUT`)."""
    try:  # the last guard: what is read is checked finite, so a report has only finite numbers
        text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n"
    except ValueError:
        raise SimError("the report holds a number that is not finite (infinite or NaN), which JSON cannot "
                       "write; this is a bug: please report the command that gave it") from None
    if path == STDOUT:
        stream = JSON_STDOUT.get() or sys.stdout
        stream.write(text)
        stream.flush()
        return
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    except OSError as e:  # a full disk, /proc: checked before the work, refused only now
        raise OSError(e.errno, e.strerror or type(e).__name__, f"--json {path}") from None
