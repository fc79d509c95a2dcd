"""How many floating-point operations one training iteration does, as the field counts them."""

from __future__ import annotations

from sim.types import RecomputeKind
from sim.workload.spec import WorkloadSpec

__all__ = ["model_flops"]


def model_flops(w: WorkloadSpec) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one iteration, Megatron's count.

    Model FLOPs: 3 x (2 x the GEMM FLOPs per token + 4 s x q for attention scores and values)
    over all tokens, plus the output layer -- ``72 B s l h^2 (1 + s/6h + V/12hl)`` for GPT
    (Narayanan et al. 2021, arXiv 2104.04473, Appendix; Megatron-LM
    ``num_floating_point_operations``). Hardware FLOPs add the recomputed forward: the whole
    layer under full recomputation, the attention core under selective (Korthikanti et al.
    2022, Appendix A).
    """
    m, p = w.model, w.parallel
    h, q, kv, f = m.hidden_size, m.q_size, m.kv_size, m.ffn_hidden_size
    br = 2 if m.gated_mlp else 1
    gemm = 2.0 * (h * (q + 2 * kv) + q * h + h * f * br + f * h)
    attn = 4.0 * m.seq_length * q
    layer_fwd = gemm + attn
    tokens = w.tokens_per_iteration
    fwd = tokens * (m.num_layers * layer_fwd + 2.0 * h * m.vocab_size)
    model = 3.0 * fwd
    extra = 0.0
    if p.recompute is RecomputeKind.FULL:
        extra = tokens * m.num_layers * layer_fwd
    elif p.recompute is RecomputeKind.SELECTIVE:
        extra = tokens * m.num_layers * attn
    elif p.recompute is RecomputeKind.SELECTIVE_OP:  # every other matmul (sim.memory.matmul_widths)
        ins = [h, h, h, q, h] + ([h, f] if m.gated_mlp else [f])
        outs = [q, kv, kv, h, f] + ([f, h] if m.gated_mlp else [h])
        extra = tokens * m.num_layers * sum(2.0 * i * o for i, o in list(zip(ins, outs))[1::2])
    return model, model + extra
