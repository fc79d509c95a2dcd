"""The inference spec: a model served on ``tp x pp`` GPUs, one batch of requests, prefill then decode.

One :class:`InferenceSpec` is what ``llmsim infer`` simulates: ``batch`` requests of
``prompt_tokens`` each are prefilled together, then ``generate_tokens - 1`` decode steps
follow (the prefill produces the first output token, as TensorRT-LLM and vLLM count output
tokens), each processing one token per request against a KV cache that grows by one token
per step. The layer is Megatron-LM's tensor-parallel layer (Shoeybi et al. 2019, arXiv
1909.08053), as TensorRT-LLM and vLLM shard it; pipeline stages split the layers as
:func:`sim.workload.spec.pipeline_split` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sim.errors import ConfigError, InfeasibleError, NotBuiltError
from sim.hardware import GPUSpec
from sim.types import Dtype
from sim.workload.ops import dtype_bytes
from sim.workload.spec import ModelSpec, pipeline_split

__all__ = ["Phase", "InferenceSpec", "KV_DTYPES"]

_SPEC = "<spec>"

KV_DTYPES = (Dtype.BF16, Dtype.FP16, Dtype.FP8)
"""Formats a KV cache is kept in (TensorRT-LLM: the activation type, or FP8 on Hopper and
later with ``--kv_cache_dtype fp8``)."""


class Phase(str, Enum):
    """The two phases of generation (Pope et al. 2022, "Efficiently Scaling Transformer
    Inference", arXiv 2211.05102, Sec. 2)."""

    PREFILL = "prefill"
    """All prompt tokens at once: the KV cache is written, the first token sampled."""
    DECODE = "decode"
    """One token per request per step, reading the whole KV cache."""


def _positive(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(_SPEC, field, "a positive integer", value)


@dataclass(frozen=True)
class InferenceSpec:
    """What one inference simulation serves, on which GPUs, with what batch.

    Attributes
    ----------
    name : str
        The model's name, for reports.
    model : ModelSpec
        A dense decoder (mixture-of-experts and latent-attention models are not built yet).
    gpu : GPUSpec
    tp, pp : int
        Tensor- and pipeline-parallel degrees; ``tp x pp`` GPUs serve the model.
    batch : int
        Requests served together (static batching: all start and end together).
    prompt_tokens, generate_tokens : int
        Input length per request, and output tokens per request counting the first one,
        which the prefill produces.
    dtype : Dtype
        Format of the transformer layers' weights and GEMMs (FP8: weights and activations
        quantized, as TensorRT-LLM's FP8 recipe does). Embedding and output layer stay 16-bit.
    kv_dtype : Dtype
        Format of the KV cache (bf16, fp16 or fp8).
    gpus_per_node : int
        GPUs per server of the topology the spec runs on.
    """

    name: str
    model: ModelSpec
    gpu: GPUSpec
    tp: int = 1
    pp: int = 1
    batch: int = 1
    prompt_tokens: int = 200
    generate_tokens: int = 200
    dtype: Dtype = Dtype.BF16
    kv_dtype: Dtype = Dtype.BF16
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "batch", "prompt_tokens", "generate_tokens", "gpus_per_node"):
            _positive(f, getattr(self, f))
        m = self.model
        if m.is_moe:
            raise NotBuiltError(f"inference of mixture-of-experts models ({m.name}: {m.num_experts} experts) "
                                "is not built yet")
        if m.is_mla:
            raise NotBuiltError(f"inference with multi-head latent attention ({m.name}) is not built yet")
        if m.num_attention_heads % self.tp:
            raise ConfigError(_SPEC, "tp", f"a divisor of model.num_attention_heads={m.num_attention_heads}",
                              self.tp)
        if m.num_kv_heads % self.tp and self.tp % m.num_kv_heads:
            raise ConfigError(_SPEC, "tp", f"a divisor or multiple of model.num_kv_heads={m.num_kv_heads}",
                              self.tp)
        if m.ffn_hidden_size % self.tp:
            raise ConfigError(_SPEC, "tp", f"a divisor of model.ffn_hidden_size={m.ffn_hidden_size}", self.tp)
        if pipeline_split(m.num_layers, self.pp) is None:
            raise ConfigError(_SPEC, "pp", f"at most the model's {m.num_layers} layers (counting the "
                              "embedding and the output layer as a layer each)", self.pp)
        for field, dt in (("dtype", self.dtype), ("kv_dtype", self.kv_dtype)):
            if not self.gpu.supports(dt):
                raise ConfigError(_SPEC, field, f"a format {self.gpu.name} supports", dt.value)
            try:
                self.gpu.gemm_curve(dt)
            except InfeasibleError:
                raise ConfigError(_SPEC, field, f"a format with measured {self.gpu.name} GEMM efficiencies",
                                  dt.value) from None
        if self.kv_dtype not in KV_DTYPES:
            raise ConfigError(_SPEC, "kv_dtype", f"one of {[d.value for d in KV_DTYPES]}", self.kv_dtype.value)

    # -- sizes ------------------------------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def heads_per_gpu(self) -> int:
        return self.model.num_attention_heads // self.tp

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads each GPU holds: split over TP, or replicated when TP exceeds them (as
        TensorRT-LLM and vLLM replicate a GQA model's KV heads)."""
        return max(self.model.num_kv_heads // self.tp, 1)

    @property
    def vocab_per_gpu(self) -> int:
        """Output-layer columns per GPU (the vocabulary padded to a multiple of TP)."""
        return -(-self.model.vocab_size // self.tp)

    @property
    def decode_steps(self) -> int:
        """Decode steps after the prefill: ``generate_tokens - 1``."""
        return self.generate_tokens - 1

    @property
    def final_context(self) -> int:
        """Tokens per request in the KV cache after the last step: ``prompt + generate - 1``
        (the last output token is sampled, never fed back)."""
        return self.prompt_tokens + self.generate_tokens - 1

    def stage_layers(self) -> tuple[range, ...]:
        """The layers of each pipeline stage, first to last."""
        out, start = [], 0
        for n in pipeline_split(self.model.num_layers, self.pp):
            out.append(range(start, start + n))
            start += n
        return tuple(out)

    @property
    def weight_bytes_per_element(self) -> float:
        return dtype_bytes(self.dtype)

    @property
    def kv_bytes_per_element(self) -> float:
        return dtype_bytes(self.kv_dtype)
