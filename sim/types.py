"""The enums that name kinds of things past the config boundary.

YAML holds strings; :mod:`sim.config` turns each into one of these enums with ``Kind(value)``
and, on failure, a :class:`~sim.errors.ConfigError` listing ``[k.value for k in Kind]``. No code
below the config boundary compares strings.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum, IntEnum
from typing import TypeVar


class Dtype(str, Enum):
    """Number format of the matrix multiplies (the workload's ``dtype``).

    FP32 and TF32 name the GPUs' peaks (:mod:`sim.hardware`); nothing is simulated in them
    (:data:`SIMULATED_DTYPES`)."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"


SIMULATED_DTYPES: tuple[Dtype, ...] = (Dtype.BF16, Dtype.FP16, Dtype.FP8, Dtype.MXFP8, Dtype.NVFP4)
"""The formats a training workload (``dtype``, ``llmsim whatif generations --dtype``) and an
inference run (``--dtype``) may name; the GPU must have the format's tensor cores too.

Each is mixed precision as Megatron-LM, torchtitan and TensorRT-LLM run it: 16-bit weights
and activations between the matrix multiplies (BF16 or FP16; FP8 and FP4 only inside the
GEMMs, their inputs cast), FP32 gradient accumulation and optimizer state
(:mod:`sim.memory`). FP32 and TF32 are refused when the input is read, exit status 2, as
nothing below can price them:

* memory and communication: weights are :data:`sim.memory.WEIGHT_BYTES` = 2 and every
  activation, pipeline message and tensor-parallel collective is ``ACT_DTYPE`` = BF16
  (:mod:`sim.workload.layers`); the activation terms of Korthikanti et al. (arXiv
  2205.05198, Table 2) count 2-byte tensors and 1-byte dropout masks. FP32 training holds
  4-byte weights and activations and no FP32 master copy (Megatron-LM's ``FP32Optimizer``),
  so every one of these terms changes;
* attention: the fused kernels measured (FlashAttention-2, cuDNN's through Transformer
  Engine) take FP16/BF16 inputs only ("Datatype fp16 and bf16", Dao-AILab/flash-attention
  README); FP32 runs the unfused attention's batched GEMMs and softmax;
* GEMMs: no FP32 or TF32 cuBLAS sweep is measured here (:mod:`sim.hardware` holds BF16 and
  FP8/FP4 curves). Published single points exist for A100 (FP32 SGEMM 18.9 of 19.5 TFLOP/s,
  Yinghan-Li/YHs_Sample#4; TF32 10240^3 in 17 ms, 126 of 156 TFLOP/s, PaddlePaddle/Paddle#30612),
  none for Hopper or Blackwell.

Megatron-LM without ``--bf16``/``--fp16`` trains in FP32 (:mod:`sim.config.megatron_args`
refuses it, naming those flags), and in two formats at once: Megatron-LM does not turn on TF32
(no ``allow_tf32`` under ``megatron/`` at NVIDIA/Megatron-LM ``d98e8a6``) and PyTorch's
``torch.backends.cuda.matmul.allow_tf32`` is off by default since 1.12 (PyTorch docs, "CUDA
semantics", TF32), so its PyTorch matmuls run in FP32 on the CUDA cores; but Transformer
Engine's linear layers, Megatron-Core's default, run an all-FP32 GEMM as
``CUBLAS_COMPUTE_32F_FAST_TF32`` ("Use TF32 only for pure FP32 GEMM",
NVIDIA/TransformerEngine ``transformer_engine/common/gemm/cublaslt_gemm.cu``), on the tensor
cores.
"""

NOT_SIMULATED_DTYPES = ("fp32 and tf32 are not simulated: llmsim models mixed precision, 16-bit weights and "
                        "activations; see sim.types.SIMULATED_DTYPES")
"""Why a format outside :data:`SIMULATED_DTYPES` is refused, as error messages say it."""


def dtype_names(dtypes: Iterable[Dtype]) -> str:
    """The formats' names as help texts list them.

    >>> dtype_names(SIMULATED_DTYPES)
    'bf16, fp16, fp8, mxfp8, nvfp4'
    """
    return ", ".join(d.value for d in dtypes)


class ScheduleKind(str, Enum):
    """Pipeline schedule (Narayanan et al. 2021, arXiv 2104.04473, Sec. 2.2)."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved-1f1b"
    ZB_H1 = "zb-h1"
    """Zero-bubble H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241,
    Sec. 3.1): 1F1B with each backward split into the input-gradient pass B, which the
    previous stage waits for, and the weight-gradient pass W, which nothing waits for."""


class RecomputeKind(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022, arXiv 2205.05198)."""

    NONE = "none"
    SELECTIVE = "selective"
    """Megatron's: recompute the attention core (scores, softmax, dropout) in the backward."""
    SELECTIVE_OP = "selective-op"
    """torchtitan's op-level policy (``selective_ac_option = 'op'``): keep the outputs of every
    other matmul and of the attention kernel, recompute everything else."""
    FULL = "full"


class RecomputeModule(str, Enum):
    """A submodule Megatron-Core's selective recomputation re-runs in the backward
    (``--recompute-granularity selective --recompute-modules ...``; ``TransformerConfig.recompute_modules``,
    ``megatron/core/transformer/transformer_config.py`` @ d98e8a6, default ``["core_attn"]``).

    ``core_attn``, ``mlp`` and ``shared_experts`` checkpoint the submodule (its input kept, its
    inside recomputed); ``moe_act``, ``layernorm`` and ``mla_up_proj`` discard their output after
    its consumer ran and recompute it before that consumer's backward
    (``CheckpointWithoutOutput``). Megatron-Core's ``moe`` (the whole MoE layer, its all-to-alls
    again) and the experimental ``gdn_*``, ``gdp_*`` and ``mhc`` are not modelled."""

    CORE_ATTN = "core_attn"
    """The attention core (scores, softmax, dropout; the fused kernel's forward)."""
    MOE_ACT = "moe_act"
    """The routed experts' activation function (its output, the second expert GEMM's input)."""
    LAYERNORM = "layernorm"
    """The input and pre-MLP norms (their outputs, the next linears' inputs)."""
    MLA_UP_PROJ = "mla_up_proj"
    """Multi-latent attention's query and key/value up-projections and their rotary parts."""
    MLP = "mlp"
    """A dense layer's MLP."""
    SHARED_EXPERTS = "shared_experts"
    """A MoE layer's shared experts."""


UNMODELLED_RECOMPUTE_MODULES = ("moe", "gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc")
"""Megatron-Core's other ``recompute_modules`` choices (``TransformerConfig.recompute_modules``
@ d98e8a6), refused when read: the whole MoE layer with its all-to-alls, and the experimental
ones."""


def recompute_module_names(modules: Iterable[RecomputeModule]) -> list[str]:
    """``modules`` by name, sorted: how reports, notes and errors show a set of them."""
    return sorted(m.value for m in modules)


class ScalingRecipe(str, Enum):
    """How 8-bit training finds its scales (NVIDIA Transformer Engine's recipes)."""

    DELAYED = "delayed"
    """Per-tensor scales from an amax history, computed inside the cast."""
    CURRENT = "current"
    """Per-tensor scales from the tensor itself: an amax pass over each input before its cast."""
    BLOCK = "block"
    """Per-block scales computed inside the cast (MXFP8, NVFP4)."""


class GpuGeneration(str, Enum):
    """A GPU's architecture generation (NVIDIA's names): the unit llmsim's validation residuals
    are grouped by where they give a prediction its interval (:mod:`sim.studies.intervals`)."""

    AMPERE = "Ampere"
    HOPPER = "Hopper"
    BLACKWELL = "Blackwell"


class HostCpu(str, Enum):
    """The CPU that issues a GPU's kernels: an x86 server CPU (DGX and HGX systems' Xeons and
    EPYCs) or NVIDIA's Arm Grace, which the GB200 and GB300 superchips pair with their GPUs
    (:data:`sim.hardware.GRACE_HOST_TIME_FACTOR`)."""

    X86 = "x86"
    GRACE = "Grace"


class AttentionKernel(str, Enum):
    """Which fused attention kernel a framework runs (their speeds differ by ~2x on Hopper)."""

    VENDOR = "vendor"
    """The fastest the GPU's vendor library offers: cuDNN fused attention as Transformer Engine
    (Megatron-Core, NeMo) selects it on Hopper and later; FlashAttention-2 on Ampere."""
    FLASH2 = "flash2"
    """FlashAttention-2 as PyTorch's ``scaled_dot_product_attention`` runs it by default (its
    backend priority puts FlashAttention first, cuDNN after)."""
    FLASH1 = "flash1"
    """The first FlashAttention (Dao et al. 2022): the flash-attn package before 2.0, PyTorch's
    ``scaled_dot_product_attention`` before 2.2, and the Triton FlashAttention of
    ``flash_attn_triton.py`` (MosaicML llm-foundry's ``attn_impl: triton``), about half
    FlashAttention-2's rate (:data:`sim.hardware.FLASH1_RATE`)."""


class NormKind(str, Enum):
    """A model's normalization (``model.normalization``), which decides its eager kernels
    (:mod:`sim.workload.eager`)."""

    LAYERNORM = "layernorm"
    """LayerNorm (GPT, MPT; Megatron-LM's default ``--normalization LayerNorm``): eagerly, ATen's
    native ``layer_norm``, one kernel forward."""
    RMSNORM = "rmsnorm"
    """RMSNorm (Llama): eagerly, the tensor code Llama implementations write (torchtitan's
    ``RMSNorm._norm``), one kernel per op."""


class LossKind(str, Enum):
    """How the cross entropy over the vocabulary is computed, which decides its memory."""

    FUSED = "fused"
    """Megatron's vocab-parallel cross entropy, fused (``--cross-entropy-loss-fusion``, its native
    implementation) or not: fp32 logits, the softmax saved and turned into the gradient in
    place (``megatron/core/tensor_parallel/cross_entropy.py``). The fp32 copy is made while the
    16-bit logits are alive (``calculate_logits_max``: ``vocab_parallel_logits.float()``), and
    the fp32 gradient is cast back to them beside itself, so the loss holds the 16-bit logits
    on top of the fp32 ones (:attr:`sim.memory.ActivationModel.loss_transient`)."""
    TE = "te"
    """Transformer Engine's cross entropy (Megatron-Core ``--cross-entropy-loss-fusion
    --cross-entropy-fusion-impl te``, Megatron-Bridge's recipes): one Triton kernel reads the
    16-bit logits, writes their gradient over them in the forward and saves them
    (``transformer_engine/pytorch/cross_entropy.py``, ``triton/cross_entropy.py``
    ``cross_entropy_forward``), so the loss holds the 16-bit logits and nothing beside them."""
    FLASH_ATTN = "flash-attn"
    """flash-attn's cross entropy (``flash_attn.losses.cross_entropy.CrossEntropyLoss``,
    llm-foundry's ``fused_crossentropy``): one Triton kernel on the 16-bit logits, which it
    saves with their log-sum-exp; its backward writes the gradient into a new tensor of their
    size (``torch.empty_like(logits)`` unless ``inplace_backward``)."""
    TORCH_FP32 = "torch-fp32"
    """``torch.nn.functional.cross_entropy(logits.float(), labels)`` as torchtitan calls it
    (``torchtitan/components/loss.py``): the fp32 log-softmax is saved, and its backward holds
    the incoming gradient and the result beside it, each fp32 and vocabulary-wide. Under TP > 1
    it is PyTorch's loss parallel on vocabulary-sharded logits, whose backward is tensor code
    holding one more (:attr:`sim.memory.ActivationModel.loss_transient`)."""


class CpCommType(str, Enum):
    """How context parallelism exchanges the sequence for attention: Megatron-LM's
    ``--cp-comm-type`` (``megatron/training/arguments.py``), which Megatron-Core hands to
    Transformer Engine's ``attn_forward_func_with_cp``
    (``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``)."""

    P2P = "p2p"
    """Ring attention (``AttnFuncWithCPAndKVP2P``): ``cp`` steps, the next K/V chunk sent
    around the ring while a step computes; the backward also passes the K/V gradients."""
    ALL_GATHER = "all_gather"
    """``AttnFuncWithCPAndKVAllGather``: K and V all-gathered over the CP group before the
    attention (and again in the backward), their gradients reduce-scattered after it."""
    A2A = "a2a"
    """DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509; ``AttnFuncWithCPAndQKVOA2A``):
    all-to-alls turn sequence-sharded Q, K, V into head-sharded full sequences before the
    attention, and the output back after it."""
    A2A_P2P = "a2a+p2p"
    """Hierarchical: all-to-all over the first level of
    ``--hierarchical-context-parallel-sizes``, ring attention over the second."""
    TORCH = "torch"
    """PyTorch's experimental ``context_parallel`` (``torch.distributed.tensor.experimental``,
    the CP of torchtitan): ring attention over SDPA with K/V all-gathered once, per-step
    outputs merged by eager fp32 ops, K/V gradients passed around the ring in fp32
    (:mod:`sim.workload.context_parallel`)."""


class ZeroImpl(str, Enum):
    """How a ZeRO implementation issues its collectives (``parallel.zero_impl``): at stage 3,
    FSDP's or DeepSpeed 0.3's (:mod:`sim.workload.deepspeed_zero3`); at stage 1, whether the
    sharded optimizer's gradients are reduce-scattered (:attr:`FSDP`, the default: Megatron's
    distributed optimizer, DeepSpeed's ZeRO optimizer) or all-reduced (:attr:`DEEPSPEED_BF16`)."""

    FSDP = "fsdp"
    """One coalesced all-gather of a layer's 16-bit weights, prefetched a layer ahead and
    overlapped with compute, and one reduce-scatter of its gradients (PyTorch FSDP2,
    torchtitan, Megatron-Core's FSDP; Zhao et al. 2023, arXiv 2304.11277, Sec. 3.3)."""
    DEEPSPEED_0_3 = "deepspeed-0.3"
    """DeepSpeed v0.3.x stage 3 (ZeRO-3's first public releases, March-June 2021): one
    all-gather per parameter tensor, after a device-wide synchronize, that the module waits
    for; one reduce-scatter per parameter tensor in fp16; both through PyTorch's tensor-list
    collectives (a view and a copy per rank)."""
    DEEPSPEED_BF16 = "deepspeed-bf16"
    """DeepSpeed's bf16 optimizer (``BF16_Optimizer``, which DeepSpeed's engine picks for a BF16
    model with fp32 gradient accumulation at ZeRO stage 1, and under pipeline parallelism at
    stage 0; ``DeepSpeedEngine._do_optimizer_sanity_check``): it keeps the fp32 gradients of
    every local weight and all-reduces them whole after the backward (the pipeline engine's
    ``_exec_reduce_grads`` -> ``_bf16_reduce_grads`` -> ``buffered_allreduce_fallback``), each
    rank steps its partition of the fp32 master weights and Adam state, then the 16-bit weights
    are all-gathered (``update_lp_params`` -> ``all_gather_dp_groups``): ZeRO-1's memory with an
    all-reduce's traffic for the gradients."""


class AdamImpl(str, Enum):
    """How the optimizer's Adam step runs (``kernels.adam_impl``; :mod:`sim.workload.step_passes`
    prices each)."""

    FUSED = "fused"
    """One multi-tensor kernel reading the fp32 weight, gradient and two moments and writing the
    weight, the moments and the 16-bit model weight (Apex's and Transformer Engine's FusedAdam,
    which Megatron-LM, NeMo and DeepSpeed run)."""
    FOREACH = "foreach"
    """PyTorch's ``torch.optim.AdamW(foreach=True)`` (``_multi_tensor_adamw``): eight foreach
    passes over fp32 tensors, each reading and writing its operands (torchtitan's default,
    ``--optimizer.fused`` off)."""


class RopeImpl(str, Enum):
    """How the model's code applies the rotary embedding (``kernels.rope_impl``), which decides
    what ``torch.compile`` can make of it (:meth:`sim.workload.layers.LayerBuilder.rope`)."""

    FUSED = "fused"
    """One kernel each for the query and the key, reading and writing it: Megatron-Core's and
    Transformer Engine's fused RoPE (``apply_rope_fusion``), or real-valued code (Hugging
    Face's ``rotate_half``) that ``torch.compile`` fuses into one Triton kernel."""
    COMPLEX = "complex"
    """torchtitan's Llama (``torchtitan/models/llama/model.py``, ``apply_rotary_emb``):
    ``torch.view_as_complex(xq.float().reshape(..., -1, 2)) * freqs_cis`` in complex64, then
    ``view_as_real(...).flatten(3).type_as(xq)``, and ``repeat_kv`` expanding K and V to every
    query head before SDPA. TorchInductor does not generate code for complex tensors
    (``torch/_inductor/lowering.py``, ``unsupported_input_tensor``: "Torchinductor does not
    support code generation for complex operators. Performance may be worse than eager."), so
    under ``torch.compile`` the complex multiply stays an ATen kernel and the casts on either
    side of it stay kernels of their own, and the repeated K and V are written out for SDPA,
    an external kernel that reads them from memory: profiled in a compiled torchtitan layer on
    our H100 (``benchmarks/device/results/h100-sxm5-80gb-2026-11-26-eager-layer.json``, case
    ``llama31_8b_b2_s8192_compiled``: 674 us of rotary and K/V copies a layer forward, 677 us
    backward, against 113 us each for a fused RoPE)."""


class FsdpCopies(str, Enum):
    """What a ZeRO-3/FSDP implementation copies around its per-layer collectives on the compute
    stream (``kernels.fsdp_copies``; :mod:`sim.workload.dataparallel` prices them)."""

    NONE = "none"
    """Nothing: the gathered weights land where the layer reads them and the gradients are
    reduced where the backward wrote them (PyTorch FSDP1's flat parameter, whose module
    parameters are views of its gathered buffer; Megatron-Core's buffers). FSDP1 casts and
    pre-divides the gradients on its post-backward stream, beside the compute: not priced."""
    FSDP2 = "fsdp2"
    """PyTorch FSDP2 (``fully_shard``), which keeps each parameter in storage of its own
    (``torch/distributed/_composable/fsdp/_fsdp_collectives.py``; ``fsdp/_fully_shard/`` from
    2025): the all-gather's input is a copy of the rank's shards cast to the 16-bit parameter
    dtype (``foreach_all_gather``: ``torch._foreach_copy_`` on the copy-in stream); after the
    all-gather, ``foreach_all_gather_copy_out`` copies the gathered buffer into each parameter
    (``torch.split_with_sizes_copy`` on the compute stream, read and written once); before the
    reduce-scatter, ``foreach_reduce`` copies the layer's 16-bit gradients into one
    reduce-scatter input in the reduce dtype (``torch._chunk_cat``, widening bf16 to fp32),
    which the compute stream waits for before it goes on. Under pipeline parallelism with
    gradient sync off until the last micro-batch, each micro-batch's 16-bit gradient is added
    into an unsharded one upcast to the reduce dtype (``FSDPParam.to_accumulated_grad_if_needed``,
    ``accumulate_unsharded_grad_if_needed``)."""


class PipelineBuffers(str, Enum):
    """What a pipeline runtime holds of each micro-batch at the boundaries of a pipeline stage
    (``kernels.pipeline_buffers``): the received input, the received output gradient and the
    stage's output. :func:`sim.memory.activation_peak_bytes` counts them under PP > 1."""

    IN_FLIGHT = "in-flight"
    """Only for the micro-batches in flight, as Megatron-Core's schedules hold them
    (``megatron/core/pipeline_parallel/``): each receive allocates its tensor
    (``p2p_communication._communicate``: ``torch.empty``), which the stage's first layer keeps
    as its input; a stage's output is freed to one element once sent (``schedules.py``
    ``deallocate_output_tensor``, on with ``deallocate_pipeline_outputs``, which Megatron-LM
    sets); the last stage's output is the loss."""
    TORCH = "torch"
    """PyTorch's ``torch.distributed.pipelining`` (``PipelineStage``, ``stage.py``) from
    pytorch/pytorch#164329 (October 2025): one receive buffer a micro-batch for the stage's input
    (``_prepare_forward_infra``) and one for its output's gradient (``_prepare_backward_infra``),
    allocated once and kept; a stage's output held from its forward to its backward
    (``fwd_cache``); the last stage's outputs, the logits, kept until the step ends
    (``output_chunks``, which ``step`` merges and returns)."""
    TORCH_2024 = "torch-2024"
    """The same as PyTorch's nightly builds of late 2024 ran it (torchtitan's benchmarks): every
    stage, not the last alone, keeps its outputs until the step ends (``forward_one_chunk``:
    ``self.output_chunks.append(output)``, limited to the last stage by pytorch/pytorch#153383,
    May 2025), and each input's gradient stays on its receive buffer until the next step
    (``stage_backward`` reads ``val.grad``; ``clear_runtime_states`` sets it to None, before
    pytorch/pytorch#164329 released it once sent)."""


class StepPass(str, Enum):
    """A bandwidth-bound pass an iteration makes over the gradients or the optimizer's master
    weights beside the Adam kernel itself (``kernels.step_passes``; each stack lists its
    release's, :mod:`sim.workload.step_passes` prices them)."""

    ZERO_GRAD_BUFFER = "zero-grad-buffer"
    """The contiguous gradient buffer is zeroed before the first micro-batch: one write of it
    (Megatron-LM's ``zero_grad_buffer``, ``buffer_.zero()`` / ``grad_data.zero_()``)."""
    GRAD_NAN_CHECK = "grad-nan-check"
    """The norm of each gradient bucket before its data-parallel reduction: one read of the
    buffer (Megatron-Core DDP's ``check_for_nan_in_grad``)."""
    GRAD_DIVIDE = "grad-divide"
    """The buffer divided by the data-parallel size before its all-reduce, at any size: one
    read and one write (Megatron-LM 2021-2022 ``allreduce_gradients``:
    ``buffer_.data /= get_data_parallel_world_size()``)."""
    GRAD_DIVIDE_DP = "grad-divide-dp"
    """The same division where the data-parallel group (with context parallelism) has more
    than one rank (Megatron-Core DDP's ``gradient_scaling_factor`` without
    ``average_in_collective``; a factor of 1 is skipped)."""
    CLIP_GRAD_NORM = "clip-grad-norm"
    """The gradient norm for clipping: one read of the optimizer shard's gradients."""
    MASTER_COPY = "master-copy"
    """The fp32 master weights copied into the model's 16-bit weights after the step
    (Megatron's ``_copy_main_params_to_model_params``): one read of the fp32 shard (the
    16-bit write is in the Adam step's bytes)."""


class MemoryAccess(str, Enum):
    """How a bandwidth-bound kernel walks memory, which sets the share of HBM bandwidth it
    reaches (PyTorch's elementwise kernels: ``aten/src/ATen/native/cuda/Loops.cuh``)."""

    STREAM = "stream"
    """Contiguous inputs and output of one dtype: the vectorized kernel (and the fused kernels
    of Transformer Engine or ``torch.compile``)."""
    UPCAST = "upcast"
    """A copy into a wider dtype (``x.float()`` of bf16): ``unrolled_elementwise_kernel``."""
    BROADCAST_LAST = "broadcast-last"
    """An operand broadcast along the rows (``x * weight``): the strided ``elementwise_kernel``."""
    BROADCAST_ROW = "broadcast-row"
    """One value per row broadcast across it (``x * rstd``, ``mean``'s backward)."""
    STRIDED = "strided"
    """A copy out of an expanded, strided view (``repeat_kv``'s ``reshape``)."""


class OpKind(str, Enum):
    """What a task does; the report's ``compute_s`` is keyed by the compute kinds."""

    GEMM = "gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    NORM = "norm"
    EMBEDDING = "embedding"
    LOSS = "loss"
    OPTIMIZER = "optimizer"
    COLLECTIVE = "collective"
    P2P = "p2p"
    HOST = "host"
    """No kernel: the GPU waiting for its host to issue the next one (serving,
    :mod:`sim.inference.host`)."""

    @property
    def is_comm(self) -> bool:
        return self in (OpKind.COLLECTIVE, OpKind.P2P)


class CommClass(str, Enum):
    """Which parallel dimension a communication belongs to (the report's ``exposed_comm_s``)."""

    TP = "tp"
    PP = "pp"
    DP = "dp"
    CP = "cp"
    EP = "ep"


class CollectiveKind(str, Enum):
    """Collective operations, with nccl-tests' names (NVIDIA/nccl-tests doc/PERFORMANCE.md)."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    SEND_RECV = "send-recv"
    RING_EXCHANGE = "ring-exchange"
    """Every rank of the group sends to the next and receives from the previous at once
    (nccl-tests' ``sendrecv``): one step of ring attention's K/V rotation."""


class CommKernel(str, Enum):
    """What runs a collective on its GPUs, which decides the SMs it takes from compute
    (:func:`sim.costs.comm.kernel_sms`)."""

    NCCL = "nccl"
    """An NCCL kernel: one CTA per channel, each on an SM of its own
    (:func:`sim.costs.comm.nccl_ctas`)."""
    USERBUFFERS = "userbuffers"
    """Transformer Engine's userbuffers under Megatron-LM's ``--tp-comm-overlap``: copy-engine
    p2p copies (ring exchange) or a kernel on a configured number of SMs (bulk, pipeline);
    :mod:`sim.workload.tp_overlap`."""
    SYMMETRIC_MEMORY = "symmetric-memory"
    """PyTorch's symmetric-memory p2p copies under torchtitan's async TP (copy engines)."""
    DEEPEP = "deepep"
    """DeepEP's dispatch and combine kernels (a mixture-of-experts layer's token exchange under
    :attr:`MoeDispatcher.DEEPEP`), on ``Buffer.num_sms`` SMs."""
    HYBRIDEP = "hybridep"
    """NVIDIA's HybridEP kernels (DeepEP's ``HybridEPBuffer``; :attr:`MoeDispatcher.HYBRIDEP`),
    on Megatron-Core's ``--moe-hybridep-num-sms`` SMs."""


class MoeDispatcher(str, Enum):
    """How a mixture-of-experts layer sends its tokens to the experts' ranks and their outputs
    back: Megatron-Core's ``--moe-token-dispatcher-type`` and, for ``flex``,
    ``--moe-flex-dispatcher-backend`` (``megatron/core/transformer/moe/token_dispatcher.py``,
    ``fused_a2a.py``)."""

    ALLTOALL = "alltoall"
    """``MoEAlltoAllTokenDispatcher``: the tokens permuted by expert (one copy per token and
    chosen expert) and exchanged by one NCCL all-to-all over the EP group."""
    DEEPEP = "deepep"
    """The flex dispatcher on DeepEP (``fused_dispatch`` / ``fused_combine``): a token goes once
    to each rank holding one of its experts, and across scale-up domains once to each domain,
    to the GPU of the same local index there, which forwards it over NVLink (DeepSeek-V3
    technical report, arXiv 2412.19437, Sec. 3.2.2; deepseek-ai/DeepEP's normal kernels)."""
    HYBRIDEP = "hybridep"
    """The flex dispatcher on HybridEP (``HybridEPDispatch``): the same deduplicated, two-level
    exchange as DeepEP's, inter-domain over RDMA and intra-domain over NVLink."""


class TpOverlapMethod(str, Enum):
    """How Transformer Engine's userbuffers overlap one GEMM's TP communication
    (``initialize_ub``'s ``method``; :mod:`sim.workload.tp_overlap`)."""

    RING_EXCHANGE = "ring_exchange"
    PIPELINE = "pipeline"
    BULK = "bulk"


class CollectiveAlgorithm(str, Enum):
    """How a collective is run on the topology (NCCL's ``NCCL_ALGO``, plus the plans kept for
    comparison); :func:`sim.costs.comm.plan_comm` documents each."""

    AUTO = "auto"
    """Price the candidates NCCL would consider and take the fastest, as NCCL's tuner does."""
    RING = "ring"
    """One ring over the whole group (one channel)."""
    MULTI_RING = "multi-ring"
    """NCCL's ring algorithm across scale-up domains: one ring per channel, rail-matched."""
    TREE = "tree"
    """NCCL's double binary tree across nodes, a chain inside each (all-reduce)."""
    NVLS = "nvls"
    """NVLink SHARP: the NVSwitch reduces and multicasts (all-reduce inside one domain)."""
    NVLS_TREE = "nvls-tree"
    """NVLink SHARP inside each domain, a double binary tree between them (all-reduce across
    NVLS domains)."""
    PAT = "pat"
    """NCCL's Parallel Aggregated Trees (all-gather, reduce-scatter with one rank per node)."""
    HIERARCHICAL = "hierarchical"
    """Reduce-scatter inside each domain, the collective across, all-gather inside."""


class NcclProtocol(str, Enum):
    """NCCL's wire protocols (``NCCL_PROTO``); :mod:`sim.costs.nccl_protocol` prices them."""

    LL = "LL"
    """8-byte lines, 4 of data and a 4-byte flag: the lowest latency, a fraction of the bandwidth."""
    LL128 = "LL128"
    """128-byte lines, 120 of data and 8 of flags: most of the bandwidth, a middle latency."""
    SIMPLE = "Simple"
    """Plain copies and a memory fence per chunk: all of the bandwidth, the highest latency."""


class NodeKind(str, Enum):
    """What a node of a topology graph is (:mod:`sim.topology.build`, :mod:`sim.topology.fabrics`;
    a GraphML file's nodes other than GPUs and NICs read as switches)."""

    GPU = "gpu"
    NVSWITCH = "nvswitch"
    NIC = "nic"
    LEAF = "leaf"
    SPINE = "spine"
    ROUTER = "router"
    SWITCH = "switch"


class LinkKind(str, Enum):
    """What a topology link is: it sets the routing weight (:data:`sim.topology.fabrics.
    HOP_WEIGHT`) and what counts as one scale-up domain."""

    NVLINK = "nvlink"
    PCIE = "pcie"
    NETWORK = "network"


class Stream(IntEnum):
    """A GPU's in-order execution queues; the value is the trace thread id."""

    COMPUTE = 7
    TP_COMM = 21
    PP_SEND = 22
    """Activations sent to the next pipeline stage."""
    PP_RECV = 23
    """Activations received from the previous pipeline stage."""
    DP_COMM = 24
    PP_SEND_GRAD = 25
    """Gradients sent to the previous pipeline stage."""
    PP_RECV_GRAD = 26
    """Gradients received from the next pipeline stage."""
    DP_GATHER = 27
    """ZeRO-3 / FSDP parameter all-gathers (prefetched one layer ahead)."""
    CP_COMM = 28
    """Context parallelism's K/V ring exchanges."""
    EP_COMM = 29
    """Expert parallelism's token dispatch and combine (all-to-all)."""
    DP_REPLICATE = 30
    """Hybrid sharding's all-reduce of a reduce-scattered gradient shard across the replicas
    (FSDP2's ``all_reduce_stream``, which waits for the reduce-scatter stream)."""

    @property
    def label(self) -> str:
        return {
            Stream.COMPUTE: "compute",
            Stream.TP_COMM: "tp-comm",
            Stream.PP_SEND: "pp-send",
            Stream.PP_RECV: "pp-recv",
            Stream.DP_COMM: "dp-comm",
            Stream.PP_SEND_GRAD: "pp-send-grad",
            Stream.PP_RECV_GRAD: "pp-recv-grad",
            Stream.DP_GATHER: "dp-gather",
            Stream.CP_COMM: "cp-comm",
            Stream.EP_COMM: "ep-comm",
            Stream.DP_REPLICATE: "dp-replicate",
        }[self]


_E = TypeVar("_E", bound=Enum)


ENUM_ALIASES: dict[str, dict[str, str]] = {
    "Dtype": {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8hybrid": "fp8", "fp8e4m3": "fp8",
              "e4m3": "fp8", "float8": "fp8"},
    "ScheduleKind": {"interleaved": "interleaved-1f1b", "1f1binterleaved": "interleaved-1f1b",
                     "interleaved1f1b": "interleaved-1f1b", "virtualpipeline": "interleaved-1f1b",
                     "onefoneb": "1f1b", "pipedreamflush": "1f1b", "zerobubble": "zb-h1"},
    "RecomputeKind": {"no": "none", "off": "none", "fullrecompute": "full", "selectiverecompute": "selective"},
    "NetworkFabric": {"infiniband": "infiniband-fat-tree", "ib": "infiniband-fat-tree", "rocev2": "roce"},
}
"""Other spellings of enum values, by enum class name, in compact form (lower case, without
spaces, hyphens and underscores): the names papers and frameworks give the same thing (PyTorch's
``bfloat16``, Transformer Engine's ``HYBRID`` FP8 format of E4M3 forward and E5M2 backward;
"interleaved" pipelining; PipeDream-Flush, which is 1F1B, Narayanan et al. 2021 Sec. 2.2.1; a
fabric named only "InfiniBand", which the case format's ``infiniband-fat-tree`` stands for, and
RoCE v2)."""


def compact_name(text: str) -> str:
    """``text`` in lower case without spaces, hyphens and underscores: how names the user
    writes are compared (``Interleaved 1F1B`` and ``interleaved-1f1b``, ``h100 sxm5 80gb`` and
    ``H100-SXM5-80GB`` are one name).

    >>> compact_name(" Learned-Absolute "), compact_name("RMS_Norm")
    ('learnedabsolute', 'rmsnorm')
    """
    return "".join(ch for ch in text.lower() if ch not in " \t-_")


def _spelled(kind: type[_E], value: object) -> _E | None:
    """The member of ``kind`` that ``value`` names in another case or spacing, or by one of its
    :data:`ENUM_ALIASES`; None: none."""
    if not isinstance(value, str):
        return None
    compact = compact_name(value)
    for member in kind:
        if compact_name(str(member.value)) == compact:
            return member
    alias = ENUM_ALIASES.get(kind.__name__, {}).get(compact)
    return None if alias is None else kind(alias)


def parse_enum(kind: type[_E], value: object, path: str, field: str, allowed: Iterable[_E] | None = None,
               why_not: str = "") -> _E:
    """Turn a YAML string into ``kind``, or raise a ConfigError listing the valid values.

    ``allowed`` narrows the valid values to those members (default: all of ``kind``); a member
    outside them is refused with ``why_not`` after the list.

    A string is also read in any case and with or without spaces, hyphens and underscores, or
    as one of :data:`ENUM_ALIASES`:

    >>> parse_enum(ScheduleKind, "1f1b", "w.yaml", "parallel.schedule")
    <ScheduleKind.ONE_F_ONE_B: '1f1b'>
    >>> parse_enum(ScheduleKind, "Interleaved 1F1B", "w.yaml", "parallel.schedule").value, parse_enum(Dtype, "BF16", "w.yaml", "dtype").value
    ('interleaved-1f1b', 'bf16')
    >>> parse_enum(Dtype, "fp32", "w.yaml", "dtype", SIMULATED_DTYPES, "not simulated")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: w.yaml: dtype: expected one of ['bf16', 'fp16', 'fp8', 'mxfp8', 'nvfp4'] (not simulated) (got 'fp32')
    """  # noqa: E501 (the doctest's expected exception line is one line)
    from sim.errors import ConfigError

    valid = list(kind) if allowed is None else list(allowed)
    try:
        member = kind(value)
    except ValueError:
        member = _spelled(kind, value)
    if member is not None and member in valid:
        return member
    expected = f"one of {[k.value for k in valid]}"
    if member is not None and why_not:
        expected += f" ({why_not})"
    raise ConfigError(path, field, expected, value)
