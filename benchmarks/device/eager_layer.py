"""Profile whole transformer layers, written as torchtitan writes them, on the GPU this runs on.

The kernel measurements beside this file (``kernels.py``) time GEMMs, attention and
bandwidth-bound kernels one at a time. This script checks their sum: it builds the Llama
layer of torchtitan's ``models/llama/model.py`` (December 2024: ``RMSNorm`` in plain PyTorch
ops on ``x.float()``, separate ``wq``/``wk``/``wv`` and ``w1``/``w3`` linears, complex-number
RoPE, ``repeat_kv`` by expand-and-reshape, ``scaled_dot_product_attention`` with
``is_causal=True`` on the FlashAttention-2 backend, SwiGLU) in BF16, runs forward and
backward of a stack of layers eagerly (and once compiled, as torchtitan's
``torch.compile`` option compiles each block), and writes

* ``<case>.trace.json.gz``: the ``torch.profiler`` Chrome trace of one iteration;
* ``eager_layer.json``: per case, forward and backward GPU time per layer from CUDA events
  (median of several iterations) and what the GPU reported (clocks, power), and every kernel
  of the profiled iteration in order: its pass, launching ATen op, name and microseconds
  (``compare_layer.py`` reads this file; ``results/h100-sxm5-80gb-2026-11-26-eager-layer.json``
  is one).

It runs on a lent H100/H200 machine only (needs torch); nothing in llmsim imports it.

    python benchmarks/device/eager_layer.py --out DIR [--compile]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# name -> (hidden, heads, kv heads, ffn, local batch, sequence, layers in the stack)
CASES = {
    # torchtitan Table 1/3 (Llama 3.1 8B, FSDP, local batch 2, sequence 8192)
    "llama31_8b_b2_s8192": (4096, 32, 8, 14336, 2, 8192, 3),
    # torchtitan Table 2, CP 1 (Llama 3.1 8B, local batch 1, sequence 32768)
    "llama31_8b_b1_s32768": (4096, 32, 8, 14336, 1, 32768, 3),
}


def smi() -> str:
    try:
        query = "--query-gpu=name,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu"
        return subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], check=False,
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        return f"nvidia-smi failed: {exc}"


def rmsnorm(x, weight, eps=1e-5):
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return out.type_as(x) * weight


def rope(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * f).flatten(3)
    xk_out = torch.view_as_real(xk_ * f).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    bs, slen, n_kv, hd = x.shape
    if n_rep == 1:
        return x
    return torch.unsqueeze(x, dim=3).expand(bs, slen, n_kv, n_rep, hd).reshape(bs, slen, n_kv * n_rep, hd)


class Layer(torch.nn.Module):
    def __init__(self, h, heads, kv, ffn):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, h // heads
        def lin(i, o):
            return torch.nn.Linear(i, o, bias=False)

        self.wq, self.wk, self.wv = lin(h, heads * self.hd), lin(h, kv * self.hd), lin(h, kv * self.hd)
        self.wo = lin(heads * self.hd, h)
        self.w1, self.w3, self.w2 = lin(h, ffn), lin(h, ffn), lin(ffn, h)
        self.attention_norm = torch.nn.Parameter(torch.ones(h))
        self.ffn_norm = torch.nn.Parameter(torch.ones(h))

    def attention(self, x, freqs_cis):
        bs, s, _ = x.shape
        xq = self.wq(x).view(bs, s, self.heads, self.hd)
        xk = self.wk(x).view(bs, s, self.kv, self.hd)
        xv = self.wv(x).view(bs, s, self.kv, self.hd)
        xq, xk = rope(xq, xk, freqs_cis)
        keys = repeat_kv(xk, self.heads // self.kv)
        values = repeat_kv(xv, self.heads // self.kv)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                                             is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, s, -1))

    def forward(self, x, freqs_cis):
        h = x + self.attention(rmsnorm(x, self.attention_norm), freqs_cis)
        hn = rmsnorm(h, self.ffn_norm)
        return h + self.w2(F.silu(self.w1(hn)) * self.w3(hn))


def freqs(hd, s, theta=500000.0):
    f = 1.0 / (theta ** (torch.arange(0, hd, 2)[: hd // 2].float() / hd))
    t = torch.arange(s, dtype=torch.float32)
    return torch.polar(torch.ones(s, hd // 2), torch.outer(t, f)).cuda()


def kernel_rows(trace_path):
    """``[pass, ATen op, kernel, microseconds]`` of every kernel in a profiler trace, in
    order; the pass is the ``PHASE_*`` range its launching op ran in."""
    with open(trace_path) as fh:
        events = json.load(fh)["traceEvents"]
    phases = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in events
              if e.get("cat") == "user_annotation" and e.get("name", "").startswith("PHASE_")}
    cpu = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            cpu.setdefault(e["args"].get("External id"), e)
    rows = []
    for k in sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        op = cpu.get(k["args"].get("External id"))
        phase = next((n[6:].lower() for n, (a, b) in phases.items() if op and a <= op["ts"] <= b), "?")
        rows.append([phase, op["name"] if op else "?", k["name"][:60], k["dur"]])
    return rows


def run_case(name, spec, out_dir, compiled, log):
    h, heads, kv, ffn, b, s, n = spec
    torch.manual_seed(0)
    layers = [Layer(h, heads, kv, ffn).cuda().to(torch.bfloat16) for _ in range(n)]
    fwd = [torch.compile(layer) for layer in layers] if compiled else layers
    fc = freqs(h // heads, s)
    x0 = torch.randn(b, s, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(b, s, h, device="cuda", dtype=torch.bfloat16)

    def step(marks=None):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        ev[0].record()
        with torch.profiler.record_function("PHASE_FWD"):
            y = x0
            for layer in fwd:
                y = layer(y, fc)
            ev[1].record()
            torch.cuda.synchronize()
        with torch.profiler.record_function("PHASE_BWD"):
            y.backward(grad)
            ev[2].record()
            torch.cuda.synchronize()
        for layer in layers:
            for p in layer.parameters():
                p.grad = None
        x0.grad = None
        return ev[0].elapsed_time(ev[1]) / 1e3 / n, ev[1].elapsed_time(ev[2]) / 1e3 / n

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        t0 = time.time()
        for _ in range(3):
            step()
        warm_s = time.time() - t0
        times = [step() for _ in range(7)]
        smi_after = smi()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            step()
    tag = name + ("_compiled" if compiled else "")
    path = os.path.join(out_dir, tag + ".trace.json")
    prof.export_chrome_trace(path)
    rows = kernel_rows(path)
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)
    fw = sorted(t[0] for t in times)[len(times) // 2]
    bw = sorted(t[1] for t in times)[len(times) // 2]
    log(f"{tag}: forward {fw * 1e3:.3f} ms, backward {bw * 1e3:.3f} ms per layer "
        f"(warm-up {warm_s:.1f} s); {smi_after}")
    return {"case": tag, "hidden": h, "heads": heads, "kv_heads": kv, "ffn": ffn, "batch": b, "seq": s,
            "layers": n, "compiled": compiled, "forward_s_per_layer": fw, "backward_s_per_layer": bw,
            "forward_s_all": [t[0] for t in times], "backward_s_all": [t[1] for t in times],
            "nvidia_smi_after": smi_after, "kernel_rows": rows}


def gemm_power(log, seconds=6.0):
    """Sustained 8192^3 BF16 GEMMs with nvidia-smi sampled: the clock and power a dense
    GEMM holds at this card's power limit."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    bm = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ bm
    torch.cuda.synchronize()
    samples, n, t0 = [], 0, time.time()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    while time.time() - t0 < seconds:
        for _ in range(20):
            a @ bm
        n += 20
        torch.cuda.synchronize()
        if time.time() - t0 > seconds / 3:
            samples.append(smi())
    e1.record()
    torch.cuda.synchronize()
    tflops = 2 * 8192 ** 3 * n / (e0.elapsed_time(e1) / 1e3) / 1e12
    log(f"gemm 8192^3 sustained {tflops:.0f} TFLOP/s over {n} products; samples: {samples[-3:]}")
    return {"tflops": tflops, "products": n, "smi_samples": samples}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--compile", action="store_true", help="also the first case compiled per layer")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    lines = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    log(f"torch {torch.__version__}, cuda {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}, "
        f"{torch.cuda.get_device_name()}; {smi()}")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
    kernels = {}
    for name, spec in CASES.items():
        result["cases"].append(run_case(name, spec, args.out, False, log))
        torch.cuda.empty_cache()
    result["gemm_power"] = gemm_power(log)
    if args.compile:
        name = next(iter(CASES))
        try:
            result["cases"].append(run_case(name, CASES[name], args.out, True, log))
        except Exception as exc:  # noqa: BLE001
            log(f"compiled case failed: {exc!r}")
    for case in result["cases"]:
        kernels[case["case"]] = case.pop("kernel_rows")
    with open(os.path.join(args.out, "eager_layer.json"), "w") as fh:
        json.dump({"device": f"{result['device']}, torch {result['torch']}", "script": "eager_layer.py",
                   "summary": result, "columns": ["phase", "aten_op", "kernel", "duration_us"],
                   "kernels": kernels}, fh, indent=0)
    with open(os.path.join(args.out, "eager_layer.log"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
