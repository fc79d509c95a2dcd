"""Framework defaults: how a case's null parallel settings are filled.

Megatron-LM and torchtitan differ in what they do when a setting is not given (sequence
parallelism, ZeRO/FSDP sharding, gradient-reduction overlap, FlashAttention, batch sizes), and
Megatron-LM changed over the years; each helper here reads the setting or fills it the way the
case's ``framework`` would, recording a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Mapping

from sim.config.fields import _Fields, _Notes
from sim.types import (AttentionKernel, LossKind, RecomputeKind, ScheduleKind, TpOverlapMethod, ZeroImpl,
                       parse_enum)
from sim.workload.tp_overlap import ASYNC_TP, TE_DEFAULTS, UB_GEMMS, TpOverlapConfig, userbuffers
from sim.workload.spec import ParallelSpec


def _sp_default(f: _Fields, tp: int, framework: str, notes: _Notes, tp_overlap: bool = False) -> bool:
    """Sequence parallelism when a case leaves it null: torchtitan's tensor-parallel plan
    always shards norms along the sequence (``SequenceParallel`` in parallelize_llama.py);
    Megatron-LM only with ``--sequence-parallel``, which its ``--tp-comm-overlap`` requires."""
    flag = f.flag("sequence_parallel")
    if flag is not None:
        return flag
    if tp_overlap and tp > 1:
        return notes.fill("parallel.sequence_parallel", True, "required by --tp-comm-overlap")
    if "torchtitan" in framework.lower() and tp > 1:
        return notes.fill("parallel.sequence_parallel", True, "torchtitan's TP plan uses SequenceParallel")
    return notes.fill("parallel.sequence_parallel", False, "off by default")


def _zero_default(framework: str, notes: _Notes, f: _Fields | None = None) -> int:
    """ZeRO stage when a case leaves it null: torchtitan shards parameters, gradients and
    optimizer state over its data-parallel ranks with FSDP2 by default (ZeRO-3); so does a
    Megatron-Core run whose published settings (``parallel.details``) name Megatron-FSDP, which
    Megatron-Bridge's performance scripts run with ``data_parallel_sharding_strategy =
    "optim_grads_params"`` (``set_mcore_fsdp_configs``: optimizer state, gradients and
    parameters sharded); Megatron-LM otherwise shards nothing unless told to."""
    if "torchtitan" in framework.lower():
        return notes.fill("parallel.zero_stage", 3, "torchtitan default: FSDP2 full sharding")
    if f is not None and _details_has(f, "Megatron-FSDP"):
        return notes.fill("parallel.zero_stage", 3, "the case's settings name Megatron-FSDP, which Megatron-Bridge "
                          "runs with data_parallel_sharding_strategy 'optim_grads_params' (ZeRO-3)")
    return notes.fill("parallel.zero_stage", 0, "no ZeRO sharding")


def _framework_year(framework: str) -> int | None:
    years = [int(y) for y in re.findall(r"\b(20\d\d)\b", framework)]
    return max(years) if years else None


_PRE_2023 = {
    # flag: why a framework dated 2022 or earlier had it off
    "overlap_grad_reduce": "gradients all-reduced after the backward (Megatron-LM --DDP-impl local; "
                           "--overlap-grad-reduce came with Megatron-Core's DistributedDataParallel in 2023)",
    "flash_attention": "predates FlashAttention in Megatron-LM (--use-flash-attn, 2023)",
}


def _era_default(f: _Fields, key: str, framework: str, notes: _Notes) -> bool:
    """A feature flag that frameworks have on today but did not before 2023 (``_PRE_2023``):
    the case's value, else off for a framework dated 2022 or earlier, else on."""
    flag = f.flag(key)
    if flag is not None:
        return flag
    year = _framework_year(framework)
    if year is not None and year <= 2022:
        return notes.fill(f"parallel.{key}", False, f"framework '{framework}': {_PRE_2023[key]}")
    return True


def _overlap_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """Whether the data-parallel gradient reduction overlaps the backward pass."""
    return _era_default(f, "overlap_grad_reduce", framework, notes)


def _p2p_overlap_default(f: _Fields, framework: str, schedule: ScheduleKind, notes: _Notes) -> bool:
    """Whether the interleaved schedule posts each pipeline receive a pass ahead
    (:attr:`~sim.workload.spec.ParallelSpec.overlap_p2p_comm`): the case's value; else, under
    the interleaved schedule, off for torchtitan, whose ``torch.distributed.pipelining``
    schedules issue each time step's sends and receives as one batch and wait for it
    (``PipelineScheduleMulti._step_microbatches``: ``_batch_p2p(ops).wait()``), and off for a
    framework dated 2022 or earlier, whose interleaved schedule exchanged activations and
    gradients with blocking batched sends and receives after each pass
    (``megatron/schedules.py``: ``p2p_communication.send_forward_backward_recv_forward_backward``);
    ``overlap_p2p_comm`` came with Megatron-Core's schedules in 2023. On otherwise: on by
    default in Megatron-LM (``--no-overlap-p2p-communication``), in NeMo's launcher
    configurations and in Megatron-Bridge whenever virtual pipeline stages are used
    (``comm_overlap.py``). The other schedules ignore it, and no note is written for them."""
    flag = f.flag("overlap_p2p_comm")
    if flag is not None:
        return flag
    if schedule is not ScheduleKind.INTERLEAVED:
        return True
    listed = _framework_has(f, framework, "--no-overlap-p2p-communication")
    if listed:
        return notes.fill("parallel.overlap_p2p_comm", False, f"the case lists {listed}")
    if _is_torchtitan(framework):
        return notes.fill("parallel.overlap_p2p_comm", False, "torch.distributed.pipelining waits for each "
                          "time step's batched sends and receives")
    year = _framework_year(framework)
    if year is not None and year <= 2022:
        return notes.fill("parallel.overlap_p2p_comm", False, f"framework '{framework}': its interleaved "
                          "schedule sends and receives after each pass, blocking (overlap_p2p_comm came with "
                          "Megatron-Core in 2023)")
    return True


def _flash_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """FlashAttention unless the producing framework predates it."""
    return _era_default(f, "flash_attention", framework, notes)


def _flag_default(f: _Fields, key: str, notes: _Notes, why: str) -> bool:
    value = f.flag(key)
    return notes.fill(f.field(key), False, why) if value is None else value


TORCHTITAN_STAGES_PER_RANK = 2
"""Model chunks per pipeline rank that torchtitan's looped (interleaved) schedules get when no
split points are given: ``generate_split_points`` sets ``num_stages_per_rank = 2``
(pytorch/torchtitan ``torchtitan/parallelisms/pipeline_llama.py``, late 2024)."""


def _torchtitan_microbatches(pp: int) -> int:
    """Pipeline micro-batches torchtitan splits a rank's local batch into when
    ``pipeline_parallel_microbatches`` is not set: the pipeline degree
    (``n_microbatches = job_config.experimental.pipeline_parallel_degree``,
    pytorch/torchtitan ``torchtitan/parallelisms/pipelining_utils.py``, the rule of the
    benchmarked torchtitan 9dec370 of 2024-12-26; PR #781 of 2025-01-07 made it the pipeline
    degree times the stages per rank for looped schedules)."""
    return pp


def _virtual_stages_default(f: _Fields, framework: str, notes: _Notes) -> int:
    """Model chunks per pipeline rank when a case leaves them null: torchtitan's interleaved
    schedule splits the model into two per rank (:data:`TORCHTITAN_STAGES_PER_RANK`); otherwise
    no interleaving."""
    vps = f.integer("virtual_pipeline_stages")
    if vps is not None:
        return vps
    if _is_torchtitan(framework) and str(f.raw.get("schedule") or "").startswith("interleaved"):
        return notes.fill("parallel.virtual_pipeline_stages", TORCHTITAN_STAGES_PER_RANK,
                          "torchtitan's interleaved schedule without split points: generate_split_points "
                          "gives 2 stages per rank")
    return notes.fill("parallel.virtual_pipeline_stages", 1, "no interleaving")


def _batch_sizes(f: _Fields, dp: int, pp: int, framework: str, notes: _Notes) -> tuple[int, int]:
    mbs, gbs = f.integer("micro_batch_size"), f.integer("global_batch_size")
    if mbs is None:
        local = gbs // dp if gbs and gbs % dp == 0 else None
        n_mb = _torchtitan_microbatches(pp)
        if _is_torchtitan(framework) and pp == 1 and local:
            mbs = notes.fill("parallel.micro_batch_size", local, "torchtitan: local batch = "
                             "global / dp, no gradient accumulation")
        elif _is_torchtitan(framework) and local and local % n_mb == 0:
            mbs = notes.fill("parallel.micro_batch_size", local // n_mb,
                             f"torchtitan: the local batch (global / dp = {local}) in {n_mb} pipeline "
                             "micro-batches (pipeline_parallel_microbatches unset: the pipeline degree, "
                             "torchtitan 9dec370 pipelining_utils.py)")
        else:
            mbs = notes.fill("parallel.micro_batch_size", 1, "torchtitan's pipeline micro-batch "
                             "default" if "torchtitan" in framework.lower() else
                             "Megatron-LM sets none; 1 is the usual choice")
    if gbs is None:
        gbs = notes.fill("parallel.global_batch_size", mbs * dp, "Megatron-LM default: "
                         "micro_batch_size x dp, one micro-batch")
    return mbs, gbs


def _is_torchtitan(framework: str) -> bool:
    return "torchtitan" in framework.lower()


def _recompute_meaning(recompute: RecomputeKind, framework: str, notes: _Notes) -> RecomputeKind:
    """What "selective" means in the producing framework: torchtitan's Llama training configs
    set ``selective_ac_option = 'op'`` (``train_configs/llama3_8b.toml``), its op-level policy,
    not Megatron's recomputation of the attention core."""
    if recompute is RecomputeKind.SELECTIVE and _is_torchtitan(framework):
        notes.append("parallel.recompute: selective -> selective-op (torchtitan's selective_ac_option "
                     "= 'op': every other matmul's output and the attention output are kept)")
        return RecomputeKind.SELECTIVE_OP
    return recompute


def _loss_default(f: _Fields, framework: str, notes: _Notes) -> LossKind:
    """The cross entropy's implementation when a case leaves it null: torchtitan calls
    ``torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels)``
    (``torchtitan/components/loss.py``); Megatron-LM its fused vocab-parallel kernel."""
    if _is_torchtitan(framework):
        return f.enum("cross_entropy", LossKind, notes, LossKind.TORCH_FP32,
                      "torchtitan: PyTorch cross entropy on fp32 logits")
    value = f.raw.get("cross_entropy")
    return LossKind.FUSED if value is None else f.enum("cross_entropy", LossKind, notes, LossKind.FUSED, "")


def _fused_elementwise_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """Fused elementwise kernels: the case's ``fused_elementwise``, else for torchtitan on
    only when its published settings (``parallel.details``) name ``torch.compile``
    (torchtitan's ``training.compile`` is off by default, ``torchtitan/config_manager.py``;
    eager, each norm, rotary and SwiGLU op is its own kernel: :mod:`sim.workload.eager`), else
    on (Megatron-LM's and Transformer Engine's fused norm, SwiGLU and bias-dropout-add kernels)."""
    flag = f.flag("fused_elementwise")
    if flag is not None:
        return flag
    if _is_torchtitan(framework):
        if _details_has(f, "torch.compile"):
            return notes.fill("parallel.fused_elementwise", True, "the case's settings list torch.compile")
        return notes.fill("parallel.fused_elementwise", False, "torchtitan without torch.compile: "
                          "eager PyTorch ops, one kernel each")
    return True


def _attention_kernel_default(f: _Fields, framework: str, notes: _Notes) -> AttentionKernel:
    """The attention kernel when a case leaves it null: torchtitan calls PyTorch's
    ``scaled_dot_product_attention``, whose backend priority runs FlashAttention-2 before
    cuDNN (pytorch/pytorch ``sdp_utils.cpp``; measured 1.7-2.3x slower than cuDNN on H100,
    huggingface/transformers#48163, and in benchmarks/device here); Megatron-LM and NeMo go
    through Transformer Engine, which picks cuDNN's fused attention on Hopper.

    With context parallelism too, from Transformer Engine 1.2 (11 Jan. 2024) on; NeMo's README
    at its 24.03 release pins TE commit bfe21c3 on the ``pytorch:24.02-py3`` base, after that:
    TE 1.2's release notes, "Performance of DotProductAttention is increased on Hopper GPUs by
    utilizing cuDNN"; its ``DotProductAttention.forward`` then reads "Select FusedAttention on
    sm90 and FlashAttention on others for performance" and keeps FusedAttention under context
    parallelism when the backend is ``F16_arbitrary_seqlen``, whose ``AttnFuncWithCP`` calls
    ``fused_attn_fwd``/``fused_attn_bwd`` per ring step (TransformerEngine PR #572, "port cuDNN
    Flash Attn API to CP implementation", Jan. 2024). Before TE 1.2 it ranked FlashAttention first
    everywhere and ran context parallelism on FlashAttention alone ("Context parallelism is only
    implemented with Flash Attention!"); no case names such a version. Blackwell: TE 2.x
    ``get_attention_backend`` prefers FusedAttention for compute capability >= 9.0."""
    value = f.raw.get("attention_kernel")
    if value is None and _is_torchtitan(framework):
        return notes.fill("parallel.attention_kernel", AttentionKernel.FLASH2,
                          "torchtitan: PyTorch SDPA's default backend, FlashAttention-2")
    if value is None:
        return AttentionKernel.VENDOR
    return f.enum("attention_kernel", AttentionKernel, notes, AttentionKernel.VENDOR, "")


def _tp_overlap_default(f: _Fields, tp: int, notes: _Notes) -> bool:
    """TP communication overlap: the case's ``tp_comm_overlap``, else on when the case's
    published settings (``parallel.details``) include ``--tp-comm-overlap`` or torchtitan's
    ``AsyncTP`` (the same micro-pipelining of the all-gather and matmul), else off (the
    frameworks' default)."""
    flag = f.flag("tp_comm_overlap")
    if flag is not None:
        return flag
    if tp > 1:
        for flag in ("--tp-comm-overlap", "AsyncTP"):  # Megatron-LM; torchtitan's async TP
            if _details_has(f, flag):
                return notes.fill("parallel.tp_comm_overlap", True, f"the case's settings list {flag}")
    return False


_UB_KEYS = ("method", "num_sm", "use_ce", "cga_size", "set_sm_margin", "num_splits", "aggregate",
            "atomic_gemm", "fp8_buf", "is_reduce_scatter", "comm_priority", "gemm_priority",
            "pipeline_rs_overlap_first_gemm")
"""The keys of one GEMM's entry in Megatron-LM's ``--tp-comm-overlap-cfg`` YAML (Transformer
Engine's ``ub_cfgs``); ``method``, ``num_sm`` and ``use_ce`` decide the SMs held, the others
are accepted and not modelled."""


def _tp_overlap_cfg(f: _Fields, framework: str, tp_overlap: bool, notes: _Notes) -> TpOverlapConfig:
    """What runs the overlapped TP collectives: torchtitan's async TP on PyTorch's symmetric
    memory (copy engines); else Transformer Engine's userbuffers with the case's
    ``tp_comm_overlap_cfg`` (the mapping Megatron-LM reads from ``--tp-comm-overlap-cfg``:
    GEMM name -> ``method``, ``num_sm``, ``use_ce``...; NeMo's and Megatron-Bridge's
    ``TransformerLayerTPOverlapCfg`` tables) over TE's defaults, which Megatron-LM keeps when no
    file is given (:mod:`sim.workload.tp_overlap`)."""
    raw = f.raw.get("tp_comm_overlap_cfg")
    if _is_torchtitan(framework):
        if raw is not None:
            raise f.error("tp_comm_overlap_cfg", "null for torchtitan (its async TP runs on PyTorch's "
                          "symmetric memory, not Transformer Engine's userbuffers)", raw)
        if tp_overlap:
            notes.fill("parallel.tp_comm_overlap_cfg", ASYNC_TP, "torchtitan's async TP")
        return ASYNC_TP
    if raw is None:
        if tp_overlap:
            notes.fill("parallel.tp_comm_overlap_cfg", TE_DEFAULTS,
                       "Megatron-LM passes no ub_cfgs without --tp-comm-overlap-cfg: ring exchanges on the "
                       "copy engines, bulk and pipelined overlaps on 16 SMs")
        return TE_DEFAULTS
    if not isinstance(raw, Mapping):
        raise f.error("tp_comm_overlap_cfg", f"a mapping from GEMM names {list(UB_GEMMS)} to "
                      "{method, num_sm, use_ce}", raw)
    overrides = {}
    for gemm, entry in raw.items():
        if gemm not in UB_GEMMS:
            raise f.error(f"tp_comm_overlap_cfg.{gemm}", f"a GEMM name among {list(UB_GEMMS)}", gemm)
        g = _Fields(entry, f.path, f.field(f"tp_comm_overlap_cfg.{gemm}"), _UB_KEYS)
        method = g.raw.get("method")
        method = None if method is None else parse_enum(TpOverlapMethod, method, f.path, g.field("method"))
        num_sm = g.integer("num_sm")
        if num_sm is not None and num_sm < 0:
            raise g.error("num_sm", "a non-negative integer", num_sm)
        overrides[gemm] = (method, num_sm, g.flag("use_ce"))
    return userbuffers(overrides, "the case's tp_comm_overlap_cfg over Transformer Engine's defaults")


def _details_has(f: _Fields, flag: str) -> bool:
    details = f.raw.get("details")
    return isinstance(details, str) and flag in details


def _launch_flag(f: _Fields, key: str, flag: str, notes: _Notes) -> bool:
    """A boolean setting: the case's value, else on when its published launch flags
    (``parallel.details``) include ``flag``, else off (Megatron-LM's default)."""
    value = f.flag(key)
    if value is not None:
        return value
    if _details_has(f, flag):
        return notes.fill(f"parallel.{key}", True, f"the case's flags list {flag}")
    return False


_NEMO_OPTIMIZER = ("NeMo and Megatron-Bridge recipes: distributed_fused_adam_with_cosine_annealing sets "
                   "use_distributed_optimizer=True (nemo/collections/llm/recipes/optim/adam.py; NeMo 1's "
                   "launcher: optim.name distributed_fused_adam with overlap_param_sync, "
                   "conf/training/llama/llama3_8b.yaml)")


def _is_nemo(framework: str) -> bool:
    """A NeMo or Megatron-Bridge run (their recipes, not Megatron-LM's launch defaults)."""
    low = framework.lower()
    return "nemo" in low or "megatron-bridge" in low


def _dist_opt_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """The distributed optimizer: the case's value, else on when its flags include
    ``--use-distributed-optimizer`` or ``--overlap-param-gather`` (which Megatron-LM only
    accepts with it) or the framework is NeMo or Megatron-Bridge (their recipes' optimizer),
    else off (Megatron-LM's default)."""
    value = f.flag("distributed_optimizer")
    if value is not None:
        return value
    for flag in ("--use-distributed-optimizer", "--overlap-param-gather"):
        if _details_has(f, flag):
            return notes.fill("parallel.distributed_optimizer", True, f"implied by {flag} in the case's flags")
    if _is_nemo(framework):
        return notes.fill("parallel.distributed_optimizer", True, _NEMO_OPTIMIZER)
    return notes.fill("parallel.distributed_optimizer", False, "off by default")


def _param_gather_default(f: _Fields, framework: str, dist_opt: bool, notes: _Notes) -> bool:
    """Overlapping the distributed optimizer's parameter all-gather with the next forward: the
    case's value, else on for ``--overlap-param-gather`` in its flags or a NeMo /
    Megatron-Bridge run with the distributed optimizer (the recipes overlap it), else off."""
    value = _launch_flag(f, "overlap_param_gather", "--overlap-param-gather", notes)
    if value or f.flag("overlap_param_gather") is not None:
        return value
    if dist_opt and _is_nemo(framework):
        return notes.fill("parallel.overlap_param_gather", True, _NEMO_OPTIMIZER)
    return False


def _dp_shard_default(f: _Fields, dp: int, cp: int, zero: int, framework: str, notes: _Notes) -> int | None:
    """The hybrid-sharding degree: the case's ``dp_shard``, else None (full sharding over all
    ``dp x cp`` ranks), noted where something is sharded. It is both frameworks' default:
    torchtitan's ``data_parallel_shard_degree = -1`` (the rest of the world) with
    ``data_parallel_replicate_degree = 1`` (``torchtitan/config/job_config.py``), Megatron-LM's
    ``--num-distributed-optimizer-instances 1`` (``arguments.py``)."""
    value = f.integer("dp_shard", positive=True)
    if value is not None or zero == 0 or dp * cp == 1:
        return value
    who = ("torchtitan: data_parallel_shard_degree -1, data_parallel_replicate_degree 1" if _is_torchtitan(framework)
           else "Megatron-LM: --num-distributed-optimizer-instances 1")
    notes.fill("parallel.dp_shard", dp, f"full sharding: ZeRO-{zero} state over all dp x cp = {dp * cp} ranks, "
               f"no replicas ({who})")
    return None


def _framework_has(f: _Fields, framework: str, *words: str) -> str | None:
    """The first of ``words`` (launch flags, or how the case's prose names them) in the
    case's published settings (``parallel.details``) or its ``framework`` text."""
    details = f.raw.get("details")
    text = f"{details if isinstance(details, str) else ''} {framework}"
    return next((w for w in words if w in text), None)


def _grad_accum_fusion_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """Gradient-accumulation fusion: the case's ``gradient_accumulation_fusion``, else off when
    its settings or framework list ``--no-gradient-accumulation-fusion``, else on
    (Megatron-LM's default, ``gradient_accumulation_fusion=True`` in arguments.py), except for a
    framework dated 2021 or earlier, which predates the fusion: Megatron-LM's 2021 linear layers
    leave the weight gradient to autograd (``F.linear``) and its DDP hook adds ``param.grad``
    into the fp32 ``main_grad`` (``megatron/model/distributed.py``, ``_make_param_hook``); the
    fused wgrad-accumulate GEMM (apex ``fused_weight_gradient_mlp_cuda``) reached the
    tensor-parallel layers in early 2022 (NVIDIA/apex PR #1297, "[transformer] Fuse grad
    accumulation with wgrad", 2022-02-18, porting Megatron-LM's ``ColumnParallelLinear``)."""
    return _off_flag_or_era(f, framework, notes, "gradient_accumulation_fusion",
                            "--no-gradient-accumulation-fusion",
                            "predates gradient-accumulation fusion (early 2022, NVIDIA/apex #1297): the DDP "
                            "hook adds each bf16/fp16 weight gradient into the fp32 main_grad")


def _off_flag_or_era(f: _Fields, framework: str, notes: _Notes, key: str, off_flag: str, why: str) -> bool:
    """A Megatron-LM feature that is on by default: the case's ``parallel.<key>``, else off when
    its settings or framework list ``off_flag``, else off for a framework dated 2021 or earlier
    (``why`` says what that software lacked, after the framework's name), else on."""
    value = f.flag(key)
    if value is not None:
        return value
    flag = _framework_has(f, framework, off_flag)
    if flag:
        return notes.fill(f"parallel.{key}", False, f"the case lists {flag}")
    year = _framework_year(framework)
    if year is not None and year <= 2021:
        return notes.fill(f"parallel.{key}", False, f"framework '{framework}' {why}")
    return True


def _async_tp_allreduce_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """The asynchronous input-gradient all-reduce of column-parallel layers
    (:attr:`~sim.workload.spec.ParallelSpec.async_tp_grad_allreduce`): the case's value, else
    off when its settings list ``--no-async-tensor-model-parallel-allreduce``, else on, except
    for a framework dated 2021 or earlier: Megatron-LM's ``ColumnParallelLinearWithAsyncAllreduce``
    came in autumn 2021 (NVIDIA/apex PR #1183, "ColumnParallelLinearWithAsyncAllreduce autocast
    support", ports it; the next apex PR, #1203, is dated 2021-10-26), after the 2021 releases
    whose ``ColumnParallelLinear`` all-reduced the input gradient synchronously in
    ``_CopyToModelParallelRegion.backward``."""
    return _off_flag_or_era(f, framework, notes, "async_tp_grad_allreduce",
                            "--no-async-tensor-model-parallel-allreduce",
                            "predates Megatron-LM's asynchronous TP all-reduce (ColumnParallelLinearWithAsyncAllreduce, "
                            "autumn 2021, NVIDIA/apex #1183): the input gradient is all-reduced after the weight "
                            "gradient, blocking")


def _unfused_bias_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """Megatron-LM's pre-Transformer-Engine linear layers with their separate bias kernels
    (:attr:`~sim.workload.spec.ParallelSpec.unfused_linear_bias`): the case's value, else on
    for a framework dated 2022 or earlier (Megatron-LM's ``megatron/mpu`` linears; Megatron-Core
    runs Transformer Engine's from 2023), else off."""
    value = f.flag("unfused_linear_bias")
    if value is not None:
        return value
    year = _framework_year(framework)
    if year is not None and year <= 2022:
        return notes.fill("parallel.unfused_linear_bias", True,
                          f"framework '{framework}': Megatron-LM's own linear layers, whose biases are "
                          "added and reduced by separate PyTorch kernels (before Transformer Engine)")
    return False


def _deterministic_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """Megatron-LM's deterministic mode: the case's ``deterministic``, else on when its
    settings or framework name ``--deterministic-mode`` (or "deterministic mode"), else off."""
    value = f.flag("deterministic")
    if value is not None:
        return value
    flag = _framework_has(f, framework, "--deterministic-mode", "deterministic mode")
    if flag:
        return notes.fill("parallel.deterministic", True, f"the case names {flag}: "
                          "torch.use_deterministic_algorithms(True), NaN-filled allocations, "
                          "deterministic attention backward")
    return False


_DEEPSPEED_VERSION = re.compile(r"deepspeed[^0-9]{0,12}?v?(\d+)\.(\d+)", re.IGNORECASE)


def _zero_impl_default(f: _Fields, zero: int, framework: str, notes: _Notes) -> ZeroImpl:
    """How ZeRO-3 issues its collectives (``parallel.zero_impl``): the case's value, else
    DeepSpeed v0.3's per-parameter, blocking collectives when the case's ``framework`` names
    DeepSpeed at ZeRO stage 3 with a version below 0.4, or with no version and no year after
    2021; else FSDP's per-layer, prefetched ones (PyTorch FSDP, torchtitan, Megatron-Core, and
    DeepSpeed from 0.4 on, whose gathers were coalesced and made prefetchable from June 2021:
    deepspeedai/DeepSpeed PR #1188, "ZeRO3, improved parameter all-gather operation").

    DeepSpeed named without a version or year is taken as v0.3: ZeRO-3 was first released in
    DeepSpeed v0.3.x (March 2021) and that is the only DeepSpeed ZeRO-3 behaviour modelled
    apart from FSDP's (:mod:`sim.workload.deepspeed_zero3`)."""
    value = f.raw.get("zero_impl")
    if value is not None:
        return parse_enum(ZeroImpl, value, f.path, f.field("zero_impl"))
    if zero < 3 or "deepspeed" not in framework.lower():
        return ZeroImpl.FSDP
    version = _DEEPSPEED_VERSION.search(framework)
    year = _framework_year(framework)
    if version is not None:
        old = (int(version.group(1)), int(version.group(2))) < (0, 4)
        why = f"framework '{framework}' names DeepSpeed {version.group(1)}.{version.group(2)}"
    else:
        old = year is None or year <= 2021
        why = (f"framework '{framework}' names DeepSpeed ZeRO-3 without a version"
               + (f", dated {year}" if year is not None else ""))
    if old:
        return notes.fill("parallel.zero_impl", ZeroImpl.DEEPSPEED_0_3,
                          f"{why}: DeepSpeed 0.3's per-parameter all-gathers after a device synchronize and "
                          "per-parameter fp16 reduce-scatters (ZeRO-3's first releases, 2021)")
    return notes.fill("parallel.zero_impl", ZeroImpl.FSDP,
                      f"{why}: coalesced, prefetched gathers from DeepSpeed 0.4 on (PR #1188)")


@dataclass(frozen=True)
class MemorySaver:
    """A null parallel setting that the producing framework can set to use less memory."""

    key: str
    """The :class:`~sim.workload.spec.ParallelSpec` field, also the case's ``parallel`` key."""
    value: object
    """The value that saves memory."""
    fewest_layers: bool = False
    """Full recomputation (``value``) of the fewest layers of each model chunk that fit:
    ``recompute_num_layers`` is searched from 1 up to a chunk's layers, Megatron's
    ``--recompute-method block --recompute-num-layers N``
    (:attr:`~sim.workload.spec.ParallelSpec.recompute_num_layers`)."""


MEMORY_SAVERS_ORDER = ("distributed_optimizer", "sequence_parallel", "recompute")
"""The settings :func:`memory_savers` offers, cheapest first in iteration time:

1. ``distributed_optimizer`` (Megatron's ZeRO-1): the gradient all-reduce becomes a
   reduce-scatter and, after the step, a parameter all-gather of the same bytes (Rajbhandari et
   al. 2020, arXiv 1910.02054, Sec. 7.2: sharding optimizer state and gradients adds no
   communication), and the Adam
   step runs on ``1 / dp`` of the parameters; it saves ``12 (1 - 1/dp)`` bytes a parameter.
   Measured here: -0.5% iteration time (Korthikanti's 530B at DP 8).
2. ``sequence_parallel`` (TP > 1): each tensor-parallel all-reduce becomes a reduce-scatter and
   an all-gather of the same bytes, and the norms and dropouts run on ``s / t`` tokens
   (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4.2.2); it saves ``10 sbh (1 - 1/t)`` a
   layer. Measured here: +0.1% (NeMo's Llama 3 70B, TP 4) and +0.8% (GPT-3 175B, TP 4).
3. ``recompute``: selective first (the attention core again in the backward, 2-4% in that
   paper's Table 4; torchtitan's op-level policy recomputes every other matmul), then full
   (each layer's forward again, about a third more compute: +34% here on both runs above).
   Full recomputation costs in proportion to the layers it recomputes, so where the framework
   recomputes a set number of layers per model chunk (Megatron's block method) the fewest
   that fit are recomputed (``recompute_num_layers``), the rest keep their activations.

So the first two cost (almost) nothing, recomputation does, and full recomputation of every
layer most."""


def memory_savers(parallel: ParallelSpec, nulls: frozenset[str], framework: str) -> list[MemorySaver]:
    """The memory savers the case's ``framework`` offers for the settings it left null, in the
    order of :data:`MEMORY_SAVERS_ORDER`, each not in force already.

    Parameters
    ----------
    parallel : ParallelSpec
        The parallel settings as the recipe defaults filled them.
    nulls : frozenset of str
        The ``parallel`` keys the case left null (or out).
    framework : str
        The case's (dated) ``framework``.

    Notes
    -----
    The distributed optimizer is Megatron's (torchtitan shards with FSDP2, ZeRO-3 by default)
    and only saves memory with data-parallel ranks to shard over and nothing sharded yet.
    Sequence parallelism needs TP > 1. torchtitan's selective recomputation is its op-level
    policy (``selective_ac_option = 'op'``). Software dated 2021 or earlier offers full
    recomputation of every layer only: Megatron-LM's selective recomputation and sequence
    parallelism came with Korthikanti et al. 2022, its distributed optimizer
    (``megatron/optimizer/distrib_optimizer.py``) in 2022 as well, and its block method
    (``--activations-checkpoint-method block``, later ``--recompute-method block``) in August
    2021, after the 2021 papers' runs. Later Megatron-LM, Megatron-Core, NeMo and
    Megatron-Bridge recompute the fewest layers of each model chunk that fit
    (:attr:`MemorySaver.fewest_layers`) when the case left ``recompute_num_layers`` null too.
    torchtitan has no such count: its layer policy (``selective_ac_option`` an integer ``k``)
    checkpoints every ``k``-th layer instead, which llmsim does not model, so it recomputes
    every layer.
    """
    p = parallel
    year = _framework_year(framework)
    old = year is not None and year <= 2021
    titan = _is_torchtitan(framework)
    out: list[MemorySaver] = []
    if ("distributed_optimizer" in nulls and not titan and not old and p.zero == 0
            and p.shard_group_size > 1):
        out.append(MemorySaver("distributed_optimizer", True))
    if "sequence_parallel" in nulls and p.tp > 1 and not p.sequence_parallel and not old:
        out.append(MemorySaver("sequence_parallel", True))
    if "recompute" in nulls:
        selective = RecomputeKind.SELECTIVE_OP if titan else RecomputeKind.SELECTIVE
        if p.recompute is RecomputeKind.NONE and not old:
            out.append(MemorySaver("recompute", selective))
        if p.recompute is not RecomputeKind.FULL:
            block = not titan and not old and "recompute_num_layers" in nulls
            out.append(MemorySaver("recompute", RecomputeKind.FULL, fewest_layers=block))
    return out
