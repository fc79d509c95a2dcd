"""Placement (``parallel.placement``): which GPU each rank runs on, as a rank order or a list.

The default, Megatron's ``tp-cp-ep-dp-pp``, must change nothing; other orders move traffic
between NVLink and the NICs; one representative rank per stage must still agree with the full
simulation where the placement treats every replica alike; bad values are one-line errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

import sim
from sim.cli import main
from sim.config import load_topology, load_workload
from sim.errors import ConfigError
from sim.output.report import make_report
from sim.runner import simulate
from sim.topology.build import build_topology
from sim.topology.routing import Fabric
from sim.types import RecomputeKind, ScheduleKind
from sim.workload.layout import Layout, gpu_placement
from tests.conftest import make_workload

WORKLOADS = Path(sim.__file__).resolve().parent.parent / "workloads"


def _placed(w, placement):
    return dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, placement=placement))


def _numbers(report) -> dict:
    """Everything a report says."""
    return report.to_dict()


def _tp8(placement=None, dp=8, gbs=64):
    """``tiny`` with TP 8 and DP ``dp`` on 8-GPU nodes: the default keeps each TP group in a
    node and sends DP across the NICs."""
    sets = ["parallel.tp=8", "parallel.pp=1", f"parallel.dp={dp}", f"system.num_gpus={8 * dp}",
            f"parallel.global_batch_size={gbs}"]
    if placement is not None:
        sets.append(f"parallel.placement={json.dumps(placement)}")
    return load_workload("tiny", sets)


# --- the permutation --------------------------------------------------------------------------


def test_orders_lay_ranks_out_innermost_first():
    lay = Layout(2, 2, 2)  # tp 2, dp 2, pp 2; rank = tp + 2 dp + 4 pp
    assert lay.placement(("tp", "cp", "dp", "pp")) == tuple(range(8))
    # pipeline stages next to each other: rank (tp, dp, pp) on GPU tp + 2 pp + 4 dp
    assert lay.placement(("tp", "pp", "dp", "cp")) == (0, 1, 4, 5, 2, 3, 6, 7)
    # TP strided: rank (tp, dp, pp) on GPU dp + 2 tp + 4 pp
    assert lay.placement(("dp", "tp", "pp", "cp")) == (0, 2, 1, 3, 4, 6, 5, 7)


def test_megatron_order_ep_and_identity_lists_are_no_placement():
    w = make_workload(tp=2, pp=2, dp=4, ep=2, experts=4, gbs=16, sp=True)
    for same in ("tp-cp-ep-dp-pp", "tp-cp-dp-pp", "tp-dp-pp", "TP-CP-EP-DP-PP", tuple(range(16))):
        assert gpu_placement(_placed(w, same).parallel) is None, same
    assert gpu_placement(_placed(w, "tp-pp-ep-dp").parallel) == gpu_placement(_placed(w, "tp-pp-dp").parallel)


def test_fabric_maps_ranks_to_gpus():
    topo = load_topology("dgx-h100")
    graph = build_topology(topo, 16)
    plain, swapped = Fabric(graph), Fabric(graph, [8, 1, 2, 3, 4, 5, 6, 7, 0, 9, 10, 11, 12, 13, 14, 15])
    assert (swapped.gpu_of(0), swapped.rank_on(8), swapped.node_of(0), swapped.node_of(8)) == (8, 0, 1, 0)
    assert swapped.route(0, 1).links == plain.route(8, 1).links
    assert plain.same_domain((0, 1)) and not swapped.same_domain((0, 1)) and swapped.same_domain((0, 9))
    assert Fabric(graph, range(16)).placement is None
    with pytest.raises(ValueError, match="permutation"):
        Fabric(graph, [0] * 16)


# --- results ----------------------------------------------------------------------------------


def test_default_placement_changes_nothing():
    topo = load_topology("dgx-a100")
    w = load_workload("tiny")
    base = _numbers(make_report(simulate(w, topo)))
    for same in ("tp-cp-ep-dp-pp", list(range(8))):
        assert _numbers(make_report(simulate(load_workload("tiny", [f"parallel.placement={json.dumps(same)}"]),
                                             topo))) == base
    assert "placement" not in base["parallel"]


def test_tp_across_nodes_crosses_the_nics_and_costs_time():
    """``dp-tp-pp`` strides each TP group over the eight nodes, one GPU in each: every TP
    collective crosses the NICs, and the gradient reduction stays on NVLink."""
    topo = load_topology("dgx-h100")
    base_run, strided_run = simulate(_tp8(), topo), simulate(_tp8("dp-tp-pp"), topo)
    tp_group, dp_group = Layout(8, 8, 1).tp_group(0, 0), Layout(8, 8, 1).dp_group(0, 0)
    assert base_run.fabric.same_domain(tp_group) and not base_run.fabric.same_domain(dp_group)
    assert {strided_run.fabric.node_of(r) for r in tp_group} == set(range(8))
    assert strided_run.fabric.same_domain(dp_group)
    base, strided = make_report(base_run), make_report(strided_run)
    assert strided.parallel["placement"] == "dp-tp-pp" and strided.simulated_ranks == 1
    assert strided.exposed_comm_s["tp"] > 1.5 * base.exposed_comm_s["tp"]
    assert strided.iteration_time_s > 1.1 * base.iteration_time_s
    assert strided.exposed_comm_s["dp"] < base.exposed_comm_s["dp"]
    # the same order written out as a list gives the same numbers
    as_list = make_report(simulate(_tp8(list(gpu_placement(_tp8("dp-tp-pp").parallel))), topo))
    assert _numbers(as_list) | {"parallel": None} == _numbers(strided) | {"parallel": None}


def test_a_list_no_order_gives_is_simulated_in_full():
    """GPUs 7 and 8 swapped: rank 7 of the first TP group runs on the second node, and the
    ring of each TP group crosses a NIC."""
    gpus = list(range(16))
    gpus[7], gpus[8] = 8, 7
    topo = load_topology("dgx-h100")
    run = simulate(_tp8(gpus, dp=2, gbs=8), topo)
    assert len(run.result.ranks) == 16
    assert any("every rank simulated" in n for n in run.notes)
    assert [(r.rank, r.node, r.local_gpu) for r in run.result.ranks[6:9]] == [(6, 0, 6), (7, 1, 0), (8, 0, 7)]
    full = simulate(_tp8(gpus, dp=2, gbs=8), topo, full=True)
    assert run.result.makespan_s == full.result.makespan_s
    assert not any("every rank simulated" in n for n in full.notes)
    base = make_report(simulate(_tp8(dp=2, gbs=8), topo))
    placed = make_report(run)
    assert placed.exposed_comm_s["tp"] > 1.5 * base.exposed_comm_s["tp"]
    assert placed.iteration_time_s > base.iteration_time_s


def _nodes_of(topo, gpus: int):
    """The same fabric with ``gpus`` GPUs (and NICs) per node."""
    return dataclasses.replace(
        topo, gpus_per_node=gpus, scale_up=dataclasses.replace(topo.scale_up, domain_size=gpus),
        scale_out=dataclasses.replace(topo.scale_out, nics_per_node=gpus))


@pytest.mark.parametrize("placement", ["tp-pp-dp", "dp-tp-pp", "pp-tp-dp"])
@pytest.mark.parametrize("kw,gpus_per_node", [
    (dict(tp=2, pp=2, dp=4, gbs=16, sp=True), 4),
    (dict(tp=2, pp=4, dp=2, gbs=8, layers=8, vps=2, schedule=ScheduleKind.INTERLEAVED, sp=True,
          dist_opt=True), 4),
    (dict(tp=2, pp=2, dp=4, gbs=16, zero=3, recompute=RecomputeKind.FULL), 4),
    (dict(tp=2, pp=2, dp=2, cp=2, gbs=8, sp=True, dist_opt=True), 4),
    (dict(tp=2, pp=2, dp=4, ep=2, experts=4, gbs=16, sp=True, dist_opt=True), 8),
    (dict(tp=4, pp=2, dp=2, gbs=8, sp=True), 4),  # dp-tp-pp: TP across nodes
])
def test_representative_and_full_simulation_agree_under_an_order(kw, gpus_per_node, placement):
    """Every order places the replicas of a group alike (here, where the node size and the
    parallel sizes divide each other), so one rank per stage still stands for its stage."""
    w = make_workload(**kw)
    w = _placed(w, placement + ("-cp" if w.parallel.cp > 1 else ""))
    assert gpu_placement(w.parallel) is not None
    topo = _nodes_of(load_topology("dgx-a100"), gpus_per_node)
    rep = make_report(simulate(w, topo))
    full = make_report(simulate(w, topo, full=True))
    assert full.simulated_ranks == w.system.num_gpus > rep.simulated_ranks
    assert rep.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    for c in rep.exposed_comm_s:
        assert rep.exposed_comm_s[c] == pytest.approx(full.exposed_comm_s[c], rel=1e-6, abs=1e-12)


# --- bad input ---------------------------------------------------------------------------------


def _tiny_file(tmp_path: Path, placement) -> Path:
    data = yaml.safe_load((WORKLOADS / "tiny.yaml").read_text())
    data["parallel"]["placement"] = placement
    path = tmp_path / "placed.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("placement,says", [
    ("tp-xp-dp-pp", "unknown 'xp'"),
    ("tp-dp-dp-pp", "repeated"),
    ("tp-dp", "missing pp=2"),
    ("tp-cp-dp-ep-pp", "'ep' right before 'dp'"),
    ("", "unknown ''"),
    (7, "an order such as"),
    ({"tp": 1}, "an order such as"),
    ([0, 1, 2, 3], "a list of 8 GPU indices"),
    ([0, 1, 2, 3, 4, 5, 6, 6], "each GPU once"),
    ([0, 1, 2, 3, 4, 5, 6, 8], "GPU indices in 0..7"),
    ([0, 1, 2, 3, 4, 5, 6, "7"], "GPU indices in 0..7"),
    ([0, 1, 2, 3, 4, 5, 6, None], "GPU indices in 0..7"),
])
def test_bad_placement_is_a_config_error_naming_file_and_field(tmp_path, placement, says):
    path = _tiny_file(tmp_path, placement)
    with pytest.raises(ConfigError) as info:
        load_workload(str(path))
    err = info.value
    assert err.path == str(path) and err.field == "parallel.placement"
    assert says in str(err) and "\n" not in str(err)


# --- command line ------------------------------------------------------------------------------


def test_cli_set_placement(tmp_path, capsys):
    out_json = tmp_path / "placed.json"
    assert main(["run", "tiny", "--set", "parallel.placement=tp-pp-dp", "--json", str(out_json)]) == 0
    out, err = capsys.readouterr()
    assert "placed tp-pp-dp" in out and not err
    data = json.loads(out_json.read_text())
    assert data["parallel"]["placement"] == "tp-pp-dp"
    assert data["simulated_ranks"] == 2


def test_cli_bad_placement_is_one_clean_line(capsys):
    assert main(["run", "tiny", "--set", "parallel.placement=tp-pp-xx"]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmsim: error:"), err
    assert "parallel.placement" in lines[0] and "Traceback" not in out + err
