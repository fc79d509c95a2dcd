"""``llmsim calibrate --kernels`` (issue #33, the kernel part).

A kernel table whose times are computed from chosen efficiencies gives those efficiencies back
as the GPU's curves, and ``--calibration`` then prices the kernels (and the iteration) at them
on that GPU, and not on another; the committed H100 measurement, written as a table, gives back
the catalogue's H100 curves; the hand-built profiler traces of tests/data/profiler/ read to the
GEMMs and attention kernels their README lists. Bad input is one line naming the file, exit 2.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

import sim
from sim.calibrate.calibration import load_calibration
from sim.calibrate.kernels import fit_kernels, read_kernels
from sim.cli import main
from sim.costs.compute import attention_time_s, gemm_time_s
from sim.costs.factors import CalibrationFactors, KernelCurves
from sim.hardware import EfficiencyCurve, get_gpu
from sim.types import AttentionKernel, Dtype
from sim.workload.ops import AttentionOp, GemmOp

ROOT = Path(sim.__file__).resolve().parent.parent
TRACE = ROOT / "tests" / "data" / "profiler" / "h100-gemms.pt.trace.json"
ATTENTION_TRACE = ROOT / "tests" / "data" / "profiler" / "h100-attention.pt.trace.json"
H100_TABLE = ROOT / "tests" / "data" / "kernels" / "h100-sxm5-80gb-2026-11-26.csv"
H100 = get_gpu("H100")
HEADER = "kind,m,n,k,batch,heads,kv_heads,seq,head_dim,causal,backend,dtype,time_us,fwd_us,bwd_us"
CHOSEN = {"gemm_bf16": 0.55, "gemm_fp8": 0.4, "attention_fwd": 0.45, "attention_bwd": 0.35,
          "attention_flash2_fwd": 0.25, "attention_flash2_bwd": 0.2}
"""The efficiencies the synthetic table's times are computed from."""


def _time_us(flops: float, eff: float, peak: float) -> float:
    return (flops / (eff * peak) + H100.kernel_launch_s) * 1e6


def synthetic_table(eff: dict[str, float], device: str | None = "NVIDIA H100 80GB HBM3") -> str:
    """A kernel table of GEMMs and attention kernels over several power-of-two bins, each time
    what the kernel takes on an H100 at ``eff[curve]`` of the dense peak (launch gap added)."""
    lines = [f"# device: {device}"] if device else []
    lines.append(HEADER)
    for dtype in ("bf16", "fp8"):
        peak = H100.peak(Dtype(dtype))
        for m in (1024, 2048, 4096, 8192):
            for n, k in ((4096, 4096), (8192, 4096)):
                t = _time_us(2.0 * m * n * k, eff[f"gemm_{dtype}"], peak)
                lines.append(f"gemm,{m},{n},{k},1,,,,,,,{dtype},{t!r},,")
    for backend, prefix in (("cudnn", "attention"), ("flash2", "attention_flash2")):
        for seq in (2048, 4096, 8192):
            fwd = AttentionOp(1, 32, 8, seq, 128, True, False).flops
            bwd = AttentionOp(1, 32, 8, seq, 128, True, True).flops
            lines.append(f"attention,,,,1,32,8,{seq},128,true,{backend},bf16,,"
                         f"{_time_us(fwd, eff[prefix + '_fwd'], H100.peak(Dtype.BF16))!r},"
                         f"{_time_us(bwd, eff[prefix + '_bwd'], H100.peak(Dtype.BF16))!r}")
    return "\n".join(lines) + "\n"


def _calibrate(tmp_path: Path, text: str, *extra: str, name: str = "kernels.csv") -> Path:
    table = tmp_path / name
    table.write_text(text)
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--kernels", str(table), *extra, "-o", str(out)]) == 0
    return out


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("llmsim: error: "), err
    return err


def test_a_table_at_known_efficiencies_gives_them_back_as_the_curves(tmp_path, capsys):
    out = _calibrate(tmp_path, synthetic_table(CHOSEN))
    printed = capsys.readouterr().out
    cal = load_calibration(str(out))
    assert cal.kernels is not None and cal.kernels.gpu == "H100-SXM5-80GB"
    got = {v.key: {e for _, e in v.value} for v in cal.kernels.values}  # type: ignore[union-attr]
    assert got == {key: {eff} for key, eff in CHOSEN.items()}
    assert all(len(v.value) >= 2 for v in cal.kernels.values)  # several bins each  # type: ignore[arg-type]
    assert all(abs(r["error_after"]) < 1e-3 for r in cal.kernels.check)
    assert any(abs(r["error_before"]) > 0.1 for r in cal.kernels.check)  # the catalogue is not at these efficiencies
    assert "the table's device, NVIDIA H100 80GB HBM3" in printed and "gemm_bf16 (5 points from 8 kernels)" in printed


def test_the_calibrated_curves_price_each_kernel_at_the_measured_efficiency(tmp_path):
    cal = load_calibration(str(_calibrate(tmp_path, synthetic_table(CHOSEN))))
    factors = cal.calibration_factors()
    assert factors is not None and factors.kernels is not None
    gpu = factors.kernels.on(H100)
    gemm = GemmOp(8192, 8192, 4096, Dtype.BF16)
    assert gemm_time_s(gpu, gemm) == pytest.approx(gemm.flops / (H100.peak(Dtype.BF16) * 0.55) + 2e-6, rel=1e-9)
    assert gemm_time_s(gpu, gemm) > 1.2 * gemm_time_s(H100, gemm)  # the catalogue's curve is ~0.69 there
    fp8 = GemmOp(4096, 8192, 4096, Dtype.FP8)
    assert gemm_time_s(gpu, fp8) == pytest.approx(fp8.flops / (H100.peak(Dtype.FP8) * 0.4) + 2e-6, rel=1e-9)
    flash = AttentionOp(1, 32, 8, 4096, 128, True, True, kernel=AttentionKernel.FLASH2)
    assert attention_time_s(gpu, flash) == pytest.approx(flash.flops / (H100.peak(Dtype.BF16) * 0.2) + 2e-6,
                                                         rel=1e-9)


def _iteration(tmp_path: Path, name: str, *argv: str) -> float:
    path = tmp_path / f"{name}.json"
    assert main(["run", "tiny", *argv, "--json", str(path)]) == 0
    return json.loads(path.read_text())["iteration_time_s"]


def test_run_on_the_calibrated_gpu_follows_the_measured_efficiency(tmp_path, capsys):
    for name in ("slow", "fast"):
        (tmp_path / name).mkdir()
    slow = _calibrate(tmp_path / "slow", synthetic_table({k: 0.2 for k in CHOSEN}))
    fast = _calibrate(tmp_path / "fast", synthetic_table({k: 0.95 for k in CHOSEN}))
    capsys.readouterr()
    on_h100 = ("--set", "system.gpu=H100")
    plain = _iteration(tmp_path, "plain", *on_h100)
    slower = _iteration(tmp_path, "slow", *on_h100, "--calibration", str(slow))
    printed = capsys.readouterr().out
    faster = _iteration(tmp_path, "fast", *on_h100, "--calibration", str(fast))
    assert slower > plain > faster
    assert f"calibration {slow}: H100-SXM5-80GB's gemm_bf16" in printed


def test_a_workload_on_another_gpu_keeps_its_curves_with_a_note(tmp_path, capsys):
    cal = _calibrate(tmp_path, synthetic_table({k: 0.2 for k in CHOSEN}))
    capsys.readouterr()
    plain = _iteration(tmp_path, "plain")  # tiny runs on A100s
    calibrated = _iteration(tmp_path, "cal", "--calibration", str(cal))
    printed = capsys.readouterr().out
    assert calibrated == plain
    assert "kernel curves not applied (measured on H100-SXM5-80GB, the workload runs on A100-SXM4-80GB" in printed


def test_the_committed_h100_measurement_gives_back_the_catalogue_curves():
    """tests/data/kernels/h100-sxm5-80gb-2026-11-26.csv is
    benchmarks/device/results/h100-sxm5-80gb-2026-11-26.json, what sim/hardware.py's H100 curves
    were derived from (sim/derive/gemm_curves.py), as a kernel table: it holds that
    measurement's kernels and times and calibrates to the catalogue's points."""
    d = json.loads((ROOT / "benchmarks/device/results/h100-sxm5-80gb-2026-11-26.json").read_text())
    table = read_kernels(str(H100_TABLE))
    assert table.device == d["device"]
    want = sorted((r["m"], r["n"], r["k"], r["batch"], r["dtype"], r["median_s"])
                  for r in d["gemms"] if "median_s" in r)
    got = sorted((g.m, g.n, g.k, g.batch, g.dtype.value, g.time_s) for g in table.gemms)
    assert [w[:5] for w in want] == [g[:5] for g in got]
    assert all(g[5] == pytest.approx(w[5], abs=1e-12) for w, g in zip(want, got))
    assert len(table.attention) == len([r for r in d["attention"] if "fwd_s" in r])
    curves = dict(fit_kernels(table, H100).curves())
    assert set(curves) == set(CHOSEN)
    assert curves["gemm_bf16"].points == H100.gemm_curve(Dtype.BF16).points
    assert curves["gemm_fp8"].points == H100.gemm_curve(Dtype.FP8).points
    for key, kernel, backward in (("attention_fwd", AttentionKernel.VENDOR, False),
                                  ("attention_bwd", AttentionKernel.VENDOR, True),
                                  ("attention_flash2_fwd", AttentionKernel.FLASH2, False),
                                  ("attention_flash2_bwd", AttentionKernel.FLASH2, True)):
        assert curves[key].points == H100.attention_curve(kernel, backward).points, key


def test_the_hand_built_profiler_trace_reads_to_its_gemms():
    """tests/data/profiler/README.md lists what the trace holds."""
    table = read_kernels(str(TRACE))
    assert table.form == "trace" and table.device == "NVIDIA H100 80GB HBM3"
    got = {(g.m, g.n, g.k, g.batch, g.dtype) for g in table.gemms}
    assert got == {(8192, 8192, 4096, 1, Dtype.BF16), (2048, 2048, 4096, 8, Dtype.BF16),
                   (8192, 8192, 4096, 1, Dtype.FP8)}
    events = json.loads(TRACE.read_text())["traceEvents"]
    addmm = sum(e["dur"] for e in events if e.get("cat") == "kernel" and e["args"].get("External id") == 4)
    assert next(g for g in table.gemms if g.dtype is Dtype.BF16 and g.batch == 1).time_s == pytest.approx(addmm * 1e-6)
    assert len(table.skipped) == 1 and "aten::mm" in table.skipped[0] and "float" in table.skipped[0]
    fit = dict(fit_kernels(table, H100).curves())
    bf16 = fit["gemm_bf16"]
    assert bf16(2.0 * 8 * 2048 * 2048 * 4096) == pytest.approx(0.45) and bf16(2.0 * 8192 * 8192 * 4096) == 0.6
    assert fit["gemm_fp8"].points == ((2.0**39, 0.5),)


def test_a_gzipped_trace_reads_as_the_trace(tmp_path, capsys):
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(TRACE.read_bytes()))
    assert [g.shape for g in read_kernels(str(gz)).gemms] == [g.shape for g in read_kernels(str(TRACE)).gemms]
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--kernels", str(gz), "-o", str(out)]) == 0
    assert "a PyTorch profiler trace; measured on NVIDIA H100 80GB HBM3" in capsys.readouterr().out
    assert load_calibration(str(out)).kernels.file == str(gz)  # type: ignore[union-attr]


def test_faster_measured_curves_lower_the_sweeps_bound_scale():
    """A branch and bound's lower bounds are scaled by least_time_scale: with measured curves
    faster than the catalogue's, by at most the least catalogue-to-measured ratio."""
    fast = EfficiencyCurve(((2.0**30, 0.9), (2.0**44, 0.9)))
    curves = KernelCurves.measured_on(H100, [("gemm_bf16", fast)], "cal.yaml")
    ratio = min(e for _, e in H100.gemm_curve(Dtype.BF16).points) / 0.9
    assert curves.least_time_scale == pytest.approx(ratio)
    assert CalibrationFactors(kernels=curves).least_time_scale == pytest.approx(ratio)
    slow = KernelCurves.measured_on(H100, [("gemm_bf16", EfficiencyCurve.constant(0.1))], "cal.yaml")
    assert slow.least_time_scale == 1.0 and CalibrationFactors(2.0, kernels=slow).least_time_scale == 0.5


def _gemm_row(time_us: str = "100.0", dtype: str = "bf16", m: str = "4096") -> str:
    return f"gemm,{m},4096,4096,1,{dtype},{time_us}\n"


GEMM_HEAD = "# device: NVIDIA H100 80GB HBM3\nkind,m,n,k,batch,dtype,time_us\n"
ATTN_HEAD = "kind,batch,heads,kv_heads,seq,head_dim,causal,backend,dtype,fwd_us,bwd_us\n"
BAD_TABLES = {
    "missing-column.csv": ("# device: NVIDIA H100 80GB HBM3\nkind,m,n,k,batch,dtype\ngemm,4096,4096,4096,1,bf16\n",
                           "'time_us' column"),
    "unknown-column.csv": ("kind,m,n,k,batch,dtype,time_ms\ngemm,4096,4096,4096,1,bf16,0.1\n", "time_ms"),
    "no-kind.csv": ("m,n,k,batch,dtype,time_us\n4096,4096,4096,1,bf16,100\n", "'kind' column"),
    "non-numeric.csv": (GEMM_HEAD + _gemm_row(m="4k"), "line 3: m"),
    "negative-time.csv": (GEMM_HEAD + _gemm_row("-3"), "line 3: time_us"),
    "zero-time.csv": (GEMM_HEAD + _gemm_row("0"), "positive time"),
    "empty-time.csv": (GEMM_HEAD + _gemm_row(""), "an empty cell"),
    "unknown-dtype.csv": (GEMM_HEAD + _gemm_row(dtype="fp64"), "line 3: dtype"),
    "unknown-kind.csv": (GEMM_HEAD + "conv,4096,4096,4096,1,bf16,100\n", "line 3: kind"),
    "short-row.csv": (GEMM_HEAD + "gemm,4096,4096,4096,1,bf16\n", "7 cells"),
    "header-only.csv": (GEMM_HEAD, "at least one kernel row"),
    "empty.csv": ("", "a kernel table"),
    "over-the-peak.csv": (GEMM_HEAD + "gemm,8192,8192,8192,1,bf16,100\n", "efficiency over 1"),
    "under-the-launch-gap.csv": (GEMM_HEAD + "gemm,64,64,64,1,bf16,1.5\n", "launch gap"),
    "astronomical-time.csv": (GEMM_HEAD + _gemm_row("1e300"), "at most 1000 s"),
    "fp4-on-h100.csv": (GEMM_HEAD + _gemm_row(dtype="nvfp4"), "GEMM curve"),
    "unknown-backend.csv": ("# device: NVIDIA H100 80GB HBM3\n" + ATTN_HEAD
                            + "attention,1,32,8,4096,128,true,xformers,bf16,100,200\n", "line 3: backend"),
    "no-attention-time.csv": ("# device: NVIDIA H100 80GB HBM3\n" + ATTN_HEAD
                              + "attention,1,32,8,4096,128,true,cudnn,bf16,,\n", "fwd_us, bwd_us"),
    "bad-kv-heads.csv": ("# device: NVIDIA H100 80GB HBM3\n" + ATTN_HEAD
                         + "attention,1,32,5,4096,128,true,cudnn,bf16,100,200\n", "kv_heads"),
    "bad-causal.csv": ("# device: NVIDIA H100 80GB HBM3\n" + ATTN_HEAD
                       + "attention,1,32,8,4096,128,maybe,cudnn,bf16,100,200\n", "causal"),
    "no-gpu.csv": ("kind,m,n,k,batch,dtype,time_us\n" + _gemm_row(), "--gpu NAME"),
    "pcie-device.csv": ("# device: NVIDIA H100 PCIe\nkind,m,n,k,batch,dtype,time_us\n" + _gemm_row(), "--gpu NAME"),
    "gemm-with-attention-time.csv": ("# device: NVIDIA H100 80GB HBM3\n" + HEADER + "\n"
                                     + "gemm,4096,4096,4096,1,,,,,,,bf16,100.0,250.0,\n", "line 3: fwd_us"),
    "attention-with-gemm-shape.csv": ("# device: NVIDIA H100 80GB HBM3\n" + HEADER + "\n"
                                      + "attention,4096,,,1,32,8,4096,128,true,cudnn,bf16,,100,200\n", "line 3: m"),
    "broken.json": ('{"traceEvents": [', "not JSON"),
    "no-events.json": ('{"schemaVersion": 1}', "traceEvents"),
}


@pytest.mark.parametrize("name", sorted(BAD_TABLES))
def test_a_bad_table_is_one_line_naming_the_file_exit_2(name, tmp_path, capsys):
    text, what = BAD_TABLES[name]
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--kernels", str(path), "-o", str(out)]) == 2
    line = _one_error_line(capsys)
    assert str(path) in line and what in line, line
    assert not out.exists()


def test_a_table_of_a_kernel_far_slower_than_the_catalogue_writes_a_file_run_applies(tmp_path, capsys):
    """A GEMM 10^7 times slower than the catalogue prices it writes its relative error, to 4
    decimals, as -1.0: the file calibrate writes is one the loader reads back."""
    path = tmp_path / "slow.csv"
    path.write_text(GEMM_HEAD + _gemm_row("250.0") + _gemm_row("1e9", m="8192"))
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--kernels", str(path), "-o", str(out)]) == 0
    cal = load_calibration(str(out))
    assert min(r["error_before"] for r in cal.kernels.check) == -1.0
    capsys.readouterr()
    assert main(["run", "tiny", "--set", "system.gpu=H100-SXM5-80GB", "--topology", "dgx-h100",
                 "--calibration", str(out)]) == 0


def test_a_trace_without_linked_gemms_is_refused(tmp_path, capsys):
    raw = json.loads(TRACE.read_text())
    raw["traceEvents"] = [e for e in raw["traceEvents"] if e.get("cat") not in ("kernel",)]
    path = tmp_path / "no-kernels.json"
    path.write_text(json.dumps(raw))
    assert main(["calibrate", "--kernels", str(path), "-o", str(tmp_path / "cal.yaml")]) == 2
    line = _one_error_line(capsys)
    assert str(path) in line and "record_shapes=True" in line and "none both" in line


@pytest.mark.parametrize("argv, what", [
    (["--gpu", "H900"], "--gpu"),
    (["--gpu", "A100"], "device"),  # the table says H100
    (["--topology", "dgx-a100"], "device"),  # dgx-a100 fixes the A100
])
def test_the_gpu_the_table_is_for_is_checked(argv, what, tmp_path, capsys):
    path = tmp_path / "kernels.csv"
    path.write_text(synthetic_table(CHOSEN))
    assert main(["calibrate", "--kernels", str(path), *argv, "-o", str(tmp_path / "cal.yaml")]) == 2
    assert what in _one_error_line(capsys)


def test_gpu_is_taken_from_the_topology_and_needs_kernels(tmp_path, capsys):
    out = _calibrate(tmp_path, synthetic_table({k: 0.3 for k in CHOSEN}, device=None), "--gpu", "H100")
    assert load_calibration(str(out)).kernels.gpu == "H100-SXM5-80GB"  # type: ignore[union-attr]
    b200 = synthetic_table({k: 0.3 for k in CHOSEN}, device=None)
    out = _calibrate(tmp_path, b200, "--topology", "dgx-b200", name="b200.csv")
    assert load_calibration(str(out)).kernels.gpu == "B200"  # type: ignore[union-attr]
    capsys.readouterr()
    assert main(["calibrate", "--gpu", "H100", "--runs", "x.yaml", "-o", str(tmp_path / "c.yaml")]) == 2
    assert "--kernels" in _one_error_line(capsys)


def _tampered(tmp_path: Path, edit) -> Path:
    cal = _calibrate(tmp_path, synthetic_table(CHOSEN))
    raw = yaml.safe_load(cal.read_text())
    edit(raw["kernels"])
    cal.write_text(yaml.safe_dump(raw))
    return cal


@pytest.mark.parametrize("edit, field", [
    (lambda k: k.update(gpu="H900"), "kernels.gpu"),
    (lambda k: k["peaks_TFLOPS"].update(bf16=312.0), "kernels.peaks_TFLOPS.bf16"),
    (lambda k: k["curves"]["gemm_bf16"]["value"].__setitem__(0, [1e9, 1.5]), "kernels.curves.gemm_bf16.value[0]"),
    (lambda k: k["curves"]["gemm_bf16"]["value"].reverse(), "kernels.curves.gemm_bf16.value[1]"),
    (lambda k: k["curves"].update(gemm_fp64={"value": [[1e9, 0.5]], "source": "x"}), "kernels.curves.gemm_fp64"),
    (lambda k: k["curves"]["attention_fwd"].pop("source"), "kernels.curves.attention_fwd"),
    (lambda k: k.update(launch_us=5.0), "kernels.launch_us"),
    (lambda k: k.update(colour="red"), "kernels.colour"),
    (lambda k: k.update(curves={}), "kernels.curves"),
    (lambda k: k["check"][0].update(colour="red"), "kernels.check[0].colour"),
    (lambda k: k["check"][0].pop("measured_us"), "kernels.check[0].measured_us"),
    (lambda k: k["check"][0].update(measured_us=True), "kernels.check[0].measured_us"),
    (lambda k: k["check"][0].update(error_after=float("nan")), "kernels.check[0].error_after"),
    (lambda k: k["check"].insert(0, "a row"), "kernels.check[0]"),
    (lambda k: k.update(not_used=[5]), "kernels.not_used"),
])
def test_a_malformed_kernels_section_is_refused_by_every_command(edit, field, tmp_path, capsys):
    cal = _tampered(tmp_path, edit)
    capsys.readouterr()
    assert main(["run", "tiny", "--set", "system.gpu=H100", "--calibration", str(cal)]) == 2
    line = _one_error_line(capsys)
    assert str(cal) in line and f"{field}:" in line, line


def test_runs_beside_kernels_are_fitted_with_the_measured_curves(tmp_path, capsys):
    """--runs with --kernels: every prediction of the fit ("before" too) is the model with the
    measured curves, and the file has both sections."""
    a100 = get_gpu("A100")
    rows = [f"gemm,{m},4096,4096,1,bf16,{_time_us(2.0 * m * 4096 * 4096, 0.7, a100.peak(Dtype.BF16))!r}"
            for m in (1024, 2048, 4096, 8192)]
    table = tmp_path / "a100.csv"
    table.write_text("kind,m,n,k,batch,dtype,time_us\n" + "\n".join(rows) + "\n")
    runs = str(ROOT / "tests" / "data" / "runs" / "tiny-measured.yaml")
    both, plain = tmp_path / "both.yaml", tmp_path / "plain.yaml"
    assert main(["calibrate", "--kernels", str(table), "--gpu", "A100", "--runs", runs, "-o", str(both)]) == 0
    assert "with A100-SXM4-80GB's measured kernel curves" in capsys.readouterr().out
    assert main(["calibrate", "--runs", runs, "-o", str(plain)]) == 0
    with_curves, without = load_calibration(str(both)), load_calibration(str(plain))
    assert with_curves.kernels is not None and with_curves.factors and with_curves.runs
    for a, b in zip(with_curves.runs, without.runs):
        assert a["id"] == b["id"] and a["predicted_before"] != b["predicted_before"]
        assert a["predicted_after"] == pytest.approx(a["measured"], rel=1e-3)
    factors = with_curves.calibration_factors()
    assert factors is not None and factors.kernels is not None and factors.compute_efficiency != 1.0


@pytest.mark.parametrize("text, what", [
    ("kind,m,n,k,batch,dtype,time_us\ngemm,4096,4096," + "9" * 5000 + ",1,bf16,100\n", "line 2: k"),
    ("kind,m,n,k,batch,dtype,time_us\ngemm,4096,4096," + "9" * 60 + ",1,bf16,100\n", "line 2: k"),
    ("kind,m,n,k,batch,dtype,time_us\ngemm,4096,4096," + "9" * 400 + ",1,bf16,100\n", "line 2: k"),
    ("kind,m,n,k,batch,dtype,time_us\ngemm,4096,4096,4096,1,bf16,nan\n", "line 2: time_us"),
    ("kind,m,n,k,batch,dtype,time_us\ngemm,4096,4096,4096,1,bf16,\"" + "x" * 200_000 + "\"\n", "CSV"),
    ("kind,m,n,k,batch,dtype,time_us\ngemm,4096,4096,4096,1,bf16,1\x00\n", "line 2: time_us"),
])
def test_hostile_cells_are_one_line_too(text, what, tmp_path, capsys):
    path = tmp_path / "hostile.csv"
    path.write_text(text)
    assert main(["calibrate", "--kernels", str(path), "--gpu", "H100", "-o", str(tmp_path / "cal.yaml")]) == 2
    line = _one_error_line(capsys)
    assert what in line and len(line) < 2000, line[:300]


def test_a_trace_with_hostile_fields_reads_what_it_can(tmp_path):
    raw = json.loads(TRACE.read_text())
    for e in raw["traceEvents"]:
        if e.get("cat") == "kernel" and e["args"].get("correlation") == 103:
            e["args"]["correlation"] = [103]  # unhashable: that kernel cannot be linked
        if e.get("name") == "aten::_scaled_mm":
            e["args"]["Input Dims"] = [[10**50, 4096], [4096, 8192]]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(raw))
    table = read_kernels(str(path))
    assert [(g.m, g.n, g.k, g.batch) for g in table.gemms] == [(8192, 8192, 4096, 1)]
    assert any("aten::_scaled_mm" in why for why in table.skipped)


def test_a_trace_nested_a_hundred_thousand_deep_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main(["calibrate", "--kernels", str(path), "--gpu", "H100", "-o", str(tmp_path / "cal.yaml")]) == 2
    assert "nested too deep" in _one_error_line(capsys)


def test_the_hand_built_attention_trace_reads_to_its_kernels():
    """tests/data/profiler/README.md lists what the attention trace holds and at which efficiencies."""
    table = read_kernels(str(ATTENTION_TRACE))
    assert table.form == "trace" and table.device == "NVIDIA H100 80GB HBM3" and not table.gemms
    got = {(a.batch, a.heads, a.kv_heads, a.seq, a.head_dim, a.causal, a.kernel, a.dtype,
            a.fwd_s is not None, a.bwd_s is not None) for a in table.attention}
    flash = (2, 32, 8, 4096, 128, True, AttentionKernel.FLASH2)
    cudnn = (1, 64, 8, 8192, 128, True, AttentionKernel.VENDOR)
    assert got == {(*flash, Dtype.BF16, True, False), (*flash, Dtype.BF16, False, True),
                   (*cudnn, Dtype.BF16, True, False), (*cudnn, Dtype.BF16, False, True)}
    events = json.loads(ATTENTION_TRACE.read_text())["traceEvents"]
    bwd_op = next(e for e in events if e.get("name") == "aten::_flash_attention_backward")
    corr = {e["args"]["correlation"] for e in events
            if e.get("cat") == "cuda_runtime" and e["args"]["External id"] == bwd_op["args"]["External id"]}
    launched = [e["dur"] for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] in corr]
    assert len(launched) == 3  # one of them linked only through its runtime call's correlation
    flash_bwd = next(a for a in table.attention if a.kernel is AttentionKernel.FLASH2 and a.bwd_s is not None)
    assert flash_bwd.bwd_s == pytest.approx(sum(launched) * 1e-6)
    fit = dict(fit_kernels(table, H100).curves())
    assert {k: c.points[0][1] for k, c in fit.items()} == {"attention_flash2_fwd": 0.3, "attention_flash2_bwd": 0.27,
                                                           "attention_fwd": 0.55, "attention_bwd": 0.5}
    why = " | ".join(table.skipped)
    for reason in ("inside it is counted", "is_causal not recorded", "packed (variable-length)",
                   "query and key lengths that differ", "memory-efficient", "type float"):
        assert reason in why, reason
    assert len(table.skipped) == 6


def test_an_attention_operator_that_launches_its_kernel_itself_is_read_in_its_layout(tmp_path):
    """Where the kernels are linked to the outer scaled-dot-product operator (batch, heads, seq,
    head dim), that operator is the measurement; heads and sequence are not swapped."""
    raw = json.loads(ATTENTION_TRACE.read_text())
    inner = next(e for e in raw["traceEvents"] if e.get("name") == "aten::_flash_attention_forward")
    outer = next(e for e in raw["traceEvents"] if e.get("name") == "aten::_scaled_dot_product_flash_attention")
    for e in raw["traceEvents"]:
        if e.get("cat") in ("kernel", "cuda_runtime") and e["args"].get("External id") == inner["args"]["External id"]:
            e["args"]["External id"] = outer["args"]["External id"]
    raw["traceEvents"].remove(inner)
    path = tmp_path / "outer.json"
    path.write_text(json.dumps(raw))
    table = read_kernels(str(path))
    fwd = next(a for a in table.attention if a.kernel is AttentionKernel.FLASH2 and a.fwd_s is not None)
    assert (fwd.batch, fwd.heads, fwd.kv_heads, fwd.seq, fwd.head_dim, fwd.causal) == (2, 32, 8, 4096, 128, True)
    assert not any("inside it is counted" in why for why in table.skipped)
    # the outer operator's own small copy kernel is now in its time too: a little slower than 0.30
    assert 0.29 < dict(fit_kernels(table, H100).curves())["attention_flash2_fwd"].points[0][1] < 0.30


def test_run_prices_attention_at_the_traces_efficiencies(tmp_path, capsys):
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", "--kernels", str(ATTENTION_TRACE), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "4 attention kernels (a PyTorch profiler trace" in printed and "not used: 1 x aten::_efficient" in printed
    gpu = load_calibration(str(out)).calibration_factors().kernels.on(H100)  # type: ignore[union-attr]
    for kernel, backward, eff in ((AttentionKernel.FLASH2, False, 0.3), (AttentionKernel.VENDOR, True, 0.5)):
        op = AttentionOp(1, 64, 8, 8192, 128, True, backward, kernel=kernel)
        assert attention_time_s(gpu, op) == pytest.approx(op.flops / (eff * 989e12) + H100.kernel_launch_s, rel=1e-9)
        assert attention_time_s(H100, op) != pytest.approx(attention_time_s(gpu, op), rel=1e-3)


@pytest.mark.parametrize("edit, reason", [
    ({"Input Dims": [[2, 4096, 32, 10**50], [2, 4096, 8, 10**50]]}, "make no attention kernel"),
    ({"Input Dims": [[2, 4096, 32, True], [2, 4096, 8, 128]]}, "make no attention kernel"),
    ({"Input Dims": [[2, 4096, 32, 128], [2, 4096, 7, 128]]}, "make no attention kernel"),
    ({"Input Dims": "[[2, 4096]]"}, "no input shapes"),
    ({"Concrete Inputs": ["", "", "", "", "", "4096", "4096", "0.0", ["True"], "False"]}, "is_causal not recorded"),
    ({"Input type": [["c10::BFloat16"]]}, "inputs of type"),
])
def test_a_hostile_attention_operator_is_listed_not_read(edit, reason, tmp_path):
    raw = json.loads(ATTENTION_TRACE.read_text())
    inner = next(e for e in raw["traceEvents"] if e.get("name") == "aten::_flash_attention_forward")
    inner["args"].update(edit)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(raw))
    table = read_kernels(str(path))
    assert not any(a.kernel is AttentionKernel.FLASH2 and a.fwd_s is not None for a in table.attention)
    assert any("aten::_flash_attention_forward" in why and reason in why for why in table.skipped), table.skipped
