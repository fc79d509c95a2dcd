"""How far the predictions move when the dev cases' layouts are hidden and llmsim chooses them.

::

    python benchmarks/open_layout.py
    python benchmarks/open_layout.py --json open_layout.json
    python benchmarks/open_layout.py nemo2407 torchtitan

A published run that does not say how it split its GPUs is simulated on the layout
:mod:`sim.config.layout` chooses (the smallest model-parallel size that fits, TP within a
server, CP for a long sequence, then PP). This script measures what that costs on the dev set:
it copies every case of ``workloads/validation/`` with ``tp``, ``pp``, ``dp``, ``cp``,
``virtual_pipeline_stages`` and ``schedule`` set to null, validates the copies and the
originals, and prints, by source, the MAPE of each with its mean signed error (+: predicted
faster than measured) and how many rows the chosen layout matches the published one (TP, PP
and CP alike); ``--json`` adds every row's layouts and errors. Case files named on the command
line (``nemo2407``) limit it to them. Nothing in llmsim reads its output.
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
from sim.studies.validate import rows_mape, rows_mean_signed, validate

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write the figures (and every row) as JSON")
    ap.add_argument("sources", nargs="*", metavar="SOURCE",
                    help="case files of workloads/validation/ by name (default: all)")
    args = ap.parse_args(argv)
    originals = sorted(f for f in CASES.glob("*.yaml") if not args.sources or f.stem in args.sources)
    with tempfile.TemporaryDirectory() as tmp:
        hidden = [hide_layouts(f, Path(tmp)) for f in originals]
        base = validate([str(f) for f in originals])
        open_ = validate([str(f) for f in hidden])
        published, chosen = layouts(originals), layouts(hidden)
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
    print(f"{'source':<16} {'rows':>5} {'published':>18} {'hidden':>18} {'same layout':>12}")
    figures: dict = {}
    for source, e in sorted(sources.items()) + [("all", {k: [x for v in sources.values() for x in v[k]]
                                                          for k in ("published", "hidden", "same")})]:
        a, b = rows_mape(e["published"]), rows_mape(e["hidden"])
        sa, sb = rows_mean_signed(e["published"]), rows_mean_signed(e["hidden"])
        same = sum(e["same"])
        print(f"{source:<16} {len(e['published']):>5} {a:>8.1f}% ({sa:+5.1f}%) {b:>8.1f}% ({sb:+5.1f}%) "
              f"{same:>7} of {len(e['same'])}")
        figures[source] = {"rows": len(e["published"]), "mape_published_pct": round(a, 2),
                           "mape_hidden_pct": round(b, 2), "signed_published_pct": round(sa, 2),
                           "signed_hidden_pct": round(sb, 2), "same_layout_rows": same}
    figures["cases"] = [{"id": r.id, "published_tp_pp_cp": published.get(r.id), "chosen_tp_pp_cp": chosen.get(r.id),
                         "signed_published_pct": r.signed_error_pct,
                         "signed_hidden_pct": by_id[(r.id, r.metric)].signed_error_pct
                         if (r.id, r.metric) in by_id else None} for r in time_rows]
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
