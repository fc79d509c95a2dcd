"""Memory per GPU: weights, gradients, optimizer state and stored activations.

Closed forms used by the task-graph builder to attach allocations to tasks; the engine's
timeline turns them into the per-rank memory counter and its peak.

References
----------
Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
arXiv 2205.05198, Sec. 4 and Table 2 (activations per layer).
Rajbhandari et al. 2020, "ZeRO", arXiv 1910.02054, Sec. 3.1 (mixed-precision Adam: 2 + 2 + 12
bytes per parameter).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.types import RecomputeKind
from sim.workload.spec import ModelSpec, ParallelSpec

__all__ = ["StateBytes", "state_bytes", "layer_activation_bytes", "stage_params"]

WEIGHT_BYTES = 2.0
"""16-bit model weights."""
GRAD_BYTES = 4.0
"""fp32 gradient accumulation buffer (Megatron-LM keeps ``main_grad`` in fp32 under bf16:
``arguments.py``, 'bfloat16 requires gradient accumulation and all-reduce to be performed in
fp32')."""
OPTIMIZER_BYTES = 12.0
"""fp32 master weights and Adam's two moments (ZeRO, arXiv 1910.02054, Sec. 3.1: K = 12)."""


@dataclass(frozen=True)
class StateBytes:
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes


def stage_params(model: ModelSpec, parallel: ParallelSpec, stage: int) -> float:
    """Parameters held by one GPU of pipeline stage ``stage`` (Megatron's division).

    Layers are split evenly over the ``pp`` stages and their matrices over ``tp``; the first
    stage holds the input embedding and the last the output layer (a second copy when tied
    and ``pp > 1``), each split over ``tp`` by vocabulary.
    """
    layers = model.num_layers // parallel.pp
    params = layers * model.layer_params() / parallel.tp
    emb = model.embedding_params() / parallel.tp
    if stage == 0:
        params += emb
    if stage == parallel.pp - 1 and (parallel.pp > 1 or not model.tied_embeddings):
        params += emb
    return params


def state_bytes(model: ModelSpec, parallel: ParallelSpec, stage: int) -> StateBytes:
    """Weights, gradients and optimizer state of one GPU of stage ``stage``."""
    p = stage_params(model, parallel, stage)
    shard = parallel.dp if parallel.shards_optimizer else 1
    return StateBytes(p * WEIGHT_BYTES, p * GRAD_BYTES, p * OPTIMIZER_BYTES / shard)


def layer_activation_bytes(model: ModelSpec, parallel: ParallelSpec, recompute: RecomputeKind | None = None
                           ) -> float:
    """Activation bytes one layer stores for one micro-batch until its backward.

    Korthikanti et al. 2022, Table 2, with flash attention (which never stores the s x s
    scores, so the ``5as/h`` term is gone and selective equals none):
    ``sbh (10 + 24/t)`` without sequence parallelism, ``34 sbh / t`` with it, and
    ``2 sbh`` (``/ t`` with sequence parallelism) for full recomputation.

    >>> from sim.workload.spec import ModelSpec, ParallelSpec
    >>> m = ModelSpec("gpt3", 96, 12288, 96, 96, 49152, 51200, 2048)
    >>> p = ParallelSpec(tp=8, pp=8, sequence_parallel=True, global_batch_size=64)
    >>> round(layer_activation_bytes(m, p) / 2**20, 1)   # 4.25 sbh
    102.0
    """
    rc = parallel.recompute if recompute is None else recompute
    s, b, h, t = model.seq_length, parallel.micro_batch_size, model.hidden_size, parallel.tp
    sbh = s * b * h
    if rc is RecomputeKind.FULL:
        return 2.0 * sbh / (t if parallel.sequence_parallel else 1)
    if parallel.sequence_parallel:
        return 34.0 * sbh / t
    return sbh * (10.0 + 24.0 / t)
