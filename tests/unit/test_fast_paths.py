"""The speed paths give the plain paths' results to the last digit.

* The fat-tree router (sim/topology/fattree_routes.py) against NetworkX's Dijkstra;
* the flow network's memo of rates (sim/engine/network.py) against progressive filling at
  every change;

each compared on whole simulations of small jobs: every span's times, the memory counters and
the link counters equal exactly.
"""

from __future__ import annotations

import pytest

import sim.engine.network as network
import sim.topology.routing as routing
from sim.config import load_topology, load_workload_with_notes
from sim.runner import _fabric, simulate

CASES = [
    ("tiny", "dgx-a100", []),
    ("tiny", "dgx-h100-8plane", ["parallel.dp=8", "system.num_gpus=32", "parallel.global_batch_size=32"]),
    ("tiny", "gb200-nvl72", ["parallel.tp=4", "parallel.dp=18", "system.num_gpus=144", "system.gpus_per_node=4",
                      "parallel.global_batch_size=72"]),
    ("mixtral-8x7b", None, []),
]


def _run(name, topo, sets, monkeypatch, *, router: bool, memo: bool):
    with monkeypatch.context() as m:
        if not router:
            m.setattr(routing.FatTreeRouter, "of", classmethod(lambda cls, g, n: None))
        if not memo:
            m.setattr(network, "MEMO_ENTRIES", 0)
        _fabric.cache_clear()
        w, notes = load_workload_with_notes(name, sets, None)
        t = load_topology(topo or w.system.topology or "dgx-h100")
        r = simulate(w, t, notes=notes, link_counters=3).result
    _fabric.cache_clear()
    return r


@pytest.mark.parametrize("name,topo,sets", CASES)
def test_fast_paths_equal_plain(name, topo, sets, monkeypatch):
    fast = _run(name, topo, sets, monkeypatch, router=True, memo=True)
    plain = _run(name, topo, sets, monkeypatch, router=False, memo=False)
    assert fast.makespan_s == plain.makespan_s
    assert [(s.rank, s.stream, s.name, s.start_s, s.end_s) for s in fast.spans] == \
           [(s.rank, s.stream, s.name, s.start_s, s.end_s) for s in plain.spans]
    assert [(c.rank, c.time_s, c.name, c.value) for c in fast.counters] == \
           [(c.rank, c.time_s, c.name, c.value) for c in plain.counters]
    assert fast.metadata["link_busy_bytes"] == plain.metadata["link_busy_bytes"]
