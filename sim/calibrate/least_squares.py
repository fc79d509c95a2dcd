"""Bounded nonlinear least squares over a few parameters whose residuals cost a simulation each.

Levenberg-Marquardt (Levenberg 1944, Marquardt 1963; Nocedal & Wright, *Numerical
Optimization*, 2nd ed., section 10.3) with the Jacobian taken by forward differences once and
then kept current by Broyden's rank-one update (Broyden 1965; Nocedal & Wright section 11.1)
after every accepted step, so that an iteration costs one evaluation; a step that does not
lower the sum of squares retakes the Jacobian by differences before the damping is raised.
Each step is projected onto the bounds. A scale factor (an efficiency) is a parameter in log
space, so that a step halves or doubles it alike; an additive one (a time floor) is linear.

A parameter whose column of the first Jacobian is zero (the residuals do not depend on it at
the start) is left at its start and reported as undetermined.

Each residual's *leverage* at the solution, ``h_ii`` of the hat matrix ``J (J^T J)^-1 J^T``
over the fitted parameters' columns of the Jacobian, says how much that residual pulled the
fit toward itself; ``r_i / (1 - h_ii)`` is the residual the fit would leave at point ``i``
fitted without it (the PRESS residual: Allen 1974, "The Relationship Between Variable Selection
and Data Augmentation and a Method for Prediction", Technometrics 16:125; exact for a linear
model, to first order here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Parameter", "LeastSquaresFit", "least_squares", "leverages"]

STEP_LOG = 1e-3
"""Forward-difference step of a log-space parameter (0.1% of its value)."""
ZERO_COLUMN = 1e-9
"""A Jacobian column whose largest entry is below this is zero (the residuals are relative)."""
LEVERAGE_ONE = 1e-6
"""A leverage within this of 1 is 1: the point alone determines a parameter."""


@dataclass(frozen=True)
class Parameter:
    """One parameter: its start and bounds, in its own units; ``log`` for a scale factor, else
    linear with forward-difference step ``step`` (in its units)."""

    name: str
    start: float
    lower: float
    upper: float
    log: bool = True
    step: float = STEP_LOG

    def to_z(self, x: float) -> float:
        return math.log(x) if self.log else x

    def from_z(self, z: float) -> float:
        return math.exp(z) if self.log else z


@dataclass(frozen=True)
class LeastSquaresFit:
    """The fitted values, the residuals at the start and at the end, and how the fit went."""

    values: tuple[float, ...]
    start_residuals: tuple[float, ...]
    residuals: tuple[float, ...]
    evaluations: int
    at_bound: tuple[str, ...]
    """Parameters that ended on one of their bounds."""
    undetermined: tuple[str, ...]
    """Parameters the residuals do not depend on (left at their start)."""
    leverages: tuple[float, ...] = ()
    """Each residual's leverage at the solution (module docstring); 0 where no parameter was fitted."""

    @property
    def left_out_residuals(self) -> tuple[float | None, ...]:
        """Each residual as the fit without its point would leave it, ``r_i / (1 - h_ii)``
        (module docstring); None where the point alone determines a parameter (``h_ii`` = 1)."""
        return tuple(None if h > 1.0 - LEVERAGE_ONE else r / (1.0 - h)
                     for r, h in zip(self.residuals, self.leverages or (0.0,) * len(self.residuals)))


def least_squares(residuals: Callable[[tuple[float, ...]], Sequence[float]], params: Sequence[Parameter], *,
                  tolerance: float = 1e-7, max_evaluations: int = 40) -> LeastSquaresFit:
    """Minimize ``sum(residuals(values)**2)`` over ``params`` within their bounds (module docstring).

    It stops when a step moves no parameter by more than ``tolerance`` (in its z space: log or
    linear), when the residuals are all below ``tolerance``, or after ``max_evaluations``.
    """
    lo = np.array([p.to_z(p.lower) for p in params])
    hi = np.array([p.to_z(p.upper) for p in params])
    evaluations = 0

    def f(z: np.ndarray) -> np.ndarray:
        nonlocal evaluations
        evaluations += 1
        return np.array(residuals(tuple(p.from_z(float(v)) for p, v in zip(params, z))), dtype=float)

    z = np.clip(np.array([p.to_z(p.start) for p in params]), lo, hi)
    r = f(z)
    start_r = r.copy()

    def jacobian(z: np.ndarray, r: np.ndarray) -> np.ndarray:
        cols = []
        for j, p in enumerate(params):
            h = p.step
            if z[j] + h > hi[j]:
                h = -h
            dz = z.copy()
            dz[j] += h
            cols.append((f(dz) - r) / h)
        return np.array(cols).T

    jac = jacobian(z, r)
    free = np.array([np.max(np.abs(jac[:, j])) > ZERO_COLUMN for j in range(len(params))])
    undetermined = tuple(p.name for p, k in zip(params, free) if not k)
    damping = 1e-3
    fresh = True
    while evaluations < max_evaluations and np.max(np.abs(r)) > tolerance and free.any():
        a = jac[:, free]
        g = a.T @ r
        h = a.T @ a
        step = np.zeros(len(params))
        try:
            step[free] = np.linalg.solve(h + damping * np.diag(np.maximum(np.diag(h), 1e-12)), -g)
        except np.linalg.LinAlgError:
            break
        z_new = np.clip(z + step, lo, hi)
        moved = z_new - z
        if np.max(np.abs(moved)) <= tolerance:
            break
        r_new = f(z_new)
        if r_new @ r_new < r @ r:
            # Broyden's update of the kept Jacobian along the step taken
            jac = jac + np.outer(r_new - r - jac @ moved, moved) / (moved @ moved)
            z, r = z_new, r_new
            damping = max(damping / 10, 1e-9)
            fresh = False
        elif not fresh:
            jac, fresh = jacobian(z, r), True
        else:
            damping *= 10
            if damping > 1e8:
                break
    at_bound = tuple(p.name for j, p in enumerate(params)
                     if free[j] and (abs(z[j] - lo[j]) <= 1e-9 or abs(z[j] - hi[j]) <= 1e-9))
    return LeastSquaresFit(tuple(p.from_z(float(v)) for p, v in zip(params, z)), tuple(float(x) for x in start_r),
                           tuple(float(x) for x in r), evaluations, at_bound, undetermined,
                           leverages(jac[:, free]))


def leverages(jac: np.ndarray) -> tuple[float, ...]:
    """The diagonal of the hat matrix ``J (J^T J)^+ J^T`` of the Jacobian ``jac`` (rows:
    residuals, columns: fitted parameters; none: every leverage 0).

    >>> [round(h, 6) for h in leverages(np.ones((4, 1)))]  # one scale over four points: 1/4 each
    [0.25, 0.25, 0.25, 0.25]
    """
    if jac.size == 0:
        return (0.0,) * jac.shape[0]
    hat = jac @ np.linalg.pinv(jac.T @ jac) @ jac.T
    return tuple(float(min(max(h, 0.0), 1.0)) for h in np.diag(hat))
