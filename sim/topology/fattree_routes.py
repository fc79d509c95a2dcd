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
    """Routes of one fat-tree graph, as tuples of link ids (see the module docstring).

    Built by :meth:`of`; every node is held by index and every hop by its link id, so that a
    route costs a few list lookups.
    """

    def __init__(self) -> None:
        self.gpu_domain: list[int] = []
        """The NVSwitch domain of each GPU index (numbered in order of first GPU)."""
        self._members: list[list[int]] = []
        self._nic: list[int] = []            # GPU -> its NIC
        self._up_pcie: list[int] = []        # GPU -> link GPU->NIC
        self._down_pcie: list[int] = []      # GPU -> link NIC->GPU
        self._up_nv: list[int] = []          # GPU -> link GPU->switch
        self._down_nv: list[int] = []        # GPU -> link switch->GPU
        self._leaf: list[int] = []           # NIC -> its leaf
        self._nic_up: list[int] = []         # NIC -> link NIC->leaf
        self._nic_down: list[int] = []       # NIC -> link leaf->NIC
        self._spine: list[int] = []          # leaf -> its spine
        self._leaf_up: list[int] = []        # leaf -> link leaf->spine
        self._leaf_down: list[int] = []      # leaf -> link spine->leaf
        self._weight: list[float] = []       # link id -> hop weight
        self._own_nics = False
        """Whether a route within a plane always runs between the two GPUs' own NICs (see
        :meth:`of`)."""
        self._up: dict[int, list] = {}
        self._down: dict[int, list] = {}
        self._peers: dict[tuple[int, bool], dict[int, tuple[float, tuple[int, ...]]]] = {}

    @property
    def num_domains(self) -> int:
        return len(self._members)

    @classmethod
    def of(cls, graph: nx.DiGraph, num_gpus: int) -> "FatTreeRouter | None":
        """The router of ``graph``, or None when it is not a fault-free fat tree with
        NVSwitch domains of whole servers, every one with a NIC in every plane."""
        nodes = graph.nodes
        kind = {n: d["kind"] for n, d in nodes.items()}
        if "spine" not in kind.values():
            return None
        index: dict[str, int] = {}
        counts = {"nic": 0, "leaf": 0, "spine": 0, "nvswitch": 0}
        for n, k in kind.items():
            if k == "gpu":
                index[n] = nodes[n]["rank"]
            elif k in counts:
                index[n] = counts[k]
                counts[k] += 1
            else:
                return None
        if sum(1 for k in kind.values() if k == "gpu") != num_gpus:
            return None
        none = -1
        r = cls()
        n_gpu, n_nic, n_leaf = num_gpus, counts["nic"], counts["leaf"]
        gpu_sw = [none] * n_gpu
        r._nic, r._up_pcie, r._down_pcie = [none] * n_gpu, [none] * n_gpu, [none] * n_gpu
        r._up_nv, r._down_nv = [none] * n_gpu, [none] * n_gpu
        r._leaf, r._nic_up, r._nic_down = [none] * n_nic, [none] * n_nic, [none] * n_nic
        r._spine, r._leaf_up, r._leaf_down = [none] * n_leaf, [none] * n_leaf, [none] * n_leaf
        r._weight = [0.0] * graph.number_of_edges()
        sw_gpus: dict[int, int] = {}
        weights: dict[str, set[float]] = {}

        def put(arr: list[int], i: int, value: int) -> bool:
            if arr[i] != none:
                return False
            arr[i] = value
            return True

        for u, v, d in graph.edges(data=True):
            lid = d["link_id"]
            r._weight[lid] = d["hop_weight"]
            weights.setdefault(d["link"], set()).add(d["hop_weight"])
            ku, kv = kind[u], kind[v]
            iu, iv = index[u], index[v]
            if ku == "gpu" and kv == "nic":
                ok = put(r._nic, iu, iv) and put(r._up_pcie, iu, lid)
            elif ku == "nic" and kv == "gpu":
                ok = put(r._down_pcie, iv, lid)
            elif ku == "gpu" and kv == "nvswitch":
                ok = put(gpu_sw, iu, iv) and put(r._up_nv, iu, lid)
            elif ku == "nvswitch" and kv == "gpu":
                ok = put(r._down_nv, iv, lid)
                sw_gpus[iu] = sw_gpus.get(iu, 0) + 1
            elif ku == "nic" and kv == "leaf":
                ok = put(r._leaf, iu, iv) and put(r._nic_up, iu, lid)
            elif ku == "leaf" and kv == "nic":
                ok = put(r._nic_down, iv, lid)
            elif ku == "leaf" and kv == "spine":
                ok = put(r._spine, iu, iv) and put(r._leaf_up, iu, lid)
            elif ku == "spine" and kv == "leaf":
                ok = put(r._leaf_down, iv, lid)
            else:
                ok = False
            if not ok:
                return None
        for arr in (gpu_sw, r._nic, r._up_pcie, r._down_pcie, r._up_nv, r._down_nv, r._leaf, r._nic_up,
                    r._nic_down, r._spine, r._leaf_up, r._leaf_down):
            if none in arr:
                return None
        domains: dict[int, int] = {}
        for i, sw in enumerate(gpu_sw):
            d = domains.setdefault(sw, len(domains))
            if d == len(r._members):
                r._members.append([])
            r._members[d].append(i)
            r.gpu_domain.append(d)
        # A star: each switch reaches exactly the GPUs that reach it.
        if any(sw_gpus.get(sw, 0) != len(r._members[d]) for sw, d in domains.items()):
            return None
        # Whole servers: a NIC serves GPUs of one domain only; every domain reaches every plane.
        nic_domain = [none] * n_nic
        for i, nic in enumerate(r._nic):
            if nic_domain[nic] == none:
                nic_domain[nic] = r.gpu_domain[i]
            elif nic_domain[nic] != r.gpu_domain[i]:
                return None
        planes = set(r._spine)
        reach = [set() for _ in r._members]
        for i, nic in enumerate(r._nic):
            reach[r.gpu_domain[i]].add(r._spine[r._leaf[nic]])
        if any(p != planes for p in reach):
            return None
        # With one weight per link type, leaving through one's own NIC and entering through
        # the destination's is the only shortest route within a plane when two NVLink hops
        # (the detour to a peer's NIC) weigh more than the leaf-spine-leaf hops it could save.
        if all(len(w) == 1 for w in weights.values()) and "nvlink" in weights and "network" in weights:
            r._own_nics = 2 * min(weights["nvlink"]) > 2 * max(weights["network"])
        return r

    def _w(self, links: tuple[int, ...]) -> float:
        w = 0.0
        for link in links:
            w += self._weight[link]
        return w

    def _peer_paths(self, d: int, up: bool) -> dict[int, tuple[float, tuple[int, ...]]]:
        """Domain ``d``'s cheapest way from its switch through a peer GPU and its NIC up to
        each leaf (``up``), or down from it to the switch; ties to the smallest link
        sequence. The first (last) NVLink hop, from (to) the GPU itself, is added by
        :meth:`_table`."""
        key = (d, up)
        hit = self._peers.get(key)
        if hit is None:
            hit = {}
            for peer in self._members[d]:
                nic = self._nic[peer]
                leaf = self._leaf[nic]
                links = ((self._down_nv[peer], self._up_pcie[peer], self._nic_up[nic]) if up else
                         (self._nic_down[nic], self._down_pcie[peer], self._up_nv[peer]))
                cand = (self._w(links), links)
                best = hit.get(leaf)
                if best is None or cand < best:
                    hit[leaf] = cand
            self._peers[key] = hit
        return hit

    def _table(self, gpu: int, up: bool) -> list[tuple[int, float, tuple[int, ...]]]:
        """(leaf, weight, links) of the cheapest way from ``gpu`` up to each leaf its domain
        reaches (``up``), or from it down to ``gpu``, ties to the smallest link sequence;
        cheapest first."""
        cache = self._up if up else self._down
        hit = cache.get(gpu)
        if hit is not None:
            return hit
        nic = self._nic[gpu]
        own_leaf = self._leaf[nic]
        own = (self._up_pcie[gpu], self._nic_up[nic]) if up else (self._nic_down[nic], self._down_pcie[gpu])
        out = {own_leaf: (self._w(own), own)}
        hop = self._up_nv[gpu] if up else self._down_nv[gpu]
        hw = self._weight[hop]
        for leaf, (w, links) in self._peer_paths(self.gpu_domain[gpu], up).items():
            if leaf != own_leaf:
                out[leaf] = (hw + w, (hop,) + links if up else links + (hop,))
        rows = sorted((w, links, leaf) for leaf, (w, links) in out.items())
        table = cache[gpu] = [(leaf, w, links) for w, links, leaf in rows]
        return table

    def _core(self, la: int, lb: int) -> tuple[int, ...] | None:
        """Leaf ``la`` to leaf ``lb``: nothing, or up to their spine and down; None across
        planes."""
        if la == lb:
            return ()
        if self._spine[la] == self._spine[lb]:
            return (self._leaf_up[la], self._leaf_down[lb])
        return None

    def links(self, src: int, dst: int) -> tuple[int, ...]:
        """The links of the shortest route from GPU ``src`` to GPU ``dst`` (``src != dst``)."""
        dom = self.gpu_domain
        if dom[src] == dom[dst]:
            return (self._up_nv[src], self._down_nv[dst])
        if self._own_nics:
            ns, nt = self._nic[src], self._nic[dst]
            ls, lt = self._leaf[ns], self._leaf[nt]
            if ls == lt:
                return (self._up_pcie[src], self._nic_up[ns], self._nic_down[nt], self._down_pcie[dst])
            if self._spine[ls] == self._spine[lt]:
                return (self._up_pcie[src], self._nic_up[ns], self._leaf_up[ls], self._leaf_down[lt],
                        self._nic_down[nt], self._down_pcie[dst])
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
                w = wa + self._w(core) + wb
                if w < best_w:
                    best_w, best = w, pa + core + pb
                elif w == best_w:
                    cand = pa + core + pb
                    if cand < best:
                        best = cand
        assert best_w < float("inf"), "every domain reaches every plane (checked in FatTreeRouter.of)"
        return best
