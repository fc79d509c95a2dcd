"""Hostile and huge input (issue #31): every example of the adversarial run, one test each.

Workload, topology, GraphML, Hugging Face and Megatron-argument files are untrusted: each
outcome here is one ``llmsim: error:`` line with exit status 2, in bounded time and memory,
quoting a bounded excerpt of what arrived and naming the file the user gave. The inputs that
used to run for minutes or exhaust memory run in a subprocess under an address-space limit
and a timeout (:func:`_bounded`), so that a regression fails the test instead of the machine.
The property-based test across these classes is ``tests/property/test_hostile_inputs.py``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import networkx as nx
import pytest
import yaml

import sim
from sim.cli import main
from sim.errors import EXCERPT_CHARS, ConfigError, excerpt

REPO = Path(sim.__file__).resolve().parent.parent
TINY = (REPO / "workloads" / "tiny.yaml").read_text()
A100 = (REPO / "topologies" / "dgx-a100.yaml").read_text()
LINE_CHARS = 1000
"""No error line here is longer: each quotes at most EXCERPT_CHARS of what arrived."""


def _line_of(status: int, out: str, err: str) -> str:
    """The single ``llmsim: error:`` line of a finished command, after checking status 2."""
    assert status == 2, (status, out[-2000:], err[-2000:])
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim: error: "), err[-2000:]
    assert "Traceback" not in out + err and len(lines[0]) < LINE_CHARS, err[:2000]
    return lines[0].removeprefix("llmsim: error: ")


def _error(capsys, *argv: str) -> str:
    """``llmsim ARGV`` in this process: its one error line (status 2)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return _line_of(status, out, err)


def _limits(memory_gib: float):
    def apply() -> None:
        limit = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def _bounded(*argv: str, memory_gib: float = 3.0, timeout: float = 120.0) -> str:
    """``llmsim ARGV`` in a subprocess under ``memory_gib`` of address space and ``timeout``
    seconds (generous: a loaded machine; the runs take well under a second): its error line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run([sys.executable, "-m", "sim", *argv], capture_output=True, text=True, cwd=REPO,
                              env=env, timeout=timeout, preexec_fn=_limits(memory_gib), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"llmsim {' '.join(argv)[:200]} ran past {timeout} s")
    return _line_of(done.returncode, done.stdout, done.stderr)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _laughs(levels: int = 9) -> str:
    """A YAML mapping ``notes:`` of ``levels`` anchors, each a list of nine aliases of the one
    before: 9^levels strings once expanded."""
    lines = ['  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "notes:\n" + "\n".join(lines) + "\n"


def _deep(depth: int = 1000) -> str:
    return "[" * depth + "]" * depth


# --- 1. YAML alias expansion ----------------------------------------------------------------------

LAUGHS = {  # field: the line of tiny.yaml it replaces, and the replacement naming the last anchor
    "parallel.tp": ("  tp: 2\n", "  tp: *a8\n"),
    "model.name": ("  name: tiny-gpt\n", "  name: *a8\n"),
    "system.gpu": ("  gpu: A100-SXM4-80GB\n", "  gpu: *a8\n"),
    "dtype": ("dtype: bf16\n", "dtype: *a8\n"),
    "model.hf_config": ("  name: tiny-gpt\n", "  hf_config: *a8\n"),
}


@pytest.mark.parametrize("field", LAUGHS)
def test_nested_aliases_in_a_workload_are_refused_at_load(field, tmp_path):
    old, new = LAUGHS[field]
    path = _write(tmp_path, "laughs.yaml", _laughs() + TINY.replace(old, new))
    line = _bounded("run", path, memory_gib=2.0)
    assert line.startswith(f"{path}: line ") and "aliases counted each time they are used" in line, line


def test_nested_aliases_in_a_topology_name_are_refused_at_load(tmp_path):
    path = _write(tmp_path, "laughs-topology.yaml", _laughs() + A100.replace("name: dgx-a100", "name: *a8"))
    line = _bounded("run", "tiny", "--topology", path, memory_gib=2.0)
    assert line.startswith(f"{path}: line ") and "aliases counted" in line, line


def test_nested_aliases_in_a_set_value_are_refused():
    value = "{" + ", ".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9) if i else '1, 1, 1, 1, 1, 1, 1, 1, 1'}]"
                            for i in range(9)) + "}"
    line = _bounded("run", "tiny", "--set", f"parallel.tp={value}", memory_gib=2.0)
    assert line.startswith("<--set>: parallel.tp: expected a YAML value of a document of at most"), line


def test_a_serving_stack_file_is_read_within_the_same_bounds(tmp_path):
    from sim.inference.stack import read_serving_stack

    text = (REPO / "workloads" / "inference" / "stacks" / "cuda-graphs.yaml").read_text()
    assert "\nname: " in text
    bomb = _write(tmp_path, "bomb.yaml", _laughs() + text.replace("\nname: ", "\nname: *a8\nold_name: ", 1))
    with pytest.raises(ConfigError, match="aliases counted each time they are used") as caught:
        read_serving_stack(bomb)
    assert len(str(caught.value)) < LINE_CHARS
    twice = _write(tmp_path, "twice.yaml", text + "name: again\n")
    with pytest.raises(ConfigError, match="each key once in a mapping"):
        read_serving_stack(twice)


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path, capsys):
    path = _write(tmp_path, "loop.yaml", TINY + "notes: &loop [1, *loop]\n")
    line = _error(capsys, "run", path)
    assert line == f"{path}: line 35: expected no alias inside its own anchor (got *loop)", line


def test_aliases_that_stay_small_still_load(tmp_path, capsys):
    path = _write(tmp_path, "anchored.yaml", TINY.replace("  tp: 2\n", "  tp: &two 2\n").replace(
        "  pp: 2\n", "  pp: *two\n"))
    assert main(["memory", path]) == 0, capsys.readouterr().err


def test_an_error_quotes_a_bounded_excerpt_of_a_huge_value():
    err = ConfigError("w.yaml", "model.name", "a string", "x" * 50_000_000)
    assert len(str(err)) < 200 and "(50,000,000 characters)" in str(err)
    laughs = ["lol"] * 9
    for _ in range(9):
        laughs = [laughs] * 9  # 9^10 strings, were they written out
    assert len(excerpt(laughs)) <= EXCERPT_CHARS + 3


# --- 2. sizes: bounded time and memory --------------------------------------------------------------

def test_a_collective_of_1e400_bytes_is_refused():
    line = _bounded("collective", "--bytes", "1e400")
    assert line == "--bytes: expected a positive size of at most 1 PiB, such as 1GiB, 256MB or 4096 (bytes) " \
                   "(got '1e400')"


def _torus(dims: str) -> str:
    return (REPO / "topologies" / "torus-3d.yaml").read_text().replace("dims: [4, 4, 4]", f"dims: {dims}")


def test_a_torus_of_eight_billion_routers_is_refused_before_it_is_built(tmp_path):
    path = _write(tmp_path, "torus.yaml", _torus("[2000, 2000, 2000]"))
    line = _bounded("run", "tiny", "--topology", path)
    assert line.startswith("--max-memory-gib: expected a job that fits in the simulation memory budget of"), line
    assert "56,000,000,072 topology nodes and links" in line, line


def test_a_dragonfly_of_a_million_routers_per_group_is_refused_before_it_is_built(tmp_path):
    text = (REPO / "topologies" / "dragonfly.yaml").read_text()
    path = _write(tmp_path, "dragonfly.yaml", text.replace("routers_per_group: 32", "routers_per_group: 1000000"))
    assert path and "routers_per_group: 1000000" in Path(path).read_text()
    line = _bounded("run", "tiny", "--topology", path)
    assert line.startswith("--max-memory-gib: expected a job that fits"), line


def _megatron(tmp_path: Path, old: str, new: str) -> str:
    text = (REPO / "workloads" / "megatron" / "llama3-8b.args").read_text()
    assert old in text
    return "@" + _write(tmp_path, "launch.args", text.replace(old, new).replace("--bf16", "--bf16 --vocab-size 128256"))


def test_megatron_num_layers_of_twenty_digits_is_refused(tmp_path):
    args = _megatron(tmp_path, "--num-layers 32", "--num-layers 99999999999999999999")
    line = _bounded("run", "--megatron-args", args, "--set", "system.gpu=H100")
    assert line.endswith("--num-layers (model.num_layers): expected an integer of at most 2^53 "
                         "(got 99999999999999999999)"), line


def test_a_pipeline_layout_repeated_a_trillion_times_is_refused(tmp_path):
    args = _megatron(tmp_path, "--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2 "
                     "--pipeline-model-parallel-layout 'E*999999999999|t*32,L'")
    line = _bounded("run", "--megatron-args", args, "--set", "system.gpu=H100")
    assert "--pipeline-model-parallel-layout" in line and "at most 100,000 characters once its repetitions" in line


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_megatron_arguments_from_an_endless_file_are_refused():
    line = _bounded("run", "--megatron-args", "@/dev/zero", "--set", "system.gpu=H100")
    assert line == "/dev/zero: <file>: expected a file of Megatron-LM arguments of at most 16 MiB " \
                   "(got more than 16 MiB)"


@pytest.mark.parametrize("command", ["run", "memory"])
def test_a_hundred_million_layers_set_on_the_command_line_are_refused(command):
    line = _bounded(command, "tiny", "--set", "model.num_layers=100000000")
    assert line.endswith("workloads/tiny.yaml (--set): model.num_layers: expected at most 10,000 layers "
                         "(got 100000000)"), line


def test_a_hundred_million_generated_tokens_are_refused_before_they_are_built():
    line = _bounded("infer", "--gpu", "H100", "--tp", "8", "--generate", "100000000")
    assert line.startswith("--max-memory-gib: expected a job that fits"), line
    assert "100,000,000 tokens generated" in line


LLAMA_16K = ("llama3-405b", "--set", "system.num_gpus=16384", "--set", "parallel.dp=128",
             "--set", "parallel.global_batch_size=1280000", "--max-memory-gib", "8")


def test_ten_thousand_micro_batches_of_llama3_405b_on_16384_gpus_are_refused():
    line = _bounded("run", *LLAMA_16K)
    assert line.startswith("--max-memory-gib: expected a job that fits in the simulation memory budget of "
                           "8.0 GiB (--max-memory-gib) (got an estimated "), line
    assert "Llama 3/3.1 405B on 16,384 GPUs, 10,000 micro-batches: " in line, line


def test_every_rank_of_that_job_is_refused_as_fast():
    line = _bounded("run", *LLAMA_16K, "--full")
    assert "10,000 micro-batches, every rank: " in line, line


def test_a_data_parallel_group_of_a_million_gpus_is_counted_before_it_is_priced():
    """Few tasks, but the DP all-reduce's plan holds flows over 262,144 ranks: counted, so the
    job is refused in a line instead of growing until the system kills it."""
    line = _bounded("run", "tiny", "--set", "system.num_gpus=1048576", "--set", "parallel.dp=null",
                    "--set", "parallel.global_batch_size=1048576", "--max-memory-gib", "4")
    assert line.startswith("--max-memory-gib: expected a job that fits"), line
    assert "on 1,048,576 GPUs, 4 micro-batches: 1,216 tasks" in line, line


def test_the_default_budget_is_half_the_memory_the_process_may_use():
    line = _bounded("run", *LLAMA_16K[:-2], memory_gib=3.0)
    assert "simulation memory budget of 1.5 GiB (50% of the 3.0 GiB this process may use; --max-memory-gib " \
           "raises it)" in line, line


def test_a_job_under_the_budget_is_not_refused(capsys):
    assert main(["run", "tiny", "--max-memory-gib", "1"]) == 0
    assert "iteration" in capsys.readouterr().out


def test_a_budget_that_is_not_a_positive_number_is_an_error(capsys):
    assert _error(capsys, "run", "tiny", "--max-memory-gib", "nan") == \
        "--max-memory-gib: expected a positive number of GiB (got nan)"


def _sigints(argv: tuple[str, ...], after_s: float, twice: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    driver = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); " \
             "from sim.cli import main; sys.exit(main(sys.argv[1:]))"  # as at a terminal
    proc = subprocess.Popen([sys.executable, "-c", driver, *argv], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(after_s)
    proc.send_signal(signal.SIGINT)
    if twice:
        time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("Ctrl-C did not stop it within 60 s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("twice", [False, True], ids=["once", "twice"])
def test_ctrl_c_stops_a_long_full_run(twice):
    """A run of every rank (seconds): Ctrl-C, once or twice in quick succession, while it
    builds or simulates ends it with the one line and 130, never a traceback."""
    done = _sigints(("run", "gpt3-175b", "--full"), 3.0, twice)
    assert (done.returncode, done.stderr) == (130, "llmsim: interrupted\n"), done.stderr[-2000:]


# --- 3. malformed structure -------------------------------------------------------------------------

def _models_yaml() -> str:
    return (REPO / "workloads" / "models" / "llama2-7b.yaml").read_text()


DEEP = {  # command: (argv with FILE for the file, file name, its text)
    "workload": (("run", "FILE"), "w.yaml", TINY + f"notes: {_deep()}\n"),
    "topology": (("run", "tiny", "--topology", "FILE"), "t.yaml", A100 + f"faults: {_deep()}\n"),
    "sweep space": (("sweep", "tiny", "--space", "FILE", "--workers", "1"), "s.yaml", f"tp: {_deep()}\n"),
    "validate": (("validate", "FILE", "--jobs", "1"), "v.yaml", f"- {_deep()}\n"),
    "memory": (("memory", "FILE"), "w.yaml", TINY + f"notes: {_deep()}\n"),
    "infer": (("infer", "FILE"), "m.yaml", _models_yaml() + f"notes: {_deep()}\n"),
}


@pytest.mark.parametrize("where", DEEP)
def test_yaml_nested_a_thousand_deep_is_refused(where, tmp_path, capsys):
    argv, name, text = DEEP[where]
    path = _write(tmp_path, name, text)
    line = _error(capsys, *(path if a == "FILE" else a for a in argv))
    assert line.startswith(f"{path}: line ") and "expected collections nested at most 64 deep" in line, line


def test_a_set_value_nested_a_thousand_deep_is_refused(capsys):
    line = _error(capsys, "run", "tiny", "--set", f"parallel.tp={_deep()}")
    assert line.startswith("<--set>: parallel.tp: expected a YAML value of collections nested at most 64"), line


def _hf(tmp_path: Path, tail: str, **changes) -> str:
    cfg = json.loads((REPO / "workloads" / "hf" / "llama-3-8b.json").read_text())
    cfg.update(changes)
    text = json.dumps(cfg)
    return _write(tmp_path, "config.json", text[:-1] + tail + "}" if tail else text)


def _with_hf(path: str) -> tuple[str, ...]:
    return ("run", "--megatron-args", "@llama3-8b", "--hf-config", path, "--set", "system.gpu=H100")


def test_a_hugging_face_config_nested_a_hundred_thousand_deep_is_refused(tmp_path, capsys):
    path = _hf(tmp_path, ', "deep": ' + _deep(100_000))
    line = _error(capsys, *_with_hf(path))
    assert line.startswith(f"{path}: <file>: expected JSON nested less than "), line


def test_a_5000_digit_integer_in_a_hugging_face_config_is_refused(tmp_path, capsys):
    path = _hf(tmp_path, ', "vocab_size2": ' + "9" * 5000)
    assert _error(capsys, *_with_hf(path)) == \
        f"{path}: <file>: expected integers of at most 30 digits (got one of 5,000 characters)"


def test_a_5000_digit_integer_in_a_workload_is_refused(tmp_path, capsys):
    path = _write(tmp_path, "w.yaml", TINY.replace("  num_layers: 4\n", f"  num_layers: {'9' * 5000}\n"))
    assert _error(capsys, "run", path) == f"{path}: line 6: expected an integer of at most 30 digits " \
                                          "(got one of 5,000 characters)"


def test_a_moe_layer_freq_of_3000_terms_is_refused(capsys):
    args = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
            "--global-batch-size 8 --vocab-size 32000 --num-experts 8 --moe-router-topk 2 --moe-layer-freq "
            + "+".join(["[1]"] * 3000))
    line = _error(capsys, "run", "--megatron-args", args, "--set", "system.gpu=H100")
    assert "--moe-layer-freq: expected a list expression of at most a few hundred terms" in line, line


def test_a_nan_size_in_an_efficiency_curve_is_refused(tmp_path, capsys):
    path = _write(tmp_path, "t.yaml", A100.replace("    - [2097152, 0.515]", "    - [.nan, 0.515]"))
    assert _error(capsys, "run", "tiny", "--topology", path) == \
        f"{path}: scale_up.efficiency_by_size_bytes[0]: expected a message size in bytes, positive and at most " \
        "2^60 (got nan)"


def _graphml(tmp_path: Path, gpu: dict | None = None, edge: dict | None = None) -> str:
    g = nx.Graph()
    g.add_node("sw", kind="switch")
    for i in range(2):
        g.add_node(f"gpu{i}", **{"kind": "gpu", "node": 0, **(gpu if i == 1 and gpu else {})})
        g.add_edge(f"gpu{i}", "sw", **{"bandwidth_GBps": 100.0, "latency_us": 1.0, "link": "nvlink",
                                       **(edge if i == 1 and edge else {})})
    nx.write_graphml(g, tmp_path / "g.graphml")
    return _write(tmp_path, "g.yaml", "name: my-graph\ngpus_per_node: 2\ngraphml: g.graphml\n")


def _two_gpus(tmp_path: Path) -> str:
    return _write(tmp_path, "two.yaml", TINY.replace("  num_gpus: 8", "  num_gpus: 2").replace(
        "  tp: 2", "  tp: 1").replace("  dp: 2", "  dp: 1").replace("topology: dgx-a100", "topology: null"))


def test_a_graphml_local_gpu_that_is_not_a_number_is_refused(tmp_path, capsys):
    topo = _graphml(tmp_path, gpu={"local_gpu": "abc"})
    line = _error(capsys, "run", _two_gpus(tmp_path), "--topology", topo)
    assert line == f"{tmp_path / 'g.graphml'}: node gpu1: local_gpu: expected a non-negative integer attribute " \
                   "'local_gpu' (got 'abc')", line


# --- 4. non-finite numbers ------------------------------------------------------------------------

def test_a_straggler_infinitely_slow_is_refused(capsys):
    assert _error(capsys, "run", "tiny", "--slow-gpu", "0=inf") == \
        "--slow-gpu: expected a slowdown FACTOR from 1 to 1e+06 (got '0=inf')"


INFINITE = {  # field: (the text of dgx-a100.yaml replaced, the replacement)
    "scale_up.latency_us": ("  latency_us: 0.3 ", "  latency_us: .inf "),
    "scale_out.latency_us": ("  latency_us: 1.35 ", "  latency_us: .inf "),
    "scale_up.collective_latency_us": ("collective_latency_us: 36.4", "collective_latency_us: .inf"),
    "scale_out.oversubscription": ("oversubscription: 1.0", "oversubscription: .inf"),
}


@pytest.mark.parametrize("field", INFINITE)
def test_an_infinite_topology_number_is_refused_naming_its_field(field, tmp_path, capsys):
    old, new = INFINITE[field]
    path = _write(tmp_path, "t.yaml", A100.replace(old, new))
    line = _error(capsys, "run", "tiny", "--topology", path)
    assert line == f"{path}: {field}: expected a finite number (got inf)", line


def test_an_infinite_graphml_latency_is_refused(tmp_path, capsys):
    topo = _graphml(tmp_path, edge={"latency_us": float("inf")})
    line = _error(capsys, "run", _two_gpus(tmp_path), "--topology", topo)
    assert line.startswith(f"{tmp_path / 'g.graphml'}: edge sw-gpu1: latency_us: expected a finite number "
                           "attribute 'latency_us' (got inf)"), line


@pytest.mark.parametrize("value, expected", [(".nan", "a finite number (got nan)"),
                                             ("0", "a positive measured value (null: not published) (got 0.0)"),
                                             ("-1", "a positive measured value (null: not published) (got -1.0)")])
def test_a_target_that_is_not_a_positive_number_is_refused(value, expected, tmp_path, capsys):
    path = _write(tmp_path, "w.yaml", TINY + f"targets:\n  iteration_time_s:\n    value: {value}\n")
    assert _error(capsys, "run", path) == f"{path}: targets.iteration_time_s.value: expected {expected}"


def _no_constants(name: str) -> None:
    raise AssertionError(f"{name} in the JSON")


def test_json_output_is_valid_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "tiny", "--slow-gpu", "1=1.5", "--json", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text(), parse_constant=_no_constants)["iteration_time_s"] > 0


def test_a_non_finite_number_never_reaches_a_json_file(tmp_path, capsys, monkeypatch):
    import sim.output.report

    real = sim.output.report.Report.to_dict

    def broken(self):
        return {**real(self), "iteration_time_s": float("nan")}

    monkeypatch.setattr(sim.output.report.Report, "to_dict", broken)
    out = tmp_path / "r.json"
    status = main(["run", "tiny", "--json", str(out)])
    err = capsys.readouterr().err
    assert status == 1 and err.startswith("llmsim: error: the report holds a number that is not finite"), err
    assert not out.exists()


# --- 5. duplicate keys ----------------------------------------------------------------------------

def test_a_bandwidth_given_twice_is_an_error_naming_both_lines(tmp_path, capsys):
    path = _write(tmp_path, "t.yaml", A100.replace("  bandwidth_GBps: 300 ", "  bandwidth_GBps: 300\n"
                                                                             "  bandwidth_GBps: 1 "))
    assert _error(capsys, "run", "tiny", "--topology", path) == \
        f"{path}: line 12: expected each key once in a mapping (got 'bandwidth_GBps' on lines 11 and 12)"


def test_a_second_parallel_section_is_an_error_naming_both_lines(tmp_path, capsys):
    path = _write(tmp_path, "w.yaml", TINY + "parallel:\n  tp: 8\n")
    assert _error(capsys, "run", path) == \
        f"{path}: line 35: expected each key once in a mapping (got 'parallel' on lines 20 and 35)"


# --- 6. errors that leak or misname ---------------------------------------------------------------

def test_a_topology_that_is_a_text_file_is_not_printed(tmp_path, capsys):
    secret = "root:x:0:0:root:/root:/bin/bash\n" * 200
    accounts = _write(tmp_path, "accounts", secret)
    path = _write(tmp_path, "w.yaml", TINY.replace("topology: dgx-a100", f"topology: {accounts}"))
    line = _error(capsys, "run", path)
    assert line == f"{accounts}: <top level>: expected a mapping (got text of 6,399 characters)", line


def test_a_50_mb_value_gives_a_bounded_error_line(tmp_path, capsys):
    path = _write(tmp_path, "w.yaml", TINY.replace("  gpu: A100-SXM4-80GB", "  gpu: " + "A" * 10_000_000))
    line = _error(capsys, "run", path)
    assert line.endswith(f"(got '{'A' * EXCERPT_CHARS}'... (10,000,000 characters))"), line[-200:]
    big = _write(tmp_path, "big.yaml", TINY.replace("  gpu: A100-SXM4-80GB", "  gpu: " + "A" * 50_000_000))
    assert _error(capsys, "run", big) == f"{big}: <file>: expected a YAML file of at most 16 MiB " \
                                         "(got more than 16 MiB)"


def test_an_error_found_after_the_topology_is_built_names_its_file(tmp_path, capsys):
    path = _write(tmp_path, "my-faulty.yaml", A100 + "faults:\n  - between: [nope0, nope1]\n"
                                                     "    bandwidth_fraction: 0.5\n")
    line = _error(capsys, "run", "tiny", "--topology", path)
    assert line.startswith(f"{path}: faults[0].between: expected two adjacent nodes"), line


def test_an_infinite_oversubscription_names_its_field_not_a_spec(tmp_path, capsys):
    path = _write(tmp_path, "t.yaml", A100.replace("oversubscription: 1.0", "oversubscription: .inf"))
    line = _error(capsys, "run", "tiny", "--set", "system.num_gpus=64", "--set", "parallel.dp=16",
                  "--set", "parallel.global_batch_size=64", "--topology", path)
    assert line == f"{path}: scale_out.oversubscription: expected a finite number (got inf)"


# --- 7. values the rest of the loader refuses -----------------------------------------------------

def test_a_negative_q_lora_rank_is_refused(tmp_path, capsys):
    mla = ("  q_lora_rank: -1\n  kv_lora_rank: 512\n  qk_nope_head_dim: 128\n  qk_rope_head_dim: 64\n"
           "  v_head_dim: 128\n")
    path = _write(tmp_path, "w.yaml", TINY.replace("  tied_embeddings: false\n", "  tied_embeddings: false\n" + mla))
    assert _error(capsys, "run", path) == \
        f"{path}: model.q_lora_rank: expected 0 (queries projected directly) or a positive integer (got -1)"


def test_a_negative_expert_count_in_a_hugging_face_config_is_refused(tmp_path, capsys):
    path = _hf(tmp_path, "", num_local_experts=-8, num_experts_per_tok=2)
    assert _error(capsys, *_with_hf(path)) == \
        f"{path}: num_local_experts: expected an integer >= 0 of at most 2^53 (got -8)"


def test_a_negative_message_size_in_an_efficiency_curve_is_refused(tmp_path, capsys):
    path = _write(tmp_path, "t.yaml", A100.replace("    - [2097152, 0.515]", "    - [-2097152, 0.515]"))
    assert _error(capsys, "run", "tiny", "--topology", path) == \
        f"{path}: scale_up.efficiency_by_size_bytes[0]: expected a message size in bytes, positive and at most " \
        "2^60 (got -2097152)"


def test_a_negative_graphml_node_is_refused(tmp_path, capsys):
    topo = _graphml(tmp_path, gpu={"node": -3})
    line = _error(capsys, "run", _two_gpus(tmp_path), "--topology", topo)
    assert line == f"{tmp_path / 'g.graphml'}: node gpu1: node: expected a non-negative integer attribute 'node' " \
                   "(got -3)", line


# --- 8. interrupts --------------------------------------------------------------------------------

@pytest.mark.parametrize("attempt", range(3))
def test_ctrl_c_during_a_sweep_with_two_workers_prints_no_pool_traceback(attempt, tmp_path):
    """Ctrl-C reaches the whole process group at a terminal: the workers ignore it, the parent
    stops them; the pool's manager thread must not print ``InvalidStateError`` (it did in 3 of
    8 tries when futures were cancelled). Repeated: the race is in the pool's thread."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    driver = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); " \
             "from sim.cli import main; sys.exit(main(sys.argv[1:]))"
    report = tmp_path / "sweep.json"
    # 64 micro-batches: the sweep runs well past the signal (tiny's own 4 finish in about 4 s
    # here, and a signal that lands while the report is written leaves no report to check)
    proc = subprocess.Popen([sys.executable, "-c", driver, "sweep", "tiny", "--set", "parallel.global_batch_size=64",
                             "--workers", "2", "--exhaustive", "--json", str(report)], cwd=REPO, env=env, text=True,
                            start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(4.0 + attempt)  # the workers have started and are simulating
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("Ctrl-C did not stop the sweep")
    assert "Traceback" not in err and "InvalidStateError" not in err, err[-3000:]
    if proc.returncode == 130:  # interrupted while simulating: what had finished is reported
        assert "interrupted (Ctrl-C)" in out and json.loads(report.read_text())["interrupted"] is True
    else:  # it finished before the signal arrived
        assert proc.returncode == 0, (out[-2000:], err[-2000:])


def test_an_interrupted_chakra_export_leaves_the_earlier_run_whole(tmp_path, monkeypatch, capsys):
    pytest.importorskip("google.protobuf")
    import sim.export.chakra as chakra

    out = tmp_path / "et"
    assert main(["run", "tiny", "--set", "parallel.dp=4", "--set", "system.num_gpus=16", "--chakra", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(before) == 17  # 16 ranks and the groups

    calls = []
    real = chakra.encode_metadata

    def interrupt_at_the_third_rank(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(chakra, "encode_metadata", interrupt_at_the_third_rank)
    assert main(["run", "tiny", "--chakra", str(out)]) == 130
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched, no temporary folder left
    monkeypatch.setattr(chakra, "encode_metadata", real)
    assert main(["run", "tiny", "--chakra", str(out)]) == 0  # 8 ranks: the earlier run's 8..15 go
    assert sorted(p.name for p in out.iterdir()) == sorted(["llmsim.comm_groups.json"] +
                                                           [f"llmsim.{r}.et" for r in range(8)])
    capsys.readouterr()


def test_yaml_of_shipped_presets_reads_as_safe_load_does():
    """The strict loader reads every shipped file as PyYAML's safe loader does."""
    from sim.config.fields import load_yaml

    files = sorted((REPO / "workloads").rglob("*.yaml")) + sorted((REPO / "topologies").glob("*.yaml"))
    assert files
    for f in files:
        text = f.read_text()
        assert load_yaml(text) == yaml.safe_load(text), f


@pytest.mark.parametrize("text, value", [("17:04", "17:04"), ("1:30.5", "1:30.5"), ("010", 10), ("-007", -7),
                                         ("0x10", 16), ("1_024", 1024), ("0", 0)])
def test_yaml_numbers_read_as_yaml_1_2_does(text, value):
    """YAML 1.1's base 60 (``17:04`` read as 1024) and leading-zero octal (``010`` as 8) would
    turn a typo into a silent number: read as YAML 1.2 reads them, text and decimal."""
    from sim.config.fields import load_yaml

    assert load_yaml(f"x: {text}\n") == {"x": value}


def test_a_sequence_length_written_as_a_time_is_refused(tmp_path, capsys):
    w = tmp_path / "w.yaml"
    w.write_text((REPO / "workloads" / "tiny.yaml").read_text().replace("seq_length: 1024", "seq_length: 17:04"))
    assert "seq_length: 17:04" in w.read_text()
    assert main(["run", str(w)]) == 2
    err = capsys.readouterr().err
    assert "model.seq_length" in err and "'17:04'" in err and len(err.splitlines()) == 1
