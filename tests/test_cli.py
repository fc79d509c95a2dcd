"""Tests of the ``llmsim`` command line: the report, its JSON and trace, determinism, and one
clean line on stderr (exit status 2, no traceback) for each kind of bad input."""

from __future__ import annotations

import gzip
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import sim
from sim.cli import main
from sim.output.trace import validate_chrome_trace

REPO = Path(sim.__file__).resolve().parent.parent
WORKLOADS = REPO / "workloads"
PRESETS = sorted(p.stem for p in WORKLOADS.glob("*.yaml"))
A100_BF16_PEAK = 312e12


def _tiny() -> dict:
    return yaml.safe_load((WORKLOADS / "tiny.yaml").read_text())


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``llmsim ARGV`` in-process; return (status, stdout, stderr)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _ok(capsys, *argv: str) -> str:
    status, out, err = _run(capsys, *argv)
    assert status == 0, err
    assert "Traceback" not in out + err
    return out


def _load_json(path: Path) -> dict:
    return json.loads(path.read_text())


# --- a good run ------------------------------------------------------------------------------


def test_run_tiny_writes_json_and_trace(tmp_path, capsys):
    json_path, trace_path = tmp_path / "out.json", tmp_path / "out.json.gz"
    out = _ok(capsys, "run", "tiny", "--json", str(json_path), "--trace", str(trace_path))
    data = _load_json(json_path)
    for key in ("iteration_time_s", "tokens_per_s", "tflops_per_gpu", "hfu_tflops_per_gpu", "mfu",
                "hfu", "bubble_fraction", "exposed_comm_s", "compute_s", "num_gpus", "events",
                "peak_memory_bytes"):
        assert key in data, key
    assert not any("wall" in key for key in data)  # no wall-clock time: the report is reproducible
    assert set(data["exposed_comm_s"]) >= {"tp", "pp", "dp", "cp", "ep"}
    assert isinstance(data["compute_s"], dict) and data["compute_s"]
    assert isinstance(data["peak_memory_bytes"], list)
    assert len(data["peak_memory_bytes"]) == data["parallel"]["pp"] == _tiny()["parallel"]["pp"]
    assert all(m > 0 for m in data["peak_memory_bytes"])
    assert data["num_gpus"] == _tiny()["system"]["num_gpus"]
    assert data["events"] > 0

    # the numbers agree with each other
    tiny = _tiny()
    tokens = tiny["parallel"]["global_batch_size"] * tiny["model"]["seq_length"]
    assert data["iteration_time_s"] > 0
    assert math.isclose(data["tokens_per_s"] * data["iteration_time_s"], tokens, rel_tol=1e-9)
    assert 0 <= data["bubble_fraction"] < 1
    assert data["hfu"] >= data["mfu"] > 0
    assert data["hfu_tflops_per_gpu"] >= data["tflops_per_gpu"]
    assert math.isclose(data["mfu"], data["tflops_per_gpu"] * 1e12 / A100_BF16_PEAK, rel_tol=1e-9)
    assert math.isclose(data["hfu"], data["hfu_tflops_per_gpu"] * 1e12 / A100_BF16_PEAK, rel_tol=1e-9)

    # the trace is a valid gzipped Chrome trace
    with gzip.open(trace_path, "rt", encoding="utf-8") as fh:
        trace = json.load(fh)
    assert validate_chrome_trace(trace) == []
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])

    # the table and the JSON agree
    assert f"{data['iteration_time_s']:.3f}" in out
    assert "iteration time" in out


def test_table_matches_json(tmp_path, capsys):
    json_path = tmp_path / "out.json"
    out = _ok(capsys, "run", "tiny", "--json", str(json_path))
    data = _load_json(json_path)
    line = next(row for row in out.splitlines() if "iteration time" in row)
    assert f"{data['iteration_time_s']:.3f} s" in line
    assert f"{data['tflops_per_gpu']:.1f}" in out
    assert f"{data['tokens_per_s']:,.0f}" in out


def test_deterministic(tmp_path, capsys):
    """The same inputs give the same printed report, JSON and trace, byte for byte."""
    outputs = []
    for i in range(2):
        json_path, trace_path = tmp_path / f"out{i}.json", tmp_path / f"out{i}.json.gz"
        out = _ok(capsys, "run", "tiny", "--json", str(json_path), "--trace", str(trace_path))
        outputs.append((out.replace(str(tmp_path), "TMP").replace(f"out{i}", "outN"), json_path.read_bytes(),
                        trace_path.read_bytes()))
    assert outputs[0] == outputs[1]


def test_full_matches_representative(tmp_path, capsys):
    rep, full = tmp_path / "rep.json", tmp_path / "full.json"
    _ok(capsys, "run", "tiny", "--json", str(rep))
    _ok(capsys, "run", "tiny", "--full", "--json", str(full))
    a, b = _load_json(rep), _load_json(full)
    assert b["simulated_ranks"] > a["simulated_ranks"]
    assert math.isclose(a["iteration_time_s"], b["iteration_time_s"], rel_tol=1e-9)


def test_subprocess_python_m_sim(tmp_path):
    json_path = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "sim", "run", "tiny", "--json", str(json_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    data = _load_json(json_path)
    assert data["workload"] == "tiny"
    assert data["iteration_time_s"] > 0
    assert f"{data['iteration_time_s']:.3f}" in proc.stdout


# --- every preset ----------------------------------------------------------------------------


def test_presets_found():
    assert "tiny" in PRESETS and "gpt3-175b" in PRESETS


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_runs(preset, tmp_path, capsys):
    json_path = tmp_path / "out.json"
    out = _ok(capsys, "run", preset, "--json", str(json_path))
    data = _load_json(json_path)
    assert data["iteration_time_s"] > 0
    assert f"{data['iteration_time_s']:.3f}" in out
    if preset == "gpt3-175b":
        assert re.search(r"measured\s+13\.750 s", out)
        assert data["reference"]["iteration_time_s"] == 13.75


# --- version and usage -----------------------------------------------------------------------


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    out, _ = capsys.readouterr()
    assert sim.__version__ in out


def test_no_command_exits_2(capsys):
    status, out, err = _run(capsys)
    assert status == 2
    assert "usage" in (out + err).lower()


# --- bad input -------------------------------------------------------------------------------


def _file(name: str, edit) -> object:
    """A builder: write tiny.yaml edited by ``edit`` as tmp_path/name; run it."""
    def build(tmp_path: Path) -> tuple[list[str], str]:
        data = _tiny()
        edit(data)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return ["run", str(path)], str(path)
    return build


def _yaml_typo(tmp_path: Path) -> tuple[list[str], str]:
    path = tmp_path / "typo.yaml"
    text = (WORKLOADS / "tiny.yaml").read_text()
    assert "  tp: 2\n" in text
    path.write_text(text.replace("  tp: 2\n", "  tp: [2\n"))
    return ["run", str(path)], str(path)


def _not_found(tmp_path: Path) -> tuple[list[str], str]:
    path = str(tmp_path / "no-such-workload.yaml")
    return ["run", path], path


def _args(*argv: str, file: str) -> object:
    """A builder: run ``argv`` as given; the error names ``file``."""
    return lambda tmp_path: (list(argv), file)


def _delete(section: str, key: str):
    return lambda d: d[section].pop(key)


def _set(section: str, **kw):
    return lambda d: d[section].update(kw)


TINY = str(WORKLOADS / "tiny.yaml")

# (id, builder: tmp_path -> (argv, the file the error names), the field the error names, or a
# tuple of the field and other words the line must hold)
BAD_INPUTS = [
    ("yaml-typo", _yaml_typo, "line "),
    ("unknown-key", _file("unknown_key.yaml", _set("parallel", tpp=2)), "parallel.tpp"),
    ("unknown-gpu", _file("gpu.yaml", _set("system", gpu="A999-XL")), "system.gpu"),
    ("missing-field", _file("missing.yaml", _delete("model", "hidden_size")), "model.hidden_size"),
    # tiny has 16 heads and tp 2 x pp 2 x dp 2 = 8 GPUs: tp=3 fails heads % tp before the GPU count
    ("heads-not-divisible-by-tp", _args("run", "tiny", "--set", "parallel.tp=3", file=TINY),
     ("parallel.tp", "num_attention_heads")),
    # 1 layer cannot fill 2 x 2 virtual stages even counting the embedding and loss as layers
    ("layers-not-divisible-by-pp-x-vps", _file("layers.yaml", lambda d: (
        d["model"].update(num_layers=1),
        d["parallel"].update(virtual_pipeline_stages=2, schedule="interleaved-1f1b"))),
     ("model.num_layers", "virtual_pipeline_stages")),
    ("batch-not-divisible-by-micro-x-dp", _file("gbs.yaml", _set("parallel", global_batch_size=7)),
     "parallel.global_batch_size"),
    ("gpus-not-tp-x-pp-x-dp", _file("ngpus.yaml", _set("system", num_gpus=16)), "system.num_gpus"),
    ("workload-not-found", _not_found, "<file>"),
    ("unknown-topology-preset", _args("run", "tiny", "--topology", "no-such-topology",
                                      file="no-such-topology"), "<file>"),
    ("unknown-topology-in-file", _file("topo.yaml", _set("system", topology="no-such-topology")),
     "system.topology"),
    ("set-without-equals", _args("run", "tiny", "--set", "parallel.tp", file="<--set>"), "parallel.tp"),
    ("set-unknown-field", _args("run", "tiny", "--set", "parallel.nosuch=1", file="<--set>"),
     "parallel.nosuch"),
    ("set-bad-yaml-value", _args("run", "tiny", "--set", "parallel.tp=[1", file="<--set>"), "parallel.tp"),
]


@pytest.mark.parametrize("build, field", [pytest.param(b, f, id=i) for i, b, f in BAD_INPUTS])
def test_bad_input_one_clean_line(build, field, tmp_path, capsys):
    argv, file = build(tmp_path)
    json_path = tmp_path / "never.json"
    status, out, err = _run(capsys, *argv, "--json", str(json_path))
    assert status == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("llmsim: error:")
    assert file in line, line
    for word in (field,) if isinstance(field, str) else field:
        assert word in line, line
    assert not json_path.exists()


def test_ctrl_c_is_one_line_and_status_130(capsys, monkeypatch):
    import sim.runner

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.runner, "simulate", interrupted)
    status, out, err = _run(capsys, "run", "tiny")
    assert status == 130
    assert err == "llmsim: interrupted\n"
    assert "Traceback" not in out
