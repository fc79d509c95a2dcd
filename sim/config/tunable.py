"""The null settings a practitioner tunes, in a case whose software no stack models.

A case names the framework that produced its number (``framework:``), and its null settings are
filled the way that framework's release fills them (its stack, :mod:`sim.config.stacks`). When
no shipped stack's patterns match the text (an in-house trainer, a framework llmsim does not
model), the case runs on the fallback stack of its date, whose defaults are Megatron-LM's launch
defaults: one pipeline chunk a stage, one sample a micro-batch, no sequence parallelism. Nothing
says the producing software did that. The case format's rule for a framework whose defaults are
unknown is the practitioner's choice (workloads/validation/README.md: "where a framework's
default is unknown, it picks what a practitioner would"), and a practitioner who publishes a
run has tuned these settings for speed: no one runs a 16-stage pipeline of 16 micro-batches
without interleaving (a bubble of 15/16 of the work) when interleaving is there to be asked for.

:func:`knobs_of` names those settings (:class:`Knob`) and the values a run can take;
:func:`sim.studies.tuning.tune` simulates each combination that fits and keeps the fastest. The
settings are the ones that change speed and are pure choices of the run, not features a
framework may lack:

* ``parallel.virtual_pipeline_stages`` (pipeline parallelism): every count of chunks a stage
  that splits the layers evenly, or the layers with the embedding and the loss counted as one
  each (the splits Megatron-LM's ``--account-for-embedding-in-pipeline-split
  --account-for-loss-in-pipeline-split`` allow, :func:`sim.workload.spec.pipeline_split`), the
  interleaved 1F1B schedule above 1 (Narayanan et al. 2021, arXiv 2104.04473, Sec. 2.2.2);
* ``parallel.micro_batch_size``: every divisor of the data-parallel rank's batch (global batch
  over data-parallel size);
* ``parallel.sequence_parallel`` (tensor parallelism): off and on (Korthikanti et al. 2022,
  arXiv 2205.05198).

Recomputation and the other memory savers stay the cheapest that fits (:mod:`sim.config.fit`),
each combination filled by them in turn; overlaps that need a particular framework's machinery
(Transformer Engine's userbuffers, Megatron's overlapped parameter gather) stay the fallback's.
A case that names its framework's stack, names no framework, or gives a setting, keeps it.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sim.workload.spec import WorkloadSpec

__all__ = ["Knob", "TunableCase", "knobs_of"]


@dataclass(frozen=True)
class Knob:
    """A null ``parallel`` setting a practitioner chooses, and the values it can take (the
    fallback stack's own first)."""

    key: str
    values: tuple[int | bool, ...]

    @property
    def field(self) -> str:
        return f"parallel.{self.key}"


@dataclass(frozen=True)
class TunableCase:
    """A case whose framework no stack models, with the settings to tune."""

    raw: Mapping
    """The case's mapping (overrides applied)."""
    file: Path
    framework: str
    knobs: tuple[Knob, ...]

    def settings(self) -> Iterator[dict[str, int | bool]]:
        """Every combination of the knobs' values, the fallback's own first."""
        for values in itertools.product(*(k.values for k in self.knobs)):
            yield dict(zip((k.key for k in self.knobs), values))

    def with_settings(self, settings: Mapping[str, int | bool]) -> dict:
        """The case's mapping with ``settings`` given (the interleaved schedule where more than
        one chunk a stage is asked for and the case names no schedule)."""
        raw = copy.deepcopy(dict(self.raw))
        parallel = dict(raw.get("parallel") or {})
        parallel.update(settings)
        if settings.get("virtual_pipeline_stages", 1) > 1 and parallel.get("schedule") is None:
            parallel["schedule"] = "interleaved-1f1b"
        raw["parallel"] = parallel
        return raw


def _null(parallel: Mapping, key: str) -> bool:
    return parallel.get(key) is None


def knobs_of(parallel: Mapping, workload: WorkloadSpec) -> tuple[Knob, ...]:
    """The settings a practitioner tunes that a case's ``parallel`` mapping leaves null and that
    can take more than one value, for the case built as ``workload`` by the fallback's defaults."""
    p, layers = workload.parallel, workload.model.num_layers
    knobs: list[Knob] = []
    if _null(parallel, "micro_batch_size") and not _null(parallel, "global_batch_size"):
        local = p.global_batch_size // p.dp
        if local > 1:
            knobs.append(Knob("micro_batch_size", tuple(m for m in range(1, local + 1) if local % m == 0)))
    interleavable = parallel.get("schedule") in (None, "interleaved-1f1b")
    if p.pp > 1 and _null(parallel, "virtual_pipeline_stages") and interleavable:
        chunks = tuple(v for v in range(1, layers + 3) if layers % (p.pp * v) == 0 or (layers + 2) % (p.pp * v) == 0)
        if len(chunks) > 1:
            knobs.append(Knob("virtual_pipeline_stages", chunks))
    if p.tp > 1 and _null(parallel, "sequence_parallel"):
        knobs.append(Knob("sequence_parallel", (False, True)))
    return tuple(knobs)
