"""Bad input a user could plausibly give, each refused with one line naming the file, the field,
what was expected and what arrived, and status 2: never a traceback, never exit 0 with the input
silently ignored or read as something else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.cli import main

REPO = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((REPO / "workloads" / "tiny.yaml").read_text())
LOG = (REPO / "tests" / "data" / "nccl_tests" / "h100-cluster01-1node-all_reduce.txt").read_text()


def _error(capsys, *argv: str) -> str:
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert status == 2, (status, out[-1500:], err[-1500:])
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _yaml(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _tiny(**model_or_top) -> dict:
    w = json.loads(json.dumps(TINY))
    for key, value in model_or_top.items():
        section, _, field = key.partition("__")
        if field:
            w[section][field] = value
        else:
            w[section] = value
    return w


def _case(**changes) -> dict:
    return {**_tiny(**changes), "id": "tiny_case", "targets": {"iteration_time_s": {"value": 0.012, "derived": False}}}


# --- nccl-tests logs and measured runs (calibrate) -----------------------------------------------


@pytest.mark.parametrize("edit, field", [("182.87", "time"), ("-182.87", None), ("nan", None)])
def test_an_nccl_tests_row_with_a_time_not_above_zero_is_refused_not_dropped(edit, field, tmp_path, capsys):
    log = tmp_path / "all_reduce.txt"
    log.write_text(LOG.replace("182.87", "0.00" if field else edit, 1))
    line = _error(capsys, "calibrate", "--nccl-tests", str(log), "-o", str(tmp_path / "c.yaml"))
    assert line.startswith(f"llmsim: error: {log}: row 1 (size 33554432)"), line
    assert not (tmp_path / "c.yaml").exists()


def test_an_nccl_tests_row_cut_short_or_reporting_wrong_results_is_refused(tmp_path, capsys):
    short = tmp_path / "all_reduce_short.txt"
    short.write_text(LOG.replace("   182.87  183.49  321.10       0   182.88  183.48  321.08       0", "", 1))
    assert "row 1 (size 33554432): expected the 13 columns" in _error(
        capsys, "calibrate", "--nccl-tests", str(short), "-o", str(tmp_path / "c.yaml"))
    wrong = tmp_path / "all_reduce_wrong.txt"
    wrong.write_text(LOG.replace("321.10       0", "321.10       5", 1))
    assert "row 1 (size 33554432): #wrong: expected 0" in _error(
        capsys, "calibrate", "--nccl-tests", str(wrong), "-o", str(tmp_path / "c.yaml"))
    twice = tmp_path / "all_reduce_ranks.txt"
    twice.write_text(LOG.replace("#  Rank  5 Group  0", "#  Rank  4 Group  0", 1))
    assert "Rank 4: expected each rank's line once" in _error(
        capsys, "calibrate", "--nccl-tests", str(twice), "-o", str(tmp_path / "c.yaml"))


def test_an_nccl_tests_log_of_other_gpus_than_the_topologys_is_refused(tmp_path, capsys):
    log = tmp_path / "all_reduce.txt"
    log.write_text(LOG)  # eight H100s
    line = _error(capsys, "calibrate", "--nccl-tests", str(log), "--topology", "dgx-a100", "-o",
                  str(tmp_path / "c.yaml"))
    assert line == (f"llmsim: error: {log}: devices: expected the GPUs of topology dgx-a100 (A100-SXM4-80GB): a log "
                    "of other GPUs calibrates another topology (--topology) (got 'NVIDIA H100 80GB HBM3')")


def test_calibrate_runs_from_a_file_of_no_runs_is_refused(tmp_path, capsys):
    empty = tmp_path / "none.yaml"
    empty.write_text("[]\n")
    line = _error(capsys, "calibrate", "--runs", str(empty), "-o", str(tmp_path / "c.yaml"))
    assert line == f"llmsim: error: {empty}: <top level>: expected one or more measured runs (workloads with " \
                   "targets) (got no runs)"


# --- validation cases ----------------------------------------------------------------------------


def test_validate_exits_2_naming_the_case_it_could_not_simulate(tmp_path, capsys):
    bad = _yaml(tmp_path, "cases.yaml", [_case(), {**_case(parallel__tp=3), "id": "odd_tp"}])
    status = main(["validate", bad, "--jobs", "1"])
    out, err = capsys.readouterr()
    assert status == 2 and "tiny_case" in out and "odd_tp" in out  # the table still scores the others
    assert err.strip() == (f"llmsim: error: {bad}: odd_tp: not simulated: parallel.tp: a divisor of "
                           "model.num_attention_heads=16 (got 3) (1 of 2 cases skipped; the table gives each "
                           "reason)")
    good = _yaml(tmp_path, "good.yaml", [_case()])
    assert main(["validate", good, "--jobs", "1"]) == 0
    capsys.readouterr()
    assert "each case file once" in _error(capsys, "validate", good, good, "--jobs", "1")


@pytest.mark.parametrize("targets, expected", [
    ({"iteration_time": {"value": 0.5}}, "targets.iteration_time: expected one of ['iteration_time_s'"),
    ({"iteration_time_s": {"value": 0.5, "derived": "maybe"}}, "targets.iteration_time_s.derived: expected true "
     "or false (got 'maybe')"),
    ({"iteration_time_s": {"value": 0.5, "extra": 1}}, "targets.iteration_time_s.extra: expected one of the keys"),
])
def test_a_misspelt_or_mistyped_target_is_refused(targets, expected, tmp_path, capsys):
    path = _yaml(tmp_path, "w.yaml", {**_tiny(), "targets": targets})
    assert expected in _error(capsys, "run", path)


def test_two_cases_of_one_file_with_one_id_are_refused(tmp_path, capsys):
    path = _yaml(tmp_path, "dup.yaml", [_case(), _case()])
    assert "id: an id no other case of the file has (case 0 has it) (got 'tiny_case')" in _error(
        capsys, "validate", path, "--jobs", "1")


def test_validate_infer_refuses_two_cases_with_one_id(tmp_path, capsys):
    """As ``validate`` does: rows are told apart by their case's id."""
    case = {"id": "c1", "source": {"framework": "NeMo Framework inference"}, "model": "llama2-7b",
            "gpu": "H100-SXM5-80GB", "tp": 1, "batch": 1, "prompt_tokens": 128, "generate_tokens": 20,
            "measured": {"e2e_latency_s": 0.15}}
    path = _yaml(tmp_path, "dup.yaml", {"cases": [case, {**case, "tp": 2}]})
    assert "cases[1].id: expected an id no other case of the file has (cases[0] has it) (got 'c1')" in _error(
        capsys, "validate-infer", path)


@pytest.mark.parametrize("field", ["tp", "pp", "batch"])
def test_validate_infer_refuses_a_zero_it_used_to_read_as_one(field, tmp_path, capsys):
    case = {"id": "c1", "source": {"framework": "NeMo Framework inference"}, "model": "llama2-7b",
            "gpu": "H100-SXM5-80GB", "tp": 1, "batch": 1, "prompt_tokens": 128, "generate_tokens": 20,
            "measured": {"e2e_latency_s": 0.15}}
    path = _yaml(tmp_path, "c.yaml", {"cases": [{**case, field: 0}]})
    assert f"cases[0].{field}: expected a positive integer (got 0)" in _error(capsys, "validate-infer", path)
    path = _yaml(tmp_path, "s.yaml", {"cases": [{**case, "source": 5}]})
    assert "cases[0].source: expected a mapping (publication, url, framework) or text (got 5)" in _error(
        capsys, "validate-infer", path)


# --- workloads, models and topologies -------------------------------------------------------------


@pytest.mark.parametrize("key, value, expected", [
    ("model__activation", "swgilu", "model.activation: expected one of ['geglu', 'gelu'"),
    ("model__head_dim", 0, "model.head_dim: expected a positive integer (got 0)"),
    ("num_layers_at_start_in_bf16", 100, "num_layers_at_start_in_bf16: expected at most model.num_layers=4"),
])
def test_a_model_field_a_typo_or_a_zero_would_change_silently_is_refused(key, value, expected, tmp_path, capsys):
    w = _tiny(**{key: value}) if "__" in key else {**_tiny(), key: value, "dtype": "bf16"}
    assert expected in _error(capsys, "run", _yaml(tmp_path, "w.yaml", w))


def test_a_number_in_scientific_notation_without_a_dot_is_a_number(tmp_path, capsys):
    text = (REPO / "topologies" / "dgx-a100.yaml").read_text()
    assert "latency_us: " in text
    topo = tmp_path / "t.yaml"
    lines = [ln if not ln.strip().startswith("latency_us:") else ln.split(":")[0] + ": 3e-1"
             for ln in text.splitlines()]
    topo.write_text("\n".join(lines) + "\n")
    assert main(["run", "tiny", "--topology", str(topo), "--json", str(tmp_path / "r.json")]) == 0
    capsys.readouterr()


def test_a_hugging_face_config_with_a_key_twice_is_refused(tmp_path, capsys):
    cfg = json.loads((REPO / "workloads" / "hf" / "llama-3-8b.json").read_text())
    text = json.dumps(cfg).replace('"hidden_size": 4096', '"hidden_size": 4096, "hidden_size": 2048')
    path = tmp_path / "config.json"
    path.write_text(text)
    assert "expected each key once in an object (got 'hidden_size')" in _error(capsys, "infer", str(path))


def test_a_graphml_topology_refuses_scale_sections_it_would_not_read(tmp_path, capsys):
    import networkx as nx

    g = nx.Graph()
    g.add_node("sw", kind="switch")
    for i in range(2):
        g.add_node(f"gpu{i}", kind="gpu", node=0)
        g.add_edge(f"gpu{i}", "sw", bandwidth_GBps=100.0, latency_us=1.0, link="nvlink")
    nx.write_graphml(g, tmp_path / "g.graphml")
    topo = _yaml(tmp_path, "g.yaml", {"name": "g", "gpus_per_node": 2, "graphml": "g.graphml",
                                      "scale_out": {"kind": "torus", "dims": [1]}})
    assert "scale_out: expected no scale_out beside graphml" in _error(capsys, "run", "tiny", "--topology", topo)


def test_a_fault_listed_twice_for_one_link_is_refused(tmp_path, capsys):
    topo = yaml.safe_load((REPO / "topologies" / "dgx-a100.yaml").read_text())
    topo["faults"] = [{"between": ["nic0.0", "leaf0.0"], "bandwidth_fraction": 0.5},
                      {"between": ["leaf0.0", "nic0.0"], "bandwidth_fraction": 0.2}]
    path = _yaml(tmp_path, "t.yaml", topo)
    assert "faults[1].between: expected each link once (faults[0] names it" in _error(
        capsys, "run", "tiny", "--topology", path)


def test_a_table_of_the_topologies_folder_is_not_offered_as_a_topology(capsys):
    line = _error(capsys, "run", "tiny", "--topology", "hbm-generations")
    assert "expected a topology (hbm-generations is a table of whatif memory or whatif nodes" in line
    assert "hbm-generations" not in line.split("topologies: ")[1].split(") (got")[0]


# --- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["all-to-all", "send-recv", "ring-exchange"])
def test_collective_refuses_an_algorithm_for_an_op_that_has_one(op, capsys):
    assert _error(capsys, "collective", "--bytes", "1KiB", "--op", op, "--algo", "tree").startswith(
        "llmsim: error: --algo: expected auto")


def test_an_argument_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as info:  # argparse's errors end the process
        main(["infer", "--tp", "2.5"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["llmsim infer: error: argument --tp: invalid int value: '2.5' (llmsim infer --help "
                                "lists the options)"]


@pytest.mark.parametrize("argv, option", [(["whatif", "nodes", "tiny", "--nodes", ""], "--nodes"),
                                          (["whatif", "nodes", "tiny", "--scale", ","], "--scale"),
                                          (["whatif", "memory", "--hbm", ""], "--hbm")])
def test_an_empty_list_option_is_refused_not_read_as_all(argv, option, capsys):
    assert _error(capsys, *argv).startswith(f"llmsim: error: {option}: expected")


def test_a_sweep_space_whose_every_configuration_is_invalid_exits_2(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("tp: [3]\n")
    status = main(["sweep", "tiny", "--space", str(space), "--workers", "1"])
    err = capsys.readouterr().err
    assert status == 2 and err.strip() == (f"llmsim sweep: error: {space}: expected a space with at least one "
                                           "valid configuration (got 1, each rejected by its spec: parallel.tp (1))")


def test_a_validate_infer_case_error_names_the_case_field_not_the_infer_option(tmp_path, capsys):
    case = {"id": "c1", "model": "llama2-7b", "gpu": "H100-SXM5-80GB", "prompt_tokens": -5, "generate_tokens": 20,
            "measured": {"e2e_latency_s": 0.15}}
    path = _yaml(tmp_path, "c.yaml", {"cases": [case]})
    line = _error(capsys, "validate-infer", path)
    assert line.startswith(f"llmsim: error: {path}: cases[0]") and "prompt_tokens" in line and "--prompt" not in line


def test_infer_says_when_a_request_exceeds_the_models_context(capsys):
    assert main(["infer", "llama2-7b", "--prompt", "30000", "--generate", "10"]) == 0
    out = capsys.readouterr().out
    assert "--prompt 30000 + --generate 10 tokens exceed the model's context of 4096 (model.seq_length)" in out
    assert main(["infer", "llama2-7b", "--prompt", "3000", "--generate", "10"]) == 0
    assert "exceed the model's context" not in capsys.readouterr().out


def test_calibrate_writes_into_a_folder_it_makes_and_names_its_files_in_errors(tmp_path, capsys):
    log = tmp_path / "all_reduce.txt"
    log.write_text(LOG)
    out = tmp_path / "new" / "cal.yaml"  # a missing folder is made, as --json's is
    assert main(["calibrate", "--nccl-tests", str(log), "-o", str(out)]) == 0
    capsys.readouterr()
    bad = tmp_path / "bad.yaml"
    bad.write_text("".join(ln if not ln.startswith("topology:") else "topology: nope\n"
                           for ln in out.read_text().splitlines(keepends=True)))
    line = _error(capsys, "run", "tiny", "--calibration", str(bad))
    assert line.startswith(f"llmsim: error: {bad}: topology: expected an existing file or a preset name"), line


def test_whatif_power_names_the_workload_whose_gpu_has_no_power_model(tmp_path, capsys):
    path = _yaml(tmp_path, "w.yaml", _tiny())  # an A100: no measured power behaviour
    line = _error(capsys, "whatif", "power", path)
    assert line.startswith(f"llmsim: error: {path}: system.gpu: expected a GPU whose"), line


@pytest.mark.parametrize("option, says", [("--order", "--order: expected a comma-separated permutation of "),
                                          ("--from", "--from: expected one of "), ("--to", "--to: expected one of ")])
def test_an_empty_whatif_generations_option_is_refused_not_defaulted(option, says, capsys):
    """``--from ''`` ran the default GPU as if the option were absent."""
    line = _error(capsys, "whatif", "generations", "tiny", option, "")
    assert line.startswith(f"llmsim: error: {says}") and line.endswith("(got '')"), line
