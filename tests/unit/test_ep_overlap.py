"""Megatron-Core's EP A2A overlap (``parallel.ep_overlap``, :mod:`sim.workload.ep_overlap`): a
forward pass and the backward pass after it run as one combined pass, so each direction's
expert-parallel all-to-alls run while the other direction computes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from sim import load_topology, load_workload, simulate
from sim.config.workload import load_cases
from sim.errors import ConfigError
from sim.memory import activation_model
from sim.types import CommClass, RecomputeKind, ScheduleKind, Stream
from sim.workload.ep_overlap import split_backward, split_forward
from sim.workload.layers import backward_steps
from sim.workload.schedules import Pass, pipeline_order
from sim.workload.taskgraph import build_program


def _mixtral(ep_overlap: bool, **parallel):
    """Mixtral 8x7B on 64 H100 (EP 8 within a node, PP 4) under the interleaved schedule."""
    w = load_workload("mixtral-8x7b")
    settings = dict(schedule=ScheduleKind.INTERLEAVED, virtual_pipeline_stages=2, ep_overlap=ep_overlap)
    p = dataclasses.replace(w.parallel, **{**settings, **parallel})
    return dataclasses.replace(w, parallel=p)


def _layer_ops(w):
    """The step lists of the first stage's first layer (a mixture-of-experts one where the
    model has experts)."""
    from sim.workload.layers import layer_ops
    from sim.workload.layout import Layout

    lay = Layout.of(w.parallel)
    ops = layer_ops(w.model, w.parallel, w.dtype, lay.tp_group(0, 0), ep_group=lay.ep_group(0, 0, 0),
                    kernels=w.kernels)
    return ops.for_layer(w.model.is_moe_layer(0), False)


def test_a_layer_splits_at_its_two_expert_exchanges_in_each_direction():
    """The parts are the layer's steps in order, each direction's exchanges start the
    dispatch and combine parts, and only they hold expert-parallel collectives."""
    w = _mixtral(True)
    lops = _layer_ops(w)
    f = split_forward(lops.layer_fwd)
    assert f.pre + f.dispatch + f.experts + f.combine + f.post == lops.layer_fwd
    assert f.dispatch[0].stream is Stream.EP_COMM and f.combine[-1].stream is Stream.EP_COMM
    assert all(s.stream is not Stream.EP_COMM for s in f.pre + f.experts + f.post)
    assert any("experts-fc1" in s.name for s in f.experts) and any("attention" in s.name for s in f.pre)
    steps = backward_steps(lops, lops.layer_bwd, lops.attention_bwd_index, RecomputeKind.SELECTIVE)
    b = split_backward(steps)
    assert b.combine + b.experts + b.dispatch + b.pre == steps
    assert b.combine[-1].stream is Stream.EP_COMM and b.dispatch[-1].stream is Stream.EP_COMM
    assert any("experts-fc2-dgrad" in s.name for s in b.experts) and any("attention" in s.name for s in b.pre)


def test_a_layer_without_an_expert_exchange_is_all_pre():
    w = load_workload("tiny")
    lops = _layer_ops(w)
    assert split_forward(lops.layer_fwd).pre == lops.layer_fwd
    assert split_backward(lops.layer_bwd).combine == lops.layer_bwd


@pytest.mark.parametrize("kind, pp, v", [(ScheduleKind.INTERLEAVED, 4, 2), (ScheduleKind.ONE_F_ONE_B, 1, 1)])
def test_one_more_forward_runs_before_the_steady_state(kind, pp, v):
    """Megatron-Core's get_pp_rank_microbatches (and, without pipelining, the first forward
    run alone): one warm-up forward more, the same passes in all."""
    base = pipeline_order(kind, pp, v, 8, 0)
    more = pipeline_order(kind, pp, v, 8, 0, extra_warmup=1)
    warm = [next(i for i, (p, _, _) in enumerate(o) if p is Pass.BACKWARD) for o in (base, more)]
    assert warm[1] == warm[0] + 1
    assert sorted(base) == sorted(more)


def test_the_combined_passes_hide_expert_traffic_and_shorten_the_iteration():
    """Less expert-parallel time is exposed and the iteration is shorter, because an
    all-to-all of one micro-batch's pass runs while a compute op of the other direction's
    pass does (never so without the overlap, where the next compute op waits for it)."""
    from sim.output.report import make_report

    topo = load_topology("dgx-h100")
    runs = [simulate(_mixtral(x), topo) for x in (False, True)]
    ep = [make_report(r).exposed_comm_s["ep"] for r in runs]
    assert ep[1] < 0.5 * ep[0]
    assert runs[1].result.makespan_s < runs[0].result.makespan_s

    def beside(run) -> bool:
        spans = run.result.spans
        comp = [s for s in spans if s.rank == 0 and s.stream is Stream.COMPUTE]
        a2a = [s for s in spans if s.rank == 0 and s.comm_class is CommClass.EP and s.end_s > s.start_s]
        return any(c.start_s < x.end_s - 1e-9 and x.start_s < c.end_s - 1e-9
                   and dict(c.args).get("phase") != dict(x.args).get("phase") for x in a2a for c in comp)

    assert beside(runs[1]) and not beside(runs[0])


def test_the_report_says_so():
    from sim.output.report import format_report, make_report

    r = make_report(simulate(_mixtral(True), load_topology("dgx-h100")))
    assert r.parallel["ep_overlap"] is True and "EP 8 (overlapped)" in format_report(r)
    assert "ep_overlap" not in make_report(simulate(_mixtral(False), load_topology("dgx-h100"))).parallel


def test_a_combined_pass_releases_what_it_allocates():
    """Every rank's memory deltas sum to zero over the iteration, as without the overlap."""
    prog = build_program(_mixtral(True, recompute=RecomputeKind.SELECTIVE))
    for r in {t.rank for t in prog.tasks}:
        assert abs(sum(t.mem_start_bytes + t.mem_end_bytes for t in prog.tasks if t.rank == r)) < 1.0


@pytest.mark.parametrize("layers, gbs, granularity", [(8, 64, "op"), (8, 64, "layer"), (10, 64, "op"),
                                                      (8, 256, "layer")])
def test_the_closed_form_peak_is_the_timelines(layers, gbs, granularity):
    """A combined pass frees a backward layer's activations as it stores a forward layer's
    (sim.memory's walk of the combined passes): the closed form the fitting and the sweep use is
    the simulated timeline's peak on every stage, as without the overlap, and the overlap's one
    more warm-up forward costs the last stage less than a whole forward's activations."""
    from sim.memory import stage_memory
    from sim.output.report import make_report

    w = _mixtral(True, recompute=RecomputeKind.SELECTIVE, global_batch_size=gbs)
    w = dataclasses.replace(w, model=dataclasses.replace(w.model, num_layers=layers))
    rep = make_report(simulate(w, load_topology("dgx-h100"), granularity=granularity))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)
    off = dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, ep_overlap=False))
    last = w.parallel.pp - 1
    one_forward = sum(activation_model(w).stored(w.model.is_moe_layer(i), i) for i in range(2))
    assert 0 <= stage_memory(w, last).total_bytes - stage_memory(off, last).total_bytes < one_forward


@pytest.mark.parametrize("changes, why", [
    (dict(ep=1, dp=16), "parallel.ep > 1"),
    (dict(schedule=ScheduleKind.ONE_F_ONE_B, virtual_pipeline_stages=1), "interleaved-1f1b"),
    (dict(recompute=RecomputeKind.FULL), "full"),
])
def test_what_megatron_core_asserts_is_refused(changes, why):
    with pytest.raises(ConfigError) as exc:
        _mixtral(True, **changes)
    assert exc.value.field == "parallel.ep_overlap" and why in exc.value.expected


def test_a_refused_setting_is_one_line_and_exit_2():
    out = subprocess.run([sys.executable, "-m", "sim", "run", "mixtral-8x7b", "--set", "parallel.ep_overlap=true"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "parallel.ep_overlap" in lines[0] and "Traceback" not in out.stderr


def test_the_launch_flag_in_a_case_turns_it_on(tmp_path):
    case = tmp_path / "cases.yaml"
    case.write_text("""
- id: moe
  model: {hf_config: HF, seq_length: 4096}
  system: {gpu: H100-SXM5-80GB, num_gpus: 64}
  parallel: {tp: 1, pp: 4, dp: 16, ep: 8, virtual_pipeline_stages: 2, micro_batch_size: 1,
             global_batch_size: 256, recompute: none,
             details: --overlap-moe-expert-parallel-comm --delay-wgrad-compute}
  dtype: bf16
  framework: Megatron-Core
  targets: {iteration_time_s: {value: 1.0}}
""".replace("HF", str(_hf("mixtral-8x7b.json"))))
    (name, w), = load_cases(str(case))
    assert not isinstance(w, ConfigError), w
    assert w.parallel.ep_overlap and w.parallel.delay_wgrad and w.parallel.schedule is ScheduleKind.INTERLEAVED


def _hf(name: str):
    from pathlib import Path

    import sim

    return Path(sim.__file__).resolve().parent.parent / "workloads" / "hf" / name


def test_a_sweep_keeps_the_overlap_where_megatron_core_accepts_it():
    """A swept candidate of an overlapped workload keeps the overlap under the interleaved
    schedule and runs without it where Megatron-Core would refuse it, instead of being
    dropped as a configuration the specs reject."""
    from sim.studies.sweep.core import make_candidate

    w = _mixtral(True)
    p = w.parallel
    point = dict(tp=p.tp, pp=p.pp, dp=p.dp, cp=p.cp, ep=p.ep, virtual_pipeline_stages=2,
                 schedule=ScheduleKind.INTERLEAVED, micro_batch_size=1, recompute=RecomputeKind.NONE,
                 sequence_parallel=False, zero_stage=1)
    assert make_candidate(w, point).parallel.ep_overlap
    for change in (dict(schedule=ScheduleKind.ONE_F_ONE_B, virtual_pipeline_stages=1),
                   dict(recompute=RecomputeKind.FULL)):
        assert not make_candidate(w, {**point, **change}).parallel.ep_overlap
    delayed = _mixtral(True, delay_wgrad=True)
    assert make_candidate(delayed, point).parallel.delay_wgrad
    off = make_candidate(delayed, {**point, "recompute": RecomputeKind.FULL}).parallel
    assert not off.ep_overlap and not off.delay_wgrad


def test_delayed_expert_weight_gradients_leave_the_dispatch_waiting_only_for_the_input_gradients():
    """--delay-wgrad-compute: the experts' weight-gradient GEMMs follow the input gradient's
    dispatch, which the next compute ops do not wait for until they have run; simulated, that
    all-to-all runs beside them."""
    lops = _layer_ops(_mixtral(True))
    steps = backward_steps(lops, lops.layer_bwd, lops.attention_bwd_index, RecomputeKind.NONE)
    plain, delayed = split_backward(steps), split_backward(steps, delay_wgrad=True)
    assert not plain.wgrad and {s.name for s in delayed.wgrad} == {"experts-fc1-wgrad", "experts-fc2-wgrad"}
    assert not any(s.name.endswith("-wgrad") for s in delayed.experts)
    assert delayed.dispatch[-1].wait == plain.dispatch[-1].wait + 2
    w = _mixtral(True, delay_wgrad=True)
    spans = simulate(w, load_topology("dgx-h100")).result.spans

    def key(s):
        a = dict(s.args)
        return a.get("microbatch"), a.get("chunk"), a.get("layer")

    a2a = {key(s): s for s in spans
           if s.rank == 0 and s.name.endswith("dispatch-grad") and s.comm_class is CommClass.EP}
    wg = [s for s in spans if s.rank == 0 and s.name in ("experts-fc1-wgrad", "experts-fc2-wgrad")]
    assert any(key(g) in a2a and g.start_s < a2a[key(g)].end_s and a2a[key(g)].start_s < g.end_s for g in wg)


def test_delayed_weight_gradients_need_the_overlap():
    with pytest.raises(ConfigError) as exc:
        _mixtral(False, delay_wgrad=True)
    assert exc.value.field == "parallel.delay_wgrad"


@pytest.mark.parametrize("pp, v, m", [(4, 2, 4), (1, 1, 1), (1, 1, 2), (4, 2, 8)])
def test_every_schedule_shape_completes(pp, v, m):
    """Only the steady state's pairs are combined: where every forward is in the warm-up (m = pp
    under the interleaved schedule, one micro-batch without pipelining) the last warm-up forward
    and the first cool-down backward run alone, as Megatron-Core runs them. Combining them made
    stage s wait for stage s + 1's gradient before sending it the activation that gradient needs."""
    w = load_workload("mixtral-8x7b")
    dp = 64 // pp
    kind = ScheduleKind.INTERLEAVED if pp > 1 else ScheduleKind.ONE_F_ONE_B
    p = dataclasses.replace(w.parallel, pp=pp, dp=dp, virtual_pipeline_stages=v, schedule=kind, ep_overlap=True,
                            global_batch_size=m * dp)
    run = simulate(dataclasses.replace(w, parallel=p), load_topology("dgx-h100"))
    assert run.result.makespan_s > 0


def test_the_combined_pairs_are_the_steady_states():
    """Each pair is a forward followed by a backward, after the warm-up Megatron-Core's
    get_pp_rank_microbatches gives ((p - r - 1) x 2 + (v - 1) x p + 1 forwards interleaved,
    p - r - 1 + 1 without interleaving, at most all of them), one pair per forward left."""
    from sim.workload.schedules import steady_pairs

    for kind, shapes in ((ScheduleKind.ONE_F_ONE_B, [(1, 1)]), (ScheduleKind.INTERLEAVED, [(2, 2), (4, 3), (8, 2)])):
        for pp, v in shapes:
            for m in range(pp, 4 * pp + 1, pp):
                for rank in range(pp):
                    order = pipeline_order(kind, pp, v, m, rank, extra_warmup=1)
                    pairs = list(steady_pairs(kind, pp, v, m, rank, extra_warmup=1))
                    total = m * v
                    warm = min((pp - rank - 1) * 2 + (v - 1) * pp + 1 if v > 1 else pp - rank, total)
                    assert pairs == list(range(warm, warm + 2 * (total - warm), 2))
                    assert all(order[i][0] is Pass.FORWARD and order[i + 1][0] is Pass.BACKWARD for i in pairs)


def test_a_megatron_launch_turns_it_on_and_is_refused_as_megatron_core_refuses_it():
    """``--megatron-args``: the two flags set the overlap and the delay; without virtual pipeline
    stages under PP > 1 the launch is refused in one line naming the flag, exit 2."""
    base = ["--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "2",
            "--expert-model-parallel-size", "4", "--seq-length", "4096", "--micro-batch-size", "1",
            "--global-batch-size", "64", "--bf16", "--use-distributed-optimizer",
            "--moe-token-dispatcher-type", "alltoall", "--overlap-moe-expert-parallel-comm"]

    def run(extra):
        return subprocess.run([sys.executable, "-m", "sim", "run", "--megatron-args", " ".join(base + extra),
                               "--hf-config", "mixtral-8x7b", "--set", "system.num_gpus=16",
                               "--set", "system.gpu=H100-SXM5-80GB", "--json", "-"],
                              capture_output=True, text=True, timeout=300)

    ok = run(["--num-layers-per-virtual-pipeline-stage", "8", "--delay-wgrad-compute"])
    assert ok.returncode == 0, ok.stderr
    import json

    parallel = json.loads(ok.stdout)["parallel"]
    assert parallel["ep_overlap"] is True and parallel["delay_wgrad"] is True
    refused = run([])
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1 and "--overlap-moe-expert-parallel-comm" in lines[0]
