"""Context parallelism's communication types (Megatron-LM ``--cp-comm-type``): ring attention
(``p2p``), the K/V all-gather, Ulysses all-to-alls (``a2a``) and the hierarchical ``a2a+p2p``
(sim/workload/context_parallel.py)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.cli import main
from sim.config import load_topology, load_workload
from sim.config.megatron_args import load_megatron_workload
from sim.costs.base import FixedCostModel
from sim.engine import Simulation
from sim.errors import ConfigError
from sim.memory import activation_model, stage_memory
from sim.output.report import make_report
from sim.runner import simulate
from sim.types import CollectiveKind, CommClass, CpCommType, OpKind, Stream
from sim.workload.context_parallel import cp_bytes_sent, cp_subgroups
from sim.workload.layers import layer_ops
from sim.workload.ops import AttentionOp, CommOp, MemoryOp
from sim.workload.taskgraph import build_program
from tests.conftest import make_workload

P2P, AG, A2A, HIER = CpCommType.P2P, CpCommType.ALL_GATHER, CpCommType.A2A, CpCommType.A2A_P2P


def with_cp(w, kind: CpCommType, levels: tuple[int, int] | None = None, kv_heads: int | None = None):
    """``w`` under ``kind`` (and its hierarchical sizes), optionally with GQA's KV heads."""
    model = w.model if kv_heads is None else dataclasses.replace(w.model, num_kv_heads=kv_heads)
    par = dataclasses.replace(w.parallel, cp_comm_type=kind, hierarchical_context_parallel_sizes=levels)
    return dataclasses.replace(w, model=model, parallel=par)


def variants(cp: int):
    """Every communication type at ``cp`` (the hierarchical one as 2 x cp/2)."""
    out = [(P2P, None), (AG, None), (A2A, None)]
    if cp >= 4:
        out.append((HIER, (2, cp // 2)))
    return out


class AttentionByFlops(FixedCostModel):
    """Attention costs its FLOPs at 1 PFLOP/s; everything else, communication included, is free."""

    def compute_time_s(self, op):
        return op.flops / 1e15 if isinstance(op, AttentionOp) else 0.0


def attention_s(w) -> float:
    res = Simulation(build_program(w), AttentionByFlops()).run()
    return sum(s.end_s - s.start_s for s in res.spans if s.rank == res.ranks[0].rank and s.kind is OpKind.ATTENTION)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_every_type_leaves_a_rank_one_cpth_of_the_attention(cp):
    """With free communication each type's attention time is 1/cp of the whole sequence's:
    cp ring steps of 1/cp^2, two load-balanced query chunks of 1/(2cp) against the gathered
    K/V, or the whole sequence over H/cp heads."""
    base = attention_s(make_workload(tp=1, pp=1, dp=1, gbs=1, layers=2, seq=8192))
    w = make_workload(tp=1, pp=1, dp=1, cp=cp, gbs=1, layers=2, seq=8192)
    for kind, levels in variants(cp):
        assert attention_s(with_cp(w, kind, levels)) == pytest.approx(base / cp, rel=1e-12), kind


def _cp_bytes(steps) -> float:
    return sum(cp_bytes_sent(st.op) for st in steps if isinstance(st.op, CommOp) and st.op.comm_class is CommClass.CP)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_bytes_each_rank_sends_per_layer_are_the_closed_forms(cp):
    """Per layer and rank, with GQA (16 query heads, 8 KV heads of 64, s = 4096, 16 bits):
    the ring and the all-gather both move (cp-1)/cp of the sequence's K/V forward and twice
    that backward (K/V and their gradients); the all-to-alls (cp-1)/cp of the rank's Q, K, V
    and output forward, of its output, output gradient, dQ, dK, dV backward; a2a+p2p the
    all-to-alls over a ranks plus p-1 ring steps of a 1/cp share of K/V."""
    b, s, H, K, d, e = 1, 4096, 16, 8, 64, 2.0
    w = make_workload(tp=1, pp=1, dp=1, cp=cp, gbs=1, layers=1, seq=s, hidden=H * d, heads=H)
    full_kv = 2 * b * s * K * d * e  # K and V of the whole sequence

    def a2a(a: int, heads: int) -> float:  # an all-to-all of `heads` heads of the rank's s/cp tokens
        return (a - 1) / a * b * (s / cp) * heads * d * e

    expected = {P2P: ((cp - 1) / cp * full_kv, 2 * (cp - 1) / cp * full_kv),
                AG: ((cp - 1) / cp * full_kv, 2 * (cp - 1) / cp * full_kv),
                A2A: (a2a(cp, 2 * H + 2 * K), a2a(cp, 3 * H + 2 * K))}
    if cp >= 4:
        a, p = 2, cp // 2
        expected[HIER] = (a2a(a, 2 * H + 2 * K) + (p - 1) * full_kv / cp,
                          a2a(a, 3 * H + 2 * K) + 2 * (p - 1) * full_kv / cp)
    for kind, levels in variants(cp):
        x = with_cp(w, kind, levels, kv_heads=K)
        ops = layer_ops(x.model, x.parallel, x.dtype, (0,), (), tuple(range(cp)), kernels=x.kernels)
        fwd, bwd = expected[kind]
        assert _cp_bytes(ops.layer_fwd) == pytest.approx(fwd, rel=1e-12), kind
        assert _cp_bytes(ops.layer_bwd) == pytest.approx(bwd, rel=1e-12), kind


def test_default_is_ring_attention_as_before():
    """Unset, the type is p2p and the attention is the ring as llmsim built it before the
    types existed: cp steps of 1/cp^2 of the causal work, each but the last beside a ring
    exchange of one K/V chunk (twice that backward) that the next step waits for."""
    cp, s, H, d = 4, 4096, 16, 64
    w = make_workload(tp=1, pp=1, dp=1, cp=cp, gbs=1, layers=1, seq=s)
    assert w.parallel.cp_comm_type is P2P
    group = tuple(range(cp))
    ops = layer_ops(w.model, w.parallel, w.dtype, (0,), (), group, kernels=w.kernels)
    chunk = 2.0 * (s // cp) * H * d * 2

    def ring(name, backward, size):
        att = AttentionOp(1, H, H, s, d, True, backward, fraction=1.0 / cp ** 2)
        x = CommOp(CollectiveKind.RING_EXCHANGE, CommClass.CP, group, size)
        out = []
        for j in range(cp):
            if j < cp - 1:
                out.append((Stream.CP_COMM, f"ncclSendRecv {name}-kv", x, 1))
            out.append((None, name, att, 0))
        return out

    assert [(st.stream, st.name, st.op, st.wait) for st in ops.attention_fwd] == ring("attention", False, chunk)
    k = ops.attention_bwd_index
    assert [(st.stream, st.name, st.op, st.wait) for st in ops.layer_bwd[k:k + 2 * cp - 1]] == \
        ring("attention-bwd", True, 2 * chunk)


def test_what_overlaps_the_attention():
    """With every collective taking c seconds and each attention kernel 1 s: the ring hides
    its exchanges behind the steps; the all-gather is waited for (one gather forward, a gather
    and a reduce-scatter backward: 3c a layer); Ulysses' all-to-alls too (Q, K, V and the
    output forward, the output and its gradient, dQ, dK, dV backward: 9c a layer)."""
    c, layers = 0.125, 2
    w = make_workload(tp=1, pp=1, dp=1, cp=2, gbs=1, layers=layers, seq=4096, overlap=False)

    def exposed(kind):
        def run(comm_s):
            return Simulation(build_program(with_cp(w, kind)),
                              FixedCostModel({OpKind.ATTENTION: 1.0}, comm_s=comm_s)).run().makespan_s
        return run(c) - run(0.0)

    ring = exposed(P2P)  # the gradient all-reduce over the dp-cp group, the same for every type
    assert exposed(AG) - ring == pytest.approx(3 * c * layers)
    assert exposed(A2A) - ring == pytest.approx(9 * c * layers)


def test_hierarchical_groups_are_megatrons():
    """Megatron-Core's create_hierarchical_parallel_groups: the first level takes consecutive
    CP ranks, the second every a-th."""
    first, second = cp_subgroups((10, 11, 12, 13, 14, 15), 3)
    assert first == ((10, 11, 12), (13, 14, 15)) and second == ((10, 13), (11, 14), (12, 15))


@pytest.mark.parametrize("kind, levels", [(AG, None), (A2A, None), (HIER, (2, 2))])
def test_every_rank_simulated_meets_its_groups(kind, levels):
    """With every rank simulated (tp 2 x cp 4) each collective's members all reach it: each
    rank joins its own all-to-all and ring groups (a deadlock otherwise)."""
    w = with_cp(make_workload(tp=2, pp=1, dp=1, cp=4, gbs=1, layers=2, seq=2048), kind, levels)
    prog = build_program(w, representative=False)
    res = Simulation(prog, FixedCostModel({OpKind.ATTENTION: 1.0}, comm_s=0.01)).run()
    assert len(res.ranks) == 8 and res.makespan_s > 0
    groups = {t.op.group for t in prog.tasks if t.comm and t.op.comm_class is CommClass.CP}
    for g in groups:
        members = {t.rank for t in prog.tasks if t.comm and t.op.group == g}
        assert members == set(g)


def test_memory_holds_the_gathered_or_exchanged_copies_and_the_engine_agrees():
    """The all-gather's backward holds the sequence's K and V and their gradients (4 b s kv d
    elements); Ulysses the head-sharded copies of Q, K, V and of the output and its gradient
    (b s/cp (3H + 2kv) d); the engine's peak is the walk's."""
    cp, s, H, K, d = 2, 4096, 16, 8, 64
    w = make_workload(tp=1, pp=1, dp=1, cp=cp, gbs=2, layers=2, seq=s, vocab=256)
    ring = activation_model(with_cp(w, P2P, kv_heads=K))
    for kind, extra in [(AG, 4 * s * K * d * 2.0), (A2A, s / cp * (3 * H + 2 * K) * d * 2.0)]:
        x = with_cp(w, kind, kv_heads=K)
        am = activation_model(x)
        assert am.layer_stored == ring.layer_stored
        assert am.layer_transient - ring.layer_transient == pytest.approx(extra, rel=1e-12)
        rep = make_report(simulate(x, load_topology("dgx-a100")))
        assert rep.stages[0].peak_memory_bytes == pytest.approx(stage_memory(x, 0).total_bytes, rel=1e-12)
    assert stage_memory(with_cp(w, AG, kv_heads=K), 0).total_bytes > stage_memory(with_cp(w, P2P, kv_heads=K),
                                                                                  0).total_bytes


# --- configuration ------------------------------------------------------------------------------


def test_yaml_value_and_default():
    w = load_workload("tiny", ["parallel.cp=2", "parallel.dp=1", "parallel.cp_comm_type=all_gather"])
    assert w.parallel.cp_comm_type is AG
    assert load_workload("tiny", ["parallel.cp=2", "parallel.dp=1"]).parallel.cp_comm_type is P2P


@pytest.mark.parametrize("sets, field", [
    (["parallel.cp_comm_type=ring"], "parallel.cp_comm_type"),
    (["parallel.cp_comm_type=a2a+p2p"], "parallel.hierarchical_context_parallel_sizes"),
    (["parallel.cp_comm_type=a2a+p2p", "parallel.hierarchical_context_parallel_sizes=[2, 3]"],
     "parallel.hierarchical_context_parallel_sizes"),
    (["parallel.cp_comm_type=a2a+p2p", "parallel.hierarchical_context_parallel_sizes=[1, 2, 2]"],
     "parallel.hierarchical_context_parallel_sizes"),
    (["parallel.cp_comm_type=a2a", "model.num_kv_heads=2"], "parallel.cp_comm_type"),
    (["parallel.cp_comm_type=a2a", "parallel.tp=8", "system.num_gpus=32"], "parallel.cp_comm_type"),
])
def test_bad_settings_are_config_errors(sets, field):
    """A value outside the four; a2a+p2p without two sizes whose product is cp; Ulysses with
    heads per TP rank that the CP size does not divide (2 KV heads; 16 heads at tp 8 leave 2)."""
    base = ["parallel.tp=1", "parallel.pp=1", "parallel.dp=1", "parallel.cp=4", "system.num_gpus=4"]
    load_workload("tiny", base)  # the base is sound
    with pytest.raises(ConfigError) as err:
        load_workload("tiny", base + sets)
    assert err.value.field == field


def test_ulysses_with_latent_attention_of_unequal_head_widths_is_refused():
    """Transformer Engine runs MLA (K and V heads of different widths) only with p2p or a2a+p2p."""
    sets = ["parallel.cp=2", "parallel.dp=512", "parallel.ep=8", "parallel.cp_comm_type=all_gather"]
    with pytest.raises(ConfigError) as err:
        load_workload("deepseek-v3", sets)
    assert err.value.field == "parallel.cp_comm_type" and "multi-head latent attention" in err.value.expected


def test_bad_value_on_the_command_line_is_one_line(capsys):
    status = main(["run", "tiny", "--set", "parallel.cp=2", "--set", "parallel.dp=1",
                   "--set", "parallel.cp_comm_type=ring_attention"])
    out, err = capsys.readouterr()
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "parallel.cp_comm_type" in err and "all_gather" in err


SMALL = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
         "--micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 --context-parallel-size 4 ")


@pytest.mark.parametrize("flags, kind, levels", [
    ("", P2P, None),
    ("--cp-comm-type allgather", AG, None),
    ("--cp-comm-type all_gather", AG, None),
    ("--cp-comm-type a2a a2a a2a a2a", A2A, None),
    ("--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2", HIER, (2, 2)),
])
def test_megatron_flags(flags, kind, levels):
    spec, notes = load_megatron_workload(SMALL + flags, gpu="A100-SXM4-80GB")
    assert (spec.parallel.cp_comm_type, spec.parallel.hierarchical_context_parallel_sizes) == (kind, levels)
    assert not any("not modelled" in n and "--cp-comm-type" in n for n in notes)


@pytest.mark.parametrize("flags, flag", [
    ("--cp-comm-type p2p a2a p2p a2a", "--cp-comm-type"),
    ("--cp-comm-type ring", "--cp-comm-type"),
    ("--cp-comm-type a2a+p2p", "--hierarchical-context-parallel-sizes"),
    ("--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 4 2", "--hierarchical-context-parallel-sizes"),
])
def test_megatron_flags_refused(flags, flag):
    """Per-layer types that differ are not modelled; a2a+p2p needs sizes whose product is CP
    (Megatron-LM's validate_args asserts both)."""
    with pytest.raises(ConfigError) as err:
        load_megatron_workload(SMALL + flags, gpu="A100-SXM4-80GB")
    assert err.value.field.startswith(flag)


def test_report_names_the_type_only_with_context_parallelism(capsys):
    assert main(["run", "tiny", "--set", "parallel.cp=2", "--set", "parallel.dp=1", "--set",
                 "parallel.cp_comm_type=a2a", "--granularity", "layer"]) == 0
    assert "CP 2 (a2a)" in capsys.readouterr().out
    assert main(["run", "tiny", "--granularity", "layer"]) == 0
    assert "CP" not in capsys.readouterr().out.splitlines()[1]


# --- PyTorch's context_parallel (torchtitan) ----------------------------------------------------


def _torch_layer(cp: int, s: int = 4096, H: int = 16, K: int = 4, d: int = 64):
    w = make_workload(tp=1, pp=1, dp=1, cp=cp, gbs=1, layers=1, seq=s, hidden=H * d, heads=H)
    x = with_cp(w, CpCommType.TORCH, kv_heads=K)
    return x, layer_ops(x.model, x.parallel, x.dtype, (0,), (), tuple(range(cp)), kernels=x.kernels)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_torch_cp_does_one_cpth_of_the_work_in_load_balanced_steps(cp):
    """Step 0 is causal over the rank's s/cp tokens, the cp - 1 others non-causal over
    s/cp x s/(2cp): together 1/cp of the causal sequence (up to the causal kernels' diagonal
    tiles), forward and backward alike."""
    s, H, d = 4096, 16, 64
    x, ops = _torch_layer(cp, s, H, d=d)
    for steps, bwd in ((ops.layer_fwd, False), (ops.layer_bwd, True)):
        att = [st.op for st in steps if isinstance(st.op, AttentionOp)]
        assert len(att) == cp and att[0].causal and not any(a.causal for a in att[1:])
        whole = AttentionOp(1, H, H, s, d, True, bwd).flops
        assert sum(a.flops for a in att) == pytest.approx(whole / cp, rel=0.05)


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_torch_cp_gathers_all_heads_once_and_rings_fp32_kv_gradients(cp):
    """K/V are repeated to every query head before SDPA, so the one all-gather per pass moves
    (cp-1)/cp of the sequence's K/V at H heads; the backward also passes each step's fp32
    dK/dV (2 n x 4 bytes, n = s/cp x H x d) to the next rank, cp times."""
    s, H, d = 4096, 16, 64
    x, ops = _torch_layer(cp, s, H, d=d)
    n = s // cp * H * d
    gathered = (cp - 1) / cp * 2 * s * H * d * 2.0
    cp_comm = lambda steps: [st.op for st in steps if isinstance(st.op, CommOp)]  # noqa: E731
    fwd, bwd = cp_comm(ops.layer_fwd), cp_comm(ops.layer_bwd)
    assert [op.collective for op in fwd] == [CollectiveKind.ALL_GATHER]
    assert [op.collective for op in bwd] == [CollectiveKind.ALL_GATHER] + [CollectiveKind.RING_EXCHANGE] * cp
    assert _cp_bytes(ops.layer_fwd) == pytest.approx(gathered, rel=1e-12)
    assert _cp_bytes(ops.layer_bwd) == pytest.approx(gathered + cp * 2 * n * 4.0, rel=1e-12)


def test_torch_cp_merges_each_step_in_fp32_eager_ops():
    """The forward's merges, per element of the rank's output (n = s/cp x H x d): the K/V
    copies and concatenations (8 per step before the gather and 8 for each of the cp - 2 more),
    step 0's cast to fp32 (6), each later step's cast (6), difference (12), scale (8) and
    update (12), the final cast (6); the log-sum-exp ops are per row."""
    cp, s, H, d = 4, 4096, 16, 64
    x, ops = _torch_layer(cp, s, H, d=d)
    n, rows = s // cp * H * d, s // cp * H
    merge = [st.op for st in ops.attention_fwd if isinstance(st.op, MemoryOp)]
    per_elem = 8 + 8 + 8 * (cp - 2) + 6 + (cp - 1) * (6 + 12 + 8 + 12) + 6
    assert sum(op.bytes for op in merge) == pytest.approx(n * per_elem + (cp - 1) * 5 * 3 * rows * 4)


def test_torch_cp_is_torchtitans_default():
    """A torchtitan case with CP and no cp_comm_type runs PyTorch's context_parallel; Megatron
    cases keep ring attention."""
    w = load_workload("workloads/validation/torchtitan.yaml", case="torchtitan_h100_t2_llama31_8b_8gpu_cp4_seq131072")
    assert w.parallel.cp_comm_type is CpCommType.TORCH
    assert load_workload("tiny", ["parallel.cp=2", "parallel.dp=1"]).parallel.cp_comm_type is P2P


def test_torch_cp_backward_holds_the_gathered_kv_and_fp32_gradients():
    """Beyond ring attention, its backward holds the gathered K/V at every query head
    (2 cp n x 2 bytes), the local contiguous copies (2 n x 2), fp32 dQ, dK, dV (3 n x 4) and
    the fp32 dK/dV buffers sent and received (2 x 2 n x 4)."""
    cp, s, H, K, d = 2, 4096, 16, 4, 64
    w = make_workload(tp=1, pp=1, dp=1, cp=cp, gbs=2, layers=2, seq=s, hidden=H * d, heads=H, vocab=256)
    n = s // cp * H * d
    extra = activation_model(with_cp(w, CpCommType.TORCH, kv_heads=K)).layer_transient - \
        activation_model(with_cp(w, P2P, kv_heads=K)).layer_transient
    assert extra == pytest.approx(2 * cp * n * 2 + 2 * n * 2 + 3 * n * 4 + 2 * 2 * n * 4, rel=1e-12)


def test_nemo_2403_ring_steps_run_flash_attention_2():
    """NeMo 24.03's launcher exports ``NVTE_FUSED_ATTN=0`` (NeMo-Framework-Launcher
    ``launcher_scripts/conf/config.yaml`` @ 24.03.01), so Transformer Engine runs flash-attn's
    kernels under context parallelism (``attn_forward_func_with_cp``), not cuDNN's: the
    long-sequence cases' ring steps, forward and backward, are all priced as FlashAttention-2
    (stack ``nemo-24.01-24.07``)."""
    from sim.config.workload import load_case_records
    from sim.types import AttentionKernel
    rec = next(r for r in load_case_records("workloads/validation/nemo-longseq.yaml")
               if r.id == "nemo_longseq_h100_llama2_7b_32k_cp2")
    w = rec.workload
    assert w.parallel.cp == 2 and w.kernels.attention_kernel is AttentionKernel.FLASH2
    ops = layer_ops(w.model, w.parallel, w.dtype, (0,), (), (0, 1), kernels=w.kernels)
    for steps in (ops.layer_fwd, ops.layer_bwd):
        att = [st.op for st in steps if isinstance(st.op, AttentionOp)]
        assert len(att) == 2 and all(a.kernel is AttentionKernel.FLASH2 for a in att)
