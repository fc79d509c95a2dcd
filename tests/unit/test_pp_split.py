"""``benchmarks/pp_split.py --from``: the PP-specific terms and the model-size fits it prints
for issue #30's PP = 1 / PP > 1 analysis (docs/validation.md, "Why rows without pipeline
parallelism lean fast"), on synthetic rows whose answer is known."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "pp_split.py"


def _printed(path: Path) -> str:
    """What ``benchmarks/pp_split.py --from PATH`` prints, run as a user runs it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(SCRIPT), "--from", str(path)], capture_output=True, text=True,
                          env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _row(i: int, pp: int, hidden: int, error_pct: float, optimizer_s: float, detail: bool = True) -> dict:
    """An iteration-time row of 1 s predicted whose signed error is ``error_pct``."""
    terms = {"gemm": 0.6, "attention": 0.2, "other": 0.2, "tp": 0.0, "pp": 0.0, "dp_cp": 0.0, "bubble": 0.0}
    row = {"id": f"r{i}", "source": "src" + str(i % 2), "pp": pp, "tp": 1, "rate": False,
           "measured_s": 1.0 / (1 - error_pct / 100), "predicted_s": 1.0, "terms": terms}
    if detail:
        row |= {"hidden": hidden, "detail": {"optimizer": optimizer_s, "loss": 0.01, "dp": 0.0}}
    return row


def test_factor_that_closes_the_gap_and_the_split_by_hidden_size(tmp_path):
    # PP = 1 rows 6 points faster; their optimizer step 2% of the iteration against 1%: x7 closes it
    rows = [_row(i, 1, 4096, 8.0, 0.02) for i in range(4)] + [_row(i + 4, 4, 16384, 2.0, 0.01) for i in range(4)]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"rows": rows}))
    out = _printed(path)
    assert "difference 6.0 points" in out
    assert "optimizer  share of the iteration: PP=1 mean 2.00%" in out and "alone: x7.0" in out
    assert "loss       share" in out and "none (not larger at PP=1)" in out
    assert "hidden     0-4096   PP=1 n=  4   +8.0%" in out


def test_rows_without_the_detail_print_the_older_tables_only(tmp_path):
    rows = [_row(i, 1 + 3 * (i // 2 % 2), 4096, 5.0, 0.0, detail=False) for i in range(6)]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"rows": rows}))
    out = _printed(path)
    assert "factors (GEMM, non-GEMM compute)" in out and "PP-specific terms" not in out
