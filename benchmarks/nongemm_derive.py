"""Print the priced costs of non-GEMM kernels derived from published measurements.

::

    python benchmarks/nongemm_derive.py

prints what :mod:`sim.derive.nongemm` derives from the published figures it quotes (each with
its source and commit):

* Megatron-Core's vocab-parallel cross entropy (H100 80GB HBM3, bf16 logits ``[2048, 4, V]``,
  V = 4k-128k, TP 1): a least-squares line ``t = a + b x logits`` per provider and direction,
  and the slope as the HBM traffic per logit that takes that time at the H100's streaming
  bandwidth (``sim.hardware``: 3.35 TB/s x 0.92).
* The fused LayerNorm's backward against its forward (apex PR #1037): the bandwidth each
  reaches and the ratio ``sim.workload.nongemm`` applies to a fused norm's backward.

``tests/unit/test_nongemm.py`` checks that ``sim.workload.nongemm`` holds what this derives.
"""

from __future__ import annotations

from sim.derive.nongemm import apex_layer_norm, cross_entropy_bytes_per_logit, cross_entropy_fit, norm_backward_ratio


def main() -> int:
    print("Megatron-Core vocab-parallel cross entropy, H100 80GB HBM3, bf16 logits [2048, 4, V], TP 1")
    print("(Liger-Kernel benchmark/data/all_benchmark_data.csv; t = a + b x logits over V = 4k-128k)")
    for provider in ("megatron-unfused", "megatron-fused"):
        fit = cross_entropy_fit(provider)
        fb, bb = cross_entropy_bytes_per_logit(provider)
        print(f"  {provider:17s} forward  a {fit['forward'][0] * 1e6:7.1f} us  "
              f"b {fit['forward'][1] * 1e12:6.2f} ps/logit"
              f"  = {fb:5.1f} B/logit at 3.35 TB/s x 0.92")
        print(f"  {'':17s} backward a {fit['backward'][0] * 1e6:7.1f} us  b {fit['backward'][1] * 1e12:6.2f} ps/logit"
              f"  = {bb:5.1f} B/logit")
    print("  priced before: forward 14 B/logit (bf16 read + 3 fp32 passes), backward 6 B/logit")

    print("\nfused LayerNorm, fp16 BERT activations (B=32, S=512) on an A100 (apex PR #1037)")
    t = apex_layer_norm()
    for kernel in ("apex FusedLayerNorm", "apex contrib FastLayerNorm"):
        print(f"  {kernel:27s} forward {t[(kernel, 'forward')]:7.1f} GB/s  backward {t[(kernel, 'backward')]:7.1f} GB/s"
              f"  backward / forward {norm_backward_ratio(kernel):.3f}")

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
