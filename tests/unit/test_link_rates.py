"""LinkRates: a link's rate series from the engine's per-op records, worked out per link asked.

The reference is the way the engine worked the series out before (every link's, from one
delta per link per pulse end, all sorted together by ``(time, link, change)``)."""

from __future__ import annotations

import random

from sim.engine.link_rates import LinkRates


def _reference(pulses, rate_log):
    deltas = []
    for t0, d, loads, members in pulses:
        for link, nbytes in loads:
            if members:
                rate = 1.0 / (d * members)
                deltas.append((t0, link, nbytes * rate))
                deltas.append((t0 + d, link, -nbytes * rate))
            else:
                deltas.append((t0, link, nbytes / d))
                deltas.append((t0 + d, link, -nbytes / d))
    last = {}
    for t, link, rate in rate_log:
        deltas.append((t, link, rate - last.get(link, 0.0)))
        last[link] = rate
    out, level = {}, {}
    for t, link, d in sorted(deltas):
        v = level[link] = max(level.get(link, 0.0) + d, 0.0)
        series = out.setdefault(link, [])
        if series and series[-1][0] == t:
            series[-1] = (t, v)
        else:
            series.append((t, v))
    return out


def _records(seed: int):
    rng = random.Random(seed)
    loads = [[(link, rng.choice([1e6, 3e6, 7.5e5])) for link in rng.sample(range(12), rng.randint(1, 5))]
             for _ in range(6)]
    pulses = []
    for _ in range(300):
        t0 = rng.randint(0, 40) * 0.25  # ties of time, on purpose
        pulses.append((t0, rng.choice([0.25, 0.5, 1.0 / 3.0, 2.0]), rng.choice(loads), rng.choice([0, 0, 1, 3])))
    log = sorted((rng.randint(0, 40) * 0.25 + 0.125, rng.randrange(12), rng.choice([0.0, 5e6, 1.25e7]))
                 for _ in range(100))
    return pulses, log


def test_every_link_asked_gets_the_reference_series_to_the_bit():
    for seed in range(20):
        pulses, log = _records(seed)
        want = _reference(pulses, log)
        got = LinkRates(pulses, log).series(range(12))
        assert got == want, seed


def test_asking_for_a_few_links_gives_theirs_alone_and_the_same_series():
    pulses, log = _records(7)
    want = _reference(pulses, log)
    rates = LinkRates(pulses, log)
    few = rates.series(iter([3, 9, 3]))  # an iterator, a link twice
    assert sorted(few) == sorted({3, 9} & want.keys())
    assert all(few[link] == want[link] for link in few)
    again = rates.series([9, 11])
    assert all(again[link] == want[link] for link in again) and sorted(again) == sorted({9, 11} & want.keys())


def test_a_link_nothing_ran_on_has_no_series():
    rates = LinkRates([(0.0, 1.0, [(2, 8.0)], 0)], [(0.5, 4, 0.0)])
    assert rates.series([2, 4, 5]) == {2: [(0.0, 8.0), (1.0, 0.0)], 4: [(0.5, 0.0)]}


def test_a_rate_never_goes_below_zero_and_one_time_gives_one_step():
    # the flow network logs 4 B/s then 0 on link 1 while a pulse of 2 B/s starts at the same time
    rates = LinkRates([(1.0, 1.0, [(1, 2.0)], 0)], [(1.0, 1, 4.0), (1.5, 1, 0.0)])
    assert rates.series([1])[1] == [(1.0, 6.0), (1.5, 2.0), (2.0, 0.0)]
    # rounding would leave -5.6e-17 B/s once both pulses end (0.3 + 0.6 - 0.6 - 0.3): none
    assert LinkRates([(0.0, 2.0, [(1, 0.6)], 0), (1.0, 1.0, [(1, 0.6)], 0)], []).series([1])[1][-1] == (2.0, 0.0)
    # a block's collective shared by 2 simulated ranks loads its link at half the rate
    shared = LinkRates([(0.0, 2.0, [(0, 8.0)], 2)], [])
    assert shared.series([0])[0] == [(0.0, 2.0), (2.0, 0.0)]
