"""Shortest routes on a leaf-spine fat tree, found from its structure instead of by search.

A GPU of a fat tree built by :func:`sim.topology.fabrics.add_fat_tree` reaches a GPU of
another NVSwitch domain by leaving its domain through some GPU's NIC (its own, or a peer's
over two NVLink hops), crossing the fabric (one leaf, or leaf-spine-leaf within a plane) and
entering the far domain the same way. A path that descends into a third domain costs at least
two PCIe and two NVLink hops more than crossing planes in the source domain, which always has a
NIC in every plane, so it is never shortest. The router therefore weighs, for each pair of
leaves the two domains reach, the cheapest way up to the first and down from the second
(tables kept per GPU), and takes the cheapest whole path, ties going to the smallest sequence
of link ids: the same weight as Dijkstra's (a test compares every pair of small fabrics with
NetworkX) at a cost that does not grow with the fabric. It is what makes routing the
data-parallel rings of 100,000 GPUs take seconds: Dijkstra on such a fabric fans out over
every leaf of a spine for each pair.

:meth:`FatTreeRouter.of` returns None for any graph that is not of this form (a torus, a
dragonfly, GraphML, a fat tree with a failed link, an NVLink domain that is not one switch),
and those keep NetworkX's Dijkstra.
"""

from __future__ import annotations

import networkx as nx

__all__ = ["FatTreeRouter"]


class FatTreeRouter:
    """Routes of one fat-tree graph, as tuples of link ids (see the module docstring)."""

    def __init__(self, graph: nx.DiGraph, gpu_nic: list[str], nic_leaf: dict[str, str],
                 leaf_spine: dict[str, str], domain_switch: list[str], domain_gpus: list[list[int]],
                 gpu_domain: list[int]) -> None:
        self._g = graph
        self._nic = gpu_nic
        self._leaf = nic_leaf
        self._spine = leaf_spine
        self._switch = domain_switch
        self._members = domain_gpus
        self._domain = gpu_domain
        self._up: dict[int, list[tuple[str, float, tuple[int, ...]]]] = {}
        self._down: dict[int, list[tuple[str, float, tuple[int, ...]]]] = {}
        self._peers: dict[tuple[int, bool], dict[str, tuple[float, tuple[int, ...]]]] = {}
        self._cores: dict[tuple[str, str], tuple[float, tuple[int, ...]] | None] = {}
        self._edge: dict[tuple[str, str], tuple[float, int]] = {}

    @classmethod
    def of(cls, graph: nx.DiGraph, num_gpus: int) -> "FatTreeRouter | None":
        """The router of ``graph``, or None when it is not a fault-free fat tree with
        NVSwitch domains of whole servers."""
        kind = nx.get_node_attributes(graph, "kind")
        if not any(k == "spine" for k in kind.values()):
            return None
        succ = graph.succ
        gpu_nic: list[str] = []
        switch_of: list[str] = []
        for i in range(num_gpus):
            g = f"gpu{i}"
            nics = [v for v in succ[g] if kind[v] == "nic"]
            sws = [v for v in succ[g] if kind[v] == "nvswitch"]
            if len(nics) != 1 or len(sws) != 1 or len(succ[g]) != 2:
                return None
            gpu_nic.append(nics[0])
            switch_of.append(sws[0])
        nic_leaf: dict[str, str] = {}
        leaf_spine: dict[str, str] = {}
        for n, k in kind.items():
            if k == "nic":
                ups = [v for v in succ[n] if kind[v] == "leaf"]
                if len(ups) != 1:
                    return None
                nic_leaf[n] = ups[0]
            elif k == "leaf":
                ups = [v for v in succ[n] if kind[v] == "spine"]
                if len(ups) != 1:
                    return None
                leaf_spine[n] = ups[0]
            elif k not in ("gpu", "nvswitch", "spine"):
                return None
        domains: dict[str, int] = {}
        members: list[list[int]] = []
        gpu_domain: list[int] = []
        for i, sw in enumerate(switch_of):
            d = domains.setdefault(sw, len(domains))
            if d == len(members):
                members.append([])
            members[d].append(i)
            gpu_domain.append(d)
        switches = sorted(domains, key=domains.get)
        for d, sw in enumerate(switches):
            # A star: the switch reaches exactly its GPUs, both ways, and nothing else.
            if sorted(succ[sw]) != sorted(f"gpu{i}" for i in members[d]):
                return None
            # Whole servers: every GPU whose NIC is here has its domain here too.
        nic_domain: dict[str, int] = {}
        for i, nic in enumerate(gpu_nic):
            if nic_domain.setdefault(nic, gpu_domain[i]) != gpu_domain[i]:
                return None
        for nic in nic_leaf:
            if nic not in nic_domain:
                return None
        planes_of = [set() for _ in members]
        all_planes = {leaf_spine[leaf] for leaf in leaf_spine.keys()}
        for i, nic in enumerate(gpu_nic):
            planes_of[gpu_domain[i]].add(leaf_spine[nic_leaf[nic]])
        if any(p != all_planes for p in planes_of):
            return None
        return cls(graph, gpu_nic, nic_leaf, leaf_spine, switches, members, gpu_domain)

    def _e(self, u: str, v: str) -> tuple[float, int]:
        key = (u, v)
        hit = self._edge.get(key)
        if hit is None:
            d = self._g.edges[u, v]
            hit = self._edge[key] = (d["hop_weight"], d["link_id"])
        return hit

    def _path(self, nodes: list[str]) -> tuple[float, tuple[int, ...]]:
        w, links = 0.0, []
        for u, v in zip(nodes, nodes[1:]):
            hw, lid = self._e(u, v)
            w += hw
            links.append(lid)
        return w, tuple(links)

    def _table(self, gpu: int, up: bool) -> list[tuple[str, float, tuple[int, ...]]]:
        """(leaf, weight, links) of the cheapest way from ``gpu`` up to each leaf its domain
        reaches (``up``), or from it down to ``gpu``, ties to the smallest link sequence;
        cheapest first."""
        cache = self._up if up else self._down
        hit = cache.get(gpu)
        if hit is not None:
            return hit
        d = self._domain[gpu]
        sw, me = self._switch[d], f"gpu{gpu}"
        nic = self._nic[gpu]
        own_leaf = self._leaf[nic]
        out = {own_leaf: self._path([me, nic, own_leaf] if up else [own_leaf, nic, me])}
        hop = self._e(me, sw) if up else self._e(sw, me)
        for leaf, (w, links) in self._peer_paths(d, up).items():
            if leaf != own_leaf:
                out[leaf] = (hop[0] + w, (hop[1],) + links if up else links + (hop[1],))
        rows = sorted((w, links, leaf) for leaf, (w, links) in out.items())
        table = cache[gpu] = [(leaf, w, links) for w, links, leaf in rows]
        return table

    def _core(self, la: str, lb: str) -> tuple[float, tuple[int, ...]] | None:
        """Leaf ``la`` to leaf ``lb``: nothing, or up to their spine and down; None across
        planes."""
        key = (la, lb)
        hit = self._cores.get(key, False)
        if hit is False:
            if la == lb:
                hit = (0.0, ())
            elif self._spine[la] == self._spine[lb]:
                w1, l1 = self._e(la, self._spine[la])
                w2, l2 = self._e(self._spine[la], lb)
                hit = (w1 + w2, (l1, l2))
            else:
                hit = None
            self._cores[key] = hit
        return hit

    def _peer_paths(self, d: int, up: bool) -> dict[str, tuple[float, tuple[int, ...]]]:
        """Domain ``d``'s cheapest way from its switch through a peer GPU and its NIC up to
        each leaf (``up``), or down from it to the switch; ties to the smallest link
        sequence. The first (last) NVLink hop, from (to) the GPU itself, is added by
        :meth:`_table`."""
        key = (d, up)
        hit = self._peers.get(key)
        if hit is None:
            sw = self._switch[d]
            hit = {}
            for peer in self._members[d]:
                nic = self._nic[peer]
                leaf = self._leaf[nic]
                nodes = [sw, f"gpu{peer}", nic, leaf]
                cand = self._path(nodes if up else nodes[::-1])
                best = hit.get(leaf)
                if best is None or cand < best:
                    hit[leaf] = cand
            self._peers[key] = hit
        return hit

    def links(self, src: int, dst: int) -> tuple[int, ...]:
        """The links of the shortest route from GPU ``src`` to GPU ``dst`` (``src != dst``)."""
        if self._domain[src] == self._domain[dst]:
            return self._path([f"gpu{src}", self._switch[self._domain[src]], f"gpu{dst}"])[1]
        ups, downs = self._table(src, True), self._table(dst, False)
        best_w, best = float("inf"), ()
        w_down_min = downs[0][1]
        for la, wa, pa in ups:
            if wa + w_down_min > best_w:
                break
            for lb, wb, pb in downs:
                if wa + wb > best_w:
                    break
                core = self._core(la, lb)
                if core is None:
                    continue
                w = wa + core[0] + wb
                if w < best_w:
                    best_w, best = w, pa + core[1] + pb
                elif w == best_w:
                    cand = pa + core[1] + pb
                    if cand < best:
                        best = cand
        assert best_w < float("inf"), "fat tree planes checked in FatTreeRouter.of"
        return best
