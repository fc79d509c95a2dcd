"""The optimizer step's HBM traffic: the Adam kernel, and the bandwidth-bound passes an
iteration makes over its gradients and master weights beside it (``kernels.step_passes``,
:class:`~sim.types.StepPass`).

The optimizer task (:func:`optimizer_op`, built by :mod:`sim.workload.taskgraph` and priced in
closed form by :mod:`sim.studies.sweep.bound`) moves :data:`ADAM_BYTES_PER_PARAM` per parameter
of the optimizer's shard for Adam: one fused kernel's, or PyTorch's foreach passes'. A training
step does more over the same memory, and how much is a property of the framework release, which
each stack lists (``workloads/stacks/``):

* Megatron-LM 2021-2022 (``megatron/model/distributed.py``, ``megatron/optimizer/optimizer.py``):
  ``zero_grad_buffer`` zeroes the contiguous gradient buffer at the start of each iteration
  (``buffer_.zero()``); ``allreduce_gradients`` divides it by the data-parallel size before the
  all-reduce (``buffer_.data /= mpu.get_data_parallel_world_size()``), also at a size of 1;
  the step computes the gradient norm for clipping (``clip_grad_norm_fp32``, ``--clip-grad``
  1.0 by default) and copies the fp32 master weights into the 16-bit model weights
  (``_copy_main_params_to_model_params``).
* Megatron-Core's DDP (``megatron/core/distributed/param_and_grad_buffer.py``): the buffer is
  zeroed, each bucket's norm is taken before its reduction (``check_for_nan_in_grad``, on in
  Megatron-LM unless ``--no-check-for-nan-in-loss-and-grad``), and the bucket is multiplied by
  ``gradient_scaling_factor``, ``1 / (dp x cp)`` unless ``average_in_collective`` (skipped at 1).
* NeMo 2 and Megatron-Bridge recipes set ``check_for_nan_in_grad=True`` and
  ``average_in_collective=True`` (no division pass); Megatron-Bridge's performance scripts,
  which its stack follows, turn the NaN check off (``set_common_perf_overrides``,
  ``scripts/performance/utils/helpers.py`` @ v0.2.0).

Each pass reads or writes the local gradient buffer (:attr:`~sim.memory.StateBytes.grads_bytes`,
every local parameter's gradient unless ZeRO-2 or 3 shards it) or the optimizer shard
(:attr:`~sim.memory.StateBytes.optimizer_bytes` over the bytes of state a parameter,
:attr:`~sim.workload.kernels.KernelsSpec.optimizer_bytes`), at the memory op's HBM rate.
They are priced on the optimizer task: the buffer's zeroing, norm and division run on the
compute stream of the same iteration, which is where the time goes whichever side of the
backward they sit on.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.memory import StateBytes
from sim.types import AdamImpl, OpKind, StepPass
from sim.workload.ops import MemoryOp
from sim.workload.spec import WorkloadSpec

__all__ = ["ADAM_BYTES_PER_PARAM", "FOREACH_ADAMW_BYTES_PER_PARAM", "MASTER_WEIGHT_BYTES", "OPTIMIZER_BYTES_PER_PARAM",
           "REMAINDER_ADAM_BYTES_PER_PARAM", "optimizer_op", "step_pass_bytes"]

OPTIMIZER_BYTES_PER_PARAM = 30.0
"""HBM traffic of one fused mixed-precision Adam step per parameter: read fp32 master weight,
gradient, two moments (16 B), write master and moments (12 B) and the bf16 weight (2 B)."""
FOREACH_ADAMW_BYTES_PER_PARAM = 84.0
"""HBM traffic of PyTorch's foreach AdamW per fp32 parameter (``torch/optim/adamw.py``,
``_multi_tensor_adamw``), each pass reading and writing its operands at 4 B: the weight decay
``_foreach_mul_(params)`` (8), ``_foreach_lerp_(exp_avgs, grads)`` (12),
``_foreach_mul_(exp_avg_sqs)`` (8), ``_foreach_addcmul_(exp_avg_sqs, grads, grads)`` (16),
``_foreach_sqrt(exp_avg_sqs)`` (8), ``_foreach_div_`` and ``_foreach_add_`` of that (8 each),
``_foreach_addcdiv_(params, exp_avgs, denom)`` (16)."""
REMAINDER_ADAM_BYTES_PER_PARAM = 28.0
"""HBM traffic of one fused Adam step per parameter when the master weights are kept as 16-bit
remainders (:attr:`~sim.workload.kernels.KernelsSpec.master_param_remainders`, Apex's
``DistributedFusedAdam``): read the BF16 weight and its remainder, the fp32 gradient and the two
moments (16 B), write the weight, remainder and moments back (12 B); the BF16 weight is the
kernel's own output, so no separate copy is written."""
ADAM_BYTES_PER_PARAM = {AdamImpl.FUSED: OPTIMIZER_BYTES_PER_PARAM, AdamImpl.FOREACH: FOREACH_ADAMW_BYTES_PER_PARAM}
"""The Adam step's bytes per parameter of the optimizer shard, by implementation."""
MASTER_WEIGHT_BYTES = 4.0
"""Bytes of one fp32 master weight, which :attr:`StepPass.MASTER_COPY` reads."""


def step_pass_bytes(passes: Iterable[StepPass], grads_bytes: float, shard_params: float, grad_bytes: float,
                    dp_cp: int) -> float:
    """HBM bytes the iteration's ``passes`` move beside the Adam kernel.

    Parameters
    ----------
    passes
        The release's passes (:attr:`~sim.workload.kernels.KernelsSpec.step_passes`).
    grads_bytes
        The rank's gradient buffer in bytes.
    shard_params
        Parameters in the rank's optimizer shard.
    grad_bytes
        Bytes of one gradient element (4 in fp32).
    dp_cp
        The data-parallel group's size with context parallelism.

    Examples
    --------
    >>> step_pass_bytes([StepPass.ZERO_GRAD_BUFFER, StepPass.GRAD_DIVIDE], 400.0, 50.0, 4.0, 1)
    1200.0
    >>> step_pass_bytes([StepPass.GRAD_DIVIDE_DP], 400.0, 50.0, 4.0, 1)
    0.0
    >>> step_pass_bytes([StepPass.CLIP_GRAD_NORM, StepPass.MASTER_COPY], 400.0, 50.0, 4.0, 8)
    400.0
    """
    per_pass = {
        StepPass.ZERO_GRAD_BUFFER: grads_bytes,
        StepPass.GRAD_NAN_CHECK: grads_bytes,
        StepPass.GRAD_DIVIDE: 2.0 * grads_bytes,
        StepPass.GRAD_DIVIDE_DP: 2.0 * grads_bytes if dp_cp > 1 else 0.0,
        StepPass.CLIP_GRAD_NORM: shard_params * grad_bytes,
        StepPass.MASTER_COPY: shard_params * MASTER_WEIGHT_BYTES,
    }
    chosen = set(passes)
    return sum(per_pass[p] for p in StepPass if p in chosen)  # in a fixed order: the same float every run


def optimizer_op(w: WorkloadSpec, sb: StateBytes) -> MemoryOp:
    """The optimizer task's op for a rank holding ``sb``: the Adam step over its optimizer shard,
    as the release runs it (:attr:`~sim.workload.kernels.KernelsSpec.adam_impl`), and the
    release's passes (the task graph's and the sweep bound's one source)."""
    k = w.kernels
    shard = sb.optimizer_bytes / k.optimizer_bytes
    passes = step_pass_bytes(k.step_passes, sb.grads_bytes, shard, k.grad_bytes, w.parallel.dp * w.parallel.cp)
    adam = REMAINDER_ADAM_BYTES_PER_PARAM if k.master_param_remainders and k.adam_impl is AdamImpl.FUSED \
        else ADAM_BYTES_PER_PARAM[k.adam_impl]
    return MemoryOp(OpKind.OPTIMIZER, shard * adam + passes)
