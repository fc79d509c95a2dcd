"""Measure the GEMM and attention kernels of a training job on your GPU: the kernel table
``llmsim calibrate --kernels`` reads (docs/calibrate.md).

    python benchmarks/device/measure_kernels.py --workload my-job.yaml --out kernels.csv
    llmsim calibrate --kernels kernels.csv -o cal.yaml
    llmsim run my-job.yaml --calibration cal.yaml

It times, on the one GPU it runs on (needs PyTorch with CUDA):

* every distinct GEMM (``m, n, k, batch``, format) and fused attention kernel (forward and
  backward, the backend the workload runs: cuDNN or FlashAttention-2) of each ``--workload``'s
  iteration, as llmsim builds it (:func:`sim.workload.taskgraph.build_program`, the ranks of one
  pipeline stage each);
* and, unless ``--no-sweep``, the sweep this project's H100 and H200 curves were measured over
  (``benchmarks/device/kernels.py``): BF16 and FP8 GEMMs over a 6 x 3 x 3 grid of ``m, n, k``
  and causal attention at 2k-32k tokens with 32/8, 8/1 and 16/16 heads, on both backends.

Each kernel is captured into a CUDA graph and replayed over rotating inputs, back to back
(``kernels.py``'s ``time_fn``); its time is the median per call. GEMMs run as
``torch.nn.functional.linear`` (BF16), ``torch.bmm`` (batched) and ``torch._scaled_mm`` (FP8,
e4m3); an FP16 GEMM is timed in BF16 (the same tensor-core rate; llmsim prices both with one
curve); MXFP8 and NVFP4 GEMMs are listed and not timed. Attention runs as
``scaled_dot_product_attention`` under the backend's ``sdpa_kernel``. A kernel that fails (out
of memory, no such backend) is left out and said so. ``--budget-s`` stops measuring once spent;
the table holds what was measured by then.

``--dry-run`` writes the same table with the time cells empty, without PyTorch: the shapes that
would be measured (``llmsim calibrate`` refuses it until the times are filled in).

The table (CSV, columns in ``sim/calibrate/kernel_table.py``) starts with ``# device:``,
``# torch:``, ``# cuda:``, ``# cudnn:`` and ``# date:`` lines; ``tag`` says where each shape
came from (the workload's name, or ``sweep``).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    import sim  # noqa: F401 -- llmsim, installed or on PYTHONPATH
except ImportError:  # run from a checkout without installing it
    sys.path.append(str(HERE.parent.parent))
COLUMNS = ("kind", "m", "n", "k", "batch", "heads", "kv_heads", "seq", "head_dim", "causal", "backend", "dtype",
           "time_us", "fwd_us", "bwd_us", "tag")
"""The table's columns (every kind's, :mod:`sim.calibrate.kernel_table`)."""
SWEEP_MNK = ((512, 1024, 2048, 4096, 8192, 16384), (1024, 4096, 16384), (1024, 4096, 16384))
SWEEP_SEQS = (2048, 4096, 8192, 16384, 32768)
SWEEP_HEADS = ((32, 8), (8, 1), (16, 16))
TIMED_DTYPES = ("bf16", "fp16", "fp8")
"""The formats the GEMM timing runs (MXFP8 and NVFP4 need kernels PyTorch does not expose alike)."""


@dataclass(frozen=True)
class Gemm:
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    tag: str


@dataclass(frozen=True)
class Attention:
    batch: int
    heads: int
    kv_heads: int
    seq: int
    head_dim: int
    causal: bool
    backend: str
    tag: str


def workload_shapes(path: str) -> tuple[list[Gemm], list[Attention]]:
    """The distinct GEMMs and attention kernels of ``path``'s iteration, in the order they are
    first issued (llmsim's program of it)."""
    from sim.config import default_topology_name, load_topology, load_workload
    from sim.topology.build import build_topology
    from sim.topology.routing import Fabric
    from sim.types import AttentionKernel
    from sim.workload.ops import AttentionOp, GemmOp
    from sim.workload.taskgraph import build_program

    w = load_workload(path)
    topo = load_topology(w.system.topology or default_topology_name(w.system.gpu.name))
    fabric = Fabric(build_topology(topo, w.system.num_gpus))
    program = build_program(w, representative=True, node_of=fabric.node_of, local_gpu_of=fabric.local_gpu)
    gemms: dict[tuple, Gemm] = {}
    attention: dict[tuple, Attention] = {}
    for task in program.tasks:
        op = task.op
        if isinstance(op, GemmOp):
            gemms.setdefault((op.m, op.n, op.k, op.batch, op.dtype.value),
                             Gemm(op.m, op.n, op.k, op.batch, op.dtype.value, w.name))
        elif isinstance(op, AttentionOp) and op.fraction == 1.0:
            backend = "flash2" if op.kernel is AttentionKernel.FLASH2 else "cudnn"
            key = (op.batch, op.heads, op.kv_heads, op.seq, op.head_dim, op.causal, backend)
            attention.setdefault(key, Attention(*key, w.name))  # type: ignore[arg-type]
    return list(gemms.values()), list(attention.values())


def sweep_shapes() -> tuple[list[Gemm], list[Attention]]:
    """The default sweep (the module docstring)."""
    gemms = [Gemm(m, n, k, 1, dt, "sweep") for dt in ("bf16", "fp8")
             for m in SWEEP_MNK[0] for n in SWEEP_MNK[1] for k in SWEEP_MNK[2]]
    attention = [Attention(1, h, kv, s, 128, True, backend, "sweep") for backend in ("cudnn", "flash2")
                 for s in SWEEP_SEQS for h, kv in SWEEP_HEADS]
    return gemms, attention


def shapes(workloads: list[str], sweep: bool) -> tuple[list[Gemm], list[Attention]]:
    """Every shape to measure: the workloads', then the sweep's, each once."""
    gemms: dict[tuple, Gemm] = {}
    attention: dict[tuple, Attention] = {}
    parts = [workload_shapes(p) for p in workloads] + ([sweep_shapes()] if sweep else [])
    for gs, ats in parts:
        for g in gs:
            gemms.setdefault((g.m, g.n, g.k, g.batch, g.dtype), g)
        for a in ats:
            attention.setdefault((a.batch, a.heads, a.kv_heads, a.seq, a.head_dim, a.causal, a.backend), a)
    return list(gemms.values()), list(attention.values())


def _us(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1e6:.3f}"


def write_table(path: str, meta: dict[str, str], gemms: list[tuple[Gemm, float | None]],
                attention: list[tuple[Attention, float | None, float | None]]) -> None:
    """The kernel table: ``meta`` as ``# key: value`` lines, then a row per kernel (times in
    seconds, None: not measured, an empty cell)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        f.write("# llmsim kernel table, written by benchmarks/device/measure_kernels.py (llmsim calibrate --kernels "
                "reads it)\n")
        for key, value in meta.items():
            f.write(f"# {key}: {value}\n")
        out = csv.writer(f, lineterminator="\n")
        out.writerow(COLUMNS)
        for g, t in gemms:
            out.writerow(["gemm", g.m, g.n, g.k, g.batch, "", "", "", "", "", "", g.dtype, _us(t), "", "", g.tag])
        for a, fwd, bwd in attention:
            out.writerow(["attention", "", "", "", a.batch, a.heads, a.kv_heads, a.seq, a.head_dim,
                          "true" if a.causal else "false", a.backend, "bf16", "", _us(fwd), _us(bwd), a.tag])


def measure(gemms: list[Gemm], attention: list[Attention], budget_s: float, out: str, command: str) -> int:
    """Time every kernel on this machine's GPU and write the table (PyTorch imported here)."""
    try:
        import torch
    except ImportError:
        print("measure_kernels.py: error: timing needs PyTorch with CUDA (pip install torch); --dry-run writes the "
              "shapes without it", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("measure_kernels.py: error: no CUDA GPU visible to PyTorch; --dry-run writes the shapes without one",
              file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    import kernels as timing  # benchmarks/device/kernels.py: CUDA-graph timing of GEMMs and attention

    torch.backends.cuda.matmul.allow_tf32 = False
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": str(torch.version.cuda),
            "cudnn": str(torch.backends.cudnn.version()), "date": datetime.date.today().isoformat(),
            "command": command}
    start = time.time()
    timed_g: list[tuple[Gemm, float | None]] = []
    timed_a: list[tuple[Attention, float | None, float | None]] = []
    left_out = 0
    for i, g in enumerate(gemms):
        if time.time() - start > budget_s * 0.7:
            print(f"GEMM budget spent after {i} of {len(gemms)}", flush=True)
            break
        if g.dtype not in TIMED_DTYPES:
            left_out += 1
            print(f"not timed: {g.dtype} {g.batch} x {g.m}x{g.n}x{g.k} (no {g.dtype} GEMM timing here)", flush=True)
            continue
        try:
            r = timing.gemm(g.m, g.n, g.k, g.batch, "bf16" if g.dtype == "fp16" else g.dtype)
        except Exception as exc:  # noqa: BLE001 -- a kernel that fails is left out, and said so
            r = None
            print(f"left out: {g}: {exc!r:.200}", flush=True)
        if r is None:
            left_out += 1
            continue
        timed_g.append((g, r["median_s"]))
        torch.cuda.empty_cache()
    write_table(out, meta, timed_g, timed_a)
    backends = {"cudnn": "cudnn", "flash2": "flash"}
    for i, a in enumerate(attention):
        if time.time() - start > budget_s:
            print(f"attention budget spent after {i} of {len(attention)}", flush=True)
            break
        try:
            r = timing.attention(a.batch, a.heads, a.kv_heads, a.seq, a.head_dim, a.causal, backends[a.backend])
        except Exception as exc:  # noqa: BLE001
            left_out += 1
            print(f"left out: {a}: {exc!r:.200}", flush=True)
            continue
        bwd = r["bwd_s"] if r["bwd_s"] > 0 else None
        timed_a.append((a, r["fwd_s"], bwd))
        torch.cuda.empty_cache()
    write_table(out, meta, timed_g, timed_a)
    print(f"wrote {out}: {len(timed_g)} GEMMs, {len(timed_a)} attention kernels measured on {meta['device']} "
          f"({left_out} left out) in {time.time() - start:.0f} s; next: llmsim calibrate --kernels {out} -o cal.yaml")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", nargs="+", default=[], metavar="W.yaml",
                    help="workload files or presets whose GEMM and attention kernels to measure")
    ap.add_argument("--no-sweep", action="store_true", help="measure the workloads' kernels only")
    ap.add_argument("--out", required=True, help="the kernel table to write (CSV)")
    ap.add_argument("--budget-s", type=float, default=900, help="stop measuring after this many seconds (900)")
    ap.add_argument("--dry-run", action="store_true", help="write the shapes with empty times, without PyTorch")
    a = ap.parse_args(argv)
    if a.no_sweep and not a.workload:
        ap.error("--no-sweep needs --workload (nothing to measure otherwise)")
    from sim.errors import SimError

    try:
        gemms, attention = shapes(a.workload, not a.no_sweep)
    except SimError as exc:
        print(f"measure_kernels.py: error: {exc}", file=sys.stderr)
        return 2
    command = " ".join(["python benchmarks/device/measure_kernels.py", *(argv if argv is not None else sys.argv[1:])])
    if a.dry_run:
        write_table(a.out, {"dry run": "shapes only, no times", "command": command}, [(g, None) for g in gemms],
                    [(x, None, None) for x in attention])
        print(f"wrote {a.out}: {len(gemms)} GEMMs and {len(attention)} attention kernels, times empty (--dry-run)")
        return 0
    return measure(gemms, attention, a.budget_s, a.out, command)


if __name__ == "__main__":
    sys.exit(main())
