"""The software stack a workload runs on: its kernel and framework switches.

:class:`KernelsSpec` holds what a training framework's release chooses beside the parallel
strategy: which attention and loss kernels run, whether elementwise ops are fused, how weight
gradients are accumulated and in which precision, and the numerics mode. None of it is
parallelism: a run with the same ranks and schedule can take any of them. The software stacks
(:mod:`sim.config.stack`, ``workloads/stacks/*.yaml``) fill the switches a case leaves null;
a workload file gives them under ``kernels:`` or, as the published validation cases do, under
``parallel:`` (docs/workloads.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.types import AdamImpl, AttentionKernel, FsdpCopies, LossKind, PipelineBuffers, RopeImpl, StepPass

__all__ = ["KERNEL_KEYS", "MEGATRON_CORE_STEP_PASSES", "OPTIMIZER_BYTES", "REMAINDER_OPTIMIZER_BYTES", "KernelsSpec",
           "TE_GROUPED_GEMM_ISSUE_S"]

MEGATRON_CORE_STEP_PASSES = frozenset({StepPass.ZERO_GRAD_BUFFER, StepPass.GRAD_NAN_CHECK, StepPass.GRAD_DIVIDE_DP,
                                       StepPass.CLIP_GRAD_NORM, StepPass.MASTER_COPY})
"""Megatron-LM's training step with Megatron-Core's DDP and optimizer, at its defaults
(:mod:`sim.workload.step_passes`)."""


TE_GROUPED_GEMM_ISSUE_S = 0.267e-3 / 8
"""Host time Transformer Engine's grouped linear spends issuing one expert's GEMM, 33.4 us: its
multi-stream path (``nvte_multi_tensor_gemm`` -> ``multi_stream_cublas_gemm``) sets up and
launches a cuBLASLt GEMM an expert from the host, one after another, with the stream events
that spread them over its 4 compute streams. Transformer Engine's own benchmark of that path
(NVIDIA/TransformerEngine PR #3134, SM100, ``benchmarks/linear/benchmark_grouped_linear.py
--compare-nvfp4-grouped-gemm``, the "pure" rows: operands pre-swizzled, the GEMMs alone) took
0.267 ms for 8 experts of 128 tokens (N = K = 2048, forward), where one CUTLASS kernel of the
same GEMMs took 0.069 ms and llmsim prices their GPU time on four streams at 0.015 ms (GB200):
the call is the host's, 0.267 ms / 8 a GEMM. Set on the grouped GEMMs as
:attr:`~sim.workload.ops.GemmOp.issue_s` (``batch`` x this), a floor under their time; where
the experts' GEMMs are large the GPU takes longer and the floor is hidden. The PR does not name
its host's CPU; llmsim takes it as an x86 DGX host's, and a GPU whose kernels a Grace CPU issues
(GB200, GB300) pays it :data:`sim.hardware.GRACE_HOST_TIME_FACTOR` times over
(:func:`sim.costs.compute.issue_time_s`)."""

OPTIMIZER_BYTES = 12.0
"""Optimizer state per parameter: fp32 master weights and Adam's two moments (ZeRO, arXiv
1910.02054, Sec. 3.1: K = 12)."""
REMAINDER_OPTIMIZER_BYTES = 10.0
"""The same with the master weights kept as the 16 low bits the BF16 weights lack (2) beside
Adam's two fp32 moments (8): Apex's ``DistributedFusedAdam(store_param_remainders=True)``."""


@dataclass(frozen=True)
class KernelsSpec:
    """The kernel and framework switches of a run, with Megatron-LM's meanings.

    The defaults are current Megatron-Core with Transformer Engine: fused (cuDNN) attention,
    the fused vocab-parallel loss, fused elementwise kernels, gradient-accumulation fusion,
    gradients reduced in fp32, the asynchronous TP input-gradient all-reduce, Transformer
    Engine's bias-in-epilogue linears, and non-deterministic mode.
    """

    flash_attention: bool = True
    """Fused flash attention (Megatron-LM ``--use-flash-attn``, 2023 on); False runs the
    unfused core attention: score GEMM, softmax, dropout, value GEMM. Context parallelism
    needs it (:class:`~sim.workload.spec.WorkloadSpec` checks)."""
    attention_kernel: AttentionKernel = AttentionKernel.VENDOR
    """The fused attention kernel: the vendor's (cuDNN through Transformer Engine) or
    FlashAttention-2 through PyTorch's SDPA (torchtitan)."""
    cross_entropy: LossKind = LossKind.FUSED
    """How the loss is computed (Megatron's fused vocab-parallel kernel, or PyTorch's on fp32
    logits as torchtitan runs it): it decides the loss's memory."""
    fused_elementwise: bool = True
    """Whether a layer's norms, activation and residual adds run as fused kernels (Megatron-LM's
    and Transformer Engine's fused norm and SwiGLU kernels, or ``torch.compile``'s Triton
    kernels), or one PyTorch eager kernel per tensor op (torchtitan without
    ``--training.compile``, its default): :mod:`sim.workload.eager`."""
    gradient_accumulation_fusion: bool = True
    """Megatron-LM's gradient-accumulation fusion (on by default; ``--no-gradient-accumulation-fusion``
    turns it off): each weight-gradient GEMM accumulates straight into the fp32 ``main_grad``
    buffer (Transformer Engine's ``fuse_wgrad_accumulation``). Off, the GEMM writes a fresh
    16-bit gradient and Megatron-Core's backward hook adds it into ``main_grad``
    (``param.main_grad.add_(param.grad.data)``, ``megatron/core/distributed/
    distributed_data_parallel.py``): one more bandwidth-bound pass per weight per micro-batch
    (:func:`sim.workload.layers.layer_ops`)."""
    grad_reduce_in_fp32: bool = True
    """Whether weight gradients are accumulated (``main_grad``) and reduced across the
    data-parallel ranks in fp32, Megatron-LM's default under 16-bit mixed precision
    ("bfloat16 requires gradient accumulation and all-reduce to be performed in fp32",
    ``megatron/training/arguments.py``), or in the weights' 16 bits: Megatron-Core's
    ``DistributedDataParallelConfig.grad_reduce_in_fp32 = False`` (``--grad-reduce-in-bf16``)
    makes the gradient buffer the parameters' dtype (``grad_dtype = torch.float if
    grad_reduce_in_fp32 else param.dtype``, ``megatron/core/distributed/
    distributed_data_parallel.py``), so the buffer, the accumulate pass and the reduction move
    half the bytes (:attr:`grad_bytes`)."""
    async_tp_grad_allreduce: bool = True
    """Whether a column-parallel layer's input-gradient all-reduce (TP without sequence
    parallelism) runs beside its weight-gradient GEMM: Megatron-LM's
    ``ColumnParallelLinearWithAsyncAllreduce`` (autumn 2021; NVIDIA/apex PR #1183 ports it,
    ``--no-async-tensor-model-parallel-allreduce`` turns it off) issues the all-reduce with
    ``async_op=True`` between the dgrad and wgrad GEMMs. Off, ``ColumnParallelLinear`` runs
    ``F.linear`` on ``copy_to_tensor_model_parallel_region(input_)``, whose backward
    all-reduces the input gradient synchronously after the linear's backward has computed both
    gradients (``megatron/mpu/mappings.py`` ``_CopyToModelParallelRegion``), so the next
    compute op waits for the whole all-reduce."""
    unfused_linear_bias: bool = False
    """Megatron-LM's own tensor-parallel linear layers (``megatron/mpu/layers.py``, without
    Transformer Engine, whose GEMMs fuse the bias into their epilogue): GPT's linear biases are
    added and their gradients summed by PyTorch kernels of their own. The QKV projection's
    forward adds its bias after the GEMM (``output = output + bias``) and its backward sums the
    output gradient over the tokens (``grad_output.sum(dim=0)``); the first MLP projection's
    bias goes through the fused bias-GeLU, whose backward returns the full-size gradient for
    the bias (``GeLUFunction.backward``: ``return tmp, tmp``, ``megatron/model/fused_bias_gelu.py``)
    that autograd then sums; the two row-parallel biases are expanded into the
    bias-dropout-add (``attention_bias.expand_as(residual)``, ``megatron/model/transformer.py``),
    whose backward sums the gradient over the tokens. Each sum reads the gradient once."""
    deterministic: bool = False
    """Megatron-LM ``--deterministic-mode``. ``validate_args`` then calls
    ``torch.use_deterministic_algorithms(True)`` (``megatron/training/arguments.py``), under
    which PyTorch fills every ``torch.empty`` allocation with NaN before use
    (``torch.utils.deterministic.fill_uninitialized_memory``, default True: "detrimental to
    performance", PyTorch docs): Transformer Engine allocates its GEMM, attention, norm and
    activation outputs with ``at::empty`` (``allocateTorchTensor``), so each is written twice.
    Transformer Engine also runs the attention deterministically
    (``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0``, which deterministic mode requires): where that
    rules out cuDNN's fused attention (below sm90, and on Blackwell before cuDNN 9.18.1) it runs
    FlashAttention-2 with its deterministic backward, priced at the GPU's
    ``deterministic_attention_efficiency`` and ``deterministic_attention_backward_efficiency``
    (:mod:`sim.hardware`); Hopper's cuDNN deterministic backward is priced as the ordinary one.
    It also keeps NCCL off NVLS (:mod:`sim.runner`)."""

    adam_impl: AdamImpl = AdamImpl.FUSED
    """How the Adam step runs: one fused kernel (Megatron-LM, NeMo, DeepSpeed) or PyTorch's
    foreach passes (torchtitan) (:mod:`sim.workload.step_passes`)."""
    step_passes: frozenset[StepPass] = MEGATRON_CORE_STEP_PASSES
    """The passes over the gradients and the master weights the release's training step makes
    beside the Adam kernel (:mod:`sim.workload.step_passes`): Megatron-Core's by default."""
    master_param_remainders: bool = False
    """Whether the optimizer keeps its fp32 master weights as the 16 low bits each 16-bit
    weight lacks (Apex's ``DistributedFusedAdam(store_param_remainders=True)``: "store bits
    required to reconstruct FP32 params" from the BF16 ones, ``apex/contrib/optimizers/
    distributed_fused_adam.py``), so its state is 2 + 4 + 4 bytes a parameter (remainder and
    Adam's two moments) instead of the 12 of an fp32 master copy (:attr:`optimizer_bytes`).
    NeMo 1 sets it whenever its distributed Adam holds fp32 state for a BF16 model
    (``MegatronBaseModel.setup_optimization``)."""

    quantized_saved_inputs: bool = True
    """Whether a linear layer run in an 8- or 4-bit format keeps the quantized copy of its input
    for its weight gradient rather than the 16-bit input, so that a layer's activations shrink
    with the format (:func:`sim.memory.layer_activation_bytes`). Transformer Engine does:
    ``_Linear.forward`` saves its own quantized input with only the column-wise data the weight
    gradient reads, and ``_LayerNormLinear.forward`` the quantized norm output, the local shard
    under sequence parallelism (``update_usage(rowwise_usage=False)``; NVIDIA/TransformerEngine
    ``transformer_engine/pytorch/module/linear.py`` and ``layernorm_linear.py`` @ d0067d0;
    TE 1.x saved the FP8 input or its FP8 transpose likewise). False: the 16-bit input is kept,
    as torchao's float8 training does (``matmul_with_hp_or_float8_args.forward``:
    ``ctx.save_for_backward(input_hp, weight_hp_t)``, ``torchao/float8/float8_linear.py``)."""

    te_quantizer: bool = True
    """Whether an 8-bit linear's operands are quantized by Transformer Engine's quantizers, which
    make no transposed copy of a per-tensor FP8 tensor where the GPU's FP8 GEMMs take every
    layout (Blackwell: the weight gradient reads the row-wise copies). False: torchao's float8,
    which casts and lays out its operands itself (:func:`sim.workload.quantization.gemm_casts`)."""

    expert_gemm_streams: int = 1
    """How a mixture-of-experts layer's local experts run each of their GEMMs: 0 as one grouped
    kernel (``torch._grouped_mm``, the ``grouped_gemm`` package), ``n`` as a kernel per expert
    issued round-robin on ``n`` streams (:attr:`sim.workload.ops.GemmOp.streams`): 1 for
    Megatron-Core's default ``SequentialMLP``, a Python loop over the experts; 4 for
    Transformer Engine's grouped linear (``--moe-grouped-gemm``)."""

    pipeline_buffers: PipelineBuffers = PipelineBuffers.IN_FLIGHT
    """What the pipeline runtime holds of each micro-batch at a stage's boundaries under
    PP > 1: Megatron-Core's schedules only the micro-batches in flight; PyTorch's
    ``torch.distributed.pipelining`` (torchtitan) a receive buffer a micro-batch for the
    inputs and the gradients, and the last stage's logits until the step ends
    (:class:`~sim.types.PipelineBuffers`, :func:`sim.memory.activation_peak_bytes`)."""

    fsdp_copies: FsdpCopies = FsdpCopies.NONE
    """What ZeRO-3/FSDP copies around each layer's weight gather and gradient reduce-scatter on
    the compute stream: nothing (FSDP1's flat parameter, Megatron-Core's buffers), or PyTorch
    FSDP2's copy-out of the gathered weights into each parameter and copy-in of the gradients
    into the reduce-scatter input (:class:`~sim.types.FsdpCopies`,
    :mod:`sim.workload.dataparallel`)."""

    rope_impl: RopeImpl = RopeImpl.FUSED
    """How the model's code applies the rotary embedding, which decides its kernels under
    ``torch.compile`` (:class:`~sim.types.RopeImpl`): fused, or torchtitan's complex multiply,
    which TorchInductor leaves to ATen (its casts and the repeated K/V written out)."""

    split_projections: bool = False
    """The model's code computes the query, key and value, and a gated MLP's gate and up
    projections, with linears of their own (torchtitan's ``wq``/``wk``/``wv`` and ``w1``/``w3``,
    Hugging Face Llama's ``q_proj``/``k_proj``/``v_proj`` and ``gate_proj``/``up_proj``), not
    Megatron's fused ``linear_qkv`` and ``linear_fc1``. Their input gradients are summed in the
    backward: eager, two additions for the attention's and one for the MLP's, each reading two
    gradients and writing one; compiled, TorchInductor folds the sums into the norm's backward,
    which reads the extra gradients. A compiled SwiGLU backward then reads and writes separate
    tensors at streaming bandwidth, where Megatron-Core's fused one chunks a single tensor and
    concatenates its gradients (:data:`sim.workload.nongemm.SWIGLU_BACKWARD_EFFICIENCY`); both
    profiled in a torchtitan layer on our H100
    (``benchmarks/device/results/h100-sxm5-80gb-2026-11-26-eager-layer.json``)."""

    @property
    def grad_bytes(self) -> float:
        """Bytes of one accumulated weight gradient: 4 (fp32), or 2 without
        :attr:`grad_reduce_in_fp32`."""
        return 4.0 if self.grad_reduce_in_fp32 else 2.0

    @property
    def optimizer_bytes(self) -> float:
        """Bytes of optimizer state per parameter, before ZeRO sharding: :data:`OPTIMIZER_BYTES`,
        or :data:`REMAINDER_OPTIMIZER_BYTES` with :attr:`master_param_remainders`."""
        return REMAINDER_OPTIMIZER_BYTES if self.master_param_remainders else OPTIMIZER_BYTES


KERNEL_KEYS: tuple[str, ...] = ("flash_attention", "attention_kernel", "cross_entropy", "fused_elementwise",
                                "gradient_accumulation_fusion", "grad_reduce_in_fp32", "async_tp_grad_allreduce",
                                "unfused_linear_bias", "deterministic", "adam_impl", "step_passes",
                                "master_param_remainders", "quantized_saved_inputs", "te_quantizer",
                                "expert_gemm_streams", "pipeline_buffers", "fsdp_copies", "rope_impl",
                                "split_projections")
"""The fields of :class:`KernelsSpec`: the keys of a workload file's ``kernels:`` section, also
read under ``parallel:``."""
