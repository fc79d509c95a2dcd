"""Inference: prefill and decode of a served model, on the training simulator's engine, cost
models and topologies (docs/inference.md).

``llmsim infer`` simulates one batch of requests (:func:`simulate_inference`),
``llmsim roofline`` classifies every GEMM and attention op of a layer against each GPU's ridge
point (:mod:`sim.inference.roofline`), ``llmsim whatif memory`` swaps the HBM generation
(:mod:`sim.inference.hbm`). A serving stack (:mod:`sim.inference.stack`) says what the host
that issues the kernels costs (:mod:`sim.inference.host`).
"""

from sim.inference.runner import InferenceRun, simulate_inference
from sim.inference.spec import InferenceSpec, Phase
from sim.inference.stack import ServingStack, load_serving_stack

__all__ = ["InferenceSpec", "Phase", "InferenceRun", "ServingStack", "load_serving_stack", "simulate_inference"]
