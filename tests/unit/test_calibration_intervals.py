"""``llmsim run --calibration``'s interval (issue #33): from the calibration's own left-out
residuals (each run as the fit without it predicts it) where it has five runs or more, else the
validation residuals' with the reason on the report's line; the left-out residuals themselves."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli import main
from sim.studies.intervals import calibration_band, prediction_bound, run_band
from sim.types import GpuGeneration


def _row(run_id: str, measured: float, left_out: float, metric: str = "iteration_time_s") -> dict:
    """A fitted run whose left-out prediction is ``left_out`` (its prediction after the fit is
    the measurement: in-sample residuals say nothing of the interval)."""
    return {"file": "runs.yaml", "id": run_id, "metric": metric, "measured": measured, "predicted_before": left_out,
            "predicted_after": measured, "error_before": 0.0, "error_after": 0.0, "predicted_left_out": left_out}


FIVE = [("a", 1.2, 1.0), ("b", 0.9, 1.0), ("c", 1.05, 1.0), ("d", 1.1, 1.0), ("e", 0.97, 1.0)]


def test_the_band_is_the_bounds_of_the_runs_left_out_time_ratios():
    rows = [_row("a", 1.1, 1.0), _row("b", 0.95, 1.0), _row("c", 100.0, 110.0, "tflops_per_gpu"),
            _row("d", 1.02, 1.0), _row("e", 0.99, 1.0)]
    band = calibration_band(rows, "cal.yaml")
    assert band is not None and band.rows == 5
    ratios = [1.1, 0.95, 1.1, 1.02, 0.99]  # the throughput row: predicted over measured
    assert band.low_factor == pytest.approx(prediction_bound(ratios, 0.1))
    assert band.high_factor == pytest.approx(prediction_bound(ratios, 0.9))
    assert band.low_factor < 1 < band.high_factor  # though every run is reproduced after the fit
    assert "cal.yaml" in band.scope and band.residuals == "left-out residuals of the fit"


def test_fewer_than_five_runs_with_left_out_residuals_give_no_band():
    assert calibration_band([_row(*r) for r in FIVE[:4]], "cal.yaml") is None
    no_left_out = [{**_row(*r), "predicted_left_out": None} for r in FIVE]  # each run alone sets a factor
    assert calibration_band(no_left_out, "cal.yaml") is None
    assert calibration_band([_row(*r) for r in FIVE[:4]] + [{"id": "no figures"}], "cal.yaml") is None


def _calibration(tmp_path, runs: list[dict]) -> str:
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump({"llmsim_calibration": 1, "factors": {
        "compute_efficiency": {"value": 0.9, "source": "a test"}}, "runs": runs}))
    return str(path)


def test_run_takes_its_interval_from_the_calibrations_runs(tmp_path, capsys):
    cal = _calibration(tmp_path, [_row(*r) for r in FIVE])
    out = tmp_path / "r.json"
    assert main(["run", "tiny", "--calibration", cal, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rep = json.loads(out.read_text())
    t = rep["iteration_time_s"]
    ratios = [1.2, 0.9, 1.05, 1.1, 0.97]
    assert rep["iteration_time_s_low"] == pytest.approx(t * prediction_bound(ratios, 0.1), rel=1e-5)
    assert rep["iteration_time_s_high"] == pytest.approx(t * prediction_bound(ratios, 0.9), rel=1e-5)
    assert rep["iteration_time_interval"]["residuals"] == "left-out residuals of the fit"
    assert rep["iteration_time_interval"]["rows"] == 5 and cal in rep["iteration_time_interval"]["from"]
    assert f"(left-out residuals of the fit of the 5 runs of calibration {cal}, 5 rows" in printed


def test_one_run_keeps_the_validation_interval_and_says_why(tmp_path, capsys):
    cal = _calibration(tmp_path, [_row("a", 1.2, 1.0)])
    out = tmp_path / "r.json"
    assert main(["run", "tiny", "--calibration", cal, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rep = json.loads(out.read_text())
    band = run_band("megatron-core", GpuGeneration.AMPERE)
    interval = rep["iteration_time_interval"]
    assert interval["from"] == band.scope and "residuals" not in interval
    assert rep["iteration_time_s_low"] == pytest.approx(rep["iteration_time_s"] * band.low_factor, rel=1e-6)
    why = f"calibration {cal} has 1 fitted run with a left-out residual, its own interval needs 5"
    assert interval["note"] == why and f"; {why}" in printed


def test_sweep_marks_ties_with_the_calibrations_band(tmp_path, capsys):
    cal = _calibration(tmp_path, [_row(*r) for r in FIVE])
    out = tmp_path / "s.json"
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"tp": [2, 4], "pp": [1, 2]}))
    assert main(["sweep", "tiny", "--space", str(space), "--workers", "1", "--top", "2", "--calibration", cal,
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    interval = json.loads(out.read_text())["interval"]
    assert interval["low_factor"] == pytest.approx(prediction_bound([1.2, 0.9, 1.05, 1.1, 0.97], 0.1), rel=1e-5)
    assert interval["rows"] == 5 and cal in interval["from"]
    assert "from the left-out residuals of the fit of the 5 runs of calibration" in printed


def test_left_out_residuals_are_those_of_the_fit_without_the_point():
    """For a model linear in its parameter the PRESS residual r_i / (1 - h_ii) is exact: it is
    the residual a fit to the other points leaves at point i."""
    import numpy as np

    from sim.calibrate.least_squares import Parameter, least_squares

    x = np.array([1.0, 2.0, 3.0, 5.0, 8.0])
    y = np.array([1.1, 1.9, 3.3, 4.8, 8.4])

    def fit(keep):
        def res(v):
            return [float(v[0] * x[i] - y[i]) for i in keep]
        return least_squares(res, [Parameter("a", 1.0, -10.0, 10.0, log=False, step=1e-6)], tolerance=1e-12)

    full = fit(range(len(x)))
    for i in range(len(x)):
        others = [j for j in range(len(x)) if j != i]
        a_i = fit(others).values[0]
        assert full.left_out_residuals[i] == pytest.approx(a_i * x[i] - y[i], rel=1e-4)
    assert sum(full.leverages) == pytest.approx(1.0)  # one parameter
    assert all(abs(lo) > abs(r) for lo, r in zip(full.left_out_residuals, full.residuals))
