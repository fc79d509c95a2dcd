"""The power-limited clock (sim/power.py) against the H100 measurement it comes from."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sim.config import load_topology
from sim.costs.compute import gemm_time_s
from sim.derive.power import derive
from sim.hardware import get_gpu
from sim.power import KernelLoad, solve_clock_hz
from sim.runner import simulate
from sim.studies.sweep.bound import IterationBound
from sim.types import Dtype
from sim.workload.ops import GemmOp
from tests.conftest import make_workload

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "device" / "results" / "h100-sxm5-80gb-2026-11-26-power.json"
H200_RESULTS = RESULTS.parent / "h200-2026-11-26-power.json"
H100 = get_gpu("H100-SXM5-80GB")
P = H100.power
MEASURED = [("H100-SXM5-80GB", RESULTS), ("H200", H200_RESULTS)]
"""Each GPU with a power model and the samples its constants come from."""


def _derive(results: Path = RESULTS):
    return derive(str(results))


def _configs(results: Path = RESULTS):
    return {c["name"]: c for run in json.loads(results.read_text())["runs"] for c in run["configs"]}


@pytest.mark.parametrize("gpu,results", MEASURED)
def test_catalogue_constants_are_the_measurement(gpu, results):
    P = get_gpu(gpu).power
    d = _derive(results)
    assert P.idle_w == pytest.approx(d["idle_w"], rel=5e-3)
    assert P.max_clock_hz == pytest.approx(d["max_clock_hz"])
    assert P.dvfs_exponent == pytest.approx(d["dvfs_exponent"], abs=0.01)
    assert P.gemm_clock("bf16") == pytest.approx(d["gemm_bf16_clock_hz"], rel=5e-3)
    assert P.gemm_clock("fp8") == pytest.approx(d["gemm_fp8_clock_hz"], rel=5e-3)
    for key in ("attention_clock_hz", "attention_backward_clock_hz", "flash2_clock_hz", "flash2_backward_clock_hz",
                "memory_activity_w"):
        assert getattr(P, key) == pytest.approx(d[key], rel=5e-3), key


@pytest.mark.parametrize("clock", [P.gemm_clock("bf16"), P.gemm_clock("fp8"), P.attention_clock_hz,
                                   P.attention_backward_clock_hz, P.flash2_clock_hz])
def test_a_family_back_to_back_holds_the_clock_it_was_measured_at(clock):
    load = KernelLoad(1e-3, clock, 0.0, 0.0, P.activity_w(clock))
    assert solve_clock_hz(P, [load]) == pytest.approx(clock, rel=1e-6)


def test_bandwidth_bound_kernels_alone_run_at_the_maximum_clock():
    assert solve_clock_hz(P, [KernelLoad(0.0, 0.0, 1e-3, 0.0, P.memory_activity_w)]) == P.max_clock_hz


def test_a_gemm_between_copies_runs_as_fast_as_measured():
    """The measured mixed stream: one 16384x14336x4096 BF16 GEMM, then twelve BF16->FP32
    casts of a 16384x4096 tensor, repeated. The model, fed the GEMM's and the cast's
    back-to-back rates and clocks, must predict the GEMM's rate in the mix (it rose 16%)."""
    cfg = _configs()
    alone, mixed, cast = (cfg[n] for n in ("gemm-16384x14336x4096-alone", "gemm-16384x14336x4096-between-copies",
                                          "mem-cast-bf16-fp32"))
    steady = [s for s in alone["smi"] if s[0] >= 0.4 * alone["seconds"]]
    alone_clock = sum(s[3] for s in steady) / len(steady) * 1e6
    flops = 2.0 * 16384 * 14336 * 4096
    gemm = KernelLoad(flops / (alone["rate_second_half"] * 1e12), alone_clock, 0.0, 0.0, P.activity_w(alone_clock))
    copies = KernelLoad(0.0, 0.0, 6 * 16384 * 4096 / (cast["rate_second_half"] * 1e12), 0.0, P.memory_activity_w, 12)
    predicted_tflops = alone["rate_second_half"] * solve_clock_hz(P, [gemm, copies]) / alone_clock
    assert mixed["rate_second_half"] > 1.1 * alone["rate_second_half"]  # the effect is real
    assert predicted_tflops == pytest.approx(mixed["rate_second_half"], rel=0.05)


def _steady_clock(c):
    steady = [s for s in c["smi"] if s[0] >= 0.4 * c["seconds"]]
    return sum(s[3] for s in steady) / len(steady) * 1e6


@pytest.mark.parametrize("gpu,results", MEASURED)
@pytest.mark.parametrize("attention", ["fa2-fwd", "fa2-fwdbwd", "cudnn-fwd", "cudnn-fwdbwd"])
def test_a_gemm_and_attention_alternating_take_the_time_measured(attention, gpu, results):
    """The measured GEMM-attention mixes: each kernel alone back to back (its time and clock),
    then the two alternating, on each GPU measured (held out of its constants). One shared
    clock for both must give each kernel's time in the mix within 10% and the pair's within
    2%; each at its own back-to-back clock (no interaction) misses the GEMM by up to 16%."""
    P = get_gpu(gpu).power
    cfg = _configs(results)
    alone = {"gemm": cfg["alone-gemm"], attention: cfg[f"alone-{attention}"]}
    loads = {k: KernelLoad(c["median_ms"][k], _steady_clock(c), 0.0, 0.0, P.activity_w(_steady_clock(c)))
             for k, c in alone.items()}
    f = solve_clock_hz(P, loads.values())
    mixed = cfg[f"mix-gemm-{attention}"]["median_ms"]
    predicted = {k: ld.compute_s * ld.clock_hz / f for k, ld in loads.items()}
    for k in loads:
        assert predicted[k] == pytest.approx(mixed[k], rel=0.10), k
    assert sum(predicted.values()) == pytest.approx(sum(mixed.values()), rel=0.02)
    assert mixed["gemm"] < 0.98 * loads["gemm"].compute_s  # the GEMM ran faster than alone


def test_a_lower_limit_lowers_the_clock():
    loads = [KernelLoad(1e-3, 1374e6, 0.0, 0.0, P.activity_w(1374e6)),
             KernelLoad(0.0, 0.0, 5e-4, 0.0, P.memory_activity_w)]
    capped = get_gpu("H100-SXM5-96GB-HBM2e").power
    assert capped.limit_w < P.limit_w
    assert solve_clock_hz(capped, loads) < solve_clock_hz(P, loads) < P.max_clock_hz


def test_gemm_time_scales_with_the_clock_and_not_below_its_memory_floor():
    op = GemmOp(8192, 8192, 8192, Dtype.BF16)
    base = gemm_time_s(H100, op)
    assert gemm_time_s(H100, op, P.gemm_clock("bf16")) == pytest.approx(base)  # back to back: as measured
    fastest = gemm_time_s(H100, op, P.max_clock_hz)
    ratio = P.gemm_clock("bf16") / P.max_clock_hz
    assert fastest == pytest.approx((base - H100.kernel_launch_s) * ratio + H100.kernel_launch_s, rel=1e-9)
    thin = GemmOp(8192, 8, 8192, Dtype.BF16)  # bandwidth-bound: the clock does not move it
    assert gemm_time_s(H100, thin, P.max_clock_hz) == pytest.approx(gemm_time_s(H100, thin))


def _h100_workload(**kw):
    return make_workload(gpu="H100-SXM5-80GB", hidden=2048, heads=16, seq=2048, **kw)


def test_a_simulation_runs_at_the_clock_its_mix_holds():
    w = _h100_workload(dp=2, gbs=4)
    topo = load_topology("dgx-h100")
    run = simulate(w, topo)
    clock = run.result.metadata["sm_clock_hz"]
    assert P.gemm_clock("bf16") < clock <= P.max_clock_hz  # a mixed stream: above the GEMMs' own
    assert any(n.startswith("power:") for n in run.notes)
    unmodelled = dataclasses.replace(w, system=dataclasses.replace(
        w.system, gpu=dataclasses.replace(H100, power=None)))
    plain = simulate(unmodelled, topo)
    assert "sm_clock_hz" not in plain.result.metadata
    assert run.result.makespan_s < plain.result.makespan_s


def test_a100_has_no_power_model():
    run = simulate(make_workload(dp=2, gbs=4), load_topology("dgx-a100"))
    assert "sm_clock_hz" not in run.result.metadata


def test_the_sweep_bound_holds_at_any_clock():
    w = _h100_workload(dp=2, gbs=8, layers=2)
    t = simulate(w, load_topology("dgx-h100")).result.makespan_s
    assert IterationBound(w.model, w.system.gpu).lower_bound_s(w) <= t


def _capped_workload(tmp_path, text: str):
    from sim.config import load_workload
    path = tmp_path / "w.yaml"
    path.write_text("name: pw\nmodel: {num_layers: 2, hidden_size: 2048, num_attention_heads: 16, seq_length: 2048,"
                    " vocab_size: 32000}\nparallel: {tp: 1, pp: 1, dp: 2, global_batch_size: 4}\n" + text)
    return load_workload(str(path))


def test_a_power_cap_in_the_workload_lowers_the_clock_and_slows_the_run(tmp_path):
    topo = load_topology("dgx-h100")
    runs = {w: simulate(_capped_workload(tmp_path,
                                         f"system: {{gpu: H100-SXM5-80GB, num_gpus: 2, power_limit_w: {w}}}\n"),
                        topo) for w in (400, 500, 700)}
    clocks = [runs[w].clock_hz for w in (400, 500, 700)]
    times = [runs[w].result.makespan_s for w in (400, 500, 700)]
    assert clocks[0] < clocks[1] < clocks[2] and times[0] > times[1] > times[2]
    assert any("500 W limit" in n for n in runs[500].notes)


@pytest.mark.parametrize("system,expected", [
    ("{gpu: A100-SXM4-80GB, num_gpus: 2, power_limit_w: 300}", "power behaviour is measured"),
    ("{gpu: H100-SXM5-80GB, num_gpus: 2, power_limit_w: 50}", "above the GPU's idle draw"),
    ("{gpu: H100-SXM5-80GB, num_gpus: 2, power_limit_w: lots}", "a number"),
])
def test_a_power_cap_it_cannot_price_is_one_clear_error(tmp_path, system, expected):
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match=expected) as err:
        _capped_workload(tmp_path, f"system: {system}\n")
    assert "system.power_limit_w" in str(err.value)


def test_a_cap_below_what_the_clock_floor_reaches_is_said(capsys):
    """At the model's lowest clock (a third of the maximum) the kernels may still draw more
    than a low cap: the row then says so instead of showing a mean above the cap unexplained."""
    from sim.cli import main
    from sim.studies.whatif.power import power_caps

    w = _h100_workload(dp=2, gbs=4, layers=2)
    low, rated = power_caps(w, load_topology("dgx-h100"), (200, 700))
    assert low.clock_at_floor and low.mean_power_w > low.limit_w
    assert low.sm_clock_hz == pytest.approx(w.system.gpu.power.max_clock_hz / 3)
    assert not rated.clock_at_floor and rated.mean_power_w <= rated.limit_w + 1e-6
    assert main(["whatif", "power", "llama3-8b-h100", "--limits", "200,700"]) == 0
    out = capsys.readouterr().out
    assert out.count("note: at 200 W the clock stops at the model's floor") == 1 and "at 700 W" not in out


def test_whatif_power_trades_time_for_energy(tmp_path):
    """Under lower caps the job runs longer, draws no more than its cap, and (its kernels at
    lower voltage) does more work per joule; the command writes the same numbers as JSON."""
    from sim.cli import main
    from sim.studies.whatif.power import power_caps

    w = _h100_workload(dp=2, gbs=4, layers=2)
    rows = power_caps(w, load_topology("dgx-h100"), (400, 550, 700))
    times = [r.iteration_time_s for r in rows]
    assert times[0] > times[1] > times[2]
    assert all(r.mean_power_w <= r.limit_w + 1e-6 for r in rows)
    assert rows[0].tokens_per_j > rows[2].tokens_per_j
    assert rows[0].energy_per_iteration_j == pytest.approx(rows[0].mean_power_w * rows[0].iteration_time_s)
    out = tmp_path / "p.json"
    assert main(["whatif", "power", "llama3-8b-h100", "--limits", "500,700", "--json", str(out)]) == 0
    caps = json.loads(out.read_text())["caps"]
    assert [c["limit_w"] for c in caps] == [500.0, 700.0] and caps[0]["iteration_time_s"] > caps[1]["iteration_time_s"]
    assert main(["whatif", "power", "tiny"]) == 2  # an A100: no measured power behaviour


@pytest.mark.parametrize("gpu,results", [("H100-SXM5-80GB", RESULTS),
                                         ("H200", RESULTS.parent / "h200-2026-11-26-power.json")])
def test_access_efficiencies_are_the_measured_bandwidths(gpu, results):
    """Each non-vectorized access pattern's fraction of HBM is its kernel's measured rate over
    the GPU's peak bandwidth (power_clock.py's mem-* runs on that GPU)."""
    from sim.types import MemoryAccess
    spec = get_gpu(gpu)
    cfg = {c["name"]: c for run in json.loads(results.read_text())["runs"] for c in run["configs"]}
    kernel = {MemoryAccess.UPCAST: "mem-cast-bf16-fp32", MemoryAccess.BROADCAST_LAST: "mem-mul-bcast-bf16-weight",
              MemoryAccess.BROADCAST_ROW: "mem-mul-bcast-fp32-row", MemoryAccess.STRIDED: "mem-repeat-kv"}
    for access, name in kernel.items():
        measured = cfg[name]["rate_second_half"] * 1e12 / spec.hbm_bandwidth_bytes_per_s
        assert spec.memory_efficiency_of(access) == pytest.approx(measured, abs=5e-4), access


def test_a_gemm_waiting_on_its_host_leaves_the_gpu_idle_for_the_wait():
    """A kernel shorter than its host's issue time occupies its slot for the issue time, the
    GPU idling at ``idle_w`` for the rest. BF16 GEMMs back to back hold the clock they were
    measured at; issued by a host that needs 1.2 ms for each 1 ms GEMM they run faster, at the
    clock where the slot's mean draw (the shortened GEMM at its dynamic power, the wait at
    idle) meets the limit again; with a host twice as slow, at the maximum clock."""
    clock = P.gemm_clock("bf16")
    busy = KernelLoad(1e-3, clock, 0.0, 0.0, P.activity_w(clock))
    issued = KernelLoad(1e-3, clock, 0.0, 0.0, P.activity_w(clock), host_s=1.2e-3)
    f = solve_clock_hz(P, [issued])
    assert solve_clock_hz(P, [busy]) == pytest.approx(clock, rel=1e-6)
    assert clock * 1.05 < f < P.max_clock_hz
    t = 1e-3 * clock / f
    g = (f / P.max_clock_hz) ** P.dvfs_exponent
    mean = (t * (P.idle_w + P.activity_w(clock) * g) + (1.2e-3 - t) * P.idle_w) / 1.2e-3
    assert mean == pytest.approx(P.limit_w, rel=1e-4)
    slow = KernelLoad(1e-3, clock, 0.0, 0.0, P.activity_w(clock), host_s=2e-3)
    assert solve_clock_hz(P, [slow]) == P.max_clock_hz


def test_kernel_load_carries_a_grouped_gemms_issue_time():
    """``kernel_load`` hands the power solve the same host floor ``gemm_time_s`` takes."""
    from sim.costs.compute import gemm_time_s, kernel_load
    from sim.types import Dtype
    from sim.workload.ops import GemmOp
    gpu = get_gpu("H100")
    op = GemmOp(128, 2048, 2048, Dtype.BF16, batch=8, streams=4, issue_s=0.267e-3)
    load = kernel_load(gpu, op)
    assert load.host_s == op.issue_s
    assert gemm_time_s(gpu, op) == pytest.approx(op.issue_s)
    assert kernel_load(gpu, GemmOp(4096, 4096, 4096, Dtype.BF16)).host_s == 0.0
    # a Grace host's slower issue reaches the power solve as it reaches the GEMM's time
    import dataclasses

    from sim.types import HostCpu
    grace = dataclasses.replace(gpu, host_cpu=HostCpu.GRACE)
    assert kernel_load(grace, op).host_s == pytest.approx(gemm_time_s(grace, op))
    assert kernel_load(grace, op).host_s > 2 * op.issue_s
