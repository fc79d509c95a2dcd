"""One gzip member from parts deflated apart, possibly in other processes.

A deflate stream may be cut into pieces that each start with no history and end on a byte
boundary (a sync flush: an empty stored block, RFC 1951 section 3.2.4, which zlib emits for
``Z_SYNC_FLUSH``): their concatenation, closed by a final empty block, is one valid stream
(how pigz compresses on several cores, Adler, pigz.c). The gzip wrapper (RFC 1952) adds a
header and, after the stream, the CRC-32 and length of all the text; the CRC-32 of text
compressed elsewhere joins the running one by :func:`crc32_combine`.

The deflating, the CRC-32 and its combination are ISA-L's (Intel's Intelligent Storage
Acceleration Library, through the ``isal`` package's ``isal_zlib``, a drop-in for ``zlib``):
at its level 2 it deflates a trace's text about five times as fast as zlib at level 3, to
files about 1.5% larger (the README says why it is a dependency). On a machine the package has
no wheel for (it is installed on x86-64 and ARM64 only), Python's ``zlib`` does it at level 3,
as before: the same text, other compressed bytes.

The bytes depend only on the parts, not on where each was deflated, so a trace writer that
deflates some parts in a child process writes the same file as one that deflates them all
itself. They are not those of deflating the whole text at once: each part starts afresh
(a few bytes more per part of megabytes).

>>> import gzip
>>> g = GzipParts()
>>> g.add_text(b"hello, ")
>>> g.add_deflated(deflate_part(b"wor"))
>>> g.add_deflated(deflate_part(b"ld"))
>>> g.add_sum(zlib.crc32(b"world"), 5)
>>> gzip.decompress(g.finish())
b'hello, world'
"""

from __future__ import annotations

import zlib

try:
    from isal import isal_zlib as _zlib
except ImportError:  # a machine the isal package has no wheel for (README, "Dependencies")
    _zlib = zlib

__all__ = ["LEVEL", "GzipParts", "crc32", "crc32_combine", "deflate_part"]

LEVEL = 2 if _zlib is not zlib else 3
"""The compression level for traces: ISA-L's default, 2, or zlib's 3 where ISA-L is missing.
On the 99.8 MB text of ``llmsim run gpt3-175b --trace`` cut in 2 MB parts, on the 2-core
machine: ISA-L's level 1 0.061 s and 8.00 MB, level 2 0.056 s and 7.97 MB, level 3 (its
slowest) 0.23 s and 7.91 MB; zlib's level 3, which the traces used before, 0.28 s and 7.84 MB
(its level 1 is barely faster, its level 6 twice as slow for 15% smaller files)."""
_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
"""RFC 1952: deflate, no flags (no file name), mtime 0, no extra flags, OS unknown (255), as
:class:`gzip.GzipFile` writes it for ``filename=""``, ``mtime=0`` at this level."""
_END = b"\x03\x00"
"""A final empty block (fixed Huffman codes, BFINAL set, end of block): what closes the
stream after the last part, what zlib's and ISA-L's ``flush()`` of an empty stream write."""


def deflate_part(data: bytes) -> bytes:
    """``data`` deflated with no history, ending on a byte boundary (raw deflate, sync flush)."""
    c = _zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)


def _gf2_times(mat: list[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, m) for m in mat]


def _crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``a + b`` from ``crc1 = crc32(a)``, ``crc2 = crc32(b)`` and ``len(b)``:
    zlib's ``crc32_combine`` (crc32.c, zlib 1.2.11), which Python's ``zlib`` module does not
    expose: ``len2`` zero bytes applied to ``crc1`` as a power of the GF(2) matrix of one zero
    bit, squared once per bit of ``len2``. The fallback where ISA-L is missing.

    >>> a, b = b"trace ", b"events"
    >>> _crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    True
    """
    if len2 <= 0:
        return crc1
    op = [0xEDB88320] + [1 << n for n in range(31)]  # the operator of one zero bit
    for _ in range(3):  # squared three times: one zero byte
        op = _gf2_square(op)
    while len2:  # its powers commute: apply the power of two for each set bit of len2
        if len2 & 1:
            crc1 = _gf2_times(op, crc1)
        len2 >>= 1
        if len2:
            op = _gf2_square(op)
    return crc1 ^ crc2


crc32 = _zlib.crc32
"""``zlib.crc32``'s value (``crc32(data, value=0)``); ISA-L's is about five times as fast here."""

crc32_combine = getattr(_zlib, "crc32_combine", _crc32_combine)
"""The CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)``: ISA-L's, or
:func:`_crc32_combine`."""


class GzipParts:
    """A gzip member built part by part, in the text's order: text deflated here
    (:meth:`add_text`), or deflated elsewhere (:meth:`add_deflated`, then :meth:`add_sum`)."""

    __slots__ = ("chunks", "crc", "size")

    def __init__(self) -> None:
        self.chunks: list[bytes] = [_HEADER]
        self.crc = 0
        self.size = 0

    def add_text(self, data: bytes) -> None:
        """Deflate ``data`` here (nothing for empty ``data``)."""
        if data:
            self.chunks.append(deflate_part(data))
            self.crc = crc32(data, self.crc)
            self.size += len(data)

    def add_deflated(self, chunk: bytes) -> None:
        """Text deflated elsewhere: one or more :func:`deflate_part` outputs, in order. Its
        CRC-32 and length follow in :meth:`add_sum`."""
        self.chunks.append(chunk)

    def add_sum(self, crc: int, size: int) -> None:
        """The CRC-32 and length of the text whose chunks :meth:`add_deflated` took since the
        last :meth:`add_text` (one combination, however many chunks)."""
        self.crc = crc32_combine(self.crc, crc, size)
        self.size += size

    def finish(self) -> bytes:
        """The member's bytes: header, parts, the final block, CRC-32 and length (mod 2**32)."""
        return b"".join((*self.chunks, _END, (self.crc & 0xFFFFFFFF).to_bytes(4, "little"),
                         (self.size & 0xFFFFFFFF).to_bytes(4, "little")))
