"""The flex token dispatcher (DeepEP, HybridEP): each token sent once per rank and once per
scale-up domain holding one of its experts, against Megatron-Core's all-to-all of a copy per
chosen expert."""

from __future__ import annotations

import itertools

import pytest
import yaml

from sim.config import load_topology, load_workload_with_notes
from sim.config.megatron_args import load_megatron_workload
from sim.costs.comm import dedup_fractions, hit_probability, plan_comm
from sim.engine.network import solo_time_s
from sim.errors import ConfigError
from sim.runner import simulate
from sim.topology.build import build_topology
from sim.topology.routing import Fabric
from sim.types import CollectiveKind, CommClass, CommKernel, MoeDispatcher, Stream
from sim.workload.ops import CommOp, Routing
from tests.conftest import make_workload, replace_settings


@pytest.mark.parametrize("experts, top_k, held", [(8, 2, 1), (8, 2, 2), (8, 3, 4), (12, 4, 3), (6, 6, 1)])
def test_hit_probability_is_the_share_of_expert_choices_that_reach_the_held_experts(experts, top_k, held):
    """Against every choice of ``top_k`` distinct experts, counted."""
    choices = list(itertools.combinations(range(experts), top_k))
    reached = sum(any(e < held for e in c) for c in choices)
    assert hit_probability(experts, top_k, held) == pytest.approx(reached / len(choices), rel=1e-12)


def _flows(plan) -> list:
    return [f for ph in plan.phases for f in ph.flows]


def test_dedup_exchange_sends_each_token_once_per_domain_to_the_same_local_index():
    """16 GPUs in two DGX H100 nodes, 64 experts top-8: rank r sends S p_dom to rank r +- 8 only
    across the nodes, and S p_rank D to each rank of its own node, each at the efficiency of the
    all-to-all buffer the same tokens make (8 S)."""
    fabric = Fabric(build_topology(load_topology("dgx-h100"), 16))
    size = 2**26
    op = CommOp(CollectiveKind.ALL_TO_ALL, CommClass.EP, tuple(range(16)), size, (), CommKernel.DEEPEP, 20,
                routing=Routing(64, 8))
    plan = plan_comm(fabric, op, False)
    assert plan.algorithm == "deduplicated"
    p_rank, p_dom = dedup_fractions(64, 8, 16, [8, 8])
    flows = _flows(plan)
    assert len(flows) == 16 * (1 + 7)
    for f in flows:
        route = fabric.route(f.src, f.dst)
        if f.src // 8 != f.dst // 8:
            assert f.dst == (f.src + 8) % 16  # the GPU of the same local index
            assert f.size_bytes == pytest.approx(size * p_dom[f.dst // 8] / route.efficiency(8 * size))
        else:
            curve = fabric.alltoall_efficiency or route.efficiency
            assert f.size_bytes * curve(8 * size) == pytest.approx(size * p_rank * 2)


def test_dedup_exchange_moves_fewer_bytes_between_nodes_than_the_all_to_all_and_runs_shorter():
    """Four nodes, 256 experts top-8 (DeepSeek-V3's routing) over 32 ranks: the all-to-all sends
    k = 8 copies of a token, 6 of them off the node on average; the deduplicated exchange sends
    one per other node holding a chosen expert, 3 x 0.904 = 2.71."""
    fabric = Fabric(build_topology(load_topology("dgx-b200"), 32))
    tokens_bytes = 4096 * 7168 * 2
    group = tuple(range(32))
    a2a = CommOp(CollectiveKind.ALL_TO_ALL, CommClass.EP, group, 8 * tokens_bytes)
    dedup = CommOp(CollectiveKind.ALL_TO_ALL, CommClass.EP, group, tokens_bytes, (), CommKernel.DEEPEP, 20,
                   routing=Routing(256, 8))

    plans = [plan_comm(fabric, op, False) for op in (a2a, dedup)]
    raw = [sum(f.size_bytes for f in _flows(p) if f.src // 8 != f.dst // 8) for p in plans]
    assert raw[1] < raw[0] / 2
    p_dom = dedup_fractions(256, 8, 32, [8] * 4)[1][0]
    assert p_dom * 3 == pytest.approx(2.711, abs=1e-3)
    times = [solo_time_s(p.phases, fabric.capacity_bytes_per_s) for p in plans]
    assert times[1] < times[0] / 1.8


def test_a_flex_dispatcher_run_exchanges_deduplicated_tokens_on_deepep_kernels():
    w = make_workload(tp=1, pp=1, dp=16, ep=16, experts=64, topk=8, gbs=16, hidden=1024, seq=1024,
                      gpu="H100-SXM5-80GB")
    runs = {d: simulate(replace_settings(w, moe_dispatcher=d), load_topology("dgx-h100"))
            for d in (MoeDispatcher.ALLTOALL, MoeDispatcher.DEEPEP)}
    ep = {d: [s for s in r.result.spans if s.stream is Stream.EP_COMM] for d, r in runs.items()}
    assert len(ep[MoeDispatcher.DEEPEP]) == len(ep[MoeDispatcher.ALLTOALL]) > 0
    assert all(s.name.startswith("deepep ") for s in ep[MoeDispatcher.DEEPEP])
    assert all(s.name.startswith("ncclAllToAll ") for s in ep[MoeDispatcher.ALLTOALL])
    busy = {d: sum(s.end_s - s.start_s for s in spans) for d, spans in ep.items()}
    assert busy[MoeDispatcher.DEEPEP] < busy[MoeDispatcher.ALLTOALL] / 2  # two nodes: 7.6 copies against ~3
    assert runs[MoeDispatcher.DEEPEP].result.makespan_s < runs[MoeDispatcher.ALLTOALL].result.makespan_s


def _moe_case(tmp_path, **parallel) -> str:
    doc = {"id": "moe", "framework": "Megatron-Core",
           "model": {"name": "moe", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
                     "vocab_size": 32000, "seq_length": 1024, "num_experts": 16, "moe_top_k": 2},
           "system": {"gpu": "H100-SXM5-80GB", "num_gpus": 16},
           "parallel": {"tp": 1, "pp": 1, "dp": 16, "ep": 16, "micro_batch_size": 1, "global_batch_size": 16,
                        **parallel}}
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_the_dispatcher_is_a_setting_noted_when_left_null_and_refused_when_unknown(tmp_path):
    w, notes = load_workload_with_notes(_moe_case(tmp_path))
    assert w.parallel.moe_dispatcher is MoeDispatcher.ALLTOALL
    assert any(n.startswith("parallel.moe_dispatcher: null -> alltoall") for n in notes)
    w, notes = load_workload_with_notes(_moe_case(tmp_path, moe_dispatcher="hybridep"))
    assert w.parallel.moe_dispatcher is MoeDispatcher.HYBRIDEP and not any("moe_dispatcher" in n for n in notes)
    with pytest.raises(ConfigError) as info:
        load_workload_with_notes(_moe_case(tmp_path, moe_dispatcher="nccl"))
    assert info.value.field == "parallel.moe_dispatcher"


@pytest.mark.parametrize("flags, expected", [
    ("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep", MoeDispatcher.HYBRIDEP),
    ("--moe-token-dispatcher-type flex", MoeDispatcher.DEEPEP),     # Megatron-Core's default backend
    ("--moe-enable-deepep", MoeDispatcher.DEEPEP),
    ("--moe-token-dispatcher-type alltoall", MoeDispatcher.ALLTOALL),
])
def test_megatron_flex_dispatcher_flags_map_to_the_dispatcher(flags, expected):
    args = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1 "
            "--global-batch-size 8 --vocab-size 32000 --bf16 --num-experts 8 --moe-router-topk 2 "
            f"--expert-model-parallel-size 8 {flags}")
    spec, notes = load_megatron_workload(args, gpu="H100-SXM5-80GB", num_gpus=8)
    assert spec.parallel.moe_dispatcher is expected
    assert not any("simulated as alltoall" in n for n in notes)
