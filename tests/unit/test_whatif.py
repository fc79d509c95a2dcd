"""What-if studies (issue #8): GPU generations factor by factor, technology nodes."""

from __future__ import annotations

import dataclasses
import math

import pytest

from sim.cli import main
from sim.config import load_topology, load_workload
from sim.errors import ConfigError
from sim.hardware import get_gpu
from sim.runner import simulate
from sim.studies.whatif.systems import FACTORS, generations, load_nodes_table, node_system, nodes, scale_system
from sim.types import Dtype

# tiny spread over two DGX nodes (DP across the NICs) so that every factor has work to act on
MULTI_NODE = ["system.num_gpus=16", "parallel.dp=4", "parallel.global_batch_size=16"]


def _time(w, topo) -> float:
    return simulate(w, topo).result.makespan_s


def test_factors_multiply_to_the_end_to_end_speedup_and_end_on_the_target_system():
    w = load_workload("tiny", MULTI_NODE)
    b200, a_topo, b_topo = get_gpu("B200"), load_topology("dgx-a100"), load_topology("dgx-b200")
    g = generations(w, b200, a_topo, b_topo, to_dtype=Dtype.FP8)
    assert [s.factor for s in g.steps] == list(FACTORS)
    assert math.prod(s.speedup for s in g.steps) == pytest.approx(g.speedup, rel=1e-12)
    direct = dataclasses.replace(w, dtype=Dtype.FP8, system=dataclasses.replace(w.system, gpu=b200))
    assert g.final_time_s == pytest.approx(_time(direct, b_topo), rel=1e-12)
    assert g.base_time_s == pytest.approx(_time(w, a_topo), rel=1e-12)
    assert g.speedup > 1


def test_another_order_gives_other_factors_but_the_same_product():
    w = load_workload("tiny", MULTI_NODE)
    args = (get_gpu("H100-SXM5-80GB"), load_topology("dgx-a100"), load_topology("dgx-h100"))
    a = generations(w, *args)
    b = generations(w, *args, order=tuple(reversed(FACTORS)))
    assert a.speedup == pytest.approx(b.speedup, rel=1e-12)
    assert [s.factor for s in b.steps] == list(reversed(FACTORS))


def test_a_factor_off_the_critical_path_changes_nothing():
    """tiny on one node never touches the NICs: the network factor is exactly 1."""
    w = load_workload("tiny")
    g = generations(w, get_gpu("H100-SXM5-80GB"), load_topology("dgx-a100"), load_topology("dgx-h100"))
    step = {s.factor: s for s in g.steps}
    assert step["network"].speedup == 1.0
    assert step["hbm-capacity"].speedup == 1.0  # no re-optimizer: capacity alone moves nothing
    assert step["compute"].speedup > 1.2


def test_a_factor_that_changes_nothing_reuses_the_last_simulation(monkeypatch):
    """A factor that leaves the workload and the system as they were (the format the workload
    already has, the same HBM capacity) reuses the last simulation: speed-up exactly 1 and the
    same breakdown, what simulating again gives; a factor that changes them simulates."""
    import sim.studies.whatif.systems as whatif

    calls = []
    real = whatif._simulate
    monkeypatch.setattr(whatif, "_simulate", lambda w, t, factors=None: calls.append((w, t)) or real(w, t, factors))
    w = load_workload("tiny", MULTI_NODE + ["system.gpu=H100-SXM5-80GB"])
    args = (get_gpu("H800-SXM5-80GB"), load_topology("dgx-h100"), load_topology("hgx-h800"))
    g = generations(w, *args)  # bf16 -> bf16; H100 -> H800: the same HBM, NVLink cut
    bf16_calls = len(calls)
    assert bf16_calls <= len(FACTORS) - 1  # neither format nor capacity changes anything here
    assert all(a != b for a, b in zip(calls, calls[1:]))  # no state simulated twice in a row
    step = {s.factor: s for s in g.steps}
    for factor in ("format", "hbm-capacity"):
        before = g.steps[[s.factor for s in g.steps].index(factor) - 1]
        assert step[factor].speedup == 1.0
        assert step[factor].breakdown_s == before.breakdown_s and step[factor].fits == before.fits
    calls.clear()
    g8 = generations(w, *args, to_dtype=Dtype.FP8)  # a format that changes: simulated
    assert len(calls) == bf16_calls + 1 and g8.steps[1].speedup != 1.0


@pytest.mark.parametrize("k", [2.0, 3.5])
def test_scaling_every_rate_by_k_scales_the_iteration_by_1_over_k(k):
    w = load_workload("tiny", MULTI_NODE)
    topo = load_topology("dgx-a100")
    gpu, fast = scale_system(w.system.gpu, topo, k)
    w_fast = dataclasses.replace(w, system=dataclasses.replace(w.system, gpu=gpu))
    assert _time(w_fast, fast) == pytest.approx(_time(w, topo) / k, rel=1e-9)


@pytest.mark.parametrize("order,why", [
    (("compute", "format"), "permutation"),
    (("format",) + tuple(f for f in FACTORS if f != "format"), "'compute' before 'format'"),
])
def test_bad_orders_are_one_clear_error(order, why):
    w = load_workload("tiny")
    with pytest.raises(ConfigError) as e:
        generations(w, get_gpu("B200"), load_topology("dgx-a100"), load_topology("dgx-b200"), order=order,
                    to_dtype=Dtype.FP8)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_a_format_the_target_gpu_lacks_blames_the_format_not_the_order():
    """nvfp4 onto an H100: no order of the steps reaches it (it said --order 'compute' before
    'format', which the default order already has)."""
    w = load_workload("tiny")
    with pytest.raises(ConfigError) as e:
        generations(w, get_gpu("H100"), load_topology("dgx-a100"), load_topology("dgx-h100"), to_dtype=Dtype.NVFP4)
    assert e.value.field == "--dtype" and "H100" in str(e.value) and "nvfp4" in str(e.value)


def test_technology_nodes_scale_only_what_is_asked():
    """(With SMs held by NCCL kernels not counted: otherwise a faster network also shortens
    the compute that runs beside its collectives.)"""
    w = load_workload("tiny", MULTI_NODE)
    table = load_nodes_table()
    a100, topo = get_gpu(table["base_gpu"]), load_topology(table["base_topology"])
    a100 = dataclasses.replace(a100, sm_count=0)
    w = dataclasses.replace(w, system=dataclasses.replace(w.system, gpu=a100))
    base = {r.node_nm: r for r in nodes(w, table, topo, a100, [7, 3])}
    logic = {r.node_nm: r for r in nodes(w, table, topo, a100, [7, 3], scale=("logic",))}
    network = {r.node_nm: r for r in nodes(w, table, topo, a100, [7, 3], scale=("network",))}
    assert base[7].iteration_time_s == pytest.approx(_time(w, topo), rel=1e-12)  # 7 nm is the base
    # logic alone: memory-bound work and communication do not move, compute does
    assert logic[3].breakdown_s["memory_bound_s"] == pytest.approx(logic[7].breakdown_s["memory_bound_s"])
    assert logic[3].breakdown_s["tensor_compute_s"] < logic[7].breakdown_s["tensor_compute_s"]
    # network alone: compute does not move, communication does
    assert network[3].breakdown_s["tensor_compute_s"] == pytest.approx(network[7].breakdown_s["tensor_compute_s"])
    assert network[3].breakdown_s["exposed_comm_s"] < network[7].breakdown_s["exposed_comm_s"]
    assert base[3].iteration_time_s < min(logic[3].iteration_time_s, network[3].iteration_time_s)
    for r in base.values():
        assert sum(r.breakdown_s.values()) == pytest.approx(r.iteration_time_s, rel=1e-9)


def test_node_system_multiplies_the_base_figures():
    table = load_nodes_table()
    row = next(r for r in table["nodes"] if r["node_nm"] == 5)
    a100, topo = get_gpu("A100-SXM4-80GB"), load_topology("dgx-a100")
    gpu, t = node_system(a100, topo, row)
    assert gpu.peak(Dtype.BF16) == pytest.approx(a100.peak(Dtype.BF16) * row["logic"])
    assert gpu.hbm_bandwidth_bytes_per_s == pytest.approx(a100.hbm_bandwidth_bytes_per_s * row["hbm_bandwidth"])
    assert t.scale_out.nic.bandwidth_bytes_per_s == pytest.approx(topo.scale_out.nic.bandwidth_bytes_per_s
                                                                  * row["nic_bandwidth"])


def test_bad_technology_table_names_the_field(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("base_gpu: A100-SXM4-80GB\nbase_topology: dgx-a100\nnodes:\n  - {node_nm: 5, logic: -1, "
                   "hbm_bandwidth: 1, hbm_capacity: 1, link_bandwidth: 1, nic_bandwidth: 1}\n")
    with pytest.raises(ConfigError) as e:
        load_nodes_table(str(bad))
    assert "nodes[0].logic" in str(e.value) and str(bad) in str(e.value)


def test_reoptimizing_on_equal_capacity_gains_nothing_and_on_more_finds_no_worse():
    """With --reoptimize every state runs its best layout, so the capacity step between two GPUs
    with the same memory is exactly 1 (the same search on the same system finds the same
    layout), and the start is no slower than the workload's own layout."""
    from sim.studies.whatif.systems import sweep_reoptimizer

    w = load_workload("tiny")
    g = generations(w, get_gpu("H100-SXM5-80GB"), load_topology("dgx-a100"), load_topology("dgx-h100"),
                    reoptimize=sweep_reoptimizer(workers=1))
    step = {s.factor: s for s in g.steps}
    assert step["hbm-capacity"].speedup == 1.0
    assert math.prod(s.speedup for s in g.steps) == pytest.approx(g.speedup, rel=1e-12)
    plain = generations(w, get_gpu("H100-SXM5-80GB"), load_topology("dgx-a100"), load_topology("dgx-h100"))
    assert g.base_time_s <= plain.base_time_s  # the searched start is at least as fast as the workload's


def test_whatif_commands_write_their_numbers(tmp_path, capsys):
    import json

    from sim.cli import main

    out = tmp_path / "g.json"
    assert main(["whatif", "generations", "tiny", "--from", "A100", "--to", "H100", "--json", str(out),
                 "--plot", str(tmp_path / "g.png")]) == 0
    d = json.loads(out.read_text())
    assert [s["factor"] for s in d["steps"]] == list(FACTORS)
    assert math.prod(s["speedup"] for s in d["steps"]) == pytest.approx(d["speedup"], rel=1e-12)
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
    out = tmp_path / "n.json"
    assert main(["whatif", "nodes", "tiny", "--nodes", "7,5", "--scale", "logic", "--json", str(out),
                 "--plot", str(tmp_path / "n.png")]) == 0
    d = json.loads(out.read_text())
    assert [n["node_nm"] for n in d["nodes"]] == [7, 5] and d["scale"] == ["logic"]
    assert d["nodes"][1]["iteration_time_s"] < d["nodes"][0]["iteration_time_s"]
    assert "whatif nodes" in capsys.readouterr().out
    for argv in (["whatif", "generations", "tiny", "--to", "X100"], ["whatif", "nodes", "tiny", "--nodes", "4"],
                 ["whatif", "generations", "tiny", "--order", "compute"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv, option, says", [
    (["whatif", "power", "tiny", "--set", "system.gpu=H100-SXM5-80GB", "--limits", ""], "--limits", "no item empty"),
    (["whatif", "power", "tiny", "--set", "system.gpu=H100-SXM5-80GB", "--limits", "400,,500"], "--limits",
     "no item empty"),
    (["roofline", "--gpu", "A100-SXM4-80GB,,B200"], "--gpu", "no item empty"),
    (["whatif", "nodes", "tiny", "--nodes", "7,7"], "--nodes", "7 is given twice"),
    (["whatif", "nodes", "tiny", "--scale", "logic,logic"], "--scale", "logic is given twice"),
    (["whatif", "generations", "tiny", "--order", "compute,,format"], "--order", "no item empty"),
])
def test_an_option_list_with_an_empty_or_repeated_item_is_refused(argv, option, says, capsys):
    """An empty item was dropped (``--limits ''`` ran the default caps) and a repeated one ran
    twice (``--scale logic,logic`` printed "scaling logic,logic"): both are typos."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"llmsim: error: {option}: expected ") and says in err, err
