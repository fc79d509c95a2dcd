"""Edges of the ``llmsim`` command line: how an error reads, Ctrl-C in every long command,
a topology's own GPU, ``--json -``, byte counts as integers, and the options whose help and
behaviour must agree."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sim
from sim.cli import main
from sim.errors import ConfigError, excerpt

REPO = Path(sim.__file__).resolve().parent.parent


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``llmsim ARGV`` in-process; return (status, stdout, stderr)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _one_error(capsys, *argv: str) -> str:
    """The single ``llmsim: error:`` line ``argv`` prints, after checking status 2."""
    status, out, err = _run(capsys, *argv)
    assert status == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: "), err
    assert "Traceback" not in out + err
    return lines[0].removeprefix("llmsim: error: ")


# --- how an error reads ---------------------------------------------------------------------------


def test_an_option_error_names_the_option_once():
    assert (str(ConfigError("<--json>", "--json", "a file to write", "x"))
            == "--json: expected a file to write (got 'x')")
    # a file's error keeps FILE: FIELD:, and an option's error about another field names both
    assert str(ConfigError("w.yaml", "parallel.tp", "a positive integer", 0)) == \
        "w.yaml: parallel.tp: expected a positive integer (got 0)"
    assert str(ConfigError("<--set>", "parallel.tp", "a YAML value", "[1")) == \
        "<--set>: parallel.tp: expected a YAML value (got '[1')"


def test_an_output_folder_given_for_a_file_reads_once(tmp_path, capsys):
    line = _one_error(capsys, "run", "tiny", "--trace", str(tmp_path))
    assert line == f"--trace: expected a file to write, not a folder (got {excerpt(str(tmp_path))})"


@pytest.mark.parametrize("option, says", [("--topology", "expected an existing file or a preset name"),
                                          ("--calibration", "expected a readable YAML file")])
def test_a_path_too_long_for_the_system_reads_as_a_missing_file(option, says, capsys):
    """A name the operating system cannot look up is a file that is not there: one bounded line."""
    line = _one_error(capsys, "run", "tiny", option, "T" * 5000)
    assert says in line and "characters)" in line
    assert len(line) < 2100


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_json_the_disk_refuses_names_the_option_and_the_path(capsys):
    line = _one_error(capsys, "memory", "tiny", "--json", "/dev/full")
    assert line.startswith("--json /dev/full: ") and "No space left on device" in line


def test_a_forced_algorithm_that_cannot_run_says_what_was_expected(capsys):
    line = _one_error(capsys, "collective", "--op", "all-gather", "--algo", "nvls")
    assert line.startswith("--algo: expected an algorithm that can run this all-gather over 8 GPUs of dgx-h100; "
                           "nvls needs an all-reduce"), line
    assert line.endswith("(got 'nvls')")


def test_a_power_cap_below_idle_says_what_was_expected(capsys):
    line = _one_error(capsys, "whatif", "power", "tiny", "--set", "system.gpu=H100", "--limits", "10")
    assert line.startswith("--limits: expected caps in watts above the GPU's idle draw"), line
    assert line.endswith("(got '10')")


def test_fp16_beside_bf16_reads_as_what_was_expected(capsys):
    args = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
            "--global-batch-size 8 --vocab-size 32000 --bf16 --fp16")
    line = _one_error(capsys, "run", "--megatron-args", args, "--set", "system.gpu=H100")
    assert "--fp16: expected no --fp16 beside --bf16" in line, line


# --- Ctrl-C ---------------------------------------------------------------------------------------

def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


SIMULATION = "sim.engine.simulation.Simulation.run"
LONG_COMMANDS = [  # (argv, the function Ctrl-C interrupts)
    (("run", "tiny"), SIMULATION),
    (("memory", "tiny"), "sim.output.memory_report.memory_report"),
    (("validate", "korthikanti2022", "--jobs", "1"), SIMULATION),  # in this process (pools: test_workers.py)
    (("compare", "tiny", "--topology", "dgx-a100", "--topology", "dgx-h100"), SIMULATION),
    (("whatif", "generations", "tiny"), SIMULATION),
    (("whatif", "nodes", "tiny"), SIMULATION),
    (("whatif", "power", "tiny", "--set", "system.gpu=H100"), SIMULATION),
    (("whatif", "memory"), SIMULATION),
    (("infer",), SIMULATION),
    (("roofline",), "sim.inference.roofline.roofline"),
    (("collective",), "sim.studies.collective.collective"),
    (("validate-infer",), SIMULATION),
]


@pytest.mark.parametrize("argv, where", LONG_COMMANDS, ids=[" ".join(a[:2]) for a, _ in LONG_COMMANDS])
def test_ctrl_c_stops_every_long_command(argv, where, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(where, _interrupt)
    report = tmp_path / "report.json"
    status, out, err = _run(capsys, *argv, "--json", str(report))
    assert (status, err) == (130, "llmsim: interrupted\n"), (out, err)
    assert not report.exists()  # no partial report


def test_ctrl_c_in_a_reoptimized_study_stops_it(tmp_path, capsys, monkeypatch):
    """``--reoptimize`` runs llmsim sweep's search, which keeps what finished when Ctrl-C stops it:
    the study must stop too, not carry on with the workload's layout."""
    import sim.studies.sweep.core
    import sim.studies.whatif.systems

    searches = sim.studies.whatif.systems.sweep_reoptimizer
    monkeypatch.setattr(sim.studies.whatif.systems, "sweep_reoptimizer",
                        lambda workers=None, factors=None: searches(workers=1, factors=factors))
    monkeypatch.setattr(sim.studies.sweep.core, "simulate_one", _interrupt)
    report = tmp_path / "report.json"
    status, out, err = _run(capsys, "whatif", "generations", "tiny", "--reoptimize", "--json", str(report))
    assert (status, out, err) == (130, "", "llmsim: interrupted\n")
    assert not report.exists()


def test_ctrl_c_in_a_sweep_reports_what_finished(tmp_path, capsys, monkeypatch):
    import sim.studies.sweep.core

    monkeypatch.setattr(sim.studies.sweep.core, "simulate_one", _interrupt)
    report = tmp_path / "report.json"
    status, out, err = _run(capsys, "sweep", "tiny", "--workers", "1", "--json", str(report))
    assert status == 130, err
    assert "interrupted (Ctrl-C) while simulating" in out
    assert json.loads(report.read_text())["interrupted"] is True


# A driver run as `python -c`: Python's own SIGINT handler (as at a terminal: a test run in the
# background inherits SIGINT ignored), MODULE:FUNCTION replaced by one that, the first time it is
# called, touches the file MARK and waits, so that the test sends SIGINT while the command is inside it.
_DRIVER = """
import importlib, pathlib, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
mark, where, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
module, _, path = where.partition(":")
owner, *names = [importlib.import_module(module), *path.split(".")]
for name in names[:-1]:
    owner = getattr(owner, name)
real = getattr(owner, names[-1])
def stall(*args, **kwargs):
    if pathlib.Path(mark).exists():  # the first call waits for SIGINT, later ones run
        return real(*args, **kwargs)
    pathlib.Path(mark).touch()
    while True:
        time.sleep(0.05)
setattr(owner, names[-1], stall)
import sim.studies.whatif.systems
searches = sim.studies.whatif.systems.sweep_reoptimizer
sim.studies.whatif.systems.sweep_reoptimizer = lambda workers=None, factors=None: searches(workers=1, factors=factors)
from sim.cli import main
sys.exit(main(argv))
"""


def _sigint_when_inside(tmp_path, where: str, *argv: str) -> subprocess.CompletedProcess:
    """Run ``llmsim ARGV`` in a subprocess, send it SIGINT once it is inside ``where``
    (``module:function`` or ``module:Class.method``)."""
    mark = tmp_path / "inside"
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(mark), where, *argv], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300  # a loaded machine may take long to import and reach it
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.exists(), proc.communicate(timeout=60)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()  # no-op once it has exited
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_sigint_stops_a_reoptimized_study(tmp_path):
    done = _sigint_when_inside(tmp_path, "sim.studies.sweep.core:simulate_one", "whatif", "generations", "tiny",
                               "--reoptimize")
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "llmsim: interrupted\n")


def test_sigint_stops_a_run(tmp_path):
    done = _sigint_when_inside(tmp_path, "sim.engine.simulation:Simulation.run", "run", "tiny")
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "llmsim: interrupted\n")


# --- a topology that fixes its GPU ----------------------------------------------------------------

B200_NOTE = "topology dgx-b200 fixes its GPU: B200 replaces the workload's A100-SXM4-80GB"


def _json_of(capsys, *argv: str, tmp_path) -> tuple[dict, str]:
    path = tmp_path / "out.json"
    status, out, err = _run(capsys, *argv, "--json", str(path))
    assert status == 0, err
    return json.loads(path.read_text()), out


def test_run_on_a_topology_that_fixes_its_gpu_runs_that_gpu(tmp_path, capsys):
    from sim.hardware import get_gpu

    data, out = _json_of(capsys, "run", "tiny", "--topology", "dgx-b200", tmp_path=tmp_path)
    assert data["gpu"] == "B200" and B200_NOTE in out
    assert {s["capacity_bytes"] for s in data["stages"]} == {int(get_gpu("B200").hbm_capacity_bytes)}  # fits on B200's
    same, _ = _json_of(capsys, "run", "tiny", "--set", "system.gpu=B200", "--topology", "dgx-b200", tmp_path=tmp_path)
    assert data["iteration_time_s"] == same["iteration_time_s"]


def test_a_gpu_named_with_set_stays_on_the_topologys_links(tmp_path, capsys):
    data, out = _json_of(capsys, "run", "tiny", "--set", "system.gpu=A100", "--topology", "dgx-b200",
                         tmp_path=tmp_path)
    assert data["gpu"] == "A100-SXM4-80GB"
    assert "topology dgx-b200 is described with B200; the workload's A100-SXM4-80GB is simulated on its links" in out


def test_a_topology_the_workload_file_names_keeps_the_files_gpu(tmp_path, capsys):
    import yaml

    w = yaml.safe_load((REPO / "workloads" / "tiny.yaml").read_text())
    w["system"]["topology"] = "dgx-b200"
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(w))
    data, out = _json_of(capsys, "run", str(path), tmp_path=tmp_path)
    assert data["gpu"] == w["system"]["gpu"] == "A100-SXM4-80GB" and data["topology"] == "dgx-b200"
    assert "is simulated on its links" in out


def test_compare_brings_each_topologys_gpu(tmp_path, capsys):
    data, out = _json_of(capsys, "compare", "tiny", "--topology", "dgx-a100", "--topology", "dgx-b200",
                         tmp_path=tmp_path)
    assert [r["gpu"] for r in data["rows"]] == ["A100-SXM4-80GB", "B200"]
    assert B200_NOTE in out
    on_b200, _ = _json_of(capsys, "run", "tiny", "--set", "system.gpu=B200", "--topology", "dgx-b200",
                          tmp_path=tmp_path)
    assert data["rows"][1]["iteration_time_s"] == on_b200["iteration_time_s"]


def test_sweep_on_a_topology_that_fixes_its_gpu_searches_that_gpu(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("recompute: [none]\n")
    data, out = _json_of(capsys, "sweep", "tiny", "--topology", "dgx-b200", "--space", str(space), "--workers", "1",
                         tmp_path=tmp_path)
    assert data["gpu"] == "B200" and B200_NOTE in out


def test_a_topology_whose_gpu_lacks_the_workloads_format_is_an_error(tmp_path, capsys):
    import yaml

    w = yaml.safe_load((REPO / "workloads" / "tiny.yaml").read_text())
    w["system"]["gpu"], w["dtype"] = "H100-SXM5-80GB", "fp8"
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(w))
    line = _one_error(capsys, "run", str(path), "--topology", "dgx-a100")
    assert line.startswith("--topology: expected a topology whose GPU runs the workload's fp8 (dgx-a100 fixes "
                           "A100-SXM4-80GB"), line
    assert line.endswith("(got 'dgx-a100')")


def test_whatif_generations_takes_the_gpu_of_a_topology_given_without_a_gpu(tmp_path, capsys):
    data, out = _json_of(capsys, "whatif", "generations", "tiny", "--to-topology", "gb200-nvl72", tmp_path=tmp_path)
    assert data["to"] == "GB200 on gb200-nvl72"
    assert "topology gb200-nvl72 fixes its GPU: GB200 replaces --to's B200" in out
    data, out = _json_of(capsys, "whatif", "generations", "tiny", "--to", "B200", "--to-topology", "gb200-nvl72",
                         tmp_path=tmp_path)
    assert data["to"] == "B200 on gb200-nvl72"


# --- help and behaviour agree ---------------------------------------------------------------------


def _help_of(command: str, option: str, capsys, monkeypatch) -> str:
    """The help text of ``llmsim COMMAND``'s ``option`` as ``--help`` prints it, on one line."""
    monkeypatch.setenv("COLUMNS", "10000")  # argparse wraps at the terminal's width
    with pytest.raises(SystemExit):
        main([command, "--help"])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith(option))
    return line.strip().removeprefix(option).lstrip().partition("  ")[2].strip()


def test_roofline_takes_both_phases_as_its_help_says(tmp_path, capsys, monkeypatch):
    assert "both" in _help_of("roofline", "--phase", capsys, monkeypatch)
    both, _ = _json_of(capsys, "roofline", "--gpu", "H100", "--phase", "both", tmp_path=tmp_path)
    listed, _ = _json_of(capsys, "roofline", "--gpu", "H100", "--phase", "prefill,decode", tmp_path=tmp_path)
    assert both == listed and [p["phase"] for p in both["gpus"][0]["phases"]] == ["prefill", "decode"]
    line = _one_error(capsys, "roofline", "--phase", "all")
    assert line == "--phase: expected one of prefill, decode, both (or several, comma-separated) (got 'all')"


@pytest.mark.parametrize("study", ["generations", "nodes", "power", "memory"])
def test_each_whatif_study_has_a_description_in_its_help(study, capsys):
    with pytest.raises(SystemExit) as info:
        main(["whatif", study, "--help"])
    assert info.value.code == 0
    paragraphs = capsys.readouterr().out.split("\n\n")
    assert paragraphs[0].startswith(f"usage: llmsim whatif {study}")
    description = paragraphs[1]
    assert not description.startswith(("positional arguments", "options")), description
    assert len(description.split()) >= 12, description  # a sentence, not a label


def test_collective_takes_every_op_its_help_and_error_list(tmp_path, capsys, monkeypatch):
    from sim.types import CollectiveKind

    listed = ", ".join(k.value for k in CollectiveKind)
    assert _help_of("collective", "--op", capsys, monkeypatch).startswith(f"one of {listed} (default all-reduce)")
    line = _one_error(capsys, "collective", "--op", "ring")
    assert line == f"--op: expected one of {[k.value for k in CollectiveKind]} (got 'ring')"
    for kind in CollectiveKind:
        data, _ = _json_of(capsys, "collective", "--op", kind.value, "--ranks", "4", tmp_path=tmp_path)
        assert data["op"] == kind.value and data["time_s"] > 0
    assert data["busbw_bytes_per_s"] == data["algbw_bytes_per_s"]  # ring-exchange: nccl-tests' sendrecv, factor 1


# --- --json -, and byte counts as integers -------------------------------------------------------------

VALIDATION = REPO / "workloads" / "validation"


@pytest.fixture(scope="module")
def case_and_space(tmp_path_factory):
    """One small validation case and a two-configuration sweep space."""
    import yaml

    folder = tmp_path_factory.mktemp("inputs")
    cases = [c for c in yaml.safe_load((VALIDATION / "korthikanti2022.yaml").read_text()) if "_t4_22B_" in c["id"]]
    (folder / "case.yaml").write_text(yaml.safe_dump(cases[:1]))
    (folder / "space.yaml").write_text("recompute: [none, full]\n")
    return folder / "case.yaml", folder / "space.yaml"


EVERY_JSON = [  # every command that writes JSON, on the tiny preset where it takes a workload
    ("run", "tiny"), ("memory", "tiny"), ("validate", "{case}"), ("collective", "--ranks", "8"),
    ("compare", "tiny", "--topology", "dgx-a100", "--topology", "dgx-h100"),
    ("sweep", "tiny", "--workers", "1", "--space", "{space}"), ("whatif", "generations", "tiny"),
    ("whatif", "nodes", "tiny"), ("whatif", "power", "tiny", "--set", "system.gpu=H100"),
    ("whatif", "memory", "tiny"), ("infer", "tiny"), ("roofline", "tiny"),
    ("validate-infer", str(REPO / "workloads" / "inference" / "latency.yaml")),
]


def _byte_counts(obj, path: str = ""):
    """(path, value) of every key that counts bytes: ending in ``_bytes``, or ``bytes``."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "bytes" or k.endswith("_bytes"):
                for i, x in enumerate(v if isinstance(v, list) else [v]):
                    yield f"{path}.{k}[{i}]", x
            else:
                yield from _byte_counts(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _byte_counts(v, f"{path}[{i}]")


def _argv(argv, case_and_space) -> list[str]:
    case, space = case_and_space
    return [a.format(case=case, space=space) for a in argv]


@pytest.mark.parametrize("argv", EVERY_JSON, ids=[" ".join(a[:2]) for a in EVERY_JSON])
def test_every_byte_count_in_json_is_an_integer(argv, case_and_space, tmp_path, capsys):
    data, _ = _json_of(capsys, *_argv(argv, case_and_space), tmp_path=tmp_path)
    counts = list(_byte_counts(data))
    assert all(type(v) is int for _, v in counts), [(p, v) for p, v in counts if type(v) is not int][:5]
    if argv[0] in ("run", "memory", "sweep", "infer", "roofline", "collective", "compare"):
        assert counts, "no byte counts found: the walk looks at the wrong keys"


@pytest.mark.parametrize("argv", EVERY_JSON, ids=[" ".join(a[:2]) for a in EVERY_JSON])
def test_json_dash_writes_the_json_to_stdout_and_the_report_to_stderr(argv, case_and_space, tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, err = _run(capsys, *_argv(argv, case_and_space), "--json", "-")
    assert status == 0, err
    data = json.loads(out)  # standard output is the JSON alone
    assert isinstance(data, dict) and data
    assert len(err.splitlines()) > 2 and not err.lstrip().startswith("{"), err[:200]  # the report, on stderr
    assert list(tmp_path.iterdir()) == []  # no file named '-'


# --- what the operating system or the network refused ------------------------------------------------


def test_an_unreachable_dask_scheduler_names_the_option_and_what_happened(capsys, monkeypatch):
    pytest.importorskip("distributed")
    import sim.studies.sweep.core

    monkeypatch.setattr(sim.studies.sweep.core, "DASK_CONNECT_TIMEOUT_S", 0.5)
    line = _one_error(capsys, "sweep", "tiny", "--executor", "dask://127.0.0.1:1")
    assert line.startswith("--executor: expected a reachable Dask scheduler; connecting to tcp://127.0.0.1:1 "
                           "failed: "), line
    assert line.endswith("(got 'dask://127.0.0.1:1')")


@pytest.mark.parametrize("error, says", [
    (TimeoutError("Timed out"), "Timed out"),
    (OSError(), "OSError"),
    (OSError(28, "No space left on device", "out/report.json"), "out/report.json: No space left on device"),
])
def test_an_os_error_is_one_line_with_no_empty_field(error, says, capsys, monkeypatch):
    def refused(*args, **kwargs):
        raise error

    monkeypatch.setattr("sim.engine.simulation.Simulation.run", refused)
    assert _one_error(capsys, "run", "tiny") == says
