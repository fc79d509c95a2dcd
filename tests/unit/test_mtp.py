"""Multi-token prediction (``model.mtp_num_layers``; Megatron-Core ``--mtp-num-layers``): each
module is a projection, a transformer layer of the last layer's kind and one more output layer
and loss on the last stage, whose parameters, gradients and activations that stage holds; the
word embedding's copy there is all-reduced with the first stage's; FLOPs are Megatron-LM's count;
the simulated peak is the closed form's; the value is read from a case, a Hugging Face config and
Megatron-LM arguments, and a bad one is one line naming the field, exit 2."""

from __future__ import annotations

import dataclasses

import pytest

from sim.cli import main
from sim.config import load_topology, load_workload_with_notes
from sim.config.megatron_args import load_megatron_workload
from sim.costs.analytical import AnalyticalCostModel
from sim.errors import ConfigError
from sim.memory import activation_model, layer_split, stage_expert_params, stage_memory, stage_params, state_bytes
from sim.output.report import make_report
from sim.runner import simulate
from sim.types import RecomputeKind, RecomputeModule
from sim.workload.flops import model_flops
from sim.workload.layers import layer_ops
from sim.workload.step_passes import optimizer_op
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload, replace_settings


def _mtp(w, n=1):
    """``w`` with ``n`` multi-token-prediction modules."""
    return dataclasses.replace(w, model=dataclasses.replace(w.model, mtp_num_layers=n))


def _moe(**kw):
    kw = {"tp": 2, "sp": True, "dp": 2, "ep": 2, "experts": 4, "shared": 1, "first_dense": 1, "layers": 4,
          "gbs": 8, "pp": 2, **kw}
    return make_workload(**kw)


def _ops(w):
    return layer_ops(w.model, w.parallel, w.dtype, tuple(range(w.parallel.tp)), kernels=w.kernels)


# --- parameters ----------------------------------------------------------------------------------


def test_a_module_is_a_last_kind_layer_a_projection_and_three_norms():
    w = _moe()
    m, m1 = w.model, _mtp(w).model
    h = m.hidden_size
    assert m.is_moe_layer(m.mtp_layer)
    extra = m.layer_params(m.num_layers - 1) + 2 * h * h + 3 * 2 * h
    assert m1.num_params() - m.num_params() == extra
    skipped = m.expert_params(m.num_layers - 1) * (1 - m.moe_top_k / m.num_experts)
    assert m1.active_params() - m.active_params() == pytest.approx(extra - skipped)
    assert _mtp(w, 2).model.num_params() - m.num_params() == 2 * extra


def test_the_last_stage_holds_the_modules_and_a_copy_of_the_word_embedding():
    w = _moe()
    m, p = w.model, w.parallel
    w1 = _mtp(w)
    h, t = m.hidden_size, p.tp
    assert stage_params(w1.model, p, 0) == stage_params(m, p, 0)
    experts = m.expert_params(m.num_layers - 1) / (p.expert_tp * p.ep)
    assert stage_expert_params(w1.model, p, 1) - stage_expert_params(m, p, 1) == pytest.approx(experts)
    # the layer's non-expert part split as the decoder's (norms, router whole), eh_proj over TP,
    # three norms whole, the embedding copy over TP (untied, PP > 1)
    split, replicated = layer_split(m, m.num_layers - 1)
    want = experts + split / t + replicated + 2 * h * h / t + 6 * h + m.embedding_params() / t
    assert stage_params(w1.model, p, 1) - stage_params(m, p, 1) == pytest.approx(want)
    # without a pipeline the embedding is on the same stage: no copy
    one = make_workload(layers=4, gbs=8)
    assert stage_params(_mtp(one).model, one.parallel, 0) - stage_params(one.model, one.parallel, 0) == \
        pytest.approx(one.model.layer_params(3) + 2 * 1024 * 1024 + 6 * 1024)


# --- what runs ------------------------------------------------------------------------------------


def _names(steps):
    return [st.name for st in steps]


def test_the_modules_run_between_the_decoder_and_the_loss():
    w = _moe()
    base, ops = _ops(w), _ops(_mtp(w))
    moe = base.moe
    assert moe is not None
    fwd, bwd = _names(ops.head_fwd), _names(ops.head_bwd)
    # forward: the module (its projection, a MoE layer, its own head), then the decoder's head
    n_layer, n_head = len(moe.layer_fwd), len(base.head_fwd)
    assert fwd[-n_head:] == _names(base.head_fwd)
    assert fwd.count("lm-head") == 2 and fwd.count("cross-entropy") == 2
    assert _names(moe.layer_fwd) == fwd[fwd.index("mtp-eh-proj") + 2:][:n_layer]
    # backward: the decoder's loss first, then the module's, its layer and its projection
    assert bwd[:len(base.head_bwd)] == _names(base.head_bwd)
    assert bwd.index("mtp-eh-proj-dgrad") > bwd.index("lm-head-dgrad", len(base.head_bwd))
    assert ops.moe.head_fwd == ops.head_fwd  # one head for every layer kind
    # eh_proj: [T, 2h] @ [2h, h / t]
    proj = next(st.op for st in ops.head_fwd if st.name == "mtp-eh-proj")
    T = w.parallel.micro_batch_size * w.model.seq_length
    assert (proj.m, proj.n, proj.k) == (T, w.model.hidden_size // w.parallel.tp, 2 * w.model.hidden_size)


@pytest.mark.parametrize("recompute, layers, again", [
    (RecomputeKind.FULL, None, True),  # uniform: the module's checkpoint recomputes it
    (RecomputeKind.FULL, 1, False),  # block: Megatron-Core skips it
    (RecomputeKind.NONE, None, False),
])
def test_the_module_recomputes_under_uniform_full_recomputation(recompute, layers, again):
    w = _mtp(_moe(recompute=recompute, recompute_layers=layers))
    bwd = _names(_ops(w).head_bwd)
    assert (bwd.count("mtp-eh-proj") == 1) is again
    assert bwd.count("proj") == (1 if again else 0)  # the MoE layer's forward, again


def test_the_last_stage_computes_the_modules_once_a_micro_batch():
    """The last stage's compute grows by the modules' steps once a micro-batch and the optimizer
    step over their parameters; the first stage's does not (no TP, so no kernel shares its SMs
    with a collective)."""
    w = _moe(gbs=16, tp=1, sp=False, dp=4)
    w1 = _mtp(w)
    topo = load_topology("dgx-a100")
    a, b = (make_report(simulate(x, topo)) for x in (w, w1))
    costs = AnalyticalCostModel(w.system.gpu, None)

    def head_s(x):
        ops = _ops(x)
        return sum(costs.compute_time_s(st.op) for st in ops.head_fwd + ops.head_bwd if st.stream is None)

    def optimizer_s(x):
        return costs.compute_time_s(optimizer_op(x, state_bytes(x.model, x.parallel, 1, kernels=x.kernels)))

    per_mb = head_s(w1) - head_s(w)
    assert per_mb > 0
    want = w.parallel.num_microbatches * per_mb + optimizer_s(w1) - optimizer_s(w)
    assert b.stages[1].compute_s - a.stages[1].compute_s == pytest.approx(want, rel=1e-9)
    assert b.stages[0].compute_s == pytest.approx(a.stages[0].compute_s, rel=1e-9)
    assert b.iteration_time_s > a.iteration_time_s


def _stage_of(prog, rank):
    return next(r.pp for r in prog.ranks if r.rank == rank)


def _grads(prog, stage):
    """Bytes of gradient reductions one stage issues (the embedding copy's all-reduce apart)."""
    return sum(t.op.size_bytes for t in prog.tasks if t.comm and _stage_of(prog, t.rank) == stage
               and "grads" in t.name and "embedding" not in t.name)


def test_the_embedding_copy_is_all_reduced_and_the_modules_gradients_reduced():
    w = _moe(dist_opt=True, dp=4, gbs=16)  # 2 ranks hold each expert
    a, b = build_program(w), build_program(_mtp(w))
    assert "ncclAllReduce embedding-grads" in {t.name for t in b.tasks}
    assert "ncclAllReduce embedding-grads" not in {t.name for t in a.tasks}
    # the last stage's gradients: the module's non-expert weights and the embedding copy join its
    # buckets, its experts their own reduction
    m, p = w.model, w.parallel
    h = m.hidden_size
    dense = (m.layer_params(3) - m.expert_params(3) + 2 * h * h + 6 * h) / p.tp + m.embedding_params() / p.tp
    experts = m.expert_params(3) / (p.expert_tp * p.ep)
    grad = w.kernels.grad_bytes
    assert _grads(b, 1) - _grads(a, 1) == pytest.approx((dense + experts) * grad)
    assert _grads(b, 0) == pytest.approx(_grads(a, 0))


def test_flops_are_megatron_lms_count():
    w = make_workload(layers=4, gbs=8)
    m = w.model
    h, V, tokens = m.hidden_size, m.vocab_size, w.tokens_per_iteration
    layer = 2.0 * (4 * h * h + 2 * 4 * h * h) + 4.0 * m.seq_length * h  # QKV + proj, MLP, attention
    # num_floating_point_operations @ d98e8a6: a layer, "MTP norms and proj" 3h + 2h^2 FMAs and one
    # more logit, each x 3 (forward and backward) x 2 (FMA)
    want = 3.0 * tokens * (layer + 2.0 * (3 * h + 2 * h * h) + 2.0 * h * V)
    assert model_flops(_mtp(w))[0] - model_flops(w)[0] == pytest.approx(want)
    full = replace_settings(w, recompute=RecomputeKind.FULL)
    assert model_flops(_mtp(full))[1] - model_flops(full)[1] == pytest.approx(
        want + tokens * (layer + 2.0 * 2 * h * h))
    prog = build_program(_mtp(full))
    assert prog.hardware_flops_per_iteration == pytest.approx(model_flops(_mtp(full))[1], rel=1e-9)


# --- memory: the timeline's peak is the closed form's -------------------------------------------


CASES = {
    "moe": dict(),
    "full": dict(recompute=RecomputeKind.FULL),
    "block": dict(recompute=RecomputeKind.FULL, recompute_layers=1),
    "interleaved": dict(vps=2, layers=8, gbs=8),
}


@pytest.mark.parametrize("granularity", ["op", "layer", "chunk"])
@pytest.mark.parametrize("case", list(CASES))
def test_timeline_peak_equals_the_closed_form(case, granularity):
    kw = CASES[case]
    if kw.get("vps"):
        from sim.types import ScheduleKind
        kw = {**kw, "schedule": ScheduleKind.INTERLEAVED}
    w = _mtp(_moe(**kw))
    rep = make_report(simulate(w, load_topology("dgx-a100"), granularity=granularity))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


def test_selective_modules_apply_to_the_mtp_layer():
    w = replace_settings(_moe(), recompute=RecomputeKind.SELECTIVE,
                         recompute_modules=frozenset({RecomputeModule.MOE_ACT}))
    a, b = activation_model(w), activation_model(_mtp(w))
    stored = activation_model(w).moe_layer_stored
    m, p = w.model, w.parallel
    inputs = 6.0 * m.seq_length * m.hidden_size / p.tp
    assert b.head - a.head == pytest.approx(a.head + inputs + stored)
    assert b.logits == pytest.approx(2 * a.logits)
    assert b.loss_transient == pytest.approx(max(a.loss_transient, a.moe_layer_transient))


# --- configuration ------------------------------------------------------------------------------


def test_a_hugging_face_config_brings_its_modules_with_a_note(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("model: {hf_config: deepseek-v3, seq_length: 4096, num_layers: 4}\n"
                    "system: {gpu: H100-SXM5-80GB, num_gpus: 64}\n"
                    "parallel: {dp: 8, ep: 8, global_batch_size: 64}\n")
    w, notes = load_workload_with_notes(str(path))
    assert w.model.mtp_num_layers == 1
    assert any(n.startswith("model.mtp_num_layers: null -> 1") for n in notes)
    path.write_text(path.read_text().replace("num_layers: 4}", "num_layers: 4, mtp_num_layers: 0}"))
    w, notes = load_workload_with_notes(str(path))
    assert w.model.mtp_num_layers == 0
    assert not any("mtp" in n for n in notes)


ARGS = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --max-position-embeddings 512 "
        "--micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 --pipeline-model-parallel-size 2")


def test_megatron_args_read_the_depth_and_the_layout():
    def load(extra):
        return load_megatron_workload(ARGS + extra, gpu="H100-SXM5-80GB", num_gpus=2)

    w, notes = load(" --mtp-num-layers 1")
    assert w.model.mtp_num_layers == 1 and load("")[0].model.mtp_num_layers == 0
    assert not any("mtp" in n.lower() or "multi-token" in n for n in notes)
    w, notes = load(" --mtp-num-layers 1 --pipeline-model-parallel-layout 'Et*2|t*2,m,L'")
    assert not any("multi-token" in n for n in notes)
    w, notes = load(" --mtp-num-layers 1 --pipeline-model-parallel-layout 'Et*2,m|t*2,L'")
    assert any("multi-token" in n for n in notes)


@pytest.mark.parametrize("value", ["-1", "two", "17", "true"])
def test_a_bad_depth_is_one_line_naming_the_field(tmp_path, capsys, value):
    path = tmp_path / "w.yaml"
    path.write_text(f"model: {{name: m, num_layers: 4, hidden_size: 1024, num_attention_heads: 16, "
                    f"ffn_hidden_size: 4096, vocab_size: 32000, seq_length: 512, mtp_num_layers: {value}}}\n"
                    "system: {gpu: H100-SXM5-80GB, num_gpus: 8}\nparallel: {dp: 8, global_batch_size: 8}\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.mtp_num_layers" in err and str(path) in err


def test_zero3_with_the_modules_is_refused():
    with pytest.raises(ConfigError, match="mtp_num_layers"):
        _mtp(make_workload(layers=4, gbs=8, dp=8, zero=3))


def test_the_reports_say_the_depth_only_where_it_is_on():
    from sim.memory import memory_table
    from sim.output.memory_report import format_memory, memory_json
    from sim.output.report import format_report

    w = _moe()
    for x, on in ((w, False), (_mtp(w), True)):
        rep = make_report(simulate(x, load_topology("dgx-a100"), granularity="layer"))
        assert ("MTP 1" in format_report(rep).splitlines()[1]) is on
        assert ("mtp_num_layers" in rep.parallel) is on
        table = memory_table(x, [x.parallel.recompute])
        assert ("MTP 1" in format_memory(x, table, []).splitlines()[1]) is on
        assert memory_json(x, table, []).get("mtp_num_layers") == (1 if on else None)


@pytest.mark.parametrize("granularity", ["op", "layer"])
def test_the_ep_overlap_pairs_the_module_as_a_layer(granularity):
    """Under the EP A2A overlap the module's layer runs in the last stage's combined passes, as
    Megatron-Core's TransformerLayerSchedulePlan builds an MTP layer, its all-to-alls beside the
    other direction's compute; memory is released as allocated and the simulated peak is the
    closed form's."""
    from sim.config import load_workload
    from sim.types import CommClass, ScheduleKind, Stream

    base = load_workload("mixtral-8x7b", ["model.num_layers=8", "parallel.global_batch_size=64",
                                          "parallel.recompute=selective"])
    p = dataclasses.replace(base.parallel, schedule=ScheduleKind.INTERLEAVED, virtual_pipeline_stages=2,
                            ep_overlap=True)
    w = _mtp(dataclasses.replace(base, parallel=p))
    prog = build_program(w)
    paired = [t for t in prog.tasks if dict(t.args).get("layer") == "mtp"]
    assert {dict(t.args)["phase"] for t in paired} == {"fwd", "bwd"}
    for r in {t.rank for t in prog.tasks}:
        assert abs(sum(t.mem_start_bytes + t.mem_end_bytes for t in prog.tasks if t.rank == r)) < 1.0
    run = simulate(w, load_topology("dgx-h100"), granularity=granularity)
    for s in make_report(run).stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)
    # the module's all-to-alls run beside the other direction's compute on the last stage
    spans = run.result.spans
    last = max(s.rank for s in spans)
    comp = [s for s in spans if s.rank == last and s.stream is Stream.COMPUTE]
    a2a = [s for s in spans if s.rank == last and s.comm_class is CommClass.EP and s.end_s > s.start_s
           and dict(s.args).get("layer") == "mtp"]
    assert a2a and any(c.start_s < x.end_s - 1e-9 and x.start_s < c.end_s - 1e-9
                       and dict(c.args).get("phase") != dict(x.args).get("phase") for x in a2a for c in comp)
