"""Workload files: one case (or a list of published cases) in, a :class:`WorkloadSpec` out.

Builds the model, parallel, system and reference parts of a case, filling null settings the
way the release of its framework does: its software stack (``stack:``, or the one its
``framework`` text names, :mod:`sim.config.stacks`), whose settings the helpers of
:mod:`sim.config.defaults` read, noting each default filled. When those defaults do not fit in
the GPU's memory, the null parallel settings take the cheapest memory savers the stack offers
that make the run fit (:mod:`sim.config.fit`), noted as well.

``parallel.placement`` says which GPU each rank runs on (docs/placement.md): a rank order in
Megatron-Core's notation, innermost first (``"tp-cp-ep-dp-pp"``, the default: rank ``r`` on
GPU ``r``, TP inside a node; ``"tp-pp-dp"``: the pipeline stages of a replica next to each
other; ``"dp-tp-pp"``: TP strided across nodes), or a list of ``num_gpus`` GPU indices, the
``i``-th the GPU of rank ``i``. A null or absent placement is the default and adds no note.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sim.attention_releases import with_cudnn_release
from sim.config.defaults import (
    adam_impl_default,
    async_tp_allreduce_default,
    attention_kernel_default,
    batch_sizes,
    blocking_p2p_default,
    delay_wgrad_default,
    deterministic_default,
    dist_opt_default,
    dp_shard_default,
    ep_overlap_default,
    expert_gemm_streams_default,
    flash_default,
    fsdp_copies_default,
    fused_elementwise_default,
    grad_accum_fusion_default,
    grad_reduce_default,
    loss_default,
    overlap_default,
    p2p_overlap_default,
    param_gather_default,
    pipeline_buffers_default,
    quantized_inputs_default,
    recompute_default,
    remainders_default,
    rope_impl_default,
    scatter_gather_default,
    sp_default,
    split_projections_default,
    step_passes_default,
    te_quantizer_default,
    tp_overlap_cfg_default,
    tp_overlap_default,
    unfused_bias_default,
    virtual_stages_default,
    zero_default,
    zero_impl_default,
)
from sim.config.fields import SET_SOURCE, Fields, Notes, apply_overrides, described, located, read_yaml
from sim.config.fit import fit_null_settings, fits_in_memory
from sim.config.hf import read_hf_config
from sim.config.layout import (
    choose_expert_parallel,
    choose_layout,
    context_parallel_fits,
    expert_parallel_open,
    open_layout,
)
from sim.config.presets import preset_names, resolve_preset, shown_path
from sim.config.stack import Stack
from sim.config.stacks import STACKS, choose_stack, framework_year, load_stack
from sim.config.topology import MAX_BANDWIDTH, MAX_OVERSUBSCRIPTION, MIN_BANDWIDTH
from sim.config.tunable import TunableCase, knobs_of
from sim.errors import ConfigError, Described, excerpt
from sim.hardware import GPUSpec, get_gpu, gpu_names, power_limited
from sim.topology.network import NetworkFabric, NetworkSpec
from sim.types import (
    NOT_SIMULATED_DTYPES,
    SIMULATED_DTYPES,
    UNMODELLED_RECOMPUTE_MODULES,
    AttentionKernel,
    CpCommType,
    Dtype,
    MoeDispatcher,
    NormKind,
    RecomputeModule,
    ScalingRecipe,
    ScheduleKind,
    compact_name,
    parse_enum,
)
from sim.units import GBIT_PER_S, GiB
from sim.workload.kernels import KERNEL_KEYS, KernelsSpec
from sim.workload.spec import (
    DEFAULT_RECOMPUTE_MODULES,
    MEGATRON_ORDER,
    ModelSpec,
    ParallelSpec,
    Reference,
    SystemSpec,
    WorkloadSpec,
    pipeline_split,
)

DEFAULT_WORKLOAD = "gpt3-175b"
_TOP_KEYS = ("id", "name", "description", "source", "model", "system", "parallel", "kernels", "dtype", "scaling",
             "stack",
             "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16",
             "precision_as_published", "framework", "measured", "targets", "flop_formula",
             "derived_fields", "config_complete", "notes")
_MODEL_KEYS = ("name", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
               "ffn_hidden_size", "vocab_size", "seq_length", "gated_mlp", "tied_embeddings",
               "head_dim", "activation", "normalization", "position_embedding", "arch_source",
               "hf_config", "num_experts", "moe_top_k", "moe_ffn_hidden_size", "num_shared_experts",
               "first_dense_layers", "moe_capacity_factor", "q_lora_rank", "kv_lora_rank",
               "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "hidden_dropout", "mtp_num_layers")
_PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "ep", "etp", "virtual_pipeline_stages", "schedule",
                  "sequence_parallel", "micro_batch_size", "global_batch_size", "recompute", "recompute_num_layers",
                  "recompute_modules", "pipeline_layout",
                  "distributed_optimizer", "zero_stage", "overlap_grad_reduce", "overlap_p2p_comm",
                  "pipeline_scatter_gather", "blocking_p2p",
                  "grad_bucket_size_params", "flash_attention", "attention_kernel", "cross_entropy",
                  "fused_elementwise", "tp_comm_overlap", "overlap_param_gather", "placement", "dp_shard", "details",
                  "zero_impl",
                  "tp_comm_overlap_cfg", "gradient_accumulation_fusion", "grad_reduce_in_fp32", "deterministic",
                  "async_tp_grad_allreduce", "unfused_linear_bias", "adam_impl", "step_passes",
                  "master_param_remainders", "quantized_saved_inputs", "te_quantizer", "expert_gemm_streams",
                  "pipeline_buffers", "fsdp_copies", "rope_impl", "split_projections",
                  "cp_comm_type", "hierarchical_context_parallel_sizes", "moe_dispatcher", "ep_overlap",
                  "delay_wgrad")
"""The keys of a case's ``parallel`` section: the parallel strategy, and the kernel switches
(:data:`~sim.workload.kernels.KERNEL_KEYS`) in the spelling of the published cases."""
_SYSTEM_KEYS = ("gpu", "num_gpus", "gpus_per_node", "topology", "intra_node", "inter_node", "network",
                "description", "power_limit_w", "nvlink_segments")
_NETWORK_KEYS = ("nics_per_node", "nic_bandwidth_Gbps", "fabric", "node_bandwidth_Gbps", "pod_gpus",
                 "between_pods_oversubscription")
WORKLOAD_SETTABLE = ({"model": _MODEL_KEYS, "parallel": _PARALLEL_KEYS, "kernels": KERNEL_KEYS, "system": _SYSTEM_KEYS},
                      ("name", "id", "dtype", "stack", "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"))
_GATED = frozenset({"swiglu", "silu", "swish", "geglu", "reglu"})
_ACTIVATIONS = _GATED | frozenset({"gelu", "gelu_new", "gelu_fast", "gelu_tanh", "gelu_pytorch_tanh", "quick_gelu",
                                   "relu", "squared_relu", "relu2"})
"""``model.activation`` values (any case, with or without spaces, hyphens and underscores:
``Squared-ReLU`` is ``squared_relu``): the gated ones (their MLP's first projection is two
branches unless ``gated_mlp`` says otherwise) and the plain ones Megatron-LM, NeMo, llm-foundry
and Hugging Face configs name (``hidden_act``, ``activation_function``)."""


_NVL72_GPUS = ("GB200", "GB300")


def _cases_in(path: Path) -> list[object]:
    raw = read_yaml(path)
    if isinstance(raw, Mapping):
        return [raw]
    if isinstance(raw, list):
        return raw
    raise ConfigError(str(path), "<top level>", "a mapping (one case) or a list of cases", described(raw))


def load_workload(path: str | None = None, overrides: Sequence[str] = (), case: str | None = None) -> WorkloadSpec:
    """Load one workload; see :func:`load_workload_with_notes`, whose notes this drops."""
    return load_workload_with_notes(path, overrides, case)[0]


def load_workload_with_notes(path: str | None = None, overrides: Sequence[str] = (),
                             case: str | None = None) -> tuple[WorkloadSpec, list[str]]:
    """Load one workload and say which null settings were filled by defaults.

    Parameters
    ----------
    path : str or None
        A workload file, or the name of a preset in the repository's ``workloads/`` folder
        (with or without ``.yaml``); None loads ``gpt3-175b``. The file holds one case: a
        mapping, or a list with exactly one item.
    overrides : sequence of str
        ``KEY=VALUE`` items (``parallel.tp=4``, ``system.gpu=H100-SXM5-80GB``), applied to the
        file's mapping before any spec is built; VALUE is read as YAML.
    case : str, optional
        The ``id`` of the case to load from a file that lists several (a validation file).

    Returns
    -------
    (WorkloadSpec, list of str)
        The spec and notes such as ``"parallel.recompute: null -> none (...)"``, or, when the
        defaults do not fit in the GPU's memory, ``"parallel.recompute: null -> selective (none
        needs ... GiB of the ...'s 80.0 GiB; selective fits at ... GiB; ...)"``
        (:mod:`sim.config.fit`).

    Raises
    ------
    ConfigError
        For any malformed input, naming the file (``<--set>`` for a bad override) and field.
    """
    raw, file = _chosen_case(path, case)
    try:
        return build_workload(apply_overrides(raw, overrides, WORKLOAD_SETTABLE), file)
    except ConfigError as e:
        raise _named_by_override(e, overrides) from None


def workload_stack(path: str | None = None, overrides: Sequence[str] = (), case: str | None = None) -> Stack:
    """The software stack the workload :func:`load_workload_with_notes` loads runs on (its
    ``stack``, else the one its framework text names: :func:`case_stack`)."""
    raw, file = _chosen_case(path, case)
    return case_stack(apply_overrides(raw, overrides, WORKLOAD_SETTABLE), file)


def case_stack(raw: Mapping, file: Path) -> Stack:
    """The software stack one case's mapping (read from ``file``) runs on: its ``stack``, else the
    shipped stack its framework text, dated by its publication, names (:mod:`sim.config.stacks`)."""
    framework = raw.get("framework")
    framework = _dated_framework(framework if isinstance(framework, str) else "", raw.get("source"), Notes())
    return _stack(Fields(raw, str(file), "", _TOP_KEYS), file, framework)[0]


def unknown_framework(raw: Mapping, file: Path) -> str | None:
    """The framework text of one case's mapping (read from ``file``) when it names software no
    shipped stack's patterns match and the case names no ``stack``: the case then runs on the
    fallback stack of its date (:func:`sim.config.stacks.choose_stack`); else None."""
    framework = raw.get("framework")
    if raw.get("stack") is not None or not isinstance(framework, str) or not framework.strip():
        return None
    dated = _dated_framework(framework, raw.get("source"), Notes())
    return framework if choose_stack(dated).fallback else None


def tunable_case(raw: Mapping, file: Path, workload: WorkloadSpec) -> TunableCase | None:
    """The case ``raw`` (read from ``file``, built as ``workload``) with the null settings a
    practitioner tunes (:mod:`sim.config.tunable`), when its framework text names software no
    stack models and such a setting is null; else None."""
    framework = unknown_framework(raw, file)
    if framework is None:
        return None
    parallel = raw.get("parallel")
    knobs = knobs_of(parallel if isinstance(parallel, Mapping) else {}, workload)
    return TunableCase(raw, file, framework, knobs) if knobs else None


def load_tunable_case(path: str | None, overrides: Sequence[str], case: str | None,
                      workload: WorkloadSpec) -> TunableCase | None:
    """:func:`tunable_case` of the case :func:`load_workload_with_notes` built as ``workload``."""
    raw, file = _chosen_case(path, case)
    return tunable_case(apply_overrides(raw, overrides, WORKLOAD_SETTABLE), file, workload)


def _chosen_case(path: str | None, case: str | None) -> tuple[Mapping, Path]:
    """The mapping of the one case of workload file ``path`` (the one whose ``id`` is ``case``),
    and the file it is in."""
    file = resolve_preset(path or DEFAULT_WORKLOAD, "workloads")
    cases = _cases_in(file)
    if case is not None:
        ids = [c.get("id") for c in cases if isinstance(c, Mapping)]
        if case not in ids:
            shown = ", ".join(str(i) for i in ids[:6]) + (", ..." if len(ids) > 6 else "")
            raise ConfigError(str(file), "id", f"the id of one of its {len(ids)} cases ({shown})", case)
        cases = [cases[ids.index(case)]]
    if len(cases) != 1:
        raise ConfigError(str(file), "<top level>", "one case (pick one with --case ID)",
                          f"a list of {len(cases)} cases")
    return Fields(cases[0], str(file), "", _TOP_KEYS).raw, file


def _named_by_override(error: ConfigError, overrides: Sequence[str]) -> ConfigError:
    """``error`` naming the override that set its field beside the file
    (``tiny.yaml (--set): model.num_layers: ...``), when an override set that field; else
    ``error`` itself."""
    keys = {str(item).partition("=")[0].strip() for item in overrides}
    if error.path != SET_SOURCE and error.field in keys:
        return ConfigError(f"{error.path} (--set)", error.field, error.expected, error.got)
    return error


def load_cases(path: str, overrides: Sequence[str] = ()) -> list[tuple[str, WorkloadSpec | ConfigError]]:
    """Load every case of a validation-case file (a YAML list of cases).

    Returns
    -------
    list of (str, WorkloadSpec or ConfigError)
        Each case's id and its spec, or the ConfigError saying why it cannot be built (a
        feature not built yet, a value not published, ...).

    Raises
    ------
    ConfigError
        If the file itself cannot be read or parsed.
    """
    file = resolve_preset(path, "workloads")
    out: list[tuple[str, WorkloadSpec | ConfigError]] = []
    for i, case in enumerate(_cases_in(file)):
        case_id = case.get("id") if isinstance(case, Mapping) else None
        case_id = case_id if isinstance(case_id, str) else f"{file.stem}[{i}]"
        try:
            raw = Fields(case, str(file), "", _TOP_KEYS).raw
            out.append((case_id, build_workload(apply_overrides(raw, overrides, WORKLOAD_SETTABLE),
                                                 file)[0]))
        except ConfigError as exc:
            out.append((case_id, _named_by_override(exc, overrides)))
    return out


@dataclass(frozen=True)
class CaseRecord:
    """One published case as ``llmsim validate`` needs it: the spec (or why there is none),
    the notes on the defaults filled in, and the measured targets in the case's own units
    (``iteration_time_s``, ``tflops_per_gpu``, ``tokens_per_s_per_gpu``, ``peak_memory_gib``,
    ``layer_forward_ms``, ``layer_backward_ms``)."""

    id: str
    file: str
    workload: WorkloadSpec | None
    error: ConfigError | None
    notes: tuple[str, ...]
    targets: dict
    includes_recompute: bool | None
    config_complete: bool
    tuning: TunableCase | None = None
    """The null settings a practitioner tunes, when the case's framework is one no stack models
    (:mod:`sim.config.tunable`; ``llmsim validate`` tunes them)."""


LAYER_TARGETS = ("layer_forward_ms", "layer_backward_ms")
"""Targets that time one transformer layer: a case with no other target is a layer
microbenchmark (Korthikanti et al. 2022, Table 4: "time for a single transformer layer"), built
with one layer a model chunk (:func:`build_workload`)."""


_TARGET_METRICS = ("iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "peak_memory_gib") + LAYER_TARGETS


_TARGET_KEYS = ("value", "derived", "includes_recompute", "method")


def _case_targets(raw: object, path: str) -> tuple[dict[str, float], bool | None]:
    """A case's ``targets``: each a known metric, given as a number or a mapping whose ``value``
    is a number above 0 or null (not published; ``derived`` and ``includes_recompute`` true or
    false, ``method`` text); and whether its TFLOP/s count recomputation.

    Raises
    ------
    ConfigError
        Naming the file and the target's field.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(path, "targets", "a mapping of target names to {value: ...}", raw)
    targets: dict[str, float] = {}
    recompute = None
    for metric, entry in raw.items():
        if metric not in _TARGET_METRICS:
            raise ConfigError(path, f"targets.{metric}", f"one of {list(_TARGET_METRICS)}", metric)
        entry = {"value": entry} if isinstance(entry, (int, float)) and not isinstance(entry, bool) else entry
        f = Fields(entry, path, f"targets.{metric}", _TARGET_KEYS)
        value = f.number("value")
        if value is not None and not value > 0:
            raise f.error("value", "a positive measured value (null: not published)", value)
        if value is not None:
            targets[metric] = value
        f.flag("derived")
        flag = f.flag("includes_recompute")
        f.text("method")
        if metric == "tflops_per_gpu":
            recompute = flag
    return targets, recompute


def load_case_records(path: str) -> list[CaseRecord]:
    """Every case of a validation-case file with its targets, for ``llmsim validate``: a file,
    or a name of the shipped cases (``korthikanti2022``)."""
    file = resolve_preset(path, "workloads/validation", "workloads")
    out: list[CaseRecord] = []
    seen: dict[str, int] = {}
    shown = shown_path(file)
    for i, case in enumerate(_cases_in(file)):
        mapping = case if isinstance(case, Mapping) else {}
        given_id, raw_targets = mapping.get("id"), mapping.get("targets")
        case_id = given_id if isinstance(given_id, str) else f"{file.stem}[{i}]"
        complete = mapping.get("config_complete") is True
        targets: dict[str, float] = {}
        recompute_flag = None
        try:
            if raw_targets is not None:
                targets, recompute_flag = _case_targets(raw_targets, str(file))
            if mapping.get("config_complete") is not None and not isinstance(mapping.get("config_complete"), bool):
                raise ConfigError(str(file), "config_complete", "true or false", mapping.get("config_complete"))
            if case_id in seen:
                raise ConfigError(str(file), "id", f"an id no other case of the file has (case {seen[case_id]} "
                                  "has it)", case_id)
            seen[case_id] = i
            raw = Fields(case, str(file), "", _TOP_KEYS).raw
            spec, notes = build_workload(raw, file)
            out.append(CaseRecord(case_id, shown, spec, None, tuple(notes), targets, recompute_flag, complete,
                                  tunable_case(raw, file, spec)))
        except ConfigError as exc:
            out.append(CaseRecord(case_id, shown, None, exc, (), targets, recompute_flag, complete))
    return out


def build_workload(raw: Mapping, file: Path) -> tuple[WorkloadSpec, list[str]]:
    """The workload a mapping describes (a workload file's or a validation case's), with the
    notes of every default filled; a layout the case leaves open whose defaults do not fit, or
    leave its published batch undivided, is chosen as :func:`sim.config.layout.choose_layout`
    says, and a null expert-parallel size that does not fit as
    :func:`sim.config.layout.choose_expert_parallel` says."""
    try:
        spec, notes = _build_experts(raw, file)
    except ConfigError as exc:
        # TP 1 x PP 1 puts every other GPU in data parallelism, which a published batch may not divide
        if exc.field != "parallel.global_batch_size" or not open_layout(raw):
            raise
        chosen = choose_layout(raw, file, _build_experts, None, f"{exc.expected} (got {exc.got})")
        if chosen is None:
            raise
        return chosen
    if not open_layout(raw) or fits_in_memory(spec):
        return spec, notes
    return choose_layout(raw, file, _build_experts, spec) or (spec, notes)


def _build_experts(raw: Mapping, file: Path, fit: bool = True) -> tuple[WorkloadSpec, list[str]]:
    """:func:`_build`, and where a mixture-of-experts case leaves ``ep`` null and does not fit,
    the smallest expert-parallel size that does (:func:`sim.config.layout.choose_expert_parallel`;
    ``fit``: with the memory savers too)."""
    spec, notes = _build(raw, file, fit)
    if not expert_parallel_open(raw, spec) or fits_in_memory(spec):
        return spec, notes
    return choose_expert_parallel(raw, file, _build, spec, fit) or (spec, notes)


def _build(raw: Mapping, file: Path, fit: bool = True) -> tuple[WorkloadSpec, list[str]]:
    """:func:`build_workload` for the layout ``raw`` gives (``fit``: with the memory savers
    for the null settings, :func:`_fitted`)."""
    path, notes = str(file), Notes()
    top = Fields(raw, path, "", _TOP_KEYS)
    case_id = top.text("id")
    name = top.text("name") or case_id or file.stem
    framework = raw.get("framework")
    framework = _dated_framework(framework if isinstance(framework, str) else "", raw.get("source"), notes)
    stack, chosen = _stack(top, file, framework)
    first_default = len(notes)
    dtype = top.enum("dtype", Dtype, notes, Dtype.BF16, "bf16 mixed precision", SIMULATED_DTYPES, NOT_SIMULATED_DTYPES)
    stack = stack.for_dtype(dtype)  # the release's settings for this number format
    stack = stack.for_model(_model_name(raw.get("model")))  # and its recipe for this model
    model = build_model(raw.get("model"), path, file.parent, stack, notes, name)
    system_f = Fields(raw.get("system"), path, "system", _SYSTEM_KEYS)
    gpu = _gpu(system_f)
    num_gpus = system_f.integer("num_gpus", positive=True)
    settings = SettingsFields(Fields(raw.get("parallel"), path, "parallel", _PARALLEL_KEYS),
                              Fields(raw.get("kernels"), path, "kernels", KERNEL_KEYS), raw.get("kernels") is not None)
    parallel, kernels = _build_parallel(settings, num_gpus, framework, stack, notes,
                                        system_f.integer("gpus_per_node", positive=True), model.num_layers,
                                        model.is_moe, model.seq_length)
    if num_gpus is None:
        num_gpus = notes.fill("system.num_gpus", parallel.num_gpus, "tp x pp x dp x cp")
    system = _build_system(system_f, gpu, num_gpus, file.parent, notes, stack)
    system = _cudnn_release(system, kernels, stack, notes)
    source = raw.get("source")
    source = source.get("publication") if isinstance(source, Mapping) else source
    source = source if isinstance(source, str) else case_id or file.name
    targets = None if raw.get("targets") is None else _case_targets(raw["targets"], path)
    reference = None if targets is None else _build_reference(*targets, source)
    chunks = parallel.pp * parallel.virtual_pipeline_stages
    if targets is not None and targets[0] and set(targets[0]) <= set(LAYER_TARGETS) and model.num_layers > chunks:
        notes.append(f"model.num_layers: {model.num_layers} -> {chunks} (the case's targets are one layer's "
                     "times, a layer microbenchmark: one layer a model chunk, each layer timed as in the "
                     "whole model, and the memory the benchmark holds)")
        model = dataclasses.replace(model, num_layers=chunks)
    split = pipeline_split(model.num_layers, chunks, model.mtp_num_layers)
    if model.num_layers % chunks and split is not None and parallel.pipeline_layout is None:
        notes.append(f"model.num_layers: {model.num_layers} over {chunks} pipeline stages -> "
                     f"{split[0]} on the first, {split[-1]} on the last, up to {max(split)} between "
                     "(embedding and loss counted as a layer each, Megatron-LM "
                     "--account-for-embedding/loss-in-pipeline-split"
                     + (", each MTP module as two" if model.mtp_num_layers else "") + ")")
    scaling = _scaling(top, dtype, notes, stack)
    bf16_start, bf16_end = (top.integer(k) or 0 for k in ("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"))
    if bf16_start + bf16_end > model.num_layers:
        key = "num_layers_at_end_in_bf16" if bf16_end else "num_layers_at_start_in_bf16"
        raise top.error(key, f"at most model.num_layers={model.num_layers} layers in BF16, start and end together",
                        bf16_start + bf16_end)
    with located(path), settings.naming_kernels():
        spec = WorkloadSpec(name=name, model=model, parallel=parallel, system=system, dtype=dtype,
                            reference=reference, scaling=scaling, num_layers_at_start_in_bf16=bf16_start,
                            num_layers_at_end_in_bf16=bf16_end, kernels=kernels)
    if chosen and any(f"(stack {stack.name}:" in n for n in notes[first_default:]):
        notes.insert(first_default, f"stack: null -> {stack.name} ({chosen})")
    if not fit:
        return spec, list(notes)
    return _fitted(spec, raw.get("parallel"), raw.get("kernels"), stack, notes)


def _stack(top: Fields, file: Path, framework: str) -> tuple[Stack, str]:
    """The case's software stack (:mod:`sim.config.stacks`), and why when the case does not name
    it: its ``stack`` (a shipped stack's name, or a file relative to the case's folder), else
    the shipped stack its ``framework`` text matches."""
    name = top.text("stack")
    if name is None:
        choice = choose_stack(framework)
        return choice.stack, choice.why
    try:
        return load_stack(name, file.parent), ""
    except ConfigError as exc:
        if exc.field != "<file>":
            raise
        raise top.error("stack", f"a stack file (relative to the case's folder) or a shipped stack: "
                        f"{preset_names(STACKS)}", name) from None


def _fitted(spec: WorkloadSpec, raw_parallel: object, raw_kernels: object, stack: Stack,
            notes: Notes) -> tuple[WorkloadSpec, list[str]]:
    """``spec`` with the cheapest memory savers for the settings the case left null (in
    ``parallel:``, and for a kernel switch in ``kernels:`` too) when its defaults do not fit
    (:func:`sim.config.fit.fit_null_settings`); a changed setting's default note gives way to
    the note saying what was chosen and why."""
    given = raw_parallel if isinstance(raw_parallel, Mapping) else {}
    switches = raw_kernels if isinstance(raw_kernels, Mapping) else {}
    nulls = frozenset(k for k in _PARALLEL_KEYS if given.get(k) is None and switches.get(k) is None)
    fitted = fit_null_settings(spec, nulls, stack)
    stale = tuple(f"{section}.{key}: null -> " for key in fitted.changed for section in ("parallel", "kernels"))
    return fitted.workload, [n for n in notes if not n.startswith(stale)] + list(fitted.notes)


_ARXIV_ID = re.compile(r"arxiv(?:\.org/abs/|:)\s*(\d{2})(\d{2})\.\d{4,5}", re.IGNORECASE)


def _dated_framework(framework: str, source: object, notes: Notes) -> str:
    """The case's ``framework`` text, dated by its publication when the text carries no year.

    A published run cannot have used software newer than its publication, so a framework named
    without a date (``"Megatron-LM"``) is taken as of the year the case's ``source`` was
    published: a year in ``source.publication``, else the year of the arXiv identifier in
    ``source.url`` or ``source.publication`` (``arXiv:2104.04473`` is April 2021). The software
    stack is then chosen by that year (:func:`sim.config.stacks.choose_stack`: a Megatron-LM of
    2021 is ``megatron-lm-2021``). A framework text with a year, or a source with neither, is
    left as it is."""
    if framework_year(framework) is not None or not isinstance(source, Mapping):
        return framework
    texts = [str(source.get(k) or "") for k in ("publication", "url")]
    years = [2000 + int(m.group(1)) for t in texts for m in _ARXIV_ID.finditer(t)]
    year = framework_year(texts[0]) or (min(years) if years else None)
    if year is None:
        return framework
    notes.append(f"framework: '{framework}' carries no date; taken as of its publication ({year}, "
              "source.publication / source.url), since a published run used no later software")
    return f"{framework} (as of {year})"


def _scaling(top: Fields, dtype: Dtype, notes: Notes, stack: Stack) -> ScalingRecipe:
    """The 8-bit scaling recipe: the workload's ``scaling``, else per-block for MXFP8/NVFP4,
    current scaling when a case's ``precision_as_published`` says so, else the stack's
    ``fp8_scaling`` (torchtitan: torchao's dynamic, per-tensor current scaling; Transformer
    Engine's default recipe, delayed, otherwise), noted when current."""
    if top.raw.get("scaling") is not None:
        return top.enum("scaling", ScalingRecipe, notes, ScalingRecipe.DELAYED, "")
    if dtype in (Dtype.MXFP8, Dtype.NVFP4):
        return ScalingRecipe.BLOCK
    published = top.raw.get("precision_as_published")
    if dtype is Dtype.FP8 and isinstance(published, str) and "current scaling" in published.lower():
        return notes.fill("scaling", ScalingRecipe.CURRENT, "precision_as_published names current scaling")
    if dtype is Dtype.FP8 and stack.value("fp8_scaling") is ScalingRecipe.CURRENT:
        return notes.fill("scaling", ScalingRecipe.CURRENT, stack.why("fp8_scaling"))
    return ScalingRecipe.DELAYED


def _model_name(raw: object) -> str | None:
    """The ``name`` a workload's ``model`` mapping gives, which picks a stack's recipe
    (:meth:`sim.config.stack.Stack.for_model`); None for a config.json path or no name."""
    name = raw.get("name") if isinstance(raw, Mapping) else None
    return name if isinstance(name, str) else None


def build_model(raw: object, path: str, base: Path, stack: Stack | None, notes: Notes,
                 default_name: str) -> ModelSpec:
    """The ``model`` mapping (or a Hugging Face config.json path); a null ``seq_length`` is the
    stack's ``seq_length`` where it has one (torchtitan's Llama 3 train configs)."""
    if raw is None:
        raise ConfigError(path, "model", "a mapping of model dimensions, or a Hugging Face "
                          "config.json path", None)
    if isinstance(raw, str):
        raw = {"hf_config": raw}
    f = Fields(raw, path, "model", _MODEL_KEYS)
    merged = dict(f.raw)
    hf_path = f.text("hf_config")
    if hf_path is not None:
        hf_file = base / hf_path
        if not hf_file.is_file():
            try:  # the name of a shipped config (workloads/hf/NAME.json)
                hf_file = resolve_preset(hf_path, "workloads/hf", suffix=".json")
            except ConfigError:
                raise f.error("hf_config", "an existing Hugging Face config.json (relative to the workload "
                              f"file's folder), or a shipped one: {preset_names('workloads/hf', '.json')}",
                              str(base / hf_path)) from None
        hf = read_hf_config(hf_file)
        merged = {**hf, **{k: v for k, v in f.raw.items() if v is not None}}
        if f.raw.get("mtp_num_layers") is None and hf.get("mtp_num_layers"):
            merged["mtp_num_layers"] = notes.fill(
                "model.mtp_num_layers", hf["mtp_num_layers"],
                f"num_nextn_predict_layers of {hf_file.name}: the checkpoint's multi-token-prediction modules, "
                "which Megatron-Bridge's AutoBridge trains (deepseek_v3_bridge.py @ 067f987df: provider."
                "mtp_num_layers); 0 trains without")
    f = Fields(merged, path, "model", _MODEL_KEYS)
    heads = f.integer("num_attention_heads", required=True)
    hidden = f.integer("hidden_size", required=True)
    kv = f.integer("num_kv_heads")
    ffn = f.integer("ffn_hidden_size")
    seq = f.integer("seq_length")
    if seq is None and stack is not None and stack.value("seq_length") is not None:
        seq = notes.fill("model.seq_length", stack.value("seq_length"), stack.why("seq_length"))
    gated, activation = f.flag("gated_mlp"), f.text("activation")
    if activation is not None:
        spelled = {compact_name(a): a for a in _ACTIVATIONS}.get(compact_name(activation))
        if spelled is None:
            raise f.error("activation", f"one of {sorted(_ACTIVATIONS)} (any case, with or without spaces, hyphens "
                          "and underscores)", activation)
        activation = spelled
    if gated is None:
        gated = notes.fill("model.gated_mlp", activation in _GATED,
                           f"from activation {activation}" if activation else
                           "Megatron-LM default: GeLU MLP, not gated")
    tied = f.flag("tied_embeddings")
    seq_length = f.integer("seq_length", required=True) if seq is None else seq
    position = _position(f)
    with located(path):
        return ModelSpec(
            name=f.text("name") or default_name,
            num_layers=f.integer("num_layers", required=True),
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=notes.fill("model.num_kv_heads", heads, "= heads: multi-head attention")
            if kv is None else kv,
            ffn_hidden_size=notes.fill("model.ffn_hidden_size", 4 * hidden, "4 x hidden_size, the "
                                       "GPT / Megatron-LM default") if ffn is None else ffn,
            vocab_size=_vocab(f, notes),
            seq_length=seq_length,
            gated_mlp=gated,
            tied_embeddings=notes.fill("model.tied_embeddings", False, "assumed untied: output "
                                       "layer counted apart") if tied is None else tied,
            head_dim=f.integer("head_dim", positive=True) or 0,
            norm=_norm(f),
            rotary=None if position is None else position in ("rope", "mrope"),
            learned_positions=seq_length if position == "learned_absolute" else 0,
            hidden_dropout=_hidden_dropout(f, notes),
            mtp_num_layers=f.integer("mtp_num_layers") or 0,
            **_moe_fields(f),
            **{k: f.integer(k) or 0 for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                               "qk_rope_head_dim", "v_head_dim")},
        )


_NORMS = {"layernorm": NormKind.LAYERNORM, "low_precision_layernorm": NormKind.LAYERNORM,
          "rmsnorm": NormKind.RMSNORM}
"""``model.normalization`` values (any case, with or without spaces, hyphens and underscores:
``LayerNorm``, ``layer_norm``, ``RMS norm``): llm-foundry's ``low_precision_layernorm`` is
LayerNorm run in 16 bits (``llmfoundry/models/layers/norm.py``)."""
_POSITIONS = ("rope", "mrope", "learned_absolute", "relative", "alibi", "sinusoidal", "none")
"""``model.position_embedding`` values (any case, with or without spaces, hyphens and
underscores), Megatron-LM's ``--position-embedding-type`` choices and ALiBi; the first two are
rotary. :data:`_POSITION_ALIASES` names the same kinds as papers and other frameworks do."""
_POSITION_ALIASES = {"rotary": "rope", "yarn": "rope", "xpos": "rope", "learned": "learned_absolute",
                     "absolute": "learned_absolute", "learnedpositional": "learned_absolute",
                     "kerple": "relative", "sandwich": "relative",
                     "t5relative": "relative", "nope": "none"}
"""Other spellings of :data:`_POSITIONS`' kinds: rotary variants (YaRN, xPos; NeMo's
``position_embedding_type``) are rotary, absolute ones (learned or sinusoidal) are not, NeMo's
``kerple`` and ``sandwich`` and T5's bias are relative, NoPE is none. What is simulated: whether
the embedding is rotary (its kernels), and a learned absolute one's table of ``seq_length`` rows
(Megatron-LM requires ``--max-position-embeddings`` of at least the sequence length; its
parameters); sinusoidal positions have no parameters."""


def _named(f: Fields, key: str, names: Collection[str], aliases: Mapping[str, str] | None = None) -> str | None:
    """``key``'s text as one of ``names`` spells it, compared in any case and without spaces,
    hyphens and underscores, or one of ``aliases`` (compact spelling -> name); None: not stated."""
    text = f.text(key)
    if text is None:
        return None
    known = {**{compact_name(n): n for n in names}, **(aliases or {})}
    name = known.get(compact_name(text))
    if name is None:
        raise f.error(key, f"one of {', '.join(names)}, or null", text)
    return name


def _norm(f: Fields) -> NormKind | None:
    """The model's normalization (None: not stated)."""
    name = _named(f, "normalization", _NORMS)
    return None if name is None else _NORMS[name]


def _position(f: Fields) -> str | None:
    """The model's position embedding, one of :data:`_POSITIONS` (None: not stated)."""
    return _named(f, "position_embedding", _POSITIONS, _POSITION_ALIASES)


MEGATRON_HIDDEN_DROPOUT = 0.1
"""Megatron-LM's ``--hidden-dropout`` default (``megatron/training/arguments.py``; Megatron-Core
``TransformerConfig.hidden_dropout``), which GPT-style recipes keep (NeMo-Framework-Launcher
``conf/training/gpt3/*.yaml``: ``hidden_dropout: 0.1``)."""


def _hidden_dropout(f: Fields, notes: Notes) -> float:
    """``model.hidden_dropout``; null: none for an RMSNorm model, else Megatron-LM's 0.1.

    The RMSNorm models (Llama and the families built like it) are defined without hidden
    dropout: Hugging Face's ``LlamaConfig`` has no such field and Meta's reference model no
    dropout layer; Megatron-Bridge's ``LlamaBridge`` sets ``hidden_dropout = 0.0``
    (``src/megatron/bridge/models/llama/llama_bridge.py`` @ v0.4.1), NeMo-Framework-Launcher's
    Llama configurations ``hidden_dropout: 0.0`` (``conf/training/llama/*.yaml``), and
    torchtitan's Llama has no dropout. GPT-style models keep Megatron-LM's default.
    """
    value = f.number("hidden_dropout")  # its range is ModelSpec's to check
    if value is not None:
        return value
    if _norm(f) is NormKind.RMSNORM:
        return notes.fill("model.hidden_dropout", 0.0, "an RMSNorm model, built like Llama without hidden "
                          "dropout (Hugging Face LlamaConfig; Megatron-Bridge LlamaBridge hidden_dropout = 0.0)")
    return MEGATRON_HIDDEN_DROPOUT


def _moe_fields(f: Fields) -> dict:
    """The mixture-of-experts settings, absent for a dense model."""
    experts = f.integer("num_experts")
    if not experts or experts <= 1:
        for key in ("moe_top_k", "moe_ffn_hidden_size", "num_shared_experts", "first_dense_layers"):
            f.integer(key)  # unused by a dense model, but a value of the wrong kind is still a typo
        f.number("moe_capacity_factor")
        return {"num_experts": experts or 0}
    cap = f.number("moe_capacity_factor")
    return {"num_experts": experts, "moe_top_k": f.integer("moe_top_k", required=True),
            "moe_ffn_hidden_size": f.integer("moe_ffn_hidden_size", positive=True) or 0,
            "num_shared_experts": f.integer("num_shared_experts") or 0,
            "first_dense_layers": f.integer("first_dense_layers") or 0,
            "moe_capacity_factor": None if cap is None else float(cap)}


_KNOWN_VOCABULARIES = (
    # (name pattern, vocabulary, source): the tokenizer a model family ships with
    (r"\bllama[ -]?2\b", 32000, "Llama 2 tokenizer (meta-llama/Llama-2-7b-hf config.json)"),
    (r"\bllama[ -]?3", 128256, "Llama 3 tokenizer (meta-llama/llama-models sku_list.py)"),
    (r"\bnemotron", 256000, "Nemotron-4 tokenizer (NeMo NemotronConfig; Nemotron-4 340B report)"),
    (r"\bgpt-?3\b", 50257, "GPT-2 BPE tokenizer, as GPT-3 used (Brown et al. 2020)"),
    (r"\bmixtral[ -]?8x7b", 32000, "Mixtral 8x7B tokenizer (mistralai/Mixtral-8x7B-v0.1 config.json)"),
    (r"\bqwen[ -]?3\b", 151936, "Qwen3 tokenizer (Qwen/Qwen3-8B, Qwen3-30B-A3B, Qwen3-235B-A22B config.json)"),
    (r"\bdeepseek[ -]?v3\b", 129280, "DeepSeek-V3 tokenizer (deepseek-ai/DeepSeek-V3 config.json)"),
    (r"\bfalcon[ -]?(?:7|40|180)b\b", 65024,
     "Falcon tokenizer (tiiuae/falcon-7b, falcon-40b, falcon-180B config.json)"),
    (r"\bbloom\b", 250880, "BLOOM tokenizer (bigscience/bloom config.json)"),
    (r"\bopt[ -]\d", 50272, "OPT's GPT-2 BPE, padded (facebook/opt-66b config.json; Zhang et al. 2022)"),
    (r"\bmpt[ -]\d", 50432, "MPT's GPT-NeoX tokenizer, padded (mosaicml/mpt-7b config.json)"),
    (r"\bgpt-?neox", 50432, "GPT-NeoX-20B tokenizer, padded (EleutherAI/gpt-neox-20b config.json)"),
    (r"\bgemma(?:[ -]?2)?[ -]\d+b\b", 256000, "Gemma and Gemma 2 tokenizer (google/gemma-7b, gemma-2-9b config.json)"),
)


def _vocab(f: Fields, notes: Notes) -> int:
    """The vocabulary, or, when a case leaves it null, the tokenizer of the model family its
    name says (a fact about the model, not a guess about the run)."""
    vocab = f.integer("vocab_size")
    if vocab is not None:
        return vocab
    name = (f.text("name") or "").lower()
    for pattern, size, source in _KNOWN_VOCABULARIES:
        if re.search(pattern, name):
            return notes.fill("model.vocab_size", size, source)
    return f.integer("vocab_size", required=True)


def _model_parallel_split(f: Fields, num_gpus: int | None, gpus_per_node: int | None,
                          notes: Notes) -> tuple[int, int]:
    """TP and PP, each read or filled. When both are null but the GPU count, DP and CP fix
    their product (Narayanan et al. 2021's Table 2 gives only the model-parallel size), the
    split follows that paper's Takeaway #1: tensor parallelism up to the GPUs of one server,
    pipeline parallelism across servers; otherwise a null is Megatron-LM's default of 1."""
    tp, pp, cp, dp = (f.integer(k, positive=True) for k in ("tp", "pp", "cp", "dp"))
    cp = 1 if cp is None else cp
    if num_gpus is None or dp is None or num_gpus % (dp * cp):
        mp = None  # the GPUs, DP and CP leave TP x PP open
    else:
        mp = num_gpus // (dp * cp)
    if tp is None and pp is None and mp is not None:
        per_node = gpus_per_node or 8
        tp = max(d for d in range(1, min(mp, per_node) + 1) if mp % d == 0 and per_node % d == 0)
        why = (f"model-parallel size {mp} = num_gpus / (dp x cp): tensor parallelism up to the "
               f"{per_node} GPUs of a server, pipeline across servers (Narayanan et al. 2021, Takeaway #1)")
        return notes.fill("parallel.tp", tp, why), notes.fill("parallel.pp", mp // tp, why)
    given = [v for v in (tp, pp) if v is not None]
    if len(given) == 1 and mp is not None and mp % given[0] == 0:
        key = "parallel.pp" if pp is None else "parallel.tp"
        value = notes.fill(key, mp // given[0], f"num_gpus / (dp x cp x {'tp' if pp is None else 'pp'})")
        return (given[0], value) if pp is None else (value, given[0])
    if tp is None:
        tp = notes.fill("parallel.tp", 1, "Megatron-LM default")
    if pp is None:
        pp = notes.fill("parallel.pp", 1, "Megatron-LM default")
    return tp, pp


def _build_parallel(f: Fields, num_gpus: int | None, framework: str, stack: Stack,
                    notes: Notes, gpus_per_node: int | None = None,
                    num_layers: int | None = None, moe: bool = False,
                    seq_length: int | None = None) -> tuple[ParallelSpec, KernelsSpec]:
    """The ``parallel`` and ``kernels`` mappings (:class:`SettingsFields`); null settings filled
    as the case's software stack says (:mod:`sim.config.defaults`; ``framework`` is the case's
    text, read for launch flags it names), in the order their notes are listed.

    ``placement`` maps ranks onto GPUs (ranks count in Megatron's ``tp-cp-ep-dp-pp`` order,
    :mod:`sim.workload.layout`):

    * an order string, Megatron-Core's ``initialize_model_parallel(order=...)``: the
      dimensions ``tp``, ``cp``, ``dp``, ``pp`` joined by ``-``, innermost (closest GPUs)
      first. One of size 1 may be left out (it goes outermost). ``ep`` may stand right before
      ``dp`` and changes nothing: expert-parallel groups are the inner part of the
      data-parallel ranks in every order. ``"tp-cp-ep-dp-pp"`` (null, the default) runs rank
      ``r`` on GPU ``r``; ``"tp-pp-dp"`` keeps a replica's pipeline stages within a node and
      sends the gradient reduction across nodes; ``"dp-tp-pp"`` spreads a TP group across nodes.
    * a list of ``num_gpus`` distinct GPU indices: rank ``i`` runs on GPU ``list[i]``.

    Anything else is a ConfigError on ``parallel.placement``.
    """
    tp, pp = _model_parallel_split(f, num_gpus, gpus_per_node, notes)
    cp, ep = (f.integer(k, positive=True) or 1 for k in ("cp", "ep"))
    given_dp = f.integer("dp", positive=True)
    if f.raw.get("cp") is None and given_dp is not None and num_gpus is not None and seq_length is not None \
            and num_gpus % (tp * pp * given_dp) == 0:
        rest = num_gpus // (tp * pp * given_dp)
        if rest > 1 and context_parallel_fits(seq_length, rest):
            # the GPUs a long sequence's published TP, PP and DP leave over are its context-parallel
            # ranks, as a null dp is the GPUs TP, PP and CP leave
            cp = notes.fill("parallel.cp", rest, f"system.num_gpus / (tp x pp x dp): a sequence of "
                            f"{seq_length:,} tokens, {seq_length // rest:,} a context-parallel rank")
    etp = f.integer("etp", positive=True)
    if etp is None and ep > 1:
        etp = stack.value("etp")
        if etp is None:
            notes.fill("parallel.etp", tp, "Megatron-Core's default: the experts run at the tensor-parallel size")
        else:
            notes.fill("parallel.etp", etp, f"stack {stack.name}: {stack.why('etp')}")
    dp = f.integer("dp", positive=True)
    if dp is None:
        if num_gpus is None:
            raise f.error("dp", "an integer, or system.num_gpus to derive it from", None)
        if num_gpus % (tp * pp * cp):
            raise f.error("dp", f"null only when system.num_gpus={num_gpus} is a multiple of "
                          f"tp x pp x cp = {tp * pp * cp}", None)
        dp = notes.fill("parallel.dp", num_gpus // (tp * pp * cp), "system.num_gpus / (tp x pp x cp)")
    elif num_gpus is not None and None in (f.raw.get("tp"), f.raw.get("pp")) \
            and tp * pp * dp * cp != num_gpus:
        missing = "parallel.tp" if f.raw.get("tp") is None else "parallel.pp"
        raise ConfigError(f.path, missing, f"a value: tp/pp are not published and cannot be set by "
                          f"default (tp x pp must be {num_gpus / (dp * cp):g})", None)
    vps = virtual_stages_default(f, stack, notes, None if num_layers is None else -(-num_layers // pp))
    schedule = f.enum("schedule", ScheduleKind, notes, ScheduleKind.INTERLEAVED if vps > 1 else
                      ScheduleKind.ONE_F_ONE_B, f"virtual_pipeline_stages={vps}")
    if schedule is ScheduleKind.ONE_F_ONE_B and vps > 1 and pp > 1:
        # "1F1B" with chunks: Megatron-Core's get_forward_backward_func interleaves whenever a
        # virtual pipeline size is set
        notes.append(f"parallel.schedule: 1f1b -> interleaved-1f1b (virtual_pipeline_stages={vps}: Megatron-LM "
                     "runs its interleaved 1F1B whenever a stage holds more than one chunk, "
                     "megatron/core/pipeline_parallel/schedules.py get_forward_backward_func)")
        schedule = ScheduleKind.INTERLEAVED
    mbs, gbs = batch_sizes(f, dp, pp, stack, notes, schedule is ScheduleKind.INTERLEAVED)
    tp_overlap = tp_overlap_default(f, tp, stack, notes)
    tp_overlap_cfg = tp_overlap_cfg_default(f, stack, tp_overlap and tp > 1, notes)
    recompute = recompute_default(f, stack, notes)
    recompute_layers = f.integer("recompute_num_layers", positive=True)
    recompute_modules = _recompute_modules(f)
    layout = f.raw.get("pipeline_layout")
    if layout is not None and not (isinstance(layout, list) and all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in layout)):
        raise ConfigError(f.path, f.field("pipeline_layout"), "a list of decoder-layer counts >= 0, one a virtual "
                          "pipeline stage (null: an even split)", layout)
    zero, bucket = f.integer("zero_stage"), f.integer("grad_bucket_size_params")
    placement = _placement(f)
    cp_comm, cp_levels = _cp_comm(f, cp, notes, stack)
    # the defaults in the order their notes are listed
    sp = sp_default(f, tp, stack, notes, tp_overlap, moe)
    dist_opt = dist_opt_default(f, stack, notes)
    param_gather = param_gather_default(f, stack, dist_opt, notes)
    zero = zero_default(stack, notes, f) if zero is None else zero
    overlap = overlap_default(f, stack, notes)
    p2p_overlap = p2p_overlap_default(f, framework, schedule, stack, notes)
    # each noted only where it decides what runs (pipeline stages; for the first, TP > 1 without SP)
    scatter_gather = scatter_gather_default(f, framework, stack, notes, noted=pp > 1 and tp > 1 and not sp)
    blocking = blocking_p2p_default(f, schedule, stack, notes, noted=pp > 1)
    flash = flash_default(f, stack, notes)
    kernel = attention_kernel_default(f, stack, notes)
    loss = loss_default(f, stack, notes)
    fused = fused_elementwise_default(f, stack, notes)
    dp_shard = dp_shard_default(f, dp, cp, max(zero, int(dist_opt)), stack, notes)
    grad_fusion = grad_accum_fusion_default(f, framework, stack, notes)
    grad_fp32 = grad_reduce_default(f, stack, notes)
    deterministic = deterministic_default(f, framework, notes)
    async_ar = async_tp_allreduce_default(f, framework, stack, notes)
    bias_kernels = unfused_bias_default(f, stack, notes)
    adam = adam_impl_default(f, stack, notes)
    step_passes = step_passes_default(f, stack, notes)
    remainders = remainders_default(f, stack, notes)
    quantized_inputs = quantized_inputs_default(f, stack, notes)
    te_quantizer = te_quantizer_default(f, stack, notes)
    expert_streams = expert_gemm_streams_default(f, moe, stack, notes)
    zero_impl = zero_impl_default(f, zero, stack, notes)
    pipeline_buffers = pipeline_buffers_default(f, pp, stack, notes)
    fsdp_copies = fsdp_copies_default(f, zero, zero_impl, stack, notes)
    rope_impl = rope_impl_default(f, fused, stack, notes)
    split = split_projections_default(f, stack, notes)
    kernels = KernelsSpec(
        flash_attention=flash, attention_kernel=kernel, cross_entropy=loss, fused_elementwise=fused,
        gradient_accumulation_fusion=grad_fusion, grad_reduce_in_fp32=grad_fp32, deterministic=deterministic,
        async_tp_grad_allreduce=async_ar, unfused_linear_bias=bias_kernels, adam_impl=adam,
        step_passes=step_passes, master_param_remainders=remainders, quantized_saved_inputs=quantized_inputs,
        te_quantizer=te_quantizer, expert_gemm_streams=expert_streams, pipeline_buffers=pipeline_buffers,
        fsdp_copies=fsdp_copies, rope_impl=rope_impl, split_projections=split)
    with located(f.path):
        return ParallelSpec(
            tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, virtual_pipeline_stages=vps, schedule=schedule,
            sequence_parallel=sp, micro_batch_size=mbs, global_batch_size=gbs, recompute=recompute,
            recompute_num_layers=recompute_layers, recompute_modules=recompute_modules,
            pipeline_layout=None if layout is None else tuple(layout),
            distributed_optimizer=dist_opt, overlap_param_gather=param_gather, zero_stage=zero,
            dp_shard=dp_shard, zero_impl=zero_impl, overlap_grad_reduce=overlap, overlap_p2p_comm=p2p_overlap,
            pipeline_scatter_gather=scatter_gather, blocking_p2p=blocking,
            grad_bucket_size_params=40_000_000 if bucket is None else bucket,
            tp_comm_overlap=tp_overlap, tp_comm_overlap_cfg=tp_overlap_cfg,
            placement=placement,
            cp_comm_type=cp_comm,
            hierarchical_context_parallel_sizes=cp_levels,
            moe_dispatcher=_moe_dispatcher(f, ep, notes),
            ep_overlap=ep_overlap_default(f, ep, notes),
            delay_wgrad=delay_wgrad_default(f, notes),
        ), kernels


def _recompute_modules(f: Fields) -> frozenset[RecomputeModule]:
    """``parallel.recompute_modules``: a list of :class:`~sim.types.RecomputeModule` names
    (Megatron-Core's ``--recompute-modules``), null for its default, ``[core_attn]``."""
    value = f.raw.get("recompute_modules")
    if value is None:
        return DEFAULT_RECOMPUTE_MODULES
    names = [k.value for k in RecomputeModule]
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ConfigError(f.path, f.field("recompute_modules"), f"a list of modules among {names} ([] for none)",
                          value)
    unmodelled = [v for v in value if v in UNMODELLED_RECOMPUTE_MODULES]
    if unmodelled:
        raise ConfigError(f.path, f.field("recompute_modules"), f"modules among {names} (llmsim does not model "
                          f"Megatron-Core's {', '.join(UNMODELLED_RECOMPUTE_MODULES)}: the whole MoE layer "
                          "recomputed with its all-to-alls, and the experimental ones)", unmodelled[0])
    return frozenset(parse_enum(RecomputeModule, v, f.path, f.field("recompute_modules")) for v in value)


class SettingsFields(Fields):
    """A case's ``parallel`` and ``kernels`` sections read as one mapping.

    The kernel switches (:data:`~sim.workload.kernels.KERNEL_KEYS`) may stand in either
    section: ``kernels:`` is their own, and ``parallel:`` keeps the spelling of the published
    validation cases (``parallel.flash_attention``). A switch given (not null) in both is a
    ConfigError naming both. A field is named by the section that gives it; a null switch, in
    the notes on its default, by ``kernels`` when the case has that section, else by
    ``parallel``.
    """

    def __init__(self, parallel: Fields, kernels: Fields, has_kernels: bool) -> None:
        both = [k for k in KERNEL_KEYS if kernels.raw.get(k) is not None and parallel.raw.get(k) is not None]
        if both:
            key = both[0]
            raise ConfigError(parallel.path, f"kernels.{key}", f"the switch in one place: kernels.{key} or "
                              f"parallel.{key} (the published cases' spelling), not both",
                              Described(f"parallel.{key}: {excerpt(parallel.raw[key])} and kernels.{key}: "
                                        f"{excerpt(kernels.raw[key])}"))
        given = {k: v for k, v in kernels.raw.items() if v is not None}
        super().__init__({**parallel.raw, **given}, parallel.path, "parallel", _PARALLEL_KEYS)
        self.in_kernels = frozenset(given)
        self.in_parallel = frozenset(k for k in KERNEL_KEYS if parallel.raw.get(k) is not None)
        self.has_kernels = has_kernels

    def field(self, key: str) -> str:
        if key in self.in_kernels or (key in KERNEL_KEYS and key not in self.in_parallel and self.has_kernels):
            return f"kernels.{key}"
        return super().field(key)

    @contextmanager
    def naming_kernels(self) -> Iterator[None]:
        """Re-raise a spec's ConfigError on a kernel switch (``kernels.X``) naming the section
        the case gave it in."""
        try:
            yield
        except ConfigError as exc:
            section, _, key = exc.field.partition(".")
            if section != "kernels" or key not in KERNEL_KEYS:
                raise
            raise ConfigError(exc.path, self.field(key), exc.expected, exc.got) from None


def _cp_comm(f: Fields, cp: int, notes: Notes, stack: Stack) -> tuple[CpCommType, tuple[int, ...] | None]:
    """``parallel.cp_comm_type`` (Megatron-LM's ``--cp-comm-type``: ``p2p``, ``all_gather``,
    ``a2a`` or ``a2a+p2p``, or ``torch``, PyTorch's ``context_parallel``; null is the stack's
    ``cp_comm_type``, noted when ``cp > 1``: torchtitan's ``torch``, Megatron-LM's default ring
    attention) and ``parallel.hierarchical_context_parallel_sizes`` (a list ``[a2a, p2p]``, or
    null)."""
    if f.raw.get("cp_comm_type") is None and cp == 1:
        kind = CpCommType.P2P
    else:
        kind = f.enum("cp_comm_type", CpCommType, notes, stack.value("cp_comm_type"), stack.why("cp_comm_type"))
    sizes = f.raw.get("hierarchical_context_parallel_sizes")
    if sizes is None:
        return kind, None
    if not isinstance(sizes, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in sizes):
        raise f.error("hierarchical_context_parallel_sizes", "a list of two integers [a2a size, p2p size]", sizes)
    return kind, tuple(sizes)


def _moe_dispatcher(f: Fields, ep: int, notes: Notes) -> MoeDispatcher:
    """``parallel.moe_dispatcher`` (``alltoall``, ``deepep`` or ``hybridep``); null is
    Megatron-Core's all-to-all dispatcher, noted when there is an EP exchange (``ep > 1``):
    which dispatcher a recipe runs is set per model and GPU (Megatron-Bridge's perf configs
    choose HybridEP for some, the all-to-all for others), not by a release."""
    if f.raw.get("moe_dispatcher") is None and ep == 1:
        return MoeDispatcher.ALLTOALL
    return f.enum("moe_dispatcher", MoeDispatcher, notes, MoeDispatcher.ALLTOALL,
                  "Megatron-Core's all-to-all token dispatcher: one NCCL all-to-all of a copy per token and "
                  "chosen expert; recipes choose DeepEP or HybridEP per model and GPU, so it is no default of "
                  "a release")


def _placement(f: Fields) -> str | tuple[int, ...]:
    """``parallel.placement`` as read: an order string, or a list as a tuple (the spec checks
    the tokens and the permutation)."""
    value = f.raw.get("placement")
    if value is None:
        return MEGATRON_ORDER
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return tuple(value)
    raise f.error("placement", f"an order such as '{MEGATRON_ORDER}' (innermost first) or a list of "
                  "GPU indices, one per rank", value)


def _gpu(f: Fields) -> GPUSpec:
    if f.raw.get("gpu") is None and not f.raw:
        raise ConfigError(f.path, "system", "a mapping with gpu and num_gpus", None)
    name = f.text("gpu", required=True)
    try:
        return get_gpu(name)
    except KeyError:
        raise f.error("gpu", f"one of {gpu_names()}", name) from None


def _build_system(f: Fields, gpu: GPUSpec, num_gpus: int, base: Path, notes: Notes, stack: Stack) -> SystemSpec:
    per_node = f.integer("gpus_per_node")
    if per_node is None:
        per_node = notes.fill("system.gpus_per_node", 4, "an NVL72 compute tray") \
            if gpu.name in _NVL72_GPUS else notes.fill("system.gpus_per_node", 8, "a DGX/HGX node")
    topology = f.text("topology")
    if topology is not None:
        if (base / topology).is_file():
            topology = str(base / topology)
        elif not Path(topology).is_file() and \
                topology.removesuffix(".yaml") not in preset_names("topologies"):
            raise f.error("topology", f"a topology file or one of the presets "
                          f"{preset_names('topologies')}", topology)
    gpu = _power_limited(f, gpu)
    network = _network(f, per_node)
    segments = f.flag("nvlink_segments")
    if segments is None:
        segments = stack.value("nvlink_segments")  # noted where it changes a topology (sim.topology.choice)
    with located(f.path):
        return SystemSpec(gpu=gpu, num_gpus=num_gpus, gpus_per_node=per_node, topology=topology, network=network,
                          nvlink_segments=segments)


def _cudnn_release(system: SystemSpec, kernels: KernelsSpec, stack: Stack, notes: Notes) -> SystemSpec:
    """``system`` with its GPU's cuDNN attention curves of the stack's ``cudnn_release``
    (:func:`sim.attention_releases.with_cudnn_release`), where its attention is cuDNN's fused
    kernel; noted."""
    if not (kernels.flash_attention and kernels.attention_kernel is AttentionKernel.VENDOR):
        return system
    gpu, note = with_cudnn_release(system.gpu, stack.value("cudnn_release"))
    if note is None:
        return system
    notes.append(f"{note} ({stack.why('cudnn_release')})")
    return dataclasses.replace(system, gpu=gpu)


def _network(system: Fields, gpus_per_node: int) -> NetworkSpec | None:
    """``system.network``: ``{nics_per_node, nic_bandwidth_Gbps, fabric}`` and, where published,
    ``node_bandwidth_Gbps``, ``pod_gpus`` and ``between_pods_oversubscription``
    (workloads/validation/README.md); null: not published. A field left null keeps the
    topology's value (:func:`sim.topology.network.apply_network`)."""
    raw = system.raw.get("network")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise system.error("network", f"a mapping of {list(_NETWORK_KEYS)}, or null", raw)
    f = Fields(raw, system.path, system.field("network"), _NETWORK_KEYS)
    bandwidth = {}
    for key in ("nic_bandwidth_Gbps", "node_bandwidth_Gbps"):
        # the bounds a topology file's bandwidths take (sim.config.topology.MIN_BANDWIDTH)
        value = f.quantity(key, f"a bandwidth in Gb/s from {MIN_BANDWIDTH:g} to {MAX_BANDWIDTH:g}",
                           low=MIN_BANDWIDTH, high=MAX_BANDWIDTH)
        bandwidth[key] = None if value is None else value * GBIT_PER_S
    over = f.quantity("between_pods_oversubscription",
                      f"a ratio from 1 (non-blocking) to {MAX_OVERSUBSCRIPTION:g}", low=1.0, high=MAX_OVERSUBSCRIPTION)
    pod = f.integer("pod_gpus", positive=True)
    if pod is not None and pod % gpus_per_node:
        raise f.error("pod_gpus", f"a multiple of system.gpus_per_node={gpus_per_node} (whole nodes per pod)", pod)
    fabric = f.raw.get("fabric")
    with located(f.path):
        return NetworkSpec(
            fabric=None if fabric is None else parse_enum(NetworkFabric, fabric, f.path, f.field("fabric")),
            nics_per_node=f.integer("nics_per_node", positive=True),
            nic_bandwidth_bytes_per_s=bandwidth["nic_bandwidth_Gbps"],
            node_bandwidth_bytes_per_s=bandwidth["node_bandwidth_Gbps"], pod_gpus=pod,
            between_pods_oversubscription=over)


def _power_limited(f: Fields, gpu: GPUSpec) -> GPUSpec:
    """``gpu`` under the case's ``system.power_limit_w`` (:func:`sim.hardware.power_limited`)."""
    limit = f.number("power_limit_w")
    if limit is None:
        return gpu
    try:
        return power_limited(gpu, limit)
    except ValueError as exc:
        raise f.error("power_limit_w", str(exc), f"{limit:g} W on {gpu.name}") from None


def _build_reference(targets: Mapping[str, float], includes_recompute: bool | None, source: str) -> Reference | None:
    """The report's reference from a case's targets as :func:`_case_targets` reads them (None when
    none of its metrics is given)."""
    if not any(k in targets for k in _REFERENCE_METRICS) and includes_recompute is None:
        return None
    memory = targets.get("peak_memory_gib")
    return Reference(source=source, iteration_time_s=targets.get("iteration_time_s"),
                     tflops_per_gpu=targets.get("tflops_per_gpu"), tflops_includes_recompute=includes_recompute,
                     tokens_per_s_per_gpu=targets.get("tokens_per_s_per_gpu"),
                     peak_memory_bytes=None if memory is None else memory * GiB)


_REFERENCE_METRICS = ("iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "peak_memory_gib")
"""The targets a run's report compares itself with."""

