"""cuDNN attention on Blackwell by cuDNN release (issue #30: kernel rates belong to a release of
a software stack, sim/attention_releases.py).

Each measurement prices the kernels it measured at the times it measured; a stack's
``cudnn_release`` picks the latest measurement not later than it (the earliest for an older
release, noted), the catalogue's curves from 9.18 on or where the GPU has no per-release
measurement; a workload on such a stack runs its cuDNN attention at those rates, FlashAttention-2
does not change, and a release that is not a quoted version is one error naming the file.
"""

from __future__ import annotations

import pytest
import yaml

from sim.attention_releases import CATALOGUE_FROM, MEASURED, MEASURED_SEQS, parse_release, with_cudnn_release
from sim.cli import main
from sim.config.stacks import load_stack
from sim.costs.compute import attention_time_s
from sim.errors import ConfigError
from sim.hardware import get_gpu
from sim.types import AttentionKernel
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
    h100 = get_gpu("H100")
    assert with_cudnn_release(h100, (9, 10)) == (h100, None)  # no per-release measurement of Hopper


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


def test_flash_attention_2_and_hopper_keep_their_curves(tmp_path):
    fa2, notes = load_case_dict(tmp_path, _case("nemo-25", attention_kernel="flash2"))
    assert fa2.kernels.attention_kernel is AttentionKernel.FLASH2
    assert fa2.system.gpu == get_gpu("B200") and not any(n.startswith("attention: cuDNN") for n in notes)
    h100, notes = load_case_dict(tmp_path, _case("nemo-25", gpu="H100-SXM5-80GB"))
    assert h100.system.gpu == get_gpu("H100") and not any(n.startswith("attention: cuDNN") for n in notes)


def test_the_shipped_stacks_name_their_releases():
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
