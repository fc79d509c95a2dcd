"""Unit constants and the converters used at the YAML and report edges.

Inside llmsim every quantity is SI: seconds, bytes, FLOP, bytes per second. Human units
(GB/s, Gb/s, µs, GiB, TFLOP/s) appear only where YAML is read and where reports are printed;
the names below say which unit each constant converts from.
"""

from __future__ import annotations

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 1024.0
MiB = 1024.0**2
GiB = 1024.0**3
TiB = 1024.0**4

US = 1e-6
"""One microsecond in seconds."""
MS = 1e-3
"""One millisecond in seconds."""
NS = 1e-9

TFLOPS = 1e12
"""One TFLOP/s in FLOP/s."""
PFLOPS = 1e15

GBPS = 1e9
"""One gigabyte per second (GB/s) in bytes per second."""
GBIT_PER_S = 1e9 / 8
"""One gigabit per second (Gb/s) in bytes per second."""


def byte_count(x: float) -> int:
    """A byte count as the JSON outputs write it: the nearest integer, so that a size reads
    ``5594800128``, not ``5594800128.0`` (the model's counts are whole but computed in floats).

    >>> byte_count(5594800128.0), byte_count(1e9 / 3)
    (5594800128, 333333333)
    """
    return int(round(x))


def round_sig(x: float, digits: int = 12) -> float:
    """``x`` to ``digits`` significant digits: a key that ranks quantities equal to rounding
    (a link's bytes summed in a different order) as equal, so a tie is broken by what follows.

    >>> round_sig(0.1 + 0.2) == round_sig(0.3)
    True
    """
    return float(f"{x:.{digits}g}")
