"""Megatron-LM launch arguments as a workload (sim.config.megatron_args, ``llmsim run
--megatron-args``): the examples equal their YAML workloads, every flag lands in one class
(used, ignored, not modelled, unknown) and is listed, and bad values are one line naming the
flag."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import sim
from sim.cli import main
from sim.config import load_workload
from sim.config.megatron_args import (
    IGNORED_FLAGS,
    MEGATRON_FLAGS,
    NOT_MODELLED_FLAGS,
    UNKNOWN_NOTE,
    load_megatron_workload,
    parse_megatron_args,
)
from sim.errors import ConfigError
from sim.types import Dtype, RecomputeKind, ScalingRecipe, ScheduleKind

REPO = Path(sim.__file__).resolve().parent.parent
GPT3_ARGS = REPO / "workloads" / "megatron" / "gpt3-175b.args"
LLAMA_ARGS = REPO / "workloads" / "megatron" / "llama3-8b.args"
HF = REPO / "workloads" / "hf"

SMALL = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
         "--micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 ")


def _load(text: str, **kw):
    kw.setdefault("gpu", "A100-SXM4-80GB")
    return load_megatron_workload(text, **kw)


def _same_job(a, b) -> None:
    """Everything a simulation reads is equal (names, reference and topology name aside, and
    the YAML's published network, which is the topology's own: the run checks the figures)."""
    assert dataclasses.replace(a.model, name="m") == dataclasses.replace(b.model, name="m")
    # under sequence parallelism every release sends the rank's share of the sequence, so its
    # pipeline scatter/gather (Megatron-LM 2022's, not Megatron-Core's) is not read
    pa = a.parallel
    if pa.sequence_parallel:
        pa = dataclasses.replace(pa, pipeline_scatter_gather=b.parallel.pipeline_scatter_gather)
    assert pa == b.parallel
    assert (a.dtype, a.scaling) == (b.dtype, b.scaling)
    assert dataclasses.replace(a.system, topology=None, network=None) == \
        dataclasses.replace(b.system, topology=None, network=None)


# --- the examples equal their YAML workloads ---------------------------------------------------


def test_gpt3_launch_equals_the_yaml_to_the_last_digit(tmp_path, capsys):
    """The Korthikanti launch simulates the iteration of workloads/gpt3-175b.yaml exactly: the
    specs agree on everything a simulation reads, and the two runs print the same report
    numbers (layer granularity keeps the test fast; op level reads the same specs), once the
    launch's training step makes the 2022 code's passes beside Adam: today's Megatron-LM, which
    the launch names, divides its gradient buffer by the data-parallel size only above one rank
    and takes a NaN-check norm instead (one pass less over the buffer: a faster iteration)."""
    spec, _ = _load(GPT3_ARGS.read_text(), source=str(GPT3_ARGS))
    _same_job(spec, load_workload("gpt3-175b"))
    reports = []
    launch = ["--megatron-args", f"@{GPT3_ARGS}", "--set", "system.gpu=A100-SXM4-80GB"]
    as_2022 = ["--set", "kernels.step_passes=[zero-grad-buffer, grad-divide, clip-grad-norm, master-copy]"]
    for argv in (launch + as_2022, [str(REPO / "workloads" / "gpt3-175b.yaml")], launch):
        path = tmp_path / f"{len(reports)}.json"
        assert main(["run", *argv, "--granularity", "layer", "--json", str(path)]) == 0
        reports.append(json.loads(path.read_text()))
    capsys.readouterr()
    got, want, today = reports
    assert got["iteration_time_s"] == want["iteration_time_s"]
    assert [s["peak_memory_bytes"] for s in got["stages"]] == [s["peak_memory_bytes"] for s in want["stages"]]
    assert today["iteration_time_s"] < want["iteration_time_s"]


def test_llama3_launch_with_hf_config_equals_the_yaml():
    spec, notes = _load(LLAMA_ARGS.read_text(), source=str(LLAMA_ARGS), gpu="H100-SXM5-80GB",
                        hf_config=HF / "llama-3-8b.json")
    _same_job(spec, load_workload("llama3-8b-hf"))
    assert spec.model.name == "llama-3-8b"
    agreed = next(n for n in notes if "model flags beside it" in n)
    assert "--num-query-groups" in agreed and "--swiglu" in agreed


def test_deepseek_flags_give_the_hf_model():
    """MoE (256 experts top-8, one shared, 3 leading dense layers) and MLA from flags alone
    build the model the DeepSeek-V3 Hugging Face config builds."""
    text = ("--pipeline-model-parallel-size 16 --expert-model-parallel-size 64 --num-layers 61 --hidden-size 7168 "
            "--ffn-hidden-size 18432 --num-attention-heads 128 --multi-latent-attention --q-lora-rank 1536 "
            "--kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --num-experts 256 "
            "--moe-router-topk 8 --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 "
            "--moe-layer-freq ([0]*3+[1]*58) --moe-token-dispatcher-type alltoall --swiglu --normalization RMSNorm "
            "--position-embedding-type rope --attention-dropout 0.0 --hidden-dropout 0.0 "
            "--untie-embeddings-and-output-weights --vocab-size 129280 --seq-length 4096 --micro-batch-size 1 "
            "--global-batch-size 4096 --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 2 "
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
            "--use-distributed-optimizer --overlap-grad-reduce --bf16 --mtp-num-layers 1")
    spec, notes = _load(text, gpu="H100-SXM5-80GB", num_gpus=1024)
    # the uneven split is the launch's (Megatron-Core get_num_layers_to_build); the rest is the preset's
    assert spec.parallel.pipeline_layout == (3,) + (4,) * 14 + (2,)
    _same_job(dataclasses.replace(spec, parallel=dataclasses.replace(spec.parallel, pipeline_layout=None)),
              load_workload("deepseek-v3"))
    assert not any("uneven split" in n for n in notes)


# --- every flag is used, ignored, not modelled or unknown, and listed --------------------------


def test_flag_classes_are_disjoint_and_documented():
    used, ignored, other = set(MEGATRON_FLAGS), set(IGNORED_FLAGS), set(NOT_MODELLED_FLAGS)
    assert not used & ignored and not used & other and not ignored & other
    doc = (REPO / "docs" / "megatron-args.md").read_text()
    missing = [f for f in sorted(used) if f"`{f}`" not in doc]
    assert not missing
    # the two lists' sizes as the page gives them
    assert f"{len(ignored)} flags:" in doc and f"`NOT_MODELLED_FLAGS`, {len(other)} flags" in doc


def test_unknown_ignored_and_not_modelled_flags_are_listed():
    args = parse_megatron_args(SMALL + "--lr 1e-4 --seed 7 --data-path 0.5 a 0.5 b --moe-permute-fusion "
                               "--frobnicate 3 --use-fancy-thing --inference-batch-times-seqlen-threshold -1")
    assert args.ignored == ("--lr", "--seed", "--data-path")
    assert args.not_modelled == ("--moe-permute-fusion",)
    assert args.unknown == ("--frobnicate", "--use-fancy-thing", "--inference-batch-times-seqlen-threshold")
    _, notes = _load(SMALL + "--lr 1e-4 --frobnicate 3")
    assert f"{UNKNOWN_NOTE} --frobnicate" in notes
    assert "megatron-args: ignored (no effect on time or memory): --lr" in notes


def test_run_prints_unknown_flags(capsys):
    status = main(["run", "--megatron-args", SMALL + "--frobnicate 3 --lr 1e-4", "--set",
                   "system.gpu=A100-SXM4-80GB", "--granularity", "layer"])
    out, err = capsys.readouterr()
    assert status == 0
    assert f"llmsim: warning: {UNKNOWN_NOTE} --frobnicate" in err
    assert "unknown, not used: --frobnicate" in out and "no effect on time or memory): --lr" in out


# --- bad input: one line naming the flag, exit 2 -----------------------------------------------


@pytest.mark.parametrize("extra, flag", [
    ("--tensor-model-parallel-size eight", "--tensor-model-parallel-size"),
    ("--pipeline-model-parallel-size", "--pipeline-model-parallel-size"),
    ("--tensor-model-parallel-size 0", "--tensor-model-parallel-size"),
    ("--bf16 yes", "--bf16"),
    ("--recompute-granularity most", "--recompute-granularity"),
    ("--moe-layer-freq [1,0]*2+x", "--moe-layer-freq"),
    ("--num-attention-heads ${HEADS}", "--num-attention-heads"),
])
def test_malformed_value_is_one_line_naming_the_flag(extra, flag, capsys):
    status = main(["run", "--megatron-args", SMALL + extra, "--set", "system.gpu=A100-SXM4-80GB"])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and f": {flag}: expected" in err and "Traceback" not in err


def test_an_unexpanded_variable_is_named():
    with pytest.raises(ConfigError) as info:
        parse_megatron_args("torchrun --nproc-per-node 8 pretrain_gpt.py $GPT_ARGS --num-layers 2")
    assert info.value.got == "$GPT_ARGS"
    with pytest.raises(ConfigError, match="--nproc-per-node") as info:
        parse_megatron_args("torchrun --nproc-per-node $GPUS pretrain_gpt.py --num-layers 2")
    assert info.value.got == "$GPUS"


@pytest.mark.parametrize("extra, flag", [
    ("--tensor-model-parallel-size 2 --tp-comm-overlap", "--tp-comm-overlap"),
    ("--overlap-param-gather --overlap-grad-reduce", "--overlap-param-gather"),
    ("--use-distributed-optimizer --overlap-param-gather", "--overlap-param-gather"),
    ("--fp16", "--fp16"),
    ("--recompute-granularity selective --recompute-method block", "--recompute-method"),
    ("--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 3",
     "--num-layers-per-virtual-pipeline-stage"),
    ("--pipeline-model-parallel-size 3", "--num-layers"),
    ("--fp8-format hybrid --fp8-recipe custom", "--fp8-recipe"),
])
def test_what_megatron_asserts_is_an_error(extra, flag):
    with pytest.raises(ConfigError) as info:
        _load(SMALL + extra)
    assert info.value.field.startswith(flag)


def test_a_missing_micro_batch_or_model_dimension_is_named():
    with pytest.raises(ConfigError, match="--micro-batch-size"):
        _load(SMALL.replace("--micro-batch-size 1 ", ""))
    with pytest.raises(ConfigError, match="--hidden-size"):
        _load(SMALL.replace("--hidden-size 1024 ", ""))
    with pytest.raises(ConfigError, match="--vocab-size"):
        _load(SMALL.replace("--vocab-size 32000 ", "--tokenizer-type SentencePieceTokenizer "))


# --- Hugging Face config beside the flags -------------------------------------------------------


def test_hf_config_and_a_disagreeing_flag_is_one_error_naming_both():
    text = "--num-layers 30 --seq-length 4096 --micro-batch-size 1 --bf16"
    with pytest.raises(ConfigError) as info:
        _load(text, hf_config=HF / "llama-3-8b.json")
    assert info.value.field == "--num-layers" and info.value.got == 30 and "32" in info.value.expected
    with pytest.raises(ConfigError, match="--num-query-groups"):
        _load("--group-query-attention --num-query-groups 4 --seq-length 4096 --micro-batch-size 1",
              hf_config=HF / "llama-3-8b.json")
    with pytest.raises(ConfigError, match="--num-experts"):  # a dense config, a MoE flag
        _load("--num-experts 8 --seq-length 4096 --micro-batch-size 1", hf_config=HF / "llama-3-8b.json")


def test_hf_config_alone_gives_the_model_and_seq_length_falls_back():
    spec, notes = _load("--micro-batch-size 1 --bf16", hf_config=HF / "llama-3-8b.json")
    assert spec.model.num_kv_heads == 8 and spec.model.gated_mlp and spec.model.seq_length == 8192
    assert any("--seq-length not given -> 8192" in n for n in notes)


# --- script fragments ---------------------------------------------------------------------------


def test_a_launch_script_fragment_with_torchrun_and_continuations():
    text = """#!/bin/bash
# pretrain a small GPT
export CUDA_DEVICE_MAX_CONNECTIONS=1

CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes 2 --nproc_per_node=4 --rdzv-backend c10d \\
    /opt/Megatron-LM/pretrain_gpt.py \\
    --tensor-model-parallel-size 2 \\
    --pipeline-model-parallel-size 2 --num-layers 4 \\
    --hidden-size 1024 --num-attention-heads 16 \\
    --seq-length 1024 --micro-batch-size 1 --global-batch-size 16 \\
    --vocab-size=32000 --bf16 --data-path "my data/prefix" \\
    2>&1 | tee log.txt
"""
    args = parse_megatron_args(text)
    assert (args.num_nodes, args.gpus_per_node) == (2, 4)
    assert args.values["parallel.tp"] == 2 and args.values["vocab_size"] == 32000
    assert args.ignored == ("--data-path",) and args.unknown == ()
    assert any("line 3 ignored" in n and "export" in n for n in args.notes)
    spec, notes = _load(text)
    assert (spec.system.num_gpus, spec.system.gpus_per_node, spec.parallel.dp) == (8, 4, 2)
    assert spec.parallel.num_microbatches == 8


def test_without_a_gpu_count_one_replica_and_set_overrides_after():
    spec, notes = _load(SMALL + "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2")
    assert (spec.system.num_gpus, spec.parallel.dp) == (4, 1)
    assert any("one data-parallel replica" in n for n in notes)
    spec, _ = _load(SMALL + "--tensor-model-parallel-size 2", overrides=["system.num_gpus=8", "dtype=fp8",
                                                                           "system.gpu=H100-SXM5-80GB"])
    assert (spec.parallel.dp, spec.dtype) == (4, Dtype.FP8)
    with pytest.raises(ConfigError, match="system.gpu"):
        load_megatron_workload(SMALL)


def test_two_launch_lines_are_an_error():
    with pytest.raises(ConfigError, match="line 2"):
        parse_megatron_args("torchrun a.py --bf16\ntorchrun b.py --fp16")


# --- what the flags map to -----------------------------------------------------------------------


@pytest.mark.parametrize("extra, dtype, scaling", [
    ("--fp8-format hybrid", Dtype.FP8, ScalingRecipe.DELAYED),
    ("--fp8-format e4m3 --fp8-recipe tensorwise", Dtype.FP8, ScalingRecipe.CURRENT),
    ("--fp8-format e4m3 --fp8-recipe blockwise", Dtype.FP8, ScalingRecipe.BLOCK),
    ("--fp8-format e4m3 --fp8-recipe mxfp8", Dtype.MXFP8, ScalingRecipe.BLOCK),
    ("--fp4-format e2m1", Dtype.NVFP4, ScalingRecipe.BLOCK),
])
def test_number_formats(extra, dtype, scaling):
    spec, _ = _load(SMALL + extra, gpu="B200")
    assert (spec.dtype, spec.scaling) == (dtype, scaling)


def test_no_bf16_or_fp16_is_fp32_and_refused_naming_the_flags():
    with pytest.raises(ConfigError) as e:  # Megatron-LM's default: fp32, which llmsim does not simulate
        _load(SMALL.replace("--bf16 ", ""))
    assert e.value.field == "--bf16" and "--fp16" in e.value.expected and "fp32" in e.value.expected


def test_a_launch_without_bf16_is_one_line_and_exit_2_before_any_work(tmp_path, capsys):
    args = (Path(sim.__file__).parent.parent / "workloads" / "megatron" / "gpt3-175b.args").read_text()
    assert "--bf16" in args
    fp32 = tmp_path / "fp32.args"
    fp32.write_text(args.replace("--bf16", ""))
    assert main(["run", "--megatron-args", f"@{fp32}", "--set", "system.gpu=A100-SXM4-80GB"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"llmsim: error: {fp32}: --bf16: expected --bf16 or --fp16") and "fp32" in err


@pytest.mark.parametrize("extra, loss", [
    ("", "fused"), ("--cross-entropy-loss-fusion", "fused"),
    ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl native", "fused"),
    ("--cross-entropy-fusion-impl te", "fused"),  # the impl alone: Megatron-LM fuses nothing
    ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te", "te"),
])
def test_cross_entropy_fusion_flags(extra, loss):
    spec, _ = _load(SMALL + extra)
    assert spec.kernels.cross_entropy.value == loss


@pytest.mark.parametrize("extra, zero, dist_opt", [
    ("--use-torch-fsdp2 --untie-embeddings-and-output-weights", 3, False),
    ("--use-torch-fsdp2 --torch-fsdp2-no-reshard-after-forward", 2, False),
    ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", 2, False),
    ("--use-distributed-optimizer", 0, True),
])
def test_data_parallel_sharding(extra, zero, dist_opt):
    spec, _ = _load(SMALL + extra, num_gpus=8)
    assert (spec.parallel.zero_stage, spec.parallel.distributed_optimizer) == (zero, dist_opt)


def test_parallel_flags_and_megatron_defaults():
    spec, notes = _load(SMALL.replace("--num-layers 4", "--num-layers 8") + "--tensor-model-parallel-size 2 "
                        "--pipeline-model-parallel-size 2 "
                        "--num-virtual-stages-per-pipeline-rank 2 --sequence-parallel --tp-comm-overlap "
                        "--recompute-granularity full --recompute-method block --recompute-num-layers 1 "
                        "--use-tp-pp-dp-mapping --ddp-bucket-size 1000000 --attention-backend unfused",
                        num_gpus=16)
    p = spec.parallel
    assert (p.tp, p.pp, p.dp, p.virtual_pipeline_stages, p.schedule) == (2, 2, 4, 2, ScheduleKind.INTERLEAVED)
    assert p.sequence_parallel and p.tp_comm_overlap and p.recompute is RecomputeKind.FULL
    assert p.placement == "tp-cp-pp-dp" and p.grad_bucket_size_params == 1_000_000 and not spec.kernels.flash_attention
    assert not p.overlap_grad_reduce and not p.distributed_optimizer  # Megatron-LM's defaults
    assert spec.model.tied_embeddings and not spec.model.gated_mlp  # tied, GeLU: Megatron-LM's defaults
    assert p.recompute_num_layers == 1  # the first of each chunk's two layers (--recompute-method block)
    assert not any("--recompute-num-layers" in n for n in notes)
    spec, notes = _load(SMALL + "--sequence-parallel --recompute-activations --swiglu --hidden-size 4096")
    assert not spec.parallel.sequence_parallel and spec.parallel.recompute is RecomputeKind.SELECTIVE
    assert spec.model.ffn_hidden_size == int((4 * 4096 * 2 / 3) / 64) * 64  # validate_args' SwiGLU width
    assert any("--sequence-parallel dropped" in n for n in notes)


def test_vocabulary_padding():
    text = SMALL.replace("--vocab-size 32000 ", "--tokenizer-type GPT2BPETokenizer ")
    spec, _ = _load(text + "--tensor-model-parallel-size 8")
    assert spec.model.vocab_size == 51200  # 50257 padded to a multiple of 128 x 8
    spec, _ = _load(text + "--tensor-model-parallel-size 8 --make-vocab-size-divisible-by 64")
    assert spec.model.vocab_size == 50688
    spec, _ = _load(SMALL.replace("32000", "1000") + "--tokenizer-type NullTokenizer")
    assert spec.model.vocab_size == 1024  # 1000 + the end-of-document token, padded to 128
    spec, _ = _load(SMALL + "--padded-vocab-size 32001")
    assert spec.model.vocab_size == 32001


def test_pipeline_layout_and_layers_per_virtual_stage():
    base = SMALL.replace("--num-layers 4 ", "--num-layers 8 ") + "--pipeline-model-parallel-size 2 "
    spec, notes = _load(base + "--pipeline-model-parallel-layout Ett|tt|tt|ttL")
    assert spec.parallel.virtual_pipeline_stages == 2 and not any("layout" in n for n in notes)
    assert spec.parallel.pipeline_layout is None  # the even split
    spec, notes = _load(base + "--pipeline-model-parallel-layout Et|t*3|t*3|tL")
    assert spec.parallel.virtual_pipeline_stages == 2 and spec.parallel.pipeline_layout == (1, 3, 3, 1)
    assert [len(r) for r in spec.virtual_stage_layers()] == [1, 3, 3, 1]
    assert not any("not modelled" in n for n in notes)
    spec, _ = _load(base + "--num-layers-per-virtual-pipeline-stage 1")
    assert spec.parallel.virtual_pipeline_stages == 4
    with pytest.raises(ConfigError, match="--pipeline-model-parallel-layout"):
        _load(base + "--pipeline-model-parallel-layout E|tt|tt|tL")  # 7 decoder layers, not 8
    with pytest.raises(ConfigError, match="--num-virtual-stages-per-pipeline-rank"):
        _load(base + "--num-layers-per-virtual-pipeline-stage 1 --num-virtual-stages-per-pipeline-rank 4")


def test_moe_layer_pattern_with_dense_layers_between_is_an_error():
    text = SMALL + "--num-experts 8 --expert-model-parallel-size 1 "
    spec, _ = _load(text + "--moe-layer-freq ([0]*1+[1]*3)")
    assert spec.model.first_dense_layers == 1 and spec.model.moe_top_k == 2  # Megatron-LM's default top-k
    with pytest.raises(ConfigError, match="--moe-layer-freq"):
        _load(text + "--moe-layer-freq 2")
    with pytest.raises(ConfigError, match="--moe-layer-freq"):
        _load(text + "--moe-layer-freq [1,0,1,1]")


@pytest.mark.parametrize("flags, layers, note", [
    # 8 layers over PP 2: 4 a chunk
    ("--recompute-method block --recompute-num-layers 3", 3, None),
    ("--recompute-method block --recompute-num-layers 4", None, None),  # the whole chunk: every layer
    ("--recompute-method block --recompute-num-layers 6", None,
     "every layer recomputed (a model chunk holds at most 4"),
    ("--recompute-method uniform --recompute-num-layers 1", None, None),
    ("--recompute-method uniform --recompute-num-layers 2", None, "simulated layer by layer (n=1)"),
])
def test_block_recomputation_maps_onto_recompute_num_layers(flags, layers, note):
    spec, notes = _load(SMALL.replace("--num-layers 4", "--num-layers 8") + "--pipeline-model-parallel-size 2 "
                        "--recompute-granularity full " + flags, num_gpus=2)
    p = spec.parallel
    assert p.recompute is RecomputeKind.FULL and p.recompute_num_layers == layers
    mine = [n for n in notes if "--recompute-num-layers" in n]
    assert (note is None and not mine) or (len(mine) == 1 and note in mine[0]), mine
