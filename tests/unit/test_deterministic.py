"""Megatron-LM's ``--deterministic-mode`` and ``--no-gradient-accumulation-fusion``
(:class:`sim.workload.spec.ParallelSpec`, :func:`sim.workload.layers.layer_ops`)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.config import load_case_records
from sim.config.megatron_args import NOT_MODELLED_FLAGS, load_megatron_workload
from sim.costs.compute import attention_time_s, gemm_time_s
from sim.hardware import FA2_BLACKWELL_RATIO, FA2_DETERMINISTIC_BWD_RATIO, get_gpu
from sim.types import OpKind
from sim.workload.layers import MAIN_GRAD_BYTES, layer_ops
from sim.workload.ops import AttentionOp, GemmOp
from tests.conftest import make_workload, replace_settings

E = 2
"""Bytes of a BF16 element."""


def _ops(**par):
    w = make_workload(hidden=1024, heads=16, seq=512, mbs=2, tp=2)
    w = replace_settings(w, **par)
    return w, layer_ops(w.model, w.parallel, w.dtype, (0, 1), kernels=w.kernels)


def _by_name(steps):
    return {st.name: st.op for st in steps if st.stream is None}


def test_unfused_gradient_accumulation_adds_one_main_grad_pass_per_weight():
    """Each weight-gradient GEMM gains one kernel reading its 16-bit gradient and the fp32
    main_grad and writing main_grad back: (2 + 4 + 4) bytes per weight; nothing else moves."""
    _, fused = _ops()
    w, unfused = _ops(gradient_accumulation_fusion=False)
    a, b = _by_name(fused.layer_bwd), _by_name(unfused.layer_bwd)
    assert a.keys() == b.keys()
    wgrads = [n for n in a if n.endswith("wgrad")]
    assert set(wgrads) == {"fc2-wgrad", "fc1-wgrad", "proj-wgrad", "qkv-wgrad"}
    for name in a:
        if name in wgrads:
            op = b[name]
            assert (op.extra_bytes, op.extra_kernels) == (op.m * op.n * (E + 2 * MAIN_GRAD_BYTES), 1)
            assert a[name].extra_bytes == 0.0
            assert op.epilogue_bytes == 0.0  # the fused GEMM's epilogue: tests/unit/test_gemm_epilogue.py
        else:
            assert a[name] == b[name]
    # the weights of a layer on this TP rank, counted from the GEMM shapes, are the model's
    weights = sum(b[n].m * b[n].n for n in wgrads)
    h, f, t = w.model.hidden_size, w.model.ffn_hidden_size, w.parallel.tp
    assert weights == (4 * h * h + 2 * h * f) // t
    head = _by_name(unfused.head_bwd)["lm-head-wgrad"]
    assert head.extra_bytes == head.m * head.n * (E + 2 * MAIN_GRAD_BYTES)
    op = b["fc1-wgrad"]
    for gpu in (get_gpu("A100"), get_gpu("H100")):
        def hbm_s(nbytes, gpu=gpu):
            return nbytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency)
        # the fused GEMM's own fp32 epilogue costs time on Ampere only
        epilogue = 0.0 if gpu.gemm_epilogue_overlapped else hbm_s(a["fc1-wgrad"].epilogue_bytes)
        assert gemm_time_s(gpu, op) - gemm_time_s(gpu, a["fc1-wgrad"]) == pytest.approx(
            hbm_s(op.extra_bytes) + gpu.kernel_launch_s - epilogue, rel=1e-9)


def test_deterministic_mode_writes_every_te_output_twice():
    """Each GEMM output, the attention's O (with its fp32 statistics) and dQ/dK/dV, and the
    norm and activation outputs are NaN-filled once: one more write of their bytes."""
    w, plain = _ops()
    _, det = _ops(deterministic=True)
    T, h = w.parallel.micro_batch_size * w.model.seq_length, w.model.hidden_size
    a, b = _by_name(plain.layer_fwd + plain.layer_bwd), _by_name(det.layer_fwd + det.layer_bwd)
    for name, op in b.items():
        if isinstance(op, GemmOp) and op.kind is OpKind.GEMM and not name.endswith("wgrad"):
            assert op.extra_bytes - a[name].extra_bytes == op.m * op.n * E  # [T, out] or [T, inp]
            assert op.extra_kernels - a[name].extra_kernels == 1
        elif name.endswith("wgrad"):
            assert op == a[name]  # fused: accumulated into main_grad, nothing freshly allocated
    attn, attn_b = b["attention"], b["attention-bwd"]
    bh = w.parallel.micro_batch_size * attn.heads
    assert attn.extra_bytes == bh * w.model.seq_length * (w.model.head_dim * E + 4)
    assert attn_b.extra_bytes == w.parallel.micro_batch_size * w.model.seq_length * \
        (attn.heads + 2 * attn.kv_heads) * w.model.head_dim * E
    assert b["norm1"].bytes - a["norm1"].bytes == T * h * E
    assert b["norm1-bwd"].bytes - a["norm1-bwd"].bytes == T * h * E
    ffn = w.model.ffn_hidden_size // w.parallel.tp
    assert b["activation"].bytes - a["activation"].bytes == T * ffn * E
    assert b["dropout-add"] == a["dropout-add"]  # PyTorch's own kernels allocate unfilled outputs


def test_unfused_wgrad_output_is_also_filled_in_deterministic_mode():
    _, both = _ops(deterministic=True, gradient_accumulation_fusion=False)
    op = _by_name(both.layer_bwd)["fc2-wgrad"]
    assert (op.extra_bytes, op.extra_kernels) == (op.m * op.n * (2 * E + 2 * MAIN_GRAD_BYTES), 2)


def test_deterministic_attention_backward_on_a100_is_flash2_deterministic():
    """A100: Transformer Engine runs FlashAttention-2's deterministic backward, 0.55 of the
    non-deterministic rate (flash-attention PR #1893 over our H100 FlashAttention-2 curve);
    the forward is unchanged. Hopper keeps cuDNN, whose deterministic backward costs far less
    (measured; tests/unit/test_hardware.py)."""
    assert FA2_DETERMINISTIC_BWD_RATIO == pytest.approx(0.548, abs=0.005)
    a100, h100 = get_gpu("A100"), get_gpu("H100")
    bwd = AttentionOp(2, 8, 2, 8192, 128, True, True)
    det = dataclasses.replace(bwd, deterministic=True)
    launch = a100.kernel_launch_s
    assert (attention_time_s(a100, det) - launch) == pytest.approx(
        (attention_time_s(a100, bwd) - launch) / FA2_DETERMINISTIC_BWD_RATIO, rel=1e-9)
    fwd = AttentionOp(2, 8, 2, 8192, 128, True, False)
    assert attention_time_s(a100, dataclasses.replace(fwd, deterministic=True)) == attention_time_s(a100, fwd)
    assert (attention_time_s(h100, bwd) < attention_time_s(h100, det)
            < 0.8 * attention_time_s(h100, bwd) / FA2_DETERMINISTIC_BWD_RATIO)


@pytest.mark.parametrize("gpu", ["B200", "GB200", "GB300"])
def test_deterministic_attention_on_blackwell_is_flash2(gpu):
    """Blackwell: Transformer Engine drops cuDNN for deterministic training, so both directions
    run FlashAttention-2 at 0.47 of H100's fraction of peak, the backward deterministic on top;
    the same ops without determinism keep the cuDNN curves."""
    assert FA2_BLACKWELL_RATIO == pytest.approx(0.474, abs=0.005)
    g, h100 = get_gpu(gpu), get_gpu("H100")
    for backward, ratio in ((False, FA2_BLACKWELL_RATIO), (True, FA2_BLACKWELL_RATIO * FA2_DETERMINISTIC_BWD_RATIO)):
        op = AttentionOp(2, 8, 2, 8192, 128, True, backward)
        fa2 = h100.flash2_attention_backward_efficiency if backward else h100.flash2_attention_efficiency
        assert g.attention_curve(op.kernel, backward, deterministic=True)(op.flops) == pytest.approx(
            fa2(op.flops) * ratio, rel=1e-12)
        assert g.attention_curve(op.kernel, backward) is (
            g.attention_backward_efficiency if backward else g.attention_efficiency)
        assert attention_time_s(g, dataclasses.replace(op, deterministic=True)) > 2 * attention_time_s(g, op)


def test_megatron_flags_and_case_text_set_the_options():
    assert "--deterministic-mode" not in NOT_MODELLED_FLAGS
    assert "--no-gradient-accumulation-fusion" not in NOT_MODELLED_FLAGS
    base = ("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 256 "
            "--max-position-embeddings 256 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1024 --bf16")
    w = load_megatron_workload(base, num_gpus=1, gpu="A100-SXM4-80GB")[0]
    assert (w.kernels.deterministic, w.kernels.gradient_accumulation_fusion) == (False, True)
    w = load_megatron_workload(base + " --deterministic-mode --no-gradient-accumulation-fusion",
                               num_gpus=1, gpu="A100-SXM4-80GB")[0]
    assert (w.kernels.deterministic, w.kernels.gradient_accumulation_fusion) == (True, False)
    recs = {r.id: r for r in load_case_records("workloads/validation/megatron-ci.yaml")}
    for rec in recs.values():  # its framework text: "deterministic mode, --no-gradient-accumulation-fusion"
        assert rec.workload.kernels.deterministic and not rec.workload.kernels.gradient_accumulation_fusion
    for rec in load_case_records("workloads/validation/korthikanti2022.yaml"):
        assert not rec.workload.kernels.deterministic and rec.workload.kernels.gradient_accumulation_fusion


def test_frameworks_dated_2021_predate_gradient_accumulation_fusion():
    """A case whose framework text is dated 2021 or earlier runs the unfused accumulation (the
    fusion reached Megatron-LM's tensor-parallel layers in early 2022); 2022 and later keep
    Megatron-LM's default."""
    from pathlib import Path

    import yaml
    path = "workloads/validation/narayanan2021.yaml"
    text = {c["id"]: c["framework"] for c in yaml.safe_load(Path(path).read_text())}
    dated = [r for r in load_case_records(path) if "2021" in text[r.id]]
    assert dated
    assert all(not r.workload.kernels.gradient_accumulation_fusion for r in dated)
    later = load_case_records("workloads/validation/korthikanti2022.yaml")  # "Megatron-LM (2022)"
    assert later and all(r.workload.kernels.gradient_accumulation_fusion for r in later)
    # the unfused run is slower than the same case with the fusion forced back on
    from sim.config import load_topology
    from sim.config.topology import default_topology_name
    from sim.runner import simulate
    w = next(r.workload for r in dated)
    topo = load_topology(default_topology_name(w.system.gpu.name))
    fused = dataclasses.replace(w, kernels=dataclasses.replace(w.kernels, gradient_accumulation_fusion=True))
    assert simulate(w, topo).result.makespan_s > simulate(fused, topo).result.makespan_s


def test_deterministic_mode_runs_no_nvls():
    """Megatron-LM's deterministic mode requires NCCL_ALGO to exclude NVLS: an all-reduce in an
    H100 node that NCCL's tuner would run as NVLS runs as a ring instead."""
    from sim.config import load_topology
    from sim.costs.analytical import AnalyticalCostModel
    from sim.runner import excluded_algorithms
    from sim.topology.build import build_topology
    from sim.topology.routing import Fabric
    from sim.types import CollectiveAlgorithm, CollectiveKind, CommClass
    from sim.workload.ops import CommOp
    fabric = Fabric(build_topology(load_topology("dgx-h100"), 8))
    op = CommOp(CollectiveKind.ALL_REDUCE, CommClass.TP, (0, 1, 2, 3), 2.0**30)
    w, _ = _ops()
    free = AnalyticalCostModel(get_gpu("H100"), fabric, representative=False)
    det_w = dataclasses.replace(w, kernels=dataclasses.replace(w.kernels, deterministic=True))
    assert excluded_algorithms(w) == frozenset()
    assert excluded_algorithms(det_w) == {CollectiveAlgorithm.NVLS, CollectiveAlgorithm.NVLS_TREE}
    det = AnalyticalCostModel(get_gpu("H100"), fabric, representative=False, excluded=excluded_algorithms(det_w))
    assert free.comm_plan(op).algorithm == "nvls"
    assert det.comm_plan(op).algorithm != "nvls"
    across = Fabric(build_topology(load_topology("dgx-h100"), 16))  # and across nodes, no NVLS-tree
    dp = CommOp(CollectiveKind.ALL_REDUCE, CommClass.DP, tuple(range(16)), 2.0**30)
    assert AnalyticalCostModel(get_gpu("H100"), across, representative=False).comm_plan(dp).algorithm == "nvls-tree"
    det_across = AnalyticalCostModel(get_gpu("H100"), across, representative=False, excluded=excluded_algorithms(det_w))
    assert det_across.comm_plan(dp).algorithm not in ("nvls", "nvls-tree")
