"""``llmsim validate``'s rows and summary: whether each row's configuration fits in memory, the
mean signed error beside each MAPE, and the per-source table."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli import main
from sim.studies.validate import Row, Validation, format_validation, markdown, validate


def _row(metric: str, measured: float, predicted: float, file: str = "workloads/validation/a.yaml",
         complete: bool = True, fits: bool | None = True) -> Row:
    return Row("case", metric, measured, predicted, complete, file, None, fits)


@pytest.mark.parametrize("metric, measured, predicted, signed", [
    ("iteration_time_s", 10.0, 8.0, +20.0),    # predicted shorter: faster, +
    ("iteration_time_s", 10.0, 12.0, -20.0),   # predicted longer: slower, -
    ("layer_backward_ms", 20.0, 19.0, +5.0),   # a duration too
    ("tflops_per_gpu", 100.0, 120.0, +20.0),   # predicted more throughput: faster, +
    ("tokens_per_s_per_gpu", 1000.0, 900.0, -10.0),
    ("peak_memory_gib", 50.0, 55.0, +10.0),    # memory: + when more is predicted
])
def test_signed_error_is_plus_when_predicted_faster(metric, measured, predicted, signed):
    r = _row(metric, measured, predicted)
    assert r.signed_error_pct == pytest.approx(signed)
    assert abs(r.signed_error_pct) == pytest.approx(abs(r.error_pct))
    assert r.to_dict()["signed_error_pct"] == pytest.approx(signed)


def test_summary_and_per_source_table():
    a, b = "workloads/validation/alpha.yaml", "mine/beta.yaml"
    rows = [_row("iteration_time_s", 10.0, 8.0, a),                      # +20 signed, |20|
            _row("tflops_per_gpu", 100.0, 90.0, a, complete=False),      # -10 signed, |10|
            _row("peak_memory_gib", 50.0, 55.0, a),                      # memory +10
            _row("tokens_per_s_per_gpu", 100.0, 130.0, b, fits=False),   # +30 signed, does not fit
            Row("skipped", "iteration_time_s", 1.0, None, True, b, "not built")]
    v = Validation(rows=rows)
    assert v.mape_pct == pytest.approx((20 + 10 + 30) / 3)
    assert v.mean_signed_error_pct == pytest.approx((20 - 10 + 30) / 3)
    assert v.mean_signed_error_complete_pct == pytest.approx((20 + 30) / 2)
    assert v.memory_mean_signed_error_pct == pytest.approx(10.0)
    assert [r.id for r in v.not_fitting] == ["case"] and len(v.not_fitting) == 1
    alpha, beta = v.by_source()
    assert (alpha.source, alpha.rows, alpha.memory_rows, alpha.rows_not_fitting) == ("alpha", 2, 1, 0)
    assert (alpha.mape_pct, alpha.mean_signed_error_pct) == (pytest.approx(15.0), pytest.approx(5.0))
    assert (alpha.memory_mape_pct, alpha.memory_mean_signed_error_pct) == (pytest.approx(10.0), pytest.approx(10.0))
    assert (beta.source, beta.rows, beta.memory_rows, beta.rows_not_fitting) == ("beta", 1, 0, 1)
    assert beta.memory_mape_pct is None and beta.mean_signed_error_pct == pytest.approx(30.0)

    text = format_validation(v)
    assert "MAPE, time and throughput: 20.0% over 3 rows; mean signed error +13.3%" in text
    assert "MAPE, peak memory: 10.0% over 1 rows; mean signed error +10.0%" in text
    assert "not fitting in GPU memory: 1 of 4 scored rows (goal: 0)" in text
    table = text.split("by source (case file):\n", 1)[1].splitlines()
    assert table[1].split() == ["alpha", "2", "15.0%", "+5.0%", "1", "10.0%", "+10.0%", "0"]
    assert table[2].split() == ["beta", "1", "30.0%", "+30.0%", "0", "n/a", "n/a", "1"]
    assert "DOES NOT FIT" in next(line for line in text.splitlines() if "tokens_per_s_per_gpu" in line)

    md = markdown(v, "llmsim validate")
    assert "| MAPE, time and throughput, all cases | 20.0% | +13.3% | 3 |" in md
    assert "| alpha | 2 | 15.0% | +5.0% | 1 | 10.0% | +10.0% | 0 |" in md
    assert "| beta | 1 | 30.0% | +30.0% | 0 | n/a | n/a | 1 |" in md
    assert "| `case` | tokens_per_s_per_gpu | 100 | 130 | +30.0% | yes | **NO** |" in md

    d = v.to_dict()
    assert d["rows_not_fitting"] == 1 and d["mean_signed_error_pct"] == pytest.approx(40 / 3)
    assert [s["source"] for s in d["by_source"]] == ["alpha", "beta"]


def _probe(recompute) -> dict:
    """A case too big for its GPU without recomputation (tests/unit/test_fit.py's probe)."""
    return {"id": f"probe-{recompute}", "framework": "Megatron-LM",
            "model": {"name": "probe", "num_layers": 8, "hidden_size": 8192, "num_attention_heads": 64,
                      "vocab_size": 32000, "seq_length": 4096},
            "system": {"gpu": "A100-SXM4-80GB", "num_gpus": 4, "topology": "dgx-a100"},
            "parallel": {"tp": 2, "pp": 1, "dp": 2, "micro_batch_size": 2, "global_batch_size": 8,
                         "flash_attention": False, "sequence_parallel": None, "recompute": recompute,
                         "distributed_optimizer": None},
            "targets": {"iteration_time_s": {"value": 1.0}, "peak_memory_gib": {"value": 60.0}}}


def test_an_explicit_setting_that_does_not_fit_is_simulated_and_flagged(tmp_path, capsys):
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump([_probe("none"), _probe(None)]))
    out_json = tmp_path / "v.json"
    assert main(["validate", str(path), "--jobs", "1", "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    cases = json.loads(out_json.read_text())["cases"]
    given = [c for c in cases if c["id"] == "probe-none"]
    filled = [c for c in cases if c["id"] == "probe-None"]
    assert len(given) == 2 and all(c["fits"] is False and c["predicted"] is not None for c in given)
    assert len(filled) == 2 and all(c["fits"] is True for c in filled)  # its nulls were fitted
    assert json.loads(out_json.read_text())["rows_not_fitting"] == 2
    assert "not fitting in GPU memory: 2 of 4 scored rows" in printed
    flagged = [line for line in printed.splitlines() if line.startswith("probe-none ")]
    assert len(flagged) == 2 and all("DOES NOT FIT" in line for line in flagged)


def test_rows_of_a_case_that_cannot_be_built_carry_no_fits(tmp_path):
    broken = dict(_probe(None), id="broken", system={"gpu": "A100-SXM4-80GB", "num_gpus": 5})
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump([broken]))
    v = validate([str(path)], jobs=1)
    assert v.rows and all(r.skipped and r.fits is None for r in v.rows)
    assert all(r.to_dict()["fits"] is None for r in v.rows)


@pytest.mark.parametrize("pp", [1, 2])
def test_a_case_timing_one_layer_runs_one_layer_a_stage(tmp_path, pp):
    """A case whose targets are only layer times is a layer microbenchmark (Korthikanti et al.'s
    Table 4): built with one layer a pipeline stage, it fits where the whole model does not, and
    each layer's times are those of the whole model's timeline (no data parallelism here, whose
    gradient reductions would run beside the whole model's layers and not the benchmark's)."""
    layers = {"layer_forward_ms": {"value": 10.0}, "layer_backward_ms": {"value": 20.0}}
    bench = dict(_probe("none"), id="bench", targets=layers)
    bench["parallel"] = dict(bench["parallel"], pp=pp, dp=1)
    bench["system"] = dict(bench["system"], num_gpus=2 * pp)
    bench["model"] = dict(bench["model"], num_layers=8 * pp)
    whole = dict(bench, id="whole", targets=dict(layers, iteration_time_s={"value": 1.0}))
    path = tmp_path / "layers.yaml"
    path.write_text(yaml.safe_dump([bench, whole]))
    v = validate([str(path)], jobs=1)
    rows = {(r.id, r.metric): r for r in v.rows}
    assert all(rows["whole", m].fits is False for m in ("iteration_time_s", *layers))
    for m in layers:
        assert rows["bench", m].fits is True
        assert rows["bench", m].predicted == pytest.approx(rows["whole", m].predicted, rel=1e-9)
    assert not v.skipped_cases
