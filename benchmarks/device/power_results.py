"""Pack ``power_clock.py``'s output into one results file: every configuration with the
nvidia-smi samples taken during it (what ``power_derive.py`` and the tests read).

    python benchmarks/device/power_results.py --device "NAME, driver, torch, date" \\
        --run dvfs=DIR --run kernels=DIR --run mix=DIR --out results/NAME-power.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics

NOTE = ("gemm-bf16-carveout*: BF16 torch.mm ignored cuBLASLt's SM-count target, so those runs are "
        "full-chip repeats; FP8 _scaled_mm honoured it. mix runs: per-kernel median milliseconds from "
        "CUDA events, each pair alternating after a 1 s warm-up.")
COLUMNS = ["t_s_since_config_start", "power_draw_w", "power_draw_instant_w", "clock_sm_mhz", "temperature_c",
           "clocks_event_reasons"]
FILES = {"dvfs": "power_clock.json", "kernels": "power_kernels.json", "mix": "power_mix.json"}


def _samples(path: str) -> tuple[str, list[tuple]]:
    with open(path) as fh:
        lines = fh.read().splitlines()
    out = []
    for line in lines[1:]:
        p = [x.strip() for x in line.split(",")]
        try:
            t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").replace(
                tzinfo=datetime.timezone.utc).timestamp()
        except (ValueError, IndexError):
            continue
        out.append((t, float(p[1].split()[0]), float(p[2].split()[0]), float(p[3].split()[0]), int(p[5]), p[6]))
    return lines[0], out


def pack(part: str, directory: str) -> tuple[str, dict]:
    with open(os.path.join(directory, FILES[part])) as fh:
        data = json.load(fh)
    fields, samples = _samples(os.path.join(directory, "smi.csv"))
    configs = []
    for c in data["configs"]:
        a, b = c["t_start"], c["t_end"]
        tail = [w[1] for w in c["windows"][len(c["windows"]) // 2:]]
        row = {"name": c["name"], "active_sms": c["active_sms"] or None,
               "rate_unit": ("TB/s" if c["dtype"] == "bytes/s" else
                             None if c["name"].startswith("idle") or part == "mix" else "TFLOP/s"),
               "rate_second_half": None if part == "mix" or not tail else round(statistics.mean(tail), 4)}
        if part == "mix":
            row["median_ms"] = data["median_ms"][c["name"]]
        row.update(windows=len(c["windows"]), seconds=round(b - a, 2),
                   smi=[[round(s[0] - a, 2), *s[1:]] for s in samples if a <= s[0] <= b])
        configs.append(row)
    return fields, {"part": part, "configs": configs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", required=True)
    ap.add_argument("--run", action="append", required=True, metavar="PART=DIR")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    runs, fields = [], None
    for spec in args.run:
        part, directory = spec.split("=", 1)
        fields, run = pack(part, directory)
        runs.append(run)
    out = {"device": args.device,
           "script": "benchmarks/device/power_clock.py (--part dvfs, --part kernels, --part mix)",
           "smi_fields": fields, "runs": runs, "smi_columns": COLUMNS, "note": NOTE}
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=0)


if __name__ == "__main__":
    main()
