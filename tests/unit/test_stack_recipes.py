"""A stack's recipes by model (``by_model`` in a stack file, sim/config/stack.py): a framework's
launcher picks one configuration per model, so a setting the release leaves off in general can be
on for the models whose configuration turns it on. NeMo-Framework-Launcher 24.01-24.07 does so
for sequence parallelism and userbuffers TP overlap (``conf/training/*/*.yaml``)."""

from __future__ import annotations

import pytest
import yaml

from sim.config import load_workload_with_notes
from sim.config.presets import preset_folder
from sim.config.stacks import load_stack
from sim.errors import ConfigError
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.validate import case_topology
from sim.types import Dtype

NEMO_2407 = str(preset_folder("workloads/validation") / "nemo2407.yaml")


def _write(path, data) -> str:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _recipe(model: str, value: bool, why: str = "its recipe says so") -> dict:
    return {"model": model, "value": value, "why": why, "sources": ["a launcher configuration"]}


def _stack(tmp_path, **entry) -> str:
    setting = {"value": False, "why": "off in general", "sources": ["release notes"]}
    setting.update(entry)
    return _write(tmp_path / "mine.yaml", {"name": "mine", "description": "probe", "extends": "megatron-core",
                                           "settings": {"tp_comm_overlap": setting}})


def test_a_recipe_replaces_the_setting_for_the_models_it_names_and_the_first_match_wins(tmp_path):
    stack = load_stack(_stack(tmp_path, by_model=[_recipe(r"\bllama\b.*\b70b\b", True, "the 70B recipe"),
                                                   _recipe(r"\bllama\b", False, "every other Llama")]))
    assert stack.for_model("Llama 2 70B").value("tp_comm_overlap") is True
    assert stack.for_model("Llama 2 70B").why("tp_comm_overlap") == "stack mine: the 70B recipe"
    assert stack.for_model("LLAMA 2 7B").why("tp_comm_overlap") == "stack mine: every other Llama"
    assert stack.for_model("GPT-3 175B").value("tp_comm_overlap") is False
    assert stack.for_model("GPT-3 175B").why("tp_comm_overlap") == "stack mine: off in general"
    assert stack.for_model(None) is stack  # no name, no recipe


def test_a_number_formats_entry_wins_over_a_models_recipe(tmp_path):
    """The loader applies ``by_dtype`` before ``by_model``: Megatron-Bridge turns TP overlap
    off for NVFP4 whatever the model's recipe says."""
    stack = load_stack(_stack(tmp_path, by_model=[_recipe("llama", True)],
                              by_dtype={"nvfp4": {"value": False, "why": "not for NVFP4", "sources": ["s"]}}))
    assert stack.for_dtype(Dtype.FP8).for_model("Llama 2 70B").value("tp_comm_overlap") is True
    assert stack.for_dtype(Dtype.NVFP4).for_model("Llama 2 70B").value("tp_comm_overlap") is False


@pytest.mark.parametrize("by_model, field", [
    ("llama", "settings.tp_comm_overlap.by_model"),
    ([], "settings.tp_comm_overlap.by_model"),
    ([{"model": "llama(", "value": True, "why": "x", "sources": ["s"]}], "settings.tp_comm_overlap.by_model.0.model"),
    ([{"value": True, "why": "x", "sources": ["s"]}], "settings.tp_comm_overlap.by_model.0.model"),
    ([{"model": "llama", "value": "on", "why": "x", "sources": ["s"]}], "settings.tp_comm_overlap.by_model.0.value"),
    ([{"model": "llama", "value": True, "sources": ["s"]}], "settings.tp_comm_overlap.by_model.0.why"),
    ([{"model": "llama", "value": True, "why": "x"}], "settings.tp_comm_overlap.by_model.0.sources"),
    ([{"model": "llama", "value": True, "why": "x", "sources": ["s"], "by_model": []}],
     "settings.tp_comm_overlap.by_model.0.by_model"),
])
def test_a_bad_recipe_entry_is_one_config_error_naming_the_field(tmp_path, by_model, field):
    with pytest.raises(ConfigError) as err:
        load_stack(_stack(tmp_path, by_model=by_model))
    assert err.value.field == field and err.value.path.endswith("mine.yaml")


@pytest.mark.parametrize("case, sp, overlap, recipe", [
    ("nemo2407_h100_fp8_LLAMA2-70B_64gpu", True, True, "llama2_70b.yaml"),
    ("nemo2407_h100_fp8_LLAMA3-70B_64gpu", True, True, "llama3_70b.yaml"),
    ("nemo2407_h100_fp8_GPT3-175B_128gpu", True, False, "175b.yaml"),
    ("nemo2407_h100_fp8_Nemotron-22B_64gpu", True, True, "nemotron_"),
    ("nemo2407_h100_fp8_Nemotron-340B_128gpu", True, False, "nemotron_"),
])
def test_nemo_24_07_runs_each_model_as_its_launcher_configuration_does(case, sp, overlap, recipe):
    """The NeMo 24.07 performance-summary cases leave sequence parallelism and TP overlap null;
    NeMo-Framework-Launcher's configuration for each model sets them, and the notes cite it."""
    w, notes = load_workload_with_notes(NEMO_2407, case=case)
    assert (w.parallel.sequence_parallel, w.parallel.tp_comm_overlap) == (sp, overlap)
    filled = [n for n in notes if n.startswith(("parallel.sequence_parallel:", "parallel.tp_comm_overlap:"))]
    assert any(recipe in n and "stack nemo-24.01-24.07: the launcher's" in n for n in filled), filled


def test_the_recipe_changes_the_iteration_it_prices():
    """Llama 2 70B at TP 4 under its recipe (sequence parallelism and userbuffers overlap)
    exposes less TP communication than the same case with both off, and runs faster."""
    w, _ = load_workload_with_notes(NEMO_2407, case="nemo2407_h100_fp8_LLAMA2-70B_64gpu")
    off, _ = load_workload_with_notes(NEMO_2407, ["parallel.sequence_parallel=false", "parallel.tp_comm_overlap=false"],
                                      case="nemo2407_h100_fp8_LLAMA2-70B_64gpu")
    on_r = make_report(simulate(w, case_topology(w), granularity="layer"))
    off_r = make_report(simulate(off, case_topology(off), granularity="layer"))
    assert on_r.exposed_comm_s["tp"] < 0.5 * off_r.exposed_comm_s["tp"]
    assert on_r.iteration_time_s < 0.95 * off_r.iteration_time_s


def test_a_model_without_a_recipe_keeps_the_releases_setting():
    """GPT-3 175B's launcher configuration leaves userbuffers overlap off (TP 4): the release's
    value holds, with its own why."""
    w, _ = load_workload_with_notes(NEMO_2407, case="nemo2407_h100_fp8_GPT3-175B_128gpu")
    assert w.parallel.sequence_parallel and not w.parallel.tp_comm_overlap
    stack = load_stack("nemo-24.01-24.07").for_model(w.model.name)
    assert stack.why("tp_comm_overlap").startswith("stack nemo-24.01-24.07: off unless the model's launcher")
    assert load_stack("nemo-24.01-24.07").for_model("Llama 2 70B").value("tp_comm_overlap")


@pytest.mark.parametrize("name, sp, overlap", [
    ("Llama 2 70B", True, True), ("llama2_70b", True, True), ("Meta-Llama-3.1-70B", True, True),
    ("Llama 3/3.1 70B", True, True), ("Llama 2 7B", False, False), ("Llama 2 700B", False, False),
    ("TinyLlama-2 70B", False, False), ("GPT-3 175B (NeMo config)", True, False), ("gpt3_20b", True, True),
    ("GPT-3 5B", False, False), ("Nemotron-4-340B", True, False), ("nemotron_15b", True, True),
    ("Nemotron-3-8B", True, True), ("Nemotron-4 4B", False, False)])
def test_the_nemo_24_07_recipes_find_the_usual_spellings_of_their_models(name, sp, overlap):
    """Each launcher configuration is found under the names people write for its model, and no
    other model's (a 7B is not a 70B; TinyLlama is not Llama)."""
    stack = load_stack("nemo-24.01-24.07").for_model(name)
    assert (stack.value("sequence_parallel"), stack.value("tp_comm_overlap")) == (sp, overlap)


@pytest.mark.parametrize("stack, name, sp, overlap", [
    ("nemo-24", "Llama 3.1 405B", True, True), ("nemo-24", "Meta-Llama-3.1-70B", True, True),
    ("nemo-24", "Llama 3.1 8B", False, False), ("nemo-24", "Mixtral 8x22B", True, False),
    ("nemo-24", "Nemotron-4-340B", True, False), ("nemo-24", "GPT-3 20B", True, True),
    ("nemo-24.01-24.07", "Mixtral 8x22B", False, False),  # its launcher's Mixtral configurations differ by release
    ("nemo-25", "Llama 3 70B", True, True),  # NeMo 2's recipes, not the launcher's configurations:
    ("nemo-25", "Nemotron-4-340B", True, True),  # on in its performance recipe, off in the launcher's
])
def test_each_nemo_release_runs_the_launcher_configurations_of_its_own(stack, name, sp, overlap):
    """NeMo-Framework-Launcher 24.09-24.12 (stack nemo-24) adds Llama 3.1 and turns sequence
    parallelism on for Mixtral; NeMo 25.x (NeMo 2's recipes, stack nemo-25) runs its own
    performance recipes, not the launcher's configurations."""
    s = load_stack(stack).for_model(name)
    assert (s.value("sequence_parallel"), s.value("tp_comm_overlap")) == (sp, overlap)


# NeMo 2 (stack nemo-25): the performance scripts run each model's recipe with
# performance_mode=True (nemo/collections/llm/recipes/<model>.py @ v2.2.0-v2.4.0)
_LLAMA3_70B_TABLE, _GPT3_TABLE, _LLAMA31_405B_TABLE, _TE_DEFAULTS = "llama3-70b", "gpt3-175b", "llama31-405b", "te"


def _table(cfg) -> str:
    """Which userbuffers table ``cfg`` is, by the entries that tell the four apart."""
    if cfg is None:
        return _TE_DEFAULTS
    if cfg.split_of("fc2_fprop").ring:
        return _GPT3_TABLE
    if cfg.split_of("qkv_fprop").aggregate:
        return _LLAMA31_405B_TABLE
    return _LLAMA3_70B_TABLE


@pytest.mark.parametrize("name, overlap, table, fp32_grads", [
    ("GPT-3 175B", True, _GPT3_TABLE, False), ("gpt3_175b", True, _GPT3_TABLE, False),
    ("Llama 3 70B", True, _LLAMA3_70B_TABLE, False), ("Meta-Llama-3-70B", True, _LLAMA3_70B_TABLE, False),
    ("Llama 3.1 70B", True, _LLAMA3_70B_TABLE, True), ("llama31_70b", True, _LLAMA3_70B_TABLE, True),
    ("Llama 3.1 405B", True, _LLAMA31_405B_TABLE, False), ("llama3_1_405b", True, _LLAMA31_405B_TABLE, False),
    ("Llama 3 8B", False, _LLAMA3_70B_TABLE, False), ("Meta-Llama-3.1-8B", True, _LLAMA3_70B_TABLE, True),
    ("Nemotron-4 340B", True, _TE_DEFAULTS, False), ("nemotron4_15b", True, _TE_DEFAULTS, False),
    ("Nemotron-3 22B", True, _TE_DEFAULTS, False), ("Mistral-NeMo-12B", True, _TE_DEFAULTS, True),
    ("Llama 4 Scout", True, _TE_DEFAULTS, False), ("Qwen3-235B-A22B", True, _TE_DEFAULTS, True),
    ("Mixtral 8x7B", False, _LLAMA3_70B_TABLE, False),
    # no performance recipe of theirs turns it on: the release's value
    ("Llama 3.3 70B", False, _LLAMA3_70B_TABLE, True), ("Llama 2 70B", False, _LLAMA3_70B_TABLE, True),
    ("Nemotron-H 56B", False, _LLAMA3_70B_TABLE, True), ("nemotronh_8b", False, _LLAMA3_70B_TABLE, True),
    ("TinyLlama-3 70B", False, _LLAMA3_70B_TABLE, True), ("Llama 3.1 700B", False, _LLAMA3_70B_TABLE, True),
])
def test_nemo_25_runs_each_model_as_its_performance_recipe_does(name, overlap, table, fp32_grads):
    """NeMo 2's performance recipes set TP overlap, the userbuffers table and the gradients'
    reduction dtype model by model: on with a table of its own for GPT-3 175B, Llama 3 70B and
    Llama 3.1 405B, on without one (Transformer Engine's defaults) for Nemotron, Mistral NeMo,
    Llama 4 and Qwen3, off for Llama 3 8B and Mixtral; BF16 gradients except Llama 3.1 8B/70B's
    and Mistral NeMo's. Names are found in the usual spellings and no neighbour's."""
    stack = load_stack("nemo-25").for_dtype(Dtype.BF16).for_model(name)
    assert stack.value("tp_comm_overlap") is overlap
    assert _table(stack.value("tp_comm_overlap_cfg")) == table
    assert stack.value("grad_reduce_in_fp32") is fp32_grads
    # an FP8 run reduces its gradients in BF16 whatever the model (set_primary_perf_configs)
    assert load_stack("nemo-25").for_dtype(Dtype.FP8).for_model(name).value("grad_reduce_in_fp32") is False


def _nemo_25_case(tmp_path, name: str, tp: int, dtype: str = "bf16") -> str:
    """The llama3-70b preset's case (TP 4 x PP 8 on 64 H100s) under NeMo 25.02 with the
    model's name ``name``, TP ``tp`` and every recipe setting left null."""
    case = yaml.safe_load((preset_folder("workloads") / "llama3-70b.yaml").read_text())[0]
    case["model"]["name"] = name
    case["parallel"].update(tp=tp, pp=64 // (tp * 2), dp=2, virtual_pipeline_stages=None, schedule=None,
                            details=None, global_batch_size=64)
    case["dtype"] = dtype
    case["framework"] = "NeMo 25.02.01 (NeMo 2 performance scripts, Megatron-Core)"
    return _write(tmp_path / "nemo25.yaml", [case])


def test_a_nemo_25_case_names_the_performance_recipe_it_runs(tmp_path):
    """A NeMo 25.02 case of Nemotron-4 340B's shape name at TP 8 with its settings null runs its
    performance recipe: sequence parallelism, userbuffers overlap on Transformer Engine's
    defaults and BF16 gradient reduction, each noted with the recipe it comes from."""
    path = _nemo_25_case(tmp_path, "Nemotron-4 340B", tp=8)
    w, notes = load_workload_with_notes(path, case="megatronbridge_26.04.01_h100_llama3_70b_fp8_64gpu")
    p = w.parallel
    assert (p.sequence_parallel, p.tp_comm_overlap, w.kernels.grad_reduce_in_fp32) == (True, True, False)
    assert p.tp_comm_overlap_cfg.source == "Transformer Engine's userbuffers defaults"
    for key in ("parallel.tp_comm_overlap:", "parallel.grad_reduce_in_fp32:"):
        filled = [n for n in notes if n.startswith(key)]
        assert filled and "stack nemo-25: NeMo 2's" in filled[0] and "Nemotron" in filled[0], (key, notes)


def test_the_nemo_25_recipes_change_the_iteration_they_price(tmp_path):
    """Under NeMo 25's Nemotron recipe the case exposes less TP communication than with TP
    overlap off and moves half the gradient bytes of fp32 reduction, and runs faster than either."""
    path = _nemo_25_case(tmp_path, "Nemotron-4 340B", tp=8)
    case = "megatronbridge_26.04.01_h100_llama3_70b_fp8_64gpu"
    runs = {}
    for label, sets in (("recipe", []), ("no overlap", ["parallel.tp_comm_overlap=false"]),
                        ("fp32 grads", ["parallel.grad_reduce_in_fp32=true"])):
        w, _ = load_workload_with_notes(path, sets, case=case)
        runs[label] = make_report(simulate(w, case_topology(w), granularity="layer"))
    assert runs["recipe"].exposed_comm_s["tp"] < 0.5 * runs["no overlap"].exposed_comm_s["tp"]
    assert runs["recipe"].iteration_time_s < runs["no overlap"].iteration_time_s
    assert runs["recipe"].iteration_time_s < runs["fp32 grads"].iteration_time_s


@pytest.mark.parametrize("stack, name, fp32_grads", [
    ("nemo-24", "Nemotron-4 340B", False), ("nemo-24", "nemotron_340b", False), ("nemo-24", "Mixtral 8x7B", False),
    ("nemo-24", "mixtral_8x3b", False), ("nemo-24", "Mixtral 8x22B", True), ("nemo-24", "Nemotron-4 15B", True),
    ("nemo-24", "Llama 3 70B", True), ("nemo-24", "Nemotron-H 340B", True),
    ("nemo-24.01-24.07", "Nemotron-340B", False), ("nemo-24.01-24.07", "GPT-3 175B", True),
])
def test_the_launcher_syncs_gradients_in_bf16_where_its_configuration_says(stack, name, fp32_grads):
    """NeMo-Framework-Launcher's Nemotron 340B and Mixtral 8x7B (and 8x3B) configurations set
    ``optim.grad_sync_dtype: bf16`` (24.07 on); its other GPT, Llama and Nemotron ones, and
    Mixtral 8x22B's, leave Apex's fp32 gradient buckets."""
    s = load_stack(stack).for_dtype(Dtype.BF16).for_model(name)
    assert s.value("grad_reduce_in_fp32") is fp32_grads


def test_nemotron_340b_syncs_in_bf16_by_its_configuration_not_as_a_memory_saver():
    """NeMo's 24.07 Nemotron-4 340B row reduces its gradients in BF16 because its launcher
    configuration says so, noted with it, not because its memory forced a saver; it fits."""
    from sim.config.fit import fits_in_memory

    w, notes = load_workload_with_notes(NEMO_2407, case="nemo2407_h100_fp8_Nemotron-340B_128gpu")
    filled = [n for n in notes if n.startswith("parallel.grad_reduce_in_fp32:")]
    assert w.kernels.grad_reduce_in_fp32 is False
    assert filled and "nemotron_340b.yaml" in filled[0] and "memory savers" not in filled[0], filled
    assert fits_in_memory(w)


@pytest.mark.parametrize("stack, name, streams", [
    ("nemo-25", "DeepSeek-V3 671B", 4), ("nemo-25", "deepseek_v3", 4), ("nemo-25", "Llama 4 Scout", 4),
    ("nemo-25", "llama4_e128", 4), ("nemo-25", "Qwen3-30B-A3B", 4), ("nemo-25", "qwen3_235b_a22b", 4),
    # no configuration of theirs sets moe_grouped_gemm: SequentialMLP
    ("nemo-25", "Mixtral 8x7B", 1), ("nemo-25", "Mixtral 8x22B", 1), ("nemo-25", "DeepSeek-V2", 1),
    ("nemo-25", "Qwen3 32B", 1), ("nemo-25", "Llama 3 70B", 1),
    ("nemo-24", "DeepSeek-V3 671B", 1), ("nemo-24", "Mixtral 8x7B", 1), ("nemo-24.01-24.07", "Qwen3-30B-A3B", 1),
])
def test_nemo_runs_the_local_experts_as_its_model_configuration_says(stack, name, streams):
    """NeMo 2's DeepSeek-V3, Llama 4 and Qwen3 MoE configurations set ``moe_grouped_gemm``
    (TEGroupedMLP: one GEMM an expert on Transformer Engine's 4 streams); its Mixtral
    configuration and NeMo 1's launcher configurations run SequentialMLP."""
    assert load_stack(stack).for_dtype(Dtype.BF16).for_model(name).value("expert_gemm_streams") == streams


def test_a_nemo_25_deepseek_case_runs_grouped_experts_noted_with_its_configuration():
    """DeepSeek-V3 under NeMo 25 with its setting null runs its four local experts' GEMMs as
    TEGroupedMLP, noted with the configuration that sets it, and that iteration is faster than
    the same one with the experts one after another (SequentialMLP)."""
    path = str(preset_folder("workloads") / "deepseek-v3.yaml")
    sets = ["stack=nemo-25", "model.name=DeepSeek-V3 671B"]
    w, notes = load_workload_with_notes(path, sets)
    filled = [n for n in notes if "expert_gemm_streams" in n]
    assert w.kernels.expert_gemm_streams == 4
    assert filled and "deepseek.py" in filled[0] and "TEGroupedMLP" in filled[0], notes
    one, _ = load_workload_with_notes(path, [*sets, "kernels.expert_gemm_streams=1"])
    grouped, sequential = (make_report(simulate(x, case_topology(x), granularity="layer")).iteration_time_s
                           for x in (w, one))
    assert grouped < sequential
