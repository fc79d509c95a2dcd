"""llmsim against MosaicML llm-foundry's own MPT throughput tables, which are not in its
validation set: how far its predictions carry to a framework, models and clusters it was not
built on, and what pricing the Triton FlashAttention those runs used changes.

::

    python benchmarks/llm_foundry_check.py                 # 209 rows twice, ~20 s on 2 cores
    python benchmarks/llm_foundry_check.py --json out.json

The rows are ``benchmarks/llm_foundry/mpt_tables.yaml`` (``transcribe.py`` beside it says how
they were read from the published README). Each is simulated twice: as the ``llm-foundry``
stack prices it (its default ``attn_impl: triton``, the first FlashAttention's rate,
``attention_kernel: flash1``), and with FlashAttention-2's rates instead
(``attention_kernel: flash2``, the stack's earlier setting). It prints the MAPE and mean signed
error (+: predicted faster than measured) by GPU and by sequence length. Nothing here is fitted
to these rows: the flash1 rate is FlashAttention-2's halved, from FlashAttention-2's and
PyTorch 2.2's published speedups (``sim.hardware.FLASH1_RATE``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

from sim.studies.validate import validate

CASES = Path(__file__).resolve().parent / "llm_foundry" / "mpt_tables.yaml"
SEQ_BUCKETS = ((0, 2048, "512-2048"), (2049, 8192, "4096-8192"), (8193, 1 << 30, "16384-65536"))


def _variant(kernel: str, folder: Path) -> str:
    """The cases with ``attention_kernel: kernel`` set, written into ``folder``."""
    cases = yaml.safe_load(CASES.read_text())
    for c in cases:
        c.setdefault("kernels", {})["attention_kernel"] = kernel
    path = folder / f"mpt_tables_{kernel}.yaml"
    path.write_text(yaml.safe_dump(cases, sort_keys=False))
    return str(path)


def _stats(errors: list[float]) -> dict:
    return {"rows": len(errors), "mape_pct": sum(abs(e) for e in errors) / len(errors),
            "mean_signed_error_pct": sum(errors) / len(errors)}


def _groups(rows, cases: dict) -> dict:
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        c = cases[r.id]
        seq = c["model"]["seq_length"]
        bucket = next(name for lo, hi, name in SEQ_BUCKETS if lo <= seq <= hi)
        for key in ("all", f"gpu {c['system']['gpu']}", f"seq {bucket}"):
            out[key].append(r.signed_error_pct)
    return {k: _stats(v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPU count)")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = ap.parse_args(argv)
    cases = {c["id"]: c for c in yaml.safe_load(CASES.read_text())}
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, path in (("flash1 (the stack)", str(CASES)), ("flash2", _variant("flash2", Path(tmp)))):
            v = validate([path], jobs=args.jobs)
            rows = [r for r in v.rows if r.skipped is None and r.signed_error_pct is not None]
            skipped = [r for r in v.rows if r.skipped is not None]
            if skipped:
                print(f"{len(skipped)} rows not simulated, the first: {skipped[0].id}: {skipped[0].skipped}",
                      file=sys.stderr)
                return 1
            result[label] = _groups(rows, cases)
    got = result["flash1 (the stack)"]
    keys = (["all"] + sorted(k for k in got if k.startswith("gpu "))
            + [f"seq {n}" for _, _, n in SEQ_BUCKETS if f"seq {n}" in got])
    print(f"llm-foundry MPT tables ({len(cases)} BF16 rows, tokens/s per GPU): MAPE (mean signed error, "
          "+: predicted faster)")
    print(f"  {'group':<28}{'rows':>5}  {'attention flash1 (stack)':>26}  {'attention flash2':>20}")
    for k in keys:
        a, b = result["flash1 (the stack)"][k], result["flash2"][k]
        print(f"  {k:<28}{a['rows']:>5}  {a['mape_pct']:>10.1f}% ({a['mean_signed_error_pct']:+6.1f}%)     "
              f"{b['mape_pct']:>8.1f}% ({b['mean_signed_error_pct']:+6.1f}%)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
