"""PyTorch FSDP2's copies around its per-layer collectives (``kernels.fsdp_copies: fsdp2``,
sim/workload/dataparallel.py): the copy-out of each gathered layer into its parameters, the
copy-in of each layer's gradients into the reduce-scatter input, the cast of the shards into the
all-gather input, and the unsharded gradient accumulation under pipeline parallelism."""

from __future__ import annotations

import dataclasses

import pytest

from sim.config import load_topology
from sim.config.stacks import load_stack
from sim.memory import FSDP_ACCUMULATED_GRAD_BYTES
from sim.runner import simulate
from sim.types import FsdpCopies, MemoryAccess, Stream, ZeroImpl
from sim.workload.dataparallel import FSDP_GRAD_BYTES, FSDP_SHARD_BYTES, PARAM_GATHER_BYTES
from sim.workload.taskgraph import build_program
from tests.conftest import load_case_dict, make_workload, replace_settings, run_error_line

DGX = load_topology("dgx-a100")


def _fsdp(copies: FsdpCopies, **kw):
    w = make_workload(**{"layers": 4, "dp": 4, "zero": 3, "gbs": 4, **kw})
    return replace_settings(w, fsdp_copies=copies)


def _named(program, rank, part):
    return [t for t in program.tasks if t.rank == rank and part in t.name]


def _compute_order(program, rank):
    return program.streams[(rank, Stream.COMPUTE)]


def test_without_copies_nothing_is_added():
    none = build_program(_fsdp(FsdpCopies.NONE))
    assert not _named(none, 0, "fsdp copy") and not _named(none, 0, "fsdp grad-accumulate")
    gathers = _named(none, 0, "ncclAllGather fsdp-params")
    assert gathers and all(t.op.issue_s == 0.0 for t in gathers)


def test_each_gather_is_copied_out_before_the_layer_and_each_reduce_copied_in_before_it():
    w = _fsdp(FsdpCopies.FSDP2)
    prog = build_program(w)
    none = build_program(_fsdp(FsdpCopies.NONE))
    gathers, outs = _named(prog, 0, "ncclAllGather fsdp-params"), _named(prog, 0, "fsdp copy-out")
    reduces, ins = _named(prog, 0, "ncclReduceScatter fsdp-grads"), _named(prog, 0, "fsdp copy-in")
    assert len(gathers) == len(outs) == len(_named(none, 0, "ncclAllGather fsdp-params")) > 0
    assert len(reduces) == len(ins) == len(_named(none, 0, "ncclReduceScatter fsdp-grads")) > 0
    order = _compute_order(prog, 0)
    for g, out in zip(gathers, outs):
        assert g.id in out.deps  # the copy waits for its gather
        assert out.op.bytes == pytest.approx(2 * g.op.size_bytes)  # the 16-bit weights read and written
        assert out.op.access is MemoryAccess.STREAM
        nxt = prog.tasks[order[order.index(out.id) + 1]]
        assert nxt.args == out.args and not nxt.name.startswith("fsdp")  # the layer's first kernel follows
    for rs, cin in zip(reduces, ins):
        assert rs.deps == [cin.id]  # the reduce-scatter waits for its input
        params = rs.op.size_bytes / w.kernels.grad_bytes
        assert cin.op.bytes == pytest.approx(params * (FSDP_GRAD_BYTES + w.kernels.grad_bytes))
    # the gather's input: the rank's fp32 shards cast to 16 bits, before the transfer
    gpu = w.system.gpu
    for g in gathers:
        shard = g.op.size_bytes / PARAM_GATHER_BYTES / len(g.op.group)
        expect = shard * (FSDP_SHARD_BYTES + PARAM_GATHER_BYTES) / (gpu.hbm_bandwidth_bytes_per_s
                                                                    * gpu.memory_efficiency) + gpu.kernel_launch_s
        assert g.op.issue_s == pytest.approx(expect, rel=1e-12)


def test_the_copies_lengthen_the_iteration_by_their_bytes():
    base = simulate(_fsdp(FsdpCopies.NONE), DGX)
    run = simulate(_fsdp(FsdpCopies.FSDP2), DGX)
    spans = [s for s in run.result.spans if s.rank == 0 and s.name.startswith("fsdp copy")]
    gpu = run.workload.system.gpu
    solo = sum(t.op.bytes for t in _named(run.program, 0, "fsdp copy")) / (
        gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency)
    took = sum(s.end_s - s.start_s for s in spans)
    assert took >= solo * (1 - 1e-9)  # each at most at HBM speed, launch gaps and contention on top
    # on the compute stream, between kernels that waited for nothing else: the iteration grows
    assert run.result.makespan_s - base.result.makespan_s == pytest.approx(took, rel=0.25)
    assert run.result.makespan_s > base.result.makespan_s + 0.5 * solo


def test_under_pipeline_parallelism_the_gradients_accumulate_then_one_reduce_reads_them():
    w = _fsdp(FsdpCopies.FSDP2, pp=2, dp=2, gbs=8)  # 4 micro-batches a rank, 2 layers a stage
    prog = build_program(w)
    acc = _named(prog, 0, "fsdp grad-accumulate")
    ins, reduces = _named(prog, 0, "fsdp copy-in"), _named(prog, 0, "ncclReduceScatter fsdp-grads")
    layers, mbs = 2, 4
    assert len(acc) == layers * mbs and len(ins) == len(reduces) == layers  # one reduce a layer, at the end
    by_layer: dict = {}
    for t in acc:
        by_layer.setdefault(dict(t.args)["layer"], []).append(t.op.bytes)
    for sizes in by_layer.values():
        first, *rest = sizes
        params = first / (FSDP_GRAD_BYTES + FSDP_ACCUMULATED_GRAD_BYTES)  # the first upcasts (read 2, write 4)
        assert all(x == pytest.approx(params * (FSDP_GRAD_BYTES + 2 * FSDP_ACCUMULATED_GRAD_BYTES)) for x in rest)
    assert all(t.op.access is MemoryAccess.UPCAST for t in acc)
    for cin, rs in zip(ins, reduces):  # the accumulated fp32 gradient is read, not the 16-bit one
        params = rs.op.size_bytes / w.kernels.grad_bytes
        assert cin.op.bytes == pytest.approx(params * (FSDP_ACCUMULATED_GRAD_BYTES + w.kernels.grad_bytes))


def test_deepspeed_zero3_and_megatron_buffers_copy_nothing():
    w = _fsdp(FsdpCopies.FSDP2)
    ds = dataclasses.replace(w, parallel=dataclasses.replace(w.parallel, zero_impl=ZeroImpl.DEEPSPEED_0_3))
    assert not _named(build_program(ds), 0, "fsdp copy")
    assert not _named(build_program(replace_settings(make_workload(dp=4, dist_opt=True, gbs=4),
                                                     fsdp_copies=FsdpCopies.FSDP2)), 0, "fsdp copy")


def test_stacks_name_their_copies():
    assert load_stack("torchtitan").value("fsdp_copies") is FsdpCopies.FSDP2
    for name in ("megatron-core", "pytorch-fsdp", "llm-foundry", "deepspeed", "megatron-bridge"):
        assert load_stack(name).value("fsdp_copies") is FsdpCopies.NONE, name


def _case(stack: str, **kernels) -> dict:
    return {"name": "probe", "stack": stack, "dtype": "bf16",
            "model": {"name": "probe", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
                      "vocab_size": 32000, "seq_length": 1024},
            "system": {"gpu": "A100-SXM4-80GB", "num_gpus": 8},
            "parallel": {"tp": 1, "pp": 1, "dp": 8, "zero_stage": 3, "micro_batch_size": 1, "global_batch_size": 8},
            **({"kernels": kernels} if kernels else {})}


def test_a_case_takes_its_stacks_copies_noted_and_its_own_first(tmp_path):
    w, notes = load_case_dict(tmp_path, _case("torchtitan"))
    assert w.kernels.fsdp_copies is FsdpCopies.FSDP2
    assert any(n.startswith("parallel.fsdp_copies: null -> fsdp2 (stack torchtitan:") for n in notes), notes
    w, notes = load_case_dict(tmp_path, _case("pytorch-fsdp"))
    assert w.kernels.fsdp_copies is FsdpCopies.NONE and not any("fsdp_copies" in n for n in notes)
    w, _ = load_case_dict(tmp_path, _case("torchtitan", fsdp_copies="none"))
    assert w.kernels.fsdp_copies is FsdpCopies.NONE


def test_a_bad_value_is_one_line_naming_the_file_and_field(tmp_path, capsys):
    case, line = run_error_line(tmp_path, _case("torchtitan", fsdp_copies="lots"), capsys)
    assert line.startswith(f"llmsim: error: {case}: kernels.fsdp_copies: expected ")
    assert "'fsdp2'" in line and "lots" in line
