"""Measure GEMM, attention and memory-bandwidth kernels on the GPU this runs on (needs torch).

Reads the shapes ``shapes.py`` collected, times each with CUDA events (warm-up, then the
median of repeated runs over rotating input sets so small problems do not sit in L2), and
writes ``kernels.json`` (and a log) to ``--out``. It runs on a lent H100/H200 machine only;
nothing in llmsim imports it.

    python benchmarks/device/kernels.py --shapes benchmarks/device/shapes.json --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def smi() -> str:
    try:
        return subprocess.run(["nvidia-smi",
                               "--query-gpu=name,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        return f"nvidia-smi failed: {exc}"


def time_fn(fn, target_s=0.02, max_calls=64, replays=5, warmup=3):
    """Median seconds per call of ``fn(i)``: ``fn`` is captured ``n`` times into one CUDA
    graph (so host launch overhead stays out of the figure, as in a pipelined training step)
    and the graph is replayed; ``n`` is chosen so one replay lasts about ``target_s``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(warmup):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn(0)
    e1.record()
    torch.cuda.synchronize()
    one = e0.elapsed_time(e1) / 1e3
    n = int(min(max_calls, max(1, target_s / max(one, 1e-6))))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3 / n)
    del graph
    ts.sort()
    return ts[len(ts) // 2], ts[0], n * replays


def n_sets(nbytes: float) -> int:
    return max(1, min(4, math.ceil(200e6 / max(nbytes, 1))))


def gemm(m, n, k, batch, dtype):
    dev = "cuda"
    nb = batch * (m * k + n * k) * (1 if dtype == "fp8" else 2)
    sets = []
    for _ in range(n_sets(nb)):
        shape_a = (batch, m, k) if batch > 1 else (m, k)
        shape_b = (batch, n, k) if batch > 1 else (n, k)
        a = torch.randn(shape_a, device=dev, dtype=torch.bfloat16)
        b = torch.randn(shape_b, device=dev, dtype=torch.bfloat16)
        if dtype == "fp8":
            a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        sets.append((a, b))
    one = torch.tensor(1.0, device=dev)
    if dtype == "fp8":
        if batch > 1 or k % 16 or n % 16:
            return None
        def fn(i):
            a, b = sets[i % len(sets)]
            torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    elif batch > 1:
        def fn(i):
            a, b = sets[i % len(sets)]
            torch.bmm(a, b.transpose(1, 2))
    else:
        def fn(i):
            a, b = sets[i % len(sets)]
            F.linear(a, b)
    med, best, reps = time_fn(fn)
    return {"median_s": med, "min_s": best, "reps": reps,
            "tflops": 2.0 * batch * m * n * k / med / 1e12}


def attention(b, h, kv, s, d, causal, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k_ = torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16)
    v_ = torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16)
    if kv != h:
        k_ = k_.repeat_interleave(h // kv, dim=1)
        v_ = v_.repeat_interleave(h // kv, dim=1)
    k_.requires_grad_(True)
    v_.requires_grad_(True)
    g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    out = {}
    with sdpa_kernel([be]):
        def fwd(i):
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k_, v_, is_causal=causal)
        out["fwd_s"] = time_fn(fwd)[0]

        def both(i):
            o = F.scaled_dot_product_attention(q, k_, v_, is_causal=causal)
            torch.autograd.grad(o, (q, k_, v_), g)
        out["fwd_bwd_s"] = time_fn(both)[0]
        out["bwd_s"] = out["fwd_bwd_s"] - out["fwd_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=300)
    a = ap.parse_args()
    t_start = time.time()
    shapes = json.load(open(a.shapes))
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "smi_before": smi(), "gemms": [], "attention": [], "copy": [], "contention": {}}
    path = os.path.join(a.out, "kernels.json")

    def save():
        with open(path, "w") as f:
            json.dump(res, f, indent=1)

    torch.backends.cuda.matmul.allow_tf32 = False
    # 1. HBM bandwidth: device-to-device copies
    for mb in (8, 32, 128, 512, 2048):
        n = mb * 2**20 // 2
        src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        med = time_fn(lambda i: dst.copy_(src))[0]  # noqa: B023 (called in this iteration)
        res["copy"].append({"bytes": 2 * n * 2, "median_s": med, "bytes_per_s": 2 * n * 2 / med})
        del src, dst
    print("copy", [f"{c['bytes_per_s']/1e12:.2f}TB/s" for c in res["copy"]], flush=True)
    save()
    # 2. GEMMs: the shapes of the cases (in their dtype and in bf16), then a grid
    todo = []
    for gm in shapes["gemms"]:
        todo.append((gm["m"], gm["n"], gm["k"], gm["batch"], gm["dtype"], "case"))
        if gm["dtype"] != "bf16":
            todo.append((gm["m"], gm["n"], gm["k"], gm["batch"], "bf16", "case-bf16"))
    for dt in ("bf16", "fp8"):
        for m in (512, 1024, 2048, 4096, 8192, 16384):
            for n in (1024, 4096, 16384):
                for k in (1024, 4096, 16384):
                    todo.append((m, n, k, 1, dt, "grid"))
    seen = set()
    for m, n, k, b, dt, tag in todo:
        if (m, n, k, b, dt) in seen:
            continue
        seen.add((m, n, k, b, dt))
        if time.time() - t_start > a.budget_s * 0.6:
            print("gemm budget reached", flush=True)
            break
        try:
            r = gemm(m, n, k, b, dt)
        except Exception as exc:  # noqa: BLE001
            r = {"error": repr(exc)[:200]}
        if r is None:
            continue
        res["gemms"].append({"m": m, "n": n, "k": k, "batch": b, "dtype": dt, "tag": tag, **r})
        if len(res["gemms"]) % 40 == 0:
            print(len(res["gemms"]), "gemms", f"{time.time()-t_start:.0f}s", smi(), flush=True)
            save()
    torch.cuda.empty_cache()
    save()
    # 3. attention, per backend
    att = []
    for at in shapes["attention"]:
        if at["fraction"] == 1.0:
            att.append((at["batch"], at["heads"], at["kv_heads"], at["seq"], at["head_dim"], at["causal"]))
    for s in (2048, 4096, 8192, 16384, 32768):
        for h, kv in ((32, 8), (8, 1), (16, 16)):
            att.append((1, h, kv, s, 128, True))
    att = list(dict.fromkeys(att))
    for backend in ("cudnn", "flash"):
        for b, h, kv, s, d, causal in att:
            if time.time() - t_start > a.budget_s * 0.9:
                break
            try:
                r = attention(b, h, kv, s, d, causal, backend)
            except Exception as exc:  # noqa: BLE001
                r = {"error": repr(exc)[:200]}
            res["attention"].append({"batch": b, "heads": h, "kv_heads": kv, "seq": s, "head_dim": d,
                                     "causal": causal, "backend": backend, **r})
            torch.cuda.empty_cache()
        print("attention", backend, f"{time.time()-t_start:.0f}s", flush=True)
        save()
    # 4. a GEMM alone and beside a streaming copy on another stream (HBM/SM contention)
    a_ = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b_ = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    src = torch.randn(256 * 2**20, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    side = torch.cuda.Stream()

    def loop(with_copy: bool) -> float:
        torch.cuda.synchronize()
        if with_copy:
            with torch.cuda.stream(side):
                for _ in range(400):
                    dst.copy_(src)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(50):
            F.linear(a_, b_)
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) / 1e3 / 50

    loop(False)
    alone, beside = loop(False), loop(True)
    res["contention"] = {"gemm_8192_alone_s": alone, "gemm_8192_beside_copy_s": beside}
    res["smi_after"] = smi()
    res["wall_s"] = time.time() - t_start
    save()
    print("contention", res["contention"], res["smi_after"], f"wall {res['wall_s']:.0f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
