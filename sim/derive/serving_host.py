"""The host's work per step of TensorRT-LLM's Python runtime, from that runtime's published benchmark.

TensorRT-LLM's Python-runtime benchmark (``benchmarks/python/README.md``, :data:`SOURCE`) gives,
as the expected output of ``python benchmark.py -m gpt_350m --mode plugin --batch_size "1;8;64"
--input_output_len "60,20;128,20"``, the latency of one request of 60 prompt tokens and 20
output tokens on an A100 (``compute_cap sm80``) in float16 at batch 1, 8 and 64
(:data:`PUBLISHED_MS`). The benchmark times ``GPTBenchmark.run`` between two CUDA events
(``benchmarks/python/benchmark.py``): ``GenerationSession.setup`` and ``decode_batch``, the
Python runtime (``tensorrt_llm.runtime.GenerationSession``) that NeMo's export runs too (stack
``nemo-trtllm-python``, ``workloads/inference/stacks/``). GPT-350M (:data:`GPT_350M`) reads its
0.7 GB of weights in under 0.4 ms a step on an A100, yet the batch-1 request takes 2.07 ms a
step and batch 8 hardly more: the time is the host's.

:func:`derive_step_s` simulates the batch-1 request on the stack with no per-step work (the
GPU's kernels, each issued by the host ``kernel_issue_s`` after the one before) and divides what
the published latency holds beyond it by the request's 20 steps (the prefill and 19 decode
steps). The figure does not separate ``setup``, once per request, from the work of each step, so
the per-request part is spread over the 20 steps. ``benchmarks/serving_host.py`` prints the
derivation and the batch-8 and batch-64 figures as checks; ``tests/unit/test_inference_host.py``
checks that the shipped stack holds what this derives.
"""

from __future__ import annotations

import dataclasses

from sim.config.topology import load_topology
from sim.hardware import get_gpu
from sim.inference.report import make_inference_report
from sim.inference.runner import simulate_inference
from sim.inference.spec import InferenceSpec
from sim.inference.stack import ServingStack
from sim.types import Dtype, NormKind
from sim.workload.spec import ModelSpec

__all__ = ["GPT_350M", "PROMPT_TOKENS", "GENERATE_TOKENS", "PUBLISHED_MS", "SOURCE", "derive_step_s",
           "simulated_latency_s"]

SOURCE = ("NVIDIA/TensorRT-LLM benchmarks/python/README.md @ 05316d3313360012536ace46c781518f5afae75e, "
          "'1. Single GPU benchmark', expected outputs of benchmark.py -m gpt_350m --mode plugin "
          "(compute_cap sm80, precision float16, input_length 60, output_length 20)")
"""Where :data:`PUBLISHED_MS` is quoted from."""

PUBLISHED_MS: dict[int, float] = {1: 41.362, 8: 46.013, 64: 64.981}
"""``latency(ms)`` at each batch size, quoted from :data:`SOURCE`."""

PROMPT_TOKENS = 60
GENERATE_TOKENS = 20
"""The request the figures time: ``--input_output_len 60,20``."""

GPT_350M = ModelSpec("GPT-350M (TensorRT-LLM benchmark)", num_layers=24, hidden_size=1024, num_attention_heads=16,
                     num_kv_heads=16, ffn_hidden_size=4096, vocab_size=51200, seq_length=1024,
                     gated_mlp=False, tied_embeddings=False, norm=NormKind.LAYERNORM, rotary=False)
"""``gpt_350m`` of the benchmark's ``allowed_configs.py`` (``num_layers=24, num_heads=16,
hidden_size=1024, vocab_size=51200, hidden_act='gelu', n_positions=1024``; the FFN 4h, GPT's
LayerNorm and learned positions, and an output layer of its own)."""


def simulated_latency_s(stack: ServingStack, batch: int = 1) -> float:
    """llmsim's end-to-end latency of the benchmark's request at ``batch`` on one A100 in fp16
    under ``stack``."""
    spec = InferenceSpec("gpt-350m", GPT_350M, get_gpu("A100-SXM4-80GB"), tp=1, pp=1, batch=batch,
                         prompt_tokens=PROMPT_TOKENS, generate_tokens=GENERATE_TOKENS, dtype=Dtype.FP16,
                         kv_dtype=Dtype.FP16)
    run = simulate_inference(spec, load_topology("dgx-a100"), granularity="step", stack=stack)
    return make_inference_report(run).e2e_latency_s


def derive_step_s(stack: ServingStack) -> float:
    """The host's work per step that puts ``stack`` (its per-step work set to 0, its other
    settings kept) on the published batch-1 latency: ``(measured - simulated) / 20``."""
    bare = dataclasses.replace(stack, step_s=0.0, request_s=0.0)
    return (PUBLISHED_MS[1] * 1e-3 - simulated_latency_s(bare, 1)) / GENERATE_TOKENS
