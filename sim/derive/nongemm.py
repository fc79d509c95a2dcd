"""The priced costs of non-GEMM kernels from the published measurements it quotes.

Quotes the published figures it uses (:data:`CROSS_ENTROPY_MS`, :data:`APEX_LAYER_NORM_GBPS`,
each with its source and commit) and derives:

* Megatron-Core's vocab-parallel cross entropy (H100 80GB HBM3, bf16 logits ``[2048, 4, V]``,
  V = 4k-128k, TP 1): a least-squares line ``t = a + b x logits`` per provider and direction
  (the backward is the ``backward`` row less the ``forward`` row, as the benchmark says), and
  the slope as the HBM traffic per logit that takes that time at the H100's streaming
  bandwidth (``sim.hardware``: 3.35 TB/s x 0.92). ``sim.workload.nongemm`` prices the loss
  with the ``megatron-unfused`` figures.
* The fused LayerNorm's backward against its forward (apex PR #1037): the bandwidth each
  reaches, bytes as the PR counts them (forward: read x, write y; backward: read x and dy,
  write dx), and the ratio ``sim.workload.nongemm`` applies to a fused norm's backward.

``benchmarks/nongemm_derive.py`` prints them; ``tests/unit/test_nongemm.py`` checks that
``sim.workload.nongemm`` holds what this derives.
"""

from __future__ import annotations

import numpy as np

H100_STREAM_BYTES_PER_S = 3350e9 * 0.92
"""The H100's HBM bandwidth times the streaming efficiency ``sim.hardware`` prices it at."""

CE_SOURCE = ("linkedin/Liger-Kernel benchmark/data/all_benchmark_data.csv @ ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c, "
             "kernel_name megatron_cross_entropy (benchmark/scripts/benchmark_megatron_cross_entropy.py), "
             "NVIDIA H100 80GB HBM3, Liger 0.8.x, y_value_50")
"""Where :data:`CROSS_ENTROPY_MS` is quoted from."""

CE_TOKENS = 2048 * 4
"""Tokens of each measured loss: bf16 logits ``[S=2048, B=4, V]`` at TP 1 (the rows'
``extra_benchmark_config_str``)."""

CROSS_ENTROPY_MS: dict[tuple[str, str], dict[int, float]] = {
    # (provider, mode) -> {V: median ms}; the backward mode runs the forward too.
    ("megatron-unfused", "forward"): {4096: 0.5585, 8192: 1.0782, 16384: 2.0663, 32768: 4.0231, 65536: 7.9344,
                                      131072: 15.8124},
    ("megatron-unfused", "backward"): {4096: 0.7693, 8192: 1.4540, 16384: 2.7811, 32768: 5.4121, 65536: 10.6697,
                                       131072: 21.2467},
    ("megatron-fused", "forward"): {4096: 0.3122, 8192: 0.6359, 16384: 1.3467, 32768: 2.8313, 65536: 5.7631,
                                    131072: 11.8098},
    ("megatron-fused", "backward"): {4096: 0.5311, 8192: 1.0505, 16384: 2.1581, 32768: 4.4489, 65536: 8.9818,
                                     131072: 18.2319},
}
"""The median times (ms) Liger-Kernel's benchmark measured for Megatron-Core's
``vocab_parallel_cross_entropy`` (``megatron-unfused``, the default,
``cross_entropy_loss_fusion=False``) and ``fused_vocab_parallel_cross_entropy``
(``megatron-fused``), quoted to four decimals from :data:`CE_SOURCE`."""

APEX_SOURCE = 'NVIDIA/apex pull request #1037 ("fast layer norm", 2021-01-27), its description'
"""Where :data:`APEX_LAYER_NORM_GBPS` is quoted from."""

APEX_LAYER_NORM_GBPS: dict[tuple[str, str], float] = {
    ("apex FusedLayerNorm", "forward"): 895.7822,
    ("apex FusedLayerNorm", "backward"): 572.1678,
    ("apex contrib FastLayerNorm", "forward"): 1258.0318,
    ("apex contrib FastLayerNorm", "backward"): 1163.4357,
}
"""The bandwidth (GB/s) apex's ``FusedLayerNorm`` and ``apex.contrib.layer_norm.FastLayerNorm``
reach on fp16 BERT activations (B=32, S=512) on an A100, forward and backward, as
:data:`APEX_SOURCE` prints them."""


def cross_entropy_fit(provider: str = "megatron-unfused") -> dict[str, tuple[float, float]]:
    """``{"forward": (a_s, b_s_per_logit), "backward": (...)}``: the least-squares line of the
    measured time over the number of logits, per direction (the backward is the ``backward``
    row less the ``forward`` row, as the benchmark says)."""
    fwd, both = CROSS_ENTROPY_MS[(provider, "forward")], CROSS_ENTROPY_MS[(provider, "backward")]
    out = {}
    for name, series in (("forward", fwd), ("backward", {v: both[v] - fwd[v] for v in fwd})):
        xs = np.array([CE_TOKENS * v for v in sorted(series)], dtype=float)
        ys = np.array([series[v] for v in sorted(series)]) * 1e-3
        b, a = np.polyfit(xs, ys, 1)
        out[name] = (float(a), float(b))
    return out


def cross_entropy_bytes_per_logit(provider: str = "megatron-unfused") -> tuple[float, float]:
    """(forward, backward) traffic per logit that takes the measured time per logit at the
    H100's streaming bandwidth."""
    fit = cross_entropy_fit(provider)
    return tuple(fit[d][1] * H100_STREAM_BYTES_PER_S for d in ("forward", "backward"))  # type: ignore[return-value]


def apex_layer_norm() -> dict[tuple[str, str], float]:
    """(kernel, direction) -> GB/s as apex PR #1037 prints it."""
    return dict(APEX_LAYER_NORM_GBPS)


def norm_backward_ratio(kernel: str = "apex contrib FastLayerNorm") -> float:
    """The bandwidth a fused LayerNorm's backward reaches over its forward's."""
    t = apex_layer_norm()
    return t[(kernel, "backward")] / t[(kernel, "forward")]
