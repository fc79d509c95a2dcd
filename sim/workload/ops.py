"""Operation shapes: what a task computes or communicates, independent of when it runs.

Ops are small frozen (hashable) records, so a cost model prices each distinct shape once and
every layer and micro-batch that repeats the shape reuses the price.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.types import AttentionKernel, CollectiveKind, CommClass, CommKernel, Dtype, MemoryAccess, OpKind

__all__ = ["GemmOp", "AttentionOp", "MemoryOp", "CommOp", "Routing", "Op", "dtype_bytes",
           "FA_BACKWARD_FLOP_RATIO", "causal_fraction"]

_DTYPE_BYTES = {Dtype.FP32: 4, Dtype.TF32: 4, Dtype.BF16: 2, Dtype.FP16: 2, Dtype.FP8: 1,
                Dtype.MXFP8: 1, Dtype.NVFP4: 0.5}


def dtype_bytes(dtype: Dtype) -> float:
    """Bytes per element of ``dtype``."""
    return _DTYPE_BYTES[dtype]


FA_BACKWARD_FLOP_RATIO = 2.5
"""FlashAttention's backward does 5 matmuls to the forward's 2 (Dao 2023, arXiv 2307.08691,
Sec. 3.1), recomputing the scores, so it costs 2.5x the forward's FLOPs."""

_FA_BLOCK = 128
"""Query/key tile of FlashAttention-2 kernels (arXiv 2307.08691, Sec. 3.1)."""


def causal_fraction(seq: int) -> float:
    """Fraction of the s x s score tiles a causal flash-attention kernel computes.

    With ``n = ceil(s / 128)`` tiles per side it computes the ``n (n + 1) / 2`` tiles on or
    below the diagonal (FlashAttention-2 skips the rest, arXiv 2307.08691, Sec. 3.1.1).

    >>> causal_fraction(128), round(causal_fraction(2048), 4)
    (1.0, 0.5312)
    """
    n = -(-seq // _FA_BLOCK)
    return (n + 1) / (2 * n)


@dataclass(frozen=True, slots=True)
class GemmOp:
    """``batch`` independent ``C[m, n] = A[m, k] @ B[k, n]`` in ``dtype`` (one kernel unless
    :attr:`streams` says otherwise).

    ``batch > 1`` is a batched GEMM (``torch.bmm``), as unfused attention computes its scores
    and weighted values (those carry ``kind=OpKind.ATTENTION`` so their time counts as
    attention), or a mixture-of-experts layer's local experts.
    """

    m: int
    n: int
    k: int
    dtype: Dtype
    batch: int = 1
    kind: OpKind = OpKind.GEMM
    extra_bytes: float = 0.0
    """Bandwidth-bound work that goes with this GEMM: the quantization of its 16-bit inputs
    (:mod:`sim.workload.quantization`: FP8 casts and transposes, NVFP4's amax pass and
    row-wise and Hadamard-transformed column-wise casts); under deterministic mode the NaN
    fill of its freshly allocated output; for a weight gradient not accumulated in the GEMM,
    its addition into the fp32 ``main_grad`` (:func:`sim.workload.layers.layer_ops`)."""
    extra_kernels: int = 0
    """Kernel launches of that work."""
    epilogue_bytes: float = 0.0
    """HBM traffic of this GEMM's own epilogue beyond writing a 16-bit ``C``: where a weight
    gradient accumulates into the fp32 ``main_grad`` (gradient-accumulation fusion: cuBLAS with
    ``beta = 1`` and an fp32 ``C``, Apex's ``wgrad_gemm_accum_fp32`` or Transformer Engine's
    ``accumulate=True``) it reads 4 bytes and writes 4 per element of ``C`` instead of writing 2.
    Whether that adds time is the GPU's (:attr:`sim.hardware.GPUSpec.gemm_epilogue_overlapped`)."""
    chunks: int = 1
    """Kernels the GEMM runs as, one after another, each on ``m / chunks`` rows and all of ``B``:
    Transformer Engine's userbuffers split a GEMM overlapped with a ring exchange into ``tp``
    chunks (``tp / 2`` aggregated) and a pipelined one into ``num_splits``
    (:mod:`sim.workload.tp_overlap`)."""
    sm_margin: int = 0
    """SMs the GEMM is launched without, for its whole length: a userbuffers overlap with
    ``set_sm_margin`` leaves its communicator's ``num_sm`` to it
    (``_math_sms = sm_count - num_comm_sm``, TE ``comm_gemm_overlap.cpp``)."""
    streams: int = 0
    """0: the ``batch`` GEMMs run as one kernel (a batched or grouped GEMM: ``torch.bmm``,
    ``torch._grouped_mm``, the ``grouped_gemm`` package). ``n``: as ``batch`` kernels of their
    own, issued round-robin on ``n`` CUDA streams, as Transformer Engine's grouped linear runs a
    layer's local experts (``GroupedLinear`` -> ``general_grouped_gemm`` ->
    ``nvte_multi_tensor_gemm`` -> ``multi_stream_cublas_gemm``, one cuBLAS GEMM per expert on
    compute stream ``i % 4``; ``transformer_engine/common/gemm/cublaslt_gemm.cu`` and
    ``util/multi_stream.cpp`` ``num_compute_streams = 4`` @ v2.8-v2.14). Each kernel is one
    expert's size, so the GEMM runs at the efficiency of at most ``n`` of them side by side
    (:func:`sim.costs.compute.gemm_time_s`), not at that of one kernel of all the FLOPs."""
    issue_s: float = 0.0
    """Host time to issue the op's kernels one after another: the op cannot end before its
    last kernel is issued, so it takes at least this long (:func:`sim.costs.compute.gemm_time_s`).
    An x86 DGX host's time; a GPU with another host scales it (:func:`sim.costs.compute.issue_time_s`).
    Set for Transformer Engine's grouped linear, whose host issues a cuBLASLt GEMM an expert
    (:data:`sim.workload.kernels.TE_GROUPED_GEMM_ISSUE_S`); 0: the GPU's time alone."""

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def bytes(self) -> float:
        """HBM traffic: ``A`` and ``C`` once, ``B`` once per chunk."""
        elements = self.m * self.k + self.chunks * self.k * self.n + self.m * self.n
        return self.batch * elements * dtype_bytes(self.dtype)


@dataclass(frozen=True, slots=True)
class AttentionOp:
    """Fused (flash) attention over ``batch x heads`` sequences, forward or backward.

    ``heads`` are the query heads on this GPU; ``kv_heads`` the key/value heads (GQA).
    FLOPs count only the tiles a causal kernel computes (see :func:`causal_fraction`).
    """

    batch: int
    heads: int
    kv_heads: int
    seq: int
    head_dim: int
    causal: bool
    backward: bool
    dtype: Dtype = Dtype.BF16
    fraction: float = 1.0
    """Share of the whole sequence's attention this op does (one ring-attention step of
    context parallelism does ``1 / cp^2``)."""
    kernel: AttentionKernel = AttentionKernel.VENDOR
    deterministic: bool = False
    """The backward runs the kernel's deterministic algorithm (Transformer Engine with
    ``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0``), priced at the GPU's
    ``deterministic_attention_backward_efficiency`` where one is known."""
    extra_bytes: float = 0.0
    """Bandwidth-bound work beside the kernel: under deterministic mode the NaN fill of its
    freshly allocated outputs (O and the softmax statistics; dQ, dK, dV)."""

    kind = OpKind.ATTENTION

    @property
    def flops(self) -> float:
        fwd = 4.0 * self.batch * self.heads * self.seq * self.seq * self.head_dim
        if self.causal:
            fwd *= causal_fraction(self.seq)
        return fwd * (FA_BACKWARD_FLOP_RATIO if self.backward else 1.0) * self.fraction

    @property
    def bytes(self) -> float:
        """HBM traffic: read Q, K, V, write O (forward); about twice that backward."""
        e = dtype_bytes(self.dtype)
        qo = 2 * self.batch * self.heads * self.seq * self.head_dim * e
        kv = 2 * self.batch * self.kv_heads * self.seq * self.head_dim * e
        return (qo + kv) * (2.0 if self.backward else 1.0) * self.fraction ** 0.5


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """A bandwidth-bound kernel (norm, activation, dropout, optimizer...) moving ``bytes``,
    walking memory as ``access`` says."""

    kind: OpKind
    bytes: float
    access: MemoryAccess = MemoryAccess.STREAM
    efficiency: float = 1.0
    """Share of the bandwidth its access pattern reaches that this kernel (or sequence of
    kernels) reaches, where a published measurement of it says less
    (:mod:`sim.workload.nongemm`); 1: as the access pattern."""

    @property
    def flops(self) -> float:
        return 0.0


@dataclass(frozen=True, slots=True)
class Routing:
    """A mixture-of-experts routing as its token exchange sees it: ``experts`` spread evenly
    over the exchange's ranks, ``top_k`` chosen by each token, balanced (each expert equally
    likely, Megatron-Core's ``--moe-router-force-load-balancing`` and the aux-loss-balanced
    steady state)."""

    experts: int
    top_k: int


@dataclass(frozen=True, slots=True)
class CommOp:
    """A collective over ``group`` (global ranks, in ring order), or a p2p send (group = (src, dst)).

    ``size_bytes`` follows nccl-tests: the all-reduce buffer, the all-gather output or the
    reduce-scatter input (NVIDIA/nccl-tests doc/PERFORMANCE.md). ``replicas`` lists every
    group that runs the same collective at the same time in a symmetric job (``group`` among
    them): when only representative ranks are simulated, their links are loaded as the full
    job would load them.

    ``kernel`` says what runs it: NCCL (the SMs it holds are NCCL's channels) or, for the TP
    collectives that Transformer Engine's userbuffers or PyTorch's symmetric memory run under
    TP communication overlap, a kernel holding ``kernel_sms`` SMs of each member GPU (0: copy
    engines; :mod:`sim.workload.tp_overlap`).
    """

    collective: CollectiveKind
    comm_class: CommClass
    group: tuple[int, ...]
    size_bytes: float
    replicas: tuple[tuple[int, ...], ...] = ()
    kernel: CommKernel = CommKernel.NCCL
    kernel_sms: int = 0
    """SMs a kernel other than NCCL's holds on each member GPU while it runs."""
    issue_s: float = 0.0
    """Time the framework spends around the transfer that grows with the group rather than
    the bytes: a tensor-list collective's per-rank views and copies
    (:mod:`sim.workload.deepspeed_zero3`). Added to the collective's latency."""
    routing: Routing | None = None
    """For a deduplicating all-to-all (DeepEP's or HybridEP's token exchange,
    :class:`~sim.types.MoeDispatcher`): the routing whose token copies it sends;
    ``size_bytes`` is then the bytes of the rank's own tokens, each sent once (not once per
    chosen expert) to every rank and every other scale-up domain holding one of its experts
    (:func:`sim.costs.comm.dedup_fractions`). None: every rank sends ``size_bytes / p`` to
    every other."""

    kind = OpKind.COLLECTIVE

    @property
    def flops(self) -> float:
        return 0.0

    @property
    def bytes(self) -> float:
        return self.size_bytes

    @property
    def op_kind(self) -> OpKind:
        return OpKind.P2P if self.collective is CollectiveKind.SEND_RECV else OpKind.COLLECTIVE


Op = GemmOp | AttentionOp | MemoryOp | CommOp
