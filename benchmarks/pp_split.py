"""Why are validation rows without pipeline parallelism predicted faster than those with it?

::

    python benchmarks/pp_split.py --json pp_split.json              # every case file, ~7 min on 2 cores
    python benchmarks/pp_split.py --from pp_split.json              # the tables again, no runs

It simulates every case of ``workloads/validation`` (chunk granularity where that gives the
op-level figures, as ``llmsim validate`` does) and keeps each run's breakdown: compute by kind
(GEMM, attention, the rest), exposed TP / PP / DP+CP communication and the bubble. Then:

* the mean signed error (+ = llmsim predicts faster than measured) by the *resolved* pipeline
  size, over every source and per source;
* the mean share of the predicted iteration each term takes, PP = 1 against PP > 1, over the
  Megatron-family rows (every source but torchtitan, nemo-longseq and the DeepSpeed ZeRO-3
  rows, each of which has a mechanism of its own);
* least-squares factors on those rows: the time a row needs, ``(measured - predicted) /
  predicted``, fitted as ``sum((f_k - 1) x share_k)`` over the compute terms (GEMM and the
  non-GEMM rest; GEMM, attention and the rest), refitted with each source left out, and the
  residual mean of each PP group after the fit. A factor that removes the PP = 1 / PP > 1
  difference with no pipeline term in the model says the difference is in the compute mix;
* the terms a non-pipelined iteration pays more of, each as a share of the predicted iteration
  by PP group (the optimizer step; the loss and embedding kernels; the exposed DP reduction)
  and the factor on it that would close the PP = 1 / PP > 1 difference alone;
* the difference by hidden size, and least-squares fits of the signed error on a PP = 1
  indicator beside the non-GEMM share and ``1 / iteration``: a PP term that vanishes beside them
  says the PP split is the model-size mix (small hidden sizes: more non-GEMM time, shorter
  iterations), not something pipelining changes.

A throughput target is turned into the iteration time it implies with the run's own work, as
``llmsim validate`` scores it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import sim
from sim.config import load_case_records
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.validate import case_topology
from sim.units import TFLOPS

ROOT = Path(sim.__file__).resolve().parent.parent
CASES = ROOT / "workloads" / "validation"
TERMS = ("gemm", "attention", "other", "tp", "pp", "dp_cp", "bubble")


def _own_family(row: dict) -> bool:
    """Rows left out of the fits: each family has a mechanism of its own (CP ring attention
    at up to 1M tokens, DeepSpeed 0.3's blocking ZeRO-3, torchtitan's eager kernels)."""
    return row["source"] in ("torchtitan", "nemo-longseq") or "zero3" in row["id"]


def case_row(rec) -> dict | None:
    """One case's measured and predicted iteration and the predicted breakdown (None: no time
    target, or not simulable)."""
    w = rec.workload
    metric = next((m for m in ("iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu") if m in rec.targets), None)
    if w is None or metric is None:
        return None
    run = simulate(w, case_topology(w), granularity="chunk", exact=True)
    rep = make_report(run)
    t = rep.iteration_time_s
    if metric == "iteration_time_s":
        measured = rec.targets[metric]
    elif metric == "tflops_per_gpu":
        flops = run.program.hardware_flops_per_iteration if rec.includes_recompute else run.program.flops_per_iteration
        measured = flops / (rec.targets[metric] * TFLOPS * w.system.num_gpus)
    else:
        measured = rep.tokens_per_s * t / (rec.targets[metric] * w.system.num_gpus)
    c, e = rep.compute_s, rep.exposed_comm_s
    gemm, attn = c.get("gemm", 0.0), c.get("attention", 0.0)
    terms = {"gemm": gemm, "attention": attn, "other": c["total"] - gemm - attn, "tp": e["tp"], "pp": e["pp"],
             "dp_cp": e["dp"] + e["cp"] + e["ep"]}
    terms["bubble"] = t - c["total"] - sum(e.values())
    detail = {"optimizer": c.get("optimizer", 0.0), "loss": c.get("loss", 0.0) + c.get("embedding", 0.0),
              "dp": e["dp"]}
    return {"id": rec.id, "source": Path(rec.file).stem, "pp": w.parallel.pp, "tp": w.parallel.tp,
            "hidden": w.model.hidden_size, "rate": metric != "iteration_time_s", "measured_s": measured,
            "predicted_s": t, "terms": terms, "detail": detail}


def signed_pct(r: dict) -> float:
    """+ = llmsim predicts faster than measured, in percent of the measured value as ``llmsim
    validate`` scores it: of the iteration time for a time target, of the rate for a
    throughput target (``predicted / measured - 1`` of the rate is ``measured / predicted - 1``
    of the time)."""
    base = r["predicted_s"] if r["rate"] else r["measured_s"]
    return (r["measured_s"] - r["predicted_s"]) / base * 100


def _mean(xs) -> float:
    return float(np.mean(xs)) if len(xs) else float("nan")


def print_tables(rows: list[dict]) -> None:
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        for key in (("ALL",), (r["source"],)):
            groups.setdefault(key + ("PP>1" if r["pp"] > 1 else "PP=1",), []).append(signed_pct(r))
    print("mean signed error, + = llmsim faster (by resolved PP)")
    for key in sorted(groups):
        print(f"  {' '.join(key):32s} n={len(groups[key]):3d}  {_mean(groups[key]):+6.1f}%")

    fam = [r for r in rows if not _own_family(r)]
    X = np.array([[r["terms"][k] / r["predicted_s"] for k in TERMS] for r in fam])
    Y = np.array([r["measured_s"] / r["predicted_s"] - 1 for r in fam])
    pp = np.array([r["pp"] > 1 for r in fam])
    src = np.array([r["source"] for r in fam])
    print(f"\nMegatron-family rows: {len(fam)}; time needed (measured - predicted) / predicted: "
          f"PP=1 {Y[~pp].mean() * 100:+.1f}% (n={(~pp).sum()}), PP>1 {Y[pp].mean() * 100:+.1f}% (n={pp.sum()})")
    for name, m in (("PP=1", ~pp), ("PP>1", pp)):
        print(f"  mean share of the predicted iteration, {name}: "
              + "  ".join(f"{k} {v * 100:.1f}%" for k, v in zip(TERMS, X[m].mean(0))))
    models = {"GEMM, non-GEMM compute": np.c_[X[:, 0], X[:, 1] + X[:, 2]],
              "GEMM, attention, other compute": X[:, :3]}
    for label, A in models.items():
        print(f"\nfactors ({label}), each source left out in turn; residual mean by PP group")
        for drop in ["(none)"] + sorted(set(src)):
            keep = src != drop
            coef = np.linalg.lstsq(A[keep], Y[keep], rcond=None)[0]
            res = Y - A @ coef
            print(f"  without {drop:16s} factors {' '.join(f'{1 + c:.2f}' for c in coef)}   residual "
                  f"PP=1 {res[~pp & keep].mean() * 100:+.1f}%  PP>1 {res[pp & keep].mean() * 100:+.1f}%")
    if all("detail" in r and "hidden" in r for r in fam):
        print_hypotheses(fam)


def print_hypotheses(fam: list[dict]) -> None:
    """The PP-specific terms (optimizer, loss and embedding, exposed DP) and the model-size mix,
    over the Megatron-family rows (each with ``detail`` and ``hidden``)."""
    pp = np.array([r["pp"] > 1 for r in fam])
    y = np.array([signed_pct(r) for r in fam])
    gap = y[~pp].mean() - y[pp].mean()
    print(f"\nPP-specific terms (Megatron-family rows; signed error PP=1 {y[~pp].mean():+.1f}%, "
          f"PP>1 {y[pp].mean():+.1f}%, difference {gap:.1f} points)")
    for k in ("optimizer", "loss", "dp"):
        share = np.array([r["detail"][k] / r["predicted_s"] * 100 for r in fam])
        d = share[~pp].mean() - share[pp].mean()
        need = f"x{1 + gap / d:.1f}" if d > 0 else "none (not larger at PP=1)"
        print(f"  {k:10s} share of the iteration: PP=1 mean {share[~pp].mean():.2f}% median "
              f"{np.median(share[~pp]):.2f}%, PP>1 mean {share[pp].mean():.2f}%; factor closing the gap alone: {need}")
    hidden = np.array([r["hidden"] for r in fam])
    print("\nsigned error by hidden size")
    for lo, hi in ((0, 4096), (4097, 8192), (8193, 10**9)):
        m = (hidden >= lo) & (hidden <= hi)
        print(f"  hidden {lo:>5}-{hi if hi < 10**9 else 'up':<6} PP=1 n={(m & ~pp).sum():3d} {_mean(y[m & ~pp]):+6.1f}%"
              f"   PP>1 n={(m & pp).sum():3d} {_mean(y[m & pp]):+6.1f}%")
    nongemm = np.array([(r["terms"]["attention"] + r["terms"]["other"]) / r["predicted_s"] * 100 for r in fam])
    inv_t = np.array([1 / r["predicted_s"] for r in fam])
    cols = {"PP=1": (~pp).astype(float), "non-GEMM %": nongemm, "1/iteration s": inv_t}
    print("\nleast squares, signed error % = a + sum(b x term)")
    for names in (("PP=1",), ("non-GEMM %",), ("1/iteration s",), ("PP=1", "non-GEMM %"), ("PP=1", "1/iteration s"),
                  ("PP=1", "non-GEMM %", "1/iteration s")):
        A = np.c_[np.ones(len(fam)), np.column_stack([cols[n] for n in names])]
        coef = np.linalg.lstsq(A, y, rcond=None)[0]
        rms = float(np.sqrt(np.mean((y - A @ coef) ** 2)))
        terms = "  ".join(f"{n} {c:+.2f}" for n, c in zip(names, coef[1:]))
        print(f"  {' + '.join(names):36s} a {coef[0]:+6.2f}  {terms}   rms residual {rms:.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="case files (default: every file of workloads/validation)")
    ap.add_argument("--json", metavar="PATH", help="write the rows (breakdowns) as JSON")
    ap.add_argument("--from", dest="src", metavar="PATH", help="print the tables of a --json file, simulating nothing")
    args = ap.parse_args(argv)
    if args.src:
        need = {"id", "source", "pp", "rate", "measured_s", "predicted_s", "terms"}
        try:
            rows = json.loads(Path(args.src).read_text())["rows"]
            if not rows or any(not need <= set(r) or set(TERMS) - set(r["terms"]) for r in rows):
                raise ValueError(f"rows with the fields {sorted(need)} and terms {list(TERMS)}")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"{args.src}: expected the JSON this script writes ({e})") from e
        print_tables(rows)
        return 0
    files = [Path(f) for f in args.files] or sorted(CASES.glob("*.yaml"))
    rows = []
    for f in files:
        for rec in load_case_records(str(f)):
            row = case_row(rec)
            if row is not None:
                rows.append(row)
                print(f"{row['id'][:60]:60s} PP {row['pp']:3d}  {signed_pct(row):+6.1f}%", file=sys.stderr,
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1, sort_keys=True))
    print_tables(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
