"""Finding a software stack (:mod:`sim.config.stack`): by name or file, or from a case's
``framework`` text.

A case names its stack with ``stack: NAME-or-FILE``. Without it, the stack is the shipped one
(``workloads/stacks/``) whose ``matches`` rules match the case's ``framework`` text (dated by its
publication where the text has no year, :func:`framework_year`). When several match, a stack
that extends another of them is the more specific release and wins ("NeMo 24.12
(Megatron-Core)" matches ``megatron-core`` and ``nemo-24``, which extends it); of those left,
the first by name, with a note naming the others. A text that matches none is taken as
the stack whose ``fallback`` covers its date: the Megatron-LM release of its year, and
``megatron-core`` (current Megatron-Core) for software dated 2023 on or not dated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sim.config.presets import preset_folder, preset_names, resolve_preset
from sim.config.stack import Stack, read_stack_file
from sim.errors import ConfigError

__all__ = ["STACKS", "StackChoice", "choose_stack", "framework_year", "load_stack", "shipped_stacks"]

STACKS = "workloads/stacks"
"""The preset folder of the shipped stacks."""


def framework_year(text: str) -> int | None:
    """The latest year (``20xx``) a framework text names, or None.

    >>> framework_year("Megatron-LM (2021, NGC PyTorch 20.12 container)"), framework_year("NeMo 24.07")
    (2021, None)
    """
    years = [int(y) for y in re.findall(r"\b(20\d\d)\b", text)]
    return max(years) if years else None


def _find(name_or_file: str, beside: Path | None) -> Path:
    """A stack file: ``name_or_file`` relative to the folder ``beside`` (the file that names it),
    as given, or a shipped stack's name."""
    if beside is not None:
        for candidate in (beside / name_or_file, beside / f"{name_or_file}.yaml"):
            if candidate.is_file():
                return candidate
    return resolve_preset(name_or_file, STACKS)


@lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int, chain: tuple[str, ...]) -> Stack:
    file = Path(path)

    def parent(name: str, child: Path) -> Stack:
        try:
            found = _find(name, child.parent)
        except ConfigError as exc:
            if exc.field != "<file>":
                raise
            raise ConfigError(str(child), "extends", "a stack file (relative to this file's folder) or a shipped "
                              f"stack: {preset_names(STACKS)}", name) from None
        key = str(found.resolve())
        if key in chain or key == path:
            raise ConfigError(str(child), "extends", "a chain of stacks without a cycle", name)
        return _read(key, found.stat().st_mtime_ns, chain + (path,))

    return read_stack_file(file, parent)


def load_stack(name_or_file: str, beside: Path | None = None) -> Stack:
    """A stack by shipped name (``megatron-core``) or file (relative to the folder ``beside``
    first).

    Raises
    ------
    ConfigError
        When there is no such stack, or its file is malformed.

    >>> load_stack("megatron-lm-2022").value("overlap_grad_reduce")
    False
    """
    file = _find(str(name_or_file), beside).resolve()
    return _read(str(file), file.stat().st_mtime_ns, ())


def shipped_stacks() -> tuple[Stack, ...]:
    """Every shipped stack, by name.

    >>> names = [s.name for s in shipped_stacks()]
    >>> names[0], names == sorted(names)
    ('deepspeed', True)
    """
    folder = preset_folder(STACKS)
    return tuple(load_stack(str(folder / f"{name}.yaml")) for name in preset_names(STACKS))


@dataclass(frozen=True)
class StackChoice:
    """The stack a case runs on and why (a note)."""

    stack: Stack
    why: str
    fallback: bool = False
    """No stack's patterns match a framework the text names: the stack is the fallback for
    software of its date (a text naming nothing is not one)."""


def choose_stack(framework: str, year: int | None = None) -> StackChoice:
    """The shipped stack a case's ``framework`` text names (the module docstring).

    Parameters
    ----------
    framework : str
        The case's framework text.
    year : int, optional
        Its date; by default the latest year the text names (:func:`framework_year`).

    >>> choose_stack("NeMo 24.07 container (Megatron-Core backend)").stack.name
    'nemo-24.01-24.07'
    >>> choose_stack("Megatron-LM (2022)").stack.name, choose_stack("MyTrainer").stack.name
    ('megatron-lm-2022', 'megatron-core')
    """
    year = framework_year(framework) if year is None else year
    stacks = shipped_stacks()
    hits = {s.name: s for s in stacks if any(r.matches(framework, year) for r in s.matches)}
    shown = f"framework '{framework}'" if framework else "no framework named"
    if hits:
        specific = [s for s in hits.values() if not any(s.name in other.extends for other in hits.values())]
        chosen = specific[0]
        rule = next(r for r in chosen.matches if r.matches(framework, year))
        why = f"{shown} matches /{rule.pattern}/" + ("" if rule.years.first is None and rule.years.last is None
                                                     else f" dated {rule.years.shown()}")
        above = [n for n in chosen.extends if n in hits]
        if above:
            why += f"; it matches {', '.join(above)} too, which {chosen.name} extends"
        if len(specific) > 1:
            why += (f"; it matches {', '.join(s.name for s in specific[1:])} too, and {chosen.name} comes "
                    "first by name")
        return StackChoice(chosen, why)
    for s in stacks:
        if s.fallback is not None and s.fallback.covers(year):
            dated = f"dated {year}" if year is not None else "undated"
            head = f"{shown} matches no stack's patterns" if framework else shown
            return StackChoice(s, f"{head}; software {dated} is taken as {s.name}, the fallback for "
                               f"{s.fallback.shown()}", fallback=bool(framework.strip()))
    raise ConfigError(STACKS, "fallback", f"a stack whose fallback covers {year or 'undated'} software",
                      [s.name for s in stacks])
