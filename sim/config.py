"""YAML in, specs out: the one place llmsim reads workload and topology files.

A workload file has the format of the published validation cases (``workloads/validation/
README.md``): a mapping with ``model``, ``system``, ``parallel``, ``dtype`` and ``targets``, or a
list of such cases. Where a case leaves a setting null, the loader fills it the way Megatron-LM
would and records a note saying so (:func:`load_workload_with_notes`). A topology file gives its
numbers in human units named in the keys (``bandwidth_GBps``, ``latency_us``), converted here
to SI. Every bad input raises :class:`~sim.errors.ConfigError` naming the file and the field.

>>> spec = load_workload("tiny")
>>> spec.parallel.tp, spec.parallel.num_microbatches
(2, 4)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml

import sim
from sim.errors import ConfigError
from sim.hardware import EfficiencyCurve, GPUSpec, get_gpu, gpu_names
from sim.hf import read_hf_config
from sim.topology.spec import (FabricKind, LinkSpec, ScaleOutSpec, ScaleUpKind, ScaleUpSpec,
                               TopologySpec)
from sim.types import Dtype, RecomputeKind, ScheduleKind, parse_enum
from sim.units import GBIT_PER_S, GBPS, GiB, US
from sim.workload.spec import ModelSpec, ParallelSpec, Reference, SystemSpec, WorkloadSpec

__all__ = ["load_workload", "load_workload_with_notes", "load_cases", "load_case_records", "CaseRecord",
           "load_topology", "default_topology_name"]

DEFAULT_WORKLOAD = "gpt3-175b"
_SET = "<--set>"
_TOP_KEYS = ("id", "name", "description", "source", "model", "system", "parallel", "dtype",
             "precision_as_published", "framework", "measured", "targets", "flop_formula",
             "derived_fields", "config_complete", "notes")
_MODEL_KEYS = ("name", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
               "ffn_hidden_size", "vocab_size", "seq_length", "gated_mlp", "tied_embeddings",
               "head_dim", "activation", "normalization", "position_embedding", "arch_source",
               "hf_config")
_PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "ep", "virtual_pipeline_stages", "schedule",
                  "sequence_parallel", "micro_batch_size", "global_batch_size", "recompute",
                  "distributed_optimizer", "zero_stage", "overlap_grad_reduce",
                  "grad_bucket_size_params", "flash_attention", "details")
_SYSTEM_KEYS = ("gpu", "num_gpus", "gpus_per_node", "topology", "intra_node", "inter_node",
                "description")
_WORKLOAD_SETTABLE = ({"model": _MODEL_KEYS, "parallel": _PARALLEL_KEYS, "system": _SYSTEM_KEYS},
                      ("name", "id", "dtype"))
_TOPO_KEYS = ("name", "description", "gpu", "gpus_per_node", "num_gpus", "scale_up", "scale_out",
              "sources")
_EFF_KEYS = ("efficiency", "efficiency_by_size_bytes")
_UP_KEYS = ("kind", "domain_size", "bandwidth_GBps", "latency_us") + _EFF_KEYS
_OUT_KEYS = ("kind", "nics_per_node", "nic_bandwidth_Gbps", "latency_us", "nodes_per_leaf",
             "switch_latency_us", "oversubscription", "pcie") + _EFF_KEYS
_PCIE_KEYS = ("bandwidth_GBps", "latency_us") + _EFF_KEYS
_TOPO_SETTABLE = ({"scale_up": _UP_KEYS, "scale_out": _OUT_KEYS}, _TOPO_KEYS[:5])
_GATED = frozenset({"swiglu", "silu", "swish", "geglu"})
_DEFAULT_TOPOLOGY = {"A100-SXM4-80GB": "dgx-a100", "H100-SXM5-80GB": "dgx-h100",
                     "H100-SXM5-96GB-HBM2e": "dgx-h100", "H200": "dgx-h100", "B200": "dgx-b200",
                     "GB200": "gb200-nvl72", "GB300": "gb200-nvl72"}
_NVL72_GPUS = ("GB200", "GB300")
_REQUIRED = "(required: null or missing means not published, and there is no default)"


class _Fields:
    """Typed reads from one YAML mapping; errors name the file and the dotted field."""

    def __init__(self, raw: object, path: str, prefix: str, valid: Sequence[str]) -> None:
        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise ConfigError(path, prefix or "<top level>", "a mapping", raw)
        for key in raw:
            if key not in valid:
                raise ConfigError(path, f"{prefix}.{key}" if prefix else str(key),
                                  f"one of the keys {sorted(valid)}", key)
        self.raw, self.path, self.prefix = raw, path, prefix

    def field(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        return ConfigError(self.path, self.field(key), expected, got)

    def _get(self, key: str, ok: Callable[[object], bool], what: str, required: bool) -> object:
        value = self.raw.get(key)
        if value is None and required:
            raise self.error(key, f"{what} {_REQUIRED}", None)
        if value is not None and not ok(value):
            raise self.error(key, what, value)
        return value

    def integer(self, key: str, *, required: bool = False, positive: bool = False) -> int | None:
        value = self._get(key, _is_int, "a positive integer" if positive else "an integer", required)
        if positive and value is not None and value < 1:
            raise self.error(key, "a positive integer", value)
        return value

    def number(self, key: str, *, required: bool = False) -> float | None:
        value = self._get(key, _is_number, "a number", required)
        return None if value is None else float(value)

    def flag(self, key: str) -> bool | None:
        return self._get(key, lambda v: isinstance(v, bool), "true or false", False)

    def text(self, key: str, *, required: bool = False) -> str | None:
        return self._get(key, lambda v: isinstance(v, str), "a string", required)

    def enum(self, key: str, kind: type, notes: _Notes, default: object, why: str) -> object:
        value = self.raw.get(key)
        if value is None:
            return notes.fill(self.field(key), default, why)
        return parse_enum(kind, value, self.path, self.field(key))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Notes(list):
    """The defaults a load filled in, as human-readable lines."""

    def fill(self, field: str, value: object, why: str) -> object:
        shown = str(value).lower() if isinstance(value, bool) else getattr(value, "value", value)
        self.append(f"{field}: null -> {shown} ({why})")
        return value


@contextmanager
def _located(path: str) -> Iterator[None]:
    """Re-raise a spec's own ConfigError (file ``<spec>``) with the real file path."""
    try:
        yield
    except ConfigError as exc:
        if exc.path != "<spec>":
            raise
        raise ConfigError(path, exc.field, exc.expected, exc.got) from None


# --- files, presets, overrides ----------------------------------------------------------------


def _repo_folder(kind: str) -> Path:
    return Path(sim.__file__).resolve().parent.parent / kind


def _presets(kind: str) -> list[str]:
    return sorted(p.stem for p in _repo_folder(kind).glob("*.yaml"))


def _resolve(path_or_name: str, kind: str) -> Path:
    path_or_name = str(path_or_name)
    given = Path(path_or_name)
    if given.is_file():
        return given
    folder = _repo_folder(kind)
    for candidate in (folder / path_or_name, folder / f"{path_or_name}.yaml"):
        if candidate.is_file():
            return candidate
    raise ConfigError(path_or_name, "<file>",
                      f"an existing file or a preset in {folder}: {_presets(kind)}", path_or_name)


def _read_yaml(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "<file>", "a readable YAML file", str(exc)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else "?"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), f"line {line}", "valid YAML", problem) from None


def _apply_overrides(raw: Mapping, overrides: Sequence[str],
                     settable: tuple[dict[str, Sequence[str]], Sequence[str]]) -> dict:
    """Apply ``KEY=VALUE`` items (VALUE read as YAML) to a copy of ``raw``."""
    sections, top = settable
    out = copy.deepcopy(dict(raw))
    for item in overrides:
        key, sep, text = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(_SET, str(item), "KEY=VALUE, e.g. parallel.tp=4", item)
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(_SET, key, "a YAML value", text) from None
        section, dot, name = key.partition(".")
        if not dot:
            if key not in top:
                raise ConfigError(_SET, key, f"SECTION.FIELD with SECTION in {sorted(sections)}, "
                                  f"or one of {sorted(top)}", key)
            out[key] = value
            continue
        if section not in sections:
            raise ConfigError(_SET, key, f"a section among {sorted(sections)}", section)
        if name not in sections[section]:
            raise ConfigError(_SET, key, f"a field of {section}: {sorted(sections[section])}", name)
        current = out.get(section)
        if section == "model" and isinstance(current, str):
            current = {"hf_config": current}
        if current is not None and not isinstance(current, Mapping):
            raise ConfigError(_SET, key, f"a file whose {section} is a mapping", current)
        out[section] = {**(current or {}), name: value}
    return out


# --- workloads -------------------------------------------------------------------------------


def _cases_in(path: Path) -> list[object]:
    raw = _read_yaml(path)
    if isinstance(raw, Mapping):
        return [raw]
    if isinstance(raw, list):
        return raw
    raise ConfigError(str(path), "<top level>", "a mapping (one case) or a list of cases",
                      type(raw).__name__)


def load_workload(path: str | None = None, overrides: Sequence[str] = ()) -> WorkloadSpec:
    """Load one workload; see :func:`load_workload_with_notes`, whose notes this drops."""
    return load_workload_with_notes(path, overrides)[0]


def load_workload_with_notes(path: str | None = None,
                             overrides: Sequence[str] = ()) -> tuple[WorkloadSpec, list[str]]:
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

    Returns
    -------
    (WorkloadSpec, list of str)
        The spec and notes such as ``"parallel.recompute: null -> none (...)"``.

    Raises
    ------
    ConfigError
        For any malformed input, naming the file (``<--set>`` for a bad override) and field.
    """
    file = _resolve(path or DEFAULT_WORKLOAD, "workloads")
    cases = _cases_in(file)
    if len(cases) != 1:
        raise ConfigError(str(file), "<top level>", "one case (use load_cases for a list)",
                          f"a list of {len(cases)} cases")
    raw = _Fields(cases[0], str(file), "", _TOP_KEYS).raw
    return _build_workload(_apply_overrides(raw, overrides, _WORKLOAD_SETTABLE), file)


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
    file = _resolve(path, "workloads")
    out: list[tuple[str, WorkloadSpec | ConfigError]] = []
    for i, case in enumerate(_cases_in(file)):
        case_id = case.get("id") if isinstance(case, Mapping) else None
        case_id = case_id if isinstance(case_id, str) else f"{file.stem}[{i}]"
        try:
            raw = _Fields(case, str(file), "", _TOP_KEYS).raw
            out.append((case_id, _build_workload(_apply_overrides(raw, overrides, _WORKLOAD_SETTABLE),
                                                 file)[0]))
        except ConfigError as exc:
            out.append((case_id, exc))
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


_TARGET_METRICS = ("iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "peak_memory_gib",
                   "layer_forward_ms", "layer_backward_ms")


def load_case_records(path: str) -> list[CaseRecord]:
    """Every case of a validation-case file with its targets, for ``llmsim validate``."""
    file = _resolve(path, "workloads")
    out: list[CaseRecord] = []
    for i, case in enumerate(_cases_in(file)):
        mapping = case if isinstance(case, Mapping) else {}
        case_id = mapping.get("id") if isinstance(mapping.get("id"), str) else f"{file.stem}[{i}]"
        raw_targets = mapping.get("targets") if isinstance(mapping.get("targets"), Mapping) else {}
        targets, recompute_flag = {}, None
        for metric in _TARGET_METRICS:
            t = raw_targets.get(metric)
            if isinstance(t, Mapping) and _is_number(t.get("value")):
                targets[metric] = float(t["value"])
                if metric == "tflops_per_gpu" and isinstance(t.get("includes_recompute"), bool):
                    recompute_flag = t["includes_recompute"]
        complete = mapping.get("config_complete") is True
        try:
            raw = _Fields(case, str(file), "", _TOP_KEYS).raw
            spec, notes = _build_workload(raw, file)
            out.append(CaseRecord(case_id, str(file), spec, None, tuple(notes), targets, recompute_flag, complete))
        except ConfigError as exc:
            out.append(CaseRecord(case_id, str(file), None, exc, (), targets, recompute_flag, complete))
    return out


def _build_workload(raw: Mapping, file: Path) -> tuple[WorkloadSpec, list[str]]:
    path, notes = str(file), _Notes()
    top = _Fields(raw, path, "", _TOP_KEYS)
    case_id = top.text("id")
    name = top.text("name") or case_id or file.stem
    framework = raw.get("framework") if isinstance(raw.get("framework"), str) else ""
    model = _build_model(raw.get("model"), path, file.parent, framework, notes, name)
    system_f = _Fields(raw.get("system"), path, "system", _SYSTEM_KEYS)
    gpu = _gpu(system_f)
    num_gpus = system_f.integer("num_gpus")
    parallel = _build_parallel(_Fields(raw.get("parallel"), path, "parallel", _PARALLEL_KEYS),
                               num_gpus, framework, notes)
    if num_gpus is None:
        num_gpus = notes.fill("system.num_gpus", parallel.num_gpus, "tp x pp x dp x cp")
    system = _build_system(system_f, gpu, num_gpus, file.parent, notes)
    dtype = top.enum("dtype", Dtype, notes, Dtype.BF16, "bf16 mixed precision")
    source = raw.get("source")
    source = source.get("publication") if isinstance(source, Mapping) else source
    source = source if isinstance(source, str) else case_id or file.name
    reference = _build_reference(raw.get("targets"), path, source)
    chunks = parallel.pp * parallel.virtual_pipeline_stages
    if model.num_layers % chunks:
        raise ConfigError(path, "model.num_layers", f"a multiple of parallel.pp x parallel."
                          f"virtual_pipeline_stages = {chunks} (uneven pipeline stages are not "
                          "built yet)", model.num_layers)
    with _located(path):
        spec = WorkloadSpec(name=name, model=model, parallel=parallel, system=system, dtype=dtype,
                            reference=reference)
    return spec, list(notes)


def _build_model(raw: object, path: str, base: Path, framework: str, notes: _Notes,
                 default_name: str) -> ModelSpec:
    if raw is None:
        raise ConfigError(path, "model", "a mapping of model dimensions, or a Hugging Face "
                          "config.json path", None)
    if isinstance(raw, str):
        raw = {"hf_config": raw}
    f = _Fields(raw, path, "model", _MODEL_KEYS)
    merged = dict(f.raw)
    hf_path = f.text("hf_config")
    if hf_path is not None:
        hf_file = base / hf_path
        if not hf_file.is_file():
            raise f.error("hf_config", "an existing Hugging Face config.json (relative to the "
                          "workload file's folder)", str(hf_file))
        merged = {**read_hf_config(hf_file), **{k: v for k, v in f.raw.items() if v is not None}}
    f = _Fields(merged, path, "model", _MODEL_KEYS)
    heads = f.integer("num_attention_heads", required=True)
    hidden = f.integer("hidden_size", required=True)
    kv = f.integer("num_kv_heads")
    ffn = f.integer("ffn_hidden_size")
    seq = f.integer("seq_length")
    if seq is None and "torchtitan" in framework.lower():
        seq = notes.fill("model.seq_length", 8192, "torchtitan Llama 3 train configs' seq_len")
    gated, activation = f.flag("gated_mlp"), f.text("activation")
    if gated is None:
        gated = notes.fill("model.gated_mlp", (activation or "").lower() in _GATED,
                           f"from activation {activation}" if activation else
                           "Megatron-LM default: GeLU MLP, not gated")
    tied = f.flag("tied_embeddings")
    with _located(path):
        return ModelSpec(
            name=f.text("name") or default_name,
            num_layers=f.integer("num_layers", required=True),
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=notes.fill("model.num_kv_heads", heads, "= heads: multi-head attention")
            if kv is None else kv,
            ffn_hidden_size=notes.fill("model.ffn_hidden_size", 4 * hidden, "4 x hidden_size, the "
                                       "GPT / Megatron-LM default") if ffn is None else ffn,
            vocab_size=f.integer("vocab_size", required=True),
            seq_length=f.integer("seq_length", required=True) if seq is None else seq,
            gated_mlp=gated,
            tied_embeddings=notes.fill("model.tied_embeddings", False, "assumed untied: output "
                                       "layer counted apart") if tied is None else tied,
            head_dim=f.integer("head_dim") or 0,
        )


def _build_parallel(f: _Fields, num_gpus: int | None, framework: str,
                    notes: _Notes) -> ParallelSpec:
    tp_pp = {k: f.integer(k) for k in ("tp", "pp")}
    for key in [k for k, v in tp_pp.items() if v is None]:
        tp_pp[key] = notes.fill(f"parallel.{key}", 1, "Megatron-LM default")
    tp, pp = tp_pp["tp"], tp_pp["pp"]
    cp, ep = (1 if f.integer(k) is None else f.integer(k) for k in ("cp", "ep"))
    dp = f.integer("dp")
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
    vps = f.integer("virtual_pipeline_stages")
    vps = notes.fill("parallel.virtual_pipeline_stages", 1, "no interleaving") if vps is None else vps
    schedule = f.enum("schedule", ScheduleKind, notes, ScheduleKind.INTERLEAVED if vps > 1 else
                      ScheduleKind.ONE_F_ONE_B, f"virtual_pipeline_stages={vps}")
    mbs, gbs = _batch_sizes(f, dp, pp, framework, notes)
    recompute = f.enum("recompute", RecomputeKind, notes, RecomputeKind.NONE,
                       "Megatron-LM default: no recomputation")
    zero, bucket = f.integer("zero_stage"), f.integer("grad_bucket_size_params")
    with _located(f.path):
        return ParallelSpec(
            tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, virtual_pipeline_stages=vps, schedule=schedule,
            sequence_parallel=_sp_default(f, tp, framework, notes),
            micro_batch_size=mbs, global_batch_size=gbs, recompute=recompute,
            distributed_optimizer=_flag_default(f, "distributed_optimizer", notes, "off by default"),
            zero_stage=_zero_default(framework, notes) if zero is None else zero,
            overlap_grad_reduce=_overlap_default(f, framework, notes),
            grad_bucket_size_params=40_000_000 if bucket is None else bucket,
            flash_attention=_flash_default(f, framework, notes),
        )


def _sp_default(f: _Fields, tp: int, framework: str, notes: _Notes) -> bool:
    """Sequence parallelism when a case leaves it null: torchtitan's tensor-parallel plan
    always shards norms along the sequence (``SequenceParallel`` in parallelize_llama.py);
    Megatron-LM only with ``--sequence-parallel``."""
    flag = f.flag("sequence_parallel")
    if flag is not None:
        return flag
    if "torchtitan" in framework.lower() and tp > 1:
        return notes.fill("parallel.sequence_parallel", True, "torchtitan's TP plan uses SequenceParallel")
    return notes.fill("parallel.sequence_parallel", False, "off by default")


def _zero_default(framework: str, notes: _Notes) -> int:
    """ZeRO stage when a case leaves it null: torchtitan shards parameters, gradients and
    optimizer state over its data-parallel ranks with FSDP2 by default (ZeRO-3); Megatron-LM
    shards nothing unless told to."""
    if "torchtitan" in framework.lower():
        return notes.fill("parallel.zero_stage", 3, "torchtitan default: FSDP2 full sharding")
    return notes.fill("parallel.zero_stage", 0, "no ZeRO sharding")


def _framework_year(framework: str) -> int | None:
    years = [int(y) for y in re.findall(r"\b(20\d\d)\b", framework)]
    return max(years) if years else None


def _overlap_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """Whether the data-parallel gradient reduction overlaps the backward pass. Megatron-LM's
    2021-2022 ``--DDP-impl local`` all-reduced the gradients after the backward pass;
    ``--overlap-grad-reduce`` (bucketed, during the backward) came with Megatron-Core's
    DistributedDataParallel in 2023. Later frameworks overlap by default in their recipes."""
    flag = f.flag("overlap_grad_reduce")
    if flag is not None:
        return flag
    year = _framework_year(framework)
    if year is not None and year <= 2022:
        return notes.fill("parallel.overlap_grad_reduce", False,
                          f"framework '{framework}': gradients all-reduced after the backward (--DDP-impl local)")
    return True


def _flash_default(f: _Fields, framework: str, notes: _Notes) -> bool:
    """FlashAttention unless the producing framework predates it: Megatron-LM gained
    ``--use-flash-attn`` in 2023, so a framework dated 2022 or earlier ran unfused attention."""
    flag = f.flag("flash_attention")
    if flag is not None:
        return flag
    year = _framework_year(framework)
    if year is not None and year <= 2022:
        return notes.fill("parallel.flash_attention", False,
                          f"framework '{framework}' predates FlashAttention in Megatron-LM (2023)")
    return True


def _flag_default(f: _Fields, key: str, notes: _Notes, why: str) -> bool:
    value = f.flag(key)
    return notes.fill(f.field(key), False, why) if value is None else value


def _batch_sizes(f: _Fields, dp: int, pp: int, framework: str, notes: _Notes) -> tuple[int, int]:
    mbs, gbs = f.integer("micro_batch_size"), f.integer("global_batch_size")
    if mbs is None:
        if "torchtitan" in framework.lower() and pp == 1 and gbs and gbs % dp == 0:
            mbs = notes.fill("parallel.micro_batch_size", gbs // dp, "torchtitan: local batch = "
                             "global / dp, no gradient accumulation")
        else:
            mbs = notes.fill("parallel.micro_batch_size", 1, "torchtitan's pipeline micro-batch "
                             "default" if "torchtitan" in framework.lower() else
                             "Megatron-LM sets none; 1 is the usual choice")
    if gbs is None:
        gbs = notes.fill("parallel.global_batch_size", mbs * dp, "Megatron-LM default: "
                         "micro_batch_size x dp, one micro-batch")
    return mbs, gbs


def _gpu(f: _Fields) -> GPUSpec:
    if f.raw.get("gpu") is None and not f.raw:
        raise ConfigError(f.path, "system", "a mapping with gpu and num_gpus", None)
    name = f.text("gpu", required=True)
    try:
        return get_gpu(name)
    except KeyError:
        raise f.error("gpu", f"one of {gpu_names()}", name) from None


def _build_system(f: _Fields, gpu: GPUSpec, num_gpus: int, base: Path, notes: _Notes) -> SystemSpec:
    per_node = f.integer("gpus_per_node")
    if per_node is None:
        per_node = notes.fill("system.gpus_per_node", 4, "an NVL72 compute tray") \
            if gpu.name in _NVL72_GPUS else notes.fill("system.gpus_per_node", 8, "a DGX/HGX node")
    topology = f.text("topology")
    if topology is not None:
        if (base / topology).is_file():
            topology = str(base / topology)
        elif not Path(topology).is_file() and \
                topology.removesuffix(".yaml") not in _presets("topologies"):
            raise f.error("topology", f"a topology file or one of the presets "
                          f"{_presets('topologies')}", topology)
    with _located(f.path):
        return SystemSpec(gpu=gpu, num_gpus=num_gpus, gpus_per_node=per_node, topology=topology)


def _build_reference(raw: object, path: str, source: str) -> Reference | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(path, "targets", "a mapping of target names to {value: ...}", raw)
    values: dict[str, object] = {}
    for key in ("iteration_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "peak_memory_gib"):
        entry = raw.get(key)
        entry = {"value": entry} if isinstance(entry, (int, float)) and not isinstance(entry, bool) \
            else entry
        f = _Fields(entry, path, f"targets.{key}", tuple(entry) if isinstance(entry, Mapping) else ())
        values[key] = f.number("value")
        if key == "tflops_per_gpu":
            values["tflops_includes_recompute"] = f.flag("includes_recompute")
    if all(v is None for v in values.values()):
        return None
    memory = values.pop("peak_memory_gib")
    return Reference(source=source, peak_memory_bytes=None if memory is None else memory * GiB,
                     **values)


# --- topologies ------------------------------------------------------------------------------


def default_topology_name(gpu_name: str) -> str:
    """The topology preset a GPU is usually deployed in.

    >>> default_topology_name("H200")
    'dgx-h100'
    """
    try:
        return _DEFAULT_TOPOLOGY[get_gpu(gpu_name).name]
    except KeyError:
        raise ConfigError("<gpu>", "system.gpu", f"one of {sorted(_DEFAULT_TOPOLOGY)}",
                          gpu_name) from None


def load_topology(path_or_name: str, overrides: Sequence[str] = ()) -> TopologySpec:
    """Load a topology file, or a preset of the repository's ``topologies/`` folder.

    Parameters
    ----------
    path_or_name : str
        A YAML file, or a preset name such as ``dgx-a100``.
    overrides : sequence of str
        ``KEY=VALUE`` items such as ``scale_up.bandwidth_GBps=600``.

    Raises
    ------
    ConfigError
        For any malformed input, naming the file and the field.

    >>> load_topology("dgx-a100").scale_up.link.bandwidth_bytes_per_s
    300000000000.0
    """
    file = _resolve(path_or_name, "topologies")
    path = str(file)
    raw = _Fields(_read_yaml(file), path, "", _TOPO_KEYS).raw
    f = _Fields(_apply_overrides(raw, overrides, _TOPO_SETTABLE), path, "", _TOPO_KEYS)
    up = _Fields(f.raw.get("scale_up"), path, "scale_up", _UP_KEYS)
    out = _Fields(f.raw.get("scale_out"), path, "scale_out", _OUT_KEYS)
    gpu = f.text("gpu")
    if gpu is not None:
        try:
            gpu = get_gpu(gpu).name
        except KeyError:
            raise f.error("gpu", f"one of {gpu_names()} or null", gpu) from None
    with _located(path):
        return TopologySpec(
            name=f.text("name") or file.stem,
            gpus_per_node=f.integer("gpus_per_node", required=True, positive=True),
            scale_up=ScaleUpSpec(kind=_kind(up, ScaleUpKind), link=_link(up, "bandwidth_GBps", GBPS),
                                 domain_size=up.integer("domain_size", required=True, positive=True)),
            scale_out=_scale_out(out), gpu=gpu, num_gpus=f.integer("num_gpus", positive=True),
            description=f.text("description") or "")


def _kind(f: _Fields, kind: type) -> object:
    return parse_enum(kind, f.text("kind", required=True), f.path, f.field("kind"))


def _scale_out(out: _Fields) -> ScaleOutSpec:
    switch_us, oversub = out.number("switch_latency_us") or 0.0, out.number("oversubscription")
    if not switch_us >= 0:
        raise out.error("switch_latency_us", "a non-negative latency", switch_us)
    if oversub is not None and not oversub >= 1:
        raise out.error("oversubscription", "a ratio >= 1 (1 is non-blocking)", oversub)
    pcie = out.raw.get("pcie")
    return ScaleOutSpec(
        kind=_kind(out, FabricKind), nic=_link(out, "nic_bandwidth_Gbps", GBIT_PER_S),
        nics_per_node=out.integer("nics_per_node", required=True, positive=True),
        nodes_per_leaf=out.integer("nodes_per_leaf", positive=True) or 32,
        switch_latency_s=switch_us * US, oversubscription=oversub or 1.0,
        pcie=None if pcie is None else
        _link(_Fields(pcie, out.path, "scale_out.pcie", _PCIE_KEYS), "bandwidth_GBps", GBPS))


def _link(f: _Fields, bandwidth_key: str, unit: float) -> LinkSpec:
    bandwidth = f.number(bandwidth_key, required=True)
    if not bandwidth > 0:
        raise f.error(bandwidth_key, "a positive bandwidth", bandwidth)
    latency = f.number("latency_us", required=True)
    if not latency >= 0:
        raise f.error("latency_us", "a non-negative latency", latency)
    return LinkSpec(bandwidth_bytes_per_s=bandwidth * unit, latency_s=latency * US,
                    efficiency=_efficiency(f))


def _efficiency(f: _Fields) -> EfficiencyCurve:
    given = [k for k in _EFF_KEYS if f.raw.get(k) is not None]
    if len(given) != 1:
        raise f.error("efficiency", "exactly one of efficiency or efficiency_by_size_bytes", given)
    if given[0] == "efficiency":
        value = f.number("efficiency")
        if not 0.0 < value <= 1.0:
            raise f.error("efficiency", "a fraction in (0, 1]", value)
        return EfficiencyCurve.constant(value)
    pairs = f.raw["efficiency_by_size_bytes"]
    expected = "a list of [message bytes, fraction] pairs, sizes increasing, fractions in (0, 1]"
    if not (isinstance(pairs, list) and pairs and all(
            isinstance(p, list) and len(p) == 2 and all(map(_is_number, p)) for p in pairs)):
        raise f.error("efficiency_by_size_bytes", expected, pairs)
    try:
        return EfficiencyCurve(tuple((float(s), float(e)) for s, e in pairs))
    except ValueError:
        raise f.error("efficiency_by_size_bytes", expected, pairs) from None
