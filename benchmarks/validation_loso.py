"""Could one fitted constant bring the validation error under the accuracy issue's targets?

::

    llmsim validate workloads/validation/*.yaml --jobs 2 --json validation.json
    python benchmarks/validation_loso.py validation.json [--json loso.json]

Prints :func:`sim.studies.loso.render` of :func:`sim.studies.loso.analyse`: for each source
(a case file) the one factor on every predicted iteration time fitted on its own rows, and its
error on its own rows and on the other sources' (leave one source out), then the same factor
fitted in sample on every row and on the ``config_complete`` rows. It reads the rows of a
``llmsim validate --json`` file and does not change the simulator (:mod:`sim.studies.loso`
says what each figure is).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.studies.loso import analyse, load_rows, render


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("validation_json", nargs="?", default="validation.json",
                    help="what `llmsim validate --json` wrote (default validation.json)")
    ap.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    a = analyse(load_rows(args.validation_json))
    print(render(a))
    if args.json:
        Path(args.json).write_text(json.dumps(a, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
