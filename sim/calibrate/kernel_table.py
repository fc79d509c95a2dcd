"""A table of measured kernel times, as ``llmsim calibrate --kernels FILE`` reads it.

The table is CSV: a header row naming the columns, then one row per measured kernel. Lines
that start with ``#`` are comments; ``# key: value`` comments before the header are the
measurement's description (``benchmarks/device/measure_kernels.py`` writes ``device``,
``torch``, ``cuda``, ``cudnn``, ``date``), and ``device`` is cited in the calibration. Every
row has a ``kind``:

``gemm``
    ``m, n, k, batch, dtype, time_us``: an ``m x k`` by ``k x n`` matrix multiply, ``batch``
    of them in one kernel (1 for one), in ``dtype`` (:class:`~sim.types.Dtype`: ``bf16``,
    ``fp16``, ``fp8``, ...), that took ``time_us`` microseconds on the GPU (one call, back to
    back with the others, launch gap included).
``attention``
    ``batch, heads, kv_heads, seq, head_dim, causal, backend, dtype, fwd_us, bwd_us``: one
    fused attention kernel of ``batch`` sequences of ``seq`` tokens, ``heads`` query and
    ``kv_heads`` key/value heads of ``head_dim`` (``causal`` true or false), run by ``backend``
    ``cudnn`` (the vendor's fused attention, the GPU's ``attention_efficiency`` curves) or
    ``flash2`` (FlashAttention-2, the ``flash2_attention_efficiency`` curves), its forward
    taking ``fwd_us`` and its backward ``bwd_us`` microseconds (either may be empty where only
    one direction was measured).

The header names the columns of every kind present (a table of GEMMs alone needs no attention
column); ``tag`` (where the shape came from) and ``samples`` (the repeats a time is a median of)
may be given and are not priced. Anything else -- a missing column, an unknown one, an empty
or non-numeric cell, a time that is not positive, an unknown dtype or backend, a value in a
column of the other kind (a ``gemm`` row's ``fwd_us``) -- is refused with the file, the line
and the column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.inputs import read_input_text
from sim.types import SIMULATED_DTYPES, AttentionKernel, Dtype

__all__ = ["ATTENTION_COLUMNS", "ATTENTION_DTYPES", "BACKENDS", "GEMM_COLUMNS", "KINDS", "MAX_DIMENSION",
           "OPTIONAL_COLUMNS", "MeasuredAttention", "MeasuredGemm", "KernelTable", "parse_kernel_csv",
           "read_kernel_csv"]

GEMM_COLUMNS = ("m", "n", "k", "batch", "dtype", "time_us")
"""The columns a ``gemm`` row needs."""
ATTENTION_COLUMNS = ("batch", "heads", "kv_heads", "seq", "head_dim", "causal", "backend", "dtype", "fwd_us",
                     "bwd_us")
"""The columns an ``attention`` row needs (``fwd_us`` or ``bwd_us`` may be empty, not both)."""
OPTIONAL_COLUMNS = ("tag", "samples")
"""Columns that may be given and are not priced."""
KINDS = {"gemm": GEMM_COLUMNS, "attention": ATTENTION_COLUMNS}
"""The kinds of row and the columns each needs."""
BACKENDS = {"cudnn": AttentionKernel.VENDOR, "flash2": AttentionKernel.FLASH2}
"""The ``backend`` column's words and the attention kernel each names (:class:`~sim.types.AttentionKernel`)."""
ATTENTION_DTYPES = (Dtype.BF16, Dtype.FP16)
"""The formats an attention row may name: the attention curves are fractions of the 16-bit peak."""
MAX_DIMENSION = 2**40
"""The largest size of a kernel's dimension read (no GPU kernel has one near it)."""
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class MeasuredGemm:
    """One measured GEMM: its shape, format and time (seconds), and where it was read."""

    m: int
    n: int
    k: int
    batch: int
    dtype: Dtype
    time_s: float
    where: str

    @property
    def flops(self) -> float:
        """``2 batch m n k``, as :class:`~sim.workload.ops.GemmOp` counts them."""
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def shape(self) -> tuple:
        """What identifies the kernel (rows of one shape are one kernel measured again)."""
        return (self.m, self.n, self.k, self.batch, self.dtype)

    def describe(self) -> str:
        b = f"{self.batch} x " if self.batch > 1 else ""
        return f"{self.dtype.value} {b}{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class MeasuredAttention:
    """One measured fused attention kernel: its shape, backend and times (seconds; None where
    that direction was not measured), and where it was read."""

    batch: int
    heads: int
    kv_heads: int
    seq: int
    head_dim: int
    causal: bool
    kernel: AttentionKernel
    dtype: Dtype
    fwd_s: float | None
    bwd_s: float | None
    where: str

    @property
    def shape(self) -> tuple:
        return (self.batch, self.heads, self.kv_heads, self.seq, self.head_dim, self.causal, self.kernel, self.dtype)

    @property
    def backend(self) -> str:
        """The ``backend`` column's word for the kernel."""
        return next(w for w, k in BACKENDS.items() if k is self.kernel)

    def describe(self) -> str:
        return (f"{self.backend} b{self.batch} h{self.heads}/{self.kv_heads} s{self.seq} d{self.head_dim}"
                + (" causal" if self.causal else ""))


@dataclass(frozen=True)
class KernelTable:
    """What a kernel table (or a profiler trace, :mod:`sim.calibrate.profiler_trace`) holds:
    the measured kernels, the measurement's description (``# key: value`` comments, or what a
    trace says of its device) and what was read and not used."""

    path: str
    form: str
    gemms: tuple[MeasuredGemm, ...]
    attention: tuple[MeasuredAttention, ...]
    meta: tuple[tuple[str, str], ...] = ()
    skipped: tuple[str, ...] = ()

    @property
    def device(self) -> str | None:
        """The device the table says it was measured on (its ``# device:`` comment)."""
        return dict(self.meta).get("device")


def read_kernel_csv(path: str) -> KernelTable:
    """The kernel table in the CSV file ``path`` (:func:`parse_kernel_csv`)."""
    return parse_kernel_csv(read_input_text(path, "kernel table (CSV)"), path)


def parse_kernel_csv(text: str, path: str = "<text>") -> KernelTable:
    """Read a kernel table (the module docstring).

    Raises
    ------
    ConfigError
        Naming ``path``, the line and the column, for anything the module docstring refuses.
    """
    meta: list[tuple[str, str]] = []
    numbered: list[tuple[int, str]] = []
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            key, sep, value = stripped[1:].partition(":")
            if sep and not numbered and key.strip() and " " not in key.strip():
                meta.append((key.strip(), value.strip()))
            continue
        numbered.append((no, line))
    if not numbered:
        raise ConfigError(path, "<file>", "a kernel table: a header row (kind, m, n, k, batch, dtype, time_us, ...) "
                          "and a row per measured kernel", text[:200] if text.strip() else "an empty file")
    try:
        rows = list(csv.reader([line for _, line in numbered]))
    except csv.Error as exc:
        raise ConfigError(path, "<file>", "a kernel table in CSV", str(exc)) from None
    header = [c.strip() for c in rows[0]]
    head_line = numbered[0][0]
    known = set(OPTIONAL_COLUMNS) | {"kind"} | {c for cols in KINDS.values() for c in cols}
    for c in header:
        if c not in known:
            raise ConfigError(path, f"line {head_line}", f"columns among {sorted(known)} (the header row)", c)
    if "kind" not in header:
        raise ConfigError(path, f"line {head_line}", "a header row with a 'kind' column (gemm or attention) and the "
                          "columns of each kind", ",".join(header))
    if len(set(header)) != len(header):
        raise ConfigError(path, f"line {head_line}", "each column once", ",".join(header))
    gemms: list[MeasuredGemm] = []
    attention: list[MeasuredAttention] = []
    for (no, _), cells in zip(numbered[1:], rows[1:]):
        if len(cells) != len(header):
            raise ConfigError(path, f"line {no}", f"{len(header)} cells, one per column of the header "
                              f"({','.join(header)})", ",".join(cells))
        row = dict(zip(header, (c.strip() for c in cells)))
        kind = row["kind"]
        if kind not in KINDS:
            raise ConfigError(path, f"line {no}: kind", f"one of {list(KINDS)}", kind)
        for col in KINDS[kind]:
            if col not in row:
                raise ConfigError(path, f"line {no}", f"a '{col}' column (a {kind} row needs "
                                  f"{', '.join(KINDS[kind])})", ",".join(header))
        for col, cell in row.items():
            if cell and col != "kind" and col not in KINDS[kind] and col not in OPTIONAL_COLUMNS:
                raise ConfigError(path, f"line {no}: {col}", f"an empty cell: a {kind} row has no {col} (it reads "
                                  f"{', '.join(KINDS[kind])})", cell)
        if "samples" in row and row["samples"]:
            _int(path, no, "samples", row["samples"])
        if kind == "gemm":
            gemms.append(_gemm(path, no, row))
        else:
            attention.append(_attention(path, no, row))
    if not gemms and not attention:
        raise ConfigError(path, "<file>", "at least one kernel row below the header", ",".join(header))
    return KernelTable(path, "table", tuple(gemms), tuple(attention), tuple(meta))


def _cell(path: str, no: int, col: str, text: str, expected: str) -> str:
    if not text:
        raise ConfigError(path, f"line {no}: {col}", expected, "an empty cell")
    return text


def _int(path: str, no: int, col: str, text: str) -> int:
    expected = f"a positive integer up to {MAX_DIMENSION:,}"
    _cell(path, no, col, text, expected)
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(path, f"line {no}: {col}", expected, text) from None
    if not 1 <= value <= MAX_DIMENSION:
        raise ConfigError(path, f"line {no}: {col}", expected, text)
    return value


def _time_s(path: str, no: int, col: str, text: str) -> float:
    expected = "a positive time in microseconds"
    _cell(path, no, col, text, expected)
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(path, f"line {no}: {col}", expected, text) from None
    if not 0 < value < math.inf:
        raise ConfigError(path, f"line {no}: {col}", expected, text)
    return value * 1e-6


def _dtype(path: str, no: int, text: str, allowed: tuple[Dtype, ...]) -> Dtype:
    words = [d.value for d in allowed]
    _cell(path, no, "dtype", text, f"one of {words}")
    try:
        dtype = Dtype(text.lower())
    except ValueError:
        raise ConfigError(path, f"line {no}: dtype", f"one of {words}", text) from None
    if dtype not in allowed:
        raise ConfigError(path, f"line {no}: dtype", f"one of {words}", text)
    return dtype


def _gemm(path: str, no: int, row: dict[str, str]) -> MeasuredGemm:
    m, n, k, batch = (_int(path, no, c, row[c]) for c in ("m", "n", "k", "batch"))
    return MeasuredGemm(m, n, k, batch, _dtype(path, no, row["dtype"], SIMULATED_DTYPES),
                        _time_s(path, no, "time_us", row["time_us"]), f"line {no}")


def _attention(path: str, no: int, row: dict[str, str]) -> MeasuredAttention:
    batch, heads, kv, seq, hd = (_int(path, no, c, row[c]) for c in ("batch", "heads", "kv_heads", "seq", "head_dim"))
    if heads % kv:
        raise ConfigError(path, f"line {no}: kv_heads", f"a divisor of heads={heads}", row["kv_heads"])
    causal_word = row["causal"].lower()
    if causal_word not in _TRUE + _FALSE:
        raise ConfigError(path, f"line {no}: causal", "true or false", row["causal"])
    backend = row["backend"].lower()
    if backend not in BACKENDS:
        raise ConfigError(path, f"line {no}: backend", f"one of {list(BACKENDS)}", row["backend"])
    fwd = _time_s(path, no, "fwd_us", row["fwd_us"]) if row["fwd_us"] else None
    bwd = _time_s(path, no, "bwd_us", row["bwd_us"]) if row["bwd_us"] else None
    if fwd is None and bwd is None:
        raise ConfigError(path, f"line {no}: fwd_us, bwd_us", "the forward time, the backward time or both "
                          "(microseconds)", "two empty cells")
    return MeasuredAttention(batch, heads, kv, seq, hd, causal_word in _TRUE, BACKENDS[backend],
                             _dtype(path, no, row["dtype"], ATTENTION_DTYPES), fwd, bwd, f"line {no}")
