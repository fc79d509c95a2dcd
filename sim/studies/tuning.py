"""A practitioner's tuning of a case whose software no stack models.

:mod:`sim.config.tunable` names the null settings of such a case that a practitioner chooses
(virtual pipeline stages, micro-batch size, sequence parallelism) and the values each can take.
:func:`tune` builds the case with every combination (the other null settings filled as the
fallback stack fills them, memory savers included), simulates each one that fits in its GPU's
memory layer by layer (from shorter runs of its steady state where they stand for the
iteration, :mod:`sim.steady`), and keeps the fastest: the least time a sample (a case without a
global batch has it filled by each combination's schedule); a tie keeps the earlier
combination, the fallback's own values first. Where no combination fits, the case keeps the
fallback's settings, and its row reads as not fitting.

``llmsim validate`` and ``llmsim run`` tune such cases; one note gives the settings chosen,
their time and the time of the fallback stack's defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.config.fit import fits_in_memory
from sim.config.tunable import TunableCase
from sim.config.workload import build_workload
from sim.costs.factors import CalibrationFactors
from sim.errors import ConfigError, SimError
from sim.runner import simulate
from sim.steady import steady_iteration
from sim.topology.spec import TopologySpec
from sim.workload.spec import WorkloadSpec

__all__ = ["TunedPoint", "Tuned", "tune", "SCREEN_GRANULARITY"]

SCREEN_GRANULARITY = "layer"
"""The granularity each combination is simulated at: a layer's passes as tasks, which the
op-level timeline refines by well under a percent on the dev set's runs (docs/design.md)."""

Placer = Callable[[WorkloadSpec], tuple[WorkloadSpec, TopologySpec]]
"""A workload put on the topology it runs on (:func:`sim.topology.choice.place_workload`)."""


@dataclass(frozen=True)
class TunedPoint:
    """One combination of the tuned settings."""

    settings: dict[str, int | bool]
    iteration_s: float | None
    """Its simulated iteration (None: not simulated: it does not fit, or is refused)."""
    fits: bool
    refused: str | None = None
    """Why the combination is not a valid run, if it is not."""
    global_batch: int | None = None
    """The samples its iteration trains (None: not simulated)."""


@dataclass(frozen=True)
class Tuned:
    """The tuned case: its workload, its build's notes with one more for the tuned settings, and
    every combination built."""

    workload: WorkloadSpec
    notes: tuple[str, ...]
    points: tuple[TunedPoint, ...]
    chosen: TunedPoint
    """The fastest combination that fits."""

    @property
    def setting_text(self) -> str:
        """The chosen settings, ``"micro_batch_size=1, virtual_pipeline_stages=4"``."""
        return ", ".join(f"{k}={_shown(v)}" for k, v in self.chosen.settings.items())


def _shown(value: int | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _screen(placed: WorkloadSpec, topology: TopologySpec, factors: CalibrationFactors | None) -> float:
    """The iteration time of ``placed`` layer by layer, from shorter runs of its steady state
    where they stand for it (:mod:`sim.steady`)."""
    steady = steady_iteration(placed, topology, granularity=SCREEN_GRANULARITY, factors=factors)
    if steady is not None:
        return steady.iteration_time_s
    return simulate(placed, topology, granularity=SCREEN_GRANULARITY, factors=factors).result.makespan_s


def tune(case: TunableCase, own: WorkloadSpec, place: Placer,
         factors: CalibrationFactors | None = None) -> Tuned | None:
    """The fastest combination of ``case``'s knobs that fits, each simulated on the topology
    ``place`` puts it on, with ``factors`` applied; None when none fits (the fallback's settings,
    which built ``own``, then stand)."""
    points: list[TunedPoint] = []
    built: list[tuple[TunedPoint, WorkloadSpec, list[str]]] = []
    # the other settings under which a smaller micro-batch did not fit, memory savers and all: a
    # larger one will not either (activations grow with it), so it is not built
    too_big: set[tuple] = set()
    for settings in case.settings():
        others = tuple((k, v) for k, v in settings.items() if k != "micro_batch_size")
        if others in too_big:
            continue
        try:
            workload, notes = build_workload(case.with_settings(settings), case.file)
            placed, topology = place(workload)
        except ConfigError as exc:
            points.append(TunedPoint(settings, None, False, f"{exc.field}: {exc.expected}"))
            continue
        except SimError as exc:  # a GPU without the number format, say
            points.append(TunedPoint(settings, None, False, str(exc)))
            continue
        if not fits_in_memory(placed):
            points.append(TunedPoint(settings, None, False))
            too_big.add(others)
            continue
        try:
            point = TunedPoint(settings, _screen(placed, topology, factors), True,
                               global_batch=placed.parallel.global_batch_size)
        except SimError as exc:
            points.append(TunedPoint(settings, None, True, str(exc)))
            continue
        points.append(point)
        built.append((point, workload, notes))
    if not built:
        return None
    # the least time a sample: a null global batch is filled by each combination's schedule (the
    # interleaved one takes at least pp micro-batches), so iterations may differ in size
    chosen, workload, notes = min(built, key=lambda b: b[0].iteration_s / b[0].global_batch)
    fields = ", ".join(k.field for k in case.knobs)
    values = ", ".join(_shown(chosen.settings[k.key]) for k in case.knobs)
    batches = chosen.global_batch != own.parallel.global_batch_size  # then each time says its batch
    mine = f"{chosen.iteration_s:.4g} s" + (f" for {chosen.global_batch} samples" if batches else "")
    try:
        fallback = f"{_screen(*place(own), factors):.4g} s" + (
            f" for {own.parallel.global_batch_size}" if batches else "")
    except (ConfigError, SimError) as exc:
        fallback = f"not simulated ({exc})"
    why = (f"framework '{case.framework}' names software no stack models: tuned as a practitioner tunes a "
           f"run, the fastest a sample of the {len(built)} combinations that fit of the {len(points)} built, "
           f"simulated layer by layer (sim/studies/tuning.py): {mine}, where the fallback stack's defaults "
           f"give {fallback}")
    note = f"{fields}: null -> {values} ({why})"
    at = next((i + 1 for i, n in enumerate(notes) if n.startswith("stack:")), 0)
    return Tuned(workload, tuple(notes[:at]) + (note,) + tuple(notes[at:]), tuple(points), chosen)
