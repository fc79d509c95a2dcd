"""Presets by name from any folder: resolution, the ``presets`` listing, and the commands whose
input defaults to the shipped files (``validate``, ``validate-infer``, ``--megatron-args @NAME``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sim
from sim.cli import main
from sim.config.presets import PRESET_GROUPS, TABLES, preset_folder, presets, resolve_preset
from sim.errors import ConfigError

REPO = Path(sim.__file__).resolve().parent.parent


def test_checkout_root_holds_the_presets():
    assert preset_folder("workloads") == REPO / "workloads"
    assert preset_folder("topologies") == REPO / "topologies"


def test_listing_covers_every_shipped_file_and_each_name_resolves(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # names, not paths relative to the checkout
    out = tmp_path / "p.json"
    assert main(["presets", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    listed = json.loads(out.read_text())["presets"]
    for group, folder, suffix, _ in PRESET_GROUPS:
        tables = set(TABLES) if group == "topologies" else set()
        on_disk = {p.stem for p in (REPO / folder).glob(f"*{suffix}")} - tables
        names = {p["name"] for p in listed if p["group"] == group}
        assert names == on_disk, group
        for name in names:
            assert resolve_preset(name, folder, suffix=suffix) == REPO / folder / f"{name}{suffix}"
            assert f"  {name} " in printed
    assert all(p["description"] for p in listed)


def test_a_missing_name_lists_the_presets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as exc:
        resolve_preset("gpt3-17b", "workloads")
    assert "gpt3-175b" in str(exc.value) and "gpt3-17b" in str(exc.value)


def test_workload_names_resolve_in_validation_cases(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_preset("nemo2407", "workloads/validation", "workloads").name == "nemo2407.yaml"
    assert resolve_preset("validation/nemo2407", "workloads").name == "nemo2407.yaml"


def test_validate_defaults_to_every_shipped_case_file(monkeypatch, capsys):
    seen = {}

    def fake_validate(files, progress=None, jobs=1, **kwargs):
        seen["files"] = list(files)
        from sim.studies.validate import Validation

        return Validation()

    monkeypatch.setattr("sim.studies.validate.validate", fake_validate)
    assert main(["validate", "--jobs", "1"]) == 2  # the fake scores no case: "the case files hold no cases"
    assert "hold no cases" in capsys.readouterr().err
    assert sorted(Path(f).name for f in seen["files"]) == sorted(
        p.name for p in (REPO / "workloads" / "validation").glob("*.yaml"))


def test_megatron_args_at_name_reads_the_shipped_launch(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status = main(["memory", "--megatron-args", "@gpt3-175b", "--set", "system.gpu=A100-SXM4-80GB",
                   "--recompute", "selective"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert out.startswith("llmsim ") and "gpt3-175b on 64 x A100-SXM4-80GB" in out.splitlines()[0]
    assert "TP 8  PP 8  DP 1  interleaved-1f1b (v=3)" in out


def test_megatron_args_missing_file_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--megatron-args", "@no-such-launch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-launch" in err and "Traceback" not in err


def test_presets_lists_no_table_as_a_topology():
    names = {p.name for p in presets() if p.group == "topologies"}
    assert not names & set(TABLES)
