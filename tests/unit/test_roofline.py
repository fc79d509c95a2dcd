"""``llmsim roofline`` (sim/inference/roofline.py): the known behaviour of GEMMs and attention in
prefill and decode against the ridge points of A100, H100 and B200 (seed paper Sec. 6; Pope et
al. 2022, arXiv 2211.05102, Sec. 3)."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.config import load_topology
from sim.hardware import get_gpu
from sim.inference.hbm import load_hbm_table, with_hbm
from sim.inference.models import load_model
from sim.inference.roofline import ridge_flops_per_byte, roofline
from sim.inference.spec import InferenceSpec, Phase
from sim.types import Dtype

GPUS = [get_gpu(g) for g in ("A100-SXM4-80GB", "H100-SXM5-80GB", "B200")]
TOPOS = [load_topology(t) for t in ("dgx-a100", "dgx-h100", "dgx-b200")]
GEMMS = ("qkv", "o-proj", "fc1", "fc2")
KV_GEMMS = ("attn-scores", "attn-values")


def _roof(model="llama2-70b", tp=8, batch=1, prompt=200, gpus=GPUS, topos=TOPOS, **kw):
    name, m, _ = load_model(model)
    spec = InferenceSpec(name, m, gpus[0], tp=tp, batch=batch, prompt_tokens=prompt, generate_tokens=200, **kw)
    return roofline(spec, gpus, topos)


def _ops(g, phase: Phase) -> dict:
    return {r.name: r for r in next(p for p in g.phases if p.phase is phase).ops if r.per_layer}


def test_ridge_points_are_peak_over_bandwidth():
    for g in GPUS:
        for d in (Dtype.BF16, Dtype.FP8):
            if g.supports(d):
                assert ridge_flops_per_byte(g, d) == g.peak(d) / g.hbm_bandwidth_bytes_per_s
    assert 150 < ridge_flops_per_byte(GPUS[0], Dtype.BF16) < 160
    assert 280 < ridge_flops_per_byte(GPUS[1], Dtype.BF16) < 300


@pytest.mark.parametrize("model,tp", [("llama2-7b", 1), ("llama2-70b", 8)])
def test_decode_gemms_at_batch_1_sit_far_below_the_ridge_and_read_their_weights(model, tp):
    for g in _roof(model, tp):
        gpu = g.gpu
        ops = _ops(g, Phase.DECODE)
        for name in GEMMS:
            r = ops[name]
            assert r.verdict == "memory-bound" and r.bound_by == "memory"
            assert r.intensity_flops_per_byte < r.ridge_flops_per_byte / 100
            # its time is its bytes (the weights, all but a row) over the bandwidth a
            # bandwidth-bound GEMM achieves
            memory_s = r.bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.gemm_streaming_efficiency)
            assert r.time_s == pytest.approx(memory_s + gpu.kernel_launch_s, rel=1e-12)


def test_decode_gemm_intensity_is_about_the_batch():
    for batch in (1, 8, 32):
        ops = _ops(_roof("llama2-70b", 8, batch=batch, gpus=GPUS[:1], topos=TOPOS[:1])[0], Phase.DECODE)
        for name in GEMMS:
            assert ops[name].intensity_flops_per_byte == pytest.approx(batch, rel=0.05)


def test_decode_gemms_scale_with_one_over_hbm_bandwidth():
    t = load_hbm_table()
    h100 = GPUS[1]
    variants = [with_hbm(h100, t.generation(n), t) for n in ("HBM2e", "HBM3", "HBM3e", "HBM4")]
    rows = _roof("llama2-7b", 1, gpus=variants, topos=[TOPOS[1]] * 4)
    for name in GEMMS:
        products = [(_ops(g, Phase.DECODE)[name].time_s - h100.kernel_launch_s) * g.gpu.hbm_bandwidth_bytes_per_s
                    for g in rows]
        assert max(products) == pytest.approx(min(products), rel=1e-9)
    # prefill GEMMs on thousands of tokens do not care
    long = _roof("llama2-7b", 1, prompt=4096, gpus=variants, topos=[TOPOS[1]] * 4)
    fc1 = [_ops(g, Phase.PREFILL)["fc1"].time_s for g in long]
    assert max(fc1) == pytest.approx(min(fc1), rel=1e-9)


@pytest.mark.parametrize("prompt", [2048, 4096])
def test_prefill_gemms_on_thousands_of_tokens_are_compute_bound(prompt):
    for g in _roof("llama2-70b", 8, prompt=prompt):
        ops = _ops(g, Phase.PREFILL)
        for name in GEMMS:
            r = ops[name]
            assert r.verdict == "compute-bound" and r.bound_by == "compute", (g.gpu.name, name)
            assert r.intensity_flops_per_byte > r.ridge_flops_per_byte
        assert ops["attention"].verdict == "compute-bound"


@pytest.mark.parametrize("batch", [1, 256])
def test_attention_over_the_kv_cache_is_memory_bound_at_any_batch(batch):
    for model, tp in (("llama2-7b", 1), ("llama2-70b", 8)):
        for g in _roof(model, tp, batch=batch):
            ops = _ops(g, Phase.DECODE)
            for name in KV_GEMMS:
                r = ops[name]
                assert r.verdict == "memory-bound" and r.bound_by == "memory"
                # about the query heads per KV head (1 for Llama 2 7B, 8 for 70B), whatever the batch
                group = 8 if model == "llama2-70b" else 1
                assert r.intensity_flops_per_byte < 1.1 * group


def test_decode_gemms_turn_compute_bound_past_the_ridge():
    """At a batch beyond the ridge point a decode GEMM's intensity crosses it (A100: ~153)."""
    ops = _ops(_roof("llama2-70b", 8, batch=512, gpus=GPUS[:1], topos=TOPOS[:1])[0], Phase.DECODE)
    assert all(ops[n].verdict == "compute-bound" for n in GEMMS)
    assert all(ops[n].verdict == "memory-bound" for n in KV_GEMMS)


def test_roofline_command_writes_json_and_plot(tmp_path, capsys):
    j, png = tmp_path / "r.json", tmp_path / "r.png"
    status = main(["roofline", "llama2-7b", "--gpu", "A100,H100", "--phase", "decode", "--json", str(j),
                   "--plot", str(png)])
    out, err = capsys.readouterr()
    assert status == 0, err
    data = json.loads(j.read_text())
    assert [g["gpu"] for g in data["gpus"]] == ["A100-SXM4-80GB", "H100-SXM5-80GB"]
    phases = data["gpus"][0]["phases"]
    assert [p["phase"] for p in phases] == ["decode"]
    fc1 = next(o for o in phases[0]["ops"] if o["name"] == "fc1")
    assert fc1["verdict"] == "memory-bound" and fc1["intensity_flops_per_byte"] < 2
    assert "memory-bound" in out and png.stat().st_size > 10_000
