"""Software stacks (sim/config/stack.py, sim/config/stacks.py, workloads/stacks/): the shipped
files load and cite a source for every setting, a case's framework text picks one (or the
fallback of its date), a case may name its own, the defaults read the stack's settings, and a
malformed stack file is one ConfigError naming the file and the field."""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.config import load_workload, load_workload_with_notes
from sim.config.presets import preset_folder
from sim.config.stack import SETTINGS
from sim.config.stacks import STACKS, choose_stack, load_stack, shipped_stacks
from sim.errors import ConfigError
from sim.types import AdamImpl, AttentionKernel, LossKind, NormKind, ScheduleKind, StepPass, ZeroImpl


def _case(framework: str | None = "Megatron-Core", **top) -> dict:
    """A small TP 2 x PP 2 x DP 2 case on A100s with every stack-filled setting left null."""
    case = {"name": "probe", "model": {"name": "probe", "num_layers": 4, "hidden_size": 1024,
                                       "num_attention_heads": 16, "vocab_size": 32000, "seq_length": 1024},
            "system": {"gpu": "A100-SXM4-80GB", "num_gpus": 8},
            "parallel": {"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1, "global_batch_size": 8}}
    if framework is not None:
        case["framework"] = framework
    case.update(top)
    return case


def _write(path, data) -> str:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


# --- the shipped stacks ---------------------------------------------------------------------------


def test_every_shipped_stack_is_complete_and_cites_each_setting_it_gives():
    stacks = shipped_stacks()
    assert {s.name for s in stacks} >= {"megatron-lm-2021", "megatron-lm-2022", "megatron-core", "nemo-24",
                                        "nemo-24.01-24.07", "nemo-25", "megatron-bridge", "megatron-bridge-25",
                                        "torchtitan", "deepspeed-zero3"}
    for s in stacks:
        assert (preset_folder(STACKS) / f"{s.name}.yaml").is_file(), s.name  # a stack is named as its file
        assert set(s.settings) == {k.key for k in SETTINGS}, s.name
        raw = yaml.safe_load((preset_folder(STACKS) / f"{s.name}.yaml").read_text())
        for key, setting in (raw.get("settings") or {}).items():
            assert setting["sources"] and setting["why"].strip(), (s.name, key)
        assert s.description and (s.matches or s.fallback), s.name


def test_every_date_has_exactly_one_fallback():
    for year in (None, 2019, 2021, 2022, 2023, 2026):
        covering = [s.name for s in shipped_stacks() if s.fallback is not None and s.fallback.covers(year)]
        assert len(covering) == 1, (year, covering)


@pytest.mark.parametrize("framework, name", [
    ("torchtitan (PyTorch native: FSDP2/DTensor TP/PP/CP) (as of 2024)", "torchtitan"),
    ("Megatron-Core r0.8.0 (per strong-scaling figure legend) (as of 2024)", "megatron-core-2024"),
    ("Megatron-Core core_r0.10.0", "megatron-core-2024"),
    ("Megatron-Core 0.12.0", "megatron-core"),
    ("Megatron-LM (2024)", "megatron-core-2024"),
    ("Megatron-LM (2025)", "megatron-core"),
    ("NeMo 24.12 (Megatron-Core) (as of 2024)", "nemo-24"),
    ("Megatron-DeepSpeed (2024)", "megatron-deepspeed"),
    ("Megatron-LM (+DeepSpeed ZeRO-3 for zero3 rows) (as of 2021)", "deepspeed-zero3"),
    ("Megatron-LM (2021, NGC PyTorch 20.12 container per examples/sc21/SRUN.sh)", "megatron-lm-2021"),
    ("Megatron-LM (2022)", "megatron-lm-2022"),
    ("Megatron-LM / Megatron-Core (Transformer Engine), deterministic mode", "megatron-core"),
    ("NeMo 24.03.01 (Megatron-Core)", "nemo-24.01-24.07"),
    ("NeMo 24.07 container (Megatron-Core backend)", "nemo-24.01-24.07"),
    ("NeMo 24.09 container", "nemo-24"),
    ("NeMo 24.12 (NeMo 2 recipes)", "nemo-24"),
    ("NeMo 25.04.rc2 (Megatron-Core)", "nemo-25"),
    ("NeMo 25.11 container / Megatron-Bridge (Megatron-Core)", "megatron-bridge-25"),
    ("NeMo 25.09", "megatron-bridge-25"),
    ("NeMo 26.04.01 container / Megatron-Bridge (Megatron-Core)", "megatron-bridge"),
    ("Megatron-DeepSpeed (DeepSpeed 0.3.16)", "deepspeed-zero3"),
    ("Megatron-LM (launch arguments)", "megatron-core"),
    ("MosaicML llm-foundry v0.4.0 (Composer, PyTorch FSDP)", "llm-foundry"),
    ("Composer 0.17 + FSDP", "llm-foundry"),
    ("Hugging Face Transformers Trainer, Accelerate FSDP", "pytorch-fsdp"),
    ("PyTorch FSDP (2024)", "pytorch-fsdp"),
    ("torchtitan (Hugging Face tokenizer, PyTorch FSDP)", "torchtitan"),
    ("Hugging Face Transformers Trainer, FSDP (2023)", "pytorch-fsdp-2023"),
    # FSDP named alone is a PyTorch FSDP trainer; before PyTorch 2.0 its attention was eager
    ("FSDP2 (PyTorch 2.4, 2024)", "pytorch-fsdp"),
    ("IBM fms-fsdp (2024)", "pytorch-fsdp"),
    ("Lightning Fabric, FSDP strategy (2023)", "pytorch-fsdp"),
    ("FairScale FSDP (metaseq, 2022)", "pytorch-fsdp-2023"),
    ("Megatron-Core with its own FSDP (2025)", "megatron-core"),
    ("NeMo 25.04 with FSDP", "nemo-25"),
])
def test_a_framework_text_picks_the_most_specific_stack_it_matches(framework, name):
    choice = choose_stack(framework)
    assert choice.stack.name == name
    assert f"framework '{framework}' matches /" in choice.why


@pytest.mark.parametrize("framework, name", [
    ("SomeTrainer (2020)", "megatron-lm-2021"), ("SomeTrainer 2022", "megatron-lm-2022"),
    ("SomeTrainer (2024)", "megatron-core"), ("SomeTrainer", "megatron-core"), ("", "megatron-core"),
    # Hugging Face's nanotron is 3D parallelism with ZeRO-1, not a PyTorch FSDP trainer
    ("Nanotron (Hugging Face, 2025)", "megatron-core"), ("huggingface/nanotron 2024", "megatron-core"),
])
def test_an_unknown_framework_takes_the_fallback_of_its_date(framework, name):
    choice = choose_stack(framework)
    assert choice.stack.name == name
    assert "the fallback for" in choice.why
    assert ("matches no stack's patterns" in choice.why) == bool(framework)


def test_the_dating_of_a_case_picks_the_stack_and_the_notes_name_it(tmp_path):
    """An undated "Megatron-LM" published in 2021 runs on megatron-lm-2021; each default it
    fills names the stack, and the first note says why that stack."""
    case = _case("Megatron-LM", source={"publication": "Someone et al., 2021"})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert not w.kernels.gradient_accumulation_fusion and not w.kernels.flash_attention
    stack_note = next(n for n in notes if n.startswith("stack:"))
    assert stack_note.startswith("stack: null -> megatron-lm-2021 (framework 'Megatron-LM (as of 2021)' matches")
    filled = [n for n in notes if n.startswith("parallel.flash_attention")]
    assert filled == [f"parallel.flash_attention: null -> false (stack megatron-lm-2021: "
                      f"{load_stack('megatron-lm-2022')['flash_attention'].why})"]


# --- a case's own stack -----------------------------------------------------------------------------


def test_a_case_names_its_stack_and_the_framework_text_is_not_read_for_it(tmp_path):
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", _case("torchtitan", stack="megatron-core")))
    p, k = w.parallel, w.kernels
    assert (p.zero_stage, k.attention_kernel, k.fused_elementwise) == (0, AttentionKernel.VENDOR, True)
    assert not any(n.startswith("stack:") for n in notes)  # named, not chosen
    titan, _ = load_workload_with_notes(_write(tmp_path / "t.yaml", _case("torchtitan")))
    assert titan.parallel.zero_stage == 3 and titan.kernels.attention_kernel is AttentionKernel.FLASH2


def test_set_stack_overrides_the_case(tmp_path):
    path = _write(tmp_path / "c.yaml", _case("Megatron-Core"))
    w, _ = load_workload_with_notes(path, ["stack=torchtitan"])
    assert w.parallel.zero_stage == 3 and w.parallel.sequence_parallel


def test_a_users_stack_file_extends_a_shipped_one(tmp_path):
    """A stack file beside the case, extending megatron-core with one setting of its own: the
    default follows that setting and its note quotes its why."""
    _write(tmp_path / "mine.yaml", {
        "name": "mine", "description": "our fork", "extends": "megatron-core",
        "settings": {"overlap_grad_reduce": {"value": False, "why": "our DDP reduces after the backward",
                                             "sources": ["our launch script"]}}})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", _case("Megatron-Core", stack="mine.yaml")))
    assert not w.parallel.overlap_grad_reduce and w.parallel.overlap_p2p_comm  # the rest from megatron-core
    assert "parallel.overlap_grad_reduce: null -> false (stack mine: our DDP reduces after the backward)" in notes
    mine = load_stack("mine", tmp_path)
    assert mine.extends == ("megatron-core",) and mine["overlap_p2p_comm"].origin.endswith("megatron-core.yaml")


def test_stack_settings_drive_the_defaults(tmp_path):
    """Every stack-driven default follows the stack, not the framework text: a stack that
    differs from megatron-core in each setting gives a different spec."""
    base = load_stack("megatron-core")
    titan = load_stack("torchtitan")
    w_base, _ = load_workload_with_notes(_write(tmp_path / "a.yaml", _case("x", stack="megatron-core")))
    w_titan, _ = load_workload_with_notes(_write(tmp_path / "b.yaml", _case("x", stack="torchtitan")))
    differs = {k.key for k in SETTINGS if base.value(k.key) != titan.value(k.key)}
    assert {"sequence_parallel", "zero_stage", "attention_kernel", "cross_entropy", "fused_elementwise"} <= differs
    got = {f.name for part in ("parallel", "kernels") for f in dataclasses.fields(getattr(w_base, part))
           if getattr(getattr(w_base, part), f.name) != getattr(getattr(w_titan, part), f.name)}
    assert {"sequence_parallel", "zero_stage", "attention_kernel", "cross_entropy", "fused_elementwise"} <= got


def test_deepspeed_zero3_stack_sets_the_zero3_implementation(tmp_path):
    case = _case("DeepSpeed ZeRO-3 (v0.3.16)", parallel={"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1,
                                                          "global_batch_size": 8, "zero_stage": 3,
                                                          "recompute": "full"})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.zero_impl is ZeroImpl.DEEPSPEED_0_3
    assert any(n.startswith("parallel.zero_impl: null -> deepspeed-0.3 (stack deepspeed-zero3:") for n in notes)


# --- bad stack files and names ------------------------------------------------------------------------


def _stack_file(tmp_path, **changes) -> str:
    data = {"name": "bad", "description": "probe", "extends": "megatron-core",
            "settings": {"zero_stage": {"value": 0, "why": "none", "sources": ["here"]}}}
    data.update(changes)
    return _write(tmp_path / "bad.yaml", data)


@pytest.mark.parametrize("changes, field", [
    ({"colour": "red"}, "colour"),
    ({"settings": {"zero_stage": {"value": 5, "why": "x", "sources": ["s"]}}}, "settings.zero_stage.value"),
    ({"settings": {"zero_stage": {"value": 0, "why": "x"}}}, "settings.zero_stage.sources"),
    ({"settings": {"zero_stage": {"value": 0, "sources": ["s"]}}}, "settings.zero_stage.why"),
    ({"settings": {"zero_stage": {"why": "x", "sources": ["s"]}}}, "settings.zero_stage.value"),
    ({"settings": {"warp_drive": {"value": 1, "why": "x", "sources": ["s"]}}}, "settings.warp_drive"),
    ({"settings": {"attention_kernel": {"value": "fast", "why": "x", "sources": ["s"]}}},
     "settings.attention_kernel.value"),
    ({"settings": {"memory_savers": {"value": ["nap"], "why": "x", "sources": ["s"]}}},
     "settings.memory_savers.value"),
    ({"extends": None}, "settings.sequence_parallel"),  # a stack of its own must give every setting
    ({"extends": "no-such-stack"}, "extends"),
    ({"matches": [{"pattern": "(unclosed"}]}, "matches[0].pattern"),
    ({"matches": [{"pattern": "x", "years": [2024, 2020]}]}, "matches[0].years"),
    ({"fallback": {"years": "recent"}}, "fallback.years"),
])
def test_a_bad_stack_file_is_one_config_error_naming_the_field(tmp_path, changes, field):
    path = _stack_file(tmp_path, **changes)
    with pytest.raises(ConfigError) as err:
        load_stack(path)
    assert err.value.field == field
    assert err.value.path == path


def test_a_cycle_of_extends_is_refused(tmp_path):
    _write(tmp_path / "a.yaml", {"name": "a", "extends": "b.yaml"})
    _write(tmp_path / "b.yaml", {"name": "b", "extends": "a.yaml"})
    with pytest.raises(ConfigError) as err:
        load_stack(str(tmp_path / "a.yaml"))
    assert err.value.field == "extends"


def test_an_unknown_stack_in_a_case_is_one_line_naming_the_case(tmp_path, capsys):
    path = _write(tmp_path / "c.yaml", _case(stack="megatron-9000"))
    assert main(["run", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"llmsim: error: {path}: stack: expected a stack file")
    assert "megatron-core" in err[0] and "'megatron-9000'" in err[0]


def test_a_bad_stack_file_named_by_a_case_is_one_line_naming_the_stack_file(tmp_path, capsys):
    bad = _stack_file(tmp_path, settings={"zero_stage": {"value": "three", "why": "x", "sources": ["s"]}})
    path = _write(tmp_path / "c.yaml", _case(stack="bad.yaml"))
    assert main(["run", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"llmsim: error: {bad}: settings.zero_stage.value: expected")


# --- recipe defaults of the stacks (issue #30, step 2) and 16-bit gradient reduction ---------------


def _bridge_case(dtype: str, gpu: str = "B200", **parallel) -> dict:
    par = {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1, "global_batch_size": 8, **parallel}
    return _case("NeMo 26.04.01 container / Megatron-Bridge (Megatron-Core)", dtype=dtype,
                 system={"gpu": gpu, "num_gpus": 8}, parallel=par)


def test_megatron_bridge_runs_as_its_performance_scripts_do(tmp_path):
    """Sequence parallelism and TP overlap under TP > 1, gradients reduced in bf16, each noted
    with the stack's name; NVFP4 keeps TP overlap off (its by_dtype entry)."""
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", _bridge_case("fp8")))
    p, k = w.parallel, w.kernels
    assert (p.sequence_parallel, p.tp_comm_overlap, k.grad_reduce_in_fp32) == (True, True, False)
    assert any(n.startswith("parallel.tp_comm_overlap: null -> true (stack megatron-bridge:") for n in notes)
    assert any(n.startswith("parallel.grad_reduce_in_fp32: null -> false (stack megatron-bridge:") for n in notes)
    fp4, notes4 = load_workload_with_notes(_write(tmp_path / "n.yaml", _bridge_case("nvfp4")))
    assert (fp4.parallel.sequence_parallel, fp4.parallel.tp_comm_overlap) == (True, False)
    assert any(n.startswith("parallel.sequence_parallel: null -> true (stack megatron-bridge: its performance")
               for n in notes4)
    given, _ = load_workload_with_notes(_write(tmp_path / "g.yaml", _bridge_case(
        "fp8", tp_comm_overlap=False, sequence_parallel=False, grad_reduce_in_fp32=True)))
    assert (given.parallel.sequence_parallel, given.parallel.tp_comm_overlap,
            given.kernels.grad_reduce_in_fp32) == (False, False, True)  # the case's own settings win


def test_nemo_25_reduces_fp8_runs_gradients_in_bf16(tmp_path):
    case = _case("NeMo 25.04.rc2 (Megatron-Core)", system={"gpu": "H100-SXM5-80GB", "num_gpus": 8})
    fp8, _ = load_workload_with_notes(_write(tmp_path / "a.yaml", dict(case, dtype="fp8")))
    bf16, _ = load_workload_with_notes(_write(tmp_path / "b.yaml", dict(case, dtype="bf16")))
    assert not fp8.kernels.grad_reduce_in_fp32 and bf16.kernels.grad_reduce_in_fp32
    assert fp8.parallel.sequence_parallel and bf16.parallel.sequence_parallel  # TP 2


@pytest.mark.parametrize("case", ["nemo_longseq_h100_llama2_7b_128k_cp4", "nemo_longseq_h100_llama2_7b_16k_cp1"])
def test_nemo_24_03_prices_attention_with_flash_attention_2_as_its_launcher_ran_it(case):
    """NeMo-Framework-Launcher 24.01-24.07 exports NVTE_FUSED_ATTN=0, so Transformer Engine runs
    the flash-attn kernels (FlashAttention-2) in place of cuDNN's, with context parallelism or
    without: a NeMo 24.03.01 long-sequence case is priced with flash2, and the note names the
    stack and the launcher's setting."""
    w, notes = load_workload_with_notes(str(preset_folder("workloads/validation") / "nemo-longseq.yaml"), case=case)
    assert w.kernels.attention_kernel is AttentionKernel.FLASH2 and w.kernels.flash_attention
    filled = [n for n in notes if n.startswith("parallel.attention_kernel:")]
    assert len(filled) == 1
    assert filled[0].startswith("parallel.attention_kernel: null -> flash2 (stack nemo-24.01-24.07:")
    assert "NVTE_FUSED_ATTN=0" in filled[0]
    assert any(n.startswith("stack: null -> nemo-24.01-24.07 (framework 'NeMo 24.03.01 (Megatron-Core)'")
               for n in notes)


@pytest.mark.parametrize("details, kernel, noted", [
    ("sequence_parallel; NVTE_FUSED_ATTN=0; NCCL_NVLS_ENABLE=0", AttentionKernel.FLASH2, True),
    ("export NVTE_FUSED_ATTN: '0'", AttentionKernel.FLASH2, True),
    ("NVTE_FUSED_ATTN=1; NVTE_FLASH_ATTN=0", AttentionKernel.VENDOR, False),
    ("NVTE_FUSED_ATTN=10", AttentionKernel.VENDOR, False),
    (None, AttentionKernel.VENDOR, False)])
def test_a_case_that_turns_fused_attention_off_runs_flash_attention_2(tmp_path, details, kernel, noted):
    """Launch scripts that export NVTE_FUSED_ATTN=0 (DGX Cloud's Grok-1 and Nemotron-4 340B
    recipes) make Transformer Engine run FlashAttention-2 in place of cuDNN's kernel: a case
    whose published settings say so is priced with it, noted; on or unsaid, the stack's kernel."""
    case = _case("NeMo 24.09 (Megatron-Core)", system={"gpu": "H100-SXM5-80GB", "num_gpus": 8})
    case["parallel"]["details"] = details
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.kernels.attention_kernel is kernel
    assert any(n.startswith("parallel.attention_kernel: null -> flash2 (the case's settings turn Transformer "
                            "Engine's fused attention off") for n in notes) is noted
    # torchtitan's SDPA is not Transformer Engine's: the switch does not apply, the stack's kernel does
    titan = _case("torchtitan", system={"gpu": "H100-SXM5-80GB", "num_gpus": 8})
    titan["parallel"]["details"] = "NVTE_FUSED_ATTN=0"
    t, t_notes = load_workload_with_notes(_write(tmp_path / "t.yaml", titan))
    assert t.kernels.attention_kernel is AttentionKernel.FLASH2
    assert not any("NVTE_FUSED_ATTN=0)" in n for n in t_notes)


@pytest.mark.parametrize("file, case", [
    ("nemo-longseq.yaml", "nemo_longseq_b200_llama3_8b_128k"),  # NeMo 25.04: NVTE_FUSED_ATTN=1
    ("megatronbridge.yaml", None),
])
def test_later_nemo_releases_keep_cudnn_attention(file, case):
    """NeMo 2's performance scripts export NVTE_FUSED_ATTN=1 and Megatron-Bridge leaves
    Transformer Engine's choice alone: their cases keep the vendor (cuDNN) kernel, unnoted."""
    path = preset_folder("workloads/validation") / file
    case = case or yaml.safe_load(path.read_text())[0]["id"]
    w, notes = load_workload_with_notes(str(path), case=case)
    assert w.kernels.attention_kernel is AttentionKernel.VENDOR
    assert not any(n.startswith("parallel.attention_kernel:") for n in notes)
    assert not any("nemo-24.01-24.07" in n for n in notes)


def test_a_case_s_own_attention_kernel_wins_over_the_nemo_24_launcher_stack(tmp_path):
    case = _case("NeMo 24.03.01 (Megatron-Core)", system={"gpu": "H100-SXM5-80GB", "num_gpus": 8})
    case["parallel"] = dict(case["parallel"], attention_kernel="vendor")
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.kernels.attention_kernel is AttentionKernel.VENDOR
    stacked, _ = load_workload_with_notes(_write(tmp_path / "d.yaml", _case("NeMo 24.03.01 (Megatron-Core)")))
    assert stacked.kernels.attention_kernel is AttentionKernel.FLASH2


def test_a_launch_flag_turns_fp32_gradient_reduction_off(tmp_path):
    case = _case("Megatron-Core", parallel={"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1,
                                            "global_batch_size": 8, "details": "--grad-reduce-in-bf16"})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert not w.kernels.grad_reduce_in_fp32
    assert "parallel.grad_reduce_in_fp32: null -> false (the case's flags list --grad-reduce-in-bf16)" in notes


def test_a_bad_by_dtype_entry_names_the_field(tmp_path):
    entry = {"value": True, "why": "x", "sources": ["s"], "by_dtype": {"fp32": {"value": False, "why": "y",
                                                                               "sources": ["s"]}}}
    path = _stack_file(tmp_path, settings={"tp_comm_overlap": entry})
    with pytest.raises(ConfigError) as err:
        load_stack(path)
    assert err.value.field == "settings.tp_comm_overlap.by_dtype.fp32"
    entry["by_dtype"] = {"nvfp4": {"value": "off", "why": "y", "sources": ["s"]}}
    with pytest.raises(ConfigError) as err:
        load_stack(_stack_file(tmp_path, settings={"tp_comm_overlap": entry}))
    assert err.value.field == "settings.tp_comm_overlap.by_dtype.nvfp4.value"


def test_16_bit_gradient_reduction_halves_the_gradient_bytes():
    """grad_reduce_in_fp32 false: Megatron-Core's gradient buffer takes the weights' dtype, so
    the gradients' memory and every data-parallel gradient reduction move half the bytes."""
    from sim.memory import state_bytes
    from sim.workload.taskgraph import build_program
    from tests.conftest import make_workload

    fp32 = make_workload(tp=1, pp=1, dp=4, gbs=8, layers=2)
    bf16 = dataclasses.replace(fp32, kernels=dataclasses.replace(fp32.kernels, grad_reduce_in_fp32=False))
    assert state_bytes(bf16.model, bf16.parallel, 0, kernels=bf16.kernels).grads_bytes == \
        pytest.approx(state_bytes(fp32.model, fp32.parallel, 0, kernels=fp32.kernels).grads_bytes / 2)

    def grad_bytes(w):
        prog = build_program(w)
        return sum(t.op.size_bytes for t in prog.tasks if t.comm and "grads" in t.name)

    assert grad_bytes(fp32) > 0
    assert grad_bytes(bf16) == pytest.approx(grad_bytes(fp32) / 2)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="typing.get_overloads is new in Python 3.11")
def test_the_types_stack_value_declares_are_those_its_settings_are_read_as():
    """``Stack.value``'s overloads (FlagSetting, CountSetting, ...) name every setting once, with
    the type of the value its SETTINGS reader gives: held against every shipped stack."""
    import typing

    from sim.config.stack import (
        CountSetting,
        DpShard,
        FlagSetting,
        MemorySaverKind,
        MicroBatchRule,
        RecomputeSetting,
        Stack,
        TpOverlapImpl,
    )
    from sim.types import CpCommType, LossKind, RecomputeKind, ScalingRecipe

    declared: dict[str, tuple[type, ...]] = {}
    for keys, kinds in ((FlagSetting, (bool,)), (CountSetting, (int,)), (RecomputeSetting, (RecomputeKind,))):
        declared.update({k: kinds for k in typing.get_args(keys)})
    for overload in typing.get_overloads(Stack.value):
        hints = typing.get_type_hints(overload, globalns=vars(sys.modules["sim.config.stack"]))
        keys, ret = typing.get_args(hints["key"]), hints["return"]
        if len(keys) == 1:
            union = typing.get_origin(ret) in (typing.Union, types.UnionType)
            declared[keys[0]] = tuple(typing.get_origin(a) or a for a in typing.get_args(ret)) if union \
                else (typing.get_origin(ret) or ret,)
    assert set(declared) == {k.key for k in SETTINGS}
    assert declared["seq_length"] == declared["global_batch_size"] == (int, type(None))
    assert declared["cudnn_release"] == (tuple, type(None))
    assert declared["memory_savers"] == declared["step_passes"] == (frozenset,)
    assert {declared[k] for k in ("dp_shard", "zero_impl", "tp_comm_overlap_impl", "attention_kernel",
                                  "cross_entropy", "micro_batch_size", "cp_comm_type", "fp8_scaling")} == {
        (DpShard,), (ZeroImpl,), (TpOverlapImpl,), (AttentionKernel,), (LossKind,), (MicroBatchRule,),
        (CpCommType,), (ScalingRecipe,)}
    for stack in shipped_stacks():
        for key, kinds in declared.items():
            value = stack.value(key)  # type: ignore[call-overload]  # every key, the overload per key checked here
            assert isinstance(value, kinds), (stack.name, key, value)
        assert all(isinstance(v, MemorySaverKind) for v in stack.value("memory_savers"))


def test_a_null_global_batch_is_the_recipes(tmp_path):
    """NeMo's recipes give the global batch (the launcher's Llama recipes 2048 sequences, NeMo 2's
    512), made a multiple of micro-batch x dp; Megatron-LM's command line leaves it at one
    micro-batch a data-parallel rank, as a stack without one does."""
    def filled(framework: str, **parallel) -> tuple[int, list[str]]:
        par = {"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": None, "global_batch_size": None, **parallel}
        case = _case(framework, parallel=par)
        case["system"]["num_gpus"] = par["tp"] * par["pp"] * par["dp"]
        w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
        return w.parallel.global_batch_size, [n for n in notes if n.startswith("parallel.global_batch_size")]

    gbs, notes = filled("NeMo 24.03.01 (Megatron-Core)")
    assert gbs == 2048 and "stack nemo-24.01-24.07" in notes[0]
    gbs, notes = filled("NeMo 25.04 (Megatron-Core)")
    assert gbs == 512 and "stack nemo-25" in notes[0]
    gbs, notes = filled("NeMo 24.03.01 (Megatron-Core)", tp=1, pp=1, dp=3, micro_batch_size=2, sequence_parallel=False)
    assert gbs == 2052 and "rounded up to a multiple of micro_batch_size x dp = 6" in notes[0]  # 342 x 6
    gbs, notes = filled("Megatron-Core r0.8.0", micro_batch_size=2)
    assert gbs == 4 and "one micro-batch" in notes[0]
    gbs, _ = filled("NeMo 24.03.01 (Megatron-Core)", global_batch_size=16)  # a given batch stands
    assert gbs == 16


def test_llm_foundry_runs_fsdp_with_eager_modules(tmp_path):
    """A case of llm-foundry's trains as its configurations do: FSDP full sharding (ZeRO-3) with
    16-bit gradient reduction (mixed precision PURE), eager kernels with ATen's one-kernel
    LayerNorm, its default Triton FlashAttention (the first FlashAttention's rate), PyTorch's
    foreach-pass Adam and a clipped gradient norm; under
    the fallback (current Megatron-Core) the same case would run fused kernels and cuDNN."""
    import yaml
    doc = yaml.safe_load(Path("workloads/tiny.yaml").read_text())
    doc["model"].update(normalization="layernorm", position_embedding="alibi")
    doc["parallel"] = {k: v for k, v in doc["parallel"].items() if k not in ("zero_stage", "distributed_optimizer")}
    doc["framework"] = "MosaicML llm-foundry (Composer)"
    doc["system"]["gpu"] = "H100-SXM5-80GB"
    path = tmp_path / "foundry.yaml"
    path.write_text(yaml.safe_dump(doc))
    w = load_workload(str(path))
    k = w.kernels
    assert w.parallel.zero_stage == 3 and not k.grad_reduce_in_fp32 and not k.fused_elementwise
    assert k.attention_kernel is AttentionKernel.FLASH1 and k.adam_impl is AdamImpl.FOREACH
    assert k.step_passes == frozenset({StepPass.CLIP_GRAD_NORM})
    assert w.model.norm is NormKind.LAYERNORM and w.model.rotary is False
    megatron = load_workload(str(path), ["stack=megatron-core", "parallel.zero_stage=3"])
    assert megatron.kernels.fused_elementwise and megatron.kernels.attention_kernel is AttentionKernel.VENDOR


def test_a_hugging_face_fsdp_case_runs_eager_with_16_bit_reduction_and_llm_foundry_is_more_specific(tmp_path):
    """Transformers/Accelerate FSDP: full sharding, bf16 gradient reduction, eager kernels,
    FlashAttention-2 through SDPA, fp32 logits into PyTorch's cross entropy, foreach Adam. A text
    naming llm-foundry and PyTorch FSDP matches both, and llm-foundry, which extends
    pytorch-fsdp, wins."""
    doc = yaml.safe_load(Path("workloads/llama3-8b-h100.yaml").read_text())
    doc["parallel"] = {k: v for k, v in doc["parallel"].items()
                       if k not in ("zero_stage", "distributed_optimizer", "micro_batch_size")}
    doc["framework"] = "Hugging Face Transformers Trainer with Accelerate FSDP (2024)"
    path = tmp_path / "hf.yaml"
    path.write_text(yaml.safe_dump(doc))
    w, notes = load_workload_with_notes(str(path))
    k = w.kernels
    assert w.parallel.zero_stage == 3 and not k.grad_reduce_in_fp32 and not k.fused_elementwise
    assert k.attention_kernel is AttentionKernel.FLASH2 and k.cross_entropy is LossKind.TORCH_FP32
    assert k.adam_impl is AdamImpl.FOREACH and w.model.norm is NormKind.RMSNORM
    assert w.parallel.micro_batch_size == w.parallel.global_batch_size // w.parallel.dp
    assert any("stack: null -> pytorch-fsdp" in n for n in notes)
    choice = choose_stack("MosaicML llm-foundry (Composer, PyTorch FSDP)")
    assert choice.stack.name == "llm-foundry" and "pytorch-fsdp" in choice.why


def test_hugging_face_software_of_2023_runs_unfused_attention():
    """Before Transformers v4.36 (December 2023) attention was the model's eager tensor code: a
    text dated 2023 takes pytorch-fsdp-2023 (unfused attention), one dated 2024 or undated
    pytorch-fsdp (SDPA's FlashAttention-2); llm-foundry, which ran fused attention, stays itself."""
    old, new = choose_stack("Hugging Face Accelerate FSDP (2023)"), choose_stack("Hugging Face Accelerate FSDP")
    assert (old.stack.name, new.stack.name) == ("pytorch-fsdp-2023", "pytorch-fsdp")
    assert old.stack.value("flash_attention") is False and new.stack.value("flash_attention") is True
    assert old.stack.value("adam_impl") is new.stack.value("adam_impl")  # the rest is pytorch-fsdp's
    assert choose_stack("MosaicML llm-foundry (Composer, PyTorch FSDP)", 2023).stack.name == "llm-foundry"


@pytest.mark.parametrize("framework, dtype, remainders", [
    ("NeMo 24.07 container (Megatron-Core backend)", "bf16", True),
    ("NeMo 24.07 container (Megatron-Core backend)", "fp8", True),  # FP8 GEMMs, BF16 weights
    ("NeMo 24.07 container (Megatron-Core backend)", "fp16", False),
    ("NeMo 25.04.rc2 (Megatron-Core)", "bf16", False),
    ("NeMo 26.04.01 container / Megatron-Bridge (Megatron-Core)", "bf16", False),
    ("Megatron-Core", "bf16", False),
    ("torchtitan", "bf16", False),
])
def test_nemo_1_keeps_master_weights_as_16_bit_remainders(tmp_path, framework, dtype, remainders):
    """NeMo 1's distributed Adam (Apex) keeps fp32 state for a BF16 model as the 16 bits the
    weights lack: 10 bytes of optimizer state a parameter, not 12; NeMo 2, Megatron-Core and
    FSDP keep a full fp32 copy (or the fp32 weights themselves)."""
    from sim.memory import state_bytes

    case = _case(framework, dtype=dtype, system={"gpu": "H100-SXM5-80GB", "num_gpus": 8})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.kernels.master_param_remainders is remainders
    sb = state_bytes(w.model, w.parallel, 0, kernels=w.kernels)
    shards = w.parallel.shard_group_size if w.parallel.zero >= 1 else 1
    assert sb.optimizer_bytes == pytest.approx((10.0 if remainders else 12.0) * sb.params / shards, rel=1e-12)
    assert any(n.startswith("parallel.master_param_remainders: null -> true (stack nemo-24") for n in notes) \
        is remainders
    # the case's own value wins
    case["parallel"] = dict(case["parallel"], master_param_remainders=not remainders)
    assert load_workload(_write(tmp_path / "d.yaml", case)).kernels.master_param_remainders is (not remainders)


def test_the_adam_step_over_remainders_moves_28_bytes_a_parameter():
    """With the master weights as remainders the fused Adam step reads the BF16 weight, its
    remainder, the gradient and two moments and writes back all but the gradient (28 bytes a
    parameter, not the 30 of an fp32 master copy and its BF16 copy); the shard is the same
    parameters."""
    from sim.memory import state_bytes
    from sim.workload.step_passes import OPTIMIZER_BYTES_PER_PARAM, REMAINDER_ADAM_BYTES_PER_PARAM, optimizer_op
    from tests.conftest import make_workload

    master = make_workload(tp=1, pp=1, dp=4, gbs=8, layers=2)
    master = dataclasses.replace(master, kernels=dataclasses.replace(master.kernels, step_passes=frozenset()))
    rem = dataclasses.replace(master, kernels=dataclasses.replace(master.kernels, master_param_remainders=True))
    sm, sr = (state_bytes(w.model, w.parallel, 0, kernels=w.kernels) for w in (master, rem))
    assert sr.optimizer_bytes == pytest.approx(sm.optimizer_bytes * 10 / 12, rel=1e-12)
    assert (sr.weights_bytes, sr.grads_bytes) == (sm.weights_bytes, sm.grads_bytes)
    shard = sm.optimizer_bytes / 12.0
    assert optimizer_op(master, sm).bytes == pytest.approx(OPTIMIZER_BYTES_PER_PARAM * shard, rel=1e-12)
    assert optimizer_op(rem, sr).bytes == pytest.approx(REMAINDER_ADAM_BYTES_PER_PARAM * shard, rel=1e-12)


@pytest.mark.parametrize("framework, name", [
    ("Megatron-DeepSpeed (BigScience, 2022)", "megatron-deepspeed"),
    ("Megatron-DeepSpeed", "megatron-deepspeed"),
    ("Megatron DeepSpeed 2023", "megatron-deepspeed"),
    ("DeepSpeed-Megatron (BigScience BLOOM, 2022)", "megatron-deepspeed"),
    ("DeepSpeed-Megatron", "megatron-deepspeed"),  # not 2021's ZeRO-3, though undated
    ("DeepSpeed", "deepspeed-zero3"),  # undated DeepSpeed alone is still 2021's ZeRO-3
    ("Megatron-LM (+DeepSpeed ZeRO-3 for zero3 rows)", "deepspeed-zero3"),
    # EleutherAI's GPT-NeoX: Megatron's model code on DeepSpeed's engine, whatever DeepSpeed it names
    ("GPT-NeoX (DeepSpeed 0.9, 2023)", "megatron-deepspeed"), ("EleutherAI gpt-neox", "megatron-deepspeed"),
    ("GPT-NeoX, DeepSpeed (2021)", "megatron-deepspeed"),
])
def test_megatron_deepspeed_is_its_own_stack(framework, name):
    assert choose_stack(framework, 2021 if "2021" in framework else None).stack.name == name


def test_megatron_deepspeed_runs_deepspeeds_engine(tmp_path):
    """Megatron-DeepSpeed: Megatron's own layers without its asynchronous TP all-reduce or fused
    gradient accumulation, DeepSpeed's one-chunk pipeline, ZeRO-1 state
    from DeepSpeed's bf16 optimizer, whose gradients are all-reduced whole after the backward;
    under FP16 DeepSpeed's ZeRO optimizer reduces them to their owners instead."""
    from sim.types import ZeroImpl

    case = _case("Megatron-DeepSpeed (2022)")
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    p, k = w.parallel, w.kernels
    assert (p.zero_stage, p.zero_impl, p.distributed_optimizer) == (1, ZeroImpl.DEEPSPEED_BF16, False)
    assert p.shards_optimizer and not p.reduce_scatters_grads
    assert (p.virtual_pipeline_stages, p.overlap_grad_reduce) == (1, False)
    assert (k.async_tp_grad_allreduce, k.gradient_accumulation_fusion, k.flash_attention, k.unfused_linear_bias) \
        == (False, False, False, True)
    assert any(n.startswith("parallel.zero_impl: null -> deepspeed-bf16 (stack megatron-deepspeed:") for n in notes)
    fp16, _ = load_workload_with_notes(_write(tmp_path / "d.yaml", dict(case, dtype="fp16")))
    assert fp16.parallel.zero_impl is ZeroImpl.FSDP and fp16.parallel.reduce_scatters_grads
    # at ZeRO-3 the bf16 optimizer does not apply: the stack's impl is not taken
    z3, _ = load_workload_with_notes(_write(tmp_path / "e.yaml", dict(case, parallel=dict(case["parallel"],
                                                                                          zero_stage=3, pp=1, dp=4))))
    assert z3.parallel.zero_impl is ZeroImpl.FSDP


def test_deepspeed_bf16_optimizer_all_reduces_gradients_and_gathers_weights():
    """DeepSpeed's bf16 optimizer at ZeRO-1: the gradient buckets are all-reduced over the
    data-parallel group (fp32, the bytes of plain data parallelism), and the 16-bit weights are
    all-gathered after the step as the distributed optimizer's are; its optimizer state is
    ZeRO-1's."""
    from sim.memory import state_bytes
    from sim.types import CollectiveKind, ZeroImpl
    from sim.workload.taskgraph import build_program
    from tests.conftest import make_workload, replace_settings

    base = make_workload(tp=1, pp=1, dp=4, gbs=8, layers=2, overlap=False)
    zero1 = replace_settings(base, zero_stage=1)
    ds = replace_settings(zero1, zero_impl=ZeroImpl.DEEPSPEED_BF16)

    def grads(w):
        prog = build_program(w)
        return sorted((t.op.collective, round(t.op.size_bytes)) for t in prog.tasks if t.comm and "grads" in t.name)

    def gathers(w):
        prog = build_program(w)
        return sum(t.op.size_bytes for t in prog.tasks if t.comm and t.op.collective is CollectiveKind.ALL_GATHER)

    assert grads(ds) == grads(base) and {c for c, _ in grads(ds)} == {CollectiveKind.ALL_REDUCE}
    assert {c for c, _ in grads(zero1)} == {CollectiveKind.REDUCE_SCATTER}
    assert gathers(ds) == gathers(zero1) > 0 and gathers(base) == 0
    assert state_bytes(ds.model, ds.parallel, 0, kernels=ds.kernels) == \
        state_bytes(zero1.model, zero1.parallel, 0, kernels=zero1.kernels)
    with pytest.raises(ConfigError) as err:
        replace_settings(ds, zero_stage=3)
    assert err.value.field == "parallel.zero_impl"


def test_sequence_parallelism_asked_for_at_tp_1_runs_without_it(tmp_path):
    """Megatron-LM's and NeMo's argument checks turn sequence parallelism off without tensor
    parallelism; a case that publishes it at TP 1 is read so, noted, not refused."""
    case = _case(parallel={"tp": 1, "pp": 2, "dp": 4, "micro_batch_size": 1, "global_batch_size": 8,
                           "sequence_parallel": True})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.tp == 1 and w.parallel.sequence_parallel is False
    assert any(n.startswith("parallel.sequence_parallel: true -> false (tensor parallelism of 1") for n in notes)
    case["parallel"]["tp"], case["parallel"]["dp"] = 2, 2  # where TP has a group, it stands
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.sequence_parallel is True and not any("true -> false" in n for n in notes)


def test_a_null_global_batch_under_the_interleaved_schedule_is_the_fewest_it_runs(tmp_path):
    """Megatron-LM's default global batch is one micro-batch a data-parallel rank, which its
    interleaved schedule refuses: a case giving virtual stages but no global batch takes pp
    micro-batches, noted, where it was refused."""
    case = _case(parallel={"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1, "virtual_pipeline_stages": 2})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.num_microbatches == 2 and w.parallel.global_batch_size == 1 * 2 * 2
    assert any(n.startswith("parallel.global_batch_size: null -> 4 (") and "interleaved" in n for n in notes)
    del case["parallel"]["virtual_pipeline_stages"]  # 1F1B: Megatron's own default stands
    w, _ = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.num_microbatches == 1


def test_sequence_parallelism_turned_off_turns_the_stacks_tp_overlap_off(tmp_path):
    """Megatron-Bridge's scripts overlap TP communication under TP > 1, which needs sequence
    parallelism: a case that turns sequence parallelism off ran without the overlap (it was
    refused as contradictory); one that lists --tp-comm-overlap beside it still is."""
    case = _case("Megatron-Bridge (2025)", parallel={"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1,
                                                     "global_batch_size": 8, "sequence_parallel": False})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.tp_comm_overlap is False and w.parallel.sequence_parallel is False
    assert any(n.startswith("parallel.tp_comm_overlap: null -> false (") and "sequence parallelism off" in n
               for n in notes)
    case["parallel"]["details"] = "--tp-comm-overlap"
    with pytest.raises(ConfigError, match="sequence_parallel"):
        load_workload_with_notes(_write(tmp_path / "c.yaml", case))


@pytest.mark.parametrize("framework, year, name", [
    ("DeepSpeed v0.14.2, ZeRO-3", 2024, "deepspeed"),
    ("Hugging Face Trainer + DeepSpeed", 2024, "deepspeed"),
    ("Hugging Face Transformers + DeepSpeed ZeRO-2", 2023, "deepspeed-2023"),  # eager attention then
    ("DeepSpeed", 2022, "deepspeed-2023"),
    ("DeepSpeed 0.4.0", 2021, "deepspeed-2023"),  # ZeRO-3 with prefetched gathers, not 0.3's
    ("DeepSpeed 0.3.16", 2021, "deepspeed-zero3"),
    ("DeepSpeed", 2021, "deepspeed-zero3"),
    ("DeepSpeed", None, "deepspeed-zero3"),
    ("Megatron-DeepSpeed", 2024, "megatron-deepspeed"),
    ("Megatron-LM + DeepSpeed ZeRO-1", 2023, "megatron-core"),  # Megatron's model code
])
def test_deepspeed_from_0_4_is_its_own_stack(framework, year, name):
    assert choose_stack(framework, year).stack.name == name


def test_deepspeed_runs_its_zero_engine_defaults(tmp_path):
    """DeepSpeed's ZeRO engine over an eager Hugging Face model: ZeRO off unless the case names a
    stage, gradients reduced in 16 bits and not overlapped below stage 3 (overlap_comm), the
    norm and the fp32-to-16-bit copy of its step, its FusedAdam; the model code is pytorch-fsdp's."""
    case = _case("Hugging Face Trainer + DeepSpeed 0.12", parallel={"tp": 1, "pp": 1, "dp": 8,
                                                                     "micro_batch_size": 1, "global_batch_size": 8})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    p, k = w.parallel, w.kernels
    assert p.zero_stage == 0 and not p.overlap_grad_reduce and not k.grad_reduce_in_fp32
    assert k.adam_impl is AdamImpl.FUSED and k.step_passes == {StepPass.CLIP_GRAD_NORM, StepPass.MASTER_COPY}
    assert not k.fused_elementwise and k.flash_attention  # the eager model, SDPA's FlashAttention-2
    assert any(n.startswith("stack: null -> deepspeed (") for n in notes)
    case["parallel"]["zero_stage"] = 3
    w, _ = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.zero_stage == 3 and w.parallel.zero_impl is ZeroImpl.FSDP


def test_1f1b_with_chunks_is_megatrons_interleaved_1f1b(tmp_path):
    """Megatron-Core interleaves whenever a stage holds more than one chunk; a case that calls
    its schedule 1F1B and gives virtual stages is read so, noted, where it was refused."""
    case = _case(parallel={"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1, "global_batch_size": 8,
                           "schedule": "1f1b", "virtual_pipeline_stages": 2})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.schedule is ScheduleKind.INTERLEAVED and w.parallel.virtual_pipeline_stages == 2
    assert any(n.startswith("parallel.schedule: 1f1b -> interleaved-1f1b (virtual_pipeline_stages=2") for n in notes)
    case["parallel"]["virtual_pipeline_stages"] = 1  # one chunk a stage: 1F1B as given
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.schedule is ScheduleKind.ONE_F_ONE_B and not any("1f1b ->" in n for n in notes)


@pytest.mark.parametrize(("framework", "chunked"), [
    ("Megatron-LM (2022)", True), ("Megatron-LM (2021)", True),
    ("Megatron-Core", False), ("NeMo 24.07", False), ("Megatron-DeepSpeed (2022)", False), ("torchtitan", False),
])
def test_pipeline_sends_split_over_tp_only_where_the_release_splits_them(tmp_path, framework, chunked):
    """Without sequence parallelism Megatron-LM before Megatron-Core sends each TP rank's 1/tp
    chunk of a stage's output (its scatter/gather optimization, noted); Megatron-Core, DeepSpeed's
    pipeline engine and torch.distributed.pipelining send it whole from every rank. Under sequence
    parallelism every release sends the rank's share of the sequence. The program's sends and
    receives carry those bytes."""
    from sim.workload.taskgraph import build_program

    case = _case(framework, parallel={"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1, "global_batch_size": 8,
                                      "sequence_parallel": False})
    w, notes = load_workload_with_notes(_write(tmp_path / "c.yaml", case))
    assert w.parallel.pipeline_scatter_gather is chunked
    assert any(n.startswith("parallel.pipeline_scatter_gather: null -> true") for n in notes) is chunked
    whole = 1024 * 1 * 1024 * 2.0  # seq x micro-batch x hidden, 16 bits
    sizes = {t.op.size_bytes for t in build_program(w).tasks if t.comm and t.name.startswith("nccl")
             and t.op.collective.name == "SEND_RECV"}
    assert sizes == {whole / 2 if chunked else whole}
    # the chunks are all-gathered over the TP group after each receive, the whole output
    gathers = [t.op.size_bytes for t in build_program(w).tasks
               if t.comm and t.name.startswith("ncclAllGather pipeline")]
    assert (bool(gathers) and set(gathers) == {whole}) if chunked else not gathers
    case["parallel"]["sequence_parallel"] = True
    sp, _ = load_workload_with_notes(_write(tmp_path / "d.yaml", case))
    assert sp.pipeline_message_bytes == whole / 2
    # a case that says what its run did wins over the release
    case["parallel"].update(sequence_parallel=False, pipeline_scatter_gather=not chunked)
    own, _ = load_workload_with_notes(_write(tmp_path / "e.yaml", case))
    assert own.pipeline_message_bytes == (whole if chunked else whole / 2)
    # and so does a launch flag its published settings list
    case["parallel"].update(pipeline_scatter_gather=None, details="--no-scatter-gather-tensors-in-pipeline")
    listed, notes = load_workload_with_notes(_write(tmp_path / "f.yaml", case))
    assert listed.pipeline_message_bytes == whole
    assert any(n.startswith("parallel.pipeline_scatter_gather: null -> false (the case lists") for n in notes)


def test_deepspeeds_pipeline_engine_blocks_on_each_exchange_and_runs_1f1b_only(tmp_path):
    """Megatron-DeepSpeed and DeepSpeed run DeepSpeed's pipeline engine: under 1F1B each send
    and receive is a blocking exchange (``parallel.blocking_p2p``, noted); Megatron-Core's and
    PyTorch's schedules do not block on a send. DeepSpeed has no interleaved schedule: a case
    asking for both is refused on the field, and the stack's default stays off there."""
    w, notes = load_workload_with_notes(_write(tmp_path / "a.yaml", _case("Megatron-DeepSpeed (2022)")))
    assert w.parallel.blocking_p2p
    assert any(n.startswith("parallel.blocking_p2p: null -> true (stack megatron-deepspeed:") for n in notes)
    for framework in ("Megatron-Core", "torchtitan", "Megatron-LM (2021)"):
        other, _ = load_workload_with_notes(_write(tmp_path / "b.yaml", _case(framework)))
        assert not other.parallel.blocking_p2p, framework
    # a shape where it decides nothing keeps the stack's value, unnoted, for a sweep's other shapes
    flat, notes = load_workload_with_notes(_write(tmp_path / "f.yaml", _case("Megatron-DeepSpeed (2022)", parallel={
        "tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1, "global_batch_size": 8})))
    assert flat.parallel.blocking_p2p and not any("blocking_p2p" in n for n in notes)
    old, notes = load_workload_with_notes(_write(tmp_path / "g.yaml", _case("Megatron-LM (2022)", parallel={
        "tp": 1, "pp": 2, "dp": 4, "micro_batch_size": 1, "global_batch_size": 8})))
    assert old.parallel.pipeline_scatter_gather and not any("scatter_gather" in n for n in notes)
    interleaved = _case("Megatron-DeepSpeed (2022)", parallel={
        "tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1, "global_batch_size": 8,
        "virtual_pipeline_stages": 2, "schedule": "interleaved-1f1b"})
    w, _ = load_workload_with_notes(_write(tmp_path / "c.yaml", interleaved))
    assert not w.parallel.blocking_p2p
    interleaved["parallel"]["blocking_p2p"] = True
    with pytest.raises(ConfigError) as err:
        load_workload_with_notes(_write(tmp_path / "d.yaml", interleaved))
    assert err.value.field == "parallel.blocking_p2p"
