"""Scale-up collective latency and efficiency curves from nccl-tests all-reduce tables.

For each published all_reduce table (``benchmarks/nccl/azure_all_reduce.yaml``) the model the
simulator prices a one-domain all-reduce with is inverted:

* ring over ``n`` GPUs:  ``t = L + 2(n-1) h + 2(n-1)/n S / (B eff(S))``
* NVLS over ``n`` GPUs: ``t = L + L_nvls + (1 + 1/n) S / (B eff(S))`` (each GPU sends its buffer
  to the switch and its reduced shard back, and receives the reduced shard and the multicast of
  all shards: ``(1 + 1/n) S`` each way; :mod:`sim.costs.comm`)

with ``B`` the preset's NVLink bandwidth per direction, ``h`` its per-hop latency and ``L_nvls``
NCCL's NVLS latency. ``L`` (``scale_up.collective_latency_us``) is the smallest size's time less
the hops; ``eff(S)`` at each size from 2 MiB up is what remains (at 1 MiB the A100 table is
within its latency floor: the remainder would exceed the link rate).

``benchmarks/nccl/derive_curves.py`` prints the YAML the presets carry;
``tests/unit/test_nccl_algorithms.py`` checks they agree.
"""

from __future__ import annotations

from pathlib import Path

import yaml

FIRST_SIZE_BYTES = 2**10
"""The message size of a table's first point; each next point doubles it."""
CURVE_FROM_BYTES = 2**21
"""The smallest message size the efficiency curve has a point at (2 MiB)."""


def load_tables(path: str | Path) -> list[dict]:
    """The tables of a YAML file such as ``benchmarks/nccl/azure_all_reduce.yaml``: one entry
    per system, with its ``topology`` preset, ``ranks``, ``algorithm`` and ``busbw_GBps`` per size."""
    return yaml.safe_load(Path(path).read_text())


def table_times_s(entry: dict) -> list[tuple[int, float]]:
    """(size, seconds) of every point: t = S x 2(n-1)/n / busbw."""
    n = entry["ranks"]
    factor = 2.0 * (n - 1) / n
    return [(FIRST_SIZE_BYTES * 2**i, FIRST_SIZE_BYTES * 2**i * factor / (bw * 1e9))
            for i, bw in enumerate(entry["busbw_GBps"])]


def derive(entry: dict, bandwidth_bytes_per_s: float, hop_latency_s: float,
           nvls_latency_s: float) -> tuple[float, list[tuple[int, float]]]:
    """(collective latency in seconds, [(size, efficiency), ...]) for one table."""
    n = entry["ranks"]
    points = table_times_s(entry)
    if entry["algorithm"] == "nvls":
        fixed = nvls_latency_s
        link_bytes = lambda s: (1 + 1 / n) * s  # noqa: E731
    else:
        fixed = 2 * (n - 1) * hop_latency_s
        link_bytes = lambda s: 2.0 * (n - 1) / n * s  # noqa: E731
    latency = points[0][1] - fixed
    curve = [(s, round(link_bytes(s) / (bandwidth_bytes_per_s * (t - latency - fixed)), 3))
             for s, t in points if s >= CURVE_FROM_BYTES]
    return latency, curve
