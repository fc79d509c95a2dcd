"""How far the predictions move when the dev cases' layouts are hidden and llmsim chooses them.

::

    python benchmarks/open_layout.py
    python benchmarks/open_layout.py --json open_layout.json

A published run that does not say how it split its GPUs is simulated on the layout
:mod:`sim.config.layout` chooses (the smallest model-parallel size that fits, TP within a
server, CP for a long sequence, then PP). This script measures what that costs on the dev set:
it copies every case of ``workloads/validation/`` with ``tp``, ``pp``, ``dp``, ``cp``,
``virtual_pipeline_stages`` and ``schedule`` set to null, validates the copies and the
originals, and prints, by source, the MAPE of each and how many rows the chosen layout
matches the published one (TP, PP and CP alike). Nothing in llmsim reads its output.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

import sim
from sim.config import load_case_records
from sim.studies.validate import Row, validate

ROOT = Path(sim.__file__).resolve().parent.parent
CASES = ROOT / "workloads" / "validation"
HIDDEN = ("tp", "pp", "dp", "cp", "virtual_pipeline_stages", "schedule")
"""The ``parallel`` keys hidden from each case."""


def hide_layouts(src: Path, dst: Path) -> Path:
    """``src``'s cases with :data:`HIDDEN` set to null, written to ``dst`` under the same name."""
    cases = yaml.safe_load(src.read_text())
    for case in cases:
        parallel = case.get("parallel") or {}
        for key in HIDDEN:
            parallel[key] = None
        case["parallel"] = parallel
    out = dst / src.name
    out.write_text(yaml.safe_dump(cases, sort_keys=False))
    return out


def layouts(files: list[Path]) -> dict[str, tuple[int, int, int]]:
    """Each case's (TP, PP, CP) as loaded."""
    out = {}
    for f in files:
        for rec in load_case_records(str(f)):
            if rec.workload is not None:
                p = rec.workload.parallel
                out[rec.id] = (p.tp, p.pp, p.cp)
    return out


def _mape(rows: list[Row]) -> float | None:
    errs = [abs(r.error_pct) for r in rows if r.error_pct is not None]
    return sum(errs) / len(errs) if errs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    originals = sorted(CASES.glob("*.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        hidden = [hide_layouts(f, Path(tmp)) for f in originals]
        published, chosen = layouts(originals), layouts(hidden)
        base = validate([str(f) for f in originals])
        open_ = validate([str(f) for f in hidden])
    time_rows = [r for r in base.rows if not r.is_memory and r.skipped is None]
    by_id = {(r.id, r.metric): r for r in open_.rows}
    sources: dict[str, dict[str, list]] = {}
    for r in time_rows:
        entry = sources.setdefault(r.source, {"published": [], "hidden": [], "same": []})
        entry["published"].append(r)
        other = by_id.get((r.id, r.metric))
        if other is not None and other.skipped is None:
            entry["hidden"].append(other)
        entry["same"].append(published.get(r.id) == chosen.get(r.id))
    print(f"{'source':<16} {'rows':>5} {'published':>10} {'hidden':>8} {'same layout':>12}")
    figures = {}
    for source, e in sorted(sources.items()):
        a, b = _mape(e["published"]), _mape(e["hidden"])
        same = sum(e["same"])
        print(f"{source:<16} {len(e['published']):>5} {a:>9.1f}% {b:>7.1f}% {same:>7} of {len(e['same'])}")
        figures[source] = {"rows": len(e["published"]), "mape_published_pct": round(a, 2),
                           "mape_hidden_pct": round(b, 2), "same_layout_rows": same}
    all_a, all_b = _mape([r for e in sources.values() for r in e["published"]]), \
        _mape([r for e in sources.values() for r in e["hidden"]])
    same = sum(sum(e["same"]) for e in sources.values())
    total = sum(len(e["same"]) for e in sources.values())
    print(f"{'all':<16} {total:>5} {all_a:>9.1f}% {all_b:>7.1f}% {same:>7} of {total}")
    figures["all"] = {"rows": total, "mape_published_pct": round(all_a, 2), "mape_hidden_pct": round(all_b, 2),
                      "same_layout_rows": same}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
