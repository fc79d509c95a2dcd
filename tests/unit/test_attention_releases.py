"""cuDNN attention on Blackwell and Hopper by cuDNN release (issue #30: kernel rates belong to a
release of a software stack, sim/attention_releases.py).

Each Blackwell measurement prices the kernels it measured at the times it measured; each Hopper
one multiplies the GPU's catalogue curve by its published rate over cuDNN 9.19's at the same
FLOPs. A stack's ``cudnn_release`` picks the latest measurement not later than it (the earliest
for an older release, noted), the catalogue's curves from 9.18 on or where the GPU has no
per-release measurement; a workload on such a stack runs its cuDNN attention at those rates,
FlashAttention-2 does not change, and a release that is not a quoted version is one error naming
the file.
"""

from __future__ import annotations

import pytest
import yaml

from sim import attention_releases as releases
from sim.attention_releases import CATALOGUE_FROM, MEASURED, MEASURED_SEQS, parse_release, with_cudnn_release
from sim.cli import main
from sim.config.stacks import load_stack
from sim.costs.compute import attention_time_s
from sim.errors import ConfigError
from sim.hardware import get_gpu
from sim.types import AttentionKernel, Dtype
from sim.workload.ops import AttentionOp
from tests.conftest import load_case_dict


@pytest.mark.parametrize("m", MEASURED, ids=lambda m: f"{m.gpu}-{m.label}")
def test_each_measurement_prices_the_kernels_it_measured_at_their_times(m):
    gpu, note = with_cudnn_release(get_gpu(m.gpu), m.release)
    assert note is not None and f"cuDNN {m.label} as measured on {m.gpu}" in note
    for seq, fwd_ms, bwd_ms in zip(MEASURED_SEQS, m.forward_ms, m.backward_ms):
        for backward, ms in ((False, fwd_ms), (True, bwd_ms)):
            op = AttentionOp(1, 128, 8, seq, 128, True, backward)
            assert attention_time_s(gpu, op) == pytest.approx(ms * 1e-3, rel=1e-9), (seq, backward)


def test_the_latest_measured_release_not_later_than_the_stacks_prices_it():
    b200 = get_gpu("B200")
    labels = {r: with_cudnn_release(b200, r)[1] for r in ((9, 8), (9, 10), (9, 12), (9, 13), (9, 17))}
    assert "cuDNN 9.10.2 as measured" in labels[(9, 10)] and "cuDNN 9.10.2 as measured" in labels[(9, 12)]
    assert "cuDNN 9.13.0 as measured" in labels[(9, 13)] and "cuDNN 9.13.0 as measured" in labels[(9, 17)]
    assert "cuDNN 9.10.2 as measured" in labels[(9, 8)] and "no earlier release measured" in labels[(9, 8)]
    assert not any("no earlier" in labels[r] for r in ((9, 10), (9, 13)))
    for release in (None, CATALOGUE_FROM, (9, 19), (10, 0)):
        assert with_cudnn_release(b200, release) == (b200, None)
    a100 = get_gpu("A100")
    assert with_cudnn_release(a100, (9, 10)) == (a100, None)  # no per-release measurement of Ampere


def test_an_earlier_release_is_slower_on_blackwell_and_gb200_takes_b200s_fractions():
    """The backward of cuDNN 9.10-9.13 on B200 is slower than the catalogue's 9.19 curves at every
    measured length from 8k up; GB200 (B200's die) keeps B200's fractions of its own peak."""
    b200, gb200 = get_gpu("B200"), get_gpu("GB200")
    old_b200, _ = with_cudnn_release(b200, (9, 13))
    old_gb200, note = with_cudnn_release(gb200, (9, 13))
    assert "measured on B200 (its fractions of peak on GB200)" in note
    for seq in MEASURED_SEQS[2:]:
        op = AttentionOp(1, 32, 8, seq, 128, True, True)
        assert attention_time_s(old_b200, op) > 1.05 * attention_time_s(b200, op), seq
    assert old_gb200.attention_backward_efficiency == old_b200.attention_backward_efficiency
    assert old_gb200.attention_efficiency == old_b200.attention_efficiency


def _case(stack: str, gpu: str = "B200", **kernels) -> dict:
    return {"name": "probe", "stack": stack, "dtype": "bf16",
            "model": {"name": "probe", "num_layers": 4, "hidden_size": 4096, "num_attention_heads": 32,
                      "num_kv_heads": 8, "vocab_size": 32000, "seq_length": 8192},
            "system": {"gpu": gpu, "num_gpus": 8},
            "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "global_batch_size": 8},
            **({"kernels": kernels} if kernels else {})}


@pytest.mark.parametrize("stack, release", [("nemo-25", "9.10.2"), ("megatron-bridge-25", "9.13.0")])
def test_a_stack_before_9_18_runs_blackwell_attention_at_its_release(tmp_path, stack, release):
    w, notes = load_case_dict(tmp_path, _case(stack))
    note = next(n for n in notes if n.startswith("attention: cuDNN"))
    assert f"-> cuDNN {release} as measured on B200" in note and f"(stack {stack}:" in note
    op = AttentionOp(1, 32, 8, 8192, 128, True, True)
    assert attention_time_s(w.system.gpu, op) > 1.05 * attention_time_s(get_gpu("B200"), op)
    later, later_notes = load_case_dict(tmp_path, _case("megatron-bridge"))  # NeMo 26.x: the catalogue's 9.19
    assert later.system.gpu == get_gpu("B200") and not any(n.startswith("attention: cuDNN") for n in later_notes)


def test_flash_attention_2_keeps_its_curves(tmp_path):
    for gpu in ("B200", "H100-SXM5-80GB"):
        fa2, notes = load_case_dict(tmp_path, _case("nemo-25", gpu=gpu, attention_kernel="flash2"))
        assert fa2.kernels.attention_kernel is AttentionKernel.FLASH2
        assert fa2.system.gpu == get_gpu(gpu) and not any(n.startswith("attention: cuDNN") for n in notes)


# NVIDIA/cudnn-frontend benchmark/benchmark_results.csv, causal rows (batch, tokens, forward and
# backward TFLOP/s of 16 heads of dimension 128; the benchmark counts 4 b s^2 h d / 2 FLOPs forward,
# 2.5 times that backward), as published at @b740542 (cuDNN 9.1.0) and @de355c7 (cuDNN 9.4.0); and
# the same project's cuDNN 9.19 H200 run (64 query / 8 KV heads, batch 1; sim/hardware.py).
PUBLISHED_2024 = {
    (9, 1): ((4, 4096, 542.3175668926519, 443.6033150228602), (2, 8192, 572.8628678140092, 463.5408134793645),
             (1, 16384, 586.8151359973481, 497.67958736481233), (1, 32768, 577.3478523124705, 499.6635003500654),
             (1, 65536, 567.0220986793877, 503.80652594122864)),
    (9, 4): ((4, 4096, 613.49, 438.45), (2, 8192, 645.95, 461.89), (1, 16384, 649.99, 488.56),
             (1, 32768, 636.08, 504.14), (1, 65536, 631.20, 508.07)),
}
H200_919 = ((2048, 484, 370), (4096, 591, 474), (8192, 644, 541), (16384, 673, 579), (32768, 688, 581))


@pytest.mark.parametrize("m", releases.HOPPER_MEASURED, ids=lambda m: f"hopper-{m.label}")
@pytest.mark.parametrize("gpu_name", ["H100", "H200"])
def test_each_hopper_release_is_the_catalogue_curve_times_its_rate_over_9_19s(m, gpu_name):
    """At each published shape the kernel runs at the GPU's catalogue fraction times the shape's
    published fraction over what H200 reached with cuDNN 9.19 at the same FLOPs (the 9.19 rows
    interpolated in log(FLOPs)); the published points are the ones the module carries."""
    import math
    assert tuple((p.batch, p.seq) for p in m.points) == tuple((b, s) for b, s, _, _ in PUBLISHED_2024[m.release])
    catalogue = get_gpu(gpu_name)
    gpu, note = with_cudnn_release(catalogue, m.release)
    assert note is not None and f"cuDNN {m.label}'s rate over 9.19's" in note
    peak = 989e12
    for batch, seq, fwd, bwd in PUBLISHED_2024[m.release]:
        for backward, tflops in ((False, fwd), (True, bwd)):
            op = AttentionOp(batch, 16, 16, seq, 128, True, backward)
            seconds = 4 * batch * seq**2 * 16 * 128 / 2 * (2.5 if backward else 1) / (tflops * 1e12)
            ref = [(AttentionOp(1, 64, 8, s, 128, True, backward).flops, (b if backward else f) * 1e12 / peak)
                   for s, f, b in H200_919]
            i = max(j for j in range(len(ref)) if ref[j][0] <= op.flops)
            (x0, e0), (x1, e1) = ref[i], ref[min(i + 1, len(ref) - 1)]
            w = 0.0 if x1 == x0 else (math.log(op.flops) - math.log(x0)) / (math.log(x1) - math.log(x0))
            ratio = op.flops / (seconds * peak) / (e0 + w * (e1 - e0))
            expected = catalogue.attention_curve(AttentionKernel.VENDOR, backward)(op.flops) * ratio
            t = attention_time_s(gpu, op) - gpu.kernel_launch_s
            assert op.flops / t / gpu.peak(Dtype.BF16) == pytest.approx(expected, rel=1e-9), (seq, backward)


def test_hopper_takes_the_latest_release_measured_not_later_than_the_stacks():
    h100 = get_gpu("H100")
    notes = {r: with_cudnn_release(h100, r)[1] for r in ((8, 9), (9, 0), (9, 1), (9, 3), (9, 4), (9, 13), (9, 17))}
    assert all("cuDNN 9.1.0's rate" in notes[r] for r in ((8, 9), (9, 0), (9, 1), (9, 3)))
    assert all("no earlier release measured" in notes[r] for r in ((8, 9), (9, 0)))
    assert all("cuDNN 9.4.0's rate" in notes[r] and "no earlier" not in notes[r] for r in ((9, 4), (9, 13), (9, 17)))
    for release in (None, CATALOGUE_FROM, (9, 19)):
        assert with_cudnn_release(h100, release) == (h100, None)


def test_a_hopper_release_slows_the_deterministic_backward_as_the_default_one():
    h100 = get_gpu("H100")
    old, _ = with_cudnn_release(h100, (9, 1))
    for seq in (4096, 32768):
        default = AttentionOp(1, 16, 16, seq, 128, True, True)
        det = AttentionOp(1, 16, 16, seq, 128, True, True, deterministic=True)
        slower = attention_time_s(old, default) / attention_time_s(h100, default)
        assert slower > 1.02
        assert attention_time_s(old, det) / attention_time_s(h100, det) == pytest.approx(slower, rel=0.02), seq


def test_hopper_attention_of_2024_is_slower_at_long_sequences():
    """cuDNN 9.1 and 9.4 ran H200's backward at under 0.9 of 9.19's rate from 32k tokens (16 heads)
    up, and 9.1's forward at under 0.9 too; 9.4's forward gained on 9.1's at every length."""
    h100 = get_gpu("H100")
    old, _ = with_cudnn_release(h100, (9, 1))
    mid, _ = with_cudnn_release(h100, (9, 4))
    for seq in (32768, 65536):
        for backward in (False, True):
            op = AttentionOp(1, 16, 16, seq, 128, True, backward)
            assert attention_time_s(old, op) > 1.1 * attention_time_s(h100, op), (seq, backward)
        bwd = AttentionOp(1, 16, 16, seq, 128, True, True)
        assert attention_time_s(mid, bwd) > 1.1 * attention_time_s(h100, bwd), seq
    for seq in (4096, 8192, 16384, 32768, 65536):
        fwd = AttentionOp(1, 16, 16, seq, 128, True, False)
        assert attention_time_s(mid, fwd) < attention_time_s(old, fwd), seq


@pytest.mark.parametrize("framework, stack", [("Megatron-Core r0.8.0 (per strong-scaling figure legend)",
                                               "megatron-core-2024"),
                                              ("NeMo 24.12 (nvcr.io/nvidia/nemo:24.12; Megatron-Core)", "nemo-24")])
def test_a_2024_stack_runs_hopper_attention_at_cudnn_9_1s_rates(tmp_path, framework, stack):
    case = _case("", gpu="H100-SXM5-80GB")
    del case["stack"]
    case["framework"] = framework
    w, notes = load_case_dict(tmp_path, case)
    assert any(n.startswith(f"stack: null -> {stack} ") for n in notes)
    note = next(n for n in notes if n.startswith("attention: cuDNN 9.1 on H100"))
    assert "cuDNN 9.1.0's rate over 9.19's" in note and f"(stack {stack}:" in note
    op = AttentionOp(1, 32, 8, 32768, 128, True, True)
    assert attention_time_s(w.system.gpu, op) > 1.1 * attention_time_s(get_gpu("H100"), op)
    current, current_notes = load_case_dict(tmp_path, _case("megatron-core", gpu="H100-SXM5-80GB"))
    assert current.system.gpu == get_gpu("H100") and not any(n.startswith("attention: cuDNN") for n in current_notes)


def test_the_shipped_stacks_name_their_releases():
    assert load_stack("megatron-core-2024").value("cudnn_release") == (9, 1)
    assert load_stack("nemo-24").value("cudnn_release") == (9, 1)
    assert load_stack("nemo-25").value("cudnn_release") == (9, 10)
    assert load_stack("megatron-bridge-25").value("cudnn_release") == (9, 13)
    for name in ("megatron-bridge", "megatron-core", "torchtitan"):
        assert load_stack(name).value("cudnn_release") is None, name


@pytest.mark.parametrize("value, why", [(9.1, "quoted"), ("nine", "a cuDNN release"), ([9, 13], "a cuDNN release")])
def test_a_release_that_is_not_a_quoted_version_is_one_error_naming_the_file(tmp_path, capsys, value, why):
    stack = tmp_path / "mine.yaml"
    stack.write_text(yaml.safe_dump({"name": "mine", "description": "probe", "extends": "nemo-25", "settings": {
        "cudnn_release": {"value": value, "why": "x", "sources": ["here"]}}}))
    with pytest.raises(ConfigError) as err:
        load_stack(str(stack))
    assert err.value.field == "settings.cudnn_release.value" and why in str(err.value)
    case = tmp_path / "c.yaml"
    case.write_text(yaml.safe_dump(_case("mine.yaml")))
    assert main(["run", str(case)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llmsim: error: {stack}: settings.cudnn_release.value")


def test_a_release_is_read_as_major_and_minor():
    assert parse_release("9.13.0") == parse_release("9.13") == (9, 13)
    assert parse_release("9") is None and parse_release("9.1x") is None and parse_release("9.13.0.1") is None
