"""``llmsim calibrate --runs`` and the calibration factors (issue #33, the measured-runs part).

Factors of 1.0 change nothing; a fit of ``compute_efficiency`` to a run 20% slower than the model
reproduces it; each factor moves what it names; the file's factors are what ``run
--calibration`` applies; bad input (no targets, a target that is not a time or throughput, a
factor on its bound) is one line naming the file, exit 2; a poor fit is a warning, exit 0.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

import sim
from sim.calibrate.calibration import load_calibration
from sim.calibrate.least_squares import Parameter, least_squares
from sim.calibrate.runs import MeasuredRun, fit_runs, predict, predict_iteration_s, read_runs
from sim.cli import main
from sim.config import load_topology, load_workload
from sim.costs.factors import CalibrationFactors
from sim.errors import ConfigError
from sim.runner import simulate
from sim.types import Stream

ROOT = Path(sim.__file__).resolve().parent.parent
TINY = ROOT / "workloads" / "tiny.yaml"
RUNS = ROOT / "tests" / "data" / "runs" / "tiny-measured.yaml"


@pytest.fixture(scope="module")
def tiny():
    return load_workload("tiny"), load_topology("dgx-a100")


def test_factors_of_one_give_exactly_the_uncalibrated_iteration(tiny):
    w, topo = tiny
    plain = simulate(w, topo).result.makespan_s
    assert simulate(w, topo, factors=CalibrationFactors()).result.makespan_s == plain
    assert predict_iteration_s(w, topo, CalibrationFactors()) == predict_iteration_s(w, topo)


def test_each_factor_moves_what_it_names(tiny):
    w, topo = tiny
    plain = simulate(w, topo)
    slow_compute = simulate(w, topo, factors=CalibrationFactors(compute_efficiency=0.5))
    slow_comm = simulate(w, topo, factors=CalibrationFactors(comm_efficiency=0.5))

    def busy(run, comm: bool) -> float:
        return sum(s.end_s - s.start_s for s in run.result.spans if (s.stream is not Stream.COMPUTE) == comm)

    assert busy(slow_compute, False) == pytest.approx(2 * busy(plain, False), rel=0.02)
    assert busy(slow_comm, False) == pytest.approx(busy(plain, False), rel=0.02)
    assert busy(slow_comm, True) > busy(plain, True)
    assert slow_comm.result.makespan_s > plain.result.makespan_s
    assert slow_comm.result.metadata["link_busy_bytes"] == pytest.approx(plain.result.metadata["link_busy_bytes"])
    floor = 1e-3
    floored = simulate(w, topo, factors=CalibrationFactors(host_issue_s=floor))
    compute = [s.end_s - s.start_s for s in floored.result.spans if s.stream is Stream.COMPUTE]
    assert compute and min(compute) >= floor * (1 - 1e-12)
    assert min(s.end_s - s.start_s for s in plain.result.spans if s.stream is Stream.COMPUTE) < floor


def test_a_fit_of_compute_efficiency_reproduces_a_run_20_percent_slower(tiny):
    w, topo = tiny
    target = 1.2 * predict_iteration_s(w, topo)
    run = MeasuredRun("tiny.yaml", "tiny", w, topo, "iteration_time_s", target, None)
    fit = fit_runs([run], ["compute_efficiency"])
    assert fit.factors.compute_efficiency < 1.0
    assert not fit.at_bound and not fit.undetermined
    assert fit.after[0] == pytest.approx(target, rel=0.01)
    assert predict(run, fit.factors) == pytest.approx(target, rel=0.01)
    assert fit.errors_before[0] == pytest.approx(-1 / 6)


def test_least_squares_stops_on_a_bound_and_says_which():
    fit = least_squares(lambda v: [v[0] / 10 - 1], [Parameter("x", 1.0, 0.3, 3.0)])
    assert fit.values[0] == pytest.approx(3.0) and fit.at_bound == ("x",)
    fit = least_squares(lambda v: [v[0] / 2 - 1, 0.0 * v[1]], [Parameter("x", 1.0, 0.3, 3.0),
                                                               Parameter("y", 1.0, 0.3, 3.0)])
    assert fit.values == pytest.approx((2.0, 1.0)) and fit.undetermined == ("y",) and not fit.at_bound


def _case(targets: object, **parallel) -> dict:
    raw = yaml.safe_load(TINY.read_text())
    raw["parallel"].update(parallel)
    raw["targets"] = targets
    return raw


def test_the_command_writes_factors_that_run_applies(tmp_path, capsys):
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--runs", str(RUNS), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "compute_efficiency" in printed and "comm_efficiency" in printed and "warning" not in printed
    cal = load_calibration(str(out))
    factors = cal.calibration_factors()
    assert factors is not None and factors.compute_efficiency < 1.0
    assert [f.key for f in cal.factors] == ["compute_efficiency", "comm_efficiency"]
    assert all("tiny-measured.yaml" in f.source for f in cal.factors)
    first = cal.runs[0]
    assert abs(first["error_after"]) < 0.01 < abs(first["error_before"])
    report = tmp_path / "report.json"
    assert main(["run", str(RUNS), "--case", first["id"], "--calibration", str(out), "--json", str(report)]) == 0
    assert f"calibration {out}: compute_efficiency" in capsys.readouterr().out
    measured = read_runs([str(RUNS)])[0]
    ran = yaml.safe_load(report.read_text())["iteration_time_s"]
    assert ran == pytest.approx(predict(measured, factors), rel=1e-9)
    # the written factors are the fit moved toward the catalogue by the validation prior
    # (tests/unit/test_calibration_prior.py): the run predicted between the catalogue and its measurement
    assert ran == pytest.approx(first["predicted_written"], rel=1e-3)  # both rounded in the file
    assert first["predicted_before"] < ran < first["measured"]
    plain = tmp_path / "plain.yaml"
    assert main(["calibrate", "--runs", str(RUNS), "--no-prior", "-o", str(plain)]) == 0
    capsys.readouterr()
    assert main(["run", str(RUNS), "--case", first["id"], "--calibration", str(plain), "--json", str(report)]) == 0
    assert yaml.safe_load(report.read_text())["iteration_time_s"] == pytest.approx(first["measured"], rel=0.01)


def test_one_run_fits_compute_efficiency_alone_and_says_so(tmp_path, capsys):
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(_case({"iteration_time_s": {"value": 0.0125}})))
    assert main(["calibrate", "--runs", str(path), "-o", str(tmp_path / "cal.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "one run determines one factor" in printed and "comm_efficiency" not in printed
    cal = load_calibration(str(tmp_path / "cal.yaml"))
    assert [f.key for f in cal.factors] == ["compute_efficiency"]
    assert cal.runs[0]["predicted_left_out"] is None  # the run alone sets the factor: nothing is left out


def test_a_poor_fit_is_a_warning_not_an_error(tmp_path, capsys):
    path = tmp_path / "two.yaml"
    cases = [dict(_case({"iteration_time_s": {"value": 0.0125}}), id="slow"),
             dict(_case({"iteration_time_s": {"value": 0.0095}}, tp=4, dp=1), id="fast")]
    path.write_text(yaml.safe_dump(cases))
    assert main(["calibrate", "--runs", str(path), "--fit", "compute", "--no-prior",
                 "-o", str(tmp_path / "cal.yaml")]) == 0
    assert "warning: a poor fit" in capsys.readouterr().out
    runs = load_calibration(str(tmp_path / "cal.yaml")).runs
    # each run as the factor fitted to the other run predicts it: further off than after the fit of both,
    # and on the same side (a run the fit pulled toward itself)
    for r in runs:
        left_out, after = r["predicted_left_out"] / r["measured"] - 1, r["error_after"]
        assert abs(left_out) > abs(after) and left_out * after > 0


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("llmsim: error: "), err
    return err


BAD_RUNS = {
    "no-targets": (None, "targets"),
    "memory-only": ({"peak_memory_gib": {"value": 30.0}}, "time or throughput"),
    "not-a-metric": ({"mfu": {"value": 0.4}}, "targets.mfu"),
    "not-a-number": ({"iteration_time_s": {"value": "fast"}}, "iteration_time_s"),
    "at-a-bound": ({"iteration_time_s": {"value": 1.0}}, "at its bound"),
    # past any bounded factor: a fit of them would overflow its squares (a traceback) or write a
    # calibration whose left-out prediction is 0, which the loader refuses
    "vanishing": ({"iteration_time_s": {"value": 1.0e-300}}, "within a factor"),
    "astronomical": ({"iteration_time_s": {"value": 1.0e300}}, "within a factor"),
    "throughput-typo": ({"tflops_per_gpu": {"value": 1.0e-200}}, "tflops_per_gpu"),
}


@pytest.mark.parametrize("name", sorted(BAD_RUNS))
def test_bad_runs_are_one_line_naming_the_file_exit_2(name, tmp_path, capsys):
    targets, words = BAD_RUNS[name]
    case = _case(targets)
    if targets is None:
        del case["targets"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(case))
    assert main(["calibrate", "--runs", str(path), "-o", str(tmp_path / "cal.yaml")]) == 2
    err = _one_error_line(capsys)
    assert str(path) in err and words in err
    assert not (tmp_path / "cal.yaml").exists()


@pytest.mark.parametrize("args, words", [(["--fit", "compute"], "--runs"), (["--runs", str(RUNS), "--fit", "gpu"],
                                                                          "--fit"), ([], "--nccl-tests")])
def test_bad_options_are_one_line_exit_2(args, words, tmp_path, capsys):
    assert main(["calibrate", *args, "-o", str(tmp_path / "cal.yaml")]) == 2
    assert words in _one_error_line(capsys)


@pytest.mark.parametrize("factors", [{"compute_efficiency": {"value": 0, "source": "x"}},
                                     {"speed": {"value": 1.0, "source": "x"}},
                                     {"comm_efficiency": 0.9}])
def test_a_calibration_file_with_bad_factors_is_refused(factors, tmp_path):
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump({"llmsim_calibration": 1, "factors": factors}))
    with pytest.raises(ConfigError, match="factors"):
        load_calibration(str(path))


def test_factors_with_a_cost_model_of_the_callers_are_refused(tiny):
    from sim.costs.base import FixedCostModel

    w, topo = tiny
    with pytest.raises(ConfigError, match="factors"):
        simulate(w, topo, costs=FixedCostModel(), factors=CalibrationFactors(0.9))
    assert dataclasses.replace(CalibrationFactors(), comm_efficiency=2.0).capacities([1.0, 3.0]) == [2.0, 6.0]


AZURE = ROOT / "tests" / "data" / "nccl_tests" / "azure-nd-a100-v4-all_reduce.txt"


def test_runs_with_nccl_tests_fit_on_the_calibrated_topology_and_the_file_holds_both(tmp_path, capsys):
    out = tmp_path / "both.yaml"
    assert main(["calibrate", "--nccl-tests", str(AZURE), "--runs", str(RUNS), "-o", str(out)]) == 0
    assert "on dgx-a100 as the nccl-tests logs calibrate it" in capsys.readouterr().out
    cal = load_calibration(str(out))
    assert cal.values and cal.factors and cal.topology == "dgx-a100"
    assert main(["run", "tiny", "--calibration", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"calibration {out}: dgx-a100 with scale_up" in printed
    assert f"calibration {out}: compute_efficiency" in printed


def test_a_run_on_another_topology_than_the_logs_calibrate_is_refused(tmp_path, capsys):
    path = tmp_path / "h100.yaml"
    case = _case({"iteration_time_s": {"value": 0.01}})
    case["system"].update({"gpu": "H100-SXM5-80GB", "topology": "dgx-h100"})
    path.write_text(yaml.safe_dump(case))
    assert main(["calibrate", "--nccl-tests", str(AZURE), "--runs", str(path), "-o", str(tmp_path / "c.yaml")]) == 2
    err = _one_error_line(capsys)
    assert str(path) in err and "system.topology" in err
    assert not (tmp_path / "c.yaml").exists()


def test_a_host_bound_run_fits_a_positive_host_issue_floor(tiny):
    """From 0 the floor has no gradient (no kernel is shorter than 0); the fit starts it at the
    first run's median kernel time, where it is active, and recovers a floor that made the
    (synthetic) measurement host-bound."""
    from sim.calibrate.runs import host_issue_start_us

    w, topo = tiny
    probe = MeasuredRun("synthetic", "host-bound", w, topo, "iteration_time_s", 1.0, None)
    start = host_issue_start_us(probe)
    assert start > 0
    floor_us = 2 * start
    measured = predict(probe, CalibrationFactors(host_issue_s=floor_us * 1e-6))
    assert measured > predict(probe) * 1.02  # the floor makes it host-bound
    run = dataclasses.replace(probe, measured=measured)
    fit = fit_runs([run], ["host_issue_us"])
    assert fit.undetermined == () and fit.at_bound == ()
    assert fit.starts == (pytest.approx(start),)
    assert fit.factors.host_issue_s * 1e6 == pytest.approx(floor_us, rel=0.05)
    assert fit.before[0] == pytest.approx(predict(probe))  # before: the uncalibrated model
    assert abs(fit.errors_after[0]) < 0.005


def test_a_run_given_twice_is_refused_not_counted_twice(tmp_path, capsys):
    """``--runs f.yaml f.yaml`` fitted four runs out of two: each weighed twice, and the
    left-out check left each run's twin in."""
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(_case({"iteration_time_s": {"value": 0.0125}})))
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--runs", str(path), str(path), "-o", str(out)]) == 2
    line = _one_error_line(capsys)
    assert str(path) in line and ".id: expected a run id no other file" in line
    assert not out.exists()


def test_a_bare_number_target_is_read_as_run_and_memory_read_it(tmp_path, capsys):
    """``iteration_time_s: 0.0125`` is ``{value: 0.0125}`` to the workload loader; calibrate
    refused it as not ``{value: NUMBER}``."""
    bare, full = tmp_path / "bare.yaml", tmp_path / "full.yaml"
    bare.write_text(yaml.safe_dump(_case({"iteration_time_s": 0.0125})))
    full.write_text(yaml.safe_dump(_case({"iteration_time_s": {"value": 0.0125}})))
    for path in (bare, full):
        assert main(["calibrate", "--runs", str(path), "-o", str(tmp_path / f"{path.stem}.cal.yaml")]) == 0
    capsys.readouterr()
    factors = [load_calibration(str(tmp_path / f"{n}.cal.yaml")).factors for n in ("bare", "full")]
    assert [(f.key, f.value) for f in factors[0]] == [(f.key, f.value) for f in factors[1]]
