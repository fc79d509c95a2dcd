"""Communication plans: collectives and p2p sends as phases of flows over the topology.

Algorithms, as NCCL runs them on one node or across nodes:

* **ring** (Patarasuk and Yuan 2009; NCCL's ring): ``p`` ranks in a ring, each sending to
  the next. All-reduce moves ``2(p-1)/p x S`` bytes per rank in ``2(p-1)`` steps,
  all-gather and reduce-scatter ``(p-1)/p x S`` in ``p-1`` steps (nccl-tests
  doc/PERFORMANCE.md, "bus bandwidth"). Time alone on a uniform ring:
  ``steps x a + bus_bytes / B``.
* **multi-channel ring** (used when a group spans scale-up domains with ``k > 1`` members in
  each, as NCCL's ring algorithm runs across nodes): ``k`` rings over the whole group, each
  carrying ``1/k`` of the data, each entering and leaving a node on a different GPU, so that
  every GPU's NIC carries one ring's crossing and the NVLink ports carry the rest (NCCL builds
  one ring per channel, rail-matched between nodes: NVIDIA/nccl ``src/graph/rings.cc``,
  ``search.cc``). Its bus bandwidth is the lesser of NVLink's and ``k`` NICs'.
* **hierarchical** (kept for comparison, not chosen): reduce-scatter inside each domain, the
  collective on ``S/k`` across domains among ranks with the same local index, all-gather inside
  each domain, one phase after another.
* **p2p**: one flow along the route.
* **direct all-to-all** (NCCL's ``ncclAllToAll``: a send and a receive to every peer, all at
  once): each rank sends ``S / p`` to each of the ``p - 1`` others, every flow on its own
  route, so NVLink and the NICs carry them concurrently and the flow network shares what
  they share. ``S`` is the send buffer per rank (nccl-tests ``alltoall``).

Each flow's bytes are divided by the efficiency its bottleneck link reaches at that message
size (nccl-tests bus bandwidth over the link's peak), so the flow network can run links at
their raw bandwidth.
"""

from __future__ import annotations

from collections import Counter

from sim.costs.base import CommPlan, Flow, Phase
from sim.topology.routing import Fabric
from sim.types import CollectiveKind
from sim.workload.ops import CommOp

__all__ = ["plan_comm"]


def _ring_steps(kind: CollectiveKind, p: int) -> tuple[int, float]:
    """(steps, bus-bytes factor) of a ring collective over ``p`` ranks."""
    if kind is CollectiveKind.ALL_REDUCE:
        return 2 * (p - 1), 2.0 * (p - 1) / p
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        return p - 1, (p - 1) / p
    raise ValueError(f"no ring form for {kind}")


def _ring_phase(fabric: Fabric, kind: CollectiveKind, rings: list[tuple[int, ...]], size_bytes: float,
                loads: Counter | None) -> Phase:
    """One ring collective on every ring in ``rings`` at once (they are siblings)."""
    p = len(rings[0])
    if p == 1 or size_bytes <= 0:
        return Phase(0.0)
    steps, factor = _ring_steps(kind, p)
    bus = factor * size_bytes
    flows = []
    worst_latency = 0.0
    for ring in rings:
        for i, src in enumerate(ring):
            dst = ring[(i + 1) % p]
            route = fabric.route(src, dst)
            worst_latency = max(worst_latency, route.latency_s)
            eff_bytes = bus / route.efficiency(size_bytes)
            flows.append((src, dst, eff_bytes, route.links))
    return _phase(steps * worst_latency, flows, loads)


def _channel_rings(fabric: Fabric, group: tuple[int, ...]) -> list[tuple[int, ...]]:
    """NCCL-style rings over ``group`` (members split by scale-up domain, ``k`` per domain):
    ring ``c`` enters the ``n``-th domain at local index ``(c + n) mod k``, visits the others
    and leaves at ``(c + n + 1) mod k``, where the next domain's entry has the same index (the
    same rail)."""
    doms = _domains(fabric, group)
    k = len(doms[0])
    rings = []
    for c in range(k):
        order: list[int] = []
        for n, dom in enumerate(doms):
            e = (c + n) % k
            idx = [e] + [(e + j) % k for j in range(2, k)] + [(e + 1) % k] if k > 2 else [e, (e + 1) % k]
            order += [dom[i] for i in idx]
        rings.append(tuple(order))
    return rings


def _multi_ring_phase(fabric: Fabric, kind: CollectiveKind, groups: list[tuple[int, ...]], size_bytes: float,
                      loads: Counter | None) -> Phase:
    """One collective as ``k`` channel rings per group, each moving ``1/k`` of the bytes."""
    p = len(groups[0])
    steps, factor = _ring_steps(kind, p)
    flows = []
    worst_latency = 0.0
    for g in groups:
        rings = _channel_rings(fabric, g)
        share = factor * size_bytes / len(rings)
        for ring in rings:
            for i, src in enumerate(ring):
                dst = ring[(i + 1) % p]
                route = fabric.route(src, dst)
                worst_latency = max(worst_latency, route.latency_s)
                flows.append((src, dst, share / route.efficiency(size_bytes), route.links))
    return _phase(steps * worst_latency, flows, loads)


def _phase(latency_s: float, flows: list, loads: Counter | None) -> Phase:
    if loads is None:
        return Phase(latency_s, tuple(Flow(s, d, b, links, (1.0,) * len(links)) for s, d, b, links in flows))
    # Representative mode: every flow of every replica loads its links; each flow carries
    # the count of flows of the whole job on each of its links.
    count = Counter()
    for *_, links in flows:
        count.update(links)
    return Phase(latency_s, tuple(Flow(s, d, b, links, tuple(float(count[l]) for l in links))
                                  for s, d, b, links in flows))


def _domains(fabric: Fabric, group: tuple[int, ...]) -> list[list[int]]:
    """Split ``group`` into its members per scale-up domain, in order of first appearance."""
    out: list[list[int]] = []
    for r in group:
        for d in out:
            if fabric.same_domain((d[0], r)):
                d.append(r)
                break
        else:
            out.append([r])
    return out


def plan_comm(fabric: Fabric, op: CommOp, representative: bool, flat_ring: bool = False,
              hierarchical: bool = False) -> CommPlan:
    """The plan for ``op`` on ``fabric``.

    Parameters
    ----------
    representative : bool
        True when only some ranks are simulated: flows of ``op.replicas`` are then folded into
        link weights so that shared links are loaded as in the full job.
    flat_ring : bool
        One ring (one channel) over the whole group even where it spans scale-up domains.
    hierarchical : bool
        The three-phase hierarchical plan instead of the multi-channel ring across domains.
    """
    loads = Counter() if representative else None
    groups = list(op.replicas) if (representative and op.replicas) else [op.group]
    if op.collective is CollectiveKind.RING_EXCHANGE:
        flows = []
        latency = 0.0
        for g in groups:
            if len(g) == 1:
                continue
            for i, src in enumerate(g):
                dst = g[(i + 1) % len(g)]
                route = fabric.route(src, dst)
                latency = max(latency, route.latency_s)
                flows.append((src, dst, op.size_bytes / route.efficiency(op.size_bytes), route.links))
        return CommPlan((_phase(latency, flows, loads),) if flows else (), "ring-exchange")
    if op.collective is CollectiveKind.ALL_TO_ALL:
        flows = []
        latency = 0.0
        for g in groups:
            share = op.size_bytes / len(g)
            for src in g:
                for dst in g:
                    if src == dst:
                        continue
                    route = fabric.route(src, dst)
                    latency = max(latency, route.latency_s)
                    # efficiency at the collective's size, as nccl-tests' alltoall reports it
                    flows.append((src, dst, share / route.efficiency(op.size_bytes), route.links))
        return CommPlan((_phase(latency, flows, loads),) if flows else (), "direct")
    if op.collective is CollectiveKind.SEND_RECV:
        flows = []
        latency = 0.0
        for src, dst in groups:
            route = fabric.route(src, dst)
            latency = max(latency, route.latency_s)
            flows.append((src, dst, op.size_bytes / route.efficiency(op.size_bytes), route.links))
        return CommPlan((_phase(latency, flows, loads),), "p2p")
    if len(op.group) == 1:
        return CommPlan((), "none")
    doms = _domains(fabric, op.group)
    k = len(doms[0])
    if flat_ring or len(doms) == 1 or k == 1 or any(len(d) != k for d in doms):
        return CommPlan((_ring_phase(fabric, op.collective, groups, op.size_bytes, loads),), "ring")
    if not hierarchical:
        return CommPlan((_multi_ring_phase(fabric, op.collective, groups, op.size_bytes, loads),),
                        "multi-ring")
    # hierarchical: split each replica group the same way
    intra, inter = [], []
    for g in groups:
        gd = _domains(fabric, g)
        intra.extend(tuple(d) for d in gd)
        inter.extend(tuple(d[i] for d in gd) for i in range(k))
    s = op.size_bytes
    kind = op.collective
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
