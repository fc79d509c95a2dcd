"""sim.studies.loso: one factor on every predicted time, fitted per source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.studies import loso as loso_module


@pytest.fixture(scope="module")
def loso():
    return loso_module


def _case(cid: str, file: str, metric: str, measured: float, predicted: float, complete: bool = True) -> dict:
    return {"id": cid, "metric": metric, "measured": measured, "predicted": predicted,
            "error_pct": 100.0 * (predicted - measured) / measured, "config_complete": complete,
            "skipped": None, "file": f"workloads/validation/{file}.yaml"}


def _write(tmp_path: Path, cases: list[dict]) -> str:
    path = tmp_path / "validation.json"
    path.write_text(json.dumps({"cases": cases}))
    return str(path)


def test_factor_one_gives_the_rows_own_errors(loso, tmp_path):
    cases = [_case("a", "s1", "iteration_time_s", 2.0, 1.5), _case("b", "s1", "tflops_per_gpu", 400.0, 500.0),
             _case("c", "s2", "tokens_per_s_per_gpu", 1000.0, 800.0), _case("d", "s2", "layer_forward_ms", 10.0, 11.0)]
    rows = loso.load_rows(_write(tmp_path, cases))
    got = loso.errors_pct(rows, [1.0])[:, 0]
    assert got.tolist() == pytest.approx([abs(c["error_pct"]) for c in cases])


def test_a_throughput_row_moves_against_its_time(loso, tmp_path):
    # predicted 25% too high a throughput is a time 0.8 of the measured one: a factor 1.25 fixes it
    rows = loso.load_rows(_write(tmp_path, [_case("a", "s", "tflops_per_gpu", 400.0, 500.0)]))
    assert loso.best_factor(rows) == pytest.approx(1.25)
    assert loso.errors_pct(rows, [1.25])[0, 0] == pytest.approx(0.0, abs=1e-9)
    # and a time row predicted 20% fast needs the same factor
    rows = loso.load_rows(_write(tmp_path, [_case("a", "s", "iteration_time_s", 1.0, 0.8)]))
    assert loso.best_factor(rows) == pytest.approx(1.25)


def test_each_source_is_scored_on_the_others(loso, tmp_path):
    # s1 predicts 10% fast, s2 30% slow: s1's factor fixes s1 and worsens s2, and the other way round
    cases = [_case(f"a{i}", "s1", "iteration_time_s", 1.0, 0.9) for i in range(3)] + \
            [_case(f"b{i}", "s2", "iteration_time_s", 1.0, 1.3, complete=False) for i in range(2)]
    a = loso.analyse(loso.load_rows(_write(tmp_path, cases)))
    by = {s["source"]: s for s in a["leave_one_source_out"]}
    assert by["s1"]["factor"] == pytest.approx(1 / 0.9, abs=1e-4)
    assert by["s1"]["own_after"]["mape_pct"] < 0.01
    assert by["s1"]["others_before"]["mape_pct"] == pytest.approx(30.0)
    assert by["s1"]["others_after"]["mape_pct"] == pytest.approx(100 * (1.3 / 0.9 - 1), abs=0.01)
    assert by["s2"]["factor"] == pytest.approx(1 / 1.3, abs=1e-4)
    assert by["s2"]["others_after"]["rows_over_worst_bound"] == 3  # 0.9 / 1.3: 31% off
    assert a["in_sample_complete"]["factor"] == by["s1"]["factor"]  # the complete rows are s1's


def test_memory_and_skipped_rows_are_left_out(loso, tmp_path):
    cases = [_case("a", "s", "iteration_time_s", 1.0, 0.9), _case("m", "s", "peak_memory_gib", 50.0, 70.0),
             {**_case("k", "s", "iteration_time_s", 1.0, 0.5), "skipped": "not simulated"}]
    rows = loso.load_rows(_write(tmp_path, cases))
    assert [r["id"] for r in rows] == ["a"]


def test_a_file_that_is_not_validation_json_names_itself(loso, tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match="other.json"):
        loso.load_rows(str(path))
