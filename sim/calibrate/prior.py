"""How far one measured run should move a calibration: the prior the validation residuals give.

A run the user measured on their cluster is off from llmsim's catalogue prediction for two
reasons: what their cluster and software share across all their runs (a cluster effect, which
a calibration should carry to the next run), and what is particular to that run (its model, its
layout, settings the catalogue prices differently, which the next run does not share). Fitted
by plain least squares, one run's factors take both, and the particular part is carried into
every later prediction as error. The validation residuals measure how big each part is: the
rows of one source on one GPU stand for the runs of one cluster and software (a publication's
runs, a framework's performance table), so the spread of their log time ratios
(:func:`sim.studies.intervals.time_ratio`) within such a group is the run-particular part
(``within_sd``) and the spread of the groups' means beyond what that explains is the cluster
part (``between_sd``): a one-way random-effects model, its variance components estimated by the
analysis-of-variance method for unbalanced groups (Searle, Casella and McCulloch 1992,
*Variance Components*, Sec. 3.5; ``n0`` is their ``(N - sum n_i^2 / N) / (a - 1)``).

Under that model the best estimate of a cluster's effect from ``n`` of its runs is their mean
effect times ``n tau^2 / (n tau^2 + sigma^2)`` (the best linear unbiased predictor of a random
effect; Searle et al. Sec. 7.4), so ``llmsim calibrate --runs`` minimizes the runs' squared
relative errors plus ``sigma^2 / tau^2`` times the square of the mean relative change the
factors make to the runs' predictions (:func:`sim.calibrate.runs.fit_runs`): with one factor,
one run moves its own prediction ``tau^2 / (tau^2 + sigma^2)`` of the way to its measurement.
The figures are written by ``llmsim validate --markdown`` beside the intervals
(``workloads/intervals/residuals.yaml``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from sim.costs.factors import CalibrationFactors

__all__ = ["CalibrationPrior", "estimate_prior", "shrunk"]


@dataclass(frozen=True)
class CalibrationPrior:
    """The two spreads of the validation residuals' log time ratios (module docstring)."""

    between_sd: float
    """Spread of the cluster effect: how far one source-and-GPU group's mean sits from another's."""
    within_sd: float
    """Spread of one run about its group's mean."""
    groups: int
    """Groups (a source on a GPU) with at least two rows, which the estimate reads."""
    rows: int
    """Their rows."""

    @property
    def pseudo_runs(self) -> float:
        """``sigma^2 / tau^2``: the runs' worth of weight the catalogue keeps (infinite when the
        groups' means differ no more than their rows' spread explains)."""
        if self.between_sd == 0.0:
            return math.inf
        return (self.within_sd / self.between_sd) ** 2

    def weight(self, runs: int) -> float:
        """How far ``runs`` measured runs move a prediction toward their mean measurement:
        ``n tau^2 / (n tau^2 + sigma^2)``.

        >>> p = CalibrationPrior(0.1, 0.1, 5, 20)
        >>> p.weight(1), p.weight(3)
        (0.5, 0.75)
        """
        if runs <= 0 or self.between_sd == 0.0:
            return 0.0
        return runs / (runs + self.pseudo_runs)

    def to_dict(self) -> dict:
        return {"between_clusters_sd": round(self.between_sd, 6), "within_cluster_sd": round(self.within_sd, 6),
                "groups": self.groups, "rows": self.rows, "one_run_weight": round(self.weight(1), 6)}


def estimate_prior(log_ratios: Mapping[Hashable, Sequence[float]]) -> CalibrationPrior:
    """The variance components of ``log_ratios`` (group -> its rows' log time ratios) by the
    analysis-of-variance method (module docstring); groups of one row are left out.

    >>> p = estimate_prior({"a": [-0.15, -0.05], "b": [-0.05, 0.05], "c": [0.15, 0.25]})
    >>> round(p.within_sd, 6), round(p.between_sd, 6)
    (0.070711, 0.144338)

    Raises
    ------
    ValueError
        With fewer than two groups of two rows.
    """
    groups = [list(map(float, v)) for v in log_ratios.values() if len(v) >= 2]
    if len(groups) < 2:
        raise ValueError("a prior needs two groups of at least two rows")
    sizes = [len(g) for g in groups]
    n, a = sum(sizes), len(groups)
    means = [sum(g) / len(g) for g in groups]
    grand = sum(sum(g) for g in groups) / n
    msw = sum((x - m) ** 2 for g, m in zip(groups, means) for x in g) / (n - a)
    msb = sum(k * (m - grand) ** 2 for k, m in zip(sizes, means)) / (a - 1)
    n0 = (n - sum(k * k for k in sizes) / n) / (a - 1)
    tau2 = max(0.0, (msb - msw) / n0)
    return CalibrationPrior(math.sqrt(tau2), math.sqrt(msw), a, n)


def shrunk(fitted: CalibrationFactors, weight: float) -> CalibrationFactors:
    """``fitted`` moved ``1 - weight`` of the way back to the catalogue: each efficiency to the
    power ``weight`` (the factors are fitted in log space, :mod:`sim.calibrate.runs`), the host
    issue floor times ``weight``; to first order each run's predicted change is ``weight`` times
    the fitted one. The measured kernel curves are kept as they are.

    >>> f = shrunk(CalibrationFactors(compute_efficiency=0.64, host_issue_s=1e-5), 0.5)
    >>> round(f.compute_efficiency, 6), f.comm_efficiency, round(f.host_issue_s * 1e6, 6)
    (0.8, 1.0, 5.0)
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"a weight from 0 to 1, not {weight}")
    return CalibrationFactors(fitted.compute_efficiency ** weight, fitted.comm_efficiency ** weight,
                              fitted.host_issue_s * weight, fitted.kernels)
