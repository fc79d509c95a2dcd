"""What one GPU of each pipeline stage holds while serving: weights, KV cache, activations.

* Weights: the stage's layers, their projections split over TP in the spec's format (a
  replicated KV head, when TP exceeds the KV heads, counted on every GPU that holds it), the
  norms whole in 16 bits; the first stage adds the embedding table (replicated, TensorRT-LLM's
  default), the last the final norm and its share of the output layer, both 16-bit (FP8
  recipes quantize the transformer layers' linear layers only).
* KV cache: per token and layer ``2 x kv_heads x head_dim`` elements of the KV format
  (Pope et al. 2022, arXiv 2211.05102, Sec. 3.3), for ``batch x (prompt + generate - 1)``
  tokens at the end of generation.
* Activations: an estimate of the working buffers of one layer during the prefill, the
  largest step: the residual stream and its normed copy, the MLP's gate/up output and the
  activation's output (``T (2 h + (b + 1) f / t)`` 16-bit elements for ``T`` prompt tokens
  over the batch, ``b`` MLP branches), plus the fp32 logits of the batch's last tokens.
  Serving engines allocate such buffers once and reuse them from layer to layer and step to
  step, so they are counted for the whole generation; an engine's larger preallocated
  workspace, the cuBLAS workspace and the CUDA context are not.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.inference.ops import kv_bytes_per_token_layer
from sim.inference.spec import InferenceSpec
from sim.units import byte_count
from sim.workload.layers import ACT_DTYPE
from sim.workload.ops import dtype_bytes

__all__ = ["StageMemory", "stage_memory", "weights_bytes", "activation_bytes"]

_E = dtype_bytes(ACT_DTYPE)


@dataclass(frozen=True)
class StageMemory:
    """One GPU of one pipeline stage, at the end of generation (SI units)."""

    stage: int
    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activations_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def to_dict(self) -> dict:
        b = byte_count
        return {"stage": self.stage, "weights_bytes": b(self.weights_bytes), "kv_cache_bytes": b(self.kv_cache_bytes),
                "activations_bytes": b(self.activations_bytes), "total_bytes": b(self.total_bytes),
                "capacity_bytes": b(self.capacity_bytes), "fits": self.fits}


def _layer_weights_bytes(spec: InferenceSpec) -> float:
    m = spec.model
    h, hd = m.hidden_size, m.head_dim
    q_n, kv_n = spec.heads_per_gpu * hd, spec.kv_heads_per_gpu * hd
    f = m.ffn_hidden_size // spec.tp
    br = 2 if m.gated_mlp else 1
    gemm = h * (q_n + 2 * kv_n) + q_n * h + h * f * (br + 1)
    return gemm * spec.weight_bytes_per_element + 2 * h * _E


def weights_bytes(spec: InferenceSpec, stage: int) -> float:
    """Weight bytes on one GPU of pipeline stage ``stage``.

    >>> from sim.hardware import get_gpu
    >>> from sim.workload.spec import ModelSpec
    >>> m = ModelSpec("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, gated_mlp=True)
    >>> round(weights_bytes(InferenceSpec("m", m, get_gpu("A100")), 0) / 1e9, 2)  # 6.74e9 parameters
    13.48
    """
    m = spec.model
    layers = spec.stage_layers()[stage]
    out = len(layers) * _layer_weights_bytes(spec)
    if stage == 0:
        out += m.vocab_size * m.hidden_size * _E
    if stage == spec.pp - 1:
        shared = m.tied_embeddings and spec.pp == 1 and spec.tp == 1
        out += m.hidden_size * _E + (0.0 if shared else spec.vocab_per_gpu * m.hidden_size * _E)
    return float(out)


def kv_cache_bytes(spec: InferenceSpec, stage: int, tokens_per_request: int) -> float:
    """KV-cache bytes on one GPU of ``stage`` holding ``tokens_per_request`` tokens per request."""
    return float(spec.batch * tokens_per_request * len(spec.stage_layers()[stage]) * kv_bytes_per_token_layer(spec))


def activation_bytes(spec: InferenceSpec) -> float:
    """The prefill's working buffers on one GPU (see the module docstring)."""
    m = spec.model
    T = spec.batch * spec.prompt_tokens
    br = 2 if m.gated_mlp else 1
    f = m.ffn_hidden_size // spec.tp
    return float(T * (2 * m.hidden_size + (br + 1) * f) * _E + spec.batch * spec.vocab_per_gpu * 4)


def stage_memory(spec: InferenceSpec) -> tuple[StageMemory, ...]:
    """Each stage's memory at the end of generation, when the KV cache is largest."""
    act = activation_bytes(spec)
    return tuple(StageMemory(s, weights_bytes(spec, s), kv_cache_bytes(spec, s, spec.final_context), act,
                             spec.gpu.hbm_capacity_bytes) for s in range(spec.pp))
