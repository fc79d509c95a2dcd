"""The GPU catalogue and efficiency curves."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import sim
from sim.costs.compute import gemm_time_s
from sim.errors import InfeasibleError
from sim.hardware import GPU_CATALOGUE, EfficiencyCurve, get_gpu
from sim.types import Dtype
from sim.workload.ops import GemmOp

REQUIRED = ["A100-SXM4-80GB", "H100-SXM5-80GB", "H100-SXM5-96GB-HBM2e", "H200", "B200", "GB200", "GB300"]


@pytest.mark.parametrize("name", REQUIRED)
def test_every_gpu_has_what_the_cost_models_need(name):
    g = get_gpu(name)
    assert g.peak(Dtype.BF16) > 0 and g.hbm_capacity_bytes > 0 and g.hbm_bandwidth_bytes_per_s > 0
    assert 0 < g.gemm_curve(Dtype.BF16)(1e12) <= 1 and 0 < g.attention_efficiency(1e12) <= 1
    assert 0 < g.attention_backward_efficiency(1e12) <= 1
    assert g.sources, "every GPU cites where its numbers come from"


def test_every_gpu_the_published_cases_name_is_in_the_catalogue():
    cases = Path(sim.__file__).resolve().parent.parent / "workloads" / "validation"
    names = {c["system"]["gpu"] for f in sorted(cases.glob("*.yaml")) for c in yaml.safe_load(f.read_text())}
    assert names <= set(GPU_CATALOGUE)


def test_a_gpu_without_a_format_says_so():
    with pytest.raises(InfeasibleError, match="fp8"):
        get_gpu("A100-SXM4-80GB").peak(Dtype.FP8)


def test_unknown_gpu_lists_the_known_ones():
    with pytest.raises(KeyError, match="A100-SXM4-80GB"):
        get_gpu("Z9000")


def test_efficiency_curve_is_monotone_between_increasing_points_and_clamped():
    c = get_gpu("A100").gemm_curve(Dtype.BF16)
    xs = [10 ** (9 + i / 4) for i in range(20)]
    ys = [c(x) for x in xs]
    assert ys == sorted(ys)
    assert c(1.0) == c.points[0][1] and c(1e20) == c.points[-1][1]


@pytest.mark.parametrize("bad", [(), ((2.0, 0.5), (1.0, 0.6)), ((1.0, 1.5),)])
def test_efficiency_curve_rejects_bad_points(bad):
    with pytest.raises(ValueError):
        EfficiencyCurve(bad)


def test_gemm_time_is_the_measured_cublas_rate_for_a_large_square_gemm():
    # Azure's cuBLASLt sweep: 8192^3 at 253.7 TFLOP/s on A100
    gpu = get_gpu("A100")
    t = gemm_time_s(gpu, GemmOp(8192, 8192, 8192, Dtype.BF16)) - gpu.kernel_launch_s
    assert 2 * 8192**3 / t / 1e12 == pytest.approx(253.7, rel=1e-9)


def test_skinny_gemm_is_bandwidth_bound():
    gpu = get_gpu("H100")
    op = GemmOp(1, 16384, 16384, Dtype.BF16)  # a decode-like matrix-vector product
    t = gemm_time_s(gpu, op) - gpu.kernel_launch_s
    assert t == pytest.approx(op.bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency))


def _measured_curves():
    import importlib.util

    path = Path(sim.__file__).resolve().parent.parent / "benchmarks" / "device" / "compare.py"
    spec = importlib.util.spec_from_file_location("device_compare", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.derive_curves()


def test_hopper_efficiencies_are_the_h100_measurement_not_tuned_numbers():
    """The H100 curves in the catalogue are re-derived from the committed raw timings
    (benchmarks/device/results/), so none can be edited to fit a case."""
    derived = _measured_curves()
    h100 = get_gpu("H100")
    got = {"gemm_bf16": h100.gemm_curve(Dtype.BF16), "gemm_fp8": h100.gemm_curve(Dtype.FP8),
           "attention_fwd": h100.attention_efficiency, "attention_bwd": h100.attention_backward_efficiency,
           "attention_flash2_fwd": h100.flash2_attention_efficiency,
           "attention_flash2_bwd": h100.flash2_attention_backward_efficiency}
    for key, curve in got.items():
        assert [(x, pytest.approx(e, abs=1e-9)) for x, e in derived[key]] == list(curve.points), key


def test_attention_is_less_efficient_for_short_sequences_on_h100():
    # a 2k-token, 8-head backward fills the chip far worse than a 32k-token one (measured)
    from sim.costs.compute import attention_time_s
    from sim.workload.ops import AttentionOp

    gpu = get_gpu("H100")

    def tflops(seq):
        op = AttentionOp(1, 8, 1, seq, 128, True, True)
        return op.flops / (attention_time_s(gpu, op) - gpu.kernel_launch_s) / 1e12

    assert tflops(2048) < 0.6 * tflops(32768)


def test_pytorch_flash2_attention_is_slower_than_the_vendor_kernel_on_hopper_only():
    from sim.costs.compute import attention_time_s
    from sim.types import AttentionKernel
    from sim.workload.ops import AttentionOp

    def t(gpu, kernel):
        return attention_time_s(get_gpu(gpu), AttentionOp(1, 32, 8, 8192, 128, True, True, kernel=kernel))

    assert t("H100", AttentionKernel.FLASH2) > 1.5 * t("H100", AttentionKernel.VENDOR)
    # on Ampere the vendor path is FlashAttention-2 itself
    assert t("A100", AttentionKernel.FLASH2) == t("A100", AttentionKernel.VENDOR)
