"""The exceptions llmsim raises.

::

    SimError                      base of everything llmsim raises on purpose
    ├── ConfigError(ValueError)   malformed input: names the file, the field, expected, got
    ├── InfeasibleError           well-formed input that cannot run (sweeps catch this)
    │   └── OutOfMemoryError      a stage needs more memory than the GPU has
    ├── NotBuiltError             a feature llmsim does not simulate yet (named in the message)
    └── DeadlockError             the engine drained with tasks left undone (a bug)

Internal invariants are ``assert`` statements; user input is never checked with ``assert``.

A message quotes at most :data:`EXCERPT_CHARS` characters of what arrived (:func:`excerpt`):
input files are shared and generated, and a value may be a 50 MB string, a structure of
aliases that expands to billions of items, or a file that was never meant to be printed.
"""

from __future__ import annotations

import math

EXCERPT_CHARS = 80
"""The most characters of an input value an error message quotes (:func:`excerpt`)."""

FIELD_CHARS = 160
"""The most characters of a field name an error message shows (a field may be a key read
from the file)."""

EXPECTED_CHARS = 1000
"""The most characters of the ``expected`` part of a message (lists of valid keys fit)."""

_BIG_INT_BITS = 256
"""Integers wider than this are described by their digit count, not written out (Python
refuses to write one of more than 4,300 digits: ``sys.get_int_max_str_digits``)."""


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)``, cut to about ``limit`` characters, built without ever writing more.

    Strings are cut before they are quoted and say how long they were; lists, tuples, sets
    and mappings are written item by item until the budget is spent (a structure of YAML
    aliases that expands to billions of items costs what its first ``limit`` characters
    cost); integers too wide to write are described by their size.

    >>> excerpt("x" * 1000, 10)
    "'xxxxxxxxxx'... (1,000 characters)"
    >>> excerpt([1, [2, 3], {"a": 4}])
    "[1, [2, 3], {'a': 4}]"
    >>> big = [[0] * 9] * 9
    >>> for _ in range(7): big = [big] * 9
    >>> excerpt(big, 20)
    '[[[[[[[[[0, 0, 0, 0,...'
    >>> excerpt(10 ** 5000)
    'an integer of about 5,001 digits'
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    if isinstance(value, (bytes, bytearray)):
        if len(value) <= limit:
            return repr(value)
        return f"{bytes(value[:limit])!r}... ({len(value):,} bytes)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _BIG_INT_BITS:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    if isinstance(value, Described):
        return clip(value.text, 4 * limit)
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        parts: list[str] = []
        _write(value, parts, [limit + 4])
        text = "".join(parts)
        return text if len(text) <= limit else text[:limit] + "..."
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 -- a value whose repr fails is still described
        return f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def _write(value: object, parts: list[str], budget: list[int]) -> None:
    """Append ``value``'s repr to ``parts`` piece by piece while ``budget[0]`` (characters
    left) lasts; containers nest at most ``budget`` levels deep, each level spending one."""
    if budget[0] <= 0:
        return
    if isinstance(value, dict):
        opening, closing, items = "{", "}", value.items()
    elif isinstance(value, list):
        opening, closing, items = "[", "]", value
    elif isinstance(value, tuple):
        opening, closing, items = "(", ")", value
    elif isinstance(value, (set, frozenset)):
        opening, closing, items = "{", "}", value
    else:
        text = excerpt(value, budget[0])
        parts.append(text)
        budget[0] -= len(text)
        return
    parts.append(opening)
    budget[0] -= 1
    for i, item in enumerate(items):
        if budget[0] <= 0:
            return
        if i:
            parts.append(", ")
            budget[0] -= 2
        if isinstance(value, dict):
            _write(item[0], parts, budget)
            parts.append(": ")
            budget[0] -= 2
            _write(item[1], parts, budget)
        else:
            _write(item, parts, budget)
    if budget[0] > 0:
        parts.append(closing)
        budget[0] -= 1


class Described:
    """What arrived, in words, where quoting it would say too much (a file that is not YAML)
    or too little (``'bandwidth_GBps' on lines 7 and 9``): a message shows it unquoted, cut at
    four times :data:`EXCERPT_CHARS` (the words are llmsim's; any input quoted in them is
    already cut).

    >>> excerpt(Described("text of 6,400 characters"))
    'text of 6,400 characters'
    """

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Described) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def clip(text: str, limit: int) -> str:
    r"""``text`` on one line (line breaks as spaces), cut to ``limit`` characters (with
    ``...``) when longer.

    >>> clip("a\nb", 10), clip("abcdef", 4)
    ('a b', 'abcd...')
    """
    head = text[:limit].replace("\r", " ").replace("\n", " ")
    return head if len(text) <= limit else head + "..."


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
        What arrived; the message quotes an excerpt of it (:func:`excerpt`).
    """

    def __init__(self, path: str, field: str, expected: str, got: object) -> None:
        self.path = path
        self.field = field
        self.expected = expected
        self.got = got
        shown = clip(str(field), FIELD_CHARS)
        where = shown if path == f"<{field}>" else f"{clip(str(path), FIELD_CHARS * 4)}: {shown}"
        super().__init__(f"{where}: expected {clip(str(expected), EXPECTED_CHARS)} (got {self.excerpt})")

    @property
    def excerpt(self) -> str:
        """What arrived, as the message quotes it (:func:`excerpt`)."""
        return excerpt(self.got)

    def __reduce__(self):
        """Pickled as its message and attributes (a worker process's error reaches the
        parent whole), whatever arguments a subclass's constructor takes."""
        return restore_error, (type(self), self.args, self.__dict__)


def restore_error(kind: type[Exception], args: tuple, attributes: dict) -> Exception:
    """An error of class ``kind`` with ``args`` and ``attributes``, its constructor not run
    (:meth:`ConfigError.__reduce__`)."""
    err = kind.__new__(kind)
    Exception.__init__(err, *args)
    err.__dict__.update(attributes)
    return err


class InfeasibleError(SimError):
    """A well-formed configuration that cannot be simulated or run."""


class OutOfMemoryError(InfeasibleError):
    """A stage needs more memory than its GPU holds."""


class NotBuiltError(SimError):
    """The input asks for something llmsim does not simulate yet."""


class DeadlockError(SimError):
    """The engine ran out of events while tasks were still waiting."""
