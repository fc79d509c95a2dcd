"""The SMs that TP communication overlap takes from the GEMMs beside it.

Under Megatron-LM's ``--tp-comm-overlap`` the sequence-parallel all-gathers and reduce-scatters
of a transformer layer are not NCCL kernels: Transformer Engine's userbuffers run them, one
communicator per GEMM (``initialize_ub``, NVIDIA/TransformerEngine
``transformer_engine/pytorch/module/base.py`` @ ``fecb10b``, and its 2.x ``get_default_config``),
each with one of three methods:

* **ring_exchange** (by default ``qkv_fprop``, ``fc1_fprop``, ``proj_dgrad``, ``fc2_dgrad``):
  ``tp - 1`` p2p steps, each GEMM chunk on the shard in hand. With ``use_ce`` (default true)
  the data moves by ``cudaMemcpyAsync`` on the copy engines and the kernel beside it is a
  one-thread signal (``userbuffers_send``: ``signalonly = ... || comm->use_ce``, launched with
  ``signalonly ? 1 : comm->sms`` blocks; ``comm_gemm_overlap/userbuffers/userbuffers.cu`` @
  ``4a8b30a``): no SM is taken from compute. Without ``use_ce`` the copy kernel runs on
  ``num_sm`` SMs (default 1).
* **pipeline** (``proj_fprop``, ``fc2_fprop``): the GEMM in 4 chunks, each chunk's
  reduce-scatter a userbuffers kernel on ``num_sm`` SMs (default 16; ``CommOverlapBase`` passes
  ``use_ce = false``, ``comm_gemm_overlap/comm_gemm_overlap.cpp`` @ ``4757bfa``).
* **bulk** (``qkv_dgrad``, ``qkv_wgrad``, ``fc1_dgrad``, ``fc1_wgrad``): one all-gather (the
  layer input, beside the input-gradient GEMM) or reduce-scatter (the input gradient, beside the
  weight-gradient GEMM) kernel on ``num_sm`` SMs (default 16) for the whole GEMM
  (``CommOverlapBase::bulk_overlap``).

Megatron-LM passes ``ub_cfgs = {}`` unless ``--tp-comm-overlap-cfg`` names a YAML file
(``megatron/training/initialize.py`` ``_initialize_tp_communicators``, NVIDIA/Megatron-LM @
``2fd6e2b``), so TE's defaults hold (:data:`TE_DEFAULTS`). NeMo and Megatron-Bridge pass tables
per model and GPU (``TransformerLayerTPOverlapCfg``: NVIDIA/NeMo
``nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py`` @ ``2600532``,
NVIDIA-NeMo/Megatron-Bridge ``src/megatron/bridge/training/comm_overlap.py`` @ ``aae8200``;
e.g. Llama-3 70B BF16 on H100, TP 4: bulk 4, 24, 2, 4 SMs, proj_fprop/fc2_fprop pipelined on
24/16, the rest ring exchanges); a case states one as ``parallel.tp_comm_overlap_cfg``, the
mapping Megatron-LM reads from that YAML file.

torchtitan's async TP runs on PyTorch's symmetric memory
(``torch/distributed/_symmetric_memory/__init__.py`` @ ``0e9ed9c``,
``_pipelined_multi_all_gather_and_consume`` and ``_pipelined_produce_and_all2all``): every shard
is fetched with ``Tensor.copy_`` from the peer's mapped buffer, a ``cudaMemcpyAsync`` for
contiguous tensors of one dtype (ATen ``copy_device_to_device``), i.e. copy engines
(:data:`ASYNC_TP`), in the forward pass only (its docstring says why).

The GEMM beside a communicator runs as TE runs it (:class:`UbSplit`): beside a ring exchange
one chunk of its rows per TP rank (two with ``aggregate``), beside a pipeline ``num_splits``
chunks, beside a bulk overlap whole; with ``set_sm_margin`` (TE's default for bulk and
pipelined overlaps) on ``sm_count - num_sm`` SMs for its whole length, the communicator on the
rest, so nothing is taken beside it; without, on every SM, the communicator's ``num_sm`` taken
while it runs (:mod:`sim.engine.contention`). The chunks keep TE's order (the chunk pipeline of
:mod:`sim.workload.layers`): beside a ring-exchange all-gather the GEMM's last chunk waits for the
last shard; a chunk-by-chunk reduce-scatter starts after the first chunk and sends the last
chunk's share after the whole GEMM. Not modelled: the pipeline's last chunk on 32 SMs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sim.types import CommKernel, TpOverlapMethod

__all__ = ["UB_GEMMS", "TE_METHODS", "TE_NUM_SM", "held_sms", "TpOverlapConfig", "UbGemm", "UbSplit", "userbuffers",
           "TE_DEFAULTS", "ASYNC_TP"]

_R, _P, _B = TpOverlapMethod.RING_EXCHANGE, TpOverlapMethod.PIPELINE, TpOverlapMethod.BULK

TE_METHODS: dict[str, TpOverlapMethod] = {
    "qkv_fprop": _R, "fc1_fprop": _R, "proj_dgrad": _R, "fc2_dgrad": _R,
    "proj_fprop": _P, "fc2_fprop": _P,
    "qkv_dgrad": _B, "qkv_wgrad": _B, "fc1_dgrad": _B, "fc1_wgrad": _B,
}
"""Transformer Engine's default method per GEMM (``initialize_ub``'s ``methods``)."""
UB_GEMMS = tuple(TE_METHODS)
"""The GEMMs of a transformer layer whose TP collectives userbuffers run."""
TE_NUM_SM: dict[TpOverlapMethod, int] = {_R: 1, _P: 16, _B: 16}
"""TE's default ``num_sm`` per method (``"num_sm": 1 if method == "ring_exchange" else 16``)."""


def held_sms(method: TpOverlapMethod, num_sm: int, use_ce: bool = True) -> int:
    """SMs a userbuffers communicator holds while it runs: none for a ring exchange on the
    copy engines, else its ``num_sm``.

    >>> held_sms(TpOverlapMethod.RING_EXCHANGE, 1), held_sms(TpOverlapMethod.RING_EXCHANGE, 1, False)
    (0, 1)
    >>> held_sms(TpOverlapMethod.BULK, 16)
    16
    """
    if method is TpOverlapMethod.RING_EXCHANGE and use_ce:
        return 0
    return num_sm


@dataclass(frozen=True)
class UbSplit:
    """How Transformer Engine runs the GEMM a userbuffers communicator overlaps: in ``splits``
    kernels one after another, or beside a ring exchange (``ring``) one per TP rank (one per
    two with ``aggregate``), each on its share of the rows, launched without ``sm_margin`` SMs.

    TE's ``CommOverlapP2PBase::split_overlap_ag`` / ``split_overlap_rs`` run one GEMM per ring
    step (two steps' shards at once with ``aggregate``), ``CommOverlapBase::split_overlap_rs``
    (pipeline) ``num_splits`` of them, ``bulk_overlap`` one; each on ``_math_sms = sm_count -
    num_comm_sm`` SMs when ``set_sm_margin`` (NVIDIA/TransformerEngine
    ``transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp`` @ v2.8)."""

    splits: int = 1
    ring: bool = False
    aggregate: bool = False
    sm_margin: int = 0

    def chunks_at(self, tp: int) -> int:
        """Kernels the GEMM runs as under TP ``tp``.

        >>> UbSplit(ring=True).chunks_at(8), UbSplit(ring=True, aggregate=True).chunks_at(8), UbSplit(4).chunks_at(8)
        (8, 4, 4)
        """
        if self.ring:
            return max(1, tp // 2) if self.aggregate else tp
        return self.splits


@dataclass(frozen=True)
class TpOverlapConfig:
    """What runs the overlapped TP collectives of a layer, the SMs each holds beside its GEMM,
    and how that GEMM is split, per GEMM."""

    kernel: CommKernel
    sms: tuple[tuple[str, int], ...]
    """``(GEMM name, SMs)`` for every name of :data:`UB_GEMMS`: what the collective takes from
    compute running beside it (none where the GEMM was launched leaving them free)."""
    source: str = ""
    """Where the numbers come from (for notes and reports)."""
    splits: tuple[tuple[str, UbSplit], ...] = ()
    """``(GEMM name, split)`` for the GEMMs run in chunks or on fewer SMs (others: one kernel on
    every SM)."""

    def sms_of(self, gemm: str) -> int:
        """SMs the collective overlapped with ``gemm`` holds on each member GPU."""
        for name, n in self.sms:
            if name == gemm:
                return n
        raise KeyError(gemm)

    def split_of(self, gemm: str) -> UbSplit:
        """How ``gemm`` runs beside its collective."""
        for name, split in self.splits:
            if name == gemm:
                return split
        return UbSplit()

    def __str__(self) -> str:
        return self.source or self.kernel.value


@dataclass(frozen=True)
class UbGemm:
    """One GEMM's entry of a userbuffers table (Megatron-LM's ``--tp-comm-overlap-cfg``, NeMo's
    and Megatron-Bridge's ``TransformerLayerTPOverlapCfg``); None: TE's default for the method
    (``get_default_config``: ``num_sm`` 1 for a ring exchange, else 16; ``set_sm_margin`` off
    for a ring exchange, else on; ``num_splits`` 4 for a pipeline; ``aggregate`` off;
    ``use_ce`` on)."""

    method: TpOverlapMethod | None = None
    num_sm: int | None = None
    use_ce: bool | None = None
    set_sm_margin: bool | None = None
    num_splits: int | None = None
    aggregate: bool | None = None


def userbuffers(overrides: Mapping[str, UbGemm] | None = None, source: str = "") -> TpOverlapConfig:
    """TE's defaults with some GEMMs' entries overridden (None in a :class:`UbGemm`: TE's
    default; a method's defaults follow the method, as in ``get_default_config``).

    >>> cfg = userbuffers({"qkv_wgrad": UbGemm(num_sm=24),
    ...                    "fc2_fprop": UbGemm(method=TpOverlapMethod.RING_EXCHANGE)})
    >>> cfg.sms_of("qkv_wgrad"), cfg.sms_of("fc2_fprop"), cfg.sms_of("fc1_wgrad"), cfg.sms_of("qkv_fprop")
    (0, 0, 0, 0)
    >>> [cfg.split_of(g).chunks_at(8) for g in ("qkv_wgrad", "fc2_fprop", "proj_fprop")]
    [1, 8, 4]
    >>> [cfg.split_of(g).sm_margin for g in ("qkv_wgrad", "fc2_fprop", "proj_fprop")]
    [24, 0, 16]
    >>> userbuffers({"qkv_wgrad": UbGemm(num_sm=24, set_sm_margin=False)}).sms_of("qkv_wgrad")
    24
    """
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(UB_GEMMS))
    if unknown:
        raise KeyError(unknown[0])
    sms, splits = [], []
    for gemm in UB_GEMMS:
        entry = overrides.get(gemm, UbGemm())
        method = TE_METHODS[gemm] if entry.method is None else entry.method
        ring = method is TpOverlapMethod.RING_EXCHANGE
        num_sm = TE_NUM_SM[method] if entry.num_sm is None else entry.num_sm
        margin = (not ring) if entry.set_sm_margin is None else entry.set_sm_margin
        held = held_sms(method, num_sm, True if entry.use_ce is None else entry.use_ce)
        pipelined = method is TpOverlapMethod.PIPELINE
        chunks = (4 if entry.num_splits is None else entry.num_splits) if pipelined else 1
        # with the margin the GEMM leaves the communicator its SMs: nothing is taken beside it
        sms.append((gemm, 0 if margin else held))
        splits.append((gemm, UbSplit(chunks, ring, bool(entry.aggregate), num_sm if margin else 0)))
    return TpOverlapConfig(CommKernel.USERBUFFERS, tuple(sms), source or "Transformer Engine userbuffers",
                           tuple(splits))


TE_DEFAULTS = userbuffers(source="Transformer Engine's userbuffers defaults")
"""Ring exchanges on the copy engines (0 SMs), their GEMMs one per TP rank; bulk and pipelined
communicators on 16 SMs their GEMMs leave free, the pipelined GEMMs in 4 chunks."""
ASYNC_TP = TpOverlapConfig(CommKernel.SYMMETRIC_MEMORY, tuple((g, 0) for g in UB_GEMMS),
                           "PyTorch symmetric-memory async TP (copy engines)")
"""torchtitan's async TP: every overlapped collective a copy-engine p2p copy, in the forward
pass only. The recomputed forward and the backward run their TP collectives as plain TP does
(NCCL kernels; an input gradient's reduce-scatter beside the weight-gradient GEMM), which
:class:`~sim.workload.layers.LayerOps` ``recompute_fwd`` and ``layer_bwd`` carry.

Why the forward only: PyTorch's own measurement of it in torchtitan gives "up to ~29% forward
pass speedup and ~8% E2E speedup in Llama3 7B" and "up to ~20% forward pass speedup and ~8%
E2E speedup in Llama3 70B" (H. He, L. Wright, L. Wehrstedt, T. Liu, W. Liang, "[Distributed w/
TorchTitan] Introducing Async Tensor Parallelism in PyTorch", discuss.pytorch.org/t/209487,
2024): the forward is a third of a step's compute, a quarter under full recomputation, so a
recomputed forward and a backward overlapped as well as the forward would have given an
end-to-end gain near the forward's, not a third to a half of it. The code agrees for the
input gradients: torch.compile's micro-pipeline pass replaces a reduce-scatter only when a
single matmul produces its input (``torch/_inductor/fx_passes/micro_pipeline_tp.py``,
``fuse_matmul_reduce_scatter``: ``_find_producer_matmul`` returns None otherwise), and the
gradient of the input that q, k and v (and a gated MLP's w1 and w3) share is the sum of their
matmuls, so those reduce-scatters stay NCCL collectives."""
