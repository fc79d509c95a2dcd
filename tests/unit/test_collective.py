"""`llmsim collective` and `llmsim compare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sim
from sim.cli import main
from sim.config import load_topology
from sim.studies.collective import bus_factor, collective
from sim.topology.build import ring_topology_spec
from sim.types import CollectiveAlgorithm, CollectiveKind

TOPOLOGIES = Path(sim.__file__).resolve().parent.parent / "topologies"


@pytest.mark.parametrize("p", [2, 4, 8])
def test_ring_all_reduce_bus_bandwidth_is_the_link_rate_less_latency(p):
    """On a uniform ring, t = 2(p-1) a + 2(p-1)/p S/B, so busbw = 2(p-1)/p S / t."""
    bw, lat, size = 50e9, 2e-6, 2**28
    r = collective(ring_topology_spec(p, bw, lat), CollectiveKind.ALL_REDUCE, size, p)
    t = 2 * (p - 1) * lat + 2 * (p - 1) / p * size / bw
    assert r.time_s == pytest.approx(t, rel=1e-12)
    assert r.busbw_bytes_per_s == pytest.approx(bus_factor(CollectiveKind.ALL_REDUCE, p) * size / t, rel=1e-12)
    assert r.busbw_bytes_per_s < bw


def test_channel_rings_across_nodes_beat_one_ring_and_the_three_phase_plan():
    """Two DGX H100: 8 channel rings, each crossing between the nodes on its own rail, run at
    NVLink's rate (NCCL's ring busbw across nodes); one ring is held to one NIC; the
    hierarchical plan pays its phases one after another. (NVLS-tree, faster still, left out.)"""
    topo = load_topology("dgx-h100")
    auto = collective(topo, CollectiveKind.ALL_REDUCE, 2**30, 16,
                      excluded=frozenset({CollectiveAlgorithm.NVLS_TREE}))
    ring = collective(topo, CollectiveKind.ALL_REDUCE, 2**30, 16, algorithm="ring")
    hier = collective(topo, CollectiveKind.ALL_REDUCE, 2**30, 16, algorithm="hierarchical")
    assert (auto.algorithm, ring.algorithm, hier.algorithm) == ("multi-ring", "ring", "hierarchical")
    assert auto.time_s < hier.time_s < ring.time_s
    nvlink = collective(topo, CollectiveKind.ALL_REDUCE, 2**30, 8, "ring")  # one node, NVLink ring
    assert auto.busbw_bytes_per_s == pytest.approx(nvlink.busbw_bytes_per_s, rel=0.05)


def test_collective_command_writes_its_figures(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["collective", "--op", "all-gather", "--bytes", "64MiB", "--ranks", "8", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["size_bytes"] == 64 * 2**20 and d["ranks"] == 8 and d["op"] == "all-gather"
    assert d["algbw_bytes_per_s"] == pytest.approx(d["size_bytes"] / d["time_s"])
    assert d["busbw_bytes_per_s"] == pytest.approx(d["algbw_bytes_per_s"] * 7 / 8)
    assert f"{d['busbw_bytes_per_s'] / 1e9:,.2f} GB/s" in capsys.readouterr().out


@pytest.mark.parametrize("argv,field", [
    (["--bytes", "1XB"], "--bytes"), (["--ranks", "1"], "--ranks"), (["--op", "broadcast"], "--op"),
])
def test_collective_bad_input_is_one_line(argv, field, capsys):
    assert main(["collective", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "Traceback" not in err


def test_compare_slower_network_is_slower(tmp_path, capsys):
    text = (TOPOLOGIES / "dgx-h100.yaml").read_text()
    slow = tmp_path / "slow-nics.yaml"
    slow.write_text(text.replace("name: dgx-h100", "name: slow-nics")
                    .replace("nic_bandwidth_Gbps: 400", "nic_bandwidth_Gbps: 100"))
    out = tmp_path / "cmp.json"
    # tiny with its DP spread over 8 nodes, so its gradient all-reduce crosses the NICs
    assert main(["compare", "tiny", "--set", "system.gpu=H100-SXM5-80GB", "--set", "parallel.dp=16",
                 "--set", "parallel.global_batch_size=32", "--set", "system.num_gpus=64",
                 "--topology", "dgx-h100", "--topology", str(slow), "--json", str(out),
                 "--plot", str(tmp_path / "cmp.png")]) == 0
    assert (tmp_path / "cmp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    d = json.loads(out.read_text())
    rows = {r["topology"]: r for r in d["rows"]}
    assert rows["dgx-h100"]["speedup_vs_first"] == 1.0
    assert rows["slow-nics"]["iteration_time_s"] > rows["dgx-h100"]["iteration_time_s"]
    assert rows["slow-nics"]["speedup_vs_first"] < 1.0
    assert rows["slow-nics"]["busiest_links"][0]["utilization"] > 0
    assert "slow-nics" in capsys.readouterr().out


def test_report_lists_the_busiest_links_with_what_they_carried(tmp_path, capsys):
    """One TP group of 8 in one node: every NVLink port carries the same TP traffic, counted
    whether the op ran through the flow network or at its solo time."""
    out = tmp_path / "r.json"
    assert main(["run", "tiny", "--set", "parallel.tp=8", "--set", "parallel.pp=1", "--set", "parallel.dp=1",
                 "--json", str(out)]) == 0
    links = json.loads(out.read_text())["busiest_links"]
    assert links and all(lk["kind"] == "nvlink" for lk in links)
    assert all(0 < lk["utilization"] <= 1 for lk in links)
    assert links == sorted(links, key=lambda lk: -lk["utilization"])
    assert len({round(lk["busy_bytes"]) for lk in links}) == 1
    assert "busiest links" in capsys.readouterr().out


def test_link_counters_integrate_to_the_reported_utilization():
    """The trace's per-link utilization over time, integrated over the iteration, is the
    report's utilization of that link: both count the same bytes (flow network and ops placed
    at their solo time)."""
    from sim.config import load_workload
    from sim.output.report import make_report
    from sim.runner import simulate

    w = load_workload("tiny")
    run = simulate(w, load_topology("dgx-a100"), link_counters=5)
    rep = make_report(run)
    T = run.result.makespan_s
    series: dict[str, list] = {}
    for c in run.result.counters:
        if c.name.startswith("link "):
            series.setdefault(c.name[5:], []).append((c.time_s, c.value))
    assert series
    by_name = {lk["link"]: lk["utilization"] for lk in rep.busiest_links}
    assert set(series) & set(by_name)
    for name, pts in series.items():
        pts.sort()
        assert all(0.0 <= v <= 1.0 + 1e-9 for _, v in pts)
        area = sum(v * (min(t1, T) - t0) for (t0, v), (t1, _) in zip(pts, pts[1:] + [(T, 0.0)]))
        if name in by_name:
            assert area / T == pytest.approx(by_name[name], rel=1e-6)


@pytest.mark.parametrize("topology,ranks,op,published_GBps", [
    ("dgx-a100", 8, CollectiveKind.ALL_REDUCE, 231),     # nccl-tests, 8x A100 all_reduce
    ("dgx-h100", 8, CollectiveKind.ALL_REDUCE, 480),     # nccl-tests #212, 8x H100 NVLS (auto picks it)
    ("dgx-h100", 8, CollectiveKind.ALL_GATHER, 370),     # nccl-tests #212: ring ~370 for non-all-reduce ops
    ("gb200-nvl72", 4, CollectiveKind.ALL_REDUCE, 680),  # Azure ND GB200 v6, 4 GPUs
    ("dgx-h100", 16, CollectiveKind.SEND_RECV, 47.5),    # 400 Gb/s NDR: 46-49 GB/s (nccl-tests #290)
])
def test_bus_bandwidth_at_8_gib_is_within_10_percent_of_nccl_tests(topology, ranks, op, published_GBps):
    """The sources the topology presets cite, reproduced end to end through the planner and
    the flow network (issue #6's check)."""
    r = collective(load_topology(topology), op, 8 * 2**30, ranks)
    assert r.busbw_bytes_per_s / 1e9 == pytest.approx(published_GBps, rel=0.10)


def test_two_all_reduces_share_an_oversubscribed_spine_but_not_a_non_blocking_one(tmp_path):
    """Contention: two groups' rings leaving the same leaves at once (a plain fat tree, every
    NIC of a node on one leaf); with 8:1 oversubscription a leaf's uplink carries one NIC's
    worth and the two rings halve it between them (max-min), on a non-blocking tree they do
    not meet."""
    from sim.costs.comm import plan_comm
    from sim.engine.network import solo_time_s
    from sim.topology.build import build_topology
    from sim.topology.routing import Fabric
    from sim.types import CommClass
    from sim.workload.ops import CommOp

    def times(oversub: float):
        text = (TOPOLOGIES / "dgx-h100.yaml").read_text()
        text = text.replace("oversubscription: 1.0", f"oversubscription: {oversub}")
        text = text.replace("kind: rail-optimized-fat-tree", "kind: fat-tree")
        text = text.replace("nodes_per_leaf: 32", "nodes_per_leaf: 1")
        path = tmp_path / f"o{oversub}.yaml"
        path.write_text(text)
        fabric = Fabric(build_topology(load_topology(str(path)), 32))
        a = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, tuple(range(0, 32, 8)), 2**30)
        b = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, tuple(range(1, 32, 8)), 2**30)
        pa, pb = plan_comm(fabric, a, False), plan_comm(fabric, b, False)
        alone = solo_time_s(pa.phases, fabric.capacity_bytes_per_s)
        together = solo_time_s(tuple(type(pa.phases[0])(max(x.latency_s, y.latency_s), x.flows + y.flows)
                                     for x, y in zip(pa.phases, pb.phases)), fabric.capacity_bytes_per_s)
        return alone, together

    alone, together = times(1.0)
    assert together == pytest.approx(alone, rel=1e-9)
    alone, together = times(8.0)
    assert together > 1.5 * alone


# --- a large group priced as a run prices it --------------------------------------------------------


def _every_flow_s(topo, op, size, n):
    """The op timed over every rank's flows in the flow network."""
    from sim.costs.comm import plan_comm
    from sim.engine.network import solo_time_s
    from sim.topology.routing import Fabric
    from sim.types import CommClass
    from sim.workload.ops import CommOp

    fabric = Fabric.of(topo, n)
    group = (0, n - 1) if op is CollectiveKind.SEND_RECV else tuple(range(n))
    plan = plan_comm(fabric, CommOp(op, CommClass.DP, group, float(size)), representative=False)
    return solo_time_s(plan.phases, fabric.capacity_bytes_per_s)


def test_a_large_group_is_timed_over_one_ranks_flows(monkeypatch):
    import sim.studies.collective

    sizes = []
    real = sim.studies.collective.solo_time_s

    def counted(phases, capacity):
        sizes.append(sum(len(ph.flows) for ph in phases))
        return real(phases, capacity)

    monkeypatch.setattr(sim.studies.collective, "solo_time_s", counted)
    r = collective(load_topology("dgx-h100"), CollectiveKind.ALL_REDUCE, 2**30, 1024)
    assert r.algorithm == "nvls-tree" and len(sizes) == 1
    assert sizes[0] <= 64  # rank 0's flows (the plan has 32,736)


@pytest.mark.parametrize("n", [8, 64, 256])
def test_the_default_all_reduce_is_the_same_as_over_every_flow(n):
    topo = load_topology("dgx-h100")  # to the last bit but one: one rank's flows add up in another order
    assert collective(topo, CollectiveKind.ALL_REDUCE, 2**30, n).time_s == pytest.approx(_every_flow_s(
        topo, CollectiveKind.ALL_REDUCE, 2**30, n), rel=1e-12)


@pytest.mark.parametrize("preset", ["dgx-a100", "dgx-b200", "dgx-h100"])
@pytest.mark.parametrize("op", list(CollectiveKind))
@pytest.mark.parametrize("n", [16, 24, 64])
def test_every_op_is_the_same_as_over_every_flow_to_the_last_bits(preset, op, n):
    topo = load_topology(preset)
    for size in (2**20, 2**30):
        assert collective(topo, op, size, n).time_s == pytest.approx(_every_flow_s(topo, op, size, n), rel=1e-15)
