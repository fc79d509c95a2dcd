"""Megatron-Core's selective recomputation of submodules (``parallel.recompute_modules``,
``--recompute-modules``): each module drops its own activations and re-runs its own forward ops
before the backward that reads them; the simulated peak is the closed form's; the fitting of null
settings adds modules before full recomputation where the stack offers them; bad values are one
line naming the field, exit 2."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from sim.cli import main
from sim.config import load_topology, load_workload, load_workload_with_notes
from sim.config.defaults import module_recompute_sets
from sim.config.megatron_args import load_megatron_workload
from sim.errors import ConfigError
from sim.memory import activation_model, layer_activation_bytes, recompute_module_bytes, stage_memory
from sim.output.report import make_report
from sim.runner import simulate
from sim.types import Dtype, RecomputeKind, RecomputeModule, ScalingRecipe, ScheduleKind
from sim.workload.flops import model_flops
from sim.workload.spec import DEFAULT_RECOMPUTE_MODULES
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload, replace_settings

SEL = RecomputeKind.SELECTIVE
M = RecomputeModule


def _sel(w, *mods):
    """``w`` under selective recomputation of ``mods``."""
    return replace_settings(w, recompute=SEL, recompute_modules=frozenset(mods))


def _dense(**kw):
    kw = {"tp": 2, "sp": True, "layers": 4, "gbs": 8, **kw}
    return make_workload(**kw)


def _moe(**kw):
    kw = {"tp": 2, "sp": True, "dp": 2, "ep": 2, "experts": 4, "shared": 1, "first_dense": 1, "layers": 4,
          "gbs": 8, **kw}
    return make_workload(**kw)


def _mla():
    """DeepSeek-V3's layers (multi-latent attention, shared experts, dense first layers), small."""
    return load_workload("deepseek-v3", ["model.num_layers=4", "model.mtp_num_layers=0", "parallel.pp=1",
                                         "parallel.dp=64", "system.num_gpus=64", "parallel.global_batch_size=64"])


def _stored(w, moe=False):
    return layer_activation_bytes(w.model, w.parallel, moe=moe, kernels=w.kernels)


# --- memory: each module drops its own term ------------------------------------------------------


def test_a_dense_mlp_drops_its_inside_and_a_fused_norm_nothing():
    w = _dense()
    sb, f, t = 512, 4096, 2
    base = _stored(_sel(w, M.CORE_ATTN))
    assert base - _stored(_sel(w, M.CORE_ATTN, M.MLP)) == pytest.approx(sb * f * (2 + 2) / t)  # fc1 out, act out
    # Transformer Engine fuses a dense layer's norms into its linears: Megatron-Core has no
    # norm module to recompute there
    assert _stored(_sel(w, M.CORE_ATTN, M.LAYERNORM)) == base


def test_core_attn_drops_the_scores_only_without_fused_attention():
    w = _dense(flash=False)
    heads, s = 16 / 2, 512
    assert _stored(_sel(w)) - _stored(_sel(w, M.CORE_ATTN)) == pytest.approx(5 * heads * s * s)
    assert _stored(_sel(w)) == _stored(replace_settings(w, recompute=RecomputeKind.NONE))
    flash = _dense()
    assert _stored(_sel(flash)) == _stored(_sel(flash, M.CORE_ATTN))


def test_moe_modules_drop_their_terms():
    w = _moe()
    m, sb, h, t = w.model, 512, 1024, 2
    base = _stored(_sel(w, M.CORE_ATTN), moe=True)
    act = sb * m.moe_top_k * 2 * m.moe_ffn_hidden_size / t  # each routed copy's activation output (ETP = TP)
    assert base - _stored(_sel(w, M.CORE_ATTN, M.MOE_ACT), moe=True) == pytest.approx(act)
    shared = sb * m.shared_ffn_size * (2 + 2) / t
    assert base - _stored(_sel(w, M.CORE_ATTN, M.SHARED_EXPERTS), moe=True) == pytest.approx(shared)
    norm = 2 * sb * h / t  # the pre-MLP norm's output, a module of its own before the router
    assert base - _stored(_sel(w, M.CORE_ATTN, M.LAYERNORM), moe=True) == pytest.approx(norm)
    # a MoE layer has no dense MLP; the dense first layer's MLP is what "mlp" drops
    assert _stored(_sel(w, M.CORE_ATTN, M.MLP), moe=True) == base
    assert _stored(_sel(w, M.CORE_ATTN, M.MLP)) < _stored(_sel(w, M.CORE_ATTN))


def test_mla_up_proj_drops_query_key_and_value():
    w = _mla()
    m, p = w.model, w.parallel
    sb = m.seq_length * p.micro_batch_size
    qkv = sb * (2 * m.q_size + 4 * m.kv_size) / p.tp
    for moe in (False, True):
        assert _stored(_sel(w, M.CORE_ATTN), moe) - _stored(_sel(w, M.CORE_ATTN, M.MLA_UP_PROJ), moe) \
            == pytest.approx(qkv)
    before, at = recompute_module_bytes(m, _sel(w, M.MLA_UP_PROJ, M.LAYERNORM).parallel, moe=True)
    assert at == pytest.approx(qkv + 2 * sb * m.hidden_size)  # MLA's input norm is a module of its own
    assert before == pytest.approx(2 * sb * m.hidden_size)


def test_the_transient_is_the_larger_side():
    w = _sel(_mla(), M.MLA_UP_PROJ, M.MOE_ACT, M.LAYERNORM)
    am = activation_model(w)
    before, at = recompute_module_bytes(w.model, w.parallel, moe=True, input_bytes=2.0)
    assert am.moe_layer_transient == pytest.approx(max(before, at)) and before != at
    assert activation_model(_sel(_mla(), M.CORE_ATTN)).moe_layer_transient == 0


# --- the program: what runs again, and where -----------------------------------------------------


def _recomputed(w, layer=1, mb=0):
    """The names of rank 0's compute tasks of one layer's backward pass of one micro-batch, in
    issue order, the recomputed ones marked with '*'."""
    prog = build_program(w)
    out = []
    for t in prog.tasks:
        a = dict(t.args)
        if t.rank == 0 and not t.comm and a.get("layer") == layer and a.get("microbatch") == mb \
                and a.get("phase") in ("bwd", "recompute"):
            out.append(("*" if a["phase"] == "recompute" else "") + t.name)
    return out


def test_each_module_runs_again_before_the_backward_that_reads_it():
    names = _recomputed(_sel(_dense(), M.CORE_ATTN, M.MLP))
    again = [n for n in names if n.startswith("*")]
    assert again == ["*fc1", "*activation", "*fc2", "*attention"]
    assert names.index("*fc2") < names.index("fc2-dgrad")  # the MLP before the MLP's backward
    assert names.index("fc1-wgrad") < names.index("*attention") < names.index("attention-bwd")
    assert [n for n in _recomputed(_sel(_dense(), M.CORE_ATTN)) if n.startswith("*")] == ["*attention"]
    assert not [n for n in _recomputed(_sel(_dense())) if n.startswith("*")]
    moe = [n for n in _recomputed(_sel(_mla(), M.MLA_UP_PROJ, M.MOE_ACT, M.LAYERNORM, M.SHARED_EXPERTS), layer=3)
           if n.startswith("*")]
    assert moe == ["*norm2", "*experts-activation", "*shared-fc1", "*shared-activation", "*shared-fc2",
                   "*norm1", "*q-up", "*kv-up"]


def test_hardware_flops_count_the_recomputed_gemms():
    w = _mla()
    m = w.model
    tokens = w.tokens_per_iteration
    model, hw = model_flops(_sel(w))
    assert hw == model
    up = 2.0 * sum(o * i for name, o, i, _ in m.attention_gemms() if name in ("q-up", "kv-up"))
    assert model_flops(_sel(w, M.MLA_UP_PROJ))[1] - model == pytest.approx(tokens * m.num_layers * up)
    dense = sum(not m.is_moe_layer(i) for i in range(m.num_layers))
    mlp = 2.0 * 3 * m.hidden_size * m.ffn_hidden_size  # SwiGLU: gate, up and down
    assert model_flops(_sel(w, M.MLP))[1] - model == pytest.approx(tokens * dense * mlp)
    # the program's count is the closed form's
    prog = build_program(_sel(_moe(), M.SHARED_EXPERTS, M.MLP, M.CORE_ATTN))
    assert prog.hardware_flops_per_iteration == pytest.approx(model_flops(_sel(_moe(), M.SHARED_EXPERTS, M.MLP,
                                                                               M.CORE_ATTN))[1], rel=1e-9)


CASES = {
    "dense": (dict(pp=2, gbs=4, layers=8), (M.CORE_ATTN, M.MLP)),
    "moe": (dict(pp=2, gbs=8, layers=8, sp=True), (M.MOE_ACT, M.LAYERNORM, M.SHARED_EXPERTS, M.MLP)),
    "interleaved": (dict(pp=2, gbs=4, layers=16, vps=2, schedule=ScheduleKind.INTERLEAVED), (M.MLP,)),
    # a dense layer after MoE ones in the backward, its recomputed MLP the larger transient: a
    # chunk-granularity block holds each transient over its own layers only
    "dense-last": (dict(pp=2, gbs=8, layers=8, sp=True, topk=1), (M.MOE_ACT, M.MLP)),
}


@pytest.mark.parametrize("granularity", ["op", "layer", "chunk"])
@pytest.mark.parametrize("case", list(CASES))
def test_timeline_peak_equals_the_closed_form(case, granularity):
    kw, mods = CASES[case]
    w = _sel(_moe(**kw) if case in ("moe", "dense-last") else _dense(**kw), *mods)
    rep = make_report(simulate(w, load_topology("dgx-a100"), granularity=granularity))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


def test_time_grows_and_memory_falls_from_the_attention_core_to_full():
    w = _dense(pp=2, gbs=4, layers=8, flash=False)
    topo = load_topology("dgx-a100")
    ladder = [_sel(w, M.CORE_ATTN), _sel(w, M.CORE_ATTN, M.MLP), replace_settings(w, recompute=RecomputeKind.FULL)]
    times = [simulate(x, topo).result.makespan_s for x in ladder]
    peaks = [max(stage_memory(x, s).total_bytes for s in range(2)) for x in ladder]
    assert times[0] < times[1] < times[2], times
    assert peaks[0] > peaks[1] > peaks[2], peaks


def test_expert_parallel_overlap_runs_the_recomputed_modules():
    base = ["parallel.schedule=interleaved-1f1b", "parallel.virtual_pipeline_stages=2", "parallel.ep_overlap=true",
            "parallel.recompute=selective", "model.num_layers=8", "parallel.global_batch_size=64"]
    topo = load_topology("dgx-h100")
    plain = load_workload("mixtral-8x7b", base)
    mods = load_workload("mixtral-8x7b", base + ["parallel.recompute_modules=[core_attn,moe_act]"])
    a, b = (make_report(simulate(x, topo, granularity="layer")) for x in (plain, mods))
    assert b.iteration_time_s > a.iteration_time_s
    assert max(s.peak_memory_bytes for s in b.stages) < max(s.peak_memory_bytes for s in a.stages)


# --- configuration: cases, --set, --megatron-args, reports ---------------------------------------


@pytest.mark.parametrize("value, field_hint", [
    ("[moe]", "does not model Megatron-Core's moe"),
    ("[mhc]", "experimental"),
    ("mlp", "a list of modules"),
    ("[mlp_all]", "one of"),
])
def test_bad_values_are_one_line(capsys, value, field_hint):
    status = main(["run", "tiny", "--set", "parallel.recompute=selective", "--set",
                   f"parallel.recompute_modules={value}"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "\n" not in err and "parallel.recompute_modules" in err and field_hint in err, err


@pytest.mark.parametrize("sets, hint", [
    (["parallel.recompute_modules=[mlp]"], "unless parallel.recompute is selective"),
    (["parallel.recompute=selective", "parallel.recompute_modules=[mla_up_proj]"], "multi-latent attention"),
    (["parallel.recompute=selective", "parallel.recompute_modules=[moe_act]"], "dense model"),
    (["parallel.recompute=selective", "parallel.recompute_modules=[mlp]", "parallel.schedule=zb-h1"], "zb-h1"),
])
def test_what_megatron_core_refuses_is_refused(capsys, sets, hint):
    status = main(["run", "tiny"] + [x for s in sets for x in ("--set", s)])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "\n" not in err and "parallel.recompute_modules" in err and hint in err, err


def test_fp8_delayed_scaling_refuses_moe_act_and_layernorm():
    w = dataclasses.replace(_moe(gpu="H100-SXM5-80GB"), dtype=Dtype.FP8, scaling=ScalingRecipe.DELAYED)
    with pytest.raises(ConfigError, match="delayed scaling"):
        _sel(w, M.MOE_ACT)
    _sel(dataclasses.replace(w, scaling=ScalingRecipe.CURRENT), M.MOE_ACT, M.LAYERNORM)  # accepted
    _sel(w, M.SHARED_EXPERTS)


def test_megatron_args_carry_the_modules():
    text = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
            "--global-batch-size 8 --vocab-size 32000 --bf16 --recompute-granularity selective ")
    spec, _ = load_megatron_workload(text + "--recompute-modules core_attn mlp", gpu="A100-SXM4-80GB")
    assert spec.parallel.recompute is SEL and spec.parallel.recompute_modules == {M.CORE_ATTN, M.MLP}
    spec, _ = load_megatron_workload(text, gpu="A100-SXM4-80GB")
    assert spec.parallel.recompute_modules == DEFAULT_RECOMPUTE_MODULES
    with pytest.raises(ConfigError, match="--recompute-modules"):
        load_megatron_workload(text + "--recompute-modules core_attn moe", gpu="A100-SXM4-80GB")


def test_the_report_names_the_modules_off_the_default(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "tiny", "--set", "parallel.recompute=selective", "--set",
                 "parallel.recompute_modules=[mlp,core_attn]", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "recompute selective (core_attn, mlp)" in text
    assert json.loads(out.read_text())["parallel"]["recompute_modules"] == ["core_attn", "mlp"]
    assert main(["run", "tiny", "--set", "parallel.recompute=selective", "--json", str(out)]) == 0
    assert "recompute selective" in capsys.readouterr().out
    assert "recompute_modules" not in json.loads(out.read_text())["parallel"]


# --- null settings that fit ----------------------------------------------------------------------


def _sets(w, delayed_fp8=False):
    return module_recompute_sets(w.model, w.parallel, w.system.gpu, w.dtype, delayed_fp8)


def test_module_sets_follow_the_model_cheapest_first():
    assert _sets(_dense()) == []  # fused norms drop nothing; a dense MLP costs more than block recomputation
    moe = _sets(_moe())
    assert set(moe) == {frozenset(c) for c in ({M.LAYERNORM}, {M.MOE_ACT}, {M.SHARED_EXPERTS}, {M.MLP})
                        } | {a | b for a in moe for b in moe}
    assert len(moe) == 15  # every non-empty set of the four
    mla = _sets(_mla())
    assert len(mla) == 31 and {M.MLA_UP_PROJ} in mla
    # elementwise recomputation (a norm, the experts' activation) costs less than any GEMM's
    assert mla.index(frozenset({M.LAYERNORM})) < mla.index(frozenset({M.MLA_UP_PROJ}))
    assert mla.index(frozenset({M.MOE_ACT})) < mla.index(frozenset({M.SHARED_EXPERTS}))
    # a set costs at least what each of its subsets costs: it comes after them
    for i, a in enumerate(mla):
        assert all(mla.index(b) < i for b in mla if b < a), a
    assert not any(x & {M.LAYERNORM, M.MOE_ACT} for x in _sets(_mla(), delayed_fp8=True))


def _mla_case(framework: str, gpu: str = "B200", seq: int = 4096) -> dict:
    return {"id": "dsv3", "model": {"hf_config": "../../workloads/hf/deepseek-v3.json", "seq_length": seq},
            "system": {"gpu": gpu, "num_gpus": 256},
            "parallel": {"tp": 1, "pp": 8, "dp": 32, "cp": 1, "ep": 32, "virtual_pipeline_stages": 2,
                         "micro_batch_size": 1, "global_batch_size": 256},
            "dtype": "mxfp8", "framework": framework}


def test_a_stack_with_module_recompute_fits_before_full(tmp_path):
    """DeepSeek-V3 on 256 B200 (Megatron-Bridge's layout) at 6,144 tokens, which does not fit
    without recomputation: the attention core's recomputation saves nothing under fused
    attention, so Megatron-Bridge adds modules, cheapest first, and stops at the first set that
    fits; NeMo 25.04 (no module saver in the stack) recomputes whole layers."""
    folder = tmp_path / "benchmarks" / "x"
    folder.mkdir(parents=True)
    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump([_mla_case("NeMo 26.04.01 container / Megatron-Bridge (Megatron-Core)", seq=6144)]))
    from pathlib import Path

    import sim
    hf = Path(sim.__file__).resolve().parent.parent / "workloads" / "hf"
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "hf").symlink_to(hf)
    w, notes = load_workload_with_notes(str(path))
    p = w.parallel
    assert p.recompute is SEL and p.recompute_modules and M.CORE_ATTN not in p.recompute_modules
    assert all(stage_memory(w, s).fits for s in range(p.pp))
    # the cheapest set that fits: no set of less recomputation does
    sets = _sets(w)
    for cheaper in sets[:sets.index(p.recompute_modules)]:
        fewer = replace_settings(w, recompute_modules=cheaper)
        assert not all(stage_memory(fewer, s).fits for s in range(p.pp)), cheaper
    note = next(n for n in notes if n.startswith("parallel.recompute: null -> selective"))
    assert "parallel.recompute_modules: null -> [" in note
    path.write_text(yaml.safe_dump([_mla_case("NeMo 25.04 container (Megatron-Core)", seq=6144)]))
    w25 = load_workload_with_notes(str(path))[0]
    assert w25.parallel.recompute is RecomputeKind.FULL
    assert w25.parallel.recompute_modules == DEFAULT_RECOMPUTE_MODULES


def test_the_closed_form_follows_combined_passes_of_dense_and_moe_layers():
    """Under the EP A2A overlap a dense backward layer (no expert exchange to cut its backward
    at) runs whole, and releases, before the forward layer it is paired with; a MoE one releases
    after: with DeepSeek-V3's dense first layers and the MLP recomputed, the closed form is the
    timeline's peak on every stage."""
    w0 = load_workload("deepseek-v3")
    dp = w0.parallel.dp * w0.parallel.pp // 2
    w = load_workload("deepseek-v3", [
        "model.num_layers=8", "parallel.pp=2", "parallel.virtual_pipeline_stages=2",
        "parallel.schedule=interleaved-1f1b", "parallel.recompute=selective", "parallel.ep_overlap=true",
        f"parallel.dp={dp}", f"parallel.global_batch_size={dp * 4}",
        "parallel.recompute_modules=[core_attn,layernorm,mlp]", "parallel.pipeline_layout=[1,4,1,2]"])
    rep = make_report(simulate(w, load_topology("dgx-h100")))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)
