"""A topology's scale-up collective latency and efficiency curves from one measured all-reduce
(or, with no all-reduce log, one all-gather or reduce-scatter, else one all-to-all or sendrecv).

The model the simulator prices a one-node all-reduce with (:mod:`sim.costs.comm`) is inverted
at every size of an nccl-tests ``all_reduce_perf`` table, as :mod:`sim.derive.nccl_curves` does
for the presets' published tables:

* ring over ``n`` GPUs: ``t = L + 2(n-1) h + 2(n-1)/n S / (B eff(S))``
* NVLS over ``n`` GPUs: ``t = L + L_nvls + (1 + 1/n) S / (B eff(S))``

with ``B`` the topology's NVLink bandwidth per direction, ``h`` its hop latency (GPU to switch
to GPU) and ``L_nvls`` NCCL's NVLS latency (:data:`sim.costs.comm.NVLS_LATENCY_S`). The log
does not say which algorithm NCCL ran unless it sets ``NCCL_ALGO``; the topology's own is taken:
NVLS where the topology gives NVLS an efficiency curve (NCCL's default for an all-reduce inside
an NVLink-SHARP node, nccl-tests issue #212) and the log's ``NCCL_ALGO`` does not rule it out
(``NCCL_ALGO=Ring``), the ring otherwise.

* ``L`` (``scale_up.collective_latency_us``) is the smallest size's time less that algorithm's
  fixed latency, when the smallest size is at most :data:`LATENCY_UP_TO_BYTES` (latency-bound);
  lowered where a size from :data:`CURVE_FROM_BYTES` up would otherwise need more than the
  link's rate; the topology's own when the log starts at larger sizes.
* That algorithm's curve has a point at every size of the log from :data:`CURVE_FROM_BYTES`
  up: what remains of ``t`` once the latency is paid, as a fraction of ``B``.
* On an NVLS topology the ring's curve at those sizes is the lesser of the topology's and the
  efficiency at which the ring would take the measured time: no algorithm the simulator may pick
  for this all-reduce is faster than the log (``auto`` takes the fastest,
  :func:`sim.costs.comm.plan_comm`).

An ``all_gather_perf`` or ``reduce_scatter_perf`` log of one node is inverted the same way with
the ring, the algorithm the planner runs them with inside a node:
``t = L + (n-1) h + (n-1)/n S / (B eff(S))`` (``S`` nccl-tests' size, the gathered output or the
scattered input); it sets the ring's curve, and an NVLS curve stays the topology's. With none of
those, an ``alltoall_perf`` or ``sendrecv_perf`` log of one node is inverted as the planner sends
them (:data:`DIRECT`), straight through the switch, one hop:

* all-to-all: ``t = L + h + (n-1)/n S / (B eff(S))`` (``S`` each rank's send buffer, of which
  ``S/n`` goes to each peer);
* sendrecv: ``t = h + S / (B eff(S))`` (each rank sends ``S`` to the next at once, a ring
  exchange, which pays its route's latency and no collective latency: ``L`` stays the
  topology's).

They set the link's curve (``efficiency_by_size_bytes``), which every collective inside the node
is priced at, so a curve from them prices an all-reduce at what an all-to-all or a pipeline
send reached; a log of the all-reduce, where there is one, is the better input. Given beside
one, they keep curves of their own instead (:data:`OWN_CURVES`, :func:`fit_own_curve`), which
price only all-to-alls, or only point-to-point sends, inside one NVSwitch domain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.calibrate.nccl_tests import NcclTestsLog
from sim.calibrate.pricing import excluded_algorithms
from sim.costs.comm import NVLS_LATENCY_S
from sim.errors import ConfigError
from sim.topology.spec import TopologySpec
from sim.types import CollectiveAlgorithm

__all__ = ["CURVE_FROM_BYTES", "DIRECT", "LATENCY_UP_TO_BYTES", "OWN_CURVES", "ROUND_EFFICIENCY", "CalibratedValue",
           "ScaleUpFit", "fit_own_curve", "fit_scale_up", "log_points", "size_words"]

CURVE_FROM_BYTES = 2**20
"""The smallest size the calibrated curves have a point at (1 MiB: below it an all-reduce inside
a node is latency-bound and the curve's point would be noise over the latency)."""
LATENCY_UP_TO_BYTES = 2**16
"""The largest smallest-size of a log whose time is taken as the collective latency (64 KiB:
the A100 and H100 logs are flat to within a few microseconds up to it)."""
ROUND_EFFICIENCY = 4
"""Decimals an efficiency is written with (0.01% of the link rate)."""
OWN_CURVES = {"alltoall": "alltoall_efficiency_by_size_bytes", "sendrecv": "p2p_efficiency_by_size_bytes",
              "all_gather": "all_gather_efficiency_by_size_bytes",
              "reduce_scatter": "reduce_scatter_efficiency_by_size_bytes"}
"""The curve of its own a one-node log of these tests sets beside the link curves another log
calibrated (:func:`fit_own_curve`): the all-to-all's, point-to-point sends' (sendrecv, pipeline
transfers), the ring all-gather's and the ring reduce-scatter's, each inside one NVSwitch
domain."""
DIRECT = {"alltoall": "all-to-all", "sendrecv": "ring exchange"}
"""The tests the planner prices as direct sends through the switch (:mod:`sim.costs.comm`), not as
a ring, and what it calls each: one route's hop for the latency, every GPU's port carrying its
share of the size."""


@dataclass(frozen=True)
class CalibratedValue:
    """One topology field a calibration sets (``scale_up.<key>`` in the topology file's units),
    and where it came from."""

    key: str
    value: float | list[list[float]]
    source: str


@dataclass(frozen=True)
class ScaleUpFit:
    """The scale-up fields calibrated from one log, and the algorithm whose curve reproduces it."""

    algorithm: str
    values: tuple[CalibratedValue, ...]


def size_words(s: float) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if s >= k and s % k == 0:
            return f"{s / k:g} {unit}"
    return f"{s:g} B"


def _one_node_points(log: NcclTestsLog, topology: TopologySpec,
                     topology_name: str) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """``(size, seconds)`` at every size of ``log``, and from :data:`CURVE_FROM_BYTES` up: the
    faster of out-of-place and in-place.

    Raises
    ------
    ConfigError
        Naming the log when it has no size from :data:`CURVE_FROM_BYTES` up, or more ranks
        than the topology's scale-up domain.
    """
    up = topology.scale_up
    if log.ranks > up.domain_size or log.ranks < 2:
        raise ConfigError(log.path, "ranks", f"2 to the {up.domain_size} GPUs of a {topology_name} scale-up domain",
                          log.ranks)
    return log_points(log)


def log_points(log: NcclTestsLog) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """``(size, seconds)`` at every size of ``log``, and from :data:`CURVE_FROM_BYTES` up (the
    sizes a calibrated curve has points at): the faster of out-of-place and in-place.

    Raises
    ------
    ConfigError
        Naming the log when it has no size from :data:`CURVE_FROM_BYTES` up.
    """
    points = [(r.size_bytes, r.best_time_us * 1e-6) for r in log.rows]
    curve_points = [(s, t) for s, t in points if s >= CURVE_FROM_BYTES]
    if not curve_points:
        raise ConfigError(log.path, "size", f"rows from {size_words(CURVE_FROM_BYTES)} up (the efficiency curve's "
                          "sizes)", f"sizes up to {points[-1][0]} B")
    return points, curve_points


def _one_node_model(collective: str, n: int) -> tuple[int, float]:
    """(hops the plan's latency pays, share of the size ``S`` each GPU's port carries) of the
    planner's price of one node's ``collective`` over ``n`` GPUs (module docstring): a ring's
    ``n - 1`` steps and ``(n-1)/n S`` (twice both for an all-reduce, a reduce-scatter and an
    all-gather); an all-to-all's and a sendrecv's one route through the switch, ``(n-1)/n S`` and
    ``S``.

    >>> _one_node_model("all_reduce", 8), _one_node_model("all_gather", 8), _one_node_model("sendrecv", 8)
    ((14, 1.75), (7, 0.875), (1, 1.0))
    """
    if collective in DIRECT:
        return 1, (n - 1) / n if collective == "alltoall" else 1.0
    passes = 2 if collective == "all_reduce" else 1
    return passes * (n - 1), passes * (n - 1) / n


def _inverted(curve_points: list[tuple[int, float]], factor: float, bandwidth: float,
              fixed_s: float) -> list[list[float]]:
    """At each ``(S, t)``, the efficiency at which ``factor S`` over ``bandwidth`` takes what is
    left of ``t`` after ``fixed_s`` (1 where nothing is left), rounded to
    :data:`ROUND_EFFICIENCY` decimals and at least their last digit."""
    curve = []
    for s, t in curve_points:
        rest = t - fixed_s
        eff = 1.0 if rest <= 0 else min(1.0, factor * s / (bandwidth * rest))
        curve.append([s, max(round(eff, ROUND_EFFICIENCY), 10.0**-ROUND_EFFICIENCY)])
    return curve


def fit_scale_up(log: NcclTestsLog, topology: TopologySpec, topology_name: str) -> ScaleUpFit:
    """Calibrate ``topology``'s scale-up latency and curves from ``log`` (one node's all-reduce,
    all-gather, reduce-scatter, all-to-all or sendrecv).

    Raises
    ------
    ConfigError
        Naming the log when it has no size from :data:`CURVE_FROM_BYTES` up, or more ranks
        than the topology's scale-up domain.
    """
    n = log.ranks
    up = topology.scale_up
    points, curve_points = _one_node_points(log, topology, topology_name)
    bw = up.link.bandwidth_bytes_per_s
    hop = 2 * up.link.latency_s  # GPU -> switch -> GPU, as benchmarks/nccl/derive_curves.py
    reduce = log.collective == "all_reduce"
    hops, share = _one_node_model(log.collective, n)
    ring_fixed = hops * hop
    direct = log.collective in DIRECT

    from_log = excluded_algorithms(log.nccl_algo, log.path)  # NCCL_ALGO=Ring in the log: no NVLS
    nvls = reduce and up.nvls_efficiency is not None and CollectiveAlgorithm.NVLS not in from_log
    plain = DIRECT.get(log.collective, "ring")
    algorithm, fixed, factor = ("nvls", NVLS_LATENCY_S, 1 + 1 / n) if nvls else (plain, ring_fixed, share)
    fixed_words = (f"NCCL's NVLS latency {NVLS_LATENCY_S * 1e6:g} us" if nvls
                   else f"one hop of {hop * 1e6:g} us (GPU to switch to GPU)" if direct
                   else f"{'2' if reduce else ''}(n-1) = {hops} hops of {hop * 1e6:g} us")
    test = f"{log.collective}_perf"
    first_size, first_t = points[0]
    if log.collective == "sendrecv":
        latency0 = up.collective_latency_s
        lat_source = (f"{topology_name}'s own: the simulator prices sendrecv as a ring exchange, each GPU's "
                      "send paying its route's latency and no collective latency, so the log does not give it")
    elif first_size <= LATENCY_UP_TO_BYTES:
        latency0 = first_t - fixed
        lat_source = (f"{log.name}: {test} over {n} GPUs at {size_words(first_size)} took "
                      f"{first_t * 1e6:g} us (the faster of out-of-place and in-place), less {fixed_words}")
    else:
        latency0 = up.collective_latency_s
        lat_source = (f"{topology_name}'s own: {log.name} starts at {size_words(first_size)}, past the "
                      f"{size_words(LATENCY_UP_TO_BYTES)} up to which a collective is latency-bound")
    no_latency = log.collective == "sendrecv"  # its price has no collective latency: keep the topology's
    room = min(t - fixed - factor * s / bw for s, t in curve_points)
    latency = latency0 if no_latency else max(0.0, min(latency0, room))
    latency = math.floor(latency * 1e8) / 1e8  # 0.01 us, rounded down: no curve point above 1 for it
    if latency < latency0 - 1e-8:
        lat_source += (f"; lowered to {latency * 1e6:.2f} us so that no size from {size_words(CURVE_FROM_BYTES)} up "
                       f"needs more than the link's {bw / 1e9:g} GB/s")
    curve = _inverted(curve_points, factor, bw, (0.0 if no_latency else latency) + fixed)
    bytes_words = ("(1 + 1/n) S" if nvls else "S" if log.collective == "sendrecv"
                   else f"{'2' if reduce else ''}(n-1)/n S")
    latency_words = "" if no_latency else "latency - "
    curve_source = (f"{log.name}: {test} over {n} GPUs of one node"
                    + (f" (NCCL {log.nccl_version})" if log.nccl_version else "")
                    + f", {algorithm}: at each size S from {size_words(CURVE_FROM_BYTES)} up, {bytes_words} / "
                    f"({bw / 1e9:g} GB/s x (t - {latency_words}{fixed_words})), t the faster of out-of-place and "
                    "in-place")
    values = [CalibratedValue("collective_latency_us", round(latency * 1e6, 2), lat_source)]
    if nvls:
        values.append(CalibratedValue("nvls_efficiency_by_size_bytes", curve, curve_source))
        ring = []
        for s, t in curve_points:
            rest = t - latency - ring_fixed
            needed = share * s / (bw * rest) if rest > 0 else math.inf
            ring.append([s, round(min(up.link.efficiency(s), needed), ROUND_EFFICIENCY)])
        values.append(CalibratedValue(
            "efficiency_by_size_bytes", ring,
            f"at each size of {log.name} from {size_words(CURVE_FROM_BYTES)} up, the lesser of {topology_name}'s ring "
            f"efficiency and the one at which a ring all-reduce (2(n-1)/n S over {bw / 1e9:g} GB/s after the "
            f"latency and 2(n-1) hops) takes the measured time: no algorithm is faster than the log"))
    else:
        values.append(CalibratedValue("efficiency_by_size_bytes", curve, curve_source))
    return ScaleUpFit(algorithm, tuple(values))


def fit_own_curve(log: NcclTestsLog, topology: TopologySpec, topology_name: str) -> CalibratedValue:
    """A collective's own curve (:data:`OWN_CURVES`) from ``log`` (one node's ``alltoall_perf``,
    ``sendrecv_perf``, ``all_gather_perf`` or ``reduce_scatter_perf``), inverted on ``topology``
    as the other log calibrated it: ``t = L + h + (n-1)/n S / (B eff(S))`` for the all-to-all,
    ``t = h + S / (B eff(S))`` for sendrecv, ``t = L + (n-1) h + (n-1)/n S / (B eff(S))`` for the
    ring all-gather and reduce-scatter, with ``L`` and ``h`` the topology's (module docstring).

    Raises
    ------
    ConfigError
        Naming the log when it has no size from :data:`CURVE_FROM_BYTES` up, or more ranks
        than the topology's scale-up domain.
    """
    n = log.ranks
    up = topology.scale_up
    _, curve_points = _one_node_points(log, topology, topology_name)
    bw = up.link.bandwidth_bytes_per_s
    hop = 2 * up.link.latency_s
    alltoall = log.collective == "alltoall"
    ring = log.collective in ("all_gather", "reduce_scatter")
    hops, share = _one_node_model(log.collective, n)
    # sendrecv is priced as a ring exchange: its route's latency, no collective latency
    fixed = hops * hop + (0.0 if log.collective == "sendrecv" else up.collective_latency_s)
    curve = _inverted(curve_points, share, bw, fixed)
    if ring:
        latency_words = (f"{topology_name}'s collective latency {up.collective_latency_s * 1e6:g} us and {n - 1} hops "
                         f"of {hop * 1e6:g} us")
    elif alltoall:
        latency_words = (f"{topology_name}'s collective latency {up.collective_latency_s * 1e6:g} us and one hop of "
                         f"{hop * 1e6:g} us")
    else:
        latency_words = f"one hop of {hop * 1e6:g} us"
    how = "a ring" if ring else DIRECT[log.collective]
    return CalibratedValue(OWN_CURVES[log.collective], curve, (
        f"{log.name}: {log.collective}_perf over {n} GPUs of one node"
        + (f" (NCCL {log.nccl_version})" if log.nccl_version else "")
        + f", {how}: at each size S from {size_words(CURVE_FROM_BYTES)} up, "
        f"{'(n-1)/n S' if alltoall or ring else 'S'} / ({bw / 1e9:g} GB/s x (t - {latency_words})), t the faster of "
        "out-of-place and in-place"))
