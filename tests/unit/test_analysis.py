"""The breakdown's unions, taken with numpy, give the loop's figures to the last bit.

:func:`sim.output.analysis.breakdown` merges each rank's compute spans and each class's transfers with
array operations (:func:`~sim.output.analysis._merge`, :func:`~sim.output.analysis._minus`). The references
here are the loops they replace: :func:`~sim.output.analysis._union` and :func:`_subtract` on
random intervals (ties, touching ends, empty and nested intervals included), and a
span-by-span breakdown on whole simulations.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from sim.config import load_topology, load_workload
from sim.output.analysis import _PRIORITY, RankBreakdown, _merge, _minus, _union, breakdown
from sim.results import SimResult
from sim.runner import simulate
from sim.types import CommClass, Stream


def _subtract(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``a`` minus ``b``, both sorted disjoint unions (the loop :func:`~sim.output.analysis._minus`
    replaced)."""
    out = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def _intervals(rng: random.Random, n: int) -> list[tuple[float, float]]:
    """Starts and ends on a coarse grid (so that many tie or touch), some empty or reversed."""
    out = []
    for _ in range(n):
        a = rng.randrange(0, 60) / 4
        out.append((a, a + rng.randrange(-2, 12) / 4))
    return out


def _pairs(iv) -> list[tuple[float, float]]:
    return list(zip(iv[0].tolist(), iv[1].tolist()))


def _arrays(pairs) -> tuple[np.ndarray, np.ndarray]:
    return np.array([a for a, _ in pairs], dtype=float), np.array([b for _, b in pairs], dtype=float)


@pytest.mark.parametrize("seed", range(40))
def test_merge_and_minus_are_the_loops(seed):
    rng = random.Random(seed)
    a, b = _intervals(rng, rng.randrange(0, 30)), _intervals(rng, rng.randrange(0, 30))
    ua, ub = _merge(*_arrays(a)), _merge(*_arrays(b))
    assert _pairs(ua) == _union(a)
    assert _pairs(ub) == _union(b)
    assert _pairs(_minus(ua, ub)) == _subtract(_union(a), _union(b))


def test_minus_keeps_the_pieces_around_and_between():
    a = _merge(np.array([0.0, 10.0]), np.array([8.0, 12.0]))
    b = _merge(np.array([-1.0, 2.0, 5.0, 11.0]), np.array([1.0, 3.0, 8.0, 20.0]))
    assert _pairs(_minus(a, b)) == [(1.0, 2.0), (3.0, 5.0), (10.0, 11.0)]


def _loop_breakdown(result: SimResult) -> list[RankBreakdown]:
    """The breakdown span by span (the implementation the arrays replaced)."""
    by_rank: dict[int, list] = {}
    for s in result.spans:
        by_rank.setdefault(s.rank, []).append(s)
    out = []
    T = result.makespan_s
    for info in result.ranks:
        compute, by_kind = [], {}
        comm: dict[CommClass, list] = {c: [] for c in CommClass}
        for s in by_rank.get(info.rank, []):
            if s.stream is Stream.COMPUTE:
                compute.append((s.start_s, s.end_s))
                if s.op_args and s.op_args[0][0] == "compute_by_kind":
                    for kind, share in s.op_args[0][1]:
                        by_kind[kind] = by_kind.get(kind, 0.0) + (s.end_s - s.start_s) * share
                else:
                    by_kind[s.kind] = by_kind.get(s.kind, 0.0) + (s.end_s - s.start_s)
            elif s.comm_class is not None:
                start = s.start_s if s.transfer_start_s is None else s.transfer_start_s
                comm[s.comm_class].append((start, s.end_s))
        covered = _union(compute)
        compute_s = sum(b - a for a, b in covered)
        exposed, busy = {}, {}
        for c in _PRIORITY:
            u = _union(comm[c])
            busy[c] = sum(b - a for a, b in u)
            rest = _subtract(u, covered)
            exposed[c] = sum(b - a for a, b in rest)
            covered = _union(covered + rest)
        idle = max(T - compute_s - sum(exposed.values()), 0.0)
        out.append(RankBreakdown(info.rank, info.pp, compute_s, exposed, idle, by_kind, busy))
    return out


@pytest.mark.parametrize("granularity", ["op", "layer"])
@pytest.mark.parametrize("sets", [[], ["parallel.sequence_parallel=true", "parallel.tp_comm_overlap=true"],
                                  ["parallel.zero_stage=3"], ["parallel.cp=2", "parallel.dp=1"],
                                  ["parallel.schedule=interleaved-1f1b", "parallel.virtual_pipeline_stages=2"]])
def test_breakdown_is_the_span_by_span_loop(sets, granularity):
    """Every figure of every rank equals the loop's, bit for bit, and so does the order of its
    kinds (a layer block's spans add their shares per kind)."""
    result = simulate(load_workload("tiny", sets), load_topology("dgx-a100"), full=True,
                      granularity=granularity).result
    got, want = breakdown(result), _loop_breakdown(result)
    assert [r.__dict__ for r in got] == [r.__dict__ for r in want]
    assert [list(r.compute_by_kind_s) for r in got] == [list(r.compute_by_kind_s) for r in want]
    assert any(v > 0 for r in got for v in r.exposed_comm_s.values())  # something was exposed
