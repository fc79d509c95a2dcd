"""``llmsim calibrate --runs``: the user's measured iterations fit the cost model's factors.

A run file is a workload file with ``targets``, in the validation cases' format
(``workloads/validation/README.md``): one case or a list, each measured as
``iteration_time_s``, ``tflops_per_gpu`` or ``tokens_per_s_per_gpu`` (the first present is
fitted, as ``llmsim validate`` scores it; ``peak_memory_gib`` and the layer times are read and
not used). Each run is simulated as ``llmsim validate`` simulates a case: at chunk granularity
where that gives the op-level figures, from shorter runs of its steady state where their times
lie on one line (:func:`sim.steady.steady_iteration`), so each evaluation is short.

The factors (:mod:`sim.costs.factors`) are fitted by bounded least squares on the relative
residuals ``predicted / measured - 1`` (:func:`sim.calibrate.least_squares.least_squares`):
``compute_efficiency`` and ``comm_efficiency`` in log space within :data:`EFFICIENCY_BOUNDS`,
``host_issue_us`` linearly within :data:`HOST_ISSUE_BOUNDS_US`, from the median compute-kernel
time of the first run (:func:`host_issue_start_us`): a floor under every kernel moves the time
only where it exceeds a kernel's duration, so from 0 the fit would see no gradient; at the
median half the kernels sit on it. A floor fitted down to 0 is an answer (the runs are not
host-bound), not a factor on its bound. One run fits one factor
(``compute_efficiency``) unless the caller names others; several fit both efficiencies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.calibrate.least_squares import Parameter, least_squares
from sim.config import CaseRecord, default_topology_name, load_case_records, load_topology
from sim.config.fields import read_yaml
from sim.config.presets import resolve_preset
from sim.config.workload import LAYER_TARGETS
from sim.costs.factors import FACTOR_NAMES, CalibrationFactors, KernelCurves
from sim.errors import ConfigError, Described
from sim.runner import simulate
from sim.steady import steady_iteration
from sim.topology.choice import on_system
from sim.topology.spec import TopologySpec
from sim.types import Stream
from sim.units import TFLOPS
from sim.workload.flops import model_flops
from sim.workload.spec import WorkloadSpec

__all__ = ["EFFICIENCY_BOUNDS", "HOST_ISSUE_BOUNDS_US", "POOR_FIT", "TIME_TARGETS", "FIT_WORDS", "MeasuredRun",
           "RunsFit", "fit_runs", "default_factors", "host_issue_start_us",
           "parse_fit", "predict", "predict_iteration_s", "read_runs",
           "run_topology"]

EFFICIENCY_BOUNDS = (0.3, 3.0)
"""The range an efficiency factor is fitted in: a cluster at under a third or over three times
the catalogue's rates is a different machine, not a calibration of this one."""
HOST_ISSUE_BOUNDS_US = (0.0, 100.0)
"""The range of the host issue floor (microseconds per kernel; Megatron-LM's eager PyTorch
issues a kernel every 5-20 us, benchmarks/host_issue.py)."""
MAX_MISMATCH = 1e4
"""The most a run's measurement may differ, as a ratio either way, from its uncalibrated
prediction: no bounded factor reaches past it (an efficiency within :data:`EFFICIENCY_BOUNDS`,
a host floor within :data:`HOST_ISSUE_BOUNDS_US`), and a mismatch of 10^300 (a unit slip, a
typo in the exponent) overflows the fit's squared residuals."""
HOST_ISSUE_STEP_US = 1.0
"""The forward-difference step of the host issue floor (a floor moves the time only once it
passes a kernel's duration: the step must reach past the shortest kernels')."""
POOR_FIT = 0.10
"""A residual above this after the fit is reported as a poor fit (issue #33)."""
TIME_TARGETS = ("iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu")
"""The targets a run is fitted on, in the order ``llmsim validate`` picks the first present."""
OTHER_TARGETS = ("peak_memory_gib",) + LAYER_TARGETS
"""Targets of the validation format that are read and not fitted."""
FIT_WORDS = {"compute": "compute_efficiency", "comm": "comm_efficiency", "host": "host_issue_us"}
"""``--fit``'s words and the factors they name."""
COARSE = "chunk"
"""The granularity a run is simulated at first (as ``llmsim validate``, :mod:`sim.studies.validate`)."""


@dataclass(frozen=True)
class MeasuredRun:
    """One measured run: its workload, the topology it is simulated on, its fitted target."""

    file: str
    id: str
    workload: WorkloadSpec
    topology: TopologySpec
    metric: str
    measured: float
    includes_recompute: bool | None


def _check_targets(path: str, shown: str) -> None:
    """Each case of ``path`` has a mapping of targets with a time or throughput among them, each
    ``{value: a positive number, ...}``; a ConfigError naming the file and the case otherwise."""
    raw = read_yaml(resolve_preset(path, "workloads/validation", "workloads"))
    cases = [raw] if isinstance(raw, Mapping) else raw if isinstance(raw, list) else []
    for i, case in enumerate(cases):
        case_id = case.get("id") if isinstance(case, Mapping) else None
        where = f"{case_id}.targets" if isinstance(case_id, str) else (f"[{i}].targets" if len(cases) > 1
                                                                        else "targets")
        targets = case.get("targets") if isinstance(case, Mapping) else None
        expected = f"the run's measured time or throughput: one of {list(TIME_TARGETS)}, each {{value: NUMBER}}"
        if not isinstance(targets, Mapping) or not targets:
            raise ConfigError(shown, where, expected, targets)
        for key, entry in targets.items():
            if key not in TIME_TARGETS + OTHER_TARGETS:
                raise ConfigError(shown, f"{where}.{key}", f"a time or throughput target: one of {list(TIME_TARGETS)}",
                                  key)
            # a bare number is {value: NUMBER}, as the workload loader reads it (sim.config.workload)
            value = entry.get("value") if isinstance(entry, Mapping) else entry
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")
            if key in TIME_TARGETS and not ok:
                raise ConfigError(shown, f"{where}.{key}", "a positive number, or {value: a positive number, ...}",
                                  entry)
        if not any(k in TIME_TARGETS for k in targets):
            raise ConfigError(shown, where, expected + f" ({', '.join(OTHER_TARGETS)} are not fitted)",
                              sorted(targets))


def run_topology(workload: WorkloadSpec, calibrated: tuple[str, TopologySpec] | None, path: str) -> TopologySpec:
    """The topology a run is simulated on: its own (``system.topology``, else its GPU's DGX
    preset), or ``calibrated`` (name, topology: an nccl-tests calibration of that one), as the
    run's system sees it (its nodes, published network and launch segments:
    :func:`sim.topology.choice.on_system`)."""
    name = workload.system.topology or default_topology_name(workload.system.gpu.name)
    if calibrated is None:
        topo = load_topology(name)
    elif calibrated[0] != name:
        raise ConfigError(path, "system.topology", f"the topology the nccl-tests logs calibrate ({calibrated[0]}): "
                          "calibrate the logs with --topology set to the runs' topology", name)
    else:
        topo = calibrated[1]
    return on_system(topo, workload.system, own=True)


def read_runs(paths: Sequence[str], calibrated: tuple[str, TopologySpec] | None = None) -> list[MeasuredRun]:
    """Every run of ``paths`` (module docstring); a ConfigError naming the file for a run without a
    time or throughput target or whose workload does not load."""
    out: list[MeasuredRun] = []
    for path in paths:
        records: list[CaseRecord] = load_case_records(path)
        if not records:
            raise ConfigError(path, "<top level>", "one or more measured runs (workloads with targets)",
                              Described("no runs"))
        shown = records[0].file
        _check_targets(path, shown)
        for rec in records:
            if rec.workload is None:
                assert rec.error is not None
                raise rec.error
            metric = next(m for m in TIME_TARGETS if m in rec.targets)
            twin = next((r for r in out if r.id == rec.id), None)
            if twin is not None:  # a file given twice, or two files of one run: counted twice in the fit
                raise ConfigError(rec.file, f"{rec.id}.id", f"a run id no other file of --runs has ({twin.file} "
                                  "has it too)", rec.id)
            out.append(MeasuredRun(rec.file, rec.id, rec.workload, run_topology(rec.workload, calibrated, rec.file),
                                   metric, rec.targets[metric], rec.includes_recompute))
    return out


def predict_iteration_s(workload: WorkloadSpec, topology: TopologySpec,
                        factors: CalibrationFactors | None = None) -> float:
    """The iteration time of ``workload`` with ``factors``, as ``llmsim validate`` simulates a case."""
    steady = steady_iteration(workload, topology, granularity=COARSE, exact=True, factors=factors)
    if steady is not None:
        return steady.iteration_time_s
    return simulate(workload, topology, granularity=COARSE, exact=True, factors=factors).result.makespan_s


def predict(run: MeasuredRun, factors: CalibrationFactors | None = None) -> float:
    """``run``'s target metric as the simulator predicts it with ``factors`` (throughputs as
    ``llmsim validate`` reads them: TFLOP/s in the source's sense, hardware FLOPs when it
    counts recomputation)."""
    t = predict_iteration_s(run.workload, run.topology, factors)
    w = run.workload
    n = w.system.num_gpus
    if run.metric == "iteration_time_s":
        return t
    if run.metric == "tflops_per_gpu":
        model, hardware = model_flops(w)
        return (hardware if run.includes_recompute else model) / t / n / TFLOPS
    return w.tokens_per_iteration / t / n


def parse_fit(text: str | None) -> tuple[str, ...] | None:
    """``--fit compute,comm[,host]`` as factor names; None for None."""
    if text is None:
        return None
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words or any(w not in FIT_WORDS for w in words) or len(set(words)) != len(words):
        raise ConfigError("<--fit>", "--fit", f"a comma-separated list of {list(FIT_WORDS)}, each once", text)
    return tuple(n for n in FACTOR_NAMES if n in {FIT_WORDS[w] for w in words})


def default_factors(runs: int) -> tuple[str, ...]:
    """The factors fitted without ``--fit``: one run determines one, several both efficiencies."""
    return ("compute_efficiency",) if runs == 1 else ("compute_efficiency", "comm_efficiency")


def host_issue_start_us(run: MeasuredRun) -> float:
    """Where the fit starts the host issue floor: the median duration of the compute kernels of
    ``run``'s iteration, op by op on its representative ranks, in microseconds (within
    :data:`HOST_ISSUE_BOUNDS_US`)."""
    result = simulate(run.workload, run.topology).result
    times = sorted(s.end_s - s.start_s for s in result.spans if s.stream is Stream.COMPUTE)
    if not times:
        return HOST_ISSUE_BOUNDS_US[0]
    mid = len(times) // 2
    median_s = times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
    return min(max(median_s * 1e6, HOST_ISSUE_BOUNDS_US[0]), HOST_ISSUE_BOUNDS_US[1])


def _parameter(name: str, host_start_us: float = 0.0) -> Parameter:
    if name == "host_issue_us":
        return Parameter(name, host_start_us, *HOST_ISSUE_BOUNDS_US, log=False, step=HOST_ISSUE_STEP_US)
    return Parameter(name, 1.0, *EFFICIENCY_BOUNDS)


@dataclass(frozen=True)
class RunsFit:
    """A fit of ``names`` to ``runs``: the factors, each run's prediction before (the
    uncalibrated model's) and after."""

    names: tuple[str, ...]
    factors: CalibrationFactors
    runs: tuple[MeasuredRun, ...]
    before: tuple[float, ...]
    after: tuple[float, ...]
    evaluations: int
    """Predictions of all the runs the fit made (each a simulation per run)."""
    undetermined: tuple[str, ...]
    """Factors the runs do not depend on (left at their start)."""
    at_bound: tuple[str, ...]
    """Factors that ended on a bound (a host floor fitted down to 0 is not one: module docstring)."""
    starts: tuple[float, ...] = ()
    """Each factor's start, in file units (:data:`~sim.costs.factors.FACTOR_NAMES`)."""
    left_out: tuple[float | None, ...] = ()
    """Each run's relative error (``predicted / measured - 1``) as the fit without it would
    leave it (:attr:`~sim.calibrate.least_squares.LeastSquaresFit.left_out_residuals`); None
    where the run alone determines a factor."""

    @property
    def errors_before(self) -> tuple[float, ...]:
        return tuple(p / r.measured - 1 for p, r in zip(self.before, self.runs))

    @property
    def errors_after(self) -> tuple[float, ...]:
        return tuple(p / r.measured - 1 for p, r in zip(self.after, self.runs))


def fit_runs(runs: Sequence[MeasuredRun], names: Sequence[str], tolerance: float = 1e-7,
             kernels: KernelCurves | None = None) -> RunsFit:
    """Fit the factors ``names`` (of :data:`~sim.costs.factors.FACTOR_NAMES`) to ``runs`` by
    bounded least squares on the relative residuals (module docstring), to ``tolerance``
    (:func:`~sim.calibrate.least_squares.least_squares`), every prediction (those "before"
    too) with the measured ``kernels`` curves (``llmsim calibrate --kernels``) applied."""
    host_start = host_issue_start_us(runs[0]) if "host_issue_us" in names and runs else 0.0
    params = [_parameter(n, host_start) for n in names]
    predicted: dict[tuple[float, ...], list[float]] = {}

    def residuals(values: tuple[float, ...]) -> list[float]:
        factors = CalibrationFactors.of(dict(zip(names, values)), kernels)
        p = predicted[values] = [predict(r, factors) for r in runs]
        return [x / r.measured - 1 for x, r in zip(p, runs)]

    plain = tuple(0.0 if n == "host_issue_us" else 1.0 for n in names)  # the uncalibrated model: "before"
    residuals(plain)
    for run, before in zip(runs, predicted[plain]):
        if not 1 / MAX_MISMATCH <= before / run.measured <= MAX_MISMATCH:
            raise ConfigError(run.file, f"{run.id}.targets.{run.metric}",
                              f"a measurement within a factor of {MAX_MISMATCH:,.0f} of the run's uncalibrated "
                              f"prediction, {before:.6g} (a unit slip?)", run.measured)
    fit = least_squares(residuals, params, tolerance=tolerance)
    start = tuple(p.start for p in params)
    at_bound = tuple(n for n in fit.at_bound
                     if not (n == "host_issue_us" and fit.values[names.index(n)] == HOST_ISSUE_BOUNDS_US[0]))
    return RunsFit(tuple(names), CalibrationFactors.of(dict(zip(names, fit.values)), kernels), tuple(runs),
                   tuple(predicted[plain]), tuple(predicted[fit.values]), fit.evaluations, fit.undetermined,
                   at_bound, start, fit.left_out_residuals)
