"""Could an engine place a layer pass as one unit and still give the op level's times to the bit?

::

    python benchmarks/pass_replay.py                       # gpt3-175b-1024 gpt3-175b llama3-70b
    python benchmarks/pass_replay.py tiny --json replay.json

``docs/design.md`` ("Speed at scale") plans an engine that holds a layer pass as one task and
places it with the op level's arithmetic. ``quiet_passes.py`` counts the passes no contending
kernel overlaps; this answers the question that count left open, for the passes whose compute
only their own tensor-parallel collectives overlap: does replaying such a pass on its own give
every op's start and end exactly as the op-level engine placed them?

The study is :func:`sim.engine.pass_replay.study`; its module says how it sorts and replays
the passes. For each workload preset given this prints the passes of each kind (quiet, own
only, met by others), how many of the quiet and own-only ones replay to the bit, and for the
others the first op that does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.engine.pass_replay import study

DEFAULT = ("gpt3-175b-1024", "gpt3-175b", "llama3-70b")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("presets", nargs="*", default=list(DEFAULT), help="workload presets (default: %(default)s)")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    rows = [study(p) for p in args.presets]
    head = (f"{'preset':<16} {'quiet':>16} {'own only':>16} {'met by others':>16}   "
            f"{'quiet exact':>12} {'own exact':>12}  {'worst diff s':>12}")
    print(head)
    print("-" * len(head))
    for r in rows:
        p, o, x, w = r["passes"], r["op_share"], r["replayed_to_the_bit"], r["worst_difference_s"]
        cell = {k: f"{p[k]:,} ({o.get(k, 0):.0%} ops)" for k in p}
        print(f"{r['preset']:<16} {cell['quiet']:>16} {cell['own_only']:>16} {cell['met_by_others']:>16}   "
              f"{x['quiet']:>12,} {x['own_only']:>12,}  {max(w.values()):>12.3g}")
        for op, n in r["first_op_off"].items():
            print(f"{'':<16} off from the bit first at {op}: {n:,} passes")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
