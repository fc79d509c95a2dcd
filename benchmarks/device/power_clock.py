"""How a GPU's clock follows its power limit: sustained GEMMs on part of the chip and all of it.

A GPU at its power limit lowers its clock until the board draws no more than the limit, so
one card run at a lower limit (Meta's Grand Teton H100s at 500 W, say) computes slower than
the same card at 700 W. The limit cannot be changed on a lent machine, so this script
measures the curve it needs another way: dynamic power is ``active SMs x activity x g(f)``,
where ``g`` (voltage squared times frequency) belongs to the chip and ``activity`` to the
kernel. Running the same GEMM on 16..132 SMs (cuBLASLt's SM-count target, through
``torch._C._set_sm_carveout_experimental``) moves the card from below its limit, where the
clock sits at its maximum and the draw gives ``activity x g(f_max)`` per SM, to at it, where
the limit fixes ``g(f)`` at the clock the card chose. FP8 GEMMs draw more per SM than BF16
ones and reach lower clocks at the same limit, widening the range of ``f`` seen.

Also: the same large GEMM back to back, and between bandwidth-bound kernels (as in a
training step), to see whether a GEMM in a mixed stream runs at a higher clock than the
sustained sweeps that the efficiency curves come from.

Writes ``power_clock.json`` (every config: active SMs, TFLOP/s per window, and the
``nvidia-smi`` samples taken every 100 ms in the background) to ``--out``. Runs on a lent
H100/H200 only (needs torch); nothing in llmsim imports it.

    python benchmarks/device/power_clock.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

import torch

FIELDS_TRY = ("timestamp,power.draw,power.draw.instant,clocks.sm,clocks.mem,temperature.gpu,"
              "clocks_event_reasons.active",
              "timestamp,power.draw,clocks.sm,clocks.mem,temperature.gpu")


def sampler(path):
    for fields in FIELDS_TRY:
        probe = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], check=False,
                               capture_output=True, text=True, timeout=20)
        if probe.returncode == 0 and "Field" not in probe.stdout and "not a valid" not in probe.stdout:
            break
    fh = open(path, "w")  # noqa: SIM115 (lives as long as the process)
    fh.write(fields + "\n")
    fh.flush()
    proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader", "-lms", "100"],
                            stdout=fh, stderr=subprocess.STDOUT)
    return proc, fields


def sustained(fn, flops_per_call, seconds, chunk):
    """Run ``fn`` back to back for ``seconds``; TFLOP/s per chunk of calls, with the host
    time each chunk ended (to line up with the nvidia-smi samples)."""
    torch.cuda.synchronize()
    out = []
    t_end = time.time() + seconds
    while time.time() < t_end:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(chunk):
            fn()
        e1.record()
        e1.synchronize()
        out.append((time.time(), flops_per_call * chunk / (e0.elapsed_time(e1) / 1e3) / 1e12))
    return out


def graphed(fn, calls):
    """``fn`` captured ``calls`` times into one CUDA graph; returns the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g.replay


def attention_calls():
    """FlashAttention-2 or cuDNN (the caller's ``sdpa_kernel``) on 2 x 32 heads x 8192 tokens,
    head dim 128, causal: ``(forward, forward and backward, forward FLOPs)``."""
    import torch.nn.functional as F

    bsz, h, s, d = 2, 32, 8192, 128
    q, k_, v_ = (torch.randn(bsz, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                 for _ in range(3))
    g = torch.randn(bsz, h, s, d, device="cuda", dtype=torch.bfloat16)

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k_, v_, is_causal=True)

    def both():
        o = F.scaled_dot_product_attention(q, k_, v_, is_causal=True)
        torch.autograd.grad(o, (q, k_, v_), g)
    return fwd, both, 4.0 * bsz * h * s * s * d / 2


def kernel_classes(args, record):
    """Each kernel class alone, back to back for ``args.seconds``: its rate, and (from the
    background samples) the clock and power it holds at this card's limit."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run(name, fn, work, unit, calls=1, graph=True):
        step = graphed(fn, calls) if graph else fn
        t0 = time.time()
        w = sustained(step, work * calls, args.seconds, 1 if calls > 1 else 8)
        record(name, 0, unit, w, t0)
        time.sleep(0.3)

    t0 = time.time()
    time.sleep(2.0)
    record("idle-warm", 0, "-", [], t0)
    for m, n, k, calls in ((2048, 2048, 2048, 400), (4096, 4096, 4096, 60), (16384, 4096, 4096, 20),
                           (16384, 14336, 4096, 6)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        run(f"gemm-bf16-{m}x{n}x{k}", lambda a=a, b=b: a @ b, 2.0 * m * n * k, "TFLOP/s", calls)
    one = torch.ones((), device="cuda")
    for n, calls in ((4096, 100),):
        a8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        run(f"gemm-fp8-{n}x{n}x{n}", lambda a8=a8, b8=b8: torch._scaled_mm(
            a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), 2.0 * n ** 3, "TFLOP/s", calls)
    fwd, both, fwd_flops = attention_calls()
    for backend, label in ((SDPBackend.FLASH_ATTENTION, "fa2"), (SDPBackend.CUDNN_ATTENTION, "cudnn")):
        with sdpa_kernel([backend]):
            run(f"attn-{label}-fwd", fwd, fwd_flops, "TFLOP/s", graph=False)
            run(f"attn-{label}-fwdbwd", both, 3.5 * fwd_flops, "TFLOP/s", graph=False)
    tok, hid = 16384, 4096
    x = torch.randn(tok, hid, device="cuda", dtype=torch.bfloat16)
    x2 = torch.randn(tok, hid, device="cuda", dtype=torch.bfloat16)
    xf = torch.randn(tok, hid, device="cuda", dtype=torch.float32)
    r = torch.randn(tok, 1, device="cuda", dtype=torch.float32)
    wv = torch.randn(hid, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(2, 8192, 8, 128, device="cuda", dtype=torch.bfloat16)
    e = tok * hid
    mem = (("add-bf16", lambda: x + x2, 6 * e), ("cast-bf16-fp32", lambda: x.float(), 6 * e),
           ("cast-fp32-bf16", lambda: xf.to(torch.bfloat16), 6 * e),
           ("mul-bcast-bf16-weight", lambda: x * wv, 4 * e), ("mul-bcast-fp32-row", lambda: xf * r, 8 * e),
           ("pow-fp32", lambda: xf.pow(2), 8 * e), ("mean-fp32", lambda: xf.mean(-1, keepdim=True), 4 * e),
           ("repeat-kv", lambda: torch.unsqueeze(kv, 3).expand(2, 8192, 8, 4, 128).reshape(2, 8192, 32, 128),
            2 * kv.numel() * 5))
    for name, fn, nbytes in mem:
        run(f"mem-{name}", fn, nbytes, "bytes/s", 20)
    t0 = time.time()
    time.sleep(2.0)
    record("idle-after", 0, "-", [], t0)


def mixes(args, record):
    """Compute-bound kernels of two families alternating, each timed with CUDA events: does a
    less power-dense kernel (FlashAttention-2, cuDNN attention) beside GEMMs run at the GEMMs'
    clock, or at its own clock for one common power level? Each kernel also alone, and the
    attention forward+backward runs warmed up first (sustained clocks)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    m, k, n = 16384, 4096, 14336
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    wt = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    attn_fwd, attn_both, _ = attention_calls()

    def gemm():
        x @ wt.t()

    def timed(name, parts, seconds):
        """``parts``: [(label, fn)] run in turn; per-label milliseconds of each call."""
        for _ in range(3):
            for _, fn in parts:
                fn()
        torch.cuda.synchronize()
        t_warm = time.time() + 1.0
        while time.time() < t_warm:  # reach the sustained clock before timing
            for _, fn in parts:
                fn()
            torch.cuda.synchronize()
        t0, out = time.time(), {label: [] for label, _ in parts}
        while time.time() < t0 + seconds:
            evs = []
            for _ in range(4):
                for label, fn in parts:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    fn()
                    e1.record()
                    evs.append((label, e0, e1))
            evs[-1][2].synchronize()
            for label, e0, e1 in evs:
                out[label].append(e0.elapsed_time(e1))
        windows = [(time.time(), sum(v) / len(v)) for v in out.values()]
        record(name, 0, "ms per call: " + ", ".join(f"{lb} {sum(v) / len(v):.3f}" for lb, v in out.items()),
               windows, t0)
        configs_ms[name] = {lb: sorted(v)[len(v) // 2] for lb, v in out.items()}
        time.sleep(0.5)

    configs_ms = {}
    for backend, label in ((SDPBackend.FLASH_ATTENTION, "fa2"), (SDPBackend.CUDNN_ATTENTION, "cudnn")):
        with sdpa_kernel([backend]):
            timed(f"alone-{label}-fwd", [(f"{label}-fwd", attn_fwd)], args.seconds)
            timed(f"alone-{label}-fwdbwd", [(f"{label}-fwdbwd", attn_both)], args.seconds)
            timed(f"mix-gemm-{label}-fwd", [("gemm", gemm), (f"{label}-fwd", attn_fwd)], args.seconds)
            timed(f"mix-gemm-{label}-fwdbwd", [("gemm", gemm), (f"{label}-fwdbwd", attn_both)], args.seconds)
    timed("alone-gemm", [("gemm", gemm)], args.seconds)
    return configs_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--part", choices=("dvfs", "kernels", "mix"), default="dvfs")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    proc, fields = sampler(os.path.join(args.out, "smi.csv"))
    configs = []

    def record(name, active, dtype, windows, t0):
        configs.append({"name": name, "active_sms": active, "dtype": dtype, "t_start": t0,
                        "t_end": time.time(), "windows": windows})
        tail = [w[1] for w in windows[len(windows) // 2:]]
        print(f"{name}: {active} SMs, {dtype}, {sum(tail) / max(len(tail), 1):.4g} (TFLOP/s or TB/s)", flush=True)

    if args.part in ("kernels", "mix"):
        if args.part == "kernels":
            kernel_classes(args, lambda name, active, unit, w, t0: record(name, active, unit, w, t0))
            extra = {}
        else:
            extra = {"median_ms": mixes(args, lambda name, active, unit, w, t0: record(name, active, unit, w, t0))}
        proc.terminate()
        proc.wait(timeout=10)
        with open(os.path.join(args.out, f"power_{args.part}.json"), "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "sms": sms, "smi_fields": fields,
                       "configs": configs, **extra}, fh, indent=1)
        return

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b_rows = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = b_rows.t()  # column-major, as _scaled_mm wants its second operand
    a8, b8 = a.to(torch.float8_e4m3fn), b_rows.to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    flops = 2.0 * n ** 3
    t0 = time.time()
    time.sleep(2.0)
    record("idle", 0, "-", [], t0)
    for _ in range(3):
        a @ b
    plan = [("bf16", c) for c in (116, 100, 83, 66, 50, 33, 16, 0)] + [("fp8", c) for c in (100, 66, 33, 0)]
    for dtype, carve in plan:
        torch._C._set_sm_carveout_experimental(carve if carve else None)
        fn = (lambda: a @ b) if dtype == "bf16" else (
            lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        t0 = time.time()
        w = sustained(fn, flops, args.seconds, 10 if dtype == "bf16" else 20)
        record(f"gemm-{dtype}-carveout{carve}", sms - carve, dtype, w, t0)
        time.sleep(0.5)
    torch._C._set_sm_carveout_experimental(None)
    z = torch.zeros_like(a)
    t0 = time.time()
    record("gemm-bf16-zeros", sms, "bf16", sustained(lambda: z @ b, flops, args.seconds, 10), t0)

    # a training-step-like stream: one large GEMM, then bandwidth-bound kernels of about its length
    m, k, nn_ = 16384, 4096, 14336
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    wt = torch.randn(nn_, k, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(m, k, device="cuda", dtype=torch.float32)
    gflops = 2.0 * m * k * nn_
    for label, between in (("alone", 0), ("between-copies", 12)):
        times, t0 = [], time.time()
        t_end = t0 + args.seconds
        while time.time() < t_end:
            evs = []
            for _ in range(8):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                x @ wt.t()
                e1.record()
                evs.append((e0, e1))
                for _ in range(between):
                    y.copy_(x)
            evs[-1][1].synchronize()
            times += [gflops / (e0.elapsed_time(e1) / 1e3) / 1e12 for e0, e1 in evs]
        record(f"gemm-16384x14336x4096-{label}", sms, "bf16", [(time.time(), t) for t in times], t0)
    time.sleep(1.0)
    proc.terminate()
    proc.wait(timeout=10)
    with open(os.path.join(args.out, "power_clock.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "sms": sms, "smi_fields": fields,
                   "configs": configs}, fh, indent=1)


if __name__ == "__main__":
    main()
