"""How a mixture-of-experts layer's local experts run their GEMMs (``kernels.expert_gemm_streams``,
:attr:`sim.workload.ops.GemmOp.streams`): one grouped kernel, a kernel an expert in turn, or a
kernel an expert on Transformer Engine's four streams, each priced at the size its kernels run."""

from __future__ import annotations

import dataclasses

import pytest

from sim.config import load_workload
from sim.config.megatron_args import load_megatron_workload
from sim.config.stacks import load_stack
from sim.costs.compute import gemm_time_s
from sim.errors import ConfigError
from sim.hardware import get_gpu
from sim.types import Dtype
from sim.workload.kernels import TE_GROUPED_GEMM_ISSUE_S
from sim.workload.layers import layer_ops
from sim.workload.ops import GemmOp

EXPERTS = 16
# one expert's up-projection of Qwen3-30B-A3B on its 2,048 routed tokens: 12.9 GFLOP
EXPERT = GemmOp(2048, 1536, 2048, Dtype.BF16)


def _grouped(streams: int) -> GemmOp:
    return dataclasses.replace(EXPERT, batch=EXPERTS, streams=streams)


@pytest.mark.parametrize("gpu", ["H100", "B200", "GB200"])
def test_a_kernel_an_expert_costs_the_experts_one_after_another(gpu):
    g = get_gpu(gpu)
    assert gemm_time_s(g, _grouped(1)) == pytest.approx(EXPERTS * gemm_time_s(g, EXPERT), rel=1e-12)


@pytest.mark.parametrize("gpu", ["H100", "B200", "GB200"])
def test_four_streams_price_four_experts_side_by_side(gpu):
    """On four streams the experts run four at a time: four waves here, each at the rate of
    one GEMM of four experts' rows, with a stream's four launches."""
    g = get_gpu(gpu)
    four = dataclasses.replace(EXPERT, m=4 * EXPERT.m)
    launch = g.kernel_launch_s
    assert gemm_time_s(g, _grouped(4)) == pytest.approx(EXPERTS / 4 * (gemm_time_s(g, four) - launch) + 4 * launch,
                                                        rel=1e-12)


@pytest.mark.parametrize("gpu", ["H100", "B200", "GB200"])
def test_small_experts_cost_more_the_fewer_run_at_once(gpu):
    g = get_gpu(gpu)
    one_kernel, four_streams, in_turn = (gemm_time_s(g, _grouped(s)) for s in (0, 4, 1))
    assert one_kernel < four_streams < in_turn


def test_a_large_expert_costs_the_same_however_it_runs():
    """Experts on the GEMM curve's plateau run at about its rate whichever way they are issued
    (the measured curve wanders by a few percent there); small ones do not."""
    g = get_gpu("H100")
    big = dataclasses.replace(EXPERT, m=16384, n=16384, k=8192)
    times = [gemm_time_s(g, dataclasses.replace(big, batch=8, streams=s)) for s in (0, 1, 4)]
    assert max(times) / min(times) < 1.03
    assert gemm_time_s(g, _grouped(1)) / gemm_time_s(g, _grouped(0)) > 1.2


def test_each_stack_says_how_its_experts_run():
    assert {name: load_stack(name).value("expert_gemm_streams")
            for name in ("megatron-core", "nemo-25", "megatron-bridge", "torchtitan", "llm-foundry",
                         "deepspeed", "pytorch-fsdp")} == {
        "megatron-core": 1, "nemo-25": 1, "megatron-bridge": 4, "torchtitan": 0, "llm-foundry": 0,
        "deepspeed": 1, "pytorch-fsdp": 1}


def _expert_gemms(spec):
    ops = layer_ops(spec.model, spec.parallel, spec.dtype, (0,), kernels=spec.kernels, ep_group=(0,)).moe
    assert ops is not None
    steps = [s for s in (*ops.layer_fwd, *ops.layer_bwd) if isinstance(s.op, GemmOp)]
    return ({s.name: s.op for s in steps if s.name.startswith("experts-")},
            {s.name: s.op for s in steps if not s.name.startswith("experts-")})


@pytest.mark.parametrize("streams", [0, 1, 4])
def test_the_layer_runs_its_experts_as_the_workload_says(streams):
    spec = load_workload("mixtral-8x7b", overrides=[f"kernels.expert_gemm_streams={streams}", "parallel.ep=1",
                                                    "parallel.tp=1"])
    experts, dense = _expert_gemms(spec)
    assert len(experts) == 6 and {op.batch for op in experts.values()} == {8}
    assert {op.streams for op in experts.values()} == {streams}
    # the attention's and router's GEMMs stay single kernels
    assert dense and {op.streams for op in dense.values()} == {0}


MOE_ARGS = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
            "--micro-batch-size 1 --global-batch-size 8 --vocab-size 32000 --bf16 "
            "--num-experts 8 --moe-router-topk 2 --swiglu ")


@pytest.mark.parametrize("flags, streams", [("", 1), ("--moe-grouped-gemm", 4),
                                            ("--moe-grouped-gemm --moe-use-legacy-grouped-gemm", 0)])
def test_megatron_flags_choose_the_experts_module(flags, streams):
    """Megatron-Core's TE spec: SequentialMLP without --moe-grouped-gemm, TEGroupedMLP with it,
    the grouped_gemm package's GroupedMLP with the legacy flag too."""
    spec, _ = load_megatron_workload(MOE_ARGS + flags, gpu="H100-SXM5-80GB")
    assert spec.kernels.expert_gemm_streams == streams


@pytest.mark.parametrize("value, expected", [("-1", "a whole number, 0 or more"), ("two", "an integer")])
def test_a_bad_stream_count_names_the_field(value, expected):
    with pytest.raises(ConfigError) as exc:
        load_workload("mixtral-8x7b", [f"kernels.expert_gemm_streams={value}"])
    assert exc.value.field == "kernels.expert_gemm_streams" and expected in str(exc.value)


def test_transformer_engines_grouped_linear_takes_as_long_as_its_host_takes_to_issue_it():
    """Transformer Engine's benchmark of its multi-stream grouped GEMM (NVIDIA/TransformerEngine
    PR #3134, SM100): 8 experts of 128 tokens, N = K = 2048, NVFP4, 0.267 ms, where their GPU
    work is a few hundredths of that; priced with the host's issue time it is the measurement
    (on a B200: the PR does not name its host, which llmsim takes as an x86 DGX one)."""
    g = get_gpu("B200")
    tiny = GemmOp(128, 2048, 2048, Dtype.NVFP4, 8, streams=4)
    assert gemm_time_s(g, tiny) < 0.1 * 0.267e-3
    issued = dataclasses.replace(tiny, issue_s=8 * TE_GROUPED_GEMM_ISSUE_S)
    assert gemm_time_s(g, issued) == pytest.approx(0.267e-3, rel=1e-9)
    # experts large enough keep the GPU busier than the host: the issue time is hidden
    big = dataclasses.replace(EXPERT, m=16384, batch=8, streams=4)
    assert gemm_time_s(g, dataclasses.replace(big, issue_s=8 * TE_GROUPED_GEMM_ISSUE_S)) == gemm_time_s(g, big)


def test_a_grace_host_issues_the_grouped_linear_as_slowly_as_it_issues_torch_linear():
    """GB200 and GB300 issue their kernels from Grace, which took 37.08 us of CPU time for a
    ``torch.nn.Linear`` forward where an H100 DGX's Xeon took 13.48 us
    (NVIDIA/TransformerEngine issue #2053): a host-bound grouped linear takes that much longer
    on them than on the same die issued from an x86 host (B200), for all their higher clocks."""
    tiny = GemmOp(128, 2048, 2048, Dtype.NVFP4, 8, streams=4, issue_s=8 * TE_GROUPED_GEMM_ISSUE_S)
    x86 = gemm_time_s(get_gpu("B200"), tiny)
    for grace in ("GB200", "GB300"):
        assert gemm_time_s(get_gpu(grace), tiny) == pytest.approx(x86 * 37.08 / 13.48, rel=1e-9)
    h100 = dataclasses.replace(tiny, dtype=Dtype.FP8)
    assert gemm_time_s(get_gpu("H100"), h100) == pytest.approx(8 * TE_GROUPED_GEMM_ISSUE_S, rel=1e-9)
    # a GEMM no host waits on costs the same whoever issues it
    big = dataclasses.replace(EXPERT, m=16384, batch=8, streams=4)
    assert gemm_time_s(get_gpu("GB200"), big) < gemm_time_s(get_gpu("B200"), big)


@pytest.mark.parametrize("streams, issued", [(0, False), (1, False), (4, True)])
def test_only_transformer_engines_grouped_linear_carries_its_hosts_issue_time(streams, issued):
    """The layer's expert GEMMs under TEGroupedMLP (4 streams) carry a GEMM an expert of host
    time; one grouped kernel (0) and SequentialMLP (1, whose Python loop is not priced) none."""
    spec = load_workload("mixtral-8x7b", overrides=[f"kernels.expert_gemm_streams={streams}", "parallel.ep=1",
                                                    "parallel.tp=1"])
    experts, dense = _expert_gemms(spec)
    expected = {op.batch * TE_GROUPED_GEMM_ISSUE_S if issued else 0.0 for op in experts.values()}
    assert {op.issue_s for op in experts.values()} == expected
    assert {op.issue_s for op in dense.values()} == {0.0}
