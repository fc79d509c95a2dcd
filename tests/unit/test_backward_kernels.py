"""Kernels of a layer's backward that Megatron-LM's 2021-2022 code runs besides its GEMMs
(:func:`sim.workload.layers.layer_ops`): the residual stream's gradient sums, the unfused core
attention's copies and scalings, and the input-gradient all-reduce that 2021 code ran after
the weight gradient instead of beside it."""

from __future__ import annotations

import dataclasses

from sim.config import load_case_records
from sim.types import OpKind, Stream
from sim.workload.layers import layer_ops
from tests.conftest import make_workload, replace_settings

E = 2
"""Bytes of a BF16 element."""


def _ops(sp: bool = False, flash: bool = True, **par):
    w = make_workload(hidden=1024, heads=16, seq=512, mbs=2, tp=2, sp=sp, flash=flash)
    w = replace_settings(w, **par)
    return w, layer_ops(w.model, w.parallel, w.dtype, (0, 1), kernels=w.kernels)


def _names(steps):
    return [st.name for st in steps]


def test_residual_gradients_are_summed_after_each_norm_backward():
    """Each of the layer's two residual-stream tensors (its input, the post-attention sum)
    feeds a norm and a residual add, so autograd adds the two gradients once the norm's
    backward has produced its share: one kernel reading two and writing one tensor of the
    tokens the norm sees (all of them, or 1/t under sequence parallelism)."""
    for sp in (False, True):
        w, ops = _ops(sp=sp)
        names = _names(ops.layer_bwd)
        adds = [i for i, n in enumerate(names) if n == "residual-grad-add"]
        assert len(adds) == 2
        assert [names[i - 1] for i in adds] == ["norm2-bwd", "norm1-bwd"]
        tokens = w.parallel.micro_batch_size * w.model.seq_length // (w.parallel.tp if sp else 1)
        for i in adds:
            op = ops.layer_bwd[i].op
            assert op.kind is OpKind.ELEMENTWISE
            assert op.bytes == 3 * tokens * w.model.hidden_size * E
        # the forward and the recomputed forward gain nothing
        assert "residual-grad-add" not in _names(ops.layer_fwd)


def test_unfused_core_attention_copies_and_scales_its_gradients():
    """Megatron-LM's 2022 core attention: the context's permute copy (forward, and of its
    gradient backward), the query and key gradients each scaled by baddbmm's alpha, and the
    q/k/v gradients concatenated for the fused QKV projection; each reads and writes its
    tensor once. FlashAttention runs none of them."""
    w, ops = _ops(flash=False)
    b, heads, s, hd = 2, 16 // 2, w.model.seq_length, w.model.head_dim
    one = b * heads * s * hd * E  # bytes of one of q, k, v or the context on this rank
    fwd = {st.name: st.op for st in ops.attention_fwd}
    bwd = {st.name: st.op for st in ops.layer_bwd}
    assert fwd["context-permute"].bytes == 2 * one
    assert bwd["context-permute-bwd"].bytes == 2 * one
    assert bwd["q-scale-bwd"].bytes == bwd["k-scale-bwd"].bytes == 2 * one
    assert bwd["qkv-split-bwd"].bytes == 3 * 2 * one
    # the concatenated gradient is what the QKV input-gradient GEMM reads: it comes first
    names = _names(ops.layer_bwd)
    assert names.index("qkv-split-bwd") < names.index("qkv-dgrad")
    _, flash = _ops(flash=True)
    extra = {"context-permute", "context-permute-bwd", "q-scale-bwd", "k-scale-bwd", "qkv-split-bwd"}
    assert not extra & set(_names(flash.layer_bwd) + _names(flash.layer_fwd))


def _column_parallel_order(steps, name: str):
    """(position of the dgrad, of the all-reduce, of the wgrad, the all-reduce's wait)."""
    names = _names(steps)
    ar = names.index(f"ncclAllReduce {name}-grad")
    return names.index(f"{name}-dgrad"), ar, names.index(f"{name}-wgrad"), steps[ar].wait


def test_synchronous_tp_allreduce_follows_the_weight_gradient():
    """With Megatron-LM's asynchronous all-reduce the input gradient's all-reduce is issued
    between the dgrad and wgrad GEMMs and only the op after the wgrad waits for it; 2021 code
    all-reduced after both GEMMs and the next op waited for it."""
    _, async_ops = _ops()
    _, sync_ops = _ops(async_tp_grad_allreduce=False)
    for name in ("fc1", "qkv"):
        d, ar, wg, wait = _column_parallel_order(async_ops.layer_bwd, name)
        assert d < ar < wg and wait == 1
        d, ar, wg, wait = _column_parallel_order(sync_ops.layer_bwd, name)
        assert d < wg < ar and wait == 0
    # the same collectives and compute ops, only reordered
    assert sorted(_names(async_ops.layer_bwd)) == sorted(_names(sync_ops.layer_bwd))
    # sequence parallelism's reduce-scatter was always issued beside the wgrad GEMM
    _, sp_ops = _ops(sp=True, async_tp_grad_allreduce=False)
    names = _names(sp_ops.layer_bwd)
    assert names.index("ncclReduceScatter fc1-grad") < names.index("fc1-wgrad")


def test_the_era_decides_the_allreduce():
    """Narayanan 2021's runs (framework dated 2021) all-reduce synchronously; Korthikanti
    2022's (dated 2022) asynchronously."""
    nar = [r for r in load_case_records("workloads/validation/narayanan2021.yaml") if r.workload is not None]
    kor = [r for r in load_case_records("workloads/validation/korthikanti2022.yaml") if r.workload is not None]
    assert nar and kor
    assert not any(r.workload.kernels.async_tp_grad_allreduce for r in nar)
    assert all(r.workload.kernels.async_tp_grad_allreduce for r in kor)


def test_synchronous_allreduce_is_exposed_in_the_backward():
    """Simulated, the synchronous all-reduce leaves the TP stream's time exposed where the
    asynchronous one hid it behind the wgrad GEMM: the backward gets longer."""
    from sim.config import load_topology
    from sim.runner import simulate

    def backward_s(async_ar: bool) -> float:
        w = make_workload(hidden=2048, heads=16, seq=1024, mbs=2, tp=8, layers=2, gbs=2, flash=False)
        w = dataclasses.replace(w, kernels=dataclasses.replace(w.kernels, async_tp_grad_allreduce=async_ar))
        res = simulate(w, load_topology("dgx-a100")).result
        spans = [s for s in res.spans if s.stream is Stream.COMPUTE and dict(s.args).get("phase") == "bwd"
                 and dict(s.args).get("layer") == 1]
        return max(s.end_s for s in spans) - min(s.start_s for s in spans)

    assert backward_s(False) > backward_s(True)


def test_megatron_own_linears_add_and_reduce_their_biases_separately():
    """Megatron-LM's own linear layers (2022 and earlier): the QKV bias is added after its
    GEMM (read and write the output) and each of the four biases' gradients is a sum of the
    output gradient over the tokens (read it once): QKV and fc1 over all tokens, the
    row-parallel proj and fc2 over the tokens the bias-dropout-add sees. Off (Transformer
    Engine, the default) none of these kernels exists; the all-reduce still waits for the sum
    Megatron runs before ``handle.wait()``."""
    for sp in (False, True):
        w, ops = _ops(sp=sp, unfused_linear_bias=True)
        _, plain = _ops(sp=sp)
        T = w.parallel.micro_batch_size * w.model.seq_length
        t, h = w.parallel.tp, w.model.hidden_size
        Tn = T // t if sp else T
        widths = {"qkv": (T, 3 * h // t), "fc1": (T, 4 * h // t), "proj": (Tn, h), "fc2": (Tn, h)}
        bwd = {st.name: st.op for st in ops.layer_bwd}
        for name, (tokens, width) in widths.items():
            assert bwd[f"{name}-bias-grad"].bytes == tokens * width * E
        fwd = {st.name: st.op for st in ops.layer_fwd}
        assert fwd["qkv-bias"].bytes == 2 * T * 3 * h // t * E
        added = (set(_names(ops.layer_bwd) + _names(ops.layer_fwd))
                 - set(_names(plain.layer_bwd) + _names(plain.layer_fwd)))
        assert added == {"qkv-bias", *(f"{n}-bias-grad" for n in widths)}
    # without sequence parallelism the QKV input gradient's all-reduce is waited for by norm1's
    # backward, after the wgrad GEMM and the bias sum
    _, ops = _ops(unfused_linear_bias=True)
    names = _names(ops.layer_bwd)
    ar = names.index("ncclAllReduce qkv-grad")
    computes = [st.name for st in ops.layer_bwd[ar + 1:] if st.stream is None]
    assert computes[ops.layer_bwd[ar].wait] == "norm1-bwd"
    assert names.index("qkv-wgrad") < names.index("qkv-bias-grad") < names.index("norm1-bwd")


def test_only_2021_2022_megatron_cases_run_the_unfused_bias_kernels():
    """The era default: on for the Narayanan (2021) and Korthikanti (2022) cases, off for every
    case of a later framework."""
    import glob
    for path in sorted(glob.glob("workloads/validation/*.yaml")):
        old = "narayanan2021" in path or "korthikanti2022" in path
        for r in load_case_records(path):
            if r.workload is not None:
                assert r.workload.kernels.unfused_linear_bias is old, r.id


def test_dropout_add_backward_reads_gradient_and_mask_only():
    """The bias-dropout-add's forward reads the branch and the residual and writes the sum and
    a 1-byte mask (3 e + 1 bytes an element); its backward reads the gradient and the mask and
    writes the branch's gradient (2 e + 1): the residual's gradient is the incoming one, which
    autograd passes on without a copy."""
    for sp in (False, True):
        w, ops = _ops(sp=sp)
        tokens = w.parallel.micro_batch_size * w.model.seq_length // (w.parallel.tp if sp else 1)
        per = tokens * w.model.hidden_size
        fwd = [st.op for st in ops.layer_fwd if st.name == "dropout-add"]
        bwd = [st.op for st in ops.layer_bwd if st.name == "dropout-add-bwd"]
        assert len(fwd) == len(bwd) == 2
        assert all(op.bytes == per * (3 * E + 1) for op in fwd)
        assert all(op.bytes == per * (2 * E + 1) for op in bwd)
