"""How often a calibrated run's interval covers the runs the calibration has not seen.

::

    python benchmarks/calibrated_interval_coverage.py                   # the committed validation.json
    python benchmarks/calibrated_interval_coverage.py validation.json --draws 40 --seed 1

For each source (case file) of ``llmsim validate --json``'s rows, and each of up to ``--draws``
sets of ``k`` of its rows (k = 2, 3, 4, 5, 8), the set stands for a user's calibration runs: one
scale is fitted to them (the geometric mean of their measured-over-predicted iteration times,
what a ``compute_efficiency`` fit does to a run whose time is all compute), and each other row
of the source is a run the calibration has not seen, predicted with that scale. An 80% band is
read from the calibration runs two ways, with :func:`sim.studies.intervals.prediction_bound`:

* ``after fit``: their residuals after the fit (their ratios over the fitted scale), in sample;
* ``left out``: each run's ratio over the scale fitted to the *other* calibration runs (the
  residual :mod:`sim.calibrate.least_squares` gives as ``r / (1 - h)``: for one scale over
  ``k`` runs in log space, each leverage is ``1 / k``).

It prints the share of the unseen rows each band covers (nominal 80%) and the bands' median
width. ``sim/studies/intervals.py`` (``MIN_CALIBRATION_RUNS``) and docs/calibrate.md quote these
figures. Nothing is simulated: the time ratios are the validation's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from sim.studies.intervals import HIGH_QUANTILE, LOW_QUANTILE, prediction_bound, residuals

SIZES = (2, 3, 4, 5, 8)


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def coverage(ratios_by_source: dict[str, list[float]], k: int, draws: int, seed: int) -> dict:
    """The coverage and median width of both bands over sets of ``k`` calibration runs."""
    rng = random.Random(seed)
    inside = {"after fit": 0, "left out": 0}
    widths: dict[str, list[float]] = {"after fit": [], "left out": []}
    total = 0
    for _, rs in sorted(ratios_by_source.items()):
        if len(rs) < k + 1:
            continue
        sets = list(itertools.combinations(range(len(rs)), k))
        rng.shuffle(sets)
        for chosen in sets[:draws]:
            scale = _geomean([rs[i] for i in chosen])
            bands = {
                "after fit": [rs[i] / scale for i in chosen],
                "left out": [rs[i] / _geomean([rs[j] for j in chosen if j != i]) for i in chosen],
            }
            bounds = {name: (prediction_bound(v, LOW_QUANTILE), prediction_bound(v, HIGH_QUANTILE))
                      for name, v in bands.items()}
            for name, (lo, hi) in bounds.items():
                widths[name].append(hi / lo)
            for j in range(len(rs)):
                if j in chosen:
                    continue
                total += 1
                for name, (lo, hi) in bounds.items():
                    inside[name] += lo <= rs[j] / scale <= hi
    return {"calibration_runs": k, "unseen_rows": total,
            **{f"{name.replace(' ', '_')}_coverage": inside[name] / total if total else math.nan for name in inside},
            **{f"{name.replace(' ', '_')}_median_width": statistics.median(widths[name]) if widths[name] else math.nan
               for name in widths}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("validation", nargs="?", default=str(Path(__file__).resolve().parents[1] / "validation.json"),
                    help="llmsim validate --json output (default: the committed validation.json)")
    ap.add_argument("--draws", type=int, default=40, help="calibration sets drawn per source and size (default 40)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    rows = residuals(json.loads(Path(args.validation).read_text())["cases"])
    by_source: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_source[r.source].append(r.time_ratio)
    out = [coverage(by_source, k, args.draws, args.seed) for k in SIZES]
    print(f"{len(rows)} rows of {len(by_source)} sources ({args.validation}); nominal "
          f"{HIGH_QUANTILE - LOW_QUANTILE:.0%}")
    print(f"{'runs':>4}  {'unseen rows':>11}  {'after fit':>9}  {'left out':>8}  {'width after':>11}  "
          f"{'width left out':>14}")
    for o in out:
        print(f"{o['calibration_runs']:>4}  {o['unseen_rows']:>11}  {o['after_fit_coverage']:>9.0%}  "
              f"{o['left_out_coverage']:>8.0%}  x{o['after_fit_median_width']:>10.3f}  "
              f"x{o['left_out_median_width']:>13.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
