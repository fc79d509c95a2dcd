"""How many floating-point operations one training iteration does, as the field counts them."""

from __future__ import annotations

from sim.types import RecomputeKind, RecomputeModule
from sim.workload.spec import WorkloadSpec

__all__ = ["model_flops"]


def model_flops(w: WorkloadSpec) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one iteration, Megatron's count.

    Model FLOPs: 3 x (2 x the GEMM FLOPs per token + 4 s x q for attention scores and values)
    over all tokens, plus the output layer -- ``72 B s l h^2 (1 + s/6h + V/12hl)`` for GPT
    (Narayanan et al. 2021, arXiv 2104.04473, Appendix; Megatron-LM
    ``num_floating_point_operations``). Hardware FLOPs add the recomputed forward: the whole
    layer under full recomputation (of the layers it recomputes, under block recomputation:
    :meth:`~sim.workload.spec.WorkloadSpec.layer_recompute`), under selective the attention
    core (Korthikanti et al. 2022, Appendix A) and the GEMMs of the other
    ``parallel.recompute_modules`` (MLA's up-projections, a dense MLP, the shared experts).
    Multi-token-prediction modules (:attr:`~sim.workload.spec.ModelSpec.mtp_num_layers`) count
    as Megatron-LM counts them: a layer of the last layer's kind, ``eh_proj``, three norms and
    an output layer each, recomputed as a decoder layer is (not under block recomputation).
    """
    m, p = w.model, w.parallel
    h, q, f = m.hidden_size, m.q_size, m.ffn_hidden_size
    br = 2 if m.gated_mlp else 1
    attn_gemm = 2.0 * (sum(o * i for _, o, i, _ in m.attention_gemms()) + m.attention_out_size * h)
    attn = 4.0 * m.seq_length * q
    dense_mlp = 2.0 * (h * f * br + f * h)
    # a MoE layer: the router, the shared experts and k routed experts per token (Megatron-Core
    # num_floating_point_operations, its MoE branch)
    fe = m.moe_ffn_hidden_size
    moe_mlp = 2.0 * (h * m.num_experts + (m.moe_top_k * fe + m.shared_ffn_size) * h * (br + 1))
    n_moe = sum(m.is_moe_layer(i) for i in range(m.num_layers))
    layers_fwd = m.num_layers * (attn_gemm + attn) + (m.num_layers - n_moe) * dense_mlp + n_moe * moe_mlp
    # multi-token prediction: a layer of the last layer's kind, eh_proj, three norms and one more
    # output layer per module (Megatron-LM num_floating_point_operations @ d98e8a6: "MTP norms
    # and proj" 3h + 2h^2 FMAs a token, "(mtp_num_layers + 1)  # MTP + final logit")
    mtp = m.mtp_num_layers
    mtp_layer = attn_gemm + attn + (moe_mlp if m.is_moe_layer(m.mtp_layer) else dense_mlp)
    mtp_proj = 2.0 * (2 * h * h)
    tokens = w.tokens_per_iteration
    fwd = tokens * (layers_fwd + mtp * (mtp_layer + mtp_proj + 2.0 * 3 * h) + (1 + mtp) * 2.0 * h * m.vocab_size)
    model = 3.0 * fwd
    extra = 0.0
    if p.recompute is RecomputeKind.FULL and p.recompute_num_layers is not None:
        again = [i for i in range(m.num_layers) if w.layer_recompute(i) is RecomputeKind.FULL]
        n_moe_again = sum(m.is_moe_layer(i) for i in again)
        extra = tokens * (len(again) * (attn_gemm + attn) + (len(again) - n_moe_again) * dense_mlp
                          + n_moe_again * moe_mlp)
    elif p.recompute is RecomputeKind.FULL:  # the MTP layers too, under the uniform method
        extra = tokens * (layers_fwd + mtp * (mtp_layer + mtp_proj))
    elif p.recompute is RecomputeKind.SELECTIVE:  # the GEMMs and attention of recompute_modules
        mods = p.recompute_modules
        up = 2.0 * m.mla_up_params()
        shared = 2.0 * m.shared_ffn_size * h * (br + 1)
        per_layer = ((attn if RecomputeModule.CORE_ATTN in mods else 0.0)
                     + (up if RecomputeModule.MLA_UP_PROJ in mods else 0.0))
        mtp_moe = mtp if m.is_moe_layer(m.mtp_layer) else 0
        extra = tokens * ((m.num_layers + mtp) * per_layer
                          + (m.num_layers + mtp - n_moe - mtp_moe) * (dense_mlp if RecomputeModule.MLP in mods else 0.0)
                          + (n_moe + mtp_moe) * (shared if RecomputeModule.SHARED_EXPERTS in mods else 0.0))
    elif p.recompute is RecomputeKind.SELECTIVE_OP:  # every other matmul (ModelSpec.separate_matmuls)
        mm = [2.0 * i * o for _, o, i in m.separate_matmuls()]
        # a MoE layer recomputes wk and wo, as the task graph does (sim.workload.layers)
        extra = tokens * ((m.num_layers - n_moe) * sum(mm[1::2]) + n_moe * (mm[1] + mm[3]))
    return model, model + extra
