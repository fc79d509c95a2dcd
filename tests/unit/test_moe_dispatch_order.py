"""Megatron-Core's all-to-all token dispatcher with experts split over TP runs its collectives one
after another: the all-to-all, then the TP all-gather of its output (``dispatch_postprocess``);
the TP reduce-scatter, then the all-to-all of its output (``combine_preprocess``, then
``token_combine``). Neither overlaps the other (sim/workload/layers.py, ``moe_mlp``)."""

from __future__ import annotations

import pytest

from sim.config import load_topology
from sim.runner import simulate
from sim.workload.ep_overlap import split_backward, split_forward
from sim.workload.layers import layer_ops
from tests.conftest import make_workload

H100 = load_topology("dgx-h100")


def _moe(**kw):
    return make_workload(**{"tp": 2, "dp": 2, "ep": 2, "experts": 4, "sp": True, "gbs": 2, "layers": 2, **kw})


PAIRS = [("ncclAllToAll dispatch", "ncclAllGather dispatch"), ("ncclReduceScatter combine", "ncclAllToAll combine"),
         ("ncclAllToAll combine-grad", "ncclAllGather combine-grad"),
         ("ncclReduceScatter dispatch-grad", "ncclAllToAll dispatch-grad")]


def test_each_tp_collective_of_the_dispatcher_runs_after_or_before_its_all_to_all():
    run = simulate(_moe(), H100)
    spans = [s for s in run.result.spans if s.rank == 0]
    seen = 0
    for first, second in PAIRS:
        a = [s for s in spans if s.name == first]
        b = [s for s in spans if s.name == second]
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            # the second starts when the first ends: its input is the first one's output
            assert y.start_s == pytest.approx(x.end_s) and y.start_s > x.start_s
            seen += 1
    assert seen >= 8


def test_the_ep_overlap_schedule_cuts_at_the_all_to_alls_not_at_the_tp_collectives():
    w = _moe(layers=1)
    ops = layer_ops(w.model, w.parallel, w.dtype, (0, 1), ep_group=(0, 2), kernels=w.kernels)
    assert ops.moe is not None
    fwd = split_forward(ops.moe.layer_fwd)
    assert [s.name for s in fwd.dispatch] == ["ncclAllToAll dispatch", "ncclAllGather dispatch"]
    assert [s.name for s in fwd.combine] == ["ncclReduceScatter combine", "ncclAllToAll combine"]
    assert all(s.stream is None for s in fwd.experts)
    bwd = split_backward(ops.moe.layer_bwd)
    assert [s.name for s in bwd.dispatch] == ["ncclReduceScatter dispatch-grad", "ncclAllToAll dispatch-grad"]
