"""benchmarks/external_sets.py: the published runs kept outside the validation set stay runnable."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.config.workload import load_case_records
from tests.conftest import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "external_sets.py"
TIME_METRICS = {"iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu"}
REFUSED: dict[str, str] = {}
"""The cases llmsim refuses, and the field each refusal names."""


@pytest.fixture(scope="module")
def ext():
    return load_script(SCRIPT)


def test_every_case_file_under_benchmarks_is_a_listed_set(ext):
    """A set added under benchmarks/ is scored by the report (the deepspeed_zero3 folder holds a
    workload, not cases)."""
    listed = {p.resolve() for p in ext.SETS.values()}
    found = {p.resolve() for p in SCRIPT.parent.glob("*/cases.yaml")}
    assert found <= listed
    assert all(p.is_file() for p in listed)


@pytest.mark.parametrize("name", ["dgxc", "llama3_paper", "megatron_deepspeed", "megatron_bridge_moe", "llm_foundry",
                                  "nemo_perf_summary"])
def test_every_case_of_a_set_builds_and_carries_a_measured_time(ext, name):
    records = load_case_records(str(ext.SETS[name]))
    assert records
    refused = {r.id: r.error.field for r in records if r.workload is None and r.error is not None}
    assert refused == {k: v for k, v in REFUSED.items() if k in {r.id for r in records}}
    assert all(r.workload is not None or r.id in REFUSED for r in records)
    assert len({r.id for r in records}) == len(records)
    assert all(TIME_METRICS & set(r.targets) for r in records)


def test_a_set_not_listed_is_one_line_and_status_2(ext, capsys):
    with pytest.raises(SystemExit) as exc:
        ext.main(["no_such_set"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "no_such_set" in err[-1] and "dgxc" in err[-1]
