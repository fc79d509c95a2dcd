"""Tests of the design-space search (``llmsim sweep``, :mod:`sim.studies.sweep.core`): the enumeration against
counts worked out by hand, memory pruning against the closed form, one point against ``llmsim
run``, determinism across workers and executors, the outputs, Ctrl-C, the branch and bound
(the same top N as the exhaustive sweep, its bounds below every simulated time, its choices
independent of workers and completion order), and bad space files."""

from __future__ import annotations

import csv
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import SimpleNamespace

import pytest

import sim.studies.sweep.core as sweep_module
from sim.cli import main
from sim.config import load_topology, load_workload
from sim.config.space import Space, default_space, space_from_mapping
from sim.errors import ConfigError
from sim.memory import activation_model, activation_peak_bytes, stage_memory
from sim.runner import simulate
from sim.studies.sweep.bound import IterationBound
from sim.studies.sweep.branch_and_bound import bounded_search
from sim.studies.sweep.core import Fidelity, make_candidate, pareto_front, space_points, sweep
from sim.studies.sweep.timeline_bound import TimelineBound, timeline_bound
from sim.types import RecomputeKind, ScheduleKind
from sim.workload.taskgraph import build_program

SMALL_SPACE = "tp: [1, 2]\npp: [1, 2]\nmicro_batch_size: [1, 2]\nrecompute: [none, full]\n"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _space_file(tmp_path, text: str = SMALL_SPACE):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def _counts(points, w):
    invalid = 0
    for point in points:
        try:
            make_candidate(w, point)
        except ConfigError:
            invalid += 1
    return len(points), invalid


def _sweep_json(tmp_path, capsys, name: str, *extra: str) -> dict:
    path = tmp_path / f"{name}.json"
    status, out, err = _run(capsys, "sweep", "tiny", "--json", str(path), *extra)
    assert status == 0, err
    data = json.loads(path.read_text())
    assert not any("wall" in key for key in data)  # no wall-clock time: the same sweep, the same bytes
    return data


# --- enumeration --------------------------------------------------------------------------------


def test_small_space_counts_by_hand():
    """tiny: 8 GPUs, global batch 8. tp x pp x mbs x recompute = 2 x 2 x 2 x 2 = 16 points;
    dp = 8 / (tp x pp); only tp 1 pp 1 (dp 8) with micro-batch 2 leaves 8 % (2 x 8) != 0, under
    both recomputations: 2 invalid."""
    w = load_workload("tiny")
    points = list(space_points(w, space_from_mapping({"tp": [1, 2], "pp": [1, 2], "micro_batch_size": [1, 2],
                                                      "recompute": ["none", "full"]}, "s.yaml"), 8))
    assert _counts(points, w) == (16, 2)
    assert {p["dp"] for p in points} == {8, 4, 2}
    assert all(p["schedule"].value == "1f1b" and p["zero_stage"] == 0 for p in points)  # fixed to tiny's


def test_default_space_counts_by_hand():
    """tiny's default space, worked out by hand (4 layers, 16 heads, seq 1024, batch 8, 8 GPUs
    in one NVLink domain): tp in 1, 2, 4, 8; cp 1 (1024 tokens is the least per CP rank); pp
    dividing 8 / tp among 1, 2, 4 (8 stages cannot hold 4 layers); v 2 only at pp 2;
    micro-batches of 1, 2, 4, 8 dividing 8 / dp; 4 recomputations; SP off/on with tp > 1;
    ZeRO 0-3 with dp > 1. Invalid: ZB-H1 with full or op-level recomputation, and interleaving
    with a micro-batch count not a multiple of pp."""
    # (tp, pp, dp): [(v, schedules, micro-batch sizes, zb-h1 points invalid, interleaved invalid)]
    recompute, zb_bad = 4, 2
    table = {
        (1, 1, 8): [(1, 1, 1, 0, 0)],
        (1, 2, 4): [(1, 3, 2, True, 0), (2, 1, 2, False, 1)],   # v 2: mbs 2 -> 1 micro-batch
        (1, 4, 2): [(1, 3, 3, True, 0)],
        (2, 1, 4): [(1, 1, 2, 0, 0)],
        (2, 2, 2): [(1, 3, 3, True, 0), (2, 1, 3, False, 1)],   # v 2: mbs 4 -> 1 micro-batch
        (2, 4, 1): [(1, 3, 4, True, 0)],
        (4, 1, 2): [(1, 1, 3, 0, 0)],
        (4, 2, 1): [(1, 3, 4, True, 0), (2, 1, 4, False, 1)],   # v 2: mbs 8 -> 1 micro-batch
        (8, 1, 1): [(1, 1, 4, 0, 0)],
    }
    tried = invalid = 0
    for (tp, _pp, dp), rows in table.items():
        sp, zero = (2 if tp > 1 else 1), (4 if dp > 1 else 1)
        for _v, schedules, mbs, zb, inter in rows:
            tried += schedules * mbs * recompute * sp * zero
            invalid += (mbs * zb_bad * sp * zero if zb else 0) + inter * recompute * sp * zero
    assert (tried, invalid) == (1088, 176)
    w = load_workload("tiny")
    assert _counts(list(space_points(w, default_space(), 8)), w) == (tried, invalid)


def test_default_tp_stays_inside_the_nvlink_domain():
    w = load_workload("tiny")
    assert {p["tp"] for p in space_points(w, default_space(), 4)} == {1, 2, 4}


# --- one point is `llmsim run` ------------------------------------------------------------------


@pytest.mark.parametrize("fidelity", ["fast", "op"])
def test_one_point_space_equals_run(tmp_path, capsys, fidelity):
    run_json = tmp_path / "run.json"
    assert _run(capsys, "run", "tiny", "--json", str(run_json))[0] == 0
    ran = json.loads(run_json.read_text())
    data = _sweep_json(tmp_path, capsys, "sweep", "--space", _space_file(tmp_path, "tp: [2]\n"),
                       "--workers", "1", "--fidelity", fidelity)
    assert data["counts"] == {"tried": 1, "invalid": 0, "pruned_memory": 0, "pruned_bound": 0, "simulated": 1,
                              "failed": 0, "cancelled": 0}
    (top,) = data["top"]
    assert top["iteration_time_s"] == ran["iteration_time_s"]
    assert top["tokens_per_s"] == ran["tokens_per_s"] and top["mfu"] == ran["mfu"]
    assert top["peak_memory_bytes"] == max(ran["peak_memory_bytes"])
    assert top["exposed_comm_s"] == ran["exposed_comm_s"]
    assert top["granularity"] == "op"
    for key, value in top["parallel"].items():
        assert value == ran["parallel"][key], key


# --- pruning ------------------------------------------------------------------------------------


def test_pruning_is_exactly_the_closed_form():
    w = load_workload("tiny")
    space = space_from_mapping({"pp": [1, 2], "micro_batch_size": [1, 2], "recompute": ["none", "full"],
                                "zero_stage": [0, 3]}, "s.yaml")
    cands = [make_candidate(w, p) for p in space_points(w, space, 8)]
    peaks = {sweep_module.candidate_key(c): max(stage_memory(c, s).total_bytes for s in range(c.parallel.pp))
             for c in cands}
    capacity = sorted(peaks.values())[len(peaks) // 2]  # half of them cannot fit
    small = replace(w, system=replace(w.system, gpu=replace(w.system.gpu, hbm_capacity_bytes=capacity)))
    result = sweep(small, load_topology("dgx-a100"), space, workers=1, fidelity=Fidelity.OP)
    over = {k for k, v in peaks.items() if v > capacity}
    assert 0 < len(over) < len(peaks)
    assert result.pruned == len(over)
    assert {r.candidate.key for r in result.rows} == set(peaks) - over
    assert all(r.candidate.peak_memory_bytes == peaks[r.candidate.key] for r in result.rows)


def _plain_walk(w, stage: int, am) -> float:
    """The schedule walk written out layer by layer, as the task graph allocates and frees."""
    from sim.types import ScheduleKind
    from sim.workload.schedules import Pass, pipeline_order

    p, m = w.parallel, w.model
    layers, last = w.virtual_stage_layers(), p.pp * p.virtual_pipeline_stages - 1
    cur = peak = 0.0
    for pas, _mb, chunk in pipeline_order(p.schedule, p.pp, p.virtual_pipeline_stages, p.num_microbatches, stage):
        vs = chunk * p.pp + stage
        if pas is Pass.FORWARD:
            cur += (am.embedding if vs == 0 else 0.0)
            cur += sum(am.stored(m.is_moe_layer(i)) for i in layers[vs])
            cur += (am.head + am.logits if vs == last else 0.0)
            peak = max(peak, cur)
        elif pas is Pass.WEIGHT:
            cur -= sum(am.stored(m.is_moe_layer(i)) for i in layers[vs])
        else:
            if vs == last:
                peak = max(peak, cur + am.loss_transient + am.loss_cached)
                cur -= am.logits + am.head
            for i in reversed(layers[vs]):
                peak = max(peak, cur + am.transient(m.is_moe_layer(i)))
                if p.schedule is not ScheduleKind.ZB_H1:
                    cur -= am.stored(m.is_moe_layer(i))
            if vs == 0:
                cur -= am.embedding
    return peak


@pytest.mark.parametrize("name", ["tiny", "moe"])
def test_memory_walk_is_the_closed_forms_float_for_float(name):
    """:func:`sim.memory.activation_peak_bytes` (each chunk's stored sum taken once, the peak of
    a uniform chunk's backward read at its first layer) gives the very float of the plain walk,
    layer by layer, on every stage of every configuration (ZB-H1, interleaving, MoE layers,
    CP)."""
    w = load_workload("tiny") if name == "tiny" else _tiny_moe()
    space = default_space() if name == "tiny" else space_from_mapping(MOE_SPACE, "moe.yaml")
    n = 0
    for point in space_points(w, space, 8):
        try:
            c = make_candidate(w, point)
        except ConfigError:
            continue
        am = activation_model(c)
        for stage in range(c.parallel.pp):
            assert activation_peak_bytes(c, stage, am) == _plain_walk(c, stage, am)
            n += 1
    assert n >= 200


# --- determinism and executors ------------------------------------------------------------------


def test_workers_do_not_change_the_result(tmp_path, capsys):
    space = _space_file(tmp_path)
    one = _sweep_json(tmp_path, capsys, "one", "--space", space, "--workers", "1")
    two = _sweep_json(tmp_path, capsys, "two", "--space", space, "--workers", "2")
    assert one == two
    assert one["counts"]["simulated"] == 14
    times = [(r["iteration_time_s"]) for r in one["top"]]
    assert times == sorted(times)


def test_dask_executor_matches_local(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    space = _space_file(tmp_path)
    local = _sweep_json(tmp_path, capsys, "local", "--space", space, "--workers", "1")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address.removeprefix("tcp://")
        remote = _sweep_json(tmp_path, capsys, "dask", "--space", space, "--executor", f"dask://{address}")
    assert remote == local


def test_missing_dask_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "distributed", None)
    status, out, err = _run(capsys, "sweep", "tiny", "--space", _space_file(tmp_path), "--executor",
                            "dask://127.0.0.1:8786")
    assert status == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "pip install 'llmsim[dask]'" in err


# --- outputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("exhaustive", [True, False])
def test_csv_has_one_row_per_simulated_configuration(tmp_path, capsys, exhaustive):
    path = tmp_path / "all.csv"
    data = _sweep_json(tmp_path, capsys, "s", "--space", _space_file(tmp_path), "--workers", "1",
                       "--csv", str(path), "--top", "3", *(["--exhaustive"] if exhaustive else []))
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    counts = data["counts"]
    assert len(rows) == counts["simulated"] and counts["simulated"] + counts["pruned_bound"] == 14
    assert counts["pruned_bound"] == 0 or not exhaustive
    assert len({tuple(r[k] for k in sweep_module.KEY_FIELDS) for r in rows}) == len(rows)
    assert sum(r["granularity"] == "op" for r in rows) == 3  # the re-run top 3
    assert sorted(float(r["iteration_time_s"]) for r in rows if r["granularity"] == "op") == \
        sorted(t["iteration_time_s"] for t in data["top"])


def test_report_table_json_and_plot(tmp_path, capsys):
    json_path, png = tmp_path / "s.json", tmp_path / "s.png"
    status, out, err = _run(capsys, "sweep", "tiny", "--space", _space_file(tmp_path), "--workers", "1",
                            "--top", "2", "--json", str(json_path), "--plot", str(png))
    assert status == 0, err
    data = json.loads(json_path.read_text())
    c = data["counts"]
    assert (f"tried 16   invalid 2   pruned (memory) 0   pruned (bound) {c['pruned_bound']}   "
            f"simulated {c['simulated']}   failed 0") in out
    assert c["pruned_bound"] + c["simulated"] == 14
    best = data["top"][0]
    assert best["rank"] == 1 and set(best) >= {"iteration_time_s", "screen_iteration_time_s", "tokens_per_s", "mfu",
                                              "peak_memory_bytes", "exposed_comm_s", "exposed_comm_total_s"}
    assert f"{best['tokens_per_s']:,.0f}" in out
    assert data["pareto_front"] and png.stat().st_size > 0


def test_ctrl_c_keeps_what_finished(tmp_path, capsys, monkeypatch):
    real, calls = sweep_module.simulate_one, []

    def interrupted_third(*args):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(sweep_module, "simulate_one", interrupted_third)
    path = tmp_path / "partial.json"
    status, out, err = _run(capsys, "sweep", "tiny", "--space", _space_file(tmp_path), "--workers", "1",
                            "--json", str(path))
    assert status == 130
    data = json.loads(path.read_text())
    assert data["interrupted"] and data["stopped_while"] == "simulating"
    assert data["counts"]["simulated"] == 2 and data["counts"]["cancelled"] == 12
    assert len(data["top"]) == 2
    assert "interrupted (Ctrl-C) while simulating: 2 of 14 finished" in out


def test_pareto_front():
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 1.0)]) == [0]
    # (memory, throughput): 2 is dominated by 0 (more memory, less throughput), 3 by 1
    assert pareto_front([(10, 5), (20, 9), (15, 4), (20, 8), (30, 9)]) == [0, 1]
    # equal points are both on the front; a point with equal memory and more throughput wins
    assert pareto_front([(5, 3), (5, 3), (5, 4), (1, 1)]) == [3, 2]
    assert pareto_front([(1, 1), (2, 2), (3, 3)]) == [0, 1, 2]


# --- branch and bound ---------------------------------------------------------------------------

MOE_SPACE = {"tp": [1, 2], "cp": [1, 2], "pp": [2], "ep": "auto", "virtual_pipeline_stages": "auto",
             "schedule": "auto", "micro_batch_size": [1], "recompute": "auto", "sequence_parallel": "auto",
             "zero_stage": [1]}
"""A small space of a mixture-of-experts variant of tiny (:func:`_tiny_moe`): dense and MoE
layers, context and expert parallelism, every schedule (interleaving included) and every
recomputation."""


def _tiny_moe():
    """tiny with 6 layers, the last 5 of them 4 experts (top-2), and 16 sequences a batch."""
    w = load_workload("tiny")
    return replace(w, model=replace(w.model, num_layers=6, num_experts=4, moe_top_k=2, first_dense_layers=1),
                   parallel=replace(w.parallel, global_batch_size=16, sequence_parallel=True))


@pytest.fixture(scope="module")
def tiny_exhaustive():
    return sweep(load_workload("tiny"), load_topology("dgx-a100"), top=10, workers=1, exhaustive=True)


def _ranked(r, n=None):
    """The top rows as (key, screening time, finest time), in their order."""
    return [(row.candidate.key, row.screen.iteration_time_s, row.best.iteration_time_s) for row in r.top[:n]]


def _adds_up(r) -> bool:
    return r.tried == r.invalid + r.pruned + r.pruned_bound + r.simulated + r.failed + r.cancelled


@pytest.mark.parametrize("top", [1, 3, 10])
def test_bounded_top_equals_exhaustive_on_tiny(tiny_exhaustive, top):
    bounded = sweep(load_workload("tiny"), load_topology("dgx-a100"), top=top, workers=1)
    full = tiny_exhaustive
    screen_top = [(r.candidate.key, r.screen.iteration_time_s) for r in full.rows[:top]]
    assert [(r.candidate.key, r.screen.iteration_time_s) for r in bounded.rows[:top]] == screen_top
    if top == 10:
        assert _ranked(bounded) == _ranked(full)
    assert {row.candidate.key for row in bounded.top} == {k for k, _ in screen_top}
    assert 0 < bounded.pruned_bound and bounded.simulated + bounded.pruned_bound == full.simulated
    assert _adds_up(bounded) and _adds_up(full) and full.pruned_bound == 0
    # every configuration left out is slower than the N-th best (the exhaustive sweep says)
    simulated = {r.candidate.key for r in bounded.rows}
    nth = full.rows[top - 1].screen.iteration_time_s
    assert all(r.screen.iteration_time_s > nth for r in full.rows if r.candidate.key not in simulated)


def test_bounded_top_equals_exhaustive_on_a_moe_space():
    w, topo = _tiny_moe(), load_topology("dgx-a100")
    space = space_from_mapping(MOE_SPACE, "moe.yaml")
    full = sweep(w, topo, space, top=5, workers=1, exhaustive=True)
    bounded = sweep(w, topo, space, top=5, workers=1)
    assert _ranked(bounded) == _ranked(full) and len(full.top) == 5
    assert 0 < bounded.pruned_bound and bounded.simulated + bounded.pruned_bound == full.simulated
    assert _adds_up(bounded) and _adds_up(full)
    kinds = {(r.candidate.settings["schedule"], r.candidate.settings["recompute"]) for r in full.rows}
    assert len(kinds) >= 8 and {r.candidate.settings["cp"] for r in full.rows} == {1, 2}


def test_bound_is_below_every_simulated_time(tiny_exhaustive):
    """The closed-form bound <= the timeline bound <= the chunk-granularity time, for every
    configuration of tiny's default space; the timeline bound also under op granularity."""
    w, topo = load_workload("tiny"), load_topology("dgx-a100")
    closed = IterationBound(w.model, w.system.gpu)
    timeline = TimelineBound(topo, w.model, w.system.gpu)
    tighter = 0
    for row in tiny_exhaustive.rows:
        c = row.candidate.workload
        lb1, lb2 = closed.lower_bound_s(c), timeline.lower_bound_s(c)
        assert 0 < lb1 <= lb2 <= row.screen.iteration_time_s, row.candidate.key
        tighter += lb2 > lb1
    assert tighter > len(tiny_exhaustive.rows) / 2
    for row in tiny_exhaustive.rows[::40]:
        c = row.candidate.workload
        assert timeline.lower_bound_s(c) <= simulate(c, topo).result.makespan_s, row.candidate.key


@pytest.mark.parametrize("settings", [
    {},  # Megatron's published setting: TP 8, PP 8, v 3, interleaved, selective, SP, distributed optimizer
    {"virtual_pipeline_stages": 1, "schedule": ScheduleKind.ZB_H1},
    {"virtual_pipeline_stages": 1, "schedule": ScheduleKind.ONE_F_ONE_B, "recompute": RecomputeKind.FULL,
     "micro_batch_size": 2},
    {"tp": 4, "pp": 16, "virtual_pipeline_stages": 2, "sequence_parallel": False,
     "recompute": RecomputeKind.SELECTIVE_OP, "zero_stage": 2, "distributed_optimizer": False},
    {"tp": 8, "pp": 4, "cp": 2, "virtual_pipeline_stages": 1, "schedule": ScheduleKind.GPIPE,
     "recompute": RecomputeKind.FULL},
    {"virtual_pipeline_stages": 1, "schedule": ScheduleKind.ONE_F_ONE_B, "recompute": RecomputeKind.FULL,
     "recompute_num_layers": 5, "micro_batch_size": 2},  # block recomputation: 5 of each stage's 12 layers
])
def test_bound_holds_around_gpt3_175b_on_1024_gpus(settings):
    w, topo = load_workload("gpt3-175b-1024"), load_topology("dgx-a100")
    c = replace(w, parallel=replace(w.parallel, **settings))
    t = simulate(c, topo, granularity=sweep_module.SCREEN_GRANULARITY).result.makespan_s
    lb1 = IterationBound(w.model, w.system.gpu).lower_bound_s(c)
    lb2 = timeline_bound(topo, w.model, w.system.gpu).lower_bound_s(c)
    assert lb1 <= lb2 <= t


@pytest.mark.parametrize("name", ["tiny", "moe"])
def test_closed_form_bound_prices_the_programs_compute(name):
    """W_s of the closed-form bound is each simulated rank's compute, op for op: the sum of
    the cost model's time over the compute tasks of the op-level program."""
    w = load_workload("tiny") if name == "tiny" else _tiny_moe()
    space = default_space() if name == "tiny" else space_from_mapping(MOE_SPACE, "moe.yaml")
    cands = []
    for point in space_points(w, space, 8):
        try:
            cands.append(make_candidate(w, point))
        except ConfigError:
            pass
    bound = IterationBound(w.model, w.system.gpu)
    for c in cands[::25]:
        prog = build_program(c)
        per_rank = {}
        for t in prog.tasks:
            if not t.comm:
                per_rank[t.rank] = per_rank.get(t.rank, 0.0) + bound.costs.compute_time_s(t.op)
        want = bound.stage_compute_s(c)
        for info in prog.ranks:
            assert per_rank[info.rank] == pytest.approx(want[info.pp], rel=1e-12), sweep_module.candidate_key(c)


def test_search_ignores_completion_order_and_workers():
    """Synthetic jobs finishing in random order on 1 to 5 threads: the same configurations
    are simulated every time, and the top N are the exhaustive ones."""
    rng = random.Random(0)
    cands = [SimpleNamespace(key=(i,)) for i in range(90)]
    times = {c.key: 1.0 + rng.random() for c in cands}
    closed = {k: t * rng.uniform(0.6, 1.0) for k, t in times.items()}
    timeline = {k: max(closed[k], t * rng.uniform(0.9, 1.0)) for k, t in times.items()}
    order = sorted(cands, key=lambda c: (closed[c.key], c.key))
    top = 4
    seen = set()
    for slots, seed in [(1, 1), (2, 2), (3, 3), (5, 4)]:
        delay = random.Random(seed)

        def job(key, gate, pause):
            time.sleep(pause)
            return None if timeline[key] > gate else times[key]

        with ThreadPoolExecutor(slots) as ex:
            found = bounded_search(order, closed, top,
                                   # the closure runs before the pool closes, in this iteration (B023)
                                   submit=lambda c, gate: ex.submit(job, c.key, gate, delay.random() / 2000),  # noqa: B023
                                   times_of=lambda o: o, on_done=lambda c, o: None, failed=lambda exc: None,
                                   abandon=lambda: None)
        simulated = tuple(sorted(k for k, o in found.outcomes.items() if o is not None))
        best = sorted((times[k], k) for k in simulated)[:top]
        assert best == sorted((t, k) for k, t in times.items())[:top]
        assert len(simulated) < len(cands) and found.unsent > 0
        seen.add(simulated)
    assert len(seen) == 1


def test_bounded_sweep_is_the_same_on_one_or_two_workers(tmp_path, capsys):
    one = _sweep_json(tmp_path, capsys, "one", "--top", "3", "--workers", "1")
    two = _sweep_json(tmp_path, capsys, "two", "--top", "3", "--workers", "2")
    assert one == two and one["counts"]["pruned_bound"] > 0 and not one["exhaustive"]


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, field", [
    ("dp: [2]\n", "dp"),
    ("tp: 4\n", "tp"),
    ("tp: []\n", "tp"),
    ("tp: [2, 0]\n", "tp[1]"),
    ("tp: [2, 2]\n", "tp"),
    ("recompute: [none, selectve]\n", "recompute[1]"),
    ("schedule: [1f1b, pipedream]\n", "schedule[1]"),
    ("sequence_parallel: [1]\n", "sequence_parallel[0]"),
    ("zero_stage: [4]\n", "zero_stage[0]"),
    ("tp: [2\n", "line"),
    ("- tp\n", "<top level>"),
    ("", "<top level>"),
])
def test_bad_space_file_is_one_line(tmp_path, capsys, text, field):
    path = _space_file(tmp_path, text)
    status, out, err = _run(capsys, "sweep", "tiny", "--space", path, "--workers", "1")
    assert status == 2 and out == ""
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith(f"llmsim: error: {path}: {field}")
    assert "expected" in err and "(got" in err


@pytest.mark.parametrize("argv", [("--workers", "0"), ("--executor", "spark://x"), ("--top", "0")])
def test_bad_options_are_one_line(tmp_path, capsys, argv):
    status, out, err = _run(capsys, "sweep", "tiny", "--space", _space_file(tmp_path), *argv)
    assert status == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_missing_space_file(tmp_path, capsys):
    status, _, err = _run(capsys, "sweep", "tiny", "--space", str(tmp_path / "nope.yaml"))
    assert status == 2 and "nope.yaml" in err and len(err.strip().splitlines()) == 1


def test_space_keeps_unlisted_settings_fixed():
    space = space_from_mapping({"tp": [1, 2], "pp": "auto"}, "s.yaml")
    assert space.values("tp") == (1, 2) and space.values("pp") is None
    assert space.is_fixed("recompute") and not space.is_fixed("pp")
    assert Space().is_fixed("tp")
