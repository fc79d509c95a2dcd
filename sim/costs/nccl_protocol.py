"""NCCL's protocols on a ring that crosses scale-up domains: each one's latency, and the one
NCCL's tuner picks for a message size and a rank count.

NCCL prices every (algorithm, protocol) pair of a collective as ``latency + bytes / bandwidth``
and runs the cheapest (``ncclTopoGetAlgoTime``, NVIDIA/nccl ``src/graph/tuning.cc``; every
number here is from NCCL 2.20.3, commit ``b6475625``). A ring's latency is a base latency plus
one hop latency per step, a step between two GPUs of one node at the NVLink figure and a step
between nodes at the network's (``ncclTopoTuneModel``)::

    lat = baseLat[p] + (nsteps - nInterSteps) * max(hwLat[NVLINK][p], netOverhead[p])
                     + nInterSteps * hwLat[NET][p]

with ``nsteps = 2 (n - 1)`` for an all-reduce and ``n - 1`` for an all-gather or a
reduce-scatter over ``n`` ranks, and ``nInterSteps = 2 N`` and ``N - 1`` for ``N`` nodes. The
per-step latencies, in microseconds:

=========  ====  =====  ======
hop        LL    LL128  Simple
=========  ====  =====  ======
NVLink     0.6   1.9    3.4
network    2.7   4.0    14.0
=========  ====  =====  ======

so small messages go by LL (cheap steps, a quarter of the bandwidth across nodes) and large
ones by LL128 or Simple, whose steps cost more: over many ranks the step latency of the
protocol a size runs with is what grows with the rank count.

The topology presets carry LL's hop latencies (``scale_up.link.latency_us`` and
``scale_out.nic.latency_us``, half a hop each); the other protocols' hops are those scaled by
NCCL's ratio to LL for the same hardware, so a topology with slower hops keeps them slower.
"""

from __future__ import annotations

from sim.types import NcclProtocol

__all__ = ["RING_BASE_LATENCY_S", "RING_NVLINK_HOP_S", "RING_NET_HOP_S", "NET_OVERHEAD_S",
           "RING_BANDWIDTH_FACTOR", "ring_protocol_latency_s", "ring_protocol"]

_P = NcclProtocol

RING_BASE_LATENCY_S = {_P.LL: 6.6e-6, _P.LL128: 14.0e-6, _P.SIMPLE: 8.4e-6}
"""``baseLat[NCCL_ALGO_RING]`` (NCCL 2.20.3 ``src/graph/tuning.cc``: ``{ 6.6, 14.0, 8.4 }`` us)."""
RING_NVLINK_HOP_S = {_P.LL: 0.6e-6, _P.LL128: 1.9e-6, _P.SIMPLE: 3.4e-6}
"""``hwLat[NCCL_HW_NVLINK][NCCL_ALGO_RING]`` (same file: ``{ .6, 1.9, 3.4 }`` us)."""
RING_NET_HOP_S = {_P.LL: 2.7e-6, _P.LL128: 4.0e-6, _P.SIMPLE: 14.0e-6}
"""``hwLat[NCCL_HW_NET][NCCL_ALGO_RING]`` (same file: ``{ 2.7, 4.0, 14.0 }`` us)."""
NET_OVERHEAD_S = {_P.LL: 1.0e-6, _P.LL128: 1.0e-6, _P.SIMPLE: 3.0e-6}
"""The floor on an intra-node step of a ring across nodes ("inter-node rings still have to
launch nsteps * net overhead": ``getNetOverhead``, 1 us on Intel and unknown hosts, three
times that for Simple; same file). AMD hosts get 2 us; the presets do not say the host CPU,
so NCCL's default is used."""
RING_BANDWIDTH_FACTOR = {_P.LL: 0.25, _P.LL128: 0.92, _P.SIMPLE: 1.0}
"""A ring protocol's bus bandwidth across nodes as a fraction of Simple's (same file: LL
``busBw * 1.0/4.0`` when ``nNodes > 1``, LL128 ``busBw * 0.92``; NCCL also caps both per
channel, which is not modelled)."""


def ring_protocol_latency_s(protocol: NcclProtocol, steps: int, inter_steps: int, intra_hop_s: float,
                            inter_hop_s: float) -> float:
    """NCCL's latency of a ring collective by ``protocol`` that crosses domains.

    Parameters
    ----------
    steps, inter_steps : int
        NCCL's ``nsteps`` and ``nInterSteps`` (see the module docstring).
    intra_hop_s, inter_hop_s : float
        The topology's LL latency of a step inside a domain and of one between domains; each
        is scaled by NCCL's ratio of the protocol's hop latency to LL's on that hardware.

    >>> round(ring_protocol_latency_s(NcclProtocol.SIMPLE, 1535, 191, 0.6e-6, 2.7e-6) * 1e3, 2)
    7.25
    >>> round(ring_protocol_latency_s(NcclProtocol.LL, 1535, 191, 0.6e-6, 2.7e-6) * 1e3, 2)
    1.87
    """
    intra = max(intra_hop_s * RING_NVLINK_HOP_S[protocol] / RING_NVLINK_HOP_S[_P.LL], NET_OVERHEAD_S[protocol])
    inter = inter_hop_s * RING_NET_HOP_S[protocol] / RING_NET_HOP_S[_P.LL]
    return RING_BASE_LATENCY_S[protocol] + (steps - inter_steps) * intra + inter_steps * inter


def ring_protocol(steps: int, inter_steps: int, intra_hop_s: float, inter_hop_s: float,
                  simple_bandwidth_s: float) -> NcclProtocol:
    """The protocol NCCL's tuner runs a ring collective across domains with: the least
    ``latency + bandwidth time`` (``ncclTopoGetAlgoTime``), the bandwidth time Simple's
    (``simple_bandwidth_s``, the bus bytes over the ring's bus bandwidth) over the protocol's
    :data:`RING_BANDWIDTH_FACTOR`. Ties go to the lower-latency protocol, as NCCL's loop
    (LL, LL128, Simple; a strict ``<``) keeps the first.

    >>> ring_protocol(1535, 191, 0.6e-6, 2.7e-6, 1e-6).value
    'LL'
    >>> ring_protocol(1535, 191, 0.6e-6, 2.7e-6, 5e-3).value
    'LL128'
    >>> ring_protocol(1535, 191, 0.6e-6, 2.7e-6, 1.0).value
    'Simple'
    """
    best, best_s = _P.LL, float("inf")
    for p in (_P.LL, _P.LL128, _P.SIMPLE):
        t = (ring_protocol_latency_s(p, steps, inter_steps, intra_hop_s, inter_hop_s)
             + simple_bandwidth_s / RING_BANDWIDTH_FACTOR[p])
        if t < best_s:
            best, best_s = p, t
    return best
