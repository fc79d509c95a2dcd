"""Output paths are checked before a command works (sim/output/paths.py, sim.cli.main)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import sim.output.paths as outpaths
from sim.cli.main import build_parser, main
from sim.errors import ConfigError
from sim.output.paths import DIR_OPTIONS, FILE_OPTIONS, check_output_path, check_output_paths


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-folder").mkdir()
    return tmp_path / "a-file", tmp_path / "a-folder"


# (argv after the preset, with {file} and {folder} filled in; the option the error names; what it says)
BAD = [
    (["run", "tiny", "--json", "{file}/report.json"], "--json", "is a file"),
    (["run", "tiny", "--trace", "{folder}"], "--trace", "not a folder"),
    (["run", "tiny", "--html", "{file}/deeper/page.html"], "--html", "is a file"),
    (["run", "tiny", "--trace-dir", "{file}"], "--trace-dir", "not a file"),
    (["run", "tiny", "--chakra", "{file}/et"], "--chakra", "is a file"),
    (["memory", "tiny", "--json", "{folder}"], "--json", "not a folder"),
    (["compare", "tiny", "--topology", "dgx-a100", "--json", "{folder}"], "--json", "not a folder"),
    (["validate", "{file}", "--markdown", "{folder}"], "--markdown", "not a folder"),
]


@pytest.mark.parametrize("argv, option, says", BAD, ids=[f"{a[0]}-{o}" for a, o, _ in BAD])
def test_a_bad_output_path_is_one_line_before_any_work(argv, option, says, tmp_path, capsys):
    file, folder = _layout(tmp_path)
    argv = [a.format(file=file, folder=folder) for a in argv]
    status, out, err = _run(capsys, *argv)
    assert status == 2
    assert out == ""  # nothing simulated, no report
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: "), err
    assert lines[0].startswith(f"llmsim: error: {option}: expected ") and says in lines[0], lines[0]
    assert lines[0].count(option) == 1, lines[0]  # the option named once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "a-folder"]  # nothing made


def test_a_new_nested_path_passes_and_is_written(tmp_path, capsys):
    report = tmp_path / "new" / "sub" / "report.json"
    trace_dir = tmp_path / "other" / "ranks"
    status, out, err = _run(capsys, "run", "tiny", "--json", str(report), "--trace-dir", str(trace_dir))
    assert status == 0, err
    assert report.is_file() and any(trace_dir.iterdir())


def test_an_existing_file_and_folder_pass(tmp_path):
    file, folder = _layout(tmp_path)
    check_output_path(str(file), "--json")
    check_output_path(str(folder), "--trace-dir", folder=True)


def test_a_path_this_user_may_not_write_is_refused(tmp_path, monkeypatch):
    file, folder = _layout(tmp_path)
    refused = {folder, file}
    monkeypatch.setattr(outpaths.os, "access", lambda p, mode: Path(p) not in refused)
    with pytest.raises(ConfigError, match="not writable"):
        check_output_path(str(folder / "report.json"), "--json")
    with pytest.raises(ConfigError, match="may write"):
        check_output_path(str(file), "--json")
    with pytest.raises(ConfigError, match="may write"):
        check_output_path(str(folder), "--chakra", folder=True)
    check_output_path(str(tmp_path / "report.json"), "--json")  # tmp_path itself is writable


def test_only_path_values_are_looked_at(tmp_path):
    file, _ = _layout(tmp_path)
    check_output_paths(argparse.Namespace(json=None, trace=False, plot=None, chakra=None, other=str(file / "x")))
    with pytest.raises(ConfigError, match="--csv"):
        check_output_paths(argparse.Namespace(json=None, csv=str(file / "x.csv")))


def _options(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _options(sub)
        elif action.option_strings and action.help and action.help.startswith(("write", "draw")):
            yield action


def test_every_option_that_writes_is_checked():
    writers = list(_options(build_parser()))
    assert len(writers) >= 20  # every command's --json, the run's traces, the plots
    for action in writers:
        assert FILE_OPTIONS.get(action.dest) in action.option_strings or \
            DIR_OPTIONS.get(action.dest) in action.option_strings, action.option_strings


def _workload_copy(tmp_path: Path) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text((Path(__file__).resolve().parents[2] / "workloads" / "tiny.yaml").read_text())
    return path


@pytest.mark.parametrize("argv, option, says", [
    (["run", "{w}", "--json", "{w}"], "--json", "does not read (it reads it as its workload argument)"),
    (["run", "{w}", "--json", "{d}/./w.yaml"], "--json", "does not read"),  # the same file, spelled otherwise
    (["memory", "{w}", "--json", "{w}"], "--json", "does not read"),
    (["run", "{w}", "--json", "{d}/out.json", "--trace", "{d}/out.json"], "--trace", "(--json writes it too)"),
    (["validate", "{w}", "--markdown", "{w}"], "--markdown", "does not read"),
])
def test_an_output_naming_an_input_or_another_output_is_refused(argv, option, says, tmp_path, capsys):
    """An output that names the workload (or another output) would overwrite it unannounced."""
    w = _workload_copy(tmp_path)
    before = w.read_bytes()
    status, out, err = _run(capsys, *[a.format(w=w, d=tmp_path) for a in argv])
    assert status == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llmsim: error: {option}: expected ") and says in lines[0], err
    assert w.read_bytes() == before  # the input is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.yaml"]  # nothing written


def test_a_symlink_to_an_input_is_the_input(tmp_path, capsys):
    w = _workload_copy(tmp_path)
    before = w.read_bytes()
    (tmp_path / "link.json").symlink_to(w)
    status, _, err = _run(capsys, "run", str(w), "--json", str(tmp_path / "link.json"))
    assert status == 2 and "does not read" in err
    assert w.read_bytes() == before


@pytest.mark.parametrize("option", ["--json", "--trace"])
def test_an_output_naming_a_file_the_workload_names_is_refused_when_it_is_read(option, tmp_path, capsys):
    """A topology file the workload names (``system.topology``) is not on the command line, so
    the check before the work cannot see it; it is refused as it is read, before it is
    overwritten, naming the option."""
    root = Path(__file__).resolve().parents[2]
    topo = tmp_path / "mytopo.yaml"
    topo.write_text((root / "topologies" / "dgx-a100.yaml").read_text())
    w = tmp_path / "w.yaml"
    w.write_text((root / "workloads" / "tiny.yaml").read_text().replace("topology: dgx-a100",
                                                                       f"topology: {topo}"))
    assert f"topology: {topo}" in w.read_text()
    before = topo.read_bytes()
    status, out, err = _run(capsys, "run", str(w), option, str(topo))
    lines = err.splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"llmsim: error: {option}: expected ")
    assert "does not read (it reads it: a file its input names)" in lines[0]
    assert topo.read_bytes() == before
    # the same command writing elsewhere runs on that topology
    assert _run(capsys, "run", str(w), option, str(tmp_path / "out.x"))[0] == 0


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a file system that takes no new files")
@pytest.mark.parametrize("option", ["--trace", "--html", "--json"])
def test_an_output_the_system_refuses_after_the_work_names_its_option(option, capsys):
    """/proc passes the checks before the work for root (a folder root may write into) and
    refuses the file after it; either way the line says which output it was."""
    status, _, err = _run(capsys, "run", "tiny", option, "/proc/llmsim-x.json")
    lines = err.splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith(f"llmsim: error: {option}")
