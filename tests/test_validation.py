"""A fast subset of the published runs, so a change that breaks accuracy fails CI.

The full set runs with ``llmsim validate workloads/validation/*.yaml`` (docs/validation.md);
here only cases that simulate in about a second: GPT 22B at TP 8 (end-to-end and per-layer
times, Korthikanti et al. 2022) and Megatron-LM CI's peak memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import sim
from sim.studies.validate import validate

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
    from sim.output.report import make_report
    from sim.runner import simulate
    from sim.studies.validate import case_rows, load_case_records

    checked = set()
    records = (load_case_records(str(CASES / "megatron-ci.yaml"))[:2]
               + load_case_records(str(CASES / "torchtitan.yaml"))[:2])
    for rec in records:
        if rec.workload is None:
            continue
        w = rec.workload
        rep = make_report(simulate(w, load_topology(w.system.topology or default_topology_name(w.system.gpu.name))))
        for row in case_rows(rec, "op").rows:
            if row.metric == "iteration_time_s":
                assert row.predicted == rep.iteration_time_s
            elif row.metric == "tokens_per_s_per_gpu":
                assert row.predicted == rep.tokens_per_s / w.system.num_gpus
            else:
                continue
            checked.add(row.metric)
    assert checked == {"iteration_time_s", "tokens_per_s_per_gpu"}


GRANULARITY_CASES = {
    "megatron-ci.yaml": ("megatron_ci_gpt3_7b_tp1_pp4_memory_speed_dev_dgx_h100",   # interleaved PP, DP overlap
                         "megatron_ci_gpt3_7b_tp4_pp1_memory_speed_dev_dgx_a100"),  # TP and DP on one NVSwitch
    "megatronbridge.yaml": ("megatronbridge_25.11_gb200_llama3_8b_fp8-cs_8gpu",),    # FP8, DP only
    "megatronlm.yaml": ("megatronlm_readme_h100_7.1B",),                              # TP comm overlap
    "narayanan2021.yaml": ("narayanan2021_t1_39.1B", "narayanan2021_t2_zero3_174.6B_384gpu"),  # PTD-P, ZeRO-3
    "nemo2407.yaml": ("nemo2407_h100_fp8_LLAMA2-13B_16gpu", "nemo2407_h100_fp8_LLAMA3-8B_8gpu"),  # VP 10, CP 2
    "torchtitan.yaml": ("torchtitan_h100_t5_llama31_405b_512gpu_1F1B",                # FSDP + TP + PP
                        "torchtitan_h100_t4_llama31_70b_256gpu_2D",                   # FSDP beside TP blocks
                        "torchtitan_h100_t2_llama31_8b_8gpu_cp2_seq65536"),           # CP ring beside FSDP
    "korthikanti2022.yaml": ("korthikanti2022_t4_22B_layer_selective_recompute",),     # per-layer times
}
"""Shipped cases covering the features a layer pass can meet; each simulates in well under a
second at any granularity."""

EXACT = 1e-9
"""Rows of a chunk run the check passed agree with the op run's to 5e-13 over the whole dev
set (float additions in another order); 1e-9 leaves room for runs of ~1e6 durations and is far
below the smallest real difference a coarse run shows (1.6e-7, tests/unit/test_block_check.py)."""


@pytest.fixture(scope="module")
def granularity_runs():
    from sim.studies.validate import case_rows, load_case_records

    out = {}
    for file, ids in GRANULARITY_CASES.items():
        recs = {r.id: r for r in load_case_records(str(CASES / file))}
        for case_id in ids:
            rec = recs[case_id]
            out[case_id] = (case_rows(rec), case_rows(rec, "op"), case_rows(rec, "chunk"))
    return out


def _rel(a, b) -> float:
    return abs(a / b - 1.0)


def test_default_granularity_rows_are_the_op_runs(granularity_runs):
    for case_id, (auto, op, _) in granularity_runs.items():
        assert [(r.metric, r.skipped) for r in auto.rows] == [(r.metric, r.skipped) for r in op.rows]
        for a, b in zip(auto.rows, op.rows):
            assert _rel(a.predicted, b.predicted) < EXACT, (case_id, a.metric)


def test_chunk_runs_are_used_and_set_aside_where_they_differ(granularity_runs):
    """Cases of both kinds are in the set: some scored from their chunk run, and some whose
    chunk run differs from the op run, each of them re-run op by op with the reason."""
    used = [k for k, (auto, _, _) in granularity_runs.items() if auto.granularity == "chunk"]
    assert len(used) >= 4
    differing = [k for k, (_, op, chunk) in granularity_runs.items()
                 if any(_rel(c.predicted, o.predicted) > EXACT for c, o in zip(chunk.rows, op.rows)
                        if o.predicted is not None and c.predicted is not None)]
    assert len(differing) >= 3
    for k in differing:
        auto = granularity_runs[k][0]
        assert auto.granularity == "op" and auto.op_because, k


def test_cases_with_layer_times_run_op_by_op(granularity_runs):
    auto, op, _ = granularity_runs["korthikanti2022_t4_22B_layer_selective_recompute"]
    assert auto.granularity == "op" and auto.op_because is None
    assert [r.predicted for r in auto.rows] == [r.predicted for r in op.rows]


def test_jobs_below_one_are_refused_before_any_work(tmp_path, capsys):
    from sim.cli import main
    from sim.errors import ConfigError

    missing = str(tmp_path / "not-there.yaml")
    for n in (0, -3):
        with pytest.raises(ConfigError, match="--jobs"):
            validate([missing], jobs=n)
        assert main(["validate", missing, "--jobs", str(n)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"llmsim: error: --jobs: expected a positive number of worker processes (got {n})"]


def test_jobs_default_to_the_cpus_this_process_may_use(monkeypatch):
    import sim.studies.workers as workers

    asked = []
    real = workers.local_pool
    monkeypatch.setattr(workers, "cpu_count", lambda: 3)
    monkeypatch.setattr(workers, "local_pool", lambda n: (asked.append(n), real(1))[1])
    v = validate([str(CASES / "megatron-ci.yaml")])
    assert asked == [3]
    assert len(v.rows) == 12 and not v.skipped_cases


def test_cpu_count_follows_the_affinity_mask(monkeypatch):
    import os

    from sim.studies.workers import cpu_count

    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert cpu_count() == 2


def test_progress_bar_on_a_terminal_and_rows_with_verbose(tmp_path, monkeypatch, capsys):
    """One bar step per case on stderr when it is a terminal (none otherwise: the other tests'
    captured stderr); ``-v`` prints each row above it, in the files' order."""
    import io
    import sys

    import yaml

    from sim.cli import main

    cases = [c for c in yaml.safe_load((CASES / "megatron-ci.yaml").read_text())][:4]
    path = tmp_path / "four.yaml"
    path.write_text(yaml.safe_dump(cases))

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(["validate", str(path), "--jobs", "2", "-v"]) == 0
    text = term.getvalue()
    assert "validating" in text and "4/4" in text
    rows = [line for line in text.replace("\r", "\n").splitlines() if line.startswith("megatron_ci_")]
    assert [r.split()[0] for r in rows] == [c["id"] for c in cases for _ in range(2)]  # time and memory rows
    assert "MAPE" in capsys.readouterr().out
