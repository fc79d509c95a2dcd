"""Tests of sim.config: presets, validation cases, overrides, and one test per kind of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import sim
from sim.config import default_topology_name, load_cases, load_topology, load_workload, load_workload_with_notes
from sim.errors import ConfigError, excerpt
from sim.topology.spec import FabricKind, ScaleUpKind
from sim.types import Dtype, RecomputeKind, ScheduleKind
from sim.units import GiB

REPO = Path(sim.__file__).resolve().parent.parent
WORKLOADS = REPO / "workloads"
TOPOLOGIES = REPO / "topologies"
CASE_FILES = sorted((WORKLOADS / "validation").glob("*.yaml"))


def _tiny() -> dict:
    return yaml.safe_load((WORKLOADS / "tiny.yaml").read_text())


def _write(tmp_path: Path, data: object, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _error(path: Path, field: str, loader=load_workload, **kwargs) -> ConfigError:
    """Load ``path``, expect a ConfigError naming the file and ``field``, return it."""
    with pytest.raises(ConfigError) as info:
        loader(str(path), **kwargs)
    err = info.value
    assert path.name in str(err) and err.path == str(path)
    assert field in str(err) and err.field == field
    return err


def _tiny_with(tmp_path: Path, section: str | None, key: str, value: object) -> Path:
    data = _tiny()
    if section is None:
        data[key] = value
    else:
        data[section][key] = value
    return _write(tmp_path, data)


# --- presets and validation cases --------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(WORKLOADS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_workload_preset_loads(path):
    spec, _ = load_workload_with_notes(str(path))
    assert spec.parallel.num_gpus == spec.system.num_gpus
    assert load_workload(path.stem) == spec


def test_default_workload_is_gpt3_175b_on_64_a100s():
    spec, notes = load_workload_with_notes()
    p = spec.parallel
    assert spec.name == "gpt3-175b"
    assert (p.tp, p.pp, p.dp, p.virtual_pipeline_stages) == (8, 8, 1, 3)
    assert p.schedule is ScheduleKind.INTERLEAVED and p.recompute is RecomputeKind.SELECTIVE
    assert p.sequence_parallel and p.num_microbatches == 64
    assert spec.reference.iteration_time_s == 13.75
    assert "Korthikanti" in spec.reference.source
    assert spec.system.gpu.name == "A100-SXM4-80GB" and spec.system.topology == "dgx-a100"
    assert spec.model.num_layers == 96 and spec.model.hidden_size == 12288
    # the case says Megatron-LM (2022), whose stack predates FlashAttention in Megatron-LM
    assert sorted(n.split(":")[0] for n in notes) == ["parallel.flash_attention", "parallel.overlap_grad_reduce",
                                                      "parallel.overlap_p2p_comm", "parallel.step_passes",
                                                      "parallel.unfused_linear_bias", "stack"]
    assert notes[0].startswith("stack: null -> megatron-lm-2022 (framework 'Megatron-LM (2022)'")
    assert not spec.kernels.flash_attention


def test_default_preset_is_the_korthikanti_case_plus_name_and_topology():
    preset = yaml.safe_load((WORKLOADS / "gpt3-175b.yaml").read_text())
    cases = yaml.safe_load((WORKLOADS / "validation" / "korthikanti2022.yaml").read_text())
    case = next(c for c in cases if c["id"] == "korthikanti2022_t5_175B_selective_sp")
    assert preset.pop("name") == "gpt3-175b"
    assert preset["system"].pop("topology") == "dgx-a100"
    assert preset == case


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.stem)
def test_validation_cases_load_or_say_why_not(path):
    results = load_cases(str(path))
    assert len(results) == len(yaml.safe_load(path.read_text()))
    for case_id, result in results:
        assert case_id
        if isinstance(result, ConfigError):
            assert "not built yet" in result.expected or "not published" in result.expected, result
            assert result.path == str(path)
        else:
            assert result.parallel.num_gpus == result.system.num_gpus


def test_validation_case_counts():
    counts = {"loaded": 0, "not built yet": 0, "not published": 0}
    for path in CASE_FILES:
        for _, result in load_cases(str(path)):
            key = "loaded" if not isinstance(result, ConfigError) else \
                "not built yet" if "not built yet" in result.expected else "not published"
            counts[key] += 1
    print(counts)
    assert sum(counts.values()) == sum(len(yaml.safe_load(p.read_text())) for p in CASE_FILES)
    assert counts["loaded"] >= 70
    korthikanti = load_cases(str(WORKLOADS / "validation" / "korthikanti2022.yaml"))
    assert len(korthikanti) == 14
    assert not [cid for cid, r in korthikanti if isinstance(r, ConfigError)]


def test_nulls_are_filled_and_noted(tmp_path):
    data = _tiny()
    data["parallel"].update(dp=None, recompute=None, schedule=None, virtual_pipeline_stages=None)
    data["model"].update(ffn_hidden_size=None, num_kv_heads=None, gated_mlp=None,
                         activation="swiglu")
    data["dtype"] = None
    spec, notes = load_workload_with_notes(str(_write(tmp_path, data)))
    assert spec.parallel.dp == 2 and spec.parallel.recompute is RecomputeKind.NONE
    assert spec.parallel.schedule is ScheduleKind.ONE_F_ONE_B
    assert spec.model.ffn_hidden_size == 4096 and spec.model.num_kv_heads == 16
    assert spec.model.gated_mlp is True and spec.dtype is Dtype.BF16
    assert ("parallel.recompute: null -> none (stack megatron-core: no recomputation "
            "(Megatron-LM's --recompute-granularity defaults to none))") in notes
    assert any(n.startswith("parallel.dp: null -> 2") for n in notes)
    assert any(n.startswith("model.gated_mlp: null -> true") for n in notes)
    # the stack the defaults came from, and why: no framework named
    assert notes[0].startswith("stack: null -> megatron-core (no framework named;")
    assert len(notes) == 9


@pytest.mark.parametrize("schedule,vps", [("1f1b", 1), ("interleaved-1f1b", 2)])
@pytest.mark.parametrize("pp,gbs,mbs", [(1, 32, 16), (2, 32, 8), (2, 4, 1)])
def test_torchtitan_pipeline_defaults(tmp_path, pp, gbs, mbs, schedule, vps):
    """torchtitan (late 2024) splits a rank's local batch (global / dp) into as many pipeline
    micro-batches as pipeline stages, and gives an interleaved schedule two stages per rank."""
    data = _tiny()
    data["framework"] = "torchtitan"
    data["model"]["num_layers"] = 8
    data["parallel"].update(tp=1, pp=pp, dp=2, micro_batch_size=None, global_batch_size=gbs,
                            schedule=schedule if pp > 1 else "1f1b", virtual_pipeline_stages=None)
    data["system"]["num_gpus"] = 2 * pp
    spec, notes = load_workload_with_notes(str(_write(tmp_path, data)))
    p = spec.parallel
    assert p.micro_batch_size == mbs
    if pp > 1 and gbs // 2 >= pp:
        assert p.num_microbatches == pp
    assert p.virtual_pipeline_stages == (vps if pp > 1 else 1)
    assert any(n.startswith(f"parallel.micro_batch_size: null -> {mbs}") for n in notes)


def test_null_global_batch_is_one_microbatch_per_dp_rank(tmp_path):
    path = _write(tmp_path, {**_tiny(), "parallel": {**_tiny()["parallel"], "global_batch_size": None}})
    spec = load_workload(str(path))
    assert spec.parallel.global_batch_size == 2 and spec.parallel.num_microbatches == 1


def test_targets_become_a_reference_in_si_units(tmp_path):
    data = _tiny()
    data["source"] = {"publication": "Somebody 2024"}
    data["targets"] = {"tflops_per_gpu": {"value": 150, "includes_recompute": True},
                       "peak_memory_gib": {"value": 40.0}, "layer_forward_ms": {"value": 7.7}}
    ref = load_workload(str(_write(tmp_path, data))).reference
    assert ref.source == "Somebody 2024" and ref.tflops_per_gpu == 150
    assert ref.tflops_includes_recompute is True and ref.peak_memory_bytes == 40.0 * GiB
    assert ref.iteration_time_s is None
    assert load_workload("tiny").reference is None


def test_a_one_item_list_is_a_workload(tmp_path):
    assert load_workload(str(_write(tmp_path, [_tiny()]))).name == "tiny"


def test_hf_config_model_matches_the_explicit_one():
    hf, explicit = load_workload("llama3-8b-hf").model, load_workload("llama3-8b-h100").model
    assert hf.name == "llama-3-8b"
    assert hf.num_params() == explicit.num_params()
    assert (hf.num_kv_heads, hf.ffn_hidden_size, hf.seq_length, hf.gated_mlp) == (8, 14336, 8192, True)


def test_gpt2_hf_config(tmp_path):
    (tmp_path / "gpt2.json").write_text('{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, '
                                        '"n_head": 12, "n_positions": 1024, "n_inner": null, '
                                        '"vocab_size": 50257, "activation_function": "gelu_new"}')
    data = {**_tiny(), "model": "gpt2.json"}
    data["parallel"] = {**data["parallel"], "tp": 2}
    model = load_workload(str(_write(tmp_path, data))).model
    assert (model.hidden_size, model.num_layers, model.ffn_hidden_size) == (768, 12, 3072)
    assert model.seq_length == 1024 and model.tied_embeddings and not model.gated_mlp
    assert model.name == "gpt2"


# --- overrides --------------------------------------------------------------------------------


def test_overrides_change_the_spec():
    spec = load_workload("tiny", ["parallel.tp=4", "parallel.dp=1", "model.seq_length=4096",
                                  "system.gpu=H100-SXM5-80GB", "dtype=fp8"])
    assert (spec.parallel.tp, spec.parallel.dp, spec.model.seq_length) == (4, 1, 4096)
    assert spec.system.gpu.name == "H100-SXM5-80GB" and spec.dtype is Dtype.FP8


def test_override_dp_null_rederives_it():
    spec, notes = load_workload_with_notes("tiny", ["parallel.tp=4", "parallel.dp=null"])
    assert spec.parallel.dp == 1 and "parallel.dp: null -> 1" in notes[0]


def test_override_tp_alone_breaks_the_gpu_count():
    with pytest.raises(ConfigError, match="system.num_gpus") as info:
        load_workload("tiny", ["parallel.tp=4"])
    assert "tiny.yaml" in str(info.value) and "4x2x2x1 = 16" in info.value.expected


def test_override_a_hf_model_field():
    assert load_workload("llama3-8b-hf", ["model.seq_length=2048"]).model.seq_length == 2048


@pytest.mark.parametrize("item, field", [("parallel.foo=1", "parallel.foo"),
                                         ("hardware.tp=1", "hardware.tp"),
                                         ("bogus=1", "bogus"),
                                         ("parallel.tp", "parallel.tp")])
def test_bad_override(item, field):
    with pytest.raises(ConfigError) as info:
        load_workload("tiny", [item])
    assert info.value.path == "<--set>" and info.value.field == field and field in str(info.value)


# --- bad workload input: one test per kind ----------------------------------------------------


def test_yaml_syntax_error(tmp_path):
    path = _write(tmp_path, "model:\n  num_layers: [4\nsystem: {}\n")
    err = _error(path, "line 3")
    assert err.expected == "valid YAML"


def test_missing_file(tmp_path):
    _error(tmp_path / "nope.yaml", "<file>")


def test_top_level_not_a_mapping(tmp_path):
    _error(_write(tmp_path, "just a string\n"), "<top level>")


def test_two_cases_for_one_workload(tmp_path):
    _error(_write(tmp_path, [_tiny(), _tiny()]), "<top level>")


def test_unknown_top_level_key(tmp_path):
    err = _error(_tiny_with(tmp_path, None, "modle", {}), "modle")
    assert "'parallel'" in err.expected


def test_unknown_model_key(tmp_path):
    err = _error(_tiny_with(tmp_path, "model", "num_heads", 16), "model.num_heads")
    assert "num_attention_heads" in err.expected


def test_unknown_gpu(tmp_path):
    err = _error(_tiny_with(tmp_path, "system", "gpu", "V100"), "system.gpu")
    assert "A100-SXM4-80GB" in err.expected


def test_missing_field(tmp_path):
    data = _tiny()
    del data["model"]["hidden_size"]
    _error(_write(tmp_path, data), "model.hidden_size")


def test_wrong_type(tmp_path):
    err = _error(_tiny_with(tmp_path, "parallel", "tp", "eight"), "parallel.tp")
    assert err.got == "eight"


def test_bool_is_not_an_int(tmp_path):
    _error(_tiny_with(tmp_path, "parallel", "tp", True), "parallel.tp")


def test_heads_not_divisible_by_tp(tmp_path):
    err = _error(_tiny_with(tmp_path, "parallel", "tp", 3), "parallel.tp")
    assert "num_attention_heads=16" in err.expected


def test_layers_that_cannot_fill_the_pipeline(tmp_path):
    data = _tiny()
    data["model"]["num_layers"] = 1
    data["parallel"].update(virtual_pipeline_stages=2, schedule="interleaved-1f1b")
    _error(_write(tmp_path, data), "model.num_layers")


def test_uneven_layers_are_split_megatron_style_and_noted(tmp_path):
    spec, notes = load_workload_with_notes(str(_tiny_with(tmp_path, "model", "num_layers", 5)))
    # 5 + 2 units: 4 + 3 (the remainder to the first stage), less one each end
    assert [len(r) for r in spec.virtual_stage_layers()] == [3, 2]
    assert any(n.startswith("model.num_layers: 5 over 2 pipeline stages") for n in notes)


def test_global_batch_not_divisible(tmp_path):
    _error(_tiny_with(tmp_path, "parallel", "global_batch_size", 7), "parallel.global_batch_size")


def test_gpu_count_mismatch(tmp_path):
    _error(_tiny_with(tmp_path, "system", "num_gpus", 16), "system.num_gpus")


def test_dp_null_that_does_not_divide(tmp_path):
    data = _tiny()
    data["parallel"]["dp"] = None
    data["system"]["num_gpus"] = 6
    _error(_write(tmp_path, data), "parallel.dp")


def test_bad_enum(tmp_path):
    err = _error(_tiny_with(tmp_path, "parallel", "schedule", "zigzag"), "parallel.schedule")
    assert "interleaved-1f1b" in err.expected


def test_bad_dtype(tmp_path):
    _error(_tiny_with(tmp_path, None, "dtype", "int3"), "dtype")


def test_spec_check_names_the_file(tmp_path):
    err = _error(_tiny_with(tmp_path, "parallel", "ep", 2), "parallel.ep")
    assert "dense model" in err.expected or "divisor" in err.expected


def test_hf_config_path_missing(tmp_path):
    data = {**_tiny(), "model": {"hf_config": "missing.json"}}
    err = _error(_write(tmp_path, data), "model.hf_config")
    # the path as resolved beside the workload, quoted as a bounded excerpt (however long tmp_path is)
    assert excerpt(str(tmp_path / "missing.json")) in str(err)


def test_hf_config_bad_json(tmp_path):
    (tmp_path / "c.json").write_text('{"hidden_size": 4096,\n  oops}')
    path = _write(tmp_path, {**_tiny(), "model": "c.json"})
    with pytest.raises(ConfigError) as info:
        load_workload(str(path))
    assert info.value.path == str(tmp_path / "c.json") and info.value.field == "line 2"


def test_unknown_topology_in_workload(tmp_path):
    _error(_tiny_with(tmp_path, "system", "topology", "dgx-z9000"), "system.topology")


def test_topology_file_relative_to_the_workload(tmp_path):
    (tmp_path / "topo.yaml").write_text((TOPOLOGIES / "dgx-a100.yaml").read_text())
    spec = load_workload(str(_tiny_with(tmp_path, "system", "topology", "topo.yaml")))
    assert spec.system.topology == str(tmp_path / "topo.yaml")
    assert load_topology(spec.system.topology).name == "dgx-a100"


def test_bad_case_in_a_case_file_is_reported_not_raised(tmp_path):
    path = _write(tmp_path, [_tiny(), "not a case", {**_tiny(), "id": "broken", "parallel": {"tp": "x"}}])
    (first, ok), (second, bad), (third, worse) = load_cases(str(path))
    assert not isinstance(ok, ConfigError) and first == "bad[0]"
    assert isinstance(bad, ConfigError) and second == "bad[1]"
    assert isinstance(worse, ConfigError) and third == "broken" and worse.field == "parallel.tp"


# --- topologies -------------------------------------------------------------------------------


@pytest.mark.parametrize("name, up_bw, domain, nic_bw, nics, per_node", [
    ("dgx-a100", 300e9, 8, 25e9, 8, 8),
    ("dgx-h100", 450e9, 8, 50e9, 8, 8),
    ("dgx-b200", 900e9, 8, 50e9, 8, 8),
    ("gb200-nvl72", 900e9, 72, 50e9, 4, 4),
])
def test_topology_presets_in_si_units(name, up_bw, domain, nic_bw, nics, per_node):
    topo = load_topology(name)
    assert topo.name == name and topo.gpus_per_node == per_node and topo.num_gpus is None
    assert topo.scale_up.kind is ScaleUpKind.NVSWITCH and topo.scale_up.domain_size == domain
    assert topo.scale_up.link.bandwidth_bytes_per_s == pytest.approx(up_bw)
    assert topo.scale_up.link.latency_s == pytest.approx(0.3e-6)
    assert topo.scale_out.kind is FabricKind.RAIL_OPTIMIZED_FAT_TREE
    assert topo.scale_out.nic.bandwidth_bytes_per_s == pytest.approx(nic_bw)
    assert topo.scale_out.nic.latency_s == pytest.approx(1.35e-6)
    assert topo.scale_out.nics_per_node == nics
    assert 0 < topo.scale_up.link.efficiency(2**30) < 1
    assert load_topology(str(TOPOLOGIES / f"{name}.yaml")) == topo


def test_dgx_a100_numbers():
    topo = load_topology("dgx-a100")
    assert topo.gpu == "A100-SXM4-80GB" and topo.scale_out.nodes_per_leaf == 20
    assert topo.scale_up.link.efficiency(2**21) == pytest.approx(0.515)
    assert topo.scale_up.collective_latency_s == pytest.approx(36.4e-6) and topo.scale_up.nvls_efficiency is None
    assert topo.scale_up.link.efficiency(8 * 2**30) == pytest.approx(0.772)
    assert topo.scale_out.nic.efficiency(1e6) == pytest.approx(0.92)


def test_topology_overrides():
    topo = load_topology("dgx-a100", ["scale_up.bandwidth_GBps=600", "num_gpus=64"])
    assert topo.scale_up.link.bandwidth_bytes_per_s == 600e9 and topo.num_gpus == 64


@pytest.mark.parametrize("gpu, topo", [("A100-SXM4-80GB", "dgx-a100"), ("H100-SXM5-80GB", "dgx-h100"),
                                       ("H100-SXM5-96GB-HBM2e", "dgx-h100"), ("H200", "dgx-h100"),
                                       ("B200", "dgx-b200"), ("GB200", "gb200-nvl72"),
                                       ("GB300", "gb200-nvl72")])
def test_default_topology_name(gpu, topo):
    assert default_topology_name(gpu) == topo
    load_topology(topo)


def test_default_topology_name_unknown_gpu():
    with pytest.raises(ConfigError, match="system.gpu"):
        default_topology_name("V100")


def _topology_data() -> dict:
    return yaml.safe_load((TOPOLOGIES / "dgx-a100.yaml").read_text())


def test_topology_unknown_key(tmp_path):
    data = _topology_data()
    data["scale_up"]["bandwidth_gbps"] = 300
    err = _error(_write(tmp_path, data), "scale_up.bandwidth_gbps", loader=load_topology)
    assert "bandwidth_GBps" in err.expected


@pytest.mark.parametrize("section, key, value", [
    ("scale_up", "bandwidth_GBps", 1e-300), ("scale_up", "bandwidth_GBps", 0.05),
    ("scale_out", "nic_bandwidth_Gbps", 1e-300),
    ("scale_out", "efficiency", 1e-300), ("scale_up", "efficiency_by_size_bytes", [[1024, 1e-9], [2**30, 0.9]]),
])
def test_topology_refuses_a_link_too_slow_to_be_one(tmp_path, section, key, value):
    """A tiny bandwidth or efficiency is a typo: it would print an iteration time of hundreds of digits."""
    data = _topology_data()
    if key == "efficiency_by_size_bytes":
        data[section].pop("efficiency", None)
    elif key == "efficiency":
        data[section].pop("efficiency_by_size_bytes", None)
    data[section][key] = value
    field = f"{section}.{key}" + ("[0]" if key == "efficiency_by_size_bytes" else "")
    _error(_write(tmp_path, data), field, loader=load_topology)


def test_a_topology_takes_every_efficiency_a_calibration_writes():
    from sim.calibrate.scale_out import MIN_EFFICIENCY as written
    from sim.config.topology import MIN_EFFICIENCY

    assert MIN_EFFICIENCY == written


def test_topology_unknown_preset():
    with pytest.raises(ConfigError) as info:
        load_topology("dgx-z9000")
    assert "dgx-z9000" in str(info.value) and "dgx-a100" in info.value.expected


def test_topology_both_efficiencies(tmp_path):
    data = _topology_data()
    data["scale_up"]["efficiency"] = 0.9
    _error(_write(tmp_path, data), "scale_up.efficiency", loader=load_topology)


def test_topology_bad_curve(tmp_path):
    data = _topology_data()
    data["scale_up"]["efficiency_by_size_bytes"] = [[2, 0.5], [1, 0.6]]
    _error(_write(tmp_path, data), "scale_up.efficiency_by_size_bytes[1]", loader=load_topology)


def test_topology_bad_kind(tmp_path):
    data = _topology_data()
    data["scale_out"]["kind"] = "hypercube"
    err = _error(_write(tmp_path, data), "scale_out.kind", loader=load_topology)
    assert "fat-tree" in err.expected and "dragonfly" in err.expected


def test_topology_negative_bandwidth(tmp_path):
    data = _topology_data()
    data["scale_out"]["nic_bandwidth_Gbps"] = -1
    _error(_write(tmp_path, data), "scale_out.nic_bandwidth_Gbps", loader=load_topology)


def test_topology_spec_check_names_the_file(tmp_path):
    data = _topology_data()
    data["scale_up"]["domain_size"] = 3
    _error(_write(tmp_path, data), "scale_up.domain_size", loader=load_topology)


def _mixtral_with_etp(tmp_path: Path, etp: object) -> Path:
    data = yaml.safe_load((WORKLOADS / "mixtral-8x7b.yaml").read_text())
    data["model"]["hf_config"] = str(WORKLOADS / data["model"]["hf_config"])
    data["parallel"]["etp"] = etp
    return _write(tmp_path, data)


@pytest.mark.parametrize("etp", [3, "two", 0])
def test_bad_expert_tensor_parallel_size_is_one_line_naming_parallel_etp(tmp_path, etp):
    """Mixtral's TP 1 x DP 16 ranks per stage hold ETP x EP 8 expert ranks: 3 x 8 does not fit."""
    _error(_mixtral_with_etp(tmp_path, etp), "parallel.etp")


@pytest.mark.parametrize("key, value", [("hidden_size", 2**21), ("ffn_hidden_size", 10**12), ("seq_length", 2**28)])
def test_widths_and_sequences_past_any_model_are_refused(tmp_path, key, value):
    """A hidden size of 10^12 loaded and printed an iteration of years at 44% MFU: a typo."""
    _error(_tiny_with(tmp_path, "model", key, value), f"model.{key}")


@pytest.mark.parametrize("key, value", [("moe_top_k", "abc"), ("moe_top_k", [1]), ("moe_ffn_hidden_size", 1.5),
                                        ("num_shared_experts", {"a": 1}), ("moe_capacity_factor", "high")])
def test_a_dense_models_moe_settings_of_the_wrong_kind_are_refused_not_ignored(tmp_path, key, value):
    """A dense model does not use them, but a value of the wrong kind is a typo (of the model,
    or of ``num_experts``), not something to pass over in silence."""
    _error(_tiny_with(tmp_path, "model", key, value), f"model.{key}")
    load_workload(str(_tiny_with(tmp_path, "model", key, None)))


def test_expert_tensor_parallel_size_loads_and_null_is_megatron_cores_default(tmp_path):
    spec = load_workload(str(_mixtral_with_etp(tmp_path, 2)))
    assert (spec.parallel.etp, spec.parallel.expert_tp, spec.parallel.expert_dp) == (2, 2, 1)
    spec, notes = load_workload_with_notes(str(_mixtral_with_etp(tmp_path, None)))
    assert spec.parallel.etp is None and spec.parallel.expert_tp == spec.parallel.tp
    assert any(n.startswith("parallel.etp: null -> 1") for n in notes)


@pytest.mark.parametrize("changes, field, got", [
    ({"parallel": {"dp": 0, "tp": None, "pp": None}}, "parallel.dp", 0),
    ({"parallel": {"cp": 0, "tp": None, "pp": None}}, "parallel.cp", 0),
    ({"parallel": {"dp": -1, "tp": None, "pp": None}}, "parallel.dp", -1),
    ({"parallel": {"tp": 0, "pp": None}}, "parallel.tp", 0),
    ({"parallel": {"tp": None, "pp": 0}}, "parallel.pp", 0),
    ({"parallel": {"tp": None}, "system": {"num_gpus": 0}}, "system.num_gpus", 0),
    ({"parallel": {"tp": None, "pp": None}, "system": {"gpus_per_node": -8}}, "system.gpus_per_node", -8),
])
def test_a_non_positive_size_beside_null_tp_or_pp_is_a_config_error(tmp_path, changes, field, got):
    """TP and PP derived from the GPU count divide by DP x CP and search the divisors of the
    model-parallel size: a size below 1 is refused as one, not a ZeroDivisionError or an empty max()."""
    data = _tiny()
    data["system"]["num_gpus"] = 8
    for section, values in changes.items():
        data[section].update(values)
    err = _error(_write(tmp_path, data), field)
    assert err.expected == "a positive integer" and err.got == got


def test_a_target_with_only_its_recompute_flag_is_a_reference(tmp_path):
    data = _tiny()
    data["targets"] = {"tflops_per_gpu": {"value": None, "includes_recompute": False}}
    ref = load_workload(str(_write(tmp_path, data))).reference
    assert ref is not None and ref.tflops_includes_recompute is False and ref.tflops_per_gpu is None


@pytest.mark.parametrize("spelling, gated", [("Squared-ReLU", False), ("squared relu", False), ("ReGLU", True),
                                             (" SwiGLU ", True), ("GELU", False)])
def test_an_activation_is_read_in_any_case_with_spaces_or_hyphens(tmp_path, spelling, gated):
    """Published cases spell activations as their papers do (``squared-relu`` for Nemotron-4):
    read whatever the case, spaces and hyphens, and gated as the name says; a misspelling is
    still refused."""
    doc = _tiny()
    doc["model"].pop("gated_mlp", None)
    doc["model"]["activation"] = spelling
    assert load_workload(str(_write(tmp_path, doc))).model.gated_mlp is gated
    doc["model"]["activation"] = "swgilu"
    with pytest.raises(ConfigError, match="model.activation"):
        load_workload(str(_write(tmp_path, doc)))


@pytest.mark.parametrize("spelling, rotary, learned", [
    ("learned", False, True), ("Learned-Absolute", False, True), ("absolute", False, True),
    ("RoPE", True, False), ("rotary", True, False), ("YaRN", True, False), ("ALiBi", False, False),
    ("NoPE", False, False), ("sinusoidal", False, False)])
def test_a_position_embedding_is_read_as_papers_and_frameworks_name_it(tmp_path, spelling, rotary, learned):
    """``learned`` (a paper's word for Megatron-LM's ``learned_absolute``), ``rotary``, NeMo's
    ``yarn`` are read as the kind they name, a learned one with a table of the sequence's
    length; a misspelling is still refused."""
    doc = _tiny()
    doc["model"]["position_embedding"] = spelling
    model = load_workload(str(_write(tmp_path, doc))).model
    assert model.rotary is rotary
    assert model.learned_positions == (model.seq_length if learned else 0)
    doc["model"]["position_embedding"] = "lerned"
    with pytest.raises(ConfigError, match="model.position_embedding"):
        load_workload(str(_write(tmp_path, doc)))


@pytest.mark.parametrize("section, key, spelling, value", [
    (None, "dtype", "BF16", "bf16"), (None, "dtype", "bfloat16", "bf16"), (None, "dtype", "FP16", "fp16"),
    ("parallel", "schedule", "1F1B", "1f1b"), ("parallel", "schedule", "PipeDream-Flush", "1f1b"),
    ("parallel", "recompute", "Full", "full"), ("parallel", "recompute", "Selective", "selective"),
    ("system", "gpu", "h100 sxm5 80gb", "H100-SXM5-80GB"), ("system", "gpu", "A100-40GB", "A100-SXM4-40GB"),
    ("system", "gpu", "H100 SXM", "H100-SXM5-80GB"), ("network", "fabric", "InfiniBand", "infiniband-fat-tree"),
    ("network", "fabric", "Omni-Path", "omni-path"), ("network", "fabric", "RoCE v2", "roce")])
def test_named_values_are_read_in_any_case_and_spacing(tmp_path, section, key, spelling, value):
    """A format, schedule, recomputation or GPU is read whatever its case, spaces, hyphens and
    underscores, and under the names papers give it; a name of nothing is still refused."""
    doc = _tiny()
    if section == "network":
        doc["system"]["network"] = {"nics_per_node": 8, "nic_bandwidth_Gbps": 400}
    where = doc if section is None else doc["system"]["network"] if section == "network" else doc[section]
    where[key] = spelling
    w = load_workload(str(_write(tmp_path, doc)))
    read = {"dtype": lambda: w.dtype.value, "schedule": lambda: w.parallel.schedule.value,
            "recompute": lambda: w.parallel.recompute.value, "gpu": lambda: w.system.gpu.name,
            "fabric": lambda: w.system.network.fabric.value}[key]()
    assert read == value
    where[key] = spelling + "x"
    with pytest.raises(ConfigError, match=key):
        load_workload(str(_write(tmp_path, doc)))


@pytest.mark.parametrize("spelling", ["LayerNorm", "layer_norm", "Layer Norm", "RMSNorm", "rms_norm"])
def test_a_normalization_is_read_with_or_without_separators(tmp_path, spelling):
    doc = _tiny()
    doc["model"]["normalization"] = spelling
    norm = load_workload(str(_write(tmp_path, doc))).model.norm
    assert norm is not None and norm.value.replace("_", "") in spelling.lower().replace(" ", "").replace("_", "")


@pytest.mark.parametrize("layers, chunks", [(16, 2), (32, 4), (64, 8), (2, 1)])
def test_an_interleaved_schedule_without_a_chunk_count_gets_chunks_of_about_four_layers(tmp_path, layers, chunks):
    """A case that names ``interleaved-1f1b`` and leaves ``virtual_pipeline_stages`` null, under a
    stack that has no count (Megatron-LM asks for one), runs chunks of about LAYERS_PER_CHUNK
    layers, at least two a rank: not one chunk, which is no interleaving at all. A stage of
    fewer than two layers keeps one."""
    from sim.config.defaults import LAYERS_PER_CHUNK

    doc = _tiny()
    doc["model"]["num_layers"] = layers
    doc["parallel"].update(schedule="interleaved-1f1b", virtual_pipeline_stages=None, global_batch_size=16)
    doc["framework"] = "Megatron-LM (2024)"
    w, notes = load_workload_with_notes(str(_write(tmp_path, doc)))
    assert w.parallel.virtual_pipeline_stages == chunks
    if chunks > 1:
        per_stage = layers // w.parallel.pp
        assert abs(per_stage / chunks - LAYERS_PER_CHUNK) <= LAYERS_PER_CHUNK / 2
        assert any(n.startswith("parallel.virtual_pipeline_stages: null -> ") and "interleaved" in n for n in notes)


@pytest.mark.parametrize("name, vocab", [
    ("Llama 2 70B", 32000), ("Llama 3.1 405B", 128256), ("Nemotron-4 340B", 256000), ("GPT-3 175B", 50257),
    ("Mixtral 8x7B", 32000), ("Qwen3-30B-A3B", 151936), ("DeepSeek-V3 671B", 129280), ("Falcon-40B", 65024),
    ("BLOOM-176B", 250880), ("OPT-175B", 50272), ("MPT-30B", 50432), ("GPT-NeoX-20B", 50432),
    ("Gemma 2 9B", 256000)])
def test_a_null_vocabulary_is_the_model_familys_tokenizer(tmp_path, name, vocab):
    """A case that leaves the vocabulary null gets the tokenizer its model family ships with,
    read off the model's name and noted with where the size comes from."""
    data = _tiny()
    data["model"].update(name=name, vocab_size=None)
    w, notes = load_workload_with_notes(str(_write(tmp_path, data, "vocab.yaml")))
    assert w.model.vocab_size == vocab
    assert any(n.startswith(f"model.vocab_size: null -> {vocab} (") for n in notes)


@pytest.mark.parametrize("name", ["Mixtral 8x22B", "Mistral 7B v0.3", "Gemma 3 27B", "Falcon 3 10B", "probe"])
def test_a_null_vocabulary_of_a_family_whose_sizes_differ_is_refused(tmp_path, name):
    """Families whose releases changed tokenizer (Mistral's v0.3, Gemma 3, Falcon 3) or no known
    family: a null vocabulary is refused, naming the field, not guessed."""
    data = _tiny()
    data["model"].update(name=name, vocab_size=None)
    _error(_write(tmp_path, data), "model.vocab_size")


def test_sequence_parallelism_needs_a_sequence_the_tp_ranks_split_evenly():
    """Megatron-Core's sequence parallelism gives each TP rank an equal share of a context-parallel
    rank's tokens (tensor_parallel/mappings.py ``_split_along_first_dim``): a sequence they do not
    divide is refused, naming model.seq_length, where an open layout once priced a 1-token
    sequence's share as 0 tokens and divided by zero."""
    from tests.conftest import make_workload

    ok = make_workload(tp=4, sp=True, seq=4096)
    assert ok.parallel.sequence_parallel
    with pytest.raises(ConfigError) as err:
        make_workload(tp=4, sp=True, seq=4098)
    assert err.value.field == "model.seq_length" and "parallel.tp x parallel.cp = 4" in err.value.expected
    # 4,100 tokens split over CP 2 into 4 equal chunks, but a CP rank's 2,050 do not split over TP 4
    with pytest.raises(ConfigError) as err:
        make_workload(tp=4, cp=2, sp=True, seq=4100)
    assert err.value.field == "model.seq_length"
    assert make_workload(tp=2, cp=2, sp=True, seq=4100).model.seq_length == 4100
    assert make_workload(tp=4, sp=False, seq=4098).model.seq_length == 4098  # no SP: nothing split
