"""How well a calibration on one measured run carries over to the source's other runs (issue #33).

::

    python benchmarks/calibrated_accuracy.py [FILE ...] [--per-group K|all] [--group gpu|source|framework]
                                             [--jobs N] [--json OUT]

The rows of each source (a case file of workloads/validation/, all of them by default) are
grouped by GPU (``--group source``: not grouped; ``--group framework``: by the case's framework
release and GPU, for a file that gathers several releases, as ``benchmarks/dgxc/cases.yaml``
does, each release then counting as a source of its own): a user calibrates on a job of their
own cluster and predicts the next job on it. ``K`` of each group's scored rows in turn (evenly
spaced in the file's order; ``all``: every row) each calibrate ``compute_efficiency`` alone, as
``llmsim calibrate --runs`` does with one run (:func:`sim.calibrate.runs.fit_runs`), and the
calibrated model predicts the group's other rows: the calibration row itself is never scored
(held out). It prints, per source and overall, the
mean absolute percentage error of those held-out predictions before the calibration (the
catalogue's model), after it with the fitted factor as it is (``llmsim calibrate --no-prior``),
and after it with the factor ``llmsim calibrate`` writes, moved toward the catalogue by the
calibration prior (:mod:`sim.calibrate.prior`: the one-run weight, here estimated from every
*other* source's uncalibrated residuals, so the held-out source plays no part in it), and how
many fits ended on a bound of the factor (0.3 .. 3; their factor is used as it is). Every row
is simulated as ``llmsim validate`` simulates it (chunk granularity and steady state where
exact), so "before" is validate's error on the same rows.

Rows that cannot be simulated (validate's skipped cases) are left out, and so are groups of
one row (nothing to predict). Not part of the test suite (minutes); the figures go in
docs/calibrate.md, "How well a calibration carries over".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import yaml

from sim.calibrate.prior import estimate_prior
from sim.calibrate.runs import TIME_TARGETS, MeasuredRun, fit_runs, predict, run_topology
from sim.config import load_case_records
from sim.costs.factors import CalibrationFactors
from sim.errors import SimError
from sim.studies.intervals import time_ratio

ROOT = Path(__file__).resolve().parent.parent
FIT_TOLERANCE = 1e-4
"""The fit stops once the calibration row is predicted to 0.01% (a tenth of the figures' last digit)."""


def _release(framework: object) -> str:
    """A framework text's release, as one word: the text up to its first parenthesis
    (``NeMo 24.09 (nvcr.io/...)`` -> ``NeMo_24.09``)."""
    text = framework if isinstance(framework, str) else ""
    return "_".join(text.split("(", 1)[0].split()) or "unnamed"


def _frameworks(path: str) -> dict[str, str]:
    """Each case's release (:func:`_release`) by id."""
    data = yaml.safe_load(Path(path).read_text())
    cases = data["cases"] if isinstance(data, dict) else data
    return {c["id"]: _release(c.get("framework")) for c in cases if isinstance(c, dict) and "id" in c}


def _runs(path: str) -> list[MeasuredRun]:
    out = []
    for rec in load_case_records(path):
        metric = next((m for m in TIME_TARGETS if m in rec.targets), None)
        if rec.workload is None or metric is None:
            continue
        try:
            topo = run_topology(rec.workload, None, rec.file)
        except SimError:
            continue
        out.append(MeasuredRun(rec.file, rec.id, rec.workload, topo, metric, rec.targets[metric],
                               rec.includes_recompute))
    return out


def _predict(run: MeasuredRun, factors: CalibrationFactors | None) -> float | None:
    try:
        return predict(run, factors)
    except SimError:
        return None


def _fit(run: MeasuredRun) -> tuple[float, bool]:
    fit = fit_runs([run], ["compute_efficiency"], tolerance=FIT_TOLERANCE)
    return fit.factors.compute_efficiency, bool(fit.at_bound)


def best_scale_mape(errors: list[float]) -> float:
    """The least mean absolute percentage error one factor can leave on a group's rows, its
    signed relative errors ``errors`` (``predicted / measured - 1``): ``min_c mean_j |c r_j -
    1|`` with ``r_j = 1 + e_j``, found among ``c = 1 / r_i`` (the sum is convex and piecewise
    linear in ``c``, its corners there). It scales the whole prediction, chosen knowing every
    row: what a calibration of one factor could do at best, fitted on all the group's rows.

    >>> best_scale_mape([0.1, 0.1]), round(best_scale_mape([-0.1, 0.1, 0.2]), 4)
    (0.0, 9.0909)
    """
    ratios = [1 + e for e in errors]
    return 100 * min(sum(abs(r / anchor - 1) for r in ratios) / len(ratios) for anchor in ratios)


def _file(group: str) -> str:
    """The source (case file) of a group key (``nemo2407 H100-SXM5-80GB`` or ``nemo2407``)."""
    return group.split(" ", 1)[0]


def _loso_weights(sources: dict[str, list[MeasuredRun]], scored: dict[str, list[int]],
                  base: dict[tuple[str, int], float | None]) -> dict[str, float]:
    """For each source (case file), the one-run weight of the calibration prior
    (:mod:`sim.calibrate.prior`) estimated from every *other* source's uncalibrated log time
    ratios, grouped by source and GPU as ``llmsim validate`` groups them: the held-out source
    plays no part in how far its own calibrations move."""
    ratios: dict[str, list[float]] = {}
    for s, rows in scored.items():
        for i in rows:
            run, p = sources[s][i], base[(s, i)]
            assert p is not None
            ratios.setdefault(s if " " in s else f"{s} {run.workload.system.gpu.name}", []).append(
                math.log(time_ratio(run.metric, run.measured, p)))
    out = {}
    for file in {_file(s) for s in sources}:
        others = {g: v for g, v in ratios.items() if _file(g) != file}
        out[file] = estimate_prior(others).weight(1)
    return out


def _picks(n: int, k: int | None) -> list[int]:
    if k is None or k >= n:
        return list(range(n))
    return sorted({round(i * (n - 1) / max(k - 1, 1)) for i in range(k)})


def _mape(errors: list[float]) -> float | None:
    return 100 * sum(abs(e) for e in errors) / len(errors) if errors else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="case files (default: workloads/validation/*.yaml)")
    ap.add_argument("--per-group", default="3", metavar="K|all", help="calibration rows per group (default 3)")
    ap.add_argument("--group", choices=("gpu", "source", "framework"), default="gpu",
                    help="gpu: a source's rows on one GPU form a group (default); source: all its rows; "
                         "framework: its rows of one framework release on one GPU, each release a source")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPU count)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    from sim.studies.workers import cpu_count, in_worker, local_pool

    files = args.files or sorted(str(p) for p in (ROOT / "workloads" / "validation").glob("*.yaml"))
    k = None if args.per_group == "all" else int(args.per_group)
    t0 = time.perf_counter()
    jobs = args.jobs or cpu_count()
    sources: dict[str, list[MeasuredRun]] = {}
    for f in files:
        release = _frameworks(f) if args.group == "framework" else {}
        for run in _runs(f):
            key = Path(f).stem + (f"/{release[run.id]}" if release else "")
            key += f" {run.workload.system.gpu.name}" if args.group != "source" else ""
            sources.setdefault(key, []).append(run)
    with local_pool(jobs) as pool:
        base_f: dict[tuple[str, int], Future] = {(s, i): pool.submit(in_worker, _predict, r, None)
                                                 for s, runs in sources.items() for i, r in enumerate(runs)}
        base = {key: f.result() for key, f in base_f.items()}
        scored = {s: [i for i in range(len(runs)) if base[(s, i)] is not None] for s, runs in sources.items()}
        cal_rows = {s: [scored[s][j] for j in _picks(len(scored[s]), k)] for s in sources if len(scored[s]) > 1}
        fit_f = {(s, i): pool.submit(in_worker, _fit, sources[s][i]) for s, rows in cal_rows.items() for i in rows}
        fits = {key: f.result() for key, f in fit_f.items()}
        weights = _loso_weights(sources, scored, base)
        pred_f = {(s, i, j): pool.submit(in_worker, _predict, sources[s][j], CalibrationFactors(fits[(s, i)][0]))
                  for s, rows in cal_rows.items() for i in rows for j in scored[s] if j != i}
        prior_f = {(s, i, j): pool.submit(in_worker, _predict, sources[s][j],
                                          CalibrationFactors(fits[(s, i)][0] ** weights[_file(s)]))
                   for s, rows in cal_rows.items() for i in rows for j in scored[s] if j != i}
        preds = {key: f.result() for key, f in pred_f.items()}
        prior_preds = {key: f.result() for key, f in prior_f.items()}
    report = []
    all_before: list[float] = []
    all_after: list[float] = []
    all_prior: list[float] = []
    all_best: list[tuple[float, int]] = []
    for s, rows in cal_rows.items():
        before, after, with_prior = [], [], []
        for (src, _i, j), p in preds.items():
            q = prior_preds[(src, _i, j)]
            if src != s or p is None or q is None:
                continue
            run = sources[s][j]
            before.append(base[(s, j)] / run.measured - 1)
            after.append(p / run.measured - 1)
            with_prior.append(q / run.measured - 1)
        factors = [fits[(s, i)][0] for i in rows]
        errors = [base[(s, j)] / sources[s][j].measured - 1 for j in scored[s]]
        all_best += [(best_scale_mape(errors), len(errors))]
        report.append({"source": s, "rows": len(scored[s]), "calibration_rows": len(rows),
                       "best_scale_mape_pct": best_scale_mape(errors),
                       "held_out_predictions": len(after), "mape_before_pct": _mape(before),
                       "mape_after_pct": _mape(after), "mape_after_prior_pct": _mape(with_prior),
                       "prior_weight": weights[_file(s)], "factor_min": min(factors), "factor_max": max(factors),
                       "fits_at_a_bound": sum(fits[(s, i)][1] for i in rows)})
        all_before += before
        all_after += after
        all_prior += with_prior
    wall = time.perf_counter() - t0
    out = {"per_group": args.per_group, "group": args.group, "groups": report, "mape_before_pct": _mape(all_before),
           "mape_after_pct": _mape(all_after), "mape_after_prior_pct": _mape(all_prior),
           "held_out_predictions": len(all_after),
           "best_scale_mape_pct": sum(m * n for m, n in all_best) / sum(n for _, n in all_best),
           "wall_s": wall, "jobs": jobs}
    group = {"gpu": "source and GPU", "source": "source", "framework": "release and GPU"}[args.group]
    print(f"calibrate compute_efficiency on one row, predict the other rows of its {group} ({args.per_group} "
          f"calibration rows per {group}; MAPE over the held-out predictions):")
    width = max(len("overall"), *(len(r["source"]) for r in report))
    print(f"  {'group':<{width}} {'rows':>4} {'calib':>5} {'preds':>5} {'before':>7} {'after':>7} {'prior':>7} "
          f"{'weight':>6} {'factor':>13} {'at bound':>8} {'1 scale':>7}")
    for r in report:
        print(f"  {r['source']:<{width}} {r['rows']:>4} {r['calibration_rows']:>5} {r['held_out_predictions']:>5} "
              f"{r['mape_before_pct']:>6.1f}% {r['mape_after_pct']:>6.1f}% {r['mape_after_prior_pct']:>6.1f}% "
              f"{r['prior_weight']:>6.3f} {r['factor_min']:>6.3f}..{r['factor_max']:<5.3f} {r['fits_at_a_bound']:>8} "
              f"{r['best_scale_mape_pct']:>6.1f}%")
    print(f"  {'overall':<{width}} {'':>4} {'':>5} {len(all_after):>5} {out['mape_before_pct']:>6.1f}% "
          f"{out['mape_after_pct']:>6.1f}% {out['mape_after_prior_pct']:>6.1f}% {'':>6} {'':>13} {'':>8} "
          f"{out['best_scale_mape_pct']:>6.1f}%")
    print("  1 scale: the least MAPE one factor on the whole prediction leaves on a group's rows, chosen "
          "knowing them all (benchmarks/calibrated_accuracy.py, best_scale_mape); overall by rows")
    print(f"wall {wall:.0f} s with {jobs} worker{'s' if jobs > 1 else ''}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
