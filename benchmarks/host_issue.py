"""Could the host (CPU) that issues the kernels explain the validation cases predicted too fast?

::

    python benchmarks/host_issue.py                                    # megatronlm, megatron-ci, torchtitan
    python benchmarks/host_issue.py workloads/validation/nemo2407.yaml --host-us 13.5 100 200
    python benchmarks/host_issue.py --json host_issue.json

llmsim assumes the host issues every kernel before the GPU needs it: a kernel costs its GPU
time plus the launch gap :attr:`sim.hardware.GPUSpec.kernel_launch_s`, never the Python,
PyTorch dispatch and Transformer Engine work that issues it. A GPU cannot run a kernel before
its host has issued it, so when kernels are shorter than their issue cost the iteration is
bounded by the host. This script measures how much that bound could matter for each case,
from the case's own simulated timeline, without changing the simulator:

* ``kernels``: compute-stream kernels of the first simulated rank (the ops llmsim prices,
  each counted once: casts and fills priced with a GEMM are not counted apart);
* ``fill_us``: the host time per kernel at which a host issuing them one after another would
  itself take the measured iteration (measured iteration / kernels): what a host-bound
  explanation needs;
* for each ``--host-us`` cost ``h``: the iteration's growth when that rank's kernels are
  replayed in order behind a host that issues one every ``h`` seconds, running ahead of the GPU
  (``async``: CUDA's asynchronous launch queue, so a lead built during long kernels absorbs
  short ones), or also waiting for the GPU at every change of pass and micro-batch (``sync``:
  an upper bound on Megatron's per-micro-batch loss checks, ``.item()`` calls and timers).
  Idle gaps of the simulated timeline (waits on communication or other stages) are kept.

Host costs measured outside the validation cases, for scale: ``torch.nn.Linear`` forward in
BF16 (2,048 x 2,048 weight, 8,192 tokens) takes 13.5 us of CPU on a DGX H100 (Xeon 8480C),
37 us on GB200 and 33 us on GH200, and Transformer Engine's ``te.Linear`` 100 us on GB200 and
91 us on GH200 (NVIDIA/TransformerEngine issue #2053, 2025); one PyTorch tensor op from
Python about 2 us (pytorch/pytorch issue #41383); a BF16 ``te.Linear`` of Transformer Engine's
2023 releases 0.57 ms a timed step on a 1,024-cubed problem (a few microseconds of GPU work)
against 0.18 ms for ``torch.nn.Linear`` on H100 (NVIDIA/TransformerEngine issue #445). The
replay leaves the issue cost of communication kernels out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import sim
from sim.config import load_case_records
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.validate import case_topology
from sim.types import Stream
from sim.units import TFLOPS, US

ROOT = Path(sim.__file__).resolve().parent.parent
DEFAULT_FILES = tuple(str(ROOT / "workloads" / "validation" / f"{n}.yaml")
                      for n in ("megatronlm", "megatron-ci", "torchtitan"))
DEFAULT_HOST_US = (13.5, 50.0, 100.0, 200.0)


def replay_end_s(kernels: list[tuple[float, float, tuple]], host_s: float, sync: bool) -> float:
    """End of a compute stream's ``(start_s, end_s, pass)`` kernels, in start order, replayed
    behind a host that issues one kernel every ``host_s``: a kernel starts when the one before
    it has ended plus the idle gap the simulation had before it, and not before it is issued.
    With ``sync`` the host first waits for the GPU whenever ``pass`` changes.

    >>> ks = [(0.0, 1.0, "a"), (1.0, 1.5, "a"), (1.5, 1.6, "a")]
    >>> replay_end_s(ks, 0.0, False), replay_end_s(ks, 2.0, False)
    (1.6, 6.1)
    """
    issued = end = prev_end = 0.0
    prev_pass = None
    for k, (start, stop, tag) in enumerate(kernels):
        if sync and tag != prev_pass:
            issued = max(issued, end)
        prev_pass = tag
        gap = start - prev_end if k else start
        issued += host_s
        begin = max(end + max(gap, 0.0), issued)
        end = begin + (stop - start)
        prev_end = stop
    return end


def measured_iteration_s(rec, run, report) -> float | None:
    """The case's measured target as an iteration time, in the sense ``llmsim validate`` scores
    it (model or hardware FLOPs for TFLOP/s, the simulated tokens per iteration for tokens/s)."""
    n = rec.workload.system.num_gpus
    t = report.iteration_time_s
    if "iteration_time_s" in rec.targets:
        return rec.targets["iteration_time_s"]
    if "tflops_per_gpu" in rec.targets:
        flops = (run.program.hardware_flops_per_iteration if rec.includes_recompute
                 else run.program.flops_per_iteration)
        return flops / (rec.targets["tflops_per_gpu"] * TFLOPS * n)
    if "tokens_per_s_per_gpu" in rec.targets:
        return report.tokens_per_s * t / (rec.targets["tokens_per_s_per_gpu"] * n)
    return None


def case_figures(rec, host_us: tuple[float, ...]) -> dict | None:
    """This script's figures for one case record (None if it has no workload or time target)."""
    w = rec.workload
    if w is None:
        return None
    run = simulate(w, case_topology(w))
    report = make_report(run)
    measured = measured_iteration_s(rec, run, report)
    if measured is None:
        return None
    t = report.iteration_time_s
    rank = run.result.ranks[0].rank
    kernels = sorted((s.start_s, s.end_s, (dict(s.args).get("phase"), dict(s.args).get("microbatch")))
                     for s in run.result.spans if s.rank == rank and s.stream is Stream.COMPUTE)
    last = kernels[-1][1]
    added = {}
    for h in host_us:
        added[f"{h:g}"] = {mode: (max(replay_end_s(kernels, h * US, mode == "sync") - last, 0.0)) / t * 100
                           for mode in ("async", "sync")}
    return {"id": rec.id, "measured_iteration_s": measured, "predicted_iteration_s": t,
            "time_error_pct": (t - measured) / measured * 100, "kernels": len(kernels),
            "mean_kernel_s": sum(e - s for s, e, _ in kernels) / len(kernels),
            "fill_host_s_per_kernel": measured / len(kernels), "added_pct_by_host_us": added}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", default=list(DEFAULT_FILES), help="validation-case files")
    ap.add_argument("--host-us", nargs="+", type=float, default=list(DEFAULT_HOST_US),
                    help="host issue costs per kernel to replay, microseconds")
    ap.add_argument("--json", metavar="PATH", help="write the same figures as JSON")
    args = ap.parse_args(argv)
    host_us = tuple(args.host_us)
    rows = []
    head = f"{'case':60s} {'time err':>8s} {'kernels':>7s} {'mean us':>8s} {'fill us':>8s}"
    print(head + "".join(f"  {h:>6g} us async/sync" for h in host_us))
    for path in args.files:
        for rec in load_case_records(path):
            fig = case_figures(rec, host_us)
            if fig is None:
                continue
            rows.append(fig)
            cells = "".join(f"  {fig['added_pct_by_host_us'][f'{h:g}']['async']:+7.1f}%/"
                            f"{fig['added_pct_by_host_us'][f'{h:g}']['sync']:+6.1f}%" for h in host_us)
            print(f"{fig['id'][:60]:60s} {fig['time_error_pct']:+7.1f}% {fig['kernels']:7d} "
                  f"{fig['mean_kernel_s'] / US:8.1f} {fig['fill_host_s_per_kernel'] / US:8.1f}{cells}")
    if args.json:
        Path(args.json).write_text(json.dumps({"host_us": list(host_us), "cases": rows}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
