"""``llmsim calibrate --nccl-tests LOG... [--topology T] -o FILE``: read, fit, check, write, report.

The first single-node ``all_reduce_perf`` log calibrates the topology's scale-up latency and
curves (:func:`sim.calibrate.scale_up.fit_scale_up`); the other logs are parsed (bad input is
refused) and listed as not used, with the reason. The calibrated topology then prices the log's
all-reduce at each size from 1 MiB up as ``llmsim collective`` does
(:func:`sim.studies.collective.collective`, ``auto``), and the file's ``check`` list and the
printed table give the log's bus bandwidth beside the topology's before and after.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sim.calibrate.calibration import Calibration, calibrated_topology, check_rows
from sim.calibrate.nccl_tests import NcclTestsLog, read_nccl_tests
from sim.calibrate.scale_up import CURVE_FROM_BYTES, fit_scale_up
from sim.config import default_topology_name, load_topology
from sim.errors import ConfigError
from sim.output.paths import check_output_path
from sim.studies.collective import collective
from sim.topology.spec import TopologySpec
from sim.types import CollectiveKind
from sim.units import GBPS

__all__ = ["calibrate", "log_topology", "price_log"]

_GPU_WORDS = (("GB200", "GB200"), ("B200", "B200"), ("H200", "H200"), ("H100", "H100"), ("A100", "A100"))
"""Words of nccl-tests' device names (``NVIDIA H100 80GB HBM3``) and the GPU each names."""


def log_topology(log: NcclTestsLog) -> str:
    """The topology preset of the log's GPU (:func:`sim.config.default_topology_name`)."""
    for device in log.devices:
        for word, gpu in _GPU_WORDS:
            if re.search(rf"\b{word}\b", device.replace("-", " ")):
                return default_topology_name(gpu)
    raise ConfigError("<--topology>", "--topology", f"a topology (the GPUs of {log.name}, {list(log.devices)}, "
                      "have no default one)", None)


def price_log(log: NcclTestsLog, topology: TopologySpec) -> list[tuple[int, float]]:
    """(size, bus bandwidth in GB/s) of the log's all-reduce on ``topology`` at each size from 1 MiB up."""
    return [(r.size_bytes, collective(topology, CollectiveKind.ALL_REDUCE, r.size_bytes, log.ranks).busbw_bytes_per_s
             / 1e9) for r in log.rows if r.size_bytes >= CURVE_FROM_BYTES]


def _log_busbw(log: NcclTestsLog) -> dict[int, float]:
    """The log's bus bandwidth (GB/s) at each size, from the faster time (nccl-tests' formula)."""
    factor = 2.0 * (log.ranks - 1) / log.ranks
    return {r.size_bytes: r.size_bytes / (r.best_time_us * 1e-6) * factor / 1e9 for r in log.rows}


def _describe(log: NcclTestsLog) -> str:
    nodes = f"{log.nodes} node" + ("s" if log.nodes > 1 else "")
    version = f"NCCL {log.nccl_version}" if log.nccl_version else "NCCL version not in the log"
    return (f"{log.collective}_perf, {log.ranks} ranks on {nodes} ({', '.join(log.devices)}), {version}, "
            f"{len(log.rows)} sizes {log.rows[0].size_bytes:,} .. {log.rows[-1].size_bytes:,} B")


def calibrate(logs: Sequence[str], topology: str | None, output: str) -> int:
    """Run ``llmsim calibrate --nccl-tests LOGS [--topology T] -o OUTPUT``; returns the exit status."""
    check_output_path(output, "--output")
    parsed = [read_nccl_tests(p) for p in logs]
    used: NcclTestsLog | None = None
    records = []
    for log in parsed:
        why = None
        if log.collective != "all_reduce":
            why = f"{log.collective}_perf: only all_reduce_perf calibrates the scale-up curves"
        elif log.nodes > 1:
            why = f"{log.nodes} nodes: only a one-node all_reduce_perf calibrates the scale-up curves"
        elif used is not None:
            why = f"one all_reduce_perf log calibrates the scale-up curves: {used.name} does"
        else:
            used = log
        records.append({"file": log.path, "collective": log.collective, "ranks": log.ranks, "nodes": log.nodes,
                        "devices": list(log.devices), "nccl_version": log.nccl_version, "rows": len(log.rows),
                        "used": why is None, **({"not_used_because": why} if why else {})})
    if used is None:
        first = parsed[0]
        raise ConfigError(first.path, "collective", "an all_reduce_perf log of one node (calibrating from other "
                          "collectives and from logs across nodes is not built yet)",
                          f"{first.collective}_perf over {first.ranks} ranks on {first.nodes} nodes")
    name = topology or log_topology(used)
    base = load_topology(name)
    fit = fit_scale_up(used, base, name)
    cal = Calibration(output, name, base.scale_up.link.bandwidth_bytes_per_s / GBPS, fit.values, tuple(records))
    cal.write(output)
    calibrated = calibrated_topology(output, name)
    measured = _log_busbw(used)
    before = dict(price_log(used, base))
    rows = [{"size_bytes": s, "log_busbw_GBps": measured[s], "topology_busbw_GBps": before[s],
             "calibrated_busbw_GBps": bw, "error": bw / measured[s] - 1} for s, bw in price_log(used, calibrated)]
    cal = Calibration(output, name, cal.bandwidth_GBps, fit.values, tuple(records), check_rows(rows))
    cal.write(output)
    _print(cal, used, parsed, base, fit.algorithm, rows)
    return 0


def _print(cal: Calibration, used: NcclTestsLog, parsed: list[NcclTestsLog], base: TopologySpec, algorithm: str,
           rows: list[dict]) -> None:
    for log in parsed:
        print(f"llmsim calibrate: {log.name}: {_describe(log)}")
    for rec in cal.logs:
        if not rec["used"]:
            print(f"  not used: {rec['file']}: {rec['not_used_because']}")
    print(f"topology {cal.topology} ({cal.bandwidth_GBps:g} GB/s per GPU per direction), calibrated as {algorithm} "
          f"from {used.name}:")
    lat = next(v for v in cal.values if v.key == "collective_latency_us")
    print(f"  scale_up.collective_latency_us: {base.scale_up.collective_latency_s * 1e6:g} -> {lat.value:g}")
    for v in cal.values:
        if v.key != "collective_latency_us":
            print(f"  scale_up.{v.key}: {len(v.value)} points, {v.value[0][0]:,} .. {v.value[-1][0]:,} B")  # type: ignore[index,arg-type]
    print(f"all-reduce bus bandwidth over {used.ranks} GPUs (GB/s; llmsim collective, auto):")
    print(f"  {'size (B)':>14} {'log':>8} {cal.topology:>12} {'calibrated':>11} {'error':>7}")
    for r in rows:
        print(f"  {r['size_bytes']:>14,} {r['log_busbw_GBps']:>8.1f} {r['topology_busbw_GBps']:>12.1f} "
              f"{r['calibrated_busbw_GBps']:>11.1f} {r['error']:>+7.1%}")
    worst = max(abs(r["error"]) for r in rows)
    print(f"worst error from 1 MiB up: {worst:.1%}")
    print(f"wrote {cal.path} (llmsim run --calibration {cal.path} applies it)")
