"""The iteration time's interval (sim/studies/intervals.py): percentiles, their direction, the
group fallback, the shipped table, ``run --json``, ``sweep``'s tie mark and the coverage."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.cli import main
from sim.config import load_workload
from sim.config.workload import workload_stack
from sim.errors import ConfigError
from sim.studies.intervals import (
    MIN_ROWS,
    MIN_SOURCES,
    Band,
    Residual,
    build_table,
    coverage,
    coverage_markdown,
    load_table,
    percentile,
    prediction_bound,
    residuals,
    shipped_table,
    table_to_dict,
    time_ratio,
    update_coverage_markdown,
    write_table,
)
from sim.studies.sweep.core import Candidate, Fidelity, SimOutcome, SweepResult, SweepRow
from sim.studies.sweep.report import format_sweep, sweep_json
from sim.studies.validate import Row
from sim.types import GpuGeneration

REPO = Path(__file__).resolve().parents[2]
HOPPER, AMPERE = GpuGeneration.HOPPER, GpuGeneration.AMPERE


def _res(ratio: float, stack: str = "s", gen: GpuGeneration = HOPPER, source: str = "a") -> Residual:
    """A residual of time ratio ``ratio`` (measured over predicted time) from a time row."""
    row = Row("c", "iteration_time_s", ratio, 1.0, True, f"{source}.yaml")
    return Residual(source, "c", stack, gen, row.signed_error_pct, time_ratio(row.metric, ratio, 1.0))


def test_percentile_is_numpys_linear_one():
    values = [3.0, 1.0, 7.5, 2.0, 10.0, 4.0, 4.5]
    for q in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, 100 * q)))
    assert percentile([5.0], 0.9) == 5.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_band_of_a_small_table():
    rows = [_res(0.9 + 0.05 * i) for i in range(19)]  # 0.90, 0.95, ..., 1.80
    b = build_table(rows).lookup("s", HOPPER)
    # 19 values: the floor(20 * 0.1) = 2nd smallest and the ceil(20 * 0.9) = 18th
    assert (b.rows, b.low_factor, b.high_factor) == (19, pytest.approx(0.95), pytest.approx(1.75))
    assert b.interval(2.0) == (pytest.approx(1.9), pytest.approx(3.5))


def test_prediction_bound_ranks_and_small_samples():
    values = [float(v) for v in (7, 3, 9, 1, 5, 8, 2, 6, 4, 10, 11)]  # 11 values, 1..11
    assert (prediction_bound(values, 0.1), prediction_bound(values, 0.9)) == (1.0, 11.0)  # ranks 1 and 11
    more = [float(v) for v in range(1, 30)]  # 29 values: ranks floor(3.0) = 3 and ceil(27.0) = 27
    assert (prediction_bound(more, 0.1), prediction_bound(more, 0.9)) == (3.0, 27.0)
    assert prediction_bound([4.0, 2.0], 0.1) == 2.0 and prediction_bound([4.0, 2.0], 0.9) == 4.0  # held at the ends
    with pytest.raises(ValueError):
        prediction_bound([], 0.1)


def test_the_bounds_cover_a_new_run_as_often_as_they_say():
    """Drawn from one distribution, a new value falls between the bounds of the 20 before it
    at least 80% of the time (split-conformal: (19 - 2) / 21 = 81%); between the sample's 10th
    and 90th percentiles (numpy's linear definition) less often (about 73%)."""
    rng = np.random.default_rng(7)
    trials = 20000
    draws = rng.lognormal(0.1, 0.15, size=(trials, 21))
    inside_bounds = inside_percentiles = 0
    for row in draws:
        past, new = list(row[:20]), row[20]
        inside_bounds += prediction_bound(past, 0.1) <= new <= prediction_bound(past, 0.9)
        inside_percentiles += percentile(past, 0.1) <= new <= percentile(past, 0.9)
    assert inside_bounds / trials >= 0.80
    assert inside_percentiles / trials < 0.76


def test_runs_measured_slower_give_an_interval_above_the_prediction():
    """Every run measured slower than predicted (signed error +, llmsim faster): the whole
    interval lies above the predicted time; from time rows and from throughput rows alike."""
    time_rows = [Row(f"c{i}", "iteration_time_s", 1.0 + 0.05 * i, 1.0, True, "a.yaml") for i in range(1, 11)]
    rate_rows = [Row(f"r{i}", "tflops_per_gpu", 100.0, 100.0 + 5 * i, True, "a.yaml") for i in range(1, 11)]
    for rows in (time_rows, rate_rows):
        assert all(r.signed_error_pct > 0 for r in rows)  # + : llmsim predicts faster than measured
        res = [Residual("a", r.id, "s", HOPPER, r.signed_error_pct, time_ratio(r.metric, r.measured, r.predicted))
               for r in rows]
        low, high = build_table(res).lookup("s", HOPPER).interval(2.0)
        assert 2.0 < low < high
    # and the other way round: measured faster than predicted puts the interval below
    fast = [_res(1.0 - 0.03 * i) for i in range(1, 11)]
    low, high = build_table(fast).lookup("s", HOPPER).interval(2.0)
    assert low < high < 2.0


def test_a_group_too_small_falls_back_to_its_generation_then_to_all():
    three = ("a", "b", "c")
    rows = ([_res(2.0, "small", HOPPER, source=three[i % 3]) for i in range(MIN_ROWS - 1)]
            + [_res(1.0, "big", HOPPER, source=three[i % 3]) for i in range(MIN_ROWS)]
            + [_res(0.5, "x", AMPERE)] * 2)
    table = build_table(rows)
    assert table.lookup("big", HOPPER).scope == "big on Hopper"
    hopper = table.lookup("small", HOPPER)
    assert (hopper.scope, hopper.rows) == ("Hopper", 2 * MIN_ROWS - 1)
    assert table.lookup("unknown-stack", HOPPER) == hopper
    everything = table.lookup("x", AMPERE)  # Ampere has 2 rows: every row's band
    assert (everything.scope, everything.rows) == ("all", len(rows))
    assert table.lookup("x", GpuGeneration.BLACKWELL) == everything


def test_a_group_of_too_few_sources_falls_back_to_a_wider_one():
    """Rows enough but all from one or two sources (case files) give no band of their own: a
    user's cluster is one more source, and one source's spread says little about the next's."""
    one_source = [_res(1.0 + 0.01 * i, "s", HOPPER, source="a") for i in range(2 * MIN_ROWS)]
    others = [_res(1.5, "t", HOPPER, source=src) for src in ("b", "c") for _ in range(MIN_ROWS)]
    table = build_table(one_source + others)
    assert MIN_SOURCES == 3
    assert (table.lookup("s", HOPPER).scope, table.lookup("s", HOPPER).sources) == ("Hopper", 3)
    assert table.lookup("t", HOPPER).scope == "Hopper"  # two sources
    assert build_table(one_source + others, min_sources=1).lookup("s", HOPPER).scope == "s on Hopper"
    two = build_table(one_source + others[:MIN_ROWS])  # Hopper from two sources: every row's band
    assert two.lookup("s", HOPPER).scope == "all"


def test_shipped_table_is_what_the_committed_validation_json_gives():
    shipped = shipped_table()
    cases = json.loads((REPO / "validation.json").read_text())["cases"]
    recomputed = build_table(residuals(cases), command=shipped.command, validation=shipped.validation)
    assert table_to_dict(shipped) == table_to_dict(recomputed)
    assert shipped.command.startswith("llmsim validate --markdown") and shipped.validation == "validation.json"
    scored = [c for c in cases if c["skipped"] is None and c["metric"] in
              ("iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu")]
    assert shipped.groups[-1].rows == len(scored)  # every iteration row has a stack and a generation


def test_table_round_trips_and_a_bad_one_is_named(tmp_path):
    table = build_table([_res(1.0 + 0.01 * i, source=s) for i in range(12) for s in ("a", "b")], command="cmd",
                        validation="v.json")
    path = tmp_path / "t.yaml"
    write_table(path, table)
    assert load_table(path) == table
    path.write_text("groups:\n  - stack: s\n    rows: 3\n")
    with pytest.raises(ConfigError) as err:
        load_table(path)
    assert err.value.field == "groups[0]" and str(path) in str(err.value)


def test_run_json_carries_the_interval(tmp_path, capsys):
    """llama3-8b-h100 runs on megatron-core on Hopper; that group's rows come from fewer than
    three sources, so the band is Hopper's, whose rows were measured both faster and slower than
    predicted: its interval holds the prediction. (Ampere's rows were nearly all measured
    slower, so an A100 run's interval lies above its prediction.)"""
    out = tmp_path / "r.json"
    assert main(["run", "llama3-8b-h100", "--granularity", "chunk", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    d = json.loads(out.read_text())
    band = shipped_table().lookup(workload_stack("llama3-8b-h100").name, HOPPER)
    assert band.scope == "Hopper" and band.low_factor < 1 < band.high_factor
    assert d["iteration_time_s_low"] <= d["iteration_time_s"] <= d["iteration_time_s_high"]
    assert d["iteration_time_interval"] == {"coverage": "80%", "from": band.scope, "rows": band.rows}
    assert d["iteration_time_s_low"] == pytest.approx(d["iteration_time_s"] * band.low_factor)
    assert d["iteration_time_s_high"] == pytest.approx(d["iteration_time_s"] * band.high_factor)
    assert f"80% interval          {d['iteration_time_s_low']:.3f} - {d['iteration_time_s_high']:.3f} s" in text


def test_the_stack_of_a_workload_is_its_dated_framework_s(tmp_path):
    """A case naming "Megatron-LM" without a year, published in 2021, runs on megatron-lm-2021;
    ``stack:`` wins over the framework text; launch arguments name Megatron-LM."""
    case = tmp_path / "c.yaml"
    case.write_text("framework: Megatron-LM\nsource: {publication: 'Narayanan et al. 2021'}\n")
    assert workload_stack(str(case)).name == "megatron-lm-2021"
    assert workload_stack(str(case), ["stack=torchtitan"]).name == "torchtitan"
    assert load_workload("tiny").system.gpu.generation is AMPERE


def _sweep(times: list[float], band: Band) -> SweepResult:
    w = load_workload("tiny")
    rows = []
    for i, t in enumerate(times):
        key = (1, 1, 1 + i, 1, 1, 1, "1f1b", 1, "none", False, 0)
        rows.append(SweepRow(Candidate(key, w, 1e9), SimOutcome("op", t, 1000.0 / t, 0.5)))
    return SweepResult("tiny", "dgx-a100", "A100", 8, 80e9, Fidelity.OP, "op", "test", rows=rows, top=rows,
                       interval=band)


def test_sweep_marks_the_configurations_tied_with_the_best():
    band = Band("s", HOPPER, 10, 0.9, 1.2, -20.0, 10.0)
    # overlap when t * 0.9 <= 1.0 * 1.2, i.e. t <= 1.333...
    r = _sweep([1.0, 1.3, 1.34, 2.0], band)
    assert [r.tied_with_best(row) for row in r.top] == [True, True, False, False]
    top = sweep_json(r)["top"]
    assert [row["tied_with_best"] for row in top] == [True, True, False, False]
    assert top[1]["iteration_time_s_low"] == pytest.approx(1.3 * 0.9)
    assert top[1]["iteration_time_s_high"] == pytest.approx(1.3 * 1.2)
    assert sweep_json(r)["interval"] == {"from": "s on Hopper", "rows": 10, "low_factor": 0.9, "high_factor": 1.2}
    lines = format_sweep(r).splitlines()
    head = next(i for i, line in enumerate(lines) if "tied" in line.split())
    col = lines[head].index(" tied ")
    assert [lines[head + 2 + i][col:col + 5].strip() for i in range(4)] == ["best", "yes", "no", "no"]
    untied = _sweep([1.0, 1.3], None)  # type: ignore[arg-type]
    assert untied.tied_with_best(untied.top[1]) is None and "tied_with_best" not in sweep_json(untied)["top"][1]
    assert "tied" not in format_sweep(untied)


def test_sweep_command_marks_ties(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("tp: [1, 2]\nmicro_batch_size: [1, 2]\n")
    out = tmp_path / "s.json"
    assert main(["sweep", "tiny", "--space", str(space), "--workers", "1", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    lo, hi = d["interval"]["low_factor"], d["interval"]["high_factor"]
    best = d["top"][0]["iteration_time_s"]
    assert [row["tied_with_best"] for row in d["top"]] == [row["iteration_time_s"] * lo <= best * hi
                                                           for row in d["top"]]
    assert "tied" in capsys.readouterr().out


def test_coverage_leaves_one_source_out():
    # source a: 10 rows at ratios 1.00..1.09; source b: 10 rows at 1.00..1.09 as well, c far off
    a = [_res(1.0 + 0.01 * i, source="a") for i in range(10)]
    b = [_res(1.0 + 0.01 * i, source="b") for i in range(10)]
    c = [_res(2.0 + 0.01 * i, source="c") for i in range(10)]
    cov = coverage(a + b + c)
    by = {s.source: s for s in cov.sources}
    # without a: b and c's 20 rows, bounds the 2nd (1.01) and 19th (2.08) smallest: a's rows
    # 1.01..1.09 inside (9 of 10); b likewise
    assert (by["a"].rows, by["a"].inside) == (10, 9) and by["b"].inside == 9
    # without c: a and b, the 19th smallest of 1.00, 1.00, 1.01, 1.01, ... (1.09): none of c inside
    assert (by["c"].rows, by["c"].inside) == (10, 0)
    assert cov.rows == 30 and cov.inside == by["a"].inside + by["b"].inside + by["c"].inside
    assert cov.fraction == pytest.approx(cov.inside / 30)
    # the held-out source never shapes its own interval: a source alone is not scored
    assert coverage(a).sources == ()
    md = coverage_markdown(cov, "llmsim validate")
    assert "| a | 10 | 9 | 90% |" in md and f"| **all** | 30 | {cov.inside} | {cov.fraction:.0%} |" in md


def test_coverage_section_is_replaced_in_place(tmp_path):
    doc = tmp_path / "v.md"
    doc.write_text("# head\n\nintro\n")
    cov = coverage([_res(1.0 + 0.01 * i, source=s) for i in range(10) for s in ("a", "b")])
    update_coverage_markdown(doc, cov, "cmd")
    first = doc.read_text()
    assert first.startswith("# head\n\nintro\n\n## Interval coverage\n") and "| **all** | 20 |" in first
    doc.write_text(first + "\ntail\n")
    update_coverage_markdown(doc, cov, "cmd")
    assert doc.read_text() == first + "\ntail\n"
