"""The trace's text made and compressed in parallel, with the bytes of one process.

The text is compressed on a second thread as it is formatted (:func:`gzip_bytes`); for a large
trace, when a CPU is free (:func:`may_fork`), a forked process formats the later streams
(:func:`forked_parts`) while this one formats the first ones and feeds the compressor the
whole text in order, so the bytes are those of one process. Gzip output has ``mtime=0`` and no
file name (:class:`sim.output.gzip_parts.GzipParts`), so equal inputs give equal bytes.
"""

from __future__ import annotations

import os
import queue
import signal
import struct
import tempfile
import threading
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from sim.output.gzip_parts import GzipParts, crc32, deflate_part
from sim.output.trace.bulk import Bulk
from sim.output.trace.document import header, pieces, trace_parts
from sim.results import SimResult

FORK_MIN_SPANS = 50_000
"""Spans from which :func:`forked_parts` formats a share of them in a second process: below
it, forking (a few ms, and copies of the pages both processes touch) costs more than it saves."""
PARENT_SHARE = 0.48
"""The share of the spans (counters counted as spans) formatted by the process that forks the
child: each process deflates the text it formats (:func:`gzip_bytes`), so about half. The
child's share costs it more than the same share costs the parent (it first copies the pages
it touches: gpt3-175b-1024 formatted and deflated whole, 1.25 s in the child against 1.05 s
here); shares from 0.42 to 0.55 write that trace in 0.75-0.85 s here, within the noise."""


def forked_parts(result: SimResult, title: str, metadata: dict | None, *,
                  deflate: bool = False) -> Iterator[str | bytes | Deflated | TextSum]:
    """:func:`trace_parts`, with the later batches of events (:class:`Bulk`: streams, then the
    counters) formatted by a forked child process while this one formats the metadata and the
    earlier streams, and its text arriving UTF-8 encoded (``deflate``: each of its pieces
    deflated apart, :class:`Deflated`, then the CRC-32 and length of them all, :class:`TextSum`,
    for :func:`gzip_bytes`).

    The child writes each batch's text (or its deflated text) to an unlinked temporary file and
    then its length to a pipe, so it never waits for this process to read; this process, once
    it has made its own pieces, passes on the child's as they come, so the text is that of
    :func:`trace_parts`, cut in the same pieces. Should the child fail, this process formats
    the batches it did not send (and so raises what the child raised). Where :func:`may_fork` says no (a small
    trace, no ``os.fork``, a running thread, no CPU free) or no child can be had, this is
    :func:`trace_parts`; no thread may start before the first piece is taken, since forking
    copies no other thread, whatever lock it held (:func:`gzip_bytes` starts its compressor
    after)."""
    bulk = Bulk.of(result) if may_fork(len(result.spans)) else None
    if bulk is None:
        yield from trace_parts(result, title, metadata)
        return
    yield header(title, metadata)
    done = np.cumsum(bulk.weights())
    split = min(max(1, int(np.searchsorted(done, PARENT_SHARE * done[-1])) + 1), len(bulk))
    child = _Child.start(bulk, split, deflate)
    if child is None:  # no child to be had: all of it here
        yield from pieces(bulk.batches(0, len(bulk)), first=True)
    else:
        try:
            yield from pieces(bulk.batches(0, split), first=True)
            yield from child.pieces()
        finally:
            child.close()
    yield "]}"


def may_fork(spans: int) -> bool:
    """Whether :func:`forked_parts` forks for a trace of ``spans`` spans: :data:`FORK_MIN_SPANS`
    or more, ``os.fork`` available, no other thread running, and a CPU idle for the child: more
    CPUs than the 1-minute load average (which counts this process). On a busy machine the
    child only waits for a CPU, and the two processes' copies of the pages they both touch
    make the whole slower than one process (gpt3-175b-1024 at load 8 on 2 cores: 12%)."""
    if spans < FORK_MIN_SPANS or not hasattr(os, "fork") or threading.active_count() > 1:
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available here
        load = 0.0
    return cpus > 1 and load < cpus


class Deflated(NamedTuple):
    """A piece of the trace's text deflated in the child (:func:`sim.output.gzip_parts.deflate_part`)."""

    chunk: bytes


class TextSum(NamedTuple):
    """The CRC-32 and length of the text of the :class:`Deflated` pieces before it."""

    crc: int
    size: int


_MESSAGE = struct.Struct("<qIq")
"""The child's message for each batch: the bytes it wrote to the spool, and the running CRC-32
and length of its text so far."""


class _Child:
    """A forked process formatting the batches of a :class:`Bulk` from ``split`` on.

    It writes each batch's text, UTF-8 encoded (``deflate``: deflated, with the running CRC-32
    and length of the text), to an unlinked temporary file, then a message to a pipe (a message
    a batch, even an empty one), so it never waits for this process to read; :meth:`pieces`
    passes the texts on as they come and, should the child fail, formats the batches it did
    not send, here."""

    def __init__(self, bulk: Bulk, split: int, deflate: bool, spool, read_end: int, pid: int) -> None:
        self.bulk, self.split, self.deflate = bulk, split, deflate
        self.spool, self.read_end, self.pid = spool, read_end, pid
        self.running = True

    @classmethod
    def start(cls, bulk: Bulk, split: int, deflate: bool = False) -> _Child | None:
        """Fork the child; None if the system would not (no memory, processes or temporary
        file for it)."""
        spool = read_end = write_end = None
        try:
            spool = tempfile.TemporaryFile(prefix="llmsim-trace-")
            read_end, write_end = os.pipe()
            pid = os.fork()
        except OSError:
            for fd in (read_end, write_end):
                if fd is not None:
                    os.close(fd)
            if spool is not None:
                spool.close()
            return None
        if pid == 0:  # the child: never returns
            status = 1
            try:
                os.close(read_end)
                crc = size = 0
                for batch in bulk.batches(split, len(bulk)):
                    data = "".join(pieces([batch], first=False)).encode("utf-8")
                    if deflate and data:
                        crc, size = crc32(data, crc), size + len(data)
                        data = deflate_part(data)
                    _write_all(spool.fileno(), data)
                    _write_all(write_end, _MESSAGE.pack(len(data), crc, size))
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        return cls(bulk, split, deflate, spool, read_end, pid)

    def pieces(self) -> Iterator[bytes | Deflated | TextSum]:
        """The child's text, in the pieces of :func:`pieces` (deflated, then their sum)."""
        offset = sent = crc = size = 0
        while message := _read_all(self.read_end, _MESSAGE.size):
            n, crc, size = _MESSAGE.unpack(message)
            if n:
                data = _pread_all(self.spool.fileno(), n, offset)
                yield Deflated(data) if self.deflate else data
            offset, sent = offset + n, sent + 1
        if size:
            yield TextSum(crc, size)
        self.running = False
        if os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1]) != 0:  # it failed: the rest here
            yield from pieces(self.bulk.batches(self.split + sent, len(self.bulk)), first=False)

    def close(self) -> None:
        """Release the pipe and the file; end the child if it still runs (the trace was given
        up early)."""
        os.close(self.read_end)
        self.spool.close()
        if self.running:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int, size: int) -> bytes:
    """``size`` bytes from a pipe, or b"" at its end."""
    got = b""
    while len(got) < size and (more := os.read(fd, size - len(got))):
        got += more
    return got


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    chunks = []
    while size:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            raise OSError(f"trace spool ended {size} bytes early")
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def gzip_bytes(parts: Iterator[str | bytes | Deflated | TextSum]) -> bytes:
    """``parts`` as one gzip member (:class:`sim.output.gzip_parts.GzipParts`: ISA-L, or zlib where it is
    missing, no file name, ``mtime=0``): each text part (UTF-8 encoded unless bytes already)
    deflated apart, on a second thread while the next parts are formatted (both release the GIL); parts deflated in
    :func:`forked_parts`'s child passed through, with their sum. The thread starts once the
    first part is taken, so that :func:`forked_parts` forks before it. The bytes depend on
    the text and where it is cut into parts, not on which process deflated a part."""
    gz = GzipParts()
    todo: queue.Queue = queue.Queue(maxsize=4)
    failed: list[BaseException] = []

    def compress() -> None:
        try:
            while (part := todo.get()) is not None:
                kind = type(part)
                if kind is Deflated:
                    gz.add_deflated(part.chunk)
                elif kind is TextSum:
                    gz.add_sum(part.crc, part.size)
                else:
                    gz.add_text(part)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            failed.append(e)
            while todo.get() is not None:
                pass

    worker = None
    try:
        for part in parts:
            if worker is None:
                worker = threading.Thread(target=compress, name="llmsim-trace-gzip", daemon=True)
                worker.start()
            todo.put(part.encode("utf-8") if type(part) is str else part)
    finally:
        if worker is not None:
            todo.put(None)
            worker.join()
    if failed:
        raise failed[0]
    return gz.finish()
