"""The ops of one transformer layer, the embedding and the output layer, per pass.

Megatron-LM's tensor-parallel layer (Shoeybi et al. 2019, arXiv 1909.08053, Sec. 3): QKV and
the first MLP projection are column-parallel, the attention output and second MLP projection
row-parallel, so the forward needs one all-reduce after each row-parallel GEMM, and the
backward one after each column-parallel GEMM's input gradient. Sequence parallelism
(Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4.2.2) turns each all-reduce into an
all-gather before and a reduce-scatter after, and runs norms and dropout on ``s/t`` tokens.
In the backward, Megatron overlaps the input-gradient all-reduce (or reduce-scatter) with the
weight-gradient GEMM, and the re-gather of the input with the input-gradient GEMM.

Each step is ``Step(stream, name, op, wait)``: a compute op (``stream is None``) or a
collective on ``stream`` whose result the ``wait``-th following compute op waits for (0: the
next).

Context parallelism (Megatron-LM ``--context-parallel-size``) splits every sequence over the
CP ranks, so all token-wise ops see ``s / cp`` tokens; the attention exchanges the rest of the
sequence as ``--cp-comm-type`` says (ring attention by default, Liu et al. 2023, arXiv
2310.01889: ``cp`` steps, each on the rank's queries against one K/V chunk while the next
arrives from the previous rank; or an all-gather of K/V, or Ulysses all-to-alls), always
leaving each rank ``1 / cp`` of the causal attention work under Megatron's load balancing
(each rank holds chunks ``i`` and ``2cp - 1 - i``): :mod:`sim.workload.context_parallel`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from functools import partial

from sim.types import (
    CollectiveKind,
    CommClass,
    CommKernel,
    Dtype,
    MemoryAccess,
    MoeDispatcher,
    NormKind,
    OpKind,
    RecomputeKind,
    RecomputeModule,
    RopeImpl,
    ScalingRecipe,
    Stream,
    ZeroImpl,
)
from sim.workload import eager as eager_kernels
from sim.workload import nongemm
from sim.workload.context_parallel import cp_attention
from sim.workload.kernels import TE_GROUPED_GEMM_ISSUE_S, KernelsSpec
from sim.workload.ops import AttentionOp, CommOp, GemmOp, MemoryOp, Op, Routing, dtype_bytes
from sim.workload.quantization import LOW_PRECISION, Cast, gemm_casts
from sim.workload.spec import ModelSpec, ParallelSpec
from sim.workload.steps import Step
from sim.workload.tp_overlap import TpOverlapConfig

__all__ = ["LayerOps", "LayerBuilder", "layer_ops", "selective_steps", "backward_steps"]

ACT_DTYPE = Dtype.BF16
"""Activations, gradients of activations and TP traffic stay in 16 bits."""

MAIN_GRAD_BYTES = 4
"""Megatron-Core keeps each weight's accumulated gradient (``main_grad``) in fp32 under 16-bit
mixed precision (``accumulate_allreduce_grads_in_fp32``, set by ``--bf16``;
megatron/training/arguments.py); in 16 bits without ``grad_reduce_in_fp32``
(:attr:`~sim.workload.kernels.KernelsSpec.grad_bytes`)."""


@dataclass(frozen=True)
class LayerOps:
    """Step lists for every pass, built once per workload."""

    layer_fwd: tuple[Step, ...]
    layer_bwd: tuple[Step, ...]
    attention_bwd_index: int
    """Index in ``layer_bwd`` of the attention backward (selective recompute goes before it)."""
    attention_fwd: tuple[Step, ...]
    embedding_fwd: tuple[Step, ...]
    embedding_bwd: tuple[Step, ...]
    head_fwd: tuple[Step, ...]
    head_bwd: tuple[Step, ...]
    op_recompute: tuple[Step, ...] = ()
    """What torchtitan's op-level policy recomputes before a layer's backward: every other
    matmul (``wk``, ``wo``, ``w3`` of a SwiGLU layer) and the norms, activation and residual
    adds; the TP collectives are not re-run (the saved matmul outputs feed the rest)."""
    moe: LayerOps | None = None
    """The same for a mixture-of-experts layer (its MLP replaced by the router, the token
    dispatch, the experts and the combine); None for a dense model."""
    high_precision: LayerOps | None = None
    """The same layers with their linear layers in 16 bits, for the first and last layers a
    low-precision recipe keeps in BF16 (Megatron-LM ``--first-last-layers-bf16``:
    ``megatron/core/fp4_utils.py`` ``get_fp4_context`` @ ``322dfae`` enters no FP4 context
    for them; ``fp8_utils.py`` likewise); None when none are kept."""
    split_bwd: tuple[tuple[Step, ...], tuple[Step, ...], int] = None  # type: ignore[assignment]  # __post_init__ sets it
    """``layer_bwd`` split for zero-bubble schedules: the input-gradient steps, the
    weight-gradient steps, and the attention backward's index in the first (None, the
    default, has :meth:`__post_init__` split ``layer_bwd``)."""
    recompute_fwd: tuple[Step, ...] = None  # type: ignore[assignment]  # __post_init__ sets it
    """The forward as full recomputation re-runs it before the layer's backward: ``layer_fwd``
    (None, the default), except under PyTorch's async TP, which overlaps the first forward's
    TP collectives only (:data:`sim.workload.tp_overlap.ASYNC_TP`)."""
    selective_before: tuple[Step, ...] = ()
    """What selective recomputation re-runs before the layer's backward starts, the MLP side of
    ``parallel.recompute_modules`` (:func:`selective_steps`); none by default."""
    selective_at: tuple[Step, ...] = None  # type: ignore[assignment]  # __post_init__ sets it
    """What selective recomputation re-runs just before the attention backward
    (``attention_bwd_index``), the attention side: ``attention_fwd`` (None, the default,
    Megatron-Core's ``core_attn``)."""
    mtp_fwd: tuple[Step, ...] = ()
    mtp_bwd: tuple[Step, ...] = ()
    """One multi-token-prediction module's forward and backward (:meth:`LayerBuilder.mtp_heads`),
    which ``head_fwd`` and ``head_bwd`` hold ``mtp_num_layers`` times before and after the
    output layer's own steps; the EP A2A overlap pairs each as a layer (empty: none)."""

    def __post_init__(self) -> None:
        if self.recompute_fwd is None:
            object.__setattr__(self, "recompute_fwd", self.layer_fwd)
        if self.selective_at is None:
            object.__setattr__(self, "selective_at", self.attention_fwd)
        if self.split_bwd is None:
            b, w, k = split_weight_gradients(self.layer_bwd, self.attention_bwd_index)
            object.__setattr__(self, "split_bwd", (b, w, k))

    @property
    def output_fwd(self) -> tuple[Step, ...]:
        """``head_fwd`` without the multi-token-prediction modules before it (each ``mtp_fwd``
        ends with a copy of the output layer's steps): the output layer's and loss's own."""
        if not self.mtp_fwd:
            return self.head_fwd
        n = len(self.head_fwd) // len(self.mtp_fwd)  # modules x mtp_fwd + the output's own, shorter
        return self.head_fwd[n * len(self.mtp_fwd):]

    @property
    def output_bwd(self) -> tuple[Step, ...]:
        """``head_bwd`` without the multi-token-prediction modules after it: the loss's and
        output layer's own backward."""
        if not self.mtp_bwd:
            return self.head_bwd
        n = len(self.head_bwd) // len(self.mtp_bwd)
        return self.head_bwd[:len(self.head_bwd) - n * len(self.mtp_bwd)]

    def for_layer(self, is_moe: bool, bf16: bool = False) -> LayerOps:
        """The ops of a (MoE if ``is_moe``) layer, its linear layers in BF16 if ``bf16``."""
        ops = self.high_precision if bf16 and self.high_precision is not None else self
        return ops.moe if is_moe and ops.moe is not None else ops


def backward_steps(lops: LayerOps, bwd: tuple, k: int, rc: RecomputeKind) -> tuple:
    """A layer's backward steps with its recomputation, in the order the op-level program
    issues them."""
    if rc is RecomputeKind.FULL:
        return lops.recompute_fwd + bwd
    if rc is RecomputeKind.SELECTIVE_OP:
        return lops.op_recompute + bwd
    if rc is RecomputeKind.SELECTIVE:
        return lops.selective_before + bwd[:k] + lops.selective_at + bwd[k:]
    return bwd


def selective_steps(fwd: Sequence[Step], attention_fwd: Sequence[Step], modules: frozenset[RecomputeModule],
                    moe: bool) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """The forward steps Megatron-Core's selective recomputation re-runs in a layer's backward,
    ``(before the layer's backward, before its attention backward)``, in forward order, for
    ``modules`` (``TransformerConfig.recompute_modules``; :class:`~sim.types.RecomputeModule`):

    * before the backward, which starts with the MLP's: ``layernorm``'s pre-MLP norm (a MoE
      layer's: a dense layer's is fused into its first linear, :func:`sim.memory.recompute_module_bytes`); ``mlp``,
      a dense layer's MLP from its first collective or GEMM after that norm to its last step
      before the residual add (``tensor_parallel.checkpoint`` re-runs the submodule whole, its
      TP collectives too); ``moe_act``, the routed experts' activation; ``shared_experts``, the
      shared experts' steps;
    * before the attention backward: ``layernorm``'s input norm (multi-latent attention's, which
      feeds two down-projections), ``mla_up_proj``'s query and
      key/value up-projections and their rotary steps, and ``core_attn``, the attention forward.

    Each output-discarding module (``moe_act``, ``layernorm``, ``mla_up_proj``) is recomputed
    by a hook on its consumer's backward (``CheckpointWithoutOutput``), the checkpointed ones
    (``core_attn``, ``mlp``, ``shared_experts``) when the backward reaches them: both before the
    backward that reads them, where these two places put them.

    >>> from sim.workload.ops import MemoryOp
    >>> op = MemoryOp(OpKind.NORM, 8.0)
    >>> fwd = [Step(None, n, op) for n in ("norm1", "qkv", "attention", "proj", "dropout-add", "norm2",
    ...                                       "fc1", "activation", "fc2", "dropout-add")]
    >>> before, at = selective_steps(fwd, fwd[2:3], frozenset(RecomputeModule), moe=False)
    >>> [s.name for s in before], [s.name for s in at]
    (['fc1', 'activation', 'fc2'], ['attention'])
    """
    names = [st.name for st in fwd]
    before: list[Step] = []
    at: list[Step] = []
    norm2 = next((i for i, n in enumerate(names) if n.startswith("norm2")), None)
    if RecomputeModule.LAYERNORM in modules:  # the norms not fused into a linear (recompute_module_bytes)
        at += [st for st in fwd if st.name == "norm1" and "q-down" in names]
        before += [st for st in fwd if st.name == "norm2" and moe]
    if RecomputeModule.MLP in modules and not moe and norm2 is not None:
        end = max(i for i, n in enumerate(names) if n == "dropout-add")
        before += list(fwd[norm2 + 1:end])
    if moe and RecomputeModule.MOE_ACT in modules:
        before += [st for st in fwd if st.name == "experts-activation"]
    if moe and RecomputeModule.SHARED_EXPERTS in modules:
        before += [st for st in fwd if st.name.startswith("shared-")]
    if RecomputeModule.MLA_UP_PROJ in modules:
        at += [st for st in fwd if st.name in ("q-up", "kv-up") or st.name.startswith("rope")]
    if RecomputeModule.CORE_ATTN in modules:
        at += list(attention_fwd)
    return tuple(before), tuple(at)


def split_weight_gradients(steps: tuple[Step, ...], attention_index: int
                           ) -> tuple[tuple[Step, ...], tuple[Step, ...], int]:
    """Split a layer's backward into its input-gradient pass B and weight-gradient pass W
    (zero-bubble pipelining, Qi et al. 2024, arXiv 2401.10241, Sec. 2).

    W gets every weight-gradient GEMM (``*-wgrad``) and the collectives whose result only a
    weight gradient waits for (the re-gathered input under sequence parallelism); B keeps the
    rest. Each collective's ``wait`` is recounted within its own pass.

    >>> from sim.workload.ops import GemmOp, MemoryOp
    >>> g = GemmOp(8, 8, 8, Dtype.BF16)
    >>> ag = CommOp(CollectiveKind.ALL_GATHER, CommClass.TP, (0, 1), 8.0)
    >>> steps = (Step(None, "x-dgrad", g), Step(Stream.TP_COMM, "ag", ag, 1), Step(None, "y-dgrad", g),
    ...          Step(None, "y-wgrad", g), Step(None, "norm-bwd", MemoryOp(OpKind.NORM, 8.0)))
    >>> b, w, _ = split_weight_gradients(steps, 0)
    >>> [s.name for s in b], [(s.name, s.wait) for s in w]
    (['x-dgrad', 'y-dgrad', 'norm-bwd'], [('ag', 0), ('y-wgrad', 0)])
    """
    def is_w(st: Step) -> bool:
        return st.stream is None and st.name.endswith("wgrad")

    target: dict[int, int] = {}
    for i, st in enumerate(steps):
        if st.stream is not None:
            k = st.wait
            for j in range(i + 1, len(steps)):
                if steps[j].stream is None:
                    if k == 0:
                        target[i] = j
                        break
                    k -= 1
    to_w = {i for i, st in enumerate(steps) if is_w(st) or (i in target and is_w(steps[target[i]]))}

    def build(indices: list[int]) -> tuple[Step, ...]:
        out = []
        for n, i in enumerate(indices):
            st = steps[i]
            if st.stream is not None and i in target:
                later = [j for j in indices[n + 1:] if steps[j].stream is None]
                wait = later.index(target[i]) if target[i] in later else max(len(later) - 1, 0)
                st = Step(st.stream, st.name, st.op, wait)
            out.append(st)
        return tuple(out)

    b_idx = [i for i in range(len(steps)) if i not in to_w]
    w_idx = sorted(to_w)
    return build(b_idx), build(w_idx), sum(1 for i in b_idx if i < attention_index)


class LayerBuilder:
    """The step lists of one pipeline stage's layers, built part by part.

    One builder holds what every part reads (the stage's groups, the token counts, the
    activation bytes, the kernel choices of :class:`~sim.workload.kernels.KernelsSpec`); its
    methods are the primitives a part is made of (a collective on the TP group, a memory-bound
    op, the three GEMMs of a linear layer) and the parts themselves (the attention, the input
    projections, the forward and backward of the layer, the embedding, the output layer, the
    MoE MLP). :meth:`build` puts them together into :class:`LayerOps`; :func:`layer_ops` is
    the one call the generator makes.
    """

    def __init__(self, model: ModelSpec, parallel: ParallelSpec, dtype: Dtype, tp_group: tuple[int, ...],
                 replicas: tuple[tuple[int, ...], ...] = (), cp_group: tuple[int, ...] = (0,),
                 cp_replicas: tuple[tuple[int, ...], ...] = (), ep_group: tuple[int, ...] = (0,),
                 ep_replicas: tuple[tuple[int, ...], ...] = (),
                 scaling: ScalingRecipe = ScalingRecipe.DELAYED, etp_group: tuple[int, ...] | None = None,
                 etp_replicas: tuple[tuple[int, ...], ...] | None = None, *, kernels: KernelsSpec,
                 fp8_any_layout: bool = False) -> None:
        self.model, self.parallel, self.dtype, self.scaling = model, parallel, dtype, scaling
        self.kspec = kernels
        # Transformer Engine's FP8 has no transposes on a GPU whose FP8 GEMMs take every layout
        # (GPUSpec.fp8_any_layout): sim.workload.quantization.gemm_casts
        self.casts = partial(gemm_casts, dtype, scaling, te_quantizer=kernels.te_quantizer,
                             any_layout=fp8_any_layout)
        self.tp_group, self.replicas = tp_group, replicas
        self.cp_group, self.cp_replicas = cp_group, cp_replicas
        self.ep_group, self.ep_replicas = ep_group, ep_replicas
        self.etp_group, self.etp_replicas = etp_group, etp_replicas
        self.t = t = parallel.tp
        self.cp = parallel.cp
        self.b, self.s, self.h = parallel.micro_batch_size, model.seq_length, model.hidden_size
        self.T = self.b * self.s // self.cp
        """Tokens a rank's layer sees (its share of the sequence under context parallelism)."""
        self.sp = parallel.sequence_parallel
        self.Tn = self.T // t if self.sp else self.T
        """Tokens a norm or dropout sees."""
        self.e = e = dtype_bytes(ACT_DTYPE)
        self.q, self.kv, self.f = model.q_size, model.kv_size, model.ffn_hidden_size
        self.branches = 2 if model.gated_mlp else 1
        self.qkv_n = (self.q + 2 * self.kv) // t
        self.V = model.vocab_size
        self.heads = model.num_attention_heads // t
        self.kv_heads = max(model.num_kv_heads // t, 1)
        act = self.T * self.h * e
        self.ag = self.coll(CollectiveKind.ALL_GATHER, act)
        self.rs = self.coll(CollectiveKind.REDUCE_SCATTER, act)
        self.ar = self.coll(CollectiveKind.ALL_REDUCE, act)
        self.tp_on = t > 1
        self.overlap = parallel.tp_comm_overlap and self.sp and self.tp_on
        # deterministic mode: PyTorch NaN-fills each output Transformer Engine allocates with
        # at::empty (GEMMs, attention, norms, activations), one more write of it (KernelsSpec.deterministic)
        self.fill = 1.0 if kernels.deterministic else 0.0
        Tn, h = self.Tn, self.h
        self.norm_op = self.mem(OpKind.NORM, (2 + self.fill) * Tn * h * e)
        self.norm_bwd_op = self.fused_norm_bwd(3 * Tn * h * e, self.fill * Tn * h * e)
        self.eager = not kernels.fused_elementwise
        # the bias-dropout-add reads the branch and the residual and writes the sum and, with
        # dropout, its 1-byte mask; its backward reads the gradient and the mask and writes the
        # branch's gradient, the residual's gradient being the incoming one, passed on by autograd
        # without a copy. Without dropout (ModelSpec.hidden_dropout 0) the dropout returns its
        # input and the add's backward passes the gradient on to both: no kernel runs.
        mask = 1 if model.dropout_masks else 0
        self.dropout_add = self.mem(OpKind.ELEMENTWISE, Tn * h * (3 * e + mask))
        self.dropout_add_bwd = self.mem(OpKind.ELEMENTWISE, Tn * h * (2 * e + 1)) if mask else None
        self.low = dtype in LOW_PRECISION

    # -- primitives -----------------------------------------------------------------------------
    def coll(self, kind: CollectiveKind, size: float) -> CommOp:
        """A collective of ``size`` bytes over the stage's TP group."""
        return CommOp(kind, CommClass.TP, self.tp_group, size, self.replicas)

    @contextmanager
    def plain_tp(self) -> Iterator[None]:
        """Build steps inside as without TP communication overlap (their collectives NCCL
        kernels where plain TP puts them), as async TP's recomputed forward and backward run."""
        saved = self.overlap
        self.overlap = False
        try:
            yield
        finally:
            self.overlap = saved

    def kernel(self, op: CommOp, gemm: str | None) -> CommOp:
        """Under TP communication overlap, the collective overlapped with a layer GEMM (TE's
        name for it, ``gemm``) is run by userbuffers or symmetric memory, not NCCL."""
        if not self.overlap or gemm is None:
            return op
        cfg = self.parallel.tp_comm_overlap_cfg
        return replace(op, kernel=cfg.kernel, kernel_sms=cfg.sms_of(gemm))

    def gather(self, name: str, wait: int = 0, gemm: str | None = None) -> list[Step]:
        """The sequence-parallel all-gather of a layer's input (none without it)."""
        if self.sp and self.tp_on:
            return [Step(Stream.TP_COMM, f"ncclAllGather {name}", self.kernel(self.ag, gemm), wait)]
        return []

    def reduce(self, name: str, wait: int = 0, gemm: str | None = None) -> list[Step]:
        """The TP reduction of a row-parallel output or a column-parallel input gradient: a
        reduce-scatter under sequence parallelism, an all-reduce otherwise."""
        if not self.tp_on:
            return []
        if self.sp:
            return [Step(Stream.TP_COMM, f"ncclReduceScatter {name}", self.kernel(self.rs, gemm), wait)]
        return [Step(Stream.TP_COMM, f"ncclAllReduce {name}", self.ar, wait)]

    @staticmethod
    def compute(name: str, op: Op) -> Step:
        """A compute step."""
        return Step(None, name, op)

    @staticmethod
    def mem(kind: OpKind, nbytes: float, access: MemoryAccess = MemoryAccess.STREAM,
            efficiency: float = 1.0) -> MemoryOp:
        """A memory-bound op moving ``nbytes``."""
        return MemoryOp(kind, float(nbytes), access, efficiency)

    def at_share(self, kind: OpKind, nbytes: float, share: float, fill_bytes: float = 0.0) -> MemoryOp:
        """A kernel moving ``nbytes`` at ``share`` of the streaming rate, and the NaN fill of
        its output, ``fill_bytes``, streaming: one op at the efficiency of the two together."""
        return self.mem(kind, nbytes + fill_bytes, efficiency=(nbytes + fill_bytes) / (nbytes / share + fill_bytes))

    def fused_norm_bwd(self, nbytes: float, fill_bytes: float = 0.0) -> MemoryOp:
        """A fused norm's backward at the measured share of the forward's bandwidth
        (:data:`~sim.workload.nongemm.NORM_BACKWARD_EFFICIENCY`)."""
        return self.at_share(OpKind.NORM, nbytes, nongemm.NORM_BACKWARD_EFFICIENCY, fill_bytes)

    def activation_bwd(self, nbytes: float, fill_bytes: float = 0.0) -> MemoryOp:
        """The fused activation's backward moving ``nbytes``: a gated one (SwiGLU) over
        Megatron's one ``fc1`` output at its measured share of streaming bandwidth
        (:data:`~sim.workload.nongemm.SWIGLU_BACKWARD_EFFICIENCY`), over separate gate and up
        outputs (:attr:`~sim.workload.kernels.KernelsSpec.split_projections`, compiled by
        ``torch.compile``) streaming, as profiled; and the NaN fill of its output,
        ``fill_bytes``, streaming."""
        fused_fc1 = self.model.gated_mlp and not self.kspec.split_projections
        share = nongemm.SWIGLU_BACKWARD_EFFICIENCY if fused_fc1 else 1.0
        return self.at_share(OpKind.ELEMENTWISE, nbytes, share, fill_bytes)

    def projection_sums(self, name: str, extra: int) -> list[Step]:
        """The sum of the input gradients of ``extra + 1`` projections of one input run as
        linears of their own (:attr:`~sim.workload.kernels.KernelsSpec.split_projections`):
        eager, autograd's ``extra`` additions, each reading two ``T x h`` gradients and writing
        one (in the profiled torchtitan layer, 127-129 us each at 16,384 tokens); compiled,
        the ``extra`` more gradients the norm's fused backward reads. None where the code runs
        one fused projection."""
        if not self.kspec.split_projections or extra <= 0:
            return []
        grad = self.T * self.h * self.e  # the input gradient over the rank's tokens, before any TP reduction
        if self.eager:
            return [self.compute(f"grad-sum-{name}", self.mem(OpKind.ELEMENTWISE, 3 * grad)) for _ in range(extra)]
        return [self.compute(f"grad-sum-{name}", self.mem(OpKind.ELEMENTWISE, extra * grad))]

    def kernels(self, kind: OpKind, ks: list[eager_kernels.Kernel]) -> list[Step]:
        """Eager PyTorch's kernels (:mod:`sim.workload.eager`) as steps."""
        return [self.compute(name, self.mem(kind, nbytes, access)) for name, nbytes, access in ks]

    @property
    def eager_rmsnorm(self) -> bool:
        """Whether the norms run as eager RMSNorm tensor code (:mod:`sim.workload.eager`): eager
        PyTorch and a model not stated to use LayerNorm. Eager LayerNorm is ATen's native
        ``layer_norm`` (``aten/src/ATen/native/cuda/layer_norm_kernel.cu``: one
        ``vectorized_layer_norm_kernel`` forward; its backward the input-gradient and
        gamma/beta-gradient kernels), priced as the fused norm."""
        return self.eager and self.model.norm is not NormKind.LAYERNORM

    def norm_forward(self, name: str, tokens: int | None = None) -> list[Step]:
        """A norm's forward: one fused kernel (or eager LayerNorm's one), or torchtitan's eager
        RMSNorm."""
        tokens = self.Tn if tokens is None else tokens
        if self.eager_rmsnorm:
            return self.kernels(OpKind.NORM, eager_kernels.rmsnorm_forward(name, tokens, self.h))
        return [self.compute(name, self.norm_op)]

    def norm_backward(self, name: str, tokens: int | None = None) -> list[Step]:
        """A norm's backward: one fused kernel (or eager LayerNorm's), or torchtitan's eager
        RMSNorm's."""
        tokens = self.Tn if tokens is None else tokens
        if self.eager_rmsnorm:
            return self.kernels(OpKind.NORM, eager_kernels.rmsnorm_backward(name, tokens, self.h))
        return [self.compute(name, self.norm_bwd_op)]

    def gemm(self, m_: int, n_: int, k_: int, cast: Cast, extra_bytes: float = 0.0, extra_kernels: int = 0,
             batch: int = 1) -> GemmOp:
        """A GEMM in the layers' dtype with its operands' quantization (``cast``); ``batch > 1``:
        a layer's local experts, run as the stack runs them
        (:attr:`~sim.workload.kernels.KernelsSpec.expert_gemm_streams`)."""
        streams = self.kspec.expert_gemm_streams if batch > 1 else 0
        # Transformer Engine's grouped linear: the host issues a cuBLASLt GEMM an expert
        issue = batch * TE_GROUPED_GEMM_ISSUE_S if streams > 1 else 0.0
        return GemmOp(m_, n_, k_, self.dtype, batch, extra_bytes=cast.bytes + extra_bytes,
                      extra_kernels=cast.kernels + extra_kernels, streams=streams, issue_s=issue)

    def grad_accumulation(self, weights: float) -> tuple[float, int]:
        """Bytes and kernels of adding a fresh 16-bit weight gradient of ``weights`` elements
        into the fp32 accumulated one, where no gradient-accumulation fusion does it in the GEMM
        (:attr:`KernelsSpec.gradient_accumulation_fusion` off).

        Megatron-Core's backward hook adds the 16-bit gradient into ``main_grad`` in one kernel
        (``param.main_grad.add_(param.grad.data)``): read 2 + 4, write 4 bytes. DeepSpeed's bf16
        optimizer (:attr:`~sim.types.ZeroImpl.DEEPSPEED_BF16`) first copies it to fp32, then
        adds that copy into its fp32 gradient (``BF16_Optimizer.update_hp_grads``:
        ``hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))``, after every micro-batch's
        backward, deepspeedai/DeepSpeed ``deepspeed/runtime/bf16_optimizer.py`` @ v0.7.0, the
        pipeline engine's ``_exec_backward_pass``): read 2, write 4, then read 4 + 4, write 4.

        >>> from sim.workload.spec import ModelSpec, ParallelSpec
        >>> m = ModelSpec("m", 2, 256, 4, 4, 512, 1000, 128)
        >>> k = KernelsSpec(gradient_accumulation_fusion=False)
        >>> LayerBuilder(m, ParallelSpec(), Dtype.BF16, (0,), kernels=k).grad_accumulation(1.0)
        (10.0, 1)
        >>> ds = ParallelSpec(zero_stage=1, zero_impl=ZeroImpl.DEEPSPEED_BF16)
        >>> LayerBuilder(m, ds, Dtype.BF16, (0,), kernels=k).grad_accumulation(1.0)
        (18.0, 2)
        """
        if self.parallel.zero_impl is ZeroImpl.DEEPSPEED_BF16:
            hp = dtype_bytes(Dtype.FP32)
            return weights * (self.e + hp + 3 * hp), 2
        return weights * (self.e + 2 * self.kspec.grad_bytes), 1

    def weight_casts(self, weights: float) -> tuple[Cast, Cast]:
        """The work on a linear layer's ``weights`` elements each forward and each input
        gradient does, where the weight is not quantized once an iteration: torchao's
        ``Float8Linear`` (FP8 without Transformer Engine's quantizers, ``te_quantizer`` off).

        Its forward casts the 16-bit weight at every call, dynamic tensorwise scaling by
        default (``get_weight_scale``: the amax, a read; ``cast_weight_to_float8_t``: a read and
        an 8-bit write; pytorch/ao ``torchao/float8/float8_linear.py``), and saves the 8-bit
        weight for the backward, whose input-gradient GEMM takes it as the second operand
        row-major, which ``torch._scaled_mm`` takes only column-major: a transposed copy
        (``preprocess_addmm``: ``b_data.t().contiguous().t()``, ``torchao/float8/float8_ops.py``).
        A recomputed forward casts again. Transformer Engine's quantized weights are cached
        over an iteration's micro-batches and are not priced.

        >>> from sim.workload.spec import ModelSpec, ParallelSpec
        >>> m = ModelSpec("m", 2, 256, 4, 4, 512, 1000, 128)
        >>> ao = LayerBuilder(m, ParallelSpec(), Dtype.FP8, (0,), kernels=KernelsSpec(te_quantizer=False))
        >>> ao.weight_casts(10.0)
        (Cast(bytes=50.0, kernels=2), Cast(bytes=20.0, kernels=1))
        >>> LayerBuilder(m, ParallelSpec(), Dtype.FP8, (0,), kernels=KernelsSpec()).weight_casts(10.0)
        (Cast(bytes=0.0, kernels=0), Cast(bytes=0.0, kernels=0))
        """
        if self.dtype is not Dtype.FP8 or self.kspec.te_quantizer:
            return Cast(), Cast()
        return Cast(weights * (2 * self.e + 1), 2), Cast(2.0 * weights, 1)

    def out_fill(self, m_: int, n_: int) -> tuple[float, int]:
        """Deterministic mode's NaN fill of a fresh ``[m_, n_]`` 16-bit GEMM output."""
        return (m_ * n_ * self.e, 1) if self.fill else (0.0, 0)

    # the quantization of each GEMM's 16-bit operands (sim.workload.quantization). A linear
    # layer of ``experts`` local experts (MoE), each on ``tokens`` rows, runs each of its three
    # GEMMs as one grouped kernel and quantizes over all the experts' rows: Megatron-Core's
    # experts are Transformer Engine linears in the layers' recipe (``TEGroupedMLP`` or
    # ``SequentialMLP``, ``megatron/core/transformer/moe/experts.py``, with
    # ``fuse_wgrad_accumulation=config.gradient_accumulation_fusion``), and TE's grouped linear
    # quantizes its input and incoming gradient over ``m_splits`` as ``te.Linear`` does
    # (NVIDIA/TransformerEngine ``transformer_engine/pytorch/module/grouped_linear.py`` @ v2.8,
    # ``tex.split_quantize``).
    def fwd_gemm(self, out: int, inp: int, tokens: int | None = None, experts: int = 1) -> GemmOp:
        """Forward GEMM ``[T, inp] @ [inp, out]`` (``T``: ``tokens``, default the layer's; per
        expert, above); in low precision its input is quantized first (and, under torchao, its
        weight: :meth:`weight_casts`)."""
        m = self.T if tokens is None else tokens
        rows = m * experts
        cast = self.casts(rows, inp, out).fprop + self.weight_casts(experts * inp * out)[0]
        return self.gemm(m, out, inp, cast, *self.out_fill(rows, out), batch=experts)

    def dgrad_gemm(self, inp: int, out: int, tokens: int | None = None, experts: int = 1) -> GemmOp:
        """Input-gradient GEMM ``[T, out] @ [out, inp]`` (as :meth:`fwd_gemm`); the incoming
        gradient is quantized (and, under torchao, the saved 8-bit weight transposed)."""
        m = self.T if tokens is None else tokens
        rows = m * experts
        cast = self.casts(rows, inp, out).dgrad + self.weight_casts(experts * inp * out)[1]
        return self.gemm(m, inp, out, cast, *self.out_fill(rows, inp), batch=experts)

    def wgrad_gemm(self, inp: int, out: int, tokens: int | None = None, experts: int = 1) -> GemmOp:
        """Weight-gradient GEMM ``[inp, T] @ [T, out]`` (as :meth:`fwd_gemm`); in FP8 both
        operands are transposed first (Hopper's FP8 tensor cores take only the TN layout; not
        Transformer Engine's per-tensor FP8 on Blackwell, which reads the row-wise copies), in
        NVFP4 it reads the column-wise copies the casts above made. With gradient-accumulation
        fusion the GEMM accumulates into the ``main_grad`` itself: its epilogue reads and writes
        the gradient dtype instead of writing a 16-bit output
        (:attr:`~sim.workload.ops.GemmOp.epilogue_bytes`). Without it, it writes a fresh 16-bit
        gradient (NaN-filled first in deterministic mode) that a separate kernel adds into the
        fp32 ``main_grad``: read 2 + 4 bytes, write 4, per weight.

        >>> from sim.workload.spec import ModelSpec, ParallelSpec
        >>> from sim.workload.kernels import KernelsSpec
        >>> m = ModelSpec("m", 2, 256, 4, 4, 512, 1000, 128, num_experts=4, moe_top_k=2)
        >>> b = LayerBuilder(m, ParallelSpec(), Dtype.FP8, (0,), kernels=KernelsSpec())
        >>> w = b.wgrad_gemm(256, 512, tokens=64, experts=4)  # 4 experts' transposes, one kernel
        >>> w.batch, w.k, w.extra_bytes == 2.0 * 64 * 4 * (256 + 512)
        (4, 64, True)
        """
        m = self.T if tokens is None else tokens
        weights = experts * inp * out
        extra, kernels = 0.0, 0
        if not self.kspec.gradient_accumulation_fusion:
            fill, fills = self.out_fill(inp, out)
            acc, adds = self.grad_accumulation(weights)
            extra, kernels = experts * fill + acc, experts * fills + adds
        op = self.gemm(inp, out, m, self.casts(m * experts, inp, out).wgrad, extra, kernels,
                       batch=experts)
        if self.kspec.gradient_accumulation_fusion:
            op = replace(op, epilogue_bytes=weights * (2 * self.kspec.grad_bytes - self.e))
        return op

    def bias_grad(self, name: str, tokens: int, width: int) -> list[Step]:
        """The sum over the tokens of a linear layer's output gradient, its bias gradient,
        where Megatron-LM's own linear layers leave it to a kernel of its own
        (:attr:`KernelsSpec.unfused_linear_bias`): reads the gradient once."""
        if not self.kspec.unfused_linear_bias:
            return []
        return [self.compute(f"{name}-bias-grad", self.mem(OpKind.ELEMENTWISE, tokens * width * self.e))]

    def dgrad_reduce_wgrad(self, name: str, dgrad: GemmOp, wgrad: GemmOp, gemm: str,
                           bias: Sequence[Step] = ()) -> list[Step]:
        """A column-parallel layer's input gradient, its TP reduction and its weight
        gradient: the reduction beside the wgrad GEMM (Megatron-LM's asynchronous all-reduce,
        or sequence parallelism's reduce-scatter), or, before the asynchronous all-reduce
        (:attr:`KernelsSpec.async_tp_grad_allreduce` off, no sequence parallelism), after both
        GEMMs, waited for by the next op."""
        c = self.compute
        if self.sp or self.kspec.async_tp_grad_allreduce:
            # Megatron's backward sums the bias gradient after the wgrad GEMM, beside the reduction
            return [c(f"{name}-dgrad", dgrad), *self.reduce(f"{name}-grad", wait=1 + len(bias), gemm=gemm),
                    c(f"{name}-wgrad", wgrad), *bias]
        # F.linear's ``output += bias``: its backward (the bias sum) runs before the GEMMs'
        return [*bias, c(f"{name}-dgrad", dgrad), c(f"{name}-wgrad", wgrad), *self.reduce(f"{name}-grad")]

    def head_gemm(self, m_: int, n_: int, k_: int) -> GemmOp:
        """A GEMM of the output layer, which stays in 16 bits under FP8/FP4 training
        (Megatron-LM and Transformer Engine quantize the transformer layers' linear layers
        only)."""
        return GemmOp(m_, n_, k_, self.dtype if not self.low else ACT_DTYPE)

    # -- the parts of a layer -------------------------------------------------------------------
    def attention(self) -> tuple[list[Step], list[Step]]:
        """The core attention's forward and backward: context parallel, fused (flash), or
        unfused."""
        model, parallel, e = self.model, self.parallel, self.e
        if self.cp > 1:
            # the rank these ops are for: the one its TP and CP groups share
            me = next((r for r in self.cp_group if r in self.tp_group), self.cp_group[0])
            return cp_attention(model, parallel, self.heads, self.kv_heads, ACT_DTYPE, self.cp_group,
                                self.cp_replicas, me, kernel=self.kspec.attention_kernel)
        if self.kspec.flash_attention:
            ak, det = self.kspec.attention_kernel, self.kspec.deterministic
            b, s, hd, heads, kv_heads = self.b, self.s, model.head_dim, self.heads, self.kv_heads
            out_fill = self.fill * b * s * (heads * hd * e + heads * 4)  # O and the fp32 softmax statistics
            grad_fill = self.fill * b * s * (heads + 2 * kv_heads) * hd * e  # dQ, dK, dV
            return ([self.compute("attention", AttentionOp(b, heads, kv_heads, s, hd, True, False, ACT_DTYPE,
                                                           kernel=ak, deterministic=det, extra_bytes=out_fill))],
                    [self.compute("attention-bwd", AttentionOp(b, heads, kv_heads, s, hd, True, True, ACT_DTYPE,
                                                               kernel=ak, deterministic=det,
                                                               extra_bytes=grad_fill))])
        return _unfused_attention(self.b * self.heads, self.s, model.head_dim, e)

    def input_projections(self) -> tuple[list[Step], list[Step]]:
        """The attention's input projections, forward and backward: one fused QKV GEMM, or
        MLA's down- and up-projections with the norms of its two latents."""
        c, T, e = self.compute, self.T, self.e
        in_gemms = self.model.attention_gemms(self.t)
        fwd: list[Step] = []
        for name, out, inp, _split in in_gemms:
            fwd.append(c(name, self.fwd_gemm(out, inp)))
            if name.endswith("-down"):
                fwd.append(c(f"{name[:-5]}-norm", self.mem(OpKind.NORM, 2 * T * out * e)))
        bwd: list[Step] = []
        for name, out, inp, _split in reversed(in_gemms):
            if name.endswith("-down"):
                bwd.append(c(f"{name[:-5]}-norm-bwd", self.fused_norm_bwd(3 * T * out * e)))
            bwd += [c(f"{name}-dgrad", self.dgrad_gemm(inp, out)), c(f"{name}-wgrad", self.wgrad_gemm(inp, out))]
        return fwd, bwd

    def activation(self) -> tuple[list[Step], list[Step]]:
        """The MLP's activation, forward and backward: one fused kernel each, or eager
        SwiGLU's kernels."""
        T, f, t, e, br = self.T, self.f, self.t, self.e, self.branches
        if self.eager and self.model.gated_mlp:
            return (self.kernels(OpKind.ELEMENTWISE, eager_kernels.swiglu_forward(T, f // t)),
                    self.kernels(OpKind.ELEMENTWISE, eager_kernels.swiglu_backward(T, f // t)))
        return ([self.compute("activation", self.mem(OpKind.ELEMENTWISE, T * f // t * e * (br + 1 + self.fill)))],
                [self.compute("activation-bwd", self.activation_bwd(T * f // t * e * (2 * br + 1),
                                                                    T * f // t * e * self.fill * br))])

    def rope(self) -> tuple[list[Step], list[Step]]:
        """The rotary embedding of q and k (unless the model is stated to have another position
        embedding). Fused: one kernel each for q and k that reads and writes it, forward and
        backward (Megatron-Core's ``apply_rotary_pos_emb`` with ``apply_rope_fusion``,
        Transformer Engine's ``FusedRoPEFunc``, ``transformer_engine/pytorch/attention/rope.py``;
        the kernel torch.compile generates for real-valued rotary code), at HBM bandwidth as
        every fused elementwise kernel is; only where the model states a rotary embedding
        (Megatron-LM's default ``--position-embedding-type`` is ``learned_absolute``). Eager
        (torchtitan's and PyTorch FSDP's Llama code, rotary unless stated otherwise): PyTorch's
        kernels for it, and the K/V heads repeated for SDPA. Compiled torchtitan code
        (:attr:`~sim.types.RopeImpl.COMPLEX`): the complex multiply TorchInductor leaves to ATen
        with its casts, and the repeated K/V written out
        (:func:`sim.workload.eager.compiled_rope_forward`). Multi-head latent attention's rotary
        part is not priced."""
        if self.model.is_mla:
            return [], []
        T, q_w, kv_w = self.T, self.q // self.t, self.kv_heads * self.model.head_dim
        if not self.eager and self.kspec.rope_impl is RopeImpl.COMPLEX:
            # torchtitan's complex multiply, which TorchInductor leaves to ATen (RopeImpl.COMPLEX)
            rotary = self.model.rotary is not False
            return (self.kernels(OpKind.ELEMENTWISE, eager_kernels.compiled_rope_forward(T, q_w, kv_w, rotary)),
                    self.kernels(OpKind.ELEMENTWISE, eager_kernels.compiled_rope_backward(T, q_w, kv_w, rotary)))
        if not self.eager:
            if self.model.rotary is not True:
                return [], []
            q_bytes, k_bytes = 2.0 * T * q_w * self.e, 2.0 * T * kv_w * self.e  # read and write each
            return ([self.compute("rope-q", self.mem(OpKind.ELEMENTWISE, q_bytes)),
                     self.compute("rope-k", self.mem(OpKind.ELEMENTWISE, k_bytes))],
                    [self.compute("rope-k-bwd", self.mem(OpKind.ELEMENTWISE, k_bytes)),
                     self.compute("rope-q-bwd", self.mem(OpKind.ELEMENTWISE, q_bytes))])
        rotary = self.model.rotary is not False
        rope_fwd = eager_kernels.rope_forward(T, q_w, kv_w) if rotary else []
        rope_bwd = eager_kernels.rope_backward(T, q_w, kv_w) if rotary else []
        return (self.kernels(OpKind.ELEMENTWISE, rope_fwd + eager_kernels.repeat_kv_forward(T, q_w, kv_w)),
                self.kernels(OpKind.ELEMENTWISE, eager_kernels.repeat_kv_backward(T, q_w, kv_w) + rope_bwd))

    def forward(self, attn_fwd: list[Step], proj_in: list[Step]) -> list[Step]:
        """A dense layer's forward. The TP collectives carry the Transformer Engine GEMM they
        overlap with under ``tp_comm_overlap`` (:mod:`sim.workload.tp_overlap`): all-gathers
        feeding fprop GEMMs and dgrad GEMMs of row-parallel layers are ring exchanges; the
        backward's re-gathered input beside a dgrad GEMM and its reduced gradient beside a
        wgrad GEMM are bulk overlaps."""
        c, T, h, f, t, br = self.compute, self.T, self.h, self.f, self.t, self.branches
        act_f, _ = self.activation()
        rope_f, _ = self.rope()
        # Megatron-LM's own QKV linear adds its bias after the GEMM (``output = output + bias``)
        qkv_bias = [c("qkv-bias", self.mem(OpKind.ELEMENTWISE, 2 * T * self.qkv_n * self.e))] \
            if self.kspec.unfused_linear_bias and not self.model.is_mla else []
        o_in = self.model.attention_out_size // t
        return [*self.norm_forward("norm1"), *self.gather("qkv-in", gemm="qkv_fprop"), *proj_in, *qkv_bias, *rope_f,
                *attn_fwd, c("proj", self.fwd_gemm(h, o_in)), *self.reduce("proj-out", gemm="proj_fprop"),
                c("dropout-add", self.dropout_add), *self.norm_forward("norm2"),
                *self.gather("fc1-in", gemm="fc1_fprop"), c("fc1", self.fwd_gemm(f * br // t, h)), *act_f,
                c("fc2", self.fwd_gemm(h, f // t)), *self.reduce("fc2-out", gemm="fc2_fprop"),
                c("dropout-add", self.dropout_add)]

    def dropout_add_backward(self) -> list[Step]:
        """The bias-dropout-add's backward: one kernel with dropout, none without."""
        bwd = self.dropout_add_bwd
        return [] if bwd is None else [self.compute("dropout-add-bwd", bwd)]

    def residual_grad(self) -> list[Step]:
        """The residual stream's gradient sum: each layer input and each post-attention sum
        feeds a norm and the next residual add, so autograd sums its two gradients once the
        norm's backward has run (torch/csrc/autograd/input_buffer.cpp, InputBuffer::add:
        ``old_var + var``, or ``add_`` in place): read two, write one, on the tokens the norm
        sees."""
        return [self.compute("residual-grad-add", self.mem(OpKind.ELEMENTWISE, 3 * self.Tn * self.h * self.e))]

    def backward(self, attn_bwd: list[Step], proj_in_bwd: list[Step]) -> tuple[list[Step], int]:
        """A dense layer's backward, and the index of its attention backward (selective
        recomputation goes before it)."""
        c, T, Tn, h, f, t, br = self.compute, self.T, self.Tn, self.h, self.f, self.t, self.branches
        _, act_b = self.activation()
        _, rope_b = self.rope()
        resid_b = self.residual_grad()
        o_in = self.model.attention_out_size // t
        bwd = [*self.dropout_add_backward(), *self.bias_grad("fc2", Tn, h),
               *self.gather("fc2-grad", gemm="fc2_dgrad"),
               c("fc2-dgrad", self.dgrad_gemm(f // t, h)), c("fc2-wgrad", self.wgrad_gemm(f // t, h)),
               *act_b, *self.bias_grad("fc1", T, f * br // t),
               *self.gather("fc1-in", wait=1, gemm="fc1_dgrad"),
               *self.dgrad_reduce_wgrad("fc1", self.dgrad_gemm(h, f * br // t), self.wgrad_gemm(h, f * br // t),
                                        "fc1_wgrad"),
               *self.projection_sums("fc1", br - 1),
               *self.norm_backward("norm2-bwd"), *resid_b, *self.dropout_add_backward(),
               *self.bias_grad("proj", Tn, h), *self.gather("proj-grad", gemm="proj_dgrad"),
               c("proj-dgrad", self.dgrad_gemm(o_in, h)), c("proj-wgrad", self.wgrad_gemm(o_in, h))]
        attention_bwd_index = len(bwd)
        if self.model.is_mla:
            # the gathered input is first needed by a down-projection's weight gradient; the
            # input gradient (the down-projections' dgrads summed) is reduced before norm1's backward
            first_wgrad = next(i for i, st in enumerate(proj_in_bwd) if st.name.endswith("-down-wgrad"))
            bwd += [*attn_bwd, *self.gather("qkv-in", wait=first_wgrad, gemm="qkv_dgrad"), *proj_in_bwd[:-1],
                    *self.reduce("qkv-grad", wait=1, gemm="qkv_wgrad"), proj_in_bwd[-1],
                    *self.norm_backward("norm1-bwd"), *resid_b]
        else:
            qkv_n = self.qkv_n
            bwd += [*attn_bwd, *rope_b, *self.gather("qkv-in", wait=1, gemm="qkv_dgrad"),
                    *self.dgrad_reduce_wgrad("qkv", self.dgrad_gemm(h, qkv_n), self.wgrad_gemm(h, qkv_n), "qkv_wgrad",
                                             self.bias_grad("qkv", T, qkv_n)),
                    *self.projection_sums("qkv", 2), *self.norm_backward("norm1-bwd"), *resid_b]
        return bwd, attention_bwd_index

    def embedding(self) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
        """The embedding's forward (a lookup, reduced over TP) and backward."""
        emb_bytes = self.mem(OpKind.EMBEDDING, 2 * self.T * self.h * self.e)
        return ((self.compute("embedding", emb_bytes), *self.reduce("embedding-out")),
                (*self.gather("embedding-grad"), self.compute("embedding-bwd", emb_bytes)))

    def head(self) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
        """The output layer and the loss, forward and backward."""
        c, T, h, t, V, e = self.compute, self.T, self.h, self.t, self.V, self.e
        logits = T * (V // t)
        # the cross entropy as Megatron runs it, measured (sim.workload.nongemm); torchtitan's
        # PyTorch cross entropy on the fp32 logits (cast, log_softmax, nll_loss and their
        # backwards) makes as many passes and is priced the same, not measured on its own
        loss_fwd = self.mem(OpKind.LOSS, logits * nongemm.CROSS_ENTROPY_FORWARD_BYTES,
                            efficiency=nongemm.CROSS_ENTROPY_FORWARD_EFFICIENCY)
        loss_bwd = self.mem(OpKind.LOSS, logits * nongemm.CROSS_ENTROPY_BACKWARD_BYTES,
                            efficiency=nongemm.CROSS_ENTROPY_BACKWARD_EFFICIENCY)
        small_ar = CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, self.tp_group, 3 * T * 4.0, self.replicas)
        hg = self.head_gemm
        head_fwd = (*self.norm_forward("final-norm"), *self.gather("head-in"), c("lm-head", hg(T, V // t, h)),
                    # Megatron's vocab-parallel cross entropy: fp32 logits, max / sum-exp / target
                    # all-reduced over TP (megatron/core/tensor_parallel/cross_entropy.py), its
                    # passes and their measured bandwidth in sim.workload.nongemm
                    c("cross-entropy", loss_fwd),
                    *([Step(Stream.TP_COMM, "ncclAllReduce loss", small_ar)] if self.tp_on else []))
        # the output layer's weight gradient (Megatron's ColumnParallelLinear): accumulated into
        # main_grad by the GEMM under gradient-accumulation fusion, as wgrad_gemm's, else added
        # into it by the same hook
        head_w = hg(V // t, h, T)
        if not self.kspec.gradient_accumulation_fusion:
            acc, adds = self.grad_accumulation((V // t) * h)
            head_w = replace(head_w, extra_bytes=acc, extra_kernels=adds)
        else:
            head_w = replace(head_w, epilogue_bytes=(V // t) * h * (2 * self.kspec.grad_bytes - e))
        head_bwd = (c("cross-entropy-bwd", loss_bwd),
                    c("lm-head-dgrad", hg(T, h, V // t)), *self.reduce("head-grad", wait=1),
                    c("lm-head-wgrad", head_w), *self.norm_backward("final-norm-bwd"))
        return head_fwd, head_bwd

    def mtp_projection(self) -> tuple[list[Step], list[Step], list[Step]]:
        """A multi-token-prediction module's steps before its transformer layer
        (:attr:`~sim.workload.spec.ModelSpec.mtp_num_layers`; Megatron-Core
        ``MultiTokenPredictionLayer`` @ d98e8a6): the embedding of the shifted tokens (its
        lookup and TP reduction, as the first stage's), then ``_concat_embeddings``: ``enorm``
        and ``hnorm``, the concatenation (``torch.cat``: read and write ``2h`` a token), the
        column-parallel ``eh_proj`` (``2h -> h / t``, its ``2h``-wide input all-gathered under
        sequence parallelism) and the all-gather of its output over TP
        (``gather_from_tensor_model_parallel_region``; the sequence-parallel scatter after it
        is a slice). Returns (the embedding's forward, the projection's forward, the backward
        of both): full recomputation re-runs the projection, not the embedding
        (``_checkpointed_forward`` wraps ``_proj_and_transformer_layer``). The steps are plain
        NCCL collectives: the TP overlap's userbuffers are not modelled here."""
        c, T, Tn, h, t, e = self.compute, self.T, self.Tn, self.h, self.t, self.e
        emb = self.mem(OpKind.EMBEDDING, 2 * T * h * e)
        wide = 2 * T * h * e
        sp_tp = self.sp and self.tp_on
        emb_f = [c("mtp-embedding", emb), *self.reduce("mtp-embedding-out")]
        proj_f = [*self.norm_forward("mtp-enorm"), *self.norm_forward("mtp-hnorm"),
                  c("mtp-concat", self.mem(OpKind.ELEMENTWISE, 2 * 2 * Tn * h * e)),
                  *([Step(Stream.TP_COMM, "ncclAllGather mtp-eh-proj-in", self.coll(CollectiveKind.ALL_GATHER, wide))]
                    if sp_tp else []),
                  c("mtp-eh-proj", self.fwd_gemm(h // t, 2 * h)),
                  *([Step(Stream.TP_COMM, "ncclAllGather mtp-eh-proj-out", self.ag)] if self.tp_on else [])]
        grad = [] if not self.tp_on else [Step(
            Stream.TP_COMM, "ncclReduceScatter mtp-eh-proj-grad" if self.sp else "ncclAllReduce mtp-eh-proj-grad",
            self.coll(CollectiveKind.REDUCE_SCATTER if self.sp else CollectiveKind.ALL_REDUCE, wide), 1)]
        bwd = [*self.gather("mtp-eh-proj-out-grad"),
               c("mtp-eh-proj-dgrad", self.dgrad_gemm(2 * h, h // t)), *grad,
               c("mtp-eh-proj-wgrad", self.wgrad_gemm(2 * h, h // t)),
               *self.norm_backward("mtp-hnorm-bwd"), *self.norm_backward("mtp-enorm-bwd"),
               *self.gather("mtp-embedding-grad"), c("mtp-embedding-bwd", emb)]
        return emb_f, proj_f, bwd

    def mtp_heads(self, dense: LayerOps, moe: LayerOps | None, head_fwd: tuple[Step, ...],
                  head_bwd: tuple[Step, ...]) -> tuple[tuple[Step, ...], tuple[Step, ...],
                                                       tuple[Step, ...], tuple[Step, ...]]:
        """The output layer's forward and backward with the multi-token-prediction modules
        before them (:meth:`mtp_projection`, a transformer layer of the decoder's last layer's
        kind, its final norm, output layer and loss), as Megatron-Core's ``GPTModel`` runs
        them on the last stage: the modules' forward after the decoder and before the main
        logits (``_postprocess``: ``self.mtp(...)``, then ``process_mtp_loss`` computes each
        module's logits and loss), their backward after the main loss's, last module first.
        The layer recomputes under full recomputation's uniform method, not under ``block``
        (``MultiTokenPredictionBlock._checkpointed_forward``), and selectively as a decoder
        layer does. Returns the output layer's forward and backward with the modules, and one
        module's own."""
        m, p = self.model, self.parallel
        n = m.mtp_num_layers
        if not n:
            return head_fwd, head_bwd, (), ()
        with self.plain_tp():
            emb_f, proj_f, pre_b = self.mtp_projection()
        kind = moe if moe is not None and m.is_moe_layer(m.mtp_layer) else dense
        rc = p.recompute
        if rc is RecomputeKind.FULL and p.recompute_num_layers is not None:
            rc = RecomputeKind.NONE
        again = tuple(proj_f) if rc is RecomputeKind.FULL else ()
        one_f = (*emb_f, *proj_f, *kind.layer_fwd, *head_fwd)
        one_b = (*head_bwd, *again,
                 *backward_steps(kind, kind.layer_bwd, kind.attention_bwd_index, rc), *pre_b)
        return one_f * n + head_fwd, head_bwd + one_b * n, one_f, one_b

    def op_recompute(self, fwd: list[Step], matmuls: list) -> tuple[Step, ...]:
        """What op-level selective recomputation recomputes: every other of the given
        projections' forward GEMMs, and the forward's memory-bound ops."""
        return tuple(self.compute(name, self.fwd_gemm(out, inp)) for name, out, inp in matmuls) + tuple(
            st for st in fwd if st.stream is None and isinstance(st.op, MemoryOp))

    def build(self) -> LayerOps:
        """Every pass's steps of a dense layer and, for a mixture-of-experts model, of its
        MoE layer (:attr:`LayerOps.moe`)."""
        parallel, t = self.parallel, self.t
        attn_fwd, attn_bwd = self.attention()
        proj_in, proj_in_bwd = self.input_projections()
        fwd = self.forward(attn_fwd, proj_in)
        # PyTorch's async TP overlaps the forward pass only: the recomputed forward and the
        # backward run their TP collectives as plain TP does (sim.workload.tp_overlap.ASYNC_TP)
        forward_only = self.overlap and parallel.tp_comm_overlap_cfg.kernel is CommKernel.SYMMETRIC_MEMORY
        recompute_fwd = None
        with self.plain_tp() if forward_only else nullcontext():
            bwd, attention_bwd_index = self.backward(attn_bwd, proj_in_bwd)
            if forward_only:
                recompute_fwd = self.forward(attn_fwd, proj_in)
        embedding_fwd, embedding_bwd = self.embedding()
        head_fwd, head_bwd = self.head()
        # every other matmul of wq, wk, wv, wo, w1, [w3,] w2, as separate projections
        mms = self.model.separate_matmuls(t)
        op_recompute = self.op_recompute(fwd, mms[1::2])
        if forward_only:
            fwd = _overlap_tp(_async_tp_reductions(fwd, t, self.e))
        elif self.overlap:
            # the overlap swaps and splits GEMM and collective steps, never the attention
            # backward's first step: its index is found again in the new list
            cfg = parallel.tp_comm_overlap_cfg
            fwd = _chunk_pipeline(_overlap_tp(_split_gemms(fwd, cfg, t)))
            attention_bwd = bwd[attention_bwd_index]
            bwd = _chunk_pipeline(_overlap_tp(_split_gemms(bwd, cfg, t)))
            attention_bwd_index = next(i for i, st in enumerate(bwd) if st is attention_bwd)
        moe = None
        if self.model.is_moe:
            # the attention half is the dense layer's; the MLP half (from norm2 on) is replaced
            mlp_at = next(i for i, st in enumerate(fwd) if st.name.startswith("norm2"))
            mlp_fwd, mlp_bwd = self.moe_mlp()
            moe_fwd = fwd[:mlp_at] + mlp_fwd
            moe_refwd = tuple(moe_fwd)
            if recompute_fwd is not None:
                with self.plain_tp():
                    plain_mlp_fwd, mlp_bwd = self.moe_mlp()
                at = next(i for i, st in enumerate(recompute_fwd) if st.name.startswith("norm2"))
                moe_refwd = tuple(recompute_fwd[:at] + plain_mlp_fwd)
            # the attention half's backward starts after the MLP half's residual gradient sum
            bwd_at = 1 + next(i for i, st in enumerate(bwd) if st.name == "residual-grad-add")
            moe_bwd = mlp_bwd + bwd[bwd_at:]
            moe_k = len(mlp_bwd) + (attention_bwd_index - bwd_at)
            moe_before, moe_at = selective_steps(moe_fwd, attn_fwd, parallel.recompute_modules, moe=True)
            moe = LayerOps(tuple(moe_fwd), tuple(moe_bwd), moe_k, tuple(attn_fwd), embedding_fwd, embedding_bwd,
                           head_fwd, head_bwd, self.op_recompute(moe_fwd, mms[1:4:2]), recompute_fwd=moe_refwd,
                           selective_before=moe_before, selective_at=moe_at)
        sel_before, sel_at = selective_steps(fwd, attn_fwd, parallel.recompute_modules, moe=False)
        dense = LayerOps(tuple(fwd), tuple(bwd), attention_bwd_index, tuple(attn_fwd),
                         embedding_fwd, embedding_bwd, head_fwd, head_bwd, op_recompute, moe,
                         recompute_fwd=tuple(fwd if recompute_fwd is None else recompute_fwd),
                         selective_before=sel_before, selective_at=sel_at)
        if not self.model.mtp_num_layers:
            return dense
        head_fwd, head_bwd, mtp_fwd, mtp_bwd = self.mtp_heads(dense, moe, head_fwd, head_bwd)
        if moe is not None:
            moe = replace(moe, head_fwd=head_fwd, head_bwd=head_bwd, mtp_fwd=mtp_fwd, mtp_bwd=mtp_bwd)
        return replace(dense, head_fwd=head_fwd, head_bwd=head_bwd, mtp_fwd=mtp_fwd, mtp_bwd=mtp_bwd, moe=moe)

    def moe_mlp(self) -> tuple[list[Step], list[Step]]:
        """The MLP half of a mixture-of-experts layer, Megatron-Core's all-to-all token dispatcher
        (``megatron/core/transformer/moe/token_dispatcher.py``, ``MoEAlltoAllTokenDispatcher``):

        router GEMM and top-k on the rank's ``T / t`` tokens (sequence parallel), permute the
        tokens by expert, all-to-all over the EP group, all-gather over TP of its output (experts
        are split over TP like the dense MLP), the local experts as grouped GEMMs, reduce-scatter
        over TP, all-to-all back of its output, unpermute and weight (each TP collective on the
        all-to-all's stream, after or before it: the one's output is the other's input); shared
        experts, if any, run as a dense MLP on the
        layer's tokens. Under balanced routing each of the ``E / ep`` local experts gets
        ``T k ep / E`` tokens (times the capacity factor when padded). The backward mirrors it.

        With expert tensor parallelism (``etp != tp``, MoE parallel folding, Liu et al. 2025,
        arXiv 2504.14960) the TP collectives above run over the experts' TP group (the ETP
        group; the dispatcher's ``tp_group`` is Megatron-Core's
        ``expert_tensor_parallel_group``) and the experts are split ``etp`` ways. Each rank still
        dispatches its ``T / t`` sequence-parallel tokens over the EP group (which may now span TP
        ranks); after the all-to-all and the gather over ETP a rank's experts see the tokens of
        its ``etp x ep`` ranks (Megatron's ``num_global_tokens = num_local_tokens x ETP x EP``):
        ``T / t x etp x k x ep / E`` per local expert."""
        model, parallel, T, e = self.model, self.parallel, self.T, self.e
        c, mem = self.compute, self.mem
        t, ep = parallel.tp, parallel.ep
        te = parallel.expert_tp
        folded = te != t
        # unset: the TP group, or under folding the ``etp`` consecutive ranks from its first
        # (the ETP group of the stage's first rank, :meth:`sim.workload.layout.Layout.etp_group`)
        tp_group = self.etp_group if self.etp_group is not None else \
            tuple(self.tp_group[0] + i for i in range(te)) if folded else self.tp_group
        replicas = self.etp_replicas if self.etp_replicas is not None else () if folded else self.replicas
        h, E, k = model.hidden_size, model.num_experts, model.moe_top_k
        f = model.moe_ffn_hidden_size
        br = 2 if model.gated_mlp else 1
        Tn = T // t  # MoE with TP runs under sequence parallelism (checked by the spec)
        Te = T if te == t else Tn * te  # tokens the rank's ETP group dispatches
        routed = Tn * k  # token-expert pairs this rank dispatches
        cf = model.moe_capacity_factor or 1.0
        local = E // ep
        per_expert = max(1, round(Te * k * ep / E * cf))
        a2a_bytes = routed * h * e

        dispatcher = parallel.moe_dispatcher

        def ep_coll(name: str, wait: int = 0) -> list[Step]:
            if ep == 1:
                return []
            if dispatcher is MoeDispatcher.ALLTOALL:
                op = CommOp(CollectiveKind.ALL_TO_ALL, CommClass.EP, self.ep_group, a2a_bytes, self.ep_replicas)
                return [Step(Stream.EP_COMM, f"ncclAllToAll {name}", op, wait)]
            # each token once to every rank (and scale-up domain) holding one of its experts
            kernel, sms = FLEX_KERNELS[dispatcher]
            op = CommOp(CollectiveKind.ALL_TO_ALL, CommClass.EP, self.ep_group, Tn * h * e, self.ep_replicas,
                        kernel, sms, routing=Routing(E, k))
            return [Step(Stream.EP_COMM, f"{dispatcher.value} {name}", op, wait)]

        def tp_coll(kind: CollectiveKind, name: str, wait: int = 0) -> list[Step]:
            # issued on the stream of the all-to-all whose output it gathers (or whose input it
            # reduces): the dispatcher runs the two one after the other (dispatch_postprocess's
            # gather_from_sequence_parallel_region after token_dispatch's all_to_all;
            # combine_preprocess's reduce-scatter before token_combine's), so neither overlaps
            # the other
            if te == 1:
                return []
            op = CommOp(kind, CommClass.TP, tp_group, Te * k * cf * h * e, replicas)
            nccl = "ncclAllGather" if kind is CollectiveKind.ALL_GATHER else "ncclReduceScatter"
            return [Step(Stream.EP_COMM, f"{nccl} {name}", op, wait)]

        def act_dtype_gemm(m_: int, n_: int, k_: int) -> GemmOp:
            return GemmOp(m_, n_, k_, ACT_DTYPE)

        router = act_dtype_gemm(Tn, E, h)
        topk = mem(OpKind.ELEMENTWISE, Tn * E * 4 * 3)  # fp32 logits: softmax, top-k, probabilities
        permute = mem(OpKind.ELEMENTWISE, 2 * routed * h * e)
        routed_all = Te * k * cf  # pairs the rank's local experts compute, over its ETP group
        exp_fc1 = self.fwd_gemm(br * f // te, h, per_expert, local)
        exp_fc2 = self.fwd_gemm(h, f // te, per_expert, local)
        exp_act = mem(OpKind.ELEMENTWISE, routed_all * f // te * e * (br + 1))
        # a gated expert's fused activation backward at its measured share (dense MLPs: activation_bwd)
        act_bwd_eff = nongemm.SWIGLU_BACKWARD_EFFICIENCY if br == 2 else 1.0
        exp_act_b = mem(OpKind.ELEMENTWISE, routed_all * f // te * e * (2 * br + 1), efficiency=act_bwd_eff)
        exp_fc1_d = self.dgrad_gemm(h, br * f // te, per_expert, local)
        exp_fc1_w = self.wgrad_gemm(h, br * f // te, per_expert, local)
        exp_fc2_d = self.dgrad_gemm(f // te, h, per_expert, local)
        exp_fc2_w = self.wgrad_gemm(f // te, h, per_expert, local)
        fwd = [*self.norm_forward("norm2"), c("router", router), c("router-topk", topk), c("permute", permute),
               *ep_coll("dispatch"), *tp_coll(CollectiveKind.ALL_GATHER, "dispatch"),
               c("experts-fc1", exp_fc1), c("experts-activation", exp_act), c("experts-fc2", exp_fc2),
               *tp_coll(CollectiveKind.REDUCE_SCATTER, "combine"), *ep_coll("combine"),
               c("unpermute", permute)]
        drop_b = self.dropout_add_backward()
        bwd = [*drop_b, c("unpermute-bwd", permute), *ep_coll("combine-grad"),
               *tp_coll(CollectiveKind.ALL_GATHER, "combine-grad"),
               c("experts-fc2-dgrad", exp_fc2_d), c("experts-fc2-wgrad", exp_fc2_w),
               c("experts-activation-bwd", exp_act_b), c("experts-fc1-dgrad", exp_fc1_d),
               c("experts-fc1-wgrad", exp_fc1_w), *tp_coll(CollectiveKind.REDUCE_SCATTER, "dispatch-grad"),
               *ep_coll("dispatch-grad"), c("permute-bwd", permute),
               c("router-dgrad", act_dtype_gemm(Tn, h, E)), c("router-wgrad", act_dtype_gemm(h, E, Tn))]
        fs = model.shared_ffn_size
        if fs:
            fwd_g, dgrad_g, wgrad_g = self.fwd_gemm, self.dgrad_gemm, self.wgrad_gemm
            fwd += [*self.gather("shared-in"), c("shared-fc1", fwd_g(br * fs // t, h)),
                    c("shared-activation", mem(OpKind.ELEMENTWISE, T * fs // t * e * (br + 1))),
                    c("shared-fc2", fwd_g(h, fs // t)), *self.reduce("shared-out")]
            bwd[len(drop_b):len(drop_b)] = [*self.gather("shared-grad"), c("shared-fc2-dgrad", dgrad_g(fs // t, h)),
                        c("shared-fc2-wgrad", wgrad_g(fs // t, h)),
                        c("shared-activation-bwd", mem(OpKind.ELEMENTWISE, T * fs // t * e * (2 * br + 1),
                                                      efficiency=act_bwd_eff)),
                        *self.gather("shared-in", wait=1), c("shared-fc1-dgrad", dgrad_g(h, br * fs // t)),
                        *self.reduce("shared-grad", wait=1), c("shared-fc1-wgrad", wgrad_g(h, br * fs // t))]
        fwd.append(c("dropout-add", self.dropout_add))
        bwd += self.norm_backward("norm2-bwd") + self.residual_grad()
        return fwd, bwd


def layer_ops(model: ModelSpec, parallel: ParallelSpec, dtype: Dtype, tp_group: tuple[int, ...],
              replicas: tuple[tuple[int, ...], ...] = (), cp_group: tuple[int, ...] = (0,),
              cp_replicas: tuple[tuple[int, ...], ...] = (), ep_group: tuple[int, ...] = (0,),
              ep_replicas: tuple[tuple[int, ...], ...] = (),
              scaling: ScalingRecipe = ScalingRecipe.DELAYED, etp_group: tuple[int, ...] | None = None,
              etp_replicas: tuple[tuple[int, ...], ...] | None = None, bf16_layers: bool = False, *,
              kernels: KernelsSpec, fp8_any_layout: bool = False) -> LayerOps:
    """Build the step lists of one pipeline stage whose TP group is ``tp_group`` (and CP group
    ``cp_group``, EP group ``ep_group``, experts' TP group ``etp_group``, by default the TP
    group; ``replicas`` list the groups doing the same at the same time): :class:`LayerBuilder`.

    ``bf16_layers``: also build the layers' BF16 variant (:attr:`LayerOps.high_precision`),
    for the first and last layers a low-precision ``dtype`` keeps in BF16. ``kernels``: the
    workload's kernel switches (:class:`~sim.workload.kernels.KernelsSpec`). ``fp8_any_layout``:
    the GPU's FP8 GEMMs take every layout (:attr:`sim.hardware.GPUSpec.fp8_any_layout`)."""
    groups = (tp_group, replicas, cp_group, cp_replicas, ep_group, ep_replicas, scaling, etp_group, etp_replicas)
    if bf16_layers and dtype in LOW_PRECISION:
        low = LayerBuilder(model, parallel, dtype, *groups, kernels=kernels, fp8_any_layout=fp8_any_layout).build()
        high = LayerBuilder(model, parallel, ACT_DTYPE, *groups, kernels=kernels).build()
        return replace(low, high_precision=high)
    return LayerBuilder(model, parallel, dtype, *groups, kernels=kernels, fp8_any_layout=fp8_any_layout).build()


FLEX_KERNELS = {MoeDispatcher.DEEPEP: (CommKernel.DEEPEP, 20), MoeDispatcher.HYBRIDEP: (CommKernel.HYBRIDEP, 16)}
"""What runs the flex dispatcher's exchanges, and the SMs it holds: DeepEP's kernels on
Megatron-Core's ``--moe-deepep-num-sms`` (default 20, DeepEP's own ``Buffer.num_sms``),
HybridEP's on ``--moe-hybridep-num-sms`` (default 16; Megatron-Core
``megatron/training/arguments.py``)."""


_ASYNC_TP_REDUCED = frozenset({"proj", "fc2"})
"""The forward GEMMs whose outputs a sequence-parallel layer reduce-scatters (the row-parallel
forwards; async TP overlaps the forward only, :data:`~sim.workload.tp_overlap.ASYNC_TP`)."""


def _async_tp_reductions(steps: list[Step], t: int, e: float) -> list[Step]:
    """PyTorch's async TP (``torch.distributed._symmetric_memory``,
    ``_fused_matmul_reduce_scatter_impl`` and its scaled twin, which torch.compile's
    micro-pipeline pass substitutes for a matmul followed by a reduce-scatter) computes the
    whole local product in ``t`` row chunks, sends each chunk to its rank on the copy engines
    (``_pipelined_produce_and_all2all``) and then sums the ``t`` chunks it received in one
    ``torch.sum`` kernel (``reduce_fn(stacked_partials.view(t, ...), dim=0)``): it reads the
    ``m x n`` stacked partials and writes the ``m / t x n`` shard. NCCL's reduce-scatter does
    that sum inside the collective; here it is a bandwidth-bound kernel after the GEMM, priced
    with it (:attr:`~sim.workload.ops.GemmOp.extra_bytes`)."""
    out = []
    for st in steps:
        op = st.op
        if st.stream is None and st.name in _ASYNC_TP_REDUCED and isinstance(op, GemmOp):
            nbytes = op.m * op.n * (1 + 1 / t) * e
            op = replace(op, extra_bytes=op.extra_bytes + nbytes, extra_kernels=op.extra_kernels + 1)
            st = Step(st.stream, st.name, op, st.wait)
        out.append(st)
    return out


_UB_GEMM_STEPS = {"qkv": "qkv_fprop", "fc1": "fc1_fprop", "proj": "proj_fprop", "fc2": "fc2_fprop",
                  "proj-dgrad": "proj_dgrad", "fc2-dgrad": "fc2_dgrad", "qkv-dgrad": "qkv_dgrad",
                  "qkv-wgrad": "qkv_wgrad", "fc1-dgrad": "fc1_dgrad", "fc1-wgrad": "fc1_wgrad"}
"""The layer's GEMM steps by the name Transformer Engine gives the userbuffers communicator
beside them (:data:`sim.workload.tp_overlap.UB_GEMMS`)."""


def _split_gemms(steps: list[Step], cfg: TpOverlapConfig, tp: int) -> list[Step]:
    """The GEMMs beside userbuffers communicators as Transformer Engine runs them: in chunks of
    their rows, on the SMs the communicator leaves (:class:`~sim.workload.tp_overlap.UbSplit`)."""
    if cfg.kernel is not CommKernel.USERBUFFERS:
        return steps
    out = []
    for st in steps:
        gemm = _UB_GEMM_STEPS.get(st.name)
        if gemm is not None and isinstance(st.op, GemmOp):
            split = cfg.split_of(gemm)
            chunks = max(1, min(split.chunks_at(tp), st.op.m))
            if chunks > 1 or split.sm_margin:
                st = Step(st.stream, st.name, replace(st.op, chunks=chunks, sm_margin=split.sm_margin), st.wait)
        out.append(st)
    return out


def _overlap_tp(steps: list[Step]) -> list[Step]:
    """Megatron-LM's ``--tp-comm-overlap`` (Transformer Engine userbuffers): a GEMM fed by a
    sequence-parallel all-gather starts with the first chunk, so the compute after it waits
    for the gather instead; a reduce-scatter that drains a GEMM runs chunk by chunk beside it,
    so it is issued with the GEMM and waited for by the compute after it. The backward's
    overlaps that Megatron makes anyway (the gathered input beside the input-gradient GEMM, the
    gradient's reduce-scatter beside the weight-gradient GEMM) are kept."""
    out = list(steps)

    def target(i: int) -> Step | None:
        k = out[i].wait
        for st in out[i + 1:]:
            if st.stream is None:
                if k == 0:
                    return st
                k -= 1
        return None

    for i, st in enumerate(out):
        if st.stream is not Stream.TP_COMM or not isinstance(st.op, CommOp):
            continue
        if st.op.collective is CollectiveKind.ALL_GATHER:
            tgt = target(i)
            if tgt is not None and isinstance(tgt.op, GemmOp) and st.wait == 0:
                out[i] = Step(st.stream, st.name, st.op, st.wait + 1)
        elif st.op.collective is CollectiveKind.REDUCE_SCATTER and st.wait == 0 and i > 0:
            prev = out[i - 1]
            if prev.stream is None and isinstance(prev.op, GemmOp):
                out[i - 1], out[i] = Step(st.stream, st.name, st.op, 1), prev
    return out


_AG_FED = frozenset({"qkv", "fc1", "proj-dgrad", "fc2-dgrad"})
"""The GEMMs Transformer Engine feeds from a sequence-parallel all-gather it overlaps chunk by
chunk (``ub_overlap_ag``: the column-parallel forwards and the row-parallel input gradients)."""
_RS_DRAINED = frozenset({"proj", "fc2"})
"""The GEMMs whose output Transformer Engine reduce-scatters chunk by chunk (``ub_overlap_rs``:
the row-parallel forwards)."""


def _split_rows(op: GemmOp, first: int) -> tuple[GemmOp, GemmOp]:
    """``op`` (in ``op.chunks`` chunks) as two GEMMs: its first ``first`` chunks and the rest,
    each on its share of the rows and of the work beside it (casts, fills), each chunk at the
    size it had."""
    rows = op.m * first // op.chunks
    share = rows / op.m

    def part(m: int, chunks: int, f: float) -> GemmOp:
        return replace(op, m=m, chunks=chunks, extra_bytes=op.extra_bytes * f,
                       epilogue_bytes=op.epilogue_bytes * f)

    return part(rows, first, share), part(op.m - rows, op.chunks - first, 1.0 - share)


def _chunk_pipeline(steps: list[Step]) -> list[Step]:
    """The chunk-by-chunk order of Transformer Engine's userbuffers overlaps, where
    :func:`_overlap_tp` leaves a GEMM and its collective side by side for their whole length.

    TE's ``CommOverlapP2PBase::split_overlap_ag`` (ring exchange) computes the GEMM on the shard
    in hand while the next shard arrives, so the last chunk starts only once the all-gather is
    done: ``max(head, all-gather) + last chunk``. ``CommOverlapBase::split_overlap_rs``
    (pipeline) and ``CommOverlapP2PBase::split_overlap_rs`` (ring exchange) reduce-scatter each
    chunk once it is computed, so the first chunk runs before any of it and the last chunk's
    share after the GEMM: ``first chunk + max(rest, its share) + the last chunk's share``
    (NVIDIA/TransformerEngine ``transformer_engine/common/comm_gemm_overlap/
    comm_gemm_overlap.cpp`` @ v2.8). A GEMM run whole (bulk overlaps, one chunk) keeps
    :func:`_overlap_tp`'s order."""
    out: list[Step] = []
    i = 0
    while i < len(steps):
        st = steps[i]
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        if (st.stream is not None and isinstance(st.op, CommOp) and nxt is not None and nxt.stream is None
                and isinstance(nxt.op, GemmOp) and nxt.op.chunks > 1):
            gemm = nxt.op
            if st.op.collective is CollectiveKind.ALL_GATHER and st.wait == 1 and nxt.name in _AG_FED:
                head, tail = _split_rows(gemm, gemm.chunks - 1)
                out += [st, Step(None, nxt.name, head), Step(None, nxt.name, tail)]
                i += 2
                continue
            if st.op.collective is CollectiveKind.REDUCE_SCATTER and st.wait == 1 and nxt.name in _RS_DRAINED:
                first, rest = _split_rows(gemm, 1)
                last = st.op.size_bytes / gemm.chunks
                out += [Step(None, nxt.name, first),
                        Step(st.stream, st.name, replace(st.op, size_bytes=st.op.size_bytes - last), 1),
                        Step(None, nxt.name, rest),
                        Step(st.stream, st.name, replace(st.op, size_bytes=last), 0)]
                i += 2
                continue
        out.append(st)
        i += 1
    return out


def _unfused_attention(batch: int, s: int, hd: int, e: float) -> tuple[list[Step], list[Step]]:
    """Megatron-LM's core attention before FlashAttention (``CoreAttention``, 2022): a batched
    score GEMM, the fused scale-mask-softmax, dropout (1-byte mask), a batched value GEMM; the
    backward runs two GEMMs for each forward one and the softmax and dropout gradients, all on
    the full ``s x s`` scores of each head (Korthikanti et al. 2022, Sec. 4.1, the ``5as/h``
    activation term).

    Around the kernels, PyTorch runs the copies and scalings of that code: the forward's
    ``context_layer.permute(2, 0, 1, 3).contiguous()`` (and the same permute of its gradient
    backward); the backward of ``torch.baddbmm(..., alpha=1/norm_factor)``, which scales each
    of the query and key gradients by ``alpha`` in a kernel of its own (PyTorch
    ``tools/autograd/derivatives.yaml``: ``batch1: maybe_multiply(grad.bmm(...), alpha)``);
    and the backward of ``split_tensor_along_last_dim`` (``torch.split`` of the fused QKV
    output), which concatenates the query, key and value gradients (``torch.cat``). Each reads
    and writes its tensor once."""
    scores = batch * s * s
    head_out = batch * s * hd  # one of q, k, v or the context, in elements

    def bmm(name: str, m: int, n: int, k: int) -> Step:
        return Step(None, name, GemmOp(m, n, k, ACT_DTYPE, batch, OpKind.ATTENTION))

    def pointwise(name: str, nbytes: float) -> Step:
        return Step(None, name, MemoryOp(OpKind.ATTENTION, float(nbytes)))

    copy = 2 * e * head_out
    fwd = [bmm("attn-scores", s, s, hd), pointwise("softmax", scores * 2 * e),
           pointwise("attn-dropout", scores * (2 * e + 1)), bmm("attn-values", s, hd, s),
           pointwise("context-permute", copy)]
    bwd = [pointwise("context-permute-bwd", copy),
           bmm("attn-values-dgrad", s, s, hd), bmm("attn-values-wgrad", s, hd, s),
           pointwise("attn-dropout-bwd", scores * (2 * e + 1)), pointwise("softmax-bwd", scores * 3 * e),
           bmm("attn-scores-dgrad", s, hd, s), bmm("attn-scores-wgrad", s, hd, s),
           pointwise("q-scale-bwd", copy), pointwise("k-scale-bwd", copy), pointwise("qkv-split-bwd", 3 * copy)]
    return fwd, bwd
