"""One collective on a topology, alone: its time and nccl-tests' bandwidth figures.

``llmsim collective`` prices a single communication op the way the simulator does inside an
iteration (:func:`sim.costs.comm.plan_comm`: phases of flows over the topology's routes, each
flow scaled by the link's efficiency at that size) on an otherwise idle network
(:func:`sim.engine.network.solo_time_s`), as a run with one simulated rank prices it: the flows
the group's first rank sends or receives, each weighted by the group's flows on each of its
links (:func:`representative_phases`), so that 8,192 ranks take as long as 8 to time once the
plan is made; and reports it as nccl-tests does
(NVIDIA/nccl-tests doc/PERFORMANCE.md): ``algbw = S / t`` and ``busbw = algbw x factor`` with the
factor ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter and all-to-all,
and 1 for a send/receive and a ring exchange (nccl-tests' ``sendrecv``: every rank sends to the
next at once), so that busbw compares with the link's peak whatever the rank count.

>>> from sim.config import load_topology
>>> r = collective(load_topology("dgx-h100"), CollectiveKind.ALL_REDUCE, 2**30, 8)
>>> r.algorithm, round(r.busbw_bytes_per_s / 1e9)   # NVLink SHARP; nccl-tests: 466 GB/s at 1 GiB
('nvls', 468)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from itertools import chain

from sim.budget import check, collective_estimate
from sim.costs.base import CommPlan, Flow, Phase, share_weights
from sim.costs.comm import plan_comm
from sim.engine.network import solo_time_s
from sim.errors import ConfigError
from sim.topology.routing import Fabric
from sim.topology.spec import TopologySpec
from sim.types import CollectiveAlgorithm, CollectiveKind, CommClass, parse_enum
from sim.units import byte_count
from sim.workload.ops import CommOp

__all__ = ["CollectiveResult", "collective", "parse_size_bytes", "bus_factor", "representative_phases"]

MAX_SIZE_BYTES = 2.0**50
"""The largest message size priced (1 PiB: nccl-tests sweep to a few GiB; past a float's
integers the flow network's clock stops resolving a byte)."""

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size_bytes(text: str, where: str = "<--bytes>", field: str = "--bytes") -> float:
    """``"1GiB"``, ``"256MB"``, ``"4096"`` -> bytes.

    >>> parse_size_bytes("1GiB"), parse_size_bytes("256 MB"), parse_size_bytes("4096")
    (1073741824.0, 256000000.0, 4096.0)
    >>> parse_size_bytes("1.5")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: --bytes: expected a whole number of bytes (this is 1.5) (got '1.5')
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(text)[:100])
    unit = m.group(2).lower() if m else None
    size = float(m.group(1)) * _UNITS[unit] if m is not None and unit in _UNITS else math.nan
    if not 0 < size <= MAX_SIZE_BYTES:
        raise ConfigError(where, field, "a positive size of at most 1 PiB, such as 1GiB, 256MB or 4096 (bytes)",
                          text)
    if size != math.floor(size):  # "1.5" was 2 bytes in the report: nccl-tests counts whole bytes
        raise ConfigError(where, field, f"a whole number of bytes (this is {size:g})", text)
    return size


def bus_factor(kind: CollectiveKind, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``kind`` over ``n`` ranks."""
    if kind is CollectiveKind.ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class CollectiveResult:
    """One collective's time and bandwidths (SI units)."""

    topology: str
    op: CollectiveKind
    size_bytes: float
    ranks: int
    algorithm: str
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    phases: int

    def to_dict(self) -> dict:
        return {"topology": self.topology, "op": self.op.value, "size_bytes": byte_count(self.size_bytes),
                "ranks": self.ranks, "algorithm": self.algorithm, "time_s": self.time_s,
                "algbw_bytes_per_s": self.algbw_bytes_per_s, "busbw_bytes_per_s": self.busbw_bytes_per_s,
                "phases": self.phases}


def representative_phases(plan: CommPlan, keep: frozenset[int]) -> tuple[Phase, ...]:
    """``plan``'s phases (every flow at weight 1, each rank's flows planned) as a run that
    simulates ``keep`` prices them: each flow weighted by the plan's flows on each of its links
    (:func:`sim.costs.comm.plan_comm`'s representative weights), only the flows ``keep`` sends or
    receives, their weights shared where several of them use a link
    (:func:`~sim.costs.base.share_weights`; ``Simulation._plans`` keeps them the same way).

    The flow network then shares a few flows instead of every rank's: progressive filling over
    all of a large group's flows costs time quadratic in them (a 1,024-rank all-reduce took
    10 s, 8,192 ranks minutes). The plans are symmetric, so the kept flows finish when the
    group's do; the time is the same as over every flow to the last bit or two
    (``benchmarks/bench_collective.py`` compares them)."""
    phases = []
    for ph in plan.phases:
        count = Counter(chain.from_iterable(f.links for f in ph.flows))
        kept = tuple(Flow(f.src, f.dst, f.size_bytes, f.links, tuple(float(count[link]) for link in f.links))
                     for f in ph.flows if f.src in keep or f.dst in keep)
        phases.append(Phase(ph.latency_s, share_weights(kept) if kept else kept))
    return tuple(phases)


_ONE_ALGORITHM = frozenset({CollectiveKind.ALL_TO_ALL, CollectiveKind.SEND_RECV, CollectiveKind.RING_EXCHANGE})
"""The ops ``--algo`` cannot choose for: point-to-point sends, one to each peer."""


def collective(topology: TopologySpec, op: CollectiveKind, size_bytes: float, ranks: int,
               algorithm: CollectiveAlgorithm | str = CollectiveAlgorithm.AUTO,
               excluded: frozenset[CollectiveAlgorithm] = frozenset()) -> CollectiveResult:
    """Price ``op`` of ``size_bytes`` over GPUs ``0 .. ranks - 1`` of ``topology``.

    ``size_bytes`` follows nccl-tests: the all-reduce buffer, the all-gather output, the
    reduce-scatter input, the all-to-all send buffer. ``algorithm`` is ``auto`` (the fastest
    of NCCL's candidates, :func:`sim.costs.comm.plan_comm`) or one forced, as ``NCCL_ALGO``
    forces it; ``excluded``: algorithms ``auto`` may not pick (as ``NCCL_ALGO`` leaves them out).
    A send/receive goes from rank 0 to rank ``ranks - 1``; a ring exchange from every rank to
    the next at once.
    """
    algorithm = parse_enum(CollectiveAlgorithm, algorithm, "<--algo>", "--algo")
    if op in _ONE_ALGORITHM and algorithm is not CollectiveAlgorithm.AUTO:
        raise ConfigError("<--algo>", "--algo", f"auto: {op.value} has one way to run (NCCL's algorithms are "
                          "all-reduce's, all-gather's and reduce-scatter's)", algorithm.value)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise ConfigError("<--ranks>", "--ranks", "an integer of at least 2", ranks)
    if topology.num_gpus is not None and ranks > topology.num_gpus:
        raise ConfigError("<--ranks>", "--ranks", f"at most the topology's {topology.num_gpus} GPUs", ranks)
    check(collective_estimate(topology, ranks, op is CollectiveKind.ALL_TO_ALL))  # before anything is built
    fabric = Fabric.of(topology, ranks)
    group = (0, ranks - 1) if op is CollectiveKind.SEND_RECV else tuple(range(ranks))
    try:
        plan = plan_comm(fabric, CommOp(op, CommClass.DP, group, float(size_bytes)), representative=False,
                         algorithm=algorithm, excluded=excluded)
    except ValueError as exc:
        raise ConfigError("<--algo>", "--algo", f"an algorithm that can run this {op.value} over {ranks} GPUs of "
                          f"{topology.name}; {exc}", algorithm.value) from None
    t = solo_time_s(representative_phases(plan, frozenset(group[:1])), fabric.capacity_bytes_per_s)
    algbw = size_bytes / t if t > 0 else float("inf")
    n = len(group)
    return CollectiveResult(topology.name, op, float(size_bytes), ranks, plan.algorithm, t, algbw,
                            algbw * bus_factor(op, n), len(plan.phases))
