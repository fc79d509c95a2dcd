"""Layout's group families, built from ranges, against their definition from the per-rank groups.

A family (``tp_groups``, ``dp_groups``, ``cp_groups``, ``ep_groups``, ``etp_groups``,
``edp_groups``) is every group of that kind in a stage, in order of first appearance over the
(dp, tp) coordinates; ``stage_pairs`` pairs the ranks of two stages with the same (tp, dp).
``gpu_placement`` gives None exactly when an order places every rank on its own GPU.
"""

from __future__ import annotations

import itertools

from sim.workload.layout import Layout, gpu_placement
from sim.workload.spec import ParallelSpec, placement_digits


def _family(lay: Layout, group_of, pp: int) -> tuple[tuple[int, ...], ...]:
    return tuple(dict.fromkeys(group_of(t, d, pp) for d in range(lay.dp) for t in range(lay.tp)))


def _layouts():
    for tp, dp, pp, cp, ep, etp in itertools.product([1, 2, 4], [1, 2, 4], [1, 3], [1, 2], [1, 2, 4], [None, 1, 2]):
        if dp % ep == 0 and (etp is None or (tp * dp * cp) % (etp * ep) == 0):
            yield Layout(tp, dp * cp, pp, cp, ep, etp)


def test_families_are_the_groups_in_order_of_first_appearance():
    n = 0
    for lay in _layouts():
        rank = lay.rank
        for s in range(lay.pp):
            # the closure runs within this iteration (B023)
            assert lay.tp_groups(s) == _family(lay, lambda t, d, p: tuple(rank(x, d, p) for x in range(lay.tp)), s)  # noqa: B023
            assert lay.dp_groups(s) == tuple(tuple(rank(t, d, s) for d in range(lay.dp)) for t in range(lay.tp))
            assert lay.cp_groups(s) == _family(lay, lay.cp_group, s)
            assert lay.ep_groups(s) == _family(lay, lay.ep_group, s)
            assert lay.etp_groups(s) == _family(lay, lay.etp_group, s)
            assert lay.edp_groups(s) == _family(lay, lay.edp_group, s)
            assert lay.stage_pairs(s, (s + 1) % lay.pp) == tuple(
                (rank(t, d, s), rank(t, d, (s + 1) % lay.pp)) for d in range(lay.dp) for t in range(lay.tp))
            for t, d in itertools.product(range(lay.tp), range(lay.dp)):
                first = d - d % lay.cp
                assert lay.cp_group(t, d, s) == tuple(rank(t, first + c, s) for c in range(lay.cp))
                if not lay.folded:
                    pure = d // lay.cp
                    base = pure - pure % lay.ep
                    assert lay.ep_group(t, d, s) == tuple(rank(t, d % lay.cp + lay.cp * (base + e), s)
                                                          for e in range(lay.ep))
            n += 1
    assert n > 100


def test_a_placement_is_none_exactly_when_every_rank_keeps_its_gpu():
    orders = ["-".join(p) for p in itertools.permutations(("tp", "cp", "dp", "pp"))]
    for (tp, dp, pp, cp), order in itertools.product(itertools.product([1, 2, 3], [1, 2], [1, 2], [1, 2]), orders):
        parallel = ParallelSpec(tp=tp, dp=dp, pp=pp, cp=cp, placement=order)
        gpus = Layout.of(parallel).placement(placement_digits(order, {"tp": tp, "cp": cp, "dp": dp, "pp": pp}))
        expected = None if gpus == tuple(range(len(gpus))) else gpus
        assert gpu_placement(parallel) == expected, (tp, dp, pp, cp, order)
