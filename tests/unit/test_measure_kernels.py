"""``benchmarks/device/measure_kernels.py``, run as a user runs it (tests import nothing from
benchmarks/): ``--dry-run`` writes, without PyTorch, the table the measurement would write with
its time cells empty -- the workload's GEMM and attention kernels as llmsim builds its iteration,
and the default sweep -- and that table, its times filled in from chosen efficiencies, is what
``llmsim calibrate --kernels`` reads back to those efficiencies."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sim.calibrate.calibration import load_calibration
from sim.cli import main
from sim.config import default_topology_name, load_topology, load_workload
from sim.hardware import get_gpu
from sim.topology.build import build_topology
from sim.topology.routing import Fabric
from sim.types import Dtype
from sim.workload.ops import AttentionOp, GemmOp
from sim.workload.taskgraph import build_program

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device" / "measure_kernels.py"
WORKLOAD = "workloads/llama3-8b-h100.yaml"
H100 = get_gpu("H100")
EFF = {"bf16": 0.5, "fp8": 0.45, ("cudnn", "fwd"): 0.4, ("cudnn", "bwd"): 0.3, ("flash2", "fwd"): 0.25,
       ("flash2", "bwd"): 0.2}


def _run(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                          check=False)


def _rows(path: Path) -> list[dict[str, str]]:
    text = "".join(line for line in path.read_text().splitlines(keepends=True) if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def _workload_kernels() -> tuple[set, set]:
    """The distinct GEMM and attention shapes of the workload's iteration, from llmsim's program."""
    w = load_workload(WORKLOAD)
    fabric = Fabric(build_topology(load_topology(default_topology_name(w.system.gpu.name)), w.system.num_gpus))
    program = build_program(w, node_of=fabric.node_of, local_gpu_of=fabric.local_gpu)
    gemms = {(op.m, op.n, op.k, op.batch, op.dtype.value) for t in program.tasks if isinstance(op := t.op, GemmOp)}
    attention = {(op.batch, op.heads, op.kv_heads, op.seq, op.head_dim) for t in program.tasks
                 if isinstance(op := t.op, AttentionOp)}
    return gemms, attention


def test_dry_run_writes_the_workloads_kernels_with_empty_times(tmp_path):
    out = tmp_path / "shapes.csv"
    done = _run("--workload", WORKLOAD, "--no-sweep", "--dry-run", "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = _rows(out)
    gemms, attention = _workload_kernels()
    assert {(int(r["m"]), int(r["n"]), int(r["k"]), int(r["batch"]), r["dtype"]) for r in rows
            if r["kind"] == "gemm"} == gemms
    assert {(int(r["batch"]), int(r["heads"]), int(r["kv_heads"]), int(r["seq"]), int(r["head_dim"])) for r in rows
            if r["kind"] == "attention"} == attention
    assert all(r["time_us"] == r["fwd_us"] == r["bwd_us"] == "" for r in rows)
    assert {r["tag"] for r in rows} == {load_workload(WORKLOAD).name}


def test_the_default_sweep_is_added(tmp_path):
    out = tmp_path / "shapes.csv"
    assert _run("--workload", WORKLOAD, "--dry-run", "--out", str(out)).returncode == 0
    sweep = [r for r in _rows(out) if r["tag"] == "sweep"]
    assert {r["dtype"] for r in sweep if r["kind"] == "gemm"} == {"bf16", "fp8"}
    assert {r["backend"] for r in sweep if r["kind"] == "attention"} == {"cudnn", "flash2"}
    assert len([r for r in _rows(out) if r["kind"] == "gemm"]) > len(_workload_kernels()[0])


def _fill(rows: list[dict[str, str]]) -> None:
    """Each row's time what its kernel takes on an H100 at :data:`EFF` of the dense peak."""
    for r in rows:
        if r["kind"] == "gemm":
            op = GemmOp(int(r["m"]), int(r["n"]), int(r["k"]), Dtype(r["dtype"]), int(r["batch"]))
            r["time_us"] = repr((op.flops / (EFF[r["dtype"]] * H100.peak(op.dtype)) + 2e-6) * 1e6)
            continue
        for d in ("fwd", "bwd"):
            op_a = AttentionOp(int(r["batch"]), int(r["heads"]), int(r["kv_heads"]), int(r["seq"]), int(r["head_dim"]),
                               r["causal"] == "true", d == "bwd")
            r[f"{d}_us"] = repr((op_a.flops / (EFF[(r["backend"], d)] * H100.peak(Dtype.BF16)) + 2e-6) * 1e6)


def test_the_table_filled_in_calibrates_to_the_efficiencies_it_was_filled_with(tmp_path, capsys):
    out = tmp_path / "shapes.csv"
    assert _run("--workload", WORKLOAD, "--dry-run", "--out", str(out)).returncode == 0
    cal = tmp_path / "cal.yaml"
    assert main(["calibrate", "--kernels", str(out), "--gpu", "H100", "-o", str(cal)]) == 2
    err = capsys.readouterr().err
    assert "time_us: expected a positive time in microseconds (got 'an empty cell')" in err
    rows = _rows(out)
    _fill(rows)
    filled = tmp_path / "filled.csv"
    head = "".join(line for line in out.read_text().splitlines(keepends=True) if line.startswith("#"))
    with open(filled, "w", newline="") as f:
        f.write(head)
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    assert main(["calibrate", "--kernels", str(filled), "--gpu", "H100", "-o", str(cal)]) == 0
    section = load_calibration(str(cal)).kernels
    assert section is not None
    want = {"gemm_bf16": EFF["bf16"], "gemm_fp8": EFF["fp8"], "attention_fwd": EFF[("cudnn", "fwd")],
            "attention_bwd": EFF[("cudnn", "bwd")], "attention_flash2_fwd": EFF[("flash2", "fwd")],
            "attention_flash2_bwd": EFF[("flash2", "bwd")]}
    assert {v.key: {e for _, e in v.value} for v in section.values} == {k: {e} for k, e in want.items()}  # type: ignore[union-attr]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine measures instead")
def test_measuring_without_a_gpu_says_so(tmp_path):
    done = _run("--workload", "tiny", "--no-sweep", "--out", str(tmp_path / "k.csv"))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--dry-run" in done.stderr
    assert not (tmp_path / "k.csv").exists()


def test_a_bad_workload_is_one_line(tmp_path):
    done = _run("--workload", str(tmp_path / "missing.yaml"), "--dry-run", "--out", str(tmp_path / "k.csv"))
    assert done.returncode == 2 and "missing.yaml" in done.stderr and done.stderr.strip().count("\n") == 0
    done = _run("--no-sweep", "--dry-run", "--out", str(tmp_path / "k.csv"))
    assert done.returncode == 2 and "--no-sweep needs --workload" in done.stderr
