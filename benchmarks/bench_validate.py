"""``llmsim validate`` over the dev set: wall time, CPU time, peak memory, and how far its rows
are from a committed run's.

::

    python benchmarks/bench_validate.py                       # workloads/validation/*.yaml, default --jobs
    python benchmarks/bench_validate.py --jobs 1
    python benchmarks/bench_validate.py --compare validation.json --json bench_validate.json

The command runs in a fresh process, as a user runs it (``python -m sim validate FILES --json
TMP``), so the wall time counts the imports and the worker processes' start. CPU time and peak
memory are the command's and its workers' (``resource.getrusage(RUSAGE_CHILDREN)``: the peak is
the largest single process's). ``--compare`` reads a ``--json`` file of an earlier run (the
repository's ``validation.json`` by default) and prints the largest relative difference of a
predicted value, with the three MAPE figures of both.

The target: the dev set in under 60 s on a 2-core machine (``TARGET_S``). Figures depend on the
machine and its load; compare runs on the same machine.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import make_parser, write_json

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 60.0
"""The dev set's wall time to stay under on a 2-core machine."""


def run_validate(files: list[str], jobs: int | None) -> dict:
    """Run the command once; its figures and its ``--json`` output."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "validation.json"
        cmd = [sys.executable, "-m", "sim", "validate", *files, "--json", str(out)]
        if jobs is not None:
            cmd += ["--jobs", str(jobs)]
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = json.loads(out.read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": after.ru_maxrss / 1024.0, "result": result}


def _pct(x: float | None) -> str:
    """A MAPE figure, or "n/a" where the files have no rows of its kind (no memory rows)."""
    return "n/a" if x is None else f"{x:.3f}%"


def largest_difference(new: dict, old: dict) -> tuple[float, str]:
    """The largest relative difference between the two runs' predicted values, and where."""
    worst, where = 0.0, "-"
    if len(new["cases"]) != len(old["cases"]):
        raise SystemExit(f"the runs have {len(new['cases'])} and {len(old['cases'])} rows")
    for a, b in zip(new["cases"], old["cases"]):
        if (a["id"], a["metric"]) != (b["id"], b["metric"]):
            raise SystemExit(f"row {a['id']} {a['metric']} against {b['id']} {b['metric']}")
        if a["predicted"] is None or b["predicted"] is None:
            if a["predicted"] != b["predicted"]:
                return float("inf"), f"{a['id']} {a['metric']}"
            continue
        d = abs(a["predicted"] / b["predicted"] - 1.0)
        if d > worst:
            worst, where = d, f"{a['id']} {a['metric']}"
    return worst, where


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__)
    ap.add_argument("files", nargs="*", help="case files (default workloads/validation/*.yaml)")
    ap.add_argument("--jobs", type=int, default=None, help="passed to llmsim validate (default: its own)")
    ap.add_argument("--compare", default=str(ROOT / "validation.json"),
                    help="an earlier run's --json output (default: the repository's validation.json)")
    args = ap.parse_args(argv)
    files = args.files or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "workloads" / "validation").glob("*.yaml"))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"llmsim validate benchmark: {len(files)} files, {cpus} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"--jobs {args.jobs if args.jobs is not None else 'default'}")
    fig = run_validate(files, args.jobs)
    res = fig.pop("result")
    fig.update(cases=res["cases_total"], rows=len(res["cases"]), simulated_at=res.get("simulated_at"),
               from_steady=res.get("cases_from_steady_state"),
               mape_pct=res["mape_pct"], mape_complete_pct=res["mape_complete_pct"],
               memory_mape_pct=res["memory_mape_pct"])
    print(f"wall {fig['wall_s']:.1f} s, CPU {fig['cpu_s']:.1f} s, peak memory {fig['peak_rss_mib']:.0f} MiB "
          f"(one process)")
    print(f"{fig['cases']} cases, {fig['rows']} rows; simulated at: {fig['simulated_at']}, "
          f"{fig['from_steady']} from their steady state")
    print(f"MAPE {_pct(fig['mape_pct'])}, config_complete {_pct(fig['mape_complete_pct'])}, "
          f"memory {_pct(fig['memory_mape_pct'])}")
    if args.compare and Path(args.compare).exists():
        old = json.loads(Path(args.compare).read_text())
        if not args.files:
            worst, where = largest_difference(res, old)
            fig.update(compared_with=args.compare, largest_relative_difference=worst, largest_difference_row=where)
            print(f"against {args.compare}: largest relative difference {worst:.2e} ({where}); its MAPE "
                  f"{_pct(old['mape_pct'])}, {_pct(old['mape_complete_pct'])}, {_pct(old['memory_mape_pct'])}")
    met = fig["wall_s"] < TARGET_S
    print(f"target: the dev set in under {TARGET_S:.0f} s on 2 cores: {'met' if met else 'not met'} "
          f"({fig['wall_s']:.1f} s on {cpus} CPUs)")
    write_json(args.json, fig, fields=())
    return 0


if __name__ == "__main__":
    sys.exit(main())
