"""Null settings that fit: when the producing framework's defaults do not fit in the GPU's
memory, the cheapest memory savers it offers for the settings a case left null.

A case's null settings are filled as its framework's recipe would (:mod:`sim.config.defaults`).
A recipe that ran is known to have fit, so when those defaults do not fit, the settings the case
did not publish were not the defaults: the loader then sets them to the framework's memory
savers, cheapest first in iteration time (:data:`~sim.config.defaults.MEMORY_SAVERS_ORDER`),
each added to those before it, and keeps the first combination that fits, with a note per
setting it changed. Explicit settings are never changed; when nothing fits, the defaults stay
and the run is reported as not fitting.

"Fits" is the report's test (``fits`` in ``llmsim run``'s stage table and ``llmsim memory``):
every pipeline stage's peak, :func:`sim.memory.stage_memory` (the simulated timeline's peak),
at most the GPU's HBM capacity, with no margin.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.config.defaults import MemorySaver, memory_savers
from sim.errors import ConfigError
from sim.memory import stage_memory
from sim.units import GiB
from sim.workload.spec import WorkloadSpec

__all__ = ["Fitted", "peak_memory_bytes", "fits_in_memory", "fit_null_settings"]


def peak_memory_bytes(w: WorkloadSpec) -> float:
    """The fullest pipeline stage's peak memory a GPU, in bytes (:func:`sim.memory.stage_memory`)."""
    return max(stage_memory(w, s).total_bytes for s in range(w.parallel.pp))


def fits_in_memory(w: WorkloadSpec) -> bool:
    """Whether every pipeline stage's peak fits its GPU's memory: the report's ``fits``."""
    return all(stage_memory(w, s).fits for s in range(w.parallel.pp))


@dataclass(frozen=True)
class Fitted:
    """The workload after :func:`fit_null_settings` and what it did."""

    workload: WorkloadSpec
    changed: tuple[str, ...]
    """The ``parallel`` keys set to a memory saver (their default notes no longer hold)."""
    notes: tuple[str, ...]
    """One note per changed key, or one saying that nothing fits."""


def _shown(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(getattr(value, "value", value))


def _gib(x: float) -> str:
    return f"{x / GiB:.1f} GiB"


def fit_null_settings(w: WorkloadSpec, nulls: frozenset[str], framework: str) -> Fitted:
    """``w`` as is when it fits, else with the cheapest memory savers for its null settings
    that make it fit (the module docstring).

    Parameters
    ----------
    w : WorkloadSpec
        The workload with the recipe defaults filled.
    nulls : frozenset of str
        The ``parallel`` keys the case left null.
    framework : str
        The case's (dated) ``framework``, which says what savers there are
        (:func:`~sim.config.defaults.memory_savers`).
    """
    if fits_in_memory(w):
        return Fitted(w, (), ())
    savers = memory_savers(w.parallel, nulls, framework)
    if not savers:
        return Fitted(w, (), ())
    capacity = w.system.gpu.hbm_capacity_bytes
    base_peak = peak_memory_bytes(w)
    steps: list[tuple[MemorySaver, float]] = []
    changes: dict[str, object] = {}
    found = None
    for saver in savers:
        changes[saver.key] = saver.value
        try:
            candidate = replace(w, parallel=replace(w.parallel, **changes))
        except ConfigError:  # a combination the spec refuses: not a saver here
            del changes[saver.key]
            continue
        steps.append((saver, peak_memory_bytes(candidate)))
        if fits_in_memory(candidate):
            found = candidate
            break
    on = f"{w.system.gpu.name}'s {_gib(capacity)}"
    if found is None:
        tried = ", ".join(f"{s.key} {_shown(s.value)} {_gib(b)}" for s, b in steps)
        return Fitted(w, (), (f"parallel: the null settings' defaults need {_gib(base_peak)} a GPU, more than the "
                              f"{on}, and no memory saver of the framework fits either (cumulatively, cheapest "
                              f"first: {tried}); the defaults are kept and the run does not fit",))
    keys = tuple(dict.fromkeys(s.key for s, _ in steps))
    notes = []
    before = base_peak
    for key in keys:
        mine = [(s, b) for s, b in steps if s.key == key]
        trail = [f"{_shown(s.value)} {_gib(b)}" for s, b in mine[:-1]]
        last, peak = mine[-1]
        end = (f"{_shown(last.value)} fits at {_gib(peak)}" if key == keys[-1] else
               f"{_shown(last.value)} {_gib(peak)}, with the next saver too")
        notes.append(f"parallel.{key}: null -> {_shown(last.value)} ({_shown(getattr(w.parallel, key))} needs "
                     f"{_gib(before)} of the {on}; " + "; ".join(trail + [end]) + "; memory savers tried cheapest first)")
        before = peak
    return Fitted(found, keys, tuple(notes))
