"""Error bars: the interval ``llmsim run`` gives an iteration time, from the validation residuals
of comparable runs.

A scored time or throughput row of ``llmsim validate`` (:mod:`sim.studies.validate`) says how
far the simulated iteration time was off: its *time ratio* is the measured iteration time over
the predicted one (a time row's measured over predicted value, a throughput row's predicted
over measured), above 1 where the run was measured slower than predicted (a positive signed
error, :attr:`sim.studies.validate.Row.signed_error_pct`). The per-layer and memory rows
are left out: they do not measure the iteration.

The rows are grouped by the software stack their case ran on (:func:`sim.config.workload.case_stack`)
and the generation of its GPU (:class:`sim.types.GpuGeneration`). A prediction of ``t`` seconds
gets ``[t * q10, t * q90]``, where ``q10`` and ``q90`` are the split-conformal 10% and 90%
bounds (:func:`prediction_bound`) of the time ratios of the comparable rows: those of its stack
on its GPU generation where there are at least :data:`MIN_ROWS` of them from at least
:data:`MIN_SOURCES` sources, else those of its GPU generation (the same two bounds), else every
row. A group must span sources because a user's
cluster, recipe and framework release are one more source: within one source the errors share
that source's bias, and an interval read from one source's spread covers the next source's
rows far less often than it says. The bounds are order statistics of the group's ratios chosen
so that a new run exchangeable with the group's rows falls between them with probability at
least 80% (split-conformal prediction: Vovk, Gammerman and Shafer 2005; Lei et al. 2018,
"Distribution-Free Predictive Inference for Regression", JASA 113:1094, Sec. 2.2): the
``floor((n + 1) * 0.1)``-th and ``ceil((n + 1) * 0.9)``-th smallest of ``n`` ratios, a little
wider than the sample's own 10th and 90th percentiles (:func:`percentile`), which estimate where
the group's ratios lie, not where the next one will. The interval is nominally an 80% one: the
share of held-out rows it covers is measured by :func:`coverage`, leaving one source (case
file) out at a time.

The table of groups is data shipped with the package (``workloads/intervals/residuals.yaml``),
written by ``llmsim validate --markdown`` over every shipped case (:func:`write_table`) beside
the coverage section of ``docs/validation.md`` (:func:`coverage_markdown`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from sim.calibrate.prior import CalibrationPrior, estimate_prior
from sim.config.presets import preset_folder, preset_root
from sim.errors import ConfigError
from sim.output.report import TimeInterval
from sim.types import GpuGeneration

__all__ = ["INTERVAL_METRICS", "LOW_QUANTILE", "HIGH_QUANTILE", "MIN_ROWS", "MIN_SOURCES", "TABLE_KIND", "TABLE_FILE",
           "Residual", "Band", "IntervalTable", "SourceCoverage", "Coverage", "time_ratio", "percentile",
           "prediction_bound", "band", "build_table", "case_keys", "residuals", "coverage", "load_table",
           "shipped_table", "write_table", "table_to_dict", "coverage_markdown", "update_coverage_markdown",
           "COVERAGE_BEGIN", "COVERAGE_END", "shipped_path", "run_band", "MIN_CALIBRATION_RUNS", "calibration_band",
           "calibration_prior"]

INTERVAL_METRICS = ("iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu")
"""The rows that measure the iteration (:data:`sim.studies.validate.TIME_METRICS`)."""
RATE_METRICS = ("tflops_per_gpu", "tokens_per_s_per_gpu")
"""Of those, the throughputs: they fall as the iteration's time grows."""
LOW_QUANTILE, HIGH_QUANTILE = 0.10, 0.90
"""The interval's ends: the 10th and 90th percentiles, a nominal 80% interval."""
MIN_ROWS = 8
"""The fewest rows a group needs to give an interval of its own (else the next wider group)."""
MIN_SOURCES = 3
"""The fewest sources (case files: a publication, a framework's published table) a group's rows
must come from to give an interval of its own (the module docstring)."""
TABLE_KIND = "workloads/intervals"
"""The preset folder of the shipped table."""
TABLE_FILE = "residuals.yaml"
"""The shipped table's file name in :data:`TABLE_KIND`."""
ROUND = 6
"""Decimals the table's figures are written with."""


def time_ratio(metric: str, measured: float, predicted: float) -> float:
    """The measured iteration time over the predicted one, from a row of ``metric``: a
    duration's measured over predicted value, a throughput's predicted over measured.

    >>> time_ratio("iteration_time_s", 1.2, 1.0), time_ratio("tflops_per_gpu", 100.0, 120.0)
    (1.2, 1.2)
    """
    return predicted / measured if metric in RATE_METRICS else measured / predicted


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``values``, linear between order statistics (Hyndman and
    Fan 1996, definition 7; numpy.percentile's default).

    >>> percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.1)
    1.4
    """
    if not values:
        raise ValueError("no values")
    xs = sorted(values)
    h = (len(xs) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def prediction_bound(values: Sequence[float], q: float) -> float:
    """The split-conformal ``q`` bound of ``values`` (module docstring): for ``q`` below one half
    the ``floor((n + 1) q)``-th smallest of the ``n`` values, else the ``ceil((n + 1) q)``-th;
    held at the smallest or largest where ``n`` is too small for that rank (below 9 values for
    0.1 and 0.9, where the bound covers less than it says).

    A new value exchangeable with ``values`` falls at or above the low bound of ``q`` with
    probability at least ``1 - q`` and at or below the high bound with probability at least
    ``q`` (Lei et al. 2018, Sec. 2.2; Vovk et al. 2005).

    >>> prediction_bound([float(i) for i in range(1, 20)], 0.1), prediction_bound([float(i) for i in range(1, 20)], 0.9)
    (2.0, 18.0)
    >>> prediction_bound([3.0, 1.0, 2.0], 0.9)
    3.0
    """
    if not values:
        raise ValueError("no values")
    xs = sorted(values)
    n = len(xs)
    rank = math.floor((n + 1) * q) if q < 0.5 else math.ceil((n + 1) * q)
    return xs[min(max(rank, 1), n) - 1]


@dataclass(frozen=True)
class Residual:
    """One scored row of the validation, as the intervals read it."""

    source: str
    """The case file's name (``korthikanti2022``)."""
    case: str
    stack: str
    generation: GpuGeneration
    signed_error_pct: float
    """+ when the prediction was faster than the measurement (:mod:`sim.studies.validate`)."""
    time_ratio: float
    """Measured over predicted iteration time (:func:`time_ratio`)."""
    gpu: str = ""
    """The case's GPU (its catalogue name): with :attr:`source`, the cluster the calibration
    prior groups rows by (:func:`build_table`)."""


@dataclass(frozen=True)
class Band:
    """The interval of one group of rows: a stack on a GPU generation, a generation (``stack``
    None) or every row (both None)."""

    stack: str | None
    generation: GpuGeneration | None
    rows: int
    low_factor: float
    """The 10% bound of the group's time ratios (:func:`prediction_bound`): the interval's low
    end over the prediction."""
    high_factor: float
    signed_error_p10_pct: float
    """The 10% and 90% bounds of the group's signed errors, for reading."""
    signed_error_p90_pct: float
    sources: int = 1
    """The sources (case files) its rows come from."""
    label: str | None = None
    """The rows in words where they are not a group of the table (a calibration's runs)."""
    residuals: str = "validation residuals"
    """What kind of residuals its rows are."""

    @property
    def scope(self) -> str:
        """The group in words: ``megatron-core on Hopper``, ``Hopper``, ``all``; :attr:`label` when set."""
        if self.label is not None:
            return self.label
        if self.generation is None:
            return "all"
        return self.generation.value if self.stack is None else f"{self.stack} on {self.generation.value}"

    def interval(self, time_s: float) -> tuple[float, float]:
        """The interval around a predicted ``time_s``."""
        return time_s * self.low_factor, time_s * self.high_factor

    def time_interval(self, time_s: float, note: str = "") -> TimeInterval:
        """The interval around a predicted ``time_s``, as the report carries it (``note``: why
        it is not the one asked for, or empty)."""
        low, high = self.interval(time_s)
        return TimeInterval(low, high, self.scope, self.rows, f"{HIGH_QUANTILE - LOW_QUANTILE:.0%}", self.residuals,
                            note)

    def contains(self, ratio: float) -> bool:
        """Whether a row of time ratio ``ratio`` falls inside."""
        return self.low_factor <= ratio <= self.high_factor


def band(rows: Sequence[Residual], stack: str | None = None, generation: GpuGeneration | None = None) -> Band:
    """The :class:`Band` of ``rows`` (all of one group)."""
    ratios = [r.time_ratio for r in rows]
    signed = [r.signed_error_pct for r in rows]
    return Band(stack, generation, len(rows), round(prediction_bound(ratios, LOW_QUANTILE), ROUND),
                round(prediction_bound(ratios, HIGH_QUANTILE), ROUND),
                round(prediction_bound(signed, LOW_QUANTILE), ROUND),
                round(prediction_bound(signed, HIGH_QUANTILE), ROUND), len({r.source for r in rows}))


@dataclass(frozen=True)
class IntervalTable:
    """Every group's band and where the table came from."""

    groups: tuple[Band, ...]
    """Each stack on each generation, each generation, and every row (the last)."""
    min_rows: int = MIN_ROWS
    min_sources: int = MIN_SOURCES
    command: str = ""
    """The command that wrote it."""
    validation: str = ""
    """The ``llmsim validate --json`` file of its rows."""
    prior: CalibrationPrior | None = None
    """How far measured runs should move a calibration (:mod:`sim.calibrate.prior`), from the
    same rows grouped by source and GPU; None where too few groups give one."""

    def lookup(self, stack: str, generation: GpuGeneration) -> Band:
        """The band for a run of ``stack`` on a GPU of ``generation``: its group's where that has
        :attr:`min_rows` rows from :attr:`min_sources` sources, else its generation's where
        that has, else every row's."""
        by_key = {(b.stack, b.generation): b for b in self.groups}
        for key in ((stack, generation), (None, generation)):
            b = by_key.get(key)
            if b is not None and b.rows >= self.min_rows and b.sources >= self.min_sources:
                return b
        return by_key[(None, None)]


def build_table(rows: Sequence[Residual], min_rows: int = MIN_ROWS, command: str = "",
                validation: str = "", min_sources: int = MIN_SOURCES) -> IntervalTable:
    """The table of ``rows``' groups, in a fixed order (generation, then stack).

    Raises
    ------
    ValueError
        When ``rows`` is empty.
    """
    if not rows:
        raise ValueError("no scored rows")
    order = list(GpuGeneration)
    groups: list[Band] = []
    for gen in order:
        mine = [r for r in rows if r.generation is gen]
        if not mine:
            continue
        for stack in sorted({r.stack for r in mine}):
            groups.append(band([r for r in mine if r.stack == stack], stack, gen))
        groups.append(band(mine, None, gen))
    groups.append(band(rows))
    return IntervalTable(tuple(groups), min_rows, min_sources, command, validation, calibration_prior(rows))


def calibration_prior(rows: Sequence[Residual]) -> CalibrationPrior | None:
    """The calibration prior (:func:`sim.calibrate.prior.estimate_prior`) of ``rows``' log time
    ratios grouped by source and GPU, the nearest the validation cases come to one cluster and
    software; None with fewer than two groups of two rows."""
    by_cluster: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        by_cluster.setdefault((r.source, r.gpu), []).append(math.log(r.time_ratio))
    try:
        p = estimate_prior(by_cluster)
    except ValueError:
        return None
    return CalibrationPrior(round(p.between_sd, ROUND), round(p.within_sd, ROUND), p.groups, p.rows)


def case_keys(files: Iterable[str]) -> dict[tuple[str, str], tuple[str, GpuGeneration, str]]:
    """The stack, GPU generation and GPU of every case of the validation-case ``files`` (as a
    validation row names its file: ``workloads/validation/nemo2407.yaml``), by (file, case id).
    Only the cases' mappings are read, not built."""
    from sim.config.fields import read_yaml
    from sim.config.workload import case_stack
    from sim.hardware import get_gpu

    out: dict[tuple[str, str], tuple[str, GpuGeneration, str]] = {}
    for file in dict.fromkeys(files):
        path = Path(file) if Path(file).is_file() else preset_root() / file
        cases = read_yaml(path)
        for i, raw in enumerate(cases if isinstance(cases, list) else [cases]):
            if not isinstance(raw, Mapping):
                continue
            given = raw.get("id")
            case_id = given if isinstance(given, str) else f"{path.stem}[{i}]"
            system = raw.get("system")
            try:
                gpu = get_gpu(str(system.get("gpu"))) if isinstance(system, Mapping) else None
                stack = case_stack(raw, path).name
            except (KeyError, ConfigError):  # a case that cannot be built is not scored either
                continue
            if gpu is not None:
                out[(file, case_id)] = (stack, gpu.generation, gpu.name)
    return out


def residuals(cases: Sequence[Mapping]) -> list[Residual]:
    """The scored iteration rows of ``cases`` (the ``cases`` of a ``llmsim validate --json``
    file, or :meth:`sim.studies.validate.Row.to_dict` of each row), with their groups."""
    scored = [c for c in cases if c.get("skipped") is None and c.get("metric") in INTERVAL_METRICS
              and c.get("predicted") and c.get("measured")]
    keys = case_keys(c["file"] for c in scored)
    out = []
    for c in scored:
        key = keys.get((c["file"], c["id"]))
        if key is None:
            continue
        out.append(Residual(Path(c["file"]).stem, c["id"], key[0], key[1], float(c["signed_error_pct"]),
                            time_ratio(c["metric"], float(c["measured"]), float(c["predicted"])), key[2]))
    return out


@dataclass(frozen=True)
class SourceCoverage:
    """How many of one held-out source's rows fall inside the intervals built without it."""

    source: str
    rows: int
    inside: int

    @property
    def fraction(self) -> float:
        return self.inside / self.rows if self.rows else math.nan


@dataclass(frozen=True)
class Coverage:
    """Leave-one-source-out coverage of the intervals (:func:`coverage`)."""

    sources: tuple[SourceCoverage, ...]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.sources)

    @property
    def inside(self) -> int:
        return sum(s.inside for s in self.sources)

    @property
    def fraction(self) -> float:
        return self.inside / self.rows if self.rows else math.nan


def coverage(rows: Sequence[Residual], min_rows: int = MIN_ROWS, min_sources: int = MIN_SOURCES) -> Coverage:
    """For each source: build the table from the other sources' rows, and count how many of the
    source's rows fall inside the band their stack and GPU generation look up (nominal: 80%)."""
    out = []
    for source in dict.fromkeys(r.source for r in rows):
        held = [r for r in rows if r.source == source]
        others = [r for r in rows if r.source != source]
        if not others:
            continue
        table = build_table(others, min_rows, min_sources=min_sources)
        out.append(SourceCoverage(source, len(held),
                                  sum(table.lookup(r.stack, r.generation).contains(r.time_ratio) for r in held)))
    return Coverage(tuple(out))


def table_to_dict(table: IntervalTable) -> dict:
    """The table as its YAML file holds it."""
    return {"written_by": table.command, "validation": table.validation,
            "quantiles": [LOW_QUANTILE, HIGH_QUANTILE], "min_rows": table.min_rows,
            "min_sources": table.min_sources,
            "groups": [{"stack": b.stack, "generation": None if b.generation is None else b.generation.value,
                        "rows": b.rows, "sources": b.sources, "low_factor": b.low_factor, "high_factor": b.high_factor,
                        "signed_error_p10_pct": b.signed_error_p10_pct,
                        "signed_error_p90_pct": b.signed_error_p90_pct} for b in table.groups],
            **({"calibration_prior": table.prior.to_dict()} if table.prior is not None else {})}


HEADER = """\
# The intervals `llmsim run` gives an iteration time (sim/studies/intervals.py): for each group of
# validation rows (a software stack on a GPU generation, a generation, all rows), how many rows it
# has and the split-conformal 10% and 90% bounds of their measured-over-predicted iteration times
# (low_factor, high_factor) and of their signed errors (+: predicted faster than measured).
# A group gives an interval where it has min_rows rows from min_sources sources (case files).
# calibration_prior: the spreads of the log time ratios between and within groups of a source on a
# GPU, how far `llmsim calibrate --runs` moves the factors it writes (sim/calibrate/prior.py).
# Written by the command below; do not edit.
"""


def write_table(path: str | Path, table: IntervalTable) -> None:
    """Write ``table`` to ``path`` as YAML."""
    text = HEADER + yaml.safe_dump(table_to_dict(table), sort_keys=False, default_flow_style=None, width=100)
    Path(path).write_text(text, encoding="utf-8")


def load_table(path: str | Path) -> IntervalTable:
    """Read a table :func:`write_table` wrote.

    Raises
    ------
    ConfigError
        Naming the file and the field that is malformed.
    """
    from sim.config.fields import read_yaml

    where = str(path)
    raw = read_yaml(Path(path))
    if not isinstance(raw, Mapping) or not isinstance(raw.get("groups"), list):
        raise ConfigError(where, "groups", "a list of interval groups", raw)
    groups = []
    for i, g in enumerate(raw["groups"]):
        try:
            gen = None if g["generation"] is None else GpuGeneration(g["generation"])
            groups.append(Band(g["stack"], gen, int(g["rows"]), float(g["low_factor"]), float(g["high_factor"]),
                               float(g["signed_error_p10_pct"]), float(g["signed_error_p90_pct"]),
                               int(g["sources"])))
        except (KeyError, TypeError, ValueError):
            raise ConfigError(where, f"groups[{i}]", "stack, generation, rows, sources, low_factor, high_factor, "
                              "signed_error_p10_pct, signed_error_p90_pct", g) from None
    if not groups or (groups[-1].stack, groups[-1].generation) != (None, None):
        raise ConfigError(where, "groups", "the group of all rows last (stack and generation null)", raw["groups"])
    min_rows, min_sources = raw.get("min_rows", MIN_ROWS), raw.get("min_sources", MIN_SOURCES)
    return IntervalTable(tuple(groups), int(min_rows), int(min_sources), str(raw.get("written_by", "")),
                         str(raw.get("validation", "")), _prior(where, raw.get("calibration_prior")))


def _prior(where: str, raw: object) -> CalibrationPrior | None:
    """A table's ``calibration_prior`` (absent: None)."""
    if raw is None:
        return None
    keys = ("between_clusters_sd", "within_cluster_sd", "groups", "rows")
    try:
        assert isinstance(raw, Mapping)
        sds = [float(raw[k]) for k in keys[:2]]
        counts = [int(raw[k]) for k in keys[2:]]
        assert all(math.isfinite(x) and x >= 0 for x in sds) and sds[1] > 0 and all(n >= 2 for n in counts)
    except (AssertionError, KeyError, TypeError, ValueError):
        raise ConfigError(where, "calibration_prior", f"a mapping of {', '.join(keys)} (spreads >= 0, the "
                          "within-cluster one > 0; counts >= 2)", raw) from None
    return CalibrationPrior(sds[0], sds[1], counts[0], counts[1])


def shipped_path() -> Path:
    """Where the shipped table is."""
    return preset_folder(TABLE_KIND) / TABLE_FILE


def shipped_table() -> IntervalTable:
    """The table shipped with the package (``workloads/intervals/residuals.yaml``)."""
    return load_table(shipped_path())


def run_band(stack: str, generation: GpuGeneration, table: IntervalTable | None = None) -> Band:
    """The band of a run of ``stack`` on a GPU of ``generation`` (:meth:`IntervalTable.lookup`),
    from ``table`` or the shipped one."""
    return (table or shipped_table()).lookup(stack, generation)


MIN_CALIBRATION_RUNS = 5
"""The fewest fitted runs a calibration's own interval is read from: held out within a source of
the dev set, the band of the calibration runs' left-out residuals covers 75-85% of the source's
other rows with a margin from 5 runs (``python benchmarks/calibrated_interval_coverage.py``: 56%
with 2 runs, 66% with 3, 76% with 4, 77% with 5, 86% with 8; 4 runs sit on the band's lower
edge, and covered 73% on the residuals the threshold was first read from); with fewer the validation
residuals' band stands (docs/calibrate.md)."""


def calibration_band(runs: Sequence[Mapping], name: str) -> Band | None:
    """The band of a calibration's own residuals: the 10% and 90% bounds (:func:`prediction_bound`)
    of its runs' measured-over-predicted iteration times as the fit without each run predicts
    it (``predicted_left_out`` of each row of the file's ``runs``, :mod:`sim.calibrate.command`;
    :attr:`sim.calibrate.least_squares.LeastSquaresFit.left_out_residuals`), labelled with the
    file ``name``; None with fewer than :data:`MIN_CALIBRATION_RUNS` such runs of a time or
    throughput.

    The residuals after the fit measure how well the factors fit the runs they were fitted to
    (in-sample), which a run the fit has not seen is off by more: bounds read from them covered
    33% (2 runs) to 67% (5 runs) of held-out rows in the same test. A left-out residual is what
    the calibration would have predicted for a run it had not seen, so its spread is the next
    run's (the jackknife+ of Barber, Candes, Ramdas and Tibshirani 2021, "Predictive inference
    with the jackknife+", Ann. Statist. 49:486)."""
    scored = [r for r in runs if isinstance(r, Mapping) and r.get("metric") in INTERVAL_METRICS
              and _positive(r.get("measured")) and _positive(r.get("predicted_left_out"))]
    if len(scored) < MIN_CALIBRATION_RUNS:
        return None
    ratios = [time_ratio(r["metric"], float(r["measured"]), float(r["predicted_left_out"])) for r in scored]
    # + where the prediction is faster than the measurement (Row.signed_error_pct)
    signed = [100 * (float(r["predicted_left_out"]) / float(r["measured"]) - 1)
              * (1 if r["metric"] in RATE_METRICS else -1) for r in scored]
    return Band(None, None, len(scored), round(prediction_bound(ratios, LOW_QUANTILE), ROUND),
                round(prediction_bound(ratios, HIGH_QUANTILE), ROUND),
                round(prediction_bound(signed, LOW_QUANTILE), ROUND),
                round(prediction_bound(signed, HIGH_QUANTILE), ROUND), len({r.get("file") for r in scored}),
                label=f"the {len(scored)} runs of calibration {name}", residuals="left-out residuals of the fit")


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < math.inf


COVERAGE_BEGIN = "<!-- BEGIN GENERATED: llmsim validate --markdown, interval coverage -->"
COVERAGE_END = "<!-- END GENERATED: interval coverage -->"


def coverage_markdown(cov: Coverage, command: str) -> str:
    """The generated coverage part of ``docs/validation.md``: each source's rows inside the
    intervals built without it, and all of them."""
    out = [COVERAGE_BEGIN, "", f"Generated by `{command}` (sim/studies/intervals.py, `coverage`): each source "
           f"held out in turn, its rows' intervals built from the other sources' rows; nominal "
           f"{HIGH_QUANTILE - LOW_QUANTILE:.0%}.", "",
           "| held-out source | rows | inside the interval | coverage |", "|---|---|---|---|"]
    for s in cov.sources:
        out.append(f"| {s.source} | {s.rows} | {s.inside} | {_share(s.fraction)} |")
    out.append(f"| **all** | {cov.rows} | {cov.inside} | {_share(cov.fraction)} |")
    out += ["", COVERAGE_END]
    return "\n".join(out)


def _share(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.0%}"


def update_coverage_markdown(path: str | Path, cov: Coverage, command: str) -> None:
    """Replace the generated coverage part of ``path`` (between :data:`COVERAGE_BEGIN` and
    :data:`COVERAGE_END`), keeping the rest; without those markers, append it as a section."""
    p = Path(path)
    body = coverage_markdown(cov, command)
    text = p.read_text(encoding="utf-8") if p.exists() else ""
    if COVERAGE_BEGIN in text and COVERAGE_END in text:
        head, rest = text.split(COVERAGE_BEGIN, 1)
        p.write_text(head + body + rest.split(COVERAGE_END, 1)[1], encoding="utf-8")
        return
    p.write_text((text.rstrip() + "\n\n" if text else "") + "## Interval coverage\n\n" + body + "\n", encoding="utf-8")
