"""``llmsim calibrate [--nccl-tests LOG...] [--topology T] [--kernels FILE [--gpu NAME]] [--runs FILE...
[--fit LIST]] -o FILE``: read, fit, check, write, report.

The first single-node ``all_reduce_perf`` log calibrates the topology's scale-up latency and
curves (:func:`sim.calibrate.scale_up.fit_scale_up`); the other logs are parsed (bad input is
refused) and listed as not used, with the reason. A log given twice (the same file, or the same
text in another) and a log of another GPU than the first's (its ``#  Rank ... device`` lines)
are refused, naming both. The calibrated topology then prices the log's
all-reduce at each size from 1 MiB up as ``llmsim collective`` does
(:func:`sim.studies.collective.collective`, ``auto``), and the file's ``check`` list and the
printed table give the log's bus bandwidth beside the topology's before and after.

The kernels of ``--kernels`` (a kernel table or a profiler trace) become the efficiency
curves of the GPU they were measured on (:mod:`sim.calibrate.kernel_command`,
:mod:`sim.calibrate.kernels`), written with the check of every measured kernel.

The runs of ``--runs`` fit the cost model's factors (:mod:`sim.calibrate.runs`), on the
calibrated topology where the logs calibrated theirs and with the measured kernel curves; the
file's ``factors`` give each with its source and its ``runs`` each run's prediction before and
after the fit. The factors written are the fitted ones moved toward the catalogue by the
validation residuals' prior (:mod:`sim.calibrate.prior`, the shipped
``workloads/intervals/residuals.yaml``): ``n`` runs keep ``n tau^2 / (n tau^2 + sigma^2)`` of the
fitted change, what the residuals say carries over to a cluster's other runs; ``--no-prior``
writes the fitted factors. A factor on its bound is one
line, exit 2; a run whose prediction stays over :data:`~sim.calibrate.runs.POOR_FIT` off is a
warning line (exit 0).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from sim.calibrate.calibration import Calibration, calibrated_topology, check_rows
from sim.calibrate.kernel_command import calibrate_kernels, device_gpu, device_word
from sim.calibrate.nccl_tests import NcclTestsLog, parse_nccl_tests
from sim.calibrate.pricing import PRICED, excluded_algorithms, log_busbw_GBps, placement, price_busbw_GBps
from sim.calibrate.prior import shrunk
from sim.calibrate.runs import (
    EFFICIENCY_BOUNDS,
    HOST_ISSUE_BOUNDS_US,
    POOR_FIT,
    RunsFit,
    default_factors,
    fit_runs,
    predict,
    read_runs,
)
from sim.calibrate.scale_out import BETWEEN_CURVES, fit_between_curve, fit_scale_out
from sim.calibrate.scale_up import CURVE_FROM_BYTES, OWN_CURVES, CalibratedValue, fit_own_curve, fit_scale_up
from sim.config import default_topology_name, load_topology
from sim.costs.factors import CalibrationFactors, KernelCurves
from sim.errors import ConfigError, Described
from sim.hardware import get_gpu
from sim.inputs import read_input_text
from sim.output.paths import check_output_path
from sim.topology.spec import TopologySpec
from sim.units import GBPS

__all__ = ["calibrate", "log_topology", "price_log", "prior_weight"]



def log_topology(log: NcclTestsLog) -> str:
    """The topology preset of the log's GPU (:func:`sim.config.default_topology_name`)."""
    for device in log.devices:
        word = device_word(device)
        if word is not None:
            return default_topology_name(word)
    raise ConfigError("<--topology>", "--topology", f"a topology (the GPUs of {log.name}, {list(log.devices)}, "
                      "have no default one)", None)


def price_log(log: NcclTestsLog, topology: TopologySpec, name: str | None = None) -> list[tuple[int, float]]:
    """(size, bus bandwidth in GB/s) of the log's collective on ``topology`` at each size from 1 MiB
    up, at the log's placement (:mod:`sim.calibrate.pricing`; ``name``: what the user called the topology)."""
    where = placement(log, topology, name or topology.name)
    kind = PRICED[log.collective]
    excluded = excluded_algorithms(log.nccl_algo, log.path)
    return [(r.size_bytes, price_busbw_GBps(kind, r.size_bytes, where, topology, excluded)) for r in log.rows
            if r.size_bytes >= CURVE_FROM_BYTES]


def _describe(log: NcclTestsLog) -> str:
    nodes = f"{log.nodes} node" + ("s" if log.nodes > 1 else "")
    version = f"NCCL {log.nccl_version}" if log.nccl_version else "NCCL version not in the log"
    algo = f", NCCL_ALGO={log.nccl_algo}" if log.nccl_algo else ""
    return (f"{log.collective}_perf, {log.ranks} ranks on {nodes} ({', '.join(log.devices)}), {version}{algo}, "
            f"{len(log.rows)} sizes {log.rows[0].size_bytes:,} .. {log.rows[-1].size_bytes:,} B")


def calibrate(logs: Sequence[str] | None, topology: str | None, output: str, runs: Sequence[str] | None = None,
              fit: Sequence[str] | None = None, kernels: str | None = None, gpu: str | None = None,
              prior: bool = True) -> int:
    """Run ``llmsim calibrate [--nccl-tests LOGS] [--topology T] [--kernels KERNELS [--gpu GPU]]
    [--runs RUNS [--fit FIT] [--no-prior]] -o OUTPUT``; returns the exit status."""
    check_output_path(output, "--output")
    if not logs and not runs and not kernels:
        raise ConfigError("<calibrate>", "--nccl-tests / --kernels / --runs", "nccl-tests logs, a kernel table, "
                          "measured runs, or several of them", None)
    cal = Calibration(output, None, None, ())
    calibrated: tuple[str, TopologySpec] | None = None
    used: NcclTestsLog | None = None
    if logs:
        cal, used = _calibrate_logs(logs, topology, output)
        assert cal.topology is not None
        calibrated = (cal.topology, calibrated_topology(output, cal.topology, cal=cal))
    curves: KernelCurves | None = None
    if kernels:
        section = calibrate_kernels(kernels, gpu, topology, used)
        cal = dataclasses.replace(cal, kernels=section)
        curves = section.curves(output)
    status = 0
    if runs:
        cal, status = _calibrate_runs(cal, runs, fit, calibrated, curves, prior)
    cal.write(output)
    print(f"wrote {cal.path} (llmsim run --calibration {cal.path} applies it)")
    return status


UP_CURVES = frozenset(f"{c}_curve" for c in OWN_CURVES)
"""The roles of one-node logs that keep a curve of their own (:func:`_roles`)."""
OUT_CURVES = frozenset(f"{c}_scale_out_curve" for c in BETWEEN_CURVES)
"""The roles of logs across nodes that keep a curve of their own between nodes
(:data:`~sim.calibrate.scale_out.BETWEEN_CURVES`)."""

CALIBRATING = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
"""The tests whose logs calibrate, in the order preferred: an all-reduce where one is given,
else an all-gather or a reduce-scatter (ring collectives the planner prices as NCCL runs them),
else an all-to-all or a sendrecv (direct sends through the switch, and across nodes through the
NICs); every other log of a priced collective is a check."""


def _roles(parsed: list[NcclTestsLog]) -> tuple[list[str | None], list[str | None]]:
    """What each log does: ``scale_up`` (the first one-node log of the most preferred
    :data:`CALIBRATING` test given), ``scale_out`` (the same across nodes), ``alltoall_curve``,
    ``sendrecv_curve``, ``all_gather_curve`` and ``reduce_scatter_curve`` (the first one-node log
    of that test beside a scale-up log of another: its own curve,
    :func:`~sim.calibrate.scale_up.fit_own_curve`), ``alltoall_scale_out_curve``,
    ``all_gather_scale_out_curve`` and ``reduce_scatter_scale_out_curve`` (the first log across
    nodes of that test beside a scale-out log of another: its own curve between nodes,
    :func:`~sim.calibrate.scale_out.fit_between_curve`), ``check`` (any other log of a
    collective the simulator prices), or None with the reason it is not used."""
    taken: dict[str, int] = {}
    for test in CALIBRATING:
        for i, log in enumerate(parsed):
            kind = "scale_up" if log.nodes == 1 else "scale_out"
            if log.collective == test and kind not in taken:
                taken[kind] = i
    for i, log in enumerate(parsed):  # beside the scale-up log: a collective's own curve (OWN_CURVES)
        own = f"{log.collective}_curve"
        if log.nodes == 1 and log.collective in OWN_CURVES and own not in taken and "scale_up" in taken \
                and i != taken["scale_up"] and parsed[taken["scale_up"]].collective != log.collective:
            taken[own] = i
    for i, log in enumerate(parsed):  # beside the scale-out log: a collective's own curve between nodes
        own = f"{log.collective}_scale_out_curve"
        if log.nodes > 1 and own in OUT_CURVES and own not in taken and "scale_out" in taken \
                and parsed[taken["scale_out"]].collective != log.collective:
            taken[own] = i
    roles: list[str | None] = []
    whys: list[str | None] = []
    for i, log in enumerate(parsed):
        role: str | None = None
        why: str | None = None
        if i in taken.values():
            role = next(r for r, j in taken.items() if j == i)
        elif log.collective in PRICED:
            role = "check"
        else:
            why = f"{log.collective}_perf: the simulator does not price it (it prices {', '.join(PRICED)})"
        roles.append(role)
        whys.append(why)
    return roles, whys


ROLE_WORDS = {"scale_up": "calibrates the scale-up curves", "scale_out": "calibrates the scale-out curve",
              "alltoall_curve": "calibrates the all-to-all's own curve",
              "sendrecv_curve": "calibrates point-to-point sends' own curve",
              "all_gather_curve": "calibrates the all-gather's own curve",
              "reduce_scatter_curve": "calibrates the reduce-scatter's own curve",
              "alltoall_scale_out_curve": "calibrates the all-to-all's own curve between nodes",
              "all_gather_scale_out_curve": "calibrates the all-gather's own curve between nodes",
              "reduce_scatter_scale_out_curve": "calibrates the reduce-scatter's own curve between nodes",
              "check": "a check: priced on the topology, not fitted"}


def _read_logs(paths: Sequence[str]) -> list[NcclTestsLog]:
    """The nccl-tests logs of ``paths``, each read once, all of one GPU.

    Parameters
    ----------
    paths : Sequence[str]
        The ``--nccl-tests`` files, in the order given.

    Returns
    -------
    list[NcclTestsLog]
        The logs, in that order.

    Raises
    ------
    ConfigError
        For a log given twice (the same file, or another with the same text: a check of a log
        against itself), a log whose ranks ran on more than one GPU, or a log of another GPU
        than the first's (its ``#  Rank ... device`` lines: one calibration is of one
        cluster's GPUs, and the topology is chosen from them).
    """
    seen: dict[str, str] = {}
    parsed: list[NcclTestsLog] = []
    for path in paths:
        text = read_input_text(path, "nccl-tests output")
        if text in seen:
            first = seen[text]
            same = os.path.realpath(first) == os.path.realpath(path)
            what = "the same file as" if same else "the same text as"
            raise ConfigError(path, "--nccl-tests", f"each log once ({what} {first}, given before it: a log checked "
                              "against itself says nothing)",
                              Described(f"{path} given twice" if same else f"a copy of {first}"))
        seen[text] = path
        parsed.append(parse_nccl_tests(text, path))
    gpus = [{_gpu_of(d) for d in log.devices} for log in parsed]
    for log, mine in zip(parsed, gpus):
        if len(mine) > 1:
            raise ConfigError(log.path, "devices", "the ranks of one log on one GPU model (its '#  Rank ... device' "
                              "lines)", sorted(log.devices))
        if mine != gpus[0]:
            head = parsed[0]
            raise ConfigError(log.path, "devices", f"the GPU of the other logs: {head.name} ran on "
                              f"{', '.join(head.devices)}; logs of other GPUs calibrate another cluster (one llmsim "
                              "calibrate per GPU)", ", ".join(log.devices))
    return parsed


def _gpu_of(device: str) -> str:
    """The catalogue GPU a log's device name names (:func:`device_gpu`), else the name itself."""
    return device_gpu(device) or device.strip()


def _calibrate_logs(logs: Sequence[str], topology: str | None, output: str) -> tuple[Calibration, NcclTestsLog]:
    """The nccl-tests part: the first one-node all-reduce (else all-gather, reduce-scatter,
    all-to-all or sendrecv) calibrates the scale-up, the first across nodes the scale-out (on the scale-up so
    calibrated), every other log of a priced collective is checked; printed, and the log the
    calibration is from."""
    parsed = _read_logs(logs)
    roles, whys = _roles(parsed)
    up_log = next((g for g, r in zip(parsed, roles) if r == "scale_up"), None)
    out_log = next((g for g, r in zip(parsed, roles) if r == "scale_out"), None)
    records = []
    for log, role, why in zip(parsed, roles, whys):
        records.append({"file": log.path, "collective": log.collective, "ranks": log.ranks, "nodes": log.nodes,
                        "devices": list(log.devices), "nccl_version": log.nccl_version, "rows": len(log.rows),
                        "used": role is not None, **({"role": role} if role else {}),
                        **({"not_used_because": why} if why else {})})
    used = up_log or out_log
    if used is None:
        first = parsed[0]
        raise ConfigError(first.path, "collective", "an all_reduce_perf log (else all_gather_perf, "
                          "reduce_scatter_perf, alltoall_perf or sendrecv_perf; of one node: the scale-up curves; "
                          "across nodes: the scale-out curve); other collectives are checks of it",
                          f"{first.collective}_perf over {first.ranks} ranks on {first.nodes} nodes")
    name = topology or log_topology(used)
    base = load_topology(name)
    if base.gpu is not None:
        for log in parsed:
            other = next((d for d in log.devices if device_gpu(d) not in (None, get_gpu(base.gpu).name)), None)
            if other is not None:
                raise ConfigError(log.path, "devices", f"the GPUs of topology {name} ({base.gpu}): a log of "
                                  "other GPUs calibrates another topology (--topology)", other)
    up_values: tuple[CalibratedValue, ...] = ()
    algorithm = None
    if up_log is not None:
        fit = fit_scale_up(up_log, base, name)
        up_values, algorithm = fit.values, fit.algorithm
    if up_values:
        up_only = Calibration(output, name, base.scale_up.link.bandwidth_bytes_per_s / GBPS, up_values, ())
        on = calibrated_topology(output, name, cal=up_only)
        up_values += tuple(fit_own_curve(g, on, name) for g, r in zip(parsed, roles) if r in UP_CURVES)
    cal = Calibration(output, name, base.scale_up.link.bandwidth_bytes_per_s / GBPS if up_values else None,
                      up_values, tuple(records))
    if out_log is not None:
        out = fit_scale_out(out_log, name, cal.overrides())
        cal = dataclasses.replace(cal, scale_out=out.values, nics_per_node=out.nics_per_node,
                                  nic_bandwidth_Gbps=out.nic_bandwidth_Gbps)
        on_nics = cal.overrides()
        own = tuple(fit_between_curve(g, name, on_nics) for g, r in zip(parsed, roles) if r in OUT_CURVES)
        cal = dataclasses.replace(cal, scale_out=cal.scale_out + own)
    calibrated = calibrated_topology(output, name, cal=cal)
    rows = []
    for log, role in zip(parsed, roles):
        if role is None:
            continue
        measured = log_busbw_GBps(log)
        before = dict(price_log(log, base, name))
        rows += [{"log": log.name, "collective": log.collective, "role": role, "size_bytes": s,
                  "log_busbw_GBps": measured[s], "topology_busbw_GBps": before[s], "calibrated_busbw_GBps": bw,
                  "error_before": before[s] / measured[s] - 1, "error": bw / measured[s] - 1}
                 for s, bw in price_log(log, calibrated, name)]
    cal = dataclasses.replace(cal, check=check_rows(rows))
    _print(cal, parsed, roles, base, up_log, out_log, algorithm, rows)
    return cal, used


def _print(cal: Calibration, parsed: list[NcclTestsLog], roles: list[str | None], base: TopologySpec,
           up_log: NcclTestsLog | None, out_log: NcclTestsLog | None, algorithm: str | None,
           rows: list[dict]) -> None:
    for log in parsed:
        print(f"llmsim calibrate: {log.name}: {_describe(log)}")
    for rec in cal.logs:
        if not rec["used"]:
            print(f"  not used: {rec['file']}: {rec['not_used_because']}")
    if up_log is not None:
        print(f"topology {cal.topology} ({cal.bandwidth_GBps:g} GB/s per GPU per direction), calibrated as "
              f"{algorithm} from {up_log.name}:")
        lat = next(v for v in cal.values if v.key == "collective_latency_us")
        print(f"  scale_up.collective_latency_us: {base.scale_up.collective_latency_s * 1e6:g} -> {lat.value:g}")
        for v in cal.values:
            if v.key != "collective_latency_us":
                print(f"  scale_up.{v.key}: {len(v.value)} points, {v.value[0][0]:,} .. {v.value[-1][0]:,} B")  # type: ignore[index,arg-type]
    if out_log is not None:
        out = base.scale_out
        print(f"topology {cal.topology} ({cal.nics_per_node} x {cal.nic_bandwidth_Gbps:g} Gb/s NICs per node), "
              f"scale-out calibrated from {out_log.name}" + (" on the scale-up so calibrated" if up_log else "")
              + ":")
        for v in cal.scale_out:
            if v.key == "latency_us":
                print(f"  scale_out.latency_us: {out.nic.latency_s * 1e6:g} -> {v.value:g}")
            else:
                pts = v.value
                assert isinstance(pts, list)
                print(f"  scale_out.{v.key}: {len(pts)} points, {pts[0][0]:,} .. {pts[-1][0]:,} B, efficiency "
                      f"{min(p[1] for p in pts):.4g} .. {max(p[1] for p in pts):.4g}")
    for log, role in zip(parsed, roles):
        if role is None:
            continue
        mine = [r for r in rows if r["log"] == log.name]
        nodes = f" on {log.nodes} nodes" if log.nodes > 1 else ""
        print(f"{PRICED[log.collective].value} bus bandwidth over {log.ranks} GPUs{nodes}"
              + (f", {log.name} ({ROLE_WORDS[role]})" if len(parsed) > 1 else "")
              + " (GB/s; llmsim collective, auto):")
        if not mine:
            print(f"  no size from {CURVE_FROM_BYTES:,} B up")
            continue
        print(f"  {'size (B)':>14} {'log':>8} {cal.topology:>12} {'calibrated':>11} {'error':>7}")
        for r in mine:
            print(f"  {r['size_bytes']:>14,} {r['log_busbw_GBps']:>8.1f} {r['topology_busbw_GBps']:>12.1f} "
                  f"{r['calibrated_busbw_GBps']:>11.1f} {r['error']:>+7.1%}")
        worst = max(abs(r["error"]) for r in mine)
        print(f"worst error from 1 MiB up: {worst:.1%}" + (f" ({cal.topology} before: "
              f"{max(abs(r['error_before']) for r in mine):.1%})" if role != "check" or len(parsed) > 1 else ""))


def _calibrate_runs(cal: Calibration, paths: Sequence[str], names: Sequence[str] | None,
                    calibrated: tuple[str, TopologySpec] | None,
                    kernels: KernelCurves | None = None, prior: bool = True) -> tuple[Calibration, int]:
    """The ``--runs`` part: the factors fitted, printed, and added to ``cal``; the exit status."""
    runs = read_runs(paths, calibrated)
    chosen = tuple(names) if names else default_factors(len(runs))
    files = ", ".join(dict.fromkeys(r.file for r in runs))
    print(f"llmsim calibrate: {len(runs)} measured run{'s' if len(runs) > 1 else ''} from {files}"
          + (f", on {calibrated[0]} as the nccl-tests logs calibrate it" if calibrated else "")
          + (f", with {kernels.gpu}'s measured kernel curves (on the runs on it)" if kernels else ""))
    if not names and len(runs) == 1:
        print("  one run determines one factor: fitting compute_efficiency (--fit compute,comm fits more, "
              "from as many runs)")
    elif len(chosen) > len(runs):
        print(f"  warning: {len(chosen)} factors from {len(runs)} run{'s' if len(runs) > 1 else ''}: more unknowns "
              "than equations, the fit is one of many that match")
    res = fit_runs(runs, chosen, kernels=kernels)
    if res.at_bound:
        bounds = {n: (HOST_ISSUE_BOUNDS_US if n == "host_issue_us" else EFFICIENCY_BOUNDS) for n in res.at_bound}
        raise ConfigError(files, "factors", "factors inside their bounds (the model and the runs disagree more "
                          "than a calibration can say; check the runs' configurations)",
                          "; ".join(f"{n} = {res.factors.value(n):.4g} at its bound ({bounds[n][0]:g} .. "
                                    f"{bounds[n][1]:g})" for n in res.at_bound))
    weight, prior_words = prior_weight(len(runs), prior)
    applied = shrunk(res.factors, weight)
    values = _factor_values(res, files, applied, prior_words)
    # each run as the written factors predict it; its left-out prediction moved by as much
    written = list(res.after) if weight == 1.0 else [predict(r, applied) for r in res.runs]
    rows = [{"file": r.file, "id": r.id, "metric": r.metric, "measured": r.measured,
             "predicted_before": round(b, 6), "predicted_after": round(a, 6), "error_before": round(eb, 4),
             "error_after": round(ea, 4), "predicted_written": round(w, 6),
             "predicted_left_out": None if lo is None else round(r.measured * (1 + lo) * w / a, 6)}
            for r, b, a, w, eb, ea, lo in zip(res.runs, res.before, res.after, written, res.errors_before,
                                              res.errors_after, res.left_out or (None,) * len(res.runs))]
    _print_runs(res, applied, prior_words)
    if weight != 1.0:
        print(f"rms error {_rms([w / r.measured - 1 for w, r in zip(written, res.runs)]):.1%} with the factors as "
              "written (llmsim run --calibration predicts with these)")
    poor = [r for r, e in zip(res.runs, res.errors_after) if abs(e) > POOR_FIT]
    if poor:
        print(f"warning: a poor fit: {len(poor)} of {len(runs)} runs still over {POOR_FIT:.0%} off after the fit "
              f"({', '.join(r.id for r in poor)}): factors this few do not explain them")
    return dataclasses.replace(cal, factors=values, runs=tuple(rows)), 0


def _rms(errors: Sequence[float]) -> float:
    return (sum(e * e for e in errors) / len(errors)) ** 0.5


def prior_weight(runs: int, use: bool = True) -> tuple[float, str]:
    """How much of the fitted change ``runs`` measured runs carry to other runs (the shipped
    table's :class:`~sim.calibrate.prior.CalibrationPrior`; 1 with ``use`` off or no prior), and
    the words that say so."""
    from sim.studies.intervals import shipped_table

    if not use:
        return 1.0, "no prior (--no-prior): the fitted factors as they are"
    p = shipped_table().prior
    if p is None:
        return 1.0, "the shipped residuals table has no calibration prior: the fitted factors as they are"
    w = p.weight(runs)
    return w, (f"the validation residuals' prior keeps {w:.0%} of the fitted change for {runs} run"
               f"{'s' if runs > 1 else ''} (spread of a cluster's mean {p.between_sd:.1%}, of one run about it "
               f"{p.within_sd:.1%}, over {p.groups} groups of validation rows, a source on one GPU each: "
               "workloads/intervals/residuals.yaml)")


def _factor_values(res: RunsFit, files: str, applied: CalibrationFactors | None = None,
                   prior_words: str = "") -> tuple[CalibratedValue, ...]:
    ids = ", ".join(r.id for r in res.runs)
    applied = applied or res.factors
    out = []
    for name in res.names:
        value = round(applied.value(name), 4)
        if name in res.undetermined:
            how = "the runs do not depend on it: left at its default"
        else:
            how = (f"least squares on the relative errors of {len(res.runs)} measured run"
                   f"{'s' if len(res.runs) > 1 else ''}")
            if applied is not res.factors:
                how += f" gives {res.factors.value(name):.4g}; {prior_words}"
        out.append(CalibratedValue(name, value, f"{how} ({files}: {ids}); rms error {_rms(res.errors_before):.2%} "
                                   f"before, {_rms(res.errors_after):.2%} after"))
    return tuple(out)


def _print_runs(res: RunsFit, applied: CalibrationFactors | None = None, prior_words: str = "") -> None:
    print(f"fitted by least squares on the relative errors ({res.evaluations} predictions of each run; efficiencies "
          f"within {EFFICIENCY_BOUNDS[0]:g} .. {EFFICIENCY_BOUNDS[1]:g}):")
    for name, start in zip(res.names, res.starts):
        why = "  (the runs do not depend on it)" if name in res.undetermined else ""
        written = "" if applied is None or why else f", written {applied.value(name):.4g}"
        print(f"  {name}: {start:g} -> {res.factors.value(name):.4g}{written}{why}")
    if prior_words:
        print(f"  written: {prior_words}")
    width = max(len("run"), *(len(r.id) for r in res.runs))
    print(f"  {'run':<{width}}  {'metric':<20} {'measured':>10} {'before':>10} {'error':>7} {'after':>10} {'error':>7}")
    for r, b, a, eb, ea in zip(res.runs, res.before, res.after, res.errors_before, res.errors_after):
        print(f"  {r.id:<{width}}  {r.metric:<20} {r.measured:>10.4g} {b:>10.4g} {eb:>+7.1%} {a:>10.4g} {ea:>+7.1%}")
    print(f"rms error {_rms(res.errors_before):.1%} before, {_rms(res.errors_after):.1%} after")
