"""The quantization work a low-precision recipe runs around a linear layer's three GEMMs.

A linear layer ``Y = X W^T`` runs three GEMMs: the forward (fprop, ``X W^T``), the input
gradient (dgrad, ``dY W``) and the weight gradient (wgrad, ``dY^T X``). Under an 8- or 4-bit
recipe each reads quantized copies of its 16-bit operands, made by bandwidth-bound kernels
that run beside it; :func:`gemm_casts` gives their bytes and kernel launches per GEMM, priced
with the GEMM (:attr:`~sim.workload.ops.GemmOp.extra_bytes`,
:attr:`~sim.workload.ops.GemmOp.extra_kernels`). Weights are quantized once per iteration
(Megatron-Core's Transformer Engine wrappers pass ``is_first_microbatch``, so the quantized
weight is cached over the micro-batches; ``megatron/core/extensions/transformer_engine.py``)
and are not priced; torchao's ``Float8Linear`` casts its weight at every call
(:meth:`sim.workload.layers.LayerBuilder.weight_casts`).

**FP8 and MXFP8**: the fprop's input and the dgrad's incoming gradient are cast (read 16 bits,
write 8; with current scaling one more read for the amax, Transformer Engine
``Float8CurrentScaling``), and the wgrad's two operands are transposed (read and write each
8-bit copy: Hopper's FP8 tensor cores take only the TN layout; NVIDIA, "Using FP8 with
Transformer Engine"). Under sequence parallelism Transformer Engine quantizes a column-parallel
layer's input shard, all-gathers it in 8 bits and transposes the gathered tensor for the
weight gradient; where a tensor is not gathered its ``cast_transpose`` kernel writes both
copies in one pass (``quantize_helper``, ``transformer_engine/common/util/cast_kernels.cuh`` @
v2.8). The accounting above, per GEMM on the GEMM's rows, stands for both.

Transformer Engine's quantizers (``te_quantizer``) make no transposed copy of a per-tensor FP8
tensor on a GPU whose FP8 GEMMs take every layout (``any_layout``: Blackwell, compute
capability 10.x; ``nvte_is_non_tn_fp8_gemm_supported`` in
``transformer_engine/common/transformer_engine.cpp``, from TE 2.1): ``with_transpose =
columnwise_usage && !is_non_tn_fp8_gemm_supported`` (``Float8Quantizer`` and
``Float8CurrentScalingQuantizer`` in ``transformer_engine/pytorch/csrc/quantizer.cpp`` @
``d0067d0``), and the weight gradient reads the row-wise copies in another layout, so it has
no transposes there. MXFP8, whose block scales run along one dimension, keeps its column-wise
copy on every GPU. torchao's float8 (``te_quantizer`` off) lays its operands out itself.

**NVFP4** as Transformer Engine's ``NVFP4BlockScaling`` recipe runs it (NVIDIA/TransformerEngine
``transformer_engine/common/recipe/__init__.py`` @ ``000b637``; "Pretraining Large Language
Models with NVFP4", arXiv 2509.25149, Sec. 4), the recipe Megatron-Bridge's performance
configurations select (``bf16_with_nvfp4_mixed``, NVIDIA-NeMo/Megatron-Bridge
``src/megatron/bridge/training/mixed_precision.py`` @ ``d9f7643``, chosen by
``scripts/performance/utils/precision.py`` @ ``84fba28``):

* all three GEMMs of every transformer-layer linear run in NVFP4 (arXiv 2509.25149, Sec. 4.1,
  Fig. 5); attention, norms, embedding and output layer stay in BF16 (the same section);
* every tensor is stored as E2M1 (half a byte) with one E4M3 scale per 16 consecutive
  elements and one FP32 scale per tensor (TE ``docs/features/low_precision_training/nvfp4/
  nvfp4.rst`` @ ``41f6cbf``), so the per-tensor scale needs an amax pass over the 16-bit
  tensor before the cast;
* the forward input ``X`` and the incoming gradient ``dY`` are each quantized twice from
  the 16-bit tensor: row-wise (1x16 blocks) for fprop and dgrad, and column-wise after a
  16x16 random Hadamard transform (RHT) for wgrad, whose two operands are then these
  column-wise copies, so wgrad itself needs no transpose; gradients use stochastic rounding,
  done by the conversion instruction inside the cast (``cvt.rs``), at no extra traffic;
* the weights use 16x16 2D blocks and no RHT; they are quantized once per iteration (above).

Transformer Engine's ``NVFP4Quantizer`` with RHT (``transformer_engine/pytorch/csrc/
quantizer.cpp``) first runs ``nvte_hadamard_transform_amax``, one read of the tensor giving
the row-wise amax and the amax after the RHT (``transformer_engine/common/include/
transformer_engine/hadamard_transform.h`` @ ``c14a986``). When the tensor is eligible (BF16,
rows a multiple of 64, columns of 128: ``NVFP4Quantizer::is_eligible_for_rht_cast_fusion``)
one fused kernel then reads it once more and writes both quantized copies
(``nvte_quantize_with_hadamard_transform``, ``transformer_engine/common/hadamard_transform/
row_cast_col_hadamard_transform_cast_fusion.cu`` @ ``58e7b30``; NVIDIA/TransformerEngine PR
#2555, 2026-01: "high precision input only needs to be read once while without this fusion, it
needs to be read twice"). Otherwise the row-wise cast, a separate Hadamard kernel that writes
the transformed 16-bit tensor and a column-wise cast of it run one after another (the
fallback NVIDIA/TransformerEngine PR #3317 counts at 11.125 bytes per element, as here).
Which of the two paths the 26.04 NeMo container's Transformer Engine takes for eligible shapes
is not published with the measurements; the fused one (in TE since PR #2555, merged before
that container) is assumed [unverified]. The RHT's own arithmetic (a 16x16 matrix product
per 16 elements, 32 FLOP per element, on the tensor cores) is negligible beside the traffic
and not priced; nor are the amax all-reduce over the tensor-parallel group and the swizzle of
the scales for the GEMM (a sixteenth of the data).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.types import Dtype, ScalingRecipe

__all__ = ["LOW_PRECISION", "Cast", "GemmCasts", "gemm_casts", "nvfp4_quantize", "rht_cast_fusable",
           "NVFP4_BLOCK", "FP4_BYTES", "NVFP4_SCALE_BYTES", "MXFP8_BLOCK", "quantized_bytes"]

LOW_PRECISION = frozenset({Dtype.FP8, Dtype.MXFP8, Dtype.NVFP4})
"""GEMM formats whose inputs are quantized from 16 bits before each GEMM."""

FP4_BYTES = 0.5
"""Bytes of one E2M1 element (two per byte)."""
NVFP4_BLOCK = 16
"""Elements sharing one block scale (TE ``nvfp4.rst``: "a block of 16 consecutive elements")."""
NVFP4_SCALE_BYTES = 1.0
"""Bytes of one block scale (FP8 E4M3). The per-tensor FP32 scale is 4 bytes per tensor, and
the padding of the scale arrays to 128 x 4 tiles (TE ``nvfp4.rst``) is left out."""
MXFP8_BLOCK = 32
"""Elements sharing one MXFP8 block scale, an 8-bit power of two (E8M0) (OCP Microscaling
Formats (MX) Specification v1.0, Sec. 5: MXFP8 blocks of 32 E4M3 elements)."""
_RHT_ROW_ALIGN, _RHT_COL_ALIGN = 64, 128
"""Shapes the fused RHT cast kernel takes: rows % 64, columns % 128 (TE ``quantizer.cpp``,
``is_eligible_for_rht_cast_fusion``, non-grouped)."""
_HIGH = 2.0
"""Bytes of the 16-bit (BF16) tensors the casts read."""


def quantized_bytes(dtype: Dtype) -> float:
    """Bytes per element of one quantized copy of a tensor in ``dtype``, its block scales
    included: FP8 (per-tensor scaling) 1; MXFP8 ``1 + 1/32`` (:data:`MXFP8_BLOCK`); NVFP4
    ``1/2 + 1/16`` (:data:`FP4_BYTES`, :data:`NVFP4_SCALE_BYTES` per :data:`NVFP4_BLOCK`);
    16-bit formats 2. Per-tensor scales (a few bytes a tensor) are left out.

    >>> [quantized_bytes(d) for d in (Dtype.BF16, Dtype.FP8, Dtype.MXFP8, Dtype.NVFP4)]
    [2.0, 1.0, 1.03125, 0.5625]
    """
    if dtype is Dtype.FP8:
        return 1.0
    if dtype is Dtype.MXFP8:
        return 1.0 + 1.0 / MXFP8_BLOCK
    if dtype is Dtype.NVFP4:
        return FP4_BYTES + NVFP4_SCALE_BYTES / NVFP4_BLOCK
    return _HIGH


@dataclass(frozen=True, slots=True)
class Cast:
    """Bandwidth-bound work that goes with one GEMM: bytes moved and kernels launched."""

    bytes: float = 0.0
    kernels: int = 0

    def __add__(self, other: Cast) -> Cast:
        return Cast(self.bytes + other.bytes, self.kernels + other.kernels)


@dataclass(frozen=True, slots=True)
class GemmCasts:
    """The casts priced with each of one linear layer's three GEMMs."""

    fprop: Cast
    dgrad: Cast
    wgrad: Cast


def rht_cast_fusable(rows: int, cols: int) -> bool:
    """Whether Transformer Engine quantizes a BF16 ``[rows, cols]`` tensor with RHT in one
    fused kernel (row-wise cast and column-wise RHT cast together).

    >>> rht_cast_fusable(8192, 8192), rht_cast_fusable(8192, 8200), rht_cast_fusable(100, 8192)
    (True, False, False)
    """
    return rows % _RHT_ROW_ALIGN == 0 and cols % _RHT_COL_ALIGN == 0


def nvfp4_quantize(rows: int, cols: int) -> Cast:
    """Quantizing a BF16 ``[rows, cols]`` tensor to NVFP4 row-wise and, after the RHT,
    column-wise, as Transformer Engine's ``NVFP4Quantizer`` does for a linear layer's input
    and incoming gradient (module docstring).

    Each quantized copy is ``n (1/2 + 1/16)`` bytes (E2M1 data, an E4M3 scale per 16). Fused:
    the amax pass reads the tensor, the fused cast reads it again and writes both copies,
    ``n (2e + 2 (1/2 + 1/16))`` = 5.125 bytes per element in 2 kernels. Unfused: the amax
    pass, the row-wise cast, the Hadamard kernel (reads and writes the 16-bit tensor), the
    column-wise cast of its output: ``n (5e + 2 (1/2 + 1/16))`` = 11.125 bytes per element in 4.

    >>> nvfp4_quantize(64, 128).bytes / (64 * 128), nvfp4_quantize(64, 128).kernels
    (5.125, 2)
    >>> nvfp4_quantize(64, 120).bytes / (64 * 120), nvfp4_quantize(64, 120).kernels
    (11.125, 4)
    """
    n = float(rows) * cols
    copy = n * quantized_bytes(Dtype.NVFP4)
    amax = Cast(_HIGH * n, 1)
    if rht_cast_fusable(rows, cols):
        return amax + Cast(_HIGH * n + 2 * copy, 1)
    rowwise = Cast(_HIGH * n + copy, 1)
    hadamard = Cast(2 * _HIGH * n, 1)
    columnwise = Cast(_HIGH * n + copy, 1)
    return amax + rowwise + hadamard + columnwise


def gemm_casts(dtype: Dtype, scaling: ScalingRecipe, tokens: int, inp: int, out: int,
               te_quantizer: bool = False, any_layout: bool = False) -> GemmCasts:
    """The casts of a linear layer ``[tokens, inp] -> [tokens, out]`` in ``dtype``: nothing in
    16 or 32 bits, the FP8 model (no transposes for Transformer Engine's per-tensor FP8 on a GPU
    whose FP8 GEMMs take every layout) or the NVFP4 recipe of the module docstring.

    >>> c = gemm_casts(Dtype.FP8, ScalingRecipe.DELAYED, 2, 3, 5)
    >>> c.fprop.bytes, c.dgrad.bytes, c.wgrad.bytes  # 3 bytes an element cast, 2 transposed
    (18.0, 30.0, 32.0)
    >>> gemm_casts(Dtype.FP8, ScalingRecipe.DELAYED, 2, 3, 5, te_quantizer=True, any_layout=True).wgrad
    Cast(bytes=0.0, kernels=0)
    >>> gemm_casts(Dtype.MXFP8, ScalingRecipe.BLOCK, 2, 3, 5, te_quantizer=True, any_layout=True).wgrad.bytes
    32.0
    >>> c = gemm_casts(Dtype.NVFP4, ScalingRecipe.BLOCK, 64, 128, 256)
    >>> c.fprop == nvfp4_quantize(64, 128), c.dgrad == nvfp4_quantize(64, 256), c.wgrad
    (True, True, Cast(bytes=0.0, kernels=0))
    """
    if dtype not in LOW_PRECISION:
        return GemmCasts(Cast(), Cast(), Cast())
    if dtype is Dtype.NVFP4:
        return GemmCasts(nvfp4_quantize(tokens, inp), nvfp4_quantize(tokens, out), Cast())
    cast = 1.0 + _HIGH  # read 16 bits, write 8
    if scaling is ScalingRecipe.CURRENT:
        cast += _HIGH  # and read the 16 bits once more for the amax
    trans = 2.0  # read and write one 8-bit copy
    if te_quantizer and any_layout and dtype is Dtype.FP8 and scaling is not ScalingRecipe.BLOCK:
        return GemmCasts(Cast(cast * tokens * inp, 1), Cast(cast * tokens * out, 1), Cast())
    return GemmCasts(Cast(cast * tokens * inp, 1), Cast(cast * tokens * out, 1),
                     Cast(trans * tokens * (inp + out), 1))
