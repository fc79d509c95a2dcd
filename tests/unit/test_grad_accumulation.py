"""Adding each micro-batch's 16-bit weight gradient into the fp32 one when the GEMM does not
(``kernels.gradient_accumulation_fusion: false``): Megatron-Core's hook in one kernel, DeepSpeed's
bf16 optimizer as a copy to fp32 and an add (``LayerBuilder.grad_accumulation``)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.config import load_topology
from sim.runner import simulate
from sim.types import Dtype, RecomputeKind, ZeroImpl
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload, replace_settings

DGX = load_topology("dgx-a100")


def _pair():
    w = replace_settings(make_workload(layers=4, tp=2, pp=2, dp=2, gbs=8, dist_opt=True),
                         gradient_accumulation_fusion=False)
    ds = dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, zero_impl=ZeroImpl.DEEPSPEED_BF16))
    return w, ds


def _wgrads(program):
    return [t for t in program.tasks if t.rank == 0 and not t.comm and "wgrad" in t.name]


def test_deepspeeds_bf16_optimizer_copies_then_adds_each_gradient():
    w, ds = _pair()
    hook, copy_add = _wgrads(build_program(w)), _wgrads(build_program(ds))
    assert len(hook) == len(copy_add) > 0
    for a, b in zip(hook, copy_add):
        # the same GEMM; 8 more bytes a weight (the fp32 copy written and read) and one more kernel
        assert (a.op.m, a.op.n, a.op.k) == (b.op.m, b.op.n, b.op.k)
        assert b.op.extra_kernels == a.op.extra_kernels + 1
        added = b.op.extra_bytes - a.op.extra_bytes
        assert added > 0
        assert added == pytest.approx(8.0 * a.op.extra_bytes / 10.0)  # 18 bytes a weight against 10
    assert simulate(ds, DGX).result.makespan_s > simulate(w, DGX).result.makespan_s


def test_with_fusion_nothing_is_added_whatever_the_optimizer():
    w, ds = _pair()
    fused = replace_settings(w, gradient_accumulation_fusion=True)
    fused_ds = replace_settings(ds, gradient_accumulation_fusion=True)
    for a, b in zip(_wgrads(build_program(fused)), _wgrads(build_program(fused_ds))):
        assert a.op == b.op


# --- torchao's float8 weight, cast at every call (LayerBuilder.weight_casts) ----------------------


def _fp8(te_quantizer: bool, recompute=RecomputeKind.NONE):
    w = make_workload(layers=2, tp=2, gbs=4, gpu="H100-SXM5-80GB",
                      recompute=recompute)
    return replace_settings(dataclasses.replace(w, dtype=Dtype.FP8), te_quantizer=te_quantizer)


_LINEARS = ("qkv", "proj", "fc1", "fc2")


def _gemms(program, suffix):
    """Rank 0's FP8 linear GEMMs of one kind: ``""`` the forward, ``"-dgrad"``, ``"-wgrad"``."""
    names = {n + suffix for n in _LINEARS}
    return [t for t in program.tasks if t.rank == 0 and not t.comm and t.name in names]


@pytest.mark.parametrize("full", [False, True])
def test_torchaos_weight_is_cast_every_forward_and_transposed_for_the_input_gradient(full):
    rc = RecomputeKind.FULL if full else RecomputeKind.NONE
    te, ao = build_program(_fp8(True, rc)), build_program(_fp8(False, rc))
    fwd_te, fwd_ao = _gemms(te, ""), _gemms(ao, "")
    assert len(fwd_te) == len(fwd_ao) > 0
    if full:  # the recomputed forward casts the weight again
        assert len(fwd_ao) == 2 * len(_gemms(build_program(_fp8(False)), ""))
    for a, b in zip(fwd_te, fwd_ao):
        weights = a.op.n * a.op.k  # the forward GEMM [T, k] @ [k, n]
        assert b.op.extra_bytes - a.op.extra_bytes == pytest.approx(5.0 * weights)  # amax, cast
        assert b.op.extra_kernels - a.op.extra_kernels == 2
    assert len(_gemms(te, "-dgrad")) == len(_gemms(ao, "-dgrad")) > 0
    for a, b in zip(_gemms(te, "-dgrad"), _gemms(ao, "-dgrad")):
        weights = a.op.n * a.op.k  # [T, out] @ [out, in]
        assert b.op.extra_bytes - a.op.extra_bytes == pytest.approx(2.0 * weights)  # the transposed copy
    for a, b in zip(_gemms(te, "-wgrad"), _gemms(ao, "-wgrad")):
        assert a.op == b.op
