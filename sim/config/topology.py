"""Topology files: a scale-up domain and a scale-out fabric in, a :class:`TopologySpec` out.

The files give their numbers in human units named in the keys (``bandwidth_GBps``,
``latency_us``, ``nic_bandwidth_Gbps``); the links and efficiency curves are converted here to SI.
Scale-out bandwidths are in Gb/s, as network links are quoted (NICs, torus and dragonfly links);
scale-up and PCIe bandwidths in GB/s. Each fabric kind has its own keys (docs/topologies.md):
a key of another kind is an error rather than silently unused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import Enum
from typing import TypeVar

from sim.config.fields import Fields, apply_overrides, is_finite, is_int, is_number, located, read_yaml
from sim.config.presets import TABLES, preset_folder, preset_names, resolve_preset
from sim.errors import ConfigError
from sim.hardware import EfficiencyCurve, get_gpu, gpu_names
from sim.topology.spec import (
    DragonflySpec,
    FabricKind,
    LinkFault,
    LinkSpec,
    ScaleOutSpec,
    ScaleUpKind,
    ScaleUpSpec,
    TopologySpec,
    TorusSpec,
)
from sim.types import parse_enum
from sim.units import GBIT_PER_S, GBPS, US

E = TypeVar("E", bound=Enum)

_TOPO_KEYS = ("name", "description", "gpu", "gpus_per_node", "num_gpus", "scale_up", "scale_out",
              "sources", "graphml", "faults")
_EFF_KEYS = ("efficiency", "efficiency_by_size_bytes")
_UP_KEYS = ("kind", "domain_size", "bandwidth_GBps", "latency_us", "collective_latency_us",
            "nvls_efficiency_by_size_bytes", "alltoall_efficiency_by_size_bytes", "p2p_efficiency_by_size_bytes",
            "all_gather_efficiency_by_size_bytes", "reduce_scatter_efficiency_by_size_bytes") + _EFF_KEYS
_TREE_KEYS = ("nodes_per_leaf", "switch_latency_us", "oversubscription", "planes")
_TORUS_KEYS = ("dims", "link_bandwidth_Gbps", "link_latency_us")
_DRAGONFLY_KEYS = ("groups", "routers_per_group", "nodes_per_router", "global_links_per_router",
                   "local_bandwidth_Gbps", "local_latency_us", "global_bandwidth_Gbps", "global_latency_us")
_OUT_KEYS = (("kind", "nics_per_node", "nic_bandwidth_Gbps", "latency_us", "pcie", "alltoall_efficiency_by_size_bytes",
              "all_gather_efficiency_by_size_bytes", "reduce_scatter_efficiency_by_size_bytes")
             + _TREE_KEYS + _TORUS_KEYS + _DRAGONFLY_KEYS + _EFF_KEYS)
_PCIE_KEYS = ("bandwidth_GBps", "latency_us") + _EFF_KEYS
_TOPO_SETTABLE = ({"scale_up": _UP_KEYS, "scale_out": _OUT_KEYS}, _TOPO_KEYS[:5])
MAX_BANDWIDTH = 1e9
"""The largest bandwidth a topology file gives, in its key's unit (GB/s or Gb/s): an exabyte
per second, past any link, far from a float's range once converted to bytes/s."""
MIN_BANDWIDTH = 0.1
"""The smallest bandwidth a topology file gives, in its key's unit: 100 MB/s or 100 Mb/s, below
any link a GPU has had (PCIe 1.0 x1 carried 250 MB/s; Gigabit Ethernet 1 Gb/s). Less is a
typo, and would print iteration times of hundreds of digits."""
MIN_EFFICIENCY = 1e-4
"""The smallest fraction of its bandwidth a link may be said to reach: the finest a calibration
file writes (its efficiencies have four decimals, :data:`sim.calibrate.scale_out.MIN_EFFICIENCY`,
which a log of tiny messages reaches). The shipped curves go down to 0.075 (an 8-GPU NVLink
all-reduce of a few kilobytes); less than this is a typo, and would print iteration times of
hundreds of digits."""
MAX_LATENCY_US = 1e9
"""The largest latency a topology file gives, in microseconds (over 16 minutes)."""
MAX_OVERSUBSCRIPTION = 1e6
"""The largest leaf-to-spine oversubscription ratio."""
MAX_MESSAGE_BYTES = 2.0**60
"""The largest message size of an efficiency curve (an exbibyte)."""
_BANDWIDTH = f"a bandwidth from {MIN_BANDWIDTH:g} to {MAX_BANDWIDTH:g}"
_LATENCY = f"a non-negative latency of at most {MAX_LATENCY_US:g} us"

_DEFAULT_TOPOLOGY = {"A100-SXM4-80GB": "dgx-a100", "A100-SXM4-40GB": "dgx-a100", "H100-SXM5-80GB": "dgx-h100",
                     "H100-SXM5-96GB-HBM2e": "dgx-h100", "H200": "dgx-h100", "B200": "dgx-b200",
                     "GB200": "gb200-nvl72", "GB300": "gb200-nvl72", "H800-SXM5-80GB": "hgx-h800",
                     "A800-SXM4-80GB": "hgx-a800"}


def default_topology_name(gpu_name: str) -> str:
    """The topology preset a GPU is usually deployed in.

    >>> default_topology_name("H200")
    'dgx-h100'
    """
    try:
        return _DEFAULT_TOPOLOGY[get_gpu(gpu_name).name]
    except KeyError:
        raise ConfigError("<gpu>", "system.gpu", f"one of {sorted(_DEFAULT_TOPOLOGY)}",
                          gpu_name) from None


def load_topology(path_or_name: str, overrides: Sequence[str] = ()) -> TopologySpec:
    """Load a topology file, or a preset of the repository's ``topologies/`` folder.

    Parameters
    ----------
    path_or_name : str
        A YAML file, or a preset name such as ``dgx-a100``.
    overrides : sequence of str
        ``KEY=VALUE`` items such as ``scale_up.bandwidth_GBps=600``.

    Raises
    ------
    ConfigError
        For any malformed input, naming the file and the field.

    >>> load_topology("dgx-a100").scale_up.link.bandwidth_bytes_per_s
    300000000000.0
    """
    file = resolve_preset(path_or_name, "topologies")
    if file.stem in TABLES and file.parent.resolve() == preset_folder("topologies").resolve():
        raise ConfigError(str(path_or_name), "<file>", f"a topology ({file.stem} is a table of whatif memory or whatif "
                          f"nodes; topologies: {', '.join(preset_names('topologies'))})", str(path_or_name))
    path = str(file)
    raw = Fields(read_yaml(file), path, "", _TOPO_KEYS).raw
    f = Fields(apply_overrides(raw, overrides, _TOPO_SETTABLE), path, "", _TOPO_KEYS)
    graphml = f.text("graphml")
    if graphml is not None:
        return _graphml_topology(f, file, graphml)
    up = Fields(f.raw.get("scale_up"), path, "scale_up", _UP_KEYS)
    out = Fields(f.raw.get("scale_out"), path, "scale_out", _OUT_KEYS)
    gpu = _gpu_name(f)
    with located(path):
        return TopologySpec(
            name=f.text("name") or file.stem,
            gpus_per_node=f.integer("gpus_per_node", required=True, positive=True),
            scale_up=ScaleUpSpec(kind=_kind(up, ScaleUpKind), link=_link(up, "bandwidth_GBps", GBPS),
                                 domain_size=up.integer("domain_size", required=True, positive=True),
                                 collective_latency_s=_collective_latency_s(up),
                                 nvls_efficiency=_optional_curve(up, "nvls_efficiency_by_size_bytes"),
                                 alltoall_efficiency=_optional_curve(up, "alltoall_efficiency_by_size_bytes"),
                                 p2p_efficiency=_optional_curve(up, "p2p_efficiency_by_size_bytes"),
                                 all_gather_efficiency=_optional_curve(up, "all_gather_efficiency_by_size_bytes"),
                                 reduce_scatter_efficiency=_optional_curve(
                                     up, "reduce_scatter_efficiency_by_size_bytes")),
            scale_out=_scale_out(out), gpu=gpu, num_gpus=f.integer("num_gpus", positive=True),
            description=f.text("description") or "", faults=_faults(f), source=path)


def _optional_curve(f: Fields, key: str) -> EfficiencyCurve | None:
    """The efficiency curve ``key`` (``[[size, efficiency], ...]``) where the file gives one."""
    return _curve(f, key) if f.raw.get(key) is not None else None


def _faults(f: Fields) -> tuple[LinkFault, ...]:
    """``faults: [{between: [u, v], bandwidth_fraction: 0.5}, ...]``: links of the built graph
    (node names as ``sim.topology.build`` makes them) running slower, or failed at 0."""
    raw = f.raw.get("faults")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise f.error("faults", "a list of {between: [node, node], bandwidth_fraction: x}", raw)
    out = []
    seen: dict[frozenset, int] = {}
    for i, item in enumerate(raw):
        ff = Fields(item, f.path, f"faults[{i}]", ("between", "bandwidth_fraction"))
        pair = ff.raw.get("between")
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ff.error("between", "two node names, e.g. [nic0.0, leaf0.0]", pair)
        frac = ff.quantity("bandwidth_fraction", "a fraction in [0, 1] (0: the link has failed)", high=1.0,
                           required=True)
        link = frozenset(pair)
        if link in seen:
            raise ff.error("between", f"each link once (faults[{seen[link]}] names it; one fraction a link)", pair)
        seen[link] = i
        out.append(LinkFault(pair[0], pair[1], frac))
    return tuple(out)


def _gpu_name(f: Fields) -> str | None:
    """The topology's ``gpu``, canonical, or None."""
    gpu = f.text("gpu")
    if gpu is None:
        return None
    try:
        return get_gpu(gpu).name
    except KeyError:
        raise f.error("gpu", f"one of {gpu_names()} or null", gpu) from None


def _graphml_topology(f: Fields, file, graphml: str) -> TopologySpec:
    """A topology whose links are a GraphML file (relative to the YAML's folder): the YAML gives
    its name and GPUs per node, the graph everything else (:mod:`sim.topology.graphml`)."""
    graph_file = file.parent / graphml
    if not graph_file.is_file():
        raise f.error("graphml", "an existing GraphML file (relative to the topology file's folder)",
                      str(graph_file))
    for key in ("scale_up", "scale_out"):
        if f.raw.get(key) is not None:
            raise f.error(key, f"no {key} beside graphml (the graph gives every link)", f.raw.get(key))
    unused = LinkSpec(1.0, 0.0)  # scale_up / scale_out are not read for a GraphML topology
    gpu = _gpu_name(f)
    with located(f.path):
        return TopologySpec(
            name=f.text("name") or file.stem,
            gpus_per_node=f.integer("gpus_per_node", required=True, positive=True),
            scale_up=ScaleUpSpec(ScaleUpKind.NVSWITCH, unused, domain_size=1),
            scale_out=ScaleOutSpec(FabricKind.NONE, unused), gpu=gpu,
            num_gpus=f.integer("num_gpus", positive=True), description=f.text("description") or "",
            graph_file=str(graph_file), faults=_faults(f), source=f.path)


def _kind(f: Fields, kind: type[E]) -> E:
    return parse_enum(kind, f.text("kind", required=True), f.path, f.field("kind"))


def _scale_out(out: Fields) -> ScaleOutSpec:
    kind = _kind(out, FabricKind)
    _only_for_kind(out, kind)
    switch_us = out.quantity("switch_latency_us", _LATENCY, high=MAX_LATENCY_US) or 0.0
    oversub = out.quantity("oversubscription", f"a ratio from 1 (non-blocking) to {MAX_OVERSUBSCRIPTION:g}",
                           low=1.0, high=MAX_OVERSUBSCRIPTION)
    pcie = out.raw.get("pcie")
    nic = _link(out, "nic_bandwidth_Gbps", GBIT_PER_S)
    return ScaleOutSpec(
        kind=kind, nic=nic,
        nics_per_node=out.integer("nics_per_node", required=True, positive=True),
        nodes_per_leaf=out.integer("nodes_per_leaf", positive=True) or 32,
        switch_latency_s=switch_us * US, oversubscription=oversub or 1.0,
        pcie=None if pcie is None else
        _link(Fields(pcie, out.path, "scale_out.pcie", _PCIE_KEYS), "bandwidth_GBps", GBPS),
        planes=out.integer("planes", positive=True) or 1,
        torus=_torus(out, nic) if kind is FabricKind.TORUS else None,
        dragonfly=_dragonfly(out, nic) if kind is FabricKind.DRAGONFLY else None,
        alltoall_efficiency=_optional_curve(out, "alltoall_efficiency_by_size_bytes"),
        all_gather_efficiency=_optional_curve(out, "all_gather_efficiency_by_size_bytes"),
        reduce_scatter_efficiency=_optional_curve(out, "reduce_scatter_efficiency_by_size_bytes"))


def _only_for_kind(out: Fields, kind: FabricKind) -> None:
    """Reject a key that belongs to another fabric kind (the fat-tree keys are also accepted,
    unused, with kind ``none``)."""
    own = {FabricKind.TORUS: _TORUS_KEYS, FabricKind.DRAGONFLY: _DRAGONFLY_KEYS}.get(kind, _TREE_KEYS)
    for keys, owner in ((_TREE_KEYS, "the fat-tree kinds"), (_TORUS_KEYS, "kind torus"),
                        (_DRAGONFLY_KEYS, "kind dragonfly")):
        for key in keys:
            if out.raw.get(key) is not None and key not in own:
                raise out.error(key, f"no {key} with kind {kind.value} (it is a key of {owner}; "
                                f"kind {kind.value} takes {sorted(own)})", out.raw[key])


def _torus(out: Fields, nic: LinkSpec) -> TorusSpec:
    """``dims: [X, Y, Z]``, ``link_bandwidth_Gbps``, ``link_latency_us``."""
    dims = out.raw.get("dims")
    expected = "a list of 1 to 3 positive integers, e.g. [4, 4, 4] (routers along each dimension)"
    if dims is None:
        raise out.error("dims", f"{expected} (required for kind torus)", None)
    if not (isinstance(dims, list) and 1 <= len(dims) <= 3
            and all(is_int(k) and k >= 1 for k in dims)):
        raise out.error("dims", expected, dims)
    return TorusSpec(dims=tuple(dims), link=_network_link(out, "link", nic))


def _dragonfly(out: Fields, nic: LinkSpec) -> DragonflySpec:
    """``groups``, ``routers_per_group``, ``nodes_per_router``, optional
    ``global_links_per_router`` (default: the fewest that join every pair of groups), and the
    local and global links' ``*_bandwidth_Gbps`` and ``*_latency_us``."""
    groups = out.integer("groups", required=True, positive=True)
    routers = out.integer("routers_per_group", required=True, positive=True)
    per_router = out.integer("global_links_per_router", positive=True)
    need = math.ceil((groups - 1) / routers)
    if per_router is not None and per_router < need:
        raise out.error("global_links_per_router", f"at least ceil((groups - 1) / routers_per_group) = {need}, "
                        "so that every pair of groups is joined", per_router)
    return DragonflySpec(
        groups=groups, routers_per_group=routers,
        nodes_per_router=out.integer("nodes_per_router", required=True, positive=True),
        global_links_per_router=need if per_router is None else per_router,
        local=_network_link(out, "local", nic), global_link=_network_link(out, "global", nic))


def _network_link(f: Fields, prefix: str, nic: LinkSpec) -> LinkSpec:
    """``{prefix}_bandwidth_Gbps`` and ``{prefix}_latency_us``, with the NIC's efficiency."""
    bw_key, lat_key = f"{prefix}_bandwidth_Gbps", f"{prefix}_latency_us"
    bandwidth = f.quantity(bw_key, _BANDWIDTH, low=MIN_BANDWIDTH, high=MAX_BANDWIDTH, required=True)
    latency = f.quantity(lat_key, _LATENCY, high=MAX_LATENCY_US, required=True)
    return LinkSpec(bandwidth_bytes_per_s=bandwidth * GBIT_PER_S, latency_s=latency * US,
                    efficiency=nic.efficiency)


def _link(f: Fields, bandwidth_key: str, unit: float) -> LinkSpec:
    bandwidth = f.quantity(bandwidth_key, _BANDWIDTH, low=MIN_BANDWIDTH, high=MAX_BANDWIDTH, required=True)
    latency = f.quantity("latency_us", _LATENCY, high=MAX_LATENCY_US, required=True)
    return LinkSpec(bandwidth_bytes_per_s=bandwidth * unit, latency_s=latency * US,
                    efficiency=_efficiency(f))


def _efficiency(f: Fields) -> EfficiencyCurve:
    given = [k for k in _EFF_KEYS if f.raw.get(k) is not None]
    if len(given) != 1:
        raise f.error("efficiency", "exactly one of efficiency or efficiency_by_size_bytes", given)
    if given[0] == "efficiency":
        return EfficiencyCurve.constant(f.quantity("efficiency", f"a fraction from {MIN_EFFICIENCY:g} to 1",
                                                   low=MIN_EFFICIENCY, high=1.0, required=True))
    return _curve(f, "efficiency_by_size_bytes")


def _curve(f: Fields, key: str) -> EfficiencyCurve:
    """``[[message bytes, fraction], ...]``: sizes positive, finite and increasing, fractions in
    (0, 1]; an error names the pair that is not."""
    pairs = f.raw[key]
    expected = f"a list of [message bytes, fraction] pairs, sizes increasing, fractions from {MIN_EFFICIENCY:g} to 1"
    if not (isinstance(pairs, list) and pairs):
        raise f.error(key, expected, pairs)
    out: list[tuple[float, float]] = []
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2 and all(map(is_number, pair))):
            raise f.error(f"{key}[{i}]", "a [message bytes, fraction] pair", pair)
        size, eff = pair
        if not (is_finite(size) and 0 < size <= MAX_MESSAGE_BYTES):
            raise f.error(f"{key}[{i}]", "a message size in bytes, positive and at most 2^60", size)
        if not (is_finite(eff) and MIN_EFFICIENCY <= eff <= 1):
            raise f.error(f"{key}[{i}]", f"an efficiency from {MIN_EFFICIENCY:g} to 1", eff)
        if out and not size > out[-1][0]:
            raise f.error(f"{key}[{i}]", f"a size above the previous pair's {out[-1][0]:g} (sizes increase)", size)
        out.append((float(size), float(eff)))
    return EfficiencyCurve(tuple(out))


def _collective_latency_s(f: Fields) -> float:
    """``scale_up.collective_latency_us`` (default 0: the hops' latency only)."""
    value = f.quantity("collective_latency_us", _LATENCY, high=MAX_LATENCY_US)
    return 0.0 if value is None else value * US
