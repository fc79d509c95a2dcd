"""llmsim against every set of published runs kept outside its validation set, in one report.

::

    python benchmarks/external_sets.py                        # every set, ~7 min on 2 cores
    python benchmarks/external_sets.py dgxc llama3_paper      # some of them
    python benchmarks/external_sets.py --json external.json

The sets are the case files under ``benchmarks/`` (each names its sources): ``dgxc`` (NVIDIA
DGX Cloud Benchmarking's step times, NeMo 24.05-25.09, MaxText, PaxML), ``llama3_paper`` (the
Llama 3 paper's Table 4), ``megatron_deepspeed`` (BLOOM and MT-NLG), ``megatron_bridge_moe``
(Megatron-Bridge's mixture-of-experts rows), ``llm_foundry`` (MosaicML's MPT tables) and
``nemo_perf_summary`` (NeMo's performance summary pages other than the dev set's). For
each set it prints the MAPE and the mean signed error (+: predicted faster than measured) over
its time and throughput rows, then the same by software stack (the one each case runs on,
:func:`sim.config.workload.case_stack`) and by GPU. Nothing here is fitted to these rows;
``docs/validation.md`` ("Beyond the dev set") says what they show.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import yaml

from sim.config.workload import case_stack
from sim.studies.validate import validate

HERE = Path(__file__).resolve().parent
SETS = {
    "dgxc": HERE / "dgxc" / "cases.yaml",
    "llama3_paper": HERE / "llama3_paper" / "cases.yaml",
    "megatron_deepspeed": HERE / "megatron_deepspeed" / "cases.yaml",
    "megatron_bridge_moe": HERE / "megatron_bridge_moe" / "cases.yaml",
    "llm_foundry": HERE / "llm_foundry" / "mpt_tables.yaml",
    "nemo_perf_summary": HERE / "nemo_perf_summary" / "cases.yaml",
}
"""Each external set's case file, by name."""


def _cases(path: Path) -> list[dict]:
    data = yaml.safe_load(path.read_text())
    return data["cases"] if isinstance(data, dict) else data


def _stats(errors: list[float]) -> dict:
    return {"rows": len(errors), "mape_pct": round(sum(abs(e) for e in errors) / len(errors), 2),
            "mean_signed_error_pct": round(sum(errors) / len(errors), 2)}


def score(name: str, jobs: int | None = None) -> dict:
    """One set's figures: ``all``, ``stack NAME`` and ``gpu NAME`` groups, the rows not
    simulated (with why), and each scored row's signed error."""
    path = SETS[name]
    raw = {c["id"]: c for c in _cases(path)}
    v = validate([str(path)], jobs=jobs)
    groups: dict[str, list[float]] = defaultdict(list)
    rows, skipped = {}, {}
    for r in v.rows:
        if r.skipped is not None:
            skipped[r.id] = r.skipped
            continue
        if r.metric == "peak_memory_gib" or r.signed_error_pct is None:
            continue
        c = raw[r.id]
        stack = case_stack(c, path).name
        for key in ("all", f"stack {stack}", f"gpu {c['system']['gpu']}"):
            groups[key].append(r.signed_error_pct)
        rows[r.id] = round(r.signed_error_pct, 2)
    return {"file": str(path.relative_to(HERE.parent)), "groups": {k: _stats(e) for k, e in groups.items()},
            "skipped": skipped, "signed_error_pct": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("sets", nargs="*", metavar="SET", help=f"sets to score (default: all of {', '.join(SETS)})")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPU count)")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    unknown = [s for s in args.sets if s not in SETS]
    if unknown:
        ap.error(f"SET: expected one of {', '.join(SETS)} (got {unknown[0][:60]!r})")
    result = {name: score(name, args.jobs) for name in (args.sets or list(SETS))}
    print("published runs outside the validation set: MAPE (mean signed error, +: predicted faster)")
    for name, res in result.items():
        g = res["groups"]
        head = g.get("all")
        line = f"{head['mape_pct']:.1f}% ({head['mean_signed_error_pct']:+.1f}%) over {head['rows']} rows" \
            if head else "no row scored"
        missed = f", {len(res['skipped'])} not simulated" if res["skipped"] else ""
        print(f"\n{name} ({res['file']}): {line}{missed}")
        for key in sorted(k for k in g if k != "all"):
            s = g[key]
            print(f"  {key:<34}{s['rows']:>5}  {s['mape_pct']:>6.1f}%  ({s['mean_signed_error_pct']:+6.1f}%)")
        for cid, why in list(res["skipped"].items())[:3]:
            print(f"  not simulated: {cid}: {why[:120]}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
