"""Memory per GPU: the closed forms, the timeline, and published numbers."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.config import load_cases, load_topology, load_workload
from sim.memory import (activation_model, layer_activation_bytes, stage_memory, stage_params, state_bytes)
from sim.report import make_report
from sim.runner import simulate
from sim.types import RecomputeKind, ScheduleKind
from sim.units import GB, GiB
from tests.conftest import make_workload

GPT3 = dict(layers=96, hidden=12288, heads=96, seq=2048, vocab=51200, tp=8, pp=8, gbs=64)


@pytest.mark.parametrize("sp,recompute,units_of_sbh", [
    # Korthikanti et al. 2022, Table 2, for GPT-3 175B at TP 8 (as in the seed paper's notes)
    (False, RecomputeKind.NONE, 23.0),
    (True, RecomputeKind.NONE, 14.25),
    (False, RecomputeKind.SELECTIVE, 13.0),
    (True, RecomputeKind.SELECTIVE, 4.25),
    (False, RecomputeKind.FULL, 2.0),
])
def test_gpt3_activations_per_layer_match_the_paper(sp, recompute, units_of_sbh):
    w = make_workload(**GPT3, sp=sp, recompute=recompute, flash=False)
    sbh = 2048 * 1 * 12288
    assert layer_activation_bytes(w.model, w.parallel) / sbh == pytest.approx(units_of_sbh)


def test_gpt3_model_state_per_gpu_matches_the_paper():
    """2.73 B parameters per GPU at TP 8 x PP 8; 18 B per parameter (fp32 gradients) is 49 GB."""
    w = make_workload(**GPT3)
    params = stage_params(w.model, w.parallel, 3)
    assert params == pytest.approx(2.73e9, rel=0.01)
    sb = state_bytes(w.model, w.parallel, 3)
    assert sb.total_bytes / params == pytest.approx(18.0)
    assert sb.total_bytes / GB == pytest.approx(49.2, rel=0.01)


def test_flash_attention_stores_no_scores_so_selective_saves_nothing_more():
    w = make_workload(**GPT3, sp=True)
    none = layer_activation_bytes(w.model, w.parallel, RecomputeKind.NONE)
    sel = layer_activation_bytes(w.model, w.parallel, RecomputeKind.SELECTIVE)
    assert none == sel == pytest.approx(2048 * 12288 * 34 / 8 + 4 * 12 * 2048)


@pytest.mark.parametrize("schedule,vps,layers", [
    (ScheduleKind.GPIPE, 1, 4), (ScheduleKind.ONE_F_ONE_B, 1, 4), (ScheduleKind.INTERLEAVED, 2, 8),
])
@pytest.mark.parametrize("recompute", list(RecomputeKind))
def test_timeline_peak_equals_the_schedule_walk(schedule, vps, layers, recompute):
    w = make_workload(tp=2, pp=4, dp=1, gbs=8, layers=layers, vps=vps, schedule=schedule, recompute=recompute,
                      sp=True)
    rep = make_report(simulate(w, load_topology("dgx-a100")))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


@pytest.mark.parametrize("m", [2, 4, 8])
def test_1f1b_closed_form(m):
    """Stage s holds min(p - s, m) micro-batches of L/p layers (Korthikanti et al. 2022, Sec. 4.3)."""
    p, L = 4, 8
    w = make_workload(pp=p, gbs=m, layers=L)
    a = activation_model(w).layer_stored
    for s in range(1, p - 1):  # the middle stages hold no embedding or head
        assert stage_memory(w, s).activations_bytes == pytest.approx(min(p - s, m) * (L // p) * a, rel=1e-12)


@pytest.mark.parametrize("kw", [dict(sp=True), dict(sp=False), dict(sp=True, tp=4, pp=2, layers=8)])
def test_full_le_selective_le_none(kw):
    base = dict(tp=2, pp=2, gbs=8, layers=4, seq=2048)
    w = make_workload(**{**base, **kw})
    for s in range(w.parallel.pp):
        full, sel, none = (stage_memory(w, s, rc).total_bytes for rc in
                           (RecomputeKind.FULL, RecomputeKind.SELECTIVE, RecomputeKind.NONE))
        assert full <= sel <= none
        assert full < none


def _max_weights(**kw):
    w = make_workload(layers=8, **kw)
    return max(state_bytes(w.model, w.parallel, s).weights_bytes for s in range(w.parallel.pp))


def test_more_tp_or_pp_never_raises_weight_memory():
    for tp in (1, 2, 4):
        for pp in (1, 2, 4):
            here = _max_weights(tp=tp, pp=pp)
            if tp < 4:
                assert _max_weights(tp=2 * tp, pp=pp) <= here
            if pp < 4:
                assert _max_weights(tp=tp, pp=2 * pp) <= here


@pytest.mark.parametrize("recompute", list(RecomputeKind))
def test_bigger_micro_batch_never_lowers_activation_memory(recompute):
    prev = 0.0
    for mbs in (1, 2, 4):
        w = make_workload(tp=2, pp=2, mbs=mbs, gbs=16, recompute=recompute)
        act = max(stage_memory(w, s).activations_bytes for s in range(2))
        assert act >= prev
        prev = act


def test_zero_stages_shard_state_over_dp():
    sizes = []
    for zero in range(4):
        w = make_workload(dp=8, gbs=8, zero=zero)
        sizes.append(state_bytes(w.model, w.parallel, 0))
    assert sizes[1].optimizer_bytes == pytest.approx(sizes[0].optimizer_bytes / 8)
    assert sizes[2].grads_bytes == pytest.approx(sizes[0].grads_bytes / 8)
    assert sizes[3].weights_bytes == pytest.approx(sizes[0].weights_bytes / 8)
    assert [s.total_bytes for s in sizes] == sorted((s.total_bytes for s in sizes), reverse=True)


def test_run_says_when_a_stage_does_not_fit(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "--set", "parallel.recompute=none", "--json", str(out)]) == 0
    assert "DOES NOT FIT" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["fits_in_memory"] is False
    assert not data["stages"][0]["fits"] and data["stages"][0]["peak_memory_bytes"] > 80 * GiB


def test_memory_command_gives_the_verdict_and_exits_0(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["memory", "--recompute", "none,full", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "DOES NOT FIT" in text and "recompute full" in text
    data = json.loads(out.read_text())
    assert set(data["methods"]) == {"none", "full"}
    none, full = data["methods"]["none"], data["methods"]["full"]
    assert none["fits"] is False and full["fits"] is True
    st = full["stages"][0]
    assert set(st) >= {"stage", "weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
                       "other_bytes", "total_bytes", "capacity_bytes", "fits"}
    assert st["total_bytes"] == pytest.approx(sum(st[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes",
                                                                  "activations_bytes", "other_bytes")))
    assert len(full["stages"]) == 8


def test_memory_plot_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "mem.png"
    assert main(["memory", "tiny", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_recompute_method_is_one_clean_error(capsys):
    assert main(["memory", "--recompute", "some"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--recompute" in err[0] and "selective" in err[0]


def test_zero3_runs_and_shards_memory(capsys):
    assert main(["run", "tiny", "--set", "parallel.zero_stage=3"]) == 0
    assert main(["memory", "tiny", "--set", "parallel.zero_stage=3"]) == 0


@pytest.mark.parametrize("case_id,w", [c for c in load_cases(
    str(__import__("pathlib").Path(__file__).resolve().parents[2] / "workloads" / "validation" / "megatron-ci.yaml"))])
def test_megatron_ci_peak_memory_within_10_percent(case_id, w):
    """Megatron-LM CI's torch max_memory_allocated (which stage it logs is not stated, so the
    fullest stage is compared)."""
    peak = max(stage_memory(w, s).total_bytes for s in range(w.parallel.pp))
    assert peak == pytest.approx(w.reference.peak_memory_bytes, rel=0.10)


def test_default_run_memory_is_reported_per_stage():
    w = load_workload(None)
    rep = make_report(simulate(w, load_topology("dgx-a100")))
    assert [s.peak_memory_bytes for s in rep.stages] == pytest.approx(
        [stage_memory(w, s).total_bytes for s in range(8)], rel=1e-12)


def test_uneven_pipeline_timeline_peak_equals_the_walk():
    w = make_workload(tp=2, pp=4, gbs=8, layers=10, vps=2, schedule=ScheduleKind.INTERLEAVED, sp=True)
    # 10 layers + embedding + loss = 12 units over 8 virtual stages; the ends give one back
    assert [len(r) for r in w.virtual_stage_layers()] == [0, 2, 2, 2, 2, 1, 1, 0]
    rep = make_report(simulate(w, load_topology("dgx-a100")))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)
