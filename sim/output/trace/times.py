"""Seconds to microseconds, and the text of times rounded to nanoseconds.

This is the one module that converts seconds to microseconds (``US_PER_S``; see STYLE.md C/E).
``ts`` and ``dur`` are microseconds written with 3 decimals (nanoseconds, like Kineto's
``output_json.cpp``); ``displayTimeUnit`` is ignored by Perfetto, so only the value matters.
The bulk writers (:class:`sim.output.trace.bulk.Bulk`, :func:`sim.output.trace.events.counter_batch`)
round a stream's times to whole nanoseconds at once (:func:`ns`) and write each as integer
microseconds plus one of the 1000 fractions (:data:`FRACTIONS`).
"""

from __future__ import annotations

import numpy as np

US_PER_S = 1e6
"""Microseconds per second: the only seconds-to-microseconds factor in llmsim."""


def to_us(seconds: float) -> float:
    """Seconds to microseconds, rounded to 3 decimals (nanoseconds)."""
    return round(seconds * US_PER_S, 3)


FAST_MAX_US = 1e11
"""The largest time (µs, 28 hours) :func:`events` writes from whole nanoseconds: below it a
time rounded to nanoseconds has at most 15 significant digits, which a double holds, so the
shortest repr of the double nearest ``n / 1000``, which ``round(x, 3)`` gives, is that decimal."""
FRACTIONS = tuple(".0" if r == 0 else "." + f"{r:03d}".rstrip("0") for r in range(1000))
"""The digits after the point of ``repr(n / 1000)`` by ``n % 1000`` (``12.0``, ``12.5``, ``12.345``)."""
FRACTIONS_DUR = tuple(f + ',"dur":' for f in FRACTIONS)
FRACTIONS_ARGS = tuple(f + ',"args":{' for f in FRACTIONS)
"""The same, each followed by the text up to the next number (a slice's duration, its args)."""


def ns(us: np.ndarray) -> np.ndarray:
    """``round(x, 3) * 1000`` of each element, as integers, to the last bit: Python rounds the
    exact binary value half to even; ``rint`` of ``x * 1000`` does too except where the
    product's own rounding could cross a half, and those few are left to Python. For
    ``0 <= x <`` :data:`FAST_MAX_US`.

    >>> x = np.array([0.0005, 0.0015, 1.2345, 2.675, 1234567.0004999])
    >>> (ns(x) / 1000).tolist() == [round(v, 3) for v in x.tolist()]
    True
    """
    p = us * 1000.0
    r = np.rint(p)
    near_half = np.abs(np.abs(p - r) - 0.5) <= 4 * np.spacing(p)
    for j in np.flatnonzero(near_half).tolist():
        r[j] = round(round(float(us[j]), 3) * 1000.0)
    return r.astype(np.int64)
