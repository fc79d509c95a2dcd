"""Hidden dropout (``model.hidden_dropout``): with it, each residual add keeps a 1-byte mask
that its backward reads; without it (an RMSNorm model's default) no mask is kept and the add's
backward runs no kernel (:class:`sim.workload.spec.ModelSpec`)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.cli import main
from sim.config import load_workload, load_workload_with_notes
from sim.config.megatron_args import load_megatron_workload
from sim.errors import ConfigError
from sim.memory import activation_model, layer_activation_bytes, stage_memory
from sim.types import RecomputeKind
from sim.workload.layers import layer_ops
from tests.conftest import make_workload

E = 2
"""Bytes of a BF16 element."""


def _without_dropout(w):
    return dataclasses.replace(w, model=dataclasses.replace(w.model, hidden_dropout=0.0))


def _ops(w, moe: bool = False):
    ops = layer_ops(w.model, w.parallel, w.dtype, (0, 1), kernels=w.kernels)
    return ops.moe if moe else ops


@pytest.mark.parametrize("sp", [False, True])
def test_no_dropout_keeps_no_mask_and_runs_no_add_backward(sp):
    """At p = 0 the add moves 3 e bytes an element (no mask written), its backward is gone, and
    every other kernel is the one with dropout."""
    w = make_workload(hidden=1024, heads=16, seq=512, mbs=2, tp=2, sp=sp)
    with_p, without = _ops(w), _ops(_without_dropout(w))
    per = w.parallel.micro_batch_size * w.model.seq_length // (2 if sp else 1) * w.model.hidden_size
    adds = [st.op.bytes for st in without.layer_fwd if st.name == "dropout-add"]
    assert adds == [per * 3 * E] * 2
    assert [st.op.bytes for st in with_p.layer_fwd if st.name == "dropout-add"] == [per * (3 * E + 1)] * 2
    assert "dropout-add-bwd" not in [st.name for st in without.layer_bwd]
    assert [st.name for st in with_p.layer_bwd if st.name != "dropout-add-bwd"] == \
        [st.name for st in without.layer_bwd]
    # the attention backward still starts where it did, less the one add backward before it
    assert without.attention_bwd_index == with_p.attention_bwd_index - 2


def test_a_moe_layer_without_dropout_keeps_its_attention_half_and_shared_experts():
    """The MoE layer's backward is its MLP half then the dense layer's attention half; without
    dropout both lose only their add backward, and the shared experts' backward still comes
    first."""
    w = make_workload(hidden=1024, heads=16, seq=512, mbs=2, tp=2, sp=True, experts=8, topk=2, shared=1)
    with_p, without = _ops(w, moe=True), _ops(_without_dropout(w), moe=True)
    names = [st.name for st in without.layer_bwd]
    assert "dropout-add-bwd" not in names
    assert names == [st.name for st in with_p.layer_bwd if st.name != "dropout-add-bwd"]
    assert names[0].startswith("shared") or names[1].startswith("shared")
    assert without.attention_bwd_index == with_p.attention_bwd_index - 2


@pytest.mark.parametrize("sp", [False, True])
def test_no_dropout_stores_two_fewer_bytes_a_token_and_width(sp):
    """Two 1-byte masks a layer, ``2 sbh`` (``/ t`` under sequence parallelism), and the
    embedding's one, ``sbh``, are what dropout keeps."""
    w = make_workload(hidden=1024, heads=16, seq=512, mbs=2, tp=2, sp=sp)
    sbh = w.parallel.micro_batch_size * w.model.seq_length * w.model.hidden_size / (2 if sp else 1)
    for rc in (RecomputeKind.NONE, RecomputeKind.SELECTIVE):
        a = layer_activation_bytes(w.model, w.parallel, rc, kernels=w.kernels)
        b = layer_activation_bytes(_without_dropout(w).model, w.parallel, rc, kernels=w.kernels)
        assert a - b == pytest.approx(2 * sbh)
    assert activation_model(w).embedding == pytest.approx(sbh)
    assert activation_model(_without_dropout(w)).embedding == 0.0
    assert stage_memory(_without_dropout(w), 0).total_bytes < stage_memory(w, 0).total_bytes


def test_an_rmsnorm_model_defaults_to_no_dropout_and_says_so():
    llama, notes = load_workload_with_notes("llama3-8b-h100")
    assert llama.model.hidden_dropout == 0.0
    assert any(n.startswith("model.hidden_dropout: null -> 0.0") for n in notes)
    gpt, notes = load_workload_with_notes("gpt3-175b")
    assert gpt.model.hidden_dropout == 0.1
    assert not any("hidden_dropout" in n for n in notes)


def test_a_given_dropout_is_kept():
    w = load_workload("llama3-8b-h100", ["model.hidden_dropout=0.1"])
    assert w.model.hidden_dropout == 0.1
    assert load_workload("gpt3-175b", ["model.hidden_dropout=0"]).model.hidden_dropout == 0.0


def test_megatron_args_take_hidden_dropout_or_its_default():
    base = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --normalization RMSNorm "
            "--swiglu --micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 ")
    spec, _ = load_megatron_workload(base, gpu="A100-SXM4-80GB")
    assert spec.model.hidden_dropout == 0.1  # Megatron-LM's default, whatever the normalization
    spec, _ = load_megatron_workload(base + "--hidden-dropout 0.0", gpu="A100-SXM4-80GB")
    assert spec.model.hidden_dropout == 0.0
    with pytest.raises(ConfigError, match="hidden-dropout"):
        load_megatron_workload(base + "--hidden-dropout 1.5", gpu="A100-SXM4-80GB")


@pytest.mark.parametrize("value", ["1", "-0.1", "yes"])
def test_a_dropout_outside_zero_to_one_is_refused_in_one_line(capsys, value):
    status = main(["run", "tiny", "--set", f"model.hidden_dropout={value}"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and "model.hidden_dropout" in err
    assert "Traceback" not in err
