"""Measured shares of bandwidth of the fused non-GEMM kernels that a roofline at one streaming
efficiency prices too fast.

Each constant is a published measurement, derived by :mod:`sim.derive.nongemm` from the
published figures it quotes (each with its source and commit), and
``tests/unit/test_nongemm.py`` checks that the two agree. A kernel's time is its bytes at the
bandwidth its access pattern reaches (:meth:`sim.hardware.GPUSpec.memory_efficiency_of`) times
the share below (:attr:`sim.workload.ops.MemoryOp.efficiency`).

Megatron's vocab-parallel cross entropy (``megatron/core/tensor_parallel/cross_entropy.py``,
the unfused default, ``cross_entropy_loss_fusion=False``; Megatron-LM's ``mpu/cross_entropy.py``
of 2021-2022 runs the same passes, the model casting to fp32 first) makes these passes over the
``[tokens, V / t]`` logits, per logit:

* forward: the cast of the bf16 logits to fp32 (read 2, write 4), the row maximum (read 4), the
  in-place subtraction of it (read and write 4), the in-place ``exp`` (8), the row sum (4) and
  the in-place division by it (8): :data:`CROSS_ENTROPY_FORWARD_BYTES` = 38;
* backward: the in-place product of the saved softmax with the incoming gradient (8), then the
  backward of the cast, fp32 to bf16 (read 4, write 2): :data:`CROSS_ENTROPY_BACKWARD_BYTES` = 14.

Measured on an H100 80GB HBM3 (Liger-Kernel's ``megatron_cross_entropy`` benchmark, bf16
logits ``[2048, 4, V]``, V = 4k-128k, TP 1), the slope of the time over the logits is 14.64 ps a
logit forward and 5.02 backward: 45.1 and 15.5 bytes a logit at the 3.35 TB/s x 0.92 that
:mod:`sim.hardware` prices a streaming kernel at, so the passes reach 38 / 45.1 and 14 / 15.5 of
it (the row reductions and the small per-row kernels between the passes).

A fused LayerNorm's backward (read x and dy, write dx, then a second kernel that finishes the
weight gradients) reaches less bandwidth than its forward (read x, write y). apex PR #1037
measured both on an A100 with fp16 BERT activations: its ``FastLayerNorm`` (the kernels of
``apex/contrib/csrc/layer_norm``, ``ln_fwd_cuda_kernel.cu`` and ``ln_bwd_semi_cuda_kernel.cu``,
which Megatron-LM's ``persist_layer_norm`` runs and Transformer Engine's normalization kernels
carry on under the same names) at 1258.0 GB/s forward and 1163.4 GB/s backward, apex's
``FusedLayerNorm`` at 895.8 and 572.2. The forward is priced as a streaming kernel; the
backward at :data:`NORM_BACKWARD_EFFICIENCY` of that, the ``FastLayerNorm`` ratio.

Megatron-Core's fused SwiGLU (``megatron/core/fusions/fused_bias_swiglu.py``, compiled by
``torch.compile`` through ``jit_fuser`` from PyTorch 2.2 on, for the one shape a training step
runs) moves 3 elements per output element forward (read both halves, write the product) and 5
backward (read the gradient and both halves, write both halves' gradients). Timed on our H200
(``benchmarks/device/fused_activation.py``, ``benchmarks/device/results/
h200-2026-11-28-fused-activation.json``: 8,192 tokens, local widths 1,792-28,672, against a
1 GiB copy at 4,257 GB/s), the forward reaches the copy's bandwidth (0.94-1.02 from width
3,584 up) while the backward reaches 0.648-0.667 of it: priced at
:data:`SWIGLU_BACKWARD_EFFICIENCY` of a streaming kernel, the median of those widths.
"""

from __future__ import annotations

__all__ = ["CROSS_ENTROPY_FORWARD_BYTES", "CROSS_ENTROPY_BACKWARD_BYTES", "CROSS_ENTROPY_FORWARD_EFFICIENCY",
           "CROSS_ENTROPY_BACKWARD_EFFICIENCY", "NORM_BACKWARD_EFFICIENCY", "SWIGLU_BACKWARD_EFFICIENCY"]

CROSS_ENTROPY_FORWARD_BYTES = 38
"""HBM bytes per logit of Megatron's vocab-parallel cross entropy, forward (module docstring)."""
CROSS_ENTROPY_BACKWARD_BYTES = 14
"""The same, backward."""

CROSS_ENTROPY_FORWARD_EFFICIENCY = CROSS_ENTROPY_FORWARD_BYTES / 45.1
"""Share of streaming bandwidth those passes reach, forward: 38 bytes in the time of 45.1
(H100, Liger-Kernel ``megatron_cross_entropy``, ``megatron-unfused``)."""
CROSS_ENTROPY_BACKWARD_EFFICIENCY = CROSS_ENTROPY_BACKWARD_BYTES / 15.5
"""The same, backward: 14 bytes in the time of 15.5."""

NORM_BACKWARD_EFFICIENCY = 1163.4357 / 1258.0318
"""A fused norm's backward bandwidth over its forward's: apex ``FastLayerNorm``, PR #1037."""

SWIGLU_BACKWARD_EFFICIENCY = 0.663
"""A fused SwiGLU backward's bandwidth over a copy's: the median over local widths 3,584-28,672
(0.648, 0.659, 0.666, 0.667) of ``benchmarks/device/results/h200-2026-11-28-fused-activation.json``
(module docstring); the 1,792-wide kernel, 55 us, is left out as short enough for its launch
and tail to count."""
