"""A case whose framework no stack models has its null run settings tuned as a practitioner
would (sim/config/tunable.py, sim/studies/tuning.py): the fastest combination that fits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.cli.main import main
from sim.config import load_case_records
from sim.studies.tuning import tune
from sim.studies.validate import case_rows, case_topology, format_row

UNKNOWN = "AcmeTrain (in-house, 2024)"


def _case(framework: str | None = UNKNOWN, **parallel) -> dict:
    """A TP 2 x PP 2 x DP 2 case on A100s, 8 layers, whose micro-batch, virtual stages and
    sequence parallelism are not published."""
    p = {"tp": 2, "pp": 2, "dp": 2, "global_batch_size": 16}
    p.update(parallel)
    case = {"id": "probe", "model": {"name": "probe", "num_layers": 8, "hidden_size": 1024,
                                     "num_attention_heads": 16, "vocab_size": 32000, "seq_length": 1024},
            "system": {"gpu": "A100-SXM4-80GB", "num_gpus": 8}, "parallel": p,
            "targets": {"iteration_time_s": 1.0}}
    if framework is not None:
        case["framework"] = framework
    return case


def _record(tmp_path: Path, case: dict):
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump([case], sort_keys=False))
    (rec,) = load_case_records(str(path))
    return rec, path


def _place(w):
    return w, case_topology(w)


def test_only_a_framework_no_stack_models_is_tuned(tmp_path):
    rec, _ = _record(tmp_path, _case())
    assert rec.tuning is not None and rec.tuning.framework == UNKNOWN
    knobs = {k.key: k.values for k in rec.tuning.knobs}
    # every divisor of the rank's batch of 8; the chunks a stage that split the 8 layers, or the 10
    # units of the layers, the embedding and the loss, evenly over the 2 stages
    assert knobs == {"micro_batch_size": (1, 2, 4, 8), "virtual_pipeline_stages": (1, 2, 4, 5),
                     "sequence_parallel": (False, True)}
    for known in ("Megatron-Core (2024)", "torchtitan", "NeMo 24.07", None):
        assert _record(tmp_path, _case(known))[0].tuning is None, known
    named = dict(_case(), stack="megatron-core")
    assert _record(tmp_path, named)[0].tuning is None


def test_a_published_setting_is_not_tuned(tmp_path):
    rec, _ = _record(tmp_path, _case(micro_batch_size=1, sequence_parallel=True, schedule="1f1b"))
    assert rec.tuning is None
    rec, _ = _record(tmp_path, _case(micro_batch_size=2))
    assert [k.key for k in rec.tuning.knobs] == ["virtual_pipeline_stages", "sequence_parallel"]


def test_the_fastest_combination_that_fits_is_kept(tmp_path):
    rec, _ = _record(tmp_path, _case())
    tuned = tune(rec.tuning, rec.workload, _place)
    timed = [p for p in tuned.points if p.iteration_s is not None]
    assert len(tuned.points) == 4 * 4 * 2 and all(p.fits for p in timed)
    assert tuned.chosen.iteration_s == min(p.iteration_s for p in timed)
    p = tuned.workload.parallel
    assert (p.micro_batch_size, p.virtual_pipeline_stages, p.sequence_parallel) == (
        tuned.chosen.settings["micro_batch_size"], tuned.chosen.settings["virtual_pipeline_stages"],
        tuned.chosen.settings["sequence_parallel"])
    # the fallback's launch defaults (one sample, one chunk, no sequence parallelism) are one of
    # the combinations, so the tuned run is never slower than they are
    own = next(p for p in tuned.points if p.settings == {"micro_batch_size": 1, "virtual_pipeline_stages": 1,
                                                          "sequence_parallel": False})
    assert tuned.chosen.iteration_s <= own.iteration_s
    note = next(n for n in tuned.notes if n.startswith("parallel.micro_batch_size, "))
    assert f"framework '{UNKNOWN}' names software no stack models" in note
    assert f"{tuned.chosen.iteration_s:.4g} s" in note
    assert tune(rec.tuning, rec.workload, _place).notes == tuned.notes  # deterministic


def test_a_combination_that_does_not_fit_is_not_chosen(tmp_path):
    """A 40 GB A100 holds this model's sharded state but not a micro-batch of 8 of its long
    sequences without recomputation: those combinations are skipped, not simulated."""
    case = _case()
    case["model"].update(hidden_size=8192, num_attention_heads=64, seq_length=8192)
    case["system"]["gpu"] = "A100-SXM4-40GB"
    rec, _ = _record(tmp_path, case)
    tuned = tune(rec.tuning, rec.workload, _place)
    assert any(not p.fits for p in tuned.points) and any(p.fits for p in tuned.points)
    assert all(p.iteration_s is None for p in tuned.points if not p.fits)
    chosen = next(p for p in tuned.points if p is tuned.chosen)
    assert chosen.fits


def test_validate_and_run_score_the_tuned_run(tmp_path, capsys):
    _, path = _record(tmp_path, _case())
    tuned_row = case_rows(load_case_records(str(path))[0]).rows[0]
    known_path = tmp_path / "known.yaml"
    known_path.write_text(yaml.safe_dump([_case("Megatron-Core (2024)")], sort_keys=False))
    known_row = case_rows(load_case_records(str(known_path))[0]).rows[0]
    # the launch defaults are one of the combinations tried: tuning never predicts slower
    assert tuned_row.predicted < known_row.predicted
    assert tuned_row.tuned.startswith("micro_batch_size=") and known_row.tuned is None
    assert tuned_row.to_dict()["tuned"] == tuned_row.tuned and "(tuned: micro_batch_size=" in format_row(tuned_row)
    out = tmp_path / "run.json"
    assert main(["run", str(path), "--case", "probe", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "names software no stack models: tuned as a practitioner tunes a run" in text
    assert json.loads(out.read_text())["iteration_time_s"] == pytest.approx(tuned_row.predicted, rel=0.02)


def test_without_a_global_batch_the_least_time_a_sample_wins(tmp_path):
    """A case that publishes no global batch gets Megatron's one micro-batch a rank, or under
    the interleaved schedule pp of them: iterations of different sizes, compared per sample."""
    case = _case()
    del case["parallel"]["global_batch_size"]
    rec, _ = _record(tmp_path, case)
    assert [k.key for k in rec.tuning.knobs] == ["virtual_pipeline_stages", "sequence_parallel"]
    tuned = tune(rec.tuning, rec.workload, _place)
    timed = [p for p in tuned.points if p.iteration_s is not None]
    assert {p.global_batch for p in timed} == {2, 4}  # one micro-batch a rank; pp = 2 interleaved
    assert tuned.chosen.iteration_s / tuned.chosen.global_batch == min(p.iteration_s / p.global_batch for p in timed)
    assert tuned.workload.parallel.global_batch_size == tuned.chosen.global_batch
