"""An uneven pipeline split (``parallel.pipeline_layout``, Megatron-Core's
``--pipeline-model-parallel-layout``): each virtual stage holds the layers the layout gives it,
in the program, the memory and the report; bad layouts are one line naming the field, exit 2."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.config import load_topology
from sim.errors import ConfigError
from sim.memory import stage_memory, stage_params
from sim.output.report import make_report
from sim.runner import simulate
from sim.studies.sweep.core import make_candidate
from sim.types import RecomputeKind, ScheduleKind
from sim.workload.spec import pipeline_split
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload, replace_settings


def _w(layout=None, **kw):
    kw = {"pp": 2, "gbs": 4, "layers": 8, **kw}
    w = make_workload(**kw)
    return w if layout is None else replace_settings(w, pipeline_layout=layout)


def test_each_virtual_stage_holds_the_layers_the_layout_gives():
    w = _w((2, 6))
    assert [len(r) for r in w.virtual_stage_layers()] == [2, 6]
    assert [w.stage_layers(s) for s in range(2)] == [2, 6]
    even = _w()
    # the first stage's parameters: the embedding and two layers, not four
    per_layer = (stage_params(even.model, even.parallel, 0) - stage_params(w.model, w.parallel, 0)) / 2
    assert per_layer == pytest.approx(even.model.layer_params(0))
    prog = build_program(w)
    for stage, layers in ((0, range(0, 2)), (1, range(2, 8))):
        rank = next(r.rank for r in prog.ranks if r.pp == stage)
        seen = {dict(t.args).get("layer") for t in prog.tasks if t.rank == rank} - {None}
        assert seen == set(layers)


@pytest.mark.parametrize("kw, layout", [
    (dict(), (2, 6)),
    (dict(layers=16, vps=2, schedule=ScheduleKind.INTERLEAVED), (5, 4, 4, 3)),
    (dict(recompute=RecomputeKind.FULL, recompute_layers=2), (3, 5)),
])
def test_timeline_peak_equals_the_closed_form(kw, layout):
    w = _w(layout, **kw)
    rep = make_report(simulate(w, load_topology("dgx-a100")))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)
    assert rep.parallel["pipeline_layout"] == list(layout)


def test_a_heavier_stage_is_the_slower_one():
    topo = load_topology("dgx-a100")
    even = make_report(simulate(_w(), topo))
    skew = make_report(simulate(_w((2, 6)), topo))
    assert skew.iteration_time_s > even.iteration_time_s
    assert skew.stages[1].compute_s > skew.stages[0].compute_s
    assert "pipeline_layout" not in even.parallel


@pytest.mark.parametrize("value, hint", [
    ("[2,2,4]", "2 layer counts"),
    ("[3,3]", "summing to model.num_layers=8"),
    ("[-1,9]", "decoder-layer counts >= 0"),
    ("4", "a list of decoder-layer counts"),
])
def test_bad_layouts_are_one_line(capsys, tmp_path, value, hint):
    (tmp_path / "w.yaml").write_text(
        "model: {num_layers: 8, hidden_size: 1024, num_attention_heads: 16, num_kv_heads: 16, ffn_hidden_size: 4096, "
        "vocab_size: 32000, seq_length: 1024}\n"
        "system: {gpu: A100-SXM4-80GB, num_gpus: 8}\n"
        "parallel: {tp: 2, pp: 2, dp: 2, micro_batch_size: 1, global_batch_size: 8}\n")
    status = main(["run", str(tmp_path / "w.yaml"), "--set", f"parallel.pipeline_layout={value}"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and "\n" not in err and "parallel.pipeline_layout" in err and hint in err, err


def test_a_swept_candidate_keeps_the_layout_on_its_own_pipeline_only():
    w = _w((2, 6), dp=2, gbs=8)
    p = w.parallel
    point = dict(tp=p.tp, pp=p.pp, dp=p.dp, cp=p.cp, ep=p.ep, virtual_pipeline_stages=1, schedule=p.schedule,
                 micro_batch_size=1, recompute=p.recompute, sequence_parallel=False, zero_stage=0)
    assert make_candidate(w, point).parallel.pipeline_layout == (2, 6)
    other = make_candidate(w, dict(point, pp=1, dp=4))
    assert other.parallel.pipeline_layout is None


def test_the_spec_refuses_a_layout_of_the_wrong_length():
    with pytest.raises(ConfigError, match="parallel.pipeline_layout"):
        replace_settings(_w(), pipeline_layout=(8,))


def test_json_carries_the_layout(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "tiny", "--set", "parallel.pipeline_layout=[1,3]", "--json", str(out)]) == 0
    capsys.readouterr()
    assert json.loads(out.read_text())["parallel"]["pipeline_layout"] == [1, 3]


SMALL = ("--num-layers 14 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
         "--global-batch-size 8 --vocab-size 32000 --bf16 --pipeline-model-parallel-size 4 ")


@pytest.mark.parametrize("flags, layout", [
    ("--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 4", (2, 4, 4, 4)),
    ("--decoder-first-pipeline-num-layers 5", (5, 3, 3, 3)),
    ("--decoder-last-pipeline-num-layers 2 --num-virtual-stages-per-pipeline-rank 2",
     (2, 2, 2, 1, 2, 2, 2, 1)),
])
def test_megatron_uneven_first_and_last_stages_become_the_layout(flags, layout):
    from sim.config.megatron_args import load_megatron_workload

    spec, notes = load_megatron_workload(SMALL + flags, gpu="A100-SXM4-80GB", num_gpus=4)
    assert spec.parallel.pipeline_layout == layout
    assert not any("not modelled" in n for n in notes)


@pytest.mark.parametrize("flags", [
    "--decoder-first-pipeline-num-layers 3",  # 11 layers left over 3 ranks
    "--decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 3 "
    "--num-virtual-stages-per-pipeline-rank 2",  # 3 layers on a rank of 2 virtual stages
    "--decoder-first-pipeline-num-layers 2 --account-for-embedding-in-pipeline-split",
])
def test_what_megatron_core_asserts_of_an_uneven_split_is_refused(flags):
    from sim.config.megatron_args import load_megatron_workload

    with pytest.raises(ConfigError, match="--decoder-(first|last)-pipeline-num-layers"):
        load_megatron_workload(SMALL + flags, gpu="A100-SXM4-80GB", num_gpus=4)


@pytest.mark.parametrize("layers", range(2, 130))
def test_the_fallback_split_keeps_every_stage_within_one_unit(layers):
    """Layers that no count of chunks divides are split with the embedding and the loss counted
    as a layer each; the units of any two stages differ by one at most (a pipeline runs at its
    slowest stage's pace), the remainder going to the middle stages first."""
    for chunks in (2, 3, 4, 8, 16, 32):
        split = pipeline_split(layers, chunks)
        if split is None or layers % chunks == 0:
            continue
        units = [n + (i in (0, chunks - 1)) for i, n in enumerate(split)]
        assert sum(split) == layers
        assert max(units) - min(units) <= 1, (layers, chunks, split)
        assert units[-1] == min(units)  # the loss's stage takes no extra unit before the others
