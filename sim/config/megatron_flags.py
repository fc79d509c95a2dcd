"""The Megatron-LM flags llmsim reads, ignores or knows but does not model, and how each
value is parsed: the table :mod:`sim.config.megatron_args` maps a launch onto a workload with.

Flag names, defaults and value checks are those of NVIDIA/Megatron-LM
``megatron/training/arguments.py`` (read at commit ``000c4ac``; at ``d98e8a6`` many are
generated from dataclass fields of the same names); see :mod:`sim.config.megatron_args`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["MEGATRON_FLAGS", "IGNORED_FLAGS", "NOT_MODELLED_FLAGS"]


class BadValue(Exception):
    """A flag's value is missing or malformed; the caller names the flag and the source."""

    def __init__(self, expected: str, got: object) -> None:
        super().__init__(expected)
        self.expected, self.got = expected, got


# --- value parsers: (values after the flag) -> value -------------------------------------------

_Parser = Callable[[list[str]], object]


def _switch(value: bool = True) -> _Parser:
    def parse(values: list[str]) -> bool:
        if values:
            raise BadValue("no value (a switch)", " ".join(values))
        return value
    return parse


_T = TypeVar("_T")


def _one(values: list[str], what: str) -> str:
    if len(values) != 1:
        raise BadValue(f"one value: {what}", " ".join(values) if values else None)
    return values[0]


def _parsed(what: str, convert: Callable[[str], _T], ok: Callable[[_T], bool]) -> Callable[[list[str]], _T]:
    """One value ``convert`` reads and for which ``ok`` holds, described as ``what`` when not."""

    def parse(values: list[str]) -> _T:
        text = _one(values, what)
        try:
            value = convert(text)
        except ValueError:
            raise BadValue(what, text) from None
        if not ok(value):
            raise BadValue(what, text)
        return value
    return parse


def _integer(minimum: int = 1) -> Callable[[list[str]], int]:
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    return _parsed(what, int, lambda v: v >= minimum)


def _number(what: str, ok: Callable[[float], bool]) -> Callable[[list[str]], float]:
    """One number for which ``ok`` holds, described as ``what`` when it does not."""
    return _parsed(what, float, ok)


_real = _number("a positive number", lambda v: v > 0)
_probability = _number("a probability in [0, 1)", lambda v: 0.0 <= v < 1.0)
"""A dropout probability."""


def _choice(*options: str) -> _Parser:
    def parse(values: list[str]) -> str:
        text = _one(values, f"one of {list(options)}")
        if text not in options:
            raise BadValue(f"one of {list(options)}", text)
        return text
    return parse


def _word(values: list[str]) -> str:
    return _one(values, "a word")


def _words(values: list[str]) -> tuple[str, ...]:
    if not values:
        raise BadValue("one or more values", None)
    return tuple(values)


def _integers(values: list[str]) -> list[int]:
    """One or more positive integers (``nargs='+', type=int``)."""
    if not values:
        raise BadValue("one or more positive integers", None)
    parse = _integer()
    return [parse([v]) for v in values]


_CP_COMM_TYPES = ("p2p", "a2a", "allgather", "all_gather", "a2a+p2p")
"""``--cp-comm-type`` values: Megatron-LM's help text names ``p2p, a2a, allgather or a2a+p2p``;
Megatron-Core passes the word to Transformer Engine unchanged, whose
``attn_forward_func_with_cp`` spells the all-gather ``all_gather``. Both spellings are read as
the all-gather."""


def _cp_comm_types(values: list[str]) -> tuple[str, ...]:
    """``--cp-comm-type``: one type for every layer, or one per layer (``nargs='+'``)."""
    if not values:
        raise BadValue(f"one or more of {list(_CP_COMM_TYPES)}", None)
    bad = [v for v in values if v not in _CP_COMM_TYPES]
    if bad:
        raise BadValue(f"one or more of {list(_CP_COMM_TYPES)}", bad[0])
    return tuple("all_gather" if v == "allgather" else v for v in values)


def _moe_freq(values: list[str]) -> tuple[int, ...] | int:
    """``--moe-layer-freq``: an integer N (one expert layer every N) or a list expression
    such as ``([0]*3+[1]*58)`` (``moe_freq_type`` in arguments.py, which ``eval``\\ s it after
    checking its characters); here only integers, lists, ``+`` and ``*`` are evaluated."""
    text = _one(values, "an integer or a list expression such as ([0]*3+[1]*58)")
    if len(text) > MAX_FREQ_CHARS:
        raise BadValue(f"an integer or a list expression of at most {MAX_FREQ_CHARS:,} characters", text)
    if text.strip().isdigit() and len(text.strip()) <= 18:
        return int(text)
    try:
        pattern = _pattern(ast.parse(text.strip(), mode="eval").body)
    except RecursionError:  # Python's parser builds a chain of terms recursively, ~1,000 at most
        raise BadValue("a list expression of at most a few hundred terms, such as ([0]*3+[1]*58)", text) from None
    except (SyntaxError, ValueError, TypeError):
        pattern = None
    if not isinstance(pattern, list):  # unreadable, or an expression of integers only, such as (2*3)
        raise BadValue("an integer or a list expression of 0s and 1s such as ([0]*3+[1]*58)", text)
    return tuple(pattern)


MAX_FREQ_CHARS = 100_000
"""The longest ``--moe-layer-freq`` expression read."""

MAX_FREQ_ITEMS = 1_000_000
"""The longest list a ``--moe-layer-freq`` expression may make, or the largest number."""


def _chain(node: ast.AST, op: type) -> list[ast.AST]:
    """The operands of a chain ``a op b op c ...`` (parsed left-nested), without recursion:
    an expression of thousands of terms is as deep."""
    out: list[ast.AST] = []
    while isinstance(node, ast.BinOp) and isinstance(node.op, op):
        out.append(node.right)
        node = node.left
    out.append(node)
    return out[::-1]


def _pattern(node: ast.AST) -> list[int] | int:
    """A list expression's value: integers, lists of integers, ``+`` and ``*`` (each chain of
    one operator read in a loop; nesting is only through brackets, which Python's parser
    limits to 200 levels)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        if not 0 <= node.value <= MAX_FREQ_ITEMS:
            raise ValueError("out of range")
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_pattern(e) for e in node.elts]
        numbers = [i for i in items if isinstance(i, int)]
        if len(numbers) != len(items):
            raise ValueError("nested list")
        return numbers
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        terms = [_pattern(t) for t in _chain(node, ast.Add)]
        numbers = [t for t in terms if isinstance(t, int)]
        if len(numbers) == len(terms):
            return _bounded(sum(numbers))
        lists = [t for t in terms if isinstance(t, list)]
        if len(lists) != len(terms):
            raise TypeError("list + int")
        return _bounded([x for t in lists for x in t])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        out: list[int] | int = 1
        for factor in (_pattern(t) for t in _chain(node, ast.Mult)):
            if isinstance(out, list) and isinstance(factor, list):
                raise TypeError("list * list")
            if isinstance(out, list) and isinstance(factor, int):
                out = _repeated(out, factor)
            elif isinstance(out, int) and isinstance(factor, list):
                out = _repeated(factor, out)
            elif isinstance(out, int) and isinstance(factor, int):
                out = _bounded(out * factor)
        return out
    raise ValueError("not a list expression")


def _repeated(seq: list[int], times: int) -> list[int]:
    """``seq * times``, refused (ValueError) beyond :data:`MAX_FREQ_ITEMS` items."""
    if len(seq) * times > MAX_FREQ_ITEMS:
        raise ValueError("too long")
    return seq * times


_Pattern = TypeVar("_Pattern", list[int], int)


def _bounded(value: _Pattern) -> _Pattern:
    if (len(value) if isinstance(value, list) else value) > MAX_FREQ_ITEMS:
        raise ValueError("too long")
    return value


# --- the flags ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Flag:
    """A flag llmsim reads: the key it sets (a workload key such as ``parallel.tp``, or a
    Megatron-LM setting the mapping derives workload keys from) and how its value is read."""

    target: str
    parse: _Parser


MEGATRON_FLAGS: dict[str, _Flag] = {
    # parallel layout (_add_distributed_args, _add_moe_args)
    "--tensor-model-parallel-size": _Flag("parallel.tp", _integer()),
    "--pipeline-model-parallel-size": _Flag("parallel.pp", _integer()),
    "--context-parallel-size": _Flag("parallel.cp", _integer()),
    "--cp-comm-type": _Flag("cp_comm_type", _cp_comm_types),
    "--hierarchical-context-parallel-sizes": _Flag("parallel.hierarchical_context_parallel_sizes", _integers),
    "--expert-model-parallel-size": _Flag("parallel.ep", _integer()),
    "--expert-tensor-parallel-size": _Flag("parallel.etp", _integer()),
    "--num-layers-per-virtual-pipeline-stage": _Flag("layers_per_virtual_stage", _integer()),
    "--num-virtual-stages-per-pipeline-rank": _Flag("parallel.virtual_pipeline_stages", _integer()),
    "--pipeline-model-parallel-layout": _Flag("pipeline_layout", _word),
    "--decoder-first-pipeline-num-layers": _Flag("first_stage_layers", _integer(0)),
    "--decoder-last-pipeline-num-layers": _Flag("last_stage_layers", _integer(0)),
    "--account-for-embedding-in-pipeline-split": _Flag("embedding_in_split", _switch()),
    "--account-for-loss-in-pipeline-split": _Flag("loss_in_split", _switch()),
    "--use-tp-pp-dp-mapping": _Flag("tp_pp_dp_mapping", _switch()),
    "--sequence-parallel": _Flag("parallel.sequence_parallel", _switch()),
    "--tp-comm-overlap": _Flag("parallel.tp_comm_overlap", _switch()),
    "--use-distributed-optimizer": _Flag("parallel.distributed_optimizer", _switch()),
    "--num-distributed-optimizer-instances": _Flag("optimizer_instances", _integer()),
    "--overlap-grad-reduce": _Flag("parallel.overlap_grad_reduce", _switch()),
    "--overlap-param-gather": _Flag("parallel.overlap_param_gather", _switch()),
    "--ddp-bucket-size": _Flag("parallel.grad_bucket_size_params", _integer()),
    "--no-gradient-accumulation-fusion": _Flag("kernels.gradient_accumulation_fusion", _switch(False)),
    "--no-overlap-p2p-communication": _Flag("parallel.overlap_p2p_comm", _switch(False)),
    "--overlap-moe-expert-parallel-comm": _Flag("parallel.ep_overlap", _switch()),
    "--delay-wgrad-compute": _Flag("parallel.delay_wgrad", _switch()),
    "--deterministic-mode": _Flag("kernels.deterministic", _switch()),
    "--moe-grouped-gemm": _Flag("grouped_gemm", _switch()),
    "--moe-use-legacy-grouped-gemm": _Flag("legacy_grouped_gemm", _switch()),
    "--cross-entropy-loss-fusion": _Flag("ce_fusion", _switch()),
    "--cross-entropy-fusion-impl": _Flag("ce_fusion_impl", _choice("native", "te")),
    # the training step's passes beside Adam (KernelsSpec.step_passes): no NaN-check norm of each
    # gradient bucket; NCCL averages, so no division of the buffer by the data-parallel size
    "--no-check-for-nan-in-loss-and-grad": _Flag("no_grad_nan_check", _switch()),
    "--ddp-average-in-collective": _Flag("average_in_collective", _switch()),
    # Megatron-Core's own linear layers (``--transformer-impl local``) add and reduce their
    # biases in separate kernels, as Megatron-LM's did before Transformer Engine
    # (KernelsSpec.unfused_linear_bias); --disable-bias-linear leaves no bias to add
    "--transformer-impl": _Flag("transformer_impl", _choice("local", "transformer_engine", "inference_optimized")),
    "--disable-bias-linear": _Flag("disable_bias_linear", _switch()),
    "--use-torch-fsdp2": _Flag("torch_fsdp2", _switch()),
    "--torch-fsdp2-no-reshard-after-forward": _Flag("fsdp2_no_reshard", _switch()),
    "--use-megatron-fsdp": _Flag("megatron_fsdp", _switch()),
    "--use-custom-fsdp": _Flag("megatron_fsdp", _switch()),
    "--data-parallel-sharding-strategy": _Flag("sharding_strategy", _choice(
        "no_shard", "optim", "optim_grads", "optim_grads_params")),
    # batch and recomputation (_add_training_args)
    "--micro-batch-size": _Flag("parallel.micro_batch_size", _integer()),
    "--global-batch-size": _Flag("parallel.global_batch_size", _integer()),
    "--recompute-granularity": _Flag("recompute_granularity", _choice("full", "selective")),
    "--recompute-activations": _Flag("recompute_activations", _switch()),
    "--recompute-method": _Flag("recompute_method", _choice("uniform", "block")),
    "--recompute-num-layers": _Flag("recompute_num_layers", _integer()),
    "--recompute-modules": _Flag("recompute_modules", _words),
    "--use-flash-attn": _Flag("use_flash_attn", _switch()),
    "--attention-backend": _Flag("attention_backend", _choice("flash", "fused", "unfused", "local", "auto")),
    # number formats (_add_mixed_precision_args, _add_transformer_engine_args)
    "--bf16": _Flag("bf16", _switch()),
    "--fp16": _Flag("fp16", _switch()),
    "--fp8-format": _Flag("fp8_format", _choice("e4m3", "hybrid")),
    "--fp8-recipe": _Flag("fp8_recipe", _choice("tensorwise", "delayed", "mxfp8", "blockwise", "custom")),
    "--fp4-format": _Flag("fp4_format", _choice("e2m1")),
    "--fp4-recipe": _Flag("fp4_recipe", _choice("nvfp4", "custom")),
    "--first-last-layers-bf16": _Flag("first_last_layers_bf16", _switch()),
    "--num-layers-at-start-in-bf16": _Flag("bf16_start", _integer(0)),
    "--num-layers-at-end-in-bf16": _Flag("bf16_end", _integer(0)),
    # the model (_add_network_size_args, _add_data_args, _add_tokenizer_args)
    "--num-layers": _Flag("model.num_layers", _integer()),
    "--hidden-size": _Flag("model.hidden_size", _integer()),
    "--ffn-hidden-size": _Flag("model.ffn_hidden_size", _integer()),
    "--num-attention-heads": _Flag("model.num_attention_heads", _integer()),
    "--group-query-attention": _Flag("group_query_attention", _switch()),
    "--num-query-groups": _Flag("num_query_groups", _integer()),
    "--kv-channels": _Flag("model.head_dim", _integer()),
    "--swiglu": _Flag("swiglu", _switch()),
    "--quick-geglu": _Flag("quick_geglu", _switch()),
    "--squared-relu": _Flag("squared_relu", _switch()),
    "--normalization": _Flag("normalization", _choice("LayerNorm", "RMSNorm")),
    "--position-embedding-type": _Flag("model.position_embedding", _choice(
        "learned_absolute", "rope", "mrope", "relative", "none")),
    "--use-rotary-position-embeddings": _Flag("rotary", _switch()),
    "--untie-embeddings-and-output-weights": _Flag("untie", _switch()),
    "--hidden-dropout": _Flag("model.hidden_dropout", _probability),
    "--seq-length": _Flag("model.seq_length", _integer()),
    "--encoder-seq-length": _Flag("encoder_seq_length", _integer()),
    "--vocab-size": _Flag("vocab_size", _integer()),
    "--padded-vocab-size": _Flag("padded_vocab_size", _integer()),
    "--make-vocab-size-divisible-by": _Flag("vocab_multiple", _integer()),
    "--tokenizer-type": _Flag("tokenizer_type", _word),
    # mixture of experts (_add_moe_args)
    "--num-experts": _Flag("model.num_experts", _integer(0)),
    "--moe-router-topk": _Flag("model.moe_top_k", _integer()),
    "--moe-ffn-hidden-size": _Flag("model.moe_ffn_hidden_size", _integer()),
    "--moe-shared-expert-intermediate-size": _Flag("shared_expert_size", _integer()),
    "--moe-layer-freq": _Flag("moe_layer_freq", _moe_freq),
    "--mtp-num-layers": _Flag("model.mtp_num_layers", _integer(0)),
    "--moe-expert-capacity-factor": _Flag("model.moe_capacity_factor", _real),
    "--moe-token-dispatcher-type": _Flag("dispatcher", _choice("allgather", "alltoall", "flex")),
    "--moe-flex-dispatcher-backend": _Flag("flex_backend", _choice("deepep", "hybridep")),
    "--moe-enable-deepep": _Flag("enable_deepep", _switch()),
    # multi-head latent attention (_add_mla_args)
    "--multi-latent-attention": _Flag("mla", _switch()),
    "--q-lora-rank": _Flag("model.q_lora_rank", _integer()),
    "--kv-lora-rank": _Flag("model.kv_lora_rank", _integer()),
    "--qk-head-dim": _Flag("model.qk_nope_head_dim", _integer()),
    "--qk-pos-emb-head-dim": _Flag("model.qk_rope_head_dim", _integer()),
    "--v-head-dim": _Flag("model.v_head_dim", _integer()),
}
"""Every Megatron-LM flag llmsim reads, with the key it sets and its parser.

Flag names and choices from NVIDIA/Megatron-LM ``megatron/training/arguments.py`` (commit
``000c4ac``, the ``_add_*_args`` groups named in the module docstring). A key with a dot is a
workload field set directly; a bare key is a Megatron-LM setting from which
:func:`sim.config.megatron_args._workload_mapping` derives workload fields the way ``validate_args`` and
``core_transformer_config_from_args`` derive Megatron-LM's own."""

IGNORED_FLAGS = frozenset({
    # learning rate, optimizer hyper-parameters, regularisation values, initialisation
    "--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters", "--lr-decay-samples", "--lr-warmup-fraction",
    "--lr-warmup-iters", "--lr-warmup-samples", "--lr-warmup-init", "--lr-wsd-decay-style",
    "--lr-wsd-decay-samples", "--lr-wsd-decay-iters", "--decoupled-lr", "--decoupled-min-lr",
    "--override-opt_param-scheduler", "--override-opt-param-scheduler", "--use-checkpoint-opt_param-scheduler",
    "--use-checkpoint-opt-param-scheduler", "--weight-decay", "--start-weight-decay", "--end-weight-decay",
    "--weight-decay-incr-style", "--clip-grad", "--adam-beta1", "--adam-beta2", "--adam-eps", "--sgd-momentum",
    "--seed", "--init-method-std", "--init-method-xavier-uniform", "--embedding-init-method-std",
    "--data-parallel-random-init", "--loss-scale", "--initial-loss-scale", "--min-loss-scale",
    "--loss-scale-window", "--hysteresis", "--norm-epsilon", "--rotary-base", "--rotary-percent",
    "--rotary-interleaved", "--rotary-seq-len-interpolation-factor", "--use-rope-scaling",
    "--rope-scaling-factor", "--max-position-embeddings", "--apply-layernorm-1p", "--fp8-margin",
    "--fp8-interval", "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-input-jitter-eps",
    "--moe-router-load-balancing-type", "--moe-router-score-function", "--moe-router-pre-softmax",
    "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "--moe-router-topk-scaling-factor",
    "--moe-token-drop-policy", "--mtp-loss-scaling-factor", "--calculate-per-token-loss",
    # training length, evaluation, exit
    "--train-iters", "--train-samples", "--eval-iters", "--eval-interval", "--exit-interval",
    "--exit-duration-in-mins", "--exit-signal-handler", "--skip-train", "--full-validation",
    "--multiple-validation-sets", "--test-mode",
    # data and tokenizer files
    "--data-path", "--split", "--train-data-path", "--valid-data-path", "--test-data-path", "--data-args-path",
    "--per-split-data-args-path", "--data-cache-path", "--mock-data", "--no-mmap-bin-files", "--num-workers",
    "--dataloader-type", "--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss",
    "--no-create-attention-mask-in-dataloader", "--num-dataset-builder-threads", "--object-storage-cache-path",
    "--mid-level-dataset-surplus", "--allow-ambiguous-pad-tokens", "--vocab-file", "--merge-file",
    "--tokenizer-model", "--tokenizer-metadata", "--tiktoken-pattern", "--tiktoken-num-special-tokens",
    "--tiktoken-special-tokens", "--legacy-tokenizer", "--trust-remote-code",
    # checkpoints
    "--save", "--load", "--save-interval", "--persistent-save-interval", "--save-retain-interval",
    "--no-save-optim", "--no-save-rng", "--no-load-optim", "--no-load-rng", "--load-main-params-from-ckpt",
    "--finetune", "--pretrained-checkpoint", "--ckpt-step", "--use-checkpoint-args",
    "--use-mp-args-from-checkpoint-args", "--exit-on-missing-checkpoint", "--use-dist-ckpt", "--dist-ckpt-format",
    "--ckpt-format", "--ckpt-convert-format", "--ckpt-convert-save", "--auto-detect-ckpt-format",
    "--ckpt-fully-parallel-save", "--no-ckpt-fully-parallel-save", "--ckpt-fully-parallel-load",
    "--ckpt-assume-constant-structure", "--dist-ckpt-strictness", "--async-save", "--use-persistent-ckpt-worker",
    "--non-persistent-save-interval", "--non-persistent-ckpt-type", "--non-persistent-global-ckpt-dir",
    "--non-persistent-local-ckpt-dir", "--non-persistent-local-ckpt-algo", "--no-initialization",
    "--no-use-tokenizer-model-from-checkpoint-args", "--dist-ckpt-optim-fully-reshardable",
    # logging, profiling, monitoring
    "--log-interval", "--log-params-norm", "--log-num-zeros-in-grad", "--log-throughput", "--log-progress",
    "--timing-log-level", "--timing-log-option", "--log-energy", "--no-barrier-with-level-1-timing",
    "--tensorboard-dir", "--tensorboard-log-interval", "--tensorboard-queue-size", "--log-timers-to-tensorboard",
    "--no-log-loss-scale-to-tensorboard", "--log-validation-ppl-to-tensorboard", "--log-memory-to-tensorboard",
    "--log-world-size-to-tensorboard", "--wandb-project", "--wandb-entity", "--wandb-exp-name",
    "--wandb-save-dir", "--logging-level", "--log-straggler", "--disable-straggler-on-startup",
    "--straggler-ctrlr-port", "--straggler-minmax-count", "--profile", "--profile-step-start",
    "--profile-step-end", "--profile-ranks", "--use-pytorch-profiler", "--record-memory-history",
    "--memory-snapshot-path", "--no-one-logger", "--one-logger-project", "--one-logger-run-name",
    "--one-logger-async", "--app-tag-run-name", "--app-tag-run-version", "--config-logger-dir",
    "--enable-ft-package", "--calc-ft-timeouts", "--run-workload-inspector-server", "--moe-per-layer-logging",
    "--check-for-spiky-loss", "--check-for-large-grads",
    "--check-weight-hash-across-dp-replicas-interval", "--rerun-mode", "--error-injection-rate",
    "--error-injection-type", "--result-rejected-tracker-filename", "--iterations-to-skip",
    # process start-up and restarts
    "--distributed-backend", "--distributed-timeout-minutes", "--distributed-timeout-seconds-after-init",
    "--local-rank", "--lazy-mpu-init", "--use-cpu-initialization", "--init-model-with-meta-device",
    "--adlr-autoresume", "--adlr-autoresume-interval", "--inprocess-restart", "--use-mcore-models",
    "--disable-gloo-process-groups", "--enable-experimental", "--disable-msc",
})
"""Flags with no effect on a training iteration's time or memory (hyper-parameter values,
files, logging, checkpoints, start-up): recognised and listed, not used."""

NOT_MODELLED_FLAGS = frozenset({
    "--overlap-p2p-communication-warmup-flush",
    "--microbatch-group-size-per-virtual-pipeline-stage", "--defer-embedding-wgrad-compute",
    "--wgrad-deferral-limit", "--ddp-num-buckets",
    "--ddp-pad-buckets-for-high-nccl-busbw", "--ddp-reduce-scatter-with-fp32-accumulation", "--no-align-grad-reduce",
    "--no-align-param-gather", "--overlap-param-gather-with-optimizer-step",
    "--distribute-saved-activations",
    "--cpu-offloading-num-layers", "--fp8-param-gather", "--no-fp8-wgrad", "--fp8-amax-history-len",
                                "--fp8-amax-compute-algo",
    "--fp4-param-gather", "--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16",
    "--fp32-residual-connection", "--attention-softmax-in-fp32", "--apply-query-key-layer-scaling",
    "--fp16-lm-cross-entropy", "--cuda-graph-impl", "--cuda-graph-scope", "--cuda-graph-warmup-steps",
    "--enable-cuda-graph", "--external-cuda-graph", "--te-rng-tracker", "--moe-permute-fusion",
    "--moe-router-dtype", "--moe-router-fusion",
    "--moe-shared-expert-overlap",
    "--moe-deepep-num-sms", "--moe-hybridep-num-sms", "--moe-pad-expert-input-to-capacity",
    "--moe-router-padding-for-fp8", "--moe-router-num-groups", "--moe-router-group-topk",
    "--moe-router-force-load-balancing", "--moe-layer-recompute", "--moe-apply-probs-on-input",
    "--add-qkv-bias",
    "--qk-layernorm", "--qk-l2-norm", "--use-precision-aware-optimizer", "--main-grads-dtype",
    "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype", "--optimizer", "--optimizer-cpu-offload",
    "--optimizer-offload-fraction", "--overlap-cpu-optimizer-d2h-h2d", "--window-size",
    "--window-attn-skip-freq", "--no-persist-layer-norm", "--no-masked-softmax-fusion", "--no-bias-gelu-fusion",
    "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion", "--no-rope-fusion",
    "--use-te-activation-func", "--tp-comm-overlap-cfg", "--disable-tp-comm-overlap-ag",
    "--disable-tp-comm-overlap-rs", "--tp-comm-overlap-rs-dgrad", "--disable-tp-comm-bulk-dgrad",
    "--disable-tp-comm-bulk-wgrad", "--disable-tp-comm-split-ag", "--disable-tp-comm-split-rs",
    "--tp-comm-bootstrap-backend", "--use-nccl-ub", "--disable-symmetric-registration", "--use-sharp",
    "--sharp-enabled-group", "--fsdp-double-buffer", "--suggested-communication-unit-size",
    "--keep-fp8-transpose-cache", "--enable-full-sharding-in-hsdp", "--empty-unused-memory-level",
    "--use-legacy-models", "--manual-gc", "--manual-gc-interval",
    "--no-manual-gc-eval", "--rampup-batch-size", "--decrease-batch-size-if-needed", "--attention-dropout",
    "--vocab-extra-ids", "--nccl-communicator-config-path", "--high-priority-stream-groups",
    "--pipeline-model-parallel-comm-backend", "--use-ring-exchange-p2p", "--no-scatter-gather-tensors-in-pipeline",
    "--train-sync-interval", "--no-clone-scatter-output-in-embedding", "--spec", "--yaml-cfg",
    "--heterogeneous-layers-config-path", "--softmax-type", "--no-rope-freq", "--rope-type",
    "--openai-gelu", "--apply-residual-connection-post-layernorm",
})
"""Flags that change a real run's time or memory in ways llmsim does not model (kernel
fusions, CUDA graphs, communication tuning, offloading, optimizer variants): the run is
simulated without them, and they are listed so."""

NPROC = ("--nproc-per-node", "--nproc_per_node")
_GPT2_VOCAB = 50257
"""GPT-2's BPE vocabulary (``encoder.json``), which ``--tokenizer-type GPT2BPETokenizer`` loads
(Radford et al. 2019; Brown et al. 2020 used it for GPT-3)."""
TOKENIZER_VOCAB = {"GPT2BPETokenizer": _GPT2_VOCAB}
