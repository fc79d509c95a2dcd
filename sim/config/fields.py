"""The YAML plumbing shared by the workload and topology loaders.

Typed, validated reads of one mapping (:class:`Fields`), the notes on filled-in defaults
(:class:`Notes`), reading YAML and applying ``--set KEY=VALUE`` overrides. Every bad
input raises :class:`~sim.errors.ConfigError` naming the file and the field.

YAML is read safely (:class:`yaml.SafeLoader`: no Python objects) and within bounds
(:class:`StrictLoader`): files of at most :data:`~sim.inputs.MAX_INPUT_BYTES`, mappings
nested at most :data:`MAX_YAML_DEPTH` deep, at most :data:`MAX_YAML_VALUES` values with
aliases counted each time they are used (a few lines of nested aliases otherwise expand to
billions of values: the "billion laughs"), no alias inside its own anchor, integers of at
most :data:`MAX_INT_DIGITS` digits, and no key twice in one mapping.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any, Literal, TypeGuard, TypeVar, overload

import yaml

from sim.errors import ConfigError, Described
from sim.inputs import read_input_text
from sim.types import parse_enum

SET_SOURCE = "<--set>"
"""The ``path`` of an error in a ``--set`` override (:class:`~sim.errors.ConfigError`)."""
_SET = SET_SOURCE
_REQUIRED = "(required: null or missing means not published, and there is no default)"

MAX_YAML_DEPTH = 64
"""How deep YAML collections may nest (the shipped files nest 4 deep)."""

MAX_YAML_VALUES = 1_000_000
"""The most values (scalars, lists and mappings) one YAML document may hold, an alias counting
the values of its anchor each time it is used (the largest shipped file holds about 5,000)."""

MAX_INT_DIGITS = 30
"""The longest integer a YAML file may write (a GPU count of 10^29 is already absurd; Python
refuses to read one of more than 4,300 digits)."""

MAX_INTEGER = 2**53
"""The largest integer a field takes (floats represent every integer up to it exactly)."""

T = TypeVar("T")
E = TypeVar("E", bound=Enum)

_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YAMLRefused(yaml.YAMLError):
    """A YAML document :class:`StrictLoader` does not read: where (``mark``), what was
    expected and what arrived, for a :class:`~sim.errors.ConfigError`."""

    def __init__(self, mark: yaml.Mark | None, expected: str, got: object) -> None:
        super().__init__(expected)
        self.mark, self.expected, self.got = mark, expected, got

    @property
    def line(self) -> int | str:
        return self.mark.line + 1 if self.mark is not None else "?"


class StrictLoader(yaml.SafeLoader):
    """:class:`yaml.SafeLoader` within the bounds of the module docstring.

    >>> load_yaml("a: 1\\nb: [x, y]")
    {'a': 1, 'b': ['x', 'y']}
    >>> load_yaml("a: 1\\na: 2")
    Traceback (most recent call last):
    ...
    sim.config.fields.YAMLRefused: each key once in a mapping
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._expanded: dict[int, int] = {}
        """Values under each node composed so far, aliases expanded, by ``id(node)``."""

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            size = self._expanded.get(id(node))
            if size is None:
                raise YAMLRefused(event.start_mark, "no alias inside its own anchor", Described(f"*{event.anchor}"))
            self._count(size, event.start_mark, f"*{event.anchor}")
            return node
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise YAMLRefused(mark, f"collections nested at most {MAX_YAML_DEPTH} deep",
                              Described(f"more than {MAX_YAML_DEPTH} levels"))
        before = self._values
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._count(1, mark, None)
        self._expanded[id(node)] = self._values - before
        return node

    def _count(self, n: int, mark: yaml.Mark, alias: str | None) -> None:
        self._values += n
        if self._values > MAX_YAML_VALUES:
            why = f" (alias {alias} expands to {n:,})" if alias else ""
            raise YAMLRefused(mark, f"a document of at most {MAX_YAML_VALUES:,} values, aliases counted each "
                              "time they are used", Described(f"more than {MAX_YAML_VALUES:,}{why}"))

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first: dict[object, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if key in first:
                    raise YAMLRefused(key_node.start_mark, "each key once in a mapping",
                                      Described(f"{key!r} on lines {first[key]} and {line}"))
                first[key] = line
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int | str:  # type: ignore[override]
        text = str(node.value)
        if sum(c.isalnum() for c in text) > MAX_INT_DIGITS:
            raise YAMLRefused(node.start_mark, f"an integer of at most {MAX_INT_DIGITS} digits",
                              Described(f"one of {len(text):,} characters"))
        if ":" in text:  # YAML 1.1's base 60 (``17:04`` is 1024); YAML 1.2 reads it as text
            return text
        if _LEADING_ZERO.match(text):  # YAML 1.1's octal (``010`` is 8); YAML 1.2 reads it as 10
            return int(text.replace("_", ""), 10)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float | str:  # type: ignore[override]
        text = str(node.value)
        if ":" in text:  # YAML 1.1's base 60 (``1:30.5``); text in YAML 1.2
            return text
        return super().construct_yaml_float(node)


_LEADING_ZERO = re.compile(r"^[-+]?0[0-9_]+$")
"""A decimal integer written with leading zeros."""

StrictLoader.add_constructor(_INT_TAG, StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)
# YAML 1.2 reads ``3e-1`` and ``1e9`` as numbers; PyYAML's YAML 1.1 resolver wants a dot
# (``3.0e-1``) and would hand the text to a field that expects a number
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                   re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                                   list("-+0123456789"))


def load_yaml(text: str) -> object:
    """``text`` read by :class:`StrictLoader`.

    Raises
    ------
    yaml.YAMLError
        :class:`YAMLRefused` beyond the bounds, another for malformed YAML.
    """
    loader = StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class Fields:
    """Typed reads from one YAML mapping; errors name the file and the dotted field."""

    def __init__(self, raw: object, path: str, prefix: str, valid: Sequence[str]) -> None:
        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise ConfigError(path, prefix or "<top level>", "a mapping", raw if prefix else described(raw))
        for key in raw:
            if key not in valid:
                raise ConfigError(path, f"{prefix}.{key}" if prefix else str(key),
                                  f"one of the keys {sorted(valid)}", key)
        self.raw, self.path, self.prefix = raw, path, prefix

    def field(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        return ConfigError(self.path, self.field(key), expected, got)

    def _get(self, key: str, ok: Callable[[object], TypeGuard[T]], what: str, required: bool) -> T | None:
        value = self.raw.get(key)
        if value is None:
            if required:
                raise self.error(key, f"{what} {_REQUIRED}", None)
            return None
        if not ok(value):
            raise self.error(key, what, value)
        return value

    @overload
    def integer(self, key: str, *, required: Literal[True], positive: bool = False) -> int: ...

    @overload
    def integer(self, key: str, *, required: bool = False, positive: bool = False) -> int | None: ...

    def integer(self, key: str, *, required: bool = False, positive: bool = False) -> int | None:
        """``key`` as an integer of at most :data:`MAX_INTEGER` in magnitude (positive when
        ``positive``), None when null or missing and not ``required``."""
        what = "a positive integer" if positive else "an integer"
        value = self._get(key, is_int, what, required)
        if positive and value is not None and value < 1:
            raise self.error(key, what, value)
        if value is not None and abs(value) > MAX_INTEGER:
            raise self.error(key, f"{what} of at most 2^53", value)
        return value

    @overload
    def number(self, key: str, *, required: Literal[True]) -> float: ...

    @overload
    def number(self, key: str, *, required: bool = False) -> float | None: ...

    def number(self, key: str, *, required: bool = False) -> float | None:
        """``key`` as a finite number (a float), None when null or missing and not ``required``."""
        value = self._get(key, is_number, "a number", required)
        if value is None:
            return None
        if not is_finite(value):
            raise self.error(key, "a finite number", value)
        return float(value)

    @overload
    def quantity(self, key: str, what: str, *, high: float, low: float = ..., low_open: bool = ...,
                 required: Literal[True]) -> float: ...

    @overload
    def quantity(self, key: str, what: str, *, high: float, low: float = ..., low_open: bool = ...,
                 required: bool = ...) -> float | None: ...

    def quantity(self, key: str, what: str, *, high: float, low: float = 0.0, low_open: bool = False,
                 required: bool = False) -> float | None:
        """``key`` as a finite number in ``[low, high]`` (``(low, high]`` with ``low_open``),
        refused as ``what`` otherwise; None when null or missing and not ``required``."""
        value = self.number(key, required=required)
        if value is not None and not ((value > low if low_open else value >= low) and value <= high):
            raise self.error(key, what, value)
        return value

    def catalogue_gpu(self, key: str, name: str) -> str:
        """``name``, given at ``key``, as the GPU catalogue names its GPU
        (:func:`sim.hardware.get_gpu`); refused naming the catalogue's GPUs otherwise."""
        from sim.hardware import get_gpu, gpu_names

        try:
            return get_gpu(name).name
        except KeyError:
            raise self.error(key, f"a GPU of the catalogue: one of {gpu_names()}", name) from None

    def flag(self, key: str) -> bool | None:
        return self._get(key, is_bool, "true or false", False)

    @overload
    def text(self, key: str, *, required: Literal[True]) -> str: ...

    @overload
    def text(self, key: str, *, required: bool = False) -> str | None: ...

    def text(self, key: str, *, required: bool = False) -> str | None:
        return self._get(key, is_str, "a string", required)

    def enum(self, key: str, kind: type[E], notes: Notes, default: E, why: str, allowed: Iterable[E] | None = None,
             why_not: str = "") -> E:
        """``key`` as a member of ``kind`` (of ``allowed``, refused with ``why_not``, when
        given: :func:`~sim.types.parse_enum`), ``default`` with a note when absent."""
        value = self.raw.get(key)
        if value is None:
            return notes.fill(self.field(key), default, why)
        return parse_enum(kind, value, self.path, self.field(key), allowed, why_not)


def comma_items(text: str, option: str, expected: str, *, repeats: bool = False) -> tuple[str, ...]:
    """The comma-separated items of an option's ``text``, stripped, in order; a ConfigError
    naming ``option`` (as ``expected``) for no item, an empty one (``400,,500``: a value left
    out), or, unless ``repeats``, one given twice (``7,7``: a row or step printed twice).

    >>> comma_items("12, 7,5", "--nodes", "node sizes")
    ('12', '7', '5')
    >>> comma_items("400,,500", "--limits", "watts")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: --limits: expected watts, no item empty (got '400,,500')
    """
    items = tuple(x.strip() for x in text.split(","))
    if not text.strip() or not all(items):
        raise ConfigError(f"<{option}>", option, f"{expected}, no item empty", text)
    twice = next((x for i, x in enumerate(items) if x in items[:i]), None)
    if twice is not None and not repeats:
        raise ConfigError(f"<{option}>", option, f"{expected}, each once ({twice} is given twice)", text)
    return items


def described(raw: object) -> Described:
    """A whole document that is not what was expected, in words: its kind and size, never its
    text (a path may name any text file, such as the system's account list).

    >>> described("root:x:0:0:root:/root:/bin/bash"), described([1, 2]), described(3)
    (text of 31 characters, a list of 2 items, an int)
    """
    if isinstance(raw, str):
        return Described(f"text of {len(raw):,} characters")
    if isinstance(raw, list):
        return Described(f"a list of {len(raw):,} items")
    return Described(f"a {type(raw).__name__}" if type(raw).__name__[0] not in "aeiou" else f"an {type(raw).__name__}")


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_bool(value: object) -> TypeGuard[bool]:
    return isinstance(value, bool)


def is_str(value: object) -> TypeGuard[str]:
    return isinstance(value, str)


def is_finite(value: object) -> TypeGuard[int | float]:
    """A number (not a bool) that is neither infinite nor NaN, and small enough for a float.

    >>> is_finite(1), is_finite(2.5), is_finite(float("inf")), is_finite(float("nan")), is_finite(10**400)
    (True, True, False, False, False)
    """
    if not is_number(value):
        return False
    if isinstance(value, int):
        return abs(value) < 2**1023
    return math.isfinite(value)


class Notes(list[str]):
    """The defaults a load filled in, as human-readable lines."""

    def fill(self, field: str, value: T, why: str) -> T:
        shown = str(value).lower() if isinstance(value, bool) else getattr(value, "value", value)
        self.append(f"{field}: null -> {shown} ({why})")
        return value


@contextmanager
def located(path: str) -> Iterator[None]:
    """Re-raise a spec's own ConfigError (file ``<spec>``) with the real file path."""
    try:
        yield
    except ConfigError as exc:
        if exc.path != "<spec>":
            raise
        raise ConfigError(path, exc.field, exc.expected, exc.got) from None


# --- files and overrides ---------------------------------------------------------------------


def read_yaml(path: Path) -> object:
    """The YAML document of ``path`` (:func:`load_yaml`, at most
    :data:`~sim.inputs.MAX_INPUT_BYTES`); a ConfigError naming the file and the line."""
    text = read_input_text(path, "YAML file")
    try:
        return load_yaml(text)
    except YAMLRefused as exc:
        raise ConfigError(str(path), f"line {exc.line}", exc.expected, exc.got) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else "?"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), f"line {line}", "valid YAML", problem) from None


def apply_overrides(raw: Mapping[str, object], overrides: Sequence[str],
                    settable: tuple[Mapping[str, Sequence[str]], Sequence[str]]) -> dict[str, object]:
    """Apply ``KEY=VALUE`` items (VALUE read as YAML) to a copy of ``raw``."""
    sections, top = settable
    out = copy.deepcopy(dict(raw))
    for item in overrides:
        key, sep, text = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(_SET, str(item), "KEY=VALUE, e.g. parallel.tp=4", item)
        try:
            value = load_yaml(text)
        except YAMLRefused as exc:
            raise ConfigError(_SET, key, f"a YAML value of {exc.expected}", exc.got) from None
        except yaml.YAMLError:
            raise ConfigError(_SET, key, "a YAML value", text) from None
        section, dot, name = key.partition(".")
        if not dot:
            if key not in top:
                raise ConfigError(_SET, key, f"SECTION.FIELD with SECTION in {sorted(sections)}, "
                                  f"or one of {sorted(top)}", key)
            out[key] = value
            continue
        if section not in sections:
            raise ConfigError(_SET, key, f"a section among {sorted(sections)}", section)
        if name not in sections[section]:
            raise ConfigError(_SET, key, f"a field of {section}: {sorted(sections[section])}", name)
        current = out.get(section)
        if section == "model" and isinstance(current, str):
            current = {"hf_config": current}
        if current is not None and not isinstance(current, Mapping):
            raise ConfigError(_SET, key, f"a file whose {section} is a mapping", current)
        out[section] = {**(current or {}), name: value}
    return out
