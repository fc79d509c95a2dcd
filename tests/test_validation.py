"""A fast subset of the published runs, so a change that breaks accuracy fails CI.

The full set runs with ``llmsim validate workloads/validation/*.yaml`` (docs/validation.md);
here only cases that simulate in about a second: GPT 22B at TP 8 (end-to-end and per-layer
times, Korthikanti et al. 2022) and Megatron-LM CI's peak memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import sim
from sim.validate import validate

CASES = Path(sim.__file__).resolve().parent.parent / "workloads" / "validation"


@pytest.fixture(scope="module")
def korthikanti_22b(tmp_path_factory):
    import yaml

    cases = [c for c in yaml.safe_load((CASES / "korthikanti2022.yaml").read_text()) if "_22B_" in c["id"]]
    path = tmp_path_factory.mktemp("cases") / "k22b.yaml"
    path.write_text(yaml.safe_dump(cases))
    return validate([str(path)])


def test_gpt_22b_rows_are_all_scored(korthikanti_22b):
    assert korthikanti_22b.skipped_cases == []
    assert len(korthikanti_22b.time_rows) == 12  # 2 end-to-end + 5 cases x (forward, backward)


def test_gpt_22b_error_bounds(korthikanti_22b):
    v = korthikanti_22b
    assert v.mape_pct < 10.0
    assert max(abs(r.error_pct) for r in v.time_rows) < 20.0
    forward = [r for r in v.time_rows if r.metric == "layer_forward_ms"]
    assert max(abs(r.error_pct) for r in forward) < 5.0


def test_megatron_ci_memory_mape_under_10_percent():
    v = validate([str(CASES / "megatron-ci.yaml")])
    assert v.memory_mape_pct < 10.0
    assert all(abs(r.error_pct) < 10.0 for r in v.scored if r.is_memory)


def test_model_parallel_split_follows_the_papers_rule_and_a_case_that_cannot_be_split_is_skipped(tmp_path):
    import yaml

    from sim.config import load_cases

    cases = [c for c in yaml.safe_load((CASES / "narayanan2021.yaml").read_text()) if "_ptdp_" in c["id"]]
    path = tmp_path / "ptdp.yaml"
    path.write_text(yaml.safe_dump(cases))
    for (case_id, w), case in zip(load_cases(str(path)), cases):
        # Table 2 gives tp x pp only; Takeaway #1: TP up to the 8 GPUs of a DGX, PP across them
        mp = case["system"]["num_gpus"] // case["parallel"]["dp"]
        assert (w.parallel.tp, w.parallel.pp) == (8, mp // 8), case_id
    broken = dict(cases[0], id="odd", system=dict(cases[0]["system"], num_gpus=385))
    path.write_text(yaml.safe_dump([broken]))
    v = validate([str(path)])
    assert len(v.rows) == 1 and v.rows[0].skipped and v.rows[0].predicted is None
    assert "parallel.tp" in v.rows[0].skipped and "not published" in v.rows[0].skipped
    assert v.mape_pct is None


def test_parallel_validation_gives_the_same_rows(tmp_path):
    import yaml

    cases = [c for c in yaml.safe_load((CASES / "korthikanti2022.yaml").read_text()) if "_t4_22B_" in c["id"]]
    ptdp = next(c for c in yaml.safe_load((CASES / "narayanan2021.yaml").read_text()) if "_ptdp_174" in c["id"])
    cases.append(dict(ptdp, system=dict(ptdp["system"], num_gpus=385)))  # cannot be split: skipped
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(cases))
    one = validate([str(path)])
    two = validate([str(path)], jobs=2)
    strip = lambda v: [{k: x for k, x in r.to_dict().items()} for r in v.rows]  # noqa: E731
    assert strip(one) == strip(two)
    assert any(r.skipped for r in two.rows) and any(r.error_pct is not None for r in two.rows)


def test_time_rows_are_the_reports_figures():
    """The scored iteration time and throughput are those of ``llmsim run``'s report
    (``make_report``), which validation no longer builds: to the last bit."""
    from sim.config import default_topology_name, load_topology
    from sim.report import make_report
    from sim.runner import simulate
    from sim.validate import _case_rows, load_case_records

    checked = set()
    records = load_case_records(str(CASES / "megatron-ci.yaml"))[:2] + load_case_records(str(CASES / "torchtitan.yaml"))[:2]
    for rec in records:
        if rec.workload is None:
            continue
        w = rec.workload
        rep = make_report(simulate(w, load_topology(w.system.topology or default_topology_name(w.system.gpu.name))))
        for row in _case_rows(rec):
            if row.metric == "iteration_time_s":
                assert row.predicted == rep.iteration_time_s
            elif row.metric == "tokens_per_s_per_gpu":
                assert row.predicted == rep.tokens_per_s / w.system.num_gpus
            else:
                continue
            checked.add(row.metric)
    assert checked == {"iteration_time_s", "tokens_per_s_per_gpu"}
