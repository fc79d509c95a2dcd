"""Calibration factors: a few named scalings of the cost model, fitted to a user's measured runs.

``llmsim calibrate --runs`` fits them (:mod:`sim.calibrate.runs`) and ``llmsim run --calibration``
applies them; :func:`sim.runner.simulate` takes them as ``factors`` (None: the model as it is).

* ``compute_efficiency`` multiplies the rate of every compute kernel (GEMM, attention and the
  bandwidth-bound elementwise kernels): each kernel's time is divided by it. 1.0 is the
  catalogue's rate (:mod:`sim.costs.compute`).
* ``comm_efficiency`` multiplies the bandwidth of every link of the fabric, so the rate of every
  flow of every collective and transfer; the fixed latencies stay. 1.0 is the topology as given.
* ``host_issue_s`` is a floor under every compute kernel's time: the host issues one kernel at a
  time, and a kernel shorter than the time it takes to issue the next leaves the GPU waiting
  (the launch-bound regime of small kernels, docs/design.md). 0 sets no floor.

These are the factors SimuMax (GEMM, attention and NCCL efficiencies measured on the target
machine) and Lumos (per-kernel times replayed from the job's own traces) calibrate, reduced to
one scalar each so that a handful of measured iteration times determine them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CalibrationFactors", "FACTOR_NAMES"]

FACTOR_NAMES = ("compute_efficiency", "comm_efficiency", "host_issue_us")
"""The factors' names as a calibration file and ``--fit`` write them."""


@dataclass(frozen=True)
class CalibrationFactors:
    """Scalings of the cost model (module docstring); the defaults change nothing."""

    compute_efficiency: float = 1.0
    comm_efficiency: float = 1.0
    host_issue_s: float = 0.0

    def __post_init__(self) -> None:
        assert self.compute_efficiency > 0 and self.comm_efficiency > 0 and self.host_issue_s >= 0, self

    def compute_time_s(self, catalogue_s: float) -> float:
        """A compute kernel's time from its catalogue time: at ``compute_efficiency`` times the
        rate, and no shorter than the host's issue floor."""
        return max(catalogue_s / self.compute_efficiency, self.host_issue_s)

    @property
    def least_time_scale(self) -> float:
        """The least any task's time is multiplied by: a compute kernel's by at least
        ``1 / compute_efficiency`` (the floor only lengthens it), a flow's by at most
        ``1 / comm_efficiency`` on its bandwidth part and not at all on its latency, so a
        lower bound on the uncalibrated iteration times this is one on the calibrated
        (a makespan is a sum of task times along a path, each scaled by at least this)."""
        return min(1.0, 1.0 / self.compute_efficiency, 1.0 / self.comm_efficiency)

    def capacities(self, capacity_bytes_per_s: Sequence[float]) -> list[float]:
        """The fabric's link capacities at ``comm_efficiency`` times their bandwidth."""
        return [c * self.comm_efficiency for c in capacity_bytes_per_s]

    def value(self, name: str) -> float:
        """The factor ``name`` (one of :data:`FACTOR_NAMES`) in its file units."""
        if name == "host_issue_us":
            return self.host_issue_s * 1e6
        return float(getattr(self, name))

    @classmethod
    def of(cls, values: dict[str, float]) -> CalibrationFactors:
        """Factors from ``{name: value}`` in file units (:data:`FACTOR_NAMES`; missing: unchanged)."""
        return cls(values.get("compute_efficiency", 1.0), values.get("comm_efficiency", 1.0),
                   values.get("host_issue_us", 0.0) * 1e-6)
