"""Communication plans: collectives and p2p sends as phases of flows over the topology.

Algorithms, as NCCL runs them on one node or across nodes:

* **ring** (Patarasuk and Yuan 2009; NCCL's ring): ``p`` ranks in a ring, each sending to
  the next. All-reduce moves ``2(p-1)/p x S`` bytes per rank in ``2(p-1)`` steps,
  all-gather and reduce-scatter ``(p-1)/p x S`` in ``p-1`` steps (nccl-tests
  doc/PERFORMANCE.md, "bus bandwidth"). Time alone on a uniform ring:
  ``steps x a + bus_bytes / B``.
* **multi-channel ring** (used when a group spans scale-up domains with more than one member
  in some, as NCCL's ring algorithm runs across nodes): ``m`` rings over the whole group, ``m``
  the fewest members any domain holds (``k`` where every domain holds ``k``), each carrying
  ``1/m`` of the data, each entering and leaving a domain on a different GPU, so that ``m`` of
  each domain's NICs carry one ring's crossing each and the NVLink ports carry the rest (NCCL
  builds one ring per channel, rail-matched between nodes: NVIDIA/nccl ``src/graph/rings.cc``,
  ``search.cc``; it searches each node's channels on that node's GPUs and NICs and keeps the
  fewest any node found, :func:`channel_count`). Its bus bandwidth is the lesser of NVLink's
  and ``m`` NICs'. Its latency is NCCL's for the protocol NCCL's tuner picks at the message
  size and rank count (LL for small messages, LL128 or Simple for large ones): each step
  inside a node at that protocol's NVLink hop latency, each step between nodes at its network
  hop latency, and its bytes at that protocol's share of the bandwidth
  (:mod:`sim.costs.nccl_protocol`).
* **hierarchical** (kept for comparison, not chosen): reduce-scatter inside each domain, the
  collective on ``S/k`` across domains among ranks with the same local index, all-gather inside
  each domain, one phase after another.
* **NVLS** (NVLink SHARP, all-reduce inside one NVSwitch domain that supports it): each GPU
  sends its buffer to the switch, which reduces it, reads back its reduced shard, writes it,
  and the switch multicasts every shard to every GPU; each GPU link carries ``(1 + 1/n) S``
  each way (hence NVLS's bus bandwidth rising with ``n``: 370, 420, 440, 460, 480 GB/s for
  4-8 H100s in NVIDIA/nccl #1455, reproduced with one efficiency curve). Latency: NCCL's NVLS
  latency on NVLink, 25 us (``src/graph/tuning.cc``, ``hwLat[NVLINK][NVLS][SIMPLE]``).
* **NVLS-tree** (NCCL >= 2.18, all-reduce across NVLS domains each holding the same number
  ``k >= 2`` of the group): NVLS inside each domain (each GPU's switch port carries
  ``(1 + 1/k) S`` each way, as NVLS's) while each GPU's ``S / k`` shard crosses the domains on
  its own NIC in two binary trees over them (rail-matched: local GPU ``j`` with the other
  domains' ``j``; the second tree over the domains in reverse order), each carrying half the
  shard up and down: ``S / k`` each way on a NIC between two domains, ``2 S / k`` with more
  (NCCL's ``bwInter / 2`` for ``nNodes > 2``). All at once, pipelined. Latency NCCL's:
  ``hwLat[NVLINK][NVLS_TREE] + 2 log2(D) hwLat[NET][NVLS_TREE]``, 25 us and 14 us
  (``src/graph/tuning.cc``, v2.26.2; ``log2i``, rounded down). NCCL's engineers: "You should
  see NVLS being used with single-node runs, NVLSTree with multi-node" (NVIDIA/nccl-tests #309).
* **tree** (NCCL's double binary tree, all-reduce across domains): per channel (as many as the
  channel rings), a chain through the domain's GPUs and two binary trees over the domains (the
  second over the domains in reverse order, so a domain interior to one is a leaf of the
  other), each tree reducing half the data up and broadcasting it down, pipelined (all flows
  at once). Latency ``2 ((k-1) h_intra + ceil(log2 D) h_inter)`` as NCCL models it (``k`` the
  group's ranks over ``D``, rounded down); bandwidth times 0.92, NCCL's tree all-reduce
  correction (``tuning.cc``: ``busBw = std::min(busBw*.92, ...)``).
* **PAT** (NCCL >= 2.23, all-gather and reduce-scatter with one rank in every domain,
  ``ncclPatEnable``: ``nNodes != nRanks`` turns it off): the ring's bytes in ``ceil(log2 p)``
  latency steps, bandwidth times 0.75 (``tuning.cc``: ``if (a == NCCL_ALGO_PAT) busBw *=
  .75``).
* **p2p**: one flow along the route.
* **direct all-to-all** (NCCL's ``ncclAllToAll``: a send and a receive to every peer, all at
  once): each rank sends ``S / p`` to each of the ``p - 1`` others, every flow on its own
  route, so NVLink and the NICs carry them concurrently and the flow network shares what
  they share. ``S`` is the send buffer per rank (nccl-tests ``alltoall``).

Each flow's bytes are divided by the efficiency its bottleneck link reaches at that message
size (nccl-tests bus bandwidth over the link's peak), so the flow network can run links at
their raw bandwidth. Every collective also pays the topology's fixed collective latency
(``scale_up.collective_latency_us``: what nccl-tests measure at the smallest sizes, less the
hops; ``benchmarks/nccl/derive_curves.py``), and the op's own ``issue_s`` (what the framework
spends issuing it, e.g. a tensor-list collective's per-rank copies).

With ``algorithm="auto"`` the planner prices the candidates NCCL's tuner weighs for the op
and the group (ring or channel rings; tree for an all-reduce across domains, whether or not
they hold equal numbers of the group's ranks, as NCCL's tuner turns neither off for unequal
nodes; NVLS for an all-reduce inside an NVLS domain, NVLS-tree for one across NVLS domains;
PAT for all-gather and reduce-scatter with
one rank in every domain) with the same alpha-beta estimate for each (latency plus the
busiest link's bytes over its bandwidth) and keeps the fastest, as ``ncclTopoTuneModel`` does.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from itertools import chain

import numpy as np

from sim.costs import nccl_protocol
from sim.costs.base import CommPlan, Flow, Phase
from sim.hardware import EfficiencyCurve
from sim.topology.routing import Fabric
from sim.types import CollectiveAlgorithm, CollectiveKind, CommKernel, NcclProtocol
from sim.workload.ops import CommOp

__all__ = ["plan_comm", "nccl_ctas", "kernel_sms", "channel_count", "hit_probability", "dedup_fractions",
           "NVLS_LATENCY_S", "NVLS_TREE_NET_LATENCY_S",
           "TREE_BANDWIDTH_FACTOR",
           "PAT_BANDWIDTH_FACTOR",
           "CTAS_IN_DOMAIN", "CTAS_NVLS", "CTAS_PER_NODE_GPU", "CTAS_ACROSS_DOMAINS"]

NVLS_LATENCY_S = 25e-6
"""NCCL's latency of an NVLS collective on NVLink (NVIDIA/nccl ``src/graph/tuning.cc``,
``hwLat[NCCL_HW_NVLINK][NCCL_ALGO_NVLS][NCCL_PROTO_SIMPLE] = 25`` us)."""
NVLS_TREE_NET_LATENCY_S = 14e-6
"""NCCL's latency of an NVLS-tree step between nodes (``tuning.cc`` v2.26.2,
``hwLat[NCCL_HW_NET][NCCL_ALGO_NVLS_TREE][NCCL_PROTO_SIMPLE] = 14`` us; its NVLink part is
``hwLat[NCCL_HW_NVLINK][NCCL_ALGO_NVLS_TREE][NCCL_PROTO_SIMPLE] = 25`` us, as NVLS's)."""
TREE_BANDWIDTH_FACTOR = 0.92
"""NCCL's tree all-reduce bandwidth correction (``tuning.cc``, ``busBw*.92``)."""
PAT_BANDWIDTH_FACTOR = 0.75
"""NCCL's PAT bandwidth correction (``tuning.cc``, ``busBw *= .75``)."""

# NCCL runs one CTA per channel, each on an SM of its own ("NCCL CTAs won't share an SM with
# compute kernels", NVIDIA/nccl issue #689), as many channels as it set up for the communicator
# once the message is large enough (it trims them for small ones; not modelled).
CTAS_IN_DOMAIN = 24
"""Channels of a ring collective inside one NVSwitch node: 24 on 8 x A100 (NVIDIA/nccl-tests
issue #100, HGX A100: "Channel 23/24"; other A100 logs: "24 coll channels") and on 8 x H100
(aws-samples/aws-do-eks ``Container-Root/eks/deployment/nccl-test/README.md``, p5.48xlarge one
node: "24 coll channels, 16 nvls channels")."""
CTAS_NVLS = 16
"""Channels of an NVLS all-reduce on 8 x H100 (same log: "16 nvls channels")."""
CTAS_PER_NODE_GPU = 2
"""Channels per member GPU of each node of a collective across nodes (of the node with the
fewest members where they differ: :func:`channel_count`): a GPU drives its own NIC with two
channels ("a PCI system with a single NIC ... should just launch 2 SMs", NCCL's maintainer in
NVIDIA/nccl issue #689) ..."""
CTAS_ACROSS_DOMAINS = 16
"""... up to 16 for 8 GPUs per node ("on DGX with 8 NICs ... it would use 16 SMs", same
thread; p5.48xlarge two nodes: "16 coll channels", aws-do-eks log above)."""


def nccl_ctas(fabric: Fabric, op: CommOp, algorithm: str) -> int:
    """SMs the NCCL kernel of collective ``op``, run by ``algorithm`` (a plan's), holds on
    each member GPU while it runs: one per channel. Pipeline sends, ring exchanges and
    all-to-alls (NCCL's p2p channels, one or two per peer across nodes) are not counted: 0.

    >>> from sim.config import load_topology
    >>> from sim.topology.build import build_topology
    >>> from sim.types import CommClass
    >>> fab = Fabric(build_topology(load_topology("dgx-a100"), 16))
    >>> tp = CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, tuple(range(8)), 2**26)
    >>> dp = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, (0, 8), 2**26)
    >>> nccl_ctas(fab, tp, "ring"), nccl_ctas(fab, dp, "ring"), nccl_ctas(fab, dp, "p2p")
    (24, 2, 0)
    """
    if algorithm in ("nvls", "nvls-tree"):
        return CTAS_NVLS
    if algorithm not in ("ring", "multi-ring", "tree", "pat", "hierarchical"):
        return 0
    doms = _domains(fabric, op.group)
    if len(doms) == 1:
        return CTAS_IN_DOMAIN
    return min(CTAS_PER_NODE_GPU * channel_count([len(d) for d in doms]), CTAS_ACROSS_DOMAINS)


def kernel_sms(fabric: Fabric, op: CommOp, algorithm: str) -> int:
    """SMs the kernel running ``op`` holds on each member GPU: NCCL's channels
    (:func:`nccl_ctas`) for an NCCL collective; what its userbuffers or symmetric-memory kernel
    is configured with otherwise (``op.kernel_sms``, 0 on the copy engines;
    :mod:`sim.workload.tp_overlap`).

    >>> from sim.config import load_topology
    >>> from sim.topology.build import build_topology
    >>> from sim.types import CommClass
    >>> fab = Fabric(build_topology(load_topology("dgx-a100"), 8))
    >>> ag = CommOp(CollectiveKind.ALL_GATHER, CommClass.TP, tuple(range(8)), 2**26)
    >>> ub = CommOp(CollectiveKind.ALL_GATHER, CommClass.TP, tuple(range(8)), 2**26, (), CommKernel.USERBUFFERS, 16)
    >>> kernel_sms(fab, ag, "ring"), kernel_sms(fab, ub, "ring")
    (24, 16)
    """
    if op.kernel is CommKernel.NCCL:
        return nccl_ctas(fabric, op, algorithm)
    return op.kernel_sms


def _efficiency_at(size_bytes: float):
    """``route -> route.efficiency(size_bytes)``, each efficiency curve evaluated once: a plan
    over thousands of ranks has as many routes but a few curves (one per link kind)."""
    memo: dict[int, float] = {}

    def of(route) -> float:
        curve = route.efficiency
        e = memo.get(id(curve))  # the fabric's routes hold their curves for the plan's lifetime
        if e is None:
            e = memo[id(curve)] = curve(size_bytes)
        return e

    return of


def _between_efficiency(fabric: Fabric, kind: CollectiveKind, size_bytes: float) -> float | None:
    """The efficiency at ``size_bytes`` of an all-gather's or reduce-scatter's ring hops between
    scale-up domains where the collective has a curve of its own there
    (``scale_out.all_gather_efficiency_by_size_bytes``, ``reduce_scatter_efficiency_by_size_bytes``,
    which ``llmsim calibrate`` fits to a log across nodes); None: each hop at its route's."""
    curve = fabric.scale_out_all_gather_efficiency if kind is CollectiveKind.ALL_GATHER else \
        fabric.scale_out_reduce_scatter_efficiency if kind is CollectiveKind.REDUCE_SCATTER else None
    return None if curve is None else curve(size_bytes)


def _ring_steps(kind: CollectiveKind, p: int) -> tuple[int, float]:
    """(steps, bus-bytes factor) of a ring collective over ``p`` ranks."""
    if kind is CollectiveKind.ALL_REDUCE:
        return 2 * (p - 1), 2.0 * (p - 1) / p
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        return p - 1, (p - 1) / p
    raise ValueError(f"no ring form for {kind}")


def _ring_phase(fabric: Fabric, kind: CollectiveKind, rings: list[tuple[int, ...]], size_bytes: float,
                loads: Counter | None, own: EfficiencyCurve | None = None) -> Phase:
    """One ring collective on every ring in ``rings`` at once (they are siblings), each flow at
    its route's efficiency, or at the collective's ``own`` curve (:func:`_own_ring_curve`)."""
    p = len(rings[0])
    if p == 1 or size_bytes <= 0:
        return Phase(0.0)
    steps, factor = _ring_steps(kind, p)
    bus = factor * size_bytes
    flows = []
    worst_latency = 0.0
    efficiency = _efficiency_at(size_bytes)
    between = _between_efficiency(fabric, kind, size_bytes)
    fixed = own(size_bytes) if own is not None else None
    for ring in rings:
        for i, src in enumerate(ring):
            dst = ring[(i + 1) % p]
            route = fabric.route(src, dst)
            worst_latency = max(worst_latency, route.latency_s)
            e = fixed if fixed is not None else \
                efficiency(route) if between is None or fabric.same_domain((src, dst)) else between
            eff_bytes = bus / e
            flows.append((src, dst, eff_bytes, route.links))
    return _phase(steps * worst_latency, flows, loads)


def channel_count(sizes: list[int]) -> int:
    """Channels of NCCL's rings and trees over scale-up domains holding ``sizes`` members of
    the group each: the fewest members of any domain.

    NCCL searches each node's channels on that node's GPUs and NICs alone (with MNNVL, each
    NVLink clique is one node: ``ncclTopoGetSystem`` fuses the clique's topology,
    ``src/graph/topo.cc``), one channel per NIC it can drive (``ncclTopoCompute``,
    ``src/graph/search.cc``), and then keeps the fewest any node found for every node
    (``initTransportsRank``, ``src/init.cc``: ``graphs[a]->nChannels =
    std::min(allGather3Data[i].graphInfo[a].nChannels, graphs[a]->nChannels)``; NVIDIA/nccl
    v2.27.7-1). A domain with ``k`` members gives ``k`` channels here (one per member's NIC),
    so the domain with the fewest members sets the count.

    >>> channel_count([8, 8]), channel_count([72, 28]), channel_count([2, 6, 6])
    (8, 28, 2)
    """
    return min(sizes)


def _ring_order(k: int, entry: int, exit_: int) -> list[int]:
    """The order in which a channel ring visits the ``k`` members of one domain (by index):
    in at ``entry``, through every other member, out at ``exit_``."""
    if k == 1:
        return [0]
    if entry == exit_:  # one channel: in at the first member, out at the last
        return list(range(k))
    if k == 2:
        return [entry, exit_]
    return [entry] + [i for i in ((entry + j) % k for j in range(1, k)) if i != exit_] + [exit_]


def _channel_rings(fabric: Fabric, group: tuple[int, ...]) -> list[tuple[int, ...]]:
    """NCCL-style rings over ``group`` (members split by scale-up domain): one per channel,
    ``m`` = the fewest members of any domain (:func:`channel_count`). Ring ``c`` enters the
    ``n``-th domain at local index ``(c + n) mod m``, visits the domain's other members and
    leaves at ``(c + n + 1) mod m``, where the next domain's entry has the same index (the
    same rail), as NCCL connects channel ``c`` of each node to channel ``c`` of the next
    (``connectRings``, ``src/graph/connect.cc``, NVIDIA/nccl v2.27.7-1). With ``k`` members in
    every domain, ``m = k`` and every member's NIC carries one ring's crossing; with unequal
    domains the larger ones cross on ``m`` of their members' NICs."""
    doms = _domains(fabric, group)
    m = channel_count([len(d) for d in doms])
    rings = []
    for c in range(m):
        order: list[int] = []
        for n, dom in enumerate(doms):
            idx = _ring_order(len(dom), (c + n) % m, (c + n + 1) % m)
            order += [dom[i] for i in idx]
        rings.append(tuple(order))
    return rings


def _multi_ring_phase(fabric: Fabric, kind: CollectiveKind, groups: list[tuple[int, ...]], size_bytes: float,
                      loads: Counter | None, protocol: tuple[float, float] = (0.0, 1.0)) -> Phase:
    """One collective as ``m`` channel rings per group (:func:`_channel_rings`), each moving
    ``1/m`` of the bytes; ``protocol``: the latency it adds and the bytes factor it sets (:func:`_ring_protocol`)."""
    p = len(groups[0])
    steps, factor = _ring_steps(kind, p)
    extra_s, bytes_factor = protocol
    flows = []
    worst_latency = 0.0
    efficiency = _efficiency_at(size_bytes)
    between = _between_efficiency(fabric, kind, size_bytes)
    for g in groups:
        rings = _channel_rings(fabric, g)
        share = factor * size_bytes / len(rings) * bytes_factor
        for ring in rings:
            for i, src in enumerate(ring):
                dst = ring[(i + 1) % p]
                route = fabric.route(src, dst)
                worst_latency = max(worst_latency, route.latency_s)
                e = efficiency(route) if between is None or fabric.same_domain((src, dst)) else between
                flows.append((src, dst, share / e, route.links))
    return _phase(max(steps * worst_latency + extra_s, 0.0), flows, loads)


def _ring_protocol(fabric: Fabric, op: CommOp) -> tuple[float, float]:
    """What the protocol NCCL would run ``op`` with as channel rings across domains changes
    in :func:`_multi_ring_phase`: ``(latency to add, bytes factor)``.

    The ring's steps are priced at LL's hop latency (the topology's), the slowest hop for
    every step; NCCL prices a ring across nodes at the protocol its tuner picks for the size
    and rank count, each intra-node step at the NVLink figure and each inter-node step at the
    network's (:mod:`sim.costs.nccl_protocol`). The difference is added, and the bytes are
    divided by the protocol's bandwidth factor (LL's quarter, LL128's 0.92). Neither double
    counts a measurement: the cross-node bandwidth is the NIC's at nccl-tests' largest sizes
    (``scale_out.efficiency``), where Simple runs and latency is negligible, and rings inside
    one domain, whose curves were derived at LL's hops (``benchmarks/nccl/derive_curves.py``),
    are not changed. The protocol is chosen from ``op``'s own group, as every rank of an NCCL
    communicator chooses the same; NCCL's base latency beyond LL's is added (LL's is in the
    topology's fixed collective latency). Simple's bandwidth time, which the choice weighs, is
    the rings' on the busier of the links they load, a NIC or a GPU's NVLink port, so that the
    protocol chosen is the fastest in the flow network too (a faster link never slows a plan)."""
    doms = _domains(fabric, op.group)
    sizes = [len(d) for d in doms]
    m, nd, p = channel_count(sizes), len(doms), len(op.group)
    if nd < 2 or max(sizes) < 2:
        return 0.0, 1.0
    steps, factor = _ring_steps(op.collective, p)
    inter_steps = 2 * nd if op.collective is CollectiveKind.ALL_REDUCE else nd - 1
    # ring 0 of _channel_rings: its first hop inside the first domain of two members or more,
    # and its hop out of the first domain into the second
    n = next(i for i, size in enumerate(sizes) if size > 1)
    order = _ring_order(sizes[n], n % m, (n + 1) % m)
    intra_s = fabric.route(doms[n][order[0]], doms[n][order[1]]).latency_s
    leave = _ring_order(sizes[0], 0, 1 % m)[-1]
    out = fabric.route(doms[0][leave], doms[1][_ring_order(sizes[1], 1 % m, 2 % m)[0]])
    # Simple's bandwidth time, at the busier of the rings' two kinds of links as the flow network
    # loads them: each NIC carries one ring's crossing (1/m of the bytes), each GPU's NVLink port
    # its share of the m rings' hops inside the domain, (k - 1) / k of the bytes
    intra = fabric.route(doms[n][order[0]], doms[n][order[1]])
    size = op.size_bytes
    simple_s = factor * size * max(1.0 / m / (out.bottleneck_bytes_per_s * out.efficiency(size)),
                                   (sizes[n] - 1) / sizes[n] / (intra.bottleneck_bytes_per_s * intra.efficiency(size)))
    proto = nccl_protocol.ring_protocol(steps, inter_steps, intra_s, out.latency_s, simple_s)
    latency = nccl_protocol.ring_protocol_latency_s(proto, steps, inter_steps, intra_s, out.latency_s)
    extra = latency - nccl_protocol.RING_BASE_LATENCY_S[NcclProtocol.LL] - steps * max(intra_s, out.latency_s)
    return extra, 1.0 / nccl_protocol.RING_BANDWIDTH_FACTOR[proto]


def _phase(latency_s: float, flows: list, loads: Counter | None) -> Phase:
    if loads is None:
        return Phase(latency_s, tuple(Flow(s, d, b, links, (1.0,) * len(links)) for s, d, b, links in flows))
    # Representative mode: every flow of every replica loads its links; each flow carries
    # the count of flows of the whole job on each of its links.
    count = Counter(chain.from_iterable(links for *_, links in flows))
    return Phase(latency_s, tuple(Flow(s, d, b, links, tuple(float(count[link]) for link in links))
                                  for s, d, b, links in flows))


def _domains(fabric: Fabric, group: tuple[int, ...]) -> list[list[int]]:
    """Split ``group`` into its members per scale-up domain, in order of first appearance."""
    many = fabric.domain_keys(group) if len(group) > 64 else None
    keys = many.tolist() if many is not None else [fabric.domain_key(r) for r in group]
    if None not in keys:
        by_key: dict[int, list[int]] = {}
        for r, k in zip(group, keys):
            by_key.setdefault(k, []).append(r)
        return list(by_key.values())
    out: list[list[int]] = []
    for r in group:
        for d in out:
            if fabric.same_domain((d[0], r)):
                d.append(r)
                break
        else:
            out.append([r])
    return out


def _collective_latency_s(fabric: Fabric) -> float:
    """The topology's fixed latency of one collective (set by the builder from the preset)."""
    return fabric.collective_latency_s


def _with_latency(plan: CommPlan, extra_s: float) -> CommPlan:
    if extra_s <= 0 or not plan.phases:
        return plan
    first = plan.phases[0]
    return CommPlan((Phase(first.latency_s + extra_s, first.flows),) + plan.phases[1:], plan.algorithm)


def estimate_s(fabric: Fabric, plan: CommPlan) -> float:
    """An alpha-beta estimate of ``plan`` alone: each phase's latency plus its busiest link's
    bytes over that link's bandwidth (what NCCL's tuner weighs; exact for the symmetric plans
    here when one link is the bottleneck)."""
    cap = fabric.capacity_bytes_per_s
    total = 0.0
    for ph in plan.phases:
        load: dict[int, float] = {}
        get = load.get
        for f in ph.flows:
            b = f.size_bytes
            for link in f.links:
                load[link] = get(link, 0.0) + b
        total += ph.latency_s + max((b / cap[link] for link, b in load.items()), default=0.0)
    return total


def _nvls_phase(fabric: Fabric, groups: list[tuple[int, ...]], size_bytes: float, loads: Counter | None) -> Phase:
    """NVLS all-reduce: ``(1 + 1/n) S`` up each GPU's switch port and down it."""
    curve = fabric.nvls_efficiency
    flows = []
    for g in groups:
        n = len(g)
        per_link = (1 + 1 / n) * size_bytes / curve(size_bytes)
        for r in g:
            other = g[1] if r == g[0] else g[0]
            up, down = fabric.route(r, other).links[0], fabric.route(other, r).links[-1]
            flows.append((r, other, per_link, (up,)))
            flows.append((other, r, per_link, (down,)))
    return _phase(NVLS_LATENCY_S, flows, loads)


def _nvls_possible(fabric: Fabric, group: tuple[int, ...]) -> bool:
    """An NVLS domain (the preset gives NVLS's efficiency) holding the whole group, every GPU
    one switch hop from the others."""
    if fabric.nvls_efficiency is None or len(group) < 2 or not fabric.same_domain(group):
        return False
    return all(len(fabric.route(group[0], r).links) == 2 for r in group[1:])


def _nvls_tree_possible(fabric: Fabric, group: tuple[int, ...]) -> bool:
    """Several domains, each an NVLS domain holding the same number (at least 2) of the group."""
    if fabric.nvls_efficiency is None:
        return False
    doms = _domains(fabric, group)
    return len(doms) > 1 and len(doms[0]) > 1 and all(len(d) == len(doms[0]) for d in doms) \
        and all(_nvls_possible(fabric, tuple(d)) for d in doms)


def nvls_tree_latency_s(domains: int, hop_inter_s: float) -> float:
    """NCCL's latency of an NVLS-tree all-reduce over ``domains`` nodes whose LL hop between
    nodes takes ``hop_inter_s`` on the topology (the module docstring): NVLS's 25 us and two
    steps a tree level between nodes, each NCCL's 14 us scaled by the topology's hop over
    NCCL's 2.7 us LL ring hop (as :mod:`sim.costs.nccl_protocol` scales the ring's), so a
    topology with slower hops keeps them slower.

    >>> round(nvls_tree_latency_s(2, 2.7e-6) * 1e6, 1), round(nvls_tree_latency_s(5, 2.7e-6) * 1e6, 1)
    (53.0, 81.0)
    """
    step = hop_inter_s * NVLS_TREE_NET_LATENCY_S / nccl_protocol.RING_NET_HOP_S[NcclProtocol.LL]
    return NVLS_LATENCY_S + 2 * int(math.log2(domains)) * step


def _nvls_tree_phase(fabric: Fabric, groups: list[tuple[int, ...]], size_bytes: float,
                     loads: Counter | None) -> Phase:
    """NVLS-tree all-reduce (the module docstring): NVLS's port flows in every domain and, per
    local GPU, two binary trees over the domains through its NIC, all at once."""
    curve = fabric.nvls_efficiency
    efficiency = _efficiency_at(size_bytes)
    flows = []
    latency = 0.0
    for g in groups:
        doms = _domains(fabric, g)
        k, nd = len(doms[0]), len(doms)
        per_port = (1 + 1 / k) * size_bytes / curve(size_bytes)
        for dom in doms:
            for r in dom:
                other = dom[1] if r == dom[0] else dom[0]
                flows.append((r, other, per_port, (fabric.route(r, other).links[0],)))
                flows.append((other, r, per_port, (fabric.route(other, r).links[-1],)))
        share = size_bytes / (2 * k)
        hop_inter = 0.0
        for j in range(k):
            heads = [dom[j] for dom in doms]
            for order in (list(range(nd)), list(range(nd))[::-1]):
                for i in range(1, nd):
                    a, b = heads[order[i]], heads[order[(i - 1) // 2]]
                    for src, dst in ((a, b), (b, a)):
                        route = fabric.route(src, dst)
                        hop_inter = max(hop_inter, route.latency_s)
                        flows.append((src, dst, share / efficiency(route), route.links))
        latency = max(latency, nvls_tree_latency_s(nd, hop_inter))
    return _phase(latency, flows, loads)


def _tree_phase(fabric: Fabric, groups: list[tuple[int, ...]], size_bytes: float, loads: Counter | None) -> Phase:
    """NCCL's tree all-reduce: ``m`` channels (:func:`channel_count`: one per GPU of the
    domain with the fewest, each entering the domains on its own rail), each a chain through
    every domain's members and two binary trees over the domains, each tree carrying half the
    channel's data up and down.

    The latency is NCCL's, ``2 ((p / D - 1) h_intra + ceil(log2 D) h_inter)`` with ``p / D``
    the group's ranks per domain rounded down as NCCL's tuner counts them with unequal domains
    (``ncclTopoTuneModel``, ``src/graph/tuning.cc``: ``nRanks/nNodes``, an integer division;
    NVIDIA/nccl v2.27.7-1)."""
    flows = []
    latency = 0.0
    efficiency = _efficiency_at(size_bytes)
    for g in groups:
        doms = _domains(fabric, g)
        m, nd = channel_count([len(d) for d in doms]), len(doms)
        share = size_bytes / (2 * m) / TREE_BANDWIDTH_FACTOR
        hop_intra = hop_inter = 0.0
        for c in range(m):
            chains = [[dom[(c + j) % len(dom)] for j in range(len(dom))] for dom in doms]
            heads = [ch[0] for ch in chains]
            pairs = [(ch[j], ch[j + 1]) for ch in chains for j in range(len(ch) - 1)]
            pairs = pairs + pairs  # both trees run through the same chains
            for order in (list(range(nd)), list(range(nd))[::-1]):
                pairs += [(heads[order[i]], heads[order[(i - 1) // 2]]) for i in range(1, nd)]
            for a, b in pairs:
                for src, dst in ((a, b), (b, a)):
                    route = fabric.route(src, dst)
                    flows.append((src, dst, share / efficiency(route), route.links))
            chain = next((ch for ch in chains if len(ch) > 1), None)
            if chain is not None:
                hop_intra = max(hop_intra, fabric.route(chain[0], chain[1]).latency_s)
            if nd > 1:
                hop_inter = max(hop_inter, fabric.route(heads[0], heads[1]).latency_s)
        depth = math.ceil(math.log2(nd)) if nd > 1 else 0
        latency = max(latency, 2 * ((len(g) // nd - 1) * hop_intra + depth * hop_inter))
    return _phase(latency, flows, loads)


def _pat_phase(fabric: Fabric, kind: CollectiveKind, groups: list[tuple[int, ...]], size_bytes: float,
               loads: Counter | None) -> Phase:
    """PAT: the ring's bytes per rank (at 0.75 of the bandwidth) in ``ceil(log2 p)`` steps."""
    return _pat_of_ring(_ring_phase(fabric, kind, groups, size_bytes, loads), kind, len(groups[0]))


def _pat_of_ring(ring: Phase, kind: CollectiveKind, p: int) -> Phase:
    """PAT's phase from the ring's over the same groups (:func:`_pat_phase`)."""
    steps, _ = _ring_steps(kind, p)
    hop = ring.latency_s / steps if steps else 0.0
    return Phase(math.ceil(math.log2(p)) * hop,
                 tuple(Flow(f.src, f.dst, f.size_bytes / PAT_BANDWIDTH_FACTOR, f.links, f.weights)
                       for f in ring.flows))


def _candidates(fabric: Fabric, op: CommOp) -> list[CollectiveAlgorithm]:
    """The algorithms NCCL weighs for ``op`` over its group, most conventional first."""
    A = CollectiveAlgorithm
    doms = _domains(fabric, op.group)
    one_each = all(len(d) == 1 for d in doms)
    out = [A.MULTI_RING if len(doms) > 1 and not one_each else A.RING]
    if op.collective is CollectiveKind.ALL_REDUCE:
        if len(doms) > 1:
            out.append(A.TREE)
            if _nvls_tree_possible(fabric, op.group):
                out.append(A.NVLS_TREE)
        elif _nvls_possible(fabric, op.group):
            out.append(A.NVLS)
    elif len(doms) > 2 and one_each:
        out.append(A.PAT)
    return out


def _build(fabric: Fabric, op: CommOp, algo: CollectiveAlgorithm, groups: list[tuple[int, ...]],
           loads: Counter | None) -> CommPlan:
    A, kind, s = CollectiveAlgorithm, op.collective, op.size_bytes
    if algo is A.RING:
        return CommPlan((_ring_phase(fabric, kind, groups, s, loads, _own_ring_curve(fabric, kind, groups)),), "ring")
    if algo is A.MULTI_RING:
        return CommPlan((_multi_ring_phase(fabric, kind, groups, s, loads, _ring_protocol(fabric, op)),), "multi-ring")
    if algo is A.NVLS:
        return CommPlan((_nvls_phase(fabric, groups, s, loads),), "nvls")
    if algo is A.TREE:
        return CommPlan((_tree_phase(fabric, groups, s, loads),), "tree")
    if algo is A.NVLS_TREE:
        return CommPlan((_nvls_tree_phase(fabric, groups, s, loads),), "nvls-tree")
    if algo is A.PAT:
        return CommPlan((_pat_phase(fabric, kind, groups, s, loads),), "pat")
    # hierarchical: split each replica group the same way
    k = len(_domains(fabric, op.group)[0])
    intra, inter = [], []
    for g in groups:
        gd = _domains(fabric, g)
        intra.extend(tuple(d) for d in gd)
        inter.extend(tuple(d[i] for d in gd) for i in range(k))
    if kind is CollectiveKind.ALL_REDUCE:
        phases = (_ring_phase(fabric, CollectiveKind.REDUCE_SCATTER, intra, s, loads),
                  _ring_phase(fabric, CollectiveKind.ALL_REDUCE, inter, s / k, loads),
                  _ring_phase(fabric, CollectiveKind.ALL_GATHER, intra, s, loads))
    elif kind is CollectiveKind.REDUCE_SCATTER:
        phases = (_ring_phase(fabric, kind, intra, s, loads),
                  _ring_phase(fabric, kind, inter, s / k, loads))
    else:  # all-gather
        phases = (_ring_phase(fabric, kind, inter, s / k, loads),
                  _ring_phase(fabric, kind, intra, s, loads))
    return CommPlan(phases, "hierarchical")


def _check_forced(fabric: Fabric, op: CommOp, algo: CollectiveAlgorithm) -> None:
    A = CollectiveAlgorithm
    doms = _domains(fabric, op.group)
    even = all(len(d) == len(doms[0]) for d in doms)
    why = None
    if algo is A.NVLS and not (op.collective is CollectiveKind.ALL_REDUCE and _nvls_possible(fabric, op.group)):
        why = ("an all-reduce inside one NVSwitch domain whose topology gives NVLS "
               "(scale_up.nvls_efficiency_by_size_bytes)")
    elif algo is A.TREE and not (op.collective is CollectiveKind.ALL_REDUCE and len(doms) > 1):
        why = "an all-reduce over several scale-up domains"
    elif algo is A.NVLS_TREE and not (op.collective is CollectiveKind.ALL_REDUCE
                                      and _nvls_tree_possible(fabric, op.group)):
        why = ("an all-reduce over several NVSwitch domains whose topology gives NVLS, each holding the same "
               "number (> 1) of the group")
    elif algo is A.PAT and op.collective not in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        why = "an all-gather or reduce-scatter"
    elif algo is A.MULTI_RING and not (len(doms) > 1 and max(len(d) for d in doms) > 1):
        why = "a group over several scale-up domains with more than one rank in one of them"
    elif algo is A.HIERARCHICAL and not (len(doms) > 1 and len(doms[0]) > 1 and even):
        why = "a group over several scale-up domains with the same number (> 1) of ranks in each"
    if why:
        raise ValueError(f"{algo.value} needs {why}")


def _plan(fabric: Fabric, op: CommOp, algorithm: CollectiveAlgorithm, groups: list[tuple[int, ...]],
          loads: Counter | None) -> CommPlan:
    """The plan of ``op`` run by every group of ``groups`` at once (``algorithm`` chosen)."""
    if op.collective is CollectiveKind.RING_EXCHANGE:
        flows = []
        latency = 0.0
        for g in groups:
            if len(g) == 1:
                continue
            own = _own_curve(fabric, fabric.p2p_efficiency, g)
            for i, src in enumerate(g):
                dst = g[(i + 1) % len(g)]
                route = fabric.route(src, dst)
                latency = max(latency, route.latency_s)
                flows.append((src, dst, op.size_bytes / (own or route.efficiency)(op.size_bytes), route.links))
        return CommPlan((_phase(latency, flows, loads),) if flows else (), "ring-exchange")
    if op.collective is CollectiveKind.SEND_RECV:
        flows = []
        latency = 0.0
        for src, dst in groups:
            route = fabric.route(src, dst)
            latency = max(latency, route.latency_s)
            own = _own_curve(fabric, fabric.p2p_efficiency, (src, dst))
            flows.append((src, dst, op.size_bytes / (own or route.efficiency)(op.size_bytes), route.links))
        return CommPlan((_phase(latency, flows, loads),), "p2p")
    fixed = _collective_latency_s(fabric)
    if op.collective is CollectiveKind.ALL_TO_ALL and op.routing is not None:
        return _dedup_all_to_all(fabric, op, groups, loads, fixed)
    if op.collective is CollectiveKind.ALL_TO_ALL:
        flows = []
        latency = 0.0
        between = fabric.scale_out_alltoall_efficiency  # its own curve for the sends between domains
        for g in groups:
            share = op.size_bytes / len(g)
            own = _own_curve(fabric, fabric.alltoall_efficiency, g)
            for src in g:
                for dst in g:
                    if src == dst:
                        continue
                    route = fabric.route(src, dst)
                    latency = max(latency, route.latency_s)
                    curve = own or (between if between is not None and not fabric.same_domain((src, dst))
                                    else route.efficiency)
                    # efficiency at the collective's size, as nccl-tests' alltoall reports it
                    flows.append((src, dst, share / curve(op.size_bytes), route.links))
        return CommPlan((_phase(fixed + op.issue_s + latency, flows, loads),) if flows else (), "direct")
    return _with_latency(_build(fabric, op, algorithm, groups, loads), fixed + op.issue_s)


def hit_probability(experts: int, top_k: int, held: int) -> float:
    """The chance that a token choosing ``top_k`` of ``experts`` experts (each equally likely,
    without repeats) picks at least one of ``held`` of them: ``1 - C(E - m, k) / C(E, k)``.

    >>> round(hit_probability(256, 8, 64), 4), hit_probability(8, 2, 8), hit_probability(8, 2, 0)
    (0.9036, 1.0, 0.0)
    """
    held = min(max(held, 0), experts)
    if experts - held < top_k:
        return 1.0
    return 1.0 - math.comb(experts - held, top_k) / math.comb(experts, top_k)


def dedup_fractions(experts: int, top_k: int, group: int, domain_sizes: Sequence[int]) -> tuple[float, list[float]]:
    """A deduplicating dispatcher's reach for one token of a ``group``-rank exchange whose
    ranks each hold ``experts / group`` experts: the chance it goes to a given rank, and to
    each scale-up domain (holding ``domain_sizes[i]`` of the group's ranks).

    >>> p_rank, p_dom = dedup_fractions(256, 8, 32, [8, 8, 8, 8])
    >>> round(p_rank, 4), [round(x, 4) for x in p_dom]
    (0.2271, [0.9036, 0.9036, 0.9036, 0.9036])
    """
    per_rank = experts // group
    return hit_probability(experts, top_k, per_rank), [hit_probability(experts, top_k, per_rank * n)
                                                        for n in domain_sizes]


def _dedup_all_to_all(fabric: Fabric, op: CommOp, groups: list[tuple[int, ...]], loads: Counter | None,
                      fixed: float) -> CommPlan:
    """DeepEP's and HybridEP's token exchange (:class:`~sim.types.MoeDispatcher`), one phase:
    a rank sends each of its tokens (``op.size_bytes`` in all) once to every other scale-up
    domain holding one of the token's experts, to the GPU of its own local index there
    (RDMA), and once to every rank of its own domain holding one (NVLink); each GPU also
    forwards over NVLink what the other domains' GPUs of its index sent it, to the ranks of
    its domain the tokens are for (DeepSeek-V3 technical report, arXiv 2412.19437, Sec.
    3.2.2: "first transmitted via IB to the GPUs with the same in-node index on their target
    nodes ... then forwarded via NVLink"). The combine sends the same amounts back. Under
    balanced routing a token reaches a given rank with :func:`dedup_fractions`' chance, so a
    GPU sends ``S p_dom`` to each other domain and ``S p_rank D`` to each rank of its own
    (``D`` the domains of the group); the two levels run at once, as DeepEP pipelines them.
    Each flow runs at the efficiency its route (the between-domain all-to-all curve where the
    topology has one, the domain's own all-to-all curve inside it) reaches at the buffer the
    same tokens make under the all-to-all dispatcher, ``k S``: only the bytes differ."""
    routing = op.routing
    assert routing is not None
    flows = []
    latency = 0.0
    between = fabric.scale_out_alltoall_efficiency
    for g in groups:
        doms = _domains(fabric, g)
        p_rank, p_dom = dedup_fractions(routing.experts, routing.top_k, len(g), [len(d) for d in doms])
        size = op.size_bytes
        at = size * routing.top_k  # the all-to-all dispatcher's buffer for these tokens
        for di, dom in enumerate(doms):
            inside = _own_curve(fabric, fabric.alltoall_efficiency, tuple(dom))
            for i, src in enumerate(dom):
                for dj, other in enumerate(doms):
                    if dj == di:
                        continue
                    dst = other[i % len(other)]
                    route = fabric.route(src, dst)
                    latency = max(latency, route.latency_s)
                    curve = between or route.efficiency
                    flows.append((src, dst, size * p_dom[dj] / curve(at), route.links))
                for dst in dom:
                    if dst == src:
                        continue
                    route = fabric.route(src, dst)
                    latency = max(latency, route.latency_s)
                    flows.append((src, dst, size * p_rank * len(doms) / (inside or route.efficiency)(at),
                                  route.links))
    return CommPlan((_phase(fixed + op.issue_s + latency, flows, loads),) if flows else (), "deduplicated")


def _own_ring_curve(fabric: Fabric, kind: CollectiveKind, groups: list[tuple[int, ...]]) -> EfficiencyCurve | None:
    """An all-gather's or reduce-scatter's own curve (``scale_up.all_gather_efficiency_by_size_bytes``,
    ``reduce_scatter_efficiency_by_size_bytes``) for rings that each lie in one NVSwitch domain;
    else None (each route's link curve). An all-reduce's rings keep the links' curve, which an
    all-reduce log calibrates."""
    curve = fabric.all_gather_efficiency if kind is CollectiveKind.ALL_GATHER else \
        fabric.reduce_scatter_efficiency if kind is CollectiveKind.REDUCE_SCATTER else None
    return curve if all(_own_curve(fabric, curve, g) for g in groups) else None


def _own_curve(fabric: Fabric, curve: EfficiencyCurve | None, group: tuple[int, ...]) -> EfficiencyCurve | None:
    """``curve``, a collective's own efficiency curve inside one NVSwitch domain
    (``scale_up.alltoall_efficiency_by_size_bytes``, ``p2p_efficiency_by_size_bytes``; the ring
    collectives': :func:`_own_ring_curve`), where the
    topology has one and ``group`` lies in one domain; else None (each route's link curve)."""
    return curve if curve is not None and fabric.same_domain(group) else None


class Replicas:
    """A family of replica groups (``op.replicas``) indexed once: which group each rank is in,
    and whether they are alike enough for :func:`_kept_plan` (every group the same size, no
    rank in two). Ops of one stage share their families, so
    :class:`~sim.costs.analytical.AnalyticalCostModel` keeps these (``plan_comm``'s
    ``families``)."""

    def __init__(self, groups: tuple[tuple[int, ...], ...]) -> None:
        self.groups = groups
        self.size = len(groups[0]) if groups else 0
        self._flat = flat = list(chain.from_iterable(groups))
        self._at = dict(zip(flat, range(len(flat))))
        self.usable = set(map(len, groups)) == {self.size} and len(self._at) == len(flat)
        """Every group the same size and no rank in two."""
        self._keys: np.ndarray | None = None
        self._one_domain: bool | None = None
        self._shapes: set[tuple[int, int]] | None = None

    def group_of(self, ranks) -> set[int]:
        """The indices of the groups holding any of ``ranks`` (of a usable family)."""
        at, size = self._at, self.size
        return {at[r] // size for r in ranks if r in at}

    def _domain_keys(self, fabric: Fabric) -> np.ndarray | None:
        """Each member's NVSwitch domain, a row per group (None: not all NVSwitch domains)."""
        if self._keys is None:
            keys = fabric.domain_keys(self._flat)
            if keys is None:
                return None
            self._keys = keys.reshape(len(self.groups), self.size)
        return self._keys

    def one_domain(self, fabric: Fabric) -> bool:
        """Whether every group lies in one NVSwitch domain (of the one fabric it is asked of)."""
        if self._one_domain is None:
            keys = self._domain_keys(fabric)
            if keys is None:
                self._one_domain = all(fabric.same_domain(g) for g in self.groups)
            else:
                self._one_domain = bool((keys == keys[:, :1]).all())
        return self._one_domain

    def domain_shapes(self, fabric: Fabric) -> set[tuple[int, int]] | None:
        """Every ``(k, d)`` of the groups: members per domain as the tree's latency counts
        them (the group's size over ``d``, rounded down: :func:`_tree_phase`), domains (what
        :func:`_domains` gives), or None where domains are not all NVSwitch."""
        if self._shapes is None:
            keys = self._domain_keys(fabric)
            if keys is None:
                return None
            ordered = np.sort(keys, axis=1)
            d = 1 + (ordered[:, 1:] != ordered[:, :-1]).sum(axis=1)
            self._shapes = {(self.size // int(b), int(b)) for b in d}
        return self._shapes


def _kept_plan(fabric: Fabric, op: CommOp, algorithm: CollectiveAlgorithm, fam: Replicas,
               keep: frozenset[int], own: CommPlan | None) -> CommPlan | None:
    """The representative plan of ``op`` over its replicas ``fam`` with only the flows that
    ``keep`` sends or receives, planning only the replicas whose flows can share a link with
    those; None where that cannot be shown (then every replica is planned).

    The kept flows come from the replicas holding a rank of ``keep`` (``own``: their plan,
    when the caller has it). A flow loads a link only if its route runs through it, and every
    route through a link starts or ends among the GPUs :meth:`Fabric.near_ranks` names for
    it (on a fat tree: the GPU's, NIC's or leaf's own, or their domains'); a replica with none
    of those ranks therefore adds nothing to the count of flows on a kept flow's link and is
    left out. It could still set a phase's latency (the phase's steps times the longest route
    of any flow of any replica): it is left out only when no replica left out can lengthen a
    phase (:func:`_latency_settled`), and else planned for its latency alone; a phase's
    latency grows with its flows' routes' latencies, so over every replica it is the larger
    of the two. The results are those of planning every replica
    (``tests/unit/test_fast_paths.py``)."""
    groups = fam.groups
    if algorithm is CollectiveAlgorithm.HIERARCHICAL or not fam.usable or len(op.group) != len(groups[0]):
        return None
    home = sorted(fam.group_of(keep))
    if not home:
        return None
    if own is None or [groups[i] for i in home] != [op.group]:
        own = _plan(fabric, op, algorithm, [groups[i] for i in home], None)
    links = {link for ph in own.phases for f in ph.flows if f.src in keep or f.dst in keep for link in f.links}
    near = fabric.near_ranks(links)
    if near is None:
        return None
    picked = sorted(set(home) | fam.group_of(near))
    plan = own if picked == home else _plan(fabric, op, algorithm, [groups[i] for i in picked], None)
    latencies = [ph.latency_s for ph in plan.phases]
    if len(picked) < len(groups) and not _latency_settled(fabric, plan, fam):
        chosen = set(picked)
        other = _plan(fabric, op, algorithm, [g for i, g in enumerate(groups) if i not in chosen], None).phases
        if len(other) != len(latencies):
            return None
        latencies = [max(a, b.latency_s) for a, b in zip(latencies, other)]
    phases = []
    for ph, latency in zip(plan.phases, latencies):
        count = Counter(chain.from_iterable(f.links for f in ph.flows))
        kept = tuple(Flow(f.src, f.dst, f.size_bytes, f.links, tuple(float(count[link_id]) for link_id in f.links))
                     for f in ph.flows if f.src in keep or f.dst in keep)
        phases.append(Phase(latency, kept))
    return CommPlan(tuple(phases), plan.algorithm)


def _latency_settled(fabric: Fabric, plan: CommPlan, fam: Replicas) -> bool:
    """Whether no replica of ``fam`` can lengthen a phase of ``plan``: each phase's latency
    is its steps times its flows' longest route latency (NVLS: a constant), and one of
    ``plan``'s flows in every phase already has the most latency a route of those replicas
    can have. The tree's is ``2 ((k - 1) h_intra + ceil(log2 d) h_inter)`` per group, ``d``
    its domains and ``k`` its size over ``d`` rounded down, the hops' latencies at most the
    most within a domain and the most of all: settled when that bound for every replica's
    ``(k, d)`` (plus the collective's fixed latency, as ``plan`` has it) is no more than ``plan``'s."""
    if plan.algorithm == "nvls":
        return True
    bounds = fabric.latency_bounds_s()
    if bounds is None or not all(ph.flows for ph in plan.phases):
        return False
    most, within = bounds
    if plan.algorithm == "nvls-tree":  # per domain count, its hops at most the most of all
        shapes = fam.domain_shapes(fabric)
        if shapes is None:
            return False
        worst = max(nvls_tree_latency_s(d, most) for _, d in shapes) + _collective_latency_s(fabric)
        return worst <= plan.phases[0].latency_s
    if plan.algorithm == "tree":
        shapes = fam.domain_shapes(fabric)
        if shapes is None:
            return False
        fixed = _collective_latency_s(fabric)
        worst = max(2 * ((k - 1) * within + (math.ceil(math.log2(d)) if d > 1 else 0) * most) for k, d in shapes)
        return (worst + fixed if fixed > 0 else worst) <= plan.phases[0].latency_s
    route = fabric.route
    if all(any(route(f.src, f.dst).latency_s >= most for f in ph.flows) for ph in plan.phases):
        return True
    return (all(any(route(f.src, f.dst).latency_s >= within for f in ph.flows) for ph in plan.phases)
            and fam.one_domain(fabric))


def plan_comm(fabric: Fabric, op: CommOp, representative: bool,
              algorithm: CollectiveAlgorithm = CollectiveAlgorithm.AUTO, keep: frozenset[int] | None = None,
              families: dict | None = None, excluded: frozenset = frozenset()) -> CommPlan:
    """The plan for ``op`` on ``fabric``.

    Parameters
    ----------
    representative : bool
        True when only some ranks are simulated: flows of ``op.replicas`` are then folded into
        link weights so that shared links are loaded as in the full job.
    algorithm : CollectiveAlgorithm
        ``AUTO`` (the fastest of NCCL's candidates) or one forced; a forced algorithm the op
        or group cannot run raises ``ValueError`` saying what it needs.
    keep : frozenset of int, optional
        The simulated ranks, when representative: the plan then holds only the flows they
        send or receive (those the engine keeps), with the same weights and latencies, and
        plans only the replicas that can share links with them (:func:`_kept_plan`).
    families : dict, optional
        Where to keep each replica family's :class:`Replicas` between calls (by the identity
        of the family's tuple, which the entry holds).
    excluded : frozenset of CollectiveAlgorithm, optional
        Algorithms ``AUTO`` may not pick, as ``NCCL_ALGO`` rules them out (Megatron-LM's
        deterministic mode requires ``NCCL_ALGO`` to be one of Tree, Ring, CollnetDirect,
        CollnetChain or ``^NVLS``: no NVLS).
    """
    groups = list(op.replicas) if (representative and op.replicas) else [op.group]
    own = None
    if op.collective not in (CollectiveKind.RING_EXCHANGE, CollectiveKind.SEND_RECV):
        if len(op.group) == 1:
            return CommPlan((), "none")
        if op.collective is CollectiveKind.ALL_TO_ALL:
            pass
        elif algorithm is CollectiveAlgorithm.AUTO:
            options = _candidates(fabric, op)
            if excluded:
                options = [a for a in options if a not in excluded] or options[:1]
            if len(options) > 1:
                alone = {}
                for a in options:
                    if a is CollectiveAlgorithm.PAT and CollectiveAlgorithm.RING in alone:  # the ring's flows, rescaled
                        ring = alone[CollectiveAlgorithm.RING].phases[0]
                        alone[a] = CommPlan((_pat_of_ring(ring, op.collective, len(op.group)),), "pat")
                    else:
                        alone[a] = _build(fabric, op, a, [op.group], None)
                algorithm = min(options, key=lambda a: estimate_s(fabric, alone[a]))
                own = _with_latency(alone[algorithm], _collective_latency_s(fabric) + op.issue_s)
            else:
                algorithm = options[0]
        else:
            _check_forced(fabric, op, algorithm)
    if keep is not None and representative and len(groups) > 1:
        fam = None if families is None else families.get(id(op.replicas))
        if fam is None or fam.groups is not op.replicas:  # (ops of a stage share the family's tuple)
            fam = Replicas(op.replicas)
            if families is not None:
                families[id(op.replicas)] = fam
        plan = _kept_plan(fabric, op, algorithm, fam, keep, own)
        if plan is not None:
            return plan
    if own is not None and not representative:  # the group's own plan, as the choice built it
        return own
    return _plan(fabric, op, algorithm, groups, Counter() if representative else None)
