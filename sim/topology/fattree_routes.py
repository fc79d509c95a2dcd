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
and those keep NetworkX's Dijkstra. :meth:`FatTreeRouter.from_index` reads the same tables off
a fat tree's spec (:class:`~sim.topology.fattree_index.FatTreeIndex`), without the graph, as
routes need them.

The router also says which GPUs the routes through a link can start or end at
(:meth:`FatTreeRouter.endpoints`) and what forms a route can take
(:meth:`FatTreeRouter.route_shapes`): what lets a representative simulation plan only the
replica groups whose flows share links with the simulated ranks' (:mod:`sim.costs.comm`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sim.topology.fabrics import HOP_WEIGHT
from sim.types import LinkKind, NodeKind

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["FatTreeRouter"]


class _Lazy(dict):
    """A table filled on first look-up: ``fn(key)`` (a fat tree read from its structure,
    :meth:`FatTreeRouter.from_index`)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def __missing__(self, key):
        value = self[key] = self.fn(key)
        return value


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
        self._num_domains = 0
        self._single_plane = False
        self._roles: dict[int, tuple[str, int]] | None = None
        """``link id -> (role, index)`` (see :meth:`endpoints`); filled as ids are looked up
        when the router reads a fat tree's structure, all at once from a graph's tables."""
        self._near: dict[int, frozenset[int]] = {}
        self._gpus_of_nic: Callable[[int], list[int]] | None = None
        self._nics_of_leaf: Callable[[int], list[int]] | None = None

    @property
    def num_domains(self) -> int:
        return self._num_domains

    @classmethod
    def of(cls, graph: nx.DiGraph, num_gpus: int) -> FatTreeRouter | None:
        """The router of ``graph``, or None when it is not a fault-free fat tree with
        NVSwitch domains of whole servers, every one with a NIC in every plane."""
        nodes = graph.nodes
        kind = {n: d["kind"] for n, d in nodes.items()}
        if NodeKind.SPINE not in kind.values():
            return None
        index: dict[str, int] = {}
        counts = {NodeKind.NIC: 0, NodeKind.LEAF: 0, NodeKind.SPINE: 0, NodeKind.NVSWITCH: 0}
        for n, k in kind.items():
            if k == NodeKind.GPU:
                index[n] = nodes[n]["rank"]
            elif k in counts:
                index[n] = counts[k]
                counts[k] += 1
            else:
                return None
        if sum(1 for k in kind.values() if k == NodeKind.GPU) != num_gpus:
            return None
        none = -1
        r = cls()
        n_gpu, n_nic, n_leaf = num_gpus, counts[NodeKind.NIC], counts[NodeKind.LEAF]
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
            if ku == NodeKind.GPU and kv == NodeKind.NIC:
                ok = put(r._nic, iu, iv) and put(r._up_pcie, iu, lid)
            elif ku == NodeKind.NIC and kv == NodeKind.GPU:
                ok = put(r._down_pcie, iv, lid)
            elif ku == NodeKind.GPU and kv == NodeKind.NVSWITCH:
                ok = put(gpu_sw, iu, iv) and put(r._up_nv, iu, lid)
            elif ku == NodeKind.NVSWITCH and kv == NodeKind.GPU:
                ok = put(r._down_nv, iv, lid)
                sw_gpus[iu] = sw_gpus.get(iu, 0) + 1
            elif ku == NodeKind.NIC and kv == NodeKind.LEAF:
                ok = put(r._leaf, iu, iv) and put(r._nic_up, iu, lid)
            elif ku == NodeKind.LEAF and kv == NodeKind.NIC:
                ok = put(r._nic_down, iv, lid)
            elif ku == NodeKind.LEAF and kv == NodeKind.SPINE:
                ok = put(r._spine, iu, iv) and put(r._leaf_up, iu, lid)
            elif ku == NodeKind.SPINE and kv == NodeKind.LEAF:
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
        r._num_domains = len(r._members)
        r._single_plane = len(planes) == 1
        # With one weight per link type, leaving through one's own NIC and entering through
        # the destination's is the only shortest route within a plane when two NVLink hops
        # (the detour to a peer's NIC) weigh more than the leaf-spine-leaf hops it could save.
        if all(len(w) == 1 for w in weights.values()) and LinkKind.NVLINK in weights and LinkKind.NETWORK in weights:
            r._own_nics = 2 * min(weights[LinkKind.NVLINK]) > 2 * max(weights[LinkKind.NETWORK])
        return r

    @classmethod
    def from_index(cls, index) -> FatTreeRouter:
        """The router of the fat tree ``index`` (a :class:`~sim.topology.fattree_index.FatTreeIndex`)
        describes, its tables filled on first look-up: the same routes as :meth:`of` gives
        for the built graph, at a cost that does not grow with the fabric.

        GPUs are numbered as in the graph; NIC ``(n, j)`` is ``n * nics + j``, leaf ``(u, i)``
        is ``u * leaves + i``, plane ``k`` is spine ``k``, domain ``d`` holds GPUs
        ``d * domain_size`` on."""
        r = cls()
        x = index
        gpn, nics, leaves, dom, npl = x.gpus_per_node, x.nics, x.leaves, x.domain_size, x.nodes_per_leaf
        roles: dict[int, tuple[NodeKind, int]] = {}
        r._roles = roles

        def role(kind: NodeKind, fn: Callable[[int], int]) -> Callable[[int], int]:
            def get(i: int) -> int:
                lid = fn(i)
                roles[lid] = (kind, i)
                return lid
            return get

        def nic_of(g: int) -> int:
            n, lg = divmod(g, gpn)
            return n * nics + x.nic_of_local(lg)

        def leaf_of(nic: int) -> int:
            n, j = divmod(nic, nics)
            return (n // npl) * leaves + x.leaf_index(j)

        r.gpu_domain = _Lazy(lambda g: g // dom)
        r._members = _Lazy(lambda d: list(x.domain_members(d)))
        r._num_domains = x.num_domains
        r._nic = _Lazy(nic_of)
        r._up_pcie = _Lazy(role(NodeKind.GPU, x.gpu_to_nic))
        r._down_pcie = _Lazy(role(NodeKind.GPU, x.nic_to_gpu))
        r._up_nv = _Lazy(role(NodeKind.GPU, x.gpu_to_nvs))
        r._down_nv = _Lazy(role(NodeKind.GPU, x.nvs_to_gpu))
        r._leaf = _Lazy(leaf_of)
        r._nic_up = _Lazy(role(NodeKind.NIC, lambda nic: x.nic_to_leaf(*divmod(nic, nics))))
        r._nic_down = _Lazy(role(NodeKind.NIC, lambda nic: x.leaf_to_nic(*divmod(nic, nics))))
        r._spine = _Lazy(lambda leaf: x.leaf_plane(leaf % leaves))
        r._leaf_up = _Lazy(role(NodeKind.LEAF, lambda leaf: x.leaf_to_spine(*divmod(leaf, leaves))))
        r._leaf_down = _Lazy(role(NodeKind.LEAF, lambda leaf: x.spine_to_leaf(*divmod(leaf, leaves))))
        r._weight = _Lazy(lambda lid: x.info[lid][4])
        r._own_nics = 2 * HOP_WEIGHT[LinkKind.NVLINK] > 2 * HOP_WEIGHT[LinkKind.NETWORK]
        r._single_plane = len({x.leaf_plane(i) for i in range(leaves)}) == 1
        r._gpus_of_nic = lambda nic: list(x.gpus_of_nic(*divmod(nic, nics)))
        r._nics_of_leaf = lambda leaf: [n * nics + j for n, j in x.nics_of_leaf(*divmod(leaf, leaves))]
        return r

    # -- which GPUs a link's traffic can come from -------------------------------------------
    def _graph_roles(self) -> None:
        """The roles of every link and the NICs' GPUs and leaves' NICs, from the tables a
        graph filled (:meth:`of`)."""
        roles: dict[int, tuple[NodeKind, int]] = {}
        for arrs, kind in (((self._up_pcie, self._down_pcie, self._up_nv, self._down_nv), NodeKind.GPU),
                           ((self._nic_up, self._nic_down), NodeKind.NIC),
                           ((self._leaf_up, self._leaf_down), NodeKind.LEAF)):
            for arr in arrs:
                for i, lid in enumerate(arr):
                    roles[lid] = (kind, i)
        self._roles = roles
        by_nic: dict[int, list[int]] = {}
        for g, nic in enumerate(self._nic):
            by_nic.setdefault(nic, []).append(g)
        by_leaf: dict[int, list[int]] = {}
        for nic, leaf in enumerate(self._leaf):
            by_leaf.setdefault(leaf, []).append(nic)
        self._gpus_of_nic = lambda nic: by_nic.get(nic, [])
        self._nics_of_leaf = lambda leaf: by_leaf.get(leaf, [])

    @property
    def own_routes_only(self) -> bool:
        """Whether every route between domains leaves through the source GPU's own NIC and
        enters through the destination's (one plane, and a detour to a peer's NIC never
        cheaper): then a GPU's links carry only its own traffic."""
        return self._own_nics and self._single_plane

    def endpoints(self, link: int) -> frozenset[int]:
        """The GPUs among which every route through ``link`` starts or ends (a superset).

        A route between domains runs up from its source domain (from the source GPU, or
        through a peer of its domain, to a NIC of that domain), across leaves, and down into
        its destination's domain the same way; within a domain it is two NVLink hops. So a
        GPU's or a NIC's link carries routes from or to its domain, and a leaf's links routes
        from or to the domains with a NIC on it; with :attr:`own_routes_only`, routes from or
        to that GPU, the NIC's GPUs and the GPUs of the leaf's NICs.

        Raises
        ------
        KeyError
            If ``link`` is none of the router's (a link id it never handed out).
        """
        hit = self._near.get(link)
        if hit is not None:
            return hit
        if self._roles is None:
            self._graph_roles()
        kind, i = self._roles[link]
        if kind is NodeKind.GPU:
            gpus = [i]
        elif kind is NodeKind.NIC:
            gpus = self._gpus_of_nic(i)
        else:
            gpus = [g for nic in self._nics_of_leaf(i) for g in self._gpus_of_nic(nic)]
        if not self.own_routes_only:
            gpus = [m for d in sorted({self.gpu_domain[g] for g in gpus}) for m in self._members[d]]
        hit = self._near[link] = frozenset(gpus)
        return hit

    def role_links(self, role: str) -> list[int]:
        """Link ids of one role (``up_nv``, ``down_nv``, ``up_pcie``, ``down_pcie``,
        ``nic_up``, ``nic_down``, ``leaf_up``, ``leaf_down``): every one from a graph's
        tables; GPU 0's, NIC 0's or leaf 0's when read from a structure, where a role's links
        are all alike."""
        arr = getattr(self, "_" + role)
        return list(arr) if isinstance(arr, list) else [arr[0]]

    def route_shapes(self) -> list[tuple[str, ...]]:
        """The roles of the links of every form a route can take, in route order (see the
        module docstring)."""
        shapes = [("up_nv", "down_nv")]
        ups = [("up_pcie", "nic_up")]
        downs = [("nic_down", "down_pcie")]
        if not self.own_routes_only:
            ups.append(("up_nv", "down_nv", "up_pcie", "nic_up"))
            downs.append(("nic_down", "down_pcie", "up_nv", "down_nv"))
        for a in ups:
            for core in ((), ("leaf_up", "leaf_down")):
                for b in downs:
                    shapes.append(a + core + b)
        return shapes

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
