"""A user's own topology, from a GraphML file (any graph NetworkX reads).

The file describes GPUs, switches and links; :func:`read_graphml_topology` turns it into the
same directed link graph :func:`sim.topology.build.build_topology` produces, so routing and the
engine treat it like a preset. What the file must carry:

* nodes: GPUs have ``kind="gpu"`` and ids ``gpu0`` .. ``gpu{N-1}`` (rank order), with ``node``
  (their server's index, default 0) and optionally ``local_gpu``; every other node is a switch
  or NIC (any ``kind``, default ``"switch"``);
* edges: ``bandwidth_GBps`` (per direction) and ``latency_us``; optionally ``link``
  (``nvlink``, ``pcie`` or ``network``, default ``network``: it sets the routing preference
  and what counts as one scale-up domain) and ``efficiency`` (the achievable fraction, default
  1). An undirected graph's edge is a link each way.

>>> import networkx as nx, tempfile, os
>>> g = nx.Graph()
>>> g.add_node("gpu0", kind="gpu"); g.add_node("gpu1", kind="gpu"); g.add_node("sw", kind="switch")
>>> g.add_edge("gpu0", "sw", bandwidth_GBps=100.0, latency_us=1.0)
>>> g.add_edge("gpu1", "sw", bandwidth_GBps=100.0, latency_us=1.0)
>>> path = os.path.join(tempfile.mkdtemp(), "two.graphml"); nx.write_graphml(g, path)
>>> d = read_graphml_topology(path)
>>> d.number_of_edges(), d.edges["gpu0", "sw"]["bandwidth_bytes_per_s"]
(4, 100000000000.0)
"""

from __future__ import annotations

import io
import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import ConfigError
from sim.hardware import EfficiencyCurve
from sim.inputs import read_input_bytes
from sim.topology.fabrics import HOP_WEIGHT
from sim.types import LinkKind, NodeKind
from sim.units import GBPS, US

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["read_graphml_topology"]


MAX_BANDWIDTH_GBPS = 1e9
"""The largest link bandwidth a GraphML file gives, in GB/s (as a topology YAML's)."""
MAX_LATENCY_US = 1e9
"""The largest link latency a GraphML file gives, in microseconds (as a topology YAML's)."""


def _number(d: dict, key: str, where: str, field: str, default: float | None = None) -> float:
    """Attribute ``key`` as a finite number (GraphML's ``double`` reads ``INF`` and ``NaN``)."""
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(where, f"{field}: {key}", f"a finite number attribute '{key}'", value)
    return float(value)


def _index(d: dict, key: str, where: str, field: str, default: int) -> int:
    """Attribute ``key`` as a non-negative integer (an int, or a number or text that is one)."""
    value = d.get(key, default)
    if isinstance(value, str):
        value = value.strip()
        value = int(value) if value.isdigit() and len(value) <= 18 else value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        raise ConfigError(where, f"{field}: {key}", f"a non-negative integer attribute '{key}'", value)
    return value


def read_graphml_topology(path: str | Path) -> nx.DiGraph:
    """The directed link graph described by the GraphML file ``path`` (see the module doc)."""
    import networkx as nx

    where = str(path)
    data = read_input_bytes(path, "GraphML file")
    try:
        src = nx.read_graphml(io.BytesIO(data))
    except (ET.ParseError, nx.NetworkXError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(where, "<file>", "a readable GraphML file", str(exc)) from None
    gpus = [n for n, d in src.nodes(data=True) if d.get("kind") == NodeKind.GPU.value]
    expected = [f"gpu{i}" for i in range(len(gpus))]
    if not gpus or sorted(gpus) != sorted(expected):
        raise ConfigError(where, "nodes", "GPU nodes (kind=gpu) named gpu0 .. gpuN-1", sorted(gpus)[:8])
    g = nx.DiGraph(name=Path(path).stem)
    for n, d in src.nodes(data=True):
        if d.get("kind") == NodeKind.GPU.value:
            r = int(n[3:])
            node = _index(d, "node", where, f"node {n}", 0)
            g.add_node(n, kind=NodeKind.GPU, rank=r, node=node, local_gpu=_index(d, "local_gpu", where, f"node {n}", r))
        else:
            g.add_node(n, kind=NodeKind.NIC if d.get("kind") == NodeKind.NIC.value else NodeKind.SWITCH)
    for u, v, d in src.edges(data=True):
        field = f"edge {u}-{v}"
        bw = _number(d, "bandwidth_GBps", where, field)
        lat = _number(d, "latency_us", where, field)
        eff = _number(d, "efficiency", where, field, 1.0)
        link = d.get("link", LinkKind.NETWORK.value)
        if not (0 < bw <= MAX_BANDWIDTH_GBPS and 0 <= lat <= MAX_LATENCY_US and 0 < eff <= 1
                and isinstance(link, str) and link in HOP_WEIGHT):
            kinds = sorted(k.value for k in HOP_WEIGHT)
            raise ConfigError(where, field, f"bandwidth_GBps in (0, {MAX_BANDWIDTH_GBPS:g}], latency_us in "
                              f"[0, {MAX_LATENCY_US:g}], efficiency in (0, 1] and link one of {kinds}",
                              dict(d))
        for a, b in ((u, v),) if src.is_directed() else ((u, v), (v, u)):
            g.add_edge(a, b, bandwidth_bytes_per_s=bw * GBPS, latency_s=lat * US,
                       efficiency=EfficiencyCurve.constant(eff), link=LinkKind(link), hop_weight=HOP_WEIGHT[link])
    reached = nx.descendants(g, expected[0])  # one search, not one per GPU
    unreachable = [r for r in expected[1:] if r not in reached]
    if unreachable:
        raise ConfigError(where, "edges", "a path from gpu0 to every GPU", unreachable[:8])
    return g
