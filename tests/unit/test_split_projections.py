"""Query, key and value (and a gated MLP's gate and up projections) run as linears of their own
(``kernels.split_projections``, torchtitan's and Hugging Face Llama's code): the backward sums
their input gradients, and a compiled SwiGLU backward streams over separate tensors."""

from __future__ import annotations

import dataclasses

import pytest

from sim.config.stacks import load_stack
from sim.workload import nongemm
from sim.workload.layers import layer_ops
from tests.conftest import make_workload, run_error_line


def _layer(split: bool, fused: bool, gated: bool = True):
    w = make_workload(seq=512, hidden=1024, heads=16, gpu="H100-SXM5-80GB")
    w = dataclasses.replace(w, model=dataclasses.replace(w.model, gated_mlp=gated, num_kv_heads=4),
                            kernels=dataclasses.replace(w.kernels, split_projections=split, fused_elementwise=fused))
    return layer_ops(w.model, w.parallel, w.dtype, (0,), kernels=w.kernels)


def _names(steps):
    return [st.name for st in steps]


def test_stacks_say_whose_code_splits_its_projections():
    for name in ("torchtitan", "pytorch-fsdp", "deepspeed"):
        assert load_stack(name).value("split_projections") is True, name
    for name in ("megatron-core", "megatron-bridge", "nemo-24", "llm-foundry", "megatron-deepspeed"):
        assert load_stack(name).value("split_projections") is False, name


def test_eager_code_adds_the_input_gradients_before_each_norm_backward():
    T, h, e = 512, 1024, 2
    bwd = _layer(split=True, fused=False).layer_bwd
    names = _names(bwd)
    sums = [st for st in bwd if st.name.startswith("grad-sum-")]
    assert _names(sums) == ["grad-sum-fc1", "grad-sum-qkv", "grad-sum-qkv"]  # w1 + w3; wq + wk + wv
    assert all(st.op.bytes == 3 * T * h * e for st in sums)  # read two gradients, write their sum
    # each right after its projections' backward, before the norm's
    fc1_sum = names.index("grad-sum-fc1")
    assert fc1_sum > names.index("fc1-wgrad") and names[fc1_sum + 1].startswith("norm2-bwd")
    last_qkv = max(i for i, n in enumerate(names) if n == "grad-sum-qkv")
    assert names[last_qkv + 1].startswith("norm1-bwd") and last_qkv > names.index("qkv-wgrad")
    # one projection of the MLP without a gate: nothing to add there
    assert "grad-sum-fc1" not in _names(_layer(split=True, fused=False, gated=False).layer_bwd)
    # Megatron's fused projections: nothing at all
    assert not any(n.startswith("grad-sum-") for n in _names(_layer(split=False, fused=False).layer_bwd))


def test_compiled_code_reads_the_extra_gradients_in_the_norm_and_streams_the_swiglu_backward():
    T, h, e = 512, 1024, 2
    split, fused = _layer(split=True, fused=True).layer_bwd, _layer(split=False, fused=True).layer_bwd
    sums = {st.name: st.op.bytes for st in split if st.name.startswith("grad-sum-")}
    assert sums == {"grad-sum-fc1": T * h * e, "grad-sum-qkv": 2 * T * h * e}
    act = {st.name: st.op for st in split if st.name == "activation-bwd"}["activation-bwd"]
    act_fused = {st.name: st.op for st in fused if st.name == "activation-bwd"}["activation-bwd"]
    assert act.bytes == act_fused.bytes
    assert act.efficiency == 1.0 and act_fused.efficiency == pytest.approx(nongemm.SWIGLU_BACKWARD_EFFICIENCY)


def _case(**kernels) -> dict:
    return {"name": "probe", "stack": "torchtitan", "dtype": "bf16",
            "model": {"name": "probe", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
                      "vocab_size": 32000, "seq_length": 1024},
            "system": {"gpu": "H100-SXM5-80GB", "num_gpus": 8},
            "parallel": {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "global_batch_size": 8},
            "kernels": kernels}


def test_a_case_takes_its_stacks_value_noted_and_its_own_first(tmp_path):
    from tests.conftest import load_case_dict
    w, notes = load_case_dict(tmp_path, _case())
    assert w.kernels.split_projections is True
    assert any(n.startswith("kernels.split_projections: null -> true (stack torchtitan:") for n in notes), notes
    w, _ = load_case_dict(tmp_path, _case(split_projections=False))
    assert w.kernels.split_projections is False


def test_a_bad_value_is_one_line_naming_the_file_and_field(tmp_path, capsys):
    case, line = run_error_line(tmp_path, _case(split_projections="sometimes"), capsys)
    assert line.startswith(f"llmsim: error: {case}: kernels.split_projections: expected ")
    assert "sometimes" in line
