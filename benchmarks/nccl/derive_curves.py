"""Print the topology presets' collective latency and efficiency curves derived from nccl-tests tables.

::

    python benchmarks/nccl/derive_curves.py

inverts each published all_reduce table (``azure_all_reduce.yaml``) with
:func:`sim.derive.nccl_curves.derive` (the model and its inversion are described there) and
prints the YAML the presets carry (``tests/unit/test_nccl_algorithms.py`` checks they agree).
"""

from __future__ import annotations

from pathlib import Path

from sim.config import load_topology
from sim.costs.comm import NVLS_LATENCY_S
from sim.derive.nccl_curves import derive, load_tables

HERE = Path(__file__).resolve().parent


def main() -> None:
    for entry in load_tables(HERE / "azure_all_reduce.yaml"):
        topo = load_topology(entry["topology"])
        link = topo.scale_up.link
        latency, curve = derive(entry, link.bandwidth_bytes_per_s, 2 * link.latency_s, NVLS_LATENCY_S)
        key = "nvls_efficiency_by_size_bytes" if entry["algorithm"] == "nvls" else "efficiency_by_size_bytes"
        print(f"# {entry['topology']}: {entry['system']}, {entry['algorithm']}, NCCL {entry['nccl']}")
        print(f"  collective_latency_us: {latency * 1e6:.1f}")
        print(f"  {key}:")
        for s, e in curve:
            print(f"    - [{s}, {e}]")


if __name__ == "__main__":
    main()
