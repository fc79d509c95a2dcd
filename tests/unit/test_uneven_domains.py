"""Collectives over scale-up domains that hold unequal numbers of a group's ranks (a DP group of
a pipeline stage straddling two NVL72 racks, 12 ranks on two 8-GPU nodes), as NCCL runs them.

NCCL searches each node's channels on its own GPUs and NICs (an MNNVL clique is one node), keeps
the fewest any node found for every node (``initTransportsRank``, ``src/init.cc``) and joins
channel ``c`` of each node to channel ``c`` of the next (``connectRings``,
``src/graph/connect.cc``; NVIDIA/nccl v2.27.7-1). So a ring collective runs as many channel
rings as the domain with the fewest members has members, each crossing between domains on its
own NIC; the tree runs as many channels; PAT needs one rank per node (``ncclPatEnable``,
``src/graph/tuning.cc``).
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from sim.cli import main
from sim.config import load_topology
from sim.costs.comm import (
    CTAS_PER_NODE_GPU,
    channel_count,
    estimate_s,
    nccl_ctas,
    plan_comm,
)
from sim.costs.nccl_protocol import RING_BANDWIDTH_FACTOR
from sim.engine.network import solo_time_s
from sim.studies.collective import collective
from sim.topology.routing import Fabric
from sim.types import CollectiveAlgorithm as A
from sim.types import CollectiveKind as K
from sim.types import CommClass
from sim.workload.ops import CommOp

GiB = 2**30


def _nic_uplinks(fab: Fabric, plan) -> Counter:
    """Bytes the plan sends up each NIC's link into the fabric, by the NIC's name."""
    out: Counter = Counter()
    for ph in plan.phases:
        for f in ph.flows:
            for link in f.links:
                src, dst = fab.link_names[link].split("->")
                if src.startswith("nic") and not dst.startswith("gpu"):
                    out[src] += f.size_bytes
    return out


def _two_dgx_nodes():
    """12 ranks on two DGX H100 nodes: 8 on the first, 4 on the second."""
    topo = load_topology("dgx-h100")
    return topo, Fabric.of(topo, 16), tuple(range(12))


@pytest.mark.parametrize("kind", [K.ALL_GATHER, K.REDUCE_SCATTER])
def test_eight_and_four_ranks_run_four_channel_rings_each_on_its_own_nic(kind):
    topo, fab, group = _two_dgx_nodes()
    S, p = float(GiB), len(group)
    plan = plan_comm(fab, CommOp(kind, CommClass.DP, group, S), representative=False)
    assert plan.algorithm == "multi-ring"
    nic = topo.scale_out.nic
    one_channel = (p - 1) / p * S / 4 / nic.efficiency(S)
    up = _nic_uplinks(fab, plan)
    # four NICs leave each node, one ring's crossing on each
    assert sorted(up) == [f"nic0.{j}" for j in range(4)] + [f"nic1.{j}" for j in range(4)]
    assert all(b == pytest.approx(one_channel, rel=1e-12) for b in up.values())
    # the NICs are the bottleneck: the flow network's time is the alpha-beta estimate of that shape
    t = solo_time_s(plan.phases, fab.capacity_bytes_per_s)
    expected = plan.phases[0].latency_s + one_channel / nic.bandwidth_bytes_per_s
    assert t == pytest.approx(expected, rel=1e-9) and estimate_s(fab, plan) == pytest.approx(expected, rel=1e-9)
    flat = plan_comm(fab, CommOp(kind, CommClass.DP, group, S), representative=False, algorithm=A.RING)
    assert t < solo_time_s(flat.phases, fab.capacity_bytes_per_s) / 3  # the flat ring crosses on one NIC


def test_a_hundred_gpus_on_nvl72_cross_on_as_many_nics_as_the_smaller_rack_has_members():
    """72 + 28: 28 channel rings, each leaving each rack on its own NIC."""
    topo = load_topology("gb200-nvl72")
    fab = Fabric.of(topo, 100)
    S = float(GiB)
    plan = plan_comm(fab, CommOp(K.ALL_GATHER, CommClass.DP, tuple(range(100)), S), representative=False)
    assert plan.algorithm == "multi-ring" and channel_count([72, 28]) == 28
    up = _nic_uplinks(fab, plan)
    racks = Counter(fab.node_of(int(name[3:].split(".")[0]) * 4) // 18 for name in up)  # 18 trays a rack
    assert racks == {0: 28, 1: 28}
    # each carries one channel's share, at the bandwidth factor of the protocol NCCL picks
    share, = set(up.values())
    base = 0.99 * S / 28 / topo.scale_out.nic.efficiency(S)
    assert any(share == pytest.approx(base / f, rel=1e-12) for f in RING_BANDWIDTH_FACTOR.values())
    flat = collective(topo, K.ALL_GATHER, GiB, 100, "ring")
    assert collective(topo, K.ALL_GATHER, GiB, 100).time_s < flat.time_s / 10


def test_llmsim_collective_over_a_hundred_nvl72_gpus(tmp_path):
    """``llmsim collective --topology gb200-nvl72 --ranks 100``: no longer one NIC's bus bandwidth."""
    out = tmp_path / "c.json"
    assert main(["collective", "--topology", "gb200-nvl72", "--ranks", "100", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    nic = load_topology("gb200-nvl72").scale_out.nic
    assert r["algorithm"] in ("multi-ring", "tree")
    assert r["busbw_bytes_per_s"] > 10 * nic.bandwidth_bytes_per_s * nic.efficiency(GiB)


def test_the_tree_runs_over_unequal_domains_at_nccls_latency():
    """NCCL's tree latency counts ``nRanks / nNodes`` ranks a node (an integer division):
    2 ((12 // 2 - 1) h_intra + ceil(log2 2) h_inter); four channels, one per NIC of the smaller
    node."""
    topo, fab, group = _two_dgx_nodes()
    h_intra, h_inter = 2 * topo.scale_up.link.latency_s, 2 * topo.scale_out.nic.latency_s
    op = CommOp(K.ALL_REDUCE, CommClass.DP, group, 8.0)
    tree = plan_comm(fab, op, representative=False, algorithm=A.TREE)
    L = topo.scale_up.collective_latency_s
    assert tree.phases[0].latency_s == pytest.approx(L + 2 * (5 * h_intra + math.ceil(math.log2(2)) * h_inter))
    assert len(_nic_uplinks(fab, tree)) == 2 * 4
    assert plan_comm(fab, op, representative=False).algorithm == "tree"  # small messages: the tree's few steps


def test_pat_needs_one_rank_in_every_domain():
    """Four ranks over three nodes, two on the last: NCCL does not offer PAT (``nNodes !=
    nRanks``), so a small all-gather runs channel rings."""
    fab = Fabric.of(load_topology("dgx-h100"), 32)
    op = CommOp(K.ALL_GATHER, CommClass.DP, (0, 8, 16, 17), 2.0**16)
    assert plan_comm(fab, op, representative=False).algorithm == "multi-ring"
    one_each = CommOp(K.ALL_GATHER, CommClass.DP, (0, 8, 16, 24), 2.0**16)
    assert plan_comm(fab, one_each, representative=False).algorithm == "pat"


@pytest.mark.parametrize("group,fewest", [(tuple(range(12)), 4), ((0, 1, 8, 9, 10, 11, 12, 13), 2)])
def test_kernel_channels_are_the_smaller_nodes(group, fewest):
    _, fab, _ = _two_dgx_nodes()
    op = CommOp(K.ALL_GATHER, CommClass.DP, group, float(GiB))
    assert nccl_ctas(fab, op, "multi-ring") == CTAS_PER_NODE_GPU * fewest


def test_even_groups_keep_their_rail_matched_rings():
    """Two nodes of eight: ring ``c`` enters node ``n`` at GPU ``(c + n) mod 8``, runs through
    ``+2, +3, ..., +7`` and leaves at ``+1``, where the next node's entry is."""
    topo = load_topology("dgx-h100")
    fab = Fabric.of(topo, 16)
    group, k = tuple(range(16)), 8
    plan = plan_comm(fab, CommOp(K.ALL_GATHER, CommClass.DP, group, float(GiB)), False, A.MULTI_RING)
    doms = [group[:8], group[8:]]
    edges = Counter()
    for c in range(k):
        ring = [dom[(c + n + j) % k] for n, dom in enumerate(doms) for j in [0, *range(2, k), 1]]
        edges.update(zip(ring, ring[1:] + ring[:1]))
    assert Counter((f.src, f.dst) for f in plan.phases[0].flows) == edges
    up = _nic_uplinks(fab, plan)
    assert len(up) == 16 and len(set(up.values())) == 1
