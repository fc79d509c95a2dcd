"""Recipe defaults: how a case's null parallel settings and kernel switches are filled.

Where a case leaves a setting null, the release of the framework it ran on decides: its
software stack (:class:`~sim.config.stack.Stack`, a file of ``workloads/stacks/``) gives the
value and why, with sources, and each helper here writes a note quoting it (``parallel.X: null
-> V (stack NAME: WHY)``). A setting the case states always wins, and so do launch flags its
published settings list (``parallel.details``, or its ``framework`` text:
``--no-gradient-accumulation-fusion``, ``--tp-comm-overlap``, ``torch.compile``...), which say
what that run did whatever its release's defaults.

The helpers read a case's ``parallel`` section, or, for the kernel switches
(:class:`~sim.workload.kernels.KernelsSpec`), the section that gives them
(:class:`sim.config.workload.SettingsFields`): a note names a switch as ``f.field(key)`` does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from sim.config.fields import Fields, Notes
from sim.config.stack import (
    DpShard,
    FlagSetting,
    MemorySaverKind,
    MicroBatchRule,
    Stack,
    TpOverlapImpl,
    read_step_passes,
)
from sim.config.ub_table import read_ub_table
from sim.hardware import GPUSpec
from sim.types import (
    AdamImpl,
    AttentionKernel,
    Dtype,
    FsdpCopies,
    LossKind,
    PipelineBuffers,
    RecomputeKind,
    RecomputeModule,
    RopeImpl,
    ScheduleKind,
    StepPass,
    ZeroImpl,
    parse_enum,
    recompute_module_names,
)
from sim.workload.kernels import MEGATRON_CORE_STEP_PASSES, KernelsSpec
from sim.workload.spec import ModelSpec, ParallelSpec
from sim.workload.tp_overlap import ASYNC_TP, TE_DEFAULTS, TpOverlapConfig


def _from_stack(f: Fields, key: FlagSetting, stack: Stack, notes: Notes, quiet: bool | None = None) -> bool:
    """A boolean setting: the case's ``parallel.<key>``, else the stack's value, noted unless
    it is ``quiet`` (the usual value, which needs no note)."""
    flag = f.flag(key)
    if flag is not None:
        return flag
    value = stack.value(key)
    return value if value == quiet else notes.fill(f.field(key), value, stack.why(key))


def sp_default(f: Fields, tp: int, stack: Stack, notes: Notes, tp_overlap: bool = False, moe: bool = False) -> bool:
    """Sequence parallelism when a case leaves it null: on where TP communication overlap is on
    (Megatron-LM's ``--tp-comm-overlap`` requires ``--sequence-parallel``), else under TP > 1
    the stack's ``sequence_parallel`` (torchtitan's tensor-parallel plan always shards norms
    along the sequence; Megatron-LM only with ``--sequence-parallel``), else off. A case that
    asks for it at TP 1 runs without it, noted, as Megatron-LM's and NeMo's argument checks
    turn it off there. A mixture-of-experts model under TP > 1 runs it whatever the stack says:
    Megatron-LM refuses the combination without it ("When using MoE and tensor parallelism,
    sequence parallelism must be used.", ``megatron/training/arguments.py`` ``validate_args``)."""
    flag = f.flag("sequence_parallel")
    if flag and tp == 1:
        # as the frameworks do: no tensor-parallel group to split the sequence over
        notes.append("parallel.sequence_parallel: true -> false (tensor parallelism of 1: Megatron-LM and NeMo "
                     "turn it off so, 'Disabling sequence parallelism because tensor model parallelism is "
                     "disabled', megatron/training/arguments.py validate_args)")
        return False
    if flag is not None:
        return flag
    if tp_overlap and tp > 1:
        return notes.fill("parallel.sequence_parallel", True, "required by --tp-comm-overlap")
    if moe and tp > 1:
        return notes.fill("parallel.sequence_parallel", True, "a mixture-of-experts model under TP > 1: Megatron-LM's "
                          "validate_args asserts 'When using MoE and tensor parallelism, sequence parallelism "
                          "must be used.'")
    if tp > 1:
        return notes.fill("parallel.sequence_parallel", stack.value("sequence_parallel"),
                          stack.why("sequence_parallel"))
    return notes.fill("parallel.sequence_parallel", False, "off by default")


def zero_default(stack: Stack, notes: Notes, f: Fields | None = None) -> int:
    """ZeRO stage when a case leaves it null: 3 when the case's published settings
    (``parallel.details``) name Megatron-FSDP, which Megatron-Bridge's performance scripts run
    with ``data_parallel_sharding_strategy = "optim_grads_params"`` (``set_mcore_fsdp_configs``:
    optimizer state, gradients and parameters sharded); else the stack's ``zero_stage``
    (torchtitan shards with FSDP2 by default, ZeRO-3; Megatron-LM shards nothing unless told to)."""
    if f is not None and _details_has(f, "Megatron-FSDP"):
        return notes.fill("parallel.zero_stage", 3, "the case's settings name Megatron-FSDP, which Megatron-Bridge "
                          "runs with data_parallel_sharding_strategy 'optim_grads_params' (ZeRO-3)")
    return notes.fill("parallel.zero_stage", stack.value("zero_stage"), stack.why("zero_stage"))


def overlap_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """Whether the data-parallel gradient reduction overlaps the backward pass: the case's
    value, else the stack's ``overlap_grad_reduce``, noted when off."""
    return _from_stack(f, "overlap_grad_reduce", stack, notes, quiet=True)


def scatter_gather_default(f: Fields, framework: str, stack: Stack, notes: Notes, noted: bool) -> bool:
    """Whether each tensor-parallel rank sends only its 1/tp share of a stage's output without
    sequence parallelism (:attr:`~sim.workload.spec.ParallelSpec.pipeline_scatter_gather`): the
    case's value; else off when the case lists ``--no-scatter-gather-tensors-in-pipeline``;
    else the stack's ``pipeline_scatter_gather`` (on in Megatron-LM before Megatron-Core, off in
    Megatron-Core, DeepSpeed's pipeline engine and PyTorch's), noted when on and ``noted`` (where
    it decides a message's size: pipeline stages, TP > 1, no sequence parallelism). The value
    holds either way, for a sweep's other shapes."""
    flag = f.flag("pipeline_scatter_gather")
    if flag is not None:
        return flag
    listed = _framework_has(f, framework, "--no-scatter-gather-tensors-in-pipeline")
    if listed:
        return notes.fill("parallel.pipeline_scatter_gather", False, f"the case lists {listed}") if noted else False
    return _from_stack(f, "pipeline_scatter_gather", stack, notes,
                       quiet=False if noted else stack.value("pipeline_scatter_gather"))


def blocking_p2p_default(f: Fields, schedule: ScheduleKind, stack: Stack, notes: Notes, noted: bool) -> bool:
    """Whether the pipeline's sends and receives are blocking exchanges of their own
    (:attr:`~sim.workload.spec.ParallelSpec.blocking_p2p`): the case's value, else under the
    1F1B schedule the stack's ``blocking_p2p`` (DeepSpeed's pipeline engine), noted when on and
    ``noted`` (pipeline stages); off under every other schedule, which DeepSpeed's engine does
    not run."""
    flag = f.flag("blocking_p2p")
    if flag is not None:
        return flag
    if schedule is not ScheduleKind.ONE_F_ONE_B:
        return False
    return _from_stack(f, "blocking_p2p", stack, notes, quiet=False if noted else stack.value("blocking_p2p"))


def p2p_overlap_default(f: Fields, framework: str, schedule: ScheduleKind, stack: Stack, notes: Notes) -> bool:
    """Whether the interleaved schedule posts each pipeline receive a pass ahead
    (:attr:`~sim.workload.spec.ParallelSpec.overlap_p2p_comm`): the case's value; else, under
    the interleaved schedule, off when the case lists ``--no-overlap-p2p-communication``, else
    the stack's ``overlap_p2p_comm`` (on in Megatron-Core, NeMo and Megatron-Bridge; off in
    torchtitan, whose ``torch.distributed.pipelining`` waits for each time step's batched sends
    and receives, and in Megatron-LM before Megatron-Core, whose interleaved schedule sent and
    received after each pass, blocking), noted when off. The other schedules ignore it, and no
    note is written for them."""
    flag = f.flag("overlap_p2p_comm")
    if flag is not None:
        return flag
    if schedule is not ScheduleKind.INTERLEAVED:
        return True
    listed = _framework_has(f, framework, "--no-overlap-p2p-communication")
    if listed:
        return notes.fill("parallel.overlap_p2p_comm", False, f"the case lists {listed}")
    return _from_stack(f, "overlap_p2p_comm", stack, notes, quiet=True)


def flash_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """FlashAttention: the case's value, else the stack's ``flash_attention``, noted when off
    (a release that predates it)."""
    return _from_stack(f, "flash_attention", stack, notes, quiet=True)


LAYERS_PER_CHUNK = 4
"""Layers a model chunk holds where a case names an interleaved schedule and neither it nor its
stack says how many chunks: NVIDIA's published Megatron-Bridge pre-training recipes run 0.98 to
7.6 layers a chunk, a median of 3.8 over their 121 interleaved rows (docs/performance-summary.md
and performance-summary-archive.md @ 067f987df: each row's layers / (PP x VP))."""


def virtual_stages_default(f: Fields, stack: Stack, notes: Notes, layers_per_stage: int | None = None) -> int:
    """Model chunks per pipeline rank when a case leaves them null: under a schedule the case
    names interleaved, the stack's ``virtual_pipeline_stages`` (torchtitan's looped schedules
    without split points: 2 a rank, ``generate_split_points``), or, where the stack has none
    (Megatron-LM asks for the count), chunks of about :data:`LAYERS_PER_CHUNK` layers (at least
    2 chunks, at most one a layer); otherwise no interleaving."""
    vps = f.integer("virtual_pipeline_stages")
    if vps is not None:
        return vps
    per_rank = stack.value("virtual_pipeline_stages")
    interleaved = str(f.raw.get("schedule") or "").startswith("interleaved")
    if per_rank > 1 and interleaved:
        return notes.fill("parallel.virtual_pipeline_stages", per_rank, stack.why("virtual_pipeline_stages"))
    if interleaved and layers_per_stage is not None and layers_per_stage >= 2:
        chunks = min(layers_per_stage, max(2, round(layers_per_stage / LAYERS_PER_CHUNK)))
        return notes.fill("parallel.virtual_pipeline_stages", chunks,
                          f"the case names an interleaved schedule and no chunk count: chunks of about "
                          f"{LAYERS_PER_CHUNK} of the stage's {layers_per_stage} layers, the median of NVIDIA's "
                          "Megatron-Bridge recipes (sim.config.defaults.LAYERS_PER_CHUNK)")
    return notes.fill("parallel.virtual_pipeline_stages", 1, "no interleaving")


def batch_sizes(f: Fields, dp: int, pp: int, stack: Stack, notes: Notes,
                interleaved: bool = False) -> tuple[int, int]:
    """The micro- and global batch sizes: the case's, else as the stack says.

    A null global batch is the stack's ``global_batch_size`` (its recipe's, in sequences), made
    a multiple of ``micro_batch_size x dp`` (rounded up: the framework asks for one); where the
    stack has none, one micro-batch a data-parallel rank (Megatron-LM's default), or under the
    ``interleaved`` schedule the fewest it takes, ``pp`` (Megatron-LM's interleaved schedule
    asks for a multiple of the pipeline stages, ``get_forward_backward_func``). A null
    micro-batch follows the stack's ``micro_batch_size`` rule
    (:class:`~sim.config.stack.MicroBatchRule`): the rank's local batch (global / dp) in ``pp``
    pipeline micro-batches for torchtitan, else one sample."""
    mbs, gbs = f.integer("micro_batch_size"), f.integer("global_batch_size")
    recipe = stack.value("global_batch_size") if gbs is None else None
    if mbs is None:
        given = gbs if gbs is not None else recipe
        local = given // dp if given and given % dp == 0 else None
        why = stack.why("micro_batch_size")
        if stack.value("micro_batch_size") is MicroBatchRule.LOCAL_BATCH and local and (pp == 1 or local % pp == 0):
            shown = "no gradient accumulation" if pp == 1 else f"in {pp} pipeline micro-batches"
            mbs = notes.fill("parallel.micro_batch_size", local // pp,
                             f"local batch = global / dp = {local}, {shown} ({why})")
        else:
            mbs = notes.fill("parallel.micro_batch_size", 1, why)
    if gbs is None:
        step = mbs * dp
        if recipe is None and interleaved and pp > 1:
            gbs = notes.fill("parallel.global_batch_size", step * pp, "Megatron-LM default: micro_batch_size x "
                             f"dp, one micro-batch, which its interleaved schedule cannot run: {pp} micro-batches, "
                             "the fewest it takes (a multiple of pp)")
        elif recipe is None:
            gbs = notes.fill("parallel.global_batch_size", step, "Megatron-LM default: "
                             "micro_batch_size x dp, one micro-batch")
        else:
            gbs = -(-recipe // step) * step
            shown = "" if gbs == recipe else f", rounded up to a multiple of micro_batch_size x dp = {step}"
            gbs = notes.fill("parallel.global_batch_size", gbs, stack.why("global_batch_size") + shown)
    return mbs, gbs


def recompute_default(f: Fields, stack: Stack, notes: Notes) -> RecomputeKind:
    """Activation recomputation: the case's ``recompute`` (its ``selective`` as the stack's
    ``selective_recompute`` says: torchtitan's op-level policy, ``selective_ac_option = 'op'``,
    not Megatron's recomputation of the attention core), else the stack's ``recompute``."""
    recompute = f.enum("recompute", RecomputeKind, notes, stack.value("recompute"), stack.why("recompute"))
    meant = stack.value("selective_recompute")
    if recompute is RecomputeKind.SELECTIVE and meant is not RecomputeKind.SELECTIVE:
        notes.append(f"parallel.recompute: selective -> {meant.value} ({stack.why('selective_recompute')})")
        return meant
    return recompute


def loss_default(f: Fields, stack: Stack, notes: Notes) -> LossKind:
    """The cross entropy's implementation: the case's, else the stack's ``cross_entropy``
    (torchtitan: ``torch.nn.functional.cross_entropy`` on fp32 logits; Megatron-LM its fused
    vocab-parallel kernel), noted when not the fused kernel."""
    value = stack.value("cross_entropy")
    if f.raw.get("cross_entropy") is None and value is LossKind.FUSED:
        return value
    return f.enum("cross_entropy", LossKind, notes, value, stack.why("cross_entropy"))


def fused_elementwise_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """Fused elementwise kernels: the case's ``fused_elementwise``; else, for a stack that runs
    them eagerly (torchtitan, whose ``training.compile`` is off by default), on only when the
    case's published settings (``parallel.details``) name ``torch.compile``; else on
    (Megatron-LM's and Transformer Engine's fused norm, SwiGLU and bias-dropout-add kernels)."""
    flag = f.flag("fused_elementwise")
    if flag is not None:
        return flag
    if stack.value("fused_elementwise"):
        return True
    if _details_has(f, "torch.compile"):
        return notes.fill(f.field("fused_elementwise"), True, "the case's settings list torch.compile")
    return notes.fill(f.field("fused_elementwise"), False, stack.why("fused_elementwise"))


_FUSED_ATTN_OFF = re.compile(r"\bNVTE_FUSED_ATTN\s*[=:]\s*[\"']?0\b")
"""Transformer Engine's switch for cuDNN's fused attention, turned off in a case's published
settings as launch scripts export it (``export NVTE_FUSED_ATTN=0``; NVIDIA/dgxc-benchmarking
``grok1/configure.sh`` and ``nemotron/configure.sh`` @ 35a9aecc)."""


def attention_kernel_default(f: Fields, stack: Stack, notes: Notes) -> AttentionKernel:
    """The attention kernel: the case's, else FlashAttention-2 where the case's published
    settings (``parallel.details``) turn Transformer Engine's fused attention off
    (``NVTE_FUSED_ATTN=0``: TE's ``DotProductAttention`` then runs the flash-attn package's
    kernels, ``transformer_engine/pytorch/attention.py``, read as ``use_fused_attention``) under
    a stack whose attention is Transformer Engine's (the vendor kernel), else the stack's
    ``attention_kernel``, noted when not the vendor's (Transformer Engine picks cuDNN's fused
    attention on Hopper, with context parallelism too from TE 1.2; torchtitan calls PyTorch's
    SDPA, whose backend priority runs FlashAttention-2 first)."""
    value = stack.value("attention_kernel")
    if f.raw.get("attention_kernel") is None and value is AttentionKernel.VENDOR:
        details = f.raw.get("details")
        if isinstance(details, str) and _FUSED_ATTN_OFF.search(details):
            return notes.fill("parallel.attention_kernel", AttentionKernel.FLASH2,
                              "the case's settings turn Transformer Engine's fused attention off (NVTE_FUSED_ATTN=0): "
                              "its DotProductAttention runs FlashAttention-2 (flash-attn)")
        return value
    return f.enum("attention_kernel", AttentionKernel, notes, value, stack.why("attention_kernel"))


_NEMO_TP_OVERLAP = re.compile(
    r"\buserbuffers_(?:bf16|fp8)_\w+"
    r"|\b(?:ub_)?tp_comm_overlap\b(?!\s*(?:[:=]\s*(?:false|0)\b|\s*(?:off|disabled)\b))",
    re.IGNORECASE)
"""NeMo's spellings of Transformer Engine's userbuffers TP overlap in a case's published
settings: NeMo 1's launcher key ``model.ub_tp_comm_overlap``
(``NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/training/llama/llama3_70b.yaml`` @ 24.07),
NeMo 2's ``MegatronCommOverlapCallback(tp_comm_overlap=True, ...)`` and the overlap configs it
names, ``userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192`` and the like
(``nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py`` @ v2.3.0), which a recipe
names only when it turns the overlap on; a key written as false, 0, off or disabled does not
count."""


def tp_overlap_default(f: Fields, tp: int, stack: Stack, notes: Notes) -> bool:
    """TP communication overlap: the case's ``tp_comm_overlap``, else on when the case's
    published settings (``parallel.details``) include ``--tp-comm-overlap`` or torchtitan's
    ``AsyncTP`` (the same micro-pipelining of the all-gather and matmul), else, under TP > 1,
    the stack's ``tp_comm_overlap`` (noted when on) unless the case turns sequence parallelism
    off (the overlap needs it; noted), else off."""
    flag = f.flag("tp_comm_overlap")
    if flag is not None:
        return flag
    if tp > 1:
        for listed in ("--tp-comm-overlap", "AsyncTP"):  # Megatron-LM; torchtitan's async TP
            if _details_has(f, listed):
                return notes.fill("parallel.tp_comm_overlap", True, f"the case's settings list {listed}")
        details = f.raw.get("details")
        match = _NEMO_TP_OVERLAP.search(details) if isinstance(details, str) else None
        if match is not None:
            return notes.fill("parallel.tp_comm_overlap", True, f"the case's settings list {match.group(0)}")
        if stack.value("tp_comm_overlap") and f.flag("sequence_parallel") is False:
            return notes.fill("parallel.tp_comm_overlap", False, f"{stack.why('tp_comm_overlap')}; but the case "
                              "turns sequence parallelism off, without which there is no TP overlap (Megatron-LM "
                              "asserts --sequence-parallel for --tp-comm-overlap)")
        if stack.value("tp_comm_overlap"):
            return notes.fill("parallel.tp_comm_overlap", True, stack.why("tp_comm_overlap"))
    return False


def tp_overlap_cfg_default(f: Fields, stack: Stack, tp_overlap: bool, notes: Notes) -> TpOverlapConfig:
    """What runs the overlapped TP collectives, as the stack's ``tp_comm_overlap_impl`` says:
    torchtitan's async TP on PyTorch's symmetric memory (copy engines); else Transformer
    Engine's userbuffers with the case's ``tp_comm_overlap_cfg`` (the mapping Megatron-LM reads
    from ``--tp-comm-overlap-cfg``: GEMM name -> ``method``, ``num_sm``, ``use_ce``...; NeMo's
    and Megatron-Bridge's ``TransformerLayerTPOverlapCfg`` tables) over TE's defaults, which
    Megatron-LM keeps when no file is given (:mod:`sim.workload.tp_overlap`)."""
    raw = f.raw.get("tp_comm_overlap_cfg")
    if stack.value("tp_comm_overlap_impl") is TpOverlapImpl.ASYNC_TP:
        if raw is not None:
            raise f.error("tp_comm_overlap_cfg", f"null for stack {stack.name} (its async TP runs on PyTorch's "
                          "symmetric memory, not Transformer Engine's userbuffers)", raw)
        if tp_overlap:
            notes.fill("parallel.tp_comm_overlap_cfg", ASYNC_TP, stack.why("tp_comm_overlap_impl"))
        return ASYNC_TP
    if raw is None:
        table = stack.value("tp_comm_overlap_cfg")
        if table is not None:
            if tp_overlap:
                notes.fill("parallel.tp_comm_overlap_cfg", table, stack.why("tp_comm_overlap_cfg"))
            return table
        if tp_overlap:
            notes.fill("parallel.tp_comm_overlap_cfg", TE_DEFAULTS, stack.why("tp_comm_overlap_impl"))
        return TE_DEFAULTS
    return read_ub_table(raw, f.path, f.field("tp_comm_overlap_cfg"),
                         "the case's tp_comm_overlap_cfg over Transformer Engine's defaults")


def _details_has(f: Fields, flag: str) -> bool:
    details = f.raw.get("details")
    return isinstance(details, str) and flag in details


def dist_opt_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """The distributed optimizer: the case's value, else on when its flags include
    ``--use-distributed-optimizer`` or ``--overlap-param-gather`` (which Megatron-LM only
    accepts with it), else the stack's ``distributed_optimizer`` (NeMo's and Megatron-Bridge's
    recipes: on; Megatron-LM's launch default: off)."""
    value = f.flag("distributed_optimizer")
    if value is not None:
        return value
    for flag in ("--use-distributed-optimizer", "--overlap-param-gather"):
        if _details_has(f, flag):
            return notes.fill("parallel.distributed_optimizer", True, f"implied by {flag} in the case's flags")
    return notes.fill("parallel.distributed_optimizer", stack.value("distributed_optimizer"),
                      stack.why("distributed_optimizer"))


def param_gather_default(f: Fields, stack: Stack, dist_opt: bool, notes: Notes) -> bool:
    """Overlapping the distributed optimizer's parameter all-gather with the next forward: the
    case's value, else on for ``--overlap-param-gather`` in its flags, else, with the
    distributed optimizer, the stack's ``overlap_param_gather`` (noted when on), else off."""
    value = f.flag("overlap_param_gather")
    if value is not None:
        return value
    if _details_has(f, "--overlap-param-gather"):
        return notes.fill("parallel.overlap_param_gather", True, "the case's flags list --overlap-param-gather")
    if dist_opt and stack.value("overlap_param_gather"):
        return notes.fill("parallel.overlap_param_gather", True, stack.why("overlap_param_gather"))
    return False


def dp_shard_default(f: Fields, dp: int, cp: int, zero: int, stack: Stack, notes: Notes) -> int | None:
    """The hybrid-sharding degree: the case's ``dp_shard``, else the stack's ``dp_shard`` (full
    sharding over all ``dp x cp`` ranks: torchtitan's ``data_parallel_shard_degree = -1`` with
    ``data_parallel_replicate_degree = 1``, Megatron-LM's ``--num-distributed-optimizer-instances
    1``), noted where something is sharded."""
    value = f.integer("dp_shard", positive=True)
    if value is not None or zero == 0 or dp * cp == 1:
        return value
    assert stack.value("dp_shard") is DpShard.FULL  # the only kind a stack file may give
    notes.fill("parallel.dp_shard", dp, f"full sharding: ZeRO-{zero} state over all dp x cp = {dp * cp} ranks, "
               f"no replicas ({stack.why('dp_shard')})")
    return None


EP_OVERLAP_FLAG = "--overlap-moe-expert-parallel-comm"
"""Megatron-LM's launch flag for :attr:`~sim.workload.spec.ParallelSpec.ep_overlap`."""


def ep_overlap_default(f: Fields, ep: int, notes: Notes) -> bool:
    """Megatron-Core's EP A2A overlap (:attr:`~sim.workload.spec.ParallelSpec.ep_overlap`): the
    case's value, else on when its flags list ``--overlap-moe-expert-parallel-comm``, else off
    (``ModelParallelConfig.overlap_moe_expert_parallel_comm`` defaults to False; Megatron-Bridge's
    performance recipes turn it on per model and GPU, as they choose the dispatcher), noted
    when there is an expert-parallel exchange (``ep > 1``)."""
    value = f.flag("ep_overlap")
    if value is not None:
        return value
    if _details_has(f, EP_OVERLAP_FLAG):
        return notes.fill("parallel.ep_overlap", True, f"the case's flags list {EP_OVERLAP_FLAG}")
    if ep > 1:
        notes.fill("parallel.ep_overlap", False, "Megatron-Core's default (overlap_moe_expert_parallel_comm "
                   "False); recipes turn it on per model and GPU, so it is no default of a release")
    return False


DELAY_WGRAD_FLAG = "--delay-wgrad-compute"
"""Megatron-LM's launch flag for :attr:`~sim.workload.spec.ParallelSpec.delay_wgrad`."""


def delay_wgrad_default(f: Fields, notes: Notes) -> bool:
    """Megatron-Core's ``delay_wgrad_compute`` (:attr:`~sim.workload.spec.ParallelSpec.delay_wgrad`):
    the case's value, else on when its flags list ``--delay-wgrad-compute``, else off (its
    default), unnoted."""
    value = f.flag("delay_wgrad")
    if value is not None:
        return value
    if _details_has(f, DELAY_WGRAD_FLAG):
        return notes.fill("parallel.delay_wgrad", True, f"the case's flags list {DELAY_WGRAD_FLAG}")
    return False


def _framework_has(f: Fields, framework: str, *words: str) -> str | None:
    """The first of ``words`` (launch flags, or how the case's prose names them) in the
    case's published settings (``parallel.details``) or its ``framework`` text."""
    details = f.raw.get("details")
    text = f"{details if isinstance(details, str) else ''} {framework}"
    return next((w for w in words if w in text), None)


def _on_unless_listed(f: Fields, framework: str, stack: Stack, notes: Notes, key: FlagSetting,
                      off_flag: str) -> bool:
    """A Megatron-LM feature that its flag ``off_flag`` turns off: the case's
    ``parallel.<key>``, else off when its settings or framework list ``off_flag``, else the
    stack's value (noted when off: a release that predates it)."""
    value = f.flag(key)
    if value is not None:
        return value
    flag = _framework_has(f, framework, off_flag)
    if flag:
        return notes.fill(f.field(key), False, f"the case lists {flag}")
    return _from_stack(f, key, stack, notes, quiet=True)


def grad_accum_fusion_default(f: Fields, framework: str, stack: Stack, notes: Notes) -> bool:
    """Gradient-accumulation fusion: the case's ``gradient_accumulation_fusion``, else off when
    its settings or framework list ``--no-gradient-accumulation-fusion``, else the stack's value
    (on from early 2022: Megatron-LM's ``gradient_accumulation_fusion=True``; the 2021 releases
    predate the fused wgrad-accumulate GEMM)."""
    return _on_unless_listed(f, framework, stack, notes, "gradient_accumulation_fusion",
                             "--no-gradient-accumulation-fusion")


def grad_reduce_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """Gradients accumulated and reduced in fp32: the case's ``grad_reduce_in_fp32``, else off
    when its settings list ``--grad-reduce-in-bf16``, else the stack's value (Megatron-LM's
    default fp32; Megatron-Bridge's and NeMo's performance scripts reduce in 16 bits), noted
    when off."""
    value = f.flag("grad_reduce_in_fp32")
    if value is not None:
        return value
    if _details_has(f, "--grad-reduce-in-bf16"):
        return notes.fill(f.field("grad_reduce_in_fp32"), False, "the case's flags list --grad-reduce-in-bf16")
    return _from_stack(f, "grad_reduce_in_fp32", stack, notes, quiet=True)


def async_tp_allreduce_default(f: Fields, framework: str, stack: Stack, notes: Notes) -> bool:
    """The asynchronous input-gradient all-reduce of column-parallel layers
    (:attr:`~sim.workload.kernels.KernelsSpec.async_tp_grad_allreduce`): the case's value, else
    off when its settings list ``--no-async-tensor-model-parallel-allreduce``, else the stack's
    value (on from autumn 2021, ``ColumnParallelLinearWithAsyncAllreduce``)."""
    return _on_unless_listed(f, framework, stack, notes, "async_tp_grad_allreduce",
                             "--no-async-tensor-model-parallel-allreduce")


def adam_impl_default(f: Fields, stack: Stack, notes: Notes) -> AdamImpl:
    """How the Adam step runs (:attr:`~sim.workload.kernels.KernelsSpec.adam_impl`): the case's
    value, else the stack's, noted where it is not the fused kernel."""
    value = f.raw.get("adam_impl")
    if value is not None:
        return parse_enum(AdamImpl, value, f.path, f.field("adam_impl"))
    impl = stack.value("adam_impl")
    return impl if impl is AdamImpl.FUSED else notes.fill(f.field("adam_impl"), impl, stack.why("adam_impl"))


def pipeline_buffers_default(f: Fields, pp: int, stack: Stack, notes: Notes) -> PipelineBuffers:
    """What the pipeline runtime holds at a stage's boundaries
    (:attr:`~sim.workload.kernels.KernelsSpec.pipeline_buffers`): the case's value, else the
    stack's, noted under PP > 1 where it is not Megatron-Core's in-flight buffers."""
    value = f.raw.get("pipeline_buffers")
    if value is not None:
        return parse_enum(PipelineBuffers, value, f.path, f.field("pipeline_buffers"))
    kept = stack.value("pipeline_buffers")
    if pp == 1 or kept is PipelineBuffers.IN_FLIGHT:
        return kept
    return notes.fill(f.field("pipeline_buffers"), kept, stack.why("pipeline_buffers"))


def fsdp_copies_default(f: Fields, zero: int, zero_impl: ZeroImpl, stack: Stack, notes: Notes) -> FsdpCopies:
    """What ZeRO-3/FSDP copies around its collectives on the compute stream
    (:attr:`~sim.workload.kernels.KernelsSpec.fsdp_copies`): the case's value, else the stack's,
    noted where FSDP's per-layer collectives run (ZeRO-3, ``zero_impl: fsdp``) and the stack
    copies."""
    value = f.raw.get("fsdp_copies")
    if value is not None:
        return parse_enum(FsdpCopies, value, f.path, f.field("fsdp_copies"))
    kept = stack.value("fsdp_copies")
    if zero < 3 or zero_impl is not ZeroImpl.FSDP or kept is FsdpCopies.NONE:
        return kept
    return notes.fill(f.field("fsdp_copies"), kept, stack.why("fsdp_copies"))


def split_projections_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """Linears of their own for the query, key and value and the gated MLP's two projections
    (:attr:`~sim.workload.kernels.KernelsSpec.split_projections`): the case's value, else the
    stack's, noted where they are split."""
    return _from_stack(f, "split_projections", stack, notes, quiet=False)


def rope_impl_default(f: Fields, fused: bool, stack: Stack, notes: Notes) -> RopeImpl:
    """How the model's code applies the rotary embedding
    (:attr:`~sim.workload.kernels.KernelsSpec.rope_impl`): the case's value, else the stack's,
    noted where it changes the price: elementwise code that is compiled (``fused``) under a
    stack whose code multiplies in complex numbers."""
    value = f.raw.get("rope_impl")
    if value is not None:
        return parse_enum(RopeImpl, value, f.path, f.field("rope_impl"))
    kept = stack.value("rope_impl")
    if kept is RopeImpl.FUSED or not fused:
        return kept
    return notes.fill(f.field("rope_impl"), kept, stack.why("rope_impl"))


def step_passes_default(f: Fields, stack: Stack, notes: Notes) -> frozenset[StepPass]:
    """The training step's passes beside the Adam kernel
    (:attr:`~sim.workload.kernels.KernelsSpec.step_passes`): the case's list, else the stack's,
    noted where it is not Megatron-Core's."""
    value = f.raw.get("step_passes")
    if value is not None:
        return read_step_passes(value, f.path, f.field("step_passes"))
    passes = stack.value("step_passes")
    if passes != MEGATRON_CORE_STEP_PASSES:
        shown = ", ".join(p.value for p in StepPass if p in passes) or "none"
        notes.fill(f.field("step_passes"), f"[{shown}]", stack.why("step_passes"))
    return passes


def unfused_bias_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """Megatron-LM's pre-Transformer-Engine linear layers with their separate bias kernels
    (:attr:`~sim.workload.kernels.KernelsSpec.unfused_linear_bias`): the case's value, else the
    stack's (on for Megatron-LM's ``megatron/mpu`` linears of 2022 and earlier), noted when on."""
    return _from_stack(f, "unfused_linear_bias", stack, notes, quiet=False)


def remainders_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """Master weights kept as 16-bit remainders
    (:attr:`~sim.workload.kernels.KernelsSpec.master_param_remainders`): the case's value, else
    the stack's (on for NeMo 1's distributed Adam on BF16 models), noted when on."""
    return _from_stack(f, "master_param_remainders", stack, notes, quiet=False)


def quantized_inputs_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """Whether an 8- or 4-bit linear keeps its quantized input for the weight gradient
    (:attr:`~sim.workload.kernels.KernelsSpec.quantized_saved_inputs`): the case's value, else
    the stack's (Transformer Engine's linears do; torchao's float8 keeps the 16-bit input),
    noted when off."""
    return _from_stack(f, "quantized_saved_inputs", stack, notes, quiet=True)


def te_quantizer_default(f: Fields, stack: Stack, notes: Notes) -> bool:
    """Whether an 8-bit linear's operands are quantized by Transformer Engine's quantizers
    (:attr:`~sim.workload.kernels.KernelsSpec.te_quantizer`): the case's value, else the
    stack's (torchtitan: torchao's float8), noted when off."""
    return _from_stack(f, "te_quantizer", stack, notes, quiet=True)


def expert_gemm_streams_default(f: Fields, moe: bool, stack: Stack, notes: Notes) -> int:
    """How a mixture-of-experts layer's local experts run each GEMM
    (:attr:`~sim.workload.kernels.KernelsSpec.expert_gemm_streams`): the case's value, else the
    stack's, noted for a model with experts."""
    value = f.integer("expert_gemm_streams")
    if value is not None:
        if value < 0:
            raise f.error("expert_gemm_streams", "a whole number, 0 or more", value)
        return value
    value = stack.value("expert_gemm_streams")
    return notes.fill(f.field("expert_gemm_streams"), value, stack.why("expert_gemm_streams")) if moe else value


def deterministic_default(f: Fields, framework: str, notes: Notes) -> bool:
    """Megatron-LM's deterministic mode: the case's ``deterministic``, else on when its
    settings or framework name ``--deterministic-mode`` (or "deterministic mode"), else off."""
    value = f.flag("deterministic")
    if value is not None:
        return value
    flag = _framework_has(f, framework, "--deterministic-mode", "deterministic mode")
    if flag:
        return notes.fill(f.field("deterministic"), True, f"the case names {flag}: "
                          "torch.use_deterministic_algorithms(True), NaN-filled allocations, "
                          "deterministic attention backward")
    return False


def zero_impl_default(f: Fields, zero: int, stack: Stack, notes: Notes) -> ZeroImpl:
    """How ZeRO issues its collectives (``parallel.zero_impl``): the case's value, else the
    stack's ``zero_impl`` at the stages it applies to (DeepSpeed 0.3's per-parameter, blocking
    collectives at ZeRO-3 for ``deepspeed-zero3``; DeepSpeed's bf16 optimizer, all-reduced
    gradients, at stage 1 for ``megatron-deepspeed``), else FSDP's per-layer, prefetched
    collectives and the reduce-scatter of a sharded optimizer, noted when not those."""
    value = f.raw.get("zero_impl")
    if value is not None:
        return parse_enum(ZeroImpl, value, f.path, f.field("zero_impl"))
    impl = stack.value("zero_impl")
    applies = zero == 1 if impl is ZeroImpl.DEEPSPEED_BF16 else zero >= 3
    if impl is ZeroImpl.FSDP or not applies:
        return ZeroImpl.FSDP
    return notes.fill("parallel.zero_impl", impl, stack.why("zero_impl"))


@dataclass(frozen=True)
class MemorySaver:
    """A null setting (parallel, or a kernel switch) that the producing framework can set to use
    less memory."""

    key: str
    """The :class:`~sim.workload.spec.ParallelSpec` field, or the
    :class:`~sim.workload.kernels.KernelsSpec` switch (``grad_reduce_in_fp32``), also the case's
    ``parallel`` key."""
    value: bool | RecomputeKind
    """The value that saves memory."""
    modules: frozenset[RecomputeModule] | None = None
    """Under selective recomputation (``value``), the submodules recomputed
    (``recompute_modules``); None: Megatron-Core's default, the attention core."""
    fewest_layers: bool = False
    """Full recomputation (``value``) of the fewest layers of each model chunk that fit:
    ``recompute_num_layers`` is searched from 1 up to a chunk's layers, Megatron's
    ``--recompute-method block --recompute-num-layers N``
    (:attr:`~sim.workload.spec.ParallelSpec.recompute_num_layers`)."""


MEMORY_SAVERS_ORDER = ("distributed_optimizer", "sequence_parallel", "grad_reduce_in_fp32", "recompute")
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
3. ``grad_reduce_in_fp32`` off (gradients accumulated and reduced in 16 bits, where the stack
   offers it): the gradient buffer, its accumulation and its reduction move half the bytes;
   it saves ``2`` bytes a parameter (``2 / dp`` under ZeRO-2 and 3) and costs no time.
4. ``recompute``: selective first (the attention core again in the backward, 2-4% in that
   paper's Table 4; torchtitan's op-level policy recomputes every other matmul), then full
   (each layer's forward again, about a third more compute: +34% here on both runs above).
   Full recomputation costs in proportion to the layers it recomputes, so where the framework
   recomputes a set number of layers per model chunk (Megatron's block method) the fewest
   that fit are recomputed (``recompute_num_layers``), the rest keep their activations.

So the first three cost (almost) nothing, recomputation does, and full recomputation of every
layer most."""


def module_recompute_sets(model: ModelSpec, parallel: ParallelSpec, gpu: GPUSpec, dtype: Dtype,
                          delayed_fp8: bool = False) -> list[frozenset[RecomputeModule]]:
    """Every set of the submodules selective recomputation can add for ``model`` when the
    attention core's does not fit, least recomputation time first.

    The modules offered are those that drop something (:func:`sim.memory.recompute_module_bytes`):
    in a MoE model ``layernorm`` and ``moe_act`` (left out under FP8 with delayed scaling,
    ``delayed_fp8``, which Megatron-Core refuses), ``mla_up_proj`` with multi-latent attention,
    ``shared_experts`` with shared experts, and ``mlp`` in a MoE model with dense layers. A
    dense model is offered none: its norms are fused into its linears, and its MLPs are about
    two thirds of each layer's forward, so block recomputation of the fewest layers (the next
    saver) costs less where it fits.

    The sets are ordered by a roofline estimate of what each recomputes in one iteration's
    layers: a GEMM's FLOPs at the GPU's dense peak in ``dtype``, an elementwise kernel's bytes
    (a norm reads and writes ``2 sbh``; the experts' activation reads its ``2f`` (gated) inputs
    and writes ``f`` for each routed copy, 16-bit) at its HBM bandwidth; ties go to the smaller
    set. Megatron-Bridge's recipes pick such sets per model and GPU
    (``src/megatron/bridge/perf_recipes/deepseek/*/deepseek_v3.py`` @ 067f987df:
    ``["mla_up_proj"]``, ``["mlp"]``, ``["mla_up_proj", "mlp"]``, ``["moe_act"]``, ``[]``).
    """
    m, p = model, parallel
    sb, h, t = m.seq_length // p.cp * p.micro_batch_size, m.hidden_size, p.tp
    br = 2 if m.gated_mlp else 1
    n_moe = sum(m.is_moe_layer(i) for i in range(m.num_layers))
    n_dense = m.num_layers - n_moe
    peak, bw = gpu.peak(dtype), gpu.hbm_bandwidth_bytes_per_s
    cost: dict[RecomputeModule, float] = {}
    if m.is_moe and not delayed_fp8:
        norms = n_moe + (m.num_layers if m.is_mla else 0)
        cost[RecomputeModule.LAYERNORM] = norms * 4.0 * sb * h / (t if p.sequence_parallel else 1) / bw
        te = p.expert_tp
        copies = (sb if te == t else sb / t * te) * m.moe_top_k * (m.moe_capacity_factor or 1.0)
        cost[RecomputeModule.MOE_ACT] = n_moe * copies * 2.0 * (br + 1) * m.moe_ffn_hidden_size / te / bw
    if m.is_mla:
        cost[RecomputeModule.MLA_UP_PROJ] = m.num_layers * 2.0 * sb * m.mla_up_params(t) / peak
    if m.is_moe and m.shared_ffn_size:
        cost[RecomputeModule.SHARED_EXPERTS] = n_moe * 2.0 * sb * m.shared_ffn_size * h * (br + 1) / t / peak
    if m.is_moe and n_dense:
        cost[RecomputeModule.MLP] = n_dense * 2.0 * sb * m.ffn_hidden_size * h * (br + 1) / t / peak
    offered = sorted(cost, key=lambda x: x.value)
    sets = [frozenset(c) for r in range(1, len(offered) + 1) for c in combinations(offered, r)]
    return sorted(sets, key=lambda c: (sum(cost[x] for x in c), len(c), recompute_module_names(c)))


def memory_savers(parallel: ParallelSpec, nulls: frozenset[str], stack: Stack,
                  kernels: KernelsSpec, modules_of: Sequence[frozenset[RecomputeModule]] | None = None
                  ) -> list[MemorySaver]:
    """The memory savers the stack offers (its ``memory_savers``) for the settings the case left
    null, in the order of :data:`MEMORY_SAVERS_ORDER`, each not in force already.

    Parameters
    ----------
    parallel : ParallelSpec
        The parallel settings as the recipe defaults filled them.
    nulls : frozenset of str
        The ``parallel`` keys the case left null (or out).
    stack : Stack
        The case's software stack.
    kernels : KernelsSpec
        The kernel switches as the defaults filled them (16-bit gradients are offered only
        where gradients are reduced in fp32).
    modules_of : sequence of frozenset of RecomputeModule, optional
        The sets of submodules selective recomputation can add, in the order to try them
        (:func:`module_recompute_sets`); None offers none.

    Notes
    -----
    The distributed optimizer only saves memory with data-parallel ranks to shard over and
    nothing sharded yet; sequence parallelism needs TP > 1. Selective recomputation is the
    stack's (``selective_recompute``: torchtitan's op-level policy). Where the stack offers
    ``module_recompute`` and the case left ``recompute_modules`` null, selective recomputation
    then adds each set of ``modules_of`` in turn, each a saver of its own that replaces the
    one before (:func:`module_recompute_sets`: least recomputation first, so the first that
    fits is the cheapest that fits); when llmsim offered the selective recomputation itself
    under fused attention, the attention core is left out of those steps, since it keeps
    nothing to drop there. Block recomputation (the
    fewest layers of each model chunk that fit, :attr:`MemorySaver.fewest_layers`) is offered
    only when the case left ``recompute_num_layers`` null too; without it full recomputation
    recomputes every layer. Megatron-LM's 2021 releases offer full recomputation of every layer
    only; torchtitan's layer policy (``selective_ac_option`` an integer ``k``) checkpoints every
    ``k``-th layer instead of a count per chunk, which llmsim does not model.
    """
    p = parallel
    offers = stack.value("memory_savers")
    out: list[MemorySaver] = []
    if ("distributed_optimizer" in nulls and MemorySaverKind.DISTRIBUTED_OPTIMIZER in offers and p.zero == 0
            and p.shard_group_size > 1):
        out.append(MemorySaver("distributed_optimizer", True))
    if ("sequence_parallel" in nulls and p.tp > 1 and not p.sequence_parallel
            and MemorySaverKind.SEQUENCE_PARALLEL in offers):
        out.append(MemorySaver("sequence_parallel", True))
    if ("grad_reduce_in_fp32" in nulls and kernels.grad_reduce_in_fp32
            and MemorySaverKind.GRAD_REDUCE_IN_BF16 in offers):
        out.append(MemorySaver("grad_reduce_in_fp32", False))
    if "recompute" in nulls:
        if p.recompute is RecomputeKind.NONE and MemorySaverKind.SELECTIVE_RECOMPUTE in offers:
            out.append(MemorySaver("recompute", stack.value("selective_recompute")))
        offered = bool(out) and out[-1].value is RecomputeKind.SELECTIVE
        if ((p.recompute is RecomputeKind.SELECTIVE or offered) and modules_of is not None
                and "recompute_modules" in nulls and MemorySaverKind.MODULE_RECOMPUTE in offers):
            # under fused attention the attention core keeps nothing to drop (only its
            # log-sum-exp): a selective recomputation llmsim offers adds the modules alone
            base = frozenset() if offered and kernels.flash_attention else p.recompute_modules
            for mods in modules_of:
                out.append(MemorySaver("recompute", RecomputeKind.SELECTIVE, modules=base | mods))
        if p.recompute is not RecomputeKind.FULL and MemorySaverKind.FULL_RECOMPUTE in offers:
            block = MemorySaverKind.BLOCK_RECOMPUTE in offers and "recompute_num_layers" in nulls
            out.append(MemorySaver("recompute", RecomputeKind.FULL, fewest_layers=block))
    return out
