"""A fat tree's links by arithmetic: the link ids, capacities and routes' tables that
:func:`sim.topology.build.build_topology` and :class:`~sim.topology.fattree_routes.FatTreeRouter`
would give, without building the graph.

Building the NetworkX graph of an N-GPU fat tree and reading the router's tables off it costs
about 40 us per GPU (measured: 0.7 s for 16,384 GPUs, 1.3 s for 32,768), yet a representative
simulation touches the links of a few thousand GPUs at most. :class:`FatTreeIndex` answers for
any link what the built graph would say, in a few integer operations:

* Link ids. ``build_topology`` numbers the directed edges in ``sorted(g.edges())`` order, that
  is by the names of their ends as strings (``gpu10`` before ``gpu2``). The node families sort
  ``gpu`` < ``leaf`` < ``nic`` < ``nvs`` < ``spine``, every family's nodes sort by their
  numbers' decimal strings (``nic{n}.{j}`` by ``(str(n), str(j))``: ``.`` sorts before every
  digit) and each node's out-edges by their targets' names the same way, so an edge's id is
  the out-degrees of the nodes before its source plus its target's place among the source's,
  each a count of integers whose decimal strings sort lower (:func:`str_rank`).
* The capacity of every link, as the engine wants a list: the families' edges in that order
  repeat a few patterns (every GPU ``[PCIe, NVLink]``, every server's NICs the same), so the
  list is a few list products and one pass over the leaves.
* Everything else about a link (name, kind, latency, efficiency, hop weight) for the links a
  route hands out, recorded when their ids are first computed.

:meth:`FatTreeIndex.of` returns None for any spec it does not cover exactly (a GraphML file,
failed links, an NVLink ring, a NIC whose GPUs are in two NVSwitch domains, a domain without a
NIC in every plane), and those are built as graphs. ``tests/unit/test_fattree_index.py`` compares
every link id, capacity and route with the built graph's on small instances of each case.
"""

from __future__ import annotations

import math

from sim.topology.fabrics import HOP_WEIGHT
from sim.topology.spec import FabricKind, LinkSpec, ScaleUpKind, TopologySpec
from sim.types import LinkKind

__all__ = ["FatTreeIndex", "str_rank"]


def str_rank(x: int, n: int) -> int:
    """How many integers ``y`` in ``[0, n)`` have ``str(y) < str(x)``.

    Among the ``L``-digit integers, those below the first ``L`` digits of ``x`` sort first,
    and so does that prefix itself when it is shorter than ``x``; among the longer ones,
    those whose first ``len(str(x))`` digits are below ``x``.

    >>> str_rank(2, 12), sorted(range(12), key=str).index(2)
    (4, 4)
    >>> str_rank(100, 12)  # "0", "1" and "10" sort before "100"; "11" after
    3
    """
    ls = len(str(x))
    count, lo, length, top = 0, 0, 1, 10
    while lo < n:
        hi = top if top < n else n
        if length <= ls:
            p = x // _POW10[ls - length]  # the first `length` digits
            if p > lo:
                count += (p if p < hi else hi) - lo
            if length < ls and lo <= p < hi:
                count += 1  # a proper prefix sorts first
        else:
            cut = x * _POW10[length - ls]
            if cut > lo:
                count += (cut if cut < hi else hi) - lo
        lo, length, top = hi, length + 1, top * 10
    return count


_POW10 = [10 ** k for k in range(40)]


def _rank_in(x: int, lo: int, hi: int) -> int:
    """How many integers of ``[lo, hi)`` sort before ``x`` as decimal strings."""
    if hi - lo <= 1:
        return 0
    if hi - lo <= 16:
        s = str(x)
        return sum(1 for y in range(lo, hi) if str(y) < s)
    return str_rank(x, hi) - str_rank(x, lo)


def _str_order(items) -> dict[int, int]:
    """Each of a few integers' place among them in decimal-string order."""
    return {v: i for i, v in enumerate(sorted(items, key=str))}


class FatTreeIndex:
    """The links of the fat tree ``build_topology(spec, num_gpus)`` builds (see the module
    docstring). Built by :meth:`of`.

    GPUs, servers (``n``), NICs (``(n, j)``), scalable units (``u``), leaves (``(u, i)``) and
    planes (``k``) are the numbers in the graph's node names.
    """

    def __init__(self, spec: TopologySpec, num_gpus: int) -> None:
        out, up = spec.scale_out, spec.scale_up
        self.spec = spec
        self.num_gpus = n = num_gpus
        self.gpus_per_node = gpn = spec.gpus_per_node
        self.nics = nics = out.nics_per_node
        self.planes = out.planes
        self.rail = out.kind is FabricKind.RAIL_OPTIMIZED_FAT_TREE
        self.domain_size = dom = min(up.domain_size, n)
        self.num_domains = math.ceil(n / dom)
        self.num_nodes = nn = n // gpn
        self.nodes_per_leaf = npl = out.nodes_per_leaf
        self.units = math.ceil(nn / npl)
        self.leaves = nics if self.rail else self.planes
        """Leaves per scalable unit."""
        self.gpus_per_nic = max(gpn // nics, 1)
        pcie = out.pcie or LinkSpec(bandwidth_bytes_per_s=math.inf, latency_s=0.0)
        self._nvlink, self._pcie, self._nic_link = up.link, pcie, out.nic
        # NIC j's GPUs per server, its plane, and which NICs a leaf (by its index i) holds
        self._nic_gpus = [sum(1 for lg in range(gpn) if self.nic_of_local(lg) == j) for j in range(nics)]
        self._leaf_nics = [[j for j in range(nics) if self.leaf_index(j) == i] for i in range(self.leaves)]
        self._plane_leaves = [[i for i in range(self.leaves) if self.leaf_plane(i) == k] for k in range(self.planes)]
        self._j_order = _str_order(range(nics))
        self._leaf_nic_order = [_str_order(js) for js in self._leaf_nics]
        self._plane_leaf_order = [_str_order(is_) for is_ in self._plane_leaves]
        # the families' first ids and the out-degrees the offsets add up
        self._per_node = gpn + nics                        # a server's NICs' out-edges
        self._unit_edges = [self._unit_out(u) for u in (0, self.units - 1)]
        self._leaf_base = 2 * n
        self._nic_base = self._leaf_base + nn * nics + self.units * self.leaves
        self._nvs_base = self._nic_base + nn * self._per_node
        self._spine_base = self._nvs_base + n
        self.num_links = self._spine_base + self.units * self.leaves
        within: list[int] = []
        acc = 0
        for j in sorted(range(nics), key=str):
            within.append(acc)
            acc += self._nic_gpus[j] + 1
        self._nic_within = {j: within[self._j_order[j]] for j in range(nics)}
        acc, self._spine_within = 0, {}
        for k in sorted(range(self.planes), key=str):
            self._spine_within[k] = acc
            acc += self.units * len(self._plane_leaves[k])
        self._uplinks: dict[int, LinkSpec] = {}
        self._gpu_at: dict[int, int] = {}
        self._node_at: dict[int, int] = {}
        self._leaf_at: dict[tuple[int, int], int] = {}
        self.info: dict[int, tuple[tuple[str, tuple], str, float, object, float]] = {}
        """``link id -> ((name template, its numbers), kind, latency_s, efficiency,
        hop_weight)`` of every link whose id was computed (:meth:`link_name` formats the
        name)."""

    # -- which specs -------------------------------------------------------------------------
    @classmethod
    def of(cls, spec: TopologySpec, num_gpus: int) -> FatTreeIndex | None:
        """The index of ``spec`` at ``num_gpus``, or None when it is not a fat tree this
        covers: NVSwitch domains of whole servers (or whole NICs' GPUs within a server), each
        reaching every plane, no faults, no GraphML file, sizes that build."""
        out, up, gpn = spec.scale_out, spec.scale_up, spec.gpus_per_node
        if (spec.graph_file is not None or spec.faults or up.kind is not ScaleUpKind.NVSWITCH
                or out.kind not in (FabricKind.RAIL_OPTIMIZED_FAT_TREE, FabricKind.FAT_TREE)
                or (spec.num_gpus is not None and spec.num_gpus != num_gpus)):
            return None
        nics = out.nics_per_node
        if num_gpus < gpn or num_gpus % gpn or (gpn % nics and nics % gpn) or out.nodes_per_leaf < 1:
            return None
        dom = min(up.domain_size, num_gpus)
        if num_gpus <= dom:
            return None  # one domain: no scale-out fabric
        per_nic = max(gpn // nics, 1)
        if dom % gpn:  # domains inside a server: whole NICs' GPUs each
            if gpn % dom or dom % per_nic:
                return None
        idx = cls(spec, num_gpus)
        planes_with_leaves = {idx.leaf_plane(i) for i in range(idx.leaves)}
        blocks = [range(gpn)] if dom % gpn == 0 else [range(b, b + dom) for b in range(0, gpn, dom)]
        for lgs in blocks:
            if {idx.leaf_plane(idx.leaf_index(idx.nic_of_local(lg))) for lg in lgs} != planes_with_leaves:
                return None
        return idx

    # -- structure ---------------------------------------------------------------------------
    def nic_of_local(self, lg: int) -> int:
        """The NIC (index within its server) of the server's GPU ``lg``."""
        return lg * self.nics // self.gpus_per_node if self.nics <= self.gpus_per_node else lg

    def plane_of(self, j: int) -> int:
        return j * self.planes // self.nics

    def leaf_index(self, j: int) -> int:
        """The index ``i`` (within a unit) of the leaf NIC ``j`` is on."""
        return j if self.rail else self.plane_of(j)

    def leaf_plane(self, i: int) -> int:
        return self.plane_of(i) if self.rail else i

    def nodes_here(self, u: int) -> int:
        return min(self.nodes_per_leaf, self.num_nodes - u * self.nodes_per_leaf)

    def gpus_of_nic(self, n: int, j: int) -> range:
        """The GPUs NIC ``(n, j)`` serves (none for a NIC past the server's GPUs)."""
        gpn, c = self.gpus_per_node, self.gpus_per_nic
        if self.nics > gpn:
            return range(n * gpn + j, n * gpn + j + 1) if j < gpn else range(0)
        return range(n * gpn + j * c, n * gpn + (j + 1) * c)

    def nics_of_leaf(self, u: int, i: int) -> list[tuple[int, int]]:
        first = u * self.nodes_per_leaf
        return [(n, j) for n in range(first, first + self.nodes_here(u)) for j in self._leaf_nics[i]]

    def domain_members(self, d: int) -> range:
        return range(d * self.domain_size, min((d + 1) * self.domain_size, self.num_gpus))

    def _unit_out(self, u: int) -> int:
        """Out-edges of unit ``u``'s leaves: one per NIC and one to the spine each."""
        return self.nodes_here(u) * self.nics + self.leaves

    def _uplink(self, u: int) -> LinkSpec:
        """The leaf-spine link of unit ``u``'s leaves (as :func:`~sim.topology.fabrics.add_fat_tree`)."""
        nh = self.nodes_here(u)
        hit = self._uplinks.get(nh)
        if hit is None:
            hit = self._uplinks[nh] = self._make_uplink(nh)
        return hit

    def _make_uplink(self, nodes_here: int) -> LinkSpec:
        out = self.spec.scale_out
        on_leaf = nodes_here * (1 if self.rail else self.nics // self.planes)
        return LinkSpec(out.nic.bandwidth_bytes_per_s * on_leaf / out.oversubscription, out.switch_latency_s,
                        out.nic.efficiency)

    def _spine_name(self, k: int) -> str:
        return "spine" if self.planes == 1 else f"spine.p{k}"

    # -- link ids ----------------------------------------------------------------------------
    def _put(self, lid: int, name: str, args: tuple, spec: LinkSpec, kind: LinkKind) -> int:
        if lid not in self.info:
            self.info[lid] = ((name, args), kind, spec.latency_s, spec.efficiency, HOP_WEIGHT[kind])
        return lid

    def link_name(self, lid: int) -> str:
        """The name (``u->v``) of a link whose id was computed."""
        name, args = self.info[lid][0]
        return name.format(*args)

    def _gpu_pos(self, r: int) -> int:
        pos = self._gpu_at.get(r)
        if pos is None:
            pos = self._gpu_at[r] = str_rank(r, self.num_gpus)
        return pos

    def gpu_to_nic(self, r: int) -> int:
        n, lg = divmod(r, self.gpus_per_node)
        return self._put(2 * self._gpu_pos(r), "gpu{}->nic{}.{}", (r, n, self.nic_of_local(lg)), self._pcie,
                         LinkKind.PCIE)

    def gpu_to_nvs(self, r: int) -> int:
        return self._put(2 * self._gpu_pos(r) + 1, "gpu{}->nvs{}", (r, r // self.domain_size), self._nvlink,
                         LinkKind.NVLINK)

    def nvs_to_gpu(self, r: int) -> int:
        d, dom, nd = r // self.domain_size, self.domain_size, self.num_domains
        last = self.num_gpus - (nd - 1) * dom
        off = str_rank(d, nd) * dom
        if last < dom and str(nd - 1) < str(d):
            off -= dom - last
        m = self.domain_members(d)
        return self._put(self._nvs_base + off + _rank_in(r, m.start, m.stop), "nvs{}->gpu{}", (d, r), self._nvlink,
                         LinkKind.NVLINK)

    def _nic_offset(self, n: int, j: int) -> int:
        pos = self._node_at.get(n)
        if pos is None:
            pos = self._node_at[n] = str_rank(n, self.num_nodes)
        return self._nic_base + pos * self._per_node + self._nic_within[j]

    def nic_to_gpu(self, r: int) -> int:
        n, lg = divmod(r, self.gpus_per_node)
        j = self.nic_of_local(lg)
        g = self.gpus_of_nic(n, j)
        return self._put(self._nic_offset(n, j) + _rank_in(r, g.start, g.stop), "nic{}.{}->gpu{}", (n, j, r),
                         self._pcie, LinkKind.PCIE)

    def nic_to_leaf(self, n: int, j: int) -> int:
        u, i = n // self.nodes_per_leaf, self.leaf_index(j)
        return self._put(self._nic_offset(n, j) + self._nic_gpus[j], "nic{}.{}->leaf{}.{}", (n, j, u, i),
                         self._nic_link, LinkKind.NETWORK)

    def _leaf_offset(self, u: int, i: int) -> int:
        off = self._leaf_at.get((u, i))
        if off is None:
            off = self._leaf_at[(u, i)] = self._leaf_start(u, i)
        return off

    def _leaf_start(self, u: int, i: int) -> int:
        full, last_w = self._unit_edges
        units = self.units
        off = self._leaf_base + str_rank(u, units) * full
        if last_w != full and str(units - 1) < str(u):
            off -= full - last_w
        nh = self.nodes_here(u)
        for i2 in range(self.leaves):
            if str(i2) < str(i):
                off += nh * len(self._leaf_nics[i2]) + 1
        return off

    def leaf_to_nic(self, n: int, j: int) -> int:
        u, i = n // self.nodes_per_leaf, self.leaf_index(j)
        first = u * self.nodes_per_leaf
        pos = _rank_in(n, first, first + self.nodes_here(u)) * len(self._leaf_nics[i]) + self._leaf_nic_order[i][j]
        return self._put(self._leaf_offset(u, i) + pos, "leaf{}.{}->nic{}.{}", (u, i, n, j), self._nic_link,
                         LinkKind.NETWORK)

    def leaf_to_spine(self, u: int, i: int) -> int:
        lid = self._leaf_offset(u, i) + self.nodes_here(u) * len(self._leaf_nics[i])
        return self._put(lid, "leaf{}.{}->" + self._spine_name(self.leaf_plane(i)), (u, i), self._uplink(u),
                         LinkKind.NETWORK)

    def spine_to_leaf(self, u: int, i: int) -> int:
        k = self.leaf_plane(i)
        lid = (self._spine_base + self._spine_within[k] + str_rank(u, self.units) * len(self._plane_leaves[k])
               + self._plane_leaf_order[k][i])
        return self._put(lid, self._spine_name(k) + "->leaf{}.{}", (u, i), self._uplink(u), LinkKind.NETWORK)

    # -- per-link lists ----------------------------------------------------------------------
    def capacities(self) -> list[float]:
        """The bandwidth of every link by id (the engine's capacity list)."""
        pcie = self._pcie.bandwidth_bytes_per_s
        nv, nic = self._nvlink.bandwidth_bytes_per_s, self._nic_link.bandwidth_bytes_per_s
        cap = [pcie, nv] * self.num_gpus
        order_i = sorted(range(self.leaves), key=str)
        units = sorted(range(self.units), key=str)
        up = {u: self._uplink(u).bandwidth_bytes_per_s for u in (0, self.units - 1)}
        for u in units:
            bw, nh = up[0 if u < self.units - 1 else self.units - 1], self.nodes_here(u)
            for i in order_i:
                cap += [nic] * (nh * len(self._leaf_nics[i]))
                cap.append(bw)
        node: list[float] = []
        for j in sorted(range(self.nics), key=str):
            node += [pcie] * self._nic_gpus[j]
            node.append(nic)
        cap += node * self.num_nodes
        cap += [nv] * self.num_gpus
        for k in sorted(range(self.planes), key=str):
            for u in units:
                bw = up[0 if u < self.units - 1 else self.units - 1]
                cap += [bw] * len(self._plane_leaves[k])
        assert len(cap) == self.num_links
        return cap
