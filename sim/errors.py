"""The exceptions llmsim raises.

::

    SimError                      base of everything llmsim raises on purpose
    ├── ConfigError(ValueError)   malformed input: names the file, the field, expected, got
    ├── InfeasibleError           well-formed input that cannot run (sweeps catch this)
    │   └── OutOfMemoryError      a stage needs more memory than the GPU has
    ├── NotBuiltError             a feature llmsim does not simulate yet (named in the message)
    └── DeadlockError             the engine drained with tasks left undone (a bug)

Internal invariants are ``assert`` statements; user input is never checked with ``assert``.
"""

from __future__ import annotations


class SimError(Exception):
    """Base class of every error llmsim raises on purpose."""


class ConfigError(SimError, ValueError):
    """Malformed input.

    The message reads ``FILE: FIELD: expected WHAT (got WHAT ARRIVED)``; an option's own error
    (``path`` is ``"<--json>"`` and ``field`` ``"--json"``) names the option once:
    ``--json: expected a file to write, not a folder (got 'results')``.

    Parameters
    ----------
    path : str
        The file the value came from, or ``"<--option>"`` for a command-line option (and
        ``"<--set>"`` for an override).
    field : str
        The dotted field path, e.g. ``parallel.tp``, or the option, e.g. ``--json``.
    expected : str
        What was expected, in words.
    got : object
        What arrived.
    """

    def __init__(self, path: str, field: str, expected: str, got: object) -> None:
        self.path = path
        self.field = field
        self.expected = expected
        self.got = got
        where = field if path == f"<{field}>" else f"{path}: {field}"
        super().__init__(f"{where}: expected {expected} (got {got!r})")


class InfeasibleError(SimError):
    """A well-formed configuration that cannot be simulated or run."""


class OutOfMemoryError(InfeasibleError):
    """A stage needs more memory than its GPU holds."""


class NotBuiltError(SimError):
    """The input asks for something llmsim does not simulate yet."""


class DeadlockError(SimError):
    """The engine ran out of events while tasks were still waiting."""
