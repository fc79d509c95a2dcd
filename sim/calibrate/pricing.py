"""An nccl-tests log's collective priced on a topology, at the log's ranks, nodes and GPUs per node.

The log's ranks are placed on the topology as its ``Rank N ... on HOST`` lines place them: the
``k`` ranks of its ``i``-th host (hosts in the order of their lowest rank) on the first ``k``
GPUs of the topology's node ``i``. Where that is GPUs ``0 .. ranks - 1`` (one node, or full
nodes), the collective is priced exactly as ``llmsim collective`` prices it
(:func:`sim.studies.collective.collective`, ``auto``); otherwise the same planner and flow
network price it over the placed GPUs.

nccl-tests' conventions (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``; ``src/all_gather.cu``,
``src/reduce_scatter.cu``, ``src/alltoall.cu``, ``src/sendrecv.cu``): ``size`` is the
all-reduce buffer, the all-gather output and the reduce-scatter input (``count x type size x
ranks``, ``count`` per rank), the all-to-all send buffer per rank, and what each rank of
``sendrecv`` sends to the next (and receives from the previous) at once; ``busbw = size / t
x factor``, the factor ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter
and all-to-all, and 1 for ``sendrecv``.

Where the log sets ``NCCL_ALGO`` (:attr:`~sim.calibrate.nccl_tests.NcclTestsLog.nccl_algo`), the
planner weighs only the algorithms it allows (:func:`excluded_algorithms`): a log run with
``NCCL_ALGO=Ring`` is priced as rings, not as the NVLS-tree NCCL would otherwise choose.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.budget import check, collective_estimate
from sim.calibrate.nccl_tests import NcclTestsLog
from sim.costs.comm import plan_comm
from sim.engine.network import solo_time_s
from sim.errors import ConfigError
from sim.studies.collective import bus_factor, collective, representative_phases
from sim.topology.routing import Fabric
from sim.topology.spec import FabricKind, TopologySpec
from sim.types import CollectiveAlgorithm, CollectiveKind, CommClass
from sim.workload.ops import CommOp

__all__ = ["NCCL_ALGO_NAMES", "PRICED", "Placement", "excluded_algorithms", "log_busbw_GBps", "placement",
           "price_busbw_GBps", "price_time_s"]

PRICED = {"all_reduce": CollectiveKind.ALL_REDUCE, "all_gather": CollectiveKind.ALL_GATHER,
          "reduce_scatter": CollectiveKind.REDUCE_SCATTER, "alltoall": CollectiveKind.ALL_TO_ALL,
          "sendrecv": CollectiveKind.RING_EXCHANGE}
"""The nccl-tests tests the simulator prices, and the collective it prices each as
(``sendrecv``: every rank sends to the next at once, a ring exchange)."""


_A = CollectiveAlgorithm
NCCL_ALGO_NAMES = {"ring": frozenset({_A.RING, _A.MULTI_RING}), "tree": frozenset({_A.TREE}),
                   "nvls": frozenset({_A.NVLS}), "nvlstree": frozenset({_A.NVLS_TREE}), "pat": frozenset({_A.PAT}),
                   "collnetdirect": frozenset(), "collnetchain": frozenset()}
"""``NCCL_ALGO``'s names (NCCL matches them without case) and the plans of :mod:`sim.costs.comm`
that each is (NCCL's ring is one ring inside a node and a ring per channel across nodes; CollNet
is not priced)."""
_SHOWN = "Ring, Tree, NVLS, NVLSTree, PAT, CollnetDirect, CollnetChain"
_NCCL_PLANS = frozenset({_A.RING, _A.MULTI_RING, _A.TREE, _A.NVLS, _A.NVLS_TREE, _A.PAT, _A.HIERARCHICAL})


def excluded_algorithms(nccl_algo: str | None, path: str = "<log>") -> frozenset[CollectiveAlgorithm]:
    """The plans ``NCCL_ALGO=nccl_algo`` rules out: every plan but the listed algorithms', or,
    after ``^``, the listed ones'.

    Raises
    ------
    ConfigError
        Naming ``path`` for a name NCCL does not know.

    >>> sorted(a.value for a in excluded_algorithms("Ring"))
    ['hierarchical', 'nvls', 'nvls-tree', 'pat', 'tree']
    >>> sorted(a.value for a in excluded_algorithms("^NVLS,NVLSTree")), excluded_algorithms(None)
    (['nvls', 'nvls-tree'], frozenset())
    """
    if not nccl_algo:
        return frozenset()
    leave_out = nccl_algo.startswith("^")
    named: set[CollectiveAlgorithm] = set()
    for word in nccl_algo.lstrip("^").split(","):
        plans = NCCL_ALGO_NAMES.get(word.strip().lower())
        if plans is None:
            raise ConfigError(path, "NCCL_ALGO", f"NCCL's algorithm names ({_SHOWN}), comma-separated, or after ^",
                              nccl_algo)
        named |= plans
    return frozenset(named) if leave_out else _NCCL_PLANS - named


@dataclass(frozen=True)
class Placement:
    """Where a log's ranks sit on a topology: the GPUs of the group, and the GPUs built."""

    group: tuple[int, ...]
    num_gpus: int

    @property
    def contiguous(self) -> bool:
        """Whether the group is GPUs ``0 .. ranks - 1`` of as many GPUs (as ``llmsim collective`` prices)."""
        return self.group == tuple(range(self.num_gpus))


def placement(log: NcclTestsLog, topology: TopologySpec, name: str) -> Placement:
    """The log's ranks on ``topology`` (``name``: what the user called it).

    Raises
    ------
    ConfigError
        Naming the log when its ranks span several nodes and the topology has no scale-out
        fabric or fixes fewer GPUs, or a host of the log has more GPUs than the topology's node.
    """
    per_host: dict[str, int] = {}
    for host in log.rank_hosts:
        per_host[host] = per_host.get(host, 0) + 1
    counts = list(per_host.values())
    gpn = topology.gpus_per_node
    if log.nodes > 1 and topology.scale_out.kind is FabricKind.NONE:
        raise ConfigError(log.path, "nodes", f"one node: {name} has no scale-out fabric (scale_out.kind none), and "
                          f"the log's {log.ranks} ranks span {log.nodes} nodes (calibrate with --topology T, a "
                          "topology of several nodes)", log.nodes)
    if log.nodes > 1 and max(counts) > gpn:
        raise ConfigError(log.path, "ranks", f"at most {name}'s {gpn} GPUs per node on each host",
                          f"{max(counts)} ranks on one host")
    if log.nodes == 1:
        group, num_gpus = tuple(range(log.ranks)), log.ranks
    else:
        group = tuple(i * gpn + j for i, k in enumerate(counts) for j in range(k))
        num_gpus = log.nodes * gpn if group != tuple(range(log.ranks)) else log.ranks
    if topology.num_gpus is not None and num_gpus > topology.num_gpus:
        raise ConfigError(log.path, "ranks", f"at most the {topology.num_gpus} GPUs {name} fixes", num_gpus)
    return Placement(group, num_gpus)


def price_time_s(kind: CollectiveKind, size_bytes: float, where: Placement, topology: TopologySpec,
                 excluded: frozenset[CollectiveAlgorithm] = frozenset()) -> float:
    """The time of ``kind`` of ``size_bytes`` (nccl-tests' size) over ``where``'s GPUs of
    ``topology``, NCCL's choice of the algorithms ``excluded`` leaves (:func:`excluded_algorithms`)."""
    if where.contiguous:
        return collective(topology, kind, size_bytes, len(where.group), excluded=excluded).time_s
    check(collective_estimate(topology, where.num_gpus, kind is CollectiveKind.ALL_TO_ALL))
    fabric = Fabric.of(topology, where.num_gpus)
    plan = plan_comm(fabric, CommOp(kind, CommClass.DP, where.group, float(size_bytes)), representative=False,
                     excluded=excluded)
    return solo_time_s(representative_phases(plan, frozenset(where.group[:1])), fabric.capacity_bytes_per_s)


def price_busbw_GBps(kind: CollectiveKind, size_bytes: float, where: Placement, topology: TopologySpec,
                     excluded: frozenset[CollectiveAlgorithm] = frozenset()) -> float:
    """nccl-tests' bus bandwidth (GB/s) of :func:`price_time_s`."""
    t = price_time_s(kind, size_bytes, where, topology, excluded)
    return size_bytes / t * bus_factor(kind, len(where.group)) / 1e9


def log_busbw_GBps(log: NcclTestsLog) -> dict[int, float]:
    """The log's bus bandwidth (GB/s) at each size, from the faster of its out-of-place and
    in-place times, with nccl-tests' factor for its collective."""
    factor = bus_factor(PRICED[log.collective], log.ranks)
    return {r.size_bytes: r.size_bytes / (r.best_time_us * 1e-6) * factor / 1e9 for r in log.rows}
