"""NCCL's protocol choice on rings across nodes (sim/costs/nccl_protocol.py, sim/costs/comm.py):
a large collective's latency grows by the chosen protocol's step latencies per added node, a
small one's by LL's, and rings inside one node keep the latency their curves were derived with."""

import pytest

from sim.config import load_topology
from sim.costs import nccl_protocol as np_
from sim.costs.comm import plan_comm
from sim.topology.build import build_topology
from sim.topology.routing import Fabric
from sim.types import CollectiveAlgorithm, CollectiveKind, CommClass, NcclProtocol
from sim.workload.ops import CommOp

P = NcclProtocol
NODES = (16, 32)


@pytest.fixture(scope="module")
def fabric():
    return Fabric(build_topology(load_topology("dgx-a100"), 8 * max(NODES)))


def _latency_s(fabric, kind, nodes, size_bytes):
    op = CommOp(kind, CommClass.DP, tuple(range(8 * nodes)), size_bytes)
    plan = plan_comm(fabric, op, False, CollectiveAlgorithm.MULTI_RING)
    return plan.phases[0].latency_s


def _per_node_s(protocol, kind):
    """What one more node of 8 GPUs adds to a ring's latency by ``protocol`` in NCCL's model:
    7 intra-node steps (floored at the network overhead) and one inter-node step, twice for
    an all-reduce."""
    intra = max(np_.RING_NVLINK_HOP_S[protocol], np_.NET_OVERHEAD_S[protocol])
    once = 7 * intra + np_.RING_NET_HOP_S[protocol]
    return 2 * once if kind is CollectiveKind.ALL_REDUCE else once


@pytest.mark.parametrize("kind", [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE])
def test_a_large_collective_grows_by_simple_steps_and_a_small_one_by_ll_steps(fabric, kind):
    added = NODES[1] - NODES[0]
    large = _latency_s(fabric, kind, NODES[1], 2**37) - _latency_s(fabric, kind, NODES[0], 2**37)
    small = _latency_s(fabric, kind, NODES[1], 2**10) - _latency_s(fabric, kind, NODES[0], 2**10)
    assert large == pytest.approx(added * _per_node_s(P.SIMPLE, kind), rel=1e-9)
    assert small == pytest.approx(added * _per_node_s(P.LL, kind), rel=1e-9)
    assert large > 3 * small


def test_the_protocol_moves_to_lower_latency_as_ranks_grow_at_one_size():
    """At one bandwidth time, few nodes run Simple, many run LL128: Simple's steps cost more
    than LL128's lost bandwidth once there are enough of them (NCCL's ncclTopoGetAlgoTime)."""
    def pick(nodes):
        n = 8 * nodes
        return np_.ring_protocol(n - 1, nodes - 1, 0.6e-6, 2.7e-6, 5e-3)
    assert pick(4) is P.SIMPLE
    assert pick(192) is P.LL128
    assert np_.ring_protocol(8 * 192 - 1, 191, 0.6e-6, 2.7e-6, 1e-6) is P.LL


def test_ll_carries_a_quarter_of_the_bandwidth_across_nodes(fabric):
    op = CommOp(CollectiveKind.ALL_GATHER, CommClass.DP, tuple(range(8 * NODES[1])), 2**10)
    big = CommOp(CollectiveKind.ALL_GATHER, CommClass.DP, op.group, 2**37)
    small_flows = plan_comm(fabric, op, False).phases[0].flows
    big_flows = plan_comm(fabric, big, False).phases[0].flows
    eff_small = fabric.route(small_flows[0].src, small_flows[0].dst).efficiency(2**10)
    eff_big = fabric.route(big_flows[0].src, big_flows[0].dst).efficiency(2**37)
    per_byte_small = small_flows[0].size_bytes * eff_small / 2**10
    per_byte_big = big_flows[0].size_bytes * eff_big / 2**37
    assert per_byte_small == pytest.approx(4 * per_byte_big)


def test_rings_inside_one_node_keep_ll_hops_at_every_size(fabric):
    topo = load_topology("dgx-a100")
    hop = 2 * topo.scale_up.link.latency_s
    for size in (2**10, 2**30):
        op = CommOp(CollectiveKind.ALL_GATHER, CommClass.TP, tuple(range(8)), size)
        plan = plan_comm(fabric, op, False, CollectiveAlgorithm.RING)
        assert plan.phases[0].latency_s == pytest.approx(topo.scale_up.collective_latency_s + 7 * hop)
