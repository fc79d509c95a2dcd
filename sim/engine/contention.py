"""Compute slowed by the communication kernels running beside it on its GPU.

An NCCL kernel runs one CTA per channel, each on an SM that no compute kernel shares while it
runs ("NCCL CTAs won't share an SM with compute kernels", NVIDIA/nccl issue #689); a compute
kernel launched beside it gets the other SMs. With a fraction ``f`` of the SMs held, a compute
op advances at rate ``1 - f`` (its waves of tiles spread over the SMs it gets), so an op of
solo duration ``d`` that runs entirely beside such a kernel takes ``d / (1 - f)``. Fractions
held by kernels running together add up (capped at :data:`MAX_HELD`). The fraction each
collective holds is its plan's :attr:`~sim.costs.base.CommPlan.sm_fraction`.

:class:`HeldSMs` keeps, for one GPU, the changes of the fraction held that the engine knows
of, and answers when a compute op that starts at ``t`` with solo duration ``d`` ends.
"""

from __future__ import annotations

import bisect
import math

__all__ = ["HeldSMs", "MAX_HELD"]

MAX_HELD = 0.9
"""The most of a GPU's SMs communication kernels are taken to hold together (a guard: NCCL's
channels stay well under it, 24 of 108 SMs on an A100)."""

_ZERO = 1e-12
"""A held fraction below this is the rounding left by a kernel's start and end: none."""


class HeldSMs:
    """The fraction of one GPU's SMs held by communication kernels over time.

    Queries (:meth:`end_s`) come with non-decreasing start times (the GPU's compute stream runs
    its ops in order); changes at or before the latest start are folded into one level. A
    change may arrive dated before that start (a query looked ahead for an op the engine then
    left to the clock); it is folded at once, which is right for every later query. An op the
    engine placed ahead of the clock never meets a kernel it learns of later (the engine checks
    that no kernel it does not know yet can start before the op ends).

    >>> h = HeldSMs()
    >>> h.hold(1.0, 3.0, 0.5)          # a kernel holds half the SMs from t=1 to t=3
    >>> h.end_s(0.0, 2.0)              # 1 s at full rate, 2 s at half rate (1 s of work), 0 s left
    3.0
    >>> h.end_s(3.0, 1.0)              # after the kernel: its solo time
    4.0
    """

    __slots__ = ("changes", "head", "level", "at")

    def __init__(self) -> None:
        self.changes: list[tuple[float, float]] = []
        """``(time_s, change of the fraction held)``, sorted; those before ``head`` are folded."""
        self.head = 0
        self.level = 0.0
        """The fraction held at ``at``, the latest query's start."""
        self.at = -math.inf

    def change(self, t: float, delta: float) -> None:
        """The fraction held changes by ``delta`` at ``t``."""
        if t <= self.at:
            self.level += delta
            if abs(self.level) < _ZERO:
                self.level = 0.0
            return
        bisect.insort(self.changes, (t, delta), lo=self.head)

    def hold(self, t0: float, t1: float, fraction: float) -> None:
        """A kernel holds ``fraction`` of the SMs over ``[t0, t1]``."""
        self.change(t0, fraction)
        self.change(t1, -fraction)

    def end_s(self, start: float, work_s: float, sensitivity: float = 1.0) -> float:
        """When an op of solo duration ``work_s`` that starts at ``start`` ends, at rate
        ``1 - sensitivity x held`` while kernels hold SMs (``sensitivity``: the share of the
        op that is compute, 1 for a kernel). ``start`` + ``work_s`` exactly where nothing is
        held."""
        ch, i, level = self.changes, self.head, self.level
        n = len(ch)
        if i == n and not level:  # nothing held now or later
            self.at = start
            return start + work_s
        while i < n and ch[i][0] <= start:
            level += ch[i][1]
            i += 1
        if abs(level) < _ZERO:
            level = 0.0
        if i > 1024:
            del ch[:i]
            n -= i
            i = 0
        self.head, self.level, self.at = i, level, start
        t, left = start, work_s
        while True:
            rate = 1.0 - min(level * sensitivity, MAX_HELD) if level else 1.0
            nxt = ch[i][0] if i < n else math.inf
            need = left if rate == 1.0 else left / rate
            if t + need <= nxt:
                return t + need
            left -= (nxt - t) * rate
            t = nxt
            level += ch[i][1]
            if abs(level) < _ZERO:
                level = 0.0
            i += 1
