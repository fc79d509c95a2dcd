"""The speed paths give the plain paths' results to the last digit.

* The fat-tree router (sim/topology/fattree_routes.py) against NetworkX's Dijkstra;
* the flow network's memo of rates (sim/engine/network.py) against progressive filling at
  every change;
* the fat tree read from its structure (sim/topology/fattree_index.py) against the built graph;
* the representative plans that keep only the simulated ranks' flows and plan only the replicas
  that can share their links (``sim.costs.comm._kept_plan``) against planning every replica;

each compared on whole simulations of small jobs (every span's times, the memory counters and
the link counters equal exactly) and, for the plans, op by op under every algorithm the op
can take. The small fat trees have scalable units of a few servers so that flows cross leaves
and the spine and replicas share leaves; one has a switch latency and units of five servers,
so that the simulated ranks' pipeline sends stay on one leaf while other ranks' cross the
spine: replicas a kept flow does not meet then set a phase's latency and are planned for it;
one has DP groups over two racks that hold unequal numbers of their ranks.
"""

from __future__ import annotations

import dataclasses

import pytest

import sim.costs.comm as comm
import sim.engine.network as network
import sim.topology.routing as routing
from sim.config import load_topology, load_workload_with_notes
from sim.costs.comm import plan_comm
from sim.runner import cached_fabric, simulate
from sim.topology.build import build_topology
from sim.topology.fattree_index import FatTreeIndex
from sim.types import CollectiveAlgorithm, CollectiveKind
from sim.workload.layout import gpu_placement
from sim.workload.taskgraph import build_program


def _sets(tp, pp, dp, *extra):
    return [f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}", f"system.num_gpus={tp * pp * dp}",
            f"parallel.global_batch_size={4 * dp}", *extra]


CASES = [
    ("tiny", "dgx-a100", [], {}),
    ("tiny", "dgx-h100-8plane", ["parallel.dp=8", "system.num_gpus=32", "parallel.global_batch_size=32"], {}),
    ("tiny", "gb200-nvl72", ["parallel.tp=4", "parallel.dp=18", "system.num_gpus=144", "system.gpus_per_node=4",
                      "parallel.global_batch_size=72"], {}),
    ("mixtral-8x7b", None, [], {}),
    # fat trees of two- or three-server units: DP rings, pipeline sends and tree all-reduces
    # across leaves, replicas on shared leaves
    ("tiny", "dgx-h100", _sets(2, 2, 8), {"nodes_per_leaf": 2}),
    ("tiny", "dgx-h100", _sets(2, 4, 8, "parallel.distributed_optimizer=true", "parallel.placement=tp-pp-dp"),
     {"nodes_per_leaf": 3}),
    ("tiny", "dgx-h100-8plane", _sets(1, 2, 16, "parallel.distributed_optimizer=true"), {"nodes_per_leaf": 2}),
    ("tiny", "dgx-h100", _sets(4, 2, 8, "parallel.sequence_parallel=true"),
     {"nodes_per_leaf": 5, "switch_latency_s": 1e-6}),
    ("mixtral-8x7b", "dgx-h100", [], {"nodes_per_leaf": 3}),
    # the second stage's DP groups straddle two NVL72 racks, 8 ranks on one and 2 on the other
    ("tiny", "gb200-nvl72", _sets(4, 2, 10, "system.gpus_per_node=4"), {"nodes_per_leaf": 2}),
    ("tiny", "gb200-nvl72", _sets(4, 2, 10, "system.gpus_per_node=4", "parallel.distributed_optimizer=true"),
     {"nodes_per_leaf": 2}),
]


def _topology(topo, w, changes):
    t = load_topology(topo or w.system.topology or "dgx-h100")
    return dataclasses.replace(t, scale_out=dataclasses.replace(t.scale_out, **changes)) if changes else t


def _run(name, topo, sets, changes, monkeypatch, *, fast: bool):
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(routing.FatTreeRouter, "of", classmethod(lambda cls, g, n: None))
            m.setattr(network, "MEMO_ENTRIES", 0)
            m.setattr(FatTreeIndex, "of", classmethod(lambda cls, s, n: None))
            m.setattr(comm, "_kept_plan", lambda *a: None)
        cached_fabric.cache_clear()
        w, notes = load_workload_with_notes(name, sets, None)
        r = simulate(w, _topology(topo, w, changes), notes=notes, link_counters=3).result
    cached_fabric.cache_clear()
    return r


@pytest.mark.parametrize("name,topo,sets,changes", CASES)
def test_fast_paths_equal_plain(name, topo, sets, changes, monkeypatch):
    fast = _run(name, topo, sets, changes, monkeypatch, fast=True)
    plain = _run(name, topo, sets, changes, monkeypatch, fast=False)
    assert fast.makespan_s == plain.makespan_s
    assert [(s.rank, s.stream, s.name, s.start_s, s.end_s) for s in fast.spans] == \
           [(s.rank, s.stream, s.name, s.start_s, s.end_s) for s in plain.spans]
    assert [(c.rank, c.time_s, c.name, c.value) for c in fast.counters] == \
           [(c.rank, c.time_s, c.name, c.value) for c in plain.counters]
    assert fast.metadata["link_busy_bytes"] == plain.metadata["link_busy_bytes"]


def _kept(plan, keep):
    return plan.algorithm, [(ph.latency_s, [(f.src, f.dst, f.size_bytes, f.links, f.weights) for f in ph.flows
                                            if f.src in keep or f.dst in keep]) for ph in plan.phases]


@pytest.mark.parametrize("name,topo,sets,changes", CASES[4:])
def test_kept_plans_equal_every_replica_planned(name, topo, sets, changes, monkeypatch):
    """Every comm op of the representative program, under each algorithm it can take: the
    plan with only the simulated ranks' flows (from the fabric read from its structure) has
    the flows, weights and latencies of every replica planned on the built graph, filtered."""
    w, _ = load_workload_with_notes(name, sets, None)
    t, n, placement = _topology(topo, w, changes), w.system.num_gpus, gpu_placement(w.parallel)
    fast, built = routing.Fabric.of(t, n, placement), routing.Fabric(build_topology(t, n), placement)
    program = build_program(w, node_of=fast.node_of, local_gpu_of=fast.local_gpu)
    keep = frozenset(r.rank for r in program.ranks)
    ops = {id(task.op): task.op for task in program.tasks if task.comm}
    calls, kept = [], comm._kept_plan

    def spy(*a):
        out = kept(*a)
        calls.append(out is not None)
        return out
    monkeypatch.setattr(comm, "_kept_plan", spy)
    families: dict = {}
    A = CollectiveAlgorithm
    for op in ops.values():
        algorithms = [A.AUTO]
        if op.collective not in (CollectiveKind.SEND_RECV, CollectiveKind.RING_EXCHANGE, CollectiveKind.ALL_TO_ALL):
            algorithms += [A.RING, A.MULTI_RING, A.TREE, A.NVLS, A.PAT, A.HIERARCHICAL]
        for algo in algorithms:
            try:
                plain = plan_comm(built, op, True, algo)
            except ValueError:  # an algorithm the op cannot take
                continue
            assert _kept(plan_comm(fast, op, True, algo, keep=keep, families=families), keep) == _kept(plain, keep)
    assert any(calls)  # the kept plans were made, not declined


def test_the_kept_plan_declines_where_it_cannot_tell(monkeypatch):
    """On a dragonfly (no fat-tree router to say which GPUs a link's routes come from) every
    replica is planned; the simulation is the plain one."""
    w, _ = load_workload_with_notes("tiny", _sets(2, 2, 8, "system.gpus_per_node=4"), None)
    fab = routing.Fabric.of(load_topology("dragonfly"), 32)
    assert fab._index is None and fab.near_ranks(fab.route(0, 31).links) is None
    program = build_program(w, node_of=fab.node_of, local_gpu_of=fab.local_gpu)
    keep = frozenset(r.rank for r in program.ranks)
    op = next(t.op for t in program.tasks if t.comm and len(t.op.replicas) > 1)
    family = comm.Replicas(op.replicas)
    assert family.usable and comm._kept_plan(fab, op, CollectiveAlgorithm.RING, family, keep, None) is None


@pytest.mark.parametrize("algo", [CollectiveAlgorithm.RING, CollectiveAlgorithm.TREE])
def test_a_replica_the_kept_flows_do_not_meet_still_sets_the_latency(algo):
    """The simulated ranks' pair stays on one leaf; another replica's crosses the spine (with
    a switch latency, a longer route): it loads none of the kept links, so it is not planned
    for its flows, yet the phase's latency is its."""
    from sim.types import CommClass
    from sim.workload.ops import CommOp

    t = load_topology("dgx-h100")
    t = dataclasses.replace(t, scale_out=dataclasses.replace(t.scale_out, nodes_per_leaf=2, switch_latency_s=1e-6))
    fast, built = routing.Fabric.of(t, 256), routing.Fabric(build_topology(t, 256))
    op = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, (0, 8), 1e6, ((0, 8), (1, 200)))
    keep = frozenset({0})
    assert fast.route(1, 200).latency_s > fast.route(0, 8).latency_s
    assert not fast.near_ranks(fast.route(0, 8).links) & {1, 200}
    plan = plan_comm(fast, op, True, algo, keep=keep)
    assert _kept(plan, keep) == _kept(plan_comm(built, op, True, algo), keep)
    alone = plan_comm(built, dataclasses.replace(op, replicas=((0, 8),)), True, algo)
    assert plan.phases[0].latency_s > alone.phases[0].latency_s
