"""Where DeepSpeed 0.3 ZeRO-3's missing time goes: Narayanan et al.'s Table 2 rows, term by term.

::

    python benchmarks/zero3_residuals.py
    python benchmarks/zero3_residuals.py --json zero3_residuals.json

The six ZeRO-3 rows of ``workloads/validation/narayanan2021.yaml`` (174.6B on 384-1,536
A100s, 529.6B on 640-2,240; no model parallelism, one micro-batch an iteration) are predicted
19-46% too fast. This script simulates each (layer granularity) and splits the prediction into
compute and exposed data-parallel communication, then asks what the measured time needs the
communication to be if compute is priced right (the PTD-P rows of the same table, same GPUs
and software year, are within -1..+4%):

* ``implied_comm_s``: measured time less the predicted compute (and bubble, none here);
* ``coll``: the ZeRO-3 collectives a rank issues (per-parameter all-gathers and gradient
  reduce-scatters, :mod:`sim.workload.deepspeed_zero3`) and ``GB``, the bytes they carry (a
  gather's gathered tensor, a reduce-scatter's whole gradient);
* two readings of the shortfall ``implied - predicted`` comm: per gigabyte carried
  (``ms/GB``: a bandwidth the model overestimates) and per collective and rank of its group
  (``us/coll/rank``: a ring step the model underprices). The spread of each reading over the
  six rows (``cv``, standard deviation over mean) says which one a single constant could carry.

Neither reading is applied to the model: both would be constants read off these rows, and no
measurement of NCCL's all-gather over hundreds of A100s of 2021 was found to set them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import sim
from sim.config import load_case_records
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.validate import case_topology
from sim.types import CommClass

ROOT = Path(sim.__file__).resolve().parent.parent
CASES = ROOT / "workloads" / "validation" / "narayanan2021.yaml"


def row_figures(rec) -> dict:
    """The figures of one ZeRO-3 case record (module docstring)."""
    w = rec.workload
    run = simulate(w, case_topology(w), granularity="layer")
    report = make_report(run)
    t = report.iteration_time_s
    measured = rec.targets["iteration_time_s"]
    rank = run.result.ranks[0].rank
    dp = [s for s in run.result.spans if s.rank == rank and s.comm_class is CommClass.DP]
    nbytes = sum(dict(s.op_args).get("bytes", 0.0) for s in dp)
    exposed = sum(report.exposed_comm_s.values())
    compute = t - exposed
    implied = measured - compute
    short = implied - exposed
    ranks = w.system.num_gpus
    return {"id": rec.id, "ranks": ranks, "measured_s": measured, "predicted_s": t, "compute_s": compute,
            "exposed_dp_comm_s": exposed, "implied_comm_s": implied, "collectives": len(dp),
            "bytes": nbytes, "shortfall_ms_per_gb": short / (nbytes / 1e9) * 1e3,
            "shortfall_us_per_collective_rank": short / (len(dp) * ranks) * 1e6}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write the same figures as JSON")
    args = ap.parse_args(argv)
    rows = [row_figures(rec) for rec in load_case_records(str(CASES)) if "zero3" in rec.id]
    print(f"{'case':40s} {'ranks':>5s} {'measured':>9s} {'predicted':>9s} {'compute':>8s} {'dp comm':>8s} "
          f"{'implied':>8s} {'coll':>5s} {'GB':>7s} {'ms/GB':>6s} {'us/coll/rank':>12s}")
    for r in rows:
        print(f"{r['id'][14:54]:40s} {r['ranks']:5d} {r['measured_s']:9.1f} {r['predicted_s']:9.1f} "
              f"{r['compute_s']:8.1f} {r['exposed_dp_comm_s']:8.1f} {r['implied_comm_s']:8.1f} "
              f"{r['collectives']:5d} {r['bytes'] / 1e9:7.0f} {r['shortfall_ms_per_gb']:6.2f} "
              f"{r['shortfall_us_per_collective_rank']:12.2f}")
    spread = {}
    for key in ("shortfall_ms_per_gb", "shortfall_us_per_collective_rank"):
        vals = [r[key] for r in rows]
        spread[key] = statistics.pstdev(vals) / statistics.mean(vals)
    print(f"spread over the rows (cv): per GB {spread['shortfall_ms_per_gb']:.2f}, "
          f"per collective and rank {spread['shortfall_us_per_collective_rank']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "cv": spread}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
