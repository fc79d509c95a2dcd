"""The GPU catalogue and efficiency curves."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

import sim
from sim.costs.compute import gemm_time_s, memory_time_s
from sim.errors import InfeasibleError
from sim.hardware import GPU_CATALOGUE, MXFP8_GEMM_SLOWDOWN, SHARED_SWEEP_FLOPS, EfficiencyCurve, get_gpu
from sim.types import AttentionKernel, Dtype, OpKind, RecomputeKind
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


def test_the_a100_40gb_is_the_80gb_die_with_half_the_memory_and_hbm2(tmp_path):
    """A100-SXM4-40GB: a compute-bound GEMM takes the 80GB part's time, a bandwidth-bound pass
    2039/1555 of it; a workload naming it keeps it, and a job sized for 80 GB does not fit in 40."""
    from sim.config import load_workload
    from sim.memory import stage_memory
    from sim.workload.ops import GemmOp, MemoryOp

    a40, a80 = get_gpu("A100-SXM4-40GB"), get_gpu("A100-SXM4-80GB")
    big = GemmOp(8192, 8192, 8192, Dtype.BF16)
    assert gemm_time_s(a40, big) == gemm_time_s(a80, big)
    gib = MemoryOp(OpKind.ELEMENTWISE, float(1 << 30))
    t40, t80 = memory_time_s(a40, gib) - a40.kernel_launch_s, memory_time_s(a80, gib) - a80.kernel_launch_s
    assert t40 / t80 == pytest.approx(2039 / 1555)
    doc = yaml.safe_load(Path("workloads/tiny.yaml").read_text())
    doc["system"].update(gpu="A100-SXM4-40GB", num_gpus=8)
    doc["model"].update(num_layers=40, hidden_size=5120, num_attention_heads=40, num_kv_heads=40,
                        ffn_hidden_size=20480, seq_length=2048)
    doc["parallel"].update(tp=1, pp=1, dp=8, micro_batch_size=1, global_batch_size=8, recompute="full",
                           zero_stage=3, distributed_optimizer=False)
    doc.pop("topology", None)
    doc["system"].pop("topology", None)
    path = tmp_path / "a40.yaml"
    path.write_text(yaml.safe_dump(doc))
    w = load_workload(str(path))
    assert w.system.gpu.name == "A100-SXM4-40GB" and w.system.gpu.hbm_capacity_bytes == 40 * 2**30
    need = stage_memory(w, 0).total_bytes
    assert 20 * 2**30 < need < 40 * 2**30
    # the same job at DP 4 shards less: it would fit in 80 GB, not in 40
    four = load_workload(str(path), ["system.num_gpus=4", "parallel.dp=4", "parallel.global_batch_size=4"])
    assert 40 * 2**30 < stage_memory(four, 0).total_bytes < 80 * 2**30


def test_the_b200_moves_hbm_bytes_at_what_its_memory_bus_carries():
    """The B200's driver reports a 7,680-bit bus at a 3,996 MHz memory clock (pytorch/ao PR
    #4002), double data rate: 7.672 TB/s. The catalogue's bandwidth is within 1% of that (the
    8 TB/s of the first announcements was 4.3% over), and a bandwidth-bound pass on a B200
    takes that much longer than on a GB200 (8 TB/s) at the same share of the peak."""
    from sim.workload.ops import MemoryOp

    b200, gb200 = get_gpu("B200"), get_gpu("GB200")
    bus_bytes_per_s = 7680 / 8 * 3996e6 * 2
    assert b200.hbm_bandwidth_bytes_per_s == pytest.approx(bus_bytes_per_s, rel=0.01)
    gib = MemoryOp(OpKind.ELEMENTWISE, float(1 << 30))
    tb, tg = memory_time_s(b200, gib) - b200.kernel_launch_s, memory_time_s(gb200, gib) - gb200.kernel_launch_s
    assert tb / tg == pytest.approx(gb200.hbm_bandwidth_bytes_per_s / b200.hbm_bandwidth_bytes_per_s)
    assert tb > 1.03 * tg


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


# Published cuBLASLt sweeps of Blackwell GPUs, (m, n, k, TFLOP/s), copied from the tables that
# sim/hardware.py cites: Azure ND GB200 v6 (@2a370be) and ND GB300 v6 (egmsft fork @18e80a2),
# square m = n = k; B200 from tmoreau89/triton triton_cublas_bench prod_benchmark_results2, m = n = 8192.
_SQUARES = (1024, 2048, 4096, 8192, 16384, 32768)
_B200_K = (128, 256, 384, 512, 640, 768, 896, 1024)
PUBLISHED_BLACKWELL_GEMM = {
    ("GB200", Dtype.FP8): [(n, n, n, t) for n, t in zip(_SQUARES, (489.2, 2243.6, 2834.6, 2876.6, 2906.9, 2825.6))],
    ("GB200", Dtype.NVFP4): [(n, n, n, t) for n, t in zip(_SQUARES, (287.2, 1677.7, 5177.3, 7535.6, 7627.6, 7487.2))],
    ("GB300", Dtype.FP8): [(n, n, n, t) for n, t in zip(_SQUARES, (553.5, 2288.9, 3257.0, 3286.3, 3308.5, 3271.3))],
    ("GB300", Dtype.NVFP4): [(n, n, n, t) for n, t in zip(_SQUARES, (316.4, 1678.0, 5417.0, 8155.9, 8640.3, 8555.1))],
    ("B200", Dtype.BF16): [(8192, 8192, k, t) for k, t in zip(_B200_K, (
        492.9, 845.4, 1072.9, 1221.7, 1313.0, 1341.8, 1373.3, 1389.3))],
    ("B200", Dtype.FP8): [(8192, 8192, k, t) for k, t in zip(_B200_K, (
        647.2, 1102.5, 1521.2, 1950.2, 2300.0, 2607.9, 2729.8, 2770.0))],
}


@pytest.mark.parametrize("gpu_name,dtype", sorted(PUBLISHED_BLACKWELL_GEMM, key=str))
def test_blackwell_gemm_time_is_the_published_cublas_rate_at_every_swept_size(gpu_name, dtype):
    gpu = get_gpu(gpu_name)
    rows = PUBLISHED_BLACKWELL_GEMM[(gpu_name, dtype)]
    assert len(gpu.gemm_curve(dtype).points) == len(rows), "one curve point per published row"
    for m, n, k, tflops in rows:
        t = gemm_time_s(gpu, GemmOp(m, n, k, dtype)) - gpu.kernel_launch_s
        assert 2 * m * n * k / t / 1e12 == pytest.approx(tflops, rel=1e-9), (m, n, k)


def test_blackwell_gpus_without_their_own_sweep_borrow_the_nearest_one():
    b200, gb200, gb300 = get_gpu("B200"), get_gpu("GB200"), get_gpu("GB300")
    # the only FP4 sweeps are GB200's and GB300's; the only 16-bit sweep, B200's, is scaled for
    # the others (test_blackwell_16_bit_gemms_follow_their_measured_fp8_rate)
    assert b200.gemm_curve(Dtype.NVFP4) is gb200.gemm_curve(Dtype.NVFP4)
    for g in (b200, gb200, gb300):
        for f in (2.0**34, 2.0**40):  # the FP8 curve slowed by Transformer Engine's measured ratio
            assert g.gemm_curve(Dtype.FP8)(f) / g.gemm_curve(Dtype.MXFP8)(f) == pytest.approx(MXFP8_GEMM_SLOWDOWN)
    # B200's cuBLASLt MXFP8 (same run, mxfp8_results.csv) measured 2886.1 TFLOP/s at 8192^3 and
    # 2809.7 at 8192x8192x16384, square sizes one GEMM at a time: within 10% of the curve
    for k, tflops in ((8192, 2886.1), (16384, 2809.7)):
        f = 2.0 * 8192 * 8192 * k
        assert b200.gemm_curve(Dtype.MXFP8)(f) == pytest.approx(tflops / 4500, rel=0.1)


@pytest.mark.parametrize("name", ["GB200", "GB300"])
def test_blackwell_16_bit_gemms_follow_their_measured_fp8_rate(name):
    """A Blackwell GPU with no 16-bit sweep runs 16-bit GEMMs at B200's measured rate times its
    own FP8 rate over B200's at the size both sweeps measured, not at B200's fraction of its own
    (higher) datasheet peak: GB200's FP8 GEMMs are 2.3% faster than B200's there, not 11%."""
    b200, gpu = get_gpu("B200"), get_gpu(name)
    f = SHARED_SWEEP_FLOPS
    assert f == 2.0 * 4096**3 == 2.0 * 8192 * 8192 * 1024

    def rate(g, dtype, size):
        return g.gemm_curve(dtype)(size) * g.peak(dtype)

    fp8_ratio = rate(gpu, Dtype.FP8, f) / rate(b200, Dtype.FP8, f)
    for size in (2.0**34, f, 2.0**42):  # the ratio holds at every size of B200's 16-bit curve
        assert rate(gpu, Dtype.BF16, size) / rate(b200, Dtype.BF16, size) == pytest.approx(fp8_ratio, rel=1e-9)
    peak_ratio = gpu.peak(Dtype.BF16) / b200.peak(Dtype.BF16)
    if name == "GB200":  # the same die at 1,200 W: its tensor cores gain 2%, not the datasheet's 11%
        assert fp8_ratio == pytest.approx(2834.6 / 2770.0) and fp8_ratio < peak_ratio - 0.08


def test_small_blackwell_gemms_run_far_below_the_large_ones():
    # the point of a sweep rather than one 16384^3 number (Azure GB200 FP8: 489.2 vs 2906.9)
    c = get_gpu("GB200").gemm_curve(Dtype.FP8)
    assert c(2.0 * 1024**3) < 0.2 * c(2.0 * 16384**3)


def test_skinny_gemm_is_bandwidth_bound_at_the_gemm_share_of_hbm_bandwidth():
    """A decode-like GEMM takes its bytes over the bandwidth a bandwidth-bound GEMM reaches on
    the H100 (2.2 TB/s, NVIDIA/cutlass #1139), slower than a streaming kernel moving the same
    bytes; a GPU with no such figure prices it as a streaming kernel."""
    from sim.hardware import H100_SKINNY_GEMM_BYTES_PER_S
    from sim.workload.ops import MemoryOp

    gpu = get_gpu("H100")
    op = GemmOp(1, 16384, 16384, Dtype.BF16)  # a decode-like matrix-vector product
    t = gemm_time_s(gpu, op) - gpu.kernel_launch_s
    assert t == pytest.approx(op.bytes / H100_SKINNY_GEMM_BYTES_PER_S)
    stream = memory_time_s(gpu, MemoryOp(OpKind.ELEMENTWISE, op.bytes)) - gpu.kernel_launch_s
    assert t > 1.3 * stream
    bare = dataclasses.replace(gpu, gemm_memory_efficiency=None)
    assert gemm_time_s(bare, op) - gpu.kernel_launch_s == pytest.approx(stream)
    # a large GEMM is compute-bound: the share does not enter its time
    big = GemmOp(8192, 8192, 8192, Dtype.BF16)
    assert gemm_time_s(bare, big) == gemm_time_s(gpu, big)


def test_the_a100_gemm_share_is_what_gpt_fast_decode_rate_gives():
    """The A100's share is what sim/derive/decode_gemm.py derives from gpt-fast's Llama-2-7B
    decode (104.9 tokens/s under CUDA graphs), so a change to the rest of the decode step's
    pricing that moves the derivation shows here; the 70B rows of gpt-fast's
    tensor-parallel table, not used to derive it, land within 15% of the README's first
    figures (NCCL all-reduces, as llmsim prices them)."""
    from sim.derive import decode_gemm

    a100 = get_gpu("A100-SXM4-80GB")
    assert a100.gemm_memory_efficiency == pytest.approx(decode_gemm.derive_gemm_memory_efficiency(), abs=2e-3)
    for tp in (2, 4, 8):
        first = decode_gemm.TP_TOKENS_PER_S[("llama2-70b", tp)][0]
        assert decode_gemm.decode_tokens_per_s(a100, "llama2-70b", tp) == pytest.approx(first, rel=0.15)


def _measured_curves(results: str | None = None):
    from sim.derive.gemm_curves import derive_curves

    device = Path(sim.__file__).resolve().parent.parent / "benchmarks" / "device"
    return derive_curves(device / "results" / (results or "h100-sxm5-80gb-2026-11-26.json"))


@pytest.mark.parametrize("gpu,results", [("H100", None), ("H200", "h200-2026-11-27-kernels.json")])
def test_hopper_efficiencies_are_the_measurement_not_tuned_numbers(gpu, results):
    """Each Hopper GPU's curves in the catalogue are re-derived from its own committed raw
    timings (benchmarks/device/results/: the same sweep run on our H100 and on our H200), so
    none can be edited to fit a case."""
    derived = _measured_curves(results)
    spec = get_gpu(gpu)
    got = {"gemm_bf16": spec.gemm_curve(Dtype.BF16), "gemm_fp8": spec.gemm_curve(Dtype.FP8),
           "attention_fwd": spec.attention_efficiency, "attention_bwd": spec.attention_backward_efficiency,
           "attention_flash2_fwd": spec.flash2_attention_efficiency,
           "attention_flash2_bwd": spec.flash2_attention_backward_efficiency}
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


@pytest.mark.parametrize("gpu", ["A100", "H100", "B200"])
def test_the_first_flash_attention_takes_twice_flash_attention_2s_time(gpu):
    """FlashAttention 1.x and the Triton FlashAttention (``attention_kernel: flash1``) run at
    FLASH1_RATE (one half) of FlashAttention-2's rate in both directions, on every GPU, so a
    compute-bound kernel's time less its launch doubles; the vendor kernel is untouched."""
    from sim.costs.compute import attention_time_s
    from sim.hardware import FLASH1_RATE
    from sim.types import AttentionKernel
    from sim.workload.ops import AttentionOp

    g = get_gpu(gpu)
    def t(kernel, backward):
        op = AttentionOp(1, 32, 8, 8192, 128, True, backward, kernel=kernel)
        return attention_time_s(g, op) - g.kernel_launch_s

    for bwd in (False, True):
        assert t(AttentionKernel.FLASH1, bwd) == pytest.approx(t(AttentionKernel.FLASH2, bwd) / FLASH1_RATE, rel=1e-9)
        assert t(AttentionKernel.FLASH1, bwd) > 1.9 * t(AttentionKernel.FLASH2, bwd)
        assert t(AttentionKernel.VENDOR, bwd) < t(AttentionKernel.FLASH1, bwd)


# NVIDIA/cudnn-frontend SDPA training benchmark, cuDNN 9.19.1, batch 1, 64 query / 8 KV heads,
# head dim 128, BF16, causal: published (forward, backward) TFLOP/s at s = 2k..32k, copied from
# the CSVs sim/hardware.py cites (results/{gb200,gb300,h200}_919_only_cudnn/llama3.1_*.csv).
_CUDNN_SEQS = (2048, 4096, 8192, 16384, 32768)
PUBLISHED_CUDNN_919 = {
    "H200": ((484, 370), (591, 474), (644, 541), (673, 579), (688, 581)),
    "GB200": ((1042, 836), (1335, 1132), (1598, 1311), (1687, 1402), (1720, 1473)),
    "GB300": ((1266, 906), (1672, 1195), (1887, 1385), (1968, 1490), (2014, 1549)),
}


@pytest.mark.parametrize("gpu_name,table", [("B200", "GB200"), ("GB200", "GB200"), ("GB300", "GB300")])
@pytest.mark.parametrize("backward", [False, True])
def test_blackwell_attention_is_the_h100_curve_times_the_published_ratio_to_h200(gpu_name, table, backward):
    """At each published size the kernel runs at the H100 curve's fraction times the published
    (Blackwell / 2500) / (H200 / 989) ratio of the same-shape rows, in this GPU's own peak."""
    from sim.costs.compute import attention_time_s
    from sim.workload.ops import AttentionOp

    gpu, h100 = get_gpu(gpu_name), get_gpu("H100")
    for s, bw, hop in zip(_CUDNN_SEQS, PUBLISHED_CUDNN_919[table], PUBLISHED_CUDNN_919["H200"]):
        op = AttentionOp(1, 64, 8, s, 128, True, backward)
        ratio = (bw[backward] / 2500) / (hop[backward] / 989)
        expected = h100.attention_curve(AttentionKernel.VENDOR, backward)(op.flops) * ratio
        t = attention_time_s(gpu, op) - gpu.kernel_launch_s
        assert op.flops / t / gpu.peak(Dtype.BF16) == pytest.approx(expected, rel=1e-12), (s, backward)


def test_b200_shares_gb200s_attention_gb300_has_its_own_and_hopper_is_unchanged():
    b200, gb200, gb300, h100 = (get_gpu(n) for n in ("B200", "GB200", "GB300", "H100"))
    for bwd in (False, True):
        vendor = [g.attention_curve(AttentionKernel.VENDOR, bwd) for g in (b200, gb200, gb300, h100)]
        assert vendor[0] is vendor[1] and vendor[2] != vendor[1] and vendor[3] not in vendor[:3]
        # FlashAttention-2 as PyTorch runs it has no Blackwell measurement: the H100 curves
        for g in (b200, gb200, gb300):
            assert g.attention_curve(AttentionKernel.FLASH2, bwd) is h100.attention_curve(AttentionKernel.FLASH2, bwd)
    # the H200 has its own measured curves (test_h200_efficiencies_are_the_h200_measurement)
    assert get_gpu("H200").attention_efficiency is not h100.attention_efficiency


@pytest.mark.parametrize("backward", [False, True])
def test_b200_attention_against_gb300_matches_nvidias_own_b200_gb300_run(backward):
    """B200 borrows GB200's fractions. NVIDIA's earlier run of the same benchmark (cuDNN 9.13,
    batch 1, 128 / 8 heads; artifacts/sdpa_bf16_benchmark_results_NVIDIA_{B200,GB300}.csv)
    measured B200 against GB300 directly; the catalogue's ratio agrees within 3%."""
    from sim.costs.compute import attention_time_s
    from sim.workload.ops import AttentionOp

    published = {16384: ((1332.415, 1074.776), (1702.463, 1267.827)),
                 32768: ((1419.000, 1108.688), (1795.879, 1319.161))}  # (B200, GB300) fwd, bwd
    for s, (b200, gb300) in published.items():
        op = AttentionOp(1, 128, 8, s, 128, True, backward)
        t_b200, t_gb300 = (attention_time_s(get_gpu(n), op) for n in ("B200", "GB300"))
        assert t_gb300 / t_b200 == pytest.approx(b200[backward] / gb300[backward], rel=0.03), s


def test_gb300_runs_the_attention_forward_faster_than_gb200_at_the_same_peak():
    # Blackwell Ultra's faster exponentials: 1887 vs 1598 TFLOP/s forward at 8k, 1385 vs 1311 backward
    gb200, gb300 = get_gpu("GB200"), get_gpu("GB300")
    f = 2.0**41
    assert gb300.attention_efficiency(f) > 1.1 * gb200.attention_efficiency(f)
    assert gb300.attention_backward_efficiency(f) < 1.1 * gb200.attention_backward_efficiency(f)


def test_hopper_deterministic_attention_backward_is_the_h100_measurement():
    """The slowdown of cuDNN's deterministic attention backward on Hopper is re-derived from
    the committed raw timings (benchmarks/device/results/), so it cannot be edited to fit a
    case; the forward and the default backward are unchanged by it."""
    import dataclasses
    import json

    from sim.costs.compute import attention_time_s
    from sim.hardware import _H100_DET_SEQS, _H100_DET_SLOWDOWN
    from sim.workload.ops import AttentionOp

    path = (Path(sim.__file__).resolve().parent.parent / "benchmarks" / "device" / "results"
            / "h100-sxm5-80gb-2026-11-27-attention-deterministic.json")
    rows = {(r["batch"], r["heads"], r["kv_heads"], r["seq"]): r for r in json.loads(path.read_text())["rows"]}
    measured = tuple(rows[(1, 32, 8, s)]["bwd_deterministic_s"] / rows[(1, 32, 8, s)]["bwd_s"] for s in _H100_DET_SEQS)
    assert _H100_DET_SLOWDOWN == pytest.approx(measured, abs=5e-4)
    for name in ("H100", "H200"):
        gpu = get_gpu(name)
        for seq, slow in zip(_H100_DET_SEQS, _H100_DET_SLOWDOWN):
            op = AttentionOp(1, 32, 8, seq, 128, True, True)
            det = dataclasses.replace(op, deterministic=True)
            ratio = ((attention_time_s(gpu, det) - gpu.kernel_launch_s)
                     / (attention_time_s(gpu, op) - gpu.kernel_launch_s))
            assert ratio == pytest.approx(slow, rel=1e-6)
            fwd = AttentionOp(1, 32, 8, seq, 128, True, False)
            assert attention_time_s(gpu, dataclasses.replace(fwd, deterministic=True)) == attention_time_s(gpu, fwd)
    # Blackwell keeps Transformer Engine's FlashAttention-2 for deterministic training
    b200 = get_gpu("B200")
    h100 = get_gpu("H100")
    assert b200.deterministic_attention_backward_efficiency is not h100.deterministic_attention_backward_efficiency


@pytest.mark.parametrize("gpu", ["B200", "GB200", "GB300"])
def test_mxfp8_gemms_run_slower_than_per_tensor_fp8_as_transformer_engine_measured(gpu):
    """Transformer Engine's pre-quantized B300 benchmark (gemm_profiling.rst @ 1609c890e): a 5B
    layer's fprop, dgrad and wgrad GEMMs take 2.365, 2.397 and 2.400 ms in MXFP8 against 2.158,
    2.329 and 2.325 in FP8; a compute-bound MXFP8 GEMM takes that ratio of the FP8 one's time."""
    assert MXFP8_GEMM_SLOWDOWN == pytest.approx((2.365 + 2.397 + 2.400) / (2.158 + 2.329 + 2.325), rel=1e-3)
    g = get_gpu(gpu)
    times = {d: gemm_time_s(g, GemmOp(15872, 16384, 4096, d)) - g.kernel_launch_s for d in (Dtype.FP8, Dtype.MXFP8)}
    assert times[Dtype.MXFP8] / times[Dtype.FP8] == pytest.approx(MXFP8_GEMM_SLOWDOWN, rel=1e-9)


@pytest.mark.parametrize("gpu_name, fused_rates, eager_rates", [
    ("GB200", (1.591, 1.395), (1.536, 1.327)), ("B200", (1.591, 1.395), (1.536, 1.327)),
    ("GB300", (1.585, 1.419), (1.566, 1.363)),
])
def test_blackwell_bandwidth_bound_kernels_gain_what_the_norms_benchmark_measured(gpu_name, fused_rates, eager_rates):
    """NVIDIA's cuDNN-frontend norms benchmark (one harness, H200 / GB200 / GB300, RMSNorm at
    training shapes) has achieved bandwidth grow 1.3-1.6x from H200 to Blackwell where HBM grows
    8 / 4.8: Blackwell's bandwidth-bound kernels take the H100/H200 fractions times that ratio of
    fractions, forward and backward averaged -- fused kernels by cuDNN's, PyTorch's eager access
    patterns by PyTorch's (B200 as GB200, its die). A GB200 then moves a fused kernel's bytes at
    1.49x and an eager upcast's at 1.43x the H200's rate, not 1.67x."""
    from sim.types import MemoryAccess
    from sim.workload.ops import MemoryOp

    g, h200, h100 = get_gpu(gpu_name), get_gpu("H200"), get_gpu("H100")
    hbm = 8.0 / 4.8
    fused, eager = sum(fused_rates) / 2 / hbm, sum(eager_rates) / 2 / hbm
    assert g.memory_efficiency == pytest.approx(h100.memory_efficiency * fused, rel=1e-12)
    h200_access = dict(h200.memory_access_efficiency)
    assert dict(g.memory_access_efficiency) == pytest.approx({a: e * eager for a, e in h200_access.items()}, rel=1e-12)
    assert g.memory_efficiency < 0.85 and set(h200_access) == set(dict(g.memory_access_efficiency))
    if gpu_name == "GB200":  # the same HBM as the benchmark's GB200: its rates over H200's
        gib = float(1 << 30)
        rate = {gpu.name: {acc: gib / (memory_time_s(gpu, MemoryOp(OpKind.ELEMENTWISE, gib, access=acc))
                                       - gpu.kernel_launch_s) for acc in (MemoryAccess.STREAM, MemoryAccess.UPCAST)}
                for gpu in (g, h200)}
        gb200, h200_rate = rate["GB200"], rate["H200"]
        assert gb200[MemoryAccess.STREAM] / h200_rate[MemoryAccess.STREAM] == pytest.approx(sum(fused_rates) / 2)
        assert gb200[MemoryAccess.UPCAST] / h200_rate[MemoryAccess.UPCAST] == pytest.approx(sum(eager_rates) / 2)


# nvidia-smi's memory totals (MiB) on these GPUs, as public logs print them (sim/hardware.py)
DRIVER_TOTAL_MIB = {"A100-SXM4-80GB": 81920, "H100-SXM5-80GB": 81559, "H200": 143771, "B200": 183359,
                    "GB200": 189471, "GB300": 284208}


@pytest.mark.parametrize("name", sorted(DRIVER_TOTAL_MIB))
def test_hbm_capacity_is_the_drivers_total(name):
    """A GPU holds what its driver reports, not its headline figure read as 10^9 bytes: for
    the newer parts ("141 GB", "180 GB", "186 GB", "288 GB") that reading is 6.4% short."""
    assert get_gpu(name).hbm_capacity_bytes == DRIVER_TOTAL_MIB[name] * 2**20


def test_a_recipe_that_fits_the_driver_total_is_not_made_to_recompute():
    """Megatron-Bridge 26.04's Llama 3.1 405B FP8 recipe on 256 GB200 sets no recomputation
    (``llama31_405b_pretrain_256gpu_gb200_fp8cs_config``). With its null settings filled, llmsim's
    peak lies between 186e9 bytes and the driver's 189,471 MiB, so the loader keeps the recipe's
    default: no memory saver is taken."""
    from sim.config import load_workload_with_notes
    from sim.config.fit import peak_memory_bytes
    cases = Path(__file__).resolve().parents[2] / "workloads" / "validation" / "megatronbridge.yaml"
    w, notes = load_workload_with_notes(str(cases), case="megatronbridge_26.04.01_gb200_llama3_405b_fp8_256gpu")
    assert 186e9 < peak_memory_bytes(w) < get_gpu("GB200").hbm_capacity_bytes
    assert w.parallel.recompute is RecomputeKind.NONE
    assert not any("memory savers tried" in n for n in notes)


@pytest.mark.parametrize("name", sorted(GPU_CATALOGUE))
def test_only_the_superchips_issue_their_kernels_from_grace(name):
    """GB200 and GB300 come with their Grace CPU (NVIDIA's GB200 NVL72 and GB300 NVL72 pages);
    the other catalogue GPUs sit in x86 DGX and HGX systems, the hosts the issue costs were
    measured on."""
    from sim.types import HostCpu
    gpu = get_gpu(name)
    grace = gpu.name in ("GB200", "GB300")
    assert gpu.host_cpu is (HostCpu.GRACE if grace else HostCpu.X86)
    assert gpu.host_time_factor == (pytest.approx(37.08 / 13.48) if grace else 1.0)
