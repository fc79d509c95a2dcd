"""A topology from a user's GraphML file."""

from __future__ import annotations

import networkx as nx
import pytest

from sim.config import load_topology
from sim.errors import ConfigError
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.collective import collective
from sim.types import CollectiveKind
from tests.conftest import make_workload


def _ring(tmp_path, p=4, bw=50.0, lat=2.0):
    g = nx.Graph()
    for i in range(p):
        g.add_node(f"gpu{i}", kind="gpu", node=0)
    for i in range(p):
        g.add_edge(f"gpu{i}", f"gpu{(i + 1) % p}", bandwidth_GBps=bw, latency_us=lat, link="nvlink")
    nx.write_graphml(g, tmp_path / "ring.graphml")
    (tmp_path / "ring.yaml").write_text(f"name: my-ring\ngpus_per_node: {p}\ngraphml: ring.graphml\n")
    return tmp_path / "ring.yaml"


def _two_nodes(tmp_path, nic_GBps):
    """Two servers of 4 GPUs: NVSwitch inside, one NIC per GPU to one network switch."""
    g = nx.Graph()
    for n in range(2):
        g.add_node(f"nvs{n}", kind="nvswitch")
        for j in range(4):
            r = 4 * n + j
            g.add_node(f"gpu{r}", kind="gpu", node=n, local_gpu=j)
            g.add_edge(f"gpu{r}", f"nvs{n}", bandwidth_GBps=450.0, latency_us=0.3, link="nvlink")
            g.add_edge(f"gpu{r}", "ib", bandwidth_GBps=nic_GBps, latency_us=1.35, link="network", efficiency=0.95)
    g.nodes["ib"]["kind"] = "switch"
    name = f"two-nodes-{int(nic_GBps)}"
    nx.write_graphml(g, tmp_path / f"{name}.graphml")
    (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ngpus_per_node: 4\ngraphml: {name}.graphml\n")
    return tmp_path / f"{name}.yaml"


@pytest.mark.parametrize("p", [2, 4])
def test_ring_from_graphml_meets_the_ring_identity(tmp_path, p):
    topo = load_topology(str(_ring(tmp_path, p)))
    size = 2**28
    r = collective(topo, CollectiveKind.ALL_REDUCE, size, p)
    assert r.time_s == pytest.approx(2 * (p - 1) * 2e-6 + 2 * (p - 1) / p * size / 50e9, rel=1e-12)


def test_a_workload_runs_on_a_graphml_cluster_and_feels_its_nics(tmp_path):
    w = make_workload(tp=4, pp=1, dp=2, gbs=4, layers=2, gpus_per_node=4, gpu="H100-SXM5-80GB")
    fast = make_report(simulate(w, load_topology(str(_two_nodes(tmp_path, 50.0)))))
    slow = make_report(simulate(w, load_topology(str(_two_nodes(tmp_path, 5.0)))))
    assert slow.iteration_time_s > fast.iteration_time_s
    assert slow.exposed_comm_s["dp"] > fast.exposed_comm_s["dp"]


def test_graphml_errors_name_the_file_and_what_is_wrong(tmp_path):
    g = nx.Graph()
    g.add_node("gpu0", kind="gpu")
    g.add_node("gpu2", kind="gpu")
    g.add_edge("gpu0", "gpu2", bandwidth_GBps=10.0, latency_us=1.0)
    nx.write_graphml(g, tmp_path / "bad.graphml")
    (tmp_path / "bad.yaml").write_text("name: bad\ngpus_per_node: 2\ngraphml: bad.graphml\n")
    with pytest.raises(ConfigError) as info:
        collective(load_topology(str(tmp_path / "bad.yaml")), CollectiveKind.ALL_REDUCE, 1e6, 2)
    assert info.value.field == "nodes" and info.value.path.endswith("bad.graphml")

    g = nx.Graph()
    g.add_node("gpu0", kind="gpu")
    g.add_node("gpu1", kind="gpu")
    g.add_edge("gpu0", "gpu1", latency_us=1.0)  # no bandwidth
    nx.write_graphml(g, tmp_path / "nobw.graphml")
    (tmp_path / "nobw.yaml").write_text("name: nobw\ngpus_per_node: 2\ngraphml: nobw.graphml\n")
    with pytest.raises(ConfigError, match="bandwidth_GBps"):
        collective(load_topology(str(tmp_path / "nobw.yaml")), CollectiveKind.ALL_REDUCE, 1e6, 2)

    (tmp_path / "missing.yaml").write_text("name: m\ngpus_per_node: 2\ngraphml: nowhere.graphml\n")
    with pytest.raises(ConfigError) as info:
        load_topology(str(tmp_path / "missing.yaml"))
    assert info.value.field == "graphml"


def test_graphml_size_must_match_the_workload(tmp_path):
    w = make_workload(tp=2, pp=1, dp=4, gbs=4, layers=2)
    with pytest.raises(ConfigError, match="fixed size"):
        simulate(w, load_topology(str(_ring(tmp_path, 4))))
