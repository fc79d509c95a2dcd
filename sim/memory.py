"""Memory per GPU: weights, gradients, optimizer state, activations and other buffers.

The closed forms here are shared by the task-graph builder, which attaches them to tasks as
allocations and frees (so the engine's timeline carries a memory counter), and by
``llmsim memory``, which walks the same pipeline schedule without timing it. Because the
memory deltas sit only on the compute stream, which runs in program order, the walk's peak
equals the simulated timeline's peak for every schedule.

References
----------
Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
arXiv 2205.05198, Sec. 4 and Table 2 (activations per layer), Sec. 4.3 (pipeline stages).
Rajbhandari et al. 2020, "ZeRO", arXiv 1910.02054, Sec. 3.1 and 5 (mixed-precision Adam is
2 + 2 + 12 bytes per parameter; stages 1, 2 and 3 shard optimizer state, gradients, weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.types import LossKind, NormKind, PipelineBuffers, RecomputeKind, RecomputeModule, ScheduleKind, ZeroImpl
from sim.units import byte_count
from sim.workload.context_parallel import cp_transient_bytes
from sim.workload.deepspeed_zero3 import layer_tensors
from sim.workload.kernels import OPTIMIZER_BYTES, KernelsSpec
from sim.workload.quantization import LOW_PRECISION, quantized_bytes
from sim.workload.schedules import Pass, pipeline_order, steady_pairs
from sim.workload.spec import ModelSpec, ParallelSpec, WorkloadSpec

__all__ = ["WEIGHT_BYTES", "GRAD_BYTES", "OPTIMIZER_BYTES", "StateBytes", "ActivationModel", "StageMemory",
           "stage_params", "state_bytes", "layer_activation_bytes", "recompute_module_bytes", "activation_model",
           "stage_memory", "memory_table", "CUBLAS_WORKSPACE_BYTES", "activation_peak_bytes", "other_bytes",
           "BoundaryHolds", "boundary_bytes", "boundary_holds", "receive_buffer_bytes"]

WEIGHT_BYTES = 2.0
"""16-bit model weights."""
GRAD_BYTES = 4.0
"""fp32 gradient accumulation buffer (Megatron-LM keeps ``main_grad`` in fp32 under bf16:
``arguments.py``, 'bfloat16 requires gradient accumulation and all-reduce to be performed in
fp32'); 2 bytes without ``grad_reduce_in_fp32`` (:attr:`~sim.workload.kernels.KernelsSpec.grad_bytes`)."""
CUBLAS_WORKSPACE_BYTES = 8 * 4 * 2**20
"""cuBLAS workspace PyTorch allocates per stream by default (``CUBLAS_WORKSPACE_CONFIG``
``:4096:8``, eight 4 MiB chunks; PyTorch docs, "Reproducibility")."""
FSDP_ACCUMULATED_GRAD_BYTES = 4.0
"""Bytes per parameter of the unsharded gradients FSDP2 accumulates across micro-batches when
gradient sync is off: upcast to the reduce dtype, fp32 (PyTorch
``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``, ``to_accumulated_grad_if_needed``;
torchtitan ``parallelism.mixed_precision_reduce`` default ``"float32"``)."""
ZERO3_PREFETCH_LAYERS = 2
"""Layers whose full 16-bit weights a ZeRO-3/FSDP rank holds at once: the one computing and
the one prefetched (FSDP2's default forward prefetch of one module)."""
DEEPSPEED_LIVE_TENSORS = 3
"""Parameter-sized 16-bit tensors DeepSpeed v0.3's ZeRO-3 holds whole at once, each as large as
a layer's largest weight: it gathers and releases one submodule's parameters at a time
(``fetch_sub_module``, ``release_sub_module``; :mod:`sim.workload.deepspeed_zero3`), not a
layer's, so while a module's backward runs it holds that module's gathered weight and its
full fp16 gradient until the gradient's own reduce-scatter (``_reduce_scatter_gradient``), and
the layer's last module stays gathered from the recomputed forward into the backward
(``max_reuse_distance``)."""


@dataclass(frozen=True)
class StateBytes:
    """Model state of one GPU: weights, gradients and optimizer state, in bytes."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    params: float
    """Parameters whose state this GPU holds before any ZeRO sharding."""
    expert_params: float = 0.0
    """Of which routed experts (sharded over the expert-data-parallel group)."""

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes


def layer_split(model: ModelSpec, layer: int = 0) -> tuple[int, int]:
    """(parameters split over TP, parameters every TP rank holds) of one layer, its routed
    experts left out (:meth:`ModelSpec.expert_params`; they are split over TP and EP).

    Megatron-LM splits the QKV, projection and MLP weights (and the column-parallel biases)
    over TP and replicates the two norms and the row-parallel biases (Shoeybi et al. 2019,
    arXiv 1909.08053, Sec. 3), a MoE layer's router and MLA's down-projections."""
    h = model.hidden_size
    replicated = 4 * h + 2 * h  # two norms (weight, bias), two row-parallel biases
    if model.is_moe_layer(layer):
        replicated += h * model.num_experts  # the router
    # MLA's down-projections and latent norms are whole on every TP rank (Megatron-Core)
    replicated += sum(o * i for _, o, i, split in model.attention_gemms() if not split)
    if model.is_mla:
        replicated += model.q_lora_rank + model.kv_lora_rank
    return model.layer_params(layer) - model.expert_params(layer) - replicated, replicated


def _stage_layer_indices(model: ModelSpec, parallel: ParallelSpec, stage: int) -> list[int]:
    counts = parallel.layer_counts(model.num_layers, model.mtp_num_layers)
    assert counts is not None  # the workload's spec checks the split
    starts = [sum(counts[:i]) for i in range(len(counts))]
    return [starts[vs] + j for c in range(parallel.virtual_pipeline_stages)
            for vs in [c * parallel.pp + stage] for j in range(counts[vs])]


def stage_expert_params(model: ModelSpec, parallel: ParallelSpec, stage: int) -> float:
    """Routed-expert parameters held by one GPU of ``stage``: its ``E / ep`` experts of each
    MoE layer, split over the experts' TP degree (``etp``, by default ``tp``; Megatron-Core
    ``--expert-tensor-parallel-size``)."""
    layers = _stage_layer_indices(model, parallel, stage)
    if stage == parallel.pp - 1:  # the multi-token-prediction layers (ModelSpec.mtp_num_layers)
        layers += [model.mtp_layer] * model.mtp_num_layers
    return sum(model.expert_params(i) for i in layers) / (parallel.expert_tp * parallel.ep)


def stage_params(model: ModelSpec, parallel: ParallelSpec, stage: int) -> float:
    """Parameters held by one GPU of pipeline stage ``stage`` (Megatron's division).

    Layers are split over the stages by :meth:`~sim.workload.spec.ParallelSpec.layer_counts`, their
    matrices over ``tp``; the first stage
    holds the input embedding (and a learned position embedding, whole) and the last the
    output layer (a second copy when tied and ``pp > 1``), each split over ``tp`` by vocabulary.
    The last also holds the multi-token-prediction modules (:attr:`~sim.workload.spec.ModelSpec.
    mtp_num_layers`): a layer each, split as the decoder's, ``eh_proj`` split over ``tp``
    (column-parallel), three norms whole, and, when ``pp > 1`` and the embedding is untied, a
    copy of the word embedding (Megatron-Core's ``GPTModel`` builds ``self.embedding`` where
    ``pre_process or mtp_process``).
    """
    params = stage_expert_params(model, parallel, stage)
    for i in _stage_layer_indices(model, parallel, stage):
        split, replicated = layer_split(model, i)
        params += split / parallel.tp + replicated
    emb = model.embedding_params() / parallel.tp
    if stage == 0:
        params += model.input_embedding_params(parallel.tp)
    if stage == parallel.pp - 1:
        if parallel.pp > 1 or not model.tied_embeddings:
            params += emb
        params += 2 * model.hidden_size  # final norm
        n = model.mtp_num_layers
        if n:
            split, replicated = layer_split(model, model.mtp_layer)
            params += n * ((split + model.mtp_proj_params()) / parallel.tp + replicated + model.mtp_norm_params())
            if parallel.pp > 1 and not model.tied_embeddings:
                params += emb
    return params


def state_bytes(model: ModelSpec, parallel: ParallelSpec, stage: int, *, kernels: KernelsSpec) -> StateBytes:
    """Weights, gradients and optimizer state of one GPU of stage ``stage`` (gradients of
    ``kernels.grad_bytes`` each, optimizer state of ``kernels.optimizer_bytes``).

    ZeRO-1 (Megatron's distributed optimizer) shards the optimizer state over the
    data-parallel ranks, ZeRO-2 the gradients as well, ZeRO-3 (FSDP) the weights too. Routed
    experts are sharded over their own expert-data-parallel group, ``tp x cp x dp / (etp x
    ep)`` ranks (``ep`` times smaller than the ``dp-cp`` group when ``etp = tp``).

    Under hybrid sharding (``parallel.dp_shard``) each of the ``dp / dp_shard`` replicas holds
    the whole state, so it is divided by the shard group, ``dp_shard x cp`` ranks (experts: the
    expert-data-parallel degree over the replicas), instead of ``dp x cp``: Megatron-LM's
    distributed optimizer shards over ``intra_distributed_optimizer_instance_size``
    (``param_and_grad_buffer.py``), FSDP2 over the shard dimension of its 2-D mesh.
    """
    p = stage_params(model, parallel, stage)
    ex = stage_expert_params(model, parallel, stage)
    # CP ranks hold the same weights (dp-cp group); replicas of a shard group hold the same state
    z, dp = parallel.zero, parallel.shard_group_size
    edp = parallel.expert_shard_group_size

    def sharded(per_param: float, level: int) -> float:
        return (p - ex) * per_param / (dp if z >= level else 1) + ex * per_param / (edp if z >= level else 1)

    return StateBytes(sharded(WEIGHT_BYTES, 3), sharded(kernels.grad_bytes, 2), sharded(kernels.optimizer_bytes, 1),
                      p, ex)


def layer_activation_bytes(model: ModelSpec, parallel: ParallelSpec, recompute: RecomputeKind | None = None,
                           moe: bool = False, *, kernels: KernelsSpec, input_bytes: float = 2.0) -> float:
    """Activation bytes one layer stores for one micro-batch until its backward (its
    attention's scores as ``kernels.flash_attention`` says).

    Korthikanti et al. 2022 (Sec. 4.1, Table 2) count, for 16-bit activations and ``t``-way
    TP: ``10 sbh`` outside the TP regions (two norm inputs and two linear inputs of ``2sbh``,
    two dropout masks of ``sbh``; none without dropout, ``model.hidden_dropout`` 0, as
    :class:`~sim.workload.spec.ModelSpec` says), divided by ``t`` under sequence parallelism; ``8 sbh / t``
    in attention (Q and K, V, the attention output); ``16 sbh / t`` in the MLP (the first
    projection's output and the activation's output, ``4h`` wide); and ``5 a s^2 b / t`` for
    the softmax, its dropout mask and output. Generalised here, deriving each term as the
    paper does:

    * GQA: Q and the attention output are ``q = heads x head_dim`` wide, K and V
      ``kv = kv_heads x head_dim``: ``sb (4q + 4kv) / t``.
    * gated MLP (SwiGLU): the first projection outputs both branches, ``2f`` wide, and the
      activation output is ``f`` wide: ``6 sbf / t`` (``4 sbf / t`` ungated, which is the
      paper's ``16 sbh / t`` at ``f = 4h``).
    * flash attention keeps no ``s x s`` tensor, only the fp32 log-sum-exp per query row,
      ``4 b (a/t) s``; selective recomputation then saves nothing more.
    * selective recomputation drops the ``5 a s^2 b / t`` term; full recomputation stores
      only the layer input, ``2 sbh`` (``/ t`` with sequence parallelism).
    * context parallelism stores every token-wise term for ``s / cp`` tokens.
    * multi-head latent attention keeps Q, K, V and the output as above (its kernel
      ``head_dim`` is the mean of the query/key and value head widths) and the normed query
      and key/value latents, ``2 sb (q_lora + kv_lora + rope)``, on every TP rank.
    * a mixture-of-experts layer (``moe=True``) replaces the MLP term: each of the ``k`` routed
      copies of a token keeps its expert input (``2h``, gathered over TP) and its expert's
      ``6f / t`` (``4f / t`` ungated), padded by the capacity factor; the rank's own ``sb / t``
      tokens keep the expert outputs for the weighted combine (``2kh``) and the fp32 router
      logits and probabilities (``8E``); shared experts add a dense MLP term. With expert
      tensor parallelism (``etp != t``) the experts keep ``sb / t x etp`` tokens' copies
      (those of the rank's ETP group) at ``6f / etp``. Under the
      op-level policy the grouped expert GEMMs are not ``aten.mm`` and are recomputed.
    * ``input_bytes``: bytes per element of the input each linear keeps for its weight
      gradient, 2 in 16-bit training. Where a low-precision linear keeps its quantized copy
      instead (:attr:`~sim.workload.kernels.KernelsSpec.quantized_saved_inputs`;
      :func:`~sim.workload.quantization.quantized_bytes` of the format), the two norm outputs
      and the activation output the linears read are kept at ``input_bytes`` and are not kept
      in 16 bits, while the attention output the output projection reads is kept in 16 bits
      by the attention for its own backward *and* quantized by the projection: ``(6 + 2 i) sbh``
      outside (``(4 + 2 i) sbh`` without dropout masks; ``/ t`` under sequence parallelism),
      ``i sbq / t`` more in attention and ``(4 + i) sbf / t`` in a gated MLP (``(2 + i)``
      ungated), ``i = input_bytes``; a routed expert keeps its quantized input (``i h`` for each
      copy of a token). The layers a recipe keeps in BF16 (``num_layers_at_start_in_bf16``) are counted as the others.
    * torchtitan's op-level policy (``selective-op``) keeps the layer input, the outputs of
      every other matmul in forward order (``wq``, ``wv``, ``w1``, ``w2`` of a SwiGLU layer;
      the row-parallel ones are ``sbh`` partial sums before their reduction) and the attention
      output with its log-sum-exp (``torchtitan/models/llama3/parallelize_llama.py``,
      ``_save_list``: "Saves output of all compute ops, except every second mm").

    >>> from sim.workload.spec import ModelSpec, ParallelSpec
    >>> m = ModelSpec("gpt3", 96, 12288, 96, 96, 49152, 51200, 2048)
    >>> from sim.workload.kernels import KernelsSpec
    >>> p = ParallelSpec(tp=8, pp=8, sequence_parallel=True, global_batch_size=64)
    >>> k = KernelsSpec(flash_attention=False)
    >>> sbh = 2048 * 12288
    >>> rcs = (RecomputeKind.NONE, RecomputeKind.SELECTIVE, RecomputeKind.FULL)
    >>> [round(layer_activation_bytes(m, p, rc, kernels=k) / sbh, 2) for rc in rcs]   # Table 2
    [14.25, 4.25, 0.25]
    """
    rc = parallel.recompute if recompute is None else recompute
    s, b, h, t = model.seq_length // parallel.cp, parallel.micro_batch_size, model.hidden_size, parallel.tp
    sb = s * b
    sp = parallel.sequence_parallel
    if rc is RecomputeKind.FULL:
        return 2.0 * sb * h / (t if sp else 1)
    if rc is RecomputeKind.SELECTIVE_OP:
        kept = op_sac_saved_widths(model, t)[:2] if moe else op_sac_saved_widths(model, t)
        lse = 4.0 * b * model.num_attention_heads / t * s
        return 2.0 * sb * h / (t if sp else 1) + 2.0 * sb * (sum(kept) + model.q_size / t) + lse
    ib, quantized = input_bytes, input_bytes != 2.0
    masks = 2.0 if model.dropout_masks else 0.0
    outside = (4.0 + masks + 2.0 * ib) * sb * h / (t if sp else 1)
    attention = sb * (4.0 * model.q_size + 4.0 * model.kv_size) / t
    if quantized:  # the output projection's quantized copy beside the attention's 16-bit output
        attention += ib * sb * model.q_size / t
    if model.is_mla:  # Q, K, V and the output are as above (head_dim is the qk/v mean); the
        # normed latents feeding the up-projections are kept whole on every TP rank
        attention += 2.0 * sb * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
    per_width = (4.0 if model.gated_mlp else 2.0) + ib
    if moe:
        k, cf = model.moe_top_k, model.moe_capacity_factor or 1.0
        te = parallel.expert_tp  # the experts see the tokens of their ETP group, split etp ways
        sbe = sb if te == t else sb / t * te
        mlp = (sbe * k * cf * (ib * h + per_width * model.moe_ffn_hidden_size / te)
               + sb / t * (2.0 * k * h + 8.0 * model.num_experts)
               + sb * model.shared_ffn_size * per_width / t)
    else:
        mlp = sb * model.ffn_hidden_size * per_width / t
    heads = model.num_attention_heads / t
    selective = rc is RecomputeKind.SELECTIVE
    if kernels.flash_attention:
        scores = 4.0 * b * heads * s
    else:
        core = selective and RecomputeModule.CORE_ATTN in parallel.recompute_modules
        scores = 0.0 if core else 5.0 * heads * s * s * b
    saved = sum(recompute_module_bytes(model, parallel, moe, input_bytes=ib)) if selective else 0.0
    return outside + attention + mlp + scores - saved


def recompute_module_bytes(model: ModelSpec, parallel: ParallelSpec, moe: bool = False, *,
                           input_bytes: float = 2.0) -> tuple[float, float]:
    """What the submodules of ``parallel.recompute_modules`` other than the attention core no
    longer keep from a layer's forward to its backward, in bytes for one micro-batch:
    ``(MLP side, attention side)``, the terms of :func:`layer_activation_bytes` they drop.

    Each is recomputed just before the backward that reads it (Megatron-Core's
    ``CheckpointWithoutOutput`` frees an output's storage once its consumer has run and refills
    it before the consumer's backward; ``tensor_parallel.checkpoint`` keeps a submodule's input
    and re-runs it), so the MLP side's tensors live again while the MLP's backward runs and the
    attention side's while the attention's does (:func:`activation_model` holds the larger as
    the layer's transient):

    * ``layernorm``: a norm's output, the linear input ``i sbh`` (``/ t`` under sequence
      parallelism), where the norm is a module of its own: Megatron-Core recomputes
      ``input_layernorm`` and ``pre_mlp_layernorm`` only when they are not ``IdentityOp``
      (``transformer_layer.py`` @ d98e8a6), and its Transformer Engine layers fuse a norm into
      the linear it feeds (``TELayerNormColumnParallelLinear``) except before a MoE layer's
      router and experts (the pre-MLP norm) and before MLA's two down-projections (the input
      norm), so a dense layer saves nothing;
    * ``mlp``: a dense layer's MLP inside, ``per_width sbf / t`` (its input stays);
    * ``moe_act``: the routed experts' activation output, ``i f`` for each routed copy;
    * ``shared_experts``: the shared experts' inside, as ``mlp``;
    * ``mla_up_proj``: multi-latent attention's up-projected query, key and value (with their
      rotary parts), ``sb (2q + 4kv) / t``; the attention output stays.
    """
    mods = parallel.recompute_modules
    s, b, h, t = model.seq_length // parallel.cp, parallel.micro_batch_size, model.hidden_size, parallel.tp
    sb = s * b
    ib = input_bytes
    per_width = (4.0 if model.gated_mlp else 2.0) + ib
    norm = ib * sb * h / (t if parallel.sequence_parallel else 1)
    before = at = 0.0
    if RecomputeModule.LAYERNORM in mods:
        before += norm if moe else 0.0
        at += norm if model.is_mla else 0.0
    if RecomputeModule.MLP in mods and not moe:
        before += sb * model.ffn_hidden_size * per_width / t
    if moe and RecomputeModule.MOE_ACT in mods:
        k, cf, te = model.moe_top_k, model.moe_capacity_factor or 1.0, parallel.expert_tp
        sbe = sb if te == t else sb / t * te
        before += sbe * k * cf * ib * model.moe_ffn_hidden_size / te
    if moe and RecomputeModule.SHARED_EXPERTS in mods:
        before += sb * model.shared_ffn_size * per_width / t
    if RecomputeModule.MLA_UP_PROJ in mods and model.is_mla:
        at += sb * (2.0 * model.q_size + 4.0 * model.kv_size) / t
    return before, at


def _eager_torchtitan(model: ModelSpec, kernels: KernelsSpec, moe: bool) -> bool:
    """Whether the layer is torchtitan's Llama layer run eagerly (no ``torch.compile``: each
    norm, rotary and SwiGLU op its own kernel and its own saved tensors): eager, gated, RMSNorm
    or a norm not stated."""
    return (not kernels.fused_elementwise and model.gated_mlp and kernels.flash_attention and not moe
            and not model.is_mla and model.norm is not NormKind.LAYERNORM)


def eager_layer_bytes(model: ModelSpec, parallel: ParallelSpec) -> tuple[float, float]:
    """``(stored without recomputation, backward working set)`` of one eager torchtitan Llama
    layer for one micro-batch, from the tensors its autograd keeps (torchtitan
    ``models/llama/model.py``, December 2024), per token:

    * each RMSNorm on ``x.float()``: the fp32 input its ``pow`` and ``mul`` save (``4h``) and the
      BF16 normed output the weight's ``mul`` saves, which the next linears share (``2h``): ``12h``
      for the two;
    * attention: SDPA (FlashAttention-2) saves Q, the K and V ``repeat_kv`` expanded to every
      query head, and its output (``8q``) with the fp32 log-sum-exp (``4 heads``); ``wo`` saves
      the contiguous copy of the output (``2q``). The rotary product saves only the
      frequencies (no gradient flows to them);
    * SwiGLU: ``silu`` saves ``w1``'s output, the product saves ``silu``'s output and ``w3``'s
      output, ``w2`` saves the product: ``8f``.

    So ``12h + 10q + 8f`` bytes and ``4 heads`` (``q``, ``f`` and the heads divided by TP, the
    norms' ``h`` too under sequence parallelism), against the ``10h + 4q + 4kv + 6f`` of
    Megatron's fused layer. The backward's working set on top of what it recomputes: the
    gradients of SwiGLU's two inputs, held together (``2 x 2f``), and the fp32 gradient of a
    norm's input (``4h``).

    Measured on our H100 (``benchmarks/device/memory_layer.py``, Llama 3.1 8B layers, results
    ``h100-sxm5-80gb-2026-11-27-memory-layer.json``): stored without recomputation 3.25 GiB at
    2 x 8192 tokens (this gives 3.13), the backward's transient under torchtitan's op-level
    policy 3.14 GiB (3.29) and under full recomputation at 32768 tokens 8.68 GiB (8.52).
    Without recomputation the backward releases saved tensors as it goes, and its measured
    transient (0.58 GiB) is less than the working set: not modelled (0).
    """
    s, b, h, t = model.seq_length // parallel.cp, parallel.micro_batch_size, model.hidden_size, parallel.tp
    sb = s * b
    div = t if parallel.sequence_parallel else 1
    q, f, heads = model.q_size / t, model.ffn_hidden_size / t, model.num_attention_heads / t
    stored = sb * (12.0 * h / div + 10.0 * q + 8.0 * f + 4.0 * heads)
    work = sb * (4.0 * f + 4.0 * h / div)
    return stored, work


def op_sac_saved_widths(model: ModelSpec, t: int) -> list[int]:
    """The matmul outputs torchtitan's op-level policy keeps: the 1st, 3rd, 5th... in forward
    order (its counter recomputes every second ``aten.mm``)."""
    return [out for _, out, _ in model.separate_matmuls(t)[0::2]]


@dataclass(frozen=True)
class ActivationModel:
    """What one micro-batch allocates on one GPU, by place in the model, in bytes."""

    layer_stored: float
    """Kept by each layer from its forward to its backward."""
    layer_transient: float
    """Held while one layer's backward runs: its recomputed activations under full
    recomputation, and what context parallelism's attention gathers or exchanges beyond ring
    attention (:func:`sim.workload.context_parallel.cp_transient_bytes`: the full-sequence
    K/V and their gradients of ``all_gather``, the all-to-all copies of ``a2a``)."""
    embedding: float
    """Kept by the first virtual stage: the embedding output's dropout mask (none without
    dropout)."""
    head: float
    """Kept by the last virtual stage: the final norm's and the output layer's inputs. Under
    PyTorch's tensor parallelism with its loss parallel (:attr:`loss_transient`), the output
    layer is ``ColwiseParallel(input_layouts=Shard(1))``, so its input is the final norm's
    output all-gathered over the sequence, and ``F.linear`` keeps it whole for the weight
    gradient: ``2 sbh`` beside the norm's ``2 sbh / t`` (torchtitan
    ``models/llama3/parallelize_llama.py``, ``apply_tp``)."""
    logits: float
    """Held by the last virtual stage from the loss to the output layer's backward: the fp32
    softmax that Megatron's vocab-parallel cross entropy saves for its backward
    (``megatron/core/tensor_parallel/cross_entropy.py``: ``save_for_backward(exp_logits, ...)``;
    the 16-bit logits are freed once the loss is computed), ``4 sbV / t``; PyTorch's fp32
    log-softmax, the same size; Transformer Engine's 16-bit logits turned into their gradient
    (:attr:`~sim.types.LossKind.TE`) and flash-attn's saved 16-bit logits, ``2 sbV / t``."""
    loss_transient: float = 0.0
    """Held on top at the loss: under Megatron's cross entropy the 16-bit logits beside their
    fp32 copy, in the forward (``calculate_logits_max``: ``vocab_parallel_logits.float()``
    while the caller holds the 16-bit tensor) and again in the backward, when autograd casts
    the fp32 gradient to the 16-bit input's dtype beside it (``2 sbV / t``); under flash-attn's
    the gradient its backward writes anew, the same size; nothing under Transformer Engine's.
    Under PyTorch's cross entropy on fp32 logits, the incoming gradient of the log-softmax and
    its result, each fp32 and vocabulary-wide (``8 sbV / t``). Under TP > 1 the
    logits are sharded over the vocabulary and PyTorch's loss parallel
    (``torch.distributed.tensor.parallel.loss_parallel``, torchtitan's default under TP)
    computes the two backwards as tensor code, ``_nll_loss_and_log_softmax_backward`` in
    ``torch/distributed/tensor/parallel/loss.py``: ``grad_input = torch.zeros_like(x)``, then
    ``(grad_input + torch.exp(x)) * grad_output``, which holds the zeros, the exponential and
    their sum (then the sum and the product) at once, three fp32 tensors: ``12 sbV / t``."""
    moe_layer_stored: float = 0.0
    moe_layer_transient: float = 0.0
    """The two layer terms for a mixture-of-experts layer."""
    loss_cached: float = 0.0
    """Held by PyTorch's caching allocator, unused, while the loss's backward runs, under
    PyTorch's cross entropy: the BF16 logits (``2 sbV / t``), freed before the backward
    (torchtitan's train step drops ``pred``), stay cached as a block half the size of each
    fp32 gradient the backward then asks for, which gets new memory. The allocator never hands
    cached memory back within the iteration, so the GPU needs it (an out-of-memory error
    counts it) and torchtitan's ``max_reserved`` logs it; later requests that fit reuse it.
    Measured on our H100 (``benchmarks/device/memory_layer.py``): reserved over allocated at
    the loss, 4.29 GiB at 2 x 8192 tokens and 8.91 at 32768 (this: 3.91 and 7.83)."""
    recompute_num_layers: int | None = None
    """Block recomputation (:attr:`~sim.workload.spec.ParallelSpec.recompute_num_layers`): the
    first ``N`` layers of each model chunk take the ``layer_`` and ``moe_layer_`` terms (full
    recomputation), the others the ``kept_`` terms (no recomputation). None: every layer the
    former."""
    kept_layer_stored: float = 0.0
    kept_layer_transient: float = 0.0
    kept_moe_layer_stored: float = 0.0
    kept_moe_layer_transient: float = 0.0
    """The layer terms of a layer block recomputation leaves alone (dense, then MoE)."""
    boundary: float = 0.0
    """What crosses a pipeline stage's boundary for one micro-batch: the 16-bit hidden state,
    sharded over the sequence under sequence parallelism (``2 sbh / t``); its gradient is the
    same size. What a pipeline runtime holds of it (:class:`~sim.types.PipelineBuffers`)."""
    last_output: float = 0.0
    """The last stage's output for one micro-batch: the 16-bit logits (``2 sbV / t`` under
    PyTorch's loss parallel), which ``torch.distributed.pipelining`` keeps until the step ends."""

    def recomputed(self, position: int) -> bool:
        """Whether the layer at ``position`` (0-based) in its model chunk takes the recomputed
        terms (:attr:`recompute_num_layers`)."""
        return self.recompute_num_layers is None or position < self.recompute_num_layers

    def stored(self, is_moe: bool, position: int = 0) -> float:
        """What a layer at ``position`` in its chunk keeps from its forward to its backward."""
        if not self.recomputed(position):
            return self.kept_moe_layer_stored if is_moe else self.kept_layer_stored
        return self.moe_layer_stored if is_moe else self.layer_stored

    def transient(self, is_moe: bool, position: int = 0) -> float:
        """What a layer at ``position`` in its chunk holds on top while its backward runs."""
        if not self.recomputed(position):
            return self.kept_moe_layer_transient if is_moe else self.kept_layer_transient
        return self.moe_layer_transient if is_moe else self.layer_transient


def activation_model(w: WorkloadSpec, recompute: RecomputeKind | None = None) -> ActivationModel:
    """The :class:`ActivationModel` of ``w`` (under ``recompute``, default the workload's).

    The workload's block recomputation (``parallel.recompute_num_layers``) holds under its own
    method: under it, the recomputed layers take full recomputation's terms and the others
    those without recomputation. Another method applies to every layer."""
    m, p, k = w.model, w.parallel, w.kernels
    rc = p.recompute if recompute is None else recompute
    n = p.recompute_num_layers if rc is p.recompute else None
    ib = quantized_bytes(w.dtype) if w.dtype in LOW_PRECISION and k.quantized_saved_inputs else 2.0
    sb, h, t = m.seq_length // p.cp * p.micro_batch_size, m.hidden_size, p.tp
    div = t if p.sequence_parallel else 1

    cp_held = cp_transient_bytes(m, p)

    def terms(moe: bool, rc: RecomputeKind = rc) -> tuple[float, float]:
        stored = layer_activation_bytes(m, p, rc, moe, kernels=k, input_bytes=ib)
        if _eager_torchtitan(m, k, moe):  # what eager autograd keeps (eager_layer_bytes)
            full, work = eager_layer_bytes(m, p)
            if rc is RecomputeKind.NONE:
                return full, cp_held
            if rc is RecomputeKind.FULL:
                return stored, full + work + cp_held
            if rc is RecomputeKind.SELECTIVE_OP:
                return stored, max(0.0, full - stored) + work + cp_held
        if rc is RecomputeKind.FULL:
            transient = layer_activation_bytes(m, p, RecomputeKind.NONE, moe, kernels=k, input_bytes=ib)
        elif rc is RecomputeKind.SELECTIVE_OP:  # the recomputed rest of one layer
            none = layer_activation_bytes(m, p, RecomputeKind.NONE, moe, kernels=k, input_bytes=ib)
            transient = max(0.0, none - stored)
        elif rc is RecomputeKind.SELECTIVE:  # a side's recomputed submodules (recompute_module_bytes)
            transient = max(recompute_module_bytes(m, p, moe, input_bytes=ib))
        else:
            transient = 0.0
        return stored, transient + cp_held

    stored, transient = terms(False)
    moe_stored, moe_transient = terms(True) if m.is_moe else (0.0, 0.0)
    kept = moe_kept = (0.0, 0.0)
    if n is not None:
        kept = terms(False, RecomputeKind.NONE)
        moe_kept = terms(True, RecomputeKind.NONE) if m.is_moe else (0.0, 0.0)
    logits = sb * m.vocab_size / t
    torch_loss = k.cross_entropy is LossKind.TORCH_FP32
    loss_parallel = torch_loss and t > 1  # PyTorch's loss parallel on vocabulary-sharded logits
    head = 2.0 * sb * h / div + (2.0 * sb * h if loss_parallel else 2.0 * sb * h / div)
    if torch_loss:
        loss_transient = (12.0 if loss_parallel else 8.0) * logits
    else:  # the 16-bit logits beside Megatron's fp32 copy, flash-attn's new gradient; TE: none
        loss_transient = 0.0 if k.cross_entropy is LossKind.TE else 2.0 * logits
    held = 4.0 * logits if k.cross_entropy in (LossKind.FUSED, LossKind.TORCH_FP32) else 2.0 * logits
    if m.mtp_num_layers:
        head, held, loss_transient = _with_mtp(w, rc if n is None else RecomputeKind.NONE, terms,
                                               head, held, loss_transient)
    embedding = sb * h / div if m.dropout_masks else 0.0  # the embedding dropout's mask
    # the BF16 logits, cached once freed, unless the pipeline runtime keeps them (PipelineBuffers)
    cached = 2.0 * logits if torch_loss and not _torch_pipeline(w) else 0.0
    return ActivationModel(stored, transient, embedding, head, held,
                           loss_transient, moe_stored, moe_transient, cached, recompute_num_layers=n,
                           kept_layer_stored=kept[0], kept_layer_transient=kept[1],
                           kept_moe_layer_stored=moe_kept[0], kept_moe_layer_transient=moe_kept[1],
                           boundary=boundary_bytes(m, p), last_output=2.0 * logits)


def _with_mtp(w: WorkloadSpec, rc: RecomputeKind, terms: Callable[[bool, RecomputeKind], tuple[float, float]],
              head: float, held: float, loss_transient: float) -> tuple[float, float, float]:
    """The last virtual stage's ``head``, ``logits`` and ``loss_transient`` terms with the
    multi-token-prediction modules (:attr:`~sim.workload.spec.ModelSpec.mtp_num_layers`),
    which run between the decoder and the loss, each with its own output layer and loss.

    Each module keeps, from its forward to its backward: its transformer layer's stored
    activations (under ``rc``: Megatron-Core's MTP block recomputes under full recomputation's
    ``uniform`` method, and not under ``block``, where it warns and skips, the caller passing
    no recomputation then; ``MultiTokenPredictionBlock._checkpointed_forward`` @ d98e8a6),
    the inputs of ``enorm`` and of ``eh_proj`` (``2 sbh`` and the ``4 sbh`` concatenation,
    sequence-sharded under sequence parallelism; recomputed under full recomputation, whose
    checkpoint starts at ``_concat_embeddings``), its final norm's and output layer's inputs
    (the decoder's ``head`` term) and its loss's fp32 softmax (the ``logits`` term).
    While its layer's backward runs it holds the layer's transient (and, under full
    recomputation, the recomputed inputs again); the loss term holds the larger of that and
    the loss's own, over the whole backward of the head, as the task graph holds it.
    """
    m, p = w.model, w.parallel
    n = m.mtp_num_layers
    sb, h = m.seq_length // p.cp * p.micro_batch_size, m.hidden_size
    div = p.tp if p.sequence_parallel else 1
    inputs = 6.0 * sb * h / div
    stored, transient = terms(m.is_moe_layer(m.mtp_layer), rc)
    if rc is RecomputeKind.FULL:
        transient += inputs
        inputs = 0.0
    return (head + n * (head + inputs + stored), held * (1 + n), max(loss_transient, transient))


def _combined_walk(w: WorkloadSpec, stage: int, am: ActivationModel, order: list[tuple[Pass, int, int]],
                   pairs: frozenset[int], vs_layers: tuple[range, ...]) -> float:
    """:func:`activation_peak_bytes` under the EP A2A overlap (``parallel.ep_overlap``): the
    forward passes at ``pairs`` (:func:`~sim.workload.schedules.steady_pairs`) run with the
    backward after them as one combined pass, in the order the task-graph builder issues it
    (``_RankProgram.combined_pass``): the forward's embedding and the backward's loss, then
    layer by layer the backward layer's transient, the forward layer's stored activations and
    the backward layer's release (a dense backward layer, which has no expert exchange to cut
    at, runs whole, and releases, before the forward layer's), the backward's leftover layers
    before the forward's, and last
    the forward's output layer and the backward's embedding. So a combined pass frees a
    backward layer's activations as it stores a forward layer's, where two passes in turn would
    hold a whole extra forward first."""
    p, m = w.parallel, w.model
    pp, v = p.pp, p.virtual_pipeline_stages
    last = pp * v - 1
    chunks = []
    for c in range(v):
        vs = c * pp + stage
        moe = [m.is_moe_layer(i) for i in vs_layers[vs]]
        chunks.append((vs, [am.stored(x, j) for j, x in enumerate(moe)],
                       [(am.transient(x, j), am.stored(x, j), x) for j, x in reversed(list(enumerate(moe)))],
                       boundary_holds(w, am, vs)))
    cur = peak = 0.0

    def forward_start(vs: int) -> None:
        nonlocal cur, peak
        if vs == 0:
            cur += am.embedding
            peak = max(peak, cur)

    def forward_end(vs: int, holds: BoundaryHolds) -> None:
        nonlocal cur, peak
        if vs == last:
            cur += am.head + am.logits
            peak = max(peak, cur)
        cur += holds.forward
        peak = max(peak, cur)

    def backward_start(vs: int) -> None:
        nonlocal cur, peak
        if vs == last:
            peak = max(peak, cur + am.loss_transient + am.loss_cached)
            cur -= am.logits + am.head

    def backward_end(vs: int, holds: BoundaryHolds) -> None:
        nonlocal cur
        if vs == 0:
            cur -= am.embedding
        cur += holds.backward

    skip = False
    for i, (pas, _mb, chunk) in enumerate(order):
        if skip:
            skip = False
            continue
        vs, fwd, back, holds = chunks[chunk]
        if i in pairs:  # this forward and the backward after it, combined
            bvs, _, bback, bholds = chunks[order[i + 1][2]]
            forward_start(vs)
            backward_start(bvs)
            for j in range(max(len(fwd), len(bback))):
                # a MoE layer's backward releases after the forward layer's stores (its last part,
                # ``pre``, runs after the forward's experts); a dense layer's, without expert
                # exchanges to cut at, is all its first part and releases before
                transient, stored, moe = bback[j] if j < len(bback) else (0.0, 0.0, False)
                cur += transient
                peak = max(peak, cur)
                if not moe:
                    cur -= transient + stored
                if j < len(fwd):
                    cur += fwd[j]
                peak = max(peak, cur)
                if moe:
                    cur -= transient + stored
            forward_end(vs, holds)
            backward_end(bvs, bholds)
            skip = True
        elif pas is Pass.FORWARD:
            forward_start(vs)
            cur += sum(fwd)
            peak = max(peak, cur)
            forward_end(vs, holds)
        else:
            backward_start(vs)
            for transient, stored, _ in back:
                peak = max(peak, cur + transient)
                cur -= stored
            backward_end(vs, holds)
    return peak


@dataclass(frozen=True)
class StageMemory:
    """The memory of one GPU of one pipeline stage at its peak, in bytes."""

    stage: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes
                + self.other_bytes)

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def to_dict(self) -> dict:
        b = byte_count
        return {"stage": self.stage, "weights_bytes": b(self.weights_bytes), "grads_bytes": b(self.grads_bytes),
                "optimizer_bytes": b(self.optimizer_bytes), "activations_bytes": b(self.activations_bytes),
                "other_bytes": b(self.other_bytes), "total_bytes": b(self.total_bytes),
                "capacity_bytes": b(self.capacity_bytes), "headroom_bytes": b(self.headroom_bytes), "fits": self.fits}


def activation_peak_bytes(w: WorkloadSpec, stage: int, am: ActivationModel,
                          order: list[tuple[Pass, int, int]] | None = None) -> float:
    """Peak activation bytes of a GPU of pipeline stage ``stage``, walking its schedule
    (``order``, from :func:`~sim.workload.schedules.pipeline_order` when not given).

    Allocations and frees happen in the order the task-graph builder issues them: a layer's
    stored activations at the start of its forward, freed at the end of its backward, where
    its transient activations are held; the embedding, head and logits terms on the first and
    last virtual stages. For 1F1B this is ``min(p - stage, m)`` micro-batches of ``L / p``
    layers (Korthikanti et al. 2022, Sec. 4.3). Each chunk's stored sum is taken once, since a
    design-space sweep walks tens of thousands of schedules.

    Under PP > 1 what the pipeline runtime holds at the stages' boundaries is counted too
    (:func:`boundary_holds`: nothing beyond the layers' terms under Megatron-Core; under
    ``torch.distributed.pipelining`` the stages' outputs and the last stage's logits); its
    receive buffers, allocated once, are among the other buffers (:func:`receive_buffer_bytes`).
    """
    p, m = w.parallel, w.model
    pp, v = p.pp, p.virtual_pipeline_stages
    vs_layers = w.virtual_stage_layers()
    last = pp * v - 1
    zb = p.schedule is ScheduleKind.ZB_H1
    if order is None:
        order = pipeline_order(p.schedule, pp, v, p.num_microbatches, stage, int(p.ep_overlap))
    if p.ep_overlap:
        pairs = frozenset(steady_pairs(p.schedule, pp, v, p.num_microbatches, stage, 1))
        if pairs:
            return _combined_walk(w, stage, am, order, pairs, vs_layers)
    chunks = []
    for c in range(v):
        vs = c * pp + stage
        moe = [m.is_moe_layer(i) for i in vs_layers[vs]]
        back = [(am.transient(x, j), am.stored(x, j)) for j, x in reversed(list(enumerate(moe)))]
        uniform = len(set(back)) <= 1
        chunks.append((vs, sum(am.stored(x, j) for j, x in enumerate(moe)), back, uniform,
                       boundary_holds(w, am, vs)))
    F, W = Pass.FORWARD, Pass.WEIGHT
    cur = peak = 0.0
    for pas, _mb, chunk in order:
        vs, stored, back, uniform, holds = chunks[chunk]
        # (``if x > peak: peak = x`` is ``peak = max(peak, x)``, without the call)
        if pas is F:
            if vs == 0:
                cur += am.embedding
            cur += stored
            if vs == last:
                cur += am.head + am.logits
            if cur > peak:
                peak = cur
            if holds.forward:
                cur += holds.forward
                if cur > peak:
                    peak = cur
        elif pas is W:
            cur -= stored
            cur += holds.weight
        else:
            if vs == last:
                x = cur + am.loss_transient + am.loss_cached
                if x > peak:
                    peak = x
                cur -= am.logits + am.head
            if uniform and back:
                # cur only falls along the chunk, so its first layer holds the highest sum
                x = cur + back[0][0]
                if x > peak:
                    peak = x
                if not zb:
                    s = back[0][1]
                    for _ in back:
                        cur -= s
            else:
                for transient, s in back:
                    x = cur + transient
                    if x > peak:
                        peak = x
                    if not zb:
                        cur -= s
            if vs == 0:
                cur -= am.embedding
            cur += holds.backward
    return peak


@dataclass(frozen=True)
class BoundaryHolds:
    """What a pipeline runtime holds beyond the layers' activations at a virtual stage's
    boundaries (:class:`~sim.types.PipelineBuffers`), as changes to the memory in use at the
    end of each of the stage's passes for one micro-batch, in bytes."""

    forward: float = 0.0
    backward: float = 0.0
    weight: float = 0.0
    """At the end of a forward, a backward (an input-gradient pass under zero bubble) and a
    weight pass."""


NO_HOLDS = BoundaryHolds()


def _torch_pipeline(w: WorkloadSpec) -> bool:
    """Whether ``w`` runs PP > 1 under ``torch.distributed.pipelining``'s buffers."""
    return w.parallel.pp > 1 and w.kernels.pipeline_buffers is not PipelineBuffers.IN_FLIGHT


def boundary_holds(w: WorkloadSpec, am: ActivationModel, vs: int) -> BoundaryHolds:
    """What the pipeline runtime holds at virtual stage ``vs``'s boundaries for a micro-batch
    (none under Megatron-Core's in-flight buffers, :attr:`~sim.types.PipelineBuffers.IN_FLIGHT`).

    Under ``torch.distributed.pipelining`` a stage's output (:attr:`ActivationModel.boundary`)
    is held from its forward to its backward (``fwd_cache``), the last stage's, the 16-bit
    logits (:attr:`ActivationModel.last_output`), until the step ends (``output_chunks``). The
    input a stage receives is its receive buffer (:func:`receive_buffer_bytes`), kept whatever
    the schedule, so the first layer's kept input, counted in the layers' terms, is handed back
    when the layer frees it. Under :attr:`~sim.types.PipelineBuffers.TORCH_2024` every stage
    keeps its outputs until the step ends, and each input's gradient stays on its receive
    buffer from the backward on (``stage_backward`` reads ``val.grad``)."""
    if not _torch_pipeline(w):
        return NO_HOLDS
    a, last = am.boundary, w.parallel.pp * w.parallel.virtual_pipeline_stages - 1
    forward = am.last_output if vs == last else a
    backward = weight = 0.0
    if vs != last and w.kernels.pipeline_buffers is PipelineBuffers.TORCH:
        backward -= a  # the output, dropped with fwd_cache at the backward
    if vs != 0:
        forward -= a  # the first layer's kept input is the receive buffer
        if w.parallel.schedule is ScheduleKind.ZB_H1:
            weight += a
        else:
            backward += a
        if w.kernels.pipeline_buffers is PipelineBuffers.TORCH_2024:
            backward += a  # the input's gradient, left on the receive buffer
    return BoundaryHolds(forward, backward, weight)


def boundary_bytes(m: ModelSpec, p: ParallelSpec) -> float:
    """What crosses a pipeline stage's boundary for one micro-batch: the 16-bit hidden state of
    its ``s / cp x b`` tokens, sharded over the sequence under sequence parallelism."""
    return 2.0 * (m.seq_length // p.cp) * p.micro_batch_size * m.hidden_size / (p.tp if p.sequence_parallel else 1)


def receive_buffer_bytes(w: WorkloadSpec, stage: int) -> float:
    """The receive buffers ``torch.distributed.pipelining`` allocates once for a GPU of pipeline
    stage ``stage``: for each of its virtual stages and each micro-batch, one for the input
    (but on the first stage) and one for the output's gradient (but on the last)
    (``PipelineStage._prepare_forward_infra``, ``_create_grad_recv_info``), each the 16-bit
    hidden state, sequence-sharded under sequence parallelism. None under Megatron-Core's."""
    if not _torch_pipeline(w):
        return 0.0
    p = w.parallel
    a = boundary_bytes(w.model, p)
    last = p.pp * p.virtual_pipeline_stages - 1
    ends = sum((vs != 0) + (vs != last) for vs in range(stage, last + 1, p.pp))
    return ends * p.num_microbatches * a


def other_bytes(w: WorkloadSpec, stage: int) -> float:
    """Buffers besides state and activations: the pipeline runtime's receive buffers
    (:func:`receive_buffer_bytes`), the sequence-parallel all-gather buffer, ZeRO-3's
    gathered weights (and, under pipelining, their unsharded gradients; under DeepSpeed v0.3,
    :data:`DEEPSPEED_LIVE_TENSORS` tensors of a layer's largest weight), the cuBLAS workspace."""
    m, p = w.model, w.parallel
    other = float(CUBLAS_WORKSPACE_BYTES) + receive_buffer_bytes(w, stage)
    if p.sequence_parallel:
        # Megatron-LM's global buffer for the gathered sequence (get_global_memory_buffer)
        other += 2.0 * m.seq_length // p.cp * p.micro_batch_size * m.hidden_size
    if p.zero >= 3:
        if p.pp > 1:
            # a pipeline stage keeps all its weights gathered (16-bit) across micro-batches,
            # and accumulates their gradients unsharded until the reduce-scatter after the
            # last micro-batch (FSDP2 under torch.distributed.pipelining: no resharding after
            # forward, gradient sync only on the last backward). FSDP2 upcasts the unsharded
            # gradient to the reduce dtype before accumulating it
            # (``FSDPParam.to_accumulated_grad_if_needed``), fp32 in torchtitan
            # (``mixed_precision_reduce = "float32"``)
            other += stage_params(m, p, stage) * (WEIGHT_BYTES + FSDP_ACCUMULATED_GRAD_BYTES) \
                * (1 - 1 / p.shard_group_size)
        elif p.zero_impl is ZeroImpl.DEEPSPEED_0_3:
            other += DEEPSPEED_LIVE_TENSORS * max(layer_tensors(m, 0, p.tp)) * WEIGHT_BYTES
        else:
            split, replicated = layer_split(m)
            other += ZERO3_PREFETCH_LAYERS * (split / p.tp + replicated) * WEIGHT_BYTES
    return other


def stage_memory(w: WorkloadSpec, stage: int, recompute: RecomputeKind | None = None) -> StageMemory:
    """The peak memory of one GPU of ``stage`` under ``recompute`` (default the workload's)."""
    sb = state_bytes(w.model, w.parallel, stage, kernels=w.kernels)
    act = activation_peak_bytes(w, stage, activation_model(w, recompute))
    return StageMemory(stage, sb.weights_bytes, sb.grads_bytes, sb.optimizer_bytes, act, other_bytes(w, stage),
                       w.system.gpu.hbm_capacity_bytes)


def memory_table(w: WorkloadSpec, methods: list[RecomputeKind]) -> dict[RecomputeKind, list[StageMemory]]:
    """Every stage's :class:`StageMemory` under each recomputation method."""
    return {rc: [stage_memory(w, s, rc) for s in range(w.parallel.pp)] for rc in methods}
