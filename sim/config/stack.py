"""Software stacks: one release of a training framework and what it does with a setting a case
leaves null.

A stack file (``workloads/stacks/*.yaml``, docs/workloads.md) names a release family
(``megatron-lm-2022``, ``nemo-24``, ``torchtitan``...), the framework texts it matches
(:class:`MatchRule`), and under ``settings`` one entry per :data:`SETTINGS` key: the ``value``
the release uses, ``why`` (a phrase the notes quote) and ``sources`` (where the value comes from:
release notes, the framework's code at a commit, a published recipe). A file may ``extend``
another stack and give only the settings that differ; after that every setting has a value.

This module reads one file into a frozen :class:`Stack`; :mod:`sim.config.stacks` finds a stack by
name or file and picks the one a case's ``framework`` text names. The defaults that read a stack's
settings are in :mod:`sim.config.defaults`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Generic, Literal, TypeVar, overload

from sim.attention_releases import parse_release
from sim.config.fields import Fields, is_int, read_yaml
from sim.config.ub_table import read_ub_table
from sim.errors import ConfigError
from sim.types import (
    SIMULATED_DTYPES,
    AdamImpl,
    AttentionKernel,
    CpCommType,
    Dtype,
    FsdpCopies,
    LossKind,
    PipelineBuffers,
    RecomputeKind,
    RopeImpl,
    ScalingRecipe,
    StepPass,
    ZeroImpl,
    parse_enum,
)
from sim.workload.tp_overlap import TpOverlapConfig

__all__ = ["CountSetting", "DpShard", "FlagSetting", "MatchRule", "MemorySaverKind", "MicroBatchRule", "ModelRecipe",
           "RecomputeSetting", "SETTINGS", "Setting", "SettingKind", "Stack", "TpOverlapImpl", "YearRange",
           "read_stack_file", "read_step_passes"]

T = TypeVar("T")
E = TypeVar("E", bound=Enum)


class MemorySaverKind(str, Enum):
    """A null setting a release can set to save memory (:func:`sim.config.defaults.memory_savers`)."""

    DISTRIBUTED_OPTIMIZER = "distributed_optimizer"
    """Megatron's distributed optimizer (ZeRO-1)."""
    SEQUENCE_PARALLEL = "sequence_parallel"
    """Sequence parallelism under TP > 1 (Korthikanti et al. 2022)."""
    SELECTIVE_RECOMPUTE = "selective_recompute"
    """The release's selective recomputation (setting ``selective_recompute``)."""
    GRAD_REDUCE_IN_BF16 = "grad_reduce_in_bf16"
    """Gradients accumulated and reduced in 16 bits (``grad_reduce_in_fp32`` off: NeMo 1's
    ``optim.grad_sync_dtype: bf16``, Megatron-LM's ``--grad-reduce-in-bf16``)."""
    MODULE_RECOMPUTE = "module_recompute"
    """Megatron-Core's selective recomputation of further submodules (``--recompute-modules``),
    tried after the attention core's, cheapest first (:func:`sim.config.defaults.memory_savers`)."""
    FULL_RECOMPUTE = "full_recompute"
    """Full recomputation of every layer."""
    BLOCK_RECOMPUTE = "block_recompute"
    """Full recomputation of the fewest layers of each model chunk that fit (Megatron's
    ``--recompute-method block --recompute-num-layers N``)."""


class MicroBatchRule(str, Enum):
    """How a release sizes the micro-batch when a case leaves it null."""

    ONE = "one"
    """One sample (Megatron-LM has no default; 1 is the usual choice)."""
    LOCAL_BATCH = "local-batch"
    """The rank's local batch (global / dp), split into ``pp`` pipeline micro-batches when
    ``pp > 1`` (torchtitan)."""


class TpOverlapImpl(str, Enum):
    """What runs the overlapped tensor-parallel collectives (:mod:`sim.workload.tp_overlap`)."""

    USERBUFFERS = "userbuffers"
    """Transformer Engine's userbuffers (Megatron-LM ``--tp-comm-overlap``, NeMo, Megatron-Bridge)."""
    ASYNC_TP = "async-tp"
    """PyTorch's symmetric-memory async TP (torchtitan); a case's ``tp_comm_overlap_cfg`` is refused."""


class DpShard(str, Enum):
    """How ZeRO/FSDP state is sharded over the data-parallel ranks when ``dp_shard`` is null."""

    FULL = "full"
    """One shard group of all ``dp x cp`` ranks, no replicas."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One setting of a stack: the value the release uses and why, with its sources."""

    value: T
    why: str
    """A phrase the notes quote: ``parallel.X: null -> V (stack NAME: WHY)``."""
    sources: tuple[str, ...]
    """Where the value comes from (release notes, code at a commit, a recipe)."""
    origin: str
    """The stack file that gave it (a stack that extends another inherits its settings)."""
    by_dtype: Mapping[Dtype, Setting] = field(default_factory=dict)
    """The release's value for workloads of a number format where it differs (``by_dtype`` in
    the file: e.g. Megatron-Bridge's performance scripts turn TP overlap off for NVFP4)."""
    by_model: tuple[ModelRecipe, ...] = ()
    """The release's value for models whose recipe sets it apart (``by_model`` in the file:
    e.g. NeMo-Framework-Launcher's ``conf/training/llama/llama2_70b.yaml`` turns sequence
    parallelism on), first match first."""


@dataclass(frozen=True)
class ModelRecipe:
    """A ``by_model`` entry: the setting a framework's recipe for the models whose name
    ``pattern`` finds (a regular expression, searched case-insensitively) gives them."""

    pattern: str
    setting: Setting

    def matches(self, model_name: str) -> bool:
        """Whether this recipe is the one for a model named ``model_name``.

        >>> s = Setting(True, "why", ("src",), "f.yaml")
        >>> r = ModelRecipe(r"\\bllama[- ]?2\\b.*\\b70b\\b", s)
        >>> r.matches("Llama 2 70B"), r.matches("Llama 2 7B"), r.matches("LLAMA2-70B")
        (True, False, True)
        """
        return re.search(self.pattern, model_name, re.IGNORECASE) is not None


@dataclass(frozen=True)
class SettingKind:
    """A key of a stack file's ``settings``: how its value is read, and what it means."""

    key: str
    read: Callable[[object, str, str], object]
    """``read(value, path, field)``: the typed value, or a ConfigError."""
    meaning: str


def _boolean(value: object, path: str, field: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, field, "true or false", value)
    return value


def _zero(value: object, path: str, field: str) -> int:
    if not (is_int(value) and value in (0, 1, 2, 3)):
        raise ConfigError(path, field, "a ZeRO stage: 0, 1, 2 or 3", value)
    return value


def _positive(value: object, path: str, field: str) -> int:
    if not (is_int(value) and value >= 1):
        raise ConfigError(path, field, "a positive integer", value)
    return value


def _count(value: object, path: str, field: str) -> int:
    if not (is_int(value) and value >= 0):
        raise ConfigError(path, field, "a whole number, 0 or more", value)
    return value


def _positive_or_null(value: object, path: str, field: str) -> int | None:
    return None if value is None else _positive(value, path, field)


def _release_or_null(value: object, path: str, field: str) -> tuple[int, int] | None:
    if value is None:
        return None
    release = parse_release(value) if isinstance(value, str) else None
    if release is None:
        why = " (quoted: unquoted, 9.10 reads as the number 9.1)" if isinstance(value, float) else ""
        raise ConfigError(path, field, f"a cuDNN release as a string such as '9.13', or null{why}", value)
    return release


def _ub_table_or_null(value: object, path: str, field: str) -> TpOverlapConfig | None:
    return None if value is None else read_ub_table(value, path, field, f"the userbuffers table of {path}")


def _enum(kind: type[E], allowed: tuple[E, ...] | None = None) -> Callable[[object, str, str], E]:
    def read(value: object, path: str, field: str) -> E:
        return parse_enum(kind, value, path, field, allowed)
    return read


def read_step_passes(value: object, path: str, field: str) -> frozenset[StepPass]:
    """A list of :class:`~sim.types.StepPass` names (``[]``: none) as a set; anything else is
    a ConfigError naming ``path`` and ``field``."""
    names = [k.value for k in StepPass]
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ConfigError(path, field, f"a list of step passes among {names} ([] for none)", value)
    return frozenset(parse_enum(StepPass, v, path, field) for v in value)


def _savers(value: object, path: str, field: str) -> frozenset[MemorySaverKind]:
    names = [k.value for k in MemorySaverKind]
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ConfigError(path, field, f"a list of memory savers among {names}", value)
    return frozenset(parse_enum(MemorySaverKind, v, path, field) for v in value)


SETTINGS: tuple[SettingKind, ...] = (
    SettingKind("sequence_parallel", _boolean, "sequence parallelism under TP > 1"),
    SettingKind("zero_stage", _zero, "the ZeRO stage (3: FSDP full sharding)"),
    SettingKind("dp_shard", _enum(DpShard), "how ZeRO state is sharded over the data-parallel ranks"),
    SettingKind("zero_impl", _enum(ZeroImpl), "how ZeRO-3 issues its collectives"),
    SettingKind("distributed_optimizer", _boolean, "Megatron's distributed optimizer"),
    SettingKind("overlap_param_gather", _boolean, "the distributed optimizer's parameter gather overlapped with "
                "the next forward (with the distributed optimizer)"),
    SettingKind("overlap_grad_reduce", _boolean, "the data-parallel gradient reduction overlapped with the backward"),
    SettingKind("overlap_p2p_comm", _boolean, "the interleaved schedule posts pipeline receives a pass ahead"),
    SettingKind("blocking_p2p", _boolean, "under 1F1B each pipeline send and receive is a blocking exchange of "
                "its own, in the schedule's order, which the next one and the next pass wait for (DeepSpeed's "
                "pipeline engine; false: Megatron's receives posted after a pass, its sends not waited for)"),
    SettingKind("pipeline_scatter_gather", _boolean, "without sequence parallelism each tensor-parallel rank sends "
                "its 1/tp share of a stage's output, which the receiver all-gathers (Megatron-LM's scatter/gather "
                "optimization; false: every rank sends the whole output)"),
    SettingKind("tp_comm_overlap", _boolean, "TP communication overlapped with the GEMMs (under TP > 1)"),
    SettingKind("tp_comm_overlap_impl", _enum(TpOverlapImpl), "what runs the overlapped TP collectives"),
    SettingKind("tp_comm_overlap_cfg", _ub_table_or_null, "the userbuffers table the release's recipes pass "
                "(GEMM name -> method, num_sm, set_sm_margin, ...; null: Transformer Engine's defaults)"),
    SettingKind("flash_attention", _boolean, "fused (flash) attention"),
    SettingKind("attention_kernel", _enum(AttentionKernel), "which fused attention kernel"),
    SettingKind("cross_entropy", _enum(LossKind), "how the loss is computed"),
    SettingKind("fused_elementwise", _boolean, "fused norm, activation and residual kernels (false: eager "
                "PyTorch ops, unless the case's settings name torch.compile)"),
    SettingKind("gradient_accumulation_fusion", _boolean, "weight-gradient GEMMs accumulate into the fp32 main_grad"),
    SettingKind("grad_reduce_in_fp32", _boolean, "gradients accumulated and reduced in fp32 (false: in 16 bits)"),
    SettingKind("async_tp_grad_allreduce", _boolean, "the column-parallel input-gradient all-reduce runs beside "
                "the weight-gradient GEMM"),
    SettingKind("unfused_linear_bias", _boolean, "linear biases added and reduced by kernels of their own"),
    SettingKind("master_param_remainders", _boolean, "the optimizer keeps its fp32 master weights as the 16 bits "
                "the 16-bit weights lack (10 bytes of state a parameter, not 12)"),
    SettingKind("quantized_saved_inputs", _boolean, "an 8- or 4-bit linear layer keeps its quantized input for "
                "the weight gradient (false: the 16-bit input)"),
    SettingKind("te_quantizer", _boolean, "an 8-bit linear's operands quantized by Transformer Engine, which "
                "makes no FP8 transposes on Blackwell (false: torchao's float8)"),
    SettingKind("expert_gemm_streams", _count, "how a mixture-of-experts layer's local experts run each GEMM: "
                "0 one grouped kernel, n a kernel an expert on n CUDA streams (Transformer Engine's grouped "
                "linear: 4; a Python loop over the experts: 1)"),
    SettingKind("pipeline_buffers", _enum(PipelineBuffers), "what the pipeline runtime holds of each "
                "micro-batch at a stage's boundaries (in-flight: Megatron-Core's schedules; torch: "
                "torch.distributed.pipelining)"),
    SettingKind("fsdp_copies", _enum(FsdpCopies), "what ZeRO-3/FSDP copies around each layer's gather and "
                "reduce-scatter on the compute stream (none; fsdp2: PyTorch FSDP2's copy-out and copy-in)"),
    SettingKind("split_projections", _boolean, "the model's code runs the query, key and value (and a gated MLP's "
                "gate and up projections) as linears of their own, whose input gradients are summed"),
    SettingKind("rope_impl", _enum(RopeImpl), "how the model's code applies the rotary embedding (fused; "
                "complex: torchtitan's complex multiply, which torch.compile leaves to ATen)"),
    SettingKind("recompute", _enum(RecomputeKind), "activation recomputation"),
    SettingKind("selective_recompute", _enum(RecomputeKind, (RecomputeKind.SELECTIVE, RecomputeKind.SELECTIVE_OP)),
                "what a case's recompute: selective means in this release"),
    SettingKind("memory_savers", _savers, "the memory savers the release offers for null settings that do not fit"),
    SettingKind("virtual_pipeline_stages", _positive, "model chunks per pipeline rank under an interleaved "
                "schedule"),
    SettingKind("micro_batch_size", _enum(MicroBatchRule), "how the micro-batch is sized"),
    SettingKind("global_batch_size", _positive_or_null, "the recipe's global batch in sequences (null: one "
                "micro-batch a data-parallel rank)"),
    SettingKind("cp_comm_type", _enum(CpCommType), "how context parallelism exchanges the sequence"),
    SettingKind("fp8_scaling", _enum(ScalingRecipe, (ScalingRecipe.DELAYED, ScalingRecipe.CURRENT)),
                "the FP8 scaling recipe"),
    SettingKind("seq_length", _positive_or_null, "the training sequence length (null: none, the case must give it)"),
    SettingKind("adam_impl", _enum(AdamImpl), "how the Adam step runs: one fused kernel or PyTorch's foreach "
                "passes (sim/workload/step_passes.py)"),
    SettingKind("step_passes", read_step_passes, "the passes over the gradients and master weights the training "
                "step makes beside the Adam kernel (sim/workload/step_passes.py)"),
    SettingKind("etp", _positive_or_null, "the routed experts' tensor-parallel size (null: the tensor-parallel "
                "size, Megatron-Core's default)"),
    SettingKind("nvlink_segments", _boolean, "a multi-rack job's nodes allocated in equal segments, each in one "
                "NVLink domain (Slurm --segment), rather than filling the domains in order"),
    SettingKind("cudnn_release", _release_or_null, "the cuDNN release the stack ships, which prices cuDNN attention "
                "on Blackwell and Hopper (null: the catalogue's curves; sim/attention_releases.py)"),
)
"""The keys of a stack file's ``settings``, in the order docs/workloads.md lists them."""

_KINDS = {k.key: k for k in SETTINGS}

FlagSetting = Literal["sequence_parallel", "distributed_optimizer", "overlap_param_gather", "overlap_grad_reduce",
                      "overlap_p2p_comm", "pipeline_scatter_gather", "blocking_p2p", "tp_comm_overlap",
                      "flash_attention", "fused_elementwise",
                      "gradient_accumulation_fusion", "grad_reduce_in_fp32", "async_tp_grad_allreduce",
                      "unfused_linear_bias", "master_param_remainders", "quantized_saved_inputs",
                      "te_quantizer", "nvlink_segments", "split_projections"]
"""The :data:`SETTINGS` keys read as true or false."""
CountSetting = Literal["zero_stage", "virtual_pipeline_stages", "expert_gemm_streams"]
"""The :data:`SETTINGS` keys read as integers."""
RecomputeSetting = Literal["recompute", "selective_recompute"]
"""The :data:`SETTINGS` keys read as a :class:`~sim.types.RecomputeKind`."""


@dataclass(frozen=True)
class YearRange:
    """Which dates of a framework text a rule covers: ``first`` to ``last`` (either open when
    None), and whether a text with no year is covered too."""

    first: int | None = None
    last: int | None = None
    undated: bool = True

    def covers(self, year: int | None) -> bool:
        """Whether a framework text dated ``year`` (None: no year) is covered.

        >>> YearRange(None, 2021, undated=False).covers(2021), YearRange(2023, None).covers(None)
        (True, True)
        """
        if year is None:
            return self.undated
        return (self.first is None or year >= self.first) and (self.last is None or year <= self.last)

    def shown(self) -> str:
        """The range in words, e.g. ``2022``, ``2021 or earlier``, ``2023 on, or undated``."""
        if self.first is None and self.last is None:
            span = "any year"
        elif self.first == self.last:
            span = str(self.first)
        elif self.first is None:
            span = f"{self.last} or earlier"
        elif self.last is None:
            span = f"{self.first} on"
        else:
            span = f"{self.first}-{self.last}"
        return f"{span}, or undated" if self.undated and span != "any year" else span


@dataclass(frozen=True)
class MatchRule:
    """A framework text a stack matches: ``pattern`` (a regular expression, searched case-insensitively)
    in a text dated within ``years``."""

    pattern: str
    years: YearRange

    def matches(self, text: str, year: int | None) -> bool:
        return self.years.covers(year) and re.search(self.pattern, text, re.IGNORECASE) is not None


@dataclass(frozen=True)
class Stack:
    """One release of a training framework: how its null settings are filled (:data:`SETTINGS`)."""

    name: str
    description: str
    path: str
    """The file it was read from."""
    extends: tuple[str, ...]
    """The stacks it extends, nearest first (their names)."""
    matches: tuple[MatchRule, ...]
    fallback: YearRange | None
    """The dates of framework texts that match no stack's ``matches`` and are taken as this one."""
    settings: Mapping[str, Setting]

    def __getitem__(self, key: str) -> Setting:
        return self.settings[key]

    @overload
    def value(self, key: FlagSetting) -> bool: ...
    @overload
    def value(self, key: CountSetting) -> int: ...
    @overload
    def value(self, key: Literal["seq_length"]) -> int | None: ...
    @overload
    def value(self, key: Literal["etp"]) -> int | None: ...
    @overload
    def value(self, key: Literal["global_batch_size"]) -> int | None: ...
    @overload
    def value(self, key: RecomputeSetting) -> RecomputeKind: ...
    @overload
    def value(self, key: Literal["dp_shard"]) -> DpShard: ...
    @overload
    def value(self, key: Literal["zero_impl"]) -> ZeroImpl: ...
    @overload
    def value(self, key: Literal["tp_comm_overlap_impl"]) -> TpOverlapImpl: ...
    @overload
    def value(self, key: Literal["attention_kernel"]) -> AttentionKernel: ...
    @overload
    def value(self, key: Literal["cross_entropy"]) -> LossKind: ...
    @overload
    def value(self, key: Literal["memory_savers"]) -> frozenset[MemorySaverKind]: ...
    @overload
    def value(self, key: Literal["micro_batch_size"]) -> MicroBatchRule: ...
    @overload
    def value(self, key: Literal["cp_comm_type"]) -> CpCommType: ...
    @overload
    def value(self, key: Literal["fp8_scaling"]) -> ScalingRecipe: ...
    @overload
    def value(self, key: Literal["adam_impl"]) -> AdamImpl: ...
    @overload
    def value(self, key: Literal["pipeline_buffers"]) -> PipelineBuffers: ...
    @overload
    def value(self, key: Literal["fsdp_copies"]) -> FsdpCopies: ...
    @overload
    def value(self, key: Literal["rope_impl"]) -> RopeImpl: ...
    @overload
    def value(self, key: Literal["step_passes"]) -> frozenset[StepPass]: ...
    @overload
    def value(self, key: Literal["cudnn_release"]) -> tuple[int, int] | None: ...
    @overload
    def value(self, key: Literal["tp_comm_overlap_cfg"]) -> TpOverlapConfig | None: ...
    def value(self, key: str) -> object:
        """The value of setting ``key``, of the type its :data:`SETTINGS` reader returns
        (the overloads; tests/unit/test_stacks.py holds the two to each other)."""
        return self.settings[key].value

    def why(self, key: str) -> str:
        """``stack NAME: WHY``, as a note quotes setting ``key``."""
        return f"stack {self.name}: {self.settings[key].why}"

    def for_dtype(self, dtype: Dtype) -> Stack:
        """The stack as it runs a workload in ``dtype``: each setting's ``by_dtype`` entry for
        it in place of the setting."""
        if not any(dtype in s.by_dtype for s in self.settings.values()):
            return self
        return replace(self, settings={k: s.by_dtype.get(dtype, s) for k, s in self.settings.items()})

    def for_model(self, model_name: str | None) -> Stack:
        """The stack as its recipe for the model named ``model_name`` runs it: each setting's
        first matching ``by_model`` entry in place of the setting (None: no name, no recipe).

        A framework's launcher picks one configuration file per model (NeMo-Framework-Launcher:
        ``training: llama/llama2_70b``), and the settings in it are that release's defaults for
        the model; ``by_model`` records the ones that differ from the release's general value."""
        if not model_name or not any(s.by_model for s in self.settings.values()):
            return self
        return replace(self, settings={k: next((r.setting for r in s.by_model if r.matches(model_name)), s)
                                       for k, s in self.settings.items()})


_STACK_KEYS = ("name", "description", "extends", "matches", "fallback", "settings")
_SETTING_KEYS = ("value", "why", "sources", "by_dtype", "by_model")
_RECIPE_KEYS = ("model", "value", "why", "sources")
_RULE_KEYS = ("pattern", "years", "undated")


def _years(f: Fields, default_undated: bool) -> YearRange:
    raw = f.raw.get("years")
    undated = f.flag("undated")
    if raw is None:
        return YearRange(None, None, True if undated is None else undated)
    if not (isinstance(raw, list) and len(raw) == 2 and all(v is None or is_int(v) for v in raw)
            and (None in raw or raw[0] <= raw[1])):
        raise f.error("years", "[FIRST, LAST]: two years (either null: open), FIRST <= LAST", raw)
    return YearRange(raw[0], raw[1], default_undated if undated is None else undated)


def _rules(f: Fields) -> tuple[MatchRule, ...]:
    raw = f.raw.get("matches")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise f.error("matches", "a list of {pattern: REGEX, years: [FIRST, LAST], undated: BOOL}", raw)
    out = []
    for i, item in enumerate(raw):
        r = Fields(item, f.path, f"matches[{i}]", _RULE_KEYS)
        pattern = r.text("pattern", required=True)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise r.error("pattern", f"a regular expression ({exc})", pattern) from None
        out.append(MatchRule(pattern, _years(r, default_undated=False)))
    return tuple(out)


def _setting(f: Fields, key: str, origin: str, kind: SettingKind | None = None,
             keys: tuple[str, ...] = _SETTING_KEYS[:3]) -> Setting:
    """Setting ``key`` of ``f``; ``kind``: the setting this is a ``by_dtype`` or ``by_model``
    entry of (whose own keys are ``keys``)."""
    nested = kind is not None
    kind = kind or _KINDS[key]
    s = Fields(f.raw[key], f.path, f.field(key), keys if nested else _SETTING_KEYS)
    if "value" not in s.raw:
        raise s.error("value", f"the release's value ({kind.meaning})", None)
    value = kind.read(s.raw["value"], f.path, s.field("value"))
    why = s.text("why", required=True)
    if not why.strip():
        raise s.error("why", "a phrase saying what the release does", why)
    sources = s.raw.get("sources")
    if not (isinstance(sources, list) and sources and all(isinstance(x, str) and x.strip() for x in sources)):
        raise s.error("sources", "a non-empty list of citations (release notes, code at a commit, a recipe)",
                      sources)
    by_dtype: dict[Dtype, Setting] = {}
    raw = s.raw.get("by_dtype")
    if raw is not None:
        names = [d.value for d in SIMULATED_DTYPES]
        if not isinstance(raw, Mapping):
            raise s.error("by_dtype", f"a mapping from number formats {names} to {{value, why, sources}}", raw)
        d = Fields(raw, f.path, s.field("by_dtype"), names)
        for name in d.raw:
            by_dtype[parse_enum(Dtype, name, f.path, d.field(name))] = _setting(d, name, origin, kind)
    return Setting(value, why.strip(), tuple(sources), origin, by_dtype,
                   () if nested else _recipes(s, origin, kind))


def _recipes(s: Fields, origin: str, kind: SettingKind) -> tuple[ModelRecipe, ...]:
    """The ``by_model`` entries of setting ``s``: ``[{model: REGEX, value, why, sources}]``."""
    raw = s.raw.get("by_model")
    if raw is None:
        return ()
    if not (isinstance(raw, list) and raw):
        raise s.error("by_model", "a list of {model: REGEX (the model's name), value, why, sources}", raw)
    out = []
    for i, item in enumerate(raw):
        entry = Fields({str(i): item}, s.path, s.field("by_model"), (str(i),))
        r = Fields(item, s.path, entry.field(str(i)), _RECIPE_KEYS)
        pattern = r.text("model", required=True)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise r.error("model", f"a regular expression for the model's name ({exc})", pattern) from None
        out.append(ModelRecipe(pattern, _setting(entry, str(i), origin, kind, _RECIPE_KEYS)))
    return tuple(out)


def read_stack_file(path: Path, parent: Callable[[str, Path], Stack] | None) -> Stack:
    """One stack file, its ``extends`` resolved by ``parent(name_or_file, this_file)``.

    Raises
    ------
    ConfigError
        Naming the file and the field: an unknown key, a setting without ``value``, ``why`` or
        ``sources``, a value of the wrong kind, a bad pattern, or (with no ``extends``) a
        setting missing.
    """
    shown = str(path)
    f = Fields(read_yaml(path), shown, "", _STACK_KEYS)
    name = f.text("name") or path.stem
    base = f.text("extends")
    inherited: Mapping[str, Setting] = {}
    chain: tuple[str, ...] = ()
    if base is not None:
        if parent is None:
            raise f.error("extends", "no extends here", base)
        above = parent(base, path)
        inherited, chain = above.settings, (above.name,) + above.extends
        if name in chain:
            raise f.error("extends", f"a stack other than {name} itself (the chain is {' -> '.join(chain)})", base)
    given = f.raw.get("settings") or {}
    s = Fields(given, shown, "settings", tuple(_KINDS))
    settings = dict(inherited)
    for key in s.raw:
        settings[key] = _setting(s, key, shown)
    missing = [k.key for k in SETTINGS if k.key not in settings]
    if missing:
        raise s.error(missing[0], f"every setting given ({', '.join(missing)} missing), or extends: NAME to "
                      "inherit them", None)
    fallback = f.raw.get("fallback")
    return Stack(
        name=name, description=f.text("description") or "", path=shown, extends=chain, matches=_rules(f),
        fallback=None if fallback is None else _years(Fields(fallback, shown, "fallback", ("years", "undated")),
                                                      default_undated=False),
        settings={k.key: settings[k.key] for k in SETTINGS})
