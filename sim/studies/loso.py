"""Leave-one-source-out analysis of a ``llmsim validate --json`` file: could one fitted constant
bring the validation error under the accuracy issue's targets?

The accuracy issue allows a constant fitted to the published runs if it is fitted on one
source and its error reported on the others (leave one source out). llmsim fits nothing. This
asks what the most general such constant could buy: one factor ``k`` on every predicted
iteration time (a time row's prediction times ``k``, a throughput row's divided by it), the
crudest "software efficiency" a simulator could calibrate. It does not change the simulator;
it reads the rows of a ``llmsim validate --json`` file.

For each source (a case file), :func:`analyse` finds the ``k`` that gives that source's own rows
their least mean absolute percentage error (a grid of step 1e-4 from 0.5 to 2), then that
source's MAPE before and after, the other sources' MAPE under the same ``k`` (the held-out
figure), every row's, the worst row and how many rows stay past 25%. Last, the same with
``k`` fitted on every row at once, and on the ``config_complete`` rows, in sample: a lower
bound on what any single factor can reach. Memory rows are left out (a time factor does not
move them). ``benchmarks/validation_loso.py`` prints :func:`render` of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

RATE_METRICS = ("tflops_per_gpu", "tokens_per_s_per_gpu")
"""Rows whose value falls as the iteration's time grows; every other scored row is a time."""
GRID = np.round(np.arange(0.5, 2.0 + 1e-9, 1e-4), 4)
"""The factors tried."""
WORST_PCT = 25.0
"""The issue's bound on any one row's error."""


def load_rows(path: str) -> list[dict]:
    """The scored time and throughput rows of a ``llmsim validate --json`` file, each with its
    source (the case file's name) and its predicted-to-measured ratio of iteration times."""
    try:
        doc = json.loads(Path(path).read_text())
        cases = doc["cases"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: expected the JSON that `llmsim validate --json` writes ({e})") from e
    rows = []
    for c in cases:
        if c.get("skipped") or c.get("error_pct") is None or c.get("metric") == "peak_memory_gib":
            continue
        e = c["error_pct"] / 100.0
        ratio = 1.0 / (1.0 + e) if c["metric"] in RATE_METRICS else 1.0 + e
        rows.append({"id": c["id"], "source": Path(c["file"]).stem, "config_complete": bool(c["config_complete"]),
                     "time_ratio": ratio, "rate": c["metric"] in RATE_METRICS})
    if not rows:
        raise SystemExit(f"{path}: no scored time or throughput rows")
    return rows


def errors_pct(rows: list[dict], k: np.ndarray) -> np.ndarray:
    """Each row's absolute error in percent with every predicted time multiplied by ``k``
    (rows x factors)."""
    r = np.array([x["time_ratio"] for x in rows])[:, None] * np.asarray(k, dtype=float)[None, :]
    rate = np.array([x["rate"] for x in rows])[:, None]
    return 100.0 * np.abs(np.where(rate, 1.0 / r, r) - 1.0)


def best_factor(rows: list[dict]) -> float:
    """The factor of :data:`GRID` giving ``rows`` their least MAPE (the smallest on a tie)."""
    return float(GRID[int(np.argmin(errors_pct(rows, GRID).mean(axis=0)))])


def summary(rows: list[dict], k: float) -> dict:
    """MAPE, worst row and rows past :data:`WORST_PCT` of ``rows`` under factor ``k``."""
    if not rows:
        return {"rows": 0, "mape_pct": None, "worst_pct": None, "rows_over_worst_bound": 0}
    e = errors_pct(rows, [k])[:, 0]
    return {"rows": len(rows), "mape_pct": float(e.mean()), "worst_pct": float(e.max()),
            "rows_over_worst_bound": int((e > WORST_PCT).sum())}


def analyse(rows: list[dict]) -> dict:
    """The factor fitted on each source's rows and its summaries on that source and the others
    (``leave_one_source_out``), the unfitted summaries, and the factor fitted in sample on every
    row and on the ``config_complete`` rows."""
    sources = sorted({r["source"] for r in rows})
    out = []
    for s in sources:
        own = [r for r in rows if r["source"] == s]
        others = [r for r in rows if r["source"] != s]
        k = best_factor(own)
        out.append({"source": s, "factor": k, "own_before": summary(own, 1.0), "own_after": summary(own, k),
                    "others_before": summary(others, 1.0), "others_after": summary(others, k),
                    "all_after": summary(rows, k)})
    complete = [r for r in rows if r["config_complete"]]
    k_all, k_complete = best_factor(rows), best_factor(complete)
    return {"leave_one_source_out": out, "unfitted": summary(rows, 1.0),
            "unfitted_complete": summary(complete, 1.0),
            "in_sample_all": {"factor": k_all, "all": summary(rows, k_all), "complete": summary(complete, k_all)},
            "in_sample_complete": {"factor": k_complete, "complete": summary(complete, k_complete)}}


def _pct(x: float | None) -> str:
    """A percentage to one decimal, ``-`` for none."""
    return "-" if x is None else f"{x:.1f}"


def render(a: dict) -> str:
    """The table and summary lines of an :func:`analyse` result."""
    head = (f"{'fitted on':<16} {'rows':>4} {'factor':>7} {'own MAPE %':>13} {'others MAPE %':>14} "
            f"{'all MAPE %':>10} {'worst %':>8} {'> 25%':>6}")
    lines = [head, "-" * len(head)]
    for s in a["leave_one_source_out"]:
        lines.append(f"{s['source']:<16} {s['own_before']['rows']:>4} {s['factor']:>7.4f} "
                     f"{_pct(s['own_before']['mape_pct']):>5} -> {_pct(s['own_after']['mape_pct']):>4} "
                     f"{_pct(s['others_before']['mape_pct']):>5} -> {_pct(s['others_after']['mape_pct']):>5} "
                     f"{_pct(s['all_after']['mape_pct']):>10} {_pct(s['all_after']['worst_pct']):>8} "
                     f"{s['all_after']['rows_over_worst_bound']:>6}")
    u, uc = a["unfitted"], a["unfitted_complete"]
    ia, ic = a["in_sample_all"], a["in_sample_complete"]
    lines += ["",
              f"no factor (llmsim as it is): MAPE {_pct(u['mape_pct'])}% over {u['rows']} rows, "
              f"config_complete {_pct(uc['mape_pct'])}% over {uc['rows']}, worst {_pct(u['worst_pct'])}%, "
              f"{u['rows_over_worst_bound']} rows past 25%",
              f"fitted on every row (in sample): factor {ia['factor']:.4f}, MAPE {_pct(ia['all']['mape_pct'])}%, "
              f"config_complete {_pct(ia['complete']['mape_pct'])}%, worst {_pct(ia['all']['worst_pct'])}%, "
              f"{ia['all']['rows_over_worst_bound']} rows past 25%",
              f"fitted on the config_complete rows (in sample): factor {ic['factor']:.4f}, "
              f"their MAPE {_pct(ic['complete']['mape_pct'])}%, worst {_pct(ic['complete']['worst_pct'])}%"]
    return "\n".join(lines)
