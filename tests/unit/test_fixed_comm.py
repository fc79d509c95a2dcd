"""``Simulation._fixed_comm``, which gathers each collective's (rank, stream)s only for keys with
several tasks, gives what its rule written out per task gives: an op takes its solo time
everywhere when every link it uses is used only by ops that share one stream (rank and stream
sets intersecting), or when it is an all-to-all too large to re-rate."""

from __future__ import annotations

import pytest

from sim.config import load_workload_with_notes
from sim.costs.analytical import AnalyticalCostModel
from sim.engine.simulation import MAX_SHARED_ALL_TO_ALL, Simulation
from sim.runner import cached_fabric, excluded_algorithms, gpu_placement
from sim.topology.choice import place_workload
from sim.types import CollectiveKind
from sim.workload.taskgraph import build_program

CASES = [
    ("tiny", [], False, False),
    # its data-parallel ops' links carry nothing else: placed at their solo time everywhere
    ("tiny", ["parallel.pp=2", "parallel.dp=4", "system.num_gpus=16", "parallel.global_batch_size=16",
              "parallel.distributed_optimizer=true"], False, True),
    ("tiny", [], True, False),  # every rank simulated: collectives with several simulated members
    ("mixtral-8x7b", [], False, False),
    ("llama3-8b-h100", ["parallel.zero_stage=3"], False, False),
]


def _rule(sim: Simulation) -> tuple[dict, dict]:
    tasks = sim.program.tasks
    streams: dict[int, set] = {}
    for t in tasks:
        if t.comm:
            streams.setdefault(t.coll_key, set()).add((t.rank, t.stream))
    common: dict[int, frozenset] = {}
    users: dict[int, set] = {}
    for t in tasks:
        if t.comm:
            here = frozenset(streams[t.coll_key])
            for link in {link for ph in sim.plans[id(t.op)].phases for f in ph.flows for link in f.links}:
                common[link] = here if link not in common else common[link] & here
                users.setdefault(link, set()).update(here)
    fixed = {}
    for t in tasks:
        if t.comm and id(t.op) not in fixed:
            links = {link for ph in sim.plans[id(t.op)].phases for f in ph.flows for link in f.links}
            big = t.op.collective is CollectiveKind.ALL_TO_ALL and len(t.op.group) > MAX_SHARED_ALL_TO_ALL
            if big or all(common[link] for link in links):
                fixed[id(t.op)] = sim.solo_time(id(t.op))
    return fixed, users


@pytest.mark.parametrize("preset,sets,full,some_fixed", CASES)
def test_fixed_comm_is_its_rule_per_task(preset, sets, full, some_fixed):
    w, notes = load_workload_with_notes(preset, sets, None)
    fabric = cached_fabric(place_workload(w, None, notes).topology, w.system.num_gpus, gpu_placement(w.parallel))
    prog = build_program(w, representative=not full, node_of=fabric.node_of, local_gpu_of=fabric.local_gpu)
    costs = AnalyticalCostModel(w.system.gpu, fabric, representative=not full,
                                simulated=None if full else frozenset(r.rank for r in prog.ranks),
                                excluded=excluded_algorithms(w))
    sim = Simulation(prog, costs, fabric.capacity_bytes_per_s, {})
    sim.run()
    fixed, users = _rule(sim)
    assert sim.fixed_comm == fixed
    assert sim._link_users == users
    if some_fixed:
        assert fixed and len(fixed) < len({id(t.op) for t in prog.tasks if t.comm})
