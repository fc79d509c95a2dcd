"""The YAML plumbing shared by the workload and topology loaders.

Typed, validated reads of one mapping (:class:`_Fields`), the notes on filled-in defaults
(:class:`_Notes`), reading YAML and applying ``--set KEY=VALUE`` overrides. Every bad
input raises :class:`~sim.errors.ConfigError` naming the file and the field.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml

from sim.errors import ConfigError
from sim.types import parse_enum

_SET = "<--set>"
_REQUIRED = "(required: null or missing means not published, and there is no default)"


class _Fields:
    """Typed reads from one YAML mapping; errors name the file and the dotted field."""

    def __init__(self, raw: object, path: str, prefix: str, valid: Sequence[str]) -> None:
        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise ConfigError(path, prefix or "<top level>", "a mapping", raw)
        for key in raw:
            if key not in valid:
                raise ConfigError(path, f"{prefix}.{key}" if prefix else str(key),
                                  f"one of the keys {sorted(valid)}", key)
        self.raw, self.path, self.prefix = raw, path, prefix

    def field(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        return ConfigError(self.path, self.field(key), expected, got)

    def _get(self, key: str, ok: Callable[[object], bool], what: str, required: bool) -> object:
        value = self.raw.get(key)
        if value is None and required:
            raise self.error(key, f"{what} {_REQUIRED}", None)
        if value is not None and not ok(value):
            raise self.error(key, what, value)
        return value

    def integer(self, key: str, *, required: bool = False, positive: bool = False) -> int | None:
        value = self._get(key, _is_int, "a positive integer" if positive else "an integer", required)
        if positive and value is not None and value < 1:
            raise self.error(key, "a positive integer", value)
        return value

    def number(self, key: str, *, required: bool = False) -> float | None:
        value = self._get(key, _is_number, "a number", required)
        return None if value is None else float(value)

    def flag(self, key: str) -> bool | None:
        return self._get(key, lambda v: isinstance(v, bool), "true or false", False)

    def text(self, key: str, *, required: bool = False) -> str | None:
        return self._get(key, lambda v: isinstance(v, str), "a string", required)

    def enum(self, key: str, kind: type, notes: _Notes, default: object, why: str, allowed: Sequence | None = None,
             why_not: str = "") -> object:
        """``key`` as a member of ``kind`` (of ``allowed``, refused with ``why_not``, when
        given: :func:`~sim.types.parse_enum`), ``default`` with a note when absent."""
        value = self.raw.get(key)
        if value is None:
            return notes.fill(self.field(key), default, why)
        return parse_enum(kind, value, self.path, self.field(key), allowed, why_not)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Notes(list):
    """The defaults a load filled in, as human-readable lines."""

    def fill(self, field: str, value: object, why: str) -> object:
        shown = str(value).lower() if isinstance(value, bool) else getattr(value, "value", value)
        self.append(f"{field}: null -> {shown} ({why})")
        return value


@contextmanager
def _located(path: str) -> Iterator[None]:
    """Re-raise a spec's own ConfigError (file ``<spec>``) with the real file path."""
    try:
        yield
    except ConfigError as exc:
        if exc.path != "<spec>":
            raise
        raise ConfigError(path, exc.field, exc.expected, exc.got) from None


# --- files and overrides ---------------------------------------------------------------------


def _read_yaml(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "<file>", "a readable YAML file", str(exc)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else "?"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), f"line {line}", "valid YAML", problem) from None


def _apply_overrides(raw: Mapping, overrides: Sequence[str],
                     settable: tuple[dict[str, Sequence[str]], Sequence[str]]) -> dict:
    """Apply ``KEY=VALUE`` items (VALUE read as YAML) to a copy of ``raw``."""
    sections, top = settable
    out = copy.deepcopy(dict(raw))
    for item in overrides:
        key, sep, text = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(_SET, str(item), "KEY=VALUE, e.g. parallel.tp=4", item)
        try:
            value = yaml.safe_load(text)
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
