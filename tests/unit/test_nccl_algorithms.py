"""Collective algorithms as NCCL runs and picks them: ring, channel rings, tree, NVLS, NVLS-tree, PAT.

The published nccl-tests tables the presets are derived from (benchmarks/nccl/) are reproduced
point by point through the planner and the flow network; the algorithms' shapes (NVLS's bus
bandwidth rising with the GPU count, the tree's logarithmic latency, PAT's) are checked against
their closed forms and NCCL's published behaviour.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

import sim
from sim.calibrate.nccl_tests import parse_nccl_tests
from sim.calibrate.pricing import excluded_algorithms
from sim.cli import main
from sim.config import load_topology
from sim.costs.comm import NVLS_LATENCY_S, NVLS_TREE_NET_LATENCY_S
from sim.derive.nccl_curves import derive
from sim.errors import ConfigError
from sim.studies.collective import collective
from sim.types import CollectiveAlgorithm, CollectiveKind

ROOT = Path(sim.__file__).resolve().parent.parent
TABLES = yaml.safe_load((ROOT / "benchmarks" / "nccl" / "azure_all_reduce.yaml").read_text())
AR, AG = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER


@pytest.mark.parametrize("entry", TABLES, ids=lambda e: e["topology"])
def test_presets_carry_the_curves_derived_from_the_published_table(entry):
    """No preset number is tuned: each is what derive_curves.py computes from the table."""
    topo = load_topology(entry["topology"])
    link = topo.scale_up.link
    latency, curve = derive(entry, link.bandwidth_bytes_per_s, 2 * link.latency_s, NVLS_LATENCY_S)
    assert topo.scale_up.collective_latency_s == pytest.approx(latency, abs=0.06e-6)
    have = topo.scale_up.nvls_efficiency if entry["algorithm"] == "nvls" else link.efficiency
    assert [(int(s), round(e, 3)) for s, e in have.points] == curve


@pytest.mark.parametrize("entry", TABLES, ids=lambda e: e["topology"])
def test_every_point_of_the_published_all_reduce_tables(entry):
    """1 KiB to 8 GiB, 24 sizes: within 25% at every size (the latency-bound end included),
    within 10% from 1 GiB up."""
    topo = load_topology(entry["topology"])
    worst = 0.0
    for i, busbw in enumerate(entry["busbw_GBps"]):
        size = 2**10 * 2**i
        r = collective(topo, AR, size, entry["ranks"], entry["algorithm"])
        err = r.busbw_bytes_per_s / (busbw * 1e9) - 1
        worst = max(worst, abs(err))
        assert abs(err) < (0.10 if size >= 2**30 else 0.25), (size, r.busbw_bytes_per_s / 1e9, busbw)
    print(entry["topology"], f"worst {worst:.1%}")


def test_auto_picks_nvls_for_large_all_reduces_in_an_h100_node_and_not_on_a100():
    h100 = collective(load_topology("dgx-h100"), AR, 8 * 2**30, 8)
    assert h100.algorithm == "nvls" and h100.busbw_bytes_per_s / 1e9 == pytest.approx(480, rel=0.10)
    assert collective(load_topology("dgx-a100"), AR, 8 * 2**30, 8).algorithm == "ring"
    ring = collective(load_topology("dgx-h100"), AR, 8 * 2**30, 8, "ring")
    assert ring.busbw_bytes_per_s / 1e9 == pytest.approx(370, rel=0.10)  # nccl-tests #212


@pytest.mark.parametrize("n,published_GBps", [(4, 370), (5, 420), (6, 440), (7, 460), (8, 480)])
def test_nvls_bus_bandwidth_rises_with_the_gpu_count_as_measured(n, published_GBps):
    """Each GPU link carries (1 + 1/n) S each way under NVLS, so busbw = 2(n-1)/n x B eff /
    (1 + 1/n): NVIDIA/nccl #1455 measured 370/420/440/460/480 GB/s on 4-8 H100s."""
    r = collective(load_topology("dgx-h100"), AR, 8 * 2**30, n, "nvls")
    assert r.busbw_bytes_per_s / 1e9 == pytest.approx(published_GBps, rel=0.05)


def test_tree_latency_is_logarithmic_and_auto_takes_it_for_small_messages_at_scale():
    topo = load_topology("dgx-h100")
    L = topo.scale_up.collective_latency_s
    h_intra, h_inter = 2 * topo.scale_up.link.latency_s, 2 * topo.scale_out.nic.latency_s
    times = {}
    for nodes in (2, 4, 16):
        t = collective(topo, AR, 8, 8 * nodes, "tree").time_s
        times[nodes] = t
        assert t == pytest.approx(L + 2 * (7 * h_intra + math.ceil(math.log2(nodes)) * h_inter), rel=1e-3)
    ring = collective(topo, AR, 2**16, 128, "multi-ring")
    small = collective(topo, AR, 2**16, 128)
    assert small.algorithm == "tree" and small.time_s < ring.time_s / 5
    big = collective(topo, AR, 2**30, 16, excluded=frozenset({CollectiveAlgorithm.NVLS_TREE}))
    assert big.algorithm == "multi-ring"  # the tree's 0.92 bandwidth loses for large messages
    assert big.time_s < collective(topo, AR, 2**30, 16, "tree").time_s


def test_pat_for_one_gpu_per_node(tmp_path):
    text = (ROOT / "topologies" / "dgx-h100.yaml").read_text()
    one = tmp_path / "one-gpu-nodes.yaml"
    one.write_text(text.replace("gpus_per_node: 8", "gpus_per_node: 1").replace("domain_size: 8", "domain_size: 1")
                   .replace("nics_per_node: 8 ", "nics_per_node: 1 "))
    topo = load_topology(str(one))
    small, big = collective(topo, AG, 2**16, 32), collective(topo, AG, 2**30, 32)
    ring_small = collective(topo, AG, 2**16, 32, "ring")
    assert small.algorithm == "pat" and small.time_s < ring_small.time_s
    assert big.algorithm == "ring"  # PAT's 0.75 of the bandwidth loses for large messages
    pat_big = collective(topo, AG, 2**30, 32, "pat")
    ring_big = collective(topo, AG, 2**30, 32, "ring")
    assert pat_big.busbw_bytes_per_s == pytest.approx(0.75 * ring_big.busbw_bytes_per_s, rel=0.02)


def test_nvls_tree_across_h100_nodes_beats_the_nics_line_rate_and_not_one_node_nvls():
    """Across NVLS nodes NCCL runs NVLS-tree for large all-reduces ("NVLSTree with multi-node",
    NVIDIA/nccl-tests #309): each GPU's eighth crosses its own NIC, so 2 nodes of 8 H100s pass
    the 400 GB/s the NICs carry for a ring (469 GB/s measured in that thread), bound by the
    nodes' NVLS, which one node reaches alone."""
    topo = load_topology("dgx-h100")
    two = collective(topo, AR, 16 * 2**30, 16)
    assert two.algorithm == "nvls-tree"
    assert 400 < two.busbw_bytes_per_s / 1e9
    one = collective(topo, AR, 16 * 2**30, 8)
    assert one.algorithm == "nvls" and two.time_s >= one.time_s
    assert collective(topo, AR, 16 * 2**30, 16, "multi-ring").busbw_bytes_per_s / 1e9 < 400


def test_nvls_tree_latency_and_nic_bytes_as_nccl_counts_them():
    """Latency: the collective's fixed part, NVLS's 25 us and 2 floor(log2 N) steps of 14 us
    between nodes (NCCL's tuning.cc) at dgx-h100's 2.7 us LL hop (NCCL's own); bytes: a NIC
    carries an eighth of the buffer each way between two nodes, up to twice that with more (a
    node interior to one tree, two children and a parent, and a leaf of the other)."""
    topo = load_topology("dgx-h100")
    L = topo.scale_up.collective_latency_s
    for nodes in (2, 4, 16):
        t = collective(topo, AR, 8, 8 * nodes, "nvls-tree").time_s
        assert t == pytest.approx(L + NVLS_LATENCY_S + 2 * int(math.log2(nodes)) * NVLS_TREE_NET_LATENCY_S,
                                  rel=1e-3), nodes
    slow = load_topology("dgx-h100", ["scale_out.efficiency=0.02"])  # the NICs bind
    size = 2**30
    per_nic = size / 8 / (slow.scale_out.nic.bandwidth_bytes_per_s * 0.02)
    t2, t4, t8 = (collective(slow, AR, size, 8 * nodes, "nvls-tree").time_s for nodes in (2, 4, 8))
    assert t2 == pytest.approx(per_nic, rel=0.02) and t8 == pytest.approx(2 * per_nic, rel=0.02)
    assert 1.4 * per_nic < t4 < t8  # 4 nodes: no node interior in both trees' busiest place


def test_a_logs_nccl_algo_limits_the_planner():
    text = ("# Collective test starting: all_reduce_perf\n"
            "mpirun -np 16 -x NCCL_ALGO=Ring ./build/all_reduce_perf -b 8 -e 1G\n"
            + "".join(f"#  Rank {i:2d} Group  0 Pid  1 on h{i // 8} device {i % 8} [0x00] NVIDIA H100 80GB HBM3\n"
                      for i in range(16))
            + "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            "   1048576  262144  float  sum  -1  100.0  10.49  19.66  0  100.0  10.49  19.66  0\n")
    assert parse_nccl_tests(text, "x-all_reduce.txt").nccl_algo == "Ring"
    info = text.replace("-x NCCL_ALGO=Ring", "").replace(
        "# Collective", "h0:1:1 [0] NCCL INFO NCCL_ALGO set by environment to ^NVLS,NVLSTree\n# Collective")
    assert parse_nccl_tests(info, "x-all_reduce.txt").nccl_algo == "^NVLS,NVLSTree"
    A = CollectiveAlgorithm
    assert excluded_algorithms("Ring") == {A.TREE, A.NVLS, A.NVLS_TREE, A.PAT, A.HIERARCHICAL}
    assert excluded_algorithms("tree,nvlstree") == {A.RING, A.MULTI_RING, A.NVLS, A.PAT, A.HIERARCHICAL}
    assert excluded_algorithms("^NVLS,NVLSTree") == {A.NVLS, A.NVLS_TREE}
    with pytest.raises(ConfigError) as err:
        excluded_algorithms("Butterfly", "x.txt")
    assert err.value.path == "x.txt" and err.value.field == "NCCL_ALGO"
    topo = load_topology("dgx-h100")
    ring = collective(topo, AR, 2**30, 16, excluded=excluded_algorithms("Ring"))
    assert ring.algorithm == "multi-ring" and collective(topo, AR, 2**30, 16).algorithm == "nvls-tree"


@pytest.mark.parametrize("argv", [
    ["--topology", "dgx-a100", "--algo", "nvls"],            # A100 has no NVLink SHARP
    ["--topology", "dgx-a100", "--ranks", "16", "--algo", "nvls-tree"],
    ["--ranks", "8", "--algo", "nvls-tree"],                 # one node: NVLS, not NVLS-tree
    ["--op", "all-gather", "--algo", "tree"],                # tree is for all-reduce
    ["--algo", "multi-ring"],                                # one node: nothing to span
    ["--algo", "butterfly"],
])
def test_an_algorithm_the_op_cannot_run_is_one_line(argv, capsys):
    assert main(["collective", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--algo" in err and "Traceback" not in err
