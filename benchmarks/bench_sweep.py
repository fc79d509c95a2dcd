"""Time ``llmsim sweep``: configurations per second, and the default space of GPT-3 175B on 1024 A100.

::

    python benchmarks/bench_sweep.py                   # rates, gpt3-175b-1024 projected from a sample
    python benchmarks/bench_sweep.py --full            # ... and the whole default space simulated
    python benchmarks/bench_sweep.py --sample 40 --json bench-sweep.json

1. **Rate**: tiny's default space (1,088 points, 912 simulated) at layer granularity, in this
   process (``--workers 1``), on ``--workers`` local processes and on a ``LocalCluster`` of as
   many Dask worker processes (skipped without ``dask.distributed``); then a sample of
   gpt3-175b-1024's candidates (every k-th by key) locally, where each simulation is heavy.
2. **gpt3-175b-1024's default space**: the check (enumeration, validity, closed-form memory)
   is always run whole and timed; the simulations are run whole with ``--full``, else
   projected from the sample's rate. The issue's target is under two minutes on the 2-core
   machine.
3. **Known answer**: the best configuration found is at least as fast as Megatron's published
   setting (the preset's own: TP 8, PP 8, v 3, interleaved 1F1B, micro-batch 1, selective
   recomputation, SP, distributed optimizer), simulated the same way (op by op). Without
   ``--full`` the search runs on the neighbourhood :data:`NEIGHBOURHOOD` (which holds the
   preset) instead of the whole space.

Figures depend on the machine; compare only numbers from the same one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from sim.config import load_topology, load_workload
from sim.config.space import default_space, space_from_mapping
from sim.sweep import (SCREEN_GRANULARITY, Fidelity, SweepResult, candidate_key, feasible_candidates, layer_granularity_available,
                       open_executor, run_simulations, simulate_one, sweep, tp_limit_of)

LARGE = "gpt3-175b-1024"
TARGET_S = 120.0
NEIGHBOURHOOD = {"tp": [4, 8], "pp": [8, 16], "virtual_pipeline_stages": "auto", "schedule": "auto",
                 "micro_batch_size": [1, 2], "recompute": ["selective", "full"], "sequence_parallel": [True],
                 "zero_stage": [1]}
"""The space the known-answer check searches without ``--full``: Megatron's setting and its
neighbours in TP, PP, interleaving, schedule, micro-batch and recomputation."""


def _rate(name: str, n: int, wall_s: float) -> dict:
    print(f"  {name:<44} {n:>6} configurations in {wall_s:7.2f} s   {n / wall_s:8.2f} per s", flush=True)
    return {"name": name, "configurations": n, "wall_s": wall_s, "per_s": n / wall_s}


def bench_rates(workers: int, sample: int) -> tuple[list[dict], float]:
    """Configurations per second on tiny's default space and on a sample of the large one."""
    tiny, topo = load_workload("tiny"), load_topology("dgx-a100")
    rows = []
    for label, kwargs in (("tiny default space, 1 process", {"workers": 1}),
                          (f"tiny default space, {workers} local processes", {"workers": workers})):
        t0 = time.perf_counter()
        r = sweep(tiny, topo, top=1, **kwargs)
        rows.append(_rate(label, r.simulated, time.perf_counter() - t0))
    try:
        from distributed import LocalCluster
    except ImportError:
        print("  (dask.distributed not installed: no LocalCluster figures)")
        LocalCluster = None
    if LocalCluster is not None:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c:
            address = "dask://" + c.scheduler_address.removeprefix("tcp://")
            t0 = time.perf_counter()
            r = sweep(tiny, topo, top=1, executor=address)
            rows.append(_rate(f"tiny default space, LocalCluster of {workers}", r.simulated,
                              time.perf_counter() - t0))
    large = load_workload(LARGE)
    counts = SweepResult(LARGE, topo.name, "", 0, 0, Fidelity.FAST, SCREEN_GRANULARITY, "default")
    jobs = feasible_candidates(large, default_space(), tp_limit_of(topo), counts)
    picked = jobs[:: max(1, len(jobs) // sample)][:sample]
    granularity = SCREEN_GRANULARITY if layer_granularity_available() else None
    with open_executor("local", workers) as (ex, slots):
        t0 = time.perf_counter()
        done, _ = run_simulations(picked, topo, granularity, ex, slots)
        rows.append(_rate(f"{LARGE} sample, {workers} local processes", len(done), time.perf_counter() - t0))
    return rows, rows[-1]["per_s"]


def bench_large(workers: int, full: bool, sample_rate: float) -> dict:
    """The default space of gpt3-175b-1024: the check timed whole, the simulations run or projected."""
    w, topo = load_workload(LARGE), load_topology("dgx-a100")
    counts = SweepResult(LARGE, topo.name, "", 0, 0, Fidelity.FAST, SCREEN_GRANULARITY, "default")
    t0 = time.perf_counter()
    jobs = feasible_candidates(w, default_space(), tp_limit_of(topo), counts)
    check_s = time.perf_counter() - t0
    out = {"tried": counts.tried, "invalid": counts.invalid, "pruned_memory": counts.pruned,
           "to_simulate": len(jobs), "check_s": check_s}
    print(f"\n{LARGE} default space: tried {counts.tried:,}  invalid {counts.invalid:,}  pruned (memory) "
          f"{counts.pruned:,}  to simulate {len(jobs):,}; checked in {check_s:.1f} s", flush=True)
    if full:
        t0 = time.perf_counter()
        r = sweep(w, topo, workers=workers, progress=True)
        out.update(wall_s=time.perf_counter() - t0, simulated=r.simulated, failed=r.failed,
                   best=r.top[0].candidate.settings if r.top else None,
                   best_iteration_time_s=r.top[0].best.iteration_time_s if r.top else None)
        print(f"  whole sweep: {out['wall_s']:.1f} s (target {TARGET_S:.0f} s), simulated {r.simulated:,}, "
              f"failed {r.failed:,}")
    else:
        projected = check_s + len(jobs) / sample_rate
        out.update(projected_wall_s=projected)
        print(f"  projected whole sweep: {projected:,.0f} s = {projected / 60:,.1f} min at the sample's "
              f"{sample_rate:.2f} configurations/s (target {TARGET_S:.0f} s)")
    return out


def known_answer(workers: int, full_result: dict | None) -> dict:
    """The best found against the preset's own setting, both op by op."""
    w, topo = load_workload(LARGE), load_topology("dgx-a100")
    own = simulate_one(w, topo, "op" if layer_granularity_available() else None)
    if full_result is not None and full_result.get("best_iteration_time_s") is not None:
        best_s, best, where = full_result["best_iteration_time_s"], full_result["best"], "the default space"
    else:
        r = sweep(w, topo, space_from_mapping(NEIGHBOURHOOD, "<neighbourhood>"), workers=workers, progress=True)
        best_s, best, where = r.top[0].best.iteration_time_s, r.top[0].candidate.settings, \
            f"the neighbourhood ({r.simulated} simulated)"
        assert candidate_key(w) in {row.candidate.key for row in r.rows}, "the preset is in the neighbourhood"
    ok = best_s <= own.iteration_time_s
    print(f"\nknown answer over {where}: best {best_s:.4f} s vs Megatron's setting {own.iteration_time_s:.4f} s "
          f"-> {'ok' if ok else 'FAILED'}\n  best: {best}")
    return {"where": where, "best": best, "best_iteration_time_s": best_s,
            "megatron_iteration_time_s": own.iteration_time_s, "ok": ok}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="local and Dask worker processes")
    ap.add_argument("--sample", type=int, default=24, help="gpt3-175b-1024 candidates in the rate sample")
    ap.add_argument("--full", action="store_true", help="simulate gpt3-175b-1024's whole default space")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args()
    print(f"llmsim sweep benchmark: Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"layer granularity {'available' if layer_granularity_available() else 'NOT available'}\n")
    rates, sample_rate = bench_rates(args.workers, args.sample)
    large = bench_large(args.workers, args.full, sample_rate)
    answer = known_answer(args.workers, large if args.full else None)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"rates": rates, "large": large, "known_answer": answer}, fh, indent=2, default=str)
    return 0 if answer["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
