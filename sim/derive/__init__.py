"""How the catalogue's constants come from measurement files.

Each module reads one kind of measurement, whose file the caller names (the measurements are
committed under ``benchmarks/``, which an installed package does not have), and computes the
constants ``sim.hardware``, ``sim.workload.nongemm`` and the topology presets carry; the unit
tests compare the catalogue with what these compute, so no constant can be edited to fit a case.

* :mod:`sim.derive.nccl_curves`: scale-up collective latency and efficiency curves from
  nccl-tests all-reduce tables.
* :mod:`sim.derive.gemm_curves`: GEMM and attention efficiency points from the device kernel
  timings.
* :mod:`sim.derive.power`: the power model's constants from the nvidia-smi samples of the
  power runs.
* :mod:`sim.derive.nongemm`: the priced costs of the loss and the fused norm's backward from
  the published figures it quotes.
* :mod:`sim.derive.serving_host`: the host's work per step of TensorRT-LLM's Python runtime
  from that runtime's published benchmark latency (the serving stack ``nemo-trtllm-python``).
* :mod:`sim.derive.decode_gemm`: the A100's share of HBM bandwidth in a bandwidth-bound GEMM
  from gpt-fast's published decode rate.
"""
