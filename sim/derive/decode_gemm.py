"""The A100's share of HBM bandwidth in a bandwidth-bound GEMM, from gpt-fast's published decode rate.

gpt-fast (pytorch-labs/gpt-fast, :data:`SOURCE`) decodes Llama-2-7B in BF16 on one A100-80GB at
batch 1 after a 5-token prompt, every step replayed as a CUDA graph (``torch.compile(...,
mode="reduce-overhead")``), at 104.9 tokens/s (:data:`PUBLISHED_TOKENS_PER_S`). A step is then
the GPU's kernels alone, almost all of it the GEMMs reading the 13.5 GB of weights: the stack
``cuda-graphs`` (no host work) models exactly that. :func:`derive_gemm_memory_efficiency` finds
the share of HBM bandwidth the A100's bandwidth-bound GEMMs must reach for llmsim's decode step
to take ``1 / 104.9`` s (the other kernels, the launch gaps and the streaming kernels' 0.92 as
the catalogue has them), by bisection: the step time falls as the share rises.

The README notes its A100s are "power limited to 330W" and that "empirically, seems like peak
bandwidth is about 1700 GB/s" there, so the share is what that part reaches; a 400-W A100 may
stream faster (not corrected: no figure at 400 W was found). ``benchmarks/decode_gemm.py``
prints the derivation and llmsim's rates for the README's tensor-parallel rows as checks;
``tests/unit/test_hardware.py`` checks that the catalogue holds what this derives.
"""

from __future__ import annotations

import dataclasses

from sim.config.topology import load_topology
from sim.hardware import GPUSpec, get_gpu
from sim.inference.models import load_model
from sim.inference.report import make_inference_report
from sim.inference.runner import simulate_inference
from sim.inference.spec import InferenceSpec
from sim.types import Dtype

__all__ = ["SOURCE", "PUBLISHED_TOKENS_PER_S", "TP_TOKENS_PER_S", "PROMPT_TOKENS", "GENERATE_TOKENS",
           "decode_tokens_per_s", "derive_gemm_memory_efficiency"]

SOURCE = ("pytorch-labs/gpt-fast README.md @ 0f925b5d4ce457b89a7ca6c9ce50f42bf2576945, 'Benchmarks' (A100-80GB, "
          "power limited to 330W; batch size 1, a 5-token prompt; generate.py --compile: "
          "torch.compile(decode_one_token, mode='reduce-overhead', fullgraph=True), i.e. CUDA graphs)")
"""Where the figures are quoted from."""

PUBLISHED_TOKENS_PER_S = 104.9
"""Llama-2-7B, Base (BF16), one GPU: tokens/s."""

TP_TOKENS_PER_S: dict[tuple[str, int], tuple[float, ...]] = {
    ("llama2-7b", 2): (136.27, 168.84), ("llama2-7b", 4): (168.78, 254.02), ("llama2-7b", 8): (179.27, 328.43),
    ("llama2-70b", 2): (20.53, 21.32), ("llama2-70b", 4): (34.15, 38.01), ("llama2-70b", 8): (47.25, 62.50),
}
"""The "Tensor Parallelism" table, Base: tokens/s in the README's first version (run with plain
``torchrun``) and at the commit of :data:`SOURCE` (run with ``ENABLE_INTRA_NODE_COMM=1``,
PyTorch's intra-node all-reduce); checks, not used to derive anything."""

PROMPT_TOKENS = 5
GENERATE_TOKENS = 200
"""The request: a 5-token prompt (the README) and generate.py's default 200 new tokens."""


def decode_tokens_per_s(gpu: GPUSpec, model: str = "llama2-7b", tp: int = 1) -> float:
    """llmsim's decode rate (``1 / TPOT``) of gpt-fast's request on ``gpu``, CUDA graphs, BF16."""
    name, m, _ = load_model(model)
    spec = InferenceSpec(name, m, gpu, tp=tp, pp=1, batch=1, prompt_tokens=PROMPT_TOKENS,
                         generate_tokens=GENERATE_TOKENS, dtype=Dtype.BF16, kv_dtype=Dtype.BF16)
    run = simulate_inference(spec, load_topology("dgx-a100"), granularity="step")
    return 1.0 / make_inference_report(run).tpot_s


def derive_gemm_memory_efficiency(gpu: GPUSpec | None = None, tol: float = 1e-5) -> float:
    """The ``gemm_memory_efficiency`` that puts llmsim's Llama-2-7B decode on ``gpu`` (default
    the catalogue's A100, its other figures kept) at :data:`PUBLISHED_TOKENS_PER_S`."""
    base = gpu or get_gpu("A100-SXM4-80GB")
    lo, hi = 0.2, 1.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if decode_tokens_per_s(dataclasses.replace(base, gemm_memory_efficiency=mid)) < PUBLISHED_TOKENS_PER_S:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
