"""Block recomputation (``parallel.recompute_num_layers``, Megatron's ``--recompute-method block
--recompute-num-layers N``): each model chunk recomputes its first N layers whole and keeps the
others' activations. The task program recomputes exactly those layers, the memory closed form
is the simulated timeline's peak at every granularity, and time and memory move with N between
no recomputation and full recomputation of every layer."""

from __future__ import annotations

import pytest

from sim.cli import main
from sim.config import load_topology
from sim.config.fit import peak_memory_bytes
from sim.errors import ConfigError
from sim.memory import layer_activation_bytes, stage_memory
from sim.output.report import make_report
from sim.runner import simulate
from sim.types import RecomputeKind, ScheduleKind
from sim.workload.spec import ParallelSpec
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload

FULL = RecomputeKind.FULL
SI = ScheduleKind.INTERLEAVED


def _block(n, **kw):
    """``make_workload(**kw)`` under full recomputation of ``n`` layers a chunk (None: every
    layer; "none": no recomputation)."""
    if n == "none":
        return make_workload(**kw)
    return make_workload(**kw, recompute=FULL, recompute_layers=n)


@pytest.mark.parametrize("kw", [dict(pp=2, gbs=4, layers=8), dict(pp=2, gbs=4, layers=16, vps=2, schedule=SI)],
                         ids=["1f1b", "interleaved"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_program_recomputes_the_first_n_layers_of_each_chunk(kw, n):
    w = _block(n, **kw)  # four layers a chunk
    prog = build_program(w)
    p = w.parallel
    chunks = w.virtual_stage_layers()
    for stage in range(p.pp):
        rank = [r for r in prog.ranks if r.pp == stage][0].rank
        again = [t for t in prog.tasks if t.rank == rank and ("phase", "recompute") in t.args]
        mine = [chunks[c * p.pp + stage] for c in range(p.virtual_pipeline_stages)]
        # which layers: the first n of each of the stage's chunks, each once per micro-batch
        assert sorted({dict(t.args)["layer"] for t in again}) == sorted(x for r in mine for x in r[:n])
        per_layer = len([s for s in build_program(_block(None, **kw)).tasks
                         if s.rank == rank and ("phase", "recompute") in s.args]) // sum(len(r) for r in mine)
        assert len(again) == per_layer * n * len(mine)
        assert per_layer % p.num_microbatches == 0 and per_layer > 0


def test_hardware_flops_count_the_recomputed_layers_only():
    every = build_program(_block(None, pp=2, gbs=4, layers=8))
    model, hw_all = every.flops_per_iteration, every.hardware_flops_per_iteration
    for n in (1, 2, 3):
        prog = build_program(_block(n, pp=2, gbs=4, layers=8))
        assert prog.flops_per_iteration == model
        assert prog.hardware_flops_per_iteration - model == pytest.approx((hw_all - model) * n / 4, rel=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_1f1b_closed_form(n):
    """Stage s holds min(p - s, m) micro-batches of its L/p layers (Korthikanti et al. 2022,
    Sec. 4.3): under block recomputation n of them keep their input, the others everything."""
    p, L, m = 4, 16, 8
    w = _block(n, pp=p, gbs=m, layers=L)
    kept = layer_activation_bytes(w.model, w.parallel, RecomputeKind.NONE, kernels=w.kernels)
    checkpoint = layer_activation_bytes(w.model, w.parallel, FULL, kernels=w.kernels)
    assert checkpoint < kept
    for s in range(1, p - 1):  # the middle stages hold no embedding or head
        per_mb = n * checkpoint + (L // p - n) * kept
        assert stage_memory(w, s).activations_bytes == pytest.approx(min(p - s, m) * per_mb, rel=1e-12)


CASES = {
    "1f1b": dict(tp=2, pp=2, gbs=8, layers=8, sp=True),
    "gpipe": dict(pp=2, gbs=4, layers=8, schedule=ScheduleKind.GPIPE),
    "interleaved": dict(tp=2, pp=2, gbs=4, layers=16, vps=2, schedule=SI, sp=True),
    "uneven": dict(pp=4, gbs=8, layers=10),  # pipeline_split(10, 4): 2, 3, 3, 2 layers
    "moe": dict(pp=2, dp=2, gbs=8, layers=8, experts=4, ep=2, first_dense=1),
    "pp1": dict(dp=2, gbs=4, layers=6, flash=False),
}


@pytest.mark.parametrize("granularity", ["op", "layer", "chunk"])
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_timeline_peak_equals_the_closed_form(case, n, granularity):
    w = _block(n, **CASES[case])
    rep = make_report(simulate(w, load_topology("dgx-a100"), granularity=granularity))
    for s in rep.stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


@pytest.mark.parametrize("case", ["1f1b", "uneven", "moe"])
def test_every_simulated_rank_holds_the_closed_form(case):
    w = _block(1, **CASES[case])
    run = simulate(w, load_topology("dgx-a100"), full=True)
    for s in make_report(run).stages:
        assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-12)


@pytest.mark.parametrize("case", ["1f1b", "interleaved", "pp1"])
def test_time_grows_and_memory_falls_with_the_layers_recomputed(case):
    """From no recomputation through 1, 2, ... layers a chunk to every layer: each more layer
    recomputed costs time and saves memory; recomputing a chunk's every layer is the whole
    full recomputation (``recompute_num_layers`` null)."""
    kw = CASES[case]
    top = max(len(r) for r in make_workload(**kw).virtual_stage_layers())
    ladder = ["none"] + list(range(1, top)) + [None]
    topo = load_topology("dgx-a100")
    times = [simulate(_block(n, **kw), topo).result.makespan_s for n in ladder]
    peaks = [peak_memory_bytes(_block(n, **kw)) for n in ladder]
    assert all(a < b for a, b in zip(times, times[1:])), times
    assert all(a > b for a, b in zip(peaks, peaks[1:])), peaks
    every = _block(top, **kw)
    assert simulate(every, topo).result.makespan_s == pytest.approx(times[-1], rel=1e-12)
    assert peak_memory_bytes(every) == peaks[-1]


@pytest.mark.parametrize("case", list(CASES))
def test_memory_does_not_grow_with_the_layers_recomputed(case):
    """What the fitting's bisection (:func:`sim.config.fit.fewest_recomputed_layers`) needs."""
    kw = CASES[case]
    top = max(len(r) for r in make_workload(**kw).virtual_stage_layers())
    peaks = [peak_memory_bytes(_block(n, **kw)) for n in range(1, top + 1)]
    assert all(a >= b for a, b in zip(peaks, peaks[1:])), peaks


def test_llmsim_memory_shows_the_workloads_block_recomputation(capsys):
    status = main(["memory", "tiny", "--set", "parallel.recompute=full", "--set", "parallel.recompute_num_layers=1",
                   "--recompute", "none,full"])
    out = capsys.readouterr().out
    assert status == 0
    assert "recompute full of 1 layer a chunk (the workload's): GiB per GPU" in out
    assert "recompute none: GiB" in out


@pytest.mark.parametrize("parallel, field", [
    (dict(recompute_num_layers=2), "parallel.recompute_num_layers"),  # no recomputation
    (dict(recompute=RecomputeKind.SELECTIVE, recompute_num_layers=2), "parallel.recompute_num_layers"),
    (dict(recompute=FULL, recompute_num_layers=0), "parallel.recompute_num_layers"),
    (dict(recompute=FULL, recompute_num_layers=True), "parallel.recompute_num_layers"),
])
def test_the_spec_refuses_a_count_without_full_recomputation(parallel, field):
    with pytest.raises(ConfigError) as exc:
        ParallelSpec(**parallel)
    assert exc.value.field == field


def test_the_spec_refuses_more_layers_than_a_chunk_holds():
    make_workload(pp=2, gbs=4, layers=8, recompute=FULL, recompute_layers=4)  # a whole chunk: fine
    with pytest.raises(ConfigError) as exc:
        make_workload(pp=2, gbs=4, layers=8, recompute=FULL, recompute_layers=5)
    assert exc.value.field == "parallel.recompute_num_layers"
    assert "at most the layers of a model chunk, 4" in str(exc.value)


@pytest.mark.parametrize("sets, expected", [
    (["parallel.recompute_num_layers=1"], "null unless parallel.recompute is full"),
    (["parallel.recompute=full", "parallel.recompute_num_layers=3"], "at most the layers of a model chunk, 2"),
    (["parallel.recompute=full", "parallel.recompute_num_layers=0"], "a positive integer"),
])
def test_bad_counts_are_one_line_errors(capsys, sets, expected):
    status = main(["run", "tiny"] + [x for s in sets for x in ("--set", s)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("llmsim: error: ") and "parallel.recompute_num_layers" in err
    assert expected in err


def test_the_bounds_price_the_recomputed_layers_only():
    """The sweep's closed-form bound prices each stage's compute as the op program has it, and
    both bounds stay below the simulated time."""
    from sim.studies.sweep.bound import IterationBound
    from sim.studies.sweep.timeline_bound import TimelineBound

    topo = load_topology("dgx-a100")
    for n in (1, 3, None):
        w = _block(n, tp=2, pp=2, gbs=8, layers=8, sp=True)
        bound = IterationBound(w.model, w.system.gpu)
        prog = build_program(w)
        per_rank: dict[int, float] = {}
        for t in prog.tasks:
            if not t.comm:
                per_rank[t.rank] = per_rank.get(t.rank, 0.0) + bound.costs.compute_time_s(t.op)
        want = bound.stage_compute_s(w)
        for info in prog.ranks:
            assert per_rank[info.rank] == pytest.approx(want[info.pp], rel=1e-12)
        t = simulate(w, topo).result.makespan_s
        assert bound.lower_bound_s(w) <= TimelineBound(topo, w.model, w.system.gpu).lower_bound_s(w) <= t


def test_a_sweep_keeps_the_count_on_the_workloads_own_chunks_only():
    from sim.config.space import default_space
    from sim.studies.sweep.core import make_candidate, space_points

    w = _block(1, tp=2, pp=2, dp=2, gbs=8, layers=8)
    kept = other = 0
    for point in space_points(w, default_space(), 8):
        try:
            c = make_candidate(w, point)
        except ConfigError:
            continue
        own = (c.parallel.pp, c.parallel.virtual_pipeline_stages, c.parallel.recompute) == (2, 1, FULL)
        assert c.parallel.recompute_num_layers == (1 if own else None)
        kept, other = kept + own, other + (not own)
    assert kept and other
