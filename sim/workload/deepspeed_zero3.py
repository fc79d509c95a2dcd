"""DeepSpeed v0.3's ZeRO-3: which collectives it issues, how big, and what each costs to issue.

``parallel.zero_impl: deepspeed-0.3`` (:class:`~sim.types.ZeroImpl`) models DeepSpeed's stage 3
as released in v0.3.x (March-June 2021; ``deepspeed/runtime/zero/stage3.py`` and
``partition_parameters.py`` of that line), not FSDP's per-layer scheme:

* **Granularity: one collective per parameter tensor.** ``fetch_sub_module`` gathers the
  parameters of the submodule about to run (a Linear's weight, ...) with
  ``partition_parameters._all_gather(..., async_op=True)``, which calls ``_allgather_param``
  once per parameter; the backward hook reduces each parameter's gradient with its own
  ``_reduce_scatter_gradient``. Parameters under ``param_persistence_threshold`` elements
  (100,000 by default: the norms and biases) are *persistent*: kept gathered, all-gathered
  once after the optimizer step (``_post_step``: ``persistent_parameters[0].all_gather``), but
  their gradients are still reduce-scattered one by one.
* **Blocking.** ``_allgather_param`` calls ``torch.cuda.synchronize()`` before it issues the
  all-gather, and ``fetch_sub_module`` ("This call is blocking") waits for the handles, then
  ``comm_stream.synchronize()`` and ``torch.cuda.synchronize()`` again before the module runs.
  A gather therefore waits for all earlier work on the device (compute and the reduce-scatters
  on the reduction stream) and the module waits for it: no overlap. DeepSpeed's own fix says
  so: "the async version is not async at all, because each all_gather calls
  torch.cuda.synchronize()" (deepspeedai/DeepSpeed PR #1188, 2021-06-25, which cut a 5.1B
  BERT's forward on one 8 x A100 node from ~470 to ~270 ms; issue #1174 reports 480 ms under
  ZeRO-3 against 60 ms under ZeRO-2 with v0.3.16).
* **Tensor-list collectives.** Both call ``torch.distributed.all_gather`` /
  ``reduce_scatter`` with a list of ``world_size`` tensors, each a ``narrow`` view made in a
  Python loop over the ranks. PyTorch's NCCL backend (``torch/lib/c10d/ProcessGroupNCCL.cpp``,
  ``allgather``/``reduce_scatter``: ``flatten_for_scatter_gather``, then "Copy the flattened
  output tensors to the outputs" / "Copy the input tensors to the flattened inputs") runs one
  ``copy_`` kernel per rank around the NCCL kernel. Per rank and collective that is one copy
  kernel (:attr:`~sim.hardware.GPUSpec.kernel_launch_s`) and, for a gather, one Python tensor
  op issued while the device is idle after the synchronize (:data:`PY_TENSOR_OP_S`). The
  reduce-scatter's Python loop (two tensor ops per rank) runs in the backward hook while the
  module's backward kernels, already queued, still run: it is taken as hidden. The step's
  persistent gather unpacks every persistent parameter rank by rank in Python
  (``_allgather_params``: ``narrow``, ``view``, ``narrow``, ``copy_`` per parameter and rank).
* **A norm of every fetched parameter.** After the gather ``fetch_sub_module`` logs each of
  the module's parameters with an eagerly formatted f-string, ``print_rank_0(f"Param id ...
  norm {param.norm()}", force=False)`` (``stage3.py`` @ v0.3.16): the string is built before
  ``print_rank_0`` drops it, so ``param.norm()`` reads the whole gathered tensor once more, and
  formatting its result copies it to the host. PR #1188 ("Removing the norm computation in
  debug printing") removed it. Its HBM pass is priced per gathered tensor
  (:func:`gather_issue_s`); the copy's synchronization is among the host time below.
* **Host time exposed.** Those synchronizations (and the release's
  ``torch.ones(1).half().to(param.device)``, which synchronizes the stream) leave the device
  idle while the hooks' Python runs, so each gathered tensor adds :data:`FETCH_HOST_S`, a
  figure calibrated on an external single-node measurement (DeepSpeed issue #1174 and PR
  #1188), not on the validation cases.
* **fp16 gradients.** ``deepspeed.zero.Init`` "converts floating point tensors to half
  precision" and ``_reduce_scatter_gradient`` reduces ``param.grad`` in the parameter's dtype:
  2 bytes per element (:data:`GRAD_BYTES`), not the fp32 of Megatron-LM's reduction.
* **Full recomputation re-gathers.** Megatron's checkpointed layer re-runs its forward in the
  backward, so each submodule's pre-forward hook gathers its weights again, and its
  pre-backward hook once more unless ``_keep_for_later`` kept them: only a module reused within
  ``max_reuse_distance`` (10^9 elements) of parameters later, i.e. the layer's last module,
  whose backward follows its recomputed forward at once.

The NCCL ring's own latency grows with the group, ``(p - 1)`` steps
(:mod:`sim.costs.comm`), so a per-parameter collective over 1,536 ranks costs milliseconds
however small the tensor. Biases are not in :class:`~sim.workload.spec.ModelSpec`'s parameter
count, so they are not among the tensors here; the prefetch of the next module's parameters
(``prefetch_next_sub_modules``, at most ``stage3_prefetch_bucket_size`` elements while nothing
else is in flight) is not modelled.
"""

from __future__ import annotations

from sim.hardware import GPUSpec
from sim.workload.spec import ModelSpec

__all__ = ["PERSISTENCE_THRESHOLD_NUMEL", "GRAD_BYTES", "PY_TENSOR_OP_S", "UNPACK_OPS_PER_RANK",
           "FETCH_HOST_S", "layer_tensors", "gathered", "persistent", "gather_issue_s", "reduce_issue_s",
           "persistent_issue_s"]

PERSISTENCE_THRESHOLD_NUMEL = 100_000
"""Parameters with fewer elements stay gathered (DeepSpeed v0.3 ``stage3.py``,
``FP16_DeepSpeedZeroOptimizer_Stage3(param_persistence_threshold=100000)``; the config's
``stage3_param_persistence_threshold``)."""

GRAD_BYTES = 2.0
"""Gradients are reduce-scattered in the fp16 of the parameters (``_reduce_scatter_gradient``
builds its inputs from ``param.grad`` in ``param.dtype``)."""

PY_TENSOR_OP_S = 2e-6
"""Host time of one PyTorch tensor op called from Python: "approx 2 us", of which about half
is Python's (N. Gimelshein, pytorch/pytorch issue #41383, 2020, for PyTorch of that year)."""

UNPACK_OPS_PER_RANK = 4
"""Python tensor ops per persistent parameter and rank when ``_allgather_params`` copies the
gathered buffer into the parameters: ``narrow``, ``view``, ``narrow``, ``copy_``."""

FETCH_HOST_S = 1.2e-3
"""Host time of fetching one gathered parameter that the device waits out, beyond what
:func:`gather_issue_s` and NCCL's transfer price: DeepSpeed 0.3's module hooks in Python
(``pre_sub_module_forward_function``: ``fetch_sub_module``, ``prefetch_next_sub_modules``,
their eagerly formatted ``print_rank_0`` f-strings; the ``Pre/PostBackwardFunction`` applies),
``_allgather_param``'s allocation, ``torch.cuda.synchronize()``, PyTorch's tensor-list
``all_gather`` launch, ``_synchronize_communication``'s ``handle.wait()``,
``comm_stream.synchronize()`` and ``torch.cuda.synchronize()``, and the release
(``_partition_param``: ``param.data = torch.ones(1).half().to(param.device)``, a pageable
host-to-device copy that synchronizes the stream). Each of those synchronizations drains the
device, so this host work is not hidden behind queued kernels as it would be in eager PyTorch.

**Calibrated on an external measurement, not derived bottom-up**: bing_bert with 5.1B
parameters (64 layers, hidden 2,560) on one 8 x A100 p4d.24xlarge with DeepSpeed 0.3.16 ran
its forward in ~480 ms under ZeRO-3 against ~60 ms under ZeRO-2 (deepspeedai/DeepSpeed issue
#1174, 2021-06-19; ~470 ms in PR #1188, 2021-06-25, which gives the model's shape). Of those
~415 ms, llmsim without this term prices ~98 ms (the 261 gathers' NCCL transfers, zeroing,
copies, debug norms and per-rank ops); the remaining ~317 ms over 261 gathered tensors is
1.21 ms each
(``PYTHONPATH=. python benchmarks/bench_deepspeed_zero3.py`` prints the derivation;
``benchmarks/deepspeed_zero3/bert5b_ds1174.yaml`` is the setup). The count takes four gathered
weights a layer, the DeepSpeed transformer kernel's (``attn_qkvw``, ``attn_ow``, ``inter_w``,
``output_w``), which the issue's ``--attention_dropout_checkpoint --gelu_checkpoint`` flags
imply; bing_bert's own layers (separate query, key and value) would give six and 0.8 ms. The
validation cases played no part. The same measurement's backward (~900 ms) is not used: with
this term llmsim gives ~0.6 s for it, so the gradient reduction's host time (the grad hooks'
bucket copies, the per-parameter reduce-scatters and gradient partitioning) is not priced."""


def layer_tensors(model: ModelSpec, layer: int, tp: int) -> tuple[float, ...]:
    """The parameter tensors of transformer ``layer`` on one GPU of a ``tp``-way group, in
    forward order: the first norm's weight and bias, the attention's input projections,
    its output projection, the second norm's, then the MLP's first (the gated pair fused, as
    Megatron-LM's ``dense_h_to_4h``) and second projection; their sum is
    :meth:`ModelSpec.layer_params` less the split over TP.

    >>> from sim.workload.spec import ModelSpec
    >>> m = ModelSpec("gpt", 96, 12288, 96, 96, 49152, 51200, 2048)
    >>> [int(x) for x in layer_tensors(m, 0, 1)]
    [12288, 12288, 452984832, 150994944, 12288, 12288, 603979776, 603979776]
    >>> sum(layer_tensors(m, 0, 1)) == m.layer_params(0)
    True
    """
    if model.is_moe_layer(layer):
        raise ValueError("DeepSpeed 0.3 ZeRO-3 is modelled for dense layers only")
    h = model.hidden_size
    attn = [o * i / (tp if split else 1) for _, o, i, split in model.attention_gemms()]
    out = model.attention_out_size * h / tp
    mlp = model.mlp_params(model.ffn_hidden_size) / tp
    up = mlp * (2 / 3 if model.gated_mlp else 1 / 2)
    norms = model.layer_params(layer) - model.attention_params() - model.mlp_params(model.ffn_hidden_size)
    latent = model.attention_params() - sum(o * i for _, o, i, _ in model.attention_gemms()) \
        - model.attention_out_size * h
    small = (norms / 4.0,) * 2
    return (*small, *attn, out, *((latent,) if latent else ()), *small, up, mlp - up)


def gathered(tensors: tuple[float, ...]) -> tuple[float, ...]:
    """The tensors gathered before each use (at least the persistence threshold)."""
    return tuple(x for x in tensors if x >= PERSISTENCE_THRESHOLD_NUMEL)


def persistent(tensors: tuple[float, ...]) -> tuple[float, ...]:
    """The tensors kept gathered between optimizer steps (below the threshold)."""
    return tuple(x for x in tensors if 0 < x < PERSISTENCE_THRESHOLD_NUMEL)


def _hbm_s(gpu: GPUSpec, nbytes: float) -> float:
    return nbytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency)


def gather_issue_s(ranks: int, size_bytes: float, gpu: GPUSpec) -> float:
    """What issuing one parameter's all-gather of ``size_bytes`` (the gathered tensor) over
    ``ranks`` costs beyond NCCL's transfer: per rank a Python ``narrow`` (the device idle after
    the synchronize) and a copy kernel out of PyTorch's flattened buffer; and the HBM traffic
    of zeroing the output (``torch.zeros``), of those copies (read and write) and of the debug
    print's ``param.norm()`` (a read of the gathered tensor).

    >>> from sim.hardware import get_gpu
    >>> round(gather_issue_s(1536, 0.0, get_gpu("A100")) * 1e3, 3)  # ms, per-rank part
    6.144
    """
    return ranks * (PY_TENSOR_OP_S + gpu.kernel_launch_s) + _hbm_s(gpu, 4.0 * size_bytes)


def reduce_issue_s(ranks: int, size_bytes: float, gpu: GPUSpec) -> float:
    """What issuing one gradient's reduce-scatter of ``size_bytes`` (the whole gradient) over
    ``ranks`` costs beyond NCCL's transfer: per rank a copy kernel into PyTorch's flattened
    buffer (its Python loop is hidden), and those copies' HBM traffic."""
    return ranks * gpu.kernel_launch_s + _hbm_s(gpu, 2.0 * size_bytes)


def persistent_issue_s(ranks: int, count: int, size_bytes: float, gpu: GPUSpec) -> float:
    """What the step's gather of ``count`` persistent parameters (``size_bytes`` gathered)
    over ``ranks`` costs beyond NCCL's transfer: a copy kernel per rank out of the flattened
    buffer, then :data:`UNPACK_OPS_PER_RANK` Python tensor ops per parameter and rank, and the
    HBM traffic of both copies."""
    return (ranks * gpu.kernel_launch_s + count * ranks * UNPACK_OPS_PER_RANK * PY_TENSOR_OP_S
            + _hbm_s(gpu, 4.0 * size_bytes))
