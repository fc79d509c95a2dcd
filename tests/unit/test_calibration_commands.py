"""``--calibration FILE`` on ``sweep``, ``compare``, ``whatif generations`` and ``validate``
(issue #33): a file of factors with ``compute_efficiency: 0.5`` makes each command's prediction
slower than without it, each command notes the file, and a malformed file is one line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import sim
from sim.cli import main

ROOT = Path(sim.__file__).resolve().parent.parent
RUNS = ROOT / "tests" / "data" / "runs" / "tiny-measured.yaml"


@pytest.fixture(scope="module")
def half(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("cal") / "half.yaml"
    path.write_text(yaml.safe_dump({"llmsim_calibration": 1, "factors": {
        "compute_efficiency": {"value": 0.5, "source": "a test: kernels at half the catalogue's rate"}}}))
    return str(path)


def _json(args: list[str], out: Path, capsys) -> tuple[dict, str]:
    assert main(args + ["--json", str(out)]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def _sweep_args(tmp_path: Path) -> list[str]:
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"tp": [2, 4], "pp": [1, 2], "cp": [1], "ep": [1], "virtual_pipeline_stages": [1],
                                     "micro_batch_size": [1], "recompute": ["none"], "sequence_parallel": [False],
                                     "zero_stage": [0]}))
    return ["sweep", "tiny", "--space", str(space), "--workers", "1", "--top", "2"]


def test_sweep_with_a_calibration_predicts_slower_and_says_so(half, tmp_path, capsys):
    plain, _ = _json(_sweep_args(tmp_path), tmp_path / "plain.json", capsys)
    cal, printed = _json(_sweep_args(tmp_path) + ["--calibration", half], tmp_path / "cal.json", capsys)
    assert f"calibration {half}: compute_efficiency 0.5" in printed
    best = [r["iteration_time_s"] for r in plain["top"]], [r["iteration_time_s"] for r in cal["top"]]
    assert best[0] and len(best[0]) == len(best[1])
    assert all(c > p * 1.2 for p, c in zip(*best))


def test_compare_with_a_calibration_predicts_slower_on_every_row(half, tmp_path, capsys):
    args = ["compare", "tiny", "--topology", "dgx-a100", "--topology", "dgx-h100"]
    plain, _ = _json(args, tmp_path / "plain.json", capsys)
    cal, printed = _json(args + ["--calibration", half], tmp_path / "cal.json", capsys)
    assert f"calibration {half}: compute_efficiency 0.5" in printed
    for p, c in zip(plain["rows"], cal["rows"]):
        assert c["iteration_time_s"] > p["iteration_time_s"] * 1.2


def test_whatif_generations_with_a_calibration_starts_slower(half, tmp_path, capsys):
    args = ["whatif", "generations", "tiny", "--from", "A100", "--to", "H100"]
    plain, _ = _json(args, tmp_path / "plain.json", capsys)
    cal, printed = _json(args + ["--calibration", half], tmp_path / "cal.json", capsys)
    assert f"calibration {half}: compute_efficiency 0.5" in printed
    assert cal["base_iteration_time_s"] > plain["base_iteration_time_s"] * 1.2
    assert cal["final_iteration_time_s"] > plain["final_iteration_time_s"] * 1.2


def test_validate_with_a_calibration_scores_the_calibrated_predictions(half, tmp_path, capsys):
    args = ["validate", str(RUNS), "--jobs", "1"]
    plain, _ = _json(args, tmp_path / "plain.json", capsys)
    cal, printed = _json(args + ["--calibration", half], tmp_path / "cal.json", capsys)
    assert f"calibration {half}: compute_efficiency 0.5" in printed
    assert cal["calibration"] == half and "calibration" not in plain
    pairs = [(p["predicted"], c["predicted"]) for p, c in zip(plain["cases"], cal["cases"])]
    assert len(pairs) == 2 and all(c > p * 1.2 for p, c in pairs)


def test_validate_refuses_a_calibration_beside_markdown(half, tmp_path, capsys):
    assert main(["validate", str(RUNS), "--calibration", half, "--markdown", str(tmp_path / "v.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--calibration" in err[0] and "--markdown" in err[0]


@pytest.mark.parametrize("command", [
    ["sweep", "tiny", "--workers", "1"],
    ["compare", "tiny", "--topology", "dgx-a100"],
    ["whatif", "generations", "tiny"],
    ["validate", str(RUNS), "--jobs", "1"],
])
def test_a_bad_calibration_file_is_one_line_exit_2(command, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("llmsim_calibration: 7\nfactors: {}\n")
    assert main(command + ["--calibration", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("llmsim: error:") and "bad.yaml" in err[0]
    assert "llmsim_calibration" in err[0]


def test_least_time_scale_is_the_least_factor_a_task_time_is_multiplied_by():
    from sim.costs.factors import CalibrationFactors

    assert CalibrationFactors(0.5, 0.8).least_time_scale == 1.0
    assert CalibrationFactors(2.0, 0.8).least_time_scale == 0.5
    assert CalibrationFactors(0.9, 4.0, 1e-5).least_time_scale == 0.25


def test_a_bounded_sweep_with_faster_factors_finds_the_exhaustive_top(tmp_path):
    """Factors that speed the kernels up lower the iteration times under the uncalibrated lower
    bounds; scaled by ``least_time_scale`` the bounds still leave the top N as they are."""
    from sim.config import load_topology, load_workload
    from sim.config.space import load_space
    from sim.costs.factors import CalibrationFactors
    from sim.studies.sweep.core import sweep

    args = _sweep_args(tmp_path)
    space = load_space(args[args.index("--space") + 1])
    w, topo = load_workload("tiny"), load_topology("dgx-a100")
    fast = CalibrationFactors(compute_efficiency=3.0, comm_efficiency=3.0)
    runs = [sweep(w, topo, space, top=2, workers=1, factors=fast, exhaustive=e) for e in (False, True)]
    tops = [[(r.candidate.key, r.best.iteration_time_s) for r in res.top] for res in runs]
    assert tops[0] == tops[1] and len(tops[0]) == 2
    plain = sweep(w, topo, space, top=2, workers=1)
    assert tops[0][0][1] < plain.top[0].best.iteration_time_s
