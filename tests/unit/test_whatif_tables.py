"""The what-if tables (``whatif memory --table``, ``whatif nodes --table``) refuse bad input with
one ConfigError naming the file and the field: unknown keys, numbers outside a physical range,
unknown GPUs, duplicate rows and a base node or base system the table does not have."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from sim.cli.main import main
from sim.errors import ConfigError
from sim.inference.hbm import MAX_STACKS, STACK_BANDWIDTH_GBPS, STACK_CAPACITY_GB, load_hbm_table
from sim.studies.whatif.systems import NODE_FACTOR_RANGE, NODE_FACTORS, NODE_NM_RANGE, load_nodes_table

REPO = Path(__file__).resolve().parents[2]
HBM = yaml.safe_load((REPO / "topologies" / "hbm-generations.yaml").read_text())
NODES = yaml.safe_load((REPO / "topologies" / "technology-nodes.yaml").read_text())


def _write(tmp_path: Path, base: dict, change: Callable[[dict], object]) -> str:
    data = copy.deepcopy(base)
    change(data)
    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _refused(load: Callable[[str], object], path: str, field: str) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load(path)
    assert (e.value.path, e.value.field) == (path, field), str(e.value)
    assert "\n" not in str(e.value)
    return e.value


# --- the shipped tables ------------------------------------------------------------------------


def test_shipped_hbm_table_is_inside_the_bounds():
    t = load_hbm_table()
    assert list(t.generations) == ["HBM2e", "HBM3", "HBM3e", "HBM4"]
    for g in t.generations.values():
        assert STACK_BANDWIDTH_GBPS[0] <= g.stack_bandwidth_bytes_per_s / 1e9 <= STACK_BANDWIDTH_GBPS[1]
        assert STACK_CAPACITY_GB[0] <= g.stack_capacity_bytes / 1e9 <= STACK_CAPACITY_GB[1]
    assert all(1 <= stacks <= MAX_STACKS for _, stacks, _ in t.gpus.values())


def test_shipped_nodes_table_is_inside_the_bounds():
    t = load_nodes_table()
    assert (t["base_gpu"], t["base_topology"], t["base_node_nm"]) == ("A100-SXM4-80GB", "dgx-a100", 7)
    assert [r["node_nm"] for r in t["nodes"]] == [12, 7, 5, 3, 2, 1]
    for r in t["nodes"]:
        assert NODE_NM_RANGE[0] <= r["node_nm"] <= NODE_NM_RANGE[1]
        assert all(NODE_FACTOR_RANGE[0] <= r[k] <= NODE_FACTOR_RANGE[1] for k in (*NODE_FACTORS, "sram"))


# --- whatif memory --table ---------------------------------------------------------------------


def _hbm3(key: str, value: object) -> Callable[[dict], object]:
    return lambda t: t["generations"]["HBM3"].__setitem__(key, value)


HBM_BAD = [
    # (what is wrong, the change, the field named)
    ("bandwidth 1e308 (a division by zero)", _hbm3("stack_bandwidth_GBps", 1e308),
     "generations.HBM3.stack_bandwidth_GBps"),
    ("bandwidth 1e20", _hbm3("stack_bandwidth_GBps", 1e20), "generations.HBM3.stack_bandwidth_GBps"),
    ("bandwidth below 1 GB/s", _hbm3("stack_bandwidth_GBps", 0.5), "generations.HBM3.stack_bandwidth_GBps"),
    ("bandwidth 0", _hbm3("stack_bandwidth_GBps", 0), "generations.HBM3.stack_bandwidth_GBps"),
    ("capacity 1e-300", _hbm3("stack_capacity_GB", 1e-300), "generations.HBM3.stack_capacity_GB"),
    ("capacity 1e6 GB", _hbm3("stack_capacity_GB", 1e6), "generations.HBM3.stack_capacity_GB"),
    ("unknown generation key", _hbm3("bogus", 1), "generations.HBM3.bogus"),
    ("unknown top-level key", lambda t: t.__setitem__("bogus", 1), "bogus"),
    ("unknown GPU", lambda t: t["gpus"].__setitem__("Bogus-GPU", {"generation": "HBM3", "stacks": 5}),
     "gpus.Bogus-GPU"),
    ("a GPU twice under two names", lambda t: t["gpus"].__setitem__("H100", {"generation": "HBM3", "stacks": 5}),
     "gpus.H100"),
    ("a generation twice in two cases",
     lambda t: t["generations"].__setitem__("hbm3", {"stack_bandwidth_GBps": 819, "stack_capacity_GB": 16}),
     "generations.hbm3"),
    ("a generation name that is not text",
     lambda t: t["generations"].__setitem__(4, {"stack_bandwidth_GBps": 819, "stack_capacity_GB": 16}),
     "generations.4"),
    ("1,000 stacks", lambda t: t["gpus"]["H100-SXM5-80GB"].__setitem__("stacks", 1000), "gpus.H100-SXM5-80GB.stacks"),
    ("a GPU's own stack capacity 1e-300", lambda t: t["gpus"]["GB300"].__setitem__("stack_capacity_GB", 1e-300),
     "gpus.GB300.stack_capacity_GB"),
    ("no GPUs", lambda t: t.__setitem__("gpus", {}), "gpus"),
    ("sources not text", lambda t: t.__setitem__("sources", 5), "sources"),
]


@pytest.mark.parametrize("change, field", [c[1:] for c in HBM_BAD], ids=[c[0] for c in HBM_BAD])
def test_bad_hbm_table_is_refused_naming_the_field(tmp_path, change, field):
    _refused(load_hbm_table, _write(tmp_path, HBM, change), field)


def test_hbm_table_bounds_are_inclusive_and_their_ends_simulate(tmp_path):
    """A table at the ends of every range loads, and the study runs on it to finite latencies
    (at 1e308 GB/s it divided by zero)."""
    from sim.config import load_topology
    from sim.hardware import get_gpu
    from sim.inference import InferenceSpec
    from sim.inference.hbm import memory_whatif
    from sim.inference.models import load_model

    def ends(t: dict) -> None:
        t["generations"]["HBM2e"] = {"stack_bandwidth_GBps": STACK_BANDWIDTH_GBPS[0],
                                     "stack_capacity_GB": STACK_CAPACITY_GB[0]}
        t["generations"]["HBM4"] = {"stack_bandwidth_GBps": STACK_BANDWIDTH_GBPS[1],
                                    "stack_capacity_GB": STACK_CAPACITY_GB[1]}
        t["gpus"]["B200"]["stacks"] = MAX_STACKS

    table = load_hbm_table(_write(tmp_path, HBM, ends))
    name, model, _ = load_model("llama2-7b")
    spec = InferenceSpec(name, model, get_gpu("H100"), batch=1, prompt_tokens=64, generate_tokens=2)
    rows = memory_whatif(spec, load_topology("dgx-h100"), ["HBM2e", "HBM4"], table, granularity="step")
    assert all(math.isfinite(r.ttft_s) and r.ttft_s > 0 and math.isfinite(r.tpot_s) and r.tpot_s > 0 for r in rows)


# --- whatif nodes --table ----------------------------------------------------------------------


def _row(i: int, key: str, value: object) -> Callable[[dict], object]:
    return lambda t: t["nodes"][i].__setitem__(key, value)


NODES_BAD = [
    ("logic 1e-300 (a negative memory time)", _row(0, "logic", 1e-300), "nodes[0].logic"),
    ("logic 1e308", _row(0, "logic", 1e308), "nodes[0].logic"),
    ("logic below 0.01", _row(0, "logic", 0.001), "nodes[0].logic"),
    ("HBM capacity above 100", _row(0, "hbm_capacity", 101), "nodes[0].hbm_capacity"),
    ("NIC bandwidth 0", _row(0, "nic_bandwidth", 0), "nodes[0].nic_bandwidth"),
    ("sram 1e-300", _row(0, "sram", 1e-300), "nodes[0].sram"),
    ("node 1e6 nm", _row(0, "node_nm", 1e6), "nodes[0].node_nm"),
    ("node 0.001 nm", _row(0, "node_nm", 0.001), "nodes[0].node_nm"),
    ("logic missing", lambda t: t["nodes"][0].pop("logic"), "nodes[0].logic"),
    ("unknown row key", _row(0, "bogus", 1), "nodes[0].bogus"),
    ("unknown top-level key", lambda t: t.__setitem__("bogus", 1), "bogus"),
    ("a node twice (a row vanished)", _row(0, "node_nm", 7), "nodes[1].node_nm"),
    ("a node twice, as 7 and 7.0", _row(2, "node_nm", 7.0), "nodes[2].node_nm"),
    ("base node not in the table", lambda t: t.__setitem__("base_node_nm", 99), "base_node_nm"),
    ("base node missing", lambda t: t.pop("base_node_nm"), "base_node_nm"),
    ("base row not 1", _row(1, "logic", 2.0), "nodes[1].logic"),
    ("unknown base GPU", lambda t: t.__setitem__("base_gpu", "bogus"), "base_gpu"),
    ("unknown base topology", lambda t: t.__setitem__("base_topology", "bogus"), "base_topology"),
    ("a table as the base topology", lambda t: t.__setitem__("base_topology", "hbm-generations"), "base_topology"),
    ("no rows", lambda t: t.__setitem__("nodes", []), "nodes"),
    ("a row that is not a mapping", lambda t: t["nodes"].append(5), "nodes[6]"),
    ("sources not text", lambda t: t.__setitem__("sources", 5), "sources"),
]


@pytest.mark.parametrize("change, field", [c[1:] for c in NODES_BAD], ids=[c[0] for c in NODES_BAD])
def test_bad_nodes_table_is_refused_naming_the_field(tmp_path, change, field):
    _refused(load_nodes_table, _write(tmp_path, NODES, change), field)


def test_nodes_table_base_gpu_is_read_as_the_catalogue_names_it(tmp_path):
    t = load_nodes_table(_write(tmp_path, NODES, lambda t: t.__setitem__("base_gpu", "A100")))
    assert t["base_gpu"] == "A100-SXM4-80GB"


def test_nodes_table_bounds_are_inclusive_and_their_ends_simulate(tmp_path):
    """Rows at both ends of the factor range load and simulate to a breakdown of non-negative
    parts (at logic 1e-300 the memory-bound part came out at -5.8e290 s)."""
    from sim.config import load_topology, load_workload
    from sim.hardware import get_gpu
    from sim.studies.whatif.systems import nodes

    def ends(t: dict) -> None:
        t["nodes"][0].update({k: NODE_FACTOR_RANGE[0] for k in (*NODE_FACTORS, "sram")})
        t["nodes"][-1].update({k: NODE_FACTOR_RANGE[1] for k in (*NODE_FACTORS, "sram")})

    table = load_nodes_table(_write(tmp_path, NODES, ends))
    w = load_workload("tiny")
    rows = nodes(w, table, load_topology(table["base_topology"]), get_gpu(table["base_gpu"]), [12, 1])
    for r in rows:
        assert math.isfinite(r.iteration_time_s) and r.iteration_time_s > 0
        assert all(v >= 0 and math.isfinite(v) for v in r.breakdown_s.values()), r.breakdown_s


# --- through the command line ------------------------------------------------------------------


def _one_error(capsys, *argv: str) -> str:
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert status == 2, (status, out[-1500:], err[-1500:])
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_whatif_memory_refuses_a_table_that_divided_by_zero(tmp_path, capsys):
    path = _write(tmp_path, HBM, _hbm3("stack_bandwidth_GBps", 1e308))
    line = _one_error(capsys, "whatif", "memory", "--generate", "5", "--table", path)
    assert f"{path}: generations.HBM3.stack_bandwidth_GBps: expected" in line and "1e+308" in line


def test_whatif_memory_refuses_an_unknown_gpu(tmp_path, capsys):
    path = _write(tmp_path, HBM, lambda t: t["gpus"].__setitem__("Bogus-GPU", {"generation": "HBM3", "stacks": 5}))
    line = _one_error(capsys, "whatif", "memory", "--generate", "5", "--table", path)
    assert f"{path}: gpus.Bogus-GPU: expected a GPU of the catalogue" in line


@pytest.mark.parametrize("change, field", [
    (_row(0, "logic", 1e-300), "nodes[0].logic"),
    (_row(0, "node_nm", 7), "nodes[1].node_nm"),
    (lambda t: t.__setitem__("base_node_nm", 99), "base_node_nm"),
    (lambda t: t.__setitem__("bogus", 1), "bogus"),
])
def test_whatif_nodes_refuses_a_bad_table(tmp_path, capsys, change, field):
    path = _write(tmp_path, NODES, change)
    line = _one_error(capsys, "whatif", "nodes", "tiny", "--table", path)
    assert f"{path}: {field}: expected" in line


def test_whatif_nodes_blames_the_table_for_its_base_gpu(tmp_path, capsys):
    """Not the workload (the table's GPU reaches it as a --set override)."""
    path = _write(tmp_path, NODES, lambda t: t.__setitem__("base_gpu", "bogus"))
    line = _one_error(capsys, "whatif", "nodes", "tiny", "--table", path)
    assert f"{path}: base_gpu: expected a GPU of the catalogue" in line
    assert "tiny" not in line and "--set" not in line
