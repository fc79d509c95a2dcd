"""benchmarks/preset_outputs.py: the same command gives the same record, and a changed output is
reported as a difference (on ``tiny`` only; the committed reference's hashes are not used)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from tests.conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "preset_outputs.py"


po = load_script(SCRIPT)
TINY = next(e for e in po.entries() if e.id == "run tiny")


@pytest.fixture(scope="module")
def tiny_outputs():
    return po.run_entry(TINY)


def test_two_runs_of_tiny_give_the_same_record(tiny_outputs):
    first, second = po.record_of(TINY, tiny_outputs), po.record_of(TINY, po.run_entry(TINY))
    assert first.exit_status == 0 and first.json_sha256 and first.trace_sha256 and first.iteration_time_s > 0
    assert po.differences(first, second) == []
    assert first == second


def test_a_slower_run_gives_the_same_record(tiny_outputs):
    """The outputs carry no wall-clock time: a run that took longer leaves the record as it is."""
    assert not re.search(r"engine events in [0-9.]+ s", tiny_outputs.stdout)
    assert not any("wall" in key for key in json.loads(tiny_outputs.json_text))
    slower = dataclasses.replace(tiny_outputs, wall_s=99.0)
    assert po.record_of(TINY, slower) == po.record_of(TINY, tiny_outputs)


def test_a_changed_report_json_or_trace_is_a_difference(tiny_outputs):
    ref = po.record_of(TINY, tiny_outputs)
    report = dataclasses.replace(tiny_outputs, stdout=tiny_outputs.stdout.replace("iteration time", "iteration time "))
    assert po.differences(ref, po.record_of(TINY, report)) == ["report_sha256"]
    doc = json.loads(tiny_outputs.json_text)
    doc["iteration_time_s"] *= 1 + 1e-15
    changed = dataclasses.replace(tiny_outputs, json_text=json.dumps(doc, indent=2) + "\n")
    assert po.differences(ref, po.record_of(TINY, changed)) == ["json_sha256", "iteration_time_s"]
    trace = dataclasses.replace(tiny_outputs, trace_sha256="0" * 64)
    assert po.describe(ref, po.record_of(TINY, trace)) == "DIFFERS: trace"
    failed = dataclasses.replace(tiny_outputs, exit_status=1, stderr="llmsim: error: x")
    assert po.differences(ref, po.record_of(TINY, failed)) == ["exit_status", "stderr_sha256"]


def test_check_says_same_then_names_an_altered_hash(tmp_path, capsys):
    ref = tmp_path / "ref.json"
    assert po.write(ref, only=["run tiny"]) == 0
    assert po.check(ref, only=["run tiny"]) == 0
    assert re.search(r"^same +run tiny$", capsys.readouterr().out, re.MULTILINE)
    doc = json.loads(ref.read_text())
    doc["entries"][0]["report_sha256"] = "f" * 64
    ref.write_text(json.dumps(doc))
    assert po.check(ref, only=["run tiny"]) == 1
    assert re.search(r"^DIFFERS: report +run tiny$", capsys.readouterr().out, re.MULTILINE)


def test_entries_come_from_the_folders_and_skip_tables(tmp_path):
    (tmp_path / "workloads").mkdir()
    (tmp_path / "topologies").mkdir()
    for name in ("b", "a"):
        (tmp_path / "workloads" / f"{name}.yaml").write_text("name: x\n")
    (tmp_path / "topologies" / "fabric.yaml").write_text("name: fabric\nscale_up: {kind: nvswitch}\n")
    (tmp_path / "topologies" / "table.yaml").write_text("generations: {}\n")
    po.COARSE["b"] = "layer"
    try:
        got = po.entries(tmp_path)
    finally:
        del po.COARSE["b"]
    assert [e.id for e in got] == ["run a", "run b", "run tiny --topology fabric", "memory a", "memory b"]
    assert [e.granularity for e in got] == ["op", "layer", "op", None, None]
    assert got[1].argv == ("run", "b", "--granularity", "layer")


def test_a_file_that_is_not_a_reference_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"entries": [{"id": "run tiny"}]}')
    with pytest.raises(ValueError, match="bad.json"):
        po.read_reference(bad)
    assert po.main(["--check", str(tmp_path / "absent.json")]) == 2
