"""Branch and bound over a sweep's candidates: simulate them in order of a lower bound on their
iteration time, and leave out those that cannot reach the top N.

A configuration whose lower bound exceeds the N-th best time simulated so far can never be
among the N fastest, whatever else is simulated (the N-th best time only falls), so it need
not be simulated; one whose bound equals it still is (a tie is decided by the key). The
candidates are taken in order of ``(closed-form bound, key)`` in fixed batches of
:func:`batch_size` (the same for any number of workers); batch ``k`` is sent once batches
``0 .. k-2`` have all finished, with the N-th best time of those batches as its *gate*
``T_k``. A candidate whose closed-form bound exceeds ``T_k`` ends the search (every later one
has a bound at least as high); the others go to the workers, which first compute the tighter
timeline bound (:mod:`sim.studies.sweep.timeline_bound`) and simulate only if it does not exceed ``T_k``.
Each gate is computed from a fixed set of
finished batches, so which configurations are simulated depends neither on the order in which
simulations finish nor on the number of workers; two batches are in flight at a time, so the
workers seldom wait for the slowest simulation of a batch.

The N fastest found are those an exhaustive sweep finds, in the same order: every
configuration left out has a bound, hence a time, above some gate, and each gate is at least
the final N-th best time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field

__all__ = ["BATCH", "batch_size", "nth_best_s", "SearchOutcome", "bounded_search"]

BATCH = 12
"""Candidates per batch, at least: fixed, not per worker, so that which configurations are
simulated does not depend on how many workers there are (two batches are in flight, enough
for a few workers, most jobs ending at their timeline bound in milliseconds)."""


def batch_size(top: int) -> int:
    """Candidates per batch: ``max(BATCH, top)``.

    >>> batch_size(10), batch_size(50)
    (12, 50)
    """
    return max(BATCH, top)


def nth_best_s(times: Sequence[float], n: int) -> float:
    """The ``n``-th smallest of ``times``, or infinity when there are fewer.

    >>> nth_best_s([3.0, 1.0, 2.0], 2), nth_best_s([1.0], 2)
    (2.0, inf)
    """
    return sorted(times)[n - 1] if len(times) >= n else math.inf


@dataclass
class SearchOutcome:
    """What :func:`bounded_search` did."""

    outcomes: dict = field(default_factory=dict)
    """Each configuration a worker answered for, by key: simulated, failed, or left out by
    its timeline bound (the worker's outcome says which)."""
    unsent: int = 0
    """Configurations never sent: their closed-form bound exceeded the gate."""
    interrupted: bool = False
    """Ctrl-C stopped the search; ``outcomes`` holds what had finished."""
    gates_s: list[float] = field(default_factory=list)
    """The gate of each batch sent."""


def bounded_search(order: Sequence, bound_s: Mapping[tuple, float], top: int,
                   submit: Callable[[object, float], Future], times_of: Callable[[object], float | None],
                   on_done: Callable[[object, object], None], failed: Callable[[BaseException], object],
                   abandon: Callable[[], None]) -> SearchOutcome:
    """Run the search of the module docstring.

    Parameters
    ----------
    order : sequence of candidates
        In order of ``(bound, key)``; each has a ``key``.
    bound_s : mapping
        The closed-form lower bound of each candidate, by key.
    top : int
        How many are ranked.
    submit : callable
        ``submit(candidate, gate_s)`` starts a worker on it and returns the future of its
        outcome.
    times_of : callable
        The screening time an outcome adds to the ranking (None when it adds none: failed,
        or left out).
    on_done : callable
        Called with each finished candidate and its outcome, in key order within a wake-up.
    failed : callable
        The outcome of a job whose future raised (a lost worker).
    abandon : callable
        After Ctrl-C: stop the workers.
    """
    size = batch_size(top)
    batches = [order[i:i + size] for i in range(0, len(order), size)]
    times: list[list[float]] = [[] for _ in batches]
    left = [0] * len(batches)
    out = SearchOutcome()
    pending: dict[Future, tuple[object, int]] = {}
    sent = finished = 0       # batches sent; batches 0 .. finished-1 have all finished
    stopped = False

    def collect(done) -> None:
        for fut in sorted(done, key=lambda f: pending[f][0].key):
            cand, b = pending.pop(fut)
            try:
                outcome = fut.result()
            except Exception as exc:  # noqa: BLE001 -- a lost worker fails its job, not the sweep
                outcome = failed(exc)
            out.outcomes[cand.key] = outcome
            t = times_of(outcome)
            if t is not None:
                times[b].append(t)
            left[b] -= 1
            on_done(cand, outcome)

    try:
        while True:
            while not stopped and sent < len(batches) and finished >= sent - 1:
                gate = nth_best_s([t for b in times[:sent - 1] for t in b], top) if sent > 1 else math.inf
                out.gates_s.append(gate)
                for i, cand in enumerate(batches[sent]):
                    if bound_s[cand.key] > gate:
                        stopped = True
                        out.unsent = len(batches[sent]) - i + sum(len(b) for b in batches[sent + 1:])
                        break
                    pending[submit(cand, gate)] = (cand, sent)
                    left[sent] += 1
                sent += 1
                while finished < sent and left[finished] == 0:
                    finished += 1
            if not pending:
                return out
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            collect(done)
            while finished < sent and left[finished] == 0:
                finished += 1
    except KeyboardInterrupt:
        collect([f for f in pending if f.done() and not f.cancelled()])
        abandon()  # drops the jobs in flight (sim/studies/workers.py)
        out.interrupted = True
        return out
