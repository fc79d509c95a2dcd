"""Tests of the design-space search (``llmsim sweep``, :mod:`sim.sweep`): the enumeration against
counts worked out by hand, memory pruning against the closed form, one point against ``llmsim
run``, determinism across workers and executors, the outputs, Ctrl-C, and bad space files."""

from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest

import sim.sweep as sweep_module
from sim.cli import main
from sim.config import load_topology, load_workload
from sim.config.space import Space, default_space, space_from_mapping
from sim.errors import ConfigError
from sim.memory import stage_memory
from sim.sweep import Fidelity, make_candidate, pareto_front, space_points, sweep
from sim.sweep_report import sweep_json

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
    del data["wall_s"]
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
    for (tp, pp, dp), rows in table.items():
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
    assert data["counts"] == {"tried": 1, "invalid": 0, "pruned_memory": 0, "simulated": 1, "failed": 0,
                              "cancelled": 0}
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


def test_csv_has_one_row_per_simulated_configuration(tmp_path, capsys):
    path = tmp_path / "all.csv"
    data = _sweep_json(tmp_path, capsys, "s", "--space", _space_file(tmp_path), "--workers", "1",
                       "--csv", str(path), "--top", "3")
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == data["counts"]["simulated"] == 14
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
    assert "tried 16   invalid 2   pruned (memory) 0   simulated 14   failed 0" in out
    best = data["top"][0]
    assert best["rank"] == 1 and set(best) >= {"iteration_time_s", "screen_iteration_time_s", "tokens_per_s", "mfu",
                                              "peak_memory_bytes", "exposed_comm_s", "exposed_comm_total_s"}
    assert f"{best['tokens_per_s']:,.0f}" in out
    assert data["pareto_front"] and png.stat().st_size > 0


def test_without_layer_granularity_everything_runs_op_by_op(monkeypatch):
    monkeypatch.setattr(sweep_module, "layer_granularity_available", lambda: False)
    result = sweep(load_workload("tiny"), load_topology("dgx-a100"),
                   space_from_mapping({"recompute": ["none", "full"]}, "s.yaml"), workers=1)
    assert result.screen_granularity == "op" and any("op by op" in n for n in result.notes)
    assert all(r.op is None and r.best.granularity == "op" for r in result.top)
    assert "screen_iteration_time_s" not in sweep_json(result)["top"][0]


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
