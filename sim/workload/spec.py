"""The workload specs: a transformer, a parallel strategy, the system, a measured reference.

These frozen dataclasses are what :mod:`sim.config` builds from YAML; they check their own
fields in ``__post_init__`` and raise :class:`~sim.errors.ConfigError` with the field's path
and ``<spec>`` as the file, which the loader replaces with the real file name. Field names
follow the published validation cases (``model``, ``system``, ``parallel``, ``dtype``) and
Megatron-LM's argument names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.hardware import GPUSpec
from sim.topology.network import NetworkSpec
from sim.types import (
    NOT_SIMULATED_DTYPES,
    SIMULATED_DTYPES,
    CpCommType,
    Dtype,
    MoeDispatcher,
    NormKind,
    RecomputeKind,
    RecomputeModule,
    ScalingRecipe,
    ScheduleKind,
    ZeroImpl,
    recompute_module_names,
)
from sim.workload.kernels import KernelsSpec
from sim.workload.quantization import LOW_PRECISION
from sim.workload.tp_overlap import TE_DEFAULTS, TpOverlapConfig

__all__ = ["ModelSpec", "ParallelSpec", "SystemSpec", "Reference", "WorkloadSpec", "pipeline_split",
           "MEGATRON_ORDER", "DEFAULT_RECOMPUTE_MODULES", "placement_digits"]

_SPEC = "<spec>"

MEGATRON_ORDER = "tp-cp-ep-dp-pp"
"""Megatron-Core's default rank order (``initialize_model_parallel(order=...)``), innermost
first: the default placement, rank ``r`` on GPU ``r``."""

_ORDER_TOKENS = ("tp", "cp", "ep", "dp", "pp")
_ORDER_EXPECTED = ("an order of tp, cp, dp, pp (and ep right before dp) joined by '-', innermost first, "
                   f"e.g. '{MEGATRON_ORDER}' or 'tp-pp-dp', or a list of GPU indices")


MAX_SCHEDULE_PASSES = 1_000_000
"""The most forward passes of model chunks in one iteration over the whole pipeline
(micro-batches x pp x virtual_pipeline_stages): the closed-form memory model walks each stage's
schedule (the published cases reach 40,000; 10,000 micro-batches of Llama 3 405B's 64 chunks are
640,000, a few seconds' walk)."""

MAX_LAYERS = 10_000
"""The most transformer layers a model may have: fifty times the deepest published (PaLM's
118, Llama 3 405B's 126); the closed-form memory model walks the layers of each stage."""


MAX_WIDTH = 2**20
"""The widest a model's hidden size, feed-forward width or head may be (1,048,576): over
fourteen times the widest published feed-forward (PaLM 540B's 73,728, Chowdhery et al. 2022,
Table 1); a width of 10^12 is a typo, and would print an iteration of years at a plausible MFU."""

MAX_SEQUENCE = 2**27
"""The longest sequence a model may be trained on (134,217,728 tokens): over a hundred times
the longest published training run here (NeMo's 1M-token rows) and thirteen times the longest
context a released model states (Llama 4 Scout's 10M)."""


MAX_MTP_LAYERS = 16
"""The most multi-token-prediction modules a model may have: DeepSeek-V3 trains one (its
``num_nextn_predict_layers``); each adds a layer and an output layer to the last stage."""


def _positive_int(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(_SPEC, field, "a positive integer", value)


def pipeline_split(num_layers: int, chunks: int, mtp_layers: int = 0) -> tuple[int, ...] | None:
    """Layers per virtual pipeline stage, first to last.

    Even when ``chunks`` divides the layers. Otherwise the embedding and the loss count as one
    layer each and the ``L + 2`` units are spread evenly, so the first and the last stage get
    one layer fewer -- Megatron-LM's ``--account-for-embedding-in-pipeline-split
    --account-for-loss-in-pipeline-split``, which its Llama 3.1 405B recipes use (126 layers).
    Each multi-token-prediction module (``mtp_layers``, on the last stage with the loss) counts
    as two more units there, its layer and its own output layer and loss. Megatron-LM asserts
    that the units divide evenly; where they do not, the remainder goes one unit a stage to the
    first stage (whose embedding costs next to nothing, so that it computes no more layers than
    the middle ones), then to the middle stages, so that no stage holds more than one unit above
    another: a pipeline runs at its slowest stage's pace. This reproduces every DeepSeek-V3
    layout Megatron-Bridge writes by hand (``_get_deepseek_v3_pipeline_layout`` @ 067f987df:
    61 layers and one MTP module over 4, 8 and 16 virtual stages). None when even that leaves
    a stage with fewer than no layers.

    >>> pipeline_split(96, 8)[:2], pipeline_split(126, 8), sum(pipeline_split(126, 64))
    ((12, 12), (15, 16, 16, 16, 16, 16, 16, 15), 126)
    >>> pipeline_split(61, 16)  # DeepSeek-V3 over 16 virtual stages: 63 units, 15 stages of 4
    (3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2)
    >>> pipeline_split(61, 4, mtp_layers=1), pipeline_split(61, 8, mtp_layers=1)  # Megatron-Bridge's
    ((16, 16, 16, 13), (8, 8, 8, 8, 8, 8, 8, 5))
    """
    if num_layers % chunks == 0:
        return (num_layers // chunks,) * chunks
    last = 1 + 2 * mtp_layers  # the loss, and each MTP module's layer and loss
    base, rem = divmod(num_layers + 1 + last, chunks)
    counts = [base] * chunks
    order = [0, *range(1, chunks - 1), chunks - 1]  # the first stage, the middle ones, the last
    for i in range(rem):
        counts[order[i]] += 1
    counts[0] -= 1
    counts[-1] -= last
    return tuple(counts) if min(counts) >= 0 and sum(counts) == num_layers else None


def placement_digits(order: str, sizes: dict[str, int]) -> tuple[str, ...]:
    """The dimensions of a rank order string, innermost first, as they lay ranks on GPUs.

    ``order`` is Megatron-Core's ``order`` argument (``"tp-cp-ep-dp-pp"``): each of ``tp``,
    ``cp``, ``dp``, ``pp`` at most once; one of size 1 (``sizes``) may be left out and goes
    outermost, as Megatron-Core's ``RankGenerator`` appends it. ``ep`` is not a dimension of
    its own: expert-parallel groups are carved out of the data-parallel ranks (their inner
    factor, :meth:`sim.workload.layout.Layout.ep_group`), so ``ep`` may only stand right before
    ``dp`` and is dropped.

    >>> placement_digits("tp-pp-dp", {"tp": 2, "cp": 1, "dp": 2, "pp": 2})
    ('tp', 'pp', 'dp', 'cp')

    Raises
    ------
    ConfigError
        Field ``parallel.placement``, file ``<spec>``, for an unknown or repeated token, a
        missing dimension larger than 1, or ``ep`` away from ``dp``.
    """
    tokens = [t.strip() for t in order.strip().lower().split("-")]
    bad = [t for t in tokens if t not in _ORDER_TOKENS]
    if bad or len(set(tokens)) != len(tokens):
        what = f"unknown {bad[0]!r}" if bad else "a repeated dimension"
        raise ConfigError(_SPEC, "parallel.placement", f"{_ORDER_EXPECTED} ({what})", order)
    if "ep" in tokens and tokens[tokens.index("ep") + 1:tokens.index("ep") + 2] != ["dp"]:
        raise ConfigError(_SPEC, "parallel.placement", "'ep' right before 'dp' ('ep-dp': expert-parallel "
                          "groups are carved out of the data-parallel ranks)", order)
    digits = [t for t in tokens if t != "ep"]
    missing = [t for t in ("tp", "cp", "dp", "pp") if t not in digits]
    needed = [f"{t}={sizes[t]}" for t in missing if sizes[t] > 1]
    if needed:
        raise ConfigError(_SPEC, "parallel.placement", f"an order naming every dimension larger than 1 "
                          f"(missing {', '.join(needed)})", order)
    return tuple(digits + missing)


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer.

    ``ffn_hidden_size`` is the width of one MLP branch; with ``gated_mlp`` (SwiGLU) the first
    projection is two such branches. ``head_dim`` defaults to hidden / heads.

    Mixture of experts (Megatron-Core ``--num-experts``, ``--moe-router-topk``,
    ``--moe-ffn-hidden-size``, ``--moe-shared-expert-intermediate-size``; Mixtral, DeepSeek):
    with ``num_experts > 1`` every layer from ``first_dense_layers`` on replaces its MLP by
    ``num_experts`` experts of width ``moe_ffn_hidden_size`` (default ``ffn_hidden_size``), of
    which each token visits ``moe_top_k``, plus ``num_shared_experts`` experts every token
    visits; the first ``first_dense_layers`` keep a dense MLP of ``ffn_hidden_size``.
    ``moe_capacity_factor`` pads each expert's tokens to that multiple of the balanced share
    (None: dropless, each expert computes exactly its share under balanced routing).

    Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 Sec. 2.1; Megatron-Core
    ``MLASelfAttention``) when ``kv_lora_rank > 0``: queries through a ``q_lora_rank`` latent
    (0: a direct projection), keys and values through a ``kv_lora_rank`` latent plus a shared
    ``qk_rope_head_dim`` rotary key; query/key heads are ``qk_nope_head_dim + qk_rope_head_dim``
    wide, value heads ``v_head_dim``. The attention kernel's ``head_dim`` is then the mean of
    the two, which gives its FLOPs exactly.

    ``norm`` and ``rotary`` (``model.normalization``, ``model.position_embedding``; None: not
    stated) decide the kernels of eager PyTorch (:mod:`sim.workload.eager`; fused kernels cost
    the same for every normalization) and whether a fused rotary kernel runs (``rotary``
    true; :meth:`sim.workload.layers.LayerBuilder.rope`).

    ``learned_positions`` is the rows of a learned absolute position-embedding table (0: none;
    rotary, ALiBi and sinusoidal positions have no parameters): Megatron-Core's
    ``LanguageModelEmbedding`` under ``--position-embedding-type learned_absolute`` (Megatron-LM's
    default) holds ``torch.nn.Embedding(max_sequence_length, hidden_size)`` beside the
    vocabulary-parallel word embedding, whole on every tensor-parallel rank of the first stage
    (``megatron/core/models/common/embeddings/language_model_embedding.py``).

    ``mtp_num_layers`` is the multi-token-prediction depth (DeepSeek-V3, arXiv 2412.19437
    Sec. 2.2; Megatron-Core ``--mtp-num-layers``, ``megatron/core/transformer/
    multi_token_prediction.py`` @ d98e8a6): after the decoder, each MTP module normalizes the
    hidden state (``hnorm``) and the embedding of the tokens one further ahead (``enorm``),
    projects their concatenation from ``2h`` to ``h`` (``eh_proj``, column-parallel), runs one
    transformer layer of the decoder's last layer's kind (``transformer_layer_spec.layer_specs
    [-1]``), a final norm, and the shared output layer and loss again. Megatron-Core builds the
    modules on the last pipeline stage with the loss, and that stage keeps a copy of the word
    embedding whose gradient it all-reduces with the first stage's (``finalize_model_grads``,
    ``_get_shared_word_embedding_weight``); 0: none.

    ``hidden_dropout`` is the dropout probability on each sublayer's output before its residual
    add (Megatron-LM ``--hidden-dropout``, default 0.1; Megatron-Core ``TransformerConfig.
    hidden_dropout``). At 0 no mask is drawn or kept: PyTorch's ``dropout`` returns its input at
    ``p = 0`` (ATen ``_dropout_impl``), and so does the decomposition ``torch.compile`` traces
    Megatron-Core's fused bias-dropout-add through (``torch/_decomp/decompositions.py``,
    ``dropout``: ``if train and p != 0`` ... ``else: return input.clone()``; Megatron-Core's
    ``jit_fuser`` is ``torch.compile`` from PyTorch 2.2, ``megatron/core/jit.py``).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    seq_length: int
    gated_mlp: bool = False
    tied_embeddings: bool = False
    head_dim: int = 0
    num_experts: int = 0
    moe_top_k: int = 1
    moe_ffn_hidden_size: int = 0
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    moe_capacity_factor: float | None = None
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    norm: NormKind | None = None
    rotary: bool | None = None
    hidden_dropout: float = 0.1
    learned_positions: int = 0
    mtp_num_layers: int = 0

    def __post_init__(self) -> None:
        for f in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                  "ffn_hidden_size", "vocab_size", "seq_length"):
            _positive_int(f"model.{f}", getattr(self, f))
        if self.num_layers > MAX_LAYERS:
            raise ConfigError(_SPEC, "model.num_layers", f"at most {MAX_LAYERS:,} layers", self.num_layers)
        for f in ("hidden_size", "ffn_hidden_size"):
            if getattr(self, f) > MAX_WIDTH:
                raise ConfigError(_SPEC, f"model.{f}", f"a width of at most {MAX_WIDTH:,}", getattr(self, f))
        if self.seq_length > MAX_SEQUENCE:
            raise ConfigError(_SPEC, "model.seq_length", f"at most {MAX_SEQUENCE:,} tokens", self.seq_length)
        if isinstance(self.learned_positions, bool) or not isinstance(self.learned_positions, int) \
                or self.learned_positions < 0:
            raise ConfigError(_SPEC, "model.learned_positions", "0 (no learned position embedding) or a positive "
                              "integer", self.learned_positions)
        if isinstance(self.mtp_num_layers, bool) or not isinstance(self.mtp_num_layers, int) \
                or not 0 <= self.mtp_num_layers <= MAX_MTP_LAYERS:
            raise ConfigError(_SPEC, "model.mtp_num_layers", f"0 (no multi-token prediction) to {MAX_MTP_LAYERS}",
                              self.mtp_num_layers)
        if isinstance(self.q_lora_rank, bool) or not isinstance(self.q_lora_rank, int) or self.q_lora_rank < 0:
            raise ConfigError(_SPEC, "model.q_lora_rank", "0 (queries projected directly) or a positive integer",
                              self.q_lora_rank)
        if self.kv_lora_rank:
            for f in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                _positive_int(f"model.{f}", getattr(self, f))
            if (self.qk_head_dim + self.v_head_dim) % 2:
                raise ConfigError(_SPEC, "model.v_head_dim", "a width that makes qk + v head dims even",
                                  self.v_head_dim)
            object.__setattr__(self, "head_dim", (self.qk_head_dim + self.v_head_dim) // 2)
            object.__setattr__(self, "num_kv_heads", self.num_attention_heads)
        if self.head_dim == 0:
            if self.hidden_size % self.num_attention_heads:
                raise ConfigError(_SPEC, "model.hidden_size",
                                  f"a multiple of model.num_attention_heads={self.num_attention_heads}"
                                  " (or an explicit model.head_dim)", self.hidden_size)
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        _positive_int("model.head_dim", self.head_dim)
        if self.num_attention_heads % self.num_kv_heads:
            raise ConfigError(_SPEC, "model.num_kv_heads",
                              f"a divisor of model.num_attention_heads={self.num_attention_heads}",
                              self.num_kv_heads)
        if isinstance(self.hidden_dropout, bool) or not isinstance(self.hidden_dropout, (int, float)) \
                or not 0.0 <= self.hidden_dropout < 1.0:
            raise ConfigError(_SPEC, "model.hidden_dropout", "a probability in [0, 1)", self.hidden_dropout)
        if self.num_experts < 0 or isinstance(self.num_experts, bool):
            raise ConfigError(_SPEC, "model.num_experts", "0 (dense) or a positive integer", self.num_experts)
        if self.is_moe:
            _positive_int("model.moe_top_k", self.moe_top_k)
            if self.moe_top_k > self.num_experts:
                raise ConfigError(_SPEC, "model.moe_top_k", f"at most model.num_experts={self.num_experts}",
                                  self.moe_top_k)
            if self.moe_ffn_hidden_size == 0:
                object.__setattr__(self, "moe_ffn_hidden_size", self.ffn_hidden_size)
            _positive_int("model.moe_ffn_hidden_size", self.moe_ffn_hidden_size)
            if not 0 <= self.first_dense_layers < self.num_layers:
                raise ConfigError(_SPEC, "model.first_dense_layers",
                                  f"0 to model.num_layers - 1 = {self.num_layers - 1}", self.first_dense_layers)
            if self.num_shared_experts < 0:
                raise ConfigError(_SPEC, "model.num_shared_experts", "0 or more", self.num_shared_experts)
            if self.moe_capacity_factor is not None and not 1.0 <= self.moe_capacity_factor < math.inf:
                raise ConfigError(_SPEC, "model.moe_capacity_factor", "null (dropless) or >= 1",
                                  self.moe_capacity_factor)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head under MLA (no-position part plus rotary part)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def attention_gemms(self, t: int = 1) -> list[tuple[str, int, int, bool]]:
        """The input projections of attention as ``(name, out, in, split)``, in forward
        order, per GPU of a ``t``-way TP group (``split``: the weight is divided over TP; the
        MLA down-projections are computed whole on every TP rank, as Megatron-Core does)."""
        h, H = self.hidden_size, self.num_attention_heads
        if not self.is_mla:
            return [("qkv", (self.q_size + 2 * self.kv_size) // t, h, True)]
        q = ([("q-down", self.q_lora_rank, h, False), ("q-up", H * self.qk_head_dim // t, self.q_lora_rank, True)]
             if self.q_lora_rank else [("q", H * self.qk_head_dim // t, h, True)])
        return q + [("kv-down", self.kv_lora_rank + self.qk_rope_head_dim, h, False),
                    ("kv-up", H * (self.qk_nope_head_dim + self.v_head_dim) // t, self.kv_lora_rank, True)]

    def mla_up_params(self, t: int = 1) -> int:
        """Weights of multi-latent attention's query and key/value up-projections per GPU of a
        ``t``-way TP group (:meth:`attention_gemms` ``q-up`` and ``kv-up``; 0 without MLA): what
        ``recompute_modules: [mla_up_proj]`` runs again, two FLOPs a weight and token."""
        return sum(o * i for name, o, i, _ in self.attention_gemms(t) if name in ("q-up", "kv-up"))

    def separate_matmuls(self, t: int = 1) -> list[tuple[str, int, int]]:
        """A layer's projections as separate matmuls in forward order, ``(name, out, in)`` per
        GPU of a ``t``-way TP group: ``wq, wk, wv, wo, w1, [w3,] w2`` (the row-parallel ``wo``
        and ``w2`` produce full-width partial sums). The order torchtitan's op-level
        checkpointing counts them in."""
        h, q, kv, f = self.hidden_size, self.q_size // t, self.kv_size // t, self.ffn_hidden_size // t
        mlp = [("w1", f, h), ("w3", f, h), ("w2", h, f)] if self.gated_mlp else [("w1", f, h), ("w2", h, f)]
        return [("wq", q, h), ("wk", kv, h), ("wv", kv, h), ("wo", h, q), *mlp]

    @property
    def attention_out_size(self) -> int:
        """Input width of the attention output projection (all heads' values)."""
        return self.num_attention_heads * self.v_head_dim if self.is_mla else self.q_size

    def attention_params(self) -> int:
        """Parameters of a layer's attention (projections, and MLA's latent norms)."""
        gemms = sum(o * i for _, o, i, _ in self.attention_gemms())
        norms = self.q_lora_rank + self.kv_lora_rank if self.is_mla else 0
        return gemms + self.attention_out_size * self.hidden_size + norms

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def dropout_masks(self) -> bool:
        """Whether each residual add's dropout draws a 1-byte mask and keeps it for the
        backward (``hidden_dropout`` above 0; the class docstring)."""
        return self.hidden_dropout > 0.0

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) has experts instead of a dense MLP."""
        return self.is_moe and layer >= self.first_dense_layers

    @property
    def shared_ffn_size(self) -> int:
        """Width of the shared experts taken together (one dense MLP every token visits)."""
        return self.num_shared_experts * self.moe_ffn_hidden_size

    @property
    def q_size(self) -> int:
        """Width of the query projection, heads x head_dim."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of one of the key or value projections, kv_heads x head_dim."""
        return self.num_kv_heads * self.head_dim

    def mlp_params(self, width: int) -> int:
        """Parameters of one MLP (or expert) of ``width``."""
        return self.hidden_size * width * (3 if self.gated_mlp else 2)

    def expert_params(self, layer: int) -> int:
        """Parameters of the routed experts of layer ``layer`` (0 for a dense layer)."""
        return self.num_experts * self.mlp_params(self.moe_ffn_hidden_size) if self.is_moe_layer(layer) else 0

    def layer_params(self, layer: int = 0) -> int:
        """Parameters of transformer layer ``layer`` (weights and biases, two norms; a MoE
        layer's router, shared and routed experts)."""
        h = self.hidden_size
        attn = self.attention_params()
        if self.is_moe_layer(layer):
            mlp = h * self.num_experts + self.mlp_params(self.shared_ffn_size) + self.expert_params(layer)
        else:
            mlp = self.mlp_params(self.ffn_hidden_size)
        return attn + mlp + 4 * h

    @property
    def mtp_layer(self) -> int:
        """The decoder layer whose kind (dense or MoE) the multi-token-prediction layers take:
        the last (Megatron-LM ``pretrain_gpt.py``, ``transformer_layer_spec.layer_specs[-1]``;
        ``num_floating_point_operations``' ``last_layer_is_moe``)."""
        return self.num_layers - 1

    def mtp_proj_params(self) -> int:
        """Weights of one multi-token-prediction module's ``eh_proj``, ``2h x h`` (no bias;
        column-parallel, split over TP)."""
        return 2 * self.hidden_size * self.hidden_size

    def mtp_norm_params(self) -> int:
        """Parameters of one module's three norms (``enorm``, ``hnorm``, ``final_layernorm``),
        counted with a bias each as :meth:`layer_params` counts its norms (whole on every TP
        rank)."""
        return 3 * 2 * self.hidden_size

    def mtp_params(self) -> int:
        """Parameters of all the multi-token-prediction modules, their routed experts included
        (the word embedding and output layer they share are not counted again)."""
        return self.mtp_num_layers * (self.layer_params(self.mtp_layer) + self.mtp_proj_params()
                                      + self.mtp_norm_params())

    def embedding_params(self) -> int:
        """The word embedding's parameters (the output layer's too, tied or not)."""
        return self.vocab_size * self.hidden_size

    def input_embedding_params(self, tp: int) -> float:
        """The first stage's embedding parameters on one of ``tp`` tensor-parallel ranks: the
        word embedding split by vocabulary, the learned position embedding whole."""
        return self.embedding_params() / tp + self.learned_positions * self.hidden_size

    def num_params(self) -> int:
        """All parameters, counting the output layer once when it is tied."""
        lm_head = 0 if self.tied_embeddings else self.embedding_params()
        layers = sum(self.layer_params(i) for i in range(self.num_layers))
        positions = self.learned_positions * self.hidden_size
        return layers + self.embedding_params() + positions + lm_head + 2 * self.hidden_size + self.mtp_params()

    def active_params(self) -> float:
        """Parameters a token goes through: ``num_params`` with only ``moe_top_k`` of the
        routed experts of each MoE layer (the multi-token-prediction layers' too)."""
        skipped = sum(self.expert_params(i) for i in range(self.num_layers)) \
            + self.mtp_num_layers * self.expert_params(self.mtp_layer)
        return self.num_params() - skipped * (1 - self.moe_top_k / max(self.num_experts, 1))


DEFAULT_RECOMPUTE_MODULES: frozenset[RecomputeModule] = frozenset({RecomputeModule.CORE_ATTN})
"""Megatron-Core's default ``recompute_modules``, ``["core_attn"]`` (``TransformerConfig.__post_init__``)."""
_ZB_RECOMPUTE_MODULES = frozenset({RecomputeModule.CORE_ATTN, RecomputeModule.MLA_UP_PROJ})
"""The modules whose recomputed tensors no weight gradient reads (the attention core's inside;
the up-projected query, key and value, whose weight gradients read the latents, which stay)."""


@dataclass(frozen=True)
class ParallelSpec:
    """The parallel strategy, with Megatron-LM's meanings.

    ``virtual_pipeline_stages`` is Megatron's ``--num-virtual-stages-per-pipeline-rank``
    (1 unless the schedule is interleaved). ``dp`` is the data-parallel degree.

    ``placement`` says which GPU each rank runs on: a rank order (Megatron-Core's ``order``,
    innermost first; :data:`MEGATRON_ORDER` puts rank ``r`` on GPU ``r``) or a tuple whose
    ``i``-th entry is the GPU of rank ``i`` (:func:`sim.workload.layout.gpu_placement`).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    """Megatron-Core's ``--expert-tensor-parallel-size``: the tensor-parallel degree of the
    routed experts; None runs them at ``tp`` (Megatron-Core's default). With MoE parallel
    folding (Liu et al. 2025, arXiv 2504.14960) the experts' ``etp x ep x edp`` ranks are the
    attention's ``tp x cp x dp`` ranks of each stage (:attr:`expert_tp`, :attr:`expert_dp`)."""
    virtual_pipeline_stages: int = 1
    schedule: ScheduleKind = ScheduleKind.ONE_F_ONE_B
    sequence_parallel: bool = False
    micro_batch_size: int = 1
    global_batch_size: int = 1
    recompute: RecomputeKind = RecomputeKind.NONE
    recompute_num_layers: int | None = None
    """Under ``recompute`` full: how many layers of each model chunk are recomputed, Megatron's
    ``--recompute-method block --recompute-num-layers N`` (Megatron-Core
    ``TransformerBlock._checkpointed_forward``, ``recompute_method == 'block'``; Megatron-LM's
    ``--activations-checkpoint-method block`` from August 2021). Each model chunk (each virtual
    pipeline stage's ``TransformerBlock``) checkpoints the input of its first ``N`` layers and
    recomputes their forward before their backward; its other layers keep their activations
    as without recomputation. A chunk with fewer layers recomputes them all. None: every layer
    (``--recompute-method uniform --recompute-num-layers 1``). Only with ``recompute`` full;
    :meth:`recompute_at` says which recomputation a layer gets."""
    pipeline_layout: tuple[int, ...] | None = None
    """Decoder layers of each virtual pipeline stage (``chunk x pp + stage``), Megatron-Core's
    ``--pipeline-model-parallel-layout`` (``PipelineParallelLayerLayout``; its ``t`` counted per
    stage, the embedding on the first and the loss on the last); None splits the layers evenly
    (:func:`pipeline_split`). :meth:`layer_counts` is the split either way."""
    recompute_modules: frozenset[RecomputeModule] = DEFAULT_RECOMPUTE_MODULES
    """Under ``recompute`` selective: the submodules each layer recomputes in its backward,
    Megatron-Core's ``--recompute-modules`` (:class:`~sim.types.RecomputeModule`; default
    ``core_attn``, Megatron-Core's, the attention core of Korthikanti et al. 2022). Their
    activations are not kept from the forward (:func:`sim.memory.layer_activation_bytes`) and
    their forward ops run again before the backward that needs them
    (:class:`~sim.workload.layers.LayerOps`). Only the default unless ``recompute`` is
    selective."""
    distributed_optimizer: bool = False
    zero_stage: int = 0
    overlap_grad_reduce: bool = True
    overlap_p2p_comm: bool = True
    """Megatron-Core's ``overlap_p2p_comm`` under the interleaved schedule: a pipeline receive
    is posted when the rank's previous pass of the same direction ends, so the transfer runs
    while the pass of the other direction in between computes
    (``forward_backward_pipelining_with_interleaving``; Megatron-LM
    ``--no-overlap-p2p-communication`` turns it off). False posts each receive when the compute
    before it ends and waits for it there, as the 1F1B schedule always does."""
    pipeline_scatter_gather: bool = False
    """Megatron-LM's scatter/gather optimization of the pipeline's sends (Narayanan et al. 2021,
    Sec. 4.1; ``megatron/p2p_communication.py`` before Megatron-Core): without sequence
    parallelism each tensor-parallel rank sends a 1/tp chunk of the stage's output and the
    receiver all-gathers it over its tensor-parallel group before the pass
    (``gather_split_1d_tensor``: an all-gather of the whole output, priced as one,
    :meth:`sim.workload.taskgraph._RankProgram.recv`). False (Megatron-Core, DeepSpeed's
    pipeline engine, ``torch.distributed.pipelining``): every rank sends the whole output, split
    over TP only where sequence parallelism has split it (:attr:`pipeline_message_bytes`)."""
    blocking_p2p: bool = False
    """DeepSpeed's pipeline engine (``deepspeed/runtime/pipe``): its ``TrainSchedule`` issues
    each send and receive as a command of its own between the passes (before a forward: the
    previous backward's ``SendGrad``, then ``RecvActivation``; before a backward:
    ``RecvGrad``, then the previous forward's ``SendActivation``), each a blocking
    ``torch.distributed.send``/``recv`` that the compute stream waits for, so a stage waits for
    its neighbour to reach the matching command. False: Megatron's schedules, which post a
    pass's receive when the compute before it ends and do not wait for its sends
    (:meth:`sim.workload.taskgraph._RankProgram.recv`). 1F1B only."""
    grad_bucket_size_params: int = 40_000_000
    overlap_param_gather: bool = False
    """Megatron-LM ``--overlap-param-gather`` (with the distributed optimizer): the updated
    weights are all-gathered during the next iteration's forward, layer by layer, instead of
    after the optimizer step."""
    tp_comm_overlap: bool = False
    """Megatron-LM ``--tp-comm-overlap`` (Transformer Engine userbuffers): each sequence-parallel
    all-gather and reduce-scatter is split into chunks pipelined with the GEMM it feeds or
    drains, so the GEMM no longer waits for the whole collective."""
    tp_comm_overlap_cfg: TpOverlapConfig = TE_DEFAULTS
    """What runs those collectives under ``tp_comm_overlap`` and the SMs each holds, per GEMM
    (:mod:`sim.workload.tp_overlap`): Transformer Engine's userbuffers defaults, a NeMo-style
    table, or torchtitan's symmetric-memory async TP."""
    placement: str | tuple[int, ...] = MEGATRON_ORDER
    """Which GPU each rank runs on: a rank order such as ``"tp-pp-dp"`` (innermost first), or
    the GPU index of every rank in rank order (a permutation of ``0 .. num_gpus - 1``)."""
    cp_comm_type: CpCommType = CpCommType.P2P
    """Megatron-LM's ``--cp-comm-type``: how context parallelism's attention exchanges the
    sequence (ring attention by default; :class:`~sim.types.CpCommType`)."""
    moe_dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL
    """How a mixture-of-experts layer exchanges its tokens over the EP group: Megatron-Core's
    all-to-all dispatcher, or the flex dispatcher on DeepEP or HybridEP, which send each token
    once per rank and once per scale-up domain (:class:`~sim.types.MoeDispatcher`)."""
    ep_overlap: bool = False
    """Megatron-Core's ``overlap_moe_expert_parallel_comm`` (Megatron-LM
    ``--overlap-moe-expert-parallel-comm``, "EP A2A overlap"): in the 1F1B steady state a
    forward pass and the backward pass after it run as one combined pass, layer by layer, so the
    expert-parallel token exchanges of one micro-batch run while the other computes
    (``megatron/core/pipeline_parallel/combined_1f1b.py``; :mod:`sim.workload.ep_overlap`).
    Needs ``ep > 1``, the interleaved schedule when ``pp > 1`` (1F1B without pipelining
    otherwise) and no full recomputation, as ``TransformerConfig.__post_init__`` asserts."""
    delay_wgrad: bool = False
    """Megatron-Core's ``delay_wgrad_compute`` (Megatron-LM ``--delay-wgrad-compute``), only with
    :attr:`ep_overlap`: in a combined pass the experts' weight-gradient GEMMs run after the
    input gradient's dispatch is issued, so that all-to-all runs beside them
    (:func:`sim.workload.ep_overlap.split_backward`)."""
    hierarchical_context_parallel_sizes: tuple[int, ...] | None = None
    """Megatron-LM's ``--hierarchical-context-parallel-sizes`` ``[a2a, p2p]``: the all-to-all
    and ring group sizes of ``a2a+p2p`` (their product is ``cp``; Transformer Engine supports
    two levels)."""
    dp_shard: int | None = None
    """Hybrid sharding (HSDP): the data-parallel degree a ZeRO/FSDP shard group spans, a divisor
    of ``dp``; the ``dp`` ranks are ``dp / dp_shard`` replicas of such a group (torchtitan's
    ``data_parallel_shard_degree`` x ``data_parallel_replicate_degree``; Megatron-LM's
    ``--num-distributed-optimizer-instances`` = ``dp / dp_shard``; PyTorch FSDP's
    ``HYBRID_SHARD``). A group is ``dp_shard x cp`` ranks, as torchtitan's ``dp_shard_cp`` mesh
    and Megatron-Core's intra-instance ``dp-cp`` group are. None: ``dp``, one group (full
    sharding)."""

    zero_impl: ZeroImpl = ZeroImpl.FSDP
    """How ZeRO-3 (``zero_stage`` 3) issues its weight gathers and gradient reductions: FSDP's
    per-layer coalesced, prefetched collectives (the default: PyTorch FSDP2, torchtitan,
    Megatron-Core), or DeepSpeed v0.3's per-parameter, blocking ones
    (:class:`~sim.types.ZeroImpl`, :mod:`sim.workload.deepspeed_zero3`). Ignored below stage 3."""

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "dp", "cp", "ep", "virtual_pipeline_stages", "micro_batch_size",
                  "global_batch_size", "grad_bucket_size_params"):
            _positive_int(f"parallel.{f}", getattr(self, f))
        passes = self.num_microbatches * self.pp * self.virtual_pipeline_stages
        if passes > MAX_SCHEDULE_PASSES:
            raise ConfigError(_SPEC, "parallel.global_batch_size", f"at most {MAX_SCHEDULE_PASSES:,} forward passes "
                              f"of model chunks in one iteration: {self.num_microbatches:,} micro-batches (global / "
                              f"(micro x dp)) x pp {self.pp} x virtual_pipeline_stages {self.virtual_pipeline_stages}",
                              self.global_batch_size)
        self._check_placement()
        self._check_cp_levels()
        if self.etp is not None:
            _positive_int("parallel.etp", self.etp)
        if self.expert_tp != self.tp:
            stage = self.tp * self.cp * self.dp
            if stage % (self.expert_tp * self.ep):
                raise ConfigError(_SPEC, "parallel.etp", f"etp x ep (ep={self.ep}) dividing tp x cp x dp = {stage} "
                                  "(Megatron-Core folds the experts' etp x ep x edp ranks onto each stage's "
                                  "tp x cp x dp ranks)", self.etp)
        elif self.ep > 1 and (self.dp * self.cp) % self.ep:
            raise ConfigError(_SPEC, "parallel.ep", f"a divisor of parallel.dp x parallel.cp = {self.dp * self.cp} "
                              "(expert-parallel groups are carved out of a stage's data- and context-parallel "
                              "ranks, as in Megatron-Core)", self.ep)
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError(_SPEC, "parallel.zero_stage", "0, 1, 2 or 3", self.zero_stage)
        self._check_dp_shard()
        if self.zero_impl is ZeroImpl.DEEPSPEED_BF16 and (self.zero_stage > 1 or self.hybrid_shard):
            raise ConfigError(_SPEC, "parallel.zero_impl", "fsdp or deepspeed-0.3 with parallel.zero_stage 2 or 3 or "
                              "hybrid sharding (DeepSpeed's bf16 optimizer runs at ZeRO stage 0 or 1 and "
                              "partitions over the whole data-parallel group)", self.zero_impl.value)
        if self.zero_impl is ZeroImpl.DEEPSPEED_0_3 and self.zero_stage == 3 and (self.pp > 1 or self.hybrid_shard):
            raise ConfigError(_SPEC, "parallel.zero_impl", "fsdp with parallel.pp > 1 or hybrid sharding "
                              "(DeepSpeed 0.3's pipeline engine runs ZeRO stage 1 at most, and its ZeRO-3 "
                              "shards over the whole data-parallel group)", self.zero_impl.value)
        if self.blocking_p2p and self.schedule is not ScheduleKind.ONE_F_ONE_B:
            raise ConfigError(_SPEC, "parallel.blocking_p2p", "false unless parallel.schedule is 1f1b (DeepSpeed's "
                              "pipeline engine runs its TrainSchedule, a 1F1B)", self.blocking_p2p)
        if self.schedule is ScheduleKind.INTERLEAVED:
            if self.pp < 2:
                raise ConfigError(_SPEC, "parallel.schedule", "interleaved-1f1b only with parallel.pp >= 2",
                                  self.schedule.value)
        elif self.virtual_pipeline_stages != 1:
            raise ConfigError(_SPEC, "parallel.virtual_pipeline_stages",
                              "1 unless parallel.schedule is interleaved-1f1b", self.virtual_pipeline_stages)
        if self.recompute_num_layers is not None:
            _positive_int("parallel.recompute_num_layers", self.recompute_num_layers)
            if self.recompute is not RecomputeKind.FULL:
                raise ConfigError(_SPEC, "parallel.recompute_num_layers", "null unless parallel.recompute is full "
                                  "(the layers a chunk recomputes whole, Megatron's --recompute-method block)",
                                  self.recompute_num_layers)
        if isinstance(self.pipeline_layout, list):  # a list from Python: the spec keeps a tuple
            object.__setattr__(self, "pipeline_layout", tuple(self.pipeline_layout))
        if isinstance(self.recompute_modules, (set, list, tuple)):
            object.__setattr__(self, "recompute_modules", frozenset(self.recompute_modules))
        if not (isinstance(self.recompute_modules, frozenset)
                and all(isinstance(x, RecomputeModule) for x in self.recompute_modules)):
            raise ConfigError(_SPEC, "parallel.recompute_modules", "a set of RecomputeModule",
                              self.recompute_modules)
        if self.pipeline_layout is not None:
            layout = self.pipeline_layout
            chunks = self.pp * self.virtual_pipeline_stages
            if not (isinstance(layout, tuple) and len(layout) == chunks
                    and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in layout)):
                raise ConfigError(_SPEC, "parallel.pipeline_layout", f"null or {chunks} layer counts >= 0, one for "
                                  "each of parallel.pp x parallel.virtual_pipeline_stages virtual stages",
                                  list(layout) if isinstance(layout, tuple) else layout)
        if self.recompute_modules != DEFAULT_RECOMPUTE_MODULES and self.recompute is not RecomputeKind.SELECTIVE:
            raise ConfigError(_SPEC, "parallel.recompute_modules", "[core_attn] (the default) unless "
                              "parallel.recompute is selective (Megatron-Core reads --recompute-modules under "
                              "--recompute-granularity selective only)",
                              recompute_module_names(self.recompute_modules))
        if self.schedule is ScheduleKind.ZB_H1 and self.recompute_modules - _ZB_RECOMPUTE_MODULES \
                and self.recompute is RecomputeKind.SELECTIVE:
            raise ConfigError(_SPEC, "parallel.recompute_modules", "only core_attn and mla_up_proj with the zb-h1 "
                              "schedule (its weight-gradient pass would need the recomputed linear inputs kept)",
                              recompute_module_names(self.recompute_modules))
        if self.schedule is ScheduleKind.ZB_H1 and self.recompute in (RecomputeKind.FULL,
                                                                      RecomputeKind.SELECTIVE_OP):
            raise ConfigError(_SPEC, "parallel.recompute", "none or selective with the zb-h1 schedule "
                              "(its weight-gradient pass would need the recomputed layer kept)",
                              self.recompute.value)
        if self.tp_comm_overlap and self.tp > 1 and not self.sequence_parallel:
            raise ConfigError(_SPEC, "parallel.sequence_parallel", "true with parallel.tp_comm_overlap "
                              "(Megatron-LM requires --sequence-parallel for --tp-comm-overlap)", False)
        if self.sequence_parallel and self.tp == 1:
            raise ConfigError(_SPEC, "parallel.sequence_parallel", "false when parallel.tp is 1", True)
        if self.ep_overlap:
            self._check_ep_overlap()
        elif self.delay_wgrad:
            raise ConfigError(_SPEC, "parallel.delay_wgrad", "false unless parallel.ep_overlap is true (Megatron-Core: "
                              "overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute)",
                              True)

    def _check_ep_overlap(self) -> None:
        """What Megatron-Core asserts of ``overlap_moe_expert_parallel_comm``
        (``megatron/core/transformer/transformer_config.py``, ``__post_init__``): expert
        parallelism, virtual pipeline stages when ``pp > 1``, no full recomputation."""
        field = "parallel.ep_overlap"
        if self.ep == 1:
            raise ConfigError(_SPEC, field, "false unless parallel.ep > 1 (Megatron-Core: only supported with "
                              "expert model parallelism)", True)
        if self.pp > 1 and self.schedule is not ScheduleKind.INTERLEAVED:
            raise ConfigError(_SPEC, field, "false unless parallel.schedule is interleaved-1f1b when parallel.pp "
                              "> 1 (Megatron-Core requires virtual pipeline stages for it)", True)
        if self.pp == 1 and self.schedule is not ScheduleKind.ONE_F_ONE_B:
            raise ConfigError(_SPEC, field, "false unless parallel.schedule is 1f1b when parallel.pp is 1 "
                              "(Megatron-Core's combined 1F1B without pipelining)", True)
        if self.recompute is RecomputeKind.FULL:
            raise ConfigError(_SPEC, field, "false with parallel.recompute full (Megatron-Core: disable full "
                              "recomputation when enabling overlap_moe_expert_parallel_comm)", True)
        if self.zero_stage >= 3:
            raise ConfigError(_SPEC, field, "false with parallel.zero_stage 3 (llmsim combines the passes of "
                              "Megatron-Core's DDP and distributed optimizer, not of FSDP's per-layer gathers)", True)

    def _check_cp_levels(self) -> None:
        """``hierarchical_context_parallel_sizes``: two positive sizes whose product is ``cp``
        (Megatron-LM's ``validate_args`` asserts the product; Transformer Engine's
        ``attn_forward_func_with_cp`` "only supports two-level CP groups"), required by
        ``a2a+p2p``."""
        sizes = self.hierarchical_context_parallel_sizes
        field = "parallel.hierarchical_context_parallel_sizes"
        if sizes is None:
            if self.cp_comm_type is CpCommType.A2A_P2P:
                raise ConfigError(_SPEC, field, "[a2a size, p2p size] with parallel.cp_comm_type a2a+p2p "
                                  "(Megatron-LM requires --hierarchical-context-parallel-sizes)", None)
            return
        if not isinstance(sizes, (tuple, list)) or len(sizes) != 2 or any(
                isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in sizes):
            raise ConfigError(_SPEC, field, "two positive integers [a2a size, p2p size] (Transformer Engine "
                              "supports two levels)", sizes)
        if sizes[0] * sizes[1] != self.cp:
            raise ConfigError(_SPEC, field, f"two sizes whose product is parallel.cp={self.cp}", list(sizes))
        object.__setattr__(self, "hierarchical_context_parallel_sizes", tuple(sizes))

    @property
    def cp_a2a_size(self) -> int:
        """The ranks an attention all-to-all spans: ``cp`` for ``a2a``, the first
        hierarchical size for ``a2a+p2p``, 1 otherwise."""
        if self.cp_comm_type is CpCommType.A2A:
            return self.cp
        if self.cp_comm_type is CpCommType.A2A_P2P:
            assert self.hierarchical_context_parallel_sizes is not None  # _check_cp_levels requires it
            return self.hierarchical_context_parallel_sizes[0]
        return 1

    def _check_dp_shard(self) -> None:
        n = self.dp_shard
        if n is None:
            return
        _positive_int("parallel.dp_shard", n)
        if self.dp % n:
            raise ConfigError(_SPEC, "parallel.dp_shard", f"null or a divisor of parallel.dp={self.dp} (shard groups "
                              "of dp_shard data-parallel ranks, replicated dp / dp_shard times)", n)
        if self.hybrid_shard and self.zero == 0:
            raise ConfigError(_SPEC, "parallel.dp_shard", f"null or parallel.dp={self.dp} without the distributed "
                              "optimizer or ZeRO (nothing is sharded; Megatron-LM asserts 'Partial DistOpt cannot "
                              "be used without DistOpt')", n)
        if self.expert_dp % self.dp_replicate:
            raise ConfigError(_SPEC, "parallel.dp_shard", f"a divisor of parallel.dp whose replica count dp / "
                              f"dp_shard = {self.dp_replicate} divides the expert-data-parallel degree "
                              f"{self.expert_dp} (Megatron-Core asserts it)", n)

    def _check_placement(self) -> None:
        pl = self.placement
        if isinstance(pl, str):
            placement_digits(pl, {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp})
            return
        if not isinstance(pl, (tuple, list)):
            raise ConfigError(_SPEC, "parallel.placement", _ORDER_EXPECTED, pl)
        n = self.num_gpus
        if len(pl) != n:
            raise ConfigError(_SPEC, "parallel.placement", f"a list of {n} GPU indices, one per rank "
                              f"(tp x pp x dp x cp)", f"a list of {len(pl)}")
        odd = [g for g in pl if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < n]
        if odd:
            raise ConfigError(_SPEC, "parallel.placement", f"GPU indices in 0..{n - 1}", odd[0])
        if len(set(pl)) != n:
            twice = next(g for g in pl if pl.count(g) > 1)
            raise ConfigError(_SPEC, "parallel.placement", f"a permutation of 0..{n - 1} (each GPU once)",
                              f"GPU {twice} more than once")
        object.__setattr__(self, "placement", tuple(pl))

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """The routed experts' tensor-parallel degree: ``etp``, or ``tp`` when unset
        (Megatron-Core's default for ``--expert-tensor-parallel-size``)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """The expert-data-parallel degree of each stage, ``tp x cp x dp / (etp x ep)``
        (``expert_data_parallel_size`` in Megatron-Core's ``initialize_model_parallel``).

        >>> ParallelSpec(tp=2, dp=8, ep=4, etp=1).expert_dp
        4
        """
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    def layer_counts(self, num_layers: int, mtp_layers: int = 0) -> tuple[int, ...] | None:
        """Decoder layers of each virtual pipeline stage: :attr:`pipeline_layout` when given,
        else :func:`pipeline_split` of ``num_layers`` with ``mtp_layers`` multi-token-prediction
        modules on the last stage (None when that leaves a stage short)."""
        if self.pipeline_layout is not None:
            return self.pipeline_layout
        return pipeline_split(num_layers, self.pp * self.virtual_pipeline_stages, mtp_layers)

    def recompute_at(self, position: int) -> RecomputeKind:
        """The recomputation of the layer at ``position`` (0-based) in its model chunk: under
        block recomputation (:attr:`recompute_num_layers`) the first ``N`` layers of a chunk are
        recomputed whole and the rest not at all; otherwise every layer gets :attr:`recompute`.

        >>> p = ParallelSpec(recompute=RecomputeKind.FULL, recompute_num_layers=2)
        >>> [p.recompute_at(i).value for i in range(3)]
        ['full', 'full', 'none']
        """
        n = self.recompute_num_layers
        if n is not None and position >= n:
            return RecomputeKind.NONE
        return self.recompute

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.dp)

    @property
    def zero(self) -> int:
        """The ZeRO stage in effect: Megatron's distributed optimizer is ZeRO-1."""
        return max(self.zero_stage, 1 if self.distributed_optimizer else 0)

    @property
    def shards_optimizer(self) -> bool:
        """Whether optimizer state is sharded over DP (distributed optimizer / ZeRO-1 and up)."""
        return self.zero >= 1

    @property
    def reduce_scatters_grads(self) -> bool:
        """Whether the gradients are reduce-scattered to the ranks that own their optimizer
        shard (a sharded optimizer), not all-reduced whole: all but DeepSpeed's bf16 optimizer
        (:attr:`~sim.types.ZeroImpl.DEEPSPEED_BF16`), which shards the optimizer state and
        all-reduces the gradients."""
        return self.shards_optimizer and self.zero_impl is not ZeroImpl.DEEPSPEED_BF16

    @property
    def dp_shard_degree(self) -> int:
        """The data-parallel degree of a shard group: ``dp_shard``, or ``dp`` when unset."""
        return self.dp if self.dp_shard is None else self.dp_shard

    @property
    def dp_replicate(self) -> int:
        """How many replicas of a shard group the data-parallel ranks hold, ``dp / dp_shard``
        (Megatron-LM's ``--num-distributed-optimizer-instances``).

        >>> ParallelSpec(dp=8, dp_shard=2, distributed_optimizer=True, global_batch_size=8).dp_replicate
        4
        """
        return self.dp // self.dp_shard_degree

    @property
    def hybrid_shard(self) -> bool:
        """Whether the data-parallel ranks hold more than one replica of the sharded state."""
        return self.dp_replicate > 1

    @property
    def shard_group_size(self) -> int:
        """The ranks a dense parameter's ZeRO/FSDP state is divided over: ``dp_shard x cp``
        (context-parallel ranks hold the same weights)."""
        return self.dp_shard_degree * self.cp

    @property
    def expert_shard_group_size(self) -> int:
        """The ranks a routed expert's state is divided over: the expert-data-parallel degree
        over the replicas (Megatron-Core's ``intra_partial_expert_data_parallel_size``)."""
        return self.expert_dp // self.dp_replicate


@dataclass(frozen=True)
class SystemSpec:
    """The GPUs a workload runs on; ``topology`` names a preset or a topology file."""

    gpu: GPUSpec
    num_gpus: int
    gpus_per_node: int = 8
    topology: str | None = None
    network: NetworkSpec | None = None
    """The scale-out network the source published (``system.network``), put on the topology
    by :func:`sim.topology.network.apply_network`; None: not published, the topology's stands."""
    nvlink_segments: bool = False
    """Whether the job's nodes are allocated in equal segments, each inside one NVLink domain
    (Slurm's ``--segment``: the largest divisor of the node count that a domain holds), rather
    than filling the domains in order (:func:`sim.topology.choice.segmented`)."""

    def __post_init__(self) -> None:
        _positive_int("system.num_gpus", self.num_gpus)
        _positive_int("system.gpus_per_node", self.gpus_per_node)


@dataclass(frozen=True)
class Reference:
    """A measured result the workload carries, shown beside the prediction (SI units)."""

    source: str
    iteration_time_s: float | None = None
    tflops_per_gpu: float | None = None
    tflops_includes_recompute: bool | None = None
    tokens_per_s_per_gpu: float | None = None
    peak_memory_bytes: float | None = None


def _check_cp_comm(m: ModelSpec, p: ParallelSpec) -> None:
    """What Transformer Engine's context-parallel attention asserts of the model
    (``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``):

    * all-to-all (``a2a``, and the first level of ``a2a+p2p``) splits the heads each TP rank
      holds over the all-to-all group: "The number of attention heads needs to be divisible by
      CP size!" holds for the query heads and the key/value heads alike (``q.shape[-2]`` and
      ``k.shape[-2]``). Under GQA there is no replication: a TP rank's KV heads (``kv / tp``,
      or the one replicated head when ``tp > kv``) must divide too.
    * multi-head latent attention with key and value heads of different widths runs only with
      ``p2p`` or ``a2a+p2p`` ("The context parallel running configs cannot support MLA!").
    """
    field = "parallel.cp_comm_type"
    kind = p.cp_comm_type
    if m.is_mla and m.qk_head_dim != m.v_head_dim and kind in (CpCommType.ALL_GATHER, CpCommType.A2A):
        raise ConfigError(_SPEC, field, "p2p or a2a+p2p for multi-head latent attention with key and value heads "
                          f"of different widths ({m.qk_head_dim} and {m.v_head_dim}; Transformer Engine "
                          "supports no other)", kind.value)
    a = p.cp_a2a_size
    if a > 1:
        heads, kv_heads = m.num_attention_heads // p.tp, max(m.num_kv_heads // p.tp, 1)
        if heads % a or kv_heads % a:
            what = f"the all-to-all size {a}" + (" (the first hierarchical size)" if a != p.cp else " (parallel.cp)")
            raise ConfigError(_SPEC, field, f"p2p or all_gather: {kind.value} splits each TP rank's heads over "
                              f"{what}, so query heads / tp = {heads} and key/value heads / tp = {kv_heads} "
                              f"must both be multiples of it (Transformer Engine asserts it; tp={p.tp})",
                              kind.value)


@dataclass(frozen=True)
class WorkloadSpec:
    """Everything one simulation needs besides the topology."""

    name: str
    model: ModelSpec
    parallel: ParallelSpec
    system: SystemSpec
    dtype: Dtype = Dtype.BF16
    reference: Reference | None = None
    scaling: ScalingRecipe = ScalingRecipe.DELAYED
    """The 8-bit scaling recipe (ignored in 16 bits)."""
    num_layers_at_start_in_bf16: int = 0
    """Transformer layers at the start whose linear layers stay in BF16 under an FP8 or FP4
    ``dtype`` (Megatron-LM ``--first-last-layers-bf16 --num-layers-at-start-in-bf16``;
    Megatron-Bridge's ``num_layers_at_start_in_bf16``, 0 in its performance recipes)."""
    num_layers_at_end_in_bf16: int = 0
    """The same at the end (``--num-layers-at-end-in-bf16``)."""
    kernels: KernelsSpec = KernelsSpec()
    """The kernel and framework switches (:mod:`sim.workload.kernels`)."""

    def _check_recompute_modules(self) -> None:
        """What Megatron-Core asserts of ``recompute_modules`` (``TransformerConfig.__post_init__``
        @ d98e8a6): ``mla_up_proj`` only with multi-latent attention, ``moe_act`` only with the
        grouped expert GEMMs of a MoE model, and neither ``moe_act`` nor ``layernorm`` under FP8
        with delayed scaling."""
        m, mods = self.model, self.parallel.recompute_modules
        shown = recompute_module_names(mods)
        if RecomputeModule.MLA_UP_PROJ in mods and not m.is_mla:
            raise ConfigError(_SPEC, "parallel.recompute_modules", "no mla_up_proj without multi-latent attention "
                              "(Megatron-Core: only supported with multi_latent_attention)", shown)
        if RecomputeModule.MOE_ACT in mods and not m.is_moe:
            raise ConfigError(_SPEC, "parallel.recompute_modules", "no moe_act for a dense model (Megatron-Core: only "
                              "supported with moe_grouped_gemm)", shown)
        delayed = self.dtype in LOW_PRECISION and self.scaling is ScalingRecipe.DELAYED
        if delayed and mods & {RecomputeModule.MOE_ACT, RecomputeModule.LAYERNORM}:
            raise ConfigError(_SPEC, "parallel.recompute_modules", "no moe_act or layernorm under FP8 delayed scaling "
                              "(Megatron-Core: delayed scaling does not support moe_act and layernorm recompute)",
                              shown)

    def __post_init__(self) -> None:
        m, p, s = self.model, self.parallel, self.system
        if p.cp > 1 and not self.kernels.flash_attention:
            raise ConfigError(_SPEC, "kernels.flash_attention", "true with parallel.cp > 1 (Transformer Engine's "
                              "context parallelism is built on fused attention)", False)
        for f in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"):
            value = getattr(self, f)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(_SPEC, f, "an integer >= 0", value)
        if m.num_attention_heads % p.tp:
            raise ConfigError(_SPEC, "parallel.tp",
                              f"a divisor of model.num_attention_heads={m.num_attention_heads}", p.tp)
        if m.num_kv_heads % p.tp and p.tp % m.num_kv_heads:
            raise ConfigError(_SPEC, "parallel.tp",
                              f"a divisor or multiple of model.num_kv_heads={m.num_kv_heads}", p.tp)
        if m.ffn_hidden_size % p.tp:
            raise ConfigError(_SPEC, "parallel.tp",
                              f"a divisor of model.ffn_hidden_size={m.ffn_hidden_size}", p.tp)
        if p.cp > 1:
            _check_cp_comm(m, p)
        if p.cp > 1 and m.seq_length % (2 * p.cp):
            raise ConfigError(_SPEC, "model.seq_length",
                              f"a multiple of 2 x parallel.cp = {2 * p.cp} (load-balanced causal context "
                              "parallelism gives each rank two chunks)", m.seq_length)
        chunks = p.pp * p.virtual_pipeline_stages
        split = p.layer_counts(m.num_layers, m.mtp_num_layers)
        if p.pipeline_layout is not None and sum(p.pipeline_layout) != m.num_layers:
            raise ConfigError(_SPEC, "parallel.pipeline_layout", f"layer counts summing to model.num_layers="
                              f"{m.num_layers}", list(p.pipeline_layout))
        if split is None:
            raise ConfigError(_SPEC, "model.num_layers",
                              f"enough layers for parallel.pp x parallel.virtual_pipeline_stages = {chunks} "
                              "stages (counting the embedding and the loss as a layer each)", m.num_layers)
        if p.recompute_num_layers is not None and p.recompute_num_layers > max(split):
            raise ConfigError(_SPEC, "parallel.recompute_num_layers", f"at most the layers of a model chunk, "
                              f"{max(split)} ({m.num_layers} layers over pp x virtual_pipeline_stages = {chunks} "
                              "chunks)", p.recompute_num_layers)
        if p.global_batch_size % (p.micro_batch_size * p.dp):
            raise ConfigError(_SPEC, "parallel.global_batch_size",
                              f"a multiple of micro_batch_size x dp = {p.micro_batch_size * p.dp}",
                              p.global_batch_size)
        if p.schedule is ScheduleKind.INTERLEAVED and p.num_microbatches % p.pp:
            raise ConfigError(_SPEC, "parallel.global_batch_size",
                              f"a number of micro-batches ({p.num_microbatches}) that is a multiple of "
                              f"parallel.pp={p.pp}, as Megatron's interleaved schedule requires",
                              p.global_batch_size)
        if p.recompute_modules != DEFAULT_RECOMPUTE_MODULES:
            self._check_recompute_modules()
        if p.ep > 1 and not m.is_moe:
            raise ConfigError(_SPEC, "parallel.ep", "1 for a dense model (model.num_experts is 0)", p.ep)
        if m.is_moe and m.num_experts % p.ep:
            raise ConfigError(_SPEC, "parallel.ep", f"a divisor of model.num_experts={m.num_experts}", p.ep)
        if m.is_moe and p.zero >= 3:
            raise ConfigError(_SPEC, "parallel.zero_stage", "at most 2 for a mixture-of-experts model "
                              "(ZeRO-3/FSDP of experts is not built yet)", p.zero_stage)
        if m.mtp_num_layers and p.zero >= 3:
            raise ConfigError(_SPEC, "parallel.zero_stage", "at most 2 with multi-token prediction "
                              "(model.mtp_num_layers; ZeRO-3/FSDP gathers of its modules are not built)", p.zero_stage)
        if m.is_moe and p.tp > 1 and not p.sequence_parallel:
            raise ConfigError(_SPEC, "parallel.sequence_parallel", "true for a mixture-of-experts model with "
                              "parallel.tp > 1 (Megatron-Core requires it)", False)
        if p.etp is not None and p.expert_tp != p.tp and not m.is_moe:
            raise ConfigError(_SPEC, "parallel.etp", f"null or parallel.tp={p.tp} for a dense model "
                              "(model.num_experts is 0)", p.etp)
        if m.is_moe and p.expert_tp == p.tp and (m.moe_ffn_hidden_size % p.tp or m.shared_ffn_size % p.tp):
            raise ConfigError(_SPEC, "parallel.tp", "a divisor of model.moe_ffn_hidden_size (experts are "
                              "split over TP like the dense MLP)", p.tp)
        if m.is_moe and p.expert_tp != p.tp:
            if m.moe_ffn_hidden_size % p.expert_tp:
                raise ConfigError(_SPEC, "parallel.etp", f"a divisor of model.moe_ffn_hidden_size="
                                  f"{m.moe_ffn_hidden_size} (experts are split over ETP)", p.etp)
            if m.shared_ffn_size % p.tp:
                raise ConfigError(_SPEC, "parallel.tp", "a divisor of the shared experts' width (they are "
                                  "split over TP like the dense MLP)", p.tp)
        if s.num_gpus != p.num_gpus:
            raise ConfigError(_SPEC, "system.num_gpus",
                              f"tp x pp x dp x cp = {p.tp}x{p.pp}x{p.dp}x{p.cp} = {p.num_gpus}", s.num_gpus)
        if p.sequence_parallel and (m.seq_length // p.cp) % p.tp:
            # Megatron-Core splits the sequence over the TP ranks (tensor_parallel/mappings.py
            # _split_along_first_dim: "First dimension of the tensor should be divisible by tensor
            # parallel size")
            raise ConfigError(_SPEC, "model.seq_length",
                              f"a multiple of parallel.tp x parallel.cp = {p.tp * p.cp} under sequence parallelism "
                              "(each TP rank keeps an equal share of a context-parallel rank's tokens)",
                              m.seq_length)
        if self.dtype not in SIMULATED_DTYPES:
            raise ConfigError(_SPEC, "dtype", f"one of {[d.value for d in SIMULATED_DTYPES]} ({NOT_SIMULATED_DTYPES})",
                              self.dtype.value)
        if not s.gpu.supports(self.dtype):
            raise ConfigError(_SPEC, "dtype", f"a format {s.gpu.name} supports", self.dtype.value)

    @property
    def keeps_bf16_layers(self) -> bool:
        """Whether some transformer layers run their linear layers in BF16 while the rest
        run in the workload's low-precision ``dtype``."""
        return self.dtype in LOW_PRECISION and (self.num_layers_at_start_in_bf16 > 0
                                                or self.num_layers_at_end_in_bf16 > 0)

    def is_bf16_layer(self, layer: int) -> bool:
        """Whether transformer layer ``layer`` (0-based, over the whole model) is one of those
        (Megatron-LM ``get_fp4_context``/``get_fp8_context``: ``layer_no <
        num_layers_at_start_in_bf16`` or ``layer_no >= num_layers - num_layers_at_end_in_bf16``)."""
        return self.keeps_bf16_layers and (layer < self.num_layers_at_start_in_bf16
                                           or layer >= self.model.num_layers - self.num_layers_at_end_in_bf16)

    def virtual_stage_layers(self) -> tuple[range, ...]:
        """The layers of each virtual pipeline stage (``chunk x pp + stage``), in order."""
        counts = self.parallel.layer_counts(self.model.num_layers, self.model.mtp_num_layers)
        assert counts is not None  # __post_init__ rejects a split that leaves a stage no layers
        out, start = [], 0
        for n in counts:
            out.append(range(start, start + n))
            start += n
        return tuple(out)

    def layer_recompute(self, layer: int) -> RecomputeKind:
        """The recomputation of transformer layer ``layer`` (0-based, over the whole model):
        :meth:`ParallelSpec.recompute_at` of its place in its model chunk."""
        for rng in self.virtual_stage_layers():
            if layer in rng:
                return self.parallel.recompute_at(layer - rng.start)
        raise IndexError(f"layer {layer} of a {self.model.num_layers}-layer model")

    def stage_layers(self, stage: int) -> int:
        """How many layers pipeline stage ``stage`` holds over all its chunks."""
        vs = self.virtual_stage_layers()
        return sum(len(vs[c * self.parallel.pp + stage]) for c in range(self.parallel.virtual_pipeline_stages))

    @property
    def pipeline_message_bytes(self) -> float:
        """What one rank sends a neighbouring pipeline stage for a micro-batch, an activation or
        its gradient: the stage's output, ``seq_length / cp x micro_batch_size x hidden_size``
        16-bit values (``pipeline_dtype``, the parameters' dtype), over TP where sequence
        parallelism splits the sequence or Megatron-LM's scatter/gather sends a chunk a rank
        (:attr:`ParallelSpec.pipeline_scatter_gather`); else whole from every TP rank.

        >>> from sim.hardware import get_gpu
        >>> m = ModelSpec("gpt", 4, 1024, 8, 8, 4096, 32000, 2048)
        >>> whole = WorkloadSpec("w", m, ParallelSpec(tp=4, pp=2, micro_batch_size=1, global_batch_size=8),
        ...                      SystemSpec(get_gpu("H100"), 8))
        >>> whole.pipeline_message_bytes / 2**20  # MiB
        4.0
        >>> from dataclasses import replace
        >>> replace(whole, parallel=replace(whole.parallel, sequence_parallel=True)).pipeline_message_bytes / 2**20
        1.0
        """
        p, m = self.parallel, self.model
        whole = m.seq_length // p.cp * p.micro_batch_size * m.hidden_size * 2.0
        return whole / p.tp if p.sequence_parallel or p.pipeline_scatter_gather else whole

    @property
    def tokens_per_iteration(self) -> int:
        return self.parallel.global_batch_size * self.model.seq_length
