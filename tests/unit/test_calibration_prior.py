"""The calibration prior (:mod:`sim.calibrate.prior`): the validation residuals' spreads between
and within groups of one source on one GPU, and how far they let measured runs move the
factors ``llmsim calibrate --runs`` writes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

import sim
from sim.calibrate.calibration import load_calibration
from sim.calibrate.prior import CalibrationPrior, estimate_prior, shrunk
from sim.cli import main
from sim.costs.factors import CalibrationFactors
from sim.errors import ConfigError
from sim.studies.intervals import (
    Residual,
    build_table,
    calibration_prior,
    load_table,
    residuals,
    shipped_table,
    write_table,
)
from sim.types import GpuGeneration

REPO = Path(sim.__file__).resolve().parent.parent
RUNS = REPO / "tests" / "data" / "runs" / "tiny-measured.yaml"


def test_variance_components_of_a_balanced_design():
    """Three groups of four, means -0.1, 0 and 0.2, each row 0.05 off its mean: the within
    spread is the rows' (sum of squares over N - a), the between one what the means' spread
    leaves after the within part's share ((MSB - MSW) / n)."""
    groups = {g: [m + d for d in (-0.05, 0.05, -0.05, 0.05)] for g, m in (("a", -0.1), ("b", 0.0), ("c", 0.2))}
    p = estimate_prior(groups)
    msw = 12 * 0.05**2 / (12 - 3)
    grand = (-0.1 + 0.0 + 0.2) / 3
    msb = 4 * sum((m - grand) ** 2 for m in (-0.1, 0.0, 0.2)) / 2
    assert p.within_sd == pytest.approx(math.sqrt(msw), rel=1e-12)
    assert p.between_sd == pytest.approx(math.sqrt((msb - msw) / 4), rel=1e-12)
    assert (p.groups, p.rows) == (3, 12)


def test_groups_of_one_row_are_left_out_and_two_groups_are_needed():
    p = estimate_prior({"a": [0.0, 0.2], "b": [0.1, 0.3], "lone": [5.0]})
    assert (p.groups, p.rows) == (2, 4)
    with pytest.raises(ValueError):
        estimate_prior({"a": [0.0, 0.2], "lone": [5.0]})


def test_means_no_further_apart_than_their_rows_give_no_cluster_effect():
    """Groups whose means differ less than the rows' spread explains: tau = 0, so no number of
    runs moves a calibration (weight 0), and the catalogue keeps infinite weight."""
    p = estimate_prior({"a": [-0.2, 0.2], "b": [-0.19, 0.21], "c": [-0.21, 0.19]})
    assert p.between_sd == 0.0 and p.pseudo_runs == math.inf and p.weight(1) == p.weight(100) == 0.0


def test_the_weight_is_the_random_effect_predictor_s():
    p = CalibrationPrior(between_sd=0.06, within_sd=0.12, groups=10, rows=100)
    assert p.pseudo_runs == pytest.approx(4.0)
    for n in (1, 2, 5, 20):
        assert p.weight(n) == pytest.approx(n * 0.06**2 / (n * 0.06**2 + 0.12**2))
    assert p.weight(1) < p.weight(5) < p.weight(20) < 1.0 and p.weight(0) == 0.0


def test_shrunk_factors_keep_the_weight_s_share_of_the_fitted_change_in_log_space():
    fitted = CalibrationFactors(compute_efficiency=0.7, comm_efficiency=1.3, host_issue_s=2e-5)
    assert shrunk(fitted, 1.0) == fitted
    assert shrunk(fitted, 0.0) == CalibrationFactors()
    half = shrunk(fitted, 0.5)
    assert math.log(half.compute_efficiency) == pytest.approx(0.5 * math.log(0.7))
    assert math.log(half.comm_efficiency) == pytest.approx(0.5 * math.log(1.3))
    assert half.host_issue_s == pytest.approx(1e-5)
    with pytest.raises(ValueError):
        shrunk(fitted, 1.5)


def _res(source: str, gpu: str, ratio: float) -> Residual:
    return Residual(source, f"{source}-{gpu}-{ratio}", "s", GpuGeneration.HOPPER, 0.0, ratio, gpu)


def test_the_validation_rows_are_grouped_by_source_and_gpu():
    """Two sources on one GPU are two clusters, and one source on two GPUs too."""
    rows = [_res("a", "H100", 1.0), _res("a", "H100", 1.1), _res("a", "B200", 1.3), _res("a", "B200", 1.4),
            _res("b", "H100", 0.8), _res("b", "H100", 0.9)]
    p = calibration_prior(rows)
    q = estimate_prior({k: [math.log(x) for x in v] for k, v in
                        {1: [1.0, 1.1], 2: [1.3, 1.4], 3: [0.8, 0.9]}.items()})
    assert p is not None and (p.groups, p.rows) == (3, 6)
    assert (p.between_sd, p.within_sd) == (round(q.between_sd, 6), round(q.within_sd, 6))
    assert calibration_prior(rows[:2]) is None  # one group: no prior


def test_the_shipped_prior_is_the_committed_validation_s_and_round_trips(tmp_path):
    shipped = shipped_table().prior
    cases = json.loads((REPO / "validation.json").read_text())["cases"]
    assert shipped == calibration_prior(residuals(cases))
    assert shipped is not None and shipped.groups >= 8 and 0.0 < shipped.weight(1) < 1.0
    table = build_table(residuals(cases), command="c", validation="v.json")
    path = tmp_path / "t.yaml"
    write_table(path, table)
    assert load_table(path).prior == table.prior
    raw = yaml.safe_load(path.read_text())
    raw["calibration_prior"]["within_cluster_sd"] = -1
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        load_table(path)
    assert err.value.field == "calibration_prior" and str(path) in str(err.value)
    del raw["calibration_prior"]
    path.write_text(yaml.safe_dump(raw))
    assert load_table(path).prior is None


def _one_run(tmp_path: Path) -> Path:
    case = yaml.safe_load(RUNS.read_text())[0]
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(case))
    return path


def test_one_run_writes_its_fitted_factor_to_the_one_run_weight(tmp_path, capsys):
    one = _one_run(tmp_path)
    out, plain = tmp_path / "cal.yaml", tmp_path / "plain.yaml"
    assert main(["calibrate", "--runs", str(one), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    w = shipped_table().prior.weight(1)
    assert f"keeps {w:.0%} of the fitted change for 1 run " in printed
    assert main(["calibrate", "--runs", str(one), "--no-prior", "-o", str(plain)]) == 0
    assert "no prior (--no-prior)" in capsys.readouterr().out
    fitted = load_calibration(str(plain)).factors[0]
    written = load_calibration(str(out)).factors[0]
    assert fitted.key == written.key == "compute_efficiency" and fitted.value < 1.0
    assert written.value == pytest.approx(fitted.value ** w, abs=1e-4)
    assert f"gives {fitted.value:.4g}" in written.source
    row = load_calibration(str(out)).runs[0]
    # the run as written: moved w of the way in log space, to first order w of the way
    moved = math.log(row["predicted_written"] / row["predicted_before"])
    assert moved == pytest.approx(w * math.log(row["measured"] / row["predicted_before"]), rel=0.05)


def test_no_prior_without_runs_is_one_line_exit_2(tmp_path, capsys):
    assert main(["calibrate", "--kernels", "x.csv", "--no-prior", "-o", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--no-prior" in err and "--runs" in err
