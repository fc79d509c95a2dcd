"""``llmsim run --calibration``'s interval (issue #33): from the calibration's own residuals
after its fit where it has two runs or more, else the validation residuals' with the reason on
the report's line."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli import main
from sim.studies.intervals import calibration_band, prediction_bound, run_band
from sim.types import GpuGeneration


def _row(run_id: str, measured: float, after: float, metric: str = "iteration_time_s") -> dict:
    return {"file": "runs.yaml", "id": run_id, "metric": metric, "measured": measured, "predicted_before": after,
            "predicted_after": after, "error_before": 0.0, "error_after": round(after / measured - 1, 4)}


def test_the_band_is_the_bounds_of_the_runs_time_ratios_after_the_fit():
    rows = [_row("a", 1.1, 1.0), _row("b", 0.95, 1.0), _row("c", 100.0, 110.0, "tflops_per_gpu")]
    band = calibration_band(rows, "cal.yaml")
    assert band is not None and band.rows == 3
    ratios = [1.1, 0.95, 1.1]  # the throughput row: predicted over measured
    assert band.low_factor == pytest.approx(prediction_bound(ratios, 0.1))
    assert band.high_factor == pytest.approx(prediction_bound(ratios, 0.9))
    assert band.low_factor < 1 < band.high_factor
    assert "cal.yaml" in band.scope and band.residuals == "residuals after the fit"


def test_fewer_than_two_runs_give_no_band():
    assert calibration_band([_row("a", 1.1, 1.0)], "cal.yaml") is None
    assert calibration_band([_row("a", 1.1, 1.0), {"id": "no figures"}], "cal.yaml") is None


def _calibration(tmp_path, runs: list[dict]) -> str:
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump({"llmsim_calibration": 1, "factors": {
        "compute_efficiency": {"value": 0.9, "source": "a test"}}, "runs": runs}))
    return str(path)


def test_run_takes_its_interval_from_the_calibrations_runs(tmp_path, capsys):
    runs = [_row("a", 1.2, 1.0), _row("b", 0.9, 1.0), _row("c", 1.05, 1.0)]
    cal = _calibration(tmp_path, runs)
    out = tmp_path / "r.json"
    assert main(["run", "tiny", "--calibration", cal, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rep = json.loads(out.read_text())
    t = rep["iteration_time_s"]
    ratios = [1.2, 0.9, 1.05]
    assert rep["iteration_time_s_low"] == pytest.approx(t * prediction_bound(ratios, 0.1), rel=1e-5)
    assert rep["iteration_time_s_high"] == pytest.approx(t * prediction_bound(ratios, 0.9), rel=1e-5)
    assert rep["iteration_time_interval"]["residuals"] == "residuals after the fit"
    assert rep["iteration_time_interval"]["rows"] == 3 and cal in rep["iteration_time_interval"]["from"]
    assert f"(residuals after the fit of the 3 runs of calibration {cal}, 3 rows" in printed


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
    assert interval["note"] == f"calibration {cal} has 1 fitted run, its own interval needs 2"
    assert f"; calibration {cal} has 1 fitted run, its own interval needs 2" in printed


def test_sweep_marks_ties_with_the_calibrations_band(tmp_path, capsys):
    cal = _calibration(tmp_path, [_row("a", 1.2, 1.0), _row("b", 0.9, 1.0), _row("c", 1.05, 1.0)])
    out = tmp_path / "s.json"
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"tp": [2, 4], "pp": [1, 2]}))
    assert main(["sweep", "tiny", "--space", str(space), "--workers", "1", "--top", "2", "--calibration", cal,
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    interval = json.loads(out.read_text())["interval"]
    assert interval["low_factor"] == pytest.approx(prediction_bound([1.2, 0.9, 1.05], 0.1), rel=1e-5)
    assert interval["rows"] == 3 and cal in interval["from"]
    assert "from the residuals after the fit of the 3 runs of calibration" in printed
