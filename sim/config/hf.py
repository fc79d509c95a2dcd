"""Hugging Face ``config.json`` files, read into the workload YAML's ``model`` fields.

:mod:`sim.config` calls :func:`read_hf_config` when a workload's ``model`` is a path to a
Hugging Face config (or a mapping with ``hf_config``); the result is a plain mapping with the
keys of the YAML ``model`` section, which the workload's own keys may then override. Two naming
families are understood (huggingface/transformers configuration classes):

* Llama style (``LlamaConfig``, Mistral, Qwen2, ...): ``hidden_size``, ``intermediate_size``,
  ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads`` (absent: = heads),
  ``head_dim``, ``vocab_size``, ``max_position_embeddings``, ``hidden_act`` ("silu": the gated
  SwiGLU MLP), ``tie_word_embeddings`` (absent: false, ``LlamaConfig``'s default).
* GPT-2 style (``GPT2Config``): ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``,
  ``n_inner`` (None: 4 x n_embd), ``activation_function``, ``tie_word_embeddings`` (absent:
  true, ``PretrainedConfig``'s default).

Mixture-of-experts fields, where present: ``num_local_experts`` (Mixtral) or
``n_routed_experts`` (DeepSeek) or ``num_experts`` (Qwen-MoE), ``num_experts_per_tok``, the
expert width ``moe_intermediate_size`` (Mixtral: ``intermediate_size``),
``n_shared_experts`` and ``first_k_dense_replace`` (DeepSeek: its first layers are dense, of
``intermediate_size``). Multi-head latent attention, where present (DeepSeek-V2/V3):
``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``.
Multi-token prediction, where present (DeepSeek-V3): ``num_nextn_predict_layers``, read into
``mtp_num_layers`` as Megatron-Bridge's ``DeepSeekV3Bridge`` reads it.

The normalization and position embedding, which decide eager PyTorch's kernels
(:mod:`sim.workload.eager`): a Llama-style config with ``rms_norm_eps`` is RMSNorm
(``LlamaRMSNorm``) and one with ``rope_theta`` rotary; a GPT-2 config is LayerNorm with learned
positions (``GPT2Model``'s ``ln_1``/``ln_2`` and ``wpe``). Other keys are ignored.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Literal, overload

from sim.errors import ConfigError, Described
from sim.inputs import read_input_text

__all__ = ["read_hf_config"]

_GATED_ACTIVATIONS = frozenset({"silu", "swish", "swiglu"})

MAX_INT_DIGITS = 30
"""The longest integer a config.json may write (Python refuses to read one of more than 4,300
digits; no dimension has more than a handful)."""
MAX_INTEGER = 2**53
"""The largest integer a dimension may take (floats represent every integer up to it)."""


class _Refused(ValueError):
    """A number :func:`_load_json` does not read: what was expected and what arrived."""

    def __init__(self, expected: str, got: object) -> None:
        super().__init__(expected)
        self.expected, self.got = expected, got


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"integers of at most {MAX_INT_DIGITS} digits", Described(f"one of {len(text):,} characters"))
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused("finite numbers", Described(text[:40]))
    return value


def _parse_constant(name: str) -> float:
    raise _Refused("finite numbers (JSON has no NaN or Infinity)", Described(name))


def read_hf_config(path: Path) -> dict[str, object]:
    """Read a Hugging Face ``config.json`` into ``model`` section fields.

    Parameters
    ----------
    path : Path
        The ``config.json`` file.

    Returns
    -------
    dict
        Keys ``name``, ``num_layers``, ``hidden_size``, ``num_attention_heads``,
        ``num_kv_heads``, ``ffn_hidden_size``, ``vocab_size``, ``gated_mlp``,
        ``tied_embeddings``, ``activation`` and, where the file has them, ``seq_length``
        (from ``max_position_embeddings`` / ``n_positions``), ``head_dim``, ``normalization``
        and ``position_embedding``.

    Raises
    ------
    ConfigError
        Naming ``path``: unreadable file, invalid JSON (field ``line N``), a top level that is
        not an object, a missing dimension, or a dimension that is not an integer.
    """
    cfg = _load_json(path)
    gpt2 = "n_embd" in cfg or cfg.get("model_type") == "gpt2"
    fields = _gpt2_fields(cfg, path) if gpt2 else _llama_fields(cfg, path)
    name = cfg.get("_name_or_path")
    fields["name"] = name if isinstance(name, str) and name else path.stem
    fields.update(_norm_and_positions(cfg, gpt2))
    return fields


def _norm_and_positions(cfg: dict[str, object], gpt2: bool) -> dict[str, object]:
    """``normalization`` and ``position_embedding`` where the config says them (module
    docstring)."""
    if gpt2:
        return {"normalization": "layernorm", "position_embedding": "learned_absolute"}
    out: dict[str, object] = {}
    if "rms_norm_eps" in cfg:
        out["normalization"] = "rmsnorm"
    if "rope_theta" in cfg:
        out["position_embedding"] = "rope"
    return out


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose every key appears once (``json`` would keep the last of two silently)."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused("each key once in an object", key)
        out[key] = value
    return out


def _load_json(path: Path) -> dict[str, object]:
    where = str(path)
    text = read_input_text(path, "Hugging Face config.json")
    try:
        cfg = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant,
                         object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ConfigError(where, f"line {exc.lineno}", "valid JSON", exc.msg) from None
    except _Refused as exc:
        raise ConfigError(where, "<file>", exc.expected, exc.got) from None
    except RecursionError:  # the decoder nests a call per array or object
        raise ConfigError(where, "<file>", f"JSON nested less than {sys.getrecursionlimit():,} deep",
                          Described("deeper")) from None
    if not isinstance(cfg, dict):
        raise ConfigError(where, "<top level>", "a JSON object", type(cfg).__name__)
    return cfg


@overload
def _int(cfg: dict[str, object], key: str, path: Path, *, required: Literal[True] = True, minimum: int = 1) -> int: ...


@overload
def _int(cfg: dict[str, object], key: str, path: Path, *, required: bool, minimum: int = 1) -> int | None: ...


def _int(cfg: dict[str, object], key: str, path: Path, *, required: bool = True, minimum: int = 1) -> int | None:
    """``cfg[key]`` as an integer from ``minimum`` (1: a dimension; 0: a count that may be
    none) to :data:`MAX_INTEGER`; None when absent and not ``required``."""
    value = cfg.get(key)
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    if value is None:
        if required:
            raise ConfigError(str(path), key, f"{what} (required in a Hugging Face config)", None)
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_INTEGER:
        raise ConfigError(str(path), key, f"{what} of at most 2^53", value)
    return value


def _bool(cfg: dict[str, object], key: str, path: Path, default: bool) -> bool:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(str(path), key, "true or false", value)
    return value


def _llama_fields(cfg: dict[str, object], path: Path) -> dict[str, object]:
    heads = _int(cfg, "num_attention_heads", path)
    act = cfg.get("hidden_act", "silu")
    fields: dict[str, object] = {
        "num_layers": _int(cfg, "num_hidden_layers", path),
        "hidden_size": _int(cfg, "hidden_size", path),
        "num_attention_heads": heads,
        "num_kv_heads": _int(cfg, "num_key_value_heads", path, required=False) or heads,
        "ffn_hidden_size": _int(cfg, "intermediate_size", path),
        "vocab_size": _int(cfg, "vocab_size", path),
        "gated_mlp": isinstance(act, str) and act.lower() in _GATED_ACTIVATIONS,
        "tied_embeddings": _bool(cfg, "tie_word_embeddings", path, default=False),
        "activation": act,
    }
    fields.update(_moe_fields(cfg, path))
    kv_lora = _int(cfg, "kv_lora_rank", path, required=False, minimum=0)
    if kv_lora:  # multi-head latent attention (DeepSeek-V2/V3)
        fields["kv_lora_rank"] = kv_lora
        fields["q_lora_rank"] = _int(cfg, "q_lora_rank", path, required=False, minimum=0) or 0
        for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            fields[key] = _int(cfg, key, path)
        fields["num_kv_heads"] = heads
    mtp = _int(cfg, "num_nextn_predict_layers", path, required=False, minimum=0)
    if mtp:
        fields["mtp_num_layers"] = mtp
    return _with_optional(fields, cfg, path, seq_key="max_position_embeddings")


def _moe_fields(cfg: dict[str, object], path: Path) -> dict[str, object]:
    for key in ("num_local_experts", "n_routed_experts", "num_experts"):
        experts = _int(cfg, key, path, required=False, minimum=0)
        if experts:
            break
    else:
        return {}
    if experts <= 1:
        return {}
    out: dict[str, object] = {"num_experts": experts, "moe_top_k": _int(cfg, "num_experts_per_tok", path)}
    width = _int(cfg, "moe_intermediate_size", path, required=False)
    if width is not None:
        out["moe_ffn_hidden_size"] = width
    shared = _int(cfg, "n_shared_experts", path, required=False, minimum=0)
    if shared:
        out["num_shared_experts"] = shared
    dense = _int(cfg, "first_k_dense_replace", path, required=False, minimum=0)
    if dense:
        out["first_dense_layers"] = dense
    return out


def _gpt2_fields(cfg: dict[str, object], path: Path) -> dict[str, object]:
    hidden = _int(cfg, "n_embd", path)
    heads = _int(cfg, "n_head", path)
    act = cfg.get("activation_function", "gelu_new")
    fields: dict[str, object] = {
        "num_layers": _int(cfg, "n_layer", path),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": heads,
        "ffn_hidden_size": _int(cfg, "n_inner", path, required=False) or 4 * hidden,
        "vocab_size": _int(cfg, "vocab_size", path),
        "gated_mlp": isinstance(act, str) and act.lower() in _GATED_ACTIVATIONS,
        "tied_embeddings": _bool(cfg, "tie_word_embeddings", path, default=True),
        "activation": act,
    }
    return _with_optional(fields, cfg, path, seq_key="n_positions")


def _with_optional(fields: dict[str, object], cfg: dict[str, object], path: Path,
                   seq_key: str) -> dict[str, object]:
    seq = _int(cfg, seq_key, path, required=False)
    if seq is not None:
        fields["seq_length"] = seq
    head_dim = _int(cfg, "head_dim", path, required=False)
    if head_dim is not None:
        fields["head_dim"] = head_dim
    return fields
