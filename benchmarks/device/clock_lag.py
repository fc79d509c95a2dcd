"""How fast the SM clock follows the kernels: NVML polled about every millisecond while a
stream switches between dense GEMMs and bandwidth-bound copies.

``sim/power.py`` gives an iteration's compute kernels one clock; the profiled torchtitan layer
showed kernels right after bandwidth-bound ones running faster than that (the clock lags). This
records the clock's response to each switch, for a model with a time constant. Writes
``clock_lag.json`` (the phases with their host start times, and the samples: time, SM clock,
instantaneous power) to ``--out``. Runs on a lent H100/H200 only (needs torch and pynvml).

    python benchmarks/device/clock_lag.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import pynvml
import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    samples, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            t = time.perf_counter()
            clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
            try:
                watts = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            except pynvml.NVMLError:
                watts = float("nan")
            samples.append((t, clock, watts))
            time.sleep(0.0005)

    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(14336, 4096, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(16384, 4096, device="cuda", dtype=torch.float32)
    for _ in range(3):
        x @ w.t()
        y.copy_(x)
    torch.cuda.synchronize()

    def run(kind, seconds):
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            if kind in ("gemm", "mix"):
                x @ w.t()
            if kind in ("copy", "mix"):
                for _ in range(12 if kind == "mix" else 4):
                    y.copy_(x)
            if kind == "idle":
                time.sleep(0.001)
            torch.cuda.synchronize()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    phases = []
    plan = [("idle", 0.5), ("gemm", 1.5), ("copy", 0.5), ("gemm", 0.5), ("idle", 0.3), ("gemm", 0.5),
            ("mix", 1.5), ("copy", 0.5), ("gemm", 1.0), ("idle", 0.5)]
    for kind, seconds in plan:
        phases.append((kind, time.perf_counter()))
        run(kind, seconds)
    phases.append(("end", time.perf_counter()))
    stop.set()
    thread.join()
    t0 = phases[0][1]
    period = (samples[-1][0] - samples[0][0]) / max(len(samples) - 1, 1)
    print(f"{len(samples)} samples, one every {period * 1e3:.2f} ms")
    for (kind, a), (_, b) in zip(phases, phases[1:]):
        s = [c for t, c, _ in samples if a <= t < b]
        head = [c for t, c, _ in samples if a <= t < a + 0.02]
        print(f"{kind:5s} {a - t0:6.2f}-{b - t0:6.2f} s: clock first 20 ms {min(head, default=0)}-"
              f"{max(head, default=0)}, whole {min(s, default=0)}-{max(s, default=0)} MHz, mean "
              f"{sum(s) / max(len(s), 1):.0f}")
    with open(os.path.join(args.out, "clock_lag.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "phases": [(k, t - t0) for k, t in phases],
                   "columns": ["t_s", "clock_sm_mhz", "power_w"],
                   "samples": [(round(t - t0, 5), c, p) for t, c, p in samples]}, fh)


if __name__ == "__main__":
    main()
