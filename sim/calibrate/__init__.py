"""Calibration: the user's own measurements in, a calibration file the simulator applies out.

``llmsim calibrate --nccl-tests LOG... -o FILE`` reads nccl-tests' text output
(:mod:`sim.calibrate.nccl_tests`), derives the topology's scale-up collective latency and
efficiency-by-size curves from its single-node all-reduce tables (:mod:`sim.calibrate.scale_up`)
and writes them, each value with the log and the figures it was read from
(:mod:`sim.calibrate.calibration`). ``llmsim calibrate --kernels FILE`` reads measured kernel
times (a table, :mod:`sim.calibrate.kernel_table`, or a PyTorch profiler trace,
:mod:`sim.calibrate.profiler_trace`) into the GPU's GEMM and attention efficiency curves
(:mod:`sim.calibrate.kernels`, the file's ``kernels`` section: :mod:`sim.calibrate.kernel_section`).
``llmsim calibrate --runs FILE...`` fits the cost model's
factors (:mod:`sim.costs.factors`) to the user's measured runs by bounded least squares
(:mod:`sim.calibrate.runs`, :mod:`sim.calibrate.least_squares`). ``llmsim run --calibration
FILE`` applies the file: its scale_up values on top of the topology, its factors to the cost
model, its kernel curves to the GPU they were measured on
(:func:`sim.calibrate.calibration.apply_calibration`).
"""

from sim.calibrate.calibration import Calibration, calibrated_topology, load_calibration
from sim.calibrate.nccl_tests import NcclTestsLog, NcclTestsRow, parse_nccl_tests, read_nccl_tests

__all__ = ["Calibration", "NcclTestsLog", "NcclTestsRow", "calibrated_topology", "load_calibration",
           "parse_nccl_tests", "read_nccl_tests"]
