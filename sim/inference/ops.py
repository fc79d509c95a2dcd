"""The ops of one inference step: a transformer layer, the embedding and the output layer.

The layer is the tensor-parallel layer TensorRT-LLM and vLLM run (Megatron-LM's split,
Shoeybi et al. 2019, arXiv 1909.08053, Sec. 3): the fused QKV and the gate/up projections are
column-parallel, the attention output and down projections row-parallel, each followed by an
all-reduce of the step's hidden states over the TP group. The residual add is fused into the
RMSNorm that follows it (vLLM ``fused_add_rms_norm``; TensorRT-LLM's fused residual + norm),
the rotary embedding into the write of the new keys and values to the KV cache.

Per step, with ``T`` new tokens over the batch and ``C`` tokens per request in the cache:

* prefill (``T = batch x prompt``): every GEMM has ``m = T`` rows; attention is one fused
  causal flash-attention kernel over the prompt (:class:`~sim.workload.ops.AttentionOp`,
  TensorRT-LLM's context FMHA).
* decode (``T = batch``): every GEMM has ``m = batch`` rows, so it reads its whole weight
  matrix for a few rows of output; attention is the two batched GEMMs against the cache,
  scores ``Q K^T`` (``m = heads per KV head``, ``n = C``, ``k = head_dim``) and values
  ``P V`` (``n = head_dim``, ``k = C``), one per request and KV head, whose bytes are the
  cache (Pope et al. 2022, arXiv 2211.05102, Sec. 3.3: "the attention ... has low arithmetic
  intensity ... independent of batch size").

Each op is a :class:`~sim.workload.steps.Step` as the training layers use: a compute op, or a
collective on a stream whose result the next compute op waits for.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.inference.spec import InferenceSpec, Phase
from sim.types import CollectiveKind, CommClass, OpKind, Stream
from sim.workload.layers import ACT_DTYPE
from sim.workload.ops import AttentionOp, CommOp, GemmOp, MemoryOp, dtype_bytes
from sim.workload.steps import Step

__all__ = ["StepShape", "layer_steps", "embedding_steps", "head_steps", "kv_bytes_per_token_layer",
           "hidden_bytes", "TOKEN_ID_BYTES"]

TOKEN_ID_BYTES = 4
"""A sampled token id (int32) sent from the last pipeline stage back to the first."""

_E = dtype_bytes(ACT_DTYPE)


@dataclass(frozen=True)
class StepShape:
    """One step of generation: ``new_tokens`` per request processed, ``context`` tokens per
    request in the KV cache once they are written.

    >>> StepShape.prefill(200).context, StepShape.decode(200, 3).context
    (200, 203)
    """

    phase: Phase
    new_tokens: int
    context: int

    @classmethod
    def prefill(cls, prompt_tokens: int) -> StepShape:
        return cls(Phase.PREFILL, prompt_tokens, prompt_tokens)

    @classmethod
    def decode(cls, prompt_tokens: int, step: int) -> StepShape:
        """Decode step ``step`` (1-based): it feeds the token sampled by the step before, at
        position ``prompt + step - 1``, so the cache then holds ``prompt + step`` tokens."""
        return cls(Phase.DECODE, 1, prompt_tokens + step)


def kv_bytes_per_token_layer(spec: InferenceSpec) -> float:
    """KV-cache bytes one token adds to one layer on one GPU: keys and values of the GPU's
    KV heads, ``2 x kv_heads x head_dim x bytes`` (Pope et al. 2022, Sec. 3.3).

    >>> from sim.hardware import get_gpu
    >>> from sim.workload.spec import ModelSpec
    >>> m = ModelSpec("m", 2, 4096, 32, 32, 11008, 32000, 4096, gated_mlp=True)
    >>> kv_bytes_per_token_layer(InferenceSpec("m", m, get_gpu("A100")))
    16384.0
    """
    return 2.0 * spec.kv_heads_per_gpu * spec.model.head_dim * spec.kv_bytes_per_element


def hidden_bytes(spec: InferenceSpec, shape: StepShape) -> float:
    """Bytes of the step's hidden states (16-bit): what a TP all-reduce sums and a pipeline
    stage sends to the next."""
    return float(spec.batch * shape.new_tokens * spec.model.hidden_size * _E)


def _tp_op(spec: InferenceSpec, kind: CollectiveKind, size: float, group, replicas) -> CommOp:
    return CommOp(kind, CommClass.TP, group, float(size), replicas)


def layer_steps(spec: InferenceSpec, shape: StepShape, tp_group: tuple[int, ...],
                replicas: tuple[tuple[int, ...], ...] = ()) -> tuple[Step, ...]:
    """The ops of one transformer layer in one step, in issue order, on one GPU of ``tp_group``.

    >>> from sim.hardware import get_gpu
    >>> from sim.workload.spec import ModelSpec
    >>> m = ModelSpec("m", 2, 4096, 32, 32, 11008, 32000, 4096, gated_mlp=True)
    >>> spec = InferenceSpec("m", m, get_gpu("A100"), tp=2)
    >>> [s.name for s in layer_steps(spec, StepShape.decode(200, 1), (0, 1))]  # doctest: +NORMALIZE_WHITESPACE
    ['add-norm', 'qkv', 'rope-kv-write', 'attn-scores', 'attn-values', 'o-proj', 'ncclAllReduce o-proj-out',
     'add-norm', 'fc1', 'activation', 'fc2', 'ncclAllReduce fc2-out']
    """
    m, t = spec.model, spec.tp
    b, h, hd = spec.batch, m.hidden_size, m.head_dim
    T = b * shape.new_tokens
    heads, kvh = spec.heads_per_gpu, spec.kv_heads_per_gpu
    q_n, kv_n = heads * hd, kvh * hd
    qkv_n = q_n + 2 * kv_n
    br = 2 if m.gated_mlp else 1
    f = m.ffn_hidden_size // t
    dt, kvd = spec.dtype, spec.kv_dtype
    kv_e = spec.kv_bytes_per_element

    def c(name: str, op) -> Step:
        return Step(None, name, op)

    norm = MemoryOp(OpKind.NORM, 4.0 * T * h * _E)  # read x and the residual, write both
    rope_kv = MemoryOp(OpKind.ELEMENTWISE, T * qkv_n * _E + T * q_n * _E + 2.0 * T * kv_n * kv_e)
    if shape.phase is Phase.PREFILL:
        attention = [c("attention", AttentionOp(b, heads, kvh, shape.context, hd, True, False, ACT_DTYPE))]
    else:
        g = heads // kvh  # query heads per KV head
        attention = [c("attn-scores", GemmOp(g * shape.new_tokens, shape.context, hd, kvd, b * kvh, OpKind.ATTENTION)),
                     c("attn-values", GemmOp(g * shape.new_tokens, hd, shape.context, kvd, b * kvh, OpKind.ATTENTION))]

    def reduce(name: str) -> list[Step]:
        if t == 1:
            return []
        op = _tp_op(spec, CollectiveKind.ALL_REDUCE, hidden_bytes(spec, shape), tp_group, replicas)
        return [Step(Stream.TP_COMM, f"ncclAllReduce {name}", op)]

    return (c("add-norm", norm), c("qkv", GemmOp(T, qkv_n, h, dt)), c("rope-kv-write", rope_kv), *attention,
            c("o-proj", GemmOp(T, h, q_n, dt)), *reduce("o-proj-out"), c("add-norm", norm),
            c("fc1", GemmOp(T, br * f, h, dt)),
            c("activation", MemoryOp(OpKind.ELEMENTWISE, T * f * _E * (br + 1))),
            c("fc2", GemmOp(T, h, f, dt)), *reduce("fc2-out"))


def embedding_steps(spec: InferenceSpec, shape: StepShape) -> tuple[Step, ...]:
    """The token embedding on the first stage: a gather of ``T`` rows of the (replicated)
    table, TensorRT-LLM's default (``use_parallel_embedding=False``), so no collective."""
    T = spec.batch * shape.new_tokens
    return (Step(None, "embedding", MemoryOp(OpKind.EMBEDDING, 2.0 * T * spec.model.hidden_size * _E)),)


def head_steps(spec: InferenceSpec, shape: StepShape, tp_group: tuple[int, ...],
               replicas: tuple[tuple[int, ...], ...] = ()) -> tuple[Step, ...]:
    """The last stage's output: the final norm and the output layer on the last token of each
    request only (TensorRT-LLM's ``gather_last_token_logits``), the vocabulary split over TP
    and its logits all-gathered, then sampling over the whole vocabulary in fp32."""
    m = spec.model
    b, h = spec.batch, m.hidden_size
    steps = [Step(None, "final-norm", MemoryOp(OpKind.NORM, 2.0 * b * h * _E)),
             Step(None, "lm-head", GemmOp(b, spec.vocab_per_gpu, h, ACT_DTYPE))]
    if spec.tp > 1:
        size = b * spec.vocab_per_gpu * spec.tp * _E
        steps.append(Step(Stream.TP_COMM, "ncclAllGather logits",
                          _tp_op(spec, CollectiveKind.ALL_GATHER, size, tp_group, replicas)))
    steps.append(Step(None, "sampling", MemoryOp(OpKind.ELEMENTWISE, b * m.vocab_size * (_E + 4.0))))
    return tuple(steps)
