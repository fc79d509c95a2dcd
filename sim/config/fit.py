"""Null settings that fit: when the producing framework's defaults do not fit in the GPU's
memory, the cheapest memory savers it offers for the settings a case left null.

A case's null settings are filled as its software stack's recipe would (:mod:`sim.config.defaults`).
A recipe that ran is known to have fit, so when those defaults do not fit, the settings the case
did not publish were not the defaults: the loader then sets them to the memory savers its stack
offers, cheapest first in iteration time (:data:`~sim.config.defaults.MEMORY_SAVERS_ORDER`),
each added to those before it, and keeps the first combination that fits, with a note per
setting it changed. A recomputation saver replaces the one before it rather than adding to it
(selective, then each set of Megatron-Core's recomputed modules least recomputation first,
:func:`~sim.config.defaults.module_recompute_sets`, then full), so the first that fits is the
cheapest; the module sets tried that do not fit are noted as one step. Explicit settings are
never changed; when nothing fits, the defaults stay and the run is reported as not fitting.

"Fits" is the report's test (``fits`` in ``llmsim run``'s stage table and ``llmsim memory``):
every pipeline stage's peak, :func:`sim.memory.stage_memory` (the simulated timeline's peak),
at most the GPU's HBM capacity, with no margin.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sim.config.defaults import MemorySaver, memory_savers, module_recompute_sets
from sim.config.stack import Stack
from sim.errors import ConfigError
from sim.memory import stage_memory
from sim.types import RecomputeKind, ScalingRecipe, recompute_module_names
from sim.units import GiB
from sim.workload.kernels import KERNEL_KEYS
from sim.workload.quantization import LOW_PRECISION
from sim.workload.spec import DEFAULT_RECOMPUTE_MODULES, WorkloadSpec

__all__ = ["Fitted", "peak_memory_bytes", "fits_in_memory", "fewest_recomputed_layers", "fit_null_settings"]


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


def _setting(w: WorkloadSpec, key: str) -> object:
    """The value of a saver's setting in ``w``: a kernel switch or a parallel field."""
    return getattr(w.kernels if key in KERNEL_KEYS else w.parallel, key)


def _gib(x: float) -> str:
    return f"{x / GiB:.1f} GiB"


def fewest_recomputed_layers(w: WorkloadSpec) -> tuple[int | None, WorkloadSpec]:
    """The fewest layers of each model chunk that full recomputation of ``w`` (block method,
    :attr:`~sim.workload.spec.ParallelSpec.recompute_num_layers`) must recompute for ``w`` to
    fit, and ``w`` with them; ``(None, w with every layer recomputed)`` when that takes every
    layer of a chunk or nothing fits.

    Peak memory does not grow as more layers are recomputed (each one trades its stored
    activations for its input, ``tests/unit/test_fit.py`` checks it), so the count is found by
    bisection on :func:`fits_in_memory`.
    """
    p = w.parallel
    top = max(len(r) for r in w.virtual_stage_layers())

    def at(n: int) -> WorkloadSpec:
        return replace(w, parallel=replace(p, recompute=RecomputeKind.FULL,
                                           recompute_num_layers=None if n >= top else n))

    lo, hi = 1, top  # fits at hi (when anything does); not below lo
    if not fits_in_memory(at(hi)):
        return None, at(hi)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits_in_memory(at(mid)):
            hi = mid
        else:
            lo = mid + 1
    return (None if hi >= top else hi), at(hi)


@dataclass(frozen=True)
class _Step:
    """One saver tried: what it set, shown, and the peak it gave."""

    saver: MemorySaver
    shown: str
    peak: float


def _passed(saver: MemorySaver, peaks: list[float]) -> _Step:
    """One step standing for the module sets tried that do not fit (each peak in ``peaks``)."""
    many = "s" if len(peaks) > 1 else ""
    return _Step(saver, f"selective with {len(peaks)} module set{many} of less recomputation (llmsim's estimate), "
                        "the least memory", min(peaks))


def _full_of(w: WorkloadSpec, top: int) -> str:
    """Full recomputation of how many layers of a model chunk of up to ``top`` layers."""
    n = w.parallel.recompute_num_layers
    if n is not None:
        return f"full of {n} of {top} layers a chunk"
    return f"full of all {top} layers a chunk" if top > 1 else "full (one layer a chunk)"


def fit_null_settings(w: WorkloadSpec, nulls: frozenset[str], stack: Stack) -> Fitted:
    """``w`` as is when it fits, else with the cheapest memory savers for its null settings
    that make it fit (the module docstring).

    Full recomputation offered for the fewest layers (:attr:`MemorySaver.fewest_layers
    <sim.config.defaults.MemorySaver.fewest_layers>`) recomputes the fewest layers of each
    model chunk that fit (:func:`fewest_recomputed_layers`), and sets
    ``recompute_num_layers`` too when that is not every layer.

    Parameters
    ----------
    w : WorkloadSpec
        The workload with the recipe defaults filled.
    nulls : frozenset of str
        The ``parallel`` keys the case left null.
    stack : Stack
        The case's software stack, which says what savers there are
        (:func:`~sim.config.defaults.memory_savers`).
    """
    if fits_in_memory(w):
        return Fitted(w, (), ())
    delayed_fp8 = w.dtype in LOW_PRECISION and w.scaling is ScalingRecipe.DELAYED
    sets = module_recompute_sets(w.model, w.parallel, w.system.gpu, w.dtype, delayed_fp8)
    savers = memory_savers(w.parallel, nulls, stack, w.kernels, sets)
    if not savers:
        return Fitted(w, (), ())
    capacity = w.system.gpu.hbm_capacity_bytes
    base_peak = peak_memory_bytes(w)
    steps: list[_Step] = []
    changes: dict[str, Any] = {}  # ParallelSpec fields by name (MemorySaver.key); the spec checks each value
    kernel_changes: dict[str, Any] = {}  # KernelsSpec fields (a saver of a kernel switch)
    found = None
    passed: list[float] = []  # the peaks of the module sets tried that do not fit, since the last step shown
    for saver in savers:
        into = kernel_changes if saver.key in KERNEL_KEYS else changes
        undo = dict(into)
        into[saver.key] = saver.value
        if saver.key == "recompute":  # each recomputation saver says its modules (full: the default)
            into["recompute_modules"] = saver.modules or DEFAULT_RECOMPUTE_MODULES
        try:
            candidate = replace(w, parallel=replace(w.parallel, **changes),
                                kernels=replace(w.kernels, **kernel_changes))
        except ConfigError:  # a combination the spec refuses: not a saver here
            into.clear()
            into.update(undo)
            continue
        shown = _shown(saver.value)
        if saver.modules is not None:
            shown += f" ({', '.join(recompute_module_names(saver.modules)) or 'no module'})"
        if saver.fewest_layers:
            top = max(len(r) for r in w.virtual_stage_layers())
            n, candidate = fewest_recomputed_layers(candidate)
            if n is not None:
                changes["recompute_num_layers"] = n
                fewer = replace(candidate, parallel=replace(candidate.parallel, recompute_num_layers=n - 1)) \
                    if n > 1 else None
                if fewer is not None:  # the next fewer, to show why it is the fewest
                    steps.append(_Step(saver, _full_of(fewer, top), peak_memory_bytes(fewer)))
            elif fits_in_memory(candidate) and top > 1:
                fewer = replace(candidate, parallel=replace(candidate.parallel, recompute_num_layers=top - 1))
                steps.append(_Step(saver, _full_of(fewer, top), peak_memory_bytes(fewer)))
            shown = _full_of(candidate, top)
        peak = peak_memory_bytes(candidate)
        if saver.modules is not None and not fits_in_memory(candidate):  # shown as one, below
            passed.append(peak)
            continue
        if passed:
            steps.append(_passed(saver, passed))
            passed = []
        steps.append(_Step(saver, shown, peak))
        if fits_in_memory(candidate):
            found = candidate
            break
    if passed:  # the last savers were module sets and none fits
        steps.append(_passed(savers[-1], passed))
    on = f"{w.system.gpu.name}'s {_gib(capacity)}"
    if found is None:
        tried = ", ".join(f"{st.saver.key} {st.shown} {_gib(st.peak)}" for st in steps)
        return Fitted(w, (), (f"parallel: the null settings' defaults need {_gib(base_peak)} a GPU, more than the "
                              f"{on}, and no memory saver of the framework fits either (cumulatively, cheapest "
                              f"first: {tried}); the defaults are kept and the run does not fit",))
    keys = tuple(dict.fromkeys(st.saver.key for st in steps))
    notes = []
    before = base_peak
    for key in keys:
        mine = [st for st in steps if st.saver.key == key]
        trail = [f"{st.shown} {_gib(st.peak)}" for st in mine[:-1]]
        last = mine[-1]
        end = (f"{last.shown} fits at {_gib(last.peak)}" if key == keys[-1] else
               f"{last.shown} {_gib(last.peak)}, with the next saver too")
        value = _setting(found, key)
        head = f"parallel.{key}: null -> {_shown(value)}"
        if key == "recompute" and found.parallel.recompute_num_layers is not None:
            head += f", parallel.recompute_num_layers: null -> {found.parallel.recompute_num_layers}"
        if key == "recompute" and found.parallel.recompute_modules != w.parallel.recompute_modules:
            head += (", parallel.recompute_modules: null -> "
                     f"[{', '.join(recompute_module_names(found.parallel.recompute_modules))}]")
        notes.append(f"{head} ({_shown(_setting(w, key))} needs {_gib(before)} of the {on}; "
                     + "; ".join(trail + [end]) + "; memory savers tried cheapest first)")
        before = last.peak
    changed = keys + (("recompute_num_layers",) if found.parallel.recompute_num_layers is not None else ()) \
        + (("recompute_modules",) if found.parallel.recompute_modules != w.parallel.recompute_modules else ())
    return Fitted(found, changed, tuple(notes))
