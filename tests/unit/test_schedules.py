"""Pipeline schedules: every pass exactly once, in an order that respects dependencies."""

from __future__ import annotations

import pytest

from sim.types import ScheduleKind
from sim.workload.schedules import Pass, pipeline_order


@pytest.mark.parametrize("kind,p,v,m", [
    (ScheduleKind.GPIPE, 4, 1, 8), (ScheduleKind.ONE_F_ONE_B, 4, 1, 8), (ScheduleKind.ONE_F_ONE_B, 4, 1, 2),
    (ScheduleKind.INTERLEAVED, 4, 2, 8), (ScheduleKind.INTERLEAVED, 4, 3, 4), (ScheduleKind.INTERLEAVED, 2, 4, 6),
])
def test_every_pass_once_and_forward_before_backward(kind, p, v, m):
    for rank in range(p):
        order = pipeline_order(kind, p, v, m, rank)
        assert sorted(order) == sorted((ps, mb, c) for ps in Pass for mb in range(m) for c in range(v))
        seen_f = set()
        for ps, mb, c in order:
            if ps is Pass.FORWARD:
                seen_f.add((mb, c))
            else:
                assert (mb, c) in seen_f, (rank, mb, c)


def test_1f1b_warmup_depth_is_p_minus_rank_minus_1():
    p, m = 4, 8
    for rank in range(p):
        order = pipeline_order(ScheduleKind.ONE_F_ONE_B, p, 1, m, rank)
        first_b = next(i for i, (ps, _, _) in enumerate(order) if ps is Pass.BACKWARD)
        assert first_b == (p - rank - 1) + 1


def test_interleaved_matches_megatron_chunk_order():
    # Megatron-LM: forward k runs chunk (k mod pv) // p of micro-batch (k // pv) p + k mod p
    order = [x for x in pipeline_order(ScheduleKind.INTERLEAVED, 2, 2, 4, 0) if x[0] is Pass.FORWARD]
    assert [(mb, c) for _, mb, c in order] == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0), (2, 1), (3, 1)]
