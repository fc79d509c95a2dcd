"""Each link's carried rate over time, worked out only for the links a caller asks for.

The engine can record what every link carries over time (``Simulation(record_links=True)``):
the flow network logs each link's rate whenever its flows are re-rated, and an op placed at
its solo time loads each of its links evenly while it runs. A large run places hundreds of
thousands of such ops over dozens of links each, and a trace shows a handful of links (the
busiest, ``sim.runner.busiest_link_counters``), so the engine keeps one record per placed op (its
start, its duration and its list of link loads, shared by every run of the op) and
:class:`LinkRates` turns the records into a rate series for the links asked, once each.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["LinkRates"]


class LinkRates:
    """The carried rate (bytes/s) of links over time, from the engine's records.

    Parameters
    ----------
    pulses : list of (t0_s, duration_s, loads, members)
        An op that loads each ``(link, bytes)`` of ``loads`` evenly over
        ``[t0_s, t0_s + duration_s]``: at ``bytes / duration_s`` when ``members`` is 0 (an op
        placed at its solo time), at ``bytes * (1 / (duration_s * members))`` otherwise (a
        block's collective, its run shared by ``members`` simulated ranks).
    rate_log : list of (time_s, link, rate_bytes_per_s)
        The flow network's logged rates, each link's in time order.

    A link's series adds, in time order, each change of its rate (a pulse's start and end,
    a logged rate's difference from the link's last one), breaking ties of time by the
    change; the rate never goes below zero, and changes at one time give one step.
    """

    def __init__(self, pulses: list, rate_log: list) -> None:
        self._pulses = pulses
        self._rate_log = rate_log
        self._done: dict[int, list[tuple[float, float]]] = {}

    def series(self, links: Iterable[int]) -> dict[int, list[tuple[float, float]]]:
        """Each of ``links``' rate as ``(time_s, rate)`` steps; a link nothing ran on has none."""
        links = list(links)
        want = [link for link in dict.fromkeys(links) if link not in self._done]
        if want:
            self._done.update(self._work_out(set(want)))
        return {link: self._done[link] for link in links if self._done.get(link)}

    def _work_out(self, want: set[int]) -> dict[int, list[tuple[float, float]]]:
        deltas: dict[int, list[tuple[float, float]]] = {link_id: [] for link_id in want}
        picked: dict[int, list] = {}  # per loads list (by id): its pairs on wanted links
        for t0, d, loads, members in self._pulses:
            hit = picked.get(id(loads))
            if hit is None:
                hit = picked[id(loads)] = [(link_id, b) for link_id, b in loads if link_id in want]
            if not hit:
                continue
            if members:
                rate = 1.0 / (d * members)
                for link, nbytes in hit:
                    deltas[link].append((t0, nbytes * rate))
                    deltas[link].append((t0 + d, -nbytes * rate))
            else:
                for link, nbytes in hit:
                    deltas[link].append((t0, nbytes / d))
                    deltas[link].append((t0 + d, -nbytes / d))
        last: dict[int, float] = {}
        for t, link, rate in self._rate_log:
            if link in want:
                deltas[link].append((t, rate - last.get(link, 0.0)))
                last[link] = rate
        out: dict[int, list[tuple[float, float]]] = {}
        for link, ds in deltas.items():
            series: list[tuple[float, float]] = []
            level = 0.0
            for t, d in sorted(ds):
                level = max(level + d, 0.0)
                if series and series[-1][0] == t:
                    series[-1] = (t, level)
                else:
                    series.append((t, level))
            out[link] = series
        return out
