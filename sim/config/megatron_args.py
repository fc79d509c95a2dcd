"""Megatron-LM launch arguments in, a workload out.

A team about to launch ``torchrun ... pretrain_gpt.py --tensor-model-parallel-size 8 ...``
simulates that job without rewriting it as a workload YAML: :func:`load_megatron_workload`
reads the arguments (a string, or a file: a launch-script fragment with newlines, backslash
continuations and ``#`` comments), maps every flag llmsim models onto the workload mapping of
:mod:`sim.config.workload` (which then validates and builds it as it does a YAML file), and
returns notes that list, by name, the flags it ignored (no effect on time or memory), the flags
it recognised but does not model, and the flags it does not know.

Sources. Flag names, defaults and the checks Megatron-LM makes on them are those of
NVIDIA/Megatron-LM ``megatron/training/arguments.py`` (read at commit ``000c4ac``;
``_add_network_size_args``, ``_add_training_args``, ``_add_distributed_args``,
``_add_mixed_precision_args``, ``_add_transformer_engine_args``, ``_add_moe_args``,
``_add_mla_args``, ``_add_tokenizer_args``, ``_add_data_args`` and ``validate_args``); at
``d98e8a6`` many of them are generated from dataclass fields with the same names
(``ArgumentGroupFactory`` turns ``field_name`` into ``--field-name``). The vocabulary is padded
as ``megatron/training/tokenizer/tokenizer.py`` ``_vocab_size_with_padding`` pads it. The
launcher's GPU count comes from torchrun's ``--nnodes`` and ``--nproc-per-node``.

Choices (docs/megatron-args.md says the same):

* **GPUs**: ``num_gpus`` when given (the CLI's ``--set system.num_gpus=N``), else torchrun's
  ``--nnodes`` x ``--nproc-per-node`` in the fragment, else the smallest world Megatron-LM
  accepts, ``tp x pp x cp`` (one data-parallel replica), with a note. The GPU type is
  ``--set system.gpu=NAME`` or the one the ``--topology`` describes; there is no default.
* **Hugging Face config and model flags**: the config gives the model; each Megatron model
  flag given beside it must agree with it, and a disagreement is one ConfigError naming the
  flag, the config's value and the flag's. Flags the config has no counterpart for (the
  training ``--seq-length``, ``--normalization``) apply.
* **Megatron-LM's defaults** stand for flags left out (no ``--overlap-grad-reduce``: the
  gradient reduction is not overlapped), except the attention kernel: ``--attention-backend``
  defaults to ``auto``, which runs Transformer Engine's fused attention, so only
  ``unfused``/``local`` give the unfused core attention; and the number format: without
  ``--bf16`` or ``--fp16`` Megatron-LM trains in FP32, which is refused with one error naming
  ``--bf16`` (:data:`sim.types.SIMULATED_DTYPES` says why).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config.fields import apply_overrides
from sim.config.hf import read_hf_config
from sim.config.megatron_flags import (
    IGNORED_FLAGS,
    MEGATRON_FLAGS,
    NOT_MODELLED_FLAGS,
    NPROC,
    TOKENIZER_VOCAB,
    BadValue,
)
from sim.config.presets import preset_names, resolve_preset
from sim.errors import ConfigError
from sim.inputs import read_input_text
from sim.types import UNMODELLED_RECOMPUTE_MODULES, LossKind, RecomputeModule, StepPass
from sim.workload.kernels import MEGATRON_CORE_STEP_PASSES
from sim.workload.spec import WorkloadSpec, pipeline_split

__all__ = ["MEGATRON_FLAGS", "IGNORED_FLAGS", "NOT_MODELLED_FLAGS", "UNKNOWN_NOTE", "MegatronArgs",  # flags re-exported
           "parse_megatron_args", "read_megatron_args", "load_megatron_workload", "FRAMEWORK"]

SOURCE = "<--megatron-args>"
FRAMEWORK = "Megatron-LM (launch arguments)"
"""The ``framework`` text of a workload made from launch arguments: its stack is the one this names."""
UNKNOWN_NOTE = "megatron-args: unknown, not used:"
"""How the note listing unknown flags starts (``llmsim run`` also prints it on stderr)."""
_NOTE = "megatron-args:"


# --- reading the arguments ----------------------------------------------------------------------


@dataclass(frozen=True)
class MegatronArgs:
    """Launch arguments as read: the settings of the flags llmsim reads (by target key), and
    the names of the flags in each other class, in the order they appeared."""

    source: str
    values: dict[str, Any]
    """Target key -> the setting, of the type that key's parser gives (:data:`MEGATRON_FLAGS`):
    typed by key, so ``Any`` to the type checker; :func:`build_workload
    <sim.config.workload.build_workload>` checks the mapping made from them."""
    flags: dict[str, str] = field(default_factory=dict)
    """Target key -> the flag (as written) that set it, for messages."""
    ignored: tuple[str, ...] = ()
    not_modelled: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    num_nodes: int | None = None
    gpus_per_node: int | None = None
    notes: tuple[str, ...] = ()


MAX_LAYOUT_CHARS = 100_000
"""The longest ``--pipeline-model-parallel-layout`` once its ``X*N`` and ``(...)*N`` are
written out (ten times :data:`~sim.workload.spec.MAX_LAYERS` layers with their separators)."""


def read_megatron_args(value: str) -> tuple[str, str]:
    """The text and source name of a ``--megatron-args`` value: ``@FILE`` reads the file, or
    the shipped example of that name (``@llama3-8b``: ``workloads/megatron/llama3-8b.args``).

    Raises
    ------
    ConfigError
        Naming the file when it cannot be read.
    """
    if not value.startswith("@"):
        return value, SOURCE
    try:
        path = resolve_preset(value[1:], "workloads/megatron", suffix=".args")
    except ConfigError:
        path = Path(value[1:])
    return read_input_text(path, "file of Megatron-LM arguments"), str(path)


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not re.fullmatch(r"-[\d.]+(e-?\d+)?", token)


def _logical_lines(text: str, source: str) -> list[tuple[int, list[str]]]:
    """Backslash continuations joined, ``#`` comments dropped, each line split as a shell
    would (quotes kept together), cut at a pipe, redirection or command separator."""
    out: list[tuple[int, list[str]]] = []
    line = 1
    for chunk in re.split(r"(?<!\\)\n", text):
        start, line = line, line + chunk.count("\n") + 1
        try:
            tokens = shlex.split(re.sub(r"\\\r?\n", " ", chunk), comments=True)
        except ValueError as exc:
            raise ConfigError(source, f"line {start}", "shell words (quotes closed)", str(exc)) from None
        for i, tok in enumerate(tokens):
            if tok in ("|", "||", "&&", ";", "&") or re.match(r"^(\d|&)?>", tok):
                tokens = tokens[:i]
                break
        if tokens:
            out.append((start, tokens))
    return out


def _launch_tokens(text: str, source: str) -> tuple[list[str], list[str], list[str]]:
    """(the Megatron arguments, the launcher's words before the script, notes). The launch
    line is the one naming a ``.py`` script; without one, every word is an argument."""
    lines = _logical_lines(text, source)
    launch = [(n, t) for n, t in lines if any(w.endswith(".py") for w in t)]
    if len(launch) > 1:
        raise ConfigError(source, f"line {launch[1][0]}", "one launch line naming a .py script (found "
                          f"another on line {launch[0][0]})", " ".join(launch[1][1][:3]))
    if not launch:
        return [w for _, t in lines for w in t], [], []
    number, words = launch[0]
    script = min(i for i, w in enumerate(words) if w.endswith(".py"))
    notes = [f"{_NOTE} line {n} ignored (not the launch line): {' '.join(t)[:60]}" for n, t in lines if n != number]
    return words[script + 1:], words[:script], notes


def _launcher(words: list[str], source: str) -> tuple[int | None, int | None]:
    """torchrun's (or ``python -m torch.distributed.run``'s) ``--nnodes`` and ``--nproc-per-node``."""
    found: dict[str, int] = {}
    i = 0
    while i < len(words):
        name, eq, inline = words[i].partition("=")
        if name in ("--nnodes",) + NPROC:
            if eq:
                text = inline
            elif i + 1 < len(words):
                text, i = words[i + 1], i + 1
            else:
                text = None
            if text is not None and "$" in text:
                raise ConfigError(source, name, "a plain number (shell variables are not expanded: write "
                                  "the value)", text)
            if text is None or not text.isdigit() or int(text) < 1:
                raise ConfigError(source, name, "a positive integer (a fixed count, not a range or 'gpu')", text)
            found["nnodes" if name == "--nnodes" else "nproc"] = int(text)
        i += 1
    return found.get("nnodes"), found.get("nproc")


def parse_megatron_args(text: str, source: str = SOURCE) -> MegatronArgs:
    """Read Megatron-LM launch arguments.

    Parameters
    ----------
    text : str
        The arguments, or a launch-script fragment: newlines, backslash continuations and
        ``#`` comments are allowed; when a line names a ``.py`` script
        (``torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py --flag v ...``) the
        arguments are the words after it and torchrun's ``--nnodes`` / ``--nproc-per-node``
        before it give the GPU count; other lines are ignored, with a note.
    source : str
        The file the text came from, for messages.

    Returns
    -------
    MegatronArgs

    Raises
    ------
    ConfigError
        Naming the flag: a value missing or malformed, an unexpanded shell variable
        (``$VAR``, ``${VAR}``), a word where a flag should stand.
    """
    tokens, launcher_words, notes = _launch_tokens(text, source)
    nodes, per_node = _launcher(launcher_words, source)
    values: dict[str, Any] = {}
    flags: dict[str, str] = {}
    ignored: list[str] = []
    not_modelled: list[str] = []
    unknown: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if "$" in token:
            raise ConfigError(source, token, "plain arguments (shell variables are not expanded: write their "
                              "values)", token)
        if not _is_flag(token):
            raise ConfigError(source, "<arguments>", "a flag (--name) where this word stands", token)
        name, eq, inline = token.partition("=")
        args = [inline] if eq else []
        i += 1
        while i < len(tokens) and not _is_flag(tokens[i]):
            args.append(tokens[i])
            i += 1
        for a in args:
            if "$" in a:
                raise ConfigError(source, name, "a plain value (shell variables are not expanded: write the "
                                  "value)", a)
        if name in MEGATRON_FLAGS:
            spec = MEGATRON_FLAGS[name]
            try:
                value = spec.parse(args)
            except BadValue as bad:
                raise ConfigError(source, name, bad.expected, bad.got) from None
            if spec.target in values and values[spec.target] != value:
                notes.append(f"{_NOTE} {name} given twice; the last ({' '.join(args)}) is used, as argparse does")
            values[spec.target], flags[spec.target] = value, name
        else:
            group = ignored if name in IGNORED_FLAGS else not_modelled if name in NOT_MODELLED_FLAGS else unknown
            if name not in group:
                group.append(name)
    return MegatronArgs(source, values, flags, tuple(ignored), tuple(not_modelled), tuple(unknown),
                        nodes, per_node, tuple(notes))


# --- arguments -> workload mapping --------------------------------------------------------------


class _Mapper:
    """Derives the workload mapping from read arguments, collecting notes."""

    def __init__(self, args: MegatronArgs, hf: Mapping[str, Any] | None, hf_path: str | None) -> None:
        self.a, self.v, self.hf, self.hf_path = args, args.values, hf, hf_path
        self.notes: list[str] = []
        self.recompute_modules: list[str] | None = None
        """``--recompute-modules`` under selective recomputation, as given."""
        self.pipeline_layout: list[int] | None = None
        """The decoder layers of each virtual stage of ``--pipeline-model-parallel-layout``."""

    def get(self, key: str, default: object = None) -> Any:
        return self.v.get(key, default)

    def flag(self, key: str) -> str:
        return self.a.flags.get(key, key)

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        return ConfigError(self.a.source, self.flag(key), expected, got)

    def note(self, text: str) -> None:
        self.notes.append(f"{_NOTE} {text}")

    # model ----------------------------------------------------------------------------------

    def model(self, tp: int) -> dict[str, Any]:
        claims = self._model_claims()
        if self.hf is not None:
            model = dict(self.hf)
            for key, (flag, value) in claims.items():
                theirs = self._hf_value(key)
                if theirs is not None and theirs != value:
                    raise ConfigError(self.a.source, flag, f"{theirs!r} as the Hugging Face config {self.hf_path} "
                                      f"has it ({key}), or leave the flag out", value)
                model[key] = value
            checked = sorted({flag for flag, _ in claims.values()})
            self.note(f"model from the Hugging Face config {self.hf_path}"
                      + (f"; model flags beside it (each agreeing where the config has the field): "
                         f"{', '.join(checked)}" if checked else ""))
        else:
            model = {k: value for k, (_, value) in claims.items()}
            for key in ("num_layers", "hidden_size", "num_attention_heads"):
                if key not in model:
                    raise ConfigError(self.a.source, _FLAG_OF[f"model.{key}"], "a value (required by Megatron-LM "
                                      "without a Hugging Face config: give it, or --hf-config PATH)", None)
            self._model_defaults(model)
        seq = self.get("model.seq_length", self.get("encoder_seq_length"))
        if seq is not None:
            model["seq_length"] = seq
        elif model.get("seq_length") is not None:
            self.note(f"--seq-length not given -> {model['seq_length']} (the Hugging Face config's "
                      "max_position_embeddings)")
        else:
            raise ConfigError(self.a.source, "--seq-length", "a value (required by Megatron-LM)", None)
        model["vocab_size"] = self._vocab(model, tp)
        return model

    def _model_claims(self) -> dict[str, tuple[str, object]]:
        """What the given model flags say, as model fields: key -> (flag, value)."""
        claims: dict[str, tuple[str, object]] = {}
        for key, value in self.v.items():
            if key.startswith("model.") and key != "model.seq_length":
                claims[key[6:]] = (self.flag(key), value)
        if self.get("group_query_attention"):
            if self.get("num_query_groups") is None:
                raise self.error("group_query_attention", "--num-query-groups N beside it", None)
            claims["num_kv_heads"] = (self.flag("num_query_groups"), self.get("num_query_groups"))
        elif self.get("num_query_groups") is not None:
            self.note("--num-query-groups ignored without --group-query-attention (Megatron-LM passes "
                      "num_query_groups=None then)")
        if self.get("swiglu") or self.get("quick_geglu"):
            claims["gated_mlp"] = (self.flag("swiglu" if self.get("swiglu") else "quick_geglu"), True)
            claims["activation"] = ("--swiglu", "swiglu") if self.get("swiglu") else ("--quick-geglu", "geglu")
        if self.get("untie"):
            claims["tied_embeddings"] = (self.flag("untie"), False)
        if self.get("normalization"):
            claims["normalization"] = ("--normalization", str(self.get("normalization")).lower())
        if self.get("rotary") and "position_embedding" not in claims:
            claims["position_embedding"] = ("--use-rotary-position-embeddings", "rope")
        if self.get("vocab_size") is not None:
            claims["vocab_size"] = (self.flag("vocab_size"), self._base_vocab_from_flag())
        if self.get("shared_expert_size") is not None:
            claims["num_shared_experts"] = (self.flag("shared_expert_size"), self._shared_experts(claims))
        if self.get("moe_layer_freq") is not None:
            claims["first_dense_layers"] = (self.flag("moe_layer_freq"), self._first_dense(claims))
        mla_keys = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        if not self.get("mla"):
            dropped = [claims.pop(k)[0] for k in mla_keys if k in claims]
            if dropped:
                self.note(f"{', '.join(dropped)} ignored without --multi-latent-attention")
        return claims

    def _hf_value(self, key: str) -> object:
        """The config's value of a model field, None where it says nothing (read_hf_config
        leaves out what a dense, non-MLA model has none of)."""
        hf = self.hf or {}
        if key == "activation":  # compared as gated_mlp: HF's "silu" is Megatron's --swiglu
            return None
        if key in hf:
            return hf[key]
        if key == "head_dim":
            return hf["hidden_size"] // hf["num_attention_heads"]
        if key in ("num_experts", "num_shared_experts", "first_dense_layers", "q_lora_rank", "kv_lora_rank",
                   "mtp_num_layers"):
            return 0
        if key == "moe_ffn_hidden_size" and hf.get("num_experts"):
            return hf["ffn_hidden_size"]  # Mixtral: the expert width is intermediate_size
        return None

    def _model_defaults(self, model: dict[str, Any]) -> None:
        """Megatron-LM's values for model flags left out (``validate_args``)."""
        hidden, heads = model["hidden_size"], model["num_attention_heads"]
        gated = bool(model.get("gated_mlp"))
        if "ffn_hidden_size" not in model:
            # validate_args: with --swiglu, int((4 * hidden * 2 / 3) / 64) * 64, else 4 * hidden
            model["ffn_hidden_size"] = int((4 * hidden * 2 / 3) / 64) * 64 if self.get("swiglu") else 4 * hidden
            self.note(f"--ffn-hidden-size not given -> {model['ffn_hidden_size']} (Megatron-LM's default"
                      f"{' for --swiglu' if self.get('swiglu') else ': 4 x hidden'})")
        model.setdefault("num_kv_heads", heads)
        model.setdefault("gated_mlp", gated)
        model.setdefault("activation", "gelu")
        model.setdefault("tied_embeddings", True)
        model.setdefault("normalization", "layernorm")
        model.setdefault("position_embedding", "learned_absolute")
        model.setdefault("hidden_dropout", 0.1)  # --hidden-dropout's default, whatever the normalization
        experts = model.get("num_experts") or 0
        if experts > 1 and "moe_top_k" not in model:
            model["moe_top_k"] = 2
            self.note("--moe-router-topk not given -> 2 (Megatron-LM's default)")
        if self.get("mla"):
            # _add_mla_args defaults; --q-lora-rank None means no query compression
            for key, default in (("kv_lora_rank", 32), ("qk_nope_head_dim", 128), ("qk_rope_head_dim", 64),
                                 ("v_head_dim", 128), ("q_lora_rank", 0)):
                model.setdefault(key, default)
            model["num_kv_heads"] = heads

    def _base_vocab_from_flag(self) -> int:
        vocab = int(self.get("vocab_size"))
        # NullTokenizer adds an end-of-document token: vocab_size = --vocab-size + 1 (tokenizer.py)
        return vocab + 1 if self.get("tokenizer_type") == "NullTokenizer" else vocab

    def _vocab(self, model: dict[str, Any], tp: int) -> int:
        """The padded vocabulary Megatron-LM builds the embedding with."""
        if self.get("padded_vocab_size") is not None:
            return int(self.get("padded_vocab_size"))
        vocab, why = model.get("vocab_size"), "the Hugging Face config" if self.hf is not None else "--vocab-size"
        if self.get("vocab_size") is not None:
            why = "--vocab-size" + (" + 1 (NullTokenizer's end-of-document token)"
                                    if self.get("tokenizer_type") == "NullTokenizer" else "")
        if vocab is None:
            tokenizer = self.get("tokenizer_type")
            if tokenizer not in TOKENIZER_VOCAB:
                raise ConfigError(self.a.source, "--vocab-size", f"a value (the vocabulary of tokenizer "
                                  f"{tokenizer} is in its files; llmsim knows {sorted(TOKENIZER_VOCAB)}), "
                                  "--padded-vocab-size, or --hf-config PATH", None)
            vocab, why = TOKENIZER_VOCAB[tokenizer], f"{tokenizer}'s vocabulary"
        multiple = int(self.get("vocab_multiple", 128)) * tp
        padded = -(-int(vocab) // multiple) * multiple
        if padded != vocab:
            self.note(f"vocabulary {vocab} ({why}) padded to {padded}, a multiple of "
                      f"--make-vocab-size-divisible-by {multiple // tp} x TP {tp} (Megatron-LM's "
                      "_vocab_size_with_padding)")
        return padded

    def _shared_experts(self, claims: dict) -> int:
        size = int(self.get("shared_expert_size"))
        width = claims.get("moe_ffn_hidden_size", (None, None))[1] or (self.hf or {}).get("moe_ffn_hidden_size") \
            or claims.get("ffn_hidden_size", (None, None))[1] or (self.hf or {}).get("ffn_hidden_size")
        if not width or size % width:
            raise self.error("shared_expert_size", f"a multiple of the expert width {width} (llmsim models shared "
                             "experts as whole experts of --moe-ffn-hidden-size)", size)
        return size // width

    def _first_dense(self, claims: dict) -> int:
        freq = self.get("moe_layer_freq")
        layers = claims.get("num_layers", (None, None))[1] or (self.hf or {}).get("num_layers")
        if freq == 1:
            return 0
        if isinstance(freq, tuple):
            dense = next((i for i, x in enumerate(freq) if x), len(freq))
            if set(freq) <= {0, 1} and all(freq[dense:]) and (layers is None or len(freq) == layers):
                return dense
        raise self.error("moe_layer_freq", f"1, or a list of {layers or 'num-layers'} 0s and 1s with the dense "
                         "layers (0) first, e.g. ([0]*3+[1]*58): llmsim models leading dense layers only", freq)

    # parallel --------------------------------------------------------------------------------

    def parallel(self, model: Mapping[str, Any]) -> dict[str, Any]:
        get = self.get
        tp, pp = get("parallel.tp", 1), get("parallel.pp", 1)
        p: dict[str, Any] = {k: get(f"parallel.{k}", 1) for k in ("tp", "pp", "cp", "ep")}
        etp = get("parallel.etp")
        if etp is not None and (model.get("num_experts") or 0) > 1:
            p["etp"] = etp  # unset: Megatron-Core's default, the experts at the tensor-parallel size
        p.update(self._cp_comm())
        vps = self._virtual_stages(model, pp)
        p["virtual_pipeline_stages"] = vps
        p["schedule"] = "interleaved-1f1b" if vps > 1 else "1f1b"
        sp = bool(get("parallel.sequence_parallel"))
        if sp and tp == 1:
            self.note("--sequence-parallel dropped: TP is 1 (Megatron-LM's validate_args disables it)")
            sp = False
        p["sequence_parallel"] = sp
        p["tp_comm_overlap"] = bool(get("parallel.tp_comm_overlap"))
        if p["tp_comm_overlap"] and not sp:
            raise self.error("parallel.tp_comm_overlap", "--sequence-parallel with TP > 1 beside it (Megatron-LM "
                             "asserts it)", "--tp-comm-overlap")
        if get("parallel.micro_batch_size") is None:
            raise ConfigError(self.a.source, "--micro-batch-size", "a value (required by Megatron-LM)", None)
        p["micro_batch_size"] = get("parallel.micro_batch_size")
        p["global_batch_size"] = get("parallel.global_batch_size")
        p["recompute"], layers = self._recompute(model, pp * vps)
        if layers is not None:
            p["recompute_num_layers"] = layers
        if self.recompute_modules is not None:
            p["recompute_modules"] = self.recompute_modules
        if self.pipeline_layout is not None:
            p["pipeline_layout"] = self.pipeline_layout
        self._sharding(p, pp)
        p["overlap_grad_reduce"] = bool(get("parallel.overlap_grad_reduce"))
        p["overlap_param_gather"] = bool(get("parallel.overlap_param_gather"))
        if p["overlap_param_gather"] and not (p["distributed_optimizer"] or get("megatron_fsdp")):
            raise self.error("parallel.overlap_param_gather", "--use-distributed-optimizer beside it (Megatron-LM "
                             "asserts it)", "--overlap-param-gather")
        if p["overlap_param_gather"] and not p["overlap_grad_reduce"]:
            raise self.error("parallel.overlap_param_gather", "--overlap-grad-reduce beside it (Megatron-LM "
                             "asserts it)", "--overlap-param-gather")
        if get("parallel.grad_bucket_size_params") is not None:
            p["grad_bucket_size_params"] = get("parallel.grad_bucket_size_params")
        if get("parallel.overlap_p2p_comm") is not None:
            p["overlap_p2p_comm"] = get("parallel.overlap_p2p_comm")
        if get("parallel.ep_overlap") is not None:
            p["ep_overlap"] = get("parallel.ep_overlap")
        if get("parallel.delay_wgrad") is not None:
            p["delay_wgrad"] = get("parallel.delay_wgrad")
        if get("tp_pp_dp_mapping"):
            p["placement"] = "tp-cp-pp-dp"
        dispatcher = get("dispatcher", "allgather")
        if get("enable_deepep"):  # Megatron-Core: --moe-enable-deepep sets flex with the deepep backend
            dispatcher = "flex"
        if (model.get("num_experts") or 0) > 1 and dispatcher == "flex":
            backend = "deepep" if get("enable_deepep") else get("flex_backend", "deepep")
            p["moe_dispatcher"] = backend
        elif (model.get("num_experts") or 0) > 1 and dispatcher != "alltoall":
            self.note(f"--moe-token-dispatcher-type {dispatcher}"
                      f"{'' if get('dispatcher') else ' (the default)'} simulated as alltoall "
                      "(llmsim's expert-parallel dispatch)")
        return p

    def kernels(self) -> dict[str, Any]:
        """The workload's ``kernels`` mapping: the attention backend, gradient-accumulation
        fusion, deterministic mode, the step's passes beside Adam and Megatron-Core's own linear
        layers' bias kernels."""
        get = self.get
        k: dict[str, Any] = {}
        if get("kernels.gradient_accumulation_fusion") is not None:
            k["gradient_accumulation_fusion"] = get("kernels.gradient_accumulation_fusion")
        if get("kernels.deterministic") is not None:
            k["deterministic"] = get("kernels.deterministic")
        if get("grouped_gemm"):
            # Megatron-Core's TE spec: TEGroupedMLP (Transformer Engine's grouped linear, a
            # cuBLAS GEMM an expert on 4 streams), or with the legacy flag GroupedMLP (the
            # grouped_gemm package, one kernel); without --moe-grouped-gemm the stack's
            # SequentialMLP (transformer_engine_spec_provider.py grouped_mlp_modules)
            k["expert_gemm_streams"] = 0 if get("legacy_grouped_gemm") else 4
        passes = set(MEGATRON_CORE_STEP_PASSES)
        if get("no_grad_nan_check"):
            passes.discard(StepPass.GRAD_NAN_CHECK)
        if get("average_in_collective"):
            passes.discard(StepPass.GRAD_DIVIDE_DP)
        if passes != MEGATRON_CORE_STEP_PASSES:
            k["step_passes"] = [p.value for p in StepPass if p in passes]
            self.note(f"step passes beside Adam: {', '.join(k['step_passes'])} (--no-check-for-nan-in-loss-and-grad "
                      "drops the NaN check's norm, --ddp-average-in-collective the division; "
                      "sim/workload/step_passes.py)")
        if get("transformer_impl") == "local" and not get("disable_bias_linear"):
            k["unfused_linear_bias"] = True
            self.note("--transformer-impl local -> kernels.unfused_linear_bias true: Megatron-Core's own "
                      "linear layers add and reduce their biases in separate kernels")
        if get("ce_fusion") and get("ce_fusion_impl") == "te":
            k["cross_entropy"] = LossKind.TE.value
            self.note("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te -> kernels.cross_entropy te: "
                      "Transformer Engine's kernel writes the gradient over the 16-bit logits")
        k.update(self._attention())
        return k

    def _cp_comm(self) -> dict[str, object]:
        """``--cp-comm-type`` (one word for every layer; Megatron-LM also takes one per layer,
        which llmsim does not model unless they agree) and
        ``--hierarchical-context-parallel-sizes``, as ``parallel`` keys; absent flags leave
        Megatron-LM's default, ``p2p``."""
        out: dict[str, object] = {}
        types = self.get("cp_comm_type")
        if types is not None:
            if len(set(types)) > 1:
                raise self.error("cp_comm_type", "one type for every layer (per-layer types are not modelled)",
                                 " ".join(types))
            out["cp_comm_type"] = types[0]
        levels = self.get("parallel.hierarchical_context_parallel_sizes")
        if levels is not None:
            out["hierarchical_context_parallel_sizes"] = list(levels)
        return out

    def _virtual_stages(self, model: Mapping[str, Any], pp: int) -> int:
        get, layers = self.get, int(model["num_layers"])
        given = [k for k in ("layers_per_virtual_stage", "parallel.virtual_pipeline_stages", "pipeline_layout")
                 if get(k) is not None]
        if len(given) > 1:
            raise self.error(given[1],
                             f"no {self.flag(given[1])} beside {self.flag(given[0])} (Megatron-LM allows one of "
                             "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, "
                             "--pipeline-model-parallel-layout)", get(given[1]))
        extra = int(bool(get("embedding_in_split"))) + int(bool(get("loss_in_split")))
        if get("pipeline_layout") is not None:
            return self._layout(layers, pp)
        if get("layers_per_virtual_stage") is not None:
            per_stage, rem = divmod(layers + extra, pp)
            n = int(get("layers_per_virtual_stage"))
            if rem:
                raise ConfigError(self.a.source, "--num-layers", f"a multiple of PP {pp} with "
                                  "--num-layers-per-virtual-pipeline-stage (Megatron-LM asserts it)", layers)
            if per_stage % n:
                raise self.error("layers_per_virtual_stage", f"a divisor of the {per_stage} layers per pipeline "
                                 "stage (Megatron-LM asserts it)", n)
            vps = per_stage // n
            self.note(f"--num-layers-per-virtual-pipeline-stage {n} -> {vps} virtual stages per pipeline rank")
        else:
            vps = int(get("parallel.virtual_pipeline_stages", 1))
        self._split(layers, pp, vps, extra)
        return vps

    def _split(self, layers: int, pp: int, vps: int, extra: int) -> None:
        """Check Megatron-LM's layer split against llmsim's (:func:`pipeline_split`)."""
        chunks, get = pp * vps, self.get
        first, last = get("first_stage_layers"), get("last_stage_layers")
        even = (layers // chunks,) * chunks if layers % chunks == 0 else None
        if first is not None or last is not None:
            counts = self._uneven(layers, pp, vps, first, last, extra)
            if counts != even:  # any other split is kept as given (llmsim's own for an uneven count may differ)
                self.pipeline_layout = list(counts)
            return
        if chunks == 1:
            return
        if (layers + extra) % chunks:
            hint = "" if extra == 2 else (" (or --account-for-embedding-in-pipeline-split / "
                                          "--account-for-loss-in-pipeline-split)")
            raise ConfigError(self.a.source, "--num-layers", f"a multiple of the {chunks} pipeline stages "
                              f"(PP {pp} x {vps} virtual){hint}: Megatron-LM asserts it", layers)
        if extra:  # --account-for-embedding/loss-in-pipeline-split: Megatron-LM's split, kept as given
            theirs = [(layers + extra) // chunks] * chunks
            theirs[0] -= int(bool(get("embedding_in_split")))
            theirs[-1] -= int(bool(get("loss_in_split")))
            if tuple(theirs) != even:
                self.pipeline_layout = theirs

    def _uneven(self, layers: int, pp: int, vps: int, first: int | None, last: int | None,
                extra: int) -> tuple[int, ...]:
        """The decoder layers of each virtual stage under ``--decoder-first-pipeline-num-layers``
        / ``--decoder-last-pipeline-num-layers``, as Megatron-Core's ``get_num_layers_to_build``
        (``transformer_block.py`` @ d98e8a6) builds them: the first (last) pipeline rank holds
        its given count, the other ranks share the rest evenly, and each rank's count is split
        evenly over its virtual stages; every division exact, as it asserts."""
        key = "first_stage_layers" if first is not None else "last_stage_layers"
        if extra:
            raise self.error(key, "no --account-for-embedding/loss-in-pipeline-split beside it (Megatron-Core: does "
                             "not support standalone embedding stage and standalone loss stage with uneven pp)",
                             first if first is not None else last)
        rest, left = layers, pp
        for n in (first, last):
            if n is not None:
                rest, left = rest - n, left - 1
        if left < 0 or rest < 0 or (left == 0 and rest) or (left and rest % left):
            raise self.error(key, f"first and last stage layers leaving the other {max(left, 0)} pipeline ranks an "
                             f"equal share of the {layers} layers (Megatron-Core asserts it)",
                             f"{first}/{last}")
        per_rank = [rest // left if left else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        if any(n % vps for n in per_rank):
            raise self.error(key, f"layers per pipeline rank divisible by its {vps} virtual stages (Megatron-Core "
                             "asserts it)", per_rank)
        return tuple(per_rank[r] // vps for _ in range(vps) for r in range(pp))

    def _layout(self, layers: int, pp: int) -> int:
        """``--pipeline-model-parallel-layout`` (``E|(t|)*3,m|m||L``): stages split by ``|``,
        ``(...)*N`` and ``X*N`` repeat, ``t`` a decoder layer, ``E``/``L`` the embedding and
        loss, ``m`` a multi-token-prediction layer."""
        text = str(self.get("pipeline_layout"))
        s = re.sub(r"[\s,]", "", text)
        too_long = f"a layout of at most {MAX_LAYOUT_CHARS:,} characters once its repetitions are written out"

        def repeat(m: re.Match) -> str:
            times = int(m[2]) if len(m[2]) <= 9 else MAX_LAYOUT_CHARS + 1
            if len(m[1]) * times > MAX_LAYOUT_CHARS:
                raise self.error("pipeline_layout", too_long, text)
            return m[1] * times

        for _ in range(20):
            expanded = re.sub(r"\(([^()]*)\)\*(\d+)", repeat, s)
            expanded = re.sub(r"([EtmL])\*(\d+)", repeat, expanded)
            if len(expanded) > MAX_LAYOUT_CHARS:
                raise self.error("pipeline_layout", too_long, text)
            if expanded == s:
                break
            s = expanded
        stages = s.split("|")
        if re.search(r"[^EtmL|]", s) or len(stages) % pp:
            raise self.error("pipeline_layout", f"stages of E, t, m, L split by '|' (a multiple of PP {pp} of them)",
                             text)
        counts = tuple(st.count("t") for st in stages)
        if sum(counts) != layers:
            raise self.error("pipeline_layout", f"{layers} decoder layers (t) in all (--num-layers)", text)
        vps = len(stages) // pp
        if "m" in "".join(stages[:-1]):  # Megatron-Core's default place: the last, with the loss
            self.note("multi-token-prediction layers (m) before the last virtual stage of "
                      "--pipeline-model-parallel-layout are simulated on it, with the loss")
        if layers % len(stages) or counts != (layers // len(stages),) * len(stages):  # else the even split
            self.pipeline_layout = list(counts)
        return vps

    def _recompute(self, model: Mapping[str, Any], chunks: int) -> tuple[str, int | None]:
        """``parallel.recompute`` and ``parallel.recompute_num_layers``: ``--recompute-method block
        --recompute-num-layers N`` recomputes the first ``N`` layers of each model chunk
        (:attr:`~sim.workload.spec.ParallelSpec.recompute_num_layers`), all of them when ``N``
        covers a chunk."""
        get = self.get
        granularity = get("recompute_granularity") or ("selective" if get("recompute_activations") else None)
        method = get("recompute_method")
        if granularity is None:
            if method is not None:
                self.note(f"--recompute-method {method} ignored without --recompute-granularity")
            return "none", None
        if granularity == "selective":
            if method is not None:
                raise self.error("recompute_method", "no --recompute-method with --recompute-granularity selective "
                                 "(Megatron-LM asserts it)", method)
            modules = get("recompute_modules")
            if modules is not None:
                known = [k.value for k in RecomputeModule]
                bad = [x for x in modules if x not in known]
                if bad:
                    raise self.error("recompute_modules", f"modules among {' '.join(known)} (llmsim does not model "
                                     f"Megatron-Core's {', '.join(UNMODELLED_RECOMPUTE_MODULES)}: the whole MoE "
                                     "layer recomputed with its all-to-alls, and the experimental ones)", bad[0])
                self.recompute_modules = list(dict.fromkeys(modules))
            return "selective", None
        n = get("recompute_num_layers")
        split = pipeline_split(int(model["num_layers"]), chunks, int(model.get("mtp_num_layers") or 0))
        per_chunk = max(split) if split else None
        if method == "block" and n is not None and per_chunk is not None and n < per_chunk:
            return "full", n
        if method == "block" and n is not None and per_chunk is not None and n > per_chunk:
            self.note(f"--recompute-method block --recompute-num-layers {n}: every layer recomputed (a model "
                      f"chunk holds at most {per_chunk} layers)")
        elif method == "uniform" and n is not None and n > 1:
            self.note(f"--recompute-method uniform --recompute-num-layers {n} simulated layer by layer (n=1): "
                      "the same recomputation, a little more activation memory kept")
        return "full", None

    def _sharding(self, p: dict[str, Any], pp: int) -> None:
        get = self.get
        dist_opt = bool(get("parallel.distributed_optimizer"))
        zero = 0
        if get("torch_fsdp2"):
            if dist_opt or pp > 1 or p["ep"] > 1:
                raise self.error("torch_fsdp2", "no --use-distributed-optimizer, PP 1 and EP 1 beside it "
                                 "(Megatron-LM asserts them)", "--use-torch-fsdp2")
            zero = 2 if get("fsdp2_no_reshard") else 3
        elif get("megatron_fsdp"):
            strategy = get("sharding_strategy", "no_shard")
            zero = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}[strategy]
            self.note(f"Megatron FSDP with --data-parallel-sharding-strategy {strategy} -> ZeRO stage {zero}")
        elif get("sharding_strategy") is not None:
            self.note("--data-parallel-sharding-strategy ignored without --use-megatron-fsdp")
        p["distributed_optimizer"], p["zero_stage"] = dist_opt, zero

    def shard_degree(self, p: dict[str, Any], dp: int | None) -> None:
        """``--num-distributed-optimizer-instances N`` -> ``parallel.dp_shard = DP / N``: the
        ``dp-cp`` group is cut into N consecutive intra-instance groups of ``DP x CP / N`` ranks
        (``initialize_model_parallel`` in ``megatron/core/parallel_state.py``), each holding a
        whole sharded copy of the optimizer; Megatron FSDP takes the same flag as its HSDP
        replica count. ``dp`` is None when the GPU count does not split (the loader says so)."""
        n = self.get("optimizer_instances")
        if n is None or n == 1 or dp is None:
            return
        if not (p["distributed_optimizer"] or self.get("megatron_fsdp")):
            raise self.error("optimizer_instances", "1 without --use-distributed-optimizer or --use-megatron-fsdp "
                             "(Megatron-LM: 'Partial DistOpt cannot be used without DistOpt')", n)
        if dp % n:
            raise self.error("optimizer_instances", f"a divisor of DP = {dp} (llmsim's shard groups are whole "
                             f"CP groups: DP x CP / N ranks with CP {p['cp']})", n)
        p["dp_shard"] = dp // n
        self.note(f"--num-distributed-optimizer-instances {n} -> parallel.dp_shard {dp // n} (DP {dp} / {n}): "
                  "gradients reduce-scattered within an instance, the shard all-reduced across instances")

    def _attention(self) -> dict[str, object]:
        backend, flash = self.get("attention_backend"), self.get("use_flash_attn")
        if backend in ("unfused", "local"):
            if flash:
                raise self.error("attention_backend", "flash, fused or auto with --use-flash-attn", backend)
            return {"flash_attention": False, "attention_kernel": "vendor"}
        # flash: the flash-attn package's kernels through Transformer Engine; fused/auto: cuDNN's
        return {"flash_attention": True, "attention_kernel": "flash2" if backend == "flash" else "vendor"}

    # number format ---------------------------------------------------------------------------

    def dtype(self) -> tuple[str, str | None]:
        get = self.get
        if get("bf16") and get("fp16"):
            raise self.error("fp16", "no --fp16 beside --bf16 (Megatron-LM asserts it)", "--fp16")
        if get("fp4_format"):
            if get("fp8_format"):
                raise self.error("fp4_format", "no --fp4-format beside --fp8-format (Megatron-LM rejects both)", "e2m1")
            if get("fp4_recipe", "nvfp4") != "nvfp4":
                raise self.error("fp4_recipe", "nvfp4 (a custom recipe cannot be simulated)", get("fp4_recipe"))
            return "nvfp4", None
        if get("fp8_format"):
            recipe = get("fp8_recipe", "delayed")
            if recipe == "custom":
                raise self.error("fp8_recipe", "delayed, tensorwise, mxfp8 or blockwise (a custom quantizer "
                                 "cannot be simulated)", recipe)
            if recipe == "mxfp8":
                return "mxfp8", None
            return "fp8", {"delayed": "delayed", "tensorwise": "current", "blockwise": "block"}[recipe]
        if get("fp8_recipe") is not None:
            self.note("--fp8-recipe ignored without --fp8-format")
        if get("bf16"):
            return "bf16", None
        if get("fp16"):
            return "fp16", None
        raise ConfigError(self.a.source, "--bf16", "--bf16 or --fp16: without either Megatron-LM trains in fp32 "
                          "(TF32 in Transformer Engine's linear layers, FP32 in PyTorch's matmuls), which llmsim "
                          "does not simulate; see sim.types.SIMULATED_DTYPES", "neither")

    def bf16_layers(self, dtype: str, scaling: str | None) -> dict[str, int]:
        """The first and last layers an FP8/FP4 run keeps in BF16 (``--first-last-layers-bf16``,
        1 and 1 by default as in Megatron-LM's ``arguments.py``; refused with delayed scaling,
        as ``megatron/core/fp8_utils.py`` asserts)."""
        get = self.get
        if not get("first_last_layers_bf16"):
            if get("bf16_start") is not None or get("bf16_end") is not None:
                self.note("--num-layers-at-start/end-in-bf16 ignored without --first-last-layers-bf16")
            return {}
        if dtype not in ("fp8", "mxfp8", "nvfp4"):
            self.note("--first-last-layers-bf16 ignored: no FP8 or FP4 format")
            return {}
        if scaling == "delayed":
            raise self.error("first_last_layers_bf16", "an --fp8-recipe other than delayed (Megatron-LM: "
                             "\"Delayed scaling does not support first / last layer in BF16\")", "--fp8-recipe delayed")
        return {"num_layers_at_start_in_bf16": get("bf16_start", 1), "num_layers_at_end_in_bf16": get("bf16_end", 1)}


_FLAG_OF = {spec.target: flag for flag, spec in reversed(list(MEGATRON_FLAGS.items()))}
"""Workload key -> the flag that sets it (the first listed), for relabelling errors."""


def _workload_mapping(args: MegatronArgs, hf: Mapping[str, Any] | None, hf_path: str | None, *,
                      name: str, gpu: str | None, num_gpus: int | None,
                      topology: str | None) -> tuple[dict[str, object], list[str]]:
    """The workload mapping (the YAML's keys) the arguments describe, and the notes."""
    m = _Mapper(args, hf, hf_path)
    tp = int(args.values.get("parallel.tp", 1))
    model = m.model(tp)
    parallel = m.parallel(model)
    experts = model.get("num_experts") or 0
    if parallel["ep"] > 1 and experts % parallel["ep"]:
        raise m.error("parallel.ep", f"a divisor of the {experts} experts (Megatron-LM asserts it)", parallel["ep"])
    dtype, scaling = m.dtype()
    mp = parallel["tp"] * parallel["pp"] * parallel["cp"]
    system: dict[str, object] = {"gpu": gpu, "topology": topology}
    if args.gpus_per_node is not None:
        system["gpus_per_node"] = args.gpus_per_node
    launched = None if args.gpus_per_node is None else (args.num_nodes or 1) * args.gpus_per_node
    if num_gpus is None and launched is not None:
        num_gpus = launched
        m.note(f"{num_gpus} GPUs: torchrun --nnodes {args.num_nodes or 1} x --nproc-per-node {args.gpus_per_node}")
    elif num_gpus is not None and launched is not None and launched != num_gpus:
        m.note(f"{num_gpus} GPUs as asked, not the {launched} of torchrun's --nnodes x --nproc-per-node")
    if num_gpus is None:
        num_gpus = mp
        m.note(f"no GPU count (torchrun --nnodes/--nproc-per-node, or --set system.num_gpus=N) -> {mp} = "
               "TP x PP x CP, one data-parallel replica (Megatron-LM's smallest world)")
    system["num_gpus"] = num_gpus
    m.shard_degree(parallel, num_gpus // mp if num_gpus % mp == 0 else None)
    model.setdefault("name", name)
    raw: dict[str, object] = {"name": name, "model": model, "parallel": parallel, "kernels": m.kernels(),
                              "system": system, "dtype": dtype, "framework": FRAMEWORK}
    if scaling is not None:
        raw["scaling"] = scaling
    raw.update(m.bf16_layers(dtype, scaling))
    lists = [("ignored (no effect on time or memory)", args.ignored),
             ("recognised, not modelled (simulated without it)", args.not_modelled)]
    notes = list(args.notes) + m.notes + [f"{_NOTE} {what}: {', '.join(names)}" for what, names in lists if names]
    if args.unknown:
        notes.append(f"{UNKNOWN_NOTE} {', '.join(args.unknown)}")
    return raw, notes


def _set_kernels_in_parallel(raw: dict[str, object], overrides: Sequence[str]) -> dict[str, object]:
    """``raw`` without the arguments' kernel switches that a ``--set parallel.X`` (the
    published cases' spelling of ``kernels.X``) overrides, so the override wins as it does
    over any other argument."""
    keys = {str(item).partition("=")[0].strip() for item in overrides}
    kernels = raw.get("kernels")
    if not isinstance(kernels, Mapping):
        return raw
    kept = {k: v for k, v in kernels.items() if f"parallel.{k}" not in keys}
    return {**raw, "kernels": kept}


def load_megatron_workload(text: str, *, source: str = SOURCE, hf_config: str | Path | None = None,
                           gpu: str | None = None, num_gpus: int | None = None, topology: str | None = None,
                           overrides: Sequence[str] = ()) -> tuple[WorkloadSpec, list[str]]:
    """Build a workload from Megatron-LM launch arguments (and a Hugging Face config).

    Parameters
    ----------
    text : str
        The arguments or a launch-script fragment (:func:`parse_megatron_args`).
    source : str
        Where the text came from (a file path), for messages and the workload's name.
    hf_config : path, optional
        A Hugging Face ``config.json`` giving the model, or the name of a shipped one
        (``llama-3-8b``: ``workloads/hf/llama-3-8b.json``); model flags given beside it must agree.
    gpu, num_gpus, topology : optional
        The system: GPU name (default: the topology's GPU), GPU count (default: torchrun's
        ``--nnodes`` x ``--nproc-per-node``, else TP x PP x CP), topology preset or file.
    overrides : sequence of str
        ``KEY=VALUE`` items applied to the mapping last, as ``--set`` does for a YAML file.

    Returns
    -------
    (WorkloadSpec, list of str)
        The spec and the notes: derived settings, approximations, and the flags ignored,
        not modelled and unknown (the last under :data:`UNKNOWN_NOTE`).

    Raises
    ------
    ConfigError
        Naming the flag for a missing, malformed or conflicting value.
    """
    from sim.config.workload import WORKLOAD_SETTABLE, build_workload

    args = parse_megatron_args(text, source)
    hf, hf_path = None, None
    if hf_config is not None:
        try:
            hf_path = str(resolve_preset(str(hf_config), "workloads/hf", suffix=".json"))
        except ConfigError:
            raise ConfigError(str(hf_config), "<file>", "an existing Hugging Face config.json (--hf-config), or "
                              f"a shipped one: {preset_names('workloads/hf', '.json')}", str(hf_config)) from None
        hf = read_hf_config(Path(hf_path))
    if gpu is None and topology is not None:
        from sim.config.topology import load_topology

        gpu = load_topology(topology).gpu
    name = Path(source).stem if source != SOURCE else "megatron-args"
    raw, notes = _workload_mapping(args, hf, hf_path, name=name, gpu=gpu, num_gpus=num_gpus, topology=topology)
    raw = _set_kernels_in_parallel(apply_overrides(raw, overrides, WORKLOAD_SETTABLE), overrides)
    system = raw["system"]
    if isinstance(system, Mapping) and system.get("gpu") is None:
        from sim.hardware import gpu_names

        raise ConfigError(source, "system.gpu", f"a GPU: --set system.gpu=NAME or a --topology that names one "
                          f"({', '.join(gpu_names())})", None)
    try:
        spec, loader_notes = build_workload(raw, Path(source))
    except ConfigError as exc:
        flag = _FLAG_OF.get(exc.field)
        if exc.path != source or flag is None:
            raise
        raise ConfigError(source, f"{flag} ({exc.field})", exc.expected, exc.got) from None
    p = spec.parallel
    if p.global_batch_size % (p.micro_batch_size * p.dp):
        raise ConfigError(source, "--global-batch-size", f"a multiple of --micro-batch-size {p.micro_batch_size} "
                          f"x DP {p.dp} (Megatron-LM asserts it)", p.global_batch_size)
    return spec, notes + loader_notes
