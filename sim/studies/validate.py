"""``llmsim validate``: simulate published, measured training runs and score the predictions.

Each case is scored on its first present target among ``iteration_time_s``,
``tflops_per_gpu`` and ``tokens_per_s_per_gpu``; ``peak_memory_gib`` and the per-layer
``layer_forward_ms`` / ``layer_backward_ms`` are scored as rows of their own. TFLOP/s are
compared in the source's sense: hardware FLOPs (counting recomputation) when the case says
``includes_recompute: true``, model FLOPs otherwise. A case that cannot be simulated yet is
reported as skipped with its reason, never dropped and never scored.

Each row says whether its configuration fits in the GPU's memory (:func:`sim.config.fit.fits_in_memory`,
the report's test): the loader fills a case's null settings so that they fit where its
framework can (:mod:`sim.config.fit`), so a row that does not fit ran on settings the case gave
explicitly, and the summary counts such rows. Beside each mean absolute error stands the mean
signed error, positive when the prediction is faster than the measurement (the negated error
of a time row, the error of a throughput row) and, for memory, when it predicts more memory.

A case is simulated at chunk granularity where that gives the op-level run's figures
(:func:`sim.runner.simulate` with ``exact``): the run checks itself
(:mod:`sim.engine.block_check`) and a case where something met one of its blocks (a transfer
on its collectives' links, a kernel beside it) is simulated again op by op. A job of many
micro-batches is simulated that way at three (or four) shorter counts, and its iteration time
extended along the line their times lie on (:func:`sim.steady.steady_iteration`; where they do
not lie on one, the whole iteration is simulated).
What is read from the run is exact either way: the iteration time (so the throughputs; their
FLOPs come from the model, not the run) is the op run's up to the order of floating-point
additions. Peak memory is closed-form (:func:`sim.memory.stage_memory`), and the per-layer
times read one layer's ops from the timeline, so a case with a layer target runs op by op.

The case format and this command's output are fixed by ``workloads/validation/README.md``.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field
from pathlib import Path

from sim.config import CaseRecord, default_topology_name, load_case_records, load_topology
from sim.config.fit import fits_in_memory
from sim.config.workload import LAYER_TARGETS
from sim.costs.factors import CalibrationFactors
from sim.errors import SimError
from sim.memory import stage_memory
from sim.runner import Run, simulate
from sim.steady import steady_iteration, steady_points
from sim.studies.tuning import tune
from sim.topology.choice import on_system
from sim.topology.spec import TopologySpec
from sim.types import Stream
from sim.units import MS, TFLOPS, GiB
from sim.workload.flops import model_flops
from sim.workload.spec import SystemSpec, WorkloadSpec

__all__ = ["CaseCalibration", "Row", "Validation", "SourceSummary", "CaseResult", "validate", "case_rows",
           "rows_mape", "rows_mean_signed",
           "case_topology", "format_validation", "COARSE"]

COARSE = "chunk"
"""The granularity a case is simulated at first (see the module docstring)."""

LAYER_METRICS = LAYER_TARGETS
"""Targets read from one layer's ops in the timeline: their cases run op by op (and, alone, are
built as a layer microbenchmark, :data:`sim.config.workload.LAYER_TARGETS`)."""

TIME_METRICS = ("iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu")

DURATION_METRICS = ("iteration_time_s",) + LAYER_METRICS
"""Rows that measure a duration: a prediction above the measurement is slower."""


@dataclass
class Row:
    """One scored (or skipped) comparison."""

    id: str
    metric: str
    measured: float | None
    predicted: float | None
    config_complete: bool
    file: str
    skipped: str | None = None
    fits: bool | None = None
    """Whether the simulated configuration fits in the GPU's memory; None where nothing was
    simulated."""
    tuned: str | None = None
    """The settings a practitioner's tuning chose, where the case's framework is one no stack
    models (:mod:`sim.studies.tuning`): ``"micro_batch_size=1, virtual_pipeline_stages=4"``."""

    @property
    def error_pct(self) -> float | None:
        if self.predicted is None or not self.measured:
            return None
        return 100.0 * (self.predicted - self.measured) / self.measured

    @property
    def signed_error_pct(self) -> float | None:
        """The error with the sign of speed, + when the prediction is faster than the
        measurement: the negated error of a duration (:data:`DURATION_METRICS`), the error of a
        throughput; for peak memory the error, + when more memory is predicted."""
        e = self.error_pct
        if e is None:
            return None
        return -e if self.metric in DURATION_METRICS else e

    @property
    def is_memory(self) -> bool:
        return self.metric == "peak_memory_gib"

    def to_dict(self) -> dict:
        return {"id": self.id, "metric": self.metric, "measured": self.measured, "predicted": self.predicted,
                "error_pct": self.error_pct, "signed_error_pct": self.signed_error_pct,
                "config_complete": self.config_complete, "fits": self.fits, "skipped": self.skipped,
                "file": self.file, "tuned": self.tuned}

    @property
    def source(self) -> str:
        """The case file's name without its folder and suffix (``korthikanti2022``)."""
        return Path(self.file).stem


def rows_mape(rows: list[Row]) -> float | None:
    """The mean absolute error (%) of ``rows`` that have a prediction; None for none."""
    errs = [abs(r.error_pct) for r in rows if r.error_pct is not None]
    return sum(errs) / len(errs) if errs else None


def rows_mean_signed(rows: list[Row]) -> float | None:
    """The mean signed error (%, +: predicted faster) of ``rows`` that have a prediction; None for none."""
    errs = [r.signed_error_pct for r in rows if r.signed_error_pct is not None]
    return sum(errs) / len(errs) if errs else None


@dataclass(frozen=True)
class SourceSummary:
    """The scored rows of one case file: time and throughput, and peak memory, apart."""

    source: str
    rows: int
    mape_pct: float | None
    mean_signed_error_pct: float | None
    memory_rows: int
    memory_mape_pct: float | None
    memory_mean_signed_error_pct: float | None
    rows_not_fitting: int
    """Scored rows (of either kind) whose configuration does not fit in the GPU's memory."""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Validation:
    """All rows of a validation run and the summary figures."""

    rows: list[Row] = field(default_factory=list)
    wall_s: float = 0.0
    simulated_at: dict[str, int] = field(default_factory=dict)
    """Cases simulated at each granularity (the module docstring says which and why)."""
    from_steady: int = 0
    """Cases whose time came from shorter runs of their steady state (:mod:`sim.steady`)."""

    @property
    def scored(self) -> list[Row]:
        return [r for r in self.rows if r.skipped is None and r.error_pct is not None]

    @property
    def time_rows(self) -> list[Row]:
        return [r for r in self.scored if not r.is_memory]

    @property
    def mape_pct(self) -> float | None:
        return rows_mape(self.time_rows)

    @property
    def mape_complete_pct(self) -> float | None:
        return rows_mape([r for r in self.time_rows if r.config_complete])

    @property
    def memory_mape_pct(self) -> float | None:
        return rows_mape([r for r in self.scored if r.is_memory])

    @property
    def mean_signed_error_pct(self) -> float | None:
        return rows_mean_signed(self.time_rows)

    @property
    def mean_signed_error_complete_pct(self) -> float | None:
        return rows_mean_signed([r for r in self.time_rows if r.config_complete])

    @property
    def memory_mean_signed_error_pct(self) -> float | None:
        return rows_mean_signed([r for r in self.scored if r.is_memory])

    @property
    def not_fitting(self) -> list[Row]:
        """Scored rows whose configuration does not fit in the GPU's memory (goal: none)."""
        return [r for r in self.scored if r.fits is False]

    def by_source(self) -> list[SourceSummary]:
        """One :class:`SourceSummary` per case file, in the order the files were read."""
        out = []
        for source in dict.fromkeys(r.source for r in self.rows):
            mine = [r for r in self.scored if r.source == source]
            t, m = [r for r in mine if not r.is_memory], [r for r in mine if r.is_memory]
            out.append(SourceSummary(source, len(t), rows_mape(t), rows_mean_signed(t), len(m), rows_mape(m),
                                     rows_mean_signed(m), sum(r.fits is False for r in mine)))
        return out

    @property
    def skipped_cases(self) -> list[str]:
        ids = []
        for r in self.rows:
            if r.skipped is not None and r.id not in ids:
                ids.append(r.id)
        return ids

    def to_dict(self) -> dict:
        worst = max(self.time_rows, key=lambda r: abs(r.error_pct), default=None)
        return {"cases": [r.to_dict() for r in self.rows], "mape_pct": self.mape_pct,
                "mape_complete_pct": self.mape_complete_pct, "memory_mape_pct": self.memory_mape_pct,
                "mean_signed_error_pct": self.mean_signed_error_pct,
                "mean_signed_error_complete_pct": self.mean_signed_error_complete_pct,
                "memory_mean_signed_error_pct": self.memory_mean_signed_error_pct,
                "rows_not_fitting": len(self.not_fitting),
                "by_source": [s.to_dict() for s in self.by_source()],
                "scored_rows": len(self.scored), "skipped_cases": len(self.skipped_cases),
                "cases_total": len({r.id for r in self.rows}),
                "worst_error_pct": None if worst is None else worst.error_pct,
                "worst_case": None if worst is None else worst.id,
                "simulated_at": dict(sorted(self.simulated_at.items())), "cases_from_steady_state": self.from_steady}


def _layer_times_ms(run) -> tuple[float, float] | None:
    """Forward and backward (with its recomputation) of one middle layer of one middle
    micro-batch on the first simulated rank, from the first op's start to the last op's end."""
    res = run.result
    rank = res.ranks[0].rank
    m = run.workload.parallel.num_microbatches
    windows: dict[str, list[float]] = {}
    target_layer = None
    for s in res.spans:
        if s.rank != rank or s.stream is not Stream.COMPUTE:
            continue
        a = dict(s.args)
        if "layer" not in a or a.get("microbatch") != m // 2:
            continue
        if target_layer is None:
            target_layer = a["layer"]
        if a["layer"] != target_layer:
            continue
        key = "fwd" if a["phase"] == "fwd" else "bwd"
        w = windows.setdefault(key, [s.start_s, s.end_s])
        w[0], w[1] = min(w[0], s.start_s), max(w[1], s.end_s)
    if "fwd" not in windows or "bwd" not in windows:
        return None
    # TP communication that ends the pass belongs to it as well
    return ((windows["fwd"][1] - windows["fwd"][0]) / MS, (windows["bwd"][1] - windows["bwd"][0]) / MS)


@dataclass(frozen=True)
class CaseResult:
    """One case's rows and how its simulation ran."""

    rows: list[Row]
    granularity: str | None
    """The granularity whose run was scored; None when nothing was simulated."""
    op_because: str | None = None
    """Why a run at :data:`COARSE` granularity was not used (what met one of its blocks)."""
    steady: bool = False
    """Its time rows come from shorter runs of the job's steady state (:mod:`sim.steady`)."""


_TOPOLOGIES: dict[tuple[str, SystemSpec], TopologySpec] = {}
"""Topologies read in this process, by name and the system that runs on them: the dev set uses a
handful over a hundred cases."""


def _topology(name: str, system: SystemSpec) -> TopologySpec:
    """Topology ``name`` as a case on ``system`` runs on it (:func:`sim.topology.choice.on_system`:
    its nodes, its published network, its launch segments)."""
    topo = _TOPOLOGIES.get((name, system))
    if topo is None:
        topo = _TOPOLOGIES[(name, system)] = on_system(load_topology(name), system, own=True)
    return topo


def case_topology(workload: WorkloadSpec) -> TopologySpec:
    """The topology ``llmsim validate`` runs a case's ``workload`` on, uncalibrated: the one its
    system names, else its GPU's usual preset, with the system put on it
    (:func:`sim.topology.choice.on_system`: its nodes, its published network, its launch
    segments). Studies that re-simulate the cases use it, so that their runs are validate's."""
    return _topology(workload.system.topology or default_topology_name(workload.system.gpu.name), workload.system)


@dataclass(frozen=True)
class CaseCalibration:
    """A calibration applied to every case (``llmsim validate --calibration``): the topology it
    calibrated (its name and the calibrated spec; None for a file of factors only), which stands
    in for that topology in the cases that run on it, and the factors every case is simulated
    with (None: none)."""

    topology_name: str | None = None
    topology: TopologySpec | None = None
    factors: CalibrationFactors | None = None

    def topology_for(self, name: str) -> TopologySpec | None:
        """The calibrated topology for a case on topology ``name`` (before the case's system is put
        on it, :func:`sim.topology.choice.on_system`); None when the calibration is of another
        topology (or of none)."""
        if self.topology is None or name != self.topology_name:
            return None
        return self.topology


@dataclass(frozen=True)
class _Timed:
    """What a case's time rows read from its simulation."""

    iteration_s: float
    granularity: str
    op_because: str | None
    """Why a run at :data:`COARSE` granularity was set aside, if one was."""
    steady: bool
    """Read from shorter runs of the job's steady state (:mod:`sim.steady`)."""
    run: Run | None
    """The whole iteration's run; None when the time came from shorter runs."""


def _calibrated_topology(w: WorkloadSpec, calibration: CaseCalibration) -> TopologySpec:
    """:func:`case_topology`, or ``calibration``'s topology where it calibrated that one."""
    calibrated = calibration.topology_for(w.system.topology or default_topology_name(w.system.gpu.name))
    return case_topology(w) if calibrated is None else on_system(calibrated, w.system, own=True)


def _run(w: WorkloadSpec, metrics: list[str], granularity: str | None,
         calibration: CaseCalibration | None = None) -> _Timed:
    """Simulate a case as ``w``: at ``granularity`` when given, else at :data:`COARSE`
    granularity where that is exact for ``metrics`` and op by op otherwise, from shorter runs of
    its steady state where their times lie on one line (the module docstring); with
    ``calibration`` applied."""
    cal = calibration or CaseCalibration()
    topo = _calibrated_topology(w, cal)
    factors = cal.factors
    if granularity is not None:
        run = simulate(w, topo, granularity=granularity, factors=factors)
        return _Timed(run.result.makespan_s, run.granularity, None, False, run)
    if any(m in LAYER_METRICS for m in metrics):
        run = simulate(w, topo, factors=factors)
        return _Timed(run.result.makespan_s, run.granularity, None, False, run)
    steady = steady_iteration(w, topo, granularity=COARSE, exact=True, factors=factors)
    if steady is not None:
        coarse = [r for r in steady.runs if r.granularity == COARSE]
        why = next((r.coarse_divergence for r in steady.runs if r.coarse_divergence), None)
        return _Timed(steady.iteration_time_s, COARSE if len(coarse) == len(steady.runs) else "op", why, True,
                      None)
    run = simulate(w, topo, granularity=COARSE, exact=True, factors=factors)
    return _Timed(run.result.makespan_s, run.granularity, run.coarse_divergence, False, run)


def case_rows(rec: CaseRecord, granularity: str | None = None, calibration: CaseCalibration | None = None
              ) -> CaseResult:
    """Score one case: its rows, simulated at ``granularity`` ("op", "layer" or "chunk") or,
    by default, at the coarsest that gives the op-level figures (the module docstring), with
    ``calibration`` applied when given."""
    metrics = [m for m in TIME_METRICS if m in rec.targets][:1]
    metrics += [m for m in ("peak_memory_gib",) + LAYER_METRICS if m in rec.targets]
    if not metrics:
        why = ("the case has no target" if rec.error is None
               else f"{rec.error.field}: {rec.error.expected} (got {rec.error.excerpt})")
        return CaseResult([Row(rec.id, "-", None, None, rec.config_complete, rec.file, skipped=why)], None)

    w, chosen = rec.workload, None
    if w is not None and rec.tuning is not None:
        cal = calibration or CaseCalibration()
        tuned = tune(rec.tuning, w, lambda v: (v, _calibrated_topology(v, cal)), cal.factors)
        if tuned is not None:
            w, chosen = tuned.workload, tuned.setting_text
    fits = None if w is None else fits_in_memory(w)

    def row(metric: str, predicted: float | None = None, skipped: str | None = None) -> Row:
        return Row(rec.id, metric, rec.targets[metric], predicted, rec.config_complete, rec.file, skipped,
                   None if skipped is not None else fits, chosen)

    if w is None:
        reason = f"{rec.error.field}: {rec.error.expected} (got {rec.error.excerpt})"
        return CaseResult([row(m, skipped=reason) for m in metrics], None)
    rows: list[Row] = []
    if "peak_memory_gib" in metrics:
        peak = max(stage_memory(w, s).total_bytes for s in range(w.parallel.pp))
        rows.append(row("peak_memory_gib", peak / GiB))
    time_metrics = [m for m in metrics if m != "peak_memory_gib"]
    if not time_metrics:
        return CaseResult(rows, None)
    try:
        timed = _run(w, time_metrics, granularity, calibration)
    except SimError as exc:
        return CaseResult(rows + [row(m, skipped=str(exc)) for m in time_metrics], None)
    # the report's iteration time and throughput (sim.output.report.make_report), without its
    # breakdown of every span, which no metric here reads (6 s on a 530B run of 7.8M spans)
    iteration_s = timed.iteration_s
    tokens_per_s = w.tokens_per_iteration / iteration_s
    n = w.system.num_gpus
    for m in time_metrics:
        if m == "iteration_time_s":
            rows.append(row(m, iteration_s))
        elif m == "tflops_per_gpu":
            model, hardware = model_flops(w)
            rows.append(row(m, (hardware if rec.includes_recompute else model) / iteration_s / n / TFLOPS))
        elif m == "tokens_per_s_per_gpu":
            rows.append(row(m, tokens_per_s / n))
        else:
            lt = _layer_times_ms(timed.run)
            rows.append(row(m, None if lt is None else lt[0 if m == "layer_forward_ms" else 1],
                            None if lt is not None else "no layer found in the timeline"))
    return CaseResult(rows, timed.granularity, timed.op_because, timed.steady)


def _work(rec: CaseRecord) -> float:
    """A rough measure of how long ``rec`` takes to simulate, to start the longest first: the
    passes of its micro-batches over its layers and pipeline stages (the task count grows
    with it; over the dev set its logarithm correlates with that of the op runs' CPU times at
    0.93, of the chunk runs' at 0.87); where shorter runs of the steady state stand for the
    iteration (:func:`sim.steady.steady_points`), their micro-batches."""
    if rec.workload is None:
        return 0.0
    p, m = rec.workload.parallel, rec.workload.model
    points = None if any(t in LAYER_METRICS for t in rec.targets) else steady_points(rec.workload)
    microbatches = p.num_microbatches if points is None else 3 * (points[0] + points[1])
    return float(microbatches * (m.num_layers + 4 * p.pp * p.virtual_pipeline_stages))


def _read(paths: list[str], pool) -> list[CaseRecord]:
    """The cases of ``paths``, in their order, read by the pool's workers (the larger files
    first): the workers read them as they start, so the parent waits for its workers rather
    than they for it (reading the dev set, its recipes' memory fits included, takes 2 s)."""
    from sim.studies.workers import in_worker

    order = sorted(set(paths), key=lambda path: -_size(path))
    reads = {path: pool.submit(in_worker, load_case_records, path) for path in order}
    read = {path: reads[path].result() for path in dict.fromkeys(paths)}  # the first error in the files' order
    return [rec for path in paths for rec in read[path]]


def _size(path: str) -> int:
    """The size of file ``path`` in bytes (0 when it cannot be read: its reader says why)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


_WINDOW_PER_JOB = 2
"""Cases in flight per worker: one running, one queued, so a worker never waits for the next."""


def _score(records: list[CaseRecord], pool, jobs: int, progress, bar: bool,
           calibration: CaseCalibration | None = None) -> list[CaseResult]:
    """Every case of ``records`` scored (:func:`case_rows`), in their order: those that cannot
    be built here (their ConfigError stays in this process), the others by the pool's workers,
    the longest first (:func:`_work`), at most :data:`_WINDOW_PER_JOB` per worker in flight."""
    from tqdm import tqdm

    from sim.studies.workers import in_worker

    jobs = min(jobs, max(1, sum(rec.workload is not None for rec in records)))
    todo = [i for i, rec in enumerate(records) if rec.workload is not None]
    if jobs > 1:
        todo.sort(key=lambda i: -_work(records[i]))
    results: list[CaseResult | None] = [None if rec.workload is not None else case_rows(rec) for rec in records]
    shown = 0
    with tqdm(total=len(records), desc="validating", unit="case", disable=None if bar else True, leave=False,
              dynamic_ncols=True) as pbar:
        pbar.update(len(records) - len(todo))

        def report() -> None:
            nonlocal shown
            while shown < len(records) and results[shown] is not None:
                if progress is not None:
                    progress(records[shown], results[shown].rows)
                shown += 1

        report()
        pending: dict = {}
        queue = iter(todo)
        while True:
            while len(pending) < _WINDOW_PER_JOB * jobs:
                i = next(queue, None)
                if i is None:
                    break
                pending[pool.submit(in_worker, case_rows, records[i], None, calibration)] = i
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                results[pending.pop(fut)] = fut.result()
                pbar.update(1)
            report()
    return results  # type: ignore[return-value]  # every entry is scored by now


def validate(paths: list[str], progress=None, jobs: int | None = None, bar: bool = False,
             calibration: CaseCalibration | None = None) -> Validation:
    """Simulate every case in ``paths`` and score it.

    Parameters
    ----------
    progress : callable, optional
        ``progress(record, rows)`` for each case, in the files' order, as soon as it and every
        case before it are scored.
    jobs : int, optional
        Worker processes (:func:`sim.studies.workers.local_pool`; default :func:`sim.studies.workers.cpu_count`,
        1 simulates in this process). The longest cases (:func:`_work`) start first; the rows
        keep the files' order, so the result does not depend on ``jobs``.
    bar : bool
        Show a progress bar, one step per case (tqdm, on stderr, when it is a terminal).
    calibration : CaseCalibration, optional
        A calibration applied to every case (``llmsim validate --calibration``).

    Raises
    ------
    ConfigError
        For ``jobs < 1``.
    KeyboardInterrupt
        On Ctrl-C, after stopping the workers.
    """
    from sim.studies.workers import abandon, check_workers, cpu_count, local_pool

    check_workers(jobs, "--jobs")
    t0 = time.perf_counter()
    out = Validation()
    jobs = jobs or cpu_count()
    with local_pool(jobs) as pool:  # its workers start as they are given work (the files to read first)
        try:
            records = _read(paths, pool)
            results = _score(records, pool, jobs, progress, bar, calibration)
        except KeyboardInterrupt:  # stop the workers at once (sim/studies/workers.py)
            abandon(pool)
            raise
    for res in results:
        out.rows.extend(res.rows)
        if res.granularity is not None:
            out.simulated_at[res.granularity] = out.simulated_at.get(res.granularity, 0) + 1
        out.from_steady += res.steady
    out.wall_s = time.perf_counter() - t0
    return out


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


def format_row(r: Row) -> str:
    if r.skipped is not None:
        return f"{r.id:<62} {r.metric:<20} {_fmt(r.measured):>10} {'skipped':>10}  {r.skipped}"
    return (f"{r.id:<62} {r.metric:<20} {_fmt(r.measured):>10} {_fmt(r.predicted):>10} "
            f"{r.error_pct:+8.1f}%{'' if r.config_complete else '  (config incomplete)'}"
            f"{'  (DOES NOT FIT in GPU memory)' if r.fits is False else ''}"
            f"{f'  (tuned: {r.tuned})' if r.tuned else ''}")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1f}%"


SIGN_NOTE = "+: predicted faster than measured"
"""What the sign of a time or throughput row's mean signed error means (the module docstring)."""
MEMORY_SIGN_NOTE = "+: more memory predicted than measured"
"""Likewise for a peak memory row."""


def format_validation(v: Validation) -> str:
    """The rows and the MAPE lines, as printed."""
    head = f"{'case':<62} {'metric':<20} {'measured':>10} {'predicted':>10}    error"
    lines = [head, "-" * len(head)] + [format_row(r) for r in v.rows] + [""]

    pct, signed = _pct, _signed
    t = v.time_rows
    lines.append(f"MAPE, time and throughput: {pct(v.mape_pct)} over {len(t)} rows; mean signed error "
                 f"{signed(v.mean_signed_error_pct)} ({SIGN_NOTE})")
    lines.append(f"MAPE, config_complete cases: {pct(v.mape_complete_pct)} over "
                 f"{sum(r.config_complete for r in t)} rows; "
                 f"mean signed error {signed(v.mean_signed_error_complete_pct)}")
    lines.append(f"MAPE, peak memory: {pct(v.memory_mape_pct)} over {sum(r.is_memory for r in v.scored)} rows; "
                 f"mean signed error {signed(v.memory_mean_signed_error_pct)} ({MEMORY_SIGN_NOTE})")
    if t:
        worst = max(t, key=lambda r: abs(r.error_pct))
        lines.append(f"worst: {worst.id} {worst.metric} {worst.error_pct:+.1f}%")
    lines.append(f"not fitting in GPU memory: {len(v.not_fitting)} of {len(v.scored)} scored rows (goal: 0)")
    lines.append(f"skipped: {len(v.skipped_cases)} of {len({r.id for r in v.rows})} cases")
    if v.simulated_at:
        lines.append("simulated: " + ", ".join(f"{n} at {g} granularity" for g, n in sorted(v.simulated_at.items()))
                     + f"; {v.from_steady} from shorter runs of their steady state"
                     + " (each where it gives the op-level figures: sim/studies/validate.py)")
    sources = v.by_source()
    if sources:
        width = max(len("source"), *(len(s.source) for s in sources))
        head = (f"{'source':<{width}}  {'rows':>4}  {'MAPE':>6}  {'signed':>7}  {'memory rows':>11}  {'MAPE':>6}  "
                f"{'signed':>7}  {'not fitting':>11}")
        lines += ["", "by source (case file):", head]
        for s in sources:
            lines.append(f"{s.source:<{width}}  {s.rows:>4}  {pct(s.mape_pct):>6}  "
                         f"{signed(s.mean_signed_error_pct):>7}  "
                         f"{s.memory_rows:>11}  {pct(s.memory_mape_pct):>6}  "
                         f"{signed(s.memory_mean_signed_error_pct):>7}  "
                         f"{s.rows_not_fitting:>11}")
    return "\n".join(lines)


BEGIN_MARK = "<!-- BEGIN GENERATED: llmsim validate --markdown -->"
END_MARK = "<!-- END GENERATED -->"


def markdown(v: Validation, command: str) -> str:
    """The generated part of ``docs/validation.md``: the MAPE lines and every row."""

    pct, signed = _pct, _signed
    t = v.time_rows
    out = [BEGIN_MARK, "", f"Generated by `{command}`. Mean signed error: + when the prediction is faster than the "
           "measurement; for peak memory, + when it predicts more memory.", "",
           "| figure | value | mean signed error | rows |", "|---|---|---|---|",
           f"| MAPE, time and throughput, all cases | {pct(v.mape_pct)} | "
           f"{signed(v.mean_signed_error_pct)} | {len(t)} |",
           f"| MAPE, time and throughput, `config_complete` cases | {pct(v.mape_complete_pct)} | "
           f"{signed(v.mean_signed_error_complete_pct)} | {sum(r.config_complete for r in t)} |",
           f"| MAPE, peak memory | {pct(v.memory_mape_pct)} | {signed(v.memory_mean_signed_error_pct)} | "
           f"{sum(r.is_memory for r in v.scored)} |"]
    if t:
        worst = max(t, key=lambda r: abs(r.error_pct))
        out.append(f"| worst time or throughput row | {worst.error_pct:+.1f}% | | `{worst.id}` |")
    out.append(f"| scored rows on a configuration that does not fit in GPU memory (goal: 0) | "
               f"{len(v.not_fitting)} of {len(v.scored)} | | |")
    out.append(f"| cases skipped (not simulated yet) | {len(v.skipped_cases)} of {len({r.id for r in v.rows})} | | |")
    out += ["", "| source (case file) | rows | MAPE | mean signed error | memory rows | memory MAPE | "
            "memory mean signed error | rows not fitting |", "|---|---|---|---|---|---|---|---|"]
    for s in v.by_source():
        out.append(f"| {s.source} | {s.rows} | {pct(s.mape_pct)} | {signed(s.mean_signed_error_pct)} | "
                   f"{s.memory_rows} | "
                   f"{pct(s.memory_mape_pct)} | {signed(s.memory_mean_signed_error_pct)} | {s.rows_not_fitting} |")
    out += ["", "| case | metric | measured | predicted | error | complete | fits |", "|---|---|---|---|---|---|---|"]
    for r in v.rows:
        fits = "-" if r.fits is None else ("yes" if r.fits else "**NO**")
        if r.skipped is not None:
            out.append(f"| `{r.id}` | {r.metric} | {_fmt(r.measured)} | skipped | {r.skipped} | "
                       f"{'yes' if r.config_complete else 'no'} | {fits} |")
        else:
            out.append(f"| `{r.id}` | {r.metric} | {_fmt(r.measured)} | {_fmt(r.predicted)} | {r.error_pct:+.1f}% | "
                       f"{'yes' if r.config_complete else 'no'} | {fits} |")
    out += ["", END_MARK]
    return "\n".join(out)


def update_markdown(path: str, v: Validation, command: str) -> None:
    """Replace the generated part of ``path`` (between the markers), keeping the rest; create
    the file with just that part if it does not exist."""
    p = Path(path)
    body = markdown(v, command)
    if p.exists():
        text = p.read_text()
        if BEGIN_MARK in text and END_MARK in text:
            head, rest = text.split(BEGIN_MARK, 1)
            tail = rest.split(END_MARK, 1)[1]
            p.write_text(head + body + tail)
            return
        p.write_text(text.rstrip() + "\n\n" + body + "\n")
        return
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(body + "\n")
