"""Random small configurations (seeded): every one simulates, its trace is valid and its
timeline's memory peak equals the schedule walk, in representative and full runs."""

from __future__ import annotations

import random

import pytest

from sim.config import load_topology
from sim.errors import SimError
from sim.memory import stage_memory
from sim.output.report import make_report
from sim.output.trace import chrome_trace, validate_chrome_trace
from sim.runner import simulate
from sim.types import RecomputeKind, ScheduleKind
from tests.conftest import make_workload


def _config(rng: random.Random) -> dict:
    tp, pp, dp, cp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), rng.choice([1, 2]), rng.choice([1, 1, 2])
    sched = rng.choice(list(ScheduleKind)) if pp > 1 else ScheduleKind.ONE_F_ONE_B
    vps = 2 if sched is ScheduleKind.INTERLEAVED else 1
    recompute = rng.choice(list(RecomputeKind))
    if sched is ScheduleKind.ZB_H1 and recompute in (RecomputeKind.FULL, RecomputeKind.SELECTIVE_OP):
        recompute = RecomputeKind.SELECTIVE  # zb-h1 keeps no recomputed layer for its W pass
    zero = rng.choice([0, 0, 1, 2, 3])
    experts = 4 if zero < 3 and rng.random() < 0.3 else 0
    return dict(tp=tp, pp=pp, dp=dp, cp=cp, vps=vps, schedule=sched, gbs=pp * rng.choice([1, 2]) * dp,
                layers=rng.choice([pp * vps, 2 * pp * vps, pp * vps + 1, max(5, pp * vps - 1)]), seq=2048,
                recompute=recompute, sp=tp > 1 and (experts > 0 or rng.random() < 0.5),
                dist_opt=rng.random() < 0.5, zero=zero, tied=rng.random() < 0.3,
                overlap=rng.random() < 0.7, flash=cp > 1 or rng.random() < 0.8,
                experts=experts, ep=dp if experts else 1,
                gpu=rng.choice(["A100-SXM4-80GB", "H100-SXM5-80GB", "GB200"]))


@pytest.mark.parametrize("seed", range(24))
def test_random_configuration(seed):
    rng = random.Random(seed)
    kw = _config(rng)
    try:
        w = make_workload(**kw)
    except SimError:
        pytest.skip("the draw is not a valid configuration")
    topo = load_topology(rng.choice(["dgx-a100", "dgx-h100", "gb200-nvl72"]))
    for full in (False, True):
        run = simulate(w, topo, full=full)
        assert validate_chrome_trace(chrome_trace(run.result)) == []
        rep = make_report(run)
        assert rep.iteration_time_s > 0 and 0 <= rep.bubble_fraction < 1
        for s in rep.stages:
            assert s.peak_memory_bytes == pytest.approx(stage_memory(w, s.stage).total_bytes, rel=1e-9)
