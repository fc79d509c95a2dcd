"""Flow-level network: concurrent transfers share links max-min fairly.

Each active flow gets a rate by progressive filling (Bertsekas and Gallager, *Data Networks*,
Sec. 6.5.2): the link with the smallest fair share fixes the rate of every flow crossing it,
its capacity is taken off the other links of those flows, and so on. A flow's ``weights``
count the flows of the whole job it stands for on each link (representative simulation).
Rates are recomputed whenever a flow starts or ends; the next completion is one SimPy
timeout, and a timeout made stale by a later change is ignored.
"""

from __future__ import annotations

import math
from functools import partial

import simpy

__all__ = ["FlowNetwork"]

_REL_EPS = 1e-9
"""A flow whose remaining bytes are below this fraction of its size has finished."""
MEMO_ENTRIES = 200_000
"""Distinct mixes of active flows whose rates :class:`FlowNetwork` keeps (a bound on memory)."""
_TIME_EPS = 1e-12
"""...or whose remaining time is below this fraction of the clock (beyond a float's
resolution at that time, where a timeout would not move the clock at all)."""


class _Flow:
    __slots__ = ("links", "weights", "size", "remaining", "rate", "group", "key")

    def __init__(self, links, weights, size, group) -> None:
        self.links = links
        self.weights = weights
        self.key = (links, weights)
        self.size = size
        self.remaining = size
        self.rate = 0.0
        self.group = group


class _Group:
    __slots__ = ("left", "event")

    def __init__(self, left: int, event: simpy.Event) -> None:
        self.left = left
        self.event = event


class FlowNetwork:
    """Links with capacities (bytes/s, by link id) and the flows on them.

    >>> env = simpy.Environment()
    >>> net = FlowNetwork(env, [100.0])
    >>> from sim.costs.base import Flow
    >>> done = []
    >>> def p(env, size):
    ...     yield net.transfer([Flow(0, 1, size, (0,), (1.0,))])
    ...     done.append((size, env.now))
    >>> _ = env.process(p(env, 100.0)); _ = env.process(p(env, 200.0)); env.run()
    >>> done          # both at 50 B/s until t=2, then the second alone at 100 B/s
    [(100.0, 2.0), (200.0, 3.0)]
    """

    def __init__(self, env: simpy.Environment, capacity_bytes_per_s: list[float]) -> None:
        self.env = env
        self.capacity = capacity_bytes_per_s
        self.active: list[_Flow] = []
        self.last_t = 0.0
        self.gen = 0
        self.busy_bytes = [0.0] * len(capacity_bytes_per_s)
        """Bytes each link carried (weighted), for utilization figures."""
        self.rate_log: list[tuple[float, int, float]] | None = None
        """When a list: every change of a link's carried rate, ``(time_s, link, bytes/s)``."""
        self._link_rate: dict[int, float] = {}
        self._memo: dict[tuple, tuple[float, ...]] = {}
        """Rates by the active flows' paths and weights, in order: the same mix of transfers
        recurs every layer and micro-batch, and progressive filling is a pure function of it."""

    def transfer(self, flows) -> simpy.Event:
        """Start ``flows`` (:class:`sim.costs.base.Flow`) now; the event fires when all are done."""
        env = self.env
        ev = env.event()
        cap = self.capacity
        live = []
        for f in flows:
            pairs = [(link, w) for link, w in zip(f.links, f.weights) if not math.isinf(cap[link])]
            if f.size_bytes > 0 and pairs:
                live.append((tuple(link for link, _ in pairs), tuple(w for _, w in pairs), f.size_bytes))
        if not live:
            ev.succeed()
            return ev
        self._advance()
        grp = _Group(len(live), ev)
        for links, weights, size in live:
            self.active.append(_Flow(links, weights, size, grp))
        self._reschedule()
        return ev

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self.last_t
        if dt > 0:
            busy = self.busy_bytes
            for f in self.active:
                moved = f.rate * dt
                f.remaining -= moved
                for link, w in zip(f.links, f.weights):
                    busy[link] += moved * w
        self.last_t = now

    def _rates(self) -> None:
        flows = self.active
        cap = self.capacity
        if len(flows) == 1:
            f = flows[0]
            f.rate = min(cap[link] / w for link, w in zip(f.links, f.weights))
            return
        key = tuple(f.key for f in flows)
        hit = self._memo.get(key)
        if hit is not None:
            for f, r in zip(flows, hit):
                f.rate = r
            return
        self._fill(flows)
        if len(self._memo) < MEMO_ENTRIES:
            self._memo[key] = tuple(f.rate for f in flows)

    def _fill(self, flows: list[_Flow]) -> None:
        """Max-min fair rates of ``flows`` by progressive filling."""
        cap = self.capacity
        load: dict[int, float] = {}
        for f in flows:
            for link, w in zip(f.links, f.weights):
                load[link] = load.get(link, 0.0) + w
        left = {link: cap[link] for link in load}
        unfixed = flows
        while unfixed:
            best_l, best = -1, math.inf
            for link, ld in load.items():
                if ld > 1e-12:
                    share = left[link] / ld
                    if share < best:
                        best, best_l = share, link
            best = max(best, 0.0)
            keep = []
            for f in unfixed:
                if best_l in f.links:
                    f.rate = best
                    for link, w in zip(f.links, f.weights):
                        left[link] = max(left[link] - w * best, 0.0)
                        load[link] -= w
                else:
                    keep.append(f)
            unfixed = keep

    def _log_rates(self) -> None:
        now, old = self.env.now, self._link_rate
        new: dict[int, float] = {}
        for f in self.active:
            for link, w in zip(f.links, f.weights):
                new[link] = new.get(link, 0.0) + f.rate * w
        log: list[tuple[float, int, float]] = self.rate_log  # type: ignore[assignment]  # a list when called
        for link in sorted(set(old) | set(new)):
            v = new.get(link, 0.0)
            if v != old.get(link, 0.0):
                log.append((now, link, v))
        self._link_rate = new

    def _reschedule(self) -> None:
        self._rates()
        if self.rate_log is not None:
            self._log_rates()
        self.gen += 1
        t_next = min(f.remaining / f.rate for f in self.active)
        ev = self.env.timeout(max(t_next, 0.0))
        ev.callbacks.append(partial(self._on_timer, self.gen))

    def _on_timer(self, gen: int, _event: simpy.Event) -> None:
        if gen != self.gen:
            return
        self._advance()
        keep = []
        horizon = max(self.env.now, 1.0) * _TIME_EPS
        for f in self.active:
            if f.remaining <= f.size * _REL_EPS or f.remaining <= f.rate * horizon:
                g = f.group
                g.left -= 1
                if g.left == 0:
                    g.event.succeed()
            else:
                keep.append(f)
        self.active = keep
        if keep:
            self._reschedule()
        elif self.rate_log is not None:
            self._log_rates()


def solo_time_s(phases, capacity_bytes_per_s: list[float]) -> float:
    """How long ``phases`` take on an otherwise idle network (each phase's latency, then its
    flows sharing links among themselves), computed with a private :class:`FlowNetwork`."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacity_bytes_per_s)

    def run():
        for ph in phases:
            if ph.latency_s > 0:
                yield env.timeout(ph.latency_s)
            if ph.flows:
                yield net.transfer(ph.flows)

    env.process(run())
    env.run()
    return env.now
