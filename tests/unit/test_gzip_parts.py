"""One gzip member from parts deflated apart (sim/output/gzip_parts.py)."""

from __future__ import annotations

import gzip
import importlib
import random
import sys
import zlib

import pytest

import sim.output.gzip_parts as gzip_parts
from sim.output.gzip_parts import GzipParts, _crc32_combine, crc32, crc32_combine, deflate_part


@pytest.mark.parametrize("combine", [crc32_combine, _crc32_combine], ids=["used", "fallback"])
@pytest.mark.parametrize("len2", [0, 1, 2, 3, 7, 8, 9, 255, 256, 4096, 65537, 1_000_003])
def test_crc32_combine_is_the_crc_of_the_concatenation(len2, combine):
    rng = random.Random(len2)
    a = rng.randbytes(rng.randrange(0, 5000))
    b = rng.randbytes(len2)
    assert combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 64, 1000, 65_536, 1_000_003])
def test_crc32_is_zlibs_from_any_running_value(n):
    rng = random.Random(n)
    data = rng.randbytes(n)
    for value in (0, 1, rng.randrange(2**32), 2**32 - 1):
        assert crc32(data, value) == zlib.crc32(data, value)
    assert crc32(data) == zlib.crc32(data)


def test_parts_deflated_apart_make_one_member_of_their_text():
    rng = random.Random(7)
    texts = [rng.randbytes(n) + b"x" * n for n in (0, 1, 1000, 70_000, 3)]
    g = GzipParts()
    g.add_text(texts[0])
    g.add_text(texts[1])
    for t in texts[2:4]:  # deflated "elsewhere": chunks, then one sum for both
        g.add_deflated(deflate_part(t))
    g.add_sum(zlib.crc32(texts[3], zlib.crc32(texts[2])), len(texts[2]) + len(texts[3]))
    g.add_text(texts[4])
    g.add_text(b"")  # nothing
    data = g.finish()
    whole = b"".join(texts)
    assert gzip.decompress(data) == whole
    assert zlib.decompress(data, 31) == whole  # a single member, its trailer checked by zlib
    assert data[:10] == gzip.compress(b"", mtime=0)[:4] + bytes(4) + b"\x00\xff"  # no name, mtime 0


def test_a_wrong_sum_is_caught_by_the_reader():
    g = GzipParts()
    g.add_deflated(deflate_part(b"trace"))
    g.add_sum(zlib.crc32(b"trace") ^ 1, 5)
    with pytest.raises((OSError, zlib.error)):
        gzip.decompress(g.finish())


def test_a_text_part_is_deflated_smaller_and_read_back_by_zlib():
    text = b"".join(b'{"ph":"X","name":"fc1","ts":%d.%03d},' % (i, i % 1000) for i in range(20_000))
    chunk = deflate_part(text)
    assert len(chunk) < len(text) // 5  # compressed, not stored
    assert chunk.endswith(b"\x00\x00\xff\xff")  # a sync flush: the next part may follow
    assert zlib.decompressobj(-zlib.MAX_WBITS).decompress(chunk) == text


@pytest.fixture
def without_isal(monkeypatch):
    """sim.output.gzip_parts imported where the isal package is missing; imported again after."""
    monkeypatch.setitem(sys.modules, "isal", None)  # `from isal import ...` raises ImportError
    yield importlib.reload(gzip_parts)
    monkeypatch.undo()
    importlib.reload(gzip_parts)


def test_without_isal_zlib_writes_the_same_text(without_isal):
    m = without_isal
    assert m.LEVEL == 3 and m.crc32 is zlib.crc32 and m.crc32_combine is m._crc32_combine
    texts = [b"first part ", b"x" * 70_000, b" deflated elsewhere"]
    g = m.GzipParts()
    g.add_text(texts[0])
    g.add_deflated(m.deflate_part(texts[1]))
    g.add_deflated(m.deflate_part(texts[2]))
    g.add_sum(zlib.crc32(texts[2], zlib.crc32(texts[1])), len(texts[1]) + len(texts[2]))
    data = g.finish()
    assert zlib.decompress(data, 31) == b"".join(texts)
    c = zlib.compressobj(3, zlib.DEFLATED, -zlib.MAX_WBITS)  # zlib's level 3, as the traces had it
    assert m.deflate_part(texts[1]) == c.compress(texts[1]) + c.flush(zlib.Z_SYNC_FLUSH)


def test_isal_is_used_where_installed():
    pytest.importorskip("isal")
    from isal import isal_zlib

    assert gzip_parts.LEVEL == 2 and gzip_parts.crc32 is isal_zlib.crc32
    text = b"".join(b"event %d," % i for i in range(10_000))
    c = isal_zlib.compressobj(2, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert deflate_part(text) == c.compress(text) + c.flush(zlib.Z_SYNC_FLUSH)
