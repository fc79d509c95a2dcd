"""The flow network: max-min fair sharing, weights, and the ring all-reduce identity."""

from __future__ import annotations

import pytest
import simpy

from sim.costs.base import Flow, Phase
from sim.costs.comm import plan_comm
from sim.engine.network import FlowNetwork, solo_time_s
from sim.topology.build import build_topology, ring_topology_spec
from sim.topology.routing import Fabric
from sim.types import CollectiveKind, CommClass
from sim.workload.ops import CommOp


def _run(capacity, flows_at):
    """Start each (t, Flow) at time t; return the finish time of each, in order."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacity)
    done = {}

    def p(i, t, f):
        yield env.timeout(t)
        yield net.transfer([f])
        done[i] = env.now

    for i, (t, f) in enumerate(flows_at):
        env.process(p(i, t, f))
    env.run()
    return [done[i] for i in range(len(flows_at))]


def test_one_flow_alone_runs_at_link_rate():
    assert _run([10.0], [(0.0, Flow(0, 1, 30.0, (0,), (1.0,)))]) == [pytest.approx(3.0)]


def test_two_flows_share_then_the_survivor_speeds_up():
    # 0..2: both at 5 B/s; flow a (10 B) done at 2; b has 20 left at 10 B/s -> 4
    got = _run([10.0], [(0.0, Flow(0, 1, 10.0, (0,), (1.0,))), (0.0, Flow(0, 1, 30.0, (0,), (1.0,)))])
    assert got == [pytest.approx(2.0), pytest.approx(4.0)]


def test_late_arrival_rerates_the_first_flow():
    # a alone for 1 s (10 B of 20), then both at 5 B/s: a's last 10 B take 2 s -> 3
    got = _run([10.0], [(0.0, Flow(0, 1, 20.0, (0,), (1.0,))), (1.0, Flow(0, 1, 100.0, (0,), (1.0,)))])
    assert got[0] == pytest.approx(3.0)


def test_max_min_fairness_across_two_links():
    # a crosses links 0 (cap 10) and 1 (cap 100); b only link 1: a is held to 10 by link 0,
    # b gets the rest of link 1 (90), not an equal split (50).
    got = _run([10.0, 100.0], [(0.0, Flow(0, 1, 10.0, (0, 1), (1.0, 1.0))),
                               (0.0, Flow(0, 1, 90.0, (1,), (1.0,)))])
    assert got == [pytest.approx(1.0), pytest.approx(1.0)]


def test_weight_counts_as_that_many_flows():
    # one flow standing for 4 on the link gets a quarter of it
    assert _run([8.0], [(0.0, Flow(0, 1, 2.0, (0,), (4.0,)))]) == [pytest.approx(1.0)]


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("size", [1e6, 3.3e8])
def test_ring_all_reduce_identity(p, size):
    """2(p-1) a + 2(p-1)/p S/B on a uniform ring (Patarasuk and Yuan 2009)."""
    bw, lat = 50e9, 2e-6
    fabric = Fabric(build_topology(ring_topology_spec(p, bw, lat), p))
    op = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, tuple(range(p)), size)
    for representative in (False, True):
        plan = plan_comm(fabric, op, representative)
        t = solo_time_s(plan.phases, fabric.capacity_bytes_per_s)
        assert t == pytest.approx(2 * (p - 1) * lat + 2 * (p - 1) / p * size / bw, rel=1e-12)


@pytest.mark.parametrize("kind", [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER])
def test_ring_gather_and_scatter_move_half_the_all_reduce(kind):
    p, bw, lat, size = 4, 10e9, 1e-6, 4e8
    fabric = Fabric(build_topology(ring_topology_spec(p, bw, lat), p))
    plan = plan_comm(fabric, CommOp(kind, CommClass.TP, tuple(range(p)), size), False)
    assert solo_time_s(plan.phases, fabric.capacity_bytes_per_s) == pytest.approx(
        (p - 1) * lat + (p - 1) / p * size / bw, rel=1e-12)


def test_group_of_one_costs_nothing():
    fabric = Fabric(build_topology(ring_topology_spec(2, 1e9, 1e-6), 2))
    plan = plan_comm(fabric, CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, (0,), 1e9), False)
    assert solo_time_s(plan.phases, fabric.capacity_bytes_per_s) == 0.0


def test_phase_latency_then_flows():
    t = solo_time_s((Phase(1.0, (Flow(0, 1, 10.0, (0,), (1.0,)),)), Phase(0.5)), [5.0])
    assert t == pytest.approx(3.5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_flows_finish_late_in_a_long_run(seed):
    """At a clock of 1e5 s a float cannot tell a remaining 1e-12 s from nothing: a flow that
    close to done must finish rather than reschedule itself forever (a livelock once seen in a
    405B run)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    net = FlowNetwork(env, [25e9, 50e9, 10e9])
    done = []

    def p(t, f):
        yield env.timeout(t)
        yield net.transfer([f])
        done.append(env.now)

    n = 300
    for _ in range(n):
        links = tuple(sorted(rng.choice(3, size=int(rng.integers(1, 4)), replace=False).tolist()))
        f = Flow(0, 1, float(rng.uniform(1e3, 1e9)), links, (1.0,) * len(links))
        env.process(p(float(1e5 + rng.uniform(0, 50)), f))
    steps = 0
    while env.peek() < float("inf"):
        env.step()
        steps += 1
        assert steps < 50 * n, "the flow network stopped making progress"
    assert len(done) == n
