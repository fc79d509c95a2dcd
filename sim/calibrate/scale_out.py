"""A topology's scale-out latency and efficiency-by-size curve from one measured all-reduce across
nodes (or, with no all-reduce log, one all-gather or reduce-scatter across nodes: the same
inversion, of that collective as the planner runs it).

Inside one node the all-reduce has a closed form (:mod:`sim.calibrate.scale_up`); across
nodes the simulator prices it through its planner and flow network (:mod:`sim.costs.comm`:
NCCL's tree and channel rings, the faster of them, each flow at the efficiency of its
bottleneck link, the NIC's for the flows between nodes), so the model is inverted numerically
on the log's own placement (:mod:`sim.calibrate.pricing`: its ranks, nodes and GPUs per node),
on the topology as the scale-up calibration leaves it when a one-node log calibrated that too:

* ``scale_out.latency_us`` (the latency of each NIC link, which every step between nodes
  pays): the latency at which the topology prices the all-reduce at the log's smallest size
  at the measured time, when that size is at most
  :data:`~sim.calibrate.scale_up.LATENCY_UP_TO_BYTES` (latency-bound); found by bisection
  (the time rises with it); 0 where the topology's fixed latencies alone already take longer;
  the topology's own when the log starts at larger sizes. It is lowered where a size from
  :data:`~sim.calibrate.scale_up.CURVE_FROM_BYTES` up would otherwise be slower than the log
  even at a scale-out efficiency of 1, and rounded down to 0.01 us.
* ``scale_out.efficiency_by_size_bytes``: a point at every size of the log from
  :data:`~sim.calibrate.scale_up.CURVE_FROM_BYTES` up, the scale-out efficiency at which the
  topology prices the all-reduce at the measured time, found by bisection on (0, 1] (the time
  falls as it rises: every candidate algorithm's flows shrink with it, and the planner keeps
  the fastest). Where the NICs are not the bottleneck (NVLink hops are), a range of
  efficiencies takes the same time and the log only bounds it from below: the point is the
  one of that range nearest the topology's own (within :data:`FLAT` of the time), so that
  groups whose traffic is all on the NICs (one GPU per node) are not priced at a bound the log
  never tested.

A log faster than the topology allows at efficiency 1 and no scale-out latency is refused,
naming the file and the size: its NICs (count and bandwidth) are not the topology's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.calibrate.nccl_tests import NcclTestsLog
from sim.calibrate.pricing import PRICED, excluded_algorithms, placement, price_time_s
from sim.calibrate.scale_up import (
    CURVE_FROM_BYTES,
    LATENCY_UP_TO_BYTES,
    ROUND_EFFICIENCY,
    CalibratedValue,
    log_points,
    size_words,
)
from sim.config import load_topology
from sim.errors import ConfigError
from sim.studies.collective import bus_factor
from sim.topology.spec import FAT_TREE_KINDS, TopologySpec
from sim.units import GBIT_PER_S

__all__ = ["BETWEEN_BISECTIONS", "BETWEEN_CURVES", "BISECTIONS", "FLAT", "MIN_EFFICIENCY", "ScaleOutFit",
           "fit_between_curve", "fit_scale_out"]

MIN_EFFICIENCY = 10.0**-ROUND_EFFICIENCY
"""The smallest efficiency a point may have (the precision it is written with)."""
FLAT = 1e-3
"""How much faster than the log a point's time may be where a range of efficiencies takes the
log's time (0.1%): the point is then the efficiency nearest the topology's own within it."""
BISECTIONS = 24
"""Bisection steps for each efficiency (to 2^-24 of the bracket, well under the 0.01% it is
written with) and for the latency."""
BETWEEN_BISECTIONS = 16
"""Bisection steps for each point of a collective's own curve between nodes (to 2^-16 of (0, 1],
under the half of 0.01% it is rounded to: each step of an all-to-all's prices every pair of the
log's ranks)."""


def _why_faster(nvlink_bound: bool, scale_up_calibrated: Sequence[str]) -> str:
    """What a multi-node log faster than the topology allows says: with a perfect NVLink the
    topology would allow it (``nvlink_bound``), so the NVLink legs inside each node ran faster
    than the topology's scale-up curve (calibrate that first from a one-node log of the same
    nodes, unless one already did); else even a perfect NVLink and NICs at their line rate are
    too slow: other NICs, or an algorithm the topology does not run (NVLS-tree, NVLink SHARP
    inside each node and a tree across nodes, reaches a bus bandwidth above the NICs' line rate
    on two nodes, where the topology gives NVLS; CollNet, the switches' SHARP, is not priced)."""
    if nvlink_bound and not scale_up_calibrated:
        return ("its NVLink legs are faster than the topology's scale-up curve allows (with a perfect NVLink it would "
                "fit): give a one-node all_reduce_perf log of the same nodes first, --nccl-tests ONE-NODE.log "
                "THIS.log, so the scale-up is calibrated before the NICs")
    return ("a faster log means other NICs (give --topology a topology with its scale_out.nics_per_node and "
            "nic_bandwidth_Gbps) or an algorithm the topology does not run: NCCL's NVLS-tree (NVLink SHARP in each "
            "node, a tree across nodes) beats a ring over the NICs' line rate where the topology gives NVLS "
            "(scale_up.nvls_efficiency_by_size_bytes), and CollNet (switch SHARP) is not priced")


@dataclass(frozen=True)
class ScaleOutFit:
    """The scale-out fields calibrated from one log, and the NICs they are fractions of."""

    values: tuple[CalibratedValue, ...]
    nics_per_node: int
    nic_bandwidth_Gbps: float


def _bisect(f: Callable[[float], bool], lo: float, hi: float, steps: int = BISECTIONS) -> float:
    """The boundary in ``[lo, hi]`` where ``f`` turns from False (at ``lo``) to True (at ``hi``),
    to ``2^-steps`` of the bracket."""
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if f(mid):
            hi = mid
        else:
            lo = mid
    return hi


def fit_scale_out(log: NcclTestsLog, name: str, overrides: Sequence[str] = ()) -> ScaleOutFit:
    """Calibrate topology ``name``'s (with ``overrides``, the scale-up calibration) scale-out
    latency and efficiency curve from ``log``, an all-reduce over several nodes.

    Raises
    ------
    ConfigError
        Naming the log when the topology cannot hold its ranks (:func:`~sim.calibrate.pricing.placement`),
        its fabric is not a fat tree, it has no size from
        :data:`~sim.calibrate.scale_up.CURVE_FROM_BYTES` up, or it is faster at some size than
        the topology's NICs allow.
    """
    base = load_topology(name, overrides)
    where = placement(log, base, name)
    out = base.scale_out
    if out.kind not in FAT_TREE_KINDS:
        raise ConfigError(log.path, "nodes", f"a topology whose scale-out is a fat tree to calibrate (the NIC "
                          f"links' latency and efficiency), not {name}'s", out.kind.value)
    kind = PRICED[log.collective]  # an all-reduce, or with none an all-gather or reduce-scatter
    test = f"{log.collective}_perf"
    excluded = excluded_algorithms(log.nccl_algo, log.path)  # the algorithms NCCL_ALGO left NCCL
    points, curve_points = log_points(log)
    own_eff = f"{out.nic.efficiency(log.rows[0].size_bytes):.8f}"
    memo: dict[tuple[str, str], TopologySpec] = {}

    def topology(latency_us: float, eff: str, perfect_nvlink: bool = False) -> TopologySpec:
        key = (f"{latency_us:.6f}", eff + ("/perfect nvlink" if perfect_nvlink else ""))
        if key not in memo:
            nvlink = ["scale_up.efficiency_by_size_bytes=null", "scale_up.efficiency=1.0",
                      "scale_up.collective_latency_us=0"] if perfect_nvlink else []
            memo[key] = load_topology(name, [*overrides, *nvlink, f"scale_out.latency_us={key[0]}",
                                             "scale_out.efficiency_by_size_bytes=null", f"scale_out.efficiency={eff}"])
        return memo[key]

    def time_s(size: int, latency_us: float, eff: str, perfect_nvlink: bool = False) -> float:
        return price_time_s(kind, size, where, topology(latency_us, eff, perfect_nvlink), excluded)

    n, nodes = log.ranks, log.nodes
    nics = f"{out.nics_per_node} x {out.nic.bandwidth_bytes_per_s / GBIT_PER_S:g} Gb/s NICs per node"
    first_size, first_t = points[0]
    own_us = out.nic.latency_s * 1e6
    if first_size <= LATENCY_UP_TO_BYTES:
        if time_s(first_size, 0.0, own_eff) >= first_t:
            latency0 = 0.0
            lat_source = (f"{log.name}: {test} over {n} GPUs on {nodes} nodes at {size_words(first_size)} "
                          f"took {first_t * 1e6:g} us, no longer than {name}'s fixed latencies alone: none added")
        else:
            hi = max(own_us, first_t * 1e6)
            latency0 = _bisect(lambda us: time_s(first_size, us, own_eff) >= first_t, 0.0, hi)
            lat_source = (f"{log.name}: {test} over {n} GPUs on {nodes} nodes at {size_words(first_size)} "
                          f"took {first_t * 1e6:g} us (the faster of out-of-place and in-place): the NIC link latency "
                          f"at which {name} prices that {kind.value} (llmsim collective, auto) at that time")
    else:
        latency0 = own_us
        lat_source = (f"{name}'s own: {log.name} starts at {size_words(first_size)}, past the "
                      f"{size_words(LATENCY_UP_TO_BYTES)} up to which a collective is latency-bound")
    latency0 = math.floor(latency0 * 100 + 1e-9) / 100

    def fits(latency_us: float) -> bool:
        return all(time_s(s, latency_us, "1.0") <= t for s, t in curve_points)

    latency = latency0
    if not fits(latency0):
        if not fits(0.0):
            failing = [(s, t) for s, t in curve_points if time_s(s, 0.0, "1.0") > t]
            beyond = [(s, t) for s, t in failing if time_s(s, 0.0, "1.0", perfect_nvlink=True) > t]
            s, t = (beyond or failing)[0]  # the first size not even a perfect NVLink allows, else the first
            fastest = time_s(s, 0.0, "1.0")
            factor = bus_factor(kind, n) / 1e9
            raise ConfigError(log.path, f"size {s}", f"a time the topology allows: at a scale-out efficiency of 1 "
                              f"and no scale-out latency, {name} ({nics}) takes {fastest * 1e6:.1f} us for this "
                              f"{kind.value} over {n} GPUs on {nodes} nodes (bus bandwidth {s / fastest * factor:.1f} "
                              f"GB/s); {_why_faster(not beyond, overrides)}",
                              f"{t * 1e6:g} us, bus bandwidth {s / t * factor:.1f} GB/s")
        latency = math.floor(_bisect(lambda us: not fits(us), 0.0, latency0) * 100) / 100
        while latency > 0 and not fits(latency):
            latency = max(0.0, round(latency - 0.01, 2))
        lat_source += (f"; lowered to {latency:.2f} us so that no size from {size_words(CURVE_FROM_BYTES)} up needs "
                       f"more than the NICs' {nics}")
    def efficiency(size: int, t: float) -> float:
        """The efficiency at which the collective of ``size`` takes ``t``: of a range that does
        (where the NICs are not the bottleneck), the one nearest the topology's own."""
        def at(e: float) -> float:
            return time_s(size, latency, f"{e:.8f}")

        low = MIN_EFFICIENCY if at(MIN_EFFICIENCY) <= t else _bisect(lambda e: at(e) <= t, MIN_EFFICIENCY, 1.0)
        own = out.nic.efficiency(size)
        if own <= low:
            return low
        if at(own) >= t * (1 - FLAT):
            return own
        return _bisect(lambda e: at(e) < t * (1 - FLAT), low, own)

    curve = [[s, min(1.0, max(round(efficiency(s, t), ROUND_EFFICIENCY), MIN_EFFICIENCY))] for s, t in curve_points]
    curve_source = (f"{log.name}: {test} over {n} GPUs on {nodes} nodes"
                    + (f" (NCCL {log.nccl_version})" if log.nccl_version else "")
                    + f": at each size from {size_words(CURVE_FROM_BYTES)} up, the scale-out efficiency (of {nics}) at "
                    f"which {name} prices the {kind.value} (llmsim collective, auto) at the measured time t, the "
                    f"faster of out-of-place and in-place, found by bisection; where a range of efficiencies takes t "
                    f"(the NICs not the bottleneck), the one nearest {name}'s own")
    values = (CalibratedValue("latency_us", round(latency, 2), lat_source),
              CalibratedValue("efficiency_by_size_bytes", curve, curve_source))
    return ScaleOutFit(values, out.nics_per_node, out.nic.bandwidth_bytes_per_s / GBIT_PER_S)


BETWEEN_CURVES = {"alltoall": "alltoall_efficiency_by_size_bytes",
                  "all_gather": "all_gather_efficiency_by_size_bytes",
                  "reduce_scatter": "reduce_scatter_efficiency_by_size_bytes"}
"""The collectives that keep a curve of their own between nodes, and its ``scale_out`` key."""


def fit_between_curve(log: NcclTestsLog, name: str, overrides: Sequence[str]) -> CalibratedValue:
    """A collective's own scale-out curve (``scale_out.alltoall_efficiency_by_size_bytes``, or
    ``all_gather_``, ``reduce_scatter_``: :data:`BETWEEN_CURVES`) from ``log``, an
    ``alltoall_perf``, ``all_gather_perf`` or ``reduce_scatter_perf`` across nodes given beside
    another collective's log that calibrated the NICs (``overrides``: the calibration so far, its
    NIC latency among them): at each size from :data:`~sim.calibrate.scale_up.CURVE_FROM_BYTES`
    up, the efficiency at which the topology prices the collective, its sends (an all-to-all's)
    or ring hops (an all-gather's, a reduce-scatter's) between nodes at that efficiency of the
    NICs and those inside a node on NVLink as before, at the measured time; found by bisection
    on (0, 1] (the time falls as it rises). A size slower than the topology allows even at
    efficiency 1 is kept at 1 and shows in the check.

    Raises
    ------
    ConfigError
        Naming the log when the topology cannot hold its ranks, or it has no size from
        :data:`~sim.calibrate.scale_up.CURVE_FROM_BYTES` up.
    """
    base = load_topology(name, overrides)
    where = placement(log, base, name)
    kind = PRICED[log.collective]
    key = BETWEEN_CURVES[log.collective]
    excluded = excluded_algorithms(log.nccl_algo, log.path)
    _, curve_points = log_points(log)

    def at(size: int, e: float) -> float:
        curve = f"[[{CURVE_FROM_BYTES}, {e:.8f}], [{2**50}, {e:.8f}]]"
        topo = load_topology(name, [*overrides, f"scale_out.{key}={curve}"])
        return price_time_s(kind, size, where, topo, excluded)

    def efficiency(size: int, t: float) -> float:
        if at(size, 1.0) >= t:
            return 1.0
        if at(size, MIN_EFFICIENCY) <= t:
            return MIN_EFFICIENCY
        return _bisect(lambda x: at(size, x) <= t, MIN_EFFICIENCY, 1.0, BETWEEN_BISECTIONS)

    curve = [[s, min(1.0, max(round(efficiency(s, t), ROUND_EFFICIENCY), MIN_EFFICIENCY))] for s, t in curve_points]
    out = base.scale_out
    nics = f"{out.nics_per_node} x {out.nic.bandwidth_bytes_per_s / GBIT_PER_S:g} Gb/s NICs per node"
    what = "sends" if log.collective == "alltoall" else "ring hops"
    return CalibratedValue(key, curve, (
        f"{log.name}: {log.collective}_perf over {log.ranks} GPUs on {log.nodes} nodes"
        + (f" (NCCL {log.nccl_version})" if log.nccl_version else "")
        + f": at each size from {size_words(CURVE_FROM_BYTES)} up, the efficiency (of {nics}) of its {what} "
        f"between nodes at which {name}, as calibrated, prices the {log.collective.replace('_', '-')} (llmsim "
        "collective) at the measured time t, the faster of out-of-place and in-place, found by bisection"))
