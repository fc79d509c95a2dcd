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
files about 1.5% larger (the README says why it is a dependency).

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

from isal import isal_zlib

__all__ = ["LEVEL", "GzipParts", "crc32", "crc32_combine", "deflate_part"]

LEVEL = 2
"""ISA-L's compression level for traces, its default. On the 99.8 MB text of ``llmsim run
gpt3-175b --trace`` cut in 2 MB parts, on the 2-core machine: level 1 0.061 s and 8.00 MB,
level 2 0.056 s and 7.97 MB, level 3 (ISA-L's slowest) 0.23 s and 7.91 MB; zlib's level 3,
which the traces used before, 0.28 s and 7.84 MB."""
_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
"""RFC 1952: deflate, no flags (no file name), mtime 0, no extra flags, OS unknown (255), as
:class:`gzip.GzipFile` writes it for ``filename=""``, ``mtime=0`` at this level."""
_END = isal_zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS).flush()
"""A final empty block: what closes the stream after the last part."""


def deflate_part(data: bytes) -> bytes:
    """``data`` deflated with no history, ending on a byte boundary (raw deflate, sync flush)."""
    c = isal_zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)


crc32 = isal_zlib.crc32
"""``zlib.crc32``'s value (``crc32(data, value=0)``), by ISA-L: about five times as fast here."""

crc32_combine = isal_zlib.crc32_combine
"""The CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)`` (zlib's
``crc32_combine``, which Python's ``zlib`` module does not expose), by ISA-L."""


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
