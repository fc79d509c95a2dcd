"""Workloads: the model, the parallel strategy, and the task graph built from them."""
